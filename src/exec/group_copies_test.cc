// GroupCopies: structured steps' direct copies once per group pattern, on
// random meshes of up to 64 devices (many groups) and random shapes (even
// and uneven), against the per-message program of the same plan.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>

#include "exec/exec_checker.h"
#include "exec/group_copies.h"
#include "reshard/notation.h"
#include "reshard/device_program.h"
#include "reshard/named_sharding.h"
#include "reshard/planner.h"
#include "testing/planned_traffic.h"
#include "testing/random_named.h"

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

// Every all-gather and all-to-all over mesh groups that compiles per group
// pattern, in either form, moves each device's bytes as the per-message
// program does and runs exactly, at the planned bytes: in process from the
// executor's schedule and device by device, and staged also with threads as
// ranks (each expanding its own messages); GroupCopyPairs says which steps
// compile so.
TEST(GroupCopies, RandomStructuredStepsMatchTheirMessages) {
  std::mt19937_64 rng(20261205);
  int grouped = 0, collectives = 0, groups_of_many = 0, several_patterns = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const Mesh mesh = RandomMesh(rng);
    const size_t rank = 1 + rng() % 3;
    std::vector<int64_t> shape;
    // Mostly multiples of 12 (even over axes of 1 to 4), some uneven.
    for (size_t d = 0; d < rank; ++d)
      shape.push_back(rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % 13) : 12 * (1 + static_cast<int64_t>(rng() % 2)));
    const DType dtype = rng() % 2 ? DType::kF32 : DType::kS8;
    const Layout source = testing::RandomSpec(rng, mesh, rank).ToLayout(shape, dtype).value();
    const Layout target = testing::RandomSpec(rng, mesh, rank).ToLayout(shape, dtype).value();
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
      bool any = false;
      for (size_t si = 0; si < p.steps().size(); ++si) {
        const StepProgram& step = p.steps()[si];
        const bool collective = step.op == StepOp::kAllGather || step.op == StepOp::kAllToAll;
        collectives += collective && form == CopyForms::kDirect;
        const GroupCopies* gc = step.group_copies.get();
        // One test decides: the memory estimate's and the compile's.
        const std::optional<int64_t> pairs =
            static_cast<int64_t>(si) == step.plan_step ? GroupCopyPairs(plan, si) : std::nullopt;
        ASSERT_EQ(pairs.has_value(), gc != nullptr) << what << " step " << si;
        if (gc == nullptr) continue;
        any = true;
        grouped += form == CopyForms::kDirect;
        groups_of_many += form == CopyForms::kDirect && static_cast<int64_t>(p.devices().size()) / gc->group_size >= 4;
        several_patterns += form == CopyForms::kDirect && gc->patterns.size() > 1;
        ASSERT_EQ(*pairs, gc->Pairs()) << what;
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
    }
  }
  EXPECT_GT(collectives, 400);
  EXPECT_GE(grouped, collectives * 95 / 100) << collectives;
  EXPECT_GT(several_patterns, 5);
  EXPECT_GT(groups_of_many, 40);
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

}  // namespace
}  // namespace reshard
