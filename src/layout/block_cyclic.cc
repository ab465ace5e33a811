#include "reshard/block_cyclic.h"

#include "layout/checked_math.h"

namespace reshard {

Result<Layout> BlockCyclicToLayout(const BlockCyclic& bc, const std::vector<int64_t>& devices,
                                   const std::vector<int64_t>& shape, DType dtype) {
  if (bc.block.size() != shape.size() || bc.grid.size() != shape.size())
    return Status::InvalidArgument("block-cyclic block and grid need one entry per dimension (rank " +
                                   std::to_string(shape.size()) + ")");
  // Check every size before building anything: hostile input must not allocate.
  int64_t procs = 1, cells = 0, bytes = ByteSize(dtype);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (bc.block[d] < 1 || bc.grid[d] < 1) return Status::InvalidArgument("block and grid entries must be >= 1");
    if (shape[d] < 0) return Status::InvalidArgument("dimension " + std::to_string(d) + " has a negative extent");
    if (!CheckedMul(procs, bc.grid[d], &procs) || procs > kMaxDevices)
      return Status::InvalidArgument("the process grid has more than " + std::to_string(kMaxDevices) + " processes");
    if (!CheckedMul(bytes, shape[d], &bytes)) return Status::InvalidArgument("the array's byte size overflows int64");
    cells += shape[d] == 0 ? 1 : CeilDiv(shape[d], bc.block[d]);
    if (cells > kMaxBlocks)
      return Status::InvalidArgument("more than " + std::to_string(kMaxBlocks) + " blocks along the dimensions together");
  }
  std::vector<DimGrid> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t blocks = shape[d] == 0 ? 0 : CeilDiv(shape[d], bc.block[d]);
    DimGrid g;
    g.tiles = static_cast<int32_t>(bc.grid[d]);
    g.cuts.push_back(0);
    for (int64_t i = 0; i < blocks; ++i) {
      g.cuts.push_back(MulClamp(i + 1, bc.block[d], shape[d]));
      g.cell_tile.push_back(static_cast<int32_t>(i % bc.grid[d]));
    }
    if (blocks == 0) { g.cuts.push_back(0); g.cell_tile.push_back(0); }
    dims.push_back(std::move(g));
  }
  if (!devices.empty() && static_cast<int64_t>(devices.size()) != procs)
    return Status::InvalidArgument("the process grid has " + std::to_string(procs) + " processes but " +
                                   std::to_string(devices.size()) + " devices were given");
  std::vector<DeviceTile> placement;
  for (int64_t p = 0; p < procs; ++p) placement.push_back({devices.empty() ? p : devices[p], p});
  return Layout::Create(shape, dtype, std::move(dims), std::move(placement));
}

}  // namespace reshard
