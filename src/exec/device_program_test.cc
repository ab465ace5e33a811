#include "reshard/device_program.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>

#include "exec/copy_kernel.h"
#include "exec/exec_checker.h"
#include "reshard/notation.h"
#include "reshard/planner.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, DType dtype = DType::kF32) {
  return ParseLayout(text, shape, dtype, std::nullopt).value().layout;
}

// AddBox merges dims contiguous on both sides and drops extent-1 dims.
TEST(CopyProgram, MergesContiguousDims) {
  struct Case {
    std::vector<int64_t> extent, src_strides, dst_strides;
    int64_t run_bytes;
    std::vector<CopyDim> dims;
  } cases[] = {
      // a [4,8] box of a [16,8] buffer packed contiguously: one 128-byte run
      {{4, 8}, {8, 1}, {8, 1}, 128, {}},
      // a [4,2] box of a [16,8] buffer: rows of 8 bytes, src stride 32
      {{4, 2}, {8, 1}, {2, 1}, 8, {{4, 32, 8}}},
      // [2,3,4] from [2,3,8] into [2,3,4]: dims 0 and 1 merge (both sides contiguous over them)
      {{2, 3, 4}, {24, 8, 1}, {12, 4, 1}, 16, {{6, 32, 16}}},
      // extent-1 dims vanish
      {{1, 5, 1}, {40, 8, 1}, {5, 1, 1}, 4, {{5, 32, 4}}},
      // rank 0: one element
      {{}, {}, {}, 4, {}},
  };
  for (const Case& c : cases) {
    CopyProgram p;
    p.AddBox(c.extent, 0, c.src_strides, 0, c.dst_strides, 4);
    ASSERT_EQ(p.ops.size(), 1u);
    EXPECT_EQ(p.ops[0].run_bytes, c.run_bytes);
    EXPECT_EQ(std::vector<CopyDim>(p.dims.begin(), p.dims.end()), c.dims);
  }
  CopyProgram empty;
  empty.AddBox(std::vector<int64_t>{3, 0}, 0, std::vector<int64_t>{1, 1}, 0, std::vector<int64_t>{1, 1}, 4);
  EXPECT_TRUE(empty.ops.empty());
}

// The first 64-byte aligned byte of `v` (v holds 64 bytes more than used).
std::byte* LineAligned(std::vector<std::byte>& v) {
  return v.data() + (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64;
}

// Every op of `p` from a source of `in` bytes (filled from `trial`) into
// `want` (`out` bytes), each run whole by RunCopy, and a CopyRange of each
// whole op reading that source (its destination for the caller to set).
struct EachWhole {
  std::vector<std::byte> src, want;
  std::vector<CopyRange> copies;
  EachWhole(const CopyProgram& p, int64_t in, int64_t out, int trial)
      : src(static_cast<size_t>(in)), want(static_cast<size_t>(out)) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 29 + static_cast<size_t>(trial));
    for (const CopyOp& op : p.ops) {
      RunCopy(p, op, src.data(), want.data(), 0, CopyUnits(p, op));
      copies.push_back({&p, &op, src.data(), nullptr, 0, CopyUnits(p, op)});
    }
  }
};

// RunCopy over any split of the rows equals one run over all of them.
TEST(CopyKernel, SplitRowsEqualWhole) {
  for (int64_t eb : {1, 2, 4, 8, 12, 16, 24}) {
    CopyProgram p;
    const std::vector<int64_t> extent = {3, 5, 7}, src_strides = {99, 11, 1}, dst_strides = {35, 7, 1};
    p.AddBox(extent, eb, src_strides, 0, dst_strides, eb);
    std::vector<std::byte> src(static_cast<size_t>((3 * 99 + 1) * eb)), a(static_cast<size_t>(105 * eb)), b(a.size());
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
    const CopyOp& op = p.ops[0];
    const int64_t units = CopyUnits(p, op);
    RunCopy(p, op, src.data(), a.data(), 0, units);
    for (int64_t lo = 0; lo < units; lo += 4) RunCopy(p, op, src.data(), b.data(), lo, std::min(units, lo + 4));
    EXPECT_EQ(a, b) << eb;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t k = 0; k < 7; ++k)
          EXPECT_EQ(std::memcmp(a.data() + (i * 35 + j * 7 + k) * eb, src.data() + (1 + i * 99 + j * 11 + k) * eb,
                                static_cast<size_t>(eb)),
                    0);
  }
}

// RunInterleaved over any number of parts equals each copy run whole, with
// and without streaming stores: four copies writing alternate column strips
// of the same 6 rows, the way block-cyclic boxes fill a target's rows: runs
// of 32 bytes (streamed, or in 32-byte blocks) and of 24 (by memcpy), the
// three ways a short row is copied, several rows a turn (4 and 5).
TEST(CopyKernel, InterleavedPartsEqualWhole) {
  for (int64_t eb : {4, 16, 12}) {
    CopyProgram p;
    const std::vector<int64_t> extent = {6, 8 / (eb / 4)}, src_strides = {64, 1}, dst_strides = {4 * extent[1], 1};
    for (int64_t c = 0; c < 4; ++c) p.AddBox(extent, (c * 7 + 3) * eb, src_strides, c * extent[1] * eb, dst_strides, eb);
    std::vector<std::byte> src(static_cast<size_t>((6 * 64 + 64) * eb)), want(static_cast<size_t>(6 * 4 * 32));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 13 + 5);
    std::vector<CopyRange> copies;
    for (const CopyOp& op : p.ops) {
      RunCopy(p, op, src.data(), want.data(), 0, CopyUnits(p, op));
      copies.push_back({&p, &op, src.data(), nullptr, 0, CopyUnits(p, op)});
    }
    for (int64_t together : {int64_t{0}, int64_t{1} << 30}) {
      for (int64_t parts : {1, 2, 4, 5, 7}) {
        alignas(16) std::byte got[6 * 4 * 32] = {};
        for (CopyRange& c : copies) c.dst = got;
        for (int64_t k = 0; k < parts; ++k) RunInterleaved(copies, k, parts, together);
        EXPECT_EQ(std::memcmp(got, want.data(), want.size()), 0) << eb << " " << together << " " << parts;
      }
    }
  }
}

// Copies of two strided dims whose rows are under 64 bytes take several
// rows a turn (8, 4 and 2 rows of 8, 16 and 32 bytes), so a turn crosses
// from one outer index to the next (5 rows each): every split into parts
// equals each copy run whole, streamed or not.
TEST(CopyKernel, TwoDimShortRowsInterleavedEqualWhole) {
  for (int64_t run : {2, 4, 8}) {  // u32 elements a row
    CopyProgram p;
    const std::vector<int64_t> extent = {3, 5, run}, src_strides = {80, 12, 1},
                               dst_strides = {5 * 4 * run, 4 * run, 1};
    for (int64_t c = 0; c < 4; ++c) p.AddBox(extent, (c * 3 + 1) * 4, src_strides, c * run * 4, dst_strides, 4);
    for (const CopyOp& op : p.ops) ASSERT_EQ(op.num_dims, 2);
    std::vector<std::byte> src(static_cast<size_t>(4 * (3 * 80 + 16)));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
    const size_t out = static_cast<size_t>(3 * 5 * 4 * run * 4);
    std::vector<std::byte> want(out);
    std::vector<CopyRange> copies;
    for (const CopyOp& op : p.ops) {
      RunCopy(p, op, src.data(), want.data(), 0, CopyUnits(p, op));
      copies.push_back({&p, &op, src.data(), nullptr, 0, CopyUnits(p, op)});
    }
    for (int64_t together : {int64_t{0}, int64_t{1} << 30}) {
      for (int64_t parts : {1, 2, 3, 5, 7}) {
        std::vector<std::byte> got(out + 64);
        std::byte* at = LineAligned(got);
        for (CopyRange& c : copies) c.dst = at;
        for (int64_t k = 0; k < parts; ++k) RunInterleaved(copies, k, parts, together);
        EXPECT_EQ(std::memcmp(at, want.data(), want.size()), 0) << run << " " << together << " " << parts;
      }
    }
  }
}

// A group of boxes of one shape (rows of 64 bytes and over, one a turn) runs as one
// loop over rows; a group where one box differs (another source stride, or
// mixed with a two-dim copy and a contiguous one) takes the general turns;
// boxes of two dims alike (3 rows, a source row skipped, twice) take the
// one loop, stepping over the outer dim, as do boxes alike but for their
// lengths that start together (one box of fewer rows, the first or
// another; boxes of two dims, the first with an outer index fewer or
// another with one more), each box's own end checked. Every variant
// equals each copy run whole, streamed or not, in any number of parts. Rows
// of 128 bytes (streamed or in 32-byte blocks) and of 80 (memcpy).
TEST(CopyKernel, UniformBoxesEqualWhole) {
  enum class Variant {
    kUniform,
    kFewerRows,
    kFirstFewerRows,
    kOtherStride,
    kMixed,
    kTwoDims,
    kTwoDimsLonger,
    kTwoDimsFirstShorter
  };
  for (int64_t cols : {32, 20, 4, 3}) {  // f32: 128-, 80-, 16- and 12-byte rows (the last two several a turn)
    for (Variant v : {Variant::kUniform, Variant::kFewerRows, Variant::kFirstFewerRows, Variant::kOtherStride,
                      Variant::kMixed, Variant::kTwoDims, Variant::kTwoDimsLonger, Variant::kTwoDimsFirstShorter}) {
      CopyProgram p;
      const int64_t boxes = 5, rows = 7, width = cols * boxes + 3;
      const std::vector<int64_t> src_strides = {width, 1}, dst_strides = {cols * boxes, 1};
      const std::vector<int64_t> wide = {2 * width, 1};  // every other source row
      const int64_t out_bytes = rows * cols * boxes * 4;
      const int64_t extra_at = out_bytes;  // the mixed and longer variants' copies write past the boxes
      for (int64_t c = 0; c < boxes; ++c) {
        if (v == Variant::kTwoDims || v == Variant::kTwoDimsLonger || v == Variant::kTwoDimsFirstShorter) {
          const bool longer = v == Variant::kTwoDimsLonger && c == 2;
          const int64_t outer = longer || (v == Variant::kTwoDimsFirstShorter && c > 0) ? 3 : 2;
          const std::vector<int64_t> e = {outer, 3, cols}, s2 = {4 * width, width, 1},
                                     d2 = {3 * cols * boxes, cols * boxes, 1};
          p.AddBox(e, c * cols * 4, s2, longer ? extra_at : c * cols * 4, d2, 4);
          EXPECT_EQ(p.ops.back().num_dims, 2);
          continue;
        }
        const bool fewer = (v == Variant::kFewerRows && c == 2) || (v == Variant::kFirstFewerRows && c == 0);
        const std::vector<int64_t> extent = {fewer ? rows - 2 : rows, cols};
        const bool other = v == Variant::kOtherStride && c == 3;
        p.AddBox(extent, c * cols * 4, other ? wide : src_strides, c * cols * 4, dst_strides, 4);
      }
      std::vector<std::byte> src(static_cast<size_t>(2 * rows * width * 4));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 11 + 3);
      if (v == Variant::kMixed) {
        // A [2,3,cols] copy (two dims: a source row skipped after each 3) and a contiguous one.
        const std::vector<int64_t> e3 = {2, 3, cols}, s3 = {4 * width, width, 1}, d3 = {3 * cols, cols, 1};
        p.AddBox(e3, 0, s3, extra_at, d3, 4);
        const std::vector<int64_t> e1 = {50}, s1 = {1};
        p.AddBox(e1, 8, s1, extra_at + 6 * cols * 4, s1, 4);
        ASSERT_EQ(p.ops.size(), static_cast<size_t>(boxes + 2));
        EXPECT_EQ(p.ops[boxes].num_dims, 2);
        EXPECT_EQ(p.ops[boxes + 1].num_dims, 0);
      }
      const bool nine_rows = v == Variant::kTwoDimsLonger || v == Variant::kTwoDimsFirstShorter;  // 3 x 3 target rows
      const int64_t total = out_bytes + (nine_rows ? 9 * cols * boxes * 4 : 6 * cols * 4 + 200);
      std::vector<std::byte> want(static_cast<size_t>(total));
      std::vector<CopyRange> copies;
      for (const CopyOp& op : p.ops) {
        RunCopy(p, op, src.data(), want.data(), 0, CopyUnits(p, op));
        copies.push_back({&p, &op, src.data(), nullptr, 0, CopyUnits(p, op)});
      }
      for (int64_t together : {int64_t{0}, int64_t{1} << 30}) {
        for (int64_t parts : {1, 2, 3, 7}) {
          std::vector<std::byte> got(static_cast<size_t>(total) + 64);
          std::byte* at = LineAligned(got);
          for (CopyRange& c : copies) c.dst = at;
          for (int64_t k = 0; k < parts; ++k) RunInterleaved(copies, k, parts, together);
          EXPECT_EQ(std::memcmp(at, want.data(), want.size()), 0)
              << cols << " " << static_cast<int>(v) << " " << together << " " << parts;
        }
      }
    }
  }
}

// Random groups: copies of random lengths, run lengths and dims (none,
// one or two), so that copies run out at different turns and the others
// go on without them, at random source and destination places (each its
// own stretch of the output): every split into parts equals each copy run
// whole.
TEST(CopyKernel, RandomGroupsInterleavedEqualWhole) {
  std::mt19937_64 rng(29);
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 300; ++trial) {
    CopyProgram p;
    const int64_t n = draw(1, 9);
    int64_t out = 0;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t run = draw(1, 80), dims = draw(0, 2), rows = draw(1, 12), inner = draw(1, 4);
      const int64_t src_at = draw(0, 300);
      if (dims == 0) {
        const std::vector<int64_t> e = {run}, one = {1};
        p.AddBox(e, src_at, one, out, one, 1);
        out += run + draw(0, 7);
      } else if (dims == 1) {
        const std::vector<int64_t> e = {rows, run}, ss = {run + draw(0, 50), 1}, ds = {run + draw(0, 9), 1};
        p.AddBox(e, src_at, ss, out, ds, 1);
        out += rows * ds[0];
      } else {
        const int64_t ss1 = run + draw(1, 20), ds1 = run + draw(0, 5);
        const std::vector<int64_t> e = {rows, inner, run}, ss = {inner * ss1 + draw(1, 30), ss1, 1},
                                   ds = {inner * ds1, ds1, 1};
        p.AddBox(e, src_at, ss, out, ds, 1);
        out += rows * inner * ds1;
      }
    }
    int64_t in = 0;
    for (const CopyOp& op : p.ops) {
      int64_t last = op.src_offset + op.run_bytes;
      for (int32_t d = 0; d < op.num_dims; ++d) {
        const CopyDim& dim = p.dims[static_cast<size_t>(op.first_dim + d)];
        last += (dim.count - 1) * dim.src_stride;
      }
      in = std::max(in, last);
    }
    EachWhole whole(p, in, out, trial);
    std::vector<CopyRange>& copies = whole.copies;
    const std::vector<std::byte>& want = whole.want;
    const int64_t parts = draw(1, 5);
    std::vector<std::byte> got(static_cast<size_t>(out));
    for (CopyRange& c : copies) c.dst = got.data();
    for (int64_t k = 0; k < parts; ++k) RunInterleaved(copies, k, parts, 0);
    ASSERT_EQ(got, want) << "trial " << trial << ", " << n << " copies, " << parts << " parts";
  }
}

// Groups of one-dim copies unlike in strides, runs, rows and first rows
// (RunInterleaved's loop for one dim: the group's fewest rows a turn; rows
// streamed where the group streams and theirs allow, whole lines that start
// off a line too), each copy its own stretch of the target or all side by
// side along shared rows: every split into parts, streamed or not, by
// source or not, equals each copy run whole.
TEST(CopyKernel, OneDimGroupsUnlikeEqualWhole) {
  std::mt19937_64 rng(41);
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t runs[] = {16, 32, 48, 64, 96, 128, 192, 256, 24, 7, 100, 640};
  for (int trial = 0; trial < 400; ++trial) {
    CopyProgram p;
    const int64_t n = draw(1, 12);
    // Half the trials: the copies' runs side by side along shared target
    // rows (pieces of one row meeting inside lines, as block-cyclic boxes
    // do), each copy's place in the row 16-byte aligned or not; else each
    // copy its own stretch of the target.
    const bool shared = draw(0, 1) == 0;
    std::vector<int64_t> run_of(static_cast<size_t>(n)), at_of(static_cast<size_t>(n));
    int64_t width = 0;
    for (int64_t c = 0; c < n; ++c) {
      run_of[static_cast<size_t>(c)] = runs[draw(0, 11)];
      at_of[static_cast<size_t>(c)] = width;
      width += run_of[static_cast<size_t>(c)] + (draw(0, 2) == 0 ? draw(1, 40) : 0);
    }
    const int64_t shared_rows = draw(2, 20), row_bytes = width + 16 * draw(0, 2);
    int64_t in = 0, out = shared ? shared_rows * row_bytes : 0;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t run = run_of[static_cast<size_t>(c)], rows = shared ? shared_rows : draw(2, 20);
      // Source rows at any stride and place (rows a page apart in some
      // trials: the next row's source prefetched); target rows 16-byte
      // aligned but for one copy in four, each row past its run (no merge
      // into one).
      const int64_t ss = run + draw(0, 3) * 16 + draw(0, 1) * draw(1, 15) + draw(0, 1) * 4096, src_at = draw(0, 200);
      const int64_t ds = shared ? row_bytes : run + draw(1, 4) * 16;
      const int64_t dst_at =
          shared ? at_of[static_cast<size_t>(c)] : out + draw(0, 4) * 16 + (draw(0, 3) == 0 ? draw(1, 15) : 0);
      const std::vector<int64_t> e = {rows, run}, s1 = {ss, 1}, d1 = {ds, 1};
      p.AddBox(e, src_at, s1, dst_at, d1, 1);
      ASSERT_EQ(p.ops.back().num_dims, 1);
      in = std::max(in, src_at + (rows - 1) * ss + run);
      if (!shared) out = dst_at + rows * ds;
    }
    EachWhole whole(p, in, out, trial);
    std::vector<CopyRange>& copies = whole.copies;
    const std::vector<std::byte>& want = whole.want;
    const int64_t parts = draw(1, 4);
    for (int64_t together : {int64_t{0}, int64_t{1} << 30}) {
      for (bool by_source : {false, true}) {
        std::vector<std::byte> got(static_cast<size_t>(out) + 64);
        std::byte* at = LineAligned(got);
        for (CopyRange& c : copies) c.dst = at;
        for (int64_t k = 0; k < parts; ++k) RunInterleaved(copies, k, parts, together, by_source);
        ASSERT_EQ(std::memcmp(at, want.data(), want.size()), 0)
            << "trial " << trial << ", " << n << " copies, " << parts << " parts, " << together << " " << by_source;
      }
    }
  }
}

// By source: whole copies of one dim, or of two whose inner rows lie end
// to end in the source, run a plane of each a turn, parts split over each
// copy's planes (its outer index; a one-dim copy's runs under 64 bytes,
// as many a plane as make 64), also where one copy has another outer count, inner
// count or run, or is of one dim; a group where one copy is not whole, or
// one's inner rows lie apart in the source, takes the general turns.
// Every variant, any number of parts, streamed or not, equals each copy
// run whole.
TEST(CopyKernel, SourcePlanesEqualWhole) {
  enum class Variant { kAlike, kOtherOuter, kOtherInner, kOtherRun, kOneDim, kPartOfOne, kInnerApart };
  for (Variant v : {Variant::kAlike, Variant::kOtherOuter, Variant::kOtherInner, Variant::kOtherRun, Variant::kOneDim,
                    Variant::kPartOfOne, Variant::kInnerApart}) {
    // Bytes: streamed (or 32-byte blocks); memcpy; under a line, where a copy
    // of one dim takes planes of as many runs as make a line (2 and 4; its 9
    // rows leave a shorter last plane).
    for (int64_t run : {64, 48, 24, 16}) {
      CopyProgram p;
      const int64_t copies_n = 4, outer = 9, inner = 3;
      // Sender rows of copies_n blocks of `inner` runs (of up to 2 * run
      // bytes, a run apart where kInnerApart); receiver rows of `inner`
      // lines, each line a slot of 2 * run bytes from every copy.
      const int64_t block = 2 * inner * 2 * run, src_row = copies_n * block, dst_line = copies_n * 2 * run;
      for (int64_t c = 0; c < copies_n; ++c) {
        const bool odd = c == 1;
        const int64_t o = v == Variant::kOtherOuter && odd ? outer - 2 : outer;
        const int64_t n = v == Variant::kOtherInner && odd ? inner - 1 : inner;
        const int64_t r = v == Variant::kOtherRun && odd ? 2 * run : run;
        const int64_t apart = v == Variant::kInnerApart && odd ? 2 * r : r;
        if (v == Variant::kOneDim && odd) {
          const std::vector<int64_t> e = {o, r}, ss = {src_row, 1}, ds = {inner * dst_line, 1};
          p.AddBox(e, c * block, ss, c * 2 * run, ds, 1);
          ASSERT_EQ(p.ops.back().num_dims, 1);
          continue;
        }
        const std::vector<int64_t> e = {o, n, r}, ss = {src_row, apart, 1}, ds = {inner * dst_line, dst_line, 1};
        p.AddBox(e, c * block, ss, c * 2 * run, ds, 1);
        ASSERT_EQ(p.ops.back().num_dims, 2);
      }
      std::vector<std::byte> src(static_cast<size_t>(outer * src_row));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 3);
      const size_t out = static_cast<size_t>(outer * inner * dst_line);
      std::vector<std::byte> want(out);
      std::vector<CopyRange> copies;
      for (const CopyOp& op : p.ops) {
        RunCopy(p, op, src.data(), want.data(), 0, CopyUnits(p, op));
        copies.push_back({&p, &op, src.data(), nullptr, 0, CopyUnits(p, op)});
      }
      if (v == Variant::kPartOfOne) copies[2].lo = 1;  // its first row copied apart, before the group
      for (int64_t together : {int64_t{0}, int64_t{1} << 30}) {
        for (int64_t parts : {1, 2, 4, 9, 11}) {
          std::vector<std::byte> got(out + 64);
          std::byte* at = LineAligned(got);
          for (CopyRange& c : copies) c.dst = at;
          if (v == Variant::kPartOfOne) RunCopy(p, *copies[2].op, src.data(), at, 0, 1);
          for (int64_t k = 0; k < parts; ++k) RunInterleaved(copies, k, parts, together, /*by_source=*/true);
          EXPECT_EQ(std::memcmp(at, want.data(), want.size()), 0)
              << static_cast<int>(v) << " " << run << " " << together << " " << parts;
        }
      }
    }
  }
}

// RunInterleavedUnfenced says whether it streamed on every path (its
// caller fences only then), and copies as RunInterleaved does: groups of
// copies alike; of one dim unlike in strides, their copies alike or not
// (one copy's runs 8 bytes shorter: copied without streaming beside
// copies that stream); of two dims unlike, or with a contiguous copy among
// them (the general turns); and by source. Runs that stream (in a pass
// beyond the caches, 16-byte multiples) and runs that do not.
TEST(CopyKernel, UnfencedSaysWhereItStreamed) {
  enum class Group { kAlike, kOneDimUnlike, kKindsUnlike, kTwoDimUnlike, kContiguous, kBySource };
  for (Group g : {Group::kAlike, Group::kOneDimUnlike, Group::kKindsUnlike, Group::kTwoDimUnlike, Group::kContiguous,
                  Group::kBySource}) {
    for (int64_t run : {64, 48, 24}) {
      // Four copies of 9 rows (of 3 rows each, two dims), copy c writing
      // slot c of each target line of 4 * run bytes; copy 1 reading rows
      // twice as far apart (one dim unlike), runs 8 bytes shorter too
      // (kinds unlike), rows of 2 runs (two dims), or one run (contiguous).
      CopyProgram p;
      const int64_t rows = 9, line = 4 * run, src_row = 8 * run;
      for (int64_t c = 0; c < 4; ++c) {
        const bool odd = c == 1;
        if (g == Group::kTwoDimUnlike) {
          // (Planes 4 source rows apart: the dims do not merge.)
          const std::vector<int64_t> e = {rows, odd ? 2 : 3, run}, ss = {4 * src_row, src_row, 1},
                                     ds = {3 * line, line, 1};
          p.AddBox(e, c * run, ss, c * run, ds, 1);
          ASSERT_EQ(p.ops.back().num_dims, 2);
        } else if (g == Group::kContiguous && odd) {
          const std::vector<int64_t> e = {run}, ss = {1}, ds = {1};
          p.AddBox(e, c * run, ss, c * run, ds, 1);
          ASSERT_EQ(p.ops.back().num_dims, 0);
        } else {
          const bool unlike = (g == Group::kOneDimUnlike || g == Group::kKindsUnlike) && odd;
          const std::vector<int64_t> e = {rows, g == Group::kKindsUnlike && odd ? run - 8 : run},
                                     ss = {unlike ? 2 * src_row : src_row, 1}, ds = {line, 1};
          p.AddBox(e, c * run, ss, c * run, ds, 1);
        }
      }
      EachWhole each(p, 3 * rows * 2 * src_row, 3 * rows * line, static_cast<int>(run));
      for (int64_t together : {int64_t{0}, kStreamPassBytes}) {
        std::vector<std::byte> got(each.want.size() + 64);
        std::byte* at = LineAligned(got);
        for (CopyRange& c : each.copies) c.dst = at;
        const bool streamed = RunInterleavedUnfenced(each.copies, 0, 1, together, g == Group::kBySource);
        FenceStreamingStores();
        EXPECT_EQ(streamed, together > 0 && run % 16 == 0) << static_cast<int>(g) << " " << run << " " << together;
        EXPECT_EQ(std::memcmp(at, each.want.data(), each.want.size()), 0)
            << static_cast<int>(g) << " " << run << " " << together;
      }
    }
  }
}

// RunCopyUnfenced says whether it streamed (its caller fences only then):
// strided runs of 16-byte multiples in a pass beyond the caches do, runs of
// other lengths, a lone small copy and a contiguous copy do not; and it
// copies as RunCopy does, over any split of its units.
TEST(CopyKernel, RunCopyUnfencedSaysWhereItStreamed) {
  for (int64_t run : {64, 48, 24}) {
    for (bool strided : {true, false}) {
      CopyProgram p;
      if (strided) {
        const std::vector<int64_t> e = {9, run}, ss = {2 * run, 1}, ds = {3 * run, 1};
        p.AddBox(e, 0, ss, 0, ds, 1);
        ASSERT_EQ(p.ops.back().num_dims, 1);
      } else {
        const std::vector<int64_t> e = {run}, ss = {1}, ds = {1};
        p.AddBox(e, 0, ss, 0, ds, 1);
        ASSERT_EQ(p.ops.back().num_dims, 0);
      }
      EachWhole each(p, 18 * run, 27 * run, static_cast<int>(run));
      const CopyOp& op = p.ops[0];
      const int64_t units = CopyUnits(p, op);
      for (int64_t together : {int64_t{0}, kStreamPassBytes}) {
        std::vector<std::byte> got(each.want.size() + 64);
        std::byte* at = LineAligned(got);
        bool streamed = false;
        for (int64_t lo = 0; lo < units; lo += 4)
          streamed = RunCopyUnfenced(p, op, each.src.data(), at, lo, std::min(units, lo + 4), together) || streamed;
        FenceStreamingStores();
        EXPECT_EQ(streamed, strided && together > 0 && run % 16 == 0) << run << " " << strided << " " << together;
        EXPECT_EQ(std::memcmp(at, each.want.data(), each.want.size()), 0) << run << " " << strided << " " << together;
      }
    }
  }
}

// Runs of whole lines whose target rows start 32 bytes into a line stream
// in a destination group of copies alike, whose turn writes each line's
// halves from neighbouring copies, in a pass beyond the caches; not by
// source, not where the pass is small, and not as a lone copy (RunCopy),
// which would write each line's halves apart in time. Every way copies as
// each copy alone.
TEST(CopyKernel, WholeLinesOffALineStreamInDestinationGroups) {
  CopyProgram p;
  constexpr int64_t kRows = 9, kRun = 64, kLine = 4 * kRun;
  for (int64_t c = 0; c < 4; ++c) {
    const std::vector<int64_t> e = {kRows, kRun}, ss = {2 * kRun, 1}, ds = {kLine, 1};
    p.AddBox(e, c * kRows * 2 * kRun, ss, c * kRun, ds, 1);
    ASSERT_EQ(p.ops.back().num_dims, 1);
  }
  EachWhole each(p, 4 * kRows * 2 * kRun, kRows * kLine, 5);
  for (int64_t together : {int64_t{0}, kStreamPassBytes}) {
    for (bool by_source : {false, true}) {
      std::vector<std::byte> got(each.want.size() + 128);
      std::byte* at = LineAligned(got) + 32;  // 32 into a line
      for (CopyRange& c : each.copies) c.dst = at;
      const bool streamed = RunInterleavedUnfenced(each.copies, 0, 1, together, by_source);
      FenceStreamingStores();
      EXPECT_EQ(streamed, together > 0 && !by_source) << together << " " << by_source;
      EXPECT_EQ(std::memcmp(at, each.want.data(), each.want.size()), 0) << together << " " << by_source;
    }
    std::vector<std::byte> got(each.want.size() + 128);
    std::byte* at = LineAligned(got) + 32;
    bool streamed = false;
    for (const CopyRange& c : each.copies)
      streamed = RunCopyUnfenced(p, *c.op, c.src, at, 0, c.hi, together) || streamed;
    FenceStreamingStores();
    EXPECT_FALSE(streamed) << together;
    EXPECT_EQ(std::memcmp(at, each.want.data(), each.want.size()), 0) << together;
  }
}

// What an executor keeps of a program is keyed on its id: a copy (new
// arrays) gets a new id, a move carries it with the arrays, and a program
// compiled where a destroyed one lived never takes the old one's.
TEST(PlanProgram, IdNamesOneObjectsArrays) {
  const std::vector<int64_t> shape = {64, 64};
  const Layout src = Parse("blockcyclic(block=[8,8], grid=[2,4])", shape, DType::kF32);
  const Layout dst = Parse("blockcyclic(block=[16,16], grid=[4,2])", shape, DType::kF32);
  const Exchange exchange = Exchange::Create(src, dst).value();
  PlanProgram a = PlanProgram::Compile(exchange).value();
  const uint64_t id = a.id();
  EXPECT_NE(id, 0u);
  const PlanProgram copy = a;
  EXPECT_NE(copy.id(), id);
  const std::byte* ops = reinterpret_cast<const std::byte*>(a.steps()[0].devices[0].direct.ops.data());
  PlanProgram moved = std::move(a);
  EXPECT_EQ(moved.id(), id);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(moved.steps()[0].devices[0].direct.ops.data()), ops);
  EXPECT_EQ(a.id(), 0u);  // NOLINT(bugprone-use-after-move): moved from
  std::optional<PlanProgram> slot;
  uint64_t previous = 0;
  for (int k = 0; k < 3; ++k) {
    slot.reset();
    slot.emplace(PlanProgram::Compile(exchange).value());
    EXPECT_NE(slot->id(), previous);
    EXPECT_NE(slot->id(), id);
    previous = slot->id();
  }
}

// The canonical reshard: one step, 7 messages of 256 B per device, 256 B local, 32-byte runs.
TEST(PlanProgram, Canonical) {
  Layout src = Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16});
  Layout dst = Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16});
  Result<PlanResult> planned = PlanReshard(src, dst, PlannerOptions{});
  ASSERT_TRUE(planned.ok());
  // Per message (the reference), and by default once per group pattern: one
  // group of 8, 8 receiver classes, 64 pairs of 256 bytes, and device 0's
  // part expanded from it the same as the per-message program's.
  CompileOptions per_message;
  per_message.group_patterns = false;
  Result<PlanProgram> p = PlanProgram::Compile(planned->plan, per_message);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->steps().size(), 1u);
  const PlanProgram grouped = PlanProgram::Compile(planned->plan).value();
  const GroupCopies* gc = grouped.steps()[0].group_copies.get();
  ASSERT_NE(gc, nullptr);
  EXPECT_EQ(gc->group_size, 8);
  ASSERT_EQ(gc->patterns.size(), 1u);
  EXPECT_EQ(gc->patterns[0].classes, 8);
  EXPECT_EQ(gc->pair_bytes, std::vector<int64_t>(64, 256));
  EXPECT_EQ(gc->copies.ops.size(), 64u);
  const DeviceProgram expanded = GroupDeviceProgram(*gc, grouped.steps()[0].devices[0], 0);
  EXPECT_EQ(expanded.send_peer, p->steps()[0].devices[0].send_peer);
  EXPECT_EQ(expanded.recv_count, p->steps()[0].devices[0].recv_count);
  Result<CheckReport> g = RunChecked(grouped, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->ok()) << g->first_problem;
  EXPECT_EQ(g->stats.bytes_sent, 8 * 1792);
  const DeviceProgram& d0 = p->steps()[0].devices[0];
  EXPECT_EQ(d0.send_peer.size(), 7u);
  EXPECT_EQ(d0.recv_peer.size(), 7u);
  for (int64_t c : d0.send_count) EXPECT_EQ(c, 256);
  EXPECT_EQ(d0.local.bytes, 256);
  for (const CopyOp& op : d0.pack.ops) EXPECT_EQ(op.run_bytes, 32);  // [8,2,4] boxes of [8,16,4]: 2 rows of 4 are contiguous
  Result<CheckReport> r = RunChecked(*p, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->first_problem;
  EXPECT_EQ(r->elements_checked, 4096);
  EXPECT_EQ(r->stats.bytes_moved, 8 * 2048);
  EXPECT_EQ(r->stats.bytes_sent, 8 * 1792);
  // source 2048 + target 2048 + send 1792
  EXPECT_EQ(r->stats.peak_bytes, 2048 + 2048 + 1792);
}

// Device-only compilation gives the same device's program as the whole plan.
TEST(PlanProgram, DevicePartMatchesWhole) {
  Layout src = Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16});
  Layout dst = Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16});
  const CollectivePlan plan = PlanReshard(src, dst, PlannerOptions{}).value().plan;
  CompileOptions per_message;
  per_message.group_patterns = false;
  const PlanProgram whole = PlanProgram::Compile(plan, per_message).value();
  const PlanProgram grouped = PlanProgram::Compile(plan).value();
  ASSERT_NE(grouped.steps()[0].group_copies, nullptr);
  for (int64_t dev = 0; dev < 8; ++dev) {
    const PlanProgram part = PlanProgram::CompileDevice(plan, dev).value();
    const DeviceProgram& a = whole.steps()[0].devices[dev];
    const DeviceProgram& b = part.steps()[0].devices[dev];
    // (And the part a rank expands from the whole program's pattern.)
    const DeviceProgram e = GroupDeviceProgram(*grouped.steps()[0].group_copies,
                                               grouped.steps()[0].devices[static_cast<size_t>(dev)], static_cast<size_t>(dev));
    for (const DeviceProgram* w : {&a, &e}) {
      EXPECT_EQ(w->send_peer, b.send_peer);
      EXPECT_EQ(w->send_count, b.send_count);
      EXPECT_EQ(w->recv_peer, b.recv_peer);
      EXPECT_EQ(w->recv_count, b.recv_count);
      EXPECT_EQ(w->pack.bytes, b.pack.bytes);
      EXPECT_EQ(w->unpack.bytes, b.unpack.bytes);
    }
  }
}

// Wrong buffer sizes are InvalidArgument naming the device, before anything runs.
TEST(Executor, WrongSizeBuffers) {
  Layout src = Parse("{devices=[4]<=[4]}", {16});
  Layout dst = Parse("{devices=[4]3,2,1,0}", {16});
  const PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value()).value();
  std::vector<std::vector<std::byte>> a(4, std::vector<std::byte>(16)), b(4, std::vector<std::byte>(16));
  b[2].resize(12);
  std::vector<std::span<const std::byte>> s(a.begin(), a.end());
  std::vector<std::span<std::byte>> t(b.begin(), b.end());
  std::unique_ptr<Executor> ex = MakeInProcessExecutor();
  Result<ExecStats> r = ex->Run(p, s, t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("device 2's target buffer holds 12 bytes"), std::string::npos) << r.status();
  t.pop_back();
  EXPECT_FALSE(ex->Run(p, s, t).ok());
}

// The checker catches a wrong program: a copy redirected is a mismatch and a
// coverage error, never a write out of bounds.
TEST(Checker, CatchesWrongProgram) {
  Layout src = Parse("{devices=[4]<=[4]}", {16});
  Layout dst = Parse("{devices=[4]3,2,1,0}", {16});
  PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value()).value();
  ASSERT_TRUE(CheckCoverage(p).ok());
  auto& ops = const_cast<DeviceProgram&>(p.steps()[0].devices[0]).unpack.ops;
  ASSERT_FALSE(ops.empty());
  ops[0].dst_offset += 4;  // now writes past element 0 and misses it
  EXPECT_FALSE(CheckCoverage(p).ok());
}

// A reducing step's coverage is per routed part: a device that loses one
// part's message, is filled where parts reach it, or is not filled where
// none does, fails (max's tags would not show a lost non-winning part).
TEST(Checker, CatchesALostPartAndAWrongFill) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  auto parse = [&](const std::string& text) { return ParseLayout(text, {16, 16}, DType::kF32, m).value().layout; };
  auto compile = [&](const std::string& from, const std::string& to) {
    PlannerOptions o;
    o.meshes = {m};
    o.strategy = Strategy::kExchange;
    return PlanProgram::Compile(PlanReshard(parse(from), parse(to), o).value().plan).value();
  };
  PlanProgram p = compile("[Partial(\"max\"), Shard(0)]", "P('x', None)");
  ASSERT_TRUE(CheckCoverage(p).ok());
  auto& dp = const_cast<DeviceProgram&>(p.steps()[0].devices[0]);
  ASSERT_FALSE(dp.local.ops.empty());  // device 0 keeps rows of its own part 0
  dp.local = CopyProgram{};            // part 0 lost
  EXPECT_FALSE(CheckCoverage(p).ok());
  // Into a partial target: the y = 1 devices hold zeros, the y = 0 devices their rows.
  PlanProgram q = compile("P('x', None)", "P('x', None, unreduced={'y'})");
  ASSERT_TRUE(CheckCoverage(q).ok());
  auto& filled = const_cast<DeviceProgram&>(q.steps()[0].devices[1]);
  auto& kept = const_cast<DeviceProgram&>(q.steps()[0].devices[0]);
  ASSERT_FALSE(filled.fill.ops.empty());
  ASSERT_TRUE(kept.fill.ops.empty());
  kept.fill = filled.fill;  // filled where a part reaches it
  EXPECT_FALSE(CheckCoverage(q).ok());
  kept.fill = CopyProgram{};
  filled.fill = CopyProgram{};  // not filled where none does
  EXPECT_FALSE(CheckCoverage(q).ok());
}

TEST(BufferFormat, StridesAndSizes) {
  const std::vector<int64_t> shape = {5, 3};
  EXPECT_EQ(BufferFormat{}.Strides(shape), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(BufferFormat::ColumnMajor().Strides(shape), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(BufferFormat::ColumnMajor(8).Strides(shape), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(*BufferFormat::ColumnMajor(8).Bytes(shape, 4), 8 * 3 * 4);
  EXPECT_EQ((BufferFormat{BufferFormat::Order::kRowMajor, 7}.Strides(std::vector<int64_t>{2, 5, 3})),
            (std::vector<int64_t>{35, 7, 1}));
  EXPECT_EQ(*BufferFormat::ColumnMajor(8).Bytes(std::vector<int64_t>{5, 0}, 4), 0);
  Result<int64_t> low = BufferFormat::ColumnMajor(4).Bytes(shape, 4);
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.status().message().find("leading dimension 4 is below the local extent 5 of dim 0"), std::string::npos);
}

// A column-major source with a leading dimension: the pack reads through its
// strides, and the compiled sizes (what executors check) follow the format.
TEST(DeviceProgram, ColumnMajorSourceCompilesThroughItsStrides) {
  Layout src = Parse("{devices=[2,1]<=[2]}", {4, 3});
  Layout dst = Parse("{devices=[1,2]<=[2]}", {4, 3});
  CompileOptions o;
  o.source_format = BufferFormat::ColumnMajor(6);
  const PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value(), o).value();
  const DeviceProgram& d0 = p.steps()[0].devices[0];
  EXPECT_EQ(d0.input_bytes, 6 * 3 * 4);  // [2,3] local, leading dim 6
  EXPECT_EQ(d0.output_bytes, 4 * 2 * 4);  // [4,2] local, row-major tight
  // Source in column-major order, element (i, j) of the global [4,3] is i * 3 + j.
  std::vector<std::vector<float>> in(2, std::vector<float>(18, -1)), out(2);
  for (int dev = 0; dev < 2; ++dev)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) in[dev][i + 6 * j] = static_cast<float>((2 * dev + i) * 3 + j);
  out[0].assign(8, 0);
  out[1].assign(4, 0);
  std::vector<std::span<const std::byte>> s = {std::as_bytes(std::span(in[0])), std::as_bytes(std::span(in[1]))};
  std::vector<std::span<std::byte>> t = {std::as_writable_bytes(std::span(out[0])), std::as_writable_bytes(std::span(out[1]))};
  ASSERT_TRUE(MakeInProcessExecutor()->Run(p, s, t).ok());
  EXPECT_EQ(out[0], (std::vector<float>{0, 1, 3, 4, 6, 7, 9, 10}));
  EXPECT_EQ(out[1], (std::vector<float>{2, 5, 8, 11}));
}

// Between column-major buffers a copy runs down the contiguous columns, not
// element by element; the staged message follows the source's order.
TEST(DeviceProgram, ColumnMajorCopiesRunDownColumns) {
  Layout src = Parse("{devices=[1,2]<=[2]}", {64, 8});
  Layout dst = Parse("{devices=[2,1]<=[2]}", {64, 8});
  CompileOptions o;
  o.source_format = BufferFormat::ColumnMajor(70);
  o.target_format = BufferFormat::ColumnMajor();
  const PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value(), o).value();
  const DeviceProgram& d0 = p.steps()[0].devices[0];
  ASSERT_FALSE(d0.local.ops.empty());
  ASSERT_FALSE(d0.pack.ops.empty());
  ASSERT_FALSE(d0.unpack.ops.empty());
  EXPECT_EQ(d0.local.ops[0].run_bytes, 32 * 4);   // half a column of 64 floats
  EXPECT_EQ(d0.pack.ops[0].run_bytes, 32 * 4);
  EXPECT_EQ(d0.unpack.ops[0].run_bytes, 4 * 32 * 4);  // its 4 whole columns, contiguous on both sides
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// The replicas of a target tile get one staged box: three messages at one
// offset, packed once, and every transport delivers them exactly.
TEST(PlanProgram, ABoxSentToReplicasIsPackedOnce) {
  const Layout src = Parse("{maximal device=0}", {8});
  const Layout dst = Parse("{devices=[1,4]<=[4] last_tile_dim_replicate}", {8});
  const PlanProgram p = PlanProgram::Compile(Exchange::Create(src, dst).value()).value();
  const DeviceProgram& d0 = p.steps()[0].devices[0];
  EXPECT_EQ(d0.send_bytes, 32);
  EXPECT_EQ(d0.send_count, (std::vector<int64_t>{32, 32, 32}));
  EXPECT_EQ(d0.send_offset, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(d0.pack_owner, (std::vector<int32_t>{0, 0, 0}));
  for (Transport t : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
    for (StepTransport rt : {StepTransport::kAlltoallv, StepTransport::kPointToPoint}) {
      Result<CheckReport> r = RunChecked(p, 2, t, {rt});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->ok()) << r->first_problem;
      EXPECT_EQ(r->stats.steps[0].sent[0], 96);
      if (t == Transport::kStaged) {
        EXPECT_EQ(r->stats.peak_per_device[0], 32 + 32 + 32);
      }
    }
  }
}

}  // namespace
}  // namespace reshard
