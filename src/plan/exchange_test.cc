#include "reshard/exchange.h"

#include <gtest/gtest.h>

#include "reshard/notation.h"
#include "reshard/plan_stats.h"
#include "reshard/simulator.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, std::optional<Mesh> mesh = std::nullopt,
             DType dtype = DType::kF32) {
  Result<ParsedLayout> p = ParseLayout(text, shape, dtype, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

// The canonical case: the numbers the README and the issue quote.
TEST(Exchange, CanonicalCaseIsOneAllToAllAtTheLowerBound) {
  Layout src = Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16});
  Layout dst = Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16});
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats s = ComputeStats(ex);
  EXPECT_EQ(s.devices, 8);
  EXPECT_EQ(s.collectives, 1);
  EXPECT_EQ(s.messages, 56);
  EXPECT_EQ(s.max_send_bytes, 1792);
  EXPECT_EQ(s.max_recv_bytes, 1792);
  EXPECT_EQ(s.total_bytes, 14336);
  EXPECT_EQ(s.local_bytes, 8 * 256);
  EXPECT_EQ(s.peak_bytes, 2048 + 2048 + 1792 + 1792);
  LowerBound lb = ComputeLowerBound(src, dst);
  EXPECT_EQ(lb.max_recv_bytes, 1792);
  EXPECT_EQ(lb.total_bytes, 14336);
  Baseline base = FullRematerialization(src, dst);
  EXPECT_EQ(base.max_recv_bytes, 14336);
  EXPECT_EQ(base.total_bytes, 114688);
  EXPECT_EQ(base.peak_bytes, 16384);
  ExchangePlan plan = ex.Plan();
  EXPECT_TRUE(Simulate(plan, s).ok());
  // Device 0 holds rows [0,8) x depth [0,4) and needs cols [0,2): it keeps
  // [0,8)x[0,2)x[0,4) and receives the rest of its 2048 bytes from the others.
  for (const Transfer& t : plan.transfers()) {
    if (t.from == 0 && t.to == 0) {
      EXPECT_EQ(plan.Boxes(t), (std::vector<Box>{Box{{{0, 8}, {0, 2}, {0, 4}}}}));
    }
  }
}

TEST(Exchange, ReplicatedSourceSpreadsSendersEvenly) {
  // Source replicated over 4 devices; target split 8 ways over 8 new devices.
  Mesh src_mesh = Mesh::Create({{"r", 4}}, {4, 5, 6, 7}).value();
  Layout src = Parse("{replicated}", {64}, src_mesh);
  Layout dst = Parse("{devices=[8]4,5,6,7,8,9,10,11}", {64});
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats s = ComputeStats(ex);
  // Devices 4..7 hold the data already; 8..11 each need 32 bytes, one per holder.
  EXPECT_EQ(s.total_bytes, 4 * 32);
  EXPECT_EQ(s.max_send_bytes, 32);
  EXPECT_EQ(s.messages, 4);
  EXPECT_TRUE(Simulate(ex.Plan(), s).ok());
}

TEST(Exchange, LptBalancesUnequalReceivers) {
  // Two holders of the whole array; receivers need 6, 3, 3, 2 elements.
  Mesh src_mesh = Mesh::Create({{"r", 2}}).value();
  Layout src = Parse("{replicated}", {14}, src_mesh);
  DimGrid g = DimGrid::FromCuts({0, 6, 9, 12, 14});
  Layout dst = Layout::Create({14}, DType::kF32, {g}, {{10, 0}, {11, 1}, {12, 2}, {13, 3}}).value();
  PlanStats s = ComputeStats(Exchange::Create(src, dst).value());
  // LPT: 6 -> h0, 3 -> h1, 3 -> h1, 2 -> h0 (tie at 6, lower id): loads 8 and 6.
  // No split of {6,3,3,2} does better than 8.
  EXPECT_EQ(s.max_send_bytes, 8 * 4);
  EXPECT_EQ(s.total_bytes, 14 * 4);
}

TEST(Exchange, DisjointDeviceSetsAndMaximal) {
  Layout src = Parse("{maximal device=0}", {5, 3});
  Layout dst = Parse("{devices=[2,2]1,2,3,4}", {5, 3});
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats s = ComputeStats(ex);
  EXPECT_EQ(s.total_bytes, 15 * 4);
  EXPECT_EQ(s.max_send_bytes, 15 * 4);
  EXPECT_EQ(s.max_recv_bytes, 3 * 2 * 4);
  EXPECT_TRUE(Simulate(ex.Plan(), s).ok());
  EXPECT_EQ(ComputeStats(ex.DevicePlan(0)).per_device[0].send_bytes, 15 * 4);
}

TEST(Exchange, ScalarsAndNoOps) {
  Layout a = Parse("{maximal device=2}", {});
  Layout b = Parse("{maximal device=5}", {});
  PlanStats s = ComputeStats(Exchange::Create(a, b).value());
  EXPECT_EQ(s.total_bytes, 4);
  Layout c = Parse("{devices=[4]<=[4]}", {10});
  PlanStats same = ComputeStats(Exchange::Create(c, c).value());
  EXPECT_EQ(same.collectives, 0);
  EXPECT_EQ(same.local_bytes, 40);
}

TEST(Exchange, RejectsMismatchedArrays) {
  EXPECT_FALSE(Exchange::Create(Parse("{devices=[2]<=[2]}", {4}), Parse("{devices=[2]<=[2]}", {6})).ok());
  EXPECT_FALSE(Exchange::Create(Parse("{devices=[2]<=[2]}", {4}), Parse("{devices=[2]<=[2]}", {4}, std::nullopt, DType::kF64)).ok());
}

TEST(Exchange, RefusesArraysWhoseByteCountsOverflow) {
  Mesh m = Mesh::Create({{"x", 4}}).value();
  Layout a = Parse("P('x')", {int64_t{1} << 62}, m, DType::kS8);
  Layout b = Parse("P()", {int64_t{1} << 62}, m, DType::kS8);
  EXPECT_FALSE(Exchange::Create(a, b).ok());
}

TEST(Exchange, BlockCyclicToTiled) {
  Layout src = Parse("blockcyclic(block=[2,3], grid=[2,2])", {9, 10});
  Layout dst = Parse("{devices=[4,1]<=[4]}", {9, 10});
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats s = ComputeStats(ex);
  EXPECT_EQ(s.total_bytes, ComputeLowerBound(src, dst).total_bytes);
  EXPECT_TRUE(Simulate(ex.Plan(), s).ok());
}

}  // namespace
}  // namespace reshard
