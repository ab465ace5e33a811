#include "reshard/layout.h"

#include <gtest/gtest.h>

#include "reshard/block_cyclic.h"
#include "reshard/dtensor.h"
#include "reshard/hlo_sharding.h"
#include "reshard/named_sharding.h"

namespace reshard {
namespace {

Mesh XY() { return Mesh::Create({{"x", 4}, {"y", 2}}).value(); }

TEST(DimGrid, CeilFollowsXlaUnevenRule) {
  EXPECT_EQ(DimGrid::Ceil(10, 4).cuts, (std::vector<int64_t>{0, 3, 6, 9, 10}));
  EXPECT_EQ(DimGrid::Ceil(3, 4).cuts, (std::vector<int64_t>{0, 1, 2, 3, 3}));   // last shard empty
  EXPECT_EQ(DimGrid::Ceil(5, 4).cuts, (std::vector<int64_t>{0, 2, 4, 5, 5}));
  EXPECT_EQ(DimGrid::Ceil(0, 2).cuts, (std::vector<int64_t>{0, 0, 0}));
  // i * ceil(n/k) may overflow int64 near the top of the range; the cut clamps to n.
  const int64_t big = INT64_MAX;
  EXPECT_EQ(DimGrid::Ceil(big, 2).cuts, (std::vector<int64_t>{0, big / 2 + 1, big}));
}

TEST(DType, FloatingPointTypesAreTheOnesThatRound) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kF64, DType::kC64, DType::kC128})
    EXPECT_TRUE(IsFloatingPoint(t)) << DTypeName(t);
  for (DType t : {DType::kPred, DType::kS8, DType::kU8, DType::kS16, DType::kU16, DType::kS32, DType::kU32, DType::kS64,
                  DType::kU64})
    EXPECT_FALSE(IsFloatingPoint(t)) << DTypeName(t);
}

TEST(Layout, CanonicalSourceGivesDevice2xPlusYItsBox) {
  // P('y', None, 'x') on mesh x=4,y=2 = {devices=[2,1,4]<=[4,2]T(1,0)}.
  HloSharding s = HloSharding::Tile(TileAssignment::Iota({2, 1, 4}, {4, 2}, {1, 0}).value(), false);
  Layout l = s.ToLayout({16, 16, 16}, DType::kF32, std::nullopt).value();
  for (int64_t x = 0; x < 4; ++x)
    for (int64_t y = 0; y < 2; ++y) {
      const int64_t dev = 2 * x + y;
      ASSERT_EQ(l.DeviceBoxes(dev).size(), 1u);
      EXPECT_EQ(l.DeviceBoxes(dev)[0], (Box{{{8 * y, 8 * y + 8}, {0, 16}, {4 * x, 4 * x + 4}}}));
      EXPECT_EQ(l.LocalBytes(dev), 2048);
    }
  NamedSharding named = NamedSharding::Create(XY(), {{{AxisRef{1}}}, {}, {{AxisRef{0}}}}).value();
  EXPECT_TRUE(named.ToLayout({16, 16, 16}, DType::kF32).value() == l);
}

// Holders, TileCells and CellOffset read the same from the compact form
// (device i holds tile i; cell k is tile k: no CSR and no offsets stored)
// as from the full one: checked against the placement and the grid directly,
// on grids and placements of both kinds, in order and permuted, with cells
// shared by tiles.
TEST(Layout, CompactAndFullFormsReadAlike) {
  struct Case {
    std::vector<int64_t> cuts;
    std::vector<int32_t> cell_tile;
    int32_t tiles;
    std::vector<int64_t> device_of_tile;  // tile t -> the device holding it
  } cases[] = {
      {{0, 4, 8, 12, 16}, {0, 1, 2, 3}, 4, {0, 1, 2, 3}},          // compact on both counts
      {{0, 4, 8, 12, 16}, {0, 1, 2, 3}, 4, {3, 2, 1, 0}},          // devices permuted
      {{0, 4, 8, 12, 16}, {1, 0, 3, 2}, 4, {0, 1, 2, 3}},          // cells permuted
      {{0, 2, 4, 6, 8, 10, 12, 14, 16}, {0, 1, 0, 1, 0, 1, 0, 1}, 2, {5, 9}},  // block-cyclic: offsets
      {{0, 5, 10, 16}, {0, 1, 2}, 3, {0, 1, 2}},                   // uneven, compact
  };
  for (const Case& c : cases) {
    std::vector<DeviceTile> placement;
    for (size_t t = 0; t < c.device_of_tile.size(); ++t) placement.push_back({c.device_of_tile[t], static_cast<int64_t>(t), 0});
    placement.push_back({100, -1, 0});  // a device that holds nothing breaks "device i holds tile i"
    for (bool idle_device : {false, true}) {
      std::vector<DeviceTile> p = placement;
      if (!idle_device) p.pop_back();
      const Layout l = Layout::Create({16}, DType::kF32, {DimGrid{c.cuts, c.cell_tile, c.tiles}}, p).value();
      for (int32_t t = 0; t < c.tiles; ++t) {
        const std::span<const int64_t> holders = l.Holders(t);
        ASSERT_EQ(holders.size(), 1u);
        EXPECT_EQ(holders[0], c.device_of_tile[static_cast<size_t>(t)]);
        std::vector<int32_t> cells;
        for (size_t k = 0; k < c.cell_tile.size(); ++k)
          if (c.cell_tile[k] == t) cells.push_back(static_cast<int32_t>(k));
        const std::span<const int32_t> got = l.TileCells(0, t);
        EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), cells);
        int64_t offset = 0;
        for (int32_t k : cells) {
          EXPECT_EQ(l.CellOffset(0, k), offset);
          offset += c.cuts[static_cast<size_t>(k) + 1] - c.cuts[static_cast<size_t>(k)];
        }
      }
      if (idle_device) {
        EXPECT_EQ(l.TileOf(100), -1);
      }
    }
  }
}

// Every device holding one tile is stored without a tile list or holders:
// it reads as the listed form would, and a tile left to nobody is still
// refused where it holds elements.
TEST(Layout, EveryDeviceHoldingOneTileReadsAsListed) {
  const Layout rep = Layout::Create({6, 4}, DType::kF32, {DimGrid::Ceil(6, 1), DimGrid::Ceil(4, 1)},
                                    {{7, 0}, {2, 0}, {5, 0}}).value();
  EXPECT_EQ(rep.devices(), (std::vector<int64_t>{2, 5, 7}));
  const std::span<const int64_t> h = rep.Holders(0);
  EXPECT_EQ(std::vector<int64_t>(h.begin(), h.end()), (std::vector<int64_t>{2, 5, 7}));
  for (int64_t dev : {2, 5, 7}) {
    EXPECT_EQ(rep.TileOf(dev), 0);
    EXPECT_EQ(rep.LocalShape(dev), (std::vector<int64_t>{6, 4}));
  }
  EXPECT_EQ(rep.TileOf(3), -1);
  EXPECT_EQ(rep.LocalBytes(3), 0);
  // Tile 1 of Ceil(1, 2) is empty: nobody need hold it.
  const Layout one = Layout::Create({1}, DType::kF32, {DimGrid::Ceil(1, 2)}, {{0, 0}, {1, 0}}).value();
  EXPECT_TRUE(one.Holders(1).empty());
  EXPECT_EQ(one.Holders(0).size(), 2u);
  EXPECT_EQ(one.LocalShape(1), (std::vector<int64_t>{1}));
  // Tile 1 of Ceil(4, 2) holds elements.
  EXPECT_FALSE(Layout::Create({4}, DType::kF32, {DimGrid::Ceil(4, 2)}, {{0, 0}, {1, 0}}).ok());
  // Equal to the same holdings listed another way (a grid of one tile cut
  // into two cells, both tile 0).
  const Layout cut = Layout::Create({6, 4}, DType::kF32, {DimGrid{{0, 3, 6}, {0, 0}, 1}, DimGrid::Ceil(4, 1)},
                                    {{2, 0}, {5, 0}, {7, 0}}).value();
  EXPECT_EQ(cut, rep);
}

TEST(Layout, ValidationRejectsBrokenGrids) {
  EXPECT_FALSE(Layout::Create({4}, DType::kF32, {DimGrid::FromCuts({0, 2, 3})}, {{0, 0}, {1, 1}}).ok());  // cuts end early
  EXPECT_FALSE(Layout::Create({4}, DType::kF32, {DimGrid::Ceil(4, 2)}, {{0, 0}}).ok());  // tile 1 held by nobody
  EXPECT_FALSE(Layout::Create({4}, DType::kF32, {DimGrid::Ceil(4, 2)}, {{0, 0}, {0, 1}}).ok());  // device placed twice
  EXPECT_FALSE(Layout::Create({4}, DType::kF32, {DimGrid::Ceil(4, 2)}, {{0, 0}, {1, 2}}).ok());  // tile out of range
  EXPECT_FALSE(Layout::Create({4, 4}, DType::kF32, {DimGrid::Ceil(4, 2)}, {{0, 0}}).ok());        // rank mismatch
  EXPECT_FALSE(Layout::Create({int64_t{1} << 40, int64_t{1} << 40}, DType::kF32,
                              {DimGrid::Ceil(int64_t{1} << 40, 1), DimGrid::Ceil(int64_t{1} << 40, 1)}, {{0, 0}})
                   .ok());  // byte size overflows
  EXPECT_TRUE(Layout::Create({}, DType::kF32, {}, {{3, 0}}).ok());  // a scalar on device 3
}

TEST(Layout, EqualityIsTheDeviceToBoxMap) {
  // The same layout from three notations.
  Layout a = HloSharding::Tile(TileAssignment::Explicit({2, 2}, {0, 2, 1, 3}).value(), false)
                 .ToLayout({6, 6}, DType::kF32, std::nullopt)
                 .value();
  Mesh m = Mesh::Create({{"x", 2}, {"y", 2}}).value();
  Layout b = NamedSharding::Create(m, {{{AxisRef{1}}}, {{AxisRef{0}}}}).value().ToLayout({6, 6}, DType::kF32).value();
  Layout c = PlacementsToLayout({{Placement::Kind::kShard, 1}, {Placement::Kind::kShard, 0}}, m, {6, 6}, DType::kF32).value();
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(b == c);
  EXPECT_EQ(a.Hash(), c.Hash());
  Layout d = NamedSharding::Create(m, {{{AxisRef{0}}}, {{AxisRef{1}}}}).value().ToLayout({6, 6}, DType::kF32).value();
  EXPECT_FALSE(a == d);
}

TEST(Layout, DTensorNestsTorchChunkUnlikeXla) {
  Mesh m = Mesh::Create({{"a", 2}, {"b", 3}}).value();
  Layout dt = PlacementsToLayout({{Placement::Kind::kShard, 0}, {Placement::Kind::kShard, 0}}, m, {10}, DType::kF32).value();
  EXPECT_EQ(dt.dim(0).cuts, (std::vector<int64_t>{0, 2, 4, 5, 7, 9, 10}));
  Layout xla = NamedSharding::Create(m, {{{AxisRef{0}, AxisRef{1}}}}).value().ToLayout({10}, DType::kF32).value();
  EXPECT_EQ(xla.dim(0).cuts, (std::vector<int64_t>{0, 2, 4, 6, 8, 10, 10}));
  EXPECT_FALSE(dt == xla);
  // torch.chunk(5, 4) makes 3 chunks of 2,2,1: the fourth rank holds nothing.
  Mesh four = Mesh::Create({{"a", 4}}).value();
  Layout short_chunks = PlacementsToLayout({{Placement::Kind::kShard, 0}}, four, {5}, DType::kF32).value();
  EXPECT_TRUE(short_chunks.DeviceBoxes(3).empty());
  EXPECT_EQ(short_chunks.DeviceBoxes(2)[0], (Box{{{4, 5}}}));
}

TEST(Layout, DTensorStridedShardIsRightToLeftSharding) {
  // torch's docstring example: [_StridedShard(0, split_factor=2), Shard(0)]
  // on dp=2, tp=2 over 8 rows puts shard tp*2+dp on device (dp, tp).
  Mesh m = Mesh::Create({{"dp", 2}, {"tp", 2}}).value();
  const Placement strided{Placement::Kind::kStridedShard, 0, 2}, shard{Placement::Kind::kShard, 0};
  Layout l = PlacementsToLayout({strided, shard}, m, {8}, DType::kF32).value();
  EXPECT_EQ(l.DeviceBoxes(1)[0], (Box{{{4, 6}}}));
  EXPECT_EQ(l.DeviceBoxes(2)[0], (Box{{{2, 4}}}));
  EXPECT_EQ(PlacementsFromLayout(l, m).value(), (std::vector<Placement>{strided, shard}));
  // The same layout is JAX's P(('tp','dp')).
  Layout jax = NamedSharding::Create(m, {{{AxisRef{1}, AxisRef{0}}}}).value().ToLayout({8}, DType::kF32).value();
  EXPECT_TRUE(l == jax);

  // torch's _to_replicate_tensor example: 9 elements, split_factor 2 over 4:
  // ranks hold [0,1,5], [2,3,6], [4,7], [8], each in global order.
  Mesh four = Mesh::Create({{"a", 4}}).value();
  Layout nine = PlacementsToLayout({{Placement::Kind::kStridedShard, 0, 2}}, four, {9}, DType::kF32).value();
  EXPECT_EQ(nine.DeviceBoxes(0), (std::vector<Box>{Box{{{0, 2}}}, Box{{{5, 6}}}}));
  EXPECT_EQ(nine.DeviceBoxes(1), (std::vector<Box>{Box{{{2, 4}}}, Box{{{6, 7}}}}));
  EXPECT_EQ(nine.DeviceBoxes(2), (std::vector<Box>{Box{{{4, 5}}}, Box{{{7, 8}}}}));
  EXPECT_EQ(nine.DeviceBoxes(3), (std::vector<Box>{Box{{{8, 9}}}}));
  // A split factor of 1 is Shard.
  EXPECT_TRUE(PlacementsToLayout({{Placement::Kind::kStridedShard, 0, 1}}, four, {9}, DType::kF32).value() ==
              PlacementsToLayout({{Placement::Kind::kShard, 0}}, four, {9}, DType::kF32).value());
  EXPECT_FALSE(PlacementsToLayout({{Placement::Kind::kStridedShard, 0, 0}}, four, {9}, DType::kF32).ok());
  // Work is bounded over a whole level, not per tile: refused at once (it took seconds per tile before).
  Mesh wide = Mesh::Create({{"x", 64}, {"y", 2}}).value();
  EXPECT_FALSE(PlacementsToLayout({{Placement::Kind::kShard, 0}, {Placement::Kind::kStridedShard, 0, 8388608}}, wide,
                                  {536870912}, DType::kF32)
                   .ok());
}

TEST(Layout, BlockCyclicConcatenatesBlocksInGlobalOrder) {
  // 10x4 array, blocks of 2x2 over a 2x1 grid: device 0 holds row blocks 0, 2, 4.
  Layout l = BlockCyclicToLayout({{2, 2}, {2, 1}}, {}, {10, 4}, DType::kF64).value();
  std::vector<Box> boxes = l.DeviceBoxes(0);
  ASSERT_EQ(boxes.size(), 3u);
  EXPECT_EQ(boxes[0], (Box{{{0, 2}, {0, 4}}}));
  EXPECT_EQ(boxes[1], (Box{{{4, 6}, {0, 4}}}));
  EXPECT_EQ(boxes[2], (Box{{{8, 10}, {0, 4}}}));
  EXPECT_EQ(l.LocalShape(0), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(l.DeviceBoxOrigins(0), (std::vector<std::vector<int64_t>>{{0, 0}, {2, 0}, {4, 0}}));
  EXPECT_EQ(l.DeviceBoxCount(0), 3);
  EXPECT_EQ(l.LocalShape(1), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(l.LocalBytes(1), 4 * 4 * 8);
}

TEST(Layout, HostileBlockCyclicSizesFailBeforeAllocating) {
  EXPECT_FALSE(BlockCyclicToLayout({{1}, {int64_t{1} << 25}}, {}, {1}, DType::kF32).ok());  // > 2^24 processes
  EXPECT_FALSE(BlockCyclicToLayout({{1, 1}, {1 << 30, 1 << 30}}, {}, {1, 1}, DType::kF32).ok());
  EXPECT_FALSE(BlockCyclicToLayout({{1, 1, 1, 1}, {1, 1, 1, 1}}, {}, {1 << 26, 1 << 26, 1 << 26, 1 << 26}, DType::kS8).ok());
  EXPECT_FALSE(BlockCyclicToLayout({{1, 1}, {1, 1}}, {}, {int64_t{1} << 40, int64_t{1} << 40}, DType::kS8).ok());
}

TEST(Layout, DifferentDeviceSets) {
  Layout l = HloSharding::Tile(TileAssignment::Explicit({4}, {4, 5, 6, 7}).value(), false)
                 .ToLayout({8}, DType::kF32, std::nullopt)
                 .value();
  EXPECT_EQ(l.devices(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(l.TileOf(0), -1);
  EXPECT_EQ(l.DeviceBoxes(6)[0], (Box{{{4, 6}}}));
}

TEST(NamedSharding, SubAxesSplitAnAxisAsShardyDoes) {
  // x=4 viewed as "x":(1)2 (major half, c / 2) and "x":(2)2 (minor half, c % 2).
  Mesh m = Mesh::Create({{"x", 4}}).value();
  NamedSharding s = NamedSharding::Create(m, {{{AxisRef{0, 1, 2}}}, {{AxisRef{0, 2, 2}}}}).value();
  Layout l = s.ToLayout({4, 4}, DType::kF32).value();
  // Device c: dim 0 tile c / 2, dim 1 tile c % 2: the same as splitting dims 0,1 by x's halves in order.
  EXPECT_EQ(l.DeviceBoxes(1)[0], (Box{{{0, 2}, {2, 4}}}));
  EXPECT_EQ(l.DeviceBoxes(2)[0], (Box{{{2, 4}, {0, 2}}}));
  EXPECT_EQ(s.ToHlo()->ToString(), "{devices=[2,2]<=[4]}");
  NamedSharding swapped = NamedSharding::Create(m, {{{AxisRef{0, 2, 2}}}, {{AxisRef{0, 1, 2}}}}).value();
  EXPECT_EQ(swapped.ToHlo()->ToString(), "{devices=[2,2]<=[2,2]T(1,0)}");
  // Shardy's documented equivalence: [{"x"},{"y"}] on x=4,y=2 is
  // [{"d":(1)4},{"d":(4)2}] on d=8.
  Mesh xy = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  Mesh d = Mesh::Create({{"d", 8}}).value();
  EXPECT_TRUE(NamedSharding::Create(xy, {{{AxisRef{0}}}, {{AxisRef{1}}}})->ToLayout({8, 8}, DType::kF32).value() ==
              NamedSharding::Create(d, {{{AxisRef{0, 1, 4}}}, {{AxisRef{0, 4, 2}}}})->ToLayout({8, 8}, DType::kF32).value());
  EXPECT_FALSE(NamedSharding::Create(m, {{{AxisRef{0}}}, {{AxisRef{0, 2, 2}}}}).ok());  // overlap
  EXPECT_FALSE(NamedSharding::Create(m, {{{AxisRef{0, 1, 3}}}}).ok());                  // does not divide
  // Disjoint as numbers but not a chain of factors: 2 does not divide 3.
  Mesh twelve = Mesh::Create({{"x", 12}}).value();
  EXPECT_FALSE(NamedSharding::Create(twelve, {{{AxisRef{0, 1, 2}}}, {{AxisRef{0, 3, 4}}}}).ok());
  EXPECT_TRUE(NamedSharding::Create(twelve, {{{AxisRef{0, 1, 2}}}, {{AxisRef{0, 6, 2}}}}).ok());
}

// A pending reduction: parts are checked, renumbered per tile by lowest
// holder, and take part in == and Hash.
TEST(Layout, PendingReductionPartsAreCheckedAndRenumbered) {
  auto make = [](std::vector<DeviceTile> p, Reduction r) {
    return Layout::Create({4}, DType::kF32, {DimGrid::Ceil(4, 2)}, std::move(p), r);
  };
  const Reduction sum2{ReduceOp::kSum, 2};
  // Devices 0,1 hold tile 0 in parts 1,0; devices 2,3 tile 1 in parts 0,1.
  Result<Layout> a = make({{0, 0, 1}, {1, 0, 0}, {2, 1, 0}, {3, 1, 1}}, sum2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->partial());
  EXPECT_EQ(a->PartOf(0), 0);  // renumbered: the lowest holder's part is 0
  EXPECT_EQ(a->PartOf(1), 1);
  EXPECT_EQ(a->PartOf(9), 0);
  Result<Layout> b = make({{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}}, sum2);
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(a->Hash(), b->Hash());
  EXPECT_FALSE(*a == *make({{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}}, {ReduceOp::kMax, 2}));
  EXPECT_FALSE(*a == a->WithoutReduction());
  // Without its reduction it is the layout made without parts, == and Hash
  // alike (it shares the partial one's representation, parts and all).
  const Layout plain = make({{0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {3, 1, 0}}, Reduction{}).value();
  EXPECT_TRUE(a->WithoutReduction() == plain);
  (void)a->Hash();  // the shared representation's hashes computed first
  EXPECT_EQ(a->WithoutReduction().Hash(), plain.Hash());
  // Replicas: two devices in one part of a tile.
  Result<Layout> replicas = Layout::Create({4}, DType::kF32, {DimGrid::Ceil(4, 1)}, {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}}, sum2);
  ASSERT_TRUE(replicas.ok());
  EXPECT_EQ(replicas->PartOf(1), 0);
  EXPECT_EQ(replicas->PartOf(2), 1);
  // A tile missing a part, a part out of range, no parts.
  Result<Layout> missing = make({{0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {3, 1, 1}}, sum2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("held in 1 of the 2 parts"), std::string::npos) << missing.status();
  EXPECT_FALSE(make({{0, 0, 2}, {1, 0, 0}, {2, 1, 0}, {3, 1, 1}}, sum2).ok());
  EXPECT_FALSE(make({{0, 0, 0}, {1, 1, 0}}, {ReduceOp::kSum, 0}).ok());
  // One part is no reduction; empty tiles need no parts.
  EXPECT_FALSE(make({{0, 0, 0}, {1, 1, 0}}, {ReduceOp::kSum, 1})->partial());
  Result<Layout> empty = Layout::Create({0}, DType::kF32, {DimGrid::Ceil(0, 2)}, {{0, 0, 0}, {1, 1, 0}}, sum2);
  EXPECT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(ParseReduceOp("avg").value(), ReduceOp::kAvg);
  EXPECT_FALSE(ParseReduceOp("mean").ok());
}

}  // namespace
}  // namespace reshard
