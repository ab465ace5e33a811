#include "reshard/hlo_sharding.h"

#include <algorithm>

namespace reshard {
namespace {

std::vector<DimGrid> WholeDims(const std::vector<int64_t>& shape) {
  std::vector<DimGrid> dims;
  for (int64_t n : shape) dims.push_back(DimGrid::Ceil(n, 1));
  return dims;
}

}  // namespace

Result<Layout> HloSharding::ToLayout(const std::vector<int64_t>& shape, DType dtype, const std::optional<Mesh>& mesh) const {
  std::vector<DeviceTile> placement;
  if (std::holds_alternative<Replicated>(kind_)) {
    if (!mesh) return Status::InvalidArgument("{replicated} does not name its devices: give a mesh (--mesh or --devices)");
    for (int64_t i = 0; i < mesh->num_devices(); ++i) placement.push_back({mesh->device(i), 0});
    return Layout::Create(shape, dtype, WholeDims(shape), std::move(placement));
  }
  if (const auto* m = std::get_if<Maximal>(&kind_)) {
    if (mesh) {
      bool found = false;
      for (int64_t i = 0; i < mesh->num_devices(); ++i) {
        found = found || mesh->device(i) == m->device;
        placement.push_back({mesh->device(i), mesh->device(i) == m->device ? 0 : -1});
      }
      if (!found) return Status::InvalidArgument("maximal device " + std::to_string(m->device) + " is not in the mesh " + mesh->ToString());
    } else {
      placement.push_back({m->device, 0});
    }
    return Layout::Create(shape, dtype, WholeDims(shape), std::move(placement));
  }
  const Tiled& t = std::get<Tiled>(kind_);
  const std::vector<int64_t>& td = t.tiles.dims();
  const size_t rank = td.size() - (t.replicate_last ? 1 : 0);
  if (rank != shape.size())
    return Status::InvalidArgument("the sharding tiles " + std::to_string(rank) + " dimensions but the shape has rank " +
                                   std::to_string(shape.size()));
  if (mesh && mesh->num_devices() != t.tiles.num_devices())
    return Status::InvalidArgument("the tile counts multiply to " + std::to_string(t.tiles.num_devices()) +
                                   " devices but the mesh " + mesh->ToString() + " has " + std::to_string(mesh->num_devices()));
  std::vector<int64_t> mesh_ids;
  if (mesh && !mesh->is_iota()) { mesh_ids = mesh->DeviceIds(); std::sort(mesh_ids.begin(), mesh_ids.end()); }
  std::vector<DimGrid> dims;
  for (size_t d = 0; d < rank; ++d) dims.push_back(DimGrid::Ceil(shape[d], td[d]));
  const int64_t repl = t.replicate_last ? td.back() : 1;
  for (int64_t flat = 0; flat < t.tiles.num_devices(); ++flat) {
    const int64_t dev = t.tiles.device(flat);
    if (mesh && (mesh->is_iota() ? dev < 0 || dev >= mesh->num_devices() : !std::binary_search(mesh_ids.begin(), mesh_ids.end(), dev)))
      return Status::InvalidArgument("device id " + std::to_string(dev) + " is not in the mesh " + mesh->ToString());
    placement.push_back({dev, flat / repl});
  }
  return Layout::Create(shape, dtype, std::move(dims), std::move(placement));
}

std::string HloSharding::ToString() const {
  if (std::holds_alternative<Replicated>(kind_)) return "{replicated}";
  if (const auto* m = std::get_if<Maximal>(&kind_)) return "{maximal device=" + std::to_string(m->device) + "}";
  const Tiled& t = std::get<Tiled>(kind_);
  return "{devices=" + t.tiles.ToString() + (t.replicate_last ? " last_tile_dim_replicate" : "") + "}";
}

}  // namespace reshard
