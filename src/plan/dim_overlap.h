// Per-dim overlaps between the cells of a source and a target layout.
//
// For tensor dim d, every pair (source tile coordinate s, target tile
// coordinate t) whose cells intersect gets one Overlap: its segments in
// global order, with offsets into both tiles' local extents. Built by one
// sweep over both cut lists: O(cells) per dim, independent of device count.
#ifndef RESHARD_SRC_PLAN_DIM_OVERLAP_H_
#define RESHARD_SRC_PLAN_DIM_OVERLAP_H_

#include <cstdint>
#include <span>
#include <utility>
#include <functional>
#include <vector>

#include "reshard/exchange.h"
#include "reshard/layout.h"

namespace reshard {

struct DimOverlap {
  struct Overlap {
    int32_t src = 0, dst = 0;           // tile coordinates along this dim
    int32_t seg_begin = 0, seg_end = 0; // into segments
    int64_t length = 0;                 // total elements along this dim
  };
  std::vector<Segment> segments;
  std::vector<Overlap> overlaps;        // sorted by (src, dst)
  std::vector<int32_t> by_src_begin;    // CSR: overlaps of source coordinate s
  std::vector<int32_t> by_dst;          // overlap ids grouped by target coordinate
  std::vector<int32_t> by_dst_begin;

  std::span<const Overlap> OfSource(int32_t s) const {
    return {overlaps.data() + by_src_begin[s], overlaps.data() + by_src_begin[s + 1]};
  }
  std::span<const int32_t> OfTarget(int32_t t) const {
    return {by_dst.data() + by_dst_begin[t], by_dst.data() + by_dst_begin[t + 1]};
  }
};

DimOverlap BuildDimOverlap(const Layout& src, const Layout& dst, int64_t d);

// What the planner shares with every plan it produces.
class ExchangeTables {
 public:
  Layout source, target;
  std::vector<DimOverlap> dims;
  // For the sender rule (exchange.h): the most holders of any target tile,
  // and, sorted, the (source tile, position) of each holder of a replicated
  // source tile that also receives from it (and so copies locally).
  int64_t target_slots = 1;
  std::vector<std::pair<int64_t, int64_t>> local_receivers;
  // The group rule (Exchange::Create with sender groups): per source tile,
  // its holders as (group key, device), sorted, in CSR over tiles; empty
  // without groups.
  std::function<int64_t(int64_t)> group_key;
  std::vector<int64_t> keyed_begin;
  std::vector<std::pair<int64_t, int64_t>> keyed_holders;
  // Exchange::CreateRouted's filter: null delivers every transfer. With
  // `receivers`, what it keeps of each (source tile, target tile) pair,
  // listed: the sender side then visits only those.
  std::function<bool(int64_t source_tile, int64_t receiver)> delivers;
  std::function<std::span<const int64_t>(int64_t source_tile, int64_t target_tile)> receivers;
};

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_DIM_OVERLAP_H_
