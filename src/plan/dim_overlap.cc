#include "plan/dim_overlap.h"

#include <algorithm>

namespace reshard {

namespace {

// Whether `next` continues `last` on all three counts: globally and in both
// local buffers (so the two are one segment).
bool Extends(const Segment& last, const Segment& next) {
  return last.global_lo + last.length == next.global_lo && last.src_offset + last.length == next.src_offset &&
         last.dst_offset + last.length == next.dst_offset;
}

}  // namespace

DimOverlap BuildDimOverlap(const Layout& src, const Layout& dst, int64_t d) {
  const DimGrid& a = src.dim(d);
  const DimGrid& b = dst.dim(d);
  struct Piece {
    int32_t s, t;
    Segment seg;
  };
  const size_t na = a.cell_tile.size(), nb = b.cell_tile.size();
  // Visits the pieces both cut lists make, in global order.
  auto walk = [&](auto&& visit) {
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
      const int64_t lo = std::max(a.cuts[i], b.cuts[j]);
      const int64_t hi = std::min(a.cuts[i + 1], b.cuts[j + 1]);
      if (hi > lo)
        visit(Piece{a.cell_tile[i], b.cell_tile[j],
                    Segment{lo, hi - lo, src.CellOffset(d, i) + lo - a.cuts[i], dst.CellOffset(d, j) + lo - b.cuts[j]}});
      if (a.cuts[i + 1] < b.cuts[j + 1]) ++i;
      else if (b.cuts[j + 1] < a.cuts[i + 1]) ++j;
      else { ++i; ++j; }
    }
  };
  // Pieces in (source, target) coordinate order become overlaps: a new
  // overlap where the pair changes, a new segment unless the piece extends
  // the last one on both sides: `count` counts them (to reserve exactly),
  // `add` builds them.
  DimOverlap o;
  size_t overlaps = 0, segments = 0;
  bool any = false;
  int32_t pair_s = 0, pair_t = 0;
  Segment seg{};  // the current pair's last segment, as merged so far
  auto count = [&](const Piece& p) {
    const bool same = any && pair_s == p.s && pair_t == p.t;
    if (!same) ++overlaps;
    if (same && Extends(seg, p.seg)) {
      seg.length += p.seg.length;
    } else {
      ++segments;
      seg = p.seg;
    }
    any = true;
    pair_s = p.s;
    pair_t = p.t;
  };
  auto add = [&o](const Piece& p) {
    if (o.overlaps.empty() || o.overlaps.back().src != p.s || o.overlaps.back().dst != p.t) {
      const int32_t at = static_cast<int32_t>(o.segments.size());
      o.overlaps.push_back({p.s, p.t, at, at, 0});
    }
    DimOverlap::Overlap& ov = o.overlaps.back();
    Segment* last_seg = ov.seg_end > ov.seg_begin ? &o.segments.back() : nullptr;
    if (last_seg && Extends(*last_seg, p.seg)) {
      last_seg->length += p.seg.length;
    } else {
      o.segments.push_back(p.seg);
      ++ov.seg_end;
    }
    ov.length += p.seg.length;
  };
  if (std::is_sorted(a.cell_tile.begin(), a.cell_tile.end()) && std::is_sorted(b.cell_tile.begin(), b.cell_tile.end())) {
    // Both grids list their tiles in order (every tiled layout): the walk
    // meets the pairs in order, so it builds the tables straight, sized
    // exactly by a counting walk first (no list of pieces, no sort: the
    // tables of 2^24 cells take about a GB, and a list of pieces grown and
    // sorted beside them held twice that more at once).
    walk(count);
    o.overlaps.reserve(overlaps);
    o.segments.reserve(segments);
    walk(add);
  } else {
    std::vector<Piece> pieces;
    size_t n = 0;
    walk([&n](const Piece&) { ++n; });
    pieces.reserve(n);
    walk([&pieces](const Piece& p) { pieces.push_back(p); });
    std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) {
      return x.s != y.s ? x.s < y.s : x.t < y.t;
    });
    for (const Piece& p : pieces) add(p);
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
