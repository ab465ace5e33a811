#include "layout/mesh_grid.h"

#include <algorithm>
#include <utility>

#include "layout/checked_math.h"

namespace reshard {
namespace {

// torch.chunk(n, k): chunks of ceil(n/k); fewer than k when that runs out.
void ChunkSplit(int64_t lo, int64_t hi, int64_t k, std::vector<int64_t>& cuts) {
  const int64_t n = hi - lo, c = CeilDiv(n, k);
  for (int64_t i = 1; i <= k; ++i) cuts.push_back(lo + MulClamp(i, c, n));
}

DimGrid NestedChunkGrid(int64_t n, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> cuts = {0, n};
  for (int64_t k : sizes) {
    std::vector<int64_t> next = {0};
    for (size_t i = 0; i + 1 < cuts.size(); ++i) ChunkSplit(cuts[i], cuts[i + 1], k, next);
    cuts = std::move(next);
  }
  return DimGrid::FromCuts(std::move(cuts));
}

// The most cells a strided split may make of one dim: each cell is a heap
// entry, and split factors are user input.
constexpr int64_t kMaxStridedCells = int64_t{1} << 24;

// Reads a tile's ascending interval list by position, front to back: the
// calls of one tile ask for increasing, disjoint position ranges, so the
// cursor never rescans the intervals it has passed.
class PositionCursor {
 public:
  explicit PositionCursor(const std::vector<Interval>& seq) : seq_(seq) {}
  // Appends the elements at positions [lo, hi) (REQUIRES: lo >= every hi asked before).
  void Take(int64_t lo, int64_t hi, std::vector<Interval>& out) {
    while (i_ < seq_.size() && pos_ + seq_[i_].size() <= lo) pos_ += seq_[i_++].size();
    int64_t pos = pos_;
    for (size_t i = i_; i < seq_.size() && pos < hi; pos += seq_[i++].size()) {
      const Interval& iv = seq_[i];
      const int64_t a = std::max(lo, pos), b = std::min(hi, pos + iv.size());
      if (a >= b) continue;
      if (!out.empty() && out.back().hi == iv.lo + (a - pos)) out.back().hi = iv.lo + (b - pos);
      else out.push_back({iv.lo + (a - pos), iv.lo + (b - pos)});
    }
  }

 private:
  const std::vector<Interval>& seq_;
  size_t i_ = 0;
  int64_t pos_ = 0;
};

// DTensor's nested split where some level is strided: every tile is kept as
// its ascending list of global intervals, each level cuts a tile's positions
// (not its global indices), and the cells are the intervals at the end.
// Tiles are numbered by their first element (empty tiles last), so that
// tile order along the dim is position order, as in every other grid:
// `renumber` maps the mixed-radix coordinate over the mesh dims to it.
Result<DimGrid> StridedChunkGrid(int64_t n, const std::vector<int64_t>& sizes, const std::vector<int64_t>& factors,
                                 std::vector<int32_t>* renumber) {
  std::vector<std::vector<Interval>> tiles = {{Interval{0, n}}};
  int64_t cells = 1;
  for (size_t l = 0; l < sizes.size(); ++l) {
    const int64_t k = sizes[l], s = factors[l];
    if (s < 1) return Status::InvalidArgument("split_factor " + std::to_string(s) + " is not >= 1");
    if (k == 1) continue;  // one member holds every piece: the tiles stay as they are
    std::vector<std::vector<Interval>> next(tiles.size() * k);
    cells = 0;
    int64_t work = 0;  // pieces times parts over the level's tiles so far
    for (size_t t = 0; t < tiles.size(); ++t) {
      int64_t len = 0;
      for (const Interval& iv : tiles[t]) len += iv.hi - iv.lo;
      const int64_t c1 = CeilDiv(len, s);
      // At most min(s, len) pieces, each cut k ways: refuse before the work, not after it.
      if (std::min(s, len) > (kMaxStridedCells - work) / k)
        return Status::InvalidArgument("the strided split of an extent of " + std::to_string(n) + " makes over " +
                                       std::to_string(kMaxStridedCells) + " cells");
      work += std::min(s, len) * k;
      PositionCursor cursor(tiles[t]);
      for (int64_t j = 0; j < s && MulClamp(j, c1, len) < len; ++j) {
        const int64_t plo = MulClamp(j, c1, len), phi = MulClamp(j + 1, c1, len), pl = phi - plo;
        const int64_t c2 = CeilDiv(pl, k);
        for (int64_t c = 0; c < k; ++c) {
          std::vector<Interval>& dst = next[t * k + c];
          cursor.Take(plo + MulClamp(c, c2, pl), plo + MulClamp(c + 1, c2, pl), dst);
        }
      }
      for (int64_t c = 0; c < k; ++c) cells += static_cast<int64_t>(next[t * k + c].size());
      if (cells > kMaxStridedCells)
        return Status::InvalidArgument("the strided split of an extent of " + std::to_string(n) + " makes over " +
                                       std::to_string(kMaxStridedCells) + " cells");
    }
    tiles = std::move(next);
  }
  std::vector<std::pair<Interval, int32_t>> runs;
  runs.reserve(cells);
  for (size_t t = 0; t < tiles.size(); ++t)
    for (const Interval& iv : tiles[t]) runs.push_back({iv, static_cast<int32_t>(t)});
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first.lo < b.first.lo; });
  renumber->assign(tiles.size(), -1);
  int32_t next_coord = 0;
  for (auto& [iv, t] : runs)
    if ((*renumber)[t] < 0) (*renumber)[t] = next_coord++;
  for (int32_t& r : *renumber)
    if (r < 0) r = next_coord++;
  for (auto& [iv, t] : runs) t = (*renumber)[t];
  DimGrid g;
  g.tiles = static_cast<int32_t>(tiles.size());
  g.cuts = {0};
  for (const auto& [iv, t] : runs) {
    if (!g.cell_tile.empty() && g.cell_tile.back() == t) { g.cuts.back() = iv.hi; continue; }
    g.cuts.push_back(iv.hi);
    g.cell_tile.push_back(t);
  }
  if (g.cell_tile.empty()) g.cuts.push_back(0);  // n == 0: one empty cell of tile 0
  if (g.cell_tile.empty()) g.cell_tile.push_back(0);
  return g;
}

}  // namespace

namespace {

// BuildMeshLayout's grids, and per dim the renumbering of strided chunks
// (empty where none).
struct MeshGrids {
  std::vector<DimGrid> grids;
  std::vector<std::vector<int32_t>> renumber;
};

Result<MeshGrids> GridsOf(const Mesh& mesh, const std::vector<int64_t>& shape,
                          const std::vector<std::vector<AxisRef>>& dims, SplitRule rule,
                          const std::vector<std::vector<int64_t>>& split_factors) {
  if (dims.size() != shape.size())
    return Status::InvalidArgument("the sharding names " + std::to_string(dims.size()) +
                                   (dims.size() == 1 ? " dimension" : " dimensions") + " but the shape has rank " +
                                   std::to_string(shape.size()));
  MeshGrids g;
  g.renumber.resize(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    std::vector<int64_t> sizes;
    int64_t k = 1;
    for (const AxisRef& a : dims[d]) {
      sizes.push_back(a.Size(mesh));
      if (!CheckedMul(k, a.Size(mesh), &k)) return Status::InvalidArgument("shard count overflows int64");
    }
    const bool strided = rule == SplitRule::kNestedChunk && d < split_factors.size() &&
                         std::any_of(split_factors[d].begin(), split_factors[d].end(), [](int64_t s) { return s != 1; });
    if (strided) {
      RESHARD_ASSIGN_OR_RETURN(DimGrid grid, StridedChunkGrid(shape[d], sizes, split_factors[d], &g.renumber[d]));
      g.grids.push_back(std::move(grid));
    } else {
      g.grids.push_back(rule == SplitRule::kCeil ? DimGrid::Ceil(shape[d], k) : NestedChunkGrid(shape[d], sizes));
    }
  }
  return g;
}

// The tile of the device at mesh position f, with each (sub-)axis's digit
// read as (f / stride) % size: AxisRef::Coordinate's arithmetic, its
// divisions by the mesh done once (every pass below visits every device).
class TileAt {
 public:
  TileAt(const Mesh& mesh, const MeshGrids& g, const std::vector<std::vector<AxisRef>>& dims) : g_(g) {
    for (const std::vector<AxisRef>& refs : dims) {
      std::vector<Digit> digits;
      for (const AxisRef& a : refs) {
        const int64_t n = mesh.axes()[a.axis].size, size = a.Size(mesh);
        digits.push_back({mesh.Stride(a.axis) * (n / (a.pre_size * size)), size});
      }
      digits_.push_back(std::move(digits));
    }
  }
  int64_t operator()(int64_t f) const {
    int64_t tile = 0;
    for (size_t d = 0; d < digits_.size(); ++d) {
      int64_t coord = 0;
      for (const Digit& x : digits_[d]) coord = coord * x.size + (f / x.stride) % x.size;
      if (!g_.renumber[d].empty()) coord = g_.renumber[d][coord];
      tile = tile * g_.grids[d].tiles + coord;
    }
    return tile;
  }

 private:
  struct Digit {
    int64_t stride, size;
  };
  const MeshGrids& g_;
  std::vector<std::vector<Digit>> digits_;
};

}  // namespace

Result<Layout> BuildMeshLayout(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                               const std::vector<std::vector<AxisRef>>& dims, SplitRule rule,
                               const std::vector<std::vector<int64_t>>& split_factors,
                               const std::vector<AxisRef>& partial_axes, ReduceOp op) {
  RESHARD_ASSIGN_OR_RETURN(MeshGrids g, GridsOf(mesh, shape, dims, rule, split_factors));
  const TileAt tile_at(mesh, g, dims);
  if (mesh.is_iota() && partial_axes.empty()) {
    // Position f is device f: each device's tile alone, no placement list.
    std::vector<int64_t> tiles(static_cast<size_t>(mesh.num_devices()));
    for (int64_t f = 0; f < mesh.num_devices(); ++f) tiles[static_cast<size_t>(f)] = tile_at(f);
    return Layout::CreateOnIota(shape, dtype, std::move(g.grids), std::move(tiles));
  }
  std::vector<DeviceTile> placement;
  placement.reserve(mesh.num_devices());
  for (int64_t f = 0; f < mesh.num_devices(); ++f) {
    int64_t part = 0;
    for (const AxisRef& a : partial_axes) part = part * a.Size(mesh) + a.Coordinate(mesh, f);
    placement.push_back({mesh.device(f), tile_at(f), part});
  }
  Reduction reduction{op, 1};
  for (const AxisRef& a : partial_axes) reduction.parts *= a.Size(mesh);  // within the mesh's device count
  return Layout::Create(shape, dtype, std::move(g.grids), std::move(placement), reduction);
}

Result<bool> IsMeshLayout(const Layout& layout, const Mesh& mesh, const std::vector<std::vector<AxisRef>>& dims,
                          SplitRule rule, const std::vector<std::vector<int64_t>>& split_factors,
                          const std::vector<AxisRef>& partial_axes, ReduceOp op) {
  // Without a pending reduction, the same grids and the same tile on every
  // device are the same layout (Layout's operator== says so too): checked
  // with the grids alone (O(cells)) and one pass over the devices, where
  // building the layout to compare holds a second copy of its per-device
  // and per-cell arrays.
  if (partial_axes.empty() && !layout.partial() && static_cast<int64_t>(layout.devices().size()) == mesh.num_devices()) {
    RESHARD_ASSIGN_OR_RETURN(MeshGrids g, GridsOf(mesh, layout.shape(), dims, rule, split_factors));
    bool same = true;
    for (size_t d = 0; d < g.grids.size() && same; ++d) same = g.grids[d] == layout.dim(static_cast<int64_t>(d));
    const TileAt tile_at(mesh, g, dims);
    for (int64_t f = 0; f < mesh.num_devices() && same; ++f) same = layout.TileOf(mesh.device(f)) == tile_at(f);
    if (same) return true;
  }
  // Otherwise (a tile index another grid numbers otherwise can hold the same
  // boxes), built and compared.
  RESHARD_ASSIGN_OR_RETURN(Layout built,
                           BuildMeshLayout(mesh, layout.shape(), layout.dtype(), dims, rule, split_factors, partial_axes, op));
  return built == layout;
}

std::vector<int64_t> PartialMeshAxes(const Layout& layout, const Mesh& mesh) {
  std::vector<int64_t> axes;
  if (!layout.partial()) return axes;
  for (int64_t a = 0; a < mesh.num_axes(); ++a) {
    for (int64_t f = 0; f < mesh.num_devices(); ++f) {
      if (mesh.Coordinate(f, a) + 1 >= mesh.axes()[a].size) continue;
      const int64_t d0 = mesh.device(f), d1 = mesh.device(f + mesh.Stride(a));
      const int64_t t = layout.TileOf(d0);
      if (t >= 0 && t == layout.TileOf(d1) && layout.TileElements(t) > 0 && layout.PartOf(d0) != layout.PartOf(d1)) {
        axes.push_back(a);
        break;
      }
    }
  }
  return axes;
}

}  // namespace reshard
