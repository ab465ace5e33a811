// The pack/unpack kernel: runs CopyProgram box copies at memory bandwidth.
// A copy's rows (the product of its dims' counts; a dimless copy's bytes)
// can be split into ranges, so one large copy spreads over several threads.
// Stateless; thread-safe as long as concurrent calls write disjoint bytes.
#ifndef RESHARD_SRC_EXEC_COPY_KERNEL_H_
#define RESHARD_SRC_EXEC_COPY_KERNEL_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "reshard/device_program.h"

namespace reshard {

// A pass of copies of this many bytes or more (RunCopy's `together_bytes`)
// is well beyond the last-level cache: its short strided copies use
// streaming stores.
inline constexpr int64_t kStreamPassBytes = int64_t{8} << 20;

// Units a copy splits into: rows of its dims, or bytes of its run when it has none.
int64_t CopyUnits(const CopyProgram& p, const CopyOp& op);
// Bytes one unit holds.
int64_t UnitBytes(const CopyProgram& p, const CopyOp& op);
// Copies units [lo, hi) of `op` from src (the buffer op.src_offset is relative
// to) to dst. `together_bytes`: the bytes the caller copies along with this
// op in one pass (0: the op alone); large strided copies, or small ones that
// are part of a pass well beyond the caches, use streaming stores.
// REQUIRES: 0 <= lo <= hi <= CopyUnits(p, op); the op in bounds.
void RunCopy(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi,
             int64_t together_bytes = 0);
// RunCopy without its fence after streaming stores: true where it
// streamed, and then the caller calls FenceStreamingStores before another
// thread may read what it wrote (one fence for a task's slices of many
// copies, as RunInterleavedUnfenced below).
[[nodiscard]] bool RunCopyUnfenced(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst,
                                   int64_t lo, int64_t hi, int64_t together_bytes = 0);

// Units [lo, hi) of one copy of a program, with the buffers its offsets are relative to.
struct CopyRange {
  const CopyProgram* program;
  const CopyOp* op;
  const std::byte* src;
  std::byte* dst;
  int64_t lo, hi;
};

// Copies part `part` of `parts` of every range in `copies` (a range's part k
// is its units [lo + n*k/parts, lo + n*(k+1)/parts), n = hi - lo), a few rows
// of each copy in turn: copies whose rows interleave in the destination (the
// boxes of a block-cyclic exchange, each a column strip of the same rows)
// then fill it in the copies' order and read each source row in order,
// where copying them one after another would walk every row once per copy.
// A copy of one strided dim takes one row a turn (rows under 64 bytes: as
// many as make 64; where every copy is of one dim, each takes the group's
// fewest), other strided copies about 4 KiB a turn, a contiguous copy its
// whole part; where every copy is alike (one or two dims, rows of 4 KiB or
// less, the same first row), each takes as many rows as one of one dim,
// and copies of two dims then write a turn's first row of every copy, then
// its second. Example: two copies of 64 rows of 512 B, writing alternate
// 512 B of the same 64 rows of 1 KiB: row 0 of the first, row 0 of the
// second, row 1 of the first, and so on. For the fastest order, sort the
// copies by the first byte they write, or, where several targets' and
// senders' rows interleave, by where they lie along a row
// (CopySchedule::OrderAlongRows).
// `together_bytes` as for RunCopy.
// `by_source`: the copies are sorted by the first byte they read instead
// (CopySchedule's groups by source). Where they are then whole copies,
// each of one dim or of two whose inner rows lie end to end in the source
// (a plane read as one stretch: the canonical case's 512 bytes of a
// sender's row for each receiver; a copy of one dim is planes of one row,
// or of as many rows as make 64 bytes where they are shorter),
// all copied alike (RunCopy's choice of streaming stores), a turn is a
// plane of each copy, so the group reads its source rows in order; part k
// then is planes [o * k / parts, o * (k + 1) / parts) of each copy (o: its
// planes). Copies may differ in run, counts and strides.
// REQUIRES: 0 <= part < parts; every range as RunCopy requires; with
// `by_source`, every part of one set of copies called with the same
// copies, buffers and together_bytes (they decide between planes and
// rows, which split into parts differently).
// The planes RunInterleaved's turns by source cut `op` into: its outer
// index, or a copy of one dim's rows, as many a plane as make 64 bytes (a
// copy with no dims: one).
int64_t SourcePlanes(const CopyProgram& p, const CopyOp& op);

void RunInterleaved(std::span<const CopyRange> copies, int64_t part, int64_t parts, int64_t together_bytes,
                    bool by_source = false);
// RunInterleaved without its fence after streaming stores: true where it
// streamed, and then the caller calls FenceStreamingStores before another
// thread may read what it wrote. For many small groups run in turn by one
// thread (CopySchedule's batches), one fence for all: a fence waits for the
// core's write-combining buffers to drain. f32 32x32 blocks on 1x8 into
// 16x16 on 2x4, 5760^2, run as 46,080 groups of a source row each, took
// 8.92 ms a run with a fence a group and 6.67 with one a batch (on the
// ranks, medians of 5 alternated runs).
[[nodiscard]] bool RunInterleavedUnfenced(std::span<const CopyRange> copies, int64_t part, int64_t parts,
                                          int64_t together_bytes, bool by_source = false);
// Orders this thread's streaming stores before what it does next.
void FenceStreamingStores();

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_COPY_KERNEL_H_
