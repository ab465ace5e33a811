#include "reshard/exchange.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <span>
#include <tuple>

#include "reshard/notation.h"
#include "reshard/plan_stats.h"
#include "exec/simulator.h"
#include "plan/parts_into_memo.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, std::optional<Mesh> mesh = std::nullopt,
             DType dtype = DType::kF32) {
  Result<ParsedLayout> p = ParseLayout(text, shape, dtype, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

// OverlapIds holds ids inline up to kInline and on the heap beyond; it reads,
// copies, moves, compares and converts as the std::vector it replaces, at
// every length either side of the inline limit.
TEST(OverlapIds, BehavesAsAVector) {
  std::mt19937_64 rng(15);
  auto random_ids = [&rng]() {
    std::vector<int32_t> v(rng() % (2 * OverlapIds::kInline + 2));
    for (int32_t& x : v) x = static_cast<int32_t>(rng() % 4) - 1;
    return v;
  };
  for (int iter = 0; iter < 2000; ++iter) {
    const std::vector<int32_t> a = random_ids(), b = random_ids();
    OverlapIds x = a, y(b);
    ASSERT_EQ(std::vector<int32_t>(x), a);
    ASSERT_EQ(x.size(), a.size());
    ASSERT_EQ(x.empty(), a.empty());
    for (size_t d = 0; d < a.size(); ++d) ASSERT_EQ(x[d], a[d]);
    EXPECT_EQ(x == y, a == b);
    EXPECT_EQ(x < y, a < b);
    EXPECT_EQ(x > y, a > b);
    OverlapIds copy = x;
    EXPECT_EQ(copy, x);
    OverlapIds moved = std::move(copy);
    EXPECT_EQ(std::vector<int32_t>(moved), a);
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
    copy = y;  // reusable after a move
    EXPECT_EQ(std::vector<int32_t>(copy), b);
    moved = std::move(copy);
    EXPECT_EQ(std::vector<int32_t>(moved), b);
    const OverlapIds& self = x;
    x = self;
    EXPECT_EQ(std::vector<int32_t>(x), a);
    x = b;
    EXPECT_EQ(std::vector<int32_t>(x), b);
    x = std::span<const int32_t>(a);
    EXPECT_EQ(std::vector<int32_t>(x), a);
    if (!a.empty()) {  // from a span into itself: copied out before its storage changes
      x = std::span<const int32_t>(x.begin() + 1, x.end());
      EXPECT_EQ(std::vector<int32_t>(x), std::vector<int32_t>(a.begin() + 1, a.end()));
    }
    OverlapIds& alias = x;
    x = std::move(alias);  // a self-move keeps the value
    EXPECT_EQ(x.size(), a.empty() ? 0 : a.size() - 1);
  }
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

// Sends per device, from the whole plan.
std::map<int64_t, int64_t> SendsPerDevice(const Exchange& ex) {
  std::map<int64_t, int64_t> sends;
  for (const DeviceStats& d : ComputeStats(ex).per_device) sends[d.device] = d.sends;
  return sends;
}

TEST(Exchange, ReplicatedSourceSplitsMessagesExactlyAmongHolders) {
  // Three holders, eight receivers that hold nothing: 3, 3 and 2 messages,
  // the extra ones to the lowest ids (receiver k goes to holder k mod 3).
  Mesh src_mesh = Mesh::Create({{"r", 3}}).value();
  Layout src = Parse("{replicated}", {64}, src_mesh);
  Layout dst = Parse("{devices=[8]3,4,5,6,7,8,9,10}", {64});
  Exchange ex = Exchange::Create(src, dst).value();
  std::map<int64_t, int64_t> sends = SendsPerDevice(ex);
  EXPECT_EQ(sends[0], 3);
  EXPECT_EQ(sends[1], 3);
  EXPECT_EQ(sends[2], 2);
  ExchangePlan plan = ex.Plan();
  std::vector<int64_t> from;
  for (const Transfer& t : plan.transfers()) from.push_back(t.from);
  EXPECT_EQ(from, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2}));
  // Receiver 3 gets [0,8) from holder 0, receiver 4 [8,16) from holder 1, ...
  EXPECT_EQ(plan.transfers()[3].to, 4);
  EXPECT_EQ(plan.transfers()[0].to, 3);
  EXPECT_TRUE(Simulate(plan, ComputeStats(ex)).ok());
}

TEST(Exchange, ReplicatedSourceSkipsLocalCopiesAndStaysBalanced) {
  // Mesh a=2, b=4 (device 4a+b): rows over b, replicated over a -> columns
  // over all 8. Row block b is held by b and 4+b, which copy their own
  // columns locally; the other 6 receivers split 3 and 3. (Counting the local
  // copies as turns would give one holder 4 and the other 2: positions b and
  // 4+b have the same parity.)
  Mesh mesh = Mesh::Create({{"a", 2}, {"b", 4}}).value();
  Layout src = Parse("P('b', None)", {16, 16}, mesh);
  Layout dst = Parse("P(None, ('a', 'b'))", {16, 16}, mesh);
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats s = ComputeStats(ex);
  for (const DeviceStats& d : s.per_device) {
    EXPECT_EQ(d.sends, 3) << "device " << d.device;
    EXPECT_EQ(d.send_bytes, 3 * 4 * 2 * 4) << "device " << d.device;  // 4 rows x 2 columns of f32 each
    EXPECT_EQ(d.local_bytes, 4 * 2 * 4) << "device " << d.device;
  }
  EXPECT_EQ(s.total_bytes, ComputeLowerBound(src, dst).total_bytes);
  ExchangePlan plan = ex.Plan();
  EXPECT_TRUE(Simulate(plan, s).ok());
  for (int64_t dev = 0; dev < 8; ++dev) {
    std::vector<std::pair<int64_t, int64_t>> want, got;
    for (const Transfer& t : plan.transfers())
      if (t.from == dev || t.to == dev) want.push_back({t.from, t.to});
    const ExchangePlan part = ex.DevicePlan(dev);
    for (const Transfer& t : part.transfers()) got.push_back({t.from, t.to});
    EXPECT_EQ(got, want) << "device " << dev;
  }
}

TEST(Exchange, ReplicatedSourceBalancesCountsNotBytesWhenReceiversDiffer) {
  // Two holders of the whole array; receivers need 6, 3, 3 and 2 elements.
  // Messages alternate between the holders in target-tile order: 6 and 3 from
  // holder 0, 3 and 2 from holder 1. Counts are balanced (2 and 2); bytes are
  // 9 and 5, within the stated bound of ceil(4/2) = 2 largest messages (12).
  Mesh src_mesh = Mesh::Create({{"r", 2}}).value();
  Layout src = Parse("{replicated}", {14}, src_mesh);
  DimGrid g = DimGrid::FromCuts({0, 6, 9, 12, 14});
  Layout dst = Layout::Create({14}, DType::kF32, {g}, {{10, 0}, {11, 1}, {12, 2}, {13, 3}}).value();
  Exchange ex = Exchange::Create(src, dst).value();
  PlanStats s = ComputeStats(ex);
  EXPECT_EQ(s.per_device[0].sends, 2);
  EXPECT_EQ(s.per_device[1].sends, 2);
  EXPECT_EQ(s.per_device[0].send_bytes, 9 * 4);
  EXPECT_EQ(s.per_device[1].send_bytes, 5 * 4);
  EXPECT_LE(s.max_send_bytes, 2 * 6 * 4);
  EXPECT_EQ(s.total_bytes, 14 * 4);
  EXPECT_TRUE(Simulate(ex.Plan(), s).ok());
}

TEST(Exchange, ReplicatedSourceWithUnevenlyHeldTargetTilesKeepsTheStatedBound) {
  // Target tile 0 is held by 2 devices, tiles 1..3 by one each, so positions
  // have gaps (2 slots per tile): 0, 1 | 2 | 4 | 6. Holder k mod 2 takes
  // position k: holder 0 sends 4 messages, holder 1 one. The bound is
  // ceil(4 tiles x 2 slots / 2 holders) = 4; the optimum would be 3 and 2.
  Mesh src_mesh = Mesh::Create({{"r", 2}}).value();
  Layout src = Parse("{replicated}", {8}, src_mesh);
  DimGrid g = DimGrid::FromCuts({0, 2, 4, 6, 8});
  Layout dst = Layout::Create({8}, DType::kF32, {g}, {{10, 0}, {11, 0}, {12, 1}, {13, 2}, {14, 3}}).value();
  Exchange ex = Exchange::Create(src, dst).value();
  std::map<int64_t, int64_t> sends = SendsPerDevice(ex);
  EXPECT_EQ(sends[0], 4);
  EXPECT_EQ(sends[1], 1);
  ExchangePlan plan = ex.Plan();
  EXPECT_TRUE(Simulate(plan, ComputeStats(ex)).ok());
  for (int64_t dev : ex.devices()) {
    size_t mine = 0;
    for (const Transfer& t : plan.transfers()) mine += t.from == dev || t.to == dev ? 1 : 0;
    EXPECT_EQ(ex.DevicePlan(dev).transfers().size(), mine) << "device " << dev;
  }
}

// The case the quadratic sender rule was slow on, at 4096 devices: one
// device's part must be its share of the whole plan, streamed once (8.4 M
// transfers, never stored), and every holder sends (4096 - 2) / 2 messages.
TEST(Exchange, ReplicatedSourceAt4096DevicesOneDevicesPartIsItsShare) {
  const int64_t n = 4096;
  Mesh mesh = Mesh::Create({{"a", 2}, {"b", n / 2}}).value();
  Layout src = Parse("P('b', None)", {4096, 4096}, mesh);
  Layout dst = Parse("P(None, ('a', 'b'))", {4096, 4096}, mesh);
  Exchange ex = Exchange::Create(src, dst).value();
  const std::vector<int64_t> checked = {0, 1, n / 2 - 1, n / 2 + 1, n - 1};
  using Key = std::tuple<int64_t, int64_t, int64_t, std::vector<int32_t>>;
  std::map<int64_t, std::vector<Key>> want;
  std::vector<int64_t> sends(n, 0);
  ex.ForEachTransfer([&](const Transfer& t) {
    if (t.from != t.to) ++sends[t.from];
    for (int64_t dev : checked)
      if (t.from == dev || t.to == dev) want[dev].push_back({t.from, t.to, t.elements, t.overlaps});
  });
  for (int64_t dev = 0; dev < n; ++dev) ASSERT_EQ(sends[dev], (n - 2) / 2) << "device " << dev;
  for (int64_t dev : checked) {
    std::sort(want[dev].begin(), want[dev].end());
    std::vector<Key> got;
    const ExchangePlan part = ex.DevicePlan(dev);
    for (const Transfer& t : part.transfers()) got.push_back({t.from, t.to, t.elements, t.overlaps});
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got.size(), static_cast<size_t>(n / 2 + (n - 2) / 2)) << "device " << dev;  // receives + sends
    EXPECT_EQ(got, want[dev]) << "device " << dev;
  }
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

namespace reshard {
namespace {

// Sender groups: an all-gather over x of data replicated over y. Without
// groups the sender rule spreads senders over all holders, across y; with
// the groups of x (devices sharing y), every message stays inside its group
// and each device sends its whole shard to the other member, as the
// collective does. Both move exactly the same elements to each receiver.
TEST(Exchange, SenderGroupsKeepMessagesInsideTheirGroups) {
  const Mesh mesh = Mesh::Create({{"x", 2}, {"y", 4}}).value();
  const Layout src = Parse("P('x', None)", {8, 8}, mesh), dst = Parse("P(None, None)", {8, 8}, mesh);
  auto y_of = [&](int64_t device) { return mesh.GroupOf(device, {0}); };  // iota: device = position
  const Exchange grouped = Exchange::Create(src, dst, y_of).value();
  const PlanStats s = ComputeStats(grouped);
  int64_t messages = 0;
  grouped.ForEachTransfer([&](const Transfer& t) {
    if (t.from == t.to) return;
    ++messages;
    EXPECT_EQ(y_of(t.from), y_of(t.to)) << t.from << " -> " << t.to;
    EXPECT_EQ(t.elements, 32);  // a whole shard
  });
  EXPECT_EQ(messages, 8);
  for (const DeviceStats& d : s.per_device) {
    EXPECT_EQ(d.send_bytes, 32 * 4) << d.device;
    EXPECT_EQ(d.recv_bytes, 32 * 4) << d.device;
  }
  // Every device's part agrees with the whole.
  for (int64_t dev = 0; dev < 8; ++dev) {
    const ExchangePlan part = grouped.DevicePlan(dev);
    for (const Transfer& t : part.transfers()) {
      if (t.from != t.to) {
        EXPECT_EQ(y_of(t.from), y_of(t.to));
      }
    }
  }
  EXPECT_TRUE(Simulate(grouped.Plan(), s).ok());
  // Receivers: the same bytes with or without groups.
  const PlanStats plain = ComputeStats(Exchange::Create(src, dst).value());
  for (size_t i = 0; i < s.per_device.size(); ++i) EXPECT_EQ(plain.per_device[i].recv_bytes, s.per_device[i].recv_bytes);
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// A box sent to several receivers (the replicas of a target tile) is staged
// once: the peak counts it once, the messages each.
TEST(Exchange, ABoxSentToReplicasIsStagedOnce) {
  const Layout src = Parse("{maximal device=0}", {8});
  const Layout dst = Parse("{devices=[1,4]<=[4] last_tile_dim_replicate}", {8});
  const Exchange ex = Exchange::Create(src, dst).value();
  for (const PlanStats& s : {ComputeStats(ex), ComputeStats(ex.Plan())}) {
    const DeviceStats& d0 = s.per_device[0];
    EXPECT_EQ(d0.send_bytes, 3 * 32);
    EXPECT_EQ(d0.sends, 3);
    EXPECT_EQ(d0.staged_bytes, 32);
    EXPECT_EQ(d0.peak_bytes, 32 + 32 + 32);  // source, target, one staged box
    EXPECT_EQ(s.per_device[1].peak_bytes, 32 + 32);  // target and what it received
  }
  StagedBoxes staged;
  const ExchangePlan plan = ex.Plan();
  for (const Transfer& t : plan.transfers()) EXPECT_EQ(staged.Add(t), t.from != t.to && t.to == 1) << t.to;
  // Stager names the first message of a box, whatever it is numbered, for
  // every later message of that box; a local copy stages nothing.
  StagedBoxes stagers;
  int64_t message = 10;
  for (const Transfer& t : plan.transfers()) {
    const int64_t want = t.from == t.to ? -1 : 11;  // transfers ascend by receiver: 0 (local), then 1, 2, 3
    EXPECT_EQ(stagers.Stager(t, message++), want) << t.to;
    EXPECT_EQ(stagers.Add(t), false) << t.to;  // the box is recorded already
  }
}

// ForEachDeviceTransfer gives a device's sends box by box, so AddInRuns
// stages exactly what Add does, over random layouts in every notation and
// every device.
TEST(Exchange, DeviceSendsComeBoxByBox) {
  std::mt19937_64 rng(1204);
  int shared = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 8);
    std::vector<int64_t> shape;
    for (int d = 0; d < 1 + static_cast<int>(rng() % 3); ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 9));
    const Mesh mesh = Mesh::Create({{"x", n}, {"y", 2}}).value();
    const char* specs[] = {"P()", "P('x')", "P('y')", "P(('x','y'))", "P(('y','x'))", "P(None, 'x')", "P('y', 'x')"};
    const std::string a = specs[rng() % 7], b = specs[rng() % 7];
    Result<ParsedLayout> src = ParseLayout(a, shape, DType::kF32, mesh), dst = ParseLayout(b, shape, DType::kF32, mesh);
    if (!src.ok() || !dst.ok()) continue;
    // Plain, with sender groups (the senders of a structured step), and
    // routed (a filter on what each receiver gets, as a reducing step's).
    std::vector<Exchange> exchanges;
    exchanges.push_back(Exchange::Create(src->layout, dst->layout).value());
    exchanges.push_back(
        Exchange::Create(src->layout, dst->layout, [n](int64_t device) { return device % 2 == 0 ? device % n : -1; })
            .value());
    exchanges.push_back(Exchange::CreateRouted(src->layout, dst->layout, [](int64_t tile, int64_t receiver) {
                          return (tile + receiver) % 3 != 0;
                        }).value());
    for (size_t k = 0; k < exchanges.size(); ++k)
      for (int64_t dev : exchanges[k].devices()) {
        StagedBoxes hashed, runs;
        int64_t by_hash = 0, by_runs = 0, sends = 0;
        exchanges[k].ForEachDeviceTransfer(dev, [&](const Transfer& t) {
          if (t.from != dev || t.to == dev) return;
          ++sends;
          by_hash += hashed.Add(t);
          by_runs += runs.AddInRuns(t);
        });
        EXPECT_EQ(by_runs, by_hash) << a << " -> " << b << " exchange " << k << " device " << dev;
        shared += by_hash < sends;
      }
  }
  EXPECT_GT(shared, 50);  // boxes sent to several receivers
}

// Whatever the layouts, a partial target's reduction of what the routes
// leave in its parts is the source's reduction of its parts: checked on
// random part placements, op pairs and part values (small integers, so every
// sum is exact in double).
TEST(Exchange, RoutedPartsReduceToTheSourcesReduction) {
  std::mt19937_64 rng(17);
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  auto reduce = [](const std::vector<double>& v, ReduceOp op) {
    double r = v.front();
    for (size_t i = 1; i < v.size(); ++i)
      r = op == ReduceOp::kMax ? std::max(r, v[i]) : op == ReduceOp::kMin ? std::min(r, v[i]) : r + v[i];
    return op == ReduceOp::kAvg ? r / static_cast<double>(v.size()) : r;
  };
  for (int c = 0; c < 3000; ++c) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 8);  // devices 0..n-1, one tile
    auto draw = [&](bool partial) {
      const int64_t parts = partial ? 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - 1)) : 1;
      std::vector<DeviceTile> placement;
      for (int64_t d = 0; d < n; ++d) placement.push_back({d, 0, parts > 1 ? d % parts : 0});
      std::shuffle(placement.begin(), placement.end(), rng);  // which device holds which part
      for (int64_t d = 0; d < n; ++d) placement[static_cast<size_t>(d)].device = d;
      const Reduction r{ops[rng() % 4], parts};
      return Layout::Create({4}, DType::kF64, {DimGrid::Ceil(4, 1)}, placement, parts > 1 ? r : Reduction{});
    };
    const bool source_partial = rng() % 4 != 0;
    Result<Layout> src = draw(source_partial && n >= 2), dst = draw(n >= 2);
    ASSERT_TRUE(src.ok() && dst.ok());
    if (!dst->partial()) continue;
    const PartRoutes routes = Exchange::RouteParts(*src, *dst);
    const int64_t P = src->reduction().parts, Q = dst->reduction().parts;
    ASSERT_EQ(static_cast<int64_t>(routes.to.size()), P);
    std::vector<double> parts;
    for (int64_t p = 0; p < P; ++p) parts.push_back(static_cast<double>(static_cast<int64_t>(rng() % 201) - 100));
    std::vector<double> held;  // what each target part holds
    PartsIntoMemo memo(routes);
    for (int64_t q = Q - 1; q >= 0; --q) ASSERT_EQ(memo.Into(q), routes.PartsInto(q)) << "case " << c;
    for (int64_t q = 0; q < Q; ++q) {
      const std::vector<int64_t> in = routes.PartsInto(q);
      ASSERT_EQ(memo.Into(q), in) << "case " << c;  // asked again: the memo's, after later parts were added
      if (in.empty()) {  // the identity (avg's is 0: its parts scale what they hold)
        ASSERT_TRUE(routes.fill != ReduceOp::kAvg || routes.scale == Q) << "case " << c;
        held.push_back(routes.fill == ReduceOp::kMax ? -1e300 : routes.fill == ReduceOp::kMin ? 1e300 : 0);
        continue;
      }
      std::vector<double> got;
      for (int64_t p : in) got.push_back(parts[static_cast<size_t>(p)]);
      const double combined = reduce(got, routes.combine);
      // avg combines only where a device gets every part.
      if (routes.combine == ReduceOp::kAvg) {
        ASSERT_EQ(static_cast<int64_t>(in.size()), P);
      }
      held.push_back(combined * static_cast<double>(routes.scale));
    }
    // Only an avg target scales, by its part count, unless avg parts go one to one.
    const bool one_to_one = src->partial() && src->reduction().op == ReduceOp::kAvg && P == Q;
    EXPECT_EQ(routes.scale, dst->reduction().op == ReduceOp::kAvg && !one_to_one ? Q : 1) << "case " << c;
    EXPECT_DOUBLE_EQ(reduce(held, dst->reduction().op), reduce(parts, src->partial() ? src->reduction().op : ReduceOp::kSum))
        << "case " << c << ": " << P << " " << ReduceOpName(src->reduction().op) << " parts into " << Q << " "
        << ReduceOpName(dst->reduction().op);
    // Each part's exchange delivers every element of the devices it is routed to, once.
    Result<std::vector<Exchange>> ex = Exchange::CreateReducing(*src, *dst);
    if (*src == *dst) continue;
    ASSERT_TRUE(ex.ok()) << ex.status();
    ASSERT_EQ(static_cast<int64_t>(ex->size()), P);
  }
}

// A part goes to the target part whose devices hold it: moving partial sums
// between layouts of the same parts moves no part between devices.
TEST(Exchange, PartsStayWhereTheTargetKeepsThem) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  const Layout src = Parse("P(None, None, unreduced={'x'})", {16, 16}, m);
  const Layout dst = Parse("P('y', None, unreduced={'x'})", {16, 16}, m);
  const PartRoutes r = Exchange::RouteParts(src, dst);
  for (int64_t p = 0; p < 4; ++p) EXPECT_EQ(r.to[static_cast<size_t>(p)], dst.PartOf(m.device(p * 2))) << p;
  std::vector<Exchange> ex = Exchange::CreateReducing(src, dst).value();
  for (const Exchange& e : ex) EXPECT_EQ(ComputeStats(e).max_recv_bytes, 0);
}

// Tile routes: a plain source into a partial target keeps every element
// where some device of the target keeps it, so rows into a partial sum of
// the whole array move nothing (whole routing gathers 7/8 of it).
TEST(Exchange, TilesStayWhereTheTargetKeepsThem) {
  const Mesh x8 = Mesh::Create({{"x", 8}}).value(), x4y2 = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  for (const auto& [from, to, m] : {std::tuple("P('x', None)", "P(None, None, unreduced={'x'})", x8),
                                    std::tuple("P('x', 'y')", "P(None, 'y', unreduced={'x'})", x4y2)}) {
    const Layout src = Parse(from, {16, 16}, m), dst = Parse(to, {16, 16}, m);
    ASSERT_TRUE(dst.partial());
    const PartRoutes r = Exchange::RouteParts(src, dst);
    ASSERT_TRUE(r.tile_to != nullptr);
    std::vector<Exchange> ex = Exchange::CreateReducing(src, dst).value();
    ASSERT_EQ(ex.size(), 1u);
    EXPECT_EQ(ComputeStats(ex[0]).max_recv_bytes, 0);
    for (int64_t d : dst.devices()) EXPECT_TRUE(r.Fills(dst, d)) << d;
  }
}

// An avg target's parts hold their share times the part count, so rows
// into [Partial("avg")] stay where they are; but not in f16, whose range
// ends at 65504: there every part holds the whole value (gathered).
TEST(Exchange, AvgTargetsScaleTheirPartsButNotInF16) {
  const Mesh m = Mesh::Create({{"x", 4}}).value();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kS32, DType::kF16}) {
    const Layout src = Parse("[Shard(0)]", {16, 16}, m, dt), dst = Parse("[Partial(\"avg\")]", {16, 16}, m, dt);
    const PartRoutes r = Exchange::RouteParts(src, dst);
    const bool f16 = dt == DType::kF16;
    EXPECT_EQ(r.scale, f16 ? 1 : 4) << DTypeName(dt);
    std::vector<Exchange> ex = Exchange::CreateReducing(src, dst).value();
    EXPECT_EQ(ComputeStats(ex[0]).max_recv_bytes, f16 ? 12 * 16 * 2 : 0) << DTypeName(dt);
  }
}

// Parts are numbered per target tile (by lowest holder): with the devices
// permuted, the devices of mesh row x are part 3 in one y column and part 2
// in the other, so each source tile is routed per target tile. Every
// device keeps its rows, in its columns (0 B; one target part per source
// tile received 4096 B here).
TEST(Exchange, TilesAreRoutedPerTargetTile) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}, {0, 1, 7, 3, 5, 2, 6, 4}).value();
  const Layout src = Parse("[Shard(0), Replicate()]", {16, 16, 16}, m);
  const Layout dst = Parse("#sdy.sharding<@mesh, [{}, {\"y\"}, {}], unreduced={\"x\"}>", {16, 16, 16}, m);
  ASSERT_NE(dst.PartOf(7), dst.PartOf(3));  // mesh row 1, columns 0 and 1
  const PartRoutes r = Exchange::RouteParts(src, dst);
  ASSERT_TRUE(r.tile_to != nullptr);
  std::vector<Exchange> ex = Exchange::CreateReducing(src, dst).value();
  EXPECT_EQ(ComputeStats(ex[0]).max_recv_bytes, 0);
}

// On random sources of several tiles, plain or partial, into partial
// targets: every element of every source part is routed to exactly one
// target part, and where the ops differ all parts of an element to the same
// one (so the target's reduction of its parts gives back the source's), each
// device receives exactly the contributions routed to it, holds the identity
// exactly where its box gets none, and tile routes of a plain source
// receive less than the whole source into one part.
TEST(Exchange, TileRoutesRouteEveryElementOnce) {
  std::mt19937_64 rng(23);
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
  int tiled = 0, tiled_partial = 0, tiled_other_op = 0;
  for (int c = 0; c < 3000; ++c) {
    const int64_t n = 2 + static_cast<int64_t>(rng() % 11);
    auto grid = [&](int64_t extent, int64_t most) { return DimGrid::Ceil(extent, 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(most))); };
    // Source: P parts (P = 1: no reduction), each with every tile of a 2-D
    // grid on a shuffled set of devices, replicas where devices are left.
    const int64_t P = c % 3 == 0 ? 1 : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(3, n)));
    std::vector<DimGrid> sd;
    do sd = {grid(6, 3), grid(5, 3)}; while (P * sd[0].tiles * sd[1].tiles > n);
    const int64_t st = static_cast<int64_t>(sd[0].tiles) * sd[1].tiles;
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t d = 0; d < n; ++d) perm[static_cast<size_t>(d)] = d;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<DeviceTile> sp;
    for (int64_t i = 0; i < n; ++i) sp.push_back({perm[static_cast<size_t>(i)], (i / P) % st, i % P});
    const ReduceOp top = ops[rng() % 4], sop = rng() % 2 ? top : ops[rng() % 4];
    Result<Layout> src = Layout::Create({6, 5}, DType::kF32, sd, sp, P > 1 ? Reduction{sop, P} : Reduction{});
    ASSERT_TRUE(src.ok()) << src.status();
    // Target: Q parts, each holding every tile of its own grid.
    const int64_t Q = 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - 1));
    std::vector<DimGrid> td;
    do td = {grid(6, 3), grid(5, 2)}; while (Q * td[0].tiles * td[1].tiles > n);
    const int64_t tt = static_cast<int64_t>(td[0].tiles) * td[1].tiles;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<DeviceTile> tp;
    for (int64_t i = 0; i < n; ++i) tp.push_back({perm[static_cast<size_t>(i)], (i / Q) % tt, i % Q});
    Result<Layout> dst = Layout::Create({6, 5}, DType::kF32, td, tp, Reduction{top, Q});
    ASSERT_TRUE(dst.ok()) << dst.status();
    if (*src == *dst) continue;
    const PartRoutes r = Exchange::RouteParts(*src, *dst);
    // An avg target is routed as a sum target (scaled), but avg parts into
    // as many avg parts go one to one.
    const ReduceOp as = top == ReduceOp::kAvg ? ReduceOp::kSum : top;
    const bool one_to_one = P > 1 && sop == ReduceOp::kAvg && top == ReduceOp::kAvg && P == Q;
    const bool together = P > 1 && sop != as && !one_to_one;
    if (r.tile_to) {
      ++tiled;
      tiled_partial += P > 1;
      tiled_other_op += together;
    }
    // The target tile element g lies in (parts are numbered per tile).
    auto target_tile = [&](int64_t g) {
      std::vector<int32_t> coords(2);
      for (int64_t d = 1, rest = g; d >= 0; --d) {
        const int64_t i = rest % dst->shape()[d];
        rest /= dst->shape()[d];
        const DimGrid& grid = dst->dim(d);
        const auto cell = std::upper_bound(grid.cuts.begin(), grid.cuts.end(), i) - grid.cuts.begin() - 1;
        coords[static_cast<size_t>(d)] = grid.cell_tile[static_cast<size_t>(cell)];
      }
      return dst->TileIndex(coords);
    };
    for (int64_t g = 0; g < 30; ++g) {
      std::vector<int64_t> into(static_cast<size_t>(P), 0);
      for (int64_t q = 0; q < Q; ++q) {
        const std::vector<int64_t> at = r.PartsAt(*src, q, target_tile(g), g);
        if (together) {
          ASSERT_TRUE(at.empty() || static_cast<int64_t>(at.size()) == P) << "case " << c << " element " << g;
        }
        for (int64_t p : at) ++into[static_cast<size_t>(p)];
      }
      for (int64_t p = 0; p < P; ++p) ASSERT_EQ(into[static_cast<size_t>(p)], 1) << "case " << c << " element " << g << " part " << p;
    }
    Result<std::vector<Exchange>> made = Exchange::CreateReducing(*src, *dst);
    ASSERT_TRUE(made.ok()) << "case " << c << ": " << made.status();
    const std::vector<Exchange>& ex = *made;
    ASSERT_EQ(static_cast<int64_t>(ex.size()), P) << "case " << c;
    for (int64_t d : dst->devices()) {
      int64_t routed = 0, box = 0, bare = 0;
      for (const Box& b : dst->DeviceBoxes(d))
        for (int64_t i = b.dims[0].lo; i < b.dims[0].hi; ++i)
          for (int64_t j = b.dims[1].lo; j < b.dims[1].hi; ++j) {
            ++box;
            const int64_t k = static_cast<int64_t>(r.PartsAt(*src, dst->PartOf(d), dst->TileOf(d), i * 5 + j).size());
            routed += k;
            bare += k == 0;
          }
      int64_t got = 0;
      for (const Exchange& e : ex) e.ForEachDeviceTransfer(d, [&](const Transfer& t) { got += t.to == d ? t.elements : 0; });
      EXPECT_EQ(got, routed) << "case " << c << " device " << d;
      // ReceivePlan: DevicePlan's transfers into d.
      for (const Exchange& e : ex) {
        std::vector<Transfer> into;
        const ExchangePlan device_plan = e.DevicePlan(d);
        for (const Transfer& t : device_plan.transfers())
          if (t.to == d) into.push_back(t);
        std::vector<Transfer> received = e.ReceivePlan(d).transfers();
        auto order = [](const Transfer& a, const Transfer& b) {
          return std::tie(a.from, a.to, a.overlaps) < std::tie(b.from, b.to, b.overlaps);
        };
        std::sort(into.begin(), into.end(), order);
        std::sort(received.begin(), received.end(), order);
        ASSERT_EQ(received.size(), into.size()) << "case " << c << " device " << d;
        for (size_t i = 0; i < into.size(); ++i) {
          EXPECT_EQ(received[i].from, into[i].from) << "case " << c << " device " << d;
          EXPECT_EQ(received[i].elements, into[i].elements) << "case " << c << " device " << d;
          EXPECT_EQ(received[i].overlaps, into[i].overlaps) << "case " << c << " device " << d;
        }
      }
      EXPECT_EQ(r.Fills(*dst, d), bare > 0) << "case " << c << " device " << d;
    }
    if (r.tile_to && P == 1) {
      const PlanStats tiles = ComputeStats(ex[0]);
      int64_t whole = INT64_MAX;  // the best whole routing
      for (int64_t q = 0; q < Q; ++q)
        whole = std::min(whole, ComputeStats(Exchange::Create(*src, dst->PartLayout(q)).value()).max_recv_bytes);
      EXPECT_LE(tiles.max_recv_bytes, whole) << "case " << c;
    }
  }
  EXPECT_GT(tiled, 300);
  EXPECT_GT(tiled_partial, 100);
  EXPECT_GT(tiled_other_op, 30);
}

}  // namespace
}  // namespace reshard
