// PlanPartialTarget: plans into a layout with a pending reduction (DTensor
// Partial, JAX unreduced targets), from any layout of its shape and dtype
// other than itself. Candidates, priced under the cost model, the cheaper
// of those compared that fits the memory cap the plan (the parts moved
// alike, where they cost no more than the reducing exchange, are taken
// before reducing first is tried):
//   one reducing exchange (Exchange::CreateReducing), each source part (or
//   each tile of each part, within each target tile) routed into one part
//   of the target (PartRoutes), an avg target's parts scaled
//   (PartRoutes::scale); where the target and strategy allow a ragged
//   exchange;
//   from partial sums, where both layouts are named over one plan mesh and
//   the exchange strategy is not asked for: reduce, then route. The source
//   reduced (PlanReduction) onto the target's state with the target's
//   partial axes added to one dim (each dim tried), then one reducing
//   exchange into the target: the reduction is done once, by all devices,
//   instead of each target part receiving the parts it combines;
//   from partial sums over the same plan-mesh axes and op as the target's
//   (the parts numbered alike), unless the exchange strategy is asked for:
//   the parts moved alike. Each part moves as the array without its
//   reduction would, by the named search's structured steps over the other
//   axes, every step between layouts partial over the same axes; the one
//   candidate with no ragged exchange (so `--for jax-cpu` and
//   `Strategy::kCollectives` plan such pairs).
//
// Errors: NotSupported, with the lower bound, where no candidate applies.
#ifndef RESHARD_SRC_PLAN_PARTIAL_TARGET_PLANNER_H_
#define RESHARD_SRC_PLAN_PARTIAL_TARGET_PLANNER_H_

#include <cstdint>

#include "reshard/layout.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

// REQUIRES: target.partial(), same shape and dtype as source.
// default_cap: PlanReshard's default memory cap for these layouts.
Result<PlanResult> PlanPartialTarget(const Layout& source, const Layout& target, const PlannerOptions& options,
                                     int64_t default_cap);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_PARTIAL_TARGET_PLANNER_H_
