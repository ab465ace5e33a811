#include "layout/mesh_grid.h"

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

}  // namespace

Result<Layout> BuildMeshLayout(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                               const std::vector<std::vector<AxisRef>>& dims, SplitRule rule) {
  if (dims.size() != shape.size())
    return Status::InvalidArgument("the sharding names " + std::to_string(dims.size()) +
                                   (dims.size() == 1 ? " dimension" : " dimensions") + " but the shape has rank " +
                                   std::to_string(shape.size()));
  std::vector<DimGrid> grids;
  for (size_t d = 0; d < dims.size(); ++d) {
    std::vector<int64_t> sizes;
    int64_t k = 1;
    for (const AxisRef& a : dims[d]) {
      sizes.push_back(a.Size(mesh));
      if (!CheckedMul(k, a.Size(mesh), &k)) return Status::InvalidArgument("shard count overflows int64");
    }
    grids.push_back(rule == SplitRule::kCeil ? DimGrid::Ceil(shape[d], k) : NestedChunkGrid(shape[d], sizes));
  }
  std::vector<DeviceTile> placement;
  placement.reserve(mesh.num_devices());
  for (int64_t f = 0; f < mesh.num_devices(); ++f) {
    int64_t tile = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      int64_t coord = 0;
      for (const AxisRef& a : dims[d]) coord = coord * a.Size(mesh) + a.Coordinate(mesh, f);
      tile = tile * grids[d].tiles + coord;
    }
    placement.push_back({mesh.device(f), tile});
  }
  return Layout::Create(shape, dtype, std::move(grids), std::move(placement));
}

}  // namespace reshard
