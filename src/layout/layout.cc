#include "reshard/layout.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>

#include "layout/checked_math.h"

namespace reshard {

DimGrid DimGrid::Ceil(int64_t n, int64_t k) {
  DimGrid g;
  const int64_t c = k > 0 ? CeilDiv(n, k) : n;
  g.cuts.resize(k + 1);
  for (int64_t i = 0; i <= k; ++i) g.cuts[i] = MulClamp(i, c, n);
  g.cell_tile.resize(k);
  for (int64_t i = 0; i < k; ++i) g.cell_tile[i] = static_cast<int32_t>(i);
  g.tiles = static_cast<int32_t>(k);
  return g;
}

DimGrid DimGrid::FromCuts(std::vector<int64_t> cuts) {
  DimGrid g;
  const int64_t k = static_cast<int64_t>(cuts.size()) - 1;
  g.cuts = std::move(cuts);
  g.cell_tile.resize(k);
  for (int64_t i = 0; i < k; ++i) g.cell_tile[i] = static_cast<int32_t>(i);
  g.tiles = static_cast<int32_t>(k);
  return g;
}

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

Result<ReduceOp> ParseReduceOp(std::string_view name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
    if (name == ReduceOpName(op)) return op;
  return Status::InvalidArgument("unknown reduction '" + std::string(name) + "' (expected sum, avg, max or min)");
}

namespace {

// The last N values of a kind that layouts hold, remembered while some
// layout holds them, so that an equal one is shared, not made again.
template <typename T, size_t N>
class RecentValues {
 public:
  // A remembered value `matches` accepts, else make()'s, remembered.
  template <typename Matches, typename Make>
  std::shared_ptr<const T> Get(Matches matches, Make make) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::weak_ptr<const T>& r : recent_)
      if (std::shared_ptr<const T> held = r.lock(); held && matches(*held)) return held;
    auto made = std::make_shared<const T>(make());
    recent_[next_++ % N] = made;
    return made;
  }

 private:
  std::mutex mu_;
  std::weak_ptr<const T> recent_[N];
  size_t next_ = 0;
};

// The list 0..n-1, shared by every layout over those ids (a plan's source,
// target and step layouts over one mesh hold one copy, 8 bytes a device,
// where each held its own).
std::shared_ptr<const std::vector<int64_t>> SharedIota(int64_t n) {
  static RecentValues<std::vector<int64_t>, 1> iotas;
  return iotas.Get([n](const std::vector<int64_t>& ids) { return static_cast<int64_t>(ids.size()) == n; },
                   [n] {
                     std::vector<int64_t> ids(static_cast<size_t>(n));
                     for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
                     return ids;
                   });
}

// A grid equal to one a live layout holds (of the last 4 made) is that
// layout's: a plan's layouts over one mesh often cut a dim alike.
std::shared_ptr<const DimGrid> SharedGrid(DimGrid grid) {
  static RecentValues<DimGrid, 4> grids;
  return grids.Get([&grid](const DimGrid& g) { return g == grid; }, [&grid] { return std::move(grid); });
}

}  // namespace

Result<Layout> Layout::CreateGrid(std::vector<int64_t> shape, DType dtype, std::vector<DimGrid> dims,
                                  std::shared_ptr<Rep>& rep_out) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    return Status::InvalidArgument("rank " + std::to_string(shape.size()) + " exceeds the maximum " + std::to_string(kMaxRank));
  if (dims.size() != shape.size())
    return Status::InvalidArgument("layout has " + std::to_string(dims.size()) + " dimensions but the shape has rank " +
                                   std::to_string(shape.size()));
  Layout l;
  auto rep = std::make_shared<Rep>();  // l's, filled here and by the caller
  l.rep_ = rep;
  rep_out = rep;
  l.dtype_ = dtype;
  int64_t bytes = ByteSize(dtype);
  for (size_t d = 0; d < shape.size(); ++d) {
    const std::string where = "dimension " + std::to_string(d);
    if (shape[d] < 0) return Status::InvalidArgument(where + " has negative extent " + std::to_string(shape[d]));
    if (!CheckedMul(l.num_elements_, shape[d], &l.num_elements_) || !CheckedMul(bytes, shape[d], &bytes))
      return Status::InvalidArgument("the array's byte size overflows int64 at " + where);
    const DimGrid& g = dims[d];
    if (g.cuts.size() < 2 || g.cuts.front() != 0 || g.cuts.back() != shape[d])
      return Status::InvalidArgument(where + ": split points must start at 0 and end at the extent " + std::to_string(shape[d]));
    if (g.cell_tile.size() != g.cuts.size() - 1)
      return Status::InvalidArgument(where + ": one tile coordinate is needed per cell");
    if (g.tiles < 1) return Status::InvalidArgument(where + ": needs at least one tile");
    for (size_t k = 0; k + 1 < g.cuts.size(); ++k) {
      if (g.cuts[k + 1] < g.cuts[k]) return Status::InvalidArgument(where + ": split points are not sorted");
      if (g.cell_tile[k] < 0 || g.cell_tile[k] >= g.tiles) return Status::InvalidArgument(where + ": cell tile out of range");
    }
    if (!CheckedMul(l.num_tiles_, g.tiles, &l.num_tiles_)) return Status::InvalidArgument("tile count overflows int64");
  }
  l.shape_ = std::move(shape);
  rep->dims.resize(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    Dim& dim = rep->dims[d];
    dim.grid_ptr = SharedGrid(std::move(dims[d]));
    const DimGrid& g = dim.grid();
    const size_t cells = g.cell_tile.size();
    std::vector<int64_t> extent(g.tiles, 0);
    std::vector<int32_t> count(g.tiles, 0);
    bool shared = false;  // some tile has several cells along d
    for (size_t k = 0; k < cells; ++k) shared = ++count[g.cell_tile[k]] > 1 || shared;
    // Where every tile has one cell at most, every offset is 0 and none is
    // stored (CellOffset): 8 bytes a cell, 2^24 cells in a 1-D array over
    // 2^24 devices.
    if (shared) dim.cell_offset.resize(cells);
    for (size_t k = 0; k < cells; ++k) {
      if (shared) dim.cell_offset[k] = extent[g.cell_tile[k]];
      extent[g.cell_tile[k]] += g.cuts[k + 1] - g.cuts[k];
    }
    // Where cell k is tile k (one cell per tile, in order), tile c's cells
    // are {c} and its extent is cell c's: TileCells and TileExtent read
    // them from the grid itself, and nothing is stored (16 bytes a cell).
    bool identity = static_cast<int64_t>(cells) == g.tiles;
    for (size_t k = 0; k < cells && identity; ++k) identity = g.cell_tile[k] == static_cast<int32_t>(k);
    if (identity) continue;
    dim.tile_extent = std::move(extent);
    dim.tile_cell_begin.assign(g.tiles + 1, 0);
    for (int32_t t = 0; t < g.tiles; ++t) dim.tile_cell_begin[t + 1] = dim.tile_cell_begin[t] + count[t];
    dim.tile_cells.resize(cells);
    std::vector<int32_t> fill(dim.tile_cell_begin.begin(), dim.tile_cell_begin.end() - 1);
    for (size_t k = 0; k < cells; ++k) dim.tile_cells[fill[g.cell_tile[k]]++] = static_cast<int32_t>(k);
  }

  return l;
}

Result<Layout> Layout::Create(std::vector<int64_t> shape, DType dtype, std::vector<DimGrid> dims,
                              std::vector<DeviceTile> placement, Reduction reduction) {
  if (reduction.parts < 1)
    return Status::InvalidArgument("a pending reduction needs at least one part (" + std::to_string(reduction.parts) + " given)");
  std::shared_ptr<Rep> rep;  // l's, placed here
  RESHARD_ASSIGN_OR_RETURN(Layout l, CreateGrid(std::move(shape), dtype, std::move(dims), rep));
  // Mesh tilings list devices in mesh order: ascending for iota meshes,
  // descending for reversed ones. Sort only what is neither (O(n) to check).
  auto by_device = [](const DeviceTile& a, const DeviceTile& b) { return a.device < b.device; };
  if (std::is_sorted(placement.rbegin(), placement.rend(), by_device)) std::reverse(placement.begin(), placement.end());
  else if (!std::is_sorted(placement.begin(), placement.end(), by_device)) std::sort(placement.begin(), placement.end(), by_device);
  for (size_t i = 0; i < placement.size(); ++i) {
    const DeviceTile& p = placement[i];
    if (p.device < 0) return Status::InvalidArgument("device id " + std::to_string(p.device) + " is negative");
    if (i > 0 && placement[i - 1].device == p.device)
      return Status::InvalidArgument("device " + std::to_string(p.device) + " is placed twice");
    if (p.tile < -1 || p.tile >= l.num_tiles_)
      return Status::InvalidArgument("device " + std::to_string(p.device) + " holds a tile out of range");
  }
  const int64_t n = static_cast<int64_t>(placement.size());
  if (n > 0 && placement.front().device == 0 && placement.back().device == n - 1) {
    rep->device_list = SharedIota(n);  // ascending and distinct from 0 to n-1
  } else {
    std::vector<int64_t> ids(placement.size());
    for (size_t i = 0; i < placement.size(); ++i) ids[i] = placement[i].device;
    rep->device_list = std::make_shared<const std::vector<int64_t>>(std::move(ids));
  }
  const bool partial = reduction.parts > 1 && l.num_elements_ > 0;  // an empty array has nothing to reduce
  std::vector<int64_t> tiles(placement.size());
  for (size_t i = 0; i < placement.size(); ++i) tiles[i] = placement[i].tile;
  // Only partial layouts read the placement again (NumberParts).
  if (!partial) std::vector<DeviceTile>().swap(placement);
  RESHARD_RETURN_IF_ERROR(l.PlaceTiles(*rep, std::move(tiles), partial));
  if (partial) {
    l.reduction_ = reduction;
    RESHARD_RETURN_IF_ERROR(l.NumberParts(placement, *rep));
  }
  return l;
}

Result<Layout> Layout::CreateOnIota(std::vector<int64_t> shape, DType dtype, std::vector<DimGrid> dims,
                                    std::vector<int64_t> tiles) {
  std::shared_ptr<Rep> rep;  // l's, placed here
  RESHARD_ASSIGN_OR_RETURN(Layout l, CreateGrid(std::move(shape), dtype, std::move(dims), rep));
  for (size_t i = 0; i < tiles.size(); ++i)
    if (tiles[i] < -1 || tiles[i] >= l.num_tiles_)
      return Status::InvalidArgument("device " + std::to_string(i) + " holds a tile out of range");
  if (!tiles.empty()) rep->device_list = SharedIota(static_cast<int64_t>(tiles.size()));
  RESHARD_RETURN_IF_ERROR(l.PlaceTiles(*rep, std::move(tiles), /*partial=*/false));
  return l;
}

Status Layout::PlaceTiles(Rep& rep_out, std::vector<int64_t> tiles, bool partial) const {
  Rep* rep = &rep_out;
  // Where device i (in ascending order) holds tile i, one device a tile,
  // tile t's holder is devices[t]; where every device holds one tile, its
  // holders are the devices. Neither stores a tile list nor holders (24
  // bytes a device), and in both every tile with elements is held, so the
  // check below has nothing to find. Partial layouts keep the lists.
  if (!partial && !tiles.empty()) {
    bool index = num_tiles_ == static_cast<int64_t>(tiles.size()), every = true;
    const int64_t first = tiles[0];
    for (size_t i = 0; i < tiles.size() && (index || every); ++i) {
      index = index && tiles[i] == static_cast<int64_t>(i);
      every = every && tiles[i] == first;
    }
    bool covered = true;  // kEvery: the other tiles hold no elements
    if (every && !index && first >= 0)
      for (int64_t t = 0; t < num_tiles_ && covered; ++t) covered = t == first || TileElements(t) == 0;
    if (index || (every && first >= 0 && covered)) {
      rep->tiles = index ? Rep::Tiles::kIndex : Rep::Tiles::kEvery;
      rep->every_tile = first;
      return Status::Ok();
    }
  }
  std::vector<int32_t> holder_count(static_cast<size_t>(num_tiles_), 0);  // (devices < 2^31)
  for (int64_t t : tiles)
    if (t >= 0) ++holder_count[t];
  bool one_each = true;  // every tile has one holder: tile t's is holders[t], no CSR (8 B a tile)
  for (int64_t t = 0; t < num_tiles_; ++t) {
    if (holder_count[t] == 0 && TileElements(t) > 0) {
      std::string coords;
      for (int32_t c : TileCoords(t)) coords += (coords.empty() ? "" : ",") + std::to_string(c);
      return Status::InvalidArgument("tile (" + coords + ") holds elements but no device holds it");
    }
    one_each = one_each && holder_count[t] == 1;
  }
  if (one_each) {
    rep->holders.resize(static_cast<size_t>(num_tiles_));
    for (size_t i = 0; i < rep->ids().size(); ++i)
      if (tiles[i] >= 0) rep->holders[static_cast<size_t>(tiles[i])] = rep->ids()[i];
  } else {
    rep->holder_begin.assign(num_tiles_ + 1, 0);
    for (int64_t t = 0; t < num_tiles_; ++t) rep->holder_begin[t + 1] = rep->holder_begin[t] + holder_count[t];
    rep->holders.resize(rep->holder_begin.back());
    std::vector<int64_t> fill(rep->holder_begin.begin(), rep->holder_begin.end() - 1);
    for (size_t i = 0; i < rep->ids().size(); ++i)
      if (tiles[i] >= 0) rep->holders[fill[tiles[i]]++] = rep->ids()[i];
  }
  // The list, in 32 bits where every tile index fits (4 bytes a device).
  if (num_tiles_ <= INT32_MAX) {
    rep->device_tile32.assign(tiles.begin(), tiles.end());
  } else {
    rep->device_tile = std::move(tiles);
  }
  return Status::Ok();
}

Status Layout::NumberParts(const std::vector<DeviceTile>& placement, Rep& rep) const {
  // placement is sorted by device, so parallel to rep_->ids(). Parts are
  // renumbered per tile by first appearance in ascending device order: the
  // same holders split the same way get the same numbers.
  const int64_t parts = reduction_.parts;
  rep.device_part.assign(rep.ids().size(), 0);
  std::unordered_map<int64_t, int64_t> renumber;  // tile * parts + given part -> part
  std::vector<int64_t> seen(num_tiles_, 0);       // parts numbered so far per tile
  for (size_t i = 0; i < placement.size(); ++i) {
    const DeviceTile& p = placement[i];
    if (p.tile < 0 || TileElements(p.tile) == 0) continue;
    if (p.part < 0 || p.part >= parts)
      return Status::InvalidArgument("device " + std::to_string(p.device) + " holds part " + std::to_string(p.part) +
                                     " of a reduction over " + std::to_string(parts) + " parts");
    auto [it, added] = renumber.try_emplace(p.tile * parts + p.part, seen[p.tile]);
    if (added) ++seen[p.tile];
    rep.device_part[i] = it->second;
  }
  for (int64_t t = 0; t < num_tiles_; ++t) {
    if (TileElements(t) == 0 || seen[t] == parts) continue;
    std::string coords;
    for (int32_t c : TileCoords(t)) coords += (coords.empty() ? "" : ",") + std::to_string(c);
    return Status::InvalidArgument("tile (" + coords + ") is held in " + std::to_string(seen[t]) + " of the " +
                                   std::to_string(parts) + " parts of its pending reduction: every part must be held");
  }
  return Status::Ok();
}

int64_t Layout::PartOf(int64_t device) const {
  if (!partial()) return 0;
  const int64_t i = PositionIn(rep_->ids(), device);
  return i < 0 ? 0 : rep_->device_part[static_cast<size_t>(i)];
}

Status CheckReducible(DType dtype, ReduceOp op) {
  if (dtype == DType::kPred)
    return Status::NotSupported("partial values of pred cannot be reduced (it has no sum); use an integer type");
  if ((dtype == DType::kC64 || dtype == DType::kC128) && op != ReduceOp::kSum)
    return Status::NotSupported("a pending " + std::string(ReduceOpName(op)) + " of " + std::string(DTypeName(dtype)) +
                                " values is not supported: complex partial values are summed only");
  return Status::Ok();
}

Layout Layout::WithoutReduction() const {
  Layout l = *this;
  l.reduction_ = Reduction{};
  return l;
}

Layout Layout::PartLayout(int64_t part) const {
  std::vector<DimGrid> dims;
  for (const Dim& d : rep_->dims) dims.push_back(d.grid());
  std::vector<DeviceTile> placement;
  for (size_t i = 0; i < rep_->ids().size(); ++i) {
    const bool held = !partial() || rep_->device_part[i] == part;
    placement.push_back({rep_->ids()[i], held ? TileAtIndex(i) : -1, 0});
  }
  // Every tile is held in every part, so this grid is a valid layout.
  return Layout::Create(shape_, dtype_, std::move(dims), std::move(placement)).value();
}

std::vector<std::vector<int64_t>> Layout::DevicesByPart() const {
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(reduction_.parts));
  for (size_t i = 0; i < rep_->ids().size(); ++i)
    parts[static_cast<size_t>(partial() ? rep_->device_part[i] : 0)].push_back(rep_->ids()[i]);
  return parts;
}

Result<Layout> Layout::PartLayoutOn(int64_t part, std::span<const int64_t> devices) const {
  std::vector<DimGrid> dims;
  for (const Dim& d : rep_->dims) dims.push_back(d.grid());
  std::vector<DeviceTile> placement;
  placement.reserve(devices.size());
  for (int64_t dev : devices) {
    const int64_t i = PositionIn(rep_->ids(), dev);
    if (i < 0) return Status::InvalidArgument("device " + std::to_string(dev) + " is not one of the layout's");
    const bool held = !partial() || rep_->device_part[static_cast<size_t>(i)] == part;
    placement.push_back({dev, held ? TileAtIndex(static_cast<size_t>(i)) : -1, 0});
  }
  return Layout::Create(shape_, dtype_, std::move(dims), std::move(placement));
}

int64_t PositionIn(std::span<const int64_t> ascending, int64_t id) {
  const int64_t n = static_cast<int64_t>(ascending.size());
  if (n > 0 && ascending.back() - ascending.front() + 1 == n) {  // a range of ids: index directly
    const int64_t i = id - ascending.front();
    return i < 0 || i >= n ? -1 : i;
  }
  const auto it = std::lower_bound(ascending.begin(), ascending.end(), id);
  return it == ascending.end() || *it != id ? -1 : it - ascending.begin();
}

std::vector<int64_t> DevicesOfBoth(const Layout& a, const Layout& b) {
  if (a.SameDevices(b)) return a.devices();
  std::vector<int64_t> both;
  both.reserve(std::max(a.devices().size(), b.devices().size()));
  std::set_union(a.devices().begin(), a.devices().end(), b.devices().begin(), b.devices().end(), std::back_inserter(both));
  return both;
}

int64_t Layout::TileOf(int64_t device) const {
  const int64_t i = PositionIn(rep_->ids(), device);
  return i < 0 ? -1 : TileAtIndex(static_cast<size_t>(i));
}

int64_t Layout::TileAtIndex(size_t i) const {
  switch (rep_->tiles) {
    case Rep::Tiles::kIndex: return static_cast<int64_t>(i);
    case Rep::Tiles::kEvery: return rep_->every_tile;
    case Rep::Tiles::kListed: break;
  }
  return rep_->device_tile32.empty() ? rep_->device_tile[i] : rep_->device_tile32[i];
}

std::vector<int32_t> Layout::TileCoords(int64_t tile) const {
  std::vector<int32_t> c(rep_->dims.size());
  for (int64_t d = rank() - 1; d >= 0; --d) {
    c[d] = static_cast<int32_t>(tile % rep_->dims[d].grid().tiles);
    tile /= rep_->dims[d].grid().tiles;
  }
  return c;
}

int64_t Layout::TileIndex(std::span<const int32_t> coords) const {
  int64_t t = 0;
  for (size_t d = 0; d < rep_->dims.size(); ++d) t = t * rep_->dims[d].grid().tiles + coords[d];
  return t;
}

std::span<const int64_t> Layout::Holders(int64_t tile) const {
  switch (rep_->tiles) {
    case Rep::Tiles::kIndex:  // device i holds tile i: tile t's one holder is devices[t]
      return tile < static_cast<int64_t>(rep_->ids().size()) ? std::span<const int64_t>(rep_->ids().data() + tile, 1)
                                                                : std::span<const int64_t>();
    case Rep::Tiles::kEvery:
      return tile == rep_->every_tile ? std::span<const int64_t>(rep_->ids()) : std::span<const int64_t>();
    case Rep::Tiles::kListed: break;
  }
  if (rep_->holder_begin.empty()) return {rep_->holders.data() + tile, 1};  // one holder a tile
  return {rep_->holders.data() + rep_->holder_begin[tile], rep_->holders.data() + rep_->holder_begin[tile + 1]};
}

std::span<const int32_t> Layout::TileCells(int64_t d, int32_t c) const {
  const Dim& dim = rep_->dims[d];
  // (One cell per tile, in order: cell c is tile c, and cell_tile[c] == c.)
  if (dim.tile_cell_begin.empty()) return {dim.grid().cell_tile.data() + c, 1};
  return {dim.tile_cells.data() + dim.tile_cell_begin[c], dim.tile_cells.data() + dim.tile_cell_begin[c + 1]};
}

int64_t Layout::TileElements(int64_t tile) const {
  int64_t n = 1;
  for (int64_t d = rank() - 1; d >= 0; --d) {
    n *= TileExtent(d, tile % rep_->dims[d].grid().tiles);
    tile /= rep_->dims[d].grid().tiles;
  }
  return n;
}

std::vector<Interval> Layout::TileIntervals(int64_t d, int32_t c) const {
  std::vector<Interval> out;
  const DimGrid& g = rep_->dims[d].grid();
  for (int32_t k : TileCells(d, c)) {
    Interval iv{g.cuts[k], g.cuts[k + 1]};
    if (iv.empty()) continue;
    if (!out.empty() && out.back().hi == iv.lo) out.back().hi = iv.hi;
    else out.push_back(iv);
  }
  return out;
}

std::vector<int64_t> Layout::LocalShape(int64_t device) const {
  std::vector<int64_t> s(rank(), 0);
  const int64_t t = TileOf(device);
  if (t < 0) return s;
  std::vector<int32_t> c = TileCoords(t);
  for (int64_t d = 0; d < rank(); ++d) s[d] = TileExtent(d, c[d]);
  return s;
}

int64_t Layout::LocalBytes(int64_t device) const {
  const int64_t t = TileOf(device);
  return t < 0 ? 0 : TileElements(t) * element_bytes();
}

namespace {

// Visits the cross product of per-dim interval lists in row-major order,
// with each interval's offset within its dim's local extent.
template <typename F>
void ForEachBox(const std::vector<std::vector<Interval>>& per_dim, F&& f) {
  const size_t rank = per_dim.size();
  for (const auto& ivs : per_dim)
    if (ivs.empty()) return;
  std::vector<std::vector<int64_t>> offsets(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t at = 0;
    for (const Interval& iv : per_dim[d]) { offsets[d].push_back(at); at += iv.size(); }
  }
  std::vector<size_t> idx(rank, 0);
  while (true) {
    Box b;
    std::vector<int64_t> origin;
    for (size_t d = 0; d < rank; ++d) { b.dims.push_back(per_dim[d][idx[d]]); origin.push_back(offsets[d][idx[d]]); }
    f(std::move(b), std::move(origin));
    size_t d = rank;
    while (d > 0 && ++idx[d - 1] == per_dim[d - 1].size()) idx[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

std::vector<Box> Layout::DeviceBoxes(int64_t device) const {
  std::vector<Box> boxes;
  const int64_t t = TileOf(device);
  if (t < 0 || TileElements(t) == 0) return boxes;
  std::vector<int32_t> c = TileCoords(t);
  std::vector<std::vector<Interval>> per_dim(rank());
  for (int64_t d = 0; d < rank(); ++d) per_dim[d] = TileIntervals(d, c[d]);
  ForEachBox(per_dim, [&](Box b, std::vector<int64_t>) { boxes.push_back(std::move(b)); });
  return boxes;
}

std::vector<std::vector<int64_t>> Layout::DeviceBoxOrigins(int64_t device) const {
  std::vector<std::vector<int64_t>> origins;
  const int64_t t = TileOf(device);
  if (t < 0 || TileElements(t) == 0) return origins;
  std::vector<int32_t> c = TileCoords(t);
  std::vector<std::vector<Interval>> per_dim(rank());
  for (int64_t d = 0; d < rank(); ++d) per_dim[d] = TileIntervals(d, c[d]);
  ForEachBox(per_dim, [&](Box, std::vector<int64_t> origin) { origins.push_back(std::move(origin)); });
  return origins;
}

int64_t Layout::DeviceBoxCount(int64_t device) const {
  const int64_t t = TileOf(device);
  if (t < 0 || TileElements(t) == 0) return 0;
  std::vector<int32_t> c = TileCoords(t);
  int64_t n = 1;
  for (int64_t d = 0; d < rank(); ++d) n *= static_cast<int64_t>(TileIntervals(d, c[d]).size());
  return n;
}

namespace {
// What a device holds, as merged intervals per dim; empty when it holds nothing.
std::vector<std::vector<Interval>> Holding(const Layout& l, int64_t device) {
  const int64_t t = l.TileOf(device);
  if (t < 0 || l.TileElements(t) == 0) return {};
  std::vector<int32_t> c = l.TileCoords(t);
  std::vector<std::vector<Interval>> h(l.rank());
  for (int64_t d = 0; d < l.rank(); ++d) h[d] = l.TileIntervals(d, c[d]);
  if (l.rank() == 0) h.push_back({Interval{0, 1}});  // a scalar is held: mark non-empty
  return h;
}
}  // namespace

bool operator==(const Layout& a, const Layout& b) {
  if (a.shape_ != b.shape_ || a.dtype_ != b.dtype_ || a.reduction_ != b.reduction_) return false;
  if (a.rep_ == b.rep_) return true;  // copies of one layout
  if (!a.SameDevices(b)) return false;
  if (a.partial() && a.rep_->device_part != b.rep_->device_part) return false;
  // The same grids with the same tile per device hold the same boxes: a
  // comparison of arrays, where the general test below allocates per device.
  const bool same_grids = std::equal(a.rep_->dims.begin(), a.rep_->dims.end(), b.rep_->dims.begin(), b.rep_->dims.end(),
                                     [](const Layout::Dim& x, const Layout::Dim& y) { return x.grid_ptr == y.grid_ptr || x.grid() == y.grid(); });
  if (same_grids) {
    bool same_tiles = true;
    for (size_t i = 0; i < a.rep_->ids().size() && same_tiles; ++i) same_tiles = a.TileAtIndex(i) == b.TileAtIndex(i);
    if (same_tiles) return true;
  }
  for (int64_t dev : a.rep_->ids())
    if (Holding(a, dev) != Holding(b, dev)) return false;
  return true;
}

namespace {
void MixInto(size_t& h, int64_t v) { h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }
}  // namespace

std::pair<uint64_t, uint64_t> Layout::PlacementHash() const {
  // (Two ranks may race to compute them: both store the same values.)
  if (rep_->placement_hashed.load(std::memory_order_acquire))
    return {rep_->placement_hash.load(std::memory_order_relaxed), rep_->parts_hash.load(std::memory_order_relaxed)};
  size_t parts = 0;
  for (int64_t p : rep_->device_part) MixInto(parts, p);
  size_t h = 0;
  for (int64_t dev : rep_->ids()) {
    MixInto(h, dev);
    for (const auto& ivs : Holding(*this, dev))
      for (const Interval& iv : ivs) {
        MixInto(h, iv.lo);
        MixInto(h, iv.hi);
      }
  }
  rep_->placement_hash.store(h, std::memory_order_relaxed);
  rep_->parts_hash.store(parts, std::memory_order_relaxed);
  rep_->placement_hashed.store(true, std::memory_order_release);
  return {h, parts};
}

size_t Layout::Hash() const {
  size_t h = std::hash<int64_t>()(static_cast<int64_t>(dtype_));
  for (int64_t s : shape_) MixInto(h, s);
  const auto [placement, parts] = PlacementHash();
  if (partial()) {
    MixInto(h, static_cast<int64_t>(reduction_.op));
    MixInto(h, static_cast<int64_t>(parts));
  }
  MixInto(h, static_cast<int64_t>(placement));
  return h;
}

std::ostream& operator<<(std::ostream& os, const Layout& l) {
  os << DTypeName(l.dtype()) << "[";
  for (int64_t d = 0; d < l.rank(); ++d) os << (d ? "," : "") << l.shape()[d];
  os << "]";
  if (l.partial()) os << " " << ReduceOpName(l.reduction().op) << " over " << l.reduction().parts << " parts";
  for (int64_t dev : l.devices()) {
    os << " d" << dev;
    if (l.partial()) os << "/p" << l.PartOf(dev);
    os << ":";
    for (const Box& b : l.DeviceBoxes(dev)) os << b;
  }
  return os;
}

}  // namespace reshard
