#include "plan/partial_target_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "layout/mesh_grid.h"
#include "plan/named_planner.h"
#include "plan/exchange_step.h"
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
  if (!pm || !source.SameDevices(target)) return std::nullopt;
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
      if (!reduced.SameDevices(target)) continue;
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

// The parts moved alike: from partial sums over the same plan-mesh axes and
// op as the target's, each part moves as the array without its reduction
// would. The named search plans the two layouts without their reduction,
// with no ragged exchange; it adds only target axes to a state, so no state
// it passes through uses a partial axis, and each step, between layouts
// partial over those axes (PendingSteps), moves every part within itself
// (taken where each step's parts move as priced and its routes keep every
// part in itself, no collective-permute pairs devices of different parts,
// and part numbers follow the mesh). The cheapest path under `cap`, as
// steps, with its cost and the states the search explored; nullopt where
// the layouts are not so named or no path qualifies. `no_path`: the search
// found no path under `cap` (the one failure a higher cap could change).
struct SameParts {
  std::vector<PlanStep> steps;
  Mesh mesh;
  Cost cost;
  int64_t peak = 0, explored = 0;
};

// MovePartsAlike over one plan mesh.
std::optional<SameParts> MovePartsAlikeOver(const PlanMesh& mesh, const Layout& source, const Layout& target,
                                            const Layout& plain_source, const Layout& plain_target,
                                            const PlannerOptions& options, int64_t cap, bool& no_path) {
  no_path = false;
  std::vector<int32_t> group;
  for (int64_t a : PartialMeshAxes(source, mesh.mesh)) group.push_back(static_cast<int32_t>(a));
  std::vector<int32_t> target_group;
  for (int64_t a : PartialMeshAxes(target, mesh.mesh)) target_group.push_back(static_cast<int32_t>(a));
  // The target's partial axes: the source's, or some of them, the others
  // (`dropped`) reduced first (not for avg: its parts would scale).
  std::sort(group.begin(), group.end());
  std::sort(target_group.begin(), target_group.end());
  if (target_group.empty() || !std::includes(group.begin(), group.end(), target_group.begin(), target_group.end()))
    return std::nullopt;
  std::vector<int32_t> dropped;
  std::set_difference(group.begin(), group.end(), target_group.begin(), target_group.end(), std::back_inserter(dropped));
  const ReduceOp op = source.reduction().op;
  if (!dropped.empty() && op == ReduceOp::kAvg) return std::nullopt;
  // The parts must be numbered as the plan mesh numbers them on both sides,
  // so that a device's part is the same before and after every step (and,
  // reducing first, the parts it joins those of its coordinates along the
  // axes kept).
  for (const auto& [state, layout, axes] : {std::tuple(&mesh.source, &source, &group),
                                            std::tuple(&mesh.target, &target, &target_group)}) {
    Result<Layout> stated = StateLayout(mesh, *state, source.shape(), source.dtype(), *axes, op);
    if (!stated.ok() || !(*stated == *layout)) return std::nullopt;
  }
  PlannerOptions structured = options;
  structured.strategy = Strategy::kCollectives;
  const PlanContext ctx(mesh, options.topology, source.shape(), source.element_bytes());
  // Where some axes are dropped, they are reduced by one step over them,
  // first or last. First: a reduce-scatter or all-reduce from the source
  // into each state one reduction reaches (ReducedStates: its replicas may
  // share the work), the other axes still pending, then the parts moved
  // alike over those; the reduced shards are smaller, so what moves after
  // is less. Last: the parts moved alike over all the source's axes into
  // each state `mid` the target is with the dropped axes taken off the end
  // of one dim, then a reduce-scatter over them into the target. The oracles
  // state a partial target's values either way (taken below only where the
  // routes allow it): from the source's parts routed by the last step, or
  // by every step's routes composed (ComposedRoutes in exec_checker.h:
  // whole routes, or routes keeping every part). Else the parts moved alike
  // into the target.
  struct Leg {
    AxisLists mid;               // where the parts moved alike start (first) or end (last)
    std::optional<Edge> reduce;  // the reduction over the dropped axes
    bool first = false;
  };
  std::vector<Leg> legs;
  if (dropped.empty()) {
    legs.push_back({mesh.target, std::nullopt});
  } else {
    for (const AxisLists& to : ReducedStates(ctx, mesh.source, dropped, group)) {
      if (legs.size() == kMaxReductions) break;
      std::optional<StepDraft> draft = DraftReduction(ctx, mesh.source, to, dropped, op, /*detailed=*/false);
      // (An all-reduce into partial sums would receive every other part
      // whole: PendingSteps refuses it.)
      if (draft && draft->op == StepOp::kReduceScatter && draft->peak_bytes <= cap)
        legs.push_back({to, ReductionEdge(ctx, to, *draft), /*first=*/true});
    }
    for (size_t d = 0; d < mesh.target.size(); ++d) {
      const std::vector<int32_t>& on = mesh.target[d];
      if (on.size() < dropped.size()) continue;
      std::vector<int32_t> tail(on.end() - static_cast<std::ptrdiff_t>(dropped.size()), on.end());
      std::sort(tail.begin(), tail.end());
      if (tail != dropped) continue;
      AxisLists mid = mesh.target;
      mid[d].resize(on.size() - dropped.size());
      std::optional<StepDraft> draft = DraftReduction(ctx, mid, mesh.target, dropped, op, /*detailed=*/false);
      if (draft && draft->op == StepOp::kReduceScatter && draft->peak_bytes <= cap)
        legs.push_back({mid, ReductionEdge(ctx, mesh.target, *draft), /*first=*/false});
    }
  }
  // A layout numbers its parts tile by tile (in the order of each tile's
  // lowest holder), and a step runs as the reducing exchange of its parts,
  // routed by those numbers: the parts move as the collectives move them
  // only where every layout of the path gives one number to all devices of
  // one coordinate along its partial axes (not so on most meshes whose
  // device order is permuted).
  auto numbered_alike = [&](const Layout& l, const std::vector<int32_t>& axes) {
    std::vector<int64_t> part_at(static_cast<size_t>(mesh.mesh.GroupSize(axes)), -1);
    for (int64_t pos = 0; pos < mesh.mesh.num_devices(); ++pos) {
      const int64_t device = mesh.mesh.device(pos);
      if (l.TileOf(device) < 0) continue;
      int64_t& part = part_at[static_cast<size_t>(mesh.mesh.MemberIndex(pos, axes))];
      if (part == -1) part = l.PartOf(device);
      if (part != l.PartOf(device)) return false;
    }
    return true;
  };
  if (!numbered_alike(source, group)) return std::nullopt;
  // Each leg's path, searched; then, cheapest first, the first whose steps
  // run as priced (building and checking steps costs a pass over every pair
  // of a reduction's groups: only as many as it takes).
  struct Found {
    std::vector<std::pair<AxisLists, Edge>> path;
    size_t reduction_at;  // the reduction's step (path.size(): none)
    Cost cost;
  };
  std::vector<Found> found;
  bool found_any = false;
  int64_t explored = 0;
  for (const Leg& leg : legs) {
    // The parts moved alike: from the reduced state to the target (first),
    // or from the source to `mid` (last), or from the source to the target.
    PlanMesh alike = mesh;
    if (leg.first) alike.source = leg.mid;
    else alike.target = leg.mid;
    const Layout from = leg.first ? StateLayout(alike, leg.mid, source.shape(), source.dtype()) : plain_source;
    const Layout to = leg.reduce && !leg.first ? StateLayout(alike, leg.mid, source.shape(), source.dtype()) : plain_target;
    NamedPlanner planner(alike, from, to, structured, cap);
    std::vector<PlanCandidate> priced;
    std::optional<std::vector<std::pair<AxisLists, Edge>>> moves;
    int64_t searched = 0;
    if (alike.source == alike.target) moves.emplace();
    else moves = planner.Search(priced, searched);
    explored += searched;
    if (!moves) continue;
    found_any = true;
    Found f;
    if (leg.first) f.path.emplace_back(mesh.source, *leg.reduce);
    f.path.insert(f.path.end(), moves->begin(), moves->end());
    if (leg.reduce && !leg.first) f.path.emplace_back(leg.mid, *leg.reduce);
    if (f.path.empty()) continue;
    f.reduction_at = !leg.reduce ? f.path.size() : leg.first ? 0 : f.path.size() - 1;
    f.cost = PathCost(f.path);
    found.push_back(std::move(f));
  }
  no_path = !found_any;  // (the one reason a higher cap could change)
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.cost < b.cost; });
  for (const Found& f : found) {
    // The axes pending before each step: the source's until the reduction,
    // the target's after it.
    std::vector<std::vector<int32_t>> pending;
    for (size_t i = 0; i < f.path.size(); ++i) pending.push_back(i <= f.reduction_at ? group : target_group);
    SameParts r{{}, mesh.mesh, f.cost, 0, explored};
    // (A state using a partial axis cannot hold the reduction pending over it:
    // PendingSteps' layouts refuse an axis used twice.)
    r.steps = PendingSteps(f.path, pending, ctx, source, target, target_group);
    if (r.steps.empty()) continue;
    bool runs = numbered_alike(target, target_group);
    for (size_t i = 0; i < r.steps.size() && runs; ++i) {
      const PlanStep& step = r.steps[i];
      r.peak = std::max(r.peak, step.peak_bytes.Max());
      const std::vector<int32_t>& parts_over = i < f.reduction_at ? group : target_group;
      runs = numbered_alike(step.output, parts_over);
      if (i == f.reduction_at) {
        // The reduction, priced exactly by PendingSteps. Followed by more
        // steps, its parts must be routed whole: the oracles compose whole
        // routes (ComposedRoutes), not tile routes that merge parts.
        if (i + 1 < r.steps.size() && Exchange::RouteParts(step.input, step.output).tile_to) runs = false;
        continue;
      }
      // Each step runs as the reducing exchange of its parts (device_program.h),
      // routed by part numbers: taken where every part stays itself.
      runs = runs && Exchange::RouteParts(step.input, step.output).KeepsParts();
      for (const ProgramOp& op_ : step.program)
        for (const auto& [a, b] : op_.pairs)
          for (int32_t axis : parts_over) runs = runs && ctx.Coordinate(a, axis) == ctx.Coordinate(b, axis);
    }
    if (runs) return r;
  }
  return std::nullopt;
}

std::optional<SameParts> MovePartsAlike(const Layout& source, const Layout& target, const PlannerOptions& options,
                                        int64_t cap, bool& no_path) {
  no_path = false;
  if (!source.partial() || !target.partial() || source.reduction().op != target.reduction().op) return std::nullopt;
  const Layout plain_source = source.WithoutReduction(), plain_target = target.WithoutReduction();
  const int64_t node = options.topology.kind() == Topology::Kind::kNodes ? options.topology.devices_per_node() : 1;
  std::optional<PlanMeshes> pm = FindPlanMesh(plain_source, plain_target, options.meshes, node);
  if (!pm || !source.SameDevices(target)) return std::nullopt;
  // The plan mesh, and the finer one where there is one (its sub-axes let
  // the search move part of an axis), as the plain planner tries both: the
  // cheaper path.
  std::optional<SameParts> best;
  for (const PlanMesh* mesh : {&pm->coarse, pm->fine ? &*pm->fine : nullptr}) {
    if (mesh == nullptr) continue;
    bool none = false;
    std::optional<SameParts> r =
        MovePartsAlikeOver(*mesh, source, target, plain_source, plain_target, options, cap, none);
    no_path = no_path || none;
    if (r && (!best || r->cost < best->cost)) best = std::move(r);
  }
  if (best) no_path = false;
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
  // The reducing exchange, where the target and strategy allow one: drafted
  // unless the parts moved alike cost less than even its floors (its
  // transfers are every part into every device of its target part).
  ReducingExchangeCandidate exchange_candidate(source, target, options);
  std::optional<PlanStep>& exchange = exchange_candidate.step();
  const LowerBound bound = ComputeLowerBound(source, target);
  // The plan of reducing onto a plain layout, then routing into the target's
  // parts (ReduceThenRoute), its rivals listed beside it.
  // Its candidate line: priced as a whole, peak the larger of its legs'.
  auto two_leg_line = [](const TwoLeg& two, std::vector<std::string> steps, const char* note) {
    return PlanCandidate{std::move(steps), static_cast<double>(two.cost.time_ps) / 1e6, two.cost.bytes,
                         std::max(two.first.plan.totals().peak_bytes, two.route.peak_bytes.Max()), note};
  };
  auto two_leg_plan = [&](TwoLeg& two, bool lifted, std::vector<PlanCandidate> rivals) {
    PlanResult r{CollectivePlan{}, bound};
    r.memory_cap_bytes = lifted ? 0 : cap;
    r.memory_cap_lifted = lifted;
    r.states_explored = two.first.states_explored;
    if (lifted) r.candidates.push_back(CapLiftedCandidate(cap));
    for (PlanCandidate& c : rivals) r.candidates.push_back(std::move(c));
    PlanCandidate chosen = two_leg_line(two, {}, "chosen");
    for (const PlanCandidate& c : two.first.candidates)
      if (c.note == "chosen") chosen.steps = c.steps;
    if (chosen.steps.empty())
      for (const PlanStep& s : two.first.plan.steps()) chosen.steps.emplace_back(StepOpName(s.op));
    chosen.steps.push_back("reducing exchange into the target's parts");
    r.candidates.push_back(std::move(chosen));
    PlanBuilder builder(source, target);
    if (two.first.plan.mesh()) builder.SetMesh(*two.first.plan.mesh());
    for (const PlanStep& s : two.first.plan.steps()) builder.Add(s);
    builder.Add(std::move(two.route));
    r.plan = builder.Finish();
    return r;
  };
  // Reducing onto a plain layout, then routing (ReduceThenRoute) under the
  // cap: searched at most once, beside the parts moved alike or the exchange.
  std::optional<TwoLeg> two;
  bool two_searched = false;
  // The parts moved alike, where the layouts allow it: taken where no
  // ragged exchange is allowed, or where it costs less than the exchange
  // and than reducing first, then routing.
  if (options.strategy != Strategy::kExchange && source.partial()) {
    bool no_path = false;
    std::optional<SameParts> alike = MovePartsAlike(source, target, options, cap, no_path);
    bool lifted = false;
    if (!alike && no_path && !exchange_candidate.allowed() && options.memory_cap_bytes <= 0) {
      alike = MovePartsAlike(source, target, options, INT64_MAX, no_path);
      lifted = alike.has_value();
    }
    // Where the parts moved alike cost less than the exchange's floors, it
    // could not win: not drafted.
    std::optional<PlanCandidate> undrafted;
    if (alike) {
      RESHARD_ASSIGN_OR_RETURN(undrafted, exchange_candidate.DraftUnlessOutpriced(bound, alike->cost,
                                                                                  /*rival_wins_ties=*/false,
                                                                                  "the parts moved alike", cap));
    }
    // Reducing first, then routing (its last step a reducing exchange, so
    // where one is allowed), under the same cap, where the target has fewer
    // parts (parts over the same axes move alike as the plain array: no
    // cheaper by reducing, and reducing at scale costs a search and an
    // exchange more).
    if (alike && !lifted && exchange_candidate.allowed() && target.reduction().parts != source.reduction().parts) {
      two = ReduceThenRoute(source, target, options, cap, default_cap, /*uncapped=*/false);
      two_searched = true;
    }
    const bool two_cheaper = two && two->cost < alike->cost;
    auto alike_line = [&](const char* note) {
      PlanCandidate line{{}, static_cast<double>(alike->cost.time_ps) / 1e6, alike->cost.bytes, alike->peak, note};
      for (const PlanStep& step : alike->steps)
        line.steps.push_back(fmt::format("{}: {} -> {}", StepOpName(step.op), step.input_spec, step.output_spec));
      return line;
    };
    // (Not drafted: no exchange.)
    if (two_cheaper && (!exchange || two->cost < StepCost(*exchange) || exchange->peak_bytes.Max() > cap)) {
      std::vector<PlanCandidate> rivals;
      if (undrafted) rivals.push_back(std::move(*undrafted));
      if (exchange) rivals.push_back(exchange_candidate.Line(cap, /*chosen=*/false));
      rivals.push_back(alike_line("priced"));
      return two_leg_plan(*two, /*lifted=*/false, std::move(rivals));
    }
    if (alike && !two_cheaper && (!exchange || alike->cost < StepCost(*exchange) || exchange->peak_bytes.Max() > cap)) {
      PlanResult r{CollectivePlan{}, bound};
      r.memory_cap_bytes = lifted ? 0 : cap;
      r.memory_cap_lifted = lifted;
      r.states_explored = alike->explored;
      if (lifted)
        r.candidates.push_back(CapLiftedCandidate(cap));
      if (undrafted) r.candidates.push_back(std::move(*undrafted));
      if (exchange) r.candidates.push_back(exchange_candidate.Line(cap, /*chosen=*/false));
      if (two) r.candidates.push_back(two_leg_line(*two, {"reduce, then route into the target's parts"}, "priced"));
      r.candidates.push_back(alike_line("chosen"));
      PlanBuilder builder(source, target);
      builder.SetMesh(alike->mesh);
      for (PlanStep& step : alike->steps) builder.Add(std::move(step));
      r.plan = builder.Finish();
      return r;
    }
  }
  // From partial sums whose parts cannot move alike into a target of
  // fewer parts: reducing first, then routing, searched before the exchange
  // is drafted, which is not where even its floors cost more (its
  // transfers are every part into every device of its target part:
  // partial sums over x into partial sums over y drafted devices x parts).
  if (!exchange && source.partial() && options.strategy != Strategy::kExchange && exchange_candidate.allowed() &&
      target.reduction().parts < source.reduction().parts) {
    if (!two_searched) two = ReduceThenRoute(source, target, options, cap, default_cap, /*uncapped=*/false);
    two_searched = true;
    if (two) {
      RESHARD_ASSIGN_OR_RETURN(std::optional<PlanCandidate> undrafted,
                               exchange_candidate.DraftUnlessOutpriced(bound, two->cost, /*rival_wins_ties=*/false,
                                                                       "reducing first, then routing", cap));
      if (undrafted) return two_leg_plan(*two, /*lifted=*/false, {std::move(*undrafted)});
    }
  }
  RESHARD_RETURN_IF_ERROR(exchange_candidate.Draft());
  // From partial sums: reducing first may move less than sending parts
  // (not searched where the one exchange already receives the bound, but
  // compared where it was searched above). Under the default cap, where
  // neither fits it, both are priced without it.
  if (exchange && source.partial() && options.strategy != Strategy::kExchange &&
      (exchange->recv_bytes.Max() > bound.max_recv_bytes || two)) {
    const bool over = exchange->peak_bytes.Max() > cap;
    if (!two_searched) two = ReduceThenRoute(source, target, options, cap, default_cap, /*uncapped=*/false);
    const bool lifted = !two && over && options.memory_cap_bytes <= 0;
    if (lifted) two = ReduceThenRoute(source, target, options, INT64_MAX, default_cap, /*uncapped=*/true);
    if (two && ((over && !lifted) || two->cost < StepCost(*exchange)))
      return two_leg_plan(*two, lifted, {exchange_candidate.Line(lifted ? INT64_MAX : cap, /*chosen=*/false)});
  }
  return ReducingExchangeOnly(source, target, options, cap, bound, std::move(exchange),
                              "a target with a pending reduction is reached by the reducing exchange alone, or, from "
                              "partial sums over the same mesh axes, by moving the parts alike");
}

}  // namespace reshard
