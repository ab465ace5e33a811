#include "exec/simulator.h"

#include <gtest/gtest.h>

#include "reshard/notation.h"

namespace reshard {
namespace {

// The simulator must catch a wrong plan: here, stats that understate the
// peak, and a plan compared against another pair of layouts.
TEST(Simulator, CatchesUnderstatedPeak) {
  Layout src = ParseLayout("{devices=[4]<=[4]}", {16}, DType::kF32, std::nullopt)->layout;
  Layout dst = ParseLayout("{devices=[4]3,2,1,0}", {16}, DType::kF32, std::nullopt)->layout;
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats stats = ComputeStats(ex);
  ExchangePlan plan = ex.Plan();
  EXPECT_TRUE(Simulate(plan, stats).ok());
  stats.per_device[1].peak_bytes -= 1;
  SimulationReport r = Simulate(plan, stats);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.peak_excess_devices, 1);
  EXPECT_NE(r.first_problem.find("device 1"), std::string::npos);
}

TEST(Simulator, CatchesMissingElements) {
  // Run only device 0's part of a plan: device 1 needs data from device 2,
  // which that part does not carry.
  Layout src = ParseLayout("{devices=[3]<=[3]}", {9}, DType::kF32, std::nullopt)->layout;
  Layout dst = ParseLayout("{devices=[3]2,0,1}", {9}, DType::kF32, std::nullopt)->layout;
  Exchange ex = Exchange::Create(src, dst).value();
  ExchangePlan one_device = ex.DevicePlan(0);
  SimulationReport r = Simulate(one_device, ComputeStats(ex));
  EXPECT_FALSE(r.ok());
  EXPECT_GT(r.mismatches, 0);
  EXPECT_NE(r.first_problem.find("never written"), std::string::npos);
}

TEST(Simulator, RefusesPlansTooLargeToHold) {
  Layout src = ParseLayout("{devices=[2]<=[2]}", {int64_t{1} << 27}, DType::kS8, std::nullopt)->layout;
  Layout dst = ParseLayout("{devices=[2]1,0}", {int64_t{1} << 27}, DType::kS8, std::nullopt)->layout;
  Exchange ex = Exchange::Create(src, dst).value();
  SimulationReport r = Simulate(ex.Plan(), ComputeStats(ex));
  EXPECT_TRUE(r.too_large);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace reshard
