// NamedPlanner: the planner's search between two layouts named over one plan
// mesh (plan_mesh.h), and the baselines' fixed walks over the same states.
//
// Search is A* (search_bound.h) over named states (search_state.h) from the
// source state to the target state: from each state it drafts single
// structured steps to its neighbours and, where the target has one, the
// ragged exchange straight to the target. A path's Cost orders plans; the
// first complete plan taken from the queue is the cheapest the search can
// reach, within kMaxStatesExpanded states. Walk prices a fixed sequence of
// states (ShardyStates, RematStates) the same way, and Finalize turns each
// edge of the chosen path into its exactly priced PlanStep.
//
// Deterministic: the same inputs give the same plan on every machine. Keeps
// references to its mesh, layouts and options, which must outlive it; not
// thread-safe (it caches group costs in its PlanContext).
#ifndef RESHARD_SRC_PLAN_NAMED_PLANNER_H_
#define RESHARD_SRC_PLAN_NAMED_PLANNER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan_builder.h"
#include "plan/plan_mesh.h"
#include "plan/search_state.h"
#include "plan/structured_step.h"
#include "reshard/collective_plan.h"
#include "reshard/exchange.h"
#include "reshard/layout.h"
#include "reshard/planner.h"
#include "reshard/topology.h"

namespace reshard {

class NamedPlanner {
 public:
  // Plans from `source` to `target` (both named over `pm`) under `o`, with
  // no step holding more than `cap` bytes on a device. Keeps references to
  // all but `cap`. `bound`, where the caller has it: ComputeLowerBound(source,
  // target), read instead of computed again (O(devices)).
  NamedPlanner(const PlanMesh& pm, const Layout& source, const Layout& target, const PlannerOptions& o, int64_t cap,
               const LowerBound* bound = nullptr);

  // The cheapest path of edges from the source state to the target state.
  // Appends what it priced to `candidates` and counts the states it
  // expanded in `explored`; nullopt where it found no path within the cap
  // (and, past kMaxStatesExpanded states, none so far).
  // With `large_exchanges` false, a one-step exchange of more than
  // kMaxSearchedExchangeMessages messages (estimated) is listed, not an
  // edge: a chosen exchange is built message by message (2^30 messages on
  // 2^20 devices: about a minute), where structured steps are linear in
  // devices. The caller searches again with it true where that finds no path.
  std::optional<std::vector<std::pair<AxisLists, Edge>>> Search(std::vector<PlanCandidate>& candidates,
                                                                int64_t& explored, bool large_exchanges = true);

  // A fixed sequence of states (a baseline), as edges; nullopt if a step has no structured form.
  std::optional<std::vector<std::pair<AxisLists, Edge>>> Walk(const std::vector<AxisLists>& states);

  // Shardy's reshard-to-collectives order: slices first, then one
  // all-to-all per axis moved between dims, collective-permutes where axes
  // are out of order, all-gathers of misplaced minor axes last; gathering
  // everything where uneven dims block every single step.
  std::vector<AxisLists> ShardyStates();

  // XLA's fallback: gather everything, then slice the target.
  std::vector<AxisLists> RematStates() { return {pm_.source, AxisLists(pm_.source.size()), pm_.target}; }

  // Bytes all devices receive through a drafted step.
  int64_t Total(const StepDraft& d) const;

  // The plan step of edge `e` from state `from`, priced exactly (a permute
  // with its pairs, the exchange per device), its devices indexed as `b`'s.
  PlanStep Finalize(PlanBuilder& b, const AxisLists& from, const Edge& e);

  // Fills `step` (its layouts and specs already set) from a detailed
  // structured draft over ctx's plan mesh: group, program, time, peak and
  // per-device bytes and messages (a permute's for its pairs only), indexed
  // as `b`'s devices. Also the reduction steps' (reduction_planner.h).
  static void FillStructured(PlanStep& step, StepDraft d, const PlanContext& ctx, const PlanBuilder& b);

  // Makes `step` the ragged exchange `ex`, priced exactly over `topo`
  // (also the exchange between explicit layouts, explicit_plan.cc).
  // Returns each device's staged bytes (each distinct box it sends, once).
  static std::vector<int64_t> FillExchange(PlanStep& step, const Exchange& ex, const Topology& topo);

  // An exchange step (plain or reducing) between states of ctx's plan mesh
  // works on their padded shards, as the structured steps beside it: sets
  // its specs and shard shapes (the output's `pending` axes in its spec) and
  // raises each device's peak from the exact buffers the exchange's figures
  // count to the padded shards of `from` and `to`. REQUIRES: the step's
  // figures indexed as its output layout's devices.
  static void OnPaddedShards(PlanStep& step, const PlanContext& ctx, const AxisLists& from, const AxisLists& to,
                             const std::vector<int32_t>& pending = {});

  // A path as --explain lists it, priced as the search priced it.
  PlanCandidate Price(const std::vector<std::pair<AxisLists, Edge>>& path, std::string note) const;

  const PlanContext& context() const { return ctx_; }

 private:
  // The layout of state `s` (the caller's source or target at theirs).
  Layout LayoutOf(const AxisLists& s) const;

  template <typename Nodes>
  std::vector<std::pair<AxisLists, Edge>> Path(const Nodes& nodes, int v) const {
    std::vector<std::pair<AxisLists, Edge>> path;
    for (; nodes[v].parent >= 0; v = nodes[v].parent) {
      path.push_back({StateOfKey(*nodes[nodes[v].parent].key), nodes[v].via});
      path.back().second.to = StateOfKey(*nodes[v].key);
    }
    std::reverse(path.begin(), path.end());
    return path;
  }
  template <typename Nodes>
  PlanCandidate Describe(const Nodes& nodes, int v, std::string note) const {
    return Price(Path(nodes, v), std::move(note));
  }

  const PlanMesh& pm_;
  PlanContext ctx_;
  const Layout& source_;
  const Layout& target_;
  const LowerBound* bound_;
  const PlannerOptions& options_;
  int64_t cap_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_NAMED_PLANNER_H_
