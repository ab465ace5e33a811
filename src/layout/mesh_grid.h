// Builds the grid layout of any sharding stated over mesh axes: each tensor
// dim is split by the product of its (sub-)axes, and a device's tile
// coordinate is the mixed-radix number of its coordinates along them.
// The split rule is XLA's (one ceil split) or DTensor's (torch.chunk applied
// axis after axis to the previous chunk).
#ifndef RESHARD_SRC_LAYOUT_MESH_GRID_H_
#define RESHARD_SRC_LAYOUT_MESH_GRID_H_

#include <vector>

#include "reshard/layout.h"
#include "reshard/named_sharding.h"

namespace reshard {

enum class SplitRule { kCeil, kNestedChunk };

Result<Layout> BuildMeshLayout(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                               const std::vector<std::vector<AxisRef>>& dims, SplitRule rule);

}  // namespace reshard

#endif  // RESHARD_SRC_LAYOUT_MESH_GRID_H_
