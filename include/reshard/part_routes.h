// PartRoutes: where a step from or into partial sums (layout.h) sends each
// part of its source, part by part or tile by tile; Exchange::RouteParts
// (exchange.h, implemented in part_routes.cc) decides them, and every
// lowering of a reducing step follows them.
#ifndef RESHARD_PART_ROUTES_H_
#define RESHARD_PART_ROUTES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "reshard/layout.h"

namespace reshard {

// Where a reducing step sends each part of its source (Exchange::RouteParts).
// Into a target with no reduction every part goes to every device, which
// combines them all. Into a partial target (ops as in layout.h), each part
// (or, tile by tile below, each tile of each part within each target tile)
// joins one part of the target, chosen among the target parts whose
// devices hold it most (ties to the target part with fewest source parts
// so far); target parts that get none hold the identity (0 for sum and
// avg, the lowest value for max, the highest for min). The target's reduction of its parts is then
// the source's reduction of its parts:
//   same op, sum, max or min: each target part reduces the source parts
//     routed to it;
//   avg into avg with as many parts: parts matched one to one (a receiver
//     copies its one part: the two averages divide by the same count);
//   a source with no reduction, or the same op, into a sum, max or min
//     target: tile by tile (below), else each part into one target part;
//   other ops into a sum, max or min target: every part of a tile into one
//     target part (tile by tile, below), else every part into one target
//     part, which holds the whole reduction;
//   into an avg target otherwise: as into a sum target, each target part
//     multiplying what it combined by the target's part count (scale);
//     in f16, whose range Q times a share could leave, every part into every
//     target part.
// Tile by tile: each tile of each source part joins, in each target tile
// it overlaps (parts are numbered per tile, so a part number may stand for
// other devices in another tile), the target part whose
// devices receive fewest of its elements (devices holding that tile of that
// part keep it; then the target part whose busiest device has received
// least with it, then the lowest), so an element stays where a target device
// already holds it. Where ops differ, the parts of a tile join one target
// part together (it must hold the whole reduction there), chosen the same
// way. Each target device combines, element by element, the parts whose
// tiles are routed to its part, and holds the identity where none is.
// Taken only where it receives fewer bytes into the busiest device (then in
// all) than routing parts whole (for a source with no reduction, the whole
// source into the best one part), and where the source has several tiles
// and parts times source tiles times (target tiles and devices) is at most
// 2^22, and the pairs of tile coordinates times cells, summed over dims, at
// most 2^24 (the routing's cost).
struct PartRoutes {
  // Per source part: the target part it joins, or -1: every target device
  // (with tile routes: -1, each tile routed on its own).
  std::vector<int64_t> to;
  // Tile by tile (above): per part and tile of the source and tile of the
  // target, at [(part * tiles + tile) * target_tiles + target_tile], the
  // target part it joins there (-1 where the two tiles do not overlap);
  // shared by copies. Null: parts are routed whole.
  std::shared_ptr<const std::vector<int64_t>> tile_to = nullptr;
  int64_t tiles = 0, target_tiles = 0;  // the source's and the target's tiles, with tile routes
  // With tile routes, the target devices holding the identity somewhere
  // (their part's tiles do not cover their own), ascending.
  std::vector<int64_t> partly_filled = {};
  // How a receiver combines the parts it gets, in part order; avg sums them
  // and divides by the source's part count (only where it gets them all).
  ReduceOp combine = ReduceOp::kSum;
  // What a receiver multiplies its combined value by, last: an avg target
  // of Q parts not routed one to one from an avg of Q (nor of f16) holds Q
  // times its share, so that its average (the sum of its parts over Q) is
  // the source's value; 1 elsewhere. Integers wrap, as avg's own sum does.
  int64_t scale = 1;
  // The op whose identity fills target parts no part is routed to (a partial
  // target's op); unused where every target device receives.
  ReduceOp fill = ReduceOp::kSum;
  // The source parts routed to a device of target part `part` (-1: a target
  // with no reduction), ascending.
  // With tile routes: those with some tile routed to `part`.
  std::vector<int64_t> PartsInto(int64_t part) const;
  // The source parts routed to a device of target part `part` holding target
  // tile `target_tile`, at the element of global row-major index `element`
  // of `source` (the layout the routes were made from): PartsInto(part), or
  // with tile routes the parts whose tile of the element is routed to `part`
  // in that target tile (none: the identity).
  std::vector<int64_t> PartsAt(const Layout& source, int64_t part, int64_t target_tile, int64_t element) const;
  // Whether `device` of the partial `target` holds the identity somewhere:
  // it keeps a tile and no part is routed to its part, or with tile routes
  // its part's tiles do not cover its own. False for a target with no
  // reduction.
  bool Fills(const Layout& target, int64_t device) const;
  // With tile routes: the target part that tile `tile` of source part
  // `part` joins in target tile `target_tile` (-1: they do not overlap).
  int64_t TileTo(int64_t part, int64_t tile, int64_t target_tile) const {
    return (*tile_to)[static_cast<size_t>((part * tiles + tile) * target_tiles + target_tile)];
  }
  // With tile routes: whether tile `tile` of source part `part` is routed to
  // the part of the partial `target` that `receiver` belongs to, in the
  // receiver's tile (the filter of the part's routed exchange).
  bool RoutesTileTo(const Layout& target, int64_t part, int64_t tile, int64_t receiver) const;
  // With tile routes: whether some part's tile `tile` is routed to the part
  // of `target` that `receiver` belongs to, in the receiver's tile (the
  // complement is where the identity goes).
  bool ReachesTile(const Layout& target, int64_t tile, int64_t receiver) const;
  // With tile routes: whether `part` is the lowest source part whose tile
  // `tile` joins target part `target_part` in target tile `target_tile`: a
  // receiver's copies of it write those elements, later parts' combine with
  // them (RunReducingCopies).
  bool FirstInto(int64_t part, int64_t tile, int64_t target_tile, int64_t target_part) const;
  // Whether the routes keep every part in itself: part p (each of its tiles,
  // with tile routes) into target part p, nothing scaled.
  bool KeepsParts() const;
};

}  // namespace reshard

#endif  // RESHARD_PART_ROUTES_H_
