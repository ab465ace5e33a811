#include "plan/reduction_bound.h"

#include <algorithm>
#include <climits>
#include <unordered_map>
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

bool ReductionSplits(int64_t source_parts, ReduceOp source_op, ReduceOp target_op) {
  if (source_parts == 1 || source_op == target_op) return true;
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

}  // namespace

LowerBound ReductionLowerBound(const Layout& source, const Layout& target) {
  const int64_t rank = source.rank();
  const int64_t P = source.reduction().parts, Q = target.reduction().parts;
  const int64_t bytes = source.element_bytes();
  const bool splits = ReductionSplits(P, source.reduction().op, target.reduction().op);
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
  std::vector<int64_t> holder_parts, keeper_parts;
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
    budget -= combos * static_cast<int64_t>(keepers.size());
    if (budget < 0) { exact = false; continue; }
    keeper_parts.clear();
    for (int64_t r : keepers) keeper_parts.push_back(target.PartOf(r));
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
      holder_parts.clear();
      for (int64_t r : keepers) holder_parts.push_back(source.TileOf(r) == s ? source.PartOf(r) : -1);
      int64_t add = 0;
      if (!CheckedMul(n, ElementReceptions(P, Q, holder_parts, keeper_parts, splits), &add) ||
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
