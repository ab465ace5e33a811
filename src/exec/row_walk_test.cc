// ForEachStretch and ForEachRun against a plain enumeration of a copy's
// rows, over random dims, strides and row ranges.
#include "exec/row_walk.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace reshard {
namespace {

// Every row of dims [dims, dims + nd) as (src, dst) byte offsets, row-major.
std::vector<std::pair<int64_t, int64_t>> AllRows(const std::vector<CopyDim>& dims) {
  std::vector<std::pair<int64_t, int64_t>> rows{{0, 0}};
  for (const CopyDim& d : dims) {
    std::vector<std::pair<int64_t, int64_t>> next;
    for (const auto& [s, t] : rows)
      for (int64_t i = 0; i < d.count; ++i) next.emplace_back(s + i * d.src_stride, t + i * d.dst_stride);
    rows = std::move(next);
  }
  return rows;
}

TEST(RowWalk, StretchesListEveryRowOfARangeOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int nd = 1 + static_cast<int>(rng() % 4);
    std::vector<CopyDim> dims;
    for (int d = 0; d < nd; ++d)
      dims.push_back({1 + static_cast<int64_t>(rng() % 5), static_cast<int64_t>(rng() % 1000) - 300,
                      static_cast<int64_t>(rng() % 1000) - 300});
    const auto rows = AllRows(dims);
    const int64_t n = static_cast<int64_t>(rows.size());
    int64_t lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
    int64_t hi = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
    if (lo > hi) std::swap(lo, hi);
    std::vector<std::pair<int64_t, int64_t>> seen;
    ForEachStretch(dims.data(), nd, lo, hi, [&](int64_t so, int64_t dof, int64_t count, int64_t first) {
      ASSERT_GT(count, 0);
      ASSERT_LE(first + count, dims.back().count);  // within the innermost dim
      for (int64_t i = 0; i < count; ++i)
        seen.emplace_back(so + i * dims.back().src_stride, dof + i * dims.back().dst_stride);
    });
    const std::vector<std::pair<int64_t, int64_t>> expected(rows.begin() + lo, rows.begin() + hi);
    ASSERT_EQ(seen, expected) << "trial " << trial << ", rows [" << lo << ", " << hi << ")";
  }
}

TEST(RowWalk, RunsOfAnOpAddItsOffsets) {
  CopyProgram p;
  // A [3, 4] f32 box of a [5, 8] buffer at (1, 2), packed: rows of 16 bytes.
  p.AddBox(std::vector<int64_t>{3, 4}, (1 * 8 + 2) * 4, std::vector<int64_t>{8, 1}, 100,
           std::vector<int64_t>{4, 1}, 4);
  ASSERT_EQ(p.ops.size(), 1u);
  std::vector<std::pair<int64_t, int64_t>> runs;
  ForEachRun(p, p.ops[0], [&](int64_t src, int64_t dst) { runs.emplace_back(src, dst); });
  EXPECT_EQ(runs, (std::vector<std::pair<int64_t, int64_t>>{{40, 100}, {72, 116}, {104, 132}}));
  // A contiguous copy is one run.
  CopyProgram q;
  q.AddBox(std::vector<int64_t>{2, 8}, 0, std::vector<int64_t>{8, 1}, 64, std::vector<int64_t>{8, 1}, 4);
  runs.clear();
  ForEachRun(q, q.ops[0], [&](int64_t src, int64_t dst) { runs.emplace_back(src, dst); });
  EXPECT_EQ(runs, (std::vector<std::pair<int64_t, int64_t>>{{0, 64}}));
}

}  // namespace
}  // namespace reshard
