// CopySchedule: how a phase's copies run is decided from the copies and the
// indices of their buffers alone, so one schedule runs into any buffers.
#include "exec/copy_schedule.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "exec/copy_kernel.h"

namespace reshard {
namespace {

constexpr int64_t kRows = 64, kCols = 64, kElem = 4;

// 64x64 u32 buffers whose element (r, c) holds base + r * 64 + c.
std::vector<uint32_t> Tagged(uint32_t base) {
  std::vector<uint32_t> v(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) v[static_cast<size_t>(i)] = base + static_cast<uint32_t>(i);
  return v;
}

// Column strips: copy k moves columns [8k, 8k + 8) of every row. Rows to
// columns: the strips of one source go to eight destinations (they share
// source rows); block-cyclic-like: the strips of eight sources fill one
// destination (they share destination rows).
CopyProgram Strips() {
  CopyProgram p;
  const std::vector<int64_t> extent = {kRows, 8}, strides = {kCols, 1};
  for (int64_t k = 0; k < 8; ++k) p.AddBox(extent, 8 * k * kElem, strides, 8 * k * kElem, strides, kElem);
  return p;
}

std::vector<ScheduledCopy> Copies(const CopyProgram& p, bool share_source) {
  std::vector<ScheduledCopy> out;
  for (size_t k = 0; k < p.ops.size(); ++k) {
    const int32_t one = 0, each = static_cast<int32_t>(k);
    out.push_back({&p, &p.ops[k], share_source ? one : each, share_source ? each : one, 0, CopyUnits(p, p.ops[k])});
  }
  return out;
}

// Runs `s` into fresh buffers (sources tagged from `base`) and checks every
// column strip arrived where its copy puts it.
void ExpectRuns(const CopySchedule& s, ThreadPool& pool, bool share_source, uint32_t base) {
  std::vector<std::vector<uint32_t>> src, dst;
  for (int k = 0; k < 8; ++k) {
    src.push_back(Tagged(base + static_cast<uint32_t>(k) * 100000));
    dst.emplace_back(kRows * kCols, 0u);
  }
  std::vector<const std::byte*> srcs;
  std::vector<std::byte*> dsts;
  for (int k = 0; k < 8; ++k) {
    srcs.push_back(reinterpret_cast<const std::byte*>(src[static_cast<size_t>(k)].data()));
    dsts.push_back(reinterpret_cast<std::byte*>(dst[static_cast<size_t>(k)].data()));
  }
  s.Run(pool, srcs, dsts);
  for (int64_t k = 0; k < 8; ++k)
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 8 * k; c < 8 * k + 8; ++c) {
        const size_t from = share_source ? 0 : static_cast<size_t>(k), to = share_source ? static_cast<size_t>(k) : 0;
        ASSERT_EQ(dst[to][static_cast<size_t>(r * kCols + c)], src[from][static_cast<size_t>(r * kCols + c)])
            << "strip " << k << ", row " << r;
      }
}

TEST(CopySchedule, SharedSourceRowsRunInSlicesSharedDestinationRowsInGroups) {
  const CopyProgram p = Strips();
  ThreadPool pool(2);
  for (const bool share_source : {true, false}) {
    const CopySchedule s = CopySchedule::Build(Copies(p, share_source), {}, pool.size());
    EXPECT_EQ(s.size(), 8u);
    EXPECT_EQ(s.mode(), share_source ? CopySchedule::Mode::kSlices : CopySchedule::Mode::kGroups);
    // One schedule, buffers at other addresses each run.
    for (uint32_t base : {1u, 7u, 1000u}) ExpectRuns(s, pool, share_source, base);
  }
}

// The canonical case in small: four senders' buffers of rows of eight
// 64-byte runs, two for each of four receivers, whose rows are four runs,
// one from each sender. The copies share source rows (slices) and are short
// two-dim rows that share destination rows: slices of destination groups.
TEST(CopySchedule, ShortRowsSharingBothRunInSlicesOfGroups) {
  constexpr int64_t kR = 64, kRun = 16;  // rows; u32 elements a run
  CopyProgram p;
  std::vector<ScheduledCopy> copies;
  const std::vector<int64_t> extent = {kR, 2, kRun}, src_strides = {8 * kRun, kRun, 1},
                             dst_strides = {8 * kRun, 4 * kRun, 1};
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t from = 0; from < 4; ++from)
      p.AddBox(extent, 2 * t * kRun * kElem, src_strides, from * kRun * kElem, dst_strides, kElem);
  ASSERT_EQ(p.ops.size(), 16u);
  ASSERT_EQ(p.ops[0].num_dims, 2);
  ASSERT_EQ(p.ops[0].run_bytes, kRun * kElem);
  for (size_t k = 0; k < p.ops.size(); ++k)
    copies.push_back({&p, &p.ops[k], static_cast<int32_t>(k % 4), static_cast<int32_t>(k / 4), 0, CopyUnits(p, p.ops[k])});
  for (const int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const CopySchedule s = CopySchedule::Build(copies, {}, pool.size());
    EXPECT_EQ(s.mode(), CopySchedule::Mode::kSlicedGroups);
    for (uint32_t base : {3u, 500u}) {
      std::vector<std::vector<uint32_t>> src, dst;
      std::vector<const std::byte*> srcs;
      std::vector<std::byte*> dsts;
      for (uint32_t k = 0; k < 4; ++k) {
        src.emplace_back(kR * 8 * kRun);
        for (size_t i = 0; i < src.back().size(); ++i) src.back()[i] = base + k * 1000000 + static_cast<uint32_t>(i);
        dst.emplace_back(kR * 8 * kRun, 0u);
        srcs.push_back(reinterpret_cast<const std::byte*>(src.back().data()));
        dsts.push_back(reinterpret_cast<std::byte*>(dst.back().data()));
      }
      s.Run(pool, srcs, dsts);
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t r = 0; r < kR; ++r)
          for (int64_t j = 0; j < 2; ++j)
            for (int64_t from = 0; from < 4; ++from)
              for (int64_t e = 0; e < kRun; ++e)
                ASSERT_EQ(dst[static_cast<size_t>(t)][static_cast<size_t>(((r * 2 + j) * 4 + from) * kRun + e)],
                          src[static_cast<size_t>(from)][static_cast<size_t>((r * 8 + 2 * t + j) * kRun + e)])
                    << threads << " threads, receiver " << t << ", row " << r << ", j " << j << ", sender " << from;
    }
  }
}

// Contiguous copies (no dims) run in chunks, a large one cut, small ones together.
TEST(CopySchedule, ContiguousCopiesRunWhole) {
  CopyProgram p;
  const std::vector<int64_t> whole = {kRows, kCols}, strides = {kCols, 1};
  p.AddBox(whole, 0, strides, 0, strides, kElem);  // one run of 16 KiB
  ASSERT_EQ(p.ops[0].num_dims, 0);
  std::vector<ScheduledCopy> contiguous = {{&p, &p.ops[0], 0, 0, 0, CopyUnits(p, p.ops[0])},
                                           {&p, &p.ops[0], 1, 1, 0, CopyUnits(p, p.ops[0])}};
  ThreadPool pool(2);
  const CopySchedule s = CopySchedule::Build({}, std::move(contiguous), pool.size());
  std::vector<uint32_t> a = Tagged(5), b = Tagged(900000), ta(kRows * kCols), tb(kRows * kCols);
  const std::vector<const std::byte*> srcs = {reinterpret_cast<const std::byte*>(a.data()),
                                              reinterpret_cast<const std::byte*>(b.data())};
  const std::vector<std::byte*> dsts = {reinterpret_cast<std::byte*>(ta.data()), reinterpret_cast<std::byte*>(tb.data())};
  s.Run(pool, srcs, dsts);
  EXPECT_EQ(ta, a);
  EXPECT_EQ(tb, b);
}

}  // namespace
}  // namespace reshard
