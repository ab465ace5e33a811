#include "common.h"

#include <fmt/format.h>

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

void ThrowIfError(const Status& s, const std::string& context, int code) {
  if (s.ok()) return;
  // Valid input reshard does not handle yet is a request it cannot meet, not bad input.
  if (s.code() == Status::Code::kNotSupported) code = kExitUnmet;
  if (s.code() == Status::Code::kInternal) code = kExitInternal;
  throw CliError(code, context.empty() ? s.message() : s.WithContext(context).message());
}

std::vector<int64_t> ParseIntList(const std::string& text, const std::string& option) {
  std::vector<int64_t> out;
  const std::string& t = text;
  size_t pos = 0, end_all = t.size();
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') { pos = 1; --end_all; }
  if (pos == end_all) return out;
  while (true) {
    size_t end = t.find(',', pos);
    if (end == std::string::npos || end > end_all) end = std::string::npos;
    const std::string item = t.substr(pos, (end == std::string::npos ? end_all : end) - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0)
      throw CliError(kExitBadInput, fmt::format("{}: '{}' at column {} is not a non-negative integer\n  {}\n  {}^", option, item,
                                                pos + 1, t, std::string(pos, ' ')));
    out.push_back(v);
    if (end == std::string::npos) break;
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
  app->add_option("--strategy", o.strategy, "planning strategy: exchange (one all-to-all-v; the only one so far)")
      ->check(CLI::IsMember({"exchange"}))
      ->capture_default_str();
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
  return LayoutPair{std::move(src).value(), std::move(dst).value()};
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
