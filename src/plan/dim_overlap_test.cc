#include "plan/dim_overlap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

namespace reshard {
namespace {

// A 1-D layout of `extent` elements cut into `cells` random cells, each
// belonging to a tile: in tile order (every cell its own tile, or runs of
// cells per tile), or cycling and shuffled (as block-cyclic grids do).
// Device k holds tile k.
Layout RandomGrid(std::mt19937_64& rng, int64_t extent, bool in_order) {
  const int64_t cells = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(extent, 12)));
  std::vector<int64_t> cuts = {0, extent};
  while (static_cast<int64_t>(cuts.size()) < cells + 1) {
    const int64_t c = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(extent - 1));
    if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
  }
  std::sort(cuts.begin(), cuts.end());
  const int32_t tiles = 1 + static_cast<int32_t>(rng() % static_cast<uint64_t>(cells));
  std::vector<int32_t> cell_tile(static_cast<size_t>(cells));
  for (int64_t k = 0; k < cells; ++k) cell_tile[static_cast<size_t>(k)] = static_cast<int32_t>(k % tiles);
  if (in_order) std::sort(cell_tile.begin(), cell_tile.end());
  else std::shuffle(cell_tile.begin(), cell_tile.end(), rng);
  std::vector<DeviceTile> placement;
  for (int32_t t = 0; t < tiles; ++t) placement.push_back({t, t, 0});
  return Layout::Create({extent}, DType::kF32, {DimGrid{cuts, cell_tile, tiles}}, placement).value();
}

// Per (source, target) tile pair: each element the pair shares, with its
// offsets in both tiles' local extents; from the layouts, element by element.
using Shared = std::map<std::pair<int32_t, int32_t>, std::vector<std::tuple<int64_t, int64_t, int64_t>>>;
Shared ByElement(const Layout& src, const Layout& dst) {
  auto place = [](const Layout& l, int64_t e) {
    const DimGrid& g = l.dim(0);
    const size_t k = static_cast<size_t>(std::upper_bound(g.cuts.begin(), g.cuts.end(), e) - g.cuts.begin() - 1);
    return std::pair(g.cell_tile[k], l.CellOffset(0, static_cast<int64_t>(k)) + e - g.cuts[k]);
  };
  Shared out;
  for (int64_t e = 0; e < src.shape()[0]; ++e) {
    const auto [s, so] = place(src, e);
    const auto [t, to] = place(dst, e);
    out[{s, t}].emplace_back(e, so, to);
  }
  return out;
}

// BuildDimOverlap lists every shared element once, under its tile pair, with
// both offsets; pairs in (source, target) order, each pair's segments in
// global order and merged where contiguous on all three counts. Where both
// grids list their tiles in order it builds the tables without sorting, at
// exactly their size.
TEST(DimOverlap, SegmentsAreTheSharedElementsInOrder) {
  std::mt19937_64 rng(20261204);
  int in_order_cases = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const int64_t extent = 2 + static_cast<int64_t>(rng() % 40);
    const Layout src = RandomGrid(rng, extent, rng() % 2 == 0), dst = RandomGrid(rng, extent, rng() % 2 == 0);
    const DimOverlap o = BuildDimOverlap(src, dst, 0);
    const Shared want = ByElement(src, dst);
    Shared got;
    for (size_t k = 0; k < o.overlaps.size(); ++k) {
      const DimOverlap::Overlap& ov = o.overlaps[k];
      if (k > 0) {
        ASSERT_LT(std::pair(o.overlaps[k - 1].src, o.overlaps[k - 1].dst), std::pair(ov.src, ov.dst)) << iter;
      }
      int64_t length = 0;
      for (int32_t g = ov.seg_begin; g < ov.seg_end; ++g) {
        const Segment& seg = o.segments[static_cast<size_t>(g)];
        if (g > ov.seg_begin) {
          const Segment& prev = o.segments[static_cast<size_t>(g - 1)];
          ASSERT_LT(prev.global_lo + prev.length, seg.global_lo + 1) << iter;
          EXPECT_FALSE(prev.global_lo + prev.length == seg.global_lo && prev.src_offset + prev.length == seg.src_offset &&
                       prev.dst_offset + prev.length == seg.dst_offset)
              << iter << ": contiguous segments left unmerged";
        }
        for (int64_t i = 0; i < seg.length; ++i)
          got[{ov.src, ov.dst}].emplace_back(seg.global_lo + i, seg.src_offset + i, seg.dst_offset + i);
        length += seg.length;
      }
      EXPECT_EQ(length, ov.length) << iter;
    }
    ASSERT_EQ(got, want) << "iter " << iter;
    // The indexes by source and by target coordinate find each pair.
    for (const auto& [pair, run] : got) {
      const auto sources = o.OfSource(pair.first);
      EXPECT_TRUE(std::any_of(sources.begin(), sources.end(),
                              [&](const DimOverlap::Overlap& ov) { return ov.dst == pair.second; }))
          << iter;
      const auto targets = o.OfTarget(pair.second);
      EXPECT_TRUE(std::any_of(targets.begin(), targets.end(), [&](int32_t id) {
        return o.overlaps[static_cast<size_t>(id)].src == pair.first;
      })) << iter;
    }
    const DimGrid &a = src.dim(0), &b = dst.dim(0);
    if (std::is_sorted(a.cell_tile.begin(), a.cell_tile.end()) && std::is_sorted(b.cell_tile.begin(), b.cell_tile.end())) {
      ++in_order_cases;
      // Reserved by the counting walk, never grown (libstdc++ reserves
      // exactly what is asked; growth by doubling would leave slack).
      EXPECT_EQ(o.overlaps.capacity(), o.overlaps.size()) << iter;
      EXPECT_EQ(o.segments.capacity(), o.segments.size()) << iter;
    }
  }
  EXPECT_GT(in_order_cases, 500);
}

}  // namespace
}  // namespace reshard
