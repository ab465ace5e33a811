#include "reshard/dtensor.h"

#include "layout/mesh_grid.h"

namespace reshard {
namespace {

bool Splits(const Placement& p) { return p.kind != Placement::Kind::kReplicate; }

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
  std::vector<std::vector<int64_t>> factors;
  auto axes = AxesPerDim(placements, shape.size(), &factors);
  return BuildMeshLayout(mesh, shape, dtype, axes, SplitRule::kNestedChunk, factors);
}

Result<std::vector<Placement>> PlacementsFromLayout(const Layout& layout, const Mesh& mesh) {
  RESHARD_ASSIGN_OR_RETURN(auto axes, InferMeshAxes(layout, mesh, /*allow_sub_axes=*/false));
  std::vector<Placement> placements(mesh.num_axes());
  // axes[d] lists the mesh dims splitting dim d major to minor. DTensor
  // splits in mesh order; a mesh dim that splits after more major mesh dims
  // later in mesh order is a _StridedShard whose factor is their product.
  for (size_t d = 0; d < axes.size(); ++d) {
    for (size_t j = 0; j < axes[d].size(); ++j) {
      int64_t factor = 1;
      for (size_t i = 0; i < j; ++i)
        if (axes[d][i].axis > axes[d][j].axis) factor *= axes[d][i].Size(mesh);
      placements[axes[d][j].axis] =
          factor == 1 ? Placement{Placement::Kind::kShard, static_cast<int64_t>(d)}
                      : Placement{Placement::Kind::kStridedShard, static_cast<int64_t>(d), factor};
    }
  }
  RESHARD_ASSIGN_OR_RETURN(Layout check, PlacementsToLayout(placements, mesh, layout.shape(), layout.dtype()));
  if (!(check == layout))
    return Status::InvalidArgument(
        "the layout's split points differ from DTensor's torch.chunk splits over the same mesh dims");
  return placements;
}

}  // namespace reshard
