#include "common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "layout/checked_math.h"
#include "notation/text_cursor.h"
#include "reshard/byte_count.h"
#include "reshard/executor.h"
#include "reshard/hlo_text.h"
#include "reshard/named_text.h"

namespace reshard::cli {

int& ExitCode() {
  static int code = 0;
  return code;
}

int LauncherRank() {
  // Open MPI, PMIx (Open MPI 5, Slurm with PMIx), MPICH/Hydra and Intel MPI, Slurm.
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0' || std::strlen(v) > 9) continue;
    if (std::strspn(v, "0123456789") == std::strlen(v)) return std::atoi(v);
  }
  return -1;
}

const CLI::Validator& AtFile() {
  static const CLI::Validator validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text[0] != '@') return "";
        const std::string path = text.substr(1);
        if (path.empty()) return "'@' must be followed by a file name (@PATH reads the value from the file PATH)";
        constexpr size_t kMaxBytes = size_t{64} << 20;
        std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
        if (!f) return fmt::format("cannot read '{}': {}", Short(path), std::strerror(errno));
        std::string data;
        char buf[1 << 16];
        size_t n = 0;
        while (data.size() <= kMaxBytes && (n = std::fread(buf, 1, sizeof buf, f.get())) > 0) data.append(buf, n);
        if (std::ferror(f.get())) return fmt::format("cannot read '{}': {}", Short(path), std::strerror(errno));
        if (data.size() > kMaxBytes) return fmt::format("'{}' holds more than 64 MiB", Short(path));
        data.erase(data.find_last_not_of(" \t\r\n") + 1);
        text = std::move(data);
        return "";
      },
      "", "@file");
  return validator;
}

namespace {

// What each option takes, for the message an empty value gets; "COMMAND
// --option" where one name means different things in different subcommands.
std::string ExpectedValue(const std::string& command, const std::string& option) {
  const std::string layout = "a layout text in any notation";
  const std::string mesh = "a mesh such as x=4,y=2, or Shardy mesh text";
  const std::string target = "any, xla, jax-cpu, jax-gpu, mpi or nccl";
  const std::string latency = NumberExpected(0, kMaxLatencyUs);
  const std::string bandwidth = NumberExpected(kMinBandwidthGbps, kMaxBandwidthGbps);
  const std::vector<std::pair<std::string, std::string>> table = {
      {"convert --to", "a notation: hlo, hlo-v3, jax, shardy, dtensor or blockcyclic"},
      {"audit paths", "a file, a folder, or - for standard input"},
      {"--dtype", "an element type such as f32 or bf16"},
      {"--mesh", mesh},
      {"--from-mesh", mesh},
      {"--to-mesh", mesh},
      {"--devices", "device ids such as 3,2,1,0"},
      {"--sharding", layout},
      {"--from", layout},
      {"--to", layout},
      {"--dims", "two dims such as 0,1"},
      {"--strategy", "auto, exchange or collectives"},
      {"--topology", "flat, nodes:K or torus:AxB[xC]"},
      {"--for", target},
      {"--memory-cap", kByteCountExpected},
      {"--max-memory", kByteCountExpected},
      {"--alpha-us", latency},
      {"--intra-alpha-us", latency},
      {"--hop-alpha-us", latency},
      {"--step-latency-us", latency},
      {"--bandwidth-gbps", bandwidth},
      {"--intra-bandwidth-gbps", bandwidth},
      {"--copy-bandwidth-gbps", bandwidth},
      {"--emit", "hlo, jax or json"},
      {"--repeat", IntegerExpected(1, 1000000)},
      {"--threads", IntegerExpected(1, kMaxThreads) + " (leave --threads out for the hardware's count)"},
      {"--backend", "in-process or mpi"},
      {"--transport", "direct, staged or ranks"},
  };
  for (const std::string& key : {command + " " + option, option})
    for (const auto& [name, what] : table)
      if (name == key) return what;
  return "a value";
}

bool ReadsFiles(CLI::Option* opt) {
  try {
    return opt->get_validator(AtFile().get_name()) != nullptr;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

}  // namespace

std::string IntegerExpected(int64_t lo, int64_t hi) { return fmt::format("an integer from {} to {}", lo, hi); }

void RefuseEmptyValues(CLI::App& app) {
  for (CLI::App* cmd : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt : cmd->get_options()) {
      const std::string name = opt->get_name();  // "--mesh"; a positional's own name ("paths")
      if (opt->get_type_size_max() == 0 || name == "--shape") continue;  // a flag, or a scalar's shape
      const std::string message = "empty value; expected " + ExpectedValue(cmd->get_name(), name);
      CLI::Validator rule([message](std::string& v) { return v.empty() ? message : std::string(); }, "", "non-empty");
      // After an @FILE is read (transform puts it first), before every other check.
      if (ReadsFiles(opt))
        opt->check(rule);
      else
        opt->transform(rule);
    }
  }
}

CLI::Option* AddTextOption(CLI::App* app, const std::string& name, std::optional<std::string>& to,
                           const std::string& help) {
  return app->add_option_function<std::string>(
      name, [&to](const std::string& v) { to = v; }, help);
}

void AddCommonOptions(CLI::App* app, CommonOptions& o) {
  app->add_option("--shape", o.shape, "array shape, e.g. 16,16,16 (empty for a scalar)")->required();
  app->add_option("--dtype", o.dtype, "element type: pred s8 u8 s16 u16 f16 bf16 s32 u32 f32 s64 u64 f64 c64 c128")
      ->capture_default_str();
  app->add_option("--mesh", o.mesh, "mesh: 'x=4,y=2' or Shardy text '<[\"x\"=4, \"y\"=2]>' (@FILE: read from a file)")
      ->transform(AtFile());
  app->add_option("--devices", o.devices,
                  "the mesh's device ids, row-major, e.g. 3,2,1,0 (default iota; @FILE: read from a file)")
      ->transform(AtFile());
  app->add_flag("--json", o.json, "machine-readable output");
}

namespace {
std::vector<std::pair<size_t, std::string>> Characters(const std::string& t);
}  // namespace

void PrintError(std::string_view prefix, std::string_view message) {
  std::string line;
  line.reserve(prefix.size() + message.size() + 1);
  line.append(prefix).append(message).push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

std::string ShortenMessage(const std::string& message) {
  // A text quoted through Short() ("..." added, then a quote and a colon) stays as it is.
  constexpr size_t kMaxRun = 100, kSlack = 10;
  // Past these, whatever quoted a long text with spaces or newlines in it is cut too.
  constexpr size_t kMaxLine = 500, kMaxLines = 20;
  auto word = [](const std::string& c) { return c.size() > 1 || std::isalnum(static_cast<unsigned char>(c[0])) != 0; };
  std::string out;
  size_t line_start = 0, lines = 0;
  while (true) {
    size_t line_end = message.find('\n', line_start);
    if (line_end == std::string::npos) line_end = message.size();
    if (++lines > kMaxLines) {
      out += "...";
      break;
    }
    const std::vector<std::pair<size_t, std::string>> chars =
        Characters(message.substr(line_start, line_end - line_start));
    std::vector<std::string> line;  // its characters, shortened
    const bool echo = chars.size() >= 2 && chars[0].second == " " && chars[1].second == " ";
    for (size_t k = 0; k < chars.size();) {
      size_t end = k;
      while (end < chars.size() && chars[end].second != " ") ++end;
      if (!echo && end - k > kMaxRun + kSlack) {
        // Its first 100 characters, "...", and the punctuation that closes it ("'", "')", ...).
        size_t tail = end;
        while (tail > k && end - tail < 3 && !word(chars[tail - 1].second)) --tail;
        for (size_t c = k; c < k + kMaxRun; ++c) line.push_back(chars[c].second);
        line.insert(line.end(), 3, ".");
        for (size_t c = tail; c < end; ++c) line.push_back(chars[c].second);
      } else {
        for (size_t c = k; c < end; ++c) line.push_back(chars[c].second);
      }
      if (end < chars.size()) line.push_back(" ");
      k = end + 1;
    }
    for (size_t c = 0; c < std::min(line.size(), kMaxLine); ++c) out += line[c];
    if (line.size() > kMaxLine) out += "...";
    if (line_end == message.size()) break;
    out += '\n';
    line_start = line_end + 1;
  }
  return out;
}

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
      const std::string raw = t.substr(pos, end - pos);
      const bool digits = !raw.empty() && raw.find_first_not_of("0123456789") == std::string::npos;
      // As the notation parsers quote text: characters as they are (an invalid byte as \xNN), at most
      // 40 of them, and control characters as \xNN too (never sent to the terminal raw).
      std::string item;
      for (const char c : ShortText(raw, 40)) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          item += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          item += c;
      }
      throw CliError(kExitBadInput, fmt::format("{}: '{}' at column {} is not a non-negative integer{}{}", option, item,
                                                e.column, digits ? " that fits in int64" : "", e.lines));
    }
    out.push_back(v);
    if (end == end_all) break;
    pos = end + 1;
  }
  return out;
}

namespace {

// "'x' at column 3 of 'TEXT'": the character at byte `pos` of `text`, its column, and the text (shortened).
std::string CharacterAt(const std::string& text, size_t pos) {
  const std::vector<std::pair<size_t, std::string>> chars = Characters(text);
  size_t col = 0;
  while (col < chars.size() && chars[col].first < pos) ++col;
  const std::string c = col < chars.size() ? chars[col].second : std::string("end of text");
  return fmt::format("'{}' at column {} of '{}'", c, col + 1, Short(text));
}

// 0.001 -> "0.001", 1e6 -> "1000000".
std::string Bound(double v) {
  return v == std::floor(v) && std::fabs(v) < 1e15 ? fmt::format("{}", static_cast<int64_t>(v)) : fmt::format("{}", v);
}

}  // namespace

std::string NumberExpected(double lo, double hi) { return fmt::format("a number from {} to {}", Bound(lo), Bound(hi)); }

int64_t ParseInteger(const std::string& text, const std::string& option, int64_t lo, int64_t hi) {
  const std::string expected = "expected " + IntegerExpected(lo, hi);
  if (text.empty()) throw CliError(kExitBadInput, fmt::format("{}: empty value; {}", option, expected));
  int64_t v = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9')
      throw CliError(kExitBadInput, fmt::format("{}: unexpected {}; {}", option, CharacterAt(text, i), expected));
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text[i] - '0', &v)) v = INT64_MAX;
  }
  if (v < lo || v > hi)
    throw CliError(kExitBadInput, fmt::format("{}: {} is out of range; {}", option, Short(text), expected));
  return v;
}

double ParseNumber(const std::string& text, const std::string& option, double lo, double hi) {
  const std::string expected = "expected " + NumberExpected(lo, hi);
  if (text.empty()) throw CliError(kExitBadInput, fmt::format("{}: empty value; {}", option, expected));
  // digits [. digits] [e [+-] digits], at least one digit before the exponent.
  size_t i = 0, digits = 0;
  auto bad = [&](size_t at) {
    return CliError(kExitBadInput, fmt::format("{}: unexpected {}; {}", option, CharacterAt(text, at), expected));
  };
  auto skip_digits = [&]() {
    size_t n = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) ++n;
    return n;
  };
  digits += skip_digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    digits += skip_digits();
  }
  if (digits == 0) throw bad(i < text.size() ? i : 0);
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (skip_digits() == 0) throw bad(i);
  }
  if (i < text.size()) throw bad(i);
  const double v = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(v) || v < lo || v > hi)
    throw CliError(kExitBadInput, fmt::format("{}: {} is out of range; {}", option, Short(text), expected));
  return v;
}

int64_t ParseByteSize(const std::string& text, const std::string& option) {
  Result<int64_t> bytes = ParseByteCount(text);
  if (!bytes.ok()) throw CliError(kExitBadInput, option + ": " + bytes.status().message());
  return *bytes;
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

ArrayType ParseArrayType(const CommonOptions& o) {
  ArrayType a{ParseShape(o.shape), ParseDTypeOrThrow(o.dtype)};
  int64_t bytes = ByteSize(a.dtype);
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (!CheckedMul(bytes, a.shape[d], &bytes))
      throw CliError(kExitBadInput, fmt::format("--shape: the array's byte size overflows int64 at dimension {} of '{}' "
                                                "({} bytes an element)",
                                                d, Short(o.shape), ByteSize(a.dtype)));
  return a;
}

std::optional<Mesh> BuildMesh(const std::string& mesh_text, const std::string& devices_text, const std::string& option) {
  std::vector<int64_t> ids;
  if (!devices_text.empty()) {  // given (an empty value is refused as it is read)
    ids = ParseIntList(devices_text, "--devices");
    if (ids.empty())
      throw CliError(kExitBadInput, fmt::format("--devices: '{}' lists no device ids; expected {}", Short(devices_text),
                                                ExpectedValue("", "--devices")));
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
  app->add_option("--from", o.from, "the source layout, in any notation (@FILE: read from a file)")
      ->required()
      ->transform(AtFile());
  app->add_option("--to", o.to, "the target layout, in any notation (@FILE: read from a file)")
      ->required()
      ->transform(AtFile());
  app->add_option("--from-mesh", o.from_mesh, "the source's mesh (default: --mesh)")->transform(AtFile());
  app->add_option("--to-mesh", o.to_mesh, "the target's mesh (default: --mesh)")->transform(AtFile());
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
  // Read by MakePlannerOptions.
  auto text = [app](const char* name, std::optional<std::string>& to, const std::string& help) {
    AddTextOption(app, name, to, help);
  };
  text("--memory-cap", o.memory_cap,
       "most bytes a device may hold during a step, e.g. 65536, 64K, 1.5M, 2G (default: twice its largest source and "
       "target shards together)");
  text("--alpha-us", o.alpha_us, "latency per message over the network (flat: 1; nodes: 3; torus: 1)");
  text("--bandwidth-gbps", o.bandwidth_gbps, "network bandwidth per device, GB/s (25; torus links 45)");
  text("--intra-alpha-us", o.intra_alpha_us, "nodes:K: latency per message inside a node (0.5)");
  text("--intra-bandwidth-gbps", o.intra_bandwidth_gbps, "nodes:K: bandwidth inside a node, GB/s (450)");
  text("--hop-alpha-us", o.hop_alpha_us, "torus: latency per hop (0.1)");
  text("--step-latency-us", o.step_latency_us, "fixed cost of each collective step (10)");
  text("--copy-bandwidth-gbps", o.copy_bandwidth_gbps, "local copy bandwidth, GB/s (1000)");
  app->add_flag("--bandwidth-only", o.bandwidth_only, "zero every latency: plans are priced by bytes alone");
}

PlannerOptions MakePlannerOptions(const PairOptions& o, const LayoutPair& pair, bool emitting) {
  PlannerOptions p;
  p.strategy = ParseStrategy(o.strategy).value();
  Result<Topology> topo = Topology::Parse(o.topology);
  ThrowIfError(topo.status(), "--topology");
  p.topology = *topo;
  // Latencies from 0 to 1 s, bandwidths from 1 MB/s to 1 PB/s: every modeled time stays finite.
  auto latency = [](const std::optional<std::string>& v, const char* option) -> std::optional<double> {
    if (!v) return std::nullopt;
    return ParseNumber(*v, option, 0, kMaxLatencyUs);
  };
  auto bandwidth = [](const std::optional<std::string>& v, const char* option) -> std::optional<double> {
    if (!v) return std::nullopt;
    return ParseNumber(*v, option, kMinBandwidthGbps, kMaxBandwidthGbps);
  };
  const std::optional<double> alpha_us = latency(o.alpha_us, "--alpha-us");
  const std::optional<double> intra_alpha_us = latency(o.intra_alpha_us, "--intra-alpha-us");
  const std::optional<double> hop_alpha_us = latency(o.hop_alpha_us, "--hop-alpha-us");
  const std::optional<double> step_latency_us = latency(o.step_latency_us, "--step-latency-us");
  const std::optional<double> bandwidth_gbps = bandwidth(o.bandwidth_gbps, "--bandwidth-gbps");
  const std::optional<double> intra_bandwidth_gbps = bandwidth(o.intra_bandwidth_gbps, "--intra-bandwidth-gbps");
  const std::optional<double> copy_bandwidth_gbps = bandwidth(o.copy_bandwidth_gbps, "--copy-bandwidth-gbps");
  // A parameter the model would not read is bad input, not dropped silently.
  auto unread = [&](bool given, const char* option, const std::string& why) {
    if (given) throw CliError(kExitBadInput, fmt::format("{} does not apply: {}", option, why));
  };
  const bool nodes = p.topology.kind() == Topology::Kind::kNodes, torus = p.topology.kind() == Topology::Kind::kTorus;
  unread(intra_alpha_us && !nodes, "--intra-alpha-us", "only --topology nodes:K has links inside a node");
  unread(intra_bandwidth_gbps && !nodes, "--intra-bandwidth-gbps", "only --topology nodes:K has links inside a node");
  unread(hop_alpha_us && !torus, "--hop-alpha-us", "only --topology torus:AxB[xC] has hops");
  const std::string zeroed = "--bandwidth-only prices plans by bytes alone (every latency 0, local copies free)";
  unread(o.bandwidth_only && alpha_us, "--alpha-us", zeroed);
  unread(o.bandwidth_only && intra_alpha_us, "--intra-alpha-us", zeroed);
  unread(o.bandwidth_only && hop_alpha_us, "--hop-alpha-us", zeroed);
  unread(o.bandwidth_only && step_latency_us, "--step-latency-us", zeroed);
  unread(o.bandwidth_only && copy_bandwidth_gbps, "--copy-bandwidth-gbps", zeroed);
  LinkCost network = p.topology.network(), intra = p.topology.intra_node();
  if (alpha_us) network.alpha_us = *alpha_us;
  if (bandwidth_gbps) network.bytes_per_us = *bandwidth_gbps * 1000.0;
  if (hop_alpha_us) network.hop_alpha_us = *hop_alpha_us;
  if (intra_alpha_us) intra.alpha_us = *intra_alpha_us;
  if (intra_bandwidth_gbps) intra.bytes_per_us = *intra_bandwidth_gbps * 1000.0;
  p.topology = p.topology.WithNetwork(network).WithIntraNode(intra);
  if (step_latency_us) p.topology = p.topology.WithStepLatency(*step_latency_us);
  if (copy_bandwidth_gbps) p.topology = p.topology.WithCopyBytesPerUs(*copy_bandwidth_gbps * 1000.0);
  if (o.bandwidth_only) p.topology = p.topology.BandwidthOnly();
  p.target = o.target.empty() ? (emitting ? PlanTarget::kJaxCpu : PlanTarget::kAny) : ParsePlanTarget(o.target).value();
  if (o.memory_cap) p.memory_cap_bytes = ParseByteSize(*o.memory_cap, "--memory-cap");
  p.meshes = pair.meshes;
  return p;
}

LayoutPair LoadPair(const PairOptions& o) {
  const ArrayType array = ParseArrayType(o.common);
  const std::vector<int64_t>& shape = array.shape;
  const DType dtype = array.dtype;
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

void InjectedFailure(int rank, const char* point) {
  const char* v = std::getenv("RESHARD_TEST_FAIL");
  if (v != nullptr && std::string_view(v) == fmt::format("{}:{}", rank, point)) throw std::bad_alloc();
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
