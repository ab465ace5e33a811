// DTensorSharding: PyTorch DTensor placements over a device mesh, one per
// mesh dim: Shard(d) splits tensor dim d along that mesh dim, Replicate()
// copies. Several mesh dims sharding one tensor dim nest in mesh-dim order,
// and each level splits the previous chunk with torch.chunk (chunks of
// ceil(n/k), fewer when that runs out), which differs from XLA's single ceil
// split: 10 over 2x3 is [0,2,4,5,7,9,10] here and [0,2,4,6,8,10,10] in XLA.
// _StridedShard(d, split_factor=s), torch's form of right-to-left sharding
// (FSDP2 over tensor parallel), splits the current chunk into s pieces,
// each piece into the mesh dim's size, and gives member c the c-th part of
// every piece, kept in global order. Partial(op) marks a mesh dim whose
// members hold partial values of one array: the layout carries a pending
// reduction (layout.h) over every Partial mesh dim, parts numbered
// row-major over them in mesh order; all Partial dims must share one op.
// The text form "[Shard(0), Replicate()]" is in dtensor_text.h (notation
// library).
// Immutable value.
#ifndef RESHARD_DTENSOR_H_
#define RESHARD_DTENSOR_H_

#include <cstdint>
#include <vector>

#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/status.h"

namespace reshard {

struct Placement {
  enum class Kind { kShard, kReplicate, kStridedShard, kPartial };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;           // kShard, kStridedShard; negative counts from the last dim, as in PyTorch
  int64_t split_factor = 1;  // kStridedShard only, >= 1
  ReduceOp reduce_op = ReduceOp::kSum;  // kPartial only
  friend bool operator==(const Placement&, const Placement&) = default;
};

// REQUIRES nothing; fails unless placements.size() == mesh.num_axes(),
// every Shard dim is < shape.size() and every split_factor is >= 1.
// Example: [_StridedShard(0, split_factor=2), Shard(0)] on mesh dp=2,tp=2
// over f32[8] puts rows [2dp+4tp, 2dp+4tp+2) on device (dp, tp).
Result<Layout> PlacementsToLayout(const std::vector<Placement>& placements, const Mesh& mesh,
                                  const std::vector<int64_t>& shape, DType dtype);
// The placements over `mesh` whose layout equals `layout`, if any. A tensor
// dim split over mesh dims against mesh order is stated with _StridedShard,
// each mesh dim's factor the product of the more major mesh dims after it
// (the form FSDP2 over tensor parallel makes). Other split factors read but
// have no printed form: their layouts are refused here.
Result<std::vector<Placement>> PlacementsFromLayout(const Layout& layout, const Mesh& mesh);

}  // namespace reshard

#endif  // RESHARD_DTENSOR_H_
