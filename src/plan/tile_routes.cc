#include "plan/tile_routes.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "reshard/box.h"

namespace reshard {
namespace {

// (elements received, busiest device after, part): what a choice minimizes.
using Choice = std::tuple<int64_t, int64_t, int64_t>;

// What the devices of each (target tile, target part) entry of TileHolders
// have received, device i's `base[k] + delta[i]` (k its entry): a choice
// books its part's tile on every device of the entry by adding to `base`,
// and corrects only the few that hold some of it (delta), so a part that
// holds a target tile on many devices costs a choice no walk over them.
class EntryLoads {
 public:
  EntryLoads(const TileHolders& th, size_t devices)
      : th_(th), base_(th.parts.size(), 0), delta_(devices, 0), sorted_(th.parts.size()), built_(th.parts.size(), false) {}

  int64_t Recv(int64_t k, int64_t i) const { return base_[static_cast<size_t>(k)] + delta_[static_cast<size_t>(i)]; }
  void AddToAll(int64_t k, int64_t n) { base_[static_cast<size_t>(k)] += n; }
  // Device i of entry k receives `n` more than AddToAll booked.
  void Correct(int64_t k, int64_t i, int64_t n) {
    if (n == 0) return;
    Build(k);
    auto& sorted = sorted_[static_cast<size_t>(k)];
    int64_t& d = delta_[static_cast<size_t>(i)];
    sorted.erase({d, i});
    sorted.emplace(d += n, i);
  }
  // The most any device of entry k has received.
  int64_t Busiest(int64_t k) const {
    const auto& sorted = sorted_[static_cast<size_t>(k)];
    return base_[static_cast<size_t>(k)] + (built_[static_cast<size_t>(k)] ? sorted.rbegin()->first : 0);
  }
  // The most a device of entry k not in `except` (ascending device
  // indices, all of the entry) has received; the entry holds more devices.
  int64_t BusiestExcept(int64_t k, std::span<const int64_t> except) const {
    if (!built_[static_cast<size_t>(k)]) return base_[static_cast<size_t>(k)];  // every delta is 0
    const auto& sorted = sorted_[static_cast<size_t>(k)];
    for (auto it = sorted.rbegin(); it != sorted.rend(); ++it)
      if (!std::binary_search(except.begin(), except.end(), it->second)) return base_[static_cast<size_t>(k)] + it->first;
    return base_[static_cast<size_t>(k)];  // (not reached: the entry holds more devices)
  }

 private:
  // (Deltas are 0 until an entry's first correction.)
  void Build(int64_t k) {
    if (built_[static_cast<size_t>(k)]) return;
    built_[static_cast<size_t>(k)] = true;
    const TileHolders::Entry& h = th_.parts[static_cast<size_t>(k)];
    for (int64_t j = h.begin; j < h.end; ++j) sorted_[static_cast<size_t>(k)].emplace(0, th_.indices[static_cast<size_t>(j)]);
  }

  const TileHolders& th_;
  std::vector<int64_t> base_, delta_;
  std::vector<std::set<std::pair<int64_t, int64_t>>> sorted_;  // per entry: (delta, device index), once built
  std::vector<bool> built_;
};

}  // namespace

TileHolders::TileHolders(const Layout& target) {
  const int64_t T = target.num_tiles();
  std::vector<std::tuple<int64_t, int64_t, int64_t>> held;  // (tile, part, index)
  for (size_t i = 0; i < target.devices().size(); ++i) {
    const int64_t dev = target.devices()[i], t = target.TileOf(dev);
    if (t >= 0) held.emplace_back(t, target.PartOf(dev), static_cast<int64_t>(i));
  }
  std::sort(held.begin(), held.end());
  tile_begin.assign(static_cast<size_t>(T + 1), 0);
  for (size_t k = 0; k < held.size(); ++k) {
    const auto [t, q, i] = held[k];
    indices.push_back(i);
    ids.push_back(target.devices()[static_cast<size_t>(i)]);
    if (k == 0 || std::get<0>(held[k - 1]) != t || std::get<1>(held[k - 1]) != q) {
      parts.push_back({q, static_cast<int64_t>(k), static_cast<int64_t>(k) + 1});
      ++tile_begin[static_cast<size_t>(t + 1)];
    } else {
      ++parts.back().end;
    }
  }
  for (int64_t t = 0; t < T; ++t) tile_begin[static_cast<size_t>(t + 1)] += tile_begin[static_cast<size_t>(t)];
}

int64_t TileHolders::Find(int64_t tile, int64_t part) const {
  const auto b = parts.begin() + tile_begin[static_cast<size_t>(tile)];
  const auto e = parts.begin() + tile_begin[static_cast<size_t>(tile + 1)];
  const auto it = std::lower_bound(b, e, part, [](const Entry& h, int64_t v) { return h.part < v; });
  return it != e && it->part == part ? it - parts.begin() : -1;
}

std::span<const int64_t> TileHolders::Devices(int64_t tile, int64_t part) const {
  const int64_t k = part < 0 ? -1 : Find(tile, part);
  if (k < 0) return {};
  const Entry& h = parts[static_cast<size_t>(k)];
  return std::span<const int64_t>(ids).subspan(static_cast<size_t>(h.begin), static_cast<size_t>(h.end - h.begin));
}

void RouteTiles(const Layout& source, const Layout& target, bool together, PartRoutes& r) {
  const int64_t S = source.num_tiles(), T = target.num_tiles(), rank = source.rank();
  const int64_t P = source.reduction().parts, Q = target.reduction().parts;
  if (S < 2 || source.shape() != target.shape() || static_cast<int64_t>(target.devices().size()) > kMaxTileRouteDevices ||
      static_cast<double>(P) * static_cast<double>(S) * static_cast<double>(T) > static_cast<double>(int64_t{1} << 22))
    return;
  // The per-dim overlap table: every pair of tile coordinates, each
  // coordinate's intervals walked once per coordinate of the other side.
  double table = 0;
  for (int64_t d = 0; d < rank; ++d) {
    const double a = source.dim(d).tiles, b = target.dim(d).tiles;
    table += a * b + b * static_cast<double>(source.dim(d).cuts.size()) + a * static_cast<double>(target.dim(d).cuts.size());
  }
  if (table > static_cast<double>(int64_t{1} << 24)) return;
  // Per dim, the overlap of source tile coordinate a and target coordinate b
  // at [a * tiles_b + b], and per source coordinate the target coordinates
  // it meets (ascending), with their overlaps.
  std::vector<std::vector<int64_t>> overlap(static_cast<size_t>(rank));
  std::vector<std::vector<std::vector<std::pair<int32_t, int64_t>>>> meets(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    const int32_t a = source.dim(d).tiles, b = target.dim(d).tiles;
    std::vector<std::vector<Interval>> ti(static_cast<size_t>(b));
    for (int32_t y = 0; y < b; ++y) ti[static_cast<size_t>(y)] = target.TileIntervals(d, y);
    meets[static_cast<size_t>(d)].resize(static_cast<size_t>(a));
    for (int32_t x = 0; x < a; ++x) {
      const std::vector<Interval> si = source.TileIntervals(d, x);
      for (int32_t y = 0; y < b; ++y) {
        const int64_t n = OverlapLength(si, ti[static_cast<size_t>(y)]);
        overlap[static_cast<size_t>(d)].push_back(n);
        if (n > 0) meets[static_cast<size_t>(d)][static_cast<size_t>(x)].emplace_back(y, n);
      }
    }
  }
  const std::vector<int64_t>& devs = target.devices();
  const TileHolders th(target);
  // Each choice prices, and books, only the holders of what it routes among
  // the devices of the parts it looks at (the others through EntryLoads):
  // over every choice, each holder of a source tile once per target tile it
  // holds. (The rule before also multiplied by a part's replicas.)
  if (static_cast<double>(P) * static_cast<double>(S) * static_cast<double>(T) +
          static_cast<double>(source.devices().size()) >
      static_cast<double>(int64_t{1} << 25))
    return;
  EntryLoads loads(th, devs.size());
  std::vector<int64_t> covered_entry(th.parts.size(), 0);  // covered, per entry: all its devices alike
  // Per target device, the source part it holds of the source tile being
  // routed, or -1 (set from the tile's holders, cleared after it).
  std::vector<int64_t> part_held(devs.size(), -1);
  std::vector<int64_t> tile_to(static_cast<size_t>(P * S * T), -1);
  // Per target tile, built at its first use: per replica count, the parts
  // holding it that many times ordered by their busiest holder's receipts
  // (parts that hold none of a source tile cost a part's replica count
  // times its elements, so among them the least busy wins), and each
  // part's busiest receipts (indexed like th.parts).
  std::vector<std::map<int64_t, std::set<std::pair<int64_t, int64_t>>>> by_load(static_cast<size_t>(T));
  std::vector<bool> built(static_cast<size_t>(T), false);
  std::vector<int64_t> busiest(th.parts.size(), 0);
  auto build = [&](int64_t t) {
    if (built[static_cast<size_t>(t)]) return;
    built[static_cast<size_t>(t)] = true;
    for (int64_t k = th.tile_begin[static_cast<size_t>(t)]; k < th.tile_begin[static_cast<size_t>(t + 1)]; ++k) {
      const TileHolders::Entry& h = th.parts[static_cast<size_t>(k)];
      const int64_t most = loads.Busiest(k);
      busiest[static_cast<size_t>(k)] = most;
      by_load[static_cast<size_t>(t)][h.end - h.begin].emplace(most, h.part);
    }
  };
  struct Held {
    // A holder of the source tile: the target tile, its part there, its
    // target part and its index in the target's devices.
    int64_t tile, source_part, part, index;
    auto operator<=>(const Held&) const = default;
  };
  // The holders of the source tile within the target tile being routed,
  // by (target part, source part, index). What part p's choice prices one
  // by one in target part q: the holders of p's tile there (every other
  // device receives it whole), or, together, the holders of any part's
  // (they receive every part but their own).
  std::vector<std::tuple<int64_t, int64_t, int64_t>> in_tile;
  auto holders_in = [&](int64_t q, int64_t p) {
    const auto b = std::lower_bound(in_tile.begin(), in_tile.end(),
                                    std::tuple(q, together ? int64_t{-1} : p, int64_t{-1}));
    const auto e = std::lower_bound(b, in_tile.end(), together ? std::tuple(q + 1, int64_t{-1}, int64_t{-1})
                                                               : std::tuple(q, p + 1, int64_t{-1}));
    return std::pair(b, e);
  };
  std::vector<int64_t> except;  // one part's holders' indices, ascending
  std::vector<Held> held;                       // the source tile's holders that hold a target tile
  std::vector<std::pair<int64_t, int64_t>> met;  // (target tile, elements) the source tile overlaps, ascending
  std::vector<int64_t> sparse, chosen;  // chosen: the target parts routed into, this tile pair
  std::vector<bool> is_chosen(static_cast<size_t>(Q), false);
  std::vector<int32_t> coord(static_cast<size_t>(rank));
  std::vector<size_t> at(static_cast<size_t>(rank));
  for (int64_t s = 0; s < S; ++s) {
    const std::span<const int64_t> holders = source.Holders(s);
    const std::vector<int32_t> sc = source.TileCoords(s);
    // The target tiles tile s overlaps, in ascending order (row-major over
    // the per-dim lists), each with the elements they share.
    met.clear();
    bool any = true;
    for (int64_t d = 0; d < rank; ++d) any = any && !meets[static_cast<size_t>(d)][static_cast<size_t>(sc[d])].empty();
    if (any) {
      std::fill(at.begin(), at.end(), 0);
      while (true) {
        int64_t v = 1;
        for (int64_t d = 0; d < rank; ++d) {
          const auto& [y, n] = meets[static_cast<size_t>(d)][static_cast<size_t>(sc[d])][at[static_cast<size_t>(d)]];
          coord[static_cast<size_t>(d)] = y;
          v *= n;
        }
        met.emplace_back(target.TileIndex(coord), v);
        int64_t d = rank - 1;
        for (; d >= 0; --d) {
          if (++at[static_cast<size_t>(d)] < meets[static_cast<size_t>(d)][static_cast<size_t>(sc[d])].size()) break;
          at[static_cast<size_t>(d)] = 0;
        }
        if (d < 0) break;
      }
    }
    held.clear();
    for (int64_t h : holders)
      if (const int64_t t = target.TileOf(h); t >= 0) {
        const int64_t i = PositionIn(devs, h);
        held.push_back({t, source.PartOf(h), target.PartOf(h), i});
        part_held[static_cast<size_t>(i)] = source.PartOf(h);
      }
    std::sort(held.begin(), held.end());
    size_t next_held = 0;  // `met` ascends, so does the tile of the holders looked at
    auto source_part_of = [&](int64_t i) { return part_held[static_cast<size_t>(i)]; };
    for (const auto& [met_tile, met_elements] : met) {
      const int64_t t = met_tile, v = met_elements;  // (lambdas below capture them: no bindings)
      // Elements device i receives of part p's tile s routed to its part.
      auto gets = [&](int64_t i, int64_t p) {
        const int64_t h = source_part_of(i);
        if (!together) return h == p ? int64_t{0} : v;
        return v * (P - (h >= 0 ? 1 : 0));
      };
      // The holders of tile s that hold target tile t, by source part.
      while (next_held < held.size() && held[next_held].tile < t) ++next_held;
      size_t end_held = next_held;
      while (end_held < held.size() && held[end_held].tile == t) ++end_held;
      in_tile.clear();
      for (size_t k = next_held; k < end_held; ++k) in_tile.emplace_back(held[k].part, held[k].source_part, held[k].index);
      std::sort(in_tile.begin(), in_tile.end());
      // What each device receives that holds none of tile s (of any part).
      const int64_t unit = together ? v * P : v;
      chosen.clear();
      size_t part_held = next_held;  // the holders of part p's tile s: from here (source parts ascend)
      for (int64_t p = 0; p < (together ? 1 : P); ++p) {
        // The target parts some of whose devices hold what they would
        // receive (part p's tile s; together, any part's): each priced
        // device by device. Every other part's devices receive `unit` each.
        sparse.clear();
        if (together) {
          for (size_t k = next_held; k < end_held; ++k) sparse.push_back(held[k].part);
        } else {
          while (part_held < end_held && held[part_held].source_part < p) ++part_held;
          for (size_t k = part_held; k < end_held && held[k].source_part == p; ++k) sparse.push_back(held[k].part);
        }
        std::sort(sparse.begin(), sparse.end());
        sparse.erase(std::unique(sparse.begin(), sparse.end()), sparse.end());
        Choice best{INT64_MAX, INT64_MAX, INT64_MAX};
        for (int64_t q : sparse) {
          const int64_t k = th.Find(t, q);
          const TileHolders::Entry& h = th.parts[static_cast<size_t>(k)];
          int64_t cost = 0, worst = 0;
          const auto [b, e] = holders_in(q, p);
          except.clear();
          for (auto it = b; it != e; ++it) {
            const int64_t i = std::get<2>(*it);
            except.push_back(i);
            if (const int64_t n = gets(i, p); n > 0) {
              cost += n;
              worst = std::max(worst, loads.Recv(k, i) + n);
            }
          }
          std::sort(except.begin(), except.end());  // (together: by source part first)
          // The devices holding none of tile s: `unit` each.
          if (const int64_t others = h.end - h.begin - static_cast<int64_t>(except.size()); others > 0) {
            cost += others * unit;
            worst = std::max(worst, loads.BusiestExcept(k, except) + unit);
          }
          best = std::min(best, Choice{cost, worst, q});
        }
        // The other parts cost `unit` a device at least: looked at only
        // where no part above receives nothing (their order is then built).
        if (std::get<0>(best) > 0) {
          build(t);
          for (const auto& [count, parts] : by_load[static_cast<size_t>(t)])
            for (const auto& [most, q] : parts)
              if (!std::binary_search(sparse.begin(), sparse.end(), q)) {
                best = std::min(best, Choice{count * unit, most + unit, q});
                break;
              }
        }
        const int64_t q = std::get<2>(best);
        for (int64_t pp = together ? 0 : p; pp < (together ? P : p + 1); ++pp)
          tile_to[static_cast<size_t>((pp * S + s) * T + t)] = q;
        if (!is_chosen[static_cast<size_t>(q)]) {
          is_chosen[static_cast<size_t>(q)] = true;
          chosen.push_back(q);
        }
        const int64_t k = th.Find(t, q);
        if (std::get<0>(best) == 0) continue;  // its devices receive nothing
        const TileHolders::Entry& h = th.parts[static_cast<size_t>(k)];
        loads.AddToAll(k, unit);
        const auto [b, e] = holders_in(q, p);
        for (auto it = b; it != e; ++it) loads.Correct(k, std::get<2>(*it), gets(std::get<2>(*it), p) - unit);
        const int64_t most = loads.Busiest(k);
        if (!built[static_cast<size_t>(t)]) continue;  // (built from the receipts when first needed)
        auto& parts = by_load[static_cast<size_t>(t)][h.end - h.begin];
        parts.erase({busiest[static_cast<size_t>(k)], q});
        parts.emplace(busiest[static_cast<size_t>(k)] = most, q);
      }
      for (int64_t q : chosen) {
        is_chosen[static_cast<size_t>(q)] = false;
        covered_entry[static_cast<size_t>(th.Find(t, q))] += v;
      }
    }
    for (int64_t h : holders)
      if (target.TileOf(h) >= 0) part_held[static_cast<size_t>(PositionIn(devs, h))] = -1;
  }
  std::vector<int64_t> recv(devs.size(), 0), covered(devs.size(), 0);
  for (size_t k = 0; k < th.parts.size(); ++k) {
    const TileHolders::Entry& h = th.parts[k];
    for (int64_t j = h.begin; j < h.end; ++j) {
      const int64_t i = th.indices[static_cast<size_t>(j)];
      recv[static_cast<size_t>(i)] = loads.Recv(static_cast<int64_t>(k), i);
      covered[static_cast<size_t>(i)] = covered_entry[k];
    }
  }
  // Against parts routed whole (r.to): each device of a part's target part
  // receives its tile but what it holds of that part. For a source with no
  // reduction every target part is a candidate, and the best replaces
  // r.to[0] where it beats both.
  int64_t tiles_max = 0, tiles_total = 0;
  for (int64_t n : recv) {
    tiles_max = std::max(tiles_max, n);
    tiles_total += n;
  }
  // With parts: how many are routed into each target part, and into all.
  std::vector<int64_t> routed_into(static_cast<size_t>(Q), 0);
  int64_t routed_everywhere = 0;
  if (P > 1)
    for (int64_t q : r.to) (q < 0 ? routed_everywhere : routed_into[static_cast<size_t>(q)]) += 1;
  std::vector<int64_t> whole_max(static_cast<size_t>(Q), 0), whole_total(static_cast<size_t>(Q), 0);
  for (size_t i = 0; i < recv.size(); ++i) {
    const int64_t dev = devs[i], t = target.TileOf(dev);
    if (t < 0) continue;
    const int64_t q = target.PartOf(dev);
    int64_t kept = 0;
    const int64_t s = source.TileOf(dev);
    if (s >= 0) {
      kept = 1;
      const std::vector<int32_t> sc = source.TileCoords(s), tc = target.TileCoords(t);
      for (int64_t d = 0; d < rank; ++d)
        kept *= overlap[static_cast<size_t>(d)][static_cast<size_t>(sc[d] * target.dim(d).tiles + tc[d])];
    }
    // P == 1: the device's cost were the source routed into its part; else
    // its cost under r.to, booked at slot 0.
    int64_t got = 0;
    if (P == 1) {
      got = target.TileElements(t) - kept;
    } else {
      const int64_t own = s >= 0 ? source.PartOf(dev) : -1;  // the part it holds
      got = (routed_into[static_cast<size_t>(q)] + routed_everywhere) * target.TileElements(t);
      if (own >= 0 && (r.to[static_cast<size_t>(own)] < 0 || r.to[static_cast<size_t>(own)] == q)) got -= kept;
    }
    const size_t slot = P == 1 ? static_cast<size_t>(q) : 0;
    whole_max[slot] = std::max(whole_max[slot], got);
    whole_total[slot] += got;
  }
  auto whole = [&](int64_t q) { return std::pair(whole_max[static_cast<size_t>(q)], whole_total[static_cast<size_t>(q)]); };
  int64_t best = P == 1 ? r.to[0] : 0;
  if (P == 1)
    for (int64_t q = 0; q < Q; ++q)
      if (whole(q) < whole(best)) best = q;
  if (std::pair(tiles_max, tiles_total) >= whole(best)) {
    if (P == 1) r.to[0] = best;
    return;
  }
  std::fill(r.to.begin(), r.to.end(), -1);
  r.tile_to = std::make_shared<const std::vector<int64_t>>(std::move(tile_to));
  r.tiles = S;
  r.target_tiles = T;
  for (size_t i = 0; i < covered.size(); ++i) {
    const int64_t dev = devs[i], t = target.TileOf(dev);
    if (t >= 0 && covered[i] < target.TileElements(t)) r.partly_filled.push_back(dev);
  }
}

}  // namespace reshard
