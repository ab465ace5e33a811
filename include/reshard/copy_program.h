// CopyProgram: box copies in flat arrays, the form every copy of a compiled
// program takes (pack, unpack, local, direct and fill copies of a
// DeviceProgram, device_program.h). A box is an N-d copy with byte strides
// on both sides, its dims merged where contiguous on both and dims of
// extent 1 dropped, walked in the destination's memory order.
// Plain data; thread-safe to read.
#ifndef RESHARD_COPY_PROGRAM_H_
#define RESHARD_COPY_PROGRAM_H_

#include <cstdint>
#include <span>
#include <vector>

namespace reshard {

// One strided dim of a box copy: `count` steps of the given byte strides.
struct CopyDim {
  int64_t count = 0, src_stride = 0, dst_stride = 0;
  friend bool operator==(const CopyDim&, const CopyDim&) = default;
};

// One N-d box copy: `run_bytes` contiguous bytes at src_offset / dst_offset,
// repeated over dims [first_dim, first_dim + num_dims) of the program's dim
// array (outermost first). Example: a [4,8] f32 box at (2,0) of a [16,8]
// buffer, packed contiguously: its rows are contiguous on both sides, so it
// is one run of 128 bytes with no dims.
struct CopyOp {
  int64_t src_offset = 0, dst_offset = 0, run_bytes = 0;
  int32_t first_dim = 0, num_dims = 0;
};

// A list of box copies in flat arrays.
struct CopyProgram {
  std::vector<CopyOp> ops;
  std::vector<CopyDim> dims;
  int64_t bytes = 0;  // bytes written, all ops

  // Appends the box copy of `extent` elements (row-major) from src_offset in
  // a buffer of element strides `src_strides` to dst_offset in one of
  // `dst_strides`, elements of elem_bytes; dims are merged where contiguous
  // on both sides, and dims of extent 1 dropped. Offsets in bytes.
  void AddBox(std::span<const int64_t> extent, int64_t src_offset, std::span<const int64_t> src_strides,
              int64_t dst_offset, std::span<const int64_t> dst_strides, int64_t elem_bytes);
  int64_t OpBytes(const CopyOp& op) const;
  // Appends ops [lo, hi) of `from`, their dims with them, source and
  // destination offsets moved by the shifts given.
  void Append(const CopyProgram& from, int64_t lo, int64_t hi, int64_t src_shift = 0, int64_t dst_shift = 0);
  // One past the last byte `op` reads (src) or writes (dst).
  int64_t SrcEnd(const CopyOp& op) const;
  int64_t DstEnd(const CopyOp& op) const;
};

// Whether ops [begin, end) of `p` (one message) fill its staged bytes in
// order, each op one contiguous span of them, so that the ops' elements
// listed op after op are the message's bytes in order. The staged side is
// the destination of a pack (staged_is_dst), the source of an unpack. True
// of a message that is one box (tiled layouts); a block-cyclic message's
// boxes interleave there (its staged form is row-major over the union of
// its boxes).
bool StagedInOrder(const CopyProgram& p, int32_t begin, int32_t end, bool staged_is_dst);
// The runs (contiguous byte spans, before merging) ops [begin, end) of `p`
// copy: the product of each op's dim counts, summed.
int64_t RunCount(const CopyProgram& p, int32_t begin, int32_t end);

// One contiguous run of a message: `bytes` bytes at `staged` in the staged
// buffer and at `buffer` in the other one (a pack's source, an unpack's
// destination).
struct StagedRun {
  int64_t staged, buffer, bytes;
};
// The runs ops [begin, end) of `p` copy, unmerged, in the order of their
// staged side (`sending`: a pack, whose destination is staged; else an
// unpack): what a backend lists where a message's boxes interleave in its
// staged bytes (MPI's hindexed types, threads' run lists). Where every run
// is one length and they fill slots of it (a block-cyclic message's do),
// each goes straight to its slot; else they are sorted.
std::vector<StagedRun> StagedRuns(const CopyProgram& p, int32_t begin, int32_t end, bool sending);

}  // namespace reshard

#endif  // RESHARD_COPY_PROGRAM_H_
