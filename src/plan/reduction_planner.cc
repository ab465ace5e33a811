#include "plan/reduction_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "layout/mesh_grid.h"
#include "plan/dtensor_order.h"
#include "plan/exchange_step.h"
#include "plan/explicit_plan.h"
#include "plan/named_planner.h"
#include "plan/plan_builder.h"
#include "plan/relay.h"
#include "plan/plan_mesh.h"
#include "plan/search_state.h"
#include "plan/structured_step.h"
#include "reshard/plan_stats.h"

namespace reshard {
namespace {

using Path = std::vector<std::pair<AxisLists, Edge>>;

// One candidate: its reduction edges (a slice, then the reduction) and the
// search from the reduced state, with what that search keeps references to.
struct Candidate {
  Path reduce;
  std::unique_ptr<PlanMesh> mesh;  // the plan mesh, starting at the reduced state
  std::unique_ptr<Layout> reduced;
  std::unique_ptr<NamedPlanner> planner;
  Path rest;
  Cost cost;
};

// A baseline from its paths' edges, priced as paths are (per-step maxima summed).
BaselineCost BaselineOfPaths(std::string name, std::initializer_list<const Path*> paths) {
  BaselineCost b{std::move(name)};
  Cost c;
  for (const Path* p : paths)
    for (const auto& [from, e] : *p) {
      c = c + e.cost();
      b.ops.emplace_back(e.exchange ? "exchange" : StepOpName(e.draft.op));
      b.collectives += e.exchange || IsCollective(e.draft.op);
      b.peak_bytes = std::max(b.peak_bytes, e.peak_bytes);
    }
  b.max_recv_bytes = c.bytes;
  b.total_bytes = c.total;
  b.time_us = static_cast<double>(c.time_ps) / 1e6;
  return b;
}

// The plan of the one reducing-exchange step, with what was priced.
PlanResult ExchangePlanResult(const Layout& source, const Layout& target, PlanStep step, PlanResult result) {
  result.candidates.push_back(PlanCandidate{{"reducing exchange"}, step.time_us, step.recv_bytes.Max(),
                                            step.peak_bytes.Max(), "chosen"});
  PlanBuilder builder(source, target);
  builder.Add(std::move(step));
  result.plan = builder.Finish();
  return result;
}

// The least the reducing exchange could cost (its floors, and the bound's
// bytes: it receives no less), one exchange step.
Cost FloorCost(const ReducingExchangeFloors& floor, const LowerBound& bound) {
  return Cost{Picoseconds(floor.time_us), bound.max_recv_bytes, bound.total_bytes, 1, 1};
}

// The candidate line of a reducing exchange never drafted, at its floors.
PlanCandidate UndraftedExchange(const ReducingExchangeFloors& floor, const LowerBound& bound, std::string note) {
  return PlanCandidate{{"reducing exchange"}, floor.time_us, bound.max_recv_bytes, floor.peak_bytes,
                       "not drafted: " + std::move(note)};
}

}  // namespace

std::vector<AxisLists> ReducedStates(const PlanContext& ctx, const AxisLists& s0, const std::vector<int32_t>& group,
                                     const std::vector<int32_t>& pending) {
  std::vector<bool> busy(ctx.axis_sizes.size(), false);
  for (const auto& l : s0)
    for (int32_t a : l) busy[static_cast<size_t>(a)] = true;
  for (const std::vector<int32_t>* axes : {&group, &pending})
    for (int32_t a : *axes) busy[static_cast<size_t>(a)] = true;
  std::vector<int32_t> free;
  for (size_t a = 0; a < busy.size(); ++a)
    if (!busy[a]) free.push_back(static_cast<int32_t>(a));
  // Fewest new axes first: all-reduce in place; else for each dim, the group
  // axes with any set B of free axes, in every order (at most kMaxOrderAxes
  // axes), or the group in order on the dim and B on another dim.
  constexpr size_t kMaxOrderAxes = 4;
  std::vector<AxisLists> states;
  auto add_state = [&](const AxisLists& to) {
    if (std::find(states.begin(), states.end(), to) == states.end()) states.push_back(to);
  };
  add_state(s0);
  const uint32_t subsets = free.size() <= 4 ? (1u << free.size()) : 1u;
  for (size_t extra = 0; extra <= free.size(); ++extra)
    for (uint32_t mask = 0; mask < subsets; ++mask) {
      std::vector<int32_t> b;
      for (size_t i = 0; i < free.size(); ++i)
        if (mask >> i & 1u) b.push_back(free[i]);
      if (b.size() != extra) continue;
      for (size_t d = 0; d < s0.size(); ++d) {
        std::vector<int32_t> z = group;
        z.insert(z.end(), b.begin(), b.end());
        std::sort(z.begin(), z.end());
        const bool all_orders = z.size() <= kMaxOrderAxes;
        do {
          AxisLists to = s0;
          to[d].insert(to[d].end(), z.begin(), z.end());
          add_state(to);
        } while (all_orders && std::next_permutation(z.begin(), z.end()));
        if (b.empty()) continue;
        for (size_t d1 = 0; d1 < s0.size(); ++d1) {
          if (d1 == d) continue;
          AxisLists to = s0;
          to[d].insert(to[d].end(), group.begin(), group.end());
          to[d1].insert(to[d1].end(), b.begin(), b.end());
          add_state(to);
        }
      }
    }
  return states;
}

Edge ReductionEdge(const PlanContext& ctx, const AxisLists& to, const StepDraft& d) {
  Edge e;
  e.to = to;
  e.draft = d;
  e.time_us = d.time_us;
  e.recv_bytes = d.recv_bytes;
  e.peak_bytes = d.peak_bytes;
  e.total_bytes = d.recv_bytes * ctx.num_devices();
  return e;
}

Cost PathCost(const std::vector<std::pair<AxisLists, Edge>>& path) {
  Cost c;
  for (const auto& [from, e] : path) c = c + e.cost();
  return c;
}

Result<PlanStep> ReducingExchangeStep(const Layout& source, const Layout& target, const Topology& topology,
                                      int64_t cap) {
  RESHARD_ASSIGN_OR_RETURN(std::vector<Exchange> parts, Exchange::CreateReducing(source, target));
  const ExchangeDraft d = DraftReducingExchange(parts, target, topology);
  PlanStep step{StepOp::kExchange, source, target};
  step.input_shard = LargestTile(source);
  step.output_shard = LargestTile(target);
  FillExchangeStep(step, d);
  // With relays (relay.h) where they cost less: a second round, so under
  // latency mostly not; priced by bytes, where the busiest keeper then
  // receives less. Not where the copy of each shard they hold takes the
  // step over a cap direct delivery keeps.
  std::vector<Relay> relays = FindRelays(parts, source, target, d.recv_bytes);
  if (!relays.empty()) {
    PlanStep relayed{StepOp::kExchange, source, target};
    relayed.input_shard = step.input_shard;
    relayed.output_shard = step.output_shard;
    FillExchangeStep(relayed, DraftReducingExchange(parts, target, topology, relays));
    relayed.relays = std::move(relays);
    const bool fits = cap <= 0 || relayed.peak_bytes.Max() <= cap || step.peak_bytes.Max() > cap;
    if (fits && StepCost(relayed) < StepCost(step)) return relayed;
  }
  return step;
}

Cost StepCost(const PlanStep& s) {
  return Cost{Picoseconds(s.time_us), s.recv_bytes.Max(), s.recv_bytes.Sum(), s.rounds(), s.rounds()};
}

ReducingExchangeCandidate::ReducingExchangeCandidate(const Layout& source, const Layout& target,
                                                     const PlannerOptions& options, int64_t cap)
    : source_(source),
      target_(target),
      topology_(options.topology),
      allowed_(options.strategy != Strategy::kCollectives && HasRaggedExchange(options.target)),
      cap_(cap) {}

Status ReducingExchangeCandidate::Draft() {
  if (allowed_ && !step_) {
    RESHARD_ASSIGN_OR_RETURN(PlanStep step, ReducingExchangeStep(source_, target_, topology_, cap_));
    step_ = std::move(step);
  }
  return Status::Ok();
}

Result<std::optional<PlanCandidate>> ReducingExchangeCandidate::DraftUnlessOutpriced(const LowerBound& bound,
                                                                                   const Cost& rival,
                                                                                   bool rival_wins_ties,
                                                                                   const std::string& rival_name,
                                                                                   int64_t cap) {
  if (!allowed_ || step_) return std::optional<PlanCandidate>{};
  if (const std::optional<ReducingExchangeFloors> floor = ReducingExchangeFloor(source_, target_, topology_, bound)) {
    if (floor->peak_bytes > cap)
      return std::optional<PlanCandidate>{UndraftedExchange(*floor, bound, "over the memory cap at its floor")};
    const Cost least = FloorCost(*floor, bound);
    if (rival_wins_ties ? !(least < rival) : rival < least)
      return std::optional<PlanCandidate>{UndraftedExchange(
          *floor, bound,
          (rival_wins_ties ? "at its floors it costs no less than " : "at its floors it costs more than ") + rival_name)};
  }
  RESHARD_RETURN_IF_ERROR(Draft());
  return std::optional<PlanCandidate>{};
}

PlanCandidate ReducingExchangeCandidate::Line(int64_t cap, bool chosen) const {
  const PlanStep& s = *step_;
  return PlanCandidate{{"reducing exchange"}, s.time_us, s.recv_bytes.Max(), s.peak_bytes.Max(),
                       s.peak_bytes.Max() > cap ? "over the memory cap"
                       : chosen                 ? "chosen"
                                                : "priced"};
}

std::vector<PlanStep> PendingSteps(const std::vector<std::pair<AxisLists, Edge>>& path,
                                   const std::vector<std::vector<int32_t>>& pending, const PlanContext& ctx,
                                   const Layout& source, const Layout& target, const std::vector<int32_t>& target_pending) {
  const PlanMesh& mesh = *ctx.plan_mesh;
  const ReduceOp op = source.reduction().op;
  PlanBuilder builder(source, target);
  builder.SetMesh(mesh.mesh);
  std::vector<PlanStep> steps;
  for (size_t i = 0; i < path.size(); ++i) {
    const auto& [from, e] = path[i];
    const std::vector<int32_t>& before = pending[i];
    const std::vector<int32_t>& after = i + 1 < path.size() ? pending[i + 1] : target_pending;
    Result<Layout> in = StateLayout(mesh, from, source.shape(), source.dtype(), before, op);
    Result<Layout> out = StateLayout(mesh, e.to, source.shape(), source.dtype(), after, op);
    std::vector<int32_t> reduced;
    for (int32_t a : before)
      if (std::find(after.begin(), after.end(), a) == after.end()) reduced.push_back(a);
    std::optional<StepDraft> d = reduced.empty() ? DraftStep(ctx, from, e.to, /*detailed=*/true)
                                                 : DraftReduction(ctx, from, e.to, reduced, op, /*detailed=*/true);
    // An all-reduce runs as a ring (reduced pieces, then gathered) only into
    // a layout with no pending reduction; before that it would receive
    // every other part whole, more than priced.
    if (!in.ok() || !out.ok() || !d || d->op != e.draft.op || (d->op == StepOp::kAllReduce && !after.empty()))
      return {};
    PlanStep step{d->op, std::move(in).value(), std::move(out).value()};
    step.input_spec = StateText(mesh, from, before);
    step.output_spec = StateText(mesh, e.to, after);
    step.input_shard = ctx.ShardShape(from);
    step.output_shard = ctx.ShardShape(e.to);
    NamedPlanner::FillStructured(step, *d, ctx, builder);
    // From a partial layout a step runs as the reducing exchange of its
    // parts (device_program.h), whose routes follow part numbers, which
    // layouts keep tile by tile: taken only where that moves, device by
    // device, what the collective was priced at (between partial layouts
    // exactly; into a plain one no more, as padded chunks are priced). An
    // all-reduce into a plain layout runs as a ring instead, as priced.
    if (step.input.partial() && !(step.input == step.output) && d->op != StepOp::kAllReduce) {
      Result<ReducingExchangeTraffic> run = ReducingExchangeBytes(step.input, step.output);
      if (!run.ok() || run->recv_bytes.size() != step.recv_bytes.size()) return {};
      const bool exact = step.output.partial();
      for (size_t k = 0; k < step.recv_bytes.size(); ++k) {
        const int64_t recv = run->recv_bytes[k], send = run->send_bytes[k];
        if (exact ? (recv != step.recv_bytes[k] || send != step.send_bytes[k])
                  : (recv > step.recv_bytes[k] || send > step.send_bytes[k]))
          return {};
      }
    }
    steps.push_back(step);
    builder.Add(std::move(step));
  }
  if (!(steps.empty() || steps.back().output == target)) return {};
  return steps;
}

Result<PlanResult> ReducingExchangeOnly(const Layout& source, const Layout& target, const PlannerOptions& options,
                                        int64_t cap, const LowerBound& bound, std::optional<PlanStep> exchange,
                                        const std::string& why) {
  if (!exchange) return RefuseWithBound(source, target, why + ", and the target or strategy allows no ragged exchange");
  PlanResult r{CollectivePlan{}, bound};
  r.memory_cap_bytes = cap;
  if (exchange->peak_bytes.Max() > cap) {
    if (options.memory_cap_bytes > 0)
      return Status::InvalidArgument(fmt::format("no plan fits the memory cap of {} bytes per device: the reducing exchange needs {}",
                                                 cap, exchange->peak_bytes.Max()));
    r.memory_cap_bytes = 0;
    r.memory_cap_lifted = true;
    r.candidates.push_back(CapLiftedCandidate(cap));
  }
  return ExchangePlanResult(source, target, std::move(*exchange), std::move(r));
}

Status RefuseWithBound(const Layout& source, const Layout& target, const std::string& why) {
  const LowerBound lb = ComputeLowerBound(source, target);
  return Status::NotSupported(fmt::format("{}; any plan receives at least {} B into the busiest device ({} B in all)",
                                          why, lb.max_recv_bytes, lb.total_bytes));
}

Result<PlanResult> PlanReduction(const Layout& source, const Layout& target, const PlannerOptions& options,
                                 int64_t default_cap) {
  if (Status reducible = CheckReducible(source.dtype(), source.reduction().op); !reducible.ok())
    return RefuseWithBound(source, target, reducible.message());
  RESHARD_RETURN_IF_ERROR(Exchange::Validate(source.WithoutReduction(), target));
  const int64_t cap = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : default_cap;
  const LowerBound bound = ComputeLowerBound(source, target);
  // The reducing exchange: drafted where it is the plan or could win.
  ReducingExchangeCandidate exchange(source, target, options, cap);
  // The plan of the reducing exchange alone, where no structured plan applies.
  auto exchange_only = [&](const std::string& why) -> Result<PlanResult> {
    RESHARD_RETURN_IF_ERROR(exchange.Draft());
    return ReducingExchangeOnly(source, target, options, cap, bound, std::move(exchange.step()), why);
  };
  if (options.strategy == Strategy::kExchange) return exchange_only("the exchange strategy asks for the reducing exchange");
  const int64_t node = options.topology.kind() == Topology::Kind::kNodes ? options.topology.devices_per_node() : 1;
  std::optional<PlanMeshes> pm = FindPlanMesh(source.WithoutReduction(), target, options.meshes, node);
  if (!pm)
    return exchange_only("partial sums are planned as collectives between layouts named over one mesh with XLA's even "
                         "splits, and these are not");
  const PlanMesh& mesh = pm->coarse;
  const std::vector<int64_t>& shape = source.shape();
  const ReduceOp op = source.reduction().op;
  std::vector<int32_t> group;
  for (int64_t a : PartialMeshAxes(source, mesh.mesh)) group.push_back(static_cast<int32_t>(a));
  Result<Layout> stated = StateLayout(mesh, mesh.source, shape, source.dtype(), group, op);
  if (group.empty() || !stated.ok() || !(*stated == source))
    return exchange_only("the pending reduction is not over whole mesh axes of the plan mesh " + mesh.mesh.ToString());
  const PlanContext ctx(mesh, options.topology, shape, source.element_bytes());
  auto partial_text = [&](const AxisLists& s) { return StateText(mesh, s, group); };

  // The reduced states: all-reduce in place, or slice over B then reduce-scatter onto d.
  const AxisLists& s0 = mesh.source;
  const std::vector<AxisLists> states = ReducedStates(ctx, s0, group, group);
  std::vector<Path> reductions;
  for (const AxisLists& to : states) {
    if (reductions.size() == kMaxReductions) break;
    if (std::optional<StepDraft> d = DraftReduction(ctx, s0, to, group, op, /*detailed=*/false))
      reductions.push_back({{s0, ReductionEdge(ctx, to, *d)}});
  }

  // Each reduced state, then the named search to the target.
  PlanResult result{CollectivePlan{}, bound};
  result.memory_cap_bytes = cap;
  // The default cap is soft, as in PlanReshard: where nothing fits it, the
  // cheapest plan under no cap is taken; a cap the caller gave is hard.
  // DTensor's order, one mesh dim at a time, where DTensor has these
  // placements: a baseline, and a candidate beside those above, which
  // reduce every axis in their first step (it keeps the reduction pending
  // over the axes it has not reached).
  // Its steps are built (and their exchanges priced) only where it could
  // win: when nothing else fits a cap, or when it is the cheapest.
  std::optional<DTensorOrder> dtensor = DTensorOrderPath(ctx, mesh, group, op);
  Cost dtensor_cost;
  int64_t dtensor_peak = 0;
  if (dtensor) {
    dtensor_cost = PathCost(dtensor->path);
    for (const auto& [from, e] : dtensor->path) dtensor_peak = std::max(dtensor_peak, e.peak_bytes);
  }
  std::optional<std::vector<PlanStep>> dtensor_steps;
  std::string dtensor_note = "priced";
  auto dtensor_runs = [&]() {
    if (!dtensor) return false;
    if (!dtensor_steps) {
      dtensor_steps.emplace();
      // Avg axis by axis, as DTensor reduces it, is the average where the
      // element type rounds (each step divides by its own axes' parts);
      // integers would truncate at every step.
      if (op == ReduceOp::kAvg && !IsFloatingPoint(source.dtype()))
        dtensor_note = "not taken: an average of integers is not reduced one axis at a time";
      else if ((*dtensor_steps = PendingSteps(dtensor->path, dtensor->pending, ctx, source, target)).empty())
        dtensor_note = "not taken: a step from partial sums would not move the bytes priced";
    }
    return !dtensor_steps->empty();
  };
  auto dtensor_fits = [&](int64_t c) { return dtensor && dtensor_peak <= c && dtensor_runs(); };
  std::deque<Candidate> candidates;
  int64_t used_cap = cap;
  for (int64_t try_cap : {cap, options.memory_cap_bytes > 0 ? cap : INT64_MAX}) {
    used_cap = try_cap;
    for (const Path& reduce : reductions) {
      if (reduce.back().second.peak_bytes > try_cap) continue;
      Candidate c;
      c.reduce = reduce;
      c.mesh = std::make_unique<PlanMesh>(mesh);
      c.mesh->source = c.reduce.back().second.to;
      c.reduced = std::make_unique<Layout>(StateLayout(*c.mesh, c.mesh->source, shape, source.dtype()));
      c.planner = std::make_unique<NamedPlanner>(*c.mesh, *c.reduced, target, options, try_cap);
      std::optional<Path> found;
      std::vector<PlanCandidate> priced;
      int64_t explored = 0;
      if (c.mesh->source == c.mesh->target) found.emplace();
      else found = c.planner->Search(priced, explored);
      result.states_explored += explored;
      if (!found) continue;
      c.rest = std::move(*found);
      c.cost = PathCost(c.reduce) + PathCost(c.rest);
      candidates.push_back(std::move(c));
    }
    if (!candidates.empty() || dtensor_fits(try_cap) || options.memory_cap_bytes > 0) break;
  }
  const bool dtensor_ok = candidates.empty() && dtensor_fits(used_cap);
  if (candidates.empty() && !dtensor_ok && options.memory_cap_bytes > 0)
    return Status::InvalidArgument(fmt::format(
        "no plan fits the memory cap of {} bytes per device (the source and target shards alone need {})", cap,
        default_cap / 2));
  if (candidates.empty() && !dtensor_ok)
    return exchange_only("no reduction of these partial sums has a structured plan");
  result.memory_cap_bytes = used_cap == INT64_MAX ? 0 : used_cap;
  result.memory_cap_lifted = used_cap != cap;
  if (result.memory_cap_lifted)
    result.candidates.push_back(CapLiftedCandidate(cap));
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (candidates[i].cost < candidates[best].cost) best = i;
  const bool dtensor_cheaper = dtensor_ok || (!candidates.empty() && dtensor && dtensor_cost < candidates[best].cost &&
                                               dtensor_fits(used_cap));
  const Cost structured_cost = dtensor_cheaper ? dtensor_cost : candidates[best].cost;
  // The reducing exchange is drafted only where its floors (time and peak;
  // its bytes are at least the bound's) allow it to win: it never wins a
  // tie (one exchange more), so where the floors cost no less than the
  // structured plan, or exceed the cap, it could not.
  RESHARD_ASSIGN_OR_RETURN(
      std::optional<PlanCandidate> undrafted,
      exchange.DraftUnlessOutpriced(bound, structured_cost, /*rival_wins_ties=*/true, "the plan chosen", used_cap));
  // The reducing exchange, where it fits the cap the structured plans were found under and costs less.
  const bool exchange_wins = exchange.step() && exchange.step()->peak_bytes.Max() <= used_cap &&
                             StepCost(*exchange.step()) < structured_cost;
  const bool dtensor_wins = dtensor_cheaper && !exchange_wins;
  if (dtensor) {
    PlanCandidate c{{"DTensor's order, one mesh axis at a time"}, static_cast<double>(dtensor_cost.time_ps) / 1e6,
                    dtensor_cost.bytes, dtensor_peak,
                    dtensor_wins                   ? "chosen"
                    : dtensor_peak > used_cap      ? "over the memory cap"
                                                   : dtensor_note};
    if (dtensor_steps && !dtensor_steps->empty())
      for (const PlanStep& s : *dtensor_steps)
        c.steps.push_back(fmt::format("{}: {} -> {}", StepOpName(s.op), s.input_spec, s.output_spec));
    else
      for (const auto& [from, e] : dtensor->path) c.steps.push_back(EdgeText(mesh, from, e));
    result.candidates.push_back(std::move(c));
  }
  if (undrafted) result.candidates.push_back(std::move(*undrafted));
  if (exchange.step()) result.candidates.push_back(exchange.Line(used_cap, exchange_wins));

  // --explain: every candidate, priced as the search priced it.
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    PlanCandidate pc = c.planner->Price(c.rest, i == best && !exchange_wins && !dtensor_wins ? "chosen" : "priced");
    std::vector<std::string> steps;
    for (const auto& [from, e] : c.reduce)
      steps.push_back(fmt::format("{} over {}: {} -> {}", StepOpName(e.draft.op), AxesText(mesh, group), partial_text(from),
                                  StateText(mesh, e.to)));
    steps.insert(steps.end(), pc.steps.begin(), pc.steps.end());
    pc.steps = std::move(steps);
    pc.time_us = static_cast<double>(c.cost.time_ps) / 1e6;
    for (const auto& [from, e] : c.reduce) pc.peak_bytes = std::max(pc.peak_bytes, e.peak_bytes);
    int64_t recv = 0;
    for (const auto& [from, e] : c.reduce) recv += e.recv_bytes;
    pc.max_recv_bytes += recv;
    result.candidates.push_back(std::move(pc));
    if (c.reduce.size() == 1 && c.reduce[0].second.draft.op == StepOp::kAllReduce)
      result.baselines.push_back(BaselineOfPaths("all_reduce_first", {&c.reduce, &c.rest}));
  }
  if (dtensor) result.baselines.push_back(BaselineOfPaths("dtensor_order", {&dtensor->path}));

  if (exchange_wins) {
    PlanBuilder builder(source, target);
    builder.Add(std::move(*exchange.step()));
    result.plan = builder.Finish();
    return result;
  }
  if (dtensor_wins) {
    PlanBuilder builder(source, target);
    builder.SetMesh(mesh.mesh);
    for (PlanStep& step : *dtensor_steps) builder.Add(std::move(step));
    result.plan = builder.Finish();
    return result;
  }
  // The chosen plan, each step priced exactly.
  Candidate& c = candidates[best];
  PlanBuilder builder(source, target);
  builder.SetMesh(mesh.mesh);
  for (const auto& [from, e] : c.reduce) {
    PlanStep step{StepOp::kReduceScatter, StateLayout(mesh, from, shape, source.dtype(), group, op).value(),
                  StateLayout(mesh, e.to, shape, source.dtype())};
    step.input_spec = partial_text(from);
    step.output_spec = StateText(mesh, e.to);
    step.input_shard = ctx.ShardShape(from);
    step.output_shard = ctx.ShardShape(e.to);
    NamedPlanner::FillStructured(step, *DraftReduction(ctx, from, e.to, group, op, /*detailed=*/true), ctx, builder);
    builder.Add(std::move(step));
  }
  for (const auto& [from, e] : c.rest) builder.Add(c.planner->Finalize(builder, from, e));
  result.plan = builder.Finish();
  return result;
}

}  // namespace reshard
