// DTensorSharding: PyTorch DTensor placements over a device mesh, one per
// mesh dim: Shard(d) splits tensor dim d along that mesh dim, Replicate()
// copies. Several mesh dims sharding one tensor dim nest in mesh-dim order,
// and each level splits the previous chunk with torch.chunk (chunks of
// ceil(n/k), fewer when that runs out), which differs from XLA's single ceil
// split: 10 over 2x3 is [0,2,4,5,7,9,10] here and [0,2,4,6,8,10,10] in XLA.
// Partial() and _StridedShard are refused as not supported. The text form
// "[Shard(0), Replicate()]" is in dtensor_text.h (notation library).
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
  enum class Kind { kShard, kReplicate };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;  // kShard only; negative counts from the last dim, as in PyTorch
  friend bool operator==(const Placement&, const Placement&) = default;
};

// REQUIRES nothing; fails unless placements.size() == mesh.num_axes() and
// every Shard dim is < shape.size().
Result<Layout> PlacementsToLayout(const std::vector<Placement>& placements, const Mesh& mesh,
                                  const std::vector<int64_t>& shape, DType dtype);
// The placements over `mesh` whose layout equals `layout`, if any.
Result<std::vector<Placement>> PlacementsFromLayout(const Layout& layout, const Mesh& mesh);

}  // namespace reshard

#endif  // RESHARD_DTENSOR_H_
