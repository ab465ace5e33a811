#include "common.h"

#include <algorithm>

#include <fmt/format.h>

#include "reshard/hlo_text.h"
#include "reshard/named_text.h"

namespace reshard::cli {

int& ExitCode() {
  static int code = 0;
  return code;
}

void AddCommonOptions(CLI::App* app, CommonOptions& o) {
  app->add_option("--shape", o.shape, "array shape, e.g. 16,16,16 (empty for a scalar)")->required();
  app->add_option("--dtype", o.dtype, "element type: pred s8 u8 s16 u16 f16 bf16 s32 u32 f32 s64 u64 f64 c64 c128")
      ->capture_default_str();
  app->add_option("--mesh", o.mesh, "mesh: 'x=4,y=2' or Shardy text '<[\"x\"=4, \"y\"=2]>'");
  app->add_option("--devices", o.devices, "the mesh's device ids, row-major, e.g. 3,2,1,0 (default iota)");
  app->add_flag("--json", o.json, "machine-readable output");
}

namespace {
std::vector<std::pair<size_t, std::string>> Characters(const std::string& t);
}  // namespace

void ThrowIfError(const Status& s, const std::string& context, int code) {
  if (s.ok()) return;
  // Valid input reshard does not handle yet is a request it cannot meet, not bad input.
  if (s.code() == Status::Code::kNotSupported) code = kExitUnmet;
  if (s.code() == Status::Code::kInternal) code = kExitInternal;
  // The library quotes texts as valid UTF-8; this keeps any other message so too.
  std::string msg;
  for (const auto& c : Characters(context.empty() ? s.message() : s.WithContext(context).message())) msg += c.second;
  throw CliError(code, msg);
}

namespace {

// A list text as echoed under an error: the characters around byte `pos`
// (at most 100 of them, "..." where cut), then a caret under `pos`. Columns
// count characters, as the notation parsers' do; bytes that are not UTF-8
// show as '?', so that the message stays valid UTF-8.
struct Echo {
  size_t column = 1;  // 1-based, in characters
  std::string shown;  // the text as shown
  std::string lines;  // "\n  TEXT\n     ^"
};
// One entry per character of `t`: its first byte and its bytes as shown
// ('?' for a byte that does not start a UTF-8 sequence of the right length).
std::vector<std::pair<size_t, std::string>> Characters(const std::string& t) {
  std::vector<std::pair<size_t, std::string>> chars;
  for (size_t i = 0; i < t.size();) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (size_t k = 1; k < n; ++k)
      if (i + k >= t.size() || (static_cast<unsigned char>(t[i + k]) & 0xC0) != 0x80) n = 0;
    chars.emplace_back(i, n ? t.substr(i, n) : "?");
    i += n ? n : 1;
  }
  return chars;
}

Echo EchoAt(const std::string& t, size_t pos) {
  const std::vector<std::pair<size_t, std::string>> chars = Characters(t);
  Echo e;
  size_t col = 0;
  while (col < chars.size() && chars[col].first < pos) ++col;
  e.column = col + 1;
  size_t first = 0, last = chars.size();
  if (chars.size() > 100) {
    first = col > 40 ? col - 40 : 0;
    last = std::min(chars.size(), first + 100);
    first = last - 100;
  }
  e.shown = first > 0 ? "..." : "";
  for (size_t k = first; k < last; ++k) e.shown += chars[k].second;
  if (last < chars.size()) e.shown += "...";
  e.lines = "\n  " + e.shown + "\n  " + std::string((first > 0 ? 3 : 0) + col - first, ' ') + "^";
  return e;
}

}  // namespace

std::string Short(const std::string& text) { return EchoAt(text, 0).shown; }

std::vector<int64_t> ParseIntList(const std::string& text, const std::string& option) {
  std::vector<int64_t> out;
  const std::string& t = text;
  size_t pos = 0, end_all = t.size();
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') { pos = 1; --end_all; }
  if (pos == end_all) return out;
  while (true) {
    size_t end = t.find(',', pos);
    if (end == std::string::npos || end > end_all) end = end_all;
    // Decimal digits only: no sign, no spaces, and the value fits in int64.
    int64_t v = 0;
    bool ok = end > pos;
    for (size_t i = pos; ok && i < end; ++i)
      ok = t[i] >= '0' && t[i] <= '9' && !__builtin_mul_overflow(v, 10, &v) && !__builtin_add_overflow(v, t[i] - '0', &v);
    if (!ok) {
      const Echo e = EchoAt(t, pos);
      std::string item = t.substr(pos, end - pos);
      const bool digits = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
      if (item.size() > 40) item = item.substr(0, 40) + "...";
      for (char& c : item)
        if (static_cast<unsigned char>(c) >= 0x80 || static_cast<unsigned char>(c) < 0x20) c = '?';
      throw CliError(kExitBadInput, fmt::format("{}: '{}' at column {} is not a non-negative integer{}{}", option, item,
                                                e.column, digits ? " that fits in int64" : "", e.lines));
    }
    out.push_back(v);
    if (end == end_all) break;
    pos = end + 1;
  }
  return out;
}

std::vector<int64_t> ParseShape(const std::string& text) {
  std::vector<int64_t> shape = ParseIntList(text, "--shape");
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw CliError(kExitBadInput, fmt::format("--shape: rank {} exceeds the maximum {}", shape.size(), kMaxRank));
  return shape;
}

DType ParseDTypeOrThrow(const std::string& text) {
  Result<DType> t = ParseDType(text);
  ThrowIfError(t.status(), "--dtype");
  return *t;
}

std::optional<Mesh> BuildMesh(const std::string& mesh_text, const std::string& devices_text, const std::string& option) {
  std::vector<int64_t> ids;
  if (!devices_text.empty()) {
    ids = ParseIntList(devices_text, "--devices");
  }
  if (mesh_text.empty()) {
    if (ids.empty()) return std::nullopt;
    Result<Mesh> m = Mesh::Create({{"devices", static_cast<int64_t>(ids.size())}}, ids);
    ThrowIfError(m.status(), "--devices");
    return *m;
  }
  Result<Mesh> m = ParseMesh(mesh_text);
  ThrowIfError(m.status(), option);
  if (ids.empty()) return *m;
  Result<Mesh> with_ids = Mesh::Create(m->axes(), ids);
  ThrowIfError(with_ids.status(), "--devices");
  return *with_ids;
}

ParsedLayout LoadLayout(const std::string& text, const std::vector<int64_t>& shape, DType dtype,
                        const std::optional<Mesh>& mesh, const std::string& option) {
  Result<ParsedLayout> l = ParseLayout(text, shape, dtype, mesh);
  ThrowIfError(l.status(), option);
  return std::move(l).value();
}

void AddPairOptions(CLI::App* app, PairOptions& o) {
  AddCommonOptions(app, o.common);
  app->add_option("--from", o.from, "the source layout, in any notation")->required();
  app->add_option("--to", o.to, "the target layout, in any notation")->required();
  app->add_option("--from-mesh", o.from_mesh, "the source's mesh (default: --mesh)");
  app->add_option("--to-mesh", o.to_mesh, "the target's mesh (default: --mesh)");
  app->add_option("--strategy", o.strategy,
                  "auto (cheapest under the cost model), exchange (one ragged all-to-all-v), collectives (structured "
                  "collectives only)")
      ->check(CLI::IsMember({"auto", "exchange", "collectives"}))
      ->capture_default_str();
  app->add_option("--topology", o.topology, "the network: flat, nodes:K (K devices per node) or torus:AxB[xC]")
      ->capture_default_str();
  app->add_option("--for", o.target,
                  "where the plan runs, which decides the collectives it may use: any, xla, jax-cpu (no ragged "
                  "exchange), jax-gpu, mpi, nccl (default: any; jax-cpu with --emit hlo|jax)")
      ->check(CLI::IsMember({"any", "xla", "jax-cpu", "jax-gpu", "mpi", "nccl"}));
  app->add_option("--memory-cap", o.memory_cap,
                  "most bytes a device may hold during a step, e.g. 65536, 64K, 1.5M, 2G (default: twice its largest "
                  "source and target shards together)");
  app->add_option("--alpha-us", o.alpha_us, "latency per message over the network (flat: 1; nodes: 3; torus: 1)");
  app->add_option("--bandwidth-gbps", o.bandwidth_gbps, "network bandwidth per device, GB/s (25; torus links 45)");
  app->add_option("--intra-alpha-us", o.intra_alpha_us, "nodes:K: latency per message inside a node (0.5)");
  app->add_option("--intra-bandwidth-gbps", o.intra_bandwidth_gbps, "nodes:K: bandwidth inside a node, GB/s (450)");
  app->add_option("--hop-alpha-us", o.hop_alpha_us, "torus: latency per hop (0.1)");
  app->add_option("--step-latency-us", o.step_latency_us, "fixed cost of each collective step (10)");
  app->add_option("--copy-bandwidth-gbps", o.copy_bandwidth_gbps, "local copy bandwidth, GB/s (1000)");
  app->add_flag("--bandwidth-only", o.bandwidth_only, "zero every latency: plans are priced by bytes alone");
}

namespace {

// "65536", "64K", "1.5M", "2G" (binary multiples).
int64_t ParseBytes(const std::string& text, const std::string& option) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw CliError(kExitBadInput, fmt::format("{}: expected a byte count at column 1 of '{}'", option, Short(text)));
  }
  double scale = 1;
  if (used < text.size()) {
    const std::string suffix = text.substr(used);
    if (suffix == "K" || suffix == "KiB") scale = 1024.0;
    else if (suffix == "M" || suffix == "MiB") scale = 1048576.0;
    else if (suffix == "G" || suffix == "GiB") scale = 1073741824.0;
    else
      throw CliError(kExitBadInput, fmt::format("{}: unknown unit '{}' at column {} of '{}' (expected K, M or G)", option,
                                                Short(suffix), used + 1, Short(text)));
  }
  const double bytes = v * scale;
  if (!(bytes >= 1) || bytes > 9.0e18)
    throw CliError(kExitBadInput, fmt::format("{}: '{}' is not a byte count between 1 and 9e18", option, Short(text)));
  return static_cast<int64_t>(bytes);
}

}  // namespace

PlannerOptions MakePlannerOptions(const PairOptions& o, const LayoutPair& pair, bool emitting) {
  PlannerOptions p;
  p.strategy = ParseStrategy(o.strategy).value();
  Result<Topology> topo = Topology::Parse(o.topology);
  ThrowIfError(topo.status(), "--topology");
  p.topology = *topo;
  auto positive = [](const std::optional<double>& v, const char* option, bool allow_zero) {
    if (v && (!(*v >= 0) || (!allow_zero && *v == 0)))
      throw CliError(kExitBadInput, fmt::format("{}: {} must be {}", option, *v, allow_zero ? ">= 0" : "> 0"));
  };
  positive(o.alpha_us, "--alpha-us", true);
  positive(o.intra_alpha_us, "--intra-alpha-us", true);
  positive(o.hop_alpha_us, "--hop-alpha-us", true);
  positive(o.step_latency_us, "--step-latency-us", true);
  positive(o.bandwidth_gbps, "--bandwidth-gbps", false);
  positive(o.intra_bandwidth_gbps, "--intra-bandwidth-gbps", false);
  positive(o.copy_bandwidth_gbps, "--copy-bandwidth-gbps", false);
  if (o.alpha_us) p.topology.network().alpha_us = *o.alpha_us;
  if (o.bandwidth_gbps) p.topology.network().bytes_per_us = *o.bandwidth_gbps * 1000.0;
  if (o.intra_alpha_us) p.topology.intra_node().alpha_us = *o.intra_alpha_us;
  if (o.intra_bandwidth_gbps) p.topology.intra_node().bytes_per_us = *o.intra_bandwidth_gbps * 1000.0;
  if (o.hop_alpha_us) p.topology.network().hop_alpha_us = *o.hop_alpha_us;
  if (o.step_latency_us) p.topology.step_latency_us() = *o.step_latency_us;
  if (o.copy_bandwidth_gbps) p.topology.copy_bytes_per_us() = *o.copy_bandwidth_gbps * 1000.0;
  if (o.bandwidth_only) p.topology.MakeBandwidthOnly();
  p.target = o.target.empty() ? (emitting ? PlanTarget::kJaxCpu : PlanTarget::kAny) : ParsePlanTarget(o.target).value();
  if (!o.memory_cap.empty()) p.memory_cap_bytes = ParseBytes(o.memory_cap, "--memory-cap");
  p.meshes = pair.meshes;
  return p;
}

LayoutPair LoadPair(const PairOptions& o) {
  const std::vector<int64_t> shape = ParseShape(o.common.shape);
  const DType dtype = ParseDTypeOrThrow(o.common.dtype);
  const std::optional<Mesh> from_mesh =
      BuildMesh(o.from_mesh.empty() ? o.common.mesh : o.from_mesh, o.common.devices, "--from-mesh");
  const std::optional<Mesh> to_mesh = BuildMesh(o.to_mesh.empty() ? o.common.mesh : o.to_mesh, o.common.devices, "--to-mesh");
  Result<ParsedLayout> src = ParseLayout(o.from, shape, dtype, from_mesh);
  Result<ParsedLayout> dst = ParseLayout(o.to, shape, dtype, to_mesh);
  auto borrow = [&](Result<ParsedLayout>& side, const std::optional<Mesh>& own, const Result<ParsedLayout>& other,
                    const std::string& text) {
    if (side.ok() || own || !other.ok()) return;
    Result<Mesh> m = Mesh::Create({{"devices", static_cast<int64_t>(other->layout.devices().size())}}, other->layout.devices());
    if (!m.ok()) return;
    Result<ParsedLayout> retry = ParseLayout(text, shape, dtype, *m);
    if (retry.ok()) side = std::move(retry);
  };
  borrow(src, from_mesh, dst, o.from);
  borrow(dst, to_mesh, src, o.to);
  ThrowIfError(src.status(), "--from");
  ThrowIfError(dst.status(), "--to");
  LayoutPair pair{std::move(src).value(), std::move(dst).value(), {}};
  // Meshes for the planner: those given or carried by the texts, then those an HLO tile assignment suggests.
  for (const std::optional<Mesh>& m : {from_mesh, to_mesh, pair.source.mesh, pair.target.mesh})
    if (m) pair.meshes.push_back(*m);
  for (const std::string* text : {&o.from, &o.to}) {
    Result<HloSharding> h = ParseHloSharding(*text);
    if (!h.ok()) continue;
    for (Mesh& m : SuggestMeshes(*h)) pair.meshes.push_back(std::move(m));
  }
  return pair;
}

int64_t TotalLocalBytes(const Layout& l) {
  int64_t n = 0;
  for (int64_t d : l.devices()) n += l.LocalBytes(d);
  return n;
}

int64_t MaxLocalBytes(const Layout& l) {
  int64_t most = 0;
  for (int64_t d : l.devices()) most = std::max(most, l.LocalBytes(d));
  return most;
}

std::string FormatShape(const std::vector<int64_t>& shape, DType dtype) {
  return fmt::format("{}[{}]", DTypeName(dtype), fmt::join(shape, ","));
}

std::string Plural(int64_t n, const std::string& word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (int64_t{1} << 20)) return fmt::format("{} B ({:.1f} KiB)", bytes, bytes / 1024.0);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{} B ({:.1f} MiB)", bytes, bytes / 1048576.0);
  return fmt::format("{} B ({:.1f} GiB)", bytes, bytes / 1073741824.0);
}

}  // namespace reshard::cli
