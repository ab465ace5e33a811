// Emitters: a collective plan as text that compilers, runtimes and people
// read. Each is a pure function of the plan.
//
//   EmitHlo   an HLO module whose entry computation takes one device's source
//             shard and returns its target shard: the plan's collectives
//             (all-to-all with replica_groups and dimensions, all-gather,
//             collective-permute with source_target_pairs) and local ops
//             (reshape, transpose, pad, slice, dynamic-slice with offsets
//             from partition-id). Replica groups print as lists, or as XLA's
//             iota form above 256 devices on an iota mesh.
//   EmitJax   a self-contained Python module defining reshard(x, mesh): the
//             plan as jax.shard_map over the plan mesh (built from the given
//             mesh's devices by id) with jax.lax collectives over axis names,
//             offsets from jax.lax.axis_index; uneven arrays are padded to
//             their ceil-padded shape first and sliced after (no traffic:
//             XLA stores shards padded).
//   PlanJson  the plan and its costs as JSON (docs/plan_format.md).
//   WritePlanJson  that object as `reshard plan --json` prints it (Python's
//             PlanResult.emit("json") too), written as it is produced.
//
// Errors: NotSupported for a plan with a ragged exchange step (neither
// emitter writes one yet) and, for JAX, layouts without a common mesh
// (shard_map needs one; EmitHlo writes an explicit collective-permute).
#ifndef RESHARD_EMIT_H_
#define RESHARD_EMIT_H_

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "reshard/collective_plan.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

Result<std::string> EmitHlo(const CollectivePlan& plan);
Result<std::string> EmitJax(const CollectivePlan& plan);

struct JsonOptions {
  bool programs = true;     // each step's SPMD program
  bool per_device = true;   // per-device totals
  size_t max_pairs = 4096;  // collective-permute pairs listed per step (the rest counted)
};
nlohmann::ordered_json PlanJson(const PlanResult& result, const JsonOptions& options = {});
// One entry of "per_device" (device index i of plan.devices()), for callers
// that stream that list instead of building it whole.
nlohmann::ordered_json DeviceJson(const CollectivePlan& plan, size_t i);

// The plan as `reshard plan --json` prints it, written as it is produced:
// PlanJson's object, the planner's strategy, topology and target (`for`),
// the transfers of a one-step exchange between layouts without a pending
// reduction (sorted by (from, to); up to 64 devices, or any number with
// `all_transfers`: they grow as devices squared and are never held whole),
// the search's candidates with `candidates`, then per_device row by row.
// InvalidArgument where listing the transfers would take more than 2 GiB of
// memory (after part of the object is written).
struct PlanJsonContext {
  std::string strategy, topology, target;
  bool all_transfers = false;
  bool candidates = false;
};
Status WritePlanJson(const PlanResult& result, const PlanJsonContext& context, std::ostream& out);

// XLA's replica_groups text for a step's groups ("{{0,1},{2,3}}" or "[2,2]<=[4]").
std::string ReplicaGroupsText(const CollectivePlan& plan, const std::vector<int32_t>& axes);

}  // namespace reshard

#endif  // RESHARD_EMIT_H_
