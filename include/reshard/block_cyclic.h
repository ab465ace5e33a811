// Block-cyclic layouts (ScaLAPACK style): each dim is cut into blocks of
// `block[d]` elements, and block i along dim d goes to process row
// i % grid[d]. The device at process coordinates p (row-major over grid)
// is the p-th device of the device list. A device's local buffer holds its
// blocks concatenated per dim in global order.
//
// Text: "blockcyclic(block=[64,64], grid=[2,4])", parsed and printed by
// block_cyclic_text.h (notation library). Immutable value.
#ifndef RESHARD_BLOCK_CYCLIC_H_
#define RESHARD_BLOCK_CYCLIC_H_

#include <cstdint>
#include <vector>

#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/status.h"

namespace reshard {

// The most blocks all dims may have together (the sum over dims of their block
// counts, 2^26), so that a layout's size stays bounded whatever the input.
inline constexpr int64_t kMaxBlocks = int64_t{1} << 26;

struct BlockCyclic {
  std::vector<int64_t> block;  // per dim, >= 1
  std::vector<int64_t> grid;   // per dim, >= 1
  friend bool operator==(const BlockCyclic&, const BlockCyclic&) = default;
};

// `devices` lists prod(grid) device ids in row-major grid order (empty: iota).
// Fails beyond kMaxDevices processes or kMaxBlocks blocks.
Result<Layout> BlockCyclicToLayout(const BlockCyclic& bc, const std::vector<int64_t>& devices,
                                   const std::vector<int64_t>& shape, DType dtype);

}  // namespace reshard

#endif  // RESHARD_BLOCK_CYCLIC_H_
