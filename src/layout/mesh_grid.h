// Builds the grid layout of any sharding stated over mesh axes: each tensor
// dim is split by the product of its (sub-)axes, and a device's tile
// coordinate is the mixed-radix number of its coordinates along them.
// The split rule is XLA's (one ceil split) or DTensor's (torch.chunk applied
// axis after axis to the previous chunk). Under DTensor's rule an axis may
// carry a split factor s > 1 (_StridedShard): the previous chunk is cut into
// s pieces, each piece into the axis size, and member c holds the c-th part
// of every piece, in global order.
#ifndef RESHARD_SRC_LAYOUT_MESH_GRID_H_
#define RESHARD_SRC_LAYOUT_MESH_GRID_H_

#include <vector>

#include "reshard/layout.h"
#include "reshard/named_sharding.h"

namespace reshard {

enum class SplitRule { kCeil, kNestedChunk };

// split_factors: empty, or per dim one factor (>= 1) per axis of dims[d];
// only kNestedChunk reads it. partial_axes: the (sub-)axes of a pending
// reduction `op`; a device's part is its row-major coordinate over them.
Result<Layout> BuildMeshLayout(const Mesh& mesh, const std::vector<int64_t>& shape, DType dtype,
                               const std::vector<std::vector<AxisRef>>& dims, SplitRule rule,
                               const std::vector<std::vector<int64_t>>& split_factors = {},
                               const std::vector<AxisRef>& partial_axes = {}, ReduceOp op = ReduceOp::kSum);
// Whether BuildMeshLayout(mesh, layout.shape(), layout.dtype(), ...) equals
// `layout`, without building it where the grids and every device's tile
// agree (no pending reduction); errors as BuildMeshLayout's.
Result<bool> IsMeshLayout(const Layout& layout, const Mesh& mesh, const std::vector<std::vector<AxisRef>>& dims,
                          SplitRule rule, const std::vector<std::vector<int64_t>>& split_factors,
                          const std::vector<AxisRef>& partial_axes, ReduceOp op);

// The mesh axes over which `layout` holds partial values: those along which
// some neighbours hold one non-empty tile in different parts, in mesh
// order. Callers rebuild the candidate and compare layouts.
std::vector<int64_t> PartialMeshAxes(const Layout& layout, const Mesh& mesh);

}  // namespace reshard

#endif  // RESHARD_SRC_LAYOUT_MESH_GRID_H_
