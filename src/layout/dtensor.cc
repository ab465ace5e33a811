#include "reshard/dtensor.h"

#include "layout/mesh_grid.h"

namespace reshard {
namespace {

std::vector<std::vector<AxisRef>> AxesPerDim(const std::vector<Placement>& placements, size_t rank) {
  std::vector<std::vector<AxisRef>> axes(rank);
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].kind != Placement::Kind::kShard) continue;
    const int64_t d = placements[i].dim < 0 ? placements[i].dim + static_cast<int64_t>(rank) : placements[i].dim;
    axes[d].push_back(AxisRef{static_cast<int64_t>(i), 1, 0});
  }
  return axes;
}

}  // namespace

Result<Layout> PlacementsToLayout(const std::vector<Placement>& placements, const Mesh& mesh,
                                  const std::vector<int64_t>& shape, DType dtype) {
  if (static_cast<int64_t>(placements.size()) != mesh.num_axes())
    return Status::InvalidArgument("DTensor needs one placement per mesh dim: " + std::to_string(placements.size()) +
                                   " given for mesh " + mesh.ToString());
  for (const Placement& p : placements)
    if (p.kind == Placement::Kind::kShard &&
        (p.dim < -static_cast<int64_t>(shape.size()) || p.dim >= static_cast<int64_t>(shape.size())))
      return Status::InvalidArgument("Shard(" + std::to_string(p.dim) + ") names a dim outside rank " + std::to_string(shape.size()));
  return BuildMeshLayout(mesh, shape, dtype, AxesPerDim(placements, shape.size()), SplitRule::kNestedChunk);
}

Result<std::vector<Placement>> PlacementsFromLayout(const Layout& layout, const Mesh& mesh) {
  RESHARD_ASSIGN_OR_RETURN(auto axes, InferMeshAxes(layout, mesh, /*allow_sub_axes=*/false));
  std::vector<Placement> placements(mesh.num_axes());
  for (size_t d = 0; d < axes.size(); ++d) {
    for (size_t j = 0; j < axes[d].size(); ++j) {
      if (j > 0 && axes[d][j].axis < axes[d][j - 1].axis)
        return Status::InvalidArgument("dimension " + std::to_string(d) +
                                       " is split over mesh dims against mesh order, which DTensor placements cannot state");
      placements[axes[d][j].axis] = Placement{Placement::Kind::kShard, static_cast<int64_t>(d)};
    }
  }
  RESHARD_ASSIGN_OR_RETURN(Layout check, PlacementsToLayout(placements, mesh, layout.shape(), layout.dtype()));
  if (!(check == layout))
    return Status::InvalidArgument(
        "the layout's split points differ from DTensor's torch.chunk splits over the same mesh dims");
  return placements;
}

}  // namespace reshard
