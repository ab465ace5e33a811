// The execution checker: tags computed from global indices, every step's
// output compared with its layout (coverage counted from the program's
// copies: exec_checker_coverage.cc).
#include "exec/exec_checker.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <mutex>
#include <numeric>
#include <vector>

#include "exec/local_elements.h"
#include "exec/reduce_kernel.h"
#include "exec/thread_pool.h"

namespace reshard {
namespace {

constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;

void Tag(int64_t g, int64_t eb, std::byte* out) {
  const uint64_t v = (static_cast<uint64_t>(g) + 1) * kMul;
  std::memcpy(out, &v, static_cast<size_t>(std::min<int64_t>(eb, 8)));
  if (eb > 8) {
    const uint64_t hi = static_cast<uint64_t>(g) + 1;
    std::memcpy(out + 8, &hi, static_cast<size_t>(std::min<int64_t>(eb - 8, 8)));
  }
}

// Whether part p < parts - 1 of element g is off by one (TagScheme).
int64_t Wobble(int64_t g, int64_t p) {
  uint64_t x = (static_cast<uint64_t>(g) + 1) * kMul ^ (static_cast<uint64_t>(p) + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<int64_t>((x >> 7) & 1u);
}

// Sum parts wobble only where parts + 1s stay well inside the exact range.
bool SumWobbles(DType dtype, int64_t parts) { return 4 * parts <= ExactIntegers(dtype); }

// An avg source of more parts than its type holds their sum exactly (s8 from
// 128 parts, u8 from 256, bf16 from 257): the modulus floors at 1. Integers:
// every part holds 1 and the executors' sum wraps, in any order and grouping
// alike; the expected value is the reduce kernel's: `count` parts combined,
// divided by the source's part count where `divide`, then scaled. Floats
// would round by the order and grouping of the sums (one accumulator in part
// order, a relay's pre-summed piece, a mesh axis at a time): every part
// holds 0 there, whose sums are exact whatever the order.
bool AvgBeyondExact(const Reduction& source, DType dtype) {
  return source.op == ReduceOp::kAvg && source.parts > ExactIntegers(dtype);
}
void StoreKernelAverage(const Reduction& source, int64_t count, bool divide, int64_t scale, DType dtype, std::byte* out) {
  if (IsFloatingPoint(dtype)) return StoreNumber(0, dtype, out);
  const int64_t eb = ByteSize(dtype);
  std::byte one[16];
  StoreNumber(1, dtype, one);
  std::memcpy(out, one, static_cast<size_t>(eb));
  for (int64_t k = 1; k < count; ++k) CombineContiguous(one, out, eb, dtype, ReduceOp::kSum);
  if (divide) DivideElements(out, 1, dtype, source.parts);
  if (scale != 1) ScaleElements(out, 1, dtype, scale);
}

// The number element g holds in a source of reduction `r` on a device of
// part `part`.
int64_t NumberOf(const Reduction& r, DType dtype, int64_t part, int64_t g, const TagScheme& scheme) {
  const int64_t n = g % scheme.modulus + 1;
  if (r.parts < 2) return n;
  const int64_t parts = r.parts;
  const bool last = part + 1 == parts;
  switch (r.op) {
    case ReduceOp::kAvg: return AvgBeyondExact(r, dtype) && IsFloatingPoint(dtype) ? 0 : n;
    case ReduceOp::kMax: return last ? n : n - Wobble(g, part);
    case ReduceOp::kMin: return last ? n : n + Wobble(g, part);
    case ReduceOp::kSum: {
      if (!SumWobbles(dtype, parts)) return last ? n : 0;
      if (!last) return Wobble(g, part);
      int64_t rest = n;
      for (int64_t q = 0; q + 1 < parts; ++q) rest -= Wobble(g, q);
      return rest;
    }
  }
  return n;
}

// The expected bytes of element g in a source layout (its device's part).
void ExpectSource(const Layout& layout, int64_t part, int64_t g, const TagScheme& scheme, int64_t eb, std::byte* out) {
  if (scheme.modulus == 0)
    Tag(g, eb, out);
  else
    StoreNumber(NumberOf(layout.reduction(), layout.dtype(), part, g, scheme), layout.dtype(), out);
}

// The expected bytes of element g in a target layout: a partial target's
// device of part `part` holds the source's parts routed to it, combined in
// part order, or the identity where none is.
void ExpectTarget(const Layout& layout, const std::vector<int64_t>& routed, int64_t g,
                  const TagScheme& scheme, int64_t eb, std::byte* out) {
  const bool beyond = AvgBeyondExact(scheme.source, layout.dtype());
  if (!layout.partial()) {  // the reduced value
    if (beyond) return StoreKernelAverage(scheme.source, scheme.source.parts, true, 1, layout.dtype(), out);
    return ExpectSource(layout, 0, g, scheme, eb, out);
  }
  if (routed.empty()) return StoreIdentity(scheme.routes.fill, layout.dtype(), out);
  if (scheme.modulus == 0) return Tag(g, eb, out);  // the source had no reduction: its one part, copied
  const int64_t scale = scheme.routes.scale;  // an avg target's parts hold their share times its part count
  if (beyond && scheme.routed_reduced)
    return StoreKernelAverage(scheme.source, scheme.source.parts, true, scale, layout.dtype(), out);
  if (beyond)
    return StoreKernelAverage(scheme.source, static_cast<int64_t>(routed.size()), scheme.routes.combine == ReduceOp::kAvg,
                              scale, layout.dtype(), out);
  if (scheme.routed_reduced)
    return StoreNumber(NumberOf(Reduction{}, layout.dtype(), 0, g, scheme) * scale, layout.dtype(), out);
  int64_t v = 0;
  for (size_t i = 0; i < routed.size(); ++i) {
    const int64_t x = NumberOf(scheme.source, layout.dtype(), routed[i], g, scheme);
    v = i == 0 ? x : CombineNumbers(v, x, scheme.routes.combine);
  }
  if (scheme.routes.combine == ReduceOp::kAvg) v /= scheme.source.parts;
  StoreNumber(v * scale, layout.dtype(), out);
}

// The scheme of a reshard from `source` whose partial target's values come
// by `routes` (from `tiles` where they route tile by tile), from a plain
// layout the plan reduced the source onto where `routed_reduced`.
TagScheme SchemeWithRoutes(const Layout& source, PartRoutes routes, std::optional<Layout> tiles, bool routed_reduced) {
  TagScheme scheme;
  scheme.source = source.reduction();
  scheme.routes = std::move(routes);
  scheme.tiles = std::move(tiles);
  scheme.routed_reduced = routed_reduced;
  // Numbers where values combine: from partial sums, or into an avg target
  // whose parts scale what they hold (bit tags would not survive it).
  const int64_t scale = scheme.routes.scale;
  if (!source.partial() && scale == 1) return scheme;
  const int64_t exact = ExactIntegers(source.dtype()), parts = source.reduction().parts;
  int64_t m = exact - 1;  // a plain source's, and max's and min's
  if (source.partial()) {
    if (source.reduction().op == ReduceOp::kSum) m = SumWobbles(source.dtype(), parts) ? exact / 2 : exact;
    if (source.reduction().op == ReduceOp::kAvg) m = exact / parts;  // parts * n stays exact
  }
  scheme.modulus = std::max<int64_t>(1, m / scale);  // scale * n stays exact too
  return scheme;
}

}  // namespace

TagScheme TagSchemeFor(const Layout& source, const Layout& target, const Layout& routes_from) {
  PartRoutes routes = Exchange::RouteParts(routes_from, target);
  std::optional<Layout> tiles;
  if (routes.tile_to) tiles = routes_from;
  return SchemeWithRoutes(source, std::move(routes), std::move(tiles), !(routes_from == source) && !routes_from.partial());
}

void FillTags(const Layout& layout, int64_t device, std::span<std::byte> buffer, const TagScheme& scheme) {
  const int64_t eb = layout.element_bytes();
  const int64_t part = layout.PartOf(device);
  ForEachLocal(layout, device, [&](int64_t i, int64_t g) { ExpectSource(layout, part, g, scheme, eb, buffer.data() + i * eb); });
}

TagCheck CheckTags(const Layout& layout, int64_t device, std::span<const std::byte> buffer, const TagScheme& scheme) {
  const int64_t eb = layout.element_bytes();
  TagCheck r;
  if (static_cast<int64_t>(buffer.size()) != layout.LocalBytes(device)) {
    r.mismatches = 1;
    r.first_problem = fmt::format("device {} holds {} bytes; its layout needs {}", device, buffer.size(), layout.LocalBytes(device));
    return r;
  }
  std::byte want[16];
  const int64_t part = layout.PartOf(device);
  const bool per_element = layout.partial() && scheme.tiles.has_value();  // tile routes
  std::vector<int64_t> routed = layout.partial() && !per_element ? scheme.routes.PartsInto(part) : std::vector<int64_t>{};
  ForEachLocal(layout, device, [&](int64_t i, int64_t g) {
    ++r.checked;
    if (per_element) routed = scheme.routes.PartsAt(*scheme.tiles, part, layout.TileOf(device), g);
    ExpectTarget(layout, routed, g, scheme, eb, want);
    if (std::memcmp(want, buffer.data() + i * eb, static_cast<size_t>(eb)) != 0) {
      if (r.mismatches++ == 0)
        r.first_problem = fmt::format("device {} element {} (global index {}) holds a wrong value", device, i, g);
    }
  });
  return r;
}

bool TargetValuesStated(const Layout& source, const Layout& target, const Layout& routes_from) {
  if (!target.partial() || routes_from == source || !routes_from.partial()) return true;
  // Parts moved alike: every device holds the part it held in the source.
  if (!source.partial() || !(routes_from.reduction() == source.reduction()) || routes_from.devices() != source.devices())
    return false;
  for (int64_t d : source.devices())
    if (routes_from.TileOf(d) >= 0 && routes_from.PartOf(d) != source.PartOf(d)) return false;
  return true;
}

std::optional<PartRoutes> ComposedRoutes(std::span<const Layout* const> chain) {
  if (chain.size() < 2) return std::nullopt;
  const Layout& source = *chain.front();
  const ReduceOp op = source.reduction().op;
  if (!source.partial() || op == ReduceOp::kAvg) return std::nullopt;
  std::vector<int64_t> at(static_cast<size_t>(source.reduction().parts));
  std::iota(at.begin(), at.end(), int64_t{0});  // each source part's part in the layout reached
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    const Layout& in = *chain[i];
    const Layout& out = *chain[i + 1];
    if (!in.partial() || !out.partial() || in.reduction().op != op || out.reduction().op != op) return std::nullopt;
    const PartRoutes r = Exchange::RouteParts(in, out);
    if (r.KeepsParts()) continue;  // (tile routes too: each tile into its own part)
    if (r.tile_to || r.scale != 1 || r.combine != op) return std::nullopt;
    for (int64_t& p : at) {
      p = r.to[static_cast<size_t>(p)];
      if (p < 0) return std::nullopt;
    }
  }
  PartRoutes routes;
  routes.to = std::move(at);
  routes.combine = op;
  routes.fill = chain.back()->reduction().op;
  return routes;
}

std::vector<const Layout*> LayoutChain(const CollectivePlan& plan) {
  std::vector<const Layout*> chain = {&plan.source()};
  for (const PlanStep& s : plan.steps()) chain.push_back(&s.output);
  if (plan.steps().empty()) chain.push_back(&plan.target());
  return chain;
}

std::vector<const Layout*> LayoutChain(const PlanProgram& program) {
  std::vector<const Layout*> chain;
  for (const Layout& l : program.layouts()) chain.push_back(&l);
  if (chain.size() == 1) chain.push_back(&program.target());
  return chain;
}

std::optional<ValueRoutes> ValueRoutesOf(std::span<const Layout* const> chain) {
  const Layout& source = *chain.front();
  const Layout& target = *chain.back();
  const Layout& last_input = *chain[chain.size() > 1 ? chain.size() - 2 : 0];
  if (TargetValuesStated(source, target, last_input))
    return ValueRoutes{&last_input, Exchange::RouteParts(last_input, target), false};
  if (std::optional<PartRoutes> composed = ComposedRoutes(chain))
    return ValueRoutes{&source, std::move(*composed), true};
  return std::nullopt;
}

namespace {

// The scheme of a plan from `source` whose target's values come by `v`.
TagScheme SchemeOfRoutes(const Layout& source, ValueRoutes v) {
  std::optional<Layout> tiles;
  if (v.routes.tile_to) tiles = *v.from;
  const bool routed_reduced = !(*v.from == source) && !v.from->partial();
  return SchemeWithRoutes(source, std::move(v.routes), std::move(tiles), routed_reduced);
}

// The scheme of a plan passing through `chain`: routes from its last step's
// input where the oracles state the target's values from there, else
// composed from the source (ValueRoutesOf); unstated, its checks report
// mismatches.
TagScheme SchemeOfChain(std::span<const Layout* const> chain) {
  const Layout& source = *chain.front();
  std::optional<ValueRoutes> v = ValueRoutesOf(chain);
  if (!v) return TagSchemeFor(source, *chain.back(), source);
  return SchemeOfRoutes(source, std::move(*v));
}

TagScheme SchemeOf(const PlanProgram& program) { return SchemeOfChain(LayoutChain(program)); }

}  // namespace

bool PlanValuesStated(const CollectivePlan& plan) { return ValueRoutesOf(LayoutChain(plan)).has_value(); }

bool PlanValuesStated(const PlanProgram& program) { return ValueRoutesOf(LayoutChain(program)).has_value(); }

TagScheme TagSchemeFor(const CollectivePlan& plan) { return SchemeOfChain(LayoutChain(plan)); }

void FillSources(const PlanProgram& program, std::span<const std::span<std::byte>> sources, int threads) {
  ThreadPool pool(threads);
  const TagScheme scheme = SchemeOf(program);
  pool.ParallelFor(static_cast<int64_t>(sources.size()),
                   [&](int64_t i) { FillTags(program.source(), program.devices()[i], sources[i], scheme); });
}

TagCheck CheckTargets(const PlanProgram& program, std::span<const std::span<const std::byte>> targets, int threads) {
  ThreadPool pool(threads);
  TagCheck all;
  std::mutex mu;
  const TagScheme scheme = SchemeOf(program);
  pool.ParallelFor(static_cast<int64_t>(targets.size()), [&](int64_t i) {
    TagCheck c = CheckTags(program.target(), program.devices()[i], targets[i], scheme);
    std::lock_guard<std::mutex> lock(mu);
    all.checked += c.checked;
    all.mismatches += c.mismatches;
    if (all.first_problem.empty()) all.first_problem = c.first_problem;
  });
  return all;
}

Result<CheckReport> RunChecked(const PlanProgram& program, int threads, Transport transport, RankChoice ranks) {
  if (!program.source_format().tight_row_major() || !program.target_format().tight_row_major())
    return Status::InvalidArgument("the checker compares tight row-major buffers; this program was compiled for other formats");
  std::optional<ValueRoutes> value_routes = ValueRoutesOf(LayoutChain(program));
  if (!value_routes)
    return Status::InvalidArgument("the checker states a partial target's values by the routes of the last step, "
                                   "from the source, from a layout without a pending reduction, or from one whose "
                                   "devices hold their source parts, or by every step's routes composed (parts "
                                   "routed whole, under one op: sum, max or min)");
  RESHARD_RETURN_IF_ERROR(CheckCoverage(program));
  const size_t n = program.devices().size();
  std::vector<std::vector<std::byte>> src(n), dst(n);
  std::vector<std::span<const std::byte>> sources(n);
  std::vector<std::span<std::byte>> targets(n);
  ThreadPool pool(threads);
  RESHARD_RETURN_IF_ERROR(pool.status());
  for (size_t i = 0; i < n; ++i) {
    src[i].resize(static_cast<size_t>(program.source().LocalBytes(program.devices()[i])));
    // Poisoned, not zeroed: a reduction that combined into its output instead
    // of writing the first part would pass on zeros.
    dst[i].assign(static_cast<size_t>(program.target().LocalBytes(program.devices()[i])), std::byte{0xA5});
    sources[i] = src[i];
    targets[i] = dst[i];
  }
  const TagScheme scheme = SchemeOfRoutes(program.source(), std::move(*value_routes));
  pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t i) { FillTags(program.source(), program.devices()[i], src[i], scheme); });
  CheckReport report;
  std::mutex mu;
  ExecOptions o;
  o.threads = threads;
  o.transport = transport;
  o.rank_transport = ranks.transport;
  o.rank_max_message_bytes = ranks.max_message_bytes;
  o.rank_priced_chunks = ranks.priced_chunks;
  o.rank_choose_as_mpi = ranks.choose_as_mpi;
  o.rank_bytes_per_thread = 0;  // every thread asked for, however small the program
  o.max_scheduled_group_copies = ranks.max_scheduled_group_copies;
  o.after_step = [&](size_t step, std::span<const std::span<const std::byte>> outputs) {
    const Layout& l = program.layouts()[step + 1];
    const bool last = step + 1 == program.steps().size();
    // A partial layout a step passes through inside the plan (a reduction
    // kept pending over some axes): values are checked where the plan ends
    // (the simulator says why), sizes here.
    if (!last && l.partial()) {
      for (size_t i = 0; i < n; ++i)
        if (static_cast<int64_t>(outputs[i].size()) != l.LocalBytes(program.devices()[i])) {
          ++report.mismatches;
          if (report.first_problem.empty())
            report.first_problem = fmt::format("after step {}: device {} holds {} bytes; its layout needs {}", step,
                                               program.devices()[i], outputs[i].size(),
                                               l.LocalBytes(program.devices()[i]));
        }
      return;
    }
    pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t i) {
      TagCheck c = CheckTags(l, program.devices()[i], outputs[i], scheme);
      std::lock_guard<std::mutex> lock(mu);
      if (last) report.elements_checked += c.checked;
      report.mismatches += c.mismatches;
      if (report.first_problem.empty() && !c.first_problem.empty())
        report.first_problem = fmt::format("after step {}: {}", step, c.first_problem);
    });
  };
  std::unique_ptr<Executor> ex = MakeInProcessExecutor(o);
  RESHARD_ASSIGN_OR_RETURN(report.stats, ex->Run(program, sources, targets));
  return report;
}

}  // namespace reshard
