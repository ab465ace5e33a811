#include "plan/named_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "plan/exchange_step.h"
#include "plan/search_bound.h"

namespace reshard {
namespace {

// The search expands at most this many states; past it, the cheapest
// complete plan found so far is taken (the baselines always are plans).
constexpr int64_t kMaxStatesExpanded = 2048;
// Exchange edges over at most this many devices are priced over every device
// once the sample fits them within the cap (their peak must hold on all).
constexpr size_t kExactExchangeDevices = 4096;
// Search(large_exchanges = false): the most messages an exchange edge has.
constexpr int64_t kMaxSearchedExchangeMessages = int64_t{1} << 24;

}  // namespace

NamedPlanner::NamedPlanner(const PlanMesh& pm, const Layout& source, const Layout& target, const PlannerOptions& o,
                           int64_t cap, const LowerBound* bound)
    : pm_(pm), ctx_(pm, o.topology, source.shape(), source.element_bytes()), source_(source), target_(target),
      bound_(bound), options_(o), cap_(cap) {}

std::optional<std::vector<std::pair<AxisLists, Edge>>> NamedPlanner::Search(std::vector<PlanCandidate>& candidates,
                                                                            int64_t& explored, bool large_exchanges) {
  // A node's state is its key in `index` (decoded where a path needs it):
  // most nodes are never expanded, so they keep no state of their own.
  struct Node {
    const std::string* key;
    Cost cost;
    int parent = -1;
    Edge via;
    bool done = false;
    int64_t bound_ps = 0;
  };
  std::vector<Node> nodes;
  std::unordered_map<std::string, int> index;
  // A*: the queue orders by cost so far plus SearchBound's lower bound of
  // what remains, computed once per state.
  SearchBound bound(ctx_, pm_.target);
  using Entry = std::tuple<Cost, Cost, int>;  // (estimate, cost so far, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  const std::string target_key = StateKey(pm_.target);
  // `at` is the state's node, or -1 where it has none yet.
  auto relax = [&](int from, std::string key, int at, const AxisLists& to, Edge e, Cost c) {
    if (at < 0) {
      at = static_cast<int>(nodes.size());
      nodes.push_back(Node{&index.emplace(std::move(key), at).first->first, c, from, std::move(e)});
      nodes.back().bound_ps = bound.Remaining(to);
    } else if (nodes[at].done || !(c < nodes[at].cost)) {
      return;
    } else {
      nodes[at].cost = c;
      nodes[at].parent = from;
      nodes[at].via = std::move(e);
    }
    Cost estimate = c;
    estimate.time_ps = SaturatingAdd(estimate.time_ps, nodes[at].bound_ps);
    queue.push({estimate, c, at});
    if (*nodes[at].key == target_key) candidates.push_back(Describe(nodes, at, "found"));
  };
  auto node_of = [&](const std::string& key) {
    auto it = index.find(key);
    return it == index.end() ? -1 : it->second;
  };
  relax(-1, StateKey(pm_.source), -1, pm_.source, Edge{}, Cost{});
  const bool structured = options_.strategy != Strategy::kExchange;
  const bool ragged = options_.strategy != Strategy::kCollectives && HasRaggedExchange(options_.target);
  int exchanges_left = options_.strategy == Strategy::kExchange ? 1 : 8;
  int64_t expanded = 0;
  while (!queue.empty()) {
    // Plain variables, not a structured binding: the neighbour lambda
    // below captures them, which clang 14 refuses for bindings.
    const Cost cost = std::get<1>(queue.top());
    const int u = std::get<2>(queue.top());
    queue.pop();
    if (nodes[u].done || nodes[u].cost < cost) continue;
    nodes[u].done = true;
    ++explored;
    if (*nodes[u].key == target_key) return Path(nodes, u);
    if (++expanded > kMaxStatesExpanded) {
      // Out of budget: the cheapest complete plan found so far (the
      // caller also weighs the baselines).
      candidates.push_back(PlanCandidate{{}, 0, 0, 0,
                                         fmt::format("search stopped after {} states", kMaxStatesExpanded)});
      const int at = node_of(target_key);
      if (at < 0) return std::nullopt;
      return Path(nodes, at);
    }
    const AxisLists s = StateOfKey(*nodes[u].key);
    const int64_t shard_bytes = ctx_.ShardBytes(s);
    bound.Expanding(s);
    if (structured)
      ForEachNeighbour(ctx_, s, pm_.target, [&](const AxisLists& v, std::string key) {
        // A state already expanded has its cheapest cost (the bound is
        // consistent): no step into it can help, so none is drafted.
        const int at = node_of(key);
        if (at >= 0 && nodes[at].done) return;
        // Nor a step that would hold more than the cap: each holds both
        // shards at once at least.
        if (shard_bytes + ctx_.ShardBytes(v) > cap_) return;
        std::optional<StepDraft> d = DraftStep(ctx_, s, v, /*detailed=*/false);
        if (!d || d->peak_bytes > cap_) return;
        Edge e{false, {}, {}, d->time_us, d->recv_bytes, d->peak_bytes, Total(*d)};
        e.draft = std::move(*d);
        const Cost c = cost + e.cost();
        relax(u, std::move(key), at, v, std::move(e), c);
      });
    if (ragged && exchanges_left > 0) {
      --exchanges_left;
      const Layout from = LayoutOf(s);
      // The path to s, then the exchange `e`, as a candidate.
      auto list_exchange = [&](const Edge& e, std::string note) {
        std::vector<std::pair<AxisLists, Edge>> path = Path(nodes, u);
        path.push_back({s, e});
        candidates.push_back(Price(path, std::move(note)));
      };
      // The one structured collective from s to the target, if any, set
      // against the exchange below. A permute in the search is priced as if
      // every device moved (its pairs are not drafted); here, where it may
      // take the exchange's place (at most 8 times a search), its movers
      // are counted (O(devices)), so that it compares with the exchange's
      // exact total.
      std::optional<StepDraft> direct;
      int64_t direct_total = 0;
      if (structured) {
        direct = DraftStep(ctx_, s, pm_.target, /*detailed=*/false);
        if (direct && direct->peak_bytes > cap_) direct.reset();
        if (direct)
          direct_total = direct->op == StepOp::kCollectivePermute
                             ? direct->recv_bytes * PermuteMovers(ctx_, s, pm_.target)
                             : Total(*direct);
      }
      // Where that collective moves no more than the exchange must (the
      // lower bound, which it meets) and is no slower than the exchange's
      // floor, the exchange is never built: it could only tie (below), and
      // its tables cost 100 B or more a device.
      if (direct) {
        const LowerBound lb = s == pm_.source && bound_ ? *bound_ : ComputeLowerBound(from, target_);
        if (direct->recv_bytes <= lb.max_recv_bytes && direct_total <= lb.total_bytes) {
          const double floor = std::max(ExchangeTimeFloor(from, target_, *ctx_.topology, lb),
                                        static_cast<double>(bound.NodeRemaining(s)) * 1e-6);
          if (direct->time_us <= floor * (1 + 1e-9)) {
            // Listed at its floors: the least it could be priced at.
            list_exchange(Edge{true, pm_.target, {}, floor, lb.max_recv_bytes,
                               ctx_.ShardBytes(s) + ctx_.ShardBytes(pm_.target), lb.total_bytes},
                          "not drafted: one collective moves as much, no slower than the exchange's floor, and is "
                          "drafted in its place");
            Edge collective{false, {}, {}, direct->time_us, direct->recv_bytes, direct->peak_bytes, direct_total};
            collective.draft = std::move(*direct);
            const Cost c = cost + collective.cost();
            relax(u, target_key, node_of(target_key), pm_.target, std::move(collective), c);
            continue;
          }
        }
      }
      Exchange ex = Exchange::Create(from, target_).value();
      // The default cap keeps XLA's gather-everything fallback out; it never
      // excludes the one-step minimal exchange, the plan that moves least.
      const bool exempt = options_.memory_cap_bytes == 0 && s == pm_.source;
      ExchangeDraft d = DraftExchange(ex, *ctx_.topology, /*detailed=*/false);
      // Padded shards on both sides, plus the staging the exchange needs.
      int64_t peak = ctx_.ShardBytes(s) + ctx_.ShardBytes(pm_.target) + d.max_staging_bytes;
      // Above 64 devices the draft samples devices, which may all miss the
      // one that stages most: an edge the sample fits within the cap is
      // priced over every device, up to kExactExchangeDevices (a plan's step
      // over the cap on 112 of 640 devices was taken so), its time too;
      // unless even the most any device could hold fits (it stages at most
      // its source shard, and receives at most the bound's busiest device:
      // the exchange meets the bound).
      const int64_t most = ctx_.ShardBytes(s) * 2 + ctx_.ShardBytes(pm_.target) + d.max_recv_bytes;
      if (!exempt && peak <= cap_ && most > cap_ && ex.devices().size() > 64 &&
          ex.devices().size() <= kExactExchangeDevices) {
        const ExchangeDraft exact = DraftExchange(ex, *ctx_.topology, /*detailed=*/true);
        peak = ctx_.ShardBytes(s) + ctx_.ShardBytes(pm_.target) + exact.max_staging_bytes;
        d.time_us = exact.time_us;
      }
      // Sampled devices may all miss the node that needs most from other
      // nodes; the exchange takes at least that node's share, and so never
      // less than the bound the search ordered by.
      const double time_us = std::max(d.time_us, static_cast<double>(bound.NodeRemaining(s)) * 1e-6);
      Edge e{true, pm_.target, {}, time_us, d.max_recv_bytes, peak, d.total_bytes};
      const bool large = !large_exchanges && d.messages > kMaxSearchedExchangeMessages;
      list_exchange(e, large                      ? fmt::format("not an edge: about {} messages to build", d.messages)
                       : peak <= cap_ || exempt ? "priced"
                                                : "over the memory cap");
      // Where one structured collective reaches the target in no more time
      // and bytes (most into a device, and in all), the exchange is that
      // collective's messages priced one by one: only summation order tells
      // them apart (one part in 1e9), and the real collective is the better
      // program. It is the edge instead, which also spares the exact
      // pricing a chosen exchange needs (per pair: n^2 at n devices).
      if (direct) {
        if (direct->recv_bytes <= d.max_recv_bytes && direct_total <= d.total_bytes &&
            direct->time_us <= time_us * (1 + 1e-9)) {
          Edge collective{false, {}, {}, direct->time_us, direct->recv_bytes, direct->peak_bytes, direct_total};
          collective.draft = std::move(*direct);
          const Cost c = cost + collective.cost();
          candidates.back().note = "priced; one collective moving as much as fast is drafted in its place";
          relax(u, target_key, node_of(target_key), pm_.target, std::move(collective), c);
          continue;
        }
      }
      if ((peak <= cap_ || exempt) && !large) {
        const Cost c = cost + e.cost();
        relax(u, target_key, node_of(target_key), pm_.target, std::move(e), c);
      }
    }
  }
  return std::nullopt;
}

std::optional<std::vector<std::pair<AxisLists, Edge>>> NamedPlanner::Walk(const std::vector<AxisLists>& states) {
  std::vector<std::pair<AxisLists, Edge>> path;
  for (size_t i = 0; i + 1 < states.size(); ++i) {
    if (states[i] == states[i + 1]) continue;  // e.g. a replicated source gathers nothing
    std::optional<StepDraft> d = DraftStep(ctx_, states[i], states[i + 1], /*detailed=*/false);
    if (!d) return std::nullopt;
    path.push_back({states[i], Edge{false, states[i + 1], *d, d->time_us, d->recv_bytes, d->peak_bytes, Total(*d)}});
  }
  return path;
}

std::vector<AxisLists> NamedPlanner::ShardyStates() {
  const AxisLists& t = pm_.target;
  std::vector<AxisLists> states = {pm_.source};
  for (int iter = 0; iter < 64 && states.back() != t; ++iter) {
    const AxisLists s = states.back();
    const size_t rank = s.size();
    auto valid = [&](const AxisLists& v) { return v != s && DraftStep(ctx_, s, v, false).has_value(); };
    std::vector<int> where(ctx_.axis_sizes.size(), -1);
    for (size_t d = 0; d < rank; ++d)
      for (int32_t a : s[d]) where[a] = static_cast<int>(d);
    AxisLists v = s;
    for (size_t d = 0; d < rank; ++d)
      if (IsPrefix(s[d], t[d]))
        for (size_t i = s[d].size(); i < t[d].size() && where[t[d][i]] < 0; ++i) v[d].push_back(t[d][i]);
    if (valid(v)) { states.push_back(v); continue; }
    // The longest run of the target's next axes that ends another dim, in order: one all-to-all.
    bool moved = false;
    for (size_t e = 0; e < rank && !moved; ++e) {
      if (!IsPrefix(s[e], t[e]) || s[e].size() == t[e].size()) continue;
      const int d = where[t[e][s[e].size()]];
      if (d < 0) continue;
      for (size_t run = std::min(t[e].size() - s[e].size(), s[d].size()); run > 0 && !moved; --run) {
        if (!std::equal(s[d].end() - run, s[d].end(), t[e].begin() + s[e].size())) continue;
        v = s;
        v[d].resize(s[d].size() - run);
        v[e].insert(v[e].end(), s[d].end() - run, s[d].end());
        if (valid(v)) { states.push_back(v); moved = true; }
      }
    }
    if (moved) continue;
    if (std::optional<StepDraft> p = DraftStep(ctx_, s, t, false); p && p->op == StepOp::kCollectivePermute) {
      states.push_back(t);
      continue;
    }
    for (size_t d = 0; d < rank && !moved; ++d) {
      if (IsPrefix(s[d], t[d])) continue;
      v = s;
      v[d].pop_back();
      if (valid(v)) { states.push_back(v); moved = true; }
    }
    if (moved) continue;
    v = AxisLists(rank);  // gather everything: always a valid all-gather
    if (valid(v)) states.push_back(v);
    else break;
  }
  if (states.back() != t) states.push_back(t);
  return states;
}

int64_t NamedPlanner::Total(const StepDraft& d) const {
  // A permute, drafted without its pairs, is priced as if every device moved.
  return d.recv_bytes * ctx_.num_devices();
}

Layout NamedPlanner::LayoutOf(const AxisLists& s) const {
  // The caller's layouts at their own states (equal to their states'
  // layouts; a copy shares their arrays, where building one again costs
  // O(devices)).
  if (s == pm_.source) return source_;
  if (s == pm_.target) return target_;
  return StateLayout(pm_, s, source_.shape(), source_.dtype());
}

PlanStep NamedPlanner::Finalize(PlanBuilder& b, const AxisLists& from, const Edge& e) {
  const Layout in = LayoutOf(from);
  const Layout out = LayoutOf(e.to);
  PlanStep step{StepOp::kExchange, in, out};
  if (e.exchange) {
    FillExchange(step, Exchange::Create(in, out).value(), *ctx_.topology);
    OnPaddedShards(step, ctx_, from, e.to);
    return step;
  }
  step.input_spec = StateText(pm_, from);
  step.output_spec = StateText(pm_, e.to);
  step.input_shard = ctx_.ShardShape(from);
  step.output_shard = ctx_.ShardShape(e.to);
  FillStructured(step, *DraftStep(ctx_, from, e.to, /*detailed=*/true), ctx_, b);
  return step;
}

void NamedPlanner::OnPaddedShards(PlanStep& step, const PlanContext& ctx, const AxisLists& from, const AxisLists& to,
                                  const std::vector<int32_t>& pending) {
  step.input_spec = StateText(*ctx.plan_mesh, from);
  step.output_spec = StateText(*ctx.plan_mesh, to, pending);
  step.input_shard = ctx.ShardShape(from);
  step.output_shard = ctx.ShardShape(to);
  for (ProgramOp& op : step.program) op.shape = step.output_shard;
  const int64_t padded_in = ctx.ShardBytes(from), padded_out = ctx.ShardBytes(to);
  const std::vector<int64_t>& devices = step.output.devices();
  for (size_t i = 0; i < devices.size(); ++i)
    step.peak_bytes.Set(i, step.peak_bytes[i] + padded_in - step.input.LocalBytes(devices[i]) + padded_out -
                               step.output.LocalBytes(devices[i]));
}

void NamedPlanner::FillStructured(PlanStep& step, StepDraft d, const PlanContext& ctx, const PlanBuilder& b) {
  const PlanMesh& pm = *ctx.plan_mesh;
  const size_t n = b.num_devices();
  step.op = d.op;
  step.group_axes = d.group;
  if (!d.group.empty()) step.group_spec = AxesText(pm, d.group);
  step.group_size = 1;
  for (int32_t a : d.group) step.group_size *= ctx.axis_sizes[a];
  step.num_groups = d.op == StepOp::kSlice ? 0 : ctx.num_devices() / step.group_size;
  step.program = std::move(d.program);  // (a permute's pairs: 8 B a mover)
  step.time_us = d.time_us;
  step.peak_bytes = DeviceValues::Uniform(n, d.peak_bytes);
  if (d.op == StepOp::kCollectivePermute) {
    step.send_bytes = step.recv_bytes = step.sends = step.recvs = DeviceValues::Uniform(n, 0);
    // The movers: the pairs of its program's permute op.
    for (const ProgramOp& op : step.program) {
      if (op.kind != ProgramOp::Kind::kCollectivePermute) continue;
      for (const auto& [s, t] : op.pairs) {
        const size_t si = b.Index(pm.mesh.device(s)), ti = b.Index(pm.mesh.device(t));
        step.send_bytes.Set(si, d.send_bytes);
        step.sends.Set(si, 1);
        step.recv_bytes.Set(ti, d.recv_bytes);
        step.recvs.Set(ti, 1);
      }
    }
  } else {
    step.send_bytes = DeviceValues::Uniform(n, d.send_bytes);
    step.recv_bytes = DeviceValues::Uniform(n, d.recv_bytes);
    step.sends = step.recvs = DeviceValues::Uniform(n, d.messages);
  }
}

std::vector<int64_t> NamedPlanner::FillExchange(PlanStep& step, const Exchange& ex, const Topology& topo) {
  const ExchangeDraft d = DraftExchange(ex, topo, /*detailed=*/true);
  FillExchangeStep(step, d);
  return d.staged_bytes;
}

PlanCandidate NamedPlanner::Price(const std::vector<std::pair<AxisLists, Edge>>& path, std::string note) const {
  PlanCandidate c;
  for (const auto& [from, e] : path) {
    c.steps.push_back(EdgeText(pm_, from, e));
    c.time_us += e.time_us;
    c.max_recv_bytes = SaturatingAdd(c.max_recv_bytes, e.recv_bytes);
    c.peak_bytes = std::max(c.peak_bytes, e.peak_bytes);
  }
  c.note = std::move(note);
  return c;
}

}  // namespace reshard
