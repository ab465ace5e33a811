#include "reshard/dtensor.h"

#include <algorithm>

#include "layout/mesh_grid.h"

namespace reshard {
namespace {

bool Splits(const Placement& p) { return p.kind == Placement::Kind::kShard || p.kind == Placement::Kind::kStridedShard; }

// Per tensor dim, the mesh dims that split it in mesh order (DTensor nests
// them so), and their split factors.
std::vector<std::vector<AxisRef>> AxesPerDim(const std::vector<Placement>& placements, size_t rank,
                                             std::vector<std::vector<int64_t>>* factors) {
  std::vector<std::vector<AxisRef>> axes(rank);
  factors->assign(rank, {});
  for (size_t i = 0; i < placements.size(); ++i) {
    if (!Splits(placements[i])) continue;
    const int64_t d = placements[i].dim < 0 ? placements[i].dim + static_cast<int64_t>(rank) : placements[i].dim;
    axes[d].push_back(AxisRef{static_cast<int64_t>(i), 1, 0});
    (*factors)[d].push_back(placements[i].kind == Placement::Kind::kStridedShard ? placements[i].split_factor : 1);
  }
  return axes;
}

}  // namespace

Result<Layout> PlacementsToLayout(const std::vector<Placement>& placements, const Mesh& mesh,
                                  const std::vector<int64_t>& shape, DType dtype) {
  if (static_cast<int64_t>(placements.size()) != mesh.num_axes())
    return Status::InvalidArgument("DTensor needs one placement per mesh dim: " + std::to_string(placements.size()) +
                                   " given for mesh " + mesh.ToString());
  for (const Placement& p : placements) {
    const char* name = p.kind == Placement::Kind::kShard ? "Shard(" : "_StridedShard(";
    if (Splits(p) && (p.dim < -static_cast<int64_t>(shape.size()) || p.dim >= static_cast<int64_t>(shape.size())))
      return Status::InvalidArgument(name + std::to_string(p.dim) + ") names a dim outside rank " + std::to_string(shape.size()));
    if (p.kind == Placement::Kind::kStridedShard && p.split_factor < 1)
      return Status::InvalidArgument("_StridedShard(" + std::to_string(p.dim) + ", split_factor=" +
                                     std::to_string(p.split_factor) + "): split_factor must be >= 1");
  }
  std::vector<AxisRef> partial_axes;
  ReduceOp op = ReduceOp::kSum;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].kind != Placement::Kind::kPartial) continue;
    if (!partial_axes.empty() && placements[i].reduce_op != op)
      return Status::NotSupported("Partial placements with different ops (" + std::string(ReduceOpName(op)) + ", " +
                                  std::string(ReduceOpName(placements[i].reduce_op)) + ") are not supported");
    op = placements[i].reduce_op;
    partial_axes.push_back(AxisRef{static_cast<int64_t>(i), 1, 0});
  }
  std::vector<std::vector<int64_t>> factors;
  auto axes = AxesPerDim(placements, shape.size(), &factors);
  return BuildMeshLayout(mesh, shape, dtype, axes, SplitRule::kNestedChunk, factors, partial_axes, op);
}

namespace {

// The placements that split each dim d over order[d] (mesh dims, major to
// minor): DTensor splits in mesh order, so a mesh dim that splits after more
// major mesh dims later in mesh order is a _StridedShard whose factor is
// their product.
std::vector<Placement> PlacementsForOrder(const std::vector<std::vector<int64_t>>& order, const Mesh& mesh) {
  std::vector<Placement> placements(mesh.num_axes());
  for (size_t d = 0; d < order.size(); ++d) {
    for (size_t j = 0; j < order[d].size(); ++j) {
      int64_t factor = 1;
      for (size_t i = 0; i < j; ++i)
        if (order[d][i] > order[d][j]) factor *= mesh.axes()[order[d][i]].size;
      placements[order[d][j]] = factor == 1 ? Placement{Placement::Kind::kShard, static_cast<int64_t>(d)}
                                            : Placement{Placement::Kind::kStridedShard, static_cast<int64_t>(d), factor};
    }
  }
  return placements;
}

// Candidates tried when the tile order does not name the major-to-minor
// order (uneven right-to-left splits leave tiles empty in no order the grid
// keeps): at most this many orders over all dims.
constexpr int64_t kMaxOrders = 5040;
// ... and at most this many device placements built over all of them.
constexpr int64_t kMaxOrderWork = int64_t{1} << 22;

}  // namespace

namespace {
Result<std::vector<Placement>> UnreducedPlacementsFromLayout(const Layout& layout, const Mesh& mesh);
}  // namespace

Result<std::vector<Placement>> PlacementsFromLayout(const Layout& layout, const Mesh& mesh) {
  if (!layout.partial()) return UnreducedPlacementsFromLayout(layout, mesh);
  // The placements of the grid alone, then Partial on every mesh dim whose
  // neighbours hold one tile in different parts; kept only if it rebuilds.
  RESHARD_ASSIGN_OR_RETURN(std::vector<Placement> placements, UnreducedPlacementsFromLayout(layout.WithoutReduction(), mesh));
  for (int64_t a : PartialMeshAxes(layout, mesh)) {
    if (placements[a].kind != Placement::Kind::kReplicate)
      return Status::InvalidArgument("mesh dim " + std::to_string(a) + " both splits the array and holds partial values");
    placements[a] = Placement{Placement::Kind::kPartial, 0, 1, layout.reduction().op};
  }
  Result<Layout> check = PlacementsToLayout(placements, mesh, layout.shape(), layout.dtype());
  if (check.ok() && *check == layout) return placements;
  return Status::InvalidArgument("the layout's pending reduction is not over whole mesh dims, as DTensor's Partial states it");
}

namespace {
Result<std::vector<Placement>> UnreducedPlacementsFromLayout(const Layout& layout, const Mesh& mesh) {
  const Status mismatch = Status::InvalidArgument(
      "the layout's split points differ from DTensor's torch.chunk splits over the same mesh dims");
  Result<std::vector<std::vector<AxisRef>>> inferred = InferMeshAxes(layout, mesh, /*allow_sub_axes=*/false);
  if (inferred.ok()) {
    std::vector<std::vector<int64_t>> order(inferred->size());
    for (size_t d = 0; d < inferred->size(); ++d)
      for (const AxisRef& a : (*inferred)[d]) order[d].push_back(a.axis);
    const std::vector<Placement> placements = PlacementsForOrder(order, mesh);
    Result<Layout> check = PlacementsToLayout(placements, mesh, layout.shape(), layout.dtype());
    if (check.ok() && *check == layout) return placements;
  }
  // Which tensor dims each mesh dim splits: neighbours along it hold
  // different tiles along those dims.
  if (!mesh.HasDevices(layout.devices()))
    return inferred.ok() ? mismatch : inferred.status();
  std::vector<std::vector<int64_t>> splits(layout.rank());  // per dim, mesh dims in mesh order
  for (int64_t a = 0; a < mesh.num_axes(); ++a) {
    // Dims whose tile differs between neighbours holding data, and between
    // any neighbours: an empty tile's coordinate says little, so it decides
    // only where no neighbours with data differ.
    std::vector<bool> full(layout.rank(), false), any(layout.rank(), false);
    for (int64_t f = 0; f < mesh.num_devices(); ++f) {
      if (mesh.Coordinate(f, a) + 1 >= mesh.axes()[a].size) continue;
      const int64_t t0 = layout.TileOf(mesh.device(f)), t1 = layout.TileOf(mesh.device(f + mesh.Stride(a)));
      if (t0 < 0 || t1 < 0) return inferred.ok() ? mismatch : inferred.status();
      const bool data = layout.TileElements(t0) > 0 && layout.TileElements(t1) > 0;
      const std::vector<int32_t> c0 = layout.TileCoords(t0), c1 = layout.TileCoords(t1);
      for (int64_t d = 0; d < layout.rank(); ++d)
        if (c0[d] != c1[d]) {
          any[d] = true;
          if (data) full[d] = true;
        }
    }
    const int64_t n_full = std::count(full.begin(), full.end(), true), n_any = std::count(any.begin(), any.end(), true);
    if (n_full > 1)
      return Status::InvalidArgument("mesh dim " + std::to_string(a) + " splits " + std::to_string(n_full) +
                                     " tensor dims, which DTensor placements cannot state");
    const std::vector<bool>& use = n_full == 1 ? full : any;
    if (n_full == 0 && n_any > 1) continue;  // only empty tiles differ, along several dims: undecided
    for (int64_t d = 0; d < layout.rank(); ++d)
      if (use[d]) splits[d].push_back(a);
  }
  // Each candidate builds a layout of every device: bound orders times devices.
  const int64_t max_orders = std::min<int64_t>(kMaxOrders, kMaxOrderWork / std::max<int64_t>(1, mesh.num_devices()));
  int64_t orders = 1;
  for (auto& s : splits)
    for (int64_t k = 2; k <= static_cast<int64_t>(s.size()); ++k) {
      orders *= k;  // orders <= max_orders < 2^13 before this, so no overflow
      if (orders > max_orders) return inferred.ok() ? mismatch : inferred.status();
    }
  // Every major-to-minor order of every dim's mesh dims, odometer style.
  std::vector<std::vector<int64_t>> order = splits;
  for (int64_t n = 0; n < orders; ++n) {
    const std::vector<Placement> placements = PlacementsForOrder(order, mesh);
    Result<Layout> check = PlacementsToLayout(placements, mesh, layout.shape(), layout.dtype());
    if (check.ok() && *check == layout) return placements;
    for (auto& o : order)
      if (std::next_permutation(o.begin(), o.end())) break;
  }
  return inferred.ok() ? mismatch : inferred.status();
}
}  // namespace

}  // namespace reshard
