#include "exec/copy_kernel.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "exec/row_walk.h"
#include "reshard/layout.h"

namespace reshard {
namespace {

// Asks for the cache lines of the `run` bytes at `p` ahead of their use
// (every line the bytes touch, however they are aligned).
inline void PrefetchRun(const std::byte* p, size_t run) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + run;
  for (uintptr_t line = first; line < end; line += 64) __builtin_prefetch(reinterpret_cast<const void*>(line));
}

// How many rows ahead Rows prefetches the source of an op whose rows are
// `run` bytes `src_stride` apart: 0 (none) where the rows are adjacent or
// long, which the hardware's stream prefetchers follow on their own; else
// about 1 KiB of rows ahead. Rows kilobytes apart (a box's rows in a large
// buffer) are a pattern those prefetchers do not follow, so an inline copy
// of each waits for memory line by line: 512-byte rows 32 KiB apart packed
// with streaming stores took twice as long without it.
int PrefetchAhead(int64_t run, int64_t src_stride) {
  constexpr int64_t kLongRun = 4096, kAheadBytes = 1024, kMaxAhead = 8;
  if (run > kLongRun || (src_stride >= 0 && src_stride <= run + 64) || (src_stride < 0 && -src_stride <= run + 64))
    return 0;
  return static_cast<int>(std::clamp<int64_t>(kAheadBytes / run, 1, kMaxAhead));
}

// Rows [lo, hi) of an op with nd >= 1 dims, each row `run` bytes moved by
// `copy`; the source of the row `ahead` rows on in the innermost dim is
// prefetched `run` bytes at a time (ahead 0: none).
template <typename Copy>
void Rows(const CopyDim* dims, int nd, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi, Copy copy,
          int ahead = 0, size_t run = 0) {
  const CopyDim& in = dims[nd - 1];
  // Offsets, not pointers, step along the rows: a pointer stepped past the
  // last row would point outside the buffer (undefined even unread).
  ForEachStretch(dims, nd, lo, hi, [&](int64_t so, int64_t dof, int64_t n, int64_t first) {
    // Locals, so that the compiler keeps them in registers: the copy's
    // stores may alias anything reached through a reference.
    const std::byte* const s = src + so;
    std::byte* const t = dst + dof;
    const int64_t ss = in.src_stride, ts = in.dst_stride;
    const Copy row = copy;
    if (ahead > 0) {
      // Within the innermost dim only: its first rows after a carry come unasked.
      const int64_t stop = in.count - first - ahead;  // rows i < stop have a row `ahead` on
      const int64_t step = ahead * ss;
      const size_t bytes = run;
      for (int64_t i = 0; i < n; ++i) {
        if (i < stop) PrefetchRun(s + i * ss + step, bytes);
        row(t + i * ts, s + i * ss);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) row(t + i * ts, s + i * ss);
    }
  });
}

template <int64_t K>
void FixedRows(const CopyDim* dims, int nd, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi, int ahead) {
  Rows(dims, nd, src, dst, lo, hi, [](std::byte* t, const std::byte* s) { std::memcpy(t, s, K); }, ahead, K);
}

// Copies `run` bytes (a multiple of 16, dst 16-byte aligned) with streaming
// stores: a large strided copy then writes its lines without first reading
// them into the cache (as glibc's memcpy does for large copies), which is
// most of the gap between short runs and memcpy once the buffers outgrow
// the caches. Without SSE2, a plain copy (Streams is then always false).
inline void StreamRun(std::byte* t, const std::byte* s, size_t run) {
#if defined(__SSE2__)
  for (size_t b = 0; b < run; b += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(t + b), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b)));
#else
  std::memcpy(t, s, run);
#endif
}

// Whether `op`, writing at `dst` (its destination offset applied), copies
// with streaming stores. They pay off only where the data will not be read
// again soon from the cache: copies well beyond the L2 cache, or passes of
// many copies (`together_bytes`) well beyond the last-level cache.
// `lines_together`: the caller writes each target line's pieces within a
// short time of each other (a turn of a destination group), so runs of
// whole lines that start off a line may stream too.
bool Streams(const CopyProgram& p, const CopyOp& op, const std::byte* dst, int64_t together_bytes,
             bool lines_together = false) {
#if defined(__SSE2__)
  constexpr int64_t kStreamBytes = int64_t{512} << 10;
  if (op.num_dims == 0 || op.run_bytes % 16 != 0 || op.run_bytes > 4096) return false;
  if (p.OpBytes(op) < kStreamBytes && together_bytes < kStreamPassBytes) return false;
  const uintptr_t at = reinterpret_cast<uintptr_t>(dst);
  if (at % 16 != 0) return false;
  bool whole_lines = op.run_bytes % 64 == 0;
  for (int32_t d = 0; d < op.num_dims; ++d) {
    const int64_t stride = p.dims[static_cast<size_t>(op.first_dim + d)].dst_stride;
    if (stride % 16 != 0) return false;
    whole_lines = whole_lines && stride % 64 == 0;
  }
  // Runs of whole lines that start off a line would stream each line in two
  // halves, apart in time: five times slower than ordinary stores where a
  // buffer began 16 bytes into a line (HostBuffer, before it aligned them).
  return !whole_lines || at % 64 == 0 || lines_together;
#else
  (void)p, (void)op, (void)dst, (void)together_bytes, (void)lines_together;
  return false;
#endif
}

}  // namespace

int64_t CopyUnits(const CopyProgram& p, const CopyOp& op) {
  if (op.num_dims == 0) return op.run_bytes;
  int64_t n = 1;
  for (int32_t i = 0; i < op.num_dims; ++i) n *= p.dims[op.first_dim + i].count;
  return n;
}

int64_t UnitBytes(const CopyProgram&, const CopyOp& op) { return op.num_dims == 0 ? 1 : op.run_bytes; }

namespace {

// How one row (a run) is copied: streaming stores, inline 32-byte blocks,
// or memcpy. The kind is a template argument so that each
// of the one-loop path's loops has its copy inlined with no dispatch per
// row (a lambda taking the kind as an argument cost 32x32 and 64x64 f64
// blocks a fifth more time).
enum class RowCopy : uint8_t { kStream, kBlocks, kMemcpy };
template <RowCopy kKind>
inline void CopyRowAs(std::byte* t, const std::byte* f, size_t run) {
  if constexpr (kKind == RowCopy::kStream) {
    StreamRun(t, f, run);
  } else if constexpr (kKind == RowCopy::kBlocks) {
    for (size_t b = 0; b < run; b += 32) std::memcpy(t + b, f + b, 32);
  } else {
    std::memcpy(t, f, run);
  }
}

// The copy a run of `op` takes, in RunCopy (its fixed small sizes aside)
// and RunInterleaved alike: streaming stores where Streams says so;
// mid-size runs in inline 32-byte blocks, no memcpy call per run; others
// memcpy.
RowCopy RowCopyFor(const CopyProgram& p, const CopyOp& op, const std::byte* dst, int64_t together_bytes) {
  if (Streams(p, op, dst, together_bytes)) return RowCopy::kStream;
  if (op.run_bytes % 32 == 0 && op.run_bytes <= 2048) return RowCopy::kBlocks;
  return RowCopy::kMemcpy;
}

// A row as `kind` says, chosen per row: where copies of one loop differ in
// kind.
inline void CopyRowOf(RowCopy kind, std::byte* t, const std::byte* f, size_t run) {
  switch (kind) {
    case RowCopy::kStream:
      CopyRowAs<RowCopy::kStream>(t, f, run);
      break;
    case RowCopy::kBlocks:
      CopyRowAs<RowCopy::kBlocks>(t, f, run);
      break;
    case RowCopy::kMemcpy:
      CopyRowAs<RowCopy::kMemcpy>(t, f, run);
      break;
  }
}

// Calls loop(copy), `copy(t, f, run)` copying `run` bytes from f to t as
// `kind` copies a row, inlined into the loop (the kind a template argument
// of each instance: no dispatch per row); true where it streamed (the
// caller fences). The loops copying rows of one kind dispatch here; the
// general turns, whose copies may differ in kind, switch per row.
template <typename Loop>
bool WithRowCopy(RowCopy kind, Loop&& loop) {
  switch (kind) {
    case RowCopy::kStream:
      loop([](std::byte* t, const std::byte* f, size_t run) { CopyRowAs<RowCopy::kStream>(t, f, run); });
      return true;
    case RowCopy::kBlocks:
      loop([](std::byte* t, const std::byte* f, size_t run) { CopyRowAs<RowCopy::kBlocks>(t, f, run); });
      return false;
    case RowCopy::kMemcpy:
      loop([](std::byte* t, const std::byte* f, size_t run) { CopyRowAs<RowCopy::kMemcpy>(t, f, run); });
      return false;
  }
  return false;
}

}  // namespace

bool RunCopyUnfenced(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, int64_t lo,
                     int64_t hi, int64_t together_bytes) {
  src += op.src_offset;
  dst += op.dst_offset;
  if (op.num_dims == 0) {
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
    return false;
  }
  const CopyDim* dims = p.dims.data() + op.first_dim;
  const int nd = op.num_dims;
  const RowCopy kind = RowCopyFor(p, op, dst, together_bytes);
  const size_t run = static_cast<size_t>(op.run_bytes);
  const int ahead = PrefetchAhead(op.run_bytes, dims[nd - 1].src_stride);
  auto rows = [&](auto copy) {
    Rows(
        dims, nd, src, dst, lo, hi, [&](std::byte* t, const std::byte* s) { copy(t, s, run); }, ahead, run);
  };
  if (kind == RowCopy::kStream) return WithRowCopy(kind, rows);
  switch (op.run_bytes) {  // small runs: fixed-size copies the compiler inlines
    case 1: FixedRows<1>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 2: FixedRows<2>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 4: FixedRows<4>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 8: FixedRows<8>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 12: FixedRows<12>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 16: FixedRows<16>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 32: FixedRows<32>(dims, nd, src, dst, lo, hi, ahead); return false;
    case 64: FixedRows<64>(dims, nd, src, dst, lo, hi, ahead); return false;
    default: break;
  }
  return WithRowCopy(kind, rows);
}

// Orders streaming stores before whatever the caller does next (another
// thread may read the destination once the pool's loop ends).
void FenceStreamingStores() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void RunCopy(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi,
             int64_t together_bytes) {
  if (RunCopyUnfenced(p, op, src, dst, lo, hi, together_bytes)) FenceStreamingStores();
}

namespace {

// A short row's turn takes as many rows as make this many bytes, a cache
// line (RowsPerTurn), so at most this many rows.
constexpr int64_t kShortTurnBytes = 64;

// The rows of a copy of `run`-byte rows that a turn of RunInterleavedUnfenced
// takes: one from a line up, else as many as make a line.
constexpr int64_t RowsPerTurn(int64_t run) { return run >= kShortTurnBytes ? 1 : kShortTurnBytes / run; }

// Rows of a plane by source: a copy of one dim's runs, as a turn takes
// them (RunSourcePlanes).
int64_t RowsPerSourcePlane(const CopyOp& op) {
  return op.num_dims == 1 ? RowsPerTurn(std::max<int64_t>(1, op.run_bytes)) : 1;
}

}  // namespace

int64_t SourcePlanes(const CopyProgram& p, const CopyOp& op) {
  if (op.num_dims == 0) return 1;
  const int64_t g = RowsPerSourcePlane(op);
  return (p.dims[static_cast<size_t>(op.first_dim)].count + g - 1) / g;
}

namespace {

// RunInterleaved's planes by source (copy_kernel.h): where it ran them,
// whether they streamed (unfenced, as RunInterleavedUnfenced); nothing
// (nothing done) where the copies are not such planes. A copy of one
// dim is planes of one run, or of as many runs as make a cache line where
// they are shorter: then a turn writes a line of each copy whose runs lie
// end to end in its target, whole (f32 8x8 blocks on 8x1 into 8x8 on 1x8,
// 32-byte runs streamed, the schedule's mode forced in a build not kept:
// 0.68 of memcpy a run a turn, 0.82 two). Copies may differ in their runs, counts and
// strides (an uneven shard's copies have fewer rows), not in how a run is
// copied; turn j copies plane j of each copy's part that has one.
std::optional<bool> RunSourcePlanes(std::span<const CopyRange> copies, int64_t part, int64_t parts,
                                    int64_t together_bytes) {
  struct Planes {
    const std::byte* src;
    std::byte* dst;
    int64_t src_stride, dst_stride, inner, inner_src_stride, inner_dst_stride, run, first, count, rows;
  };
  thread_local std::vector<Planes> planes;
  planes.clear();
  if (copies.empty()) return std::nullopt;
  const CopyRange& c0 = copies[0];
  const RowCopy kind = RowCopyFor(*c0.program, *c0.op, c0.dst + c0.op->dst_offset, together_bytes);
  int64_t longest = 0;
  for (const CopyRange& c : copies) {
    const CopyOp& op = *c.op;
    if (op.num_dims < 1 || op.num_dims > 2 || c.lo != 0 || c.hi != CopyUnits(*c.program, op)) return std::nullopt;
    const CopyDim* d = c.program->dims.data() + op.first_dim;
    if (op.num_dims == 2 && d[1].src_stride != op.run_bytes) return std::nullopt;
    if (RowCopyFor(*c.program, op, c.dst + op.dst_offset, together_bytes) != kind) return std::nullopt;
    if (op.num_dims == 2) {
      const int64_t outer = d[0].count, first = outer * part / parts, count = outer * (part + 1) / parts - first;
      planes.push_back({c.src + op.src_offset, c.dst + op.dst_offset, d[0].src_stride, d[0].dst_stride, d[1].count,
                        op.run_bytes, d[1].dst_stride, op.run_bytes, first, count, INT64_MAX});
    } else {
      const int64_t g = RowsPerSourcePlane(op);
      const int64_t outer = SourcePlanes(*c.program, op), first = outer * part / parts,
                    count = outer * (part + 1) / parts - first;
      planes.push_back({c.src + op.src_offset, c.dst + op.dst_offset, g * d[0].src_stride, g * d[0].dst_stride, g,
                        d[0].src_stride, d[0].dst_stride, op.run_bytes, first, count, d[0].count});
    }
    longest = std::max(longest, planes.back().count);
  }
  auto turns = [&](auto copy) {
    for (int64_t j = 0; j < longest; ++j)
      for (const Planes& p : planes) {
        if (j >= p.count) continue;
        const int64_t o = p.first + j;
        const std::byte* f = p.src + o * p.src_stride;
        std::byte* t = p.dst + o * p.dst_stride;
        const size_t run = static_cast<size_t>(p.run);
        const int64_t inner = std::min(p.inner, p.rows - o * p.inner);
        for (int64_t i = 0; i < inner; ++i) copy(t + i * p.inner_dst_stride, f + i * p.inner_src_stride, run);
      }
  };
  return WithRowCopy(kind, turns);
}

// Whether RunInterleaved's cursors (`cursor`) are all of one dim
// (`one_dim`, RunInterleaved's inner count for such a copy) and copy rows
// a turn (rows_per_turn set).
template <typename Cursor>
bool AllOneDim(const std::vector<Cursor>& cursor, int64_t one_dim) {
  for (const Cursor& c : cursor)
    if (c.rows_per_turn < 1 || c.inner != one_dim) return false;
  return !cursor.empty();
}

// The turns of a group of two-dim copies alike (RunInterleavedUnfenced's
// loop for copies alike): row r = o * inner + i of every copy, stepped
// without a division per row, `per_turn` rows a turn, a turn's rows'
// offsets, the same for every copy, formed once; `ends` each copy's end
// where kRagged, else `last` every copy's. Its own function, not inlined
// into the turns' lambdas: with the whole turns added to the one-dim loop
// there, bf16 8x8 blocks (4096^2 on 2x4 into 64x64 on 4x2, all two-dim
// copies) took 3.9 to 4.5 ms a run on one thread where the build before
// took 2.6 to 2.8 in most rounds (1.52 of its time alternated),
// RunWholeTurns a function of its own or not; with this loop one too, 2.6
// to 2.9 (docs/benchmarks.md, "Random block-cyclic pairs: whole turns").
template <bool kRagged, typename Cursor, typename Copy>
[[gnu::noinline]] void RunTwoDimTurns(const Copy& copy, const Cursor* cur, const int64_t* ends, size_t count,
                                      const Cursor& c0, int64_t first, int64_t last, int64_t per_turn, size_t run,
                                      bool prefetch) {
  auto end_of = [&](size_t k) { return kRagged ? ends[k] : last; };
  std::array<int64_t, kShortTurnBytes> so, dof;  // per_turn <= kShortTurnBytes: rows are 1 byte or more
  int64_t o = c0.o, i = c0.i;
  for (int64_t r = first; r < last; r += per_turn) {
    const int64_t n = std::min(per_turn, last - r);
    for (int64_t j = 0; j < n; ++j) {
      so[static_cast<size_t>(j)] = c0.SrcOffset(o, i);
      dof[static_cast<size_t>(j)] = c0.DstOffset(o, i);
      if (++i == c0.inner) i = 0, ++o;
    }
    const int64_t next_so = c0.SrcOffset(o, i);  // the next turn's first row's
    // Row j of every copy, then row j + 1: each target row's pieces from
    // every sender together, the lines they share whole before the next
    // row's. (The bf16 canonical case, 8192x64x64, 32-byte runs two a turn
    // in 32 copies into eight targets: on one thread 13.1 ms a run with each
    // copy's rows together as before, 11.0 with them together in this
    // loop's form, 8.2 so; on the ranks' two threads, the runs' ratios'
    // median 0.72, 7 alternated runs.) The first row's pass prefetches,
    // each copy's as it comes, not all at a turn's start (copies of one dim
    // took 1.08x the time so; two dims were not measured apart).
    int64_t j0 = 0;
    if (prefetch) {
      for (size_t k = 0; k < count; ++k) {
        if (r >= end_of(k)) continue;
        if (r + n < end_of(k)) PrefetchRun(cur[k].src + next_so, run);
        copy(cur[k].dst + dof[0], cur[k].src + so[0], run);
      }
      j0 = 1;
    }
    for (int64_t j = j0; j < n; ++j)
      for (size_t k = 0; k < count; ++k)
        if (!kRagged || r + j < end_of(k))
          copy(cur[k].dst + dof[static_cast<size_t>(j)], cur[k].src + so[static_cast<size_t>(j)], run);
  }
}

// The whole turns of a group of one-dim copies alike (RunInterleavedUnfenced)
// from row r while row r + kTurn is below `common`, the least of the
// copies' ends (every row below it is a row of every copy); returns the row
// it stopped at. Runs of kRun bytes, kTurn rows a turn (RowsPerTurn), as
// constants; a turn's offsets formed once for every copy (the
// strides are the group's), no end read: a copy's turn is its two
// pointers, its rows' loads and stores, and the prefetch of its next
// turn's first row, which is every copy's (strictly below `common`). Not
// inlined, as RunTwoDimTurns above: made a function of its own when the
// two-dim loop slowed, which only RunTwoDimTurns' own function mended; this
// one's inlining was not measured apart.
template <size_t kRun, typename Cursor, typename Copy>
[[gnu::noinline]] int64_t RunWholeTurns(const Copy& copy, const Cursor* cur, size_t count, int64_t r, int64_t common,
                                        int64_t src_stride, int64_t dst_stride, bool prefetch) {
  constexpr int64_t kTurn = RowsPerTurn(static_cast<int64_t>(kRun));
  for (; r + kTurn < common; r += kTurn) {
    const int64_t so = r * src_stride, dof = r * dst_stride;
    for (size_t k = 0; k < count; ++k) {
      const std::byte* const src = cur[k].src + so;
      std::byte* const dst = cur[k].dst + dof;
      for (int64_t j = 0; j < kTurn; ++j) copy(dst + j * dst_stride, src + j * src_stride, kRun);
      if (prefetch) PrefetchRun(src + kTurn * src_stride, kRun);
    }
  }
  return r;
}

}  // namespace

void RunInterleaved(std::span<const CopyRange> copies, int64_t part, int64_t parts, int64_t together_bytes,
                    bool by_source) {
  if (RunInterleavedUnfenced(copies, part, parts, together_bytes, by_source)) FenceStreamingStores();
}

bool RunInterleavedUnfenced(std::span<const CopyRange> copies, int64_t part, int64_t parts, int64_t together_bytes,
                            bool by_source) {
  if (by_source)
    if (const std::optional<bool> streamed = RunSourcePlanes(copies, part, parts, together_bytes)) return *streamed;
  // Rows of each copy per turn. A copy of one strided dim (a box's rows)
  // takes one row per turn where its rows are short: the copies of a group
  // are sorted by destination (by source where by_source: then it reads
  // each source row in order), so the group then writes each destination
  // row whole, in address order, before the next, and reads each source row
  // in order; several rows of one copy per turn would write as many
  // interleaved streams (128-byte rows of 16x16 f64 boxes: one row a turn
  // ran at memcpy speed, 16 rows a turn at a third of it; docs/benchmarks.md,
  // "Short rows"); rows under 64 B take as many as make 64 B, a cache line.
  // Such a turn is a row's address, base plus row times stride (Cursor), not
  // a call's index set-up, and, for rows up to 512 B that are not adjacent
  // (PrefetchAhead), it prefetches the copy's next row: a box's rows lie a
  // source row apart (kilobytes), a pattern the hardware's stream
  // prefetchers do not follow (8x8 f64 boxes: a fifth less time). Other
  // strided copies take about 4 KiB a turn, so a turn's call and index
  // arithmetic stay small against its bytes; a contiguous one, its whole part.
  constexpr int64_t kTurnBytes = 4096;
  // Rows a turn prefetches the next of: up to 512 B (2 KiB rows, interleaved
  // a row of each box in turn, measured about a tenth slower with it; the
  // gain on 512-byte rows here is within this machine's noise). RunCopy's
  // rows go to 4 KiB: its MPI packs of 512-byte rows ran twice as fast.
  constexpr size_t kPrefetchRunBytes = 512;
  // Row r of a cursor's copy, r = o * inner + i, is at src + o *
  // outer_src_stride + i * src_stride (dst likewise): copies of one dim have
  // inner = kOneDim (o is 0), copies of two dims walk their inner dim's
  // rows, then the outer's (the canonical case's 64-byte rows: each target
  // row takes a run from each of four senders, so its group writes it whole,
  // in address order, one row of each sender a turn). Pointers are formed
  // for rows copied only.
  static constexpr int64_t kOneDim = INT64_MAX;
  struct Cursor {
    const std::byte* src = nullptr;
    std::byte* dst = nullptr;
    int64_t src_stride = 0, dst_stride = 0;
    int64_t inner = kOneDim, outer_src_stride = 0, outer_dst_stride = 0;
    int64_t rows_per_turn = 0;
    size_t run = 0;
    RowCopy kind = RowCopy::kMemcpy;
    int64_t o = 0, i = 0;  // where the next row to copy lies (next[k] = o * inner + i)
    int64_t SrcOffset(int64_t o, int64_t i) const { return o * outer_src_stride + i * src_stride; }
    int64_t DstOffset(int64_t o, int64_t i) const { return o * outer_dst_stride + i * dst_stride; }
    // The source offset of the row `n` rows on from the next (a division
    // only where it passes an outer step).
    int64_t SrcOffsetAhead(int64_t n) const {
      const int64_t at = i + n;
      return at < inner ? SrcOffset(o, at) : SrcOffset(o + at / inner, at % inner);
    }
  };
  thread_local std::vector<int64_t> next, end;
  thread_local std::vector<Cursor> cursor;  // copies of one or two dims only (rows_per_turn > 0)
  next.resize(copies.size());
  end.resize(copies.size());
  cursor.assign(copies.size(), Cursor{});
  for (size_t k = 0; k < copies.size(); ++k) {
    const CopyRange& c = copies[k];
    const int64_t n = c.hi - c.lo;
    // (No division for a whole copy: a batch of small groups sets up
    // thousands of copies a run, each group a few.)
    next[k] = parts == 1 ? c.lo : c.lo + n * part / parts;
    end[k] = parts == 1 ? c.hi : c.lo + n * (part + 1) / parts;
    const CopyOp& op = *c.op;
    if ((op.num_dims != 1 && op.num_dims != 2) || op.run_bytes > kTurnBytes) continue;
    const CopyDim& dim = c.program->dims[static_cast<size_t>(op.first_dim + op.num_dims - 1)];
    Cursor& cur = cursor[k];
    cur.src_stride = dim.src_stride;
    cur.dst_stride = dim.dst_stride;
    if (op.num_dims == 2) {
      const CopyDim& outer = c.program->dims[static_cast<size_t>(op.first_dim)];
      cur.inner = dim.count;
      cur.outer_src_stride = outer.src_stride;
      cur.outer_dst_stride = outer.dst_stride;
    }
    // (No division for copies of one dim: a call per few rows of each of
    // thousands of small boxes would pay two each.)
    cur.o = op.num_dims == 2 ? next[k] / cur.inner : 0;
    cur.i = op.num_dims == 2 ? next[k] % cur.inner : next[k];
    cur.src = c.src + op.src_offset;
    cur.dst = c.dst + op.dst_offset;
    cur.run = static_cast<size_t>(op.run_bytes);
    cur.rows_per_turn = RowsPerTurn(op.run_bytes);
    cur.kind = RowCopyFor(*c.program, op, cur.dst, together_bytes);
  }
  // The common case of a block-cyclic group: boxes of one shape and strides
  // (rows of one length, so as many a turn), starting at the same row. Then
  // a turn is a row of every box that has one left (rows under 64 B: as
  // many as make 64 B), with the copy chosen once for the group. (Copies of
  // a target row from senders of uneven shards differ by a run: f32 8x8
  // blocks on 2x4 into 128x128 on 8x1, 5053^2, groups of 157 and 158 runs
  // of 32 bytes took the general turns below: 0.48 of memcpy on the ranks,
  // 0.61 so; medians of 5 alternated runs.)
  if (!copies.empty() && cursor[0].rows_per_turn >= 1) {
    const Cursor& c0 = cursor[0];
    const int64_t first = next[0], per_turn = c0.rows_per_turn;
    int64_t last = end[0];
    bool same = true;
    for (size_t k = 1; k < copies.size() && same; ++k) {
      const Cursor& c = cursor[k];
      same = c.rows_per_turn == per_turn && c.run == c0.run && c.kind == c0.kind && c.src_stride == c0.src_stride &&
             c.dst_stride == c0.dst_stride && c.inner == c0.inner && c.outer_src_stride == c0.outer_src_stride &&
             c.outer_dst_stride == c0.outer_dst_stride && next[k] == first;
      last = std::max(last, end[k]);
    }
    if (same) {
      // In a destination group, a turn writes the same rows of every copy,
      // in the order the copies lie along the target: runs of whole lines
      // that start off a line then complete each line within the turn,
      // its halves from neighbouring copies, and stream (Streams'
      // lines_together) where every copy's rows are 16-byte aligned. f32
      // 16x16 blocks on 1x8 into 8x8 on 8x1, 5016^2 (20,064-byte target
      // rows, half of them 32 bytes into a line; 64-byte runs from eight
      // senders in turn): 7.43 ms a run with those rows' ordinary stores,
      // 6.16 streamed (on the ranks, medians of 21 alternated runs, the
      // runs' ratios' median 0.83). The loop for copies unlike below took
      // the same rule without a measured gain (f32 48x48 blocks on 4x2 into
      // 200x200 on 1x8, 5829^2: ratios' medians 1.04 and 0.99 on the ranks
      // and `direct`), and keeps its own.
      RowCopy kind = c0.kind;
      if (!by_source && kind != RowCopy::kStream && c0.run % 64 == 0) {  // (other runs: Streams said no already)
        bool all = true;
        for (size_t k = 0; k < copies.size() && all; ++k)
          all = Streams(*copies[k].program, *copies[k].op, cursor[k].dst, together_bytes, /*lines_together=*/true);
        if (all) kind = RowCopy::kStream;
      }
      const bool prefetch = c0.run <= kPrefetchRunBytes && PrefetchAhead(static_cast<int64_t>(c0.run), c0.src_stride) > 0;
      bool ragged = false;  // copies ending at different rows (the first among them)
      for (size_t k = 0; k < copies.size(); ++k) ragged = ragged || end[k] != last;
      // `kRagged`: each copy's own end checked every turn; else the one end,
      // `last` (a check per copy and turn cost the bf16 canonical case's
      // 16-byte rows a fifth more time).
      // Locals, not the thread-local vectors or c0's fields: a copy's stores
      // through std::byte* may alias those, which then reload at every row.
      // (The two-dim turns still read c0's offsets, once a turn.)
      const Cursor* const cur = cursor.data();
      const int64_t* const ends = end.data();
      const int64_t src_stride = c0.src_stride, dst_stride = c0.dst_stride;
      const size_t run = c0.run;
      auto loops = [&](auto copy, auto kRagged) {
        auto end_of = [&](size_t k) { return decltype(kRagged)::value ? ends[k] : last; };
        if (c0.inner == kOneDim) {
          // Each copy's turn: its pointers read once, its end compared once
          // (only where the copies are ragged), its rows, then the prefetch
          // of the row its next turn starts with (f32 16x16 blocks on 1x8
          // into 8x8 on 8x1, 5016^2, 0.94x the time of a check per row, on
          // the ranks, medians of 9 alternated runs). A copy's rows of a turn
          // stay together here, unlike the two-dim loop's below: f32 64x64
          // blocks on 8x1 into 8x8 on 4x2, 5792^2, copies of 32-byte rows
          // two a turn, took 1.14x the time with one row of every copy, then
          // the next (on `direct`).
          //
          // First the whole turns before any copy's last row, where runs
          // are 16, 32 or 64 bytes (RunWholeTurns): f32 8x8 blocks on 2x4
          // into 128x128 on 8x1 (5053^2, groups of four copies of 157 or
          // 158 runs of 32 bytes) took 11.2 to 11.3 ms a run on one thread
          // against 12.7 to 12.9, 0.892 of the time alternated on the
          // ranks (docs/benchmarks.md, "Random block-cyclic pairs: whole
          // turns"). Runs of 16, 32 and 64 bytes: 4, 8 or 16 elements of
          // four bytes, 8 of f64 (each run another copy of the loop's
          // code; other runs were not measured). Then the rest, each
          // copy's end checked where the copies end apart.
          int64_t r = first;
          if (run == 16 || run == 32 || run == 64) {
            int64_t common = last;
            if (decltype(kRagged)::value)
              for (size_t k = 0; k < copies.size(); ++k) common = std::min(common, ends[k]);
            const size_t n = copies.size();
            r = run == 16   ? RunWholeTurns<16>(copy, cur, n, r, common, src_stride, dst_stride, prefetch)
                : run == 32 ? RunWholeTurns<32>(copy, cur, n, r, common, src_stride, dst_stride, prefetch)
                            : RunWholeTurns<64>(copy, cur, n, r, common, src_stride, dst_stride, prefetch);
          }
          for (; r < last; r += per_turn) {
            const int64_t hi = std::min(last, r + per_turn);
            for (size_t k = 0; k < copies.size(); ++k) {
              const int64_t e = end_of(k), h = decltype(kRagged)::value ? std::min(hi, e) : hi;
              const std::byte* const src = cur[k].src;
              std::byte* const dst = cur[k].dst;
              for (int64_t row = r; row < h; ++row) copy(dst + row * dst_stride, src + row * src_stride, run);
              if (prefetch && h < e) PrefetchRun(src + h * src_stride, run);
            }
          }
          return;  // (from the lambda)
        }
        // Two dims (next[0] == first: c0's o and i are the first row's).
        RunTwoDimTurns<decltype(kRagged)::value>(copy, cur, ends, copies.size(), c0, first, last, per_turn, run,
                                                 prefetch);
      };
      auto turns = [&](auto copy) {
        if (ragged)
          loops(copy, std::true_type{});
        else
          loops(copy, std::false_type{});
      };
      return WithRowCopy(kind, turns);
    }
  }
  // Copies of one dim unlike in strides, runs or rows (senders of
  // different local widths; pieces cut short at a block's edge): the
  // general turns below without their second dim, the copy chosen once for
  // the group where its copies copy a row alike, and every copy taking the
  // group's fewest rows a turn, so that copies starting on one row write
  // the same target rows each turn (where the copies' runs differ, some
  // under 64 bytes took two rows a turn, writing the next turn's row beside
  // this one's pieces; copies of different row counts start apart in parts
  // after the first). In a destination group, a turn writes every piece of
  // those target rows within the turn, each target's in address order
  // (with other targets' pieces between them where the group runs along
  // its rows: CopySchedule's OrderAlongRows): where some copies stream, the
  // others stream wherever their rows allow (Streams' lines_together). f32 200x200 blocks on 4x2 into
  // 24x24 on 4x2, 4992^2 (senders of 2592 and 2400 columns; runs of 96
  // bytes and, at a block's edge, 32 and 64), `direct`, no join, medians of
  // 3 alternated runs in builds with switches, not kept: 13.8 ms a run in
  // the general turns, 10.3 in this loop with each copy's own rows a turn,
  // 9.1 with the group's fewest (docs/benchmarks.md, "Random block-cyclic
  // pairs: one dim unlike").
  if (AllOneDim(cursor, kOneDim)) {
    struct Rows {
      const std::byte* src;
      std::byte* dst;
      int64_t src_stride, dst_stride, next, end;
      size_t run;
      bool prefetch;
      RowCopy kind;
    };
    thread_local std::vector<Rows> rows;
    rows.clear();
    int64_t per_turn = INT64_MAX;
    bool alike = true, streams = false;
    for (const Cursor& c : cursor) {
      per_turn = std::min(per_turn, c.rows_per_turn);
      alike = alike && c.kind == cursor[0].kind;
      streams = streams || c.kind == RowCopy::kStream;
    }
    // even: every copy with rows left at the first one's rows (`even_turns`
    // below); streamed: some copy's rows stream (read before the turns,
    // which overwrite `rows` as copies end).
    bool even = true, streamed = false;
    for (size_t k = 0; k < copies.size(); ++k) {
      const Cursor& c = cursor[k];
      if (next[k] >= end[k]) continue;
      RowCopy kind = c.kind;
      if (!alike && streams && !by_source && Streams(*copies[k].program, *copies[k].op, c.dst, together_bytes, true))
        kind = RowCopy::kStream;
      rows.push_back({c.src, c.dst, c.src_stride, c.dst_stride, next[k], end[k], c.run,
                      c.run <= kPrefetchRunBytes && PrefetchAhead(static_cast<int64_t>(c.run), c.src_stride) > 0,
                      kind});
      even = even && next[k] == rows[0].next && end[k] == rows[0].end;
      streamed = streamed || kind == RowCopy::kStream;
    }
    // `copy(t, f, run, kind)`: a row as `kind` says (the group's one kind,
    // inlined, or each copy's own).
    // Turn t copies rows [next + t * per_turn, ...) of each copy: a copy's
    // record is read, not written, each turn, and moved only where a copy
    // before it has ended. (f64 8x8 blocks on 1x8 into 24x24 on 4x2,
    // 3547^2, when its groups of 444 columns of 24 rows of 64 bytes ran
    // here: each row's 64-byte record stored back after it, 9.20 ms a run;
    // not, 9.25; the runs' ratios' median 0.98, within this machine's
    // spread. They now take `even_turns` below.)
    auto turns = [&](auto copy) {
      Rows* const rs = rows.data();
      size_t live = rows.size();
      for (int64_t skip = 0; live > 0; skip += per_turn) {
        size_t kept = 0;
        for (size_t k = 0; k < live; ++k) {
          const Rows x = rs[k];  // a local: the copy's stores may alias anything reached through a pointer
          const int64_t lo = x.next + skip, hi = std::min(x.end, lo + per_turn);
          // The row the next turn starts with; this turn's own rows come at once.
          if (x.prefetch && hi < x.end) PrefetchRun(x.src + hi * x.src_stride, x.run);
          for (int64_t row = lo; row < hi; ++row)
            copy(x.dst + row * x.dst_stride, x.src + row * x.src_stride, x.run, x.kind);
          if (hi < x.end) {
            if (kept != k) rs[kept] = x;  // in the group's order (kept < k: in place)
            ++kept;
          }
        }
        live = kept;
      }
    };
    // Copies at the same rows, ending together (a block-cyclic group's
    // columns of one block row): turn t copies rows [first + t * per_turn,
    // ...) of every copy, with no copy's end to check, and no prefetch: a
    // turn reads each sender's pieces in the order they lie along its rows,
    // which the hardware's prefetchers follow. (f64 8x8 blocks on 1x8 into
    // 24x24 on 4x2, 3547^2, one thread: 13.7 ms a run in `turns`, 11.5
    // here; in builds not kept, 12.0 here with the prefetch, 10.9 without.
    // Groups of a few copies too, which read a piece of each row and jump
    // to the next: f64 100x100 on 4x2 into 128x128 on 2x4, groups of about
    // 31, took 1.17x the time with the prefetch kept under 64 copies; the
    // blocks the prefetch was added for, 8x8 to 64x64 and up, ran as fast
    // without it.)
    auto even_turns = [&](auto copy) {
      const Rows* const rs = rows.data();
      const size_t n = rows.size();  // (a local: the copies' stores may alias `rows`)
      const int64_t first = rs[0].next, last = rs[0].end;
      // A row a turn (the group's shortest run over 32 bytes), with no
      // inner loop of one row (f32 200x200 blocks on 1x8 into 128x128 on
      // 4x2, 5829^2: 0.95x the time, on the ranks, medians of 9 alternated
      // runs).
      if (per_turn == 1) {
        for (int64_t row = first; row < last; ++row)
          for (size_t k = 0; k < n; ++k) {
            const Rows x = rs[k];
            copy(x.dst + row * x.dst_stride, x.src + row * x.src_stride, x.run, x.kind);
          }
        return;
      }
      for (int64_t lo = first; lo < last; lo += per_turn) {
        const int64_t hi = std::min(last, lo + per_turn);
        for (size_t k = 0; k < n; ++k) {
          const Rows x = rs[k];  // (a local, as in `turns`)
          for (int64_t row = lo; row < hi; ++row)
            copy(x.dst + row * x.dst_stride, x.src + row * x.src_stride, x.run, x.kind);
        }
      }
    };
    auto run_turns = [&](auto copy) {
      if (even && !rows.empty())
        even_turns(copy);
      else
        turns(copy);
    };
    if (alike)
      return WithRowCopy(cursor[0].kind, [&](auto copy) {
        run_turns([&](std::byte* t, const std::byte* f, size_t run, RowCopy) { copy(t, f, run); });
      });
    run_turns([](std::byte* t, const std::byte* f, size_t run, RowCopy kind) { CopyRowOf(kind, t, f, run); });
    return streamed;
  }
  // The copies with rows left, in their order: copies of a group can differ
  // in length by thousands of rows (an 8x8 block's folded planes beside a
  // lone row), and passing over every finished copy at every turn took a
  // third of such a group's time.
  thread_local std::vector<uint32_t> live;
  live.clear();
  for (size_t k = 0; k < copies.size(); ++k)
    if (next[k] < end[k]) live.push_back(static_cast<uint32_t>(k));
  bool streamed = false;
  while (!live.empty()) {
    size_t kept = 0;
    for (const uint32_t k : live) {
      Cursor& cur = cursor[k];
      if (cur.rows_per_turn > 0) {
        const int64_t hi = std::min(end[k], next[k] + cur.rows_per_turn);
        // The row the next turn starts with; this turn's own rows come at once.
        if (hi < end[k] && cur.run <= kPrefetchRunBytes && PrefetchAhead(static_cast<int64_t>(cur.run), cur.src_stride) > 0)
          PrefetchRun(cur.src + cur.SrcOffsetAhead(hi - next[k]), cur.run);
        for (int64_t row = next[k]; row < hi; ++row) {
          std::byte* t = cur.dst + cur.DstOffset(cur.o, cur.i);
          const std::byte* f = cur.src + cur.SrcOffset(cur.o, cur.i);
          if (++cur.i == cur.inner) cur.i = 0, ++cur.o;
          CopyRowOf(cur.kind, t, f, cur.run);
          streamed = streamed || cur.kind == RowCopy::kStream;
        }
        next[k] = hi;
        if (hi < end[k]) live[kept++] = k;
        continue;
      }
      const CopyRange& c = copies[k];
      // A contiguous copy (no dims) shares no rows with the others: its part
      // in one turn, one memcpy.
      const int64_t rows = c.op->num_dims == 0 ? end[k] - next[k] : std::max<int64_t>(1, kTurnBytes / UnitBytes(*c.program, *c.op));
      const int64_t hi = std::min(end[k], next[k] + rows);
      streamed = RunCopyUnfenced(*c.program, *c.op, c.src, c.dst, next[k], hi, together_bytes) || streamed;
      next[k] = hi;
      if (hi < end[k]) live[kept++] = k;
    }
    live.resize(kept);
  }
  return streamed;
}

}  // namespace reshard
