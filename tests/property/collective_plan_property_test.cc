// Property test: collective plans between random named shardings (uneven
// extents, replication, permuted device ids, up to 3 mesh axes) and random
// explicit layouts, under every target, topology and the bandwidth-only
// model. Every plan is executed by the simulator bit for bit; no plan is
// costlier than a baseline; by bytes alone, plans meet the lower bound.
#include <gtest/gtest.h>

#include <random>

#include "reshard/emit.h"
#include "reshard/named_sharding.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "exec/simulator.h"
#include "testing/random_named.h"
#include "testing/random_layouts.h"

namespace reshard {
namespace {

struct Case {
  Layout source, target;
  Mesh mesh;
  std::string text;
};

using testing::RandomNamedMesh;
using testing::RandomSpec;

std::string SpecText(const NamedSharding& s) {
  std::string out = "[";
  for (const auto& d : s.dims()) {
    out += "{";
    for (const AxisRef& r : d.axes) out += r.ToString(s.mesh());
    out += "}";
  }
  return out + "]";
}

Case RandomCase(std::mt19937_64& rng) {
  Mesh mesh = RandomNamedMesh(rng);
  const size_t rank = 1 + rng() % 3;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % (rng() % 2 ? 12 : 5)));
  const DType dtype = rng() % 2 ? DType::kF32 : DType::kBF16;
  NamedSharding s = RandomSpec(rng, mesh, rank), t = RandomSpec(rng, mesh, rank);
  std::string text = "shape [";
  for (int64_t e : shape) text += std::to_string(e) + ",";
  text += "] mesh " + mesh.ToString() + " " + SpecText(s) + " -> " + SpecText(t);
  return Case{s.ToLayout(shape, dtype).value(), t.ToLayout(shape, dtype).value(), mesh, text};
}

void CheckPlan(const Case& c, const PlannerOptions& o, const std::string& config) {
  Result<PlanResult> r = PlanReshard(c.source, c.target, o);
  ASSERT_TRUE(r.ok()) << config << " " << c.text << ": " << r.status();
  const CollectivePlan& plan = r->plan;
  SimulationReport sim = SimulatePlan(plan);
  ASSERT_TRUE(sim.ok()) << config << " " << c.text << ": " << sim.first_problem;
  for (const PlanStep& s : plan.steps()) {
    if (!HasRaggedExchange(o.target)) {
      ASSERT_NE(s.op, StepOp::kExchange) << config << " " << c.text;
    }
  }
  // Every step within the cap on every device, but the one-step exchange the
  // default cap never excludes, or where no plan fit it.
  const bool exempt = r->memory_cap_lifted || (plan.steps().size() == 1 && plan.steps()[0].op == StepOp::kExchange);
  if (!exempt && r->memory_cap_bytes > 0) {
    EXPECT_LE(plan.totals().peak_bytes, r->memory_cap_bytes) << config << " " << c.text;
  }
  // Never costlier than a baseline that fits the cap.
  for (const BaselineCost& b : r->baselines)
    if (r->memory_cap_bytes == 0 || b.peak_bytes <= r->memory_cap_bytes) {
      EXPECT_LE(plan.totals().time_us, b.time_us * (1 + 1e-9) + 1e-9) << config << " " << b.name << " " << c.text;
    }
}

TEST(CollectivePlanProperty, RandomNamedPairs) {
  std::mt19937_64 rng(20261130);
  int structured = 0, permutes = 0, gathers = 0, fused = 0;
  for (int i = 0; i < 1500; ++i) {
    const Case c = RandomCase(rng);
    PlannerOptions o;
    o.meshes = {c.mesh};
    CheckPlan(c, o, "default");
    o.target = PlanTarget::kJaxCpu;
    CheckPlan(c, o, "jax-cpu");
    {
      Result<PlanResult> r = PlanReshard(c.source, c.target, o);
      ASSERT_TRUE(r.ok());
      for (const PlanStep& s : r->plan.steps()) {
        structured += IsCollective(s.op);
        permutes += s.op == StepOp::kCollectivePermute;
        gathers += s.op == StepOp::kAllGather;
        fused += s.op == StepOp::kAllToAll && s.group_axes.size() > 1;
      }
      ASSERT_TRUE(EmitHlo(r->plan).ok()) << c.text;
      ASSERT_TRUE(EmitJax(r->plan).ok()) << c.text;
    }
    o.target = PlanTarget::kAny;
    o.topology = Topology::Nodes(2);
    CheckPlan(c, o, "nodes:2");
    // By bytes alone, with the ragged exchange available and no memory cap,
    // plans meet the lower bound.
    o.topology = Topology::Flat();
    o.topology = o.topology.BandwidthOnly();
    o.memory_cap_bytes = INT64_MAX;
    Result<PlanResult> r = PlanReshard(c.source, c.target, o);
    ASSERT_TRUE(r.ok()) << c.text;
    EXPECT_EQ(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes) << "bandwidth-only " << c.text;
    EXPECT_EQ(r->plan.totals().total_bytes, r->lower_bound.total_bytes) << "bandwidth-only " << c.text;
  }
  // The generator really produces every kind of step.
  EXPECT_GT(structured, 500);
  EXPECT_GT(permutes, 20);
  EXPECT_GT(gathers, 100);
  EXPECT_GT(fused, 20);
}

// Random layouts in every notation (the exchange property test's generator:
// block-cyclic, DTensor nesting, maximal, different device sets, rank 0):
// plans with and without the ragged exchange run exactly in the simulator.
TEST(CollectivePlanProperty, RandomLayoutsInEveryNotation) {
  std::mt19937_64 rng(11);
  int named = 0, explicit_permutes = 0, unsupported = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, 3, 512);
    const Mesh src_mesh = testing::RandomMesh(rng);
    const Mesh dst_mesh = iter % 3 == 0 ? testing::RandomMesh(rng, static_cast<int64_t>(iter % 5)) : src_mesh;
    const testing::RandomLayout a = testing::RandomLayoutText(rng, shape, src_mesh);
    const testing::RandomLayout b = testing::RandomLayoutText(rng, shape, dst_mesh);
    std::string dims;
    for (int64_t e : shape) dims += std::to_string(e) + ",";
    SCOPED_TRACE("iter " + std::to_string(iter) + ": shape [" + dims + "] " + a.text + " over " + src_mesh.ToString() +
                 " -> " + b.text + " over " + dst_mesh.ToString());
    Result<ParsedLayout> src = ParseLayout(a.text, shape, DType::kF32, a.mesh);
    Result<ParsedLayout> dst = ParseLayout(b.text, shape, DType::kF32, b.mesh);
    ASSERT_TRUE(src.ok() && dst.ok());
    for (PlanTarget target : {PlanTarget::kAny, PlanTarget::kJaxCpu}) {
      PlannerOptions o;
      o.target = target;
      o.meshes = {src_mesh, dst_mesh};
      Result<PlanResult> r = PlanReshard(src->layout, dst->layout, o);
      if (!r.ok()) {
        // Only where no structured plan exists and the target lacks the ragged exchange.
        ASSERT_EQ(target, PlanTarget::kJaxCpu) << r.status();
        ASSERT_EQ(r.status().code(), Status::Code::kNotSupported) << r.status();
        ++unsupported;
        continue;
      }
      const SimulationReport sim = SimulatePlan(r->plan);
      if (sim.too_large) continue;
      ASSERT_TRUE(sim.ok()) << sim.first_problem;
      named += r->plan.mesh().has_value();
      for (const PlanStep& st : r->plan.steps()) explicit_permutes += !r->plan.mesh() && st.op == StepOp::kCollectivePermute;
    }
  }
  EXPECT_GT(named, 300);
  EXPECT_GT(explicit_permutes, 5);
  EXPECT_GT(unsupported, 50);
}

}  // namespace
}  // namespace reshard
