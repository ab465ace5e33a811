// CopySchedule: how a phase's copies run is decided from the copies and the
// indices of their buffers alone, so one schedule runs into any buffers.
#include "exec/copy_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <tuple>
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

// Every copy of `p`, from buffer 0 into buffer 0.
std::vector<ScheduledCopy> OneBufferCopies(const CopyProgram& p) {
  std::vector<ScheduledCopy> copies;
  for (const CopyOp& op : p.ops) copies.push_back({&p, &op, 0, 0, 0, CopyUnits(p, op)});
  return copies;
}

// Runs `s`, every copy of `p` from one buffer of `bytes` into another as
// large, over `pool`, and expects the output each copy of `p` run alone
// writes.
void ExpectEachCopyAlone(const CopySchedule& s, ThreadPool& pool, const CopyProgram& p, int64_t bytes) {
  std::vector<std::byte> in(static_cast<size_t>(bytes)), out(in.size()), want(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>((i * 13 + i / 253) & 0xff);
  const std::byte* srcs[] = {in.data()};
  std::byte* dsts[] = {out.data()};
  s.Run(pool, srcs, dsts);
  for (const CopyOp& op : p.ops) RunCopy(p, op, in.data(), want.data(), 0, CopyUnits(p, op));
  EXPECT_EQ(out, want);
}

// Runs `s` over `sources` buffers of `src_bytes` and `targets` of
// `dst_bytes` (the indices `copies` name) and expects every target byte as
// each copy alone writes it.
void ExpectAsEachCopyAlone(const CopySchedule& s, ThreadPool& pool, const std::vector<ScheduledCopy>& copies,
                           size_t sources, int64_t src_bytes, size_t targets, int64_t dst_bytes) {
  std::vector<std::vector<std::byte>> src(sources, std::vector<std::byte>(static_cast<size_t>(src_bytes)));
  for (size_t b = 0; b < src.size(); ++b)
    for (size_t i = 0; i < src[b].size(); ++i) src[b][i] = static_cast<std::byte>((i * 29 + b * 71 + i / 97) & 0xff);
  std::vector<const std::byte*> srcs;
  for (const auto& b : src) srcs.push_back(b.data());
  std::vector<std::vector<std::byte>> out(targets, std::vector<std::byte>(static_cast<size_t>(dst_bytes)));
  std::vector<std::vector<std::byte>> want = out;
  std::vector<std::byte*> dsts;
  for (auto& b : out) dsts.push_back(b.data());
  s.Run(pool, srcs, dsts);
  for (const ScheduledCopy& c : copies)
    RunCopy(*c.program, *c.op, srcs[static_cast<size_t>(c.src)] + c.src_delta, want[static_cast<size_t>(c.dst)].data(),
            0, c.units);
  EXPECT_EQ(out, want);
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
// two-dim rows that share destination rows: slices of destination groups;
// once they are a pass of 8 MiB (4096 rows), runs of whole lines grouped by
// source, each copy's planes (two runs end to end in the source) a turn.
// Each schedule runs into buffers at other addresses on 1 to 3 threads;
// every run lands where its copy puts it.
void CanonicalInSmall(int64_t rows, CopySchedule::Mode mode, int64_t run_elements = 16) {
  const int64_t kRun = run_elements;  // u32 elements a run
  CopyProgram p;
  std::vector<ScheduledCopy> copies;
  const std::vector<int64_t> extent = {rows, 2, kRun}, src_strides = {8 * kRun, kRun, 1},
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
    EXPECT_EQ(s.mode(), mode) << rows << " rows";
    for (uint32_t base : {3u, 500u}) {
      std::vector<std::vector<uint32_t>> src, dst;
      std::vector<const std::byte*> srcs;
      std::vector<std::byte*> dsts;
      for (uint32_t k = 0; k < 4; ++k) {
        src.emplace_back(static_cast<size_t>(rows * 8 * kRun));
        for (size_t i = 0; i < src.back().size(); ++i) src.back()[i] = base + k * 100000000 + static_cast<uint32_t>(i);
        dst.emplace_back(static_cast<size_t>(rows * 8 * kRun), 0u);
        srcs.push_back(reinterpret_cast<const std::byte*>(src.back().data()));
        dsts.push_back(reinterpret_cast<std::byte*>(dst.back().data()));
      }
      s.Run(pool, srcs, dsts);
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < 2; ++j)
            for (int64_t from = 0; from < 4; ++from)
              for (int64_t e = 0; e < kRun; ++e)
                ASSERT_EQ(dst[static_cast<size_t>(t)][static_cast<size_t>(((r * 2 + j) * 4 + from) * kRun + e)],
                          src[static_cast<size_t>(from)][static_cast<size_t>((r * 8 + 2 * t + j) * kRun + e)])
                    << threads << " threads, receiver " << t << ", row " << r << ", j " << j << ", sender " << from;
    }
  }
}

TEST(CopySchedule, ShortRowsSharingBothRunInSlicesOfGroups) {
  CanonicalInSmall(64, CopySchedule::Mode::kSlicedGroups);
  CanonicalInSmall(64, CopySchedule::Mode::kSlicedGroups, 8);    // 32-byte runs, two a turn
  CanonicalInSmall(4096, CopySchedule::Mode::kSlicedGroups, 4);  // 16-byte runs, four a turn (a 2 MiB pass)
}

TEST(CopySchedule, ShortLinesSharingBothBeyondTheCachesRunInGroupsBySource) {
  CanonicalInSmall(4096, CopySchedule::Mode::kSourceGroups);  // a pass of 8 MiB
}

// Rows to columns at 64-byte runs: each of `senders` sources has rows of 8
// runs of `run` u32, run k going to receiver k, whose rows are that run
// alone at a stride of `stride` u32; `rows` rows.
struct StripsToReceivers {
  CopyProgram p;
  std::vector<ScheduledCopy> copies;
  StripsToReceivers(int64_t senders, int64_t rows, int64_t run, int64_t stride) {
    const std::vector<int64_t> extent = {rows, run}, src_strides = {8 * run, 1}, dst_strides = {stride, 1};
    for (int64_t from = 0; from < senders; ++from)
      for (int64_t t = 0; t < 8; ++t) p.AddBox(extent, t * run * kElem, src_strides, 0, dst_strides, kElem);
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const int32_t from = static_cast<int32_t>(k / 8), t = static_cast<int32_t>(k % 8);
      copies.push_back({&p, &p.ops[k], from, from * 8 + t, 0, CopyUnits(p, p.ops[k])});
    }
  }
};

// Runs of whole lines at strides of whole lines, a pass of 8 MiB or more
// that shares source rows (and not destination rows) runs in groups by
// source; every run lands where its copy puts it, on 1 to 3 threads.
TEST(CopySchedule, WholeLinesBeyondTheCachesRunInGroupsBySource) {
  constexpr int64_t kSenders = 2, kR = 8192, kRun = 16;  // 2 x 4 MiB
  const StripsToReceivers strips(kSenders, kR, kRun, kRun);
  for (const int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const CopySchedule s = CopySchedule::Build(strips.copies, {}, pool.size());
    EXPECT_EQ(s.mode(), CopySchedule::Mode::kSourceGroups);
    std::vector<std::vector<uint32_t>> src, dst;
    std::vector<const std::byte*> srcs;
    std::vector<std::byte*> dsts;
    for (uint32_t k = 0; k < kSenders; ++k) {
      src.emplace_back(static_cast<size_t>(kR * 8 * kRun));
      for (size_t i = 0; i < src.back().size(); ++i) src.back()[i] = k * 100000000 + static_cast<uint32_t>(i) + 1;
      srcs.push_back(reinterpret_cast<const std::byte*>(src.back().data()));
    }
    for (int64_t k = 0; k < 8 * kSenders; ++k) {
      dst.emplace_back(static_cast<size_t>(kR * kRun), 0u);
      dsts.push_back(reinterpret_cast<std::byte*>(dst.back().data()));
    }
    s.Run(pool, srcs, dsts);
    for (int64_t from = 0; from < kSenders; ++from)
      for (int64_t t = 0; t < 8; ++t)
        for (int64_t r = 0; r < kR; ++r)
          for (int64_t e = 0; e < kRun; ++e)
            ASSERT_EQ(dst[static_cast<size_t>(from * 8 + t)][static_cast<size_t>(r * kRun + e)],
                      src[static_cast<size_t>(from)][static_cast<size_t>((r * 8 + t) * kRun + e)])
                << threads << " threads, sender " << from << ", receiver " << t << ", row " << r;
  }
}

// Random passes beyond the caches of runs of a line or more: 1 to 3
// senders, each row of each holding a block for each of 2 to 5 receivers,
// more receivers than senders where runs are not whole lines (1 to 4 runs
// of 64 to 512 bytes in whole lines, or of 64 to 1,000 bytes, 512 up where
// several senders' runs meet in each target row, end to end or apart; a receiver's count of its own, as uneven shards
// have), each receiver's lines a run from every sender; they run in groups by source (as planes where every copy's runs
// lie end to end in the source, or one a row; else in turns of a row), and on 1 to 3 threads every receiver's buffer
// equals each copy run alone.
TEST(CopySchedule, RandomPassesOfLongRunsBySourceEqualEachCopy) {
  std::mt19937_64 rng(41);
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int planes = 0;  // trials whose copies all run as planes (the others: in turns of a row)
  for (int trial = 0; trial < 16; ++trial) {
    const bool whole_lines = draw(0, 1) == 0;
    const int64_t senders = draw(1, 3), receivers = draw(whole_lines ? 2 : senders + 1, 5), inner = draw(1, 4);
    // (Several senders' runs meet inside target lines: 512 bytes or more
    // keep that under 1/8 of the bytes, which still groups by source.)
    const int64_t run = whole_lines ? 64 * draw(1, 8) : draw(senders == 1 ? 64 : 512, 1000);
    const int64_t src_inner = run + (draw(0, 1) == 0 ? 0 : 64 * draw(1, 2));
    const int64_t block = inner * src_inner, src_row = receivers * block + 64 * draw(0, 1);
    // (Apart from one sender's runs end to end: AddBox would merge them.)
    const int64_t dst_inner = senders * run + 64 * draw(senders == 1 ? 1 : 0, 1), dst_outer = inner * dst_inner;
    CopyProgram p;
    std::vector<int64_t> inner_of(static_cast<size_t>(receivers));
    int64_t lines = 0;  // of a sender's row
    for (int64_t& n : inner_of) lines += n = draw(1, inner);
    const int64_t outer = (int64_t{8} << 20) / (senders * lines * run) + 1 + draw(0, 50);
    for (int64_t from = 0; from < senders; ++from)
      for (int64_t t = 0; t < receivers; ++t) {
        const int64_t n = inner_of[static_cast<size_t>(t)];
        const std::vector<int64_t> e = {outer, n, run}, ss = {src_row, src_inner, 1}, ds = {dst_outer, dst_inner, 1};
        p.AddBox(e, t * block, ss, from * run, ds, 1);
      }
    std::vector<ScheduledCopy> copies;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const int32_t from = static_cast<int32_t>(k) / static_cast<int32_t>(receivers);
      const int32_t t = static_cast<int32_t>(k) % static_cast<int32_t>(receivers);
      copies.push_back({&p, &p.ops[k], from, t, 0, CopyUnits(p, p.ops[k])});
    }
    std::vector<std::vector<std::byte>> src(static_cast<size_t>(senders)), want(static_cast<size_t>(receivers));
    for (auto& b : src) {
      b.resize(static_cast<size_t>(outer * src_row));
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>((i * 131 + static_cast<size_t>(trial)) >> 3);
    }
    for (auto& b : want) b.assign(static_cast<size_t>(outer * dst_outer), std::byte{0});
    for (const ScheduledCopy& c : copies)
      RunCopy(p, *c.op, src[static_cast<size_t>(c.src)].data(), want[static_cast<size_t>(c.dst)].data(), 0, c.units);
    const int threads = static_cast<int>(draw(1, 3));
    ThreadPool pool(threads);
    const CopySchedule s = CopySchedule::Build(copies, {}, pool.size());
    EXPECT_EQ(s.mode(), CopySchedule::Mode::kSourceGroups) << "trial " << trial;
    if (src_inner == run || std::all_of(inner_of.begin(), inner_of.end(), [](int64_t n) { return n == 1; })) ++planes;
    std::vector<std::vector<std::byte>> got(want.size());
    std::vector<const std::byte*> srcs;
    std::vector<std::byte*> dsts;
    for (auto& b : src) srcs.push_back(b.data());
    for (size_t k = 0; k < got.size(); ++k) {
      got[k].assign(want[k].size(), std::byte{0});
      dsts.push_back(got[k].data());
    }
    s.Run(pool, srcs, dsts);
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_TRUE(got[k] == want[k]) << "trial " << trial << ", receiver " << k << ": " << senders << " senders, "
                                     << receivers << " receivers, runs of " << run << " B, " << inner << " a plane "
                                     << src_inner << " B apart, " << threads << " threads";
  }
  EXPECT_GE(planes, 4);
  EXPECT_LE(planes, 12);
}

// Only in a pass of 8 MiB or more, and only runs of whole lines at strides
// of whole lines, or runs of a line or more that read fewer spans than they
// write, group by source: two senders' rows into 16 receivers in 64-byte
// runs at 64- or 80-byte strides, or in 100-byte runs, do; in 48-byte runs,
// or in a pass under 8 MiB, they keep their mode.
TEST(CopySchedule, OnlyLongRunsBeyondTheCachesGroupBySource) {
  struct Variant {
    int64_t rows, run, stride;  // u32 elements
    bool by_source;
  };
  for (const Variant v : {Variant{8192, 16, 16, true}, Variant{16384, 12, 12, false}, Variant{8192, 16, 20, true},
                          Variant{5400, 25, 25, true}, Variant{4096, 16, 16, false}}) {
    const StripsToReceivers strips(2, v.rows, v.run, v.stride);
    const CopySchedule s = CopySchedule::Build(strips.copies, {}, 2);
    EXPECT_EQ(s.mode() == CopySchedule::Mode::kSourceGroups, v.by_source) << v.rows << " " << v.run << " " << v.stride;
  }
}

// A transposition of runs under a line: `senders` sources and `receivers`
// targets of `rows` rows; source s's row holds receivers * `blocks` runs of
// `run` bytes, run j * receivers + d going to target d, where it is run
// j * senders + s of the row (block-cyclic columns: a source line feeds
// several targets, a target line takes runs of several sources). One copy
// per pair: [rows][blocks] runs.
struct SubLineTransposition {
  CopyProgram p;
  std::vector<ScheduledCopy> copies;
  int64_t src_row, dst_row;
  SubLineTransposition(int64_t senders, int64_t receivers, int64_t rows, int64_t blocks, int64_t run)
      : src_row(receivers * blocks * run), dst_row(senders * blocks * run) {
    const std::vector<int64_t> extent = {rows, blocks, run}, src_strides = {src_row, receivers * run, 1},
                               dst_strides = {dst_row, senders * run, 1};
    for (int64_t from = 0; from < senders; ++from)
      for (int64_t to = 0; to < receivers; ++to) p.AddBox(extent, to * run, src_strides, from * run, dst_strides, 1);
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const int32_t from = static_cast<int32_t>(static_cast<int64_t>(k) / receivers),
                    to = static_cast<int32_t>(static_cast<int64_t>(k) % receivers);
      copies.push_back({&p, &p.ops[k], from, to, 0, CopyUnits(p, p.ops[k])});
    }
  }
};

// Where two targets' groups read the same source lines in parts (runs
// under a line, or of a line and a half), the groups run as one: a turn
// writes both targets' rows and reads each source line whole. Runs of
// whole lines, or too long to take a row a turn (8192 bytes; 4100, not
// whole lines), stay a group per target.
TEST(CopySchedule, GroupsReadingTheSameLinesInPartsRunAsOne) {
  ThreadPool pool(1);
  for (int64_t run : {32, 96, 64, 8192, 4100}) {
    const SubLineTransposition sub(4, 2, 64, 2, run);
    const CopySchedule s = CopySchedule::Build(sub.copies, {}, pool.size());
    EXPECT_EQ(s.mode(), CopySchedule::Mode::kGroups) << run;
    EXPECT_EQ(s.groups(), run % 64 != 0 && run <= 4096 ? 1 : 2) << run;
  }
}

// Four senders into four receivers (each reads four spans and writes
// four), a pass of about 8.5 MiB: runs of 100 bytes keep their mode (by source, a
// target line would take its pieces at different times); runs of whole
// lines group by source.
TEST(CopySchedule, LongRunsGatheringAsMuchAsTheyScatterGroupBySourceOnlyInWholeLines) {
  const SubLineTransposition apart(4, 4, 1400, 4, 100);
  EXPECT_NE(CopySchedule::Build(apart.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
  const SubLineTransposition lines(4, 4, 1100, 4, 128);
  EXPECT_EQ(CopySchedule::Build(lines.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
}

// Long runs that scatter (more targets than senders, passes of 8.4 to 20
// MiB) group by source where one sender fills each target row, and where
// two senders' pieces meet inside target lines on under 1/8 of the bytes
// (runs of 600 bytes alternating along a row: two lines split per 1,200);
// not where they meet that often (runs of 100 bytes, a copy a column: a
// line per 200; or alternating along a row: two per 200; runs of 300
// bytes alternating: two per 600), since by source each sender's turns
// write its part of such a line at another time.
TEST(CopySchedule, ScatteringRunsGroupBySourceUnlessSendersSplitTargetLines) {
  const SubLineTransposition one(1, 4, 22000, 1, 100);
  EXPECT_EQ(CopySchedule::Build(one.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
  const SubLineTransposition rare(2, 4, 1400, 3, 600);
  EXPECT_EQ(CopySchedule::Build(rare.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
  const SubLineTransposition alternating(2, 4, 1400, 3, 300);
  EXPECT_NE(CopySchedule::Build(alternating.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
  const SubLineTransposition split(2, 4, 11000, 1, 100);
  EXPECT_NE(CopySchedule::Build(split.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
  const SubLineTransposition split_runs(2, 4, 1400, 8, 100);  // two dims: each run beside the other sender's
  EXPECT_NE(CopySchedule::Build(split_runs.copies, {}, 2).mode(), CopySchedule::Mode::kSourceGroups);
}

// Two senders' rows of four 96-byte blocks into two targets: global block
// c (of 8 along a row) comes from sender c % 2 and goes to target (c / 2) %
// 2, one copy a block, 64 rows. The targets' groups read the same source
// lines and join; the joined group's copies run along the row (block 0 to
// 7) where its runs are not whole lines, and in destination order (target
// 0's blocks 0, 1, 4, 5 first) where they are (128-byte blocks) or where
// the copies are of two dims (pairs of rows apart in the source).
TEST(CopySchedule, JoinedGroupsOfOneDimRunsRunAlongTheRow) {
  struct Variant {
    int64_t run;
    bool two_dims, along;
  };
  for (const Variant v : {Variant{96, false, true}, Variant{128, false, false}, Variant{96, true, false}}) {
    const int64_t rows = 64, src_row = 4 * v.run + 64, dst_row = 4 * v.run;
    CopyProgram p;
    for (int64_t c = 0; c < 8; ++c) {
      const int64_t src_at = (c / 2) * v.run, dst_at = ((c / 4) * 2 + c % 2) * v.run;
      if (v.two_dims) {
        const std::vector<int64_t> e = {rows / 2, 2, v.run}, ss = {3 * src_row, src_row, 1},
                                   ds = {2 * dst_row, dst_row, 1};
        p.AddBox(e, src_at, ss, dst_at, ds, 1);
      } else {
        const std::vector<int64_t> e = {rows, v.run}, ss = {src_row, 1}, ds = {dst_row, 1};
        p.AddBox(e, src_at, ss, dst_at, ds, 1);
      }
    }
    std::vector<ScheduledCopy> copies;
    for (int64_t c = 0; c < 8; ++c)
      copies.push_back({&p, &p.ops[static_cast<size_t>(c)], static_cast<int32_t>(c % 2),
                        static_cast<int32_t>((c / 2) % 2), 0, CopyUnits(p, p.ops[static_cast<size_t>(c)])});
    const CopySchedule s = CopySchedule::Build(copies, {}, 1);
    ASSERT_TRUE(s.mode() == CopySchedule::Mode::kGroups || s.mode() == CopySchedule::Mode::kSlicedGroups) << v.run;
    EXPECT_EQ(s.groups(), v.run % 64 == 0 ? 2 : 1) << v.run;  // whole lines: no line read in parts, no join
    // Whatever the order, each target equals each copy run alone.
    std::vector<std::vector<std::byte>> in(2, std::vector<std::byte>(static_cast<size_t>(3 * rows * src_row))),
        want(2, std::vector<std::byte>(static_cast<size_t>(rows * dst_row))), got = want;
    for (size_t b = 0; b < 2; ++b)
      for (size_t i = 0; i < in[b].size(); ++i) in[b][i] = static_cast<std::byte>((i * 7 + b * 101) & 0xff);
    for (const ScheduledCopy& c : copies)
      RunCopy(p, *c.op, in[static_cast<size_t>(c.src)].data(), want[static_cast<size_t>(c.dst)].data(), 0, c.units);
    ThreadPool pool(2);
    const std::byte* srcs[] = {in[0].data(), in[1].data()};
    std::byte* dsts[] = {got[0].data(), got[1].data()};
    s.Run(pool, srcs, dsts);
    EXPECT_EQ(got, want) << v.run << " " << v.two_dims;
    std::vector<int64_t> order;
    for (const ScheduledCopy& c : s.StridedForTesting()) order.push_back(c.op - p.ops.data());
    if (!v.along) {
      EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7})) << v.run << " " << v.two_dims;
      continue;
    }
    // Along the row: the first half of the row's blocks first, each
    // sender's and each target's blocks in their order.
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.begin() + 4), (std::set<int64_t>{0, 1, 2, 3}));
    for (size_t i = 0; i < order.size(); ++i)
      for (size_t j = i + 1; j < order.size(); ++j)
        if (order[i] % 2 == order[j] % 2 || (order[i] / 2) % 2 == (order[j] / 2) % 2) {
          EXPECT_LT(order[i], order[j]);
        }
  }
}

// Copies too short to slice, a few rows of each a slice, run in groups:
// 2,048 gathers of 64 runs of 32 bytes, eight reading each 16 KiB source
// block (4 MiB: 8 slices, 8 rows of each copy a slice) run in 256 groups,
// the gathers of each block joined (runs under a line), and write what
// each copy alone writes.
TEST(CopySchedule, CopiesTooShortToSliceRunInGroups) {
  constexpr int64_t kBlocks = 256, kRows = 64, kRun = 32;
  CopyProgram p;
  const std::vector<int64_t> extent = {kRows, kRun}, src_strides = {8 * kRun, 1}, dst_strides = {kRun, 1};
  for (int64_t b = 0; b < kBlocks; ++b)
    for (int64_t k = 0; k < 8; ++k)
      p.AddBox(extent, b * kRows * 8 * kRun + k * kRun, src_strides, (b * 8 + k) * kRows * kRun, dst_strides, 1);
  ThreadPool pool(2);
  const CopySchedule s = CopySchedule::Build(OneBufferCopies(p), {}, pool.size());
  EXPECT_EQ(s.mode(), CopySchedule::Mode::kGroups);
  EXPECT_EQ(s.groups(), kBlocks);
  ExpectEachCopyAlone(s, pool, p, kBlocks * kRows * 8 * kRun);
}

// A strip whose span reaches far beyond the median copy's groups apart:
// 64 target rows of 1,044 bytes, each filled by four senders' copies of a
// row (8 runs of 32 bytes, 128 apart) and, at its end, by a fifth sender's
// 20-byte strip of 8 rows. Each row's four copies are a group and each
// strip one of its own (72 groups), not one group per 8 rows with their
// strip; each strip runs right after the group of the last row it crosses
// (where that row's lines were just written), not after every group; every
// byte lands where its copy puts it.
TEST(CopySchedule, StripsReachingManyRowsGroupApart) {
  constexpr int64_t kR = 64, kRow = 1044;
  CopyProgram p;
  std::vector<ScheduledCopy> copies;
  const std::vector<int64_t> runs = {8, 32}, run_src = {32, 1}, run_dst = {128, 1};
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t k = 0; k < 4; ++k) p.AddBox(runs, r * 256, run_src, r * kRow + 32 * k, run_dst, 1);
  const std::vector<int64_t> strip = {8, 20}, strip_src = {20, 1}, strip_dst = {kRow, 1};
  for (int64_t g = 0; g < kR / 8; ++g) p.AddBox(strip, g * 160, strip_src, 8 * g * kRow + 1024, strip_dst, 1);
  for (size_t k = 0; k < p.ops.size(); ++k) {
    ASSERT_EQ(p.ops[k].num_dims, 1);
    const int32_t sender = k < static_cast<size_t>(4 * kR) ? static_cast<int32_t>(k % 4) : 4;
    copies.push_back({&p, &p.ops[k], sender, 0, 0, CopyUnits(p, p.ops[k])});
  }
  ThreadPool pool(2);
  const CopySchedule s = CopySchedule::Build(copies, {}, pool.size());
  EXPECT_EQ(s.mode(), CopySchedule::Mode::kGroups);
  EXPECT_EQ(s.groups(), kR + kR / 8);
  const std::vector<ScheduledCopy>& order = s.StridedForTesting();
  ASSERT_EQ(order.size(), p.ops.size());
  for (int64_t g = 0; g < kR / 8; ++g) {
    const size_t at = static_cast<size_t>(4 * (8 * g + 8) + g);  // rows 0 to 8g+7, and the strips before
    EXPECT_EQ(order[at].op, &p.ops[static_cast<size_t>(4 * kR + g)]) << "strip " << g;
  }
  ExpectAsEachCopyAlone(s, pool, copies, 5, kR * 256, 1, kR * kRow);
}

// Apart strips of a second target, where each row's group joins both
// targets' copies (they read alternate 32-byte runs of the same sender
// rows: JoinBySource): each strip runs right after the joined group of the
// last row it crosses, not after the last group holding any copy of the
// first target (PlaceApart weighs only its own buffer's copies).
TEST(CopySchedule, StripsRunAfterTheirRowsInJoinedGroups) {
  constexpr int64_t kR = 32, kRow = 1044;
  CopyProgram p;
  std::vector<ScheduledCopy> copies;
  const std::vector<int64_t> runs = {8, 32}, run_src = {64, 1}, run_dst = {128, 1};
  std::vector<int32_t> dst_of;
  for (int32_t t = 0; t < 2; ++t)
    for (int64_t r = 0; r < kR; ++r)
      for (int64_t k = 0; k < 4; ++k) {
        p.AddBox(runs, r * 512 + t * 32, run_src, r * kRow + 32 * k, run_dst, 1);
        dst_of.push_back(t);
      }
  const std::vector<int64_t> strip = {8, 20}, strip_src = {20, 1}, strip_dst = {kRow, 1};
  for (int64_t g = 0; g < kR / 8; ++g) {
    p.AddBox(strip, g * 160, strip_src, 8 * g * kRow + 1024, strip_dst, 1);
    dst_of.push_back(1);
  }
  const size_t rows = static_cast<size_t>(8 * kR);
  for (size_t k = 0; k < p.ops.size(); ++k) {
    ASSERT_EQ(p.ops[k].num_dims, 1);
    const int32_t sender = k < rows ? static_cast<int32_t>(k % 4) : 4;
    copies.push_back({&p, &p.ops[k], sender, dst_of[k], 0, CopyUnits(p, p.ops[k])});
  }
  ThreadPool pool(2);
  const CopySchedule s = CopySchedule::Build(copies, {}, pool.size());
  ASSERT_EQ(s.mode(), CopySchedule::Mode::kGroups);
  EXPECT_EQ(s.groups(), kR + kR / 8);  // each row's eight copies joined, and the strips
  const std::vector<ScheduledCopy>& order = s.StridedForTesting();
  ASSERT_EQ(order.size(), p.ops.size());
  for (int64_t g = 0; g < kR / 8; ++g) {
    const size_t at =
        static_cast<size_t>(8 * (8 * g + 8) + g);  // rows 0 to 8g+7 of both targets, and the strips before
    EXPECT_EQ(order[at].op, &p.ops[rows + static_cast<size_t>(g)]) << "strip " << g;
  }
  ExpectAsEachCopyAlone(s, pool, copies, 5, kR * 512, 2, kR * kRow);
}

// Groups too small to cut into parts run in batches of about 256 KiB,
// each group whole in turn: 4,096 copies of two 256-byte runs 512 bytes
// apart, each in a row of its own (too short to slice: a group each) take 8
// tasks, not 4,096, and write what each copy alone writes.
TEST(CopySchedule, SmallGroupsRunInBatches) {
  constexpr int64_t kCopies = 4096, kRun = 256;
  CopyProgram p;
  const std::vector<int64_t> extent = {2, kRun}, strides = {2 * kRun, 1};
  for (int64_t k = 0; k < kCopies; ++k) p.AddBox(extent, k * 4 * kRun, strides, k * 4 * kRun, strides, 1);
  ThreadPool pool(2);
  const CopySchedule s = CopySchedule::Build(OneBufferCopies(p), {}, pool.size());
  EXPECT_EQ(s.mode(), CopySchedule::Mode::kGroups);
  EXPECT_EQ(s.groups(), kCopies);
  EXPECT_EQ(s.tasks(), kCopies * 2 * kRun / (int64_t{256} << 10));
  ExpectEachCopyAlone(s, pool, p, kCopies * 4 * kRun);
}

// A group splits into parts of about 512 KiB, but into no more than leave
// each copy 2 KiB a part (every part sets each copy up anew), unless its
// share of the threads asks for more. Eight targets, each filled by 400
// columns of 24 rows of 64 bytes side by side (600 KiB, 1.5 KiB a copy;
// each copy's source a block of its own): a part a group on 2 threads, two
// (each group's share) on 16; 16 columns of 4 KiB a target (1.5 MiB a
// group, 96 KiB a copy): three parts, as before. Each equals every copy
// run alone.
TEST(CopySchedule, GroupsOfSmallCopiesRunInFewerParts) {
  constexpr int64_t kRows = 24, kTargets = 8;
  for (const auto& [copies, run, threads, parts] :
       {std::tuple{400, 64, 2, 1}, std::tuple{400, 64, 16, 2}, std::tuple{16, 4096, 2, 3}}) {
    CopyProgram p;
    const int64_t width = copies * run;
    const std::vector<int64_t> extent = {kRows, run}, src_strides = {run, 1}, dst_strides = {width, 1};
    for (int64_t k = 0; k < copies; ++k) p.AddBox(extent, k * kRows * run, src_strides, k * run, dst_strides, 1);
    std::vector<ScheduledCopy> scheduled;
    for (int32_t t = 0; t < kTargets; ++t)
      for (const CopyOp& op : p.ops) scheduled.push_back({&p, &op, t, t, 0, CopyUnits(p, op)});
    ThreadPool pool(2);
    const CopySchedule s = CopySchedule::Build(scheduled, {}, threads);
    EXPECT_EQ(s.mode(), CopySchedule::Mode::kGroups) << copies << " " << threads;
    EXPECT_EQ(s.groups(), kTargets) << copies << " " << threads;
    EXPECT_EQ(s.tasks(), kTargets * parts) << copies << " " << threads;
    ExpectAsEachCopyAlone(s, pool, scheduled, kTargets, kRows * width, kTargets, kRows * width);
  }
}

// Random transpositions of runs under a line (1 to 63 bytes), 1 to 3
// threads: every target equals each copy run alone.
TEST(CopySchedule, RandomRunsUnderALineEqualEachCopy) {
  std::mt19937_64 rng(43);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t senders = pick(1, 5), receivers = pick(1, 4), rows = pick(1, 300), blocks = pick(1, 6),
                  run = pick(1, 63);
    const SubLineTransposition sub(senders, receivers, rows, blocks, run);
    std::vector<ScheduledCopy> copies = sub.copies;
    std::shuffle(copies.begin(), copies.end(), rng);
    const int threads = static_cast<int>(pick(1, 3));
    ThreadPool pool(threads);
    const CopySchedule s = CopySchedule::Build(copies, {}, pool.size());
    std::vector<std::vector<std::byte>> src, want, got;
    std::vector<const std::byte*> srcs;
    std::vector<std::byte*> dsts;
    for (int64_t k = 0; k < senders; ++k) {
      src.emplace_back(static_cast<size_t>(rows * sub.src_row));
      for (std::byte& b : src.back()) b = static_cast<std::byte>(rng());
      srcs.push_back(src.back().data());
    }
    for (int64_t k = 0; k < receivers; ++k) {
      want.emplace_back(static_cast<size_t>(rows * sub.dst_row), std::byte{0xee});
      got.push_back(want.back());
    }
    for (auto& g : got) dsts.push_back(g.data());
    for (const ScheduledCopy& c : copies)
      RunCopy(*c.program, *c.op, srcs[static_cast<size_t>(c.src)], want[static_cast<size_t>(c.dst)].data(), 0, c.units);
    s.Run(pool, srcs, dsts);
    ASSERT_EQ(got, want) << "trial " << trial << ": " << senders << " senders, " << receivers << " receivers, " << rows
                         << " rows, " << blocks << " blocks, runs of " << run << " bytes, mode "
                         << static_cast<int>(s.mode());
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
