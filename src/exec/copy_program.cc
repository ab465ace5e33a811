// Building and measuring box copies (copy_program.h).
#include "reshard/copy_program.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "exec/row_walk.h"
#include "reshard/layout.h"  // kMaxRank

namespace reshard {

void CopyProgram::AddBox(std::span<const int64_t> extent, int64_t src_offset, std::span<const int64_t> src_strides,
                         int64_t dst_offset, std::span<const int64_t> dst_strides, int64_t elem_bytes) {
  // (A fixed array, not a vector, for any layout's rank: a compile adds a
  // box per message and side.)
  CopyDim local[kMaxRank + 1];
  std::vector<CopyDim> more;
  CopyDim* d = local;
  if (extent.size() > kMaxRank + 1) {
    more.resize(extent.size());
    d = more.data();
  }
  size_t nd = 0;
  for (size_t i = 0; i < extent.size(); ++i) {
    if (extent[i] == 0) return;
    if (extent[i] > 1) d[nd++] = {extent[i], src_strides[i] * elem_bytes, dst_strides[i] * elem_bytes};
  }
  // Walk the destination in memory order (its smallest stride innermost):
  // row-major buffers keep the box's own dim order, and a copy between
  // column-major buffers runs down their contiguous columns instead of
  // element by element.
  std::stable_sort(d, d + nd, [](const CopyDim& a, const CopyDim& b) { return a.dst_stride > b.dst_stride; });
  int64_t run = elem_bytes;
  while (nd > 0 && d[nd - 1].src_stride == run && d[nd - 1].dst_stride == run) {
    run *= d[nd - 1].count;
    --nd;
  }
  // Merge an outer dim into the inner one where both sides are contiguous.
  const size_t first = dims.size();
  for (size_t i = 0; i < nd; ++i) {
    const CopyDim& c = d[i];
    if (dims.size() > first) {
      CopyDim& o = dims.back();
      if (o.src_stride == c.count * c.src_stride && o.dst_stride == c.count * c.dst_stride) {
        o = {o.count * c.count, c.src_stride, c.dst_stride};
        continue;
      }
    }
    dims.push_back(c);
  }
  CopyOp op{src_offset, dst_offset, run, static_cast<int32_t>(first), static_cast<int32_t>(dims.size() - first)};
  ops.push_back(op);
  bytes += OpBytes(op);
}

void CopyProgram::Append(const CopyProgram& from, int64_t lo, int64_t hi, int64_t src_shift, int64_t dst_shift) {
  for (int64_t k = lo; k < hi; ++k) {
    CopyOp op = from.ops[static_cast<size_t>(k)];
    const auto first = from.dims.begin() + op.first_dim;
    op.first_dim = static_cast<int32_t>(dims.size());
    dims.insert(dims.end(), first, first + op.num_dims);
    op.src_offset += src_shift;
    op.dst_offset += dst_shift;
    ops.push_back(op);
    bytes += OpBytes(op);
  }
}

int64_t CopyProgram::OpBytes(const CopyOp& op) const {
  int64_t n = op.run_bytes;
  for (int32_t i = 0; i < op.num_dims; ++i) n *= dims[op.first_dim + i].count;
  return n;
}

int64_t CopyProgram::SrcEnd(const CopyOp& op) const {
  int64_t e = op.src_offset + op.run_bytes;
  for (int32_t i = 0; i < op.num_dims; ++i) e += (dims[op.first_dim + i].count - 1) * dims[op.first_dim + i].src_stride;
  return e;
}

int64_t CopyProgram::DstEnd(const CopyOp& op) const {
  int64_t e = op.dst_offset + op.run_bytes;
  for (int32_t i = 0; i < op.num_dims; ++i) e += (dims[op.first_dim + i].count - 1) * dims[op.first_dim + i].dst_stride;
  return e;
}

bool StagedInOrder(const CopyProgram& p, int32_t begin, int32_t end, bool staged_is_dst) {
  int64_t next = -1;
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    const int64_t offset = staged_is_dst ? op.dst_offset : op.src_offset;
    if (next >= 0 && offset != next) return false;
    int64_t span = op.run_bytes;
    for (int32_t d = op.num_dims; d-- > 0;) {
      const CopyDim& c = p.dims[static_cast<size_t>(op.first_dim + d)];
      if ((staged_is_dst ? c.dst_stride : c.src_stride) != span) return false;
      span *= c.count;
    }
    next = offset + span;
  }
  return true;
}

int64_t RunCount(const CopyProgram& p, int32_t begin, int32_t end) {
  int64_t runs = 0;
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    int64_t n = 1;
    for (int32_t d = 0; d < op.num_dims; ++d) n *= p.dims[static_cast<size_t>(op.first_dim + d)].count;
    runs += n;
  }
  return runs;
}

std::vector<StagedRun> StagedRuns(const CopyProgram& p, int32_t begin, int32_t end, bool sending) {
  std::vector<StagedRun> runs;
  runs.reserve(static_cast<size_t>(RunCount(p, begin, end)));
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    ForEachRun(p, op, [&](int64_t src, int64_t dst) {
      runs.push_back(sending ? StagedRun{dst, src, op.run_bytes} : StagedRun{src, dst, op.run_bytes});
    });
  }
  int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
  bool slotted = !runs.empty();
  for (const StagedRun& r : runs) {
    first = std::min(first, r.staged);
    last = std::max(last, r.staged + r.bytes);
    slotted = slotted && r.bytes == runs[0].bytes;
  }
  if (slotted && runs[0].bytes > 0 && last - first == runs[0].bytes * static_cast<int64_t>(runs.size())) {
    std::vector<StagedRun> placed(runs.size(), StagedRun{-1, 0, 0});
    for (const StagedRun& r : runs) {
      const int64_t at = r.staged - first;
      const size_t slot = static_cast<size_t>(at / r.bytes);
      if (at % r.bytes != 0 || placed[slot].staged >= 0) {
        slotted = false;
        break;
      }
      placed[slot] = r;
    }
    if (slotted) runs.swap(placed);
  } else {
    slotted = false;
  }
  if (!slotted)
    std::sort(runs.begin(), runs.end(), [](const StagedRun& a, const StagedRun& b) { return a.staged < b.staged; });
  return runs;
}

}  // namespace reshard
