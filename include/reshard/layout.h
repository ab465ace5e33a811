// Layout: which device holds which elements of an N-d array, and where they
// sit in each device's local buffer.
//
// The model is a grid (after COSTA's grid2grid). Each tensor dimension d is cut
// at sorted split points into cells, and every cell is given a tile coordinate
// along d. A tile is one coordinate per dimension; it holds the cross product
// of its cells, so a tile of a tiled sharding is one box and a tile of a
// block-cyclic layout is many blocks. Each device holds at most one tile; a
// tile may be held by several devices (replication). A device's local buffer
// is its tile's cells concatenated per dimension in global order, row-major.
//
// Every notation (HLO, JAX, Shardy, DTensor, block-cyclic) converts into this
// one form, so planners see a single representation. Two layouts are == when
// every device holds the same elements (the device-to-box map), whatever the
// notation they came from.
//
// A layout may carry a pending reduction (partial sums: DTensor Partial(),
// JAX and Shardy unreduced axes). Then each device holding a tile holds one
// of `parts` partial values of it, its part; devices with the same tile and
// part hold equal values (replicas), and the array is `op` over the parts:
// sum, avg (the sum divided by parts), max or min. Every tile that holds
// elements is held in every part. Parts are numbered per tile in the order
// of their lowest holder (Create renumbers), so equal layouts number parts
// alike; == compares the op and each device's part too. A reduction of one
// part, or of an empty array, is none. Immutable value;
// thread-safe.
#ifndef RESHARD_LAYOUT_H_
#define RESHARD_LAYOUT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/box.h"
#include "reshard/dtype.h"
#include "reshard/status.h"

namespace reshard {

inline constexpr int kMaxRank = 32;

// One tensor dimension of a grid: cells and the tile each cell belongs to.
struct DimGrid {
  std::vector<int64_t> cuts;       // cells + 1 entries: 0 = cuts[0] <= ... <= cuts.back() = extent
  std::vector<int32_t> cell_tile;  // per cell, its tile coordinate in [0, tiles)
  int32_t tiles = 1;

  // The XLA rule for k shards of n: c = ceil(n/k), shard i is [min(i*c,n), min((i+1)*c,n)).
  static DimGrid Ceil(int64_t n, int64_t k);
  // Explicit split points, one cell per tile: cuts {0,3,6,9,10} gives four tiles.
  static DimGrid FromCuts(std::vector<int64_t> cuts);
  friend bool operator==(const DimGrid&, const DimGrid&) = default;
};

// A device, the linear (row-major) index of the tile it holds (-1 for none),
// and which part of a pending reduction it holds (read only when partial).
struct DeviceTile {
  int64_t device = 0;
  int64_t tile = -1;
  int64_t part = 0;
};

// The position of `id` in `ascending` (sorted, distinct device ids, as
// Layout::devices() lists them), or -1 where it is absent. O(1) where the
// list is a range of ids (every mesh's layouts over iota devices), else a
// binary search. The one lookup from a device id to its index.
int64_t PositionIn(std::span<const int64_t> ascending, int64_t id);

// How partial values combine into the array.
enum class ReduceOp { kSum, kAvg, kMax, kMin };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", "max", "min"
// Reads ReduceOpName's names; fails on anything else.
Result<ReduceOp> ParseReduceOp(std::string_view name);
// Whether partial values of `dtype` can be reduced by `op` (planned,
// emitted and executed): NotSupported naming the pair for pred (no sum) and
// for complex values under anything but sum (no order; avg is not emitted).
Status CheckReducible(DType dtype, ReduceOp op);

// A pending reduction over `parts` partial values; parts == 1 is none.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  int64_t parts = 1;
  friend bool operator==(const Reduction&, const Reduction&) = default;
};

class Layout {
 public:
  // Validates the grid: cuts sorted and spanning each extent, cell tiles in
  // range, devices distinct and non-negative, tile indices in range, every
  // non-empty tile held by at least one device, sizes within int64.
  // Example: shape {16,16,16}, dims {Ceil(16,2), Ceil(16,1), Ceil(16,4)}, and
  // device 2x+y -> tile (y, 0, x) is the canonical source P('y', None, 'x').
  // With a reduction of parts >= 2, also: every DeviceTile::part of a
  // device holding a tile is in [0, parts), and every tile holding elements
  // is held in every part (avg needs no more: it divides by parts).
  static Result<Layout> Create(std::vector<int64_t> shape, DType dtype, std::vector<DimGrid> dims,
                               std::vector<DeviceTile> placement, Reduction reduction = {});
  // Create for devices 0..n-1, device i holding tiles[i] (-1: none), n =
  // tiles.size(), no pending reduction: the same layout without a placement
  // list (24 bytes a device at once, where a mesh's layouts reach 2^24
  // devices).
  static Result<Layout> CreateOnIota(std::vector<int64_t> shape, DType dtype, std::vector<DimGrid> dims,
                                     std::vector<int64_t> tiles);

  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t element_bytes() const { return ByteSize(dtype_); }
  int64_t num_elements() const { return num_elements_; }
  // The pending reduction; parts() == 1 when there is none.
  const Reduction& reduction() const { return reduction_; }
  bool partial() const { return reduction_.parts > 1; }
  // The part `device` holds: 0 when the layout is not partial, or the device
  // holds no tile or an empty one.
  int64_t PartOf(int64_t device) const;
  // The same grid and placement with no pending reduction (the layout each
  // part's replicas form alone, ignoring which part they hold).
  Layout WithoutReduction() const;
  // The devices holding part `part` alone, as a layout with no reduction:
  // the same grid and devices, every device of another part holding
  // nothing. What a reducing step sends of that part (device_program.h).
  // REQUIRES: 0 <= part < reduction().parts.
  Layout PartLayout(int64_t part) const;
  // The devices of each part, ascending, element p for part p (a device
  // holding no tile stands in part 0): one pass over the devices.
  std::vector<std::vector<int64_t>> DevicesByPart() const;
  // PartLayout(part) over `devices` alone (some of devices(), ascending):
  // O(devices.size()), where PartLayout is O(devices()) whatever the part,
  // so every part on its own devices (DevicesByPart) is linear in devices.
  Result<Layout> PartLayoutOn(int64_t part, std::span<const int64_t> devices) const;
  const DimGrid& dim(int64_t d) const { return rep_->dims[d].grid(); }

  // Devices of the layout (holding data or not), ascending.
  const std::vector<int64_t>& devices() const { return rep_->ids(); }
  // Whether `other` is over the same devices: O(1) where both hold one
  // shared list (layouts over ids 0..n-1), else the lists compared.
  bool SameDevices(const Layout& other) const {
    return rep_->device_list == other.rep_->device_list || devices() == other.devices();
  }
  // Tile held by `device`, or -1 (holds nothing, or not in the layout).
  int64_t TileOf(int64_t device) const;

  int64_t num_tiles() const { return num_tiles_; }
  std::vector<int32_t> TileCoords(int64_t tile) const;
  int64_t TileIndex(std::span<const int32_t> coords) const;
  // Devices holding `tile`, ascending.
  std::span<const int64_t> Holders(int64_t tile) const;
  // Whether cell k is tile k along dim d (one cell per tile, in order: every
  // mesh tiling), so that TileCells(d, c) is {c}. O(1).
  bool CellsAreTiles(int64_t d) const { return rep_->dims[static_cast<size_t>(d)].tile_cell_begin.empty(); }
  // Cells of `tile` along dim d, ascending.
  std::span<const int32_t> TileCells(int64_t d, int32_t tile_coord) const;
  // Offset of cell k inside its tile's local extent along dim d.
  int64_t CellOffset(int64_t d, int64_t k) const {
    const std::vector<int64_t>& offsets = rep_->dims[d].cell_offset;
    return offsets.empty() ? 0 : offsets[k];
  }
  int64_t TileElements(int64_t tile) const;
  // The tile's index ranges along dim d, adjacent cells merged.
  std::vector<Interval> TileIntervals(int64_t d, int32_t tile_coord) const;

  // Local buffer shape of `device` (its tile's extents); empty rank-sized zeros if none.
  std::vector<int64_t> LocalShape(int64_t device) const;
  int64_t LocalBytes(int64_t device) const;
  // The boxes `device` holds, in local-buffer order (row-major over per-dim intervals).
  std::vector<Box> DeviceBoxes(int64_t device) const;
  // Where each of DeviceBoxes(device) starts in the local buffer (one index per dim).
  std::vector<std::vector<int64_t>> DeviceBoxOrigins(int64_t device) const;
  // DeviceBoxes(device).size(), without listing them.
  int64_t DeviceBoxCount(int64_t device) const;

  friend bool operator==(const Layout& a, const Layout& b);
  size_t Hash() const;

 private:
  struct Dim {
    // Shared by every layout with an equal grid along a dim (SharedGrid: a
    // plan's layouts over one mesh often cut a dim alike; 12 bytes a cell).
    std::shared_ptr<const DimGrid> grid_ptr;
    const DimGrid& grid() const { return *grid_ptr; }
    std::vector<int64_t> cell_offset;      // per cell, offset within its tile; empty where all are 0
    std::vector<int64_t> tile_extent;      // per tile coordinate; empty where cell k is tile k (TileExtent)
    std::vector<int32_t> tile_cell_begin;  // CSR over tile coordinates; both empty where cell k is tile k
    std::vector<int32_t> tile_cells;
  };
  Layout() = default;

  std::vector<int64_t> shape_;
  DType dtype_ = DType::kF32;
  int64_t num_elements_ = 1;
  int64_t num_tiles_ = 1;
  Reduction reduction_;
  // The grid and placement, O(devices + cells): shared by copies (a Layout
  // is immutable), so a copy held by a plan step or a search costs nothing.
  struct Rep {
    std::vector<Dim> dims;
    // Ascending; 0..n-1 shared by every layout over those ids (SharedIota).
    std::shared_ptr<const std::vector<int64_t>> device_list = std::make_shared<const std::vector<int64_t>>();
    const std::vector<int64_t>& ids() const { return *device_list; }
    // Each device's tile: none stored where device i holds tile i (kIndex)
    // or every device holds `every_tile` (kEvery: a replicated array);
    // else listed (kListed), parallel to the devices, in device_tile32
    // where every tile index fits 32 bits, else in device_tile.
    enum class Tiles : uint8_t { kListed, kIndex, kEvery } tiles = Tiles::kListed;
    int64_t every_tile = 0;
    std::vector<int64_t> device_tile;
    std::vector<int32_t> device_tile32;
    // Each tile's holders, for kListed only (Holders reads the others'
    // from the device list): a CSR over tiles, or, where every tile has one
    // holder, holders[t] alone with holder_begin empty.
    std::vector<int64_t> holder_begin;
    std::vector<int64_t> holders;
    std::vector<int64_t> device_part;  // parallel to devices; empty unless partial
    // What each device holds, and each device's part, hashed once each
    // (PlacementHash): N ranks of one process hash the same layouts, each
    // O(devices). The parts apart: a layout without its reduction shares
    // its partial original's Rep (WithoutReduction) and must hash as one
    // made without parts.
    mutable std::atomic<uint64_t> placement_hash{0}, parts_hash{0};
    mutable std::atomic<bool> placement_hashed{false};
  };
  // The hashes of the devices and what each holds, and of each device's
  // part (Hash's O(devices) halves), computed once per Rep.
  std::pair<uint64_t, uint64_t> PlacementHash() const;
  // The tile of devices()[i] (-1: none), in any of Rep's forms.
  int64_t TileAtIndex(size_t i) const;
  // Create's steps: the grid checked and stored (rep_out: the new layout's
  // Rep, for the steps below); each device's tile (parallel to the device
  // list already in `rep`), in the most compact form that holds it, with
  // the holders and the check that every tile with elements is held.
  static Result<Layout> CreateGrid(std::vector<int64_t> shape, DType dtype, std::vector<DimGrid> dims,
                                   std::shared_ptr<Rep>& rep_out);
  Status PlaceTiles(Rep& rep, std::vector<int64_t> tiles, bool partial) const;
  // Create's step for partial layouts: checks and renumbers the parts into rep.
  Status NumberParts(const std::vector<DeviceTile>& placement, Rep& rep) const;
  std::shared_ptr<const Rep> rep_ = std::make_shared<const Rep>();
  // Tile coordinate c's extent along dim d (inline: read once a device and
  // dim by every O(devices) pass).
  int64_t TileExtent(int64_t d, int64_t c) const {
    const Dim& dim = rep_->dims[static_cast<size_t>(d)];
    return dim.tile_extent.empty() ? dim.grid().cuts[static_cast<size_t>(c) + 1] - dim.grid().cuts[static_cast<size_t>(c)]
                                   : dim.tile_extent[static_cast<size_t>(c)];
  }
};

// Both layouts' devices, ascending (their union).
std::vector<int64_t> DevicesOfBoth(const Layout& a, const Layout& b);

std::ostream& operator<<(std::ostream& os, const Layout& l);

}  // namespace reshard

#endif  // RESHARD_LAYOUT_H_
