// Strided N-d block copies between row-major buffers: the pack, unpack and
// local-copy kernel of every executor.
#ifndef RESHARD_SRC_EXEC_BLOCK_COPY_H_
#define RESHARD_SRC_EXEC_BLOCK_COPY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "reshard/exchange.h"

namespace reshard {

// One run along a dim: `length` indices starting at `src` in the source
// buffer and at `dst` in the destination buffer.
struct Run {
  int64_t src = 0, dst = 0, length = 0;
};

// Copies the cross product over dims of `runs` from `src` (row-major of
// src_shape) to `dst` (row-major of dst_shape), elements of elem_size bytes.
// REQUIRES: runs.size() == src_shape.size() == dst_shape.size(); every run in bounds.
void CopyRuns(const std::vector<std::vector<Run>>& runs, const std::byte* src, std::span<const int64_t> src_shape,
              std::byte* dst, std::span<const int64_t> dst_shape, int64_t elem_size);

enum class CopyKind { kPack, kUnpack, kLocal };
// The runs that pack a transfer into a contiguous staging buffer (shape:
// per-dim totals), unpack it, or copy it directly between buffers. With
// `clip`, only what it keeps of the transfer (a relay's piece,
// collective_plan.h); `into_source_tile` writes where the elements sit in
// the sender's tile (a relay's round 1, into its helper's copy of that tile).
std::vector<std::vector<Run>> TransferRuns(const ExchangePlan& plan, const Transfer& t, CopyKind kind,
                                           const TransferClip& clip = {}, bool into_source_tile = false);
// Per-dim totals of the transfer: the staging buffer's shape.
std::vector<int64_t> StagingShape(const ExchangePlan& plan, const Transfer& t);

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_BLOCK_COPY_H_
