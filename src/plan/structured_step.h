// Structured steps between two named states over the plan mesh: which single
// collective (or local step) goes from one to the other, its SPMD program,
// and its modeled cost.
//
// A state lists, per tensor dim, the plan-mesh axes that split it (major to
// minor); a device's shard along dim d is ceil(n_d / K_d) long (K_d the
// product of the dim's axis sizes), padded past n_d. Between states `from`
// and `to`, each dim keeps its longest common prefix P and trades the suffix
// S (from) for the suffix T (to):
//   slice               no dim has S, the T axes are unused: local dynamic slice
//   all-gather          no dim has T: gather the S axes
//   all-to-all          S axes == T axes as sets, and no dim has both: one
//                       all-to-all over their union (several axes between several
//                       dims at once, with local reshapes and transposes)
//   collective-permute  every dim keeps its shard count: devices swap shards
// A dim that changes must keep its blocks aligned: either P is empty (the
// whole dim is one block; padding is trimmed or added locally) or the block
// of extent n / K(P) is the same padded length in both states. Otherwise no
// single structured step exists (the planner then gathers further, or uses
// the ragged exchange).
#ifndef RESHARD_SRC_PLAN_STRUCTURED_STEP_H_
#define RESHARD_SRC_PLAN_STRUCTURED_STEP_H_

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plan/plan_mesh.h"
#include "reshard/collective_plan.h"
#include "reshard/topology.h"

namespace reshard {

struct PlanContext {
  const PlanMesh* plan_mesh = nullptr;
  const Topology* topology = nullptr;
  std::vector<int64_t> shape;
  int64_t element_bytes = 4;
  std::vector<int64_t> axis_sizes;    // per plan-mesh axis
  std::vector<int64_t> axis_strides;  // mesh positions between neighbours along each axis

  PlanContext(const PlanMesh& pm, const Topology& topo, std::vector<int64_t> shape, int64_t element_bytes);
  int64_t num_devices() const { return plan_mesh->mesh.num_devices(); }
  // Padded local shape of a state.
  std::vector<int64_t> ShardShape(const AxisLists& state) const;
  void ShardShape(const AxisLists& state, std::vector<int64_t>& out) const;
  int64_t ShardBytes(const AxisLists& state) const;
  int64_t Coordinate(int64_t pos, int32_t axis) const { return (pos / axis_strides[axis]) % axis_sizes[axis]; }
  // GroupTime's cost lines per set of axes, a bit each (a plan mesh has at
  // most 24 axes: each of size 2 or more, over at most 2^24 devices).
  // Planning is single-threaded.
  mutable std::unordered_map<uint64_t, std::vector<std::pair<double, double>>> group_cost_cache;
};

// One step drafted between two states: every device sends and receives the
// same (send_bytes, recv_bytes, messages), except for a collective-permute,
// where only the pairs of its program op (a detailed draft's) move.
struct StepDraft {
  StepOp op = StepOp::kCopy;
  std::vector<int32_t> group;
  std::vector<ProgramOp> program;
  int64_t send_bytes = 0, recv_bytes = 0, messages = 0;  // per device (permute: per mover)
  int64_t peak_bytes = 0;                                // per device
  double time_us = 0;
};

// The single structured step from `from` to `to`, if one exists.
// `detailed` = false skips what only the final plan needs: the program (its
// peak is worked out from the shapes alone) and a permute's pairs (its time
// is then priced at the network link, an upper estimate).
std::optional<StepDraft> DraftStep(const PlanContext& ctx, const AxisLists& from, const AxisLists& to,
                                   bool detailed = true);

// The index of the shard that plan-mesh position `pos` holds in `state`
// (row-major over the state's axes, dim by dim).
int64_t ShardIndexAt(const PlanContext& ctx, const AxisLists& state, int64_t pos);
// How many devices a collective-permute from `from` to `to` moves (the
// pairs of DraftStep's detailed draft): those whose shard index changes.
// O(devices), nothing listed.
int64_t PermuteMovers(const PlanContext& ctx, const AxisLists& from, const AxisLists& to);

// The reduction of partial values over plan-mesh axes `group` (every axis of
// the pending reduction, ascending), from state `from` to `to`: an
// all-reduce where `to == from` (every member keeps the whole reduced
// shard), else a reduce-scatter. There every dim of `to` extends its list
// in `from`; one dim's extension holds every group axis, in any order,
// interleaved with axes that split nothing in `from`; other dims' extensions
// hold only such axes. Those axes are sliced locally inside the step (a
// dynamic slice of their digit), so each replica of the partial values
// reduces only its share; the group axes' digits go to the front, one chunk
// per member. Extended dims keep the all-gather's alignment rule. nullopt
// for any other pair. A reduce-scatter receives k - 1 chunks of the output
// shard (what the all-gather back would); an all-reduce (a reduce-scatter,
// then an all-gather of the reduced chunks) twice ceil(shard / k).
std::optional<StepDraft> DraftReduction(const PlanContext& ctx, const AxisLists& from, const AxisLists& to,
                                        const std::vector<int32_t>& group, ReduceOp op, bool detailed = true);

// The time of one collective where every device exchanges `bytes` with each
// other member of its group over `axes`, ascending (the slowest of 64 evenly
// spaced devices, or of all where there are fewer).
double GroupTime(const PlanContext& ctx, const std::vector<int32_t>& axes, int64_t bytes);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_STRUCTURED_STEP_H_
