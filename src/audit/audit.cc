// Audit(): reads the inputs, finds the reshards of each module, prices them,
// and joins XLA's logged rematerializations to them.
#include "reshard/audit.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <map>
#include <optional>
#include <set>

#include "audit/hlo_module.h"
#include "audit/tracker.h"
#include "audit/xla_log.h"
#include "reshard/hlo_text.h"
#include "reshard/notation.h"
#include "reshard/plan_stats.h"
#include "reshard/tile_assignment.h"

namespace reshard {
namespace {

using audit::HloModule;

struct LogLine {
  std::string source;
  int64_t line = 0;
  audit::LogRematerialization remat;
};

struct Read {
  std::vector<std::pair<std::string, HloModule>> modules;  // (source, module)
  std::vector<LogLine> logs;
  std::string cpu_evidence;  // why the inputs are known to come from XLA:CPU, or empty
};

// How XLA:CPU moves an element type through collectives: its float
// normalization runs bf16 collectives in f32 (jax 0.10.2; f16 stays f16, as
// tests/data/audit/move_dim_f16 shows). For findings from the log alone; an
// HLO module states the type its collectives carry.
DType MovedOnCpu(DType t) { return t == DType::kBF16 ? DType::kF32 : t; }

// reshard.jax compiles some programs only to compare XLA's lowering with its
// own (python/reshard/_jax_plan.py names their function so); they never run.
constexpr std::string_view kComparisonOnly = "reshard_comparison_only";
bool ComparisonOnly(std::string_view name) { return name.find(kComparisonOnly) != std::string_view::npos; }

// The same layout with another element type.
Result<Layout> WithDType(const Layout& l, DType dtype) {
  if (l.dtype() == dtype) return l;
  std::vector<DimGrid> dims;
  for (int64_t d = 0; d < l.rank(); ++d) dims.push_back(l.dim(d));
  std::vector<DeviceTile> placement;
  for (int64_t dev : l.devices()) placement.push_back({dev, l.TileOf(dev)});
  return Layout::Create(l.shape(), dtype, std::move(dims), std::move(placement));
}

// a * times, saturating; times 0 (a loop of unknown trip count) counts once.
int64_t Times(int64_t a, int64_t times) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, std::max<int64_t>(times, 1), &r) ? INT64_MAX : r;
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(start, end - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    lines.push_back(l);
    if (end == text.size()) break;
    start = end + 1;
  }
  return lines;
}

Status ReadInput(const AuditInput& in, Read* out, AuditReport* report) {
  if (in.text.find('\0') != std::string::npos) return Status::InvalidArgument(in.name + ": binary data, not text");
  const std::vector<std::string_view> lines = SplitLines(in.text);
  if (out->cpu_evidence.empty() && in.name.find(".cpu_after_optimizations") != std::string::npos)
    out->cpu_evidence = in.name + " is an XLA:CPU dump";
  size_t i = 0;
  while (i < lines.size()) {
    if (audit::IsModuleHeader(lines[i])) {
      size_t next = i + 1;
      Result<HloModule> m = audit::ParseHloModule(lines, i, &next);
      if (!m.ok()) return Status::InvalidArgument(in.name + ": " + m.status().message());
      for (const audit::HloIssue& issue : m->issues)
        report->not_understood.push_back({in.name, issue.line, issue.text, issue.reason});
      out->modules.emplace_back(in.name, std::move(m).value());
      i = std::max(next, i + 1);
      continue;
    }
    if (out->cpu_evidence.empty() && lines[i].find("PjRt-IFRT device: CpuDevice(") != std::string_view::npos)
      out->cpu_evidence = in.name + ":" + std::to_string(i + 1) + " names XLA:CPU devices";
    if (audit::IsRematerializationLine(lines[i])) {
      ++report->log_lines;
      Result<audit::LogRematerialization> r = audit::ParseRematerializationLine(lines[i]);
      if (r.ok()) {
        out->logs.push_back({in.name, static_cast<int64_t>(i) + 1, std::move(r).value()});
      } else {
        report->not_understood.push_back({in.name, static_cast<int64_t>(i) + 1, std::string(lines[i].substr(0, 300)),
                                          r.status().message()});
      }
    }
    ++i;
  }
  return Status::Ok();
}

// Identifies a module independently of metadata, so the same module read twice counts once.
std::string ModuleKey(const HloModule& m) {
  std::string key = m.name + "|" + std::to_string(m.num_partitions);
  for (const audit::HloComputation& c : m.computations) {
    key += "\n" + c.name + ":";
    for (const audit::HloInstruction& i : c.instructions) key += i.name + "=" + i.opcode + i.shape.ToString() + ";";
  }
  return key;
}

Result<Layout> LayoutOfText(const std::string& text, const std::vector<int64_t>& shape, DType dtype, int64_t devices) {
  RESHARD_ASSIGN_OR_RETURN(HloSharding s, ParseHloSharding(text));
  std::optional<Mesh> mesh;
  if (std::holds_alternative<HloSharding::Replicated>(s.kind())) {
    if (devices < 1) return Status::NotSupported("{replicated} on both sides");
    RESHARD_ASSIGN_OR_RETURN(Mesh m, Mesh::Create({{"devices", devices}}));
    mesh = std::move(m);
  }
  return s.ToLayout(shape, dtype, mesh);
}

int64_t DevicesOf(const std::string& text) {
  Result<HloSharding> s = ParseHloSharding(text);
  if (!s.ok()) return 0;
  if (const auto* t = std::get_if<HloSharding::Tiled>(&s->kind())) return t->tiles.num_devices();
  return 0;
}

// Ordered factorizations of n into at most `parts` factors >= 2 (fewest factors first).
void Factorizations(int64_t n, size_t parts, std::vector<int64_t>& prefix, std::vector<std::vector<int64_t>>* out) {
  if (n == 1) {
    if (!prefix.empty()) out->push_back(prefix);
    return;
  }
  if (prefix.size() == parts || out->size() > 4096) return;
  for (int64_t f = 2; f <= n; ++f) {
    if (n % f != 0) continue;
    prefix.push_back(f);
    Factorizations(n / f, parts, prefix, out);
    prefix.pop_back();
  }
}

// XLA's text of a sharding, with an explicit device list restated as an iota
// ("[2,1,4]<=[4,2]T(1,0)") where one with few reshape dims produces it.
std::string CanonicalHloText(const std::string& text) {
  Result<HloSharding> s = ParseHloSharding(text);
  if (!s.ok()) return text;
  const auto* t = std::get_if<HloSharding::Tiled>(&s->kind());
  if (t == nullptr || t->tiles.is_iota()) return text;
  const int64_t n = t->tiles.num_devices();
  if (n < 2 || n > (int64_t{1} << 20)) return text;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t parts = 1; parts <= 5 && shapes.empty(); ++parts) {
    std::vector<std::vector<int64_t>> found, prefix_holder;
    std::vector<int64_t> prefix;
    Factorizations(n, parts, prefix, &found);
    for (auto& f : found)
      if (f.size() == parts) shapes.push_back(std::move(f));
    for (const std::vector<int64_t>& reshape : shapes) {
      std::vector<int64_t> perm(reshape.size());
      for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
      do {
        Result<TileAssignment> iota = TileAssignment::Iota(t->tiles.dims(), reshape, perm);
        if (!iota.ok()) continue;
        bool same = true;
        for (int64_t f = 0; f < n && same; ++f) same = iota->device(f) == t->tiles.device(f);
        if (same) return HloSharding::Tile(std::move(iota).value(), t->replicate_last).ToString();
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
    shapes.clear();
  }
  return text;
}

struct Priced {
  int64_t max_recv_bytes = 0, lower_bound = 0;
  std::vector<std::string> collectives, steps;
  double time_us = 0;
};

class Pricer {
 public:
  explicit Pricer(const AuditOptions& o) : options_(o) {}

  Result<Priced> Price(const Layout& from, const Layout& to, const std::string& from_text, const std::string& to_text) {
    std::string key = from_text + "|" + to_text + "|" + std::string(DTypeName(from.dtype()));
    for (int64_t d : from.shape()) key += "," + std::to_string(d);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    PlannerOptions po;
    po.topology = Topology::Flat();
    po.topology = po.topology.BandwidthOnly();
    po.target = options_.target;
    for (const std::string& t : {from_text, to_text}) {
      Result<HloSharding> s = ParseHloSharding(t);
      if (!s.ok()) continue;
      for (Mesh& m : SuggestMeshes(*s)) po.meshes.push_back(std::move(m));
    }
    Result<PlanResult> r = PlanReshard(from, to, po);
    if (!r.ok()) return r.status();
    Priced p;
    p.max_recv_bytes = r->plan.totals().max_recv_bytes;
    p.lower_bound = r->lower_bound.max_recv_bytes;
    p.time_us = r->plan.totals().time_us;
    for (const PlanStep& s : r->plan.steps()) {
      if (!IsCollective(s.op)) continue;
      p.collectives.emplace_back(StepOpName(s.op));
      std::string step(StepOpName(s.op));
      if (!s.group_spec.empty()) step += " over " + s.group_spec;
      if (!s.input_spec.empty()) step += ": " + s.input_spec + " -> " + s.output_spec;
      p.steps.push_back(std::move(step));
    }
    cache_.emplace(key, p);
    return p;
  }

 private:
  AuditOptions options_;
  std::map<std::string, Priced> cache_;
};

double BandwidthBytesPerUs() { return Topology::Flat().network().bytes_per_us; }

std::string ShapeText(const std::vector<int64_t>& shape, DType dtype) {
  std::string s = std::string(DTypeName(dtype)) + "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? "," : "") + std::to_string(shape[k]);
  return s + "]";
}

// XLA's fallback as its log describes it: all-gather each sharded dim (last
// dim first, as the partitioner does), then slice.
// nullopt when the byte counts would overflow.
std::optional<std::vector<AuditCollective>> EstimatedRemat(const LogLine& l, const Layout& from) {
  std::vector<AuditCollective> out;
  Result<HloSharding> s = ParseHloSharding(l.remat.from);
  const auto* t = s.ok() ? std::get_if<HloSharding::Tiled>(&s->kind()) : nullptr;
  if (t == nullptr) return out;
  int64_t local = ByteSize(from.dtype());
  for (int64_t d : l.remat.local_shape.dims)
    if (__builtin_mul_overflow(local, d, &local)) return std::nullopt;
  for (size_t d = l.remat.local_shape.dims.size(); d-- > 0;) {
    const int64_t k = t->tiles.dims()[d];
    if (k < 2) continue;
    int64_t recv = 0;
    if (__builtin_mul_overflow(local, k - 1, &recv) || __builtin_mul_overflow(local, k, &local)) return std::nullopt;
    out.push_back({"all-gather", l.remat.instruction, l.line, k, recv});
  }
  return out;
}

}  // namespace

int64_t AuditFinding::total_saving_bytes() const { return Times(saving_bytes(), trip_count); }

std::string_view AuditKindName(AuditKind k) {
  switch (k) {
    case AuditKind::kFullRematerialization: return "full-rematerialization";
    case AuditKind::kExcess: return "excess";
    case AuditKind::kNone: return "none";
  }
  return "none";
}

Result<AuditReport> Audit(const std::vector<AuditInput>& inputs, const AuditOptions& options) {
  AuditReport report;
  Read read;
  for (const AuditInput& in : inputs) RESHARD_RETURN_IF_ERROR(ReadInput(in, &read, &report));

  Pricer pricer(options);
  const double bw = BandwidthBytesPerUs();
  struct Candidate {
    AuditFinding finding;
    Layout from, to;
    bool reported;
    std::vector<int64_t> source_local_shape;
    bool whole = false;  // XLA gathered the whole array on every device for it
    // The conditional branches around it, conditionals numbered across modules.
    audit::BranchPath branch = {};
  };
  std::vector<Candidate> candidates;
  // Reshards of reshard.jax's comparison modules: never reported, only matched to log lines.
  struct Comparison {
    Layout from, to;
    std::string module, source;
  };
  std::vector<Comparison> comparisons;
  int64_t comparison_modules = 0;
  int64_t conditionals = 0;  // numbered in the modules before

  // The same module read twice (a dump and compiled text) counts once; keep the
  // copy that prints its large constants.
  auto elided = [](const HloModule& m) {
    int64_t n = 0;
    for (const audit::HloComputation& c : m.computations)
      for (const audit::HloInstruction& i : c.instructions) n += i.opcode == "constant" && i.literal.find("...") != std::string::npos;
    return n;
  };
  std::map<std::string, size_t> best;
  for (size_t k = 0; k < read.modules.size(); ++k) {
    auto [it, inserted] = best.emplace(ModuleKey(read.modules[k].second), k);
    if (!inserted && elided(read.modules[k].second) < elided(read.modules[it->second].second)) it->second = k;
  }
  for (size_t k = 0; k < read.modules.size(); ++k) {
    auto& [source, module] = read.modules[k];
    if (best[ModuleKey(module)] != k) continue;
    audit::ModuleAnalysis a = audit::AnalyzeModule(module, options.max_devices);
    if (ComparisonOnly(module.name)) {
      ++comparison_modules;
      report.notes.push_back(module.name + " (" + source + "): compiled by reshard.jax only to compare lowerings; it never runs: not audited");
      for (audit::ModuleReshard& r : a.reshards)
        if (r.from && r.to) comparisons.push_back({*r.from, *r.to, module.name, source});
      continue;
    }
    for (const audit::HloIssue& issue : a.issues)
      report.not_understood.push_back({source, issue.line, issue.text, issue.reason});
    for (const std::string& n : a.notes) report.notes.push_back(module.name + " (" + source + "): " + n);
    AuditModule am;
    am.source = source;
    am.name = module.name;
    am.line = module.line;
    am.devices = module.num_partitions;
    am.collectives = static_cast<int64_t>(a.collectives.size());
    // Conditionals numbered after earlier modules' (the report's totals).
    const int64_t first_conditional = conditionals;
    auto numbered = [first_conditional](audit::BranchPath b) {
      for (auto& [conditional, branch] : b) conditional += first_conditional;
      return b;
    };
    std::vector<audit::BranchItem> collectives, findings;
    for (const audit::ModuleCollective& c : a.collectives) {
      collectives.push_back({c.branch, Times(c.MaxRecv(), c.executions), 0});
      for (const auto& [conditional, branch] : c.branch) conditionals = std::max(conditionals, first_conditional + conditional + 1);
      if (c.role == audit::ModuleCollective::Role::kNone) am.not_attributed.push_back({c.op, c.name, c.line, c.group_size, c.MaxRecv()});
    }
    am.collective_recv_bytes = audit::OneRunTotal(collectives).xla;
    am.reshards = static_cast<int64_t>(a.reshards.size());
    report.reshards += am.reshards;
    for (audit::ModuleReshard& r : a.reshards) {
      Result<std::string> from_text = PrintLayout(*r.from, Notation::kHlo, std::nullopt);
      Result<std::string> to_text = PrintLayout(*r.to, Notation::kHlo, std::nullopt);
      if (from_text.ok()) from_text = CanonicalHloText(*from_text);
      if (to_text.ok()) to_text = CanonicalHloText(*to_text);
      if (!from_text.ok() || !to_text.ok()) {
        report.notes.push_back(module.name + " (" + source + "): the reshard of %" + r.from_instruction +
                               " has a layout no HLO sharding states");
        continue;
      }
      const Layout& from = *r.from;
      const Layout& to = *r.to;
      // Price both sides in the type XLA's collectives carry (XLA:CPU: bf16 as f32).
      DType moved_as = from.dtype();
      std::string moved_as_reason;
      if (Result<DType> m = ParseDType(r.moved_element_type); m.ok() && *m != from.dtype()) {
        moved_as = *m;
        moved_as_reason = "XLA's collectives for it carry " + r.moved_element_type + ", not " + std::string(DTypeName(from.dtype())) +
                          ": reshard's plan is priced in " + r.moved_element_type + " too, as it runs on this backend";
      }
      Result<Layout> moved_from = WithDType(from, moved_as), moved_to = WithDType(to, moved_as);
      if (!moved_from.ok() || !moved_to.ok()) {
        report.notes.push_back(module.name + " (" + source + "): the reshard of %" + r.from_instruction + " cannot be priced in " +
                               std::string(DTypeName(moved_as)));
        continue;
      }
      Result<Priced> priced = pricer.Price(*moved_from, *moved_to, *from_text, *to_text);
      if (!priced.ok()) {
        report.notes.push_back(module.name + " (" + source + "): no plan for the reshard of %" + r.from_instruction + ": " +
                               priced.status().message());
        continue;
      }
      AuditFinding f;
      f.kind = r.through_whole_array ? AuditKind::kFullRematerialization : AuditKind::kExcess;
      f.source = source;
      f.module = module.name;
      f.instruction = r.from_instruction;
      f.to_instruction = r.to_instruction;
      f.line = r.from_line;
      f.trip_count = r.trip_count;
      f.loop = r.loop;
      f.shape = r.shape;
      f.dtype = from.dtype();
      f.moved_as = moved_as;
      f.moved_as_reason = std::move(moved_as_reason);
      f.from = *from_text;
      f.to = *to_text;
      f.xla_max_recv_bytes = r.max_recv_bytes;
      for (int c : r.collectives) {
        const audit::ModuleCollective& mc = a.collectives[c];
        f.xla_collectives.push_back({mc.op, mc.name, mc.line, mc.group_size, mc.MaxRecv()});
        f.xla_time_us += static_cast<double>(mc.MaxRecv()) / bw;
      }
      f.reshard_max_recv_bytes = priced->max_recv_bytes;
      f.reshard_collectives = priced->collectives;
      f.reshard_steps = priced->steps;
      f.reshard_time_us = priced->time_us;
      f.lower_bound_max_recv_bytes = priced->lower_bound;
      const bool waste = f.xla_max_recv_bytes > f.reshard_max_recv_bytes && f.xla_max_recv_bytes > f.lower_bound_max_recv_bytes;
      if (waste) {
        ++am.findings;
        findings.push_back({r.branch, Times(f.xla_max_recv_bytes, f.trip_count), Times(f.reshard_max_recv_bytes, f.trip_count)});
      }
      candidates.push_back({std::move(f), from, to, waste, r.source_local_shape, r.through_whole_array, numbered(r.branch)});
    }
    const audit::BranchTotal module_total = audit::OneRunTotal(findings);
    am.xla_recv_bytes = module_total.xla;
    am.reshard_recv_bytes = module_total.reshard;
    report.modules.push_back(std::move(am));
  }

  // Logged rematerializations: join each to a reshard of the HLO, or estimate it.
  // The same line in two logs (a log given twice) is one; a log that has it
  // again joins another reshard of the HLO where one is left (XLA partitions
  // it in each conditional branch), else it is the same one logged again
  // (a program compiled twice; one branch's line, estimated, is counted once).
  std::set<std::string> log_keys;
  std::map<std::pair<std::string, std::string>, int> seen_in_source;
  for (const LogLine& l : read.logs) {
    std::string key = l.remat.from + "|" + l.remat.to + "|" + l.remat.instruction + "|" + l.remat.local_shape.ToString();
    const int occurrence = seen_in_source[{l.source, key}]++;
    key += "#" + std::to_string(occurrence);
    if (!log_keys.insert(key).second) continue;
    Result<DType> dtype = ParseDType(l.remat.local_shape.element_type);
    if (!dtype.ok()) {
      report.not_understood.push_back({l.source, l.line, l.remat.instruction, "element type " + l.remat.local_shape.element_type + " is not priced"});
      continue;
    }
    const int64_t devices = std::max(DevicesOf(l.remat.from), DevicesOf(l.remat.to));
    if (devices > options.max_devices) {
      report.notes.push_back("logged rematerialization of %" + l.remat.instruction + " (" + l.source + ":" + std::to_string(l.line) +
                             ") is over " + std::to_string(devices) + " devices, more than " + std::to_string(options.max_devices) +
                             ": not audited");
      continue;
    }
    Result<Layout> from = LayoutOfText(l.remat.from, l.remat.global_shape, *dtype, devices);
    Result<Layout> to = LayoutOfText(l.remat.to, l.remat.global_shape, *dtype, devices);
    if (!from.ok() || !to.ok()) {
      report.not_understood.push_back({l.source, l.line, "%" + l.remat.instruction,
                                       "shardings not understood: " + (from.ok() ? to.status().message() : from.status().message())});
      continue;
    }
    const std::string where = "logged rematerialization of %" + l.remat.instruction + " (" + l.source + ":" + std::to_string(l.line) + ")";
    // reshard.jax's comparison programs never run: a line whose op_name names one is not the user's.
    if (ComparisonOnly(l.remat.op_name)) {
      report.notes.push_back(where + " is in reshard.jax's comparison program (op_name " + l.remat.op_name +
                             "), which never runs: not counted");
      continue;
    }
    // The reshard of the same layouts; else (XLA logs the array it gave up on,
    // which may be a reshaped view on a device subgroup) one that starts from a
    // value of the logged local shape and gathers.
    Candidate* match = nullptr;
    for (Candidate& c : candidates)
      if (!match && !c.finding.logged && !c.finding.module.empty() && c.finding.dtype == *dtype && c.from == *from && c.to == *to) match = &c;
    for (Candidate& c : candidates) {
      if (match || c.finding.logged || c.finding.module.empty() || c.finding.dtype != *dtype ||
          c.source_local_shape != l.remat.local_shape.dims)
        continue;
      const bool gathers = std::any_of(c.finding.xla_collectives.begin(), c.finding.xla_collectives.end(),
                                       [](const AuditCollective& x) { return x.op == "all-gather"; });
      if (!gathers) continue;
      match = &c;
      report.notes.push_back("logged rematerialization of %" + l.remat.instruction + " " + l.remat.from + " -> " + l.remat.to + " (" +
                             l.source + ":" + std::to_string(l.line) + ") is taken to be the reshard of %" + c.finding.instruction +
                             " in " + c.finding.module + ", which starts from a value of the same local shape");
    }
    // A comparison module's reshard of the same layouts is the one logged, unless the user's
    // reshard gathers the whole array as the logged fallback does.
    auto same = std::find_if(comparisons.begin(), comparisons.end(), [&](const Comparison& c) {
      return c.from.dtype() == *dtype && c.from == *from && c.to == *to;
    });
    if (same != comparisons.end() && (match == nullptr || !match->whole)) {
      report.notes.push_back(where + " is the reshard of reshard.jax's comparison module " + same->module + " (" + same->source +
                             "), which never runs: not counted");
      continue;
    }
    // Where the inputs hold comparison modules, a line that matches no reshard of the
    // user's cannot be told from theirs.
    if (match == nullptr && comparison_modules > 0) {
      report.notes.push_back(where + " matches no reshard of the modules audited, and the inputs hold reshard.jax's comparison "
                             "modules, whose log lines look the same: not counted");
      continue;
    }
    if (match == nullptr && occurrence > 0) continue;  // the same line again, counted once
    if (match != nullptr) {
      match->finding.logged = true;
      match->finding.kind = AuditKind::kFullRematerialization;
      if (!match->reported)
        report.notes.push_back("logged rematerialization of %" + l.remat.instruction + " (" + l.source + ":" + std::to_string(l.line) +
                               "): XLA's HLO for it moves no more than reshard's plan");
      continue;
    }
    // XLA's side and reshard's in the type the backend moves the array as, where the inputs show the backend.
    const DType moved_as = read.cpu_evidence.empty() ? *dtype : MovedOnCpu(*dtype);
    Result<Layout> moved_from = WithDType(*from, moved_as), moved_to = WithDType(*to, moved_as);
    if (!moved_from.ok() || !moved_to.ok()) {
      report.notes.push_back("logged rematerialization of %" + l.remat.instruction + ": cannot be priced in " +
                             std::string(DTypeName(moved_as)));
      continue;
    }
    Result<Priced> priced = pricer.Price(*moved_from, *moved_to, l.remat.from, l.remat.to);
    if (!priced.ok()) {
      report.notes.push_back("no plan for the logged rematerialization of %" + l.remat.instruction + ": " + priced.status().message());
      continue;
    }
    AuditFinding f;
    f.kind = AuditKind::kFullRematerialization;
    f.source = l.source;
    f.instruction = l.remat.instruction;
    f.line = l.line;
    f.shape = l.remat.global_shape;
    f.dtype = *dtype;
    f.moved_as = moved_as;
    if (moved_as != *dtype)
      f.moved_as_reason = "XLA:CPU moves " + std::string(DTypeName(*dtype)) + " as " + std::string(DTypeName(moved_as)) + " (" +
                          read.cpu_evidence + "): both sides are priced in " + std::string(DTypeName(moved_as));
    f.from = l.remat.from;
    f.to = l.remat.to;
    f.logged = true;
    f.estimated = true;
    std::optional<std::vector<AuditCollective>> estimate = EstimatedRemat(l, *moved_from);
    if (!estimate) {
      report.notes.push_back("logged rematerialization of %" + l.remat.instruction + " (" + l.source + ":" + std::to_string(l.line) +
                             "): too large to estimate");
      continue;
    }
    f.xla_collectives = std::move(*estimate);
    for (const AuditCollective& c : f.xla_collectives) {
      f.xla_max_recv_bytes += c.max_recv_bytes;
      f.xla_time_us += static_cast<double>(c.max_recv_bytes) / bw;
    }
    f.reshard_max_recv_bytes = priced->max_recv_bytes;
    f.reshard_collectives = priced->collectives;
    f.reshard_steps = priced->steps;
    f.reshard_time_us = priced->time_us;
    f.lower_bound_max_recv_bytes = priced->lower_bound;
    if (!read.modules.empty())
      report.notes.push_back("logged rematerialization of %" + l.remat.instruction + " " + ShapeText(l.remat.local_shape.dims, *dtype) +
                             " (" + l.source + ":" + std::to_string(l.line) +
                             ") matches no reshard found in the HLO given; XLA's cost is estimated from the log");
    const bool waste = f.xla_max_recv_bytes > f.reshard_max_recv_bytes && f.xla_max_recv_bytes > f.lower_bound_max_recv_bytes;
    candidates.push_back({std::move(f), std::move(from).value(), std::move(to).value(), waste, {}});
  }

  std::vector<AuditFinding> fine;
  std::vector<audit::BranchItem> reported;
  for (Candidate& c : candidates) {
    if (!c.reported) {
      c.finding.kind = AuditKind::kNone;
      if (options.all_reshards) fine.push_back(std::move(c.finding));
      continue;
    }
    reported.push_back({std::move(c.branch), Times(c.finding.xla_max_recv_bytes, c.finding.trip_count),
                        Times(c.finding.reshard_max_recv_bytes, c.finding.trip_count)});
    report.findings.push_back(std::move(c.finding));
  }
  const audit::BranchTotal total = audit::OneRunTotal(reported);
  report.xla_recv_bytes = total.xla;
  report.reshard_recv_bytes = total.reshard;
  std::stable_sort(report.findings.begin(), report.findings.end(), [](const AuditFinding& a, const AuditFinding& b) {
    return a.total_saving_bytes() > b.total_saving_bytes();
  });
  for (AuditFinding& f : fine) report.findings.push_back(std::move(f));
  return report;
}

}  // namespace reshard
