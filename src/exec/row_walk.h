// The one walk over a box copy's rows (CopyOp, copy_program.h): its
// contiguous runs in row-major order of its dims, as stretches along the
// innermost dim, with no index arithmetic inside a stretch. The copy
// kernel, the reduce kernel and MPI's run lists (mpi_comm.cc) all step
// through copies with it.
#ifndef RESHARD_SRC_EXEC_ROW_WALK_H_
#define RESHARD_SRC_EXEC_ROW_WALK_H_

#include <algorithm>
#include <cstdint>

#include "reshard/device_program.h"
#include "reshard/layout.h"

namespace reshard {

// Calls stretch(src, dst, n, first) for rows [lo, hi) of dims [dims, dims + nd)
// (nd >= 1; rows numbered row-major over the dims' counts), once per stretch
// of consecutive rows along the innermost dim: row i of a stretch, i in
// [0, n), is at byte offsets src + i * dims[nd - 1].src_stride and dst + i *
// dims[nd - 1].dst_stride (relative to the copy's own offsets), and `first`
// is the stretch's first index along the innermost dim.
// REQUIRES: 0 <= lo <= hi <= the product of the counts.
template <typename Stretch>
void ForEachStretch(const CopyDim* dims, int nd, int64_t lo, int64_t hi, Stretch&& stretch) {
  int64_t idx[kMaxRank + 1];
  int64_t so = 0, dof = 0, rem = lo;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % dims[d].count;
    rem /= dims[d].count;
    so += idx[d] * dims[d].src_stride;
    dof += idx[d] * dims[d].dst_stride;
  }
  const CopyDim& in = dims[nd - 1];
  int64_t row = lo;
  while (row < hi) {
    const int64_t n = std::min(in.count - idx[nd - 1], hi - row);
    stretch(so, dof, n, idx[nd - 1]);
    row += n;
    if (row >= hi) return;
    // Carry: the innermost dim wraps to 0, the next dims count up.
    so -= idx[nd - 1] * in.src_stride;
    dof -= idx[nd - 1] * in.dst_stride;
    idx[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; --d) {
      so += dims[d].src_stride;
      dof += dims[d].dst_stride;
      if (++idx[d] < dims[d].count) break;
      so -= idx[d] * dims[d].src_stride;
      dof -= idx[d] * dims[d].dst_stride;
      idx[d] = 0;
    }
  }
}

// Calls run(src_offset, dst_offset) for every contiguous run of `op`
// (op.run_bytes each), in row-major order; one call for a copy with no dims.
// Offsets are in the buffers the op's own offsets are relative to.
template <typename Run>
void ForEachRun(const CopyProgram& p, const CopyOp& op, Run&& run) {
  if (op.num_dims == 0) {
    run(op.src_offset, op.dst_offset);
    return;
  }
  const CopyDim* dims = p.dims.data() + op.first_dim;
  const int nd = op.num_dims;
  int64_t rows = 1;
  for (int d = 0; d < nd; ++d) rows *= dims[d].count;
  const CopyDim& in = dims[nd - 1];
  ForEachStretch(dims, nd, 0, rows, [&](int64_t so, int64_t dof, int64_t n, int64_t) {
    for (int64_t i = 0; i < n; ++i) run(op.src_offset + so + i * in.src_stride, op.dst_offset + dof + i * in.dst_stride);
  });
}

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_ROW_WALK_H_
