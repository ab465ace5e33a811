#include "plan/reduction_bound.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "layout/checked_math.h"

namespace reshard {

namespace {

// Receptions until every one of R keepers holds the whole reduction of P
// parts, `holding` of them holding a part each (helpers may relay).
int64_t WholeReceptions(int64_t P, int64_t R, int64_t holding) {
  if (P == 1) return R - holding;
  return P + R - (holding > 0 ? 2 : 1);
}

}  // namespace

int64_t ElementReceptions(int64_t source_parts, int64_t target_parts, std::span<const int64_t> holder_parts,
                          std::span<const int64_t> keeper_parts, bool parts_split) {
  if (target_parts == 1)
    return WholeReceptions(source_parts, static_cast<int64_t>(holder_parts.size()),
                           std::count_if(holder_parts.begin(), holder_parts.end(), [](int64_t p) { return p >= 0; }));
  // Each source part no keeper holds leaves its holder by one reception.
  std::vector<int64_t> held;
  for (int64_t p : holder_parts)
    if (p >= 0) held.push_back(p);
  std::sort(held.begin(), held.end());
  const int64_t distinct = std::unique(held.begin(), held.end()) - held.begin();
  const int64_t leave = source_parts - distinct;
  // A target part's keepers end with one value, made of a set of source
  // parts (the sets cover every part); a keeper receives nothing only where
  // that set is empty or the one part it holds. Per target part q: its
  // keepers, those but the ones holding its commonest part, and what forming
  // the whole reduction in q alone takes.
  std::vector<std::pair<int64_t, int64_t>> qp;  // (target part, source part) per keeper
  for (size_t k = 0; k < holder_parts.size(); ++k) qp.emplace_back(keeper_parts[k], holder_parts[k]);
  std::sort(qp.begin(), qp.end());
  std::vector<int64_t> lacking;  // per target part with keepers
  int64_t groups = 0, smallest = INT64_MAX, whole = INT64_MAX;  // target parts with keepers, and the least of each
  for (size_t i = 0; i < qp.size(); ++groups) {
    size_t j = i;
    int64_t most = 0, holding = 0;
    while (j < qp.size() && qp[j].first == qp[i].first) {
      size_t k = j;
      while (k < qp.size() && qp[k] == qp[j]) ++k;
      if (qp[j].second >= 0) {
        most = std::max(most, static_cast<int64_t>(k - j));
        holding += static_cast<int64_t>(k - j);
      }
      j = k;
    }
    const int64_t n = static_cast<int64_t>(j - i);
    smallest = std::min(smallest, n);
    lacking.push_back(n - most);
    whole = std::min(whole, WholeReceptions(source_parts, n, holding));
    i = j;
  }
  // Target parts without keepers of this element could take any part for
  // free: no second bound then.
  if (groups < target_parts) return leave;
  // Ops that cannot split (max into sum, say): one target part forms the
  // whole reduction.
  if (!parts_split) return std::max(leave, whole);
  // Every set of one part at most (P <= Q, on distinct target parts): the P
  // smallest `lacking`. Else some set of two parts or more, all of whose
  // keepers receive: the smallest size.
  std::sort(lacking.begin(), lacking.end());
  int64_t replicas = smallest;
  if (source_parts <= target_parts) {
    int64_t singles = 0;
    for (int64_t i = 0; i < source_parts; ++i) singles += lacking[static_cast<size_t>(i)];
    replicas = std::min(replicas, singles);
  }
  return std::max(leave, replicas);
}

bool ReductionSplits(int64_t source_parts, ReduceOp source_op, int64_t target_parts, ReduceOp target_op,
                     DType dtype) {
  if (source_parts == 1) return true;
  // trunc(S / P) is no sum f(a) + g(b) of what two target parts may know
  // (a = b = 1 gives 1, either alone 0): the whole sum S meets in one place,
  // unless each target part of an avg over k P parts holds k times its
  // parts' sum.
  if (source_op == ReduceOp::kAvg && !IsFloatingPoint(dtype))
    return target_op == ReduceOp::kAvg && target_parts % source_parts == 0;
  if (source_op == target_op) return true;
  auto linear = [](ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kAvg; };
  return linear(source_op) && linear(target_op);
}

namespace {

// Per dim: for each target tile coordinate, the source tile coordinates it
// overlaps and the overlap lengths.
using Overlaps = std::vector<std::vector<std::pair<int32_t, int64_t>>>;

bool DimOverlaps(const Layout& source, const Layout& target, int64_t d, int64_t* budget, Overlaps* out) {
  const int32_t s_tiles = source.dim(d).tiles, t_tiles = target.dim(d).tiles;
  *budget -= int64_t{s_tiles} * t_tiles;
  if (*budget < 0) return false;
  std::vector<std::vector<Interval>> s_iv(s_tiles);
  for (int32_t s = 0; s < s_tiles; ++s) s_iv[s] = source.TileIntervals(d, s);
  out->assign(t_tiles, {});
  for (int32_t t = 0; t < t_tiles; ++t) {
    const std::vector<Interval> t_iv = target.TileIntervals(d, t);
    for (int32_t s = 0; s < s_tiles; ++s)
      if (int64_t n = OverlapLength(s_iv[s], t_iv); n > 0) (*out)[t].push_back({s, n});
  }
  return true;
}

// One target tile's keepers, for ElementReceptions of each source tile it
// overlaps without visiting every keeper: of the inputs, only which keepers
// hold the source tile (and which parts) change from one source tile to the
// next, and they are few against all keepers of a partial target (one
// target part's replicas per source part at most). Built in
// O(keepers log keepers); each source tile then costs O(its holders among
// the keepers, log of them), plus, where P <= Q, P.
class TileKeepers {
 public:
  TileKeepers(const Layout& source, const Layout& target, std::span<const int64_t> keepers)
      : P_(source.reduction().parts), Q_(target.reduction().parts), R_(static_cast<int64_t>(keepers.size())) {
    for (int64_t r : keepers)
      if (const int64_t s = source.TileOf(r); s >= 0) holding_.push_back({s, source.PartOf(r), target.PartOf(r)});
    std::sort(holding_.begin(), holding_.end());
    if (Q_ < 2) return;
    std::vector<int64_t> parts;
    for (int64_t r : keepers) parts.push_back(target.PartOf(r));
    std::sort(parts.begin(), parts.end());
    for (size_t i = 0; i < parts.size();) {
      size_t j = i;
      while (j < parts.size() && parts[j] == parts[i]) ++j;
      by_count_.push_back({static_cast<int64_t>(j - i), parts[i]});
      i = j;
    }
    std::sort(by_count_.begin(), by_count_.end());
    for (size_t i = 0; i < by_count_.size(); ++i) position_.push_back({by_count_[i].second, static_cast<int64_t>(i)});
    std::sort(position_.begin(), position_.end());
    removed_.assign(by_count_.size(), 0);
  }

  // ElementReceptions of an element of source tile s (REQUIRES: s overlaps
  // the target tile), as it would compute from every keeper.
  int64_t Receptions(int64_t s, bool parts_split) {
    const Holding lo{s, INT64_MIN, INT64_MIN};
    const auto b = std::lower_bound(holding_.begin(), holding_.end(), lo);
    auto e = b;
    while (e != holding_.end() && e->source_tile == s) ++e;
    const int64_t holding = e - b;
    if (Q_ < 2) return WholeReceptions(P_, R_, holding);
    // Distinct source parts held: each other leaves its holder.
    held_.clear();
    for (auto it = b; it != e; ++it) held_.push_back(it->source_part);
    std::sort(held_.begin(), held_.end());
    const int64_t leave = P_ - (std::unique(held_.begin(), held_.end()) - held_.begin());
    const int64_t groups = static_cast<int64_t>(by_count_.size());
    if (groups < Q_) return leave;
    // The target parts with a keeper holding the tile: their keepers, how
    // many hold a part, and the most that hold one part.
    affected_.clear();
    for (auto it = b; it != e; ++it) affected_.push_back({it->target_part, it->source_part});
    std::sort(affected_.begin(), affected_.end());
    changed_.clear();  // (position in by_count_, lacking, holding)
    for (size_t i = 0; i < affected_.size();) {
      size_t j = i;
      int64_t most = 0;
      while (j < affected_.size() && affected_[j].first == affected_[i].first) {
        size_t k = j;
        while (k < affected_.size() && affected_[k] == affected_[j]) ++k;
        most = std::max(most, static_cast<int64_t>(k - j));
        j = k;
      }
      const int64_t at = std::lower_bound(position_.begin(), position_.end(), std::pair(affected_[i].first, INT64_MIN))->second;
      const int64_t n = by_count_[static_cast<size_t>(at)].first;
      changed_.push_back({at, n - most, static_cast<int64_t>(j - i)});
      i = j;
    }
    // One target part forms the whole reduction: the least over parts, the
    // unaffected ones at their smallest count (WholeReceptions grows with it).
    int64_t whole = INT64_MAX;
    for (const Changed& c : changed_) {
      whole = std::min(whole, WholeReceptions(P_, by_count_[static_cast<size_t>(c.at)].first, c.holding));
      removed_[static_cast<size_t>(c.at)] = 1;
    }
    for (size_t i = 0; i < by_count_.size(); ++i)
      if (!removed_[i]) {
        whole = std::min(whole, WholeReceptions(P_, by_count_[i].first, 0));
        break;
      }
    int64_t result = 0;
    if (!parts_split) {
      result = std::max(leave, whole);
    } else {
      // The smallest count of a part's keepers (a set of two parts or more),
      // or, where P <= Q, the P smallest lacking counts (the affected parts'
      // lowered, the others their counts): a merge of the two sorted lists.
      int64_t replicas = by_count_.front().first;
      if (P_ <= Q_) {
        lacking_.clear();
        for (const Changed& c : changed_) lacking_.push_back(c.lacking);
        std::sort(lacking_.begin(), lacking_.end());
        int64_t singles = 0, taken = 0;
        size_t i = 0, k = 0;
        while (taken < P_) {
          while (i < by_count_.size() && removed_[i]) ++i;
          const bool from_changed = k < lacking_.size() && (i >= by_count_.size() || lacking_[k] <= by_count_[i].first);
          singles += from_changed ? lacking_[k++] : by_count_[i++].first;
          ++taken;
        }
        replicas = std::min(replicas, singles);
      }
      result = std::max(leave, replicas);
    }
    for (const Changed& c : changed_) removed_[static_cast<size_t>(c.at)] = 0;
    return result;
  }

 private:
  struct Holding {
    int64_t source_tile, source_part, target_part;
    friend auto operator<=>(const Holding&, const Holding&) = default;
  };
  struct Changed {
    int64_t at, lacking, holding;
  };
  int64_t P_, Q_, R_;
  std::vector<Holding> holding_;                       // the keepers holding a source tile, by tile
  std::vector<std::pair<int64_t, int64_t>> by_count_;  // (keepers, target part), ascending
  std::vector<std::pair<int64_t, int64_t>> position_;  // (target part, its index in by_count_), by part
  std::vector<uint8_t> removed_;
  // Scratch, kept between calls.
  std::vector<int64_t> held_, lacking_;
  std::vector<std::pair<int64_t, int64_t>> affected_;
  std::vector<Changed> changed_;
};

}  // namespace

LowerBound ReductionLowerBound(const Layout& source, const Layout& target) {
  const int64_t rank = source.rank();
  const int64_t P = source.reduction().parts, Q = target.reduction().parts;
  const int64_t bytes = source.element_bytes();
  const bool splits = ReductionSplits(P, source.reduction().op, Q, target.reduction().op, source.dtype());
  // Every device of either layout can share the receiving.
  std::vector<int64_t> all = source.devices();
  all.insert(all.end(), target.devices().begin(), target.devices().end());
  std::sort(all.begin(), all.end());
  const int64_t devices = std::unique(all.begin(), all.end()) - all.begin();

  int64_t budget = kMaxBoundWork;
  std::vector<Overlaps> per_dim(rank);
  bool exact = true;
  for (int64_t d = 0; d < rank && exact; ++d) exact = DimOverlaps(source, target, d, &budget, &per_dim[d]);

  LowerBound lb;
  int64_t max_need = 0;     // elements, the busiest keeper's own need
  int64_t receptions = 0;   // elements, over every device
  for (int64_t t = 0; t < target.num_tiles(); ++t) {
    const int64_t tile_elements = target.TileElements(t);
    std::span<const int64_t> keepers = target.Holders(t);
    if (tile_elements == 0 || keepers.empty()) continue;
    // Each keeper's own need: with a partial source it holds no element
    // whole; otherwise what its source tile lacks.
    if (Q == 1) {
      for (int64_t r : keepers) {
        int64_t have = 0;
        const int64_t s = source.TileOf(r);
        if (P == 1 && s >= 0) {
          std::vector<int32_t> sc = source.TileCoords(s), tc = target.TileCoords(t);
          have = 1;
          for (int64_t d = 0; d < rank; ++d)
            have *= OverlapLength(source.TileIntervals(d, sc[d]), target.TileIntervals(d, tc[d]));
        }
        max_need = std::max(max_need, tile_elements - have);
      }
    }
    if (!exact) continue;
    // The source tiles t overlaps: a cross product over dims.
    const std::vector<int32_t> tc = target.TileCoords(t);
    int64_t combos = 1;
    for (int64_t d = 0; d < rank; ++d) combos *= static_cast<int64_t>(per_dim[d][tc[d]].size());
    // (TileKeepers: linear in the keepers and the source tiles, give or
    // take a log, plus P a source tile where P <= Q.)
    budget -= static_cast<int64_t>(keepers.size()) + combos * (P <= Q ? P : 1);
    if (budget < 0) { exact = false; continue; }
    TileKeepers tile_keepers(source, target, keepers);
    std::vector<size_t> idx(rank, 0);
    std::vector<int32_t> sc(rank);
    for (int64_t c = 0; c < combos; ++c) {
      int64_t n = 1;
      for (int64_t d = 0; d < rank; ++d) {
        const auto& [coord, len] = per_dim[d][tc[d]][idx[d]];
        sc[d] = coord;
        n *= len;
      }
      const int64_t s = source.TileIndex(sc);
      int64_t add = 0;
      if (!CheckedMul(n, tile_keepers.Receptions(s, splits), &add) ||
          !CheckedAdd(receptions, add, &receptions)) {
        exact = false;  // beyond int64: keep the per-device part
        break;
      }
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < per_dim[d][tc[d]].size()) break;
        idx[d] = 0;
      }
    }
  }
  if (!exact) receptions = 0;  // only the per-device part holds
  const int64_t shared = devices > 0 ? CeilDiv(receptions, devices) : 0;
  auto to_bytes = [bytes](int64_t elements) {
    int64_t b = 0;
    return CheckedMul(elements, bytes, &b) ? b : INT64_MAX;
  };
  lb.max_recv_bytes = to_bytes(std::max(max_need, shared));
  lb.total_bytes = to_bytes(std::max(receptions, Q == 1 ? max_need : 0));
  return lb;
}

}  // namespace reshard
