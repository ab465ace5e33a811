// Routing the parts of partial sums (part_routes.h): the part-to-part
// match and, where it receives less, the tile routes (tile_routes.h).
#include "reshard/part_routes.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "plan/tile_routes.h"
#include "reshard/exchange.h"

namespace reshard {

bool PartRoutes::KeepsParts() const {
  if (scale != 1) return false;
  for (size_t p = 0; p < to.size(); ++p) {
    const int64_t part = static_cast<int64_t>(p);
    if (!tile_to) {
      if (to[p] != part) return false;
      continue;
    }
    for (int64_t tile = 0; tile < tiles; ++tile)
      for (int64_t t = 0; t < target_tiles; ++t)
        if (const int64_t into = TileTo(part, tile, t); into != -1 && into != part) return false;
  }
  return true;
}

std::vector<int64_t> PartRoutes::PartsInto(int64_t part) const {
  std::vector<int64_t> parts;
  for (size_t p = 0; p < to.size(); ++p) {
    const int64_t pp = static_cast<int64_t>(p);
    bool routed = to[p] < 0 || to[p] == part;
    if (tile_to) {
      routed = false;  // -1 in tile_to marks tiles that do not overlap, never a part
      if (part < 0) continue;
      for (int64_t s = 0; s < tiles && !routed; ++s)
        for (int64_t t = 0; t < target_tiles && !routed; ++t) routed = TileTo(pp, s, t) == part;
    }
    if (routed) parts.push_back(pp);
  }
  return parts;
}

std::vector<int64_t> PartRoutes::PartsAt(const Layout& source, int64_t part, int64_t target_tile, int64_t element) const {
  if (!tile_to) return PartsInto(part);
  if (part < 0) return {};  // -1 in tile_to marks tiles that do not overlap
  std::vector<int32_t> coords(static_cast<size_t>(source.rank()));
  for (int64_t d = source.rank() - 1; d >= 0; --d) {
    const int64_t g = element % source.shape()[d];
    element /= source.shape()[d];
    const DimGrid& grid = source.dim(d);
    const int64_t cell = std::upper_bound(grid.cuts.begin(), grid.cuts.end(), g) - grid.cuts.begin() - 1;
    coords[static_cast<size_t>(d)] = grid.cell_tile[static_cast<size_t>(cell)];
  }
  const int64_t tile = source.TileIndex(coords);
  std::vector<int64_t> parts;
  for (size_t p = 0; p < to.size(); ++p)
    if (TileTo(static_cast<int64_t>(p), tile, target_tile) == part) parts.push_back(static_cast<int64_t>(p));
  return parts;
}

bool PartRoutes::Fills(const Layout& target, int64_t device) const {
  if (!target.partial() || target.TileOf(device) < 0) return false;
  if (tile_to) return std::binary_search(partly_filled.begin(), partly_filled.end(), device);
  const int64_t q = target.PartOf(device);
  return std::none_of(to.begin(), to.end(), [q](int64_t t) { return t < 0 || t == q; });
}

bool PartRoutes::ReachesTile(const Layout& target, int64_t tile, int64_t receiver) const {
  const int64_t q = target.PartOf(receiver), t = target.TileOf(receiver);
  if (t < 0) return false;
  for (size_t p = 0; p < to.size(); ++p)
    if (TileTo(static_cast<int64_t>(p), tile, t) == q) return true;
  return false;
}

bool PartRoutes::RoutesTileTo(const Layout& target, int64_t part, int64_t tile, int64_t receiver) const {
  const int64_t t = target.TileOf(receiver);
  return t >= 0 && TileTo(part, tile, t) == target.PartOf(receiver);
}

bool PartRoutes::FirstInto(int64_t part, int64_t tile, int64_t target_tile, int64_t target_part) const {
  for (int64_t p = 0; p < part; ++p)
    if (TileTo(p, tile, target_tile) == target_part) return false;
  return TileTo(part, tile, target_tile) == target_part;
}

PartRoutes Exchange::RouteParts(const Layout& source, const Layout& target) {
  const int64_t P = source.reduction().parts, Q = target.reduction().parts;
  const ReduceOp sop = source.reduction().op, top = target.reduction().op;
  PartRoutes r;
  r.combine = P > 1 ? sop : ReduceOp::kSum;  // one part is a copy, whatever the op
  r.fill = top;
  r.to.assign(static_cast<size_t>(P), -1);
  if (!target.partial()) return r;
  // How many devices hold source part p and target part q (by tiles held),
  // per source part: (q, devices), q ascending. Only pairs that share a
  // device are listed, so routing is linear in devices, not parts squared.
  std::map<std::pair<int64_t, int64_t>, int64_t> shared;
  for (int64_t dev : target.devices())
    if (target.TileOf(dev) >= 0 && source.TileOf(dev) >= 0) ++shared[{source.PartOf(dev), target.PartOf(dev)}];
  std::vector<std::vector<std::pair<int64_t, int64_t>>> sharing(static_cast<size_t>(P));
  for (const auto& [pq, n] : shared) sharing[static_cast<size_t>(pq.first)].emplace_back(pq.second, n);
  std::vector<int64_t> load(static_cast<size_t>(Q), 0);
  std::vector<bool> taken(static_cast<size_t>(Q), false);
  // (load, q) of the target parts not taken, for a source part sharing no
  // device with any: built at the first such part (most never need it).
  std::optional<std::set<std::pair<int64_t, int64_t>>> free_parts;
  auto add_load = [&](int64_t q) {
    const size_t i = static_cast<size_t>(q);
    if (free_parts && free_parts->erase({load[i], q}) > 0) free_parts->emplace(load[i] + 1, q);
    ++load[i];
  };
  auto take = [&](int64_t q) {
    taken[static_cast<size_t>(q)] = true;
    if (free_parts) free_parts->erase({load[static_cast<size_t>(q)], q});
  };
  // The target part for source part p among those not taken: most shared
  // devices, then least loaded, then lowest. One sharing no device with p
  // (the least loaded, then lowest) only where no free one shares any.
  auto best = [&](int64_t p) {
    int64_t b = -1, b_shared = 0;
    for (const auto& [q, n] : sharing[static_cast<size_t>(p)]) {
      if (taken[static_cast<size_t>(q)]) continue;
      if (b < 0 || n > b_shared || (n == b_shared && load[static_cast<size_t>(q)] < load[static_cast<size_t>(b)]))
        b = q, b_shared = n;
    }
    if (b >= 0) return b;
    if (!free_parts) {
      free_parts.emplace();
      for (int64_t q = 0; q < Q; ++q)
        if (!taken[static_cast<size_t>(q)]) free_parts->emplace(load[static_cast<size_t>(q)], q);
    }
    return free_parts->empty() ? int64_t{-1} : free_parts->begin()->second;
  };
  if (top == ReduceOp::kAvg && P > 1 && sop == ReduceOp::kAvg && P == Q) {
    // avg into avg of as many parts: one to one, each receiver copies its part.
    for (int64_t p = 0; p < P; ++p) take(r.to[static_cast<size_t>(p)] = best(p));
    r.combine = ReduceOp::kSum;
    return r;
  }
  // f16's range ends at 65504: Q times a part's share could overflow where
  // the value does not (NCCL's avg scales each part by 1 / Q first, for that
  // reason), so an f16 avg target takes the whole reduction in every part.
  if (top == ReduceOp::kAvg && target.dtype() == DType::kF16) return r;
  // Any other avg target is routed as a sum target would be, each target
  // part scaled by Q: (Q s_1 + ... + Q s_Q) / Q is s_1 + ... + s_Q, the value.
  if (top == ReduceOp::kAvg) r.scale = Q;
  const ReduceOp as = top == ReduceOp::kAvg ? ReduceOp::kSum : top;
  if (P == 1 || sop == as) {  // parts split the reduction as they are
    for (int64_t p = 0; p < P; ++p) add_load(r.to[static_cast<size_t>(p)] = best(p));
    RouteTiles(source, target, /*together=*/false, r);
    return r;
  }
  std::vector<int64_t> shared_into(static_cast<size_t>(Q), 0);
  for (const auto& [pq, n] : shared) shared_into[static_cast<size_t>(pq.second)] += n;
  // The target part sharing most devices with the source's parts (the lowest of equals).
  const int64_t into = std::max_element(shared_into.begin(), shared_into.end()) - shared_into.begin();
  std::fill(r.to.begin(), r.to.end(), into);
  RouteTiles(source, target, /*together=*/true, r);
  return r;
}

}  // namespace reshard
