// SearchBound: the A* bound of the planner's search (named_planner.h): a
// lower bound on the time still to come from a state, the largest of
//   - one step latency, unless slices alone reach the target;
//   - over 64 evenly spaced devices, the bytes a device still lacks of its
//     target shard (its target box less its overlap with the box it holds)
//     at the fastest link's rate;
//   - on nodes:K where a node is exactly the plan mesh's minor pieces (an
//     iota mesh cut at the node boundary), the sum of: over the nodes of
//     those devices, the bytes a node lacks (what its devices need of their
//     target shards and no device of the node holds) over its K network
//     links, plus one step latency if it lacks any; and, while the shard is
//     smaller than the target's, the local copy of the least target shard.
// Each is consistent, so the first complete plan taken from the queue is the
// cheapest the search can reach: a step's receives add at most what they
// bring to a device's overlap; a slice never makes the target need less; a
// node gains at most what its devices receive from other nodes, and a step
// takes at least as long as each of them receives, since with nodes as whole
// pieces every device of a group sees the same links and group steps are
// priced exactly for each; the first step to grow the shard to the target's
// is a gather, an all-to-all or the exchange, which lays out its output (a
// permute keeps the shard, a slice shrinks it). The terms of the sum bound
// the receives, the step latency and the copies of a step, which add up.
// The node term is why nodes:K searches stay small: links inside a node are
// far faster than between nodes, so the bytes a device lacks bound little
// there.
//
// A state's boxes are per-dim products, and a node's holdings and needs too
// (it is a product of pieces, each in one dim), so overlaps are kept per dim
// and list of pieces: states share most of their dims.
//
// It keeps references to the PlanContext and the target state, which must
// outlive it, and caches overlaps per dim; not thread-safe (planning is
// single-threaded).
#ifndef RESHARD_SRC_PLAN_SEARCH_BOUND_H_
#define RESHARD_SRC_PLAN_SEARCH_BOUND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plan/plan_mesh.h"
#include "plan/structured_step.h"

namespace reshard {

class SearchBound {
 public:
  SearchBound(const PlanContext& ctx, const AxisLists& target);

  // The bound from state `s`, in picoseconds.
  int64_t Remaining(const AxisLists& s);

  // The state whose neighbours are bounded next: they share most of its
  // dims, which are then found without a lookup.
  void Expanding(const AxisLists& s) {
    parent_.clear();
    parent_dims_ = Overlaps(s);
    parent_ = s;
  }

  // The node term alone (0 where it does not apply): a bound on any step
  // straight to the target, the exchange included.
  int64_t NodeRemaining(const AxisLists& s) { return NodeRemaining(s, Overlaps(s)); }

 private:
  struct Sample {
    int64_t pos;
    std::vector<int64_t> coords;  // per piece
    std::vector<std::pair<int64_t, int64_t>> target;  // per dim
    int64_t volume;
  };
  struct NodeNeeds {
    int64_t base;  // its first mesh position
    std::vector<int64_t> coords;  // of its first position, per piece
    std::vector<std::vector<std::pair<int64_t, int64_t>>> target;  // per dim, disjoint blocks its devices need
    int64_t volume;  // elements in their union
  };
  // Of one dim split by one list of pieces: per sample, the length of its
  // target box it holds; per node, of the blocks its devices need.
  struct DimOverlaps {
    std::vector<int64_t> device, node;
  };

  // The overlaps of each dim of s (valid until the next call).
  const std::vector<const DimOverlaps*>& Overlaps(const AxisLists& s);

  int64_t NodeRemaining(const AxisLists& s, const std::vector<const DimOverlaps*>& dims) const;

  std::vector<int64_t> CoordinatesOf(int64_t pos) const;

  // The box of dim d of the device at `coords`, split by `pieces`.
  std::pair<int64_t, int64_t> Box(const std::vector<int32_t>& pieces, const std::vector<int64_t>& coords,
                                  size_t d) const;

  // The length of the blocks `pieces` cut dim d into.
  int64_t BlockLength(const std::vector<int32_t>& pieces, size_t d) const;

  // The block that the first device of the node at `base` (coordinates of
  // that device) holds when `pieces` cut a dim.
  int64_t FirstBlock(const std::vector<int32_t>& pieces, const std::vector<int64_t>& base) const;

  // The blocks the devices of a node hold past the first device's, when
  // `pieces` cut a dim: the coordinates on pieces inside the node vary,
  // those across nodes are the first device's. Distinct, so the blocks are
  // disjoint.
  void Inside(const std::vector<int32_t>& pieces, std::vector<int64_t>& offsets) const;

  // The non-empty blocks of dim d the devices of the node at `base` hold.
  std::vector<std::pair<int64_t, int64_t>> Blocks(const std::vector<int32_t>& pieces, const std::vector<int64_t>& base,
                                                  size_t d);

  const PlanContext& ctx_;
  const AxisLists& target_;
  int64_t latency_ps_ = 0;
  double fastest_ = 1, node_rate_ = 1, grow_copy_us_ = 0;
  int64_t target_shard_bytes_ = 0;
  int64_t device_ceiling_ps_ = 0;  // the devices' term where a device lacks its whole target box
  std::vector<Sample> samples_;
  size_t first_inside_ = 0;     // pieces from here on lie inside a node
  std::vector<NodeNeeds> nodes_;  // empty where the node term does not apply
  std::unordered_map<std::string, DimOverlaps> cache_;
  AxisLists parent_;
  std::vector<const DimOverlaps*> parent_dims_;
  // Scratch, kept to spare allocations.
  std::string key_;
  std::vector<const DimOverlaps*> dims_;
  std::vector<int64_t> offsets_, seen_;
  std::vector<int32_t> across_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_SEARCH_BOUND_H_
