#include "exec/block_copy.h"

#include <cstring>

namespace reshard {
namespace {

struct Copier {
  const std::vector<std::vector<Run>>& runs;
  const std::byte* src;
  std::byte* dst;
  std::vector<int64_t> src_stride, dst_stride;  // in bytes
  int64_t elem;

  void Copy(size_t d, int64_t src_off, int64_t dst_off) const {
    if (d + 1 == runs.size()) {
      for (const Run& r : runs[d])
        std::memcpy(dst + dst_off + r.dst * elem, src + src_off + r.src * elem, static_cast<size_t>(r.length * elem));
      return;
    }
    for (const Run& r : runs[d])
      for (int64_t i = 0; i < r.length; ++i)
        Copy(d + 1, src_off + (r.src + i) * src_stride[d], dst_off + (r.dst + i) * dst_stride[d]);
  }
};

std::vector<int64_t> ByteStrides(std::span<const int64_t> shape, int64_t elem) {
  std::vector<int64_t> s(shape.size(), elem);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

}  // namespace

void CopyRuns(const std::vector<std::vector<Run>>& runs, const std::byte* src, std::span<const int64_t> src_shape,
              std::byte* dst, std::span<const int64_t> dst_shape, int64_t elem_size) {
  if (runs.empty()) {  // rank 0: one element
    std::memcpy(dst, src, static_cast<size_t>(elem_size));
    return;
  }
  Copier c{runs, src, dst, ByteStrides(src_shape, elem_size), ByteStrides(dst_shape, elem_size), elem_size};
  c.Copy(0, 0, 0);
}

std::vector<std::vector<Run>> TransferRuns(const ExchangePlan& plan, const Transfer& t, CopyKind kind,
                                           const TransferClip& clip, bool into_source_tile) {
  std::vector<std::vector<Run>> runs(plan.source().rank());
  for (int64_t d = 0; d < plan.source().rank(); ++d) {
    int64_t staged = 0;
    for (const Segment& whole : plan.Segments(t, d)) {
      const Segment s = clip.Apply(whole, d);
      if (s.length == 0) continue;
      const int64_t dst = into_source_tile ? s.src_offset : s.dst_offset;
      switch (kind) {
        case CopyKind::kPack: runs[d].push_back({s.src_offset, staged, s.length}); break;
        case CopyKind::kUnpack: runs[d].push_back({staged, dst, s.length}); break;
        case CopyKind::kLocal: runs[d].push_back({s.src_offset, dst, s.length}); break;
      }
      staged += s.length;
    }
  }
  return runs;
}

std::vector<int64_t> StagingShape(const ExchangePlan& plan, const Transfer& t) { return TransferClip{}.Shape(plan, t); }

}  // namespace reshard
