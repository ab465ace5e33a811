// Tile routes into a partial target (PartRoutes, part_routes.h): each tile of
// each source part, within each target tile it overlaps, joins one target
// part, chosen tile pair by tile pair so that a target part's devices
// receive least (the part holding most of it already, then the least busy).
// Exchange::RouteParts takes them where they receive less than parts routed
// whole. Internal to the planner.
#ifndef RESHARD_SRC_PLAN_TILE_ROUTES_H_
#define RESHARD_SRC_PLAN_TILE_ROUTES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "reshard/exchange.h"
#include "reshard/layout.h"

namespace reshard {

// Fills r.tile_to, r.tiles, r.target_tiles and r.partly_filled and sets r.to
// to -1 where tile routes receive less than the routes already in r.to (for
// a source with no reduction, than the whole source into any one part);
// else leaves r.to (a source with no reduction: r.to[0] becomes the part
// receiving least, r.to[0] where it ties). `together`: every part of a tile
// joins one target part. Source tile pairs are taken in order (source tile,
// then target tile), and each choice is the target part whose devices would
// receive fewest elements, then whose busiest device would hold least
// after, then the lowest.
//
// Cost: linear in the routes it writes (parts x source tiles x target
// tiles, at most 2^22 of them) and, give or take a log, in devices (at most
// kMaxTileRouteDevices target devices) and in parts times source devices
// (with the routes, at most 2^25); past any of these, no tile routes. Each
// choice looks only at the target parts that hold some of what they would
// receive (their devices' elements are free), and of those only at the
// devices holding some of it, one by one: every other device of the part
// receives the whole overlap, booked on the part at once (a base per target
// tile and part, plus per device what it was spared, the busiest kept in
// an ordered set). Of the other parts, the least busy of each replica count
// wins (an ordered set per target tile). So a part that holds a tile on
// many devices, each holding a different source tile (target P(None,
// unreduced={'x'}) on x=2,y=N from P('y')), costs a choice no walk over
// them (before, every choice walked them, and a cap stopped it between N =
// 2,048 and 4,096). About 0.2 s a call at 2^18 target devices, where it was
// not worth it on the pairs measured, hence the device cap.
inline constexpr int64_t kMaxTileRouteDevices = int64_t{1} << 16;

// A target's devices grouped by tile, then part, ascending device within a
// part (each device holds one tile; every part holds every tile,
// layout.h): what tile routes price tile by tile, and the receivers a
// tile-routed exchange lists (Exchange::CreateReducing). A sort of the
// devices.
struct TileHolders {
  struct Entry {
    int64_t part;
    int64_t begin, end;  // its devices: [begin, end) of `ids` and `indices`
  };
  std::vector<int64_t> ids;         // device ids, by (tile, part, id)
  std::vector<int64_t> indices;     // the same devices' indices in target.devices()
  std::vector<Entry> parts;         // per tile, ascending part
  std::vector<int64_t> tile_begin;  // tile t's entries of `parts`: [tile_begin[t], tile_begin[t + 1])

  explicit TileHolders(const Layout& target);
  // The entry of `part` in `tile`, or -1 where it holds none of it.
  int64_t Find(int64_t tile, int64_t part) const;
  // The devices of `part` holding `tile`, ascending (none for part < 0).
  std::span<const int64_t> Devices(int64_t tile, int64_t part) const;
};
void RouteTiles(const Layout& source, const Layout& target, bool together, PartRoutes& r);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_TILE_ROUTES_H_
