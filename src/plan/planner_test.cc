#include "reshard/planner.h"

#include <gtest/gtest.h>

#include "reshard/notation.h"
#include "reshard/simulator.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, std::optional<Mesh> mesh = std::nullopt) {
  Result<ParsedLayout> p = ParseLayout(text, shape, DType::kF32, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

TEST(Planner, CanonicalCaseIsOneAllToAll) {
  Layout src = Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16});
  Layout dst = Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16});
  Result<PlanResult> r = PlanReshard(src, dst, PlannerOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const CollectivePlan& plan = r->plan;
  for (const PlanCandidate& c : r->candidates) {
    std::string s;
    for (auto& x : c.steps) s += x + "; ";
    std::cerr << c.note << " " << c.time_us << " " << s << "\n";
  }
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_EQ(plan.steps()[0].op, StepOp::kAllToAll);
  EXPECT_EQ(plan.steps()[0].group_size, 8);
  EXPECT_EQ(plan.totals().max_recv_bytes, 1792);
  EXPECT_EQ(plan.totals().total_bytes, 14336);
  ASSERT_EQ(r->baselines.size(), 2u);
  EXPECT_EQ(r->baselines[0].name, "full_rematerialization");
  EXPECT_EQ(r->baselines[0].max_recv_bytes, 14336);
  EXPECT_EQ(r->baselines[1].name, "shardy");
  EXPECT_EQ(r->baselines[1].max_recv_bytes, 2560);
  EXPECT_EQ(r->baselines[1].collectives, 2);
  SimulationReport sim = SimulatePlan(plan);
  EXPECT_TRUE(sim.ok()) << sim.first_problem;
  EXPECT_GE(sim.elements_checked, 4096);
}

}  // namespace
}  // namespace reshard
