#include "reshard/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/explicit_plan.h"
#include "plan/named_planner.h"
#include "plan/plan_builder.h"
#include "plan/plan_mesh.h"
#include "plan/partial_target_planner.h"
#include "plan/reduction_planner.h"
#include "plan/search_state.h"
#include "reshard/exchange.h"

namespace reshard {

Result<Strategy> ParseStrategy(std::string_view text) {
  if (text == "auto") return Strategy::kAuto;
  if (text == "exchange") return Strategy::kExchange;
  if (text == "collectives") return Strategy::kCollectives;
  return Status::InvalidArgument(fmt::format("unknown strategy '{}': expected auto, exchange or collectives", text));
}

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kAuto: return "auto";
    case Strategy::kExchange: return "exchange";
    case Strategy::kCollectives: return "collectives";
  }
  return "?";
}

Result<PlanTarget> ParsePlanTarget(std::string_view text) {
  if (text == "any") return PlanTarget::kAny;
  if (text == "xla") return PlanTarget::kXla;
  if (text == "jax-cpu") return PlanTarget::kJaxCpu;
  if (text == "jax-gpu") return PlanTarget::kJaxGpu;
  if (text == "mpi") return PlanTarget::kMpi;
  if (text == "nccl") return PlanTarget::kNccl;
  return Status::InvalidArgument(
      fmt::format("unknown target '{}': expected any, xla, jax-cpu, jax-gpu, mpi or nccl", text));
}

std::string_view PlanTargetName(PlanTarget t) {
  switch (t) {
    case PlanTarget::kAny: return "any";
    case PlanTarget::kXla: return "xla";
    case PlanTarget::kJaxCpu: return "jax-cpu";
    case PlanTarget::kJaxGpu: return "jax-gpu";
    case PlanTarget::kMpi: return "mpi";
    case PlanTarget::kNccl: return "nccl";
  }
  return "?";
}

bool HasRaggedExchange(PlanTarget t) { return t != PlanTarget::kJaxCpu; }

namespace {

// Over held tiles, not devices: replicas hold the same tile.
int64_t MaxLocalBytes(const Layout& l) {
  int64_t m = 0;
  for (int64_t t = 0; t < l.num_tiles(); ++t)
    if (!l.Holders(t).empty()) m = std::max(m, l.TileElements(t) * l.element_bytes());
  return m;
}

BaselineCost BaselineOf(const std::string& name, const PlanCandidate& c, int64_t devices, int64_t collectives,
                        std::vector<std::string> ops) {
  BaselineCost b{name};
  b.max_recv_bytes = c.max_recv_bytes;
  b.total_bytes = c.max_recv_bytes * devices;
  b.peak_bytes = c.peak_bytes;
  b.time_us = c.time_us;
  b.collectives = collectives;
  b.ops = std::move(ops);
  return b;
}

}  // namespace

Result<PlanResult> PlanReshard(const Layout& source, const Layout& target, const PlannerOptions& options) {
  const bool comparable = source.shape() == target.shape() && source.dtype() == target.dtype();
  const int64_t floor = comparable ? MaxLocalBytes(source) + MaxLocalBytes(target) : 0;
  // A plan of no steps still holds the source and target buffers: a cap
  // given below them is refused, as for any other plan.
  auto within_cap = [&](PlanResult r) -> Result<PlanResult> {
    if (options.memory_cap_bytes > 0 && r.plan.steps().empty() && r.plan.totals().peak_bytes > options.memory_cap_bytes)
      return Status::InvalidArgument(fmt::format(
          "no plan fits the memory cap of {} bytes per device (the source and target shards alone need {})",
          options.memory_cap_bytes, r.plan.totals().peak_bytes));
    return r;
  };
  // Partial values that stay where they are, or an array of no elements (any
  // layouts: every buffer is empty): no steps.
  if ((source.partial() && source == target) || (comparable && source.num_elements() == 0 &&
                                                  source.devices() == target.devices())) {
    PlanBuilder none(source, target);
    PlanResult r{none.Finish(), ComputeLowerBound(source, target)};
    r.memory_cap_bytes = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : 2 * floor;
    return within_cap(std::move(r));
  }
  if (comparable && source.partial() && !target.partial()) return PlanReduction(source, target, options, 2 * floor);
  if (comparable && target.partial()) return PlanPartialTarget(source, target, options, 2 * floor);
  RESHARD_RETURN_IF_ERROR(Exchange::Validate(source, target));
  PlanResult result{CollectivePlan{}, ComputeLowerBound(source, target)};
  const int64_t cap = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : 2 * floor;
  result.memory_cap_bytes = cap;
  const bool ragged = options.strategy != Strategy::kCollectives && HasRaggedExchange(options.target);
  if (options.strategy == Strategy::kExchange && !HasRaggedExchange(options.target))
    return Status::NotSupported(fmt::format("the exchange strategy needs a ragged all-to-all, which {} lacks",
                                            PlanTargetName(options.target)));
  const int64_t node = options.topology.kind() == Topology::Kind::kNodes ? options.topology.devices_per_node() : 1;
  std::optional<PlanMeshes> pm = FindPlanMesh(source, target, options.meshes, node);
  // No mesh names both layouts: plans between explicit layouts.
  if (!pm) {
    RESHARD_ASSIGN_OR_RETURN(PlanResult r, PlanExplicit(source, target, options, cap, std::move(result)));
    return within_cap(std::move(r));
  }
  PlanBuilder builder(source, target);

  // Search over the layouts' own axes, then over their prime pieces (which
  // can move part of an axis); the finer mesh is kept only if strictly cheaper.
  using Path = std::vector<std::pair<AxisLists, Edge>>;
  auto total = [](const Path& p) {
    Cost c;
    for (const auto& [from, e] : p) c = c + e.cost();
    return c;
  };
  std::vector<PlanMesh> meshes = {std::move(pm->coarse)};
  if (pm->fine) meshes.push_back(std::move(*pm->fine));
  std::optional<Path> best;
  size_t best_mesh = 0;
  int64_t best_cap = cap;
  std::optional<Path> remat, shardy;
  for (size_t mi = 0; mi < meshes.size(); ++mi) {
    const PlanMesh& mesh = meshes[mi];
    // The default cap is soft: where no plan fits it (tiny or uneven arrays
    // with no ragged exchange), the cheapest plan under no cap is taken.
    for (int64_t try_cap : {cap, options.memory_cap_bytes > 0 ? cap : INT64_MAX}) {
      NamedPlanner planner(mesh, source, target, options, try_cap, &result.lower_bound);
      std::optional<Path> found;
      if (mi == 0) {
        // Baselines on the caller's axes: Shardy moves whole axes.
        remat = planner.Walk(planner.RematStates());
        shardy = planner.Walk(planner.ShardyStates());
        if (result.baselines.empty()) {
          auto ops_of = [](const Path& p) {
            std::vector<std::string> ops;
            int64_t collectives = 0;
            for (const auto& [from, e] : p) {
              ops.emplace_back(StepOpName(e.draft.op));
              collectives += IsCollective(e.draft.op);
            }
            return std::make_pair(ops, collectives);
          };
          const int64_t devices = static_cast<int64_t>(source.devices().size());
          // (A baseline of no steps, where the layouts agree on the plan
          // mesh, does not apply: left out.)
          if (remat && !remat->empty()) {
            auto [ops, n] = ops_of(*remat);
            result.baselines.push_back(BaselineOf("full_rematerialization", planner.Price(*remat, "baseline"), devices, n, ops));
          }
          if (shardy && !shardy->empty()) {
            auto [ops, n] = ops_of(*shardy);
            result.baselines.push_back(BaselineOf("shardy", planner.Price(*shardy, "baseline"), devices, n, ops));
          }
        }
      }
      if (mesh.source != mesh.target) {
        // Exchanges of very many messages only where nothing else is found.
        found = planner.Search(result.candidates, result.states_explored, /*large_exchanges=*/false);
        if (!found) found = planner.Search(result.candidates, result.states_explored, /*large_exchanges=*/true);
      } else {
        found.emplace();
      }
      // A baseline that fits the cap and the target bounds the answer.
      if (mi == 0)
        for (auto* base : {&shardy, &remat}) {
          if (!*base || options.strategy == Strategy::kExchange) continue;
          bool fits = true;
          for (const auto& [from, e] : **base) fits = fits && e.peak_bytes <= try_cap;
          if (fits && (!found || total(**base) < total(*found))) found = *base;
        }
      if (!found) continue;
      if (!best || total(*found) < total(*best) || (best_cap == INT64_MAX && try_cap != INT64_MAX)) {
        best = found;
        best_mesh = mi;
        best_cap = try_cap;
      }
      break;
    }
  }
  // Never dominated by the Shardy-style sequence: where it fits the cap the
  // plan was found under, uses no more collectives and receives fewer bytes
  // (per-step maxima summed, as both are priced), it is the plan. On a flat
  // network only: across nodes a plan may rightly receive more bytes to send
  // fewer of them over the slow links.
  auto fits = [](const Path& p, int64_t c) {
    return std::all_of(p.begin(), p.end(), [c](const auto& step) { return step.second.peak_bytes <= c; });
  };
  if (best && shardy && fits(*shardy, best_cap) && options.strategy != Strategy::kExchange &&
      options.topology.kind() == Topology::Kind::kFlat) {
    auto collectives = [](const Path& p) {
      int64_t n = 0;
      for (const auto& [from, e] : p) n += e.exchange || IsCollective(e.draft.op);
      return n;
    };
    auto received = [](const Path& p) {
      int64_t n = 0;
      for (const auto& [from, e] : p) n = SaturatingAdd(n, e.recv_bytes);
      return n;
    };
    if (collectives(*shardy) <= collectives(*best) && received(*shardy) < received(*best)) {
      best = shardy;
      best_mesh = 0;
    }
  }
  if (!best) {
    if (options.strategy == Strategy::kExchange)
      return Status::InvalidArgument(fmt::format(
          "no plan fits the memory cap of {} bytes per device: the exchange needs more", cap));
    // What to ask for: the least peak of the plans it knows (the baselines,
    // and the search under no cap). Not the source and target shards
    // together: a plan that slices first frees the source before the target
    // is made.
    NamedPlanner planner(meshes[0], source, target, options, INT64_MAX, &result.lower_bound);
    int64_t least = std::min(remat ? planner.Price(*remat, "").peak_bytes : INT64_MAX,
                             shardy ? planner.Price(*shardy, "").peak_bytes : INT64_MAX);
    std::vector<PlanCandidate> unused;
    int64_t explored = 0;
    if (std::optional<Path> any = planner.Search(unused, explored))
      least = std::min(least, planner.Price(*any, "").peak_bytes);
    return Status::InvalidArgument(fmt::format(
        "no plan fits the memory cap of {} bytes per device (the least any plan it knows needs is {})", cap,
        least == INT64_MAX ? std::string("more") : std::to_string(least)));
  }
  if (best_cap != cap)
    result.candidates.push_back(CapLiftedCandidate(cap));
  result.memory_cap_bytes = best_cap == INT64_MAX ? 0 : best_cap;
  result.memory_cap_lifted = best_cap != cap;
  NamedPlanner planner(meshes[best_mesh], source, target, options, INT64_MAX, &result.lower_bound);
  builder.SetMesh(meshes[best_mesh].mesh);
  result.candidates.push_back(planner.Price(*best, "chosen"));
  // One line per distinct plan, keeping the most telling note.
  auto rank = [](const std::string& note) { return note == "chosen" ? 0 : note == "found" ? 1 : 2; };
  std::vector<PlanCandidate> unique;
  for (PlanCandidate& c : result.candidates) {
    auto same = std::find_if(unique.begin(), unique.end(), [&](const PlanCandidate& u) { return u.steps == c.steps && !c.steps.empty(); });
    if (same == unique.end()) unique.push_back(std::move(c));
    else if (rank(c.note) < rank(same->note)) *same = std::move(c);
  }
  result.candidates = std::move(unique);
  for (const auto& [from, e] : *best) builder.Add(planner.Finalize(builder, from, e));
  result.plan = builder.Finish();
  // The search prices an exchange from sampled devices, which never
  // overestimates it: a plan whose later step is an exchange may come out
  // slower, once priced exactly, than the one-step exchange. Never slower.
  const auto& steps = result.plan.steps();
  const bool later_exchange =
      steps.size() > 1 && std::any_of(steps.begin() + 1, steps.end(), [](const PlanStep& s) { return s.op == StepOp::kExchange; });
  if (ragged && later_exchange && options.strategy != Strategy::kCollectives) {
    PlanBuilder one(source, target);
    one.SetMesh(meshes[best_mesh].mesh);
    Edge e;
    e.exchange = true;
    e.to = meshes[best_mesh].target;
    one.Add(planner.Finalize(one, meshes[best_mesh].source, e));
    CollectivePlan exchange = one.Finish();
    // (Exempt from the default cap, as in the search; held to one given.)
    const bool fits = options.memory_cap_bytes == 0 || exchange.totals().peak_bytes <= options.memory_cap_bytes;
    if (fits && exchange.totals().time_us < result.plan.totals().time_us) {
      result.candidates.push_back(PlanCandidate{
          {}, 0, 0, 0, "priced exactly, the one-step exchange is faster than the plan found: it is the plan"});
      result.plan = std::move(exchange);
    }
  }
  return within_cap(std::move(result));
}

}  // namespace reshard
