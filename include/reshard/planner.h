// PlanReshard: the cheapest plan of real collectives between two layouts,
// under a topology's alpha-beta cost model, a per-device memory cap and the
// collectives a target has.
//
// Where both layouts are named shardings over one mesh (given, or found from
// the device count's factors), the planner searches (A*, deterministic)
// over named states of the plan mesh (collective_plan.h): each edge one
// structured step (slice, all-gather, all-to-all over any set of axes between
// any dims at once, collective-permute), plus the ragged exchange from any
// explored state straight to the target (hierarchical plans: structured steps
// inside nodes, then one exchange across). The search expands at most 2048
// states (then the cheapest complete plan found so far is taken). Otherwise
// (no common mesh) the plan is a collective-permute where only the devices
// differ, or the one-step exchange. Costs order plans by modeled time, then
// bytes received by the busiest device, then bytes received in all, then
// fewer ragged exchanges, then fewer steps.
//
// Baselines, costed under the same model: "full_rematerialization" (XLA's
// fallback: all-gather everything, slice) and "shardy" (one axis move at a
// time: slices first, an all-to-all per axis moved between dims,
// collective-permutes where axes are out of order, all-gathers last). The
// returned plan is never costlier than a baseline that fits the cap.
//
// Errors: InvalidArgument for mismatched layouts or a memory cap no plan fits
// (the message names the least peak found); NotSupported when the target
// lacks every collective that could move the data, including layouts with a
// pending reduction that no plan the target allows can reach (the message
// gives their lower bound).
#ifndef RESHARD_PLANNER_H_
#define RESHARD_PLANNER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/plan_stats.h"
#include "reshard/status.h"
#include "reshard/topology.h"

namespace reshard {

enum class Strategy { kAuto, kExchange, kCollectives };
Result<Strategy> ParseStrategy(std::string_view text);  // "auto", "exchange", "collectives"
std::string_view StrategyName(Strategy s);

// Where the plan will run, and so which collectives exist. Only jax-cpu
// lacks the ragged exchange (XLA:CPU has no ragged-all-to-all).
enum class PlanTarget { kAny, kXla, kJaxCpu, kJaxGpu, kMpi, kNccl };
Result<PlanTarget> ParsePlanTarget(std::string_view text);  // "any", "xla", "jax-cpu", "jax-gpu", "mpi", "nccl"
std::string_view PlanTargetName(PlanTarget t);
bool HasRaggedExchange(PlanTarget t);

struct PlannerOptions {
  Strategy strategy = Strategy::kAuto;
  Topology topology = Topology::Flat();
  // Most bytes one device may hold during a step. 0: the default,
  // 2 x (largest source shard + largest target shard): room for both buffers
  // and their staging, never enough to gather the whole array unless the
  // layouts nearly hold it.
  int64_t memory_cap_bytes = 0;
  PlanTarget target = PlanTarget::kAny;
  std::vector<Mesh> meshes;  // meshes the layouts were stated over, tried first
};

struct BaselineCost {
  std::string name;
  int64_t max_recv_bytes = 0, total_bytes = 0, collectives = 0, peak_bytes = 0;
  double time_us = 0;
  std::vector<std::string> ops = {};
};

// A complete plan the search priced (for --explain).
struct PlanCandidate {
  std::vector<std::string> steps = {};  // "all-to-all over {x,y}: [{y}, {}, {x}] -> [{}, {x,y}, {}]"
  double time_us = 0;
  int64_t max_recv_bytes = 0, peak_bytes = 0;
  std::string note = {};             // "chosen", "baseline", "over the memory cap", ...
};

struct PlanResult {
  CollectivePlan plan;
  LowerBound lower_bound;
  std::vector<BaselineCost> baselines = {};
  std::vector<PlanCandidate> candidates = {};
  int64_t memory_cap_bytes = 0;   // the cap the plan was made under; 0: none
  bool memory_cap_lifted = false;  // no plan fit the default cap, so none was applied
  int64_t states_explored = 0;
};

Result<PlanResult> PlanReshard(const Layout& source, const Layout& target, const PlannerOptions& options);

}  // namespace reshard

#endif  // RESHARD_PLANNER_H_
