#include "plan/partial_target_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "layout/mesh_grid.h"
#include "plan/named_planner.h"
#include "plan/plan_builder.h"
#include "plan/plan_mesh.h"
#include "plan/reduction_planner.h"
#include "plan/search_state.h"
#include "plan/structured_step.h"
#include "reshard/plan_stats.h"

namespace reshard {
namespace {

// Reduce first, then route: the partial source reduced onto a plain layout
// M (PlanReduction: the search, with its structured reductions), then one
// reducing exchange from M into the target. M is the target's own state
// with its partial axes added to one dim (after that dim's axes, so that,
// with even splits, each device's tile of M lies inside its target tile):
// every element then sits once in each target part's tile, and a part's
// replicas fetch it from one another. One candidate per dim and order of
// the partial axes; the cheapest that fits `cap` on the layouts' devices
// (`uncapped`: reductions that lifted their own default cap count too).
// nullopt where none applies.
struct TwoLeg {
  PlanResult first;  // source -> M
  PlanStep route;    // M -> target
  Cost cost;
};

// Every order of the target's partial axes is tried up to this many (the
// order decides which device of a part holds which piece of M; any order
// routes for free where the target's parts have one device each).
constexpr size_t kMaxRouteOrderAxes = 3;

Cost PlanCost(const CollectivePlan& plan) {
  Cost c;
  for (const PlanStep& s : plan.steps()) c = c + StepCost(s);
  return c;
}

std::optional<TwoLeg> ReduceThenRoute(const Layout& source, const Layout& target, const PlannerOptions& options,
                                      int64_t cap, int64_t default_cap, bool uncapped) {
  const int64_t node = options.topology.kind() == Topology::Kind::kNodes ? options.topology.devices_per_node() : 1;
  std::optional<PlanMeshes> pm = FindPlanMesh(source.WithoutReduction(), target.WithoutReduction(), options.meshes, node);
  if (!pm || source.devices() != target.devices()) return std::nullopt;
  const PlanMesh& mesh = pm->coarse;
  std::vector<int32_t> axes;
  for (int64_t a : PartialMeshAxes(target, mesh.mesh)) axes.push_back(static_cast<int32_t>(a));
  Result<Layout> stated =
      StateLayout(mesh, mesh.target, target.shape(), target.dtype(), axes, target.reduction().op);
  if (axes.empty() || !stated.ok() || !(*stated == target)) return std::nullopt;
  const PlanContext ctx(mesh, options.topology, target.shape(), target.element_bytes());
  std::optional<TwoLeg> best;
  std::sort(axes.begin(), axes.end());
  const bool all_orders = axes.size() <= kMaxRouteOrderAxes;
  do {
    for (size_t d = 0; d < mesh.target.size(); ++d) {
      AxisLists m = mesh.target;
      m[d].insert(m[d].end(), axes.begin(), axes.end());
      const Layout reduced = StateLayout(mesh, m, target.shape(), target.dtype());
      if (reduced.devices() != target.devices()) continue;
      Result<PlanResult> first = PlanReduction(source, reduced, options, default_cap);
      if (!first.ok() || (first->memory_cap_lifted && !uncapped)) continue;
      Result<PlanStep> route = ReducingExchangeStep(reduced, target, options.topology);
      if (!route.ok()) continue;
      // Where the reduction leaves padded shards (its last step structured,
      // or a named exchange), the route starts from them, as a named
      // exchange step does (NamedPlanner::Finalize); after one reducing
      // exchange the buffers are exact, as the route's own.
      const PlanStep& last = first->plan.steps().back();
      if (last.op != StepOp::kExchange || !last.input_spec.empty())
        NamedPlanner::OnPaddedShards(*route, ctx, m, mesh.target, axes);
      if (route->peak_bytes.Max() > cap || first->plan.totals().peak_bytes > cap) continue;
      const Cost cost = PlanCost(first->plan) + StepCost(*route);
      if (!best || cost < best->cost) best = TwoLeg{std::move(*first), std::move(*route), cost};
    }
  } while (all_orders && std::next_permutation(axes.begin(), axes.end()));
  return best;
}

}  // namespace

Result<PlanResult> PlanPartialTarget(const Layout& source, const Layout& target, const PlannerOptions& options,
                                     int64_t default_cap) {
  for (const Layout* l : {&source, &target})
    if (l->partial())
      if (Status reducible = CheckReducible(l->dtype(), l->reduction().op); !reducible.ok())
        return RefuseWithBound(source, target, reducible.message());
  RESHARD_RETURN_IF_ERROR(Exchange::Validate(source.WithoutReduction(), target.WithoutReduction()));
  const int64_t cap = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : default_cap;
  std::optional<PlanStep> exchange;
  if (options.strategy != Strategy::kCollectives && HasRaggedExchange(options.target)) {
    RESHARD_ASSIGN_OR_RETURN(PlanStep step, ReducingExchangeStep(source, target, options.topology));
    exchange = std::move(step);
  }
  // From partial sums: reducing first may move less than sending parts
  // (not tried where the one exchange already receives the bound). Under
  // the default cap, where neither fits it, both are priced without it.
  const LowerBound bound = ComputeLowerBound(source, target);
  if (exchange && source.partial() && options.strategy != Strategy::kExchange &&
      exchange->recv_bytes.Max() > bound.max_recv_bytes) {
    const bool over = exchange->peak_bytes.Max() > cap;
    std::optional<TwoLeg> two = ReduceThenRoute(source, target, options, cap, default_cap, /*uncapped=*/false);
    const bool lifted = !two && over && options.memory_cap_bytes <= 0;
    if (lifted) two = ReduceThenRoute(source, target, options, INT64_MAX, default_cap, /*uncapped=*/true);
    if (two && ((over && !lifted) || two->cost < StepCost(*exchange))) {
      PlanResult r{CollectivePlan{}, bound};
      r.memory_cap_bytes = lifted ? 0 : cap;
      r.memory_cap_lifted = lifted;
      r.states_explored = two->first.states_explored;
      if (lifted)
        r.candidates.push_back(PlanCandidate{
            {}, 0, 0, 0, fmt::format("no plan fits the default memory cap of {} B; planned without a cap", cap)});
      r.candidates.push_back(PlanCandidate{{"reducing exchange"}, exchange->time_us, exchange->recv_bytes.Max(),
                                           exchange->peak_bytes.Max(),
                                           over && !lifted ? "over the memory cap" : "priced"});
      PlanCandidate chosen{{}, static_cast<double>(two->cost.time_ps) / 1e6, two->cost.bytes,
                           std::max(two->first.plan.totals().peak_bytes, two->route.peak_bytes.Max()), "chosen"};
      for (const PlanCandidate& c : two->first.candidates)
        if (c.note == "chosen") chosen.steps = c.steps;
      if (chosen.steps.empty())
        for (const PlanStep& s : two->first.plan.steps()) chosen.steps.emplace_back(StepOpName(s.op));
      chosen.steps.push_back("reducing exchange into the target's parts");
      r.candidates.push_back(std::move(chosen));
      PlanBuilder builder(source, target);
      if (two->first.plan.mesh()) builder.SetMesh(*two->first.plan.mesh());
      for (const PlanStep& s : two->first.plan.steps()) builder.Add(s);
      builder.Add(std::move(two->route));
      r.plan = builder.Finish();
      return r;
    }
  }
  return ReducingExchangeOnly(source, target, options, cap, bound, std::move(exchange),
                              "a target with a pending reduction is reached by the reducing exchange alone");
}

}  // namespace reshard
