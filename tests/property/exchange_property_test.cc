// Property test over thousands of random pairs of layouts (every notation,
// uneven, replicated, maximal, permuted, different device sets, block-cyclic,
// DTensor nesting, rank 0 and 1, empty shards): each plan runs in the
// reference simulator exactly, within its stated peak, and its traffic equals
// the lower bound. One device's part must equal its share of the whole plan,
// and a replicated source tile's holders share its messages evenly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "reshard/exchange.h"
#include "reshard/notation.h"
#include "reshard/plan_stats.h"
#include "exec/simulator.h"
#include "testing/random_layouts.h"

namespace reshard {
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, std::vector<int32_t>>;
Key KeyOf(const Transfer& t) { return {t.from, t.to, t.elements, t.overlaps}; }

TEST(ExchangeProperty, RandomPairsAreExactAndMinimal) {
  std::mt19937_64 rng(7);
  const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kS8, DType::kF64, DType::kC128};
  int64_t moved = 0;
  std::map<Notation, int> seen;  // source notations covered
  int disjoint = 0, replicated_sources = 0, rank0 = 0, empty_shards = 0, received_checked = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    const std::vector<int64_t> shape = testing::RandomShape(rng, iter % 10 == 0 ? 1 : 4, 1024);
    const DType dtype = kTypes[iter % 5];
    const Mesh src_mesh = testing::RandomMesh(rng);
    const Mesh dst_mesh = testing::RandomMesh(rng, iter % 4 == 0 ? static_cast<int64_t>(iter % 13) : 0);
    const testing::RandomLayout a = testing::RandomLayoutText(rng, shape, src_mesh);
    const testing::RandomLayout b = testing::RandomLayoutText(rng, shape, dst_mesh);
    SCOPED_TRACE("iter " + std::to_string(iter) + ": " + a.text + " over " + src_mesh.ToString() + " -> " + b.text + " over " +
                 dst_mesh.ToString());
    Result<ParsedLayout> src = ParseLayout(a.text, shape, dtype, a.mesh);
    Result<ParsedLayout> dst = ParseLayout(b.text, shape, dtype, b.mesh);
    ASSERT_TRUE(src.ok() && dst.ok());
    Result<Exchange> ex = Exchange::Create(src->layout, dst->layout);
    ASSERT_TRUE(ex.ok()) << ex.status();
    const PlanStats stats = ComputeStats(*ex);
    const LowerBound lb = ComputeLowerBound(src->layout, dst->layout);
    EXPECT_EQ(stats.max_recv_bytes, lb.max_recv_bytes);
    EXPECT_EQ(stats.total_bytes, lb.total_bytes);
    EXPECT_LE(stats.collectives, 1);
    const ExchangePlan plan = ex->Plan();
    const SimulationReport r = Simulate(plan, stats);
    ASSERT_TRUE(r.ok()) << r.first_problem;
    // The sender rule: every notation holds each target tile by the same
    // number of devices, so a replicated source tile's holders send counts
    // that differ by at most one.
    for (int64_t tile = 0; tile < src->layout.num_tiles(); ++tile) {
      if (src->layout.Holders(tile).size() < 2) continue;
      int64_t lo = INT64_MAX, hi = 0;
      for (int64_t dev : src->layout.Holders(tile)) {
        const int64_t at = std::lower_bound(ex->devices().begin(), ex->devices().end(), dev) - ex->devices().begin();
        lo = std::min(lo, stats.per_device[at].sends);
        hi = std::max(hi, stats.per_device[at].sends);
      }
      EXPECT_LE(hi - lo, 1) << "source tile " << tile;
    }
    moved += stats.total_bytes;
    ++seen[a.notation];
    disjoint += src->layout.devices() != dst->layout.devices() ? 1 : 0;  // different device sets
    replicated_sources += a.replication > 1 ? 1 : 0;
    rank0 += shape.empty() ? 1 : 0;
    for (int64_t dev : dst->layout.devices()) empty_shards += dst->layout.LocalBytes(dev) == 0 ? 1 : 0;

    if (iter % 7 == 0 && !ex->devices().empty()) {
      const int64_t dev = ex->devices()[rng() % ex->devices().size()];
      std::vector<Key> want, got;
      for (const Transfer& t : plan.transfers())
        if (t.from == dev || t.to == dev) want.push_back(KeyOf(t));
      const ExchangePlan part = ex->DevicePlan(dev);
      for (const Transfer& t : part.transfers()) got.push_back(KeyOf(t));
      EXPECT_EQ(got, want) << "device " << dev;
    }
    // What a device receives, found without the exchange's tables, is what
    // the exchange delivers to it: per source tile, its shared elements.
    if (iter % 3 == 0 && !dst->layout.devices().empty()) {
      const int64_t dev = dst->layout.devices()[rng() % dst->layout.devices().size()];
      std::vector<std::pair<int64_t, int64_t>> want, got;
      ex->ForEachDeviceTransfer(dev, [&](const Transfer& t) {
        if (t.to == dev) want.push_back({src->layout.TileOf(t.from), t.elements});
      });
      Exchange::ForEachReceived(src->layout, dst->layout, dev,
                                [&](int64_t tile, int64_t elements) { got.push_back({tile, elements}); });
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << "device " << dev;
      received_checked += want.empty() ? 0 : 1;
    }
  }
  // The generator must really cover every feature the test claims to.
  EXPECT_GT(moved, 0);
  EXPECT_EQ(seen.size(), 6u);
  for (const auto& [n, count] : seen) EXPECT_GT(count, 100) << NotationName(n);
  EXPECT_GT(disjoint, 100);
  EXPECT_GT(replicated_sources, 500);
  EXPECT_GT(rank0, 20);
  EXPECT_GT(empty_shards, 100);
  EXPECT_GT(received_checked, 1000);
}

}  // namespace
}  // namespace reshard
