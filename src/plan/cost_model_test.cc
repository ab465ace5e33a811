// The cost model's values against docs/cost_model.md ("Worked values"): each
// row is a step priced by hand from the formulas there, with the default
// topology parameters, and checked through the code that prices plans.
#include "plan/cost_model.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "plan/exchange_step.h"
#include "reshard/exchange.h"
#include "reshard/notation.h"
#include "reshard/planner.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, const std::vector<int64_t>& shape, const std::optional<Mesh>& mesh) {
  Result<ParsedLayout> p = ParseLayout(text, shape, DType::kF32, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

struct Row {
  const char* name;
  std::vector<Mesh::Axis> mesh;  // empty: the layouts name their devices
  std::vector<int64_t> shape;
  const char* from;
  const char* to;
  const char* topology;
  bool bandwidth_only;
  Strategy strategy;
  StepOp op;
  double time_us;  // as docs/cost_model.md works it out
};

// Flat: alpha 1 us, 25 GB/s (25000 B/us); copies 1000 GB/s (1e6 B/us); step
// latency 10 us. Canonical: f32[16,16,16] over x=4,y=2, 2048 B shards,
// all-to-all chunks of 256 B.
const Row kRows[] = {
    // 7 * (1 + 256/25000) + (1792 packed + 2048 laid out) / 1e6 + 10
    {"canonical all-to-all", {{"x", 4}, {"y", 2}}, {16, 16, 16}, "P('y', None, 'x')", "P(None, ('x','y'), None)",
     "flat", false, Strategy::kAuto, StepOp::kAllToAll, 17.07552},
    // the same messages, and the same copies: sent + target buffer
    {"canonical exchange", {{"x", 4}, {"y", 2}}, {16, 16, 16}, "P('y', None, 'x')", "P(None, ('x','y'), None)",
     "flat", false, Strategy::kExchange, StepOp::kExchange, 17.07552},
    // received bytes alone: 7 * 256 / 25000
    {"canonical, bandwidth only", {{"x", 4}, {"y", 2}}, {16, 16, 16}, "P('y', None, 'x')", "P(None, ('x','y'), None)",
     "flat", true, Strategy::kAuto, StepOp::kAllToAll, 0.07168},
    // f32[16] over x=4: 3 * (1 + 16/25000) + 64 laid out / 1e6 + 10
    {"all-gather", {{"x", 4}}, {16}, "P('x')", "P(None)", "flat", false, Strategy::kAuto, StepOp::kAllGather, 13.001984},
    // local: 16 B laid out, no latency
    {"slice", {{"x", 4}}, {16}, "P(None)", "P('x')", "flat", false, Strategy::kAuto, StepOp::kSlice, 0.000016},
    // 1 + 16/25000 + 10: received in place, no copies
    {"collective-permute", {{"x", 2}, {"y", 2}}, {16}, "P(('x','y'))", "P(('y','x'))", "flat", false, Strategy::kAuto,
     StepOp::kCollectivePermute, 11.00064},
    {"explicit permute", {}, {8}, "{devices=[2]0,1}", "{devices=[2]1,0}", "flat", false, Strategy::kAuto,
     StepOp::kCollectivePermute, 11.00064},
};

TEST(CostModel, WorkedValuesOfDocsCostModel) {
  for (const Row& row : kRows) {
    SCOPED_TRACE(row.name);
    std::optional<Mesh> mesh;
    if (!row.mesh.empty()) mesh = Mesh::Create(row.mesh).value();
    PlannerOptions o;
    if (mesh) o.meshes = {*mesh};
    o.topology = Topology::Parse(row.topology).value();
    if (row.bandwidth_only) o.topology = o.topology.BandwidthOnly();
    o.strategy = row.strategy;
    Result<PlanResult> r = PlanReshard(Parse(row.from, row.shape, mesh), Parse(row.to, row.shape, mesh), o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->plan.steps().size(), 1u);
    EXPECT_EQ(r->plan.steps()[0].op, row.op);
    EXPECT_NEAR(r->plan.steps()[0].time_us, row.time_us, 1e-9);
  }
}

// Topologies whose pairs differ, priced exactly (every device of the
// canonical exchange receives 7 messages of 256 B and sends 7).
TEST(CostModel, WorkedValuesAcrossNodesAndTori) {
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  const Exchange ex = Exchange::Create(Parse("P('y', None, 'x')", {16, 16, 16}, mesh),
                                       Parse("P(None, ('x','y'), None)", {16, 16, 16}, mesh))
                          .value();
  // nodes:4: 3 peers inside the node at 0.5 us and 450 GB/s, 4 outside at
  // 3 us and 25 GB/s: 3 * (0.5 + 256/450000) + 4 * (3 + 256/25000), plus
  // 3840 B of copies and the step latency.
  EXPECT_NEAR(DraftExchange(ex, Topology::Nodes(4), true).time_us,
              3 * (0.5 + 256.0 / 450000) + 4 * (3 + 256.0 / 25000) + 3840 / 1e6 + 10, 1e-9);
  EXPECT_NEAR(DraftExchange(ex, Topology::Nodes(4), true).time_us, 23.5465066667, 1e-9);
  // torus:8 (a ring): peers 1, 2, 3, 4, 3, 2, 1 hops away (16 in all), 2
  // links, 45 GB/s, 1 us + 0.1 us per hop: 7 + 1.6 + 256 * 16 / 90000.
  EXPECT_NEAR(DraftExchange(ex, Topology::Torus({8}), true).time_us, 7 + 1.6 + 256.0 * 16 / 90000 + 3840 / 1e6 + 10,
              1e-9);
  EXPECT_NEAR(DraftExchange(ex, Topology::Torus({8}), true).time_us, 18.6493511111, 1e-9);
}

TEST(CostModel, CopiesByStepKind) {
  EXPECT_EQ(StepCopiedBytes(StepOp::kAllToAll, 1792, 2048), 3840);
  EXPECT_EQ(StepCopiedBytes(StepOp::kExchange, 1792, 2048), 3840);
  EXPECT_EQ(StepCopiedBytes(StepOp::kAllGather, 48, 64), 64);
  EXPECT_EQ(StepCopiedBytes(StepOp::kCollectivePermute, 16, 16), 0);
  EXPECT_EQ(StepCopiedBytes(StepOp::kSlice, 0, 16), 16);
  const Topology flat = Topology::Flat(), bw = Topology::Flat().BandwidthOnly();
  EXPECT_EQ(DeviceMessageTime(flat, 3, 2), 3);  // full duplex: the larger side
  EXPECT_EQ(DeviceMessageTime(bw, 3, 2), 2);    // bandwidth only: receives
  EXPECT_DOUBLE_EQ(StepTime(flat, 1, 1000000, true), 1 + 1 + 10);
  EXPECT_DOUBLE_EQ(StepTime(flat, 1, 0, false), 1);
  EXPECT_EQ(StepTime(bw, 1, 1 << 30, true), 1);  // copies free, no latency
}

}  // namespace
}  // namespace reshard
