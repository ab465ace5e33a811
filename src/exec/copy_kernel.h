// The pack/unpack kernel: runs CopyProgram box copies at memory bandwidth.
// A copy's rows (the product of its dims' counts; a dimless copy's bytes)
// can be split into ranges, so one large copy spreads over several threads.
// Stateless; thread-safe as long as concurrent calls write disjoint bytes.
#ifndef RESHARD_SRC_EXEC_COPY_KERNEL_H_
#define RESHARD_SRC_EXEC_COPY_KERNEL_H_

#include <cstddef>
#include <cstdint>

#include "reshard/device_program.h"

namespace reshard {

// Units a copy splits into: rows of its dims, or bytes of its run when it has none.
int64_t CopyUnits(const CopyProgram& p, const CopyOp& op);
// Bytes one unit holds.
int64_t UnitBytes(const CopyProgram& p, const CopyOp& op);
// Copies units [lo, hi) of `op` from src (the buffer op.src_offset is relative
// to) to dst. REQUIRES: 0 <= lo <= hi <= CopyUnits(p, op); the op in bounds.
void RunCopy(const CopyProgram& p, const CopyOp& op, const std::byte* src, std::byte* dst, int64_t lo, int64_t hi);

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_COPY_KERNEL_H_
