#include "plan/dim_overlap.h"

#include <algorithm>

namespace reshard {

DimOverlap BuildDimOverlap(const Layout& src, const Layout& dst, int64_t d) {
  const DimGrid& a = src.dim(d);
  const DimGrid& b = dst.dim(d);
  struct Piece {
    int32_t s, t;
    Segment seg;
  };
  std::vector<Piece> pieces;
  size_t i = 0, j = 0;
  const size_t na = a.cell_tile.size(), nb = b.cell_tile.size();
  while (i < na && j < nb) {
    const int64_t lo = std::max(a.cuts[i], b.cuts[j]);
    const int64_t hi = std::min(a.cuts[i + 1], b.cuts[j + 1]);
    if (hi > lo)
      pieces.push_back({a.cell_tile[i], b.cell_tile[j],
                        Segment{lo, hi - lo, src.CellOffset(d, i) + lo - a.cuts[i], dst.CellOffset(d, j) + lo - b.cuts[j]}});
    if (a.cuts[i + 1] < b.cuts[j + 1]) ++i;
    else if (b.cuts[j + 1] < a.cuts[i + 1]) ++j;
    else { ++i; ++j; }
  }
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) {
    return x.s != y.s ? x.s < y.s : x.t < y.t;
  });
  DimOverlap o;
  for (const Piece& p : pieces) {
    if (o.overlaps.empty() || o.overlaps.back().src != p.s || o.overlaps.back().dst != p.t) {
      const int32_t at = static_cast<int32_t>(o.segments.size());
      o.overlaps.push_back({p.s, p.t, at, at, 0});
    }
    DimOverlap::Overlap& ov = o.overlaps.back();
    Segment* last = ov.seg_end > ov.seg_begin ? &o.segments.back() : nullptr;
    if (last && last->global_lo + last->length == p.seg.global_lo && last->src_offset + last->length == p.seg.src_offset &&
        last->dst_offset + last->length == p.seg.dst_offset) {
      last->length += p.seg.length;
    } else {
      o.segments.push_back(p.seg);
      ++ov.seg_end;
    }
    ov.length += p.seg.length;
  }
  o.by_src_begin.assign(a.tiles + 1, 0);
  o.by_dst_begin.assign(b.tiles + 1, 0);
  for (const DimOverlap::Overlap& ov : o.overlaps) { ++o.by_src_begin[ov.src + 1]; ++o.by_dst_begin[ov.dst + 1]; }
  for (int32_t s = 0; s < a.tiles; ++s) o.by_src_begin[s + 1] += o.by_src_begin[s];
  for (int32_t t = 0; t < b.tiles; ++t) o.by_dst_begin[t + 1] += o.by_dst_begin[t];
  o.by_dst.resize(o.overlaps.size());
  std::vector<int32_t> fill(o.by_dst_begin.begin(), o.by_dst_begin.end() - 1);
  for (size_t k = 0; k < o.overlaps.size(); ++k) o.by_dst[fill[o.overlaps[k].dst]++] = static_cast<int32_t>(k);
  return o;
}

}  // namespace reshard
