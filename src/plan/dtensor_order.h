// DTensorOrderPath: the steps PyTorch DTensor's redistribute takes between
// two named states, priced under reshard's cost model: a baseline, and a
// candidate plan of PlanReduction (reduction_planner.h).
//
// DTensor (torch.distributed.tensor, greedy transform infos, the default
// shard order) holds one placement per mesh dim and changes one mesh dim at
// a time: first from the innermost mesh dim outwards, replacing a target
// Shard(d) by Replicate() where the mesh dims before it do not shard d as
// the target does (nested shards must be gathered before re-sharding); then
// from the outermost mesh dim inwards, setting each placement to its target.
// Each change is one collective over that mesh dim: Partial -> Replicate an
// all-reduce, Partial -> Shard a reduce-scatter, Shard -> Replicate an
// all-gather, Shard(i) -> Shard(j) an all-to-all (DTensor's GPU path; on CPU
// it gathers instead), Replicate -> Shard a local slice.
//
// Here each plan-mesh axis is a DTensor mesh dim, in order; a state lists
// the axes sharding each tensor dim. nullopt where DTensor has no such
// placements (a tensor dim split against mesh order, which DTensor states
// with _StridedShard and plans by another search; plan-mesh pieces that are
// sub-axes), where the target is partial, or where a change has no single
// structured step (uneven blocks that do not align).
#ifndef RESHARD_SRC_PLAN_DTENSOR_ORDER_H_
#define RESHARD_SRC_PLAN_DTENSOR_ORDER_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "plan/plan_mesh.h"
#include "plan/search_state.h"
#include "plan/structured_step.h"
#include "reshard/layout.h"

namespace reshard {

// DTensor's changes in order: path[i] the edge from the state before it,
// pending[i] the plan-mesh axes whose reduction is still pending before it
// (ascending; none after the last change, the target being plain).
struct DTensorOrder {
  std::vector<std::pair<AxisLists, Edge>> path;
  std::vector<std::vector<int32_t>> pending;
};

// From state `mesh.source`, holding partial values over plan-mesh axes
// `partial` (ascending; empty for none) reduced by `op`, to the plain state
// `mesh.target`.
std::optional<DTensorOrder> DTensorOrderPath(const PlanContext& ctx, const PlanMesh& mesh,
                                             const std::vector<int32_t>& partial, ReduceOp op);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_DTENSOR_ORDER_H_
