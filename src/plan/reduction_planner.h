// PlanReduction: plans from a layout with a pending reduction (partial sums)
// to a layout without one (DTensor Partial, JAX unreduced).
//
// A plan reduces once, over every partial axis, then moves the reduced
// array with the named search (named_planner.h), where both layouts are
// named over one plan mesh and the reduction is over whole plan-mesh axes;
// or it is one reducing exchange. Candidates, each priced whole under the
// cost model:
//   all-reduce over the partial axes, then the search (Shardy's order:
//   all-reduce, then slice);
//   for every dim d and every set B of axes that neither split the source nor
//   hold its parts: slice over B onto d (local), reduce-scatter over the
//   partial axes onto d, then the search. B shares the reduction among the
//   replicas of the partial values: each reduces only its slice, so the
//   busiest device receives less than a reduce-scatter of the whole.
//   the reducing exchange, one step (Exchange::CreateReducing): every
//   element's contributions sent straight to the devices that keep it and
//   combined there, for any pair of layouts (explicit ones, uneven splits,
//   reductions not over whole mesh axes); where the target has a ragged
//   exchange and the strategy allows it.
// The cheapest that fits the memory cap is the plan (the default cap is
// soft, as in PlanReshard); the all-reduce candidate is its baseline
// "all_reduce_first". DTensor's order (dtensor_order.h) is the baseline
// "dtensor_order" where DTensor has the placements, and a candidate (its
// steps keep the reduction pending over the axes not reached yet) where the
// op is not avg and no step is an all-reduce leaving an axis pending or a
// step from partial sums whose reducing exchange moves other bytes than
// priced.
// Under the exchange strategy the plan is the reducing exchange.
//
// Errors: NotSupported, with the lower bound, where nothing moves the data
// with what the target and strategy allow (the layouts not named over one
// mesh, or the reduction not over whole mesh axes, and no ragged exchange).
#ifndef RESHARD_SRC_PLAN_REDUCTION_PLANNER_H_
#define RESHARD_SRC_PLAN_REDUCTION_PLANNER_H_

#include <cstdint>
#include <string>

#include <optional>
#include <utility>
#include <vector>

#include "plan/exchange_step.h"
#include "plan/search_state.h"
#include "plan/structured_step.h"
#include "reshard/collective_plan.h"
#include "reshard/layout.h"
#include "reshard/plan_stats.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

// REQUIRES: source.partial(), !target.partial(), same shape and dtype.
// default_cap: PlanReshard's default memory cap for these layouts.
Result<PlanResult> PlanReduction(const Layout& source, const Layout& target, const PlannerOptions& options,
                                 int64_t default_cap);

// NotSupported(`why`), with the bytes any plan must receive (the lower bound).
Status RefuseWithBound(const Layout& source, const Layout& target, const std::string& why);

// What the planners from and into partial sums (partial_target_planner.h) share.

// The reducing exchange (Exchange::CreateReducing) as the one step from
// `source` to `target`, priced over `topology`; relayed (relay.h) where
// that costs less and does not take it over `cap` bytes a device (0: no
// cap), which direct delivery kept.
Result<PlanStep> ReducingExchangeStep(const Layout& source, const Layout& target, const Topology& topology,
                                      int64_t cap = 0);
// How the search orders a priced step, and a path of drafted edges.
Cost StepCost(const PlanStep& s);
// The reducing exchange of one pair as a planner's candidate: built at most
// once (its transfers are every part into every device, devices x parts of
// them), and only where the target has a ragged exchange and the strategy
// is not kCollectives (allowed()). Both planners from partial sums decide
// through it whether to build it.
class ReducingExchangeCandidate {
 public:
  // The layouts and options must outlive it. `cap`: the memory cap its
  // relays must not break (ReducingExchangeStep; 0: none).
  ReducingExchangeCandidate(const Layout& source, const Layout& target, const PlannerOptions& options,
                            int64_t cap = 0);
  bool allowed() const { return allowed_; }
  // Builds it, where allowed and not built yet.
  Status Draft();
  // Builds it (where allowed) unless its floors (ReducingExchangeFloor, and
  // the bound's bytes: FloorCost) show that it cannot be chosen over a rival
  // plan costing `rival`: its peak floor over `cap`, or its cost floor above
  // `rival`, or equal to it where the rival wins ties. Then nothing is built
  // and the result is its line at its floors (UndraftedExchange), noted as
  // over the cap or as costing more than (no less than, where the rival wins
  // ties) `rival_name`. Where no floor applies (parts routed tile by tile),
  // builds it. `bound`: the pair's ComputeLowerBound.
  Result<std::optional<PlanCandidate>> DraftUnlessOutpriced(const LowerBound& bound, const Cost& rival,
                                                            bool rival_wins_ties, const std::string& rival_name,
                                                            int64_t cap);
  // The built step; nullopt before a Draft, or where not allowed.
  std::optional<PlanStep>& step() { return step_; }
  // The candidate line of the built step: "over the memory cap" where its
  // peak exceeds `cap`, else "chosen" or "priced". REQUIRES: step().
  PlanCandidate Line(int64_t cap, bool chosen) const;

 private:
  const Layout& source_;
  const Layout& target_;
  const Topology& topology_;
  bool allowed_;
  int64_t cap_;
  std::optional<PlanStep> step_;
};
Cost PathCost(const std::vector<std::pair<AxisLists, Edge>>& path);
// The states of ctx's plan mesh that one reduction over the axes `group`
// from state `s0` may reach (an all-reduce in place, or a reduce-scatter
// onto one dim, after a local slice over a set B of free axes: those
// neither in `s0` nor in `group` nor in `pending`, the axes a reduction
// stays pending over), fewest new axes first: for every dim d and every B
// (every subset where there are at most 4 free axes, else only the empty
// one), the group
// and B on d in every order (up to 4 axes), or the group on d and B on
// another dim. B shares the reduction among the
// replicas of the partial values: each reduces only its slice.
std::vector<AxisLists> ReducedStates(const PlanContext& ctx, const AxisLists& s0, const std::vector<int32_t>& group,
                                     const std::vector<int32_t>& pending);
// How many of those the planners draft at most, in that order.
constexpr size_t kMaxReductions = 64;
// A reduction from a state to `to` (drafted as `d`) as a search edge.
Edge ReductionEdge(const PlanContext& ctx, const AxisLists& to, const StepDraft& d);
// The plan of the reducing exchange alone (`exchange`, where the target and
// strategy allow one) under `cap`, soft unless the caller set it; else
// NotSupported with the bound, saying `why`. `bound`: the layouts' lower bound.
Result<PlanResult> ReducingExchangeOnly(const Layout& source, const Layout& target, const PlannerOptions& options,
                                        int64_t cap, const LowerBound& bound, std::optional<PlanStep> exchange,
                                        const std::string& why);
// The steps along `path` (states of ctx's plan mesh), each between layouts
// partial (reduced by the source's op) over the plan-mesh axes still
// pending: pending[i] before step i, pending[i + 1] after it, and
// `target_pending` after the last; priced exactly. Empty where a step has
// no structured form after all, is an all-reduce that leaves an axis
// pending, would not run as priced (from partial sums a step runs as the
// reducing exchange of its parts), or the last does not reach `target`.
std::vector<PlanStep> PendingSteps(const std::vector<std::pair<AxisLists, Edge>>& path,
                                   const std::vector<std::vector<int32_t>>& pending, const PlanContext& ctx,
                                   const Layout& source, const Layout& target,
                                   const std::vector<int32_t>& target_pending = {});

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_REDUCTION_PLANNER_H_
