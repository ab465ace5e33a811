// GroupCopies: structured steps' direct copies once per group pattern, on
// random meshes of up to 64 devices (many groups), random shapes (even and
// uneven) and partial sources, against the per-message program of the same
// plan.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <numeric>
#include <random>
#include <string>

#include "exec/exec_checker.h"
#include "exec/group_copies.h"
#include "reshard/notation.h"
#include "reshard/device_program.h"
#include "reshard/executor.h"
#include "reshard/named_sharding.h"
#include "reshard/planner.h"
#include "testing/planned_traffic.h"
#include "testing/random_named.h"
#include "testing/random_partial.h"

namespace reshard {
namespace {

Mesh RandomMesh(std::mt19937_64& rng) {
  std::vector<Mesh::Axis> axes;
  const int count = 1 + static_cast<int>(rng() % 3);
  int64_t n = 1;
  for (int a = 0; a < count; ++a) {
    axes.push_back({std::string(1, static_cast<char>('a' + a)), 1 + static_cast<int64_t>(rng() % 4)});
    n *= axes.back().size;
  }
  std::vector<int64_t> ids;
  if (rng() % 3 == 0) {
    ids.resize(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
  }
  return Mesh::Create(axes, ids).value();
}

// A random subset of the mesh axes `spec` leaves unused (each with
// probability 2/3) unreduced, under a random op.
Layout WithRandomParts(std::mt19937_64& rng, const Mesh& mesh, const NamedSharding& spec, const std::vector<int64_t>& shape,
                       DType dtype) {
  const Layout l = testing::WithUnreducedAxes(rng, mesh, spec).ToLayout(shape, dtype).value();
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  return l.partial() ? testing::Retyped(l, dtype, ops[rng() % 4]) : l;
}

// From partial sums over mesh axes A (some of those `spec` leaves unused)
// to `spec` further sharded over some of A and partial over the rest, under
// one random op: a reduce-scatter into partial sums. nullopt where A has
// fewer than two axes.
std::optional<std::pair<Layout, Layout>> ReduceScatterIntoParts(std::mt19937_64& rng, const Mesh& mesh,
                                                                const NamedSharding& spec,
                                                                const std::vector<int64_t>& shape, DType dtype) {
  std::vector<bool> used(static_cast<size_t>(mesh.num_axes()), false);
  for (const auto& d : spec.dims())
    for (const AxisRef& r : d.axes) used[static_cast<size_t>(r.axis)] = true;
  std::vector<AxisRef> parts;
  for (int64_t a = 0; a < mesh.num_axes(); ++a)
    if (!used[static_cast<size_t>(a)] && mesh.axes()[static_cast<size_t>(a)].size > 1) parts.push_back(AxisRef{a, 1, 0});
  if (parts.size() < 2) return std::nullopt;
  std::shuffle(parts.begin(), parts.end(), rng);
  const size_t scattered = 1 + rng() % (parts.size() - 1);  // over these; the rest stay unreduced
  std::vector<NamedSharding::Dim> dims = spec.dims();
  for (size_t i = 0; i < scattered; ++i) dims[rng() % dims.size()].axes.push_back(parts[i]);
  const std::vector<AxisRef> kept(parts.begin() + static_cast<std::ptrdiff_t>(scattered), parts.end());
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  const ReduceOp op = ops[rng() % 4];
  const Layout from = NamedSharding::Create(mesh, spec.dims(), {}, parts).value().ToLayout(shape, dtype).value();
  const Layout to = NamedSharding::Create(mesh, dims, {}, kept).value().ToLayout(shape, dtype).value();
  return std::pair(testing::Retyped(from, dtype, op), testing::Retyped(to, dtype, op));
}

// Device `device`'s buffer of `l` (f32, row-major) holding at each element a
// float drawn from (its part, its global index): replicas agree, parts and
// elements differ, and sums of them round.
std::vector<std::byte> FloatSource(const Layout& l, int64_t device) {
  const int64_t tile = l.TileOf(device);
  if (tile < 0) return {};
  const std::vector<int32_t> coords = l.TileCoords(tile);
  const size_t rank = static_cast<size_t>(l.rank());
  std::vector<std::vector<int64_t>> global(rank);  // per dim, the global index of each local position
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    for (const Interval& in : l.TileIntervals(static_cast<int64_t>(d), coords[d]))
      for (int64_t x = in.lo; x < in.lo + in.size(); ++x) global[d].push_back(x);
    elements *= static_cast<int64_t>(global[d].size());
  }
  std::vector<std::byte> out(static_cast<size_t>(elements) * 4);
  for (int64_t i = 0; i < elements; ++i) {
    int64_t rest = i, g = 0, stride = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t n = static_cast<int64_t>(global[d].size());
      g += global[d][static_cast<size_t>(rest % n)] * stride;
      rest /= n;
      stride *= l.shape()[d];
    }
    std::mt19937_64 mix(static_cast<uint64_t>(g) * 1000003u + static_cast<uint64_t>(l.PartOf(device)));
    const float v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(mix);
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

// The target buffers `program` leaves from `sources` under `transport`.
std::vector<std::vector<std::byte>> RunOn(const PlanProgram& program, const std::vector<std::vector<std::byte>>& sources,
                                          Transport transport) {
  ExecOptions o;
  o.threads = 2;
  o.transport = transport;
  const std::unique_ptr<Executor> executor = MakeInProcessExecutor(o);
  std::vector<std::vector<std::byte>> targets;
  std::vector<std::span<const std::byte>> in;
  std::vector<std::span<std::byte>> out;
  for (const DeviceProgram& dp : program.steps().back().devices)
    targets.emplace_back(static_cast<size_t>(dp.output_bytes), std::byte{0x5a});
  for (const std::vector<std::byte>& b : sources) in.emplace_back(b);
  for (std::vector<std::byte>& b : targets) out.emplace_back(b);
  const Result<ExecStats> ran = executor->Run(program, in, out);
  EXPECT_TRUE(ran.ok()) << ran.status();
  return targets;
}

// Every all-gather, all-to-all, reduce-scatter and all-reduce (both of its
// program steps) over mesh groups that compiles per group pattern, in
// either form, moves each device's bytes as the per-message program does
// and runs exactly, at the planned bytes: in process from the executor's
// schedule and device by device, and staged also with threads as ranks
// (each expanding its own messages), a reducing step's floats to the same
// bits as the per-message program's; GroupCopyPairs says which plan steps
// compile so.
TEST(GroupCopies, RandomStructuredStepsMatchTheirMessages) {
  std::mt19937_64 rng(20261205);
  int grouped = 0, collectives = 0, groups_of_many = 0, several_patterns = 0;
  int reducing = 0, reducing_grouped = 0, into_partial = 0, bits_compared = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const Mesh mesh = RandomMesh(rng);
    const size_t rank = 1 + rng() % 3;
    std::vector<int64_t> shape;
    // Mostly multiples of 12 (even over axes of 1 to 4), some uneven.
    for (size_t d = 0; d < rank; ++d)
      shape.push_back(rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % 13) : 12 * (1 + static_cast<int64_t>(rng() % 2)));
    // A third of the sources partial (f32 or s32: integer sums exact).
    const bool partial = iter % 3 == 0;
    const DType dtype = rng() % 2 ? DType::kF32 : partial ? DType::kS32 : DType::kS8;
    const NamedSharding spec = testing::RandomSpec(rng, mesh, rank);
    Layout source = partial ? WithRandomParts(rng, mesh, spec, shape, dtype) : spec.ToLayout(shape, dtype).value();
    // Of those, a third into partial sums over random axes (a random op),
    // and a third a reduce-scatter into partial sums where the mesh allows.
    const NamedSharding target_spec = testing::RandomSpec(rng, mesh, rank);
    const int kind = partial ? static_cast<int>(rng() % 3) : 0;
    Layout target = kind == 1 ? WithRandomParts(rng, mesh, target_spec, shape, dtype)
                              : target_spec.ToLayout(shape, dtype).value();
    if (kind == 2)
      if (auto pair = ReduceScatterIntoParts(rng, mesh, spec, shape, dtype)) std::tie(source, target) = *pair;
    PlannerOptions o;
    o.meshes = {mesh};
    const Result<PlanResult> planned = PlanReshard(source, target, o);
    ASSERT_TRUE(planned.ok()) << planned.status();
    const CollectivePlan& plan = planned->plan;
    const std::string what = "iter " + std::to_string(iter) + " over " + mesh.ToString();
    CompileOptions reference;  // both forms, every step per message
    reference.group_patterns = false;
    const PlanProgram full = PlanProgram::Compile(plan, reference).value();
    for (CopyForms form : {CopyForms::kDirect, CopyForms::kStaged, CopyForms::kBoth}) {
      const bool staged = form != CopyForms::kDirect, direct = form != CopyForms::kStaged;
      CompileOptions co;
      co.copies = form;
      const PlanProgram p = PlanProgram::Compile(plan, co).value();
      ASSERT_EQ(p.steps().size(), full.steps().size()) << what;
      bool any = false, reduced_per_pattern = false;
      // Per plan step: whether each of its program steps is written per
      // pattern, and their pairs.
      std::map<int64_t, std::pair<bool, int64_t>> per_plan_step;
      for (size_t si = 0; si < p.steps().size(); ++si) {
        const StepProgram& step = p.steps()[si];
        const bool reduces = step.op == StepOp::kReduceScatter || step.op == StepOp::kAllReduce;
        const bool collective = step.op == StepOp::kAllGather || step.op == StepOp::kAllToAll || reduces;
        collectives += collective && form == CopyForms::kDirect;
        reducing += reduces && form == CopyForms::kDirect;
        const GroupCopies* gc = step.group_copies.get();
        auto [it, fresh] = per_plan_step.emplace(step.plan_step, std::pair(true, int64_t{0}));
        it->second.first &= gc != nullptr;
        if (gc == nullptr) continue;
        it->second.second += gc->Pairs();
        any = true;
        grouped += form == CopyForms::kDirect;
        reducing_grouped += reduces && form == CopyForms::kDirect;
        reduced_per_pattern |= gc->parts > 1;
        into_partial += form == CopyForms::kDirect && p.layouts()[si + 1].partial();
        groups_of_many += form == CopyForms::kDirect && static_cast<int64_t>(p.devices().size()) / gc->group_size >= 4;
        several_patterns += form == CopyForms::kDirect && gc->patterns.size() > 1;
        // The reducing half of a step reduces, in part order.
        EXPECT_EQ(gc->parts, step.reduces() ? step.reduction.parts : 1) << what;
        ASSERT_EQ(gc->begin.size(), static_cast<size_t>(gc->Pairs()) + 1) << what;
        ASSERT_EQ(gc->has_staged(), staged) << what;
        ASSERT_EQ(gc->has_direct, direct) << what;
        for (size_t i = 0; i < p.devices().size(); ++i) {
          const DeviceProgram& b = full.steps()[si].devices[i];
          const size_t m = static_cast<size_t>(gc->member[i]);
          EXPECT_EQ(gc->members[static_cast<size_t>(gc->group[i] * gc->group_size) + m], static_cast<int32_t>(i)) << what;
          const GroupCopies::Pattern& pat = gc->PatternOf(i);
          EXPECT_EQ(pat.received[m], b.recv_bytes) << what << " device " << b.device;
          EXPECT_EQ(pat.sent[m], std::accumulate(b.send_count.begin(), b.send_count.end(), int64_t{0}))
              << what << " device " << b.device;
          EXPECT_EQ(staged ? pat.staged[m] : b.send_bytes, b.send_bytes) << what << " device " << b.device;
        }
      }
      // One test decides: the memory estimate's and the compile's.
      for (const auto& [ps, grouped_pairs] : per_plan_step)
        ASSERT_EQ(GroupCopyPairs(plan, static_cast<size_t>(ps)),
                  grouped_pairs.first ? std::optional<int64_t>(grouped_pairs.second) : std::nullopt)
            << what << " plan step " << ps;
      if (!any) continue;
      // In process from the schedule and device by device (both forms of a
      // program with both); staged, also threads as ranks.
      for (int run = 0; run < 6; ++run) {
        const Transport transport = run < 2 ? Transport::kDirect : run < 4 ? Transport::kStaged : Transport::kRanks;
        if (transport == Transport::kDirect ? !direct : !staged) continue;
        if (run == 5) continue;
        RankChoice choice;
        if (run % 2 == 1) choice.max_scheduled_group_copies = 0;
        const Result<CheckReport> r = RunChecked(p, 2, transport, choice);
        ASSERT_TRUE(r.ok()) << what << ": " << r.status();
        EXPECT_TRUE(r->ok()) << what << ": " << r->first_problem;
        testing::ExpectPlannedTraffic(plan, p.devices(), r->stats.steps, what);
      }
      // A reducing step's floats, whose sums depend on the order of their
      // parts: the same bits as the per-message program's, every transport.
      if (form == CopyForms::kBoth && reduced_per_pattern && dtype == DType::kF32) {
        std::vector<std::vector<std::byte>> sources;
        for (int64_t device : p.devices()) sources.push_back(FloatSource(p.source(), device));
        for (const Transport t : {Transport::kDirect, Transport::kStaged, Transport::kRanks})
          EXPECT_TRUE(RunOn(p, sources, t) == RunOn(full, sources, t)) << what << " transport " << static_cast<int>(t);
        ++bits_compared;
      }
    }
  }
  EXPECT_GT(collectives, 400);
  EXPECT_GE(grouped, collectives * 95 / 100) << collectives;
  EXPECT_GT(several_patterns, 5);
  EXPECT_GT(groups_of_many, 40);
  EXPECT_GT(reducing, 100);
  EXPECT_GE(reducing_grouped, reducing * 95 / 100) << reducing;
  EXPECT_GT(into_partial, 0);  // (the planner mostly prefers a reducing exchange there)
  EXPECT_GT(bits_compared, 50);
}

// Uneven shards that fall unlike from group to group take a pattern each
// way they fall; an input tile held by two members of a group keeps its
// per-message program.
TEST(GroupCopies, GroupsThatFallUnlikeTakeTheirOwnPattern) {
  const Mesh mesh = Mesh::Create({{"x", 2}, {"y", 3}}).value();
  auto layout = [&](const char* spec, std::vector<int64_t> shape) {
    return ParseLayout(spec, shape, DType::kF32, mesh).value().layout;
  };
  auto make = [&](std::vector<int32_t> axes, const Layout& in, const Layout& out) {
    return MakeGroupCopies(mesh, axes, in, out, in.devices(), {}, {}, true, nullptr, /*with_copies=*/true);
  };
  // An all-gather over y of [12, 7]: dim 1 cut in 3, 3 and 1 in every group alike.
  const std::optional<GroupCopies> even = make({1}, layout("P('x', 'y')", {12, 7}), layout("P('x', None)", {12, 7}));
  ASSERT_TRUE(even.has_value());
  EXPECT_EQ(even->group_size, 3);
  ASSERT_EQ(even->patterns.size(), 1u);
  EXPECT_EQ(even->patterns[0].classes, 1);  // every member receives the same box
  EXPECT_EQ(even->patterns[0].received, (std::vector<int64_t>{6 * 4 * 4, 6 * 4 * 4, 6 * 6 * 4}));
  // Over x of [4, 7], y cutting dim 1 in 3, 3 and 1: the groups y=0 and
  // y=1 share a pattern, y=2 (boxes one column wide) has its own.
  const std::optional<GroupCopies> uneven = make({0}, layout("P('x', 'y')", {4, 7}), layout("P(None, 'y')", {4, 7}));
  ASSERT_TRUE(uneven.has_value());
  EXPECT_EQ(uneven->pattern_of, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(uneven->patterns[1].received, (std::vector<int64_t>{2 * 1 * 4, 2 * 1 * 4}));
  // Over x and y from shards replicated over y: three members hold each tile.
  EXPECT_FALSE(make({0, 1}, layout("P('x')", {12}), layout("P()", {12})).has_value());
  // The second of these, as a plan step, is written per group pattern.
  PlannerOptions o;
  o.meshes = {mesh};
  const CollectivePlan plan =
      PlanReshard(layout("P('x', 'y')", {4, 7}), layout("P(None, 'y')", {4, 7}), o).value().plan;
  ASSERT_EQ(plan.steps().size(), 1u);
  ASSERT_EQ(plan.steps()[0].op, StepOp::kAllGather);
  EXPECT_EQ(GroupCopyPairs(plan, 0), std::optional<int64_t>(2 * 2));  // 2 patterns of 1 class by 2 senders
}

// A reduce-scatter and an all-reduce (both its program steps) over mesh
// groups are one pattern each: every member's box of its own part, applied
// in part order with part 0's writing; a group whose members hold an empty
// tile (all of them part 0 of it, as the layout states it) is no exception.
TEST(GroupCopies, ReducingStepsTakeEveryPartOfTheirGroup) {
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  auto plan_of = [&](const char* from, const char* to, std::vector<int64_t> shape) {
    return PlanReshard(ParseLayout(from, shape, DType::kS32, mesh).value().layout,
                       ParseLayout(to, shape, DType::kS32, mesh).value().layout, o)
        .value()
        .plan;
  };
  auto run_exactly = [](const PlanProgram& p) {
    for (const Transport t : {Transport::kDirect, Transport::kStaged, Transport::kRanks}) {
      const Result<CheckReport> r = RunChecked(p, 2, t);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->ok()) << r->first_problem;
    }
  };
  // f32[16] from partial sums over x into shards over x: a reduce-scatter
  // over x in each of the two y groups, one pattern.
  const CollectivePlan rs = plan_of("P(None, unreduced={'x'})", "P('x')", {16});
  ASSERT_EQ(rs.steps().size(), 1u);
  ASSERT_EQ(rs.steps()[0].op, StepOp::kReduceScatter);
  const PlanProgram rs_program = PlanProgram::Compile(rs).value();
  const GroupCopies* gc = rs_program.steps()[0].group_copies.get();
  ASSERT_NE(gc, nullptr);
  EXPECT_EQ(gc->parts, 4);
  ASSERT_EQ(gc->patterns.size(), 1u);
  const GroupCopies::Pattern& pat = gc->patterns[0];
  EXPECT_EQ(pat.part_rank, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pat.part_order, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pat.parts_in, 4);
  EXPECT_EQ(pat.classes, 4);
  EXPECT_EQ(pat.received, (std::vector<int64_t>(4, 3 * 4 * 4)));  // 3 boxes of 4 elements
  EXPECT_EQ(GroupCopyPairs(rs, 0), std::optional<int64_t>(4 * 4));
  run_exactly(rs_program);
  // Into replicas: an all-reduce, through its ring pieces, both halves
  // patterns.
  const CollectivePlan ar = plan_of("P(None, unreduced={'x'})", "P(None)", {16});
  ASSERT_EQ(ar.steps().size(), 1u);
  ASSERT_EQ(ar.steps()[0].op, StepOp::kAllReduce);
  const PlanProgram ar_program = PlanProgram::Compile(ar).value();
  ASSERT_EQ(ar_program.steps().size(), 2u);
  ASSERT_NE(ar_program.steps()[0].group_copies, nullptr);
  ASSERT_NE(ar_program.steps()[1].group_copies, nullptr);
  EXPECT_EQ(ar_program.steps()[0].group_copies->parts, 4);
  EXPECT_EQ(ar_program.steps()[1].group_copies->parts, 1);
  EXPECT_EQ(GroupCopyPairs(ar, 0), ar_program.steps()[0].group_copies->Pairs() + ar_program.steps()[1].group_copies->Pairs());
  run_exactly(ar_program);
  // [3, 4] with rows over x: x=3 holds no row, so its y group's members are
  // all part 0 of an empty tile; the reduce-scatter over y is still written
  // per pattern, one per way the groups fall.
  auto layout = [&](const char* spec) { return ParseLayout(spec, {3, 4}, DType::kS32, mesh).value().layout; };
  const Layout in = layout("P('x', None, unreduced={'y'})"), out = layout("P('x', 'y')");
  const std::optional<GroupCopies> uneven =
      MakeGroupCopies(mesh, {1}, in, out, in.devices(), {}, {}, true, nullptr, /*with_copies=*/true);
  ASSERT_TRUE(uneven.has_value());
  ASSERT_EQ(uneven->patterns.size(), 2u);
  EXPECT_EQ(uneven->pattern_of, (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(uneven->patterns[0].received, (std::vector<int64_t>{2 * 4, 2 * 4}));  // the other half row
  EXPECT_EQ(uneven->patterns[1].received, (std::vector<int64_t>{0, 0}));
  // From partial sums over x and y to shards over x, partial over y: each
  // y group reduce-scatters its own four parts into its own target part,
  // one pattern for both (their parts differ, their ranks do not).
  const Layout both = ParseLayout("P(None, unreduced={'x', 'y'})", {16}, DType::kS32, mesh).value().layout;
  const Layout over_y = ParseLayout("P('x', unreduced={'y'})", {16}, DType::kS32, mesh).value().layout;
  const std::optional<GroupCopies> into_parts =
      MakeGroupCopies(mesh, {0}, both, over_y, both.devices(), {}, {}, true, nullptr, /*with_copies=*/true);
  ASSERT_TRUE(into_parts.has_value());
  EXPECT_EQ(into_parts->parts, 8);
  ASSERT_EQ(into_parts->patterns.size(), 1u);
  EXPECT_EQ(into_parts->patterns[0].parts_in, 4);
  EXPECT_EQ(into_parts->patterns[0].part_rank, (std::vector<int32_t>{0, 1, 2, 3}));
  // Over y instead, each x group's parts are routed to both of y's target
  // parts: not a pattern.
  EXPECT_FALSE(MakeGroupCopies(mesh, {1}, both, over_y, both.devices(), {}, {}, true, nullptr, true).has_value());
}

}  // namespace
}  // namespace reshard
