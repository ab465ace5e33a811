#include "reshard/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <unordered_map>
#include <tuple>

#include "plan/cost_model.h"
#include "plan/exchange_step.h"
#include "plan/plan_mesh.h"
#include "plan/structured_step.h"
#include "reshard/exchange.h"
#include "reshard/named_sharding.h"

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

// Assembles a CollectivePlan (the plan's only writer).
class PlanBuilder {
 public:
  PlanBuilder(const Layout& source, const Layout& target) {
    plan_.source_ = source;
    plan_.target_ = target;
    std::merge(source.devices().begin(), source.devices().end(), target.devices().begin(), target.devices().end(),
               std::back_inserter(plan_.devices_));
    plan_.devices_.erase(std::unique(plan_.devices_.begin(), plan_.devices_.end()), plan_.devices_.end());
  }
  void SetMesh(const Mesh& mesh) {
    plan_.mesh_ = mesh;
    for (const Mesh::Axis& a : mesh.axes()) plan_.axis_labels_.push_back(a.name);
  }
  size_t Index(int64_t device) const {
    return std::lower_bound(plan_.devices_.begin(), plan_.devices_.end(), device) - plan_.devices_.begin();
  }
  size_t num_devices() const { return plan_.devices_.size(); }
  int64_t device(size_t index) const { return plan_.devices_[index]; }
  void Add(PlanStep step) { plan_.steps_.push_back(std::move(step)); }

  CollectivePlan Finish() {
    PlanTotals& t = plan_.totals_;
    const size_t n = plan_.devices_.size();
    bool uniform = true;
    for (const PlanStep& s : plan_.steps_) {
      if (IsCollective(s.op)) ++t.collectives;
      t.time_us += s.time_us;
      t.peak_bytes = std::max(t.peak_bytes, s.peak_bytes.Max());
      t.total_bytes += s.recv_bytes.Sum();
      uniform = uniform && s.send_bytes.uniform() && s.recv_bytes.uniform();
    }
    if (uniform) {  // SPMD all through: one device stands for all
      const CollectivePlan::DeviceTotals d = n ? plan_.TotalsOf(0) : CollectivePlan::DeviceTotals{};
      t.max_send_bytes = d.send_bytes;
      t.max_recv_bytes = d.recv_bytes;
    } else {
      for (size_t i = 0; i < n; ++i) {
        const CollectivePlan::DeviceTotals d = plan_.TotalsOf(i);
        t.max_send_bytes = std::max(t.max_send_bytes, d.send_bytes);
        t.max_recv_bytes = std::max(t.max_recv_bytes, d.recv_bytes);
      }
    }
    if (plan_.steps_.empty())
      for (size_t i = 0; i < n; ++i) t.peak_bytes = std::max(t.peak_bytes, plan_.TotalsOf(i).peak_bytes);
    return std::move(plan_);
  }

 private:
  CollectivePlan plan_;
};

namespace {

// The search expands at most this many states; past it, the cheapest
// complete plan found so far is taken (the baselines always are plans).
constexpr int64_t kMaxStatesExpanded = 2048;

// Additive and totally ordered: modeled time (picoseconds), then bytes
// received by the busiest device, then bytes received in all, then ragged
// exchanges, then steps.
// Sums of costs saturate: a plan for petabytes takes more picoseconds than
// int64 holds, and the order of plans is all that a sum decides.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? (b > 0 ? INT64_MAX : INT64_MIN) : out;
}

struct Cost {
  int64_t time_ps = 0, bytes = 0, total = 0, exchanges = 0, steps = 0;
  friend auto operator<=>(const Cost&, const Cost&) = default;
  Cost operator+(const Cost& o) const {
    return {SaturatingAdd(time_ps, o.time_ps), SaturatingAdd(bytes, o.bytes), SaturatingAdd(total, o.total),
            exchanges + o.exchanges, steps + o.steps};
  }
};
int64_t Picoseconds(double us) {
  const double ps = us * 1e6;
  return ps >= 9.2e18 ? INT64_MAX : std::llround(ps);
}

std::string StateText(const PlanMesh& pm, const AxisLists& s) {
  std::string out = "[";
  for (size_t d = 0; d < s.size(); ++d) out += (d ? ", {" : "{") + pm.AxesText(s[d], ", ") + "}";
  return out + "]";
}

std::string AxesText(const PlanMesh& pm, const std::vector<int32_t>& axes) { return "{" + pm.AxesText(axes, ",") + "}"; }

Layout StateLayout(const PlanMesh& pm, const AxisLists& s, const std::vector<int64_t>& shape, DType dtype) {
  std::vector<NamedSharding::Dim> dims;
  for (const auto& l : s) {
    NamedSharding::Dim d;
    for (int32_t a : l) d.axes.push_back(AxisRef{a, 1, 0});
    dims.push_back(std::move(d));
  }
  // A state over the plan mesh's whole axes is always a valid named sharding.
  return NamedSharding::Create(pm.mesh, std::move(dims)).value().ToLayout(shape, dtype).value();
}

// One edge of the search: a structured step, or the ragged exchange to the target.
struct Edge {
  bool exchange = false;
  AxisLists to;
  StepDraft draft;            // structured
  double time_us = 0;
  int64_t recv_bytes = 0, peak_bytes = 0, total_bytes = 0;
  Cost cost() const { return Cost{Picoseconds(time_us), recv_bytes, total_bytes, exchange ? 1 : 0, 1}; }
};

std::string EdgeText(const PlanMesh& pm, const AxisLists& from, const Edge& e) {
  if (e.exchange) return fmt::format("exchange (ragged): {} -> {}", StateText(pm, from), StateText(pm, e.to));
  std::string op(StepOpName(e.draft.op));
  if (!e.draft.group.empty()) op += " over " + AxesText(pm, e.draft.group);
  return fmt::format("{}: {} -> {}", op, StateText(pm, from), StateText(pm, e.to));
}

// A state as a short string (axis ids, dims separated by 0xFF): hashed and
// compared far faster than nested vectors.
std::string StateKey(const AxisLists& s) {
  std::string k;
  for (const auto& l : s) {
    for (int32_t a : l) k.push_back(static_cast<char>(a));
    k.push_back(static_cast<char>(0xFF));
  }
  return k;
}

// The state StateKey made `key` from.
AxisLists StateOfKey(const std::string& key) {
  AxisLists s(1);
  for (char c : key) {
    if (c == static_cast<char>(0xFF)) s.emplace_back();
    else s.back().push_back(static_cast<unsigned char>(c));
  }
  s.pop_back();
  return s;
}

bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Calls visit(state, key) once for each state one structured step from `s`
// that may lead toward `t`, in a fixed order. Candidates are built in one
// scratch state and copied only by the visitor, since most are repeats.
template <typename Visit>
void ForEachNeighbour(const PlanContext& ctx, const AxisLists& s, const AxisLists& t, Visit&& visit) {
  const size_t rank = s.size();
  // Repeats are many: compare hashes before keys.
  std::vector<std::pair<size_t, std::string>> seen;
  const std::hash<std::string> hash;
  seen.emplace_back(hash(StateKey(s)), StateKey(s));
  std::vector<int> where(ctx.axis_sizes.size(), -1);  // dim holding each axis
  for (size_t d = 0; d < rank; ++d)
    for (int32_t a : s[d]) where[a] = static_cast<int>(d);
  auto add = [&](const AxisLists& v) {
    std::string key = StateKey(v);
    const size_t h = hash(key);
    for (const auto& [sh, sk] : seen)
      if (sh == h && sk == key) return;
    seen.emplace_back(h, key);
    visit(v, std::move(key));
  };
  AxisLists v;
  // All-gathers of one dim's minor axes; and of everything off the target's prefix.
  AxisLists off = s;
  for (size_t d = 0; d < rank; ++d) {
    for (size_t m = 1; m <= s[d].size(); ++m) {
      v = s;
      v[d].resize(s[d].size() - m);
      add(v);
    }
    size_t p = 0;
    while (p < s[d].size() && p < t[d].size() && s[d][p] == t[d][p]) ++p;
    off[d].resize(p);
  }
  add(off);
  // Slices: the target's next axes where unused; and all dims at once.
  AxisLists all_slices = s;
  for (size_t d = 0; d < rank; ++d) {
    if (!IsPrefix(s[d], t[d])) continue;
    for (size_t i = s[d].size(); i < t[d].size() && where[t[d][i]] < 0; ++i) {
      v = s;
      v[d].insert(v[d].end(), t[d].begin() + s[d].size(), t[d].begin() + i + 1);
      add(v);
      all_slices[d] = v[d];
    }
  }
  add(all_slices);
  // Slices of any unused target axis onto any dim: less data for the steps
  // after (a permute can put the axes in order later).
  std::vector<bool> in_target(ctx.axis_sizes.size(), false);
  for (const auto& l : t)
    for (int32_t a : l) in_target[a] = true;
  for (size_t a = 0; a < ctx.axis_sizes.size(); ++a) {
    if (where[a] >= 0 || !in_target[a]) continue;
    for (size_t d = 0; d < rank; ++d) {
      v = s;
      v[d].push_back(static_cast<int32_t>(a));
      add(v);
    }
  }
  // All-to-alls: the target's next axes of a dim, taken from other dims'
  // minor ends; each dim alone, then every dim at once.
  auto move_next = [&](const AxisLists& base, size_t e, size_t count, AxisLists& out) {
    out = base;
    const std::span<const int32_t> axes(t[e].begin() + s[e].size(), count);
    std::map<int, size_t> taken;  // source dim -> axes taken from it
    for (int32_t a : axes) {
      if (where[a] < 0 || where[a] == static_cast<int>(e)) return false;
      ++taken[where[a]];
    }
    for (auto [d, k] : taken) {
      // The axes taken from dim d must be exactly its minor-most k.
      for (size_t i = s[d].size() - k; i < s[d].size(); ++i)
        if (std::find(axes.begin(), axes.end(), s[d][i]) == axes.end()) return false;
      if (out[d].size() != s[d].size()) return false;  // already changed by another move
      out[d].resize(s[d].size() - k);
    }
    out[e].insert(out[e].end(), axes.begin(), axes.end());
    return true;
  };
  AxisLists fused = s;
  for (size_t e = 0; e < rank; ++e) {
    if (!IsPrefix(s[e], t[e])) continue;
    size_t best = 0;
    for (size_t count = 1; s[e].size() + count <= t[e].size(); ++count) {
      if (move_next(s, e, count, v)) {
        add(v);
        best = count;
      }
    }
    if (best && move_next(fused, e, best, v)) fused = v;
  }
  add(fused);
  // Moves of a dim's minor axes to the minor end of another dim (steps of
  // hierarchical plans, and ways around a blocked axis).
  for (size_t d = 0; d < rank; ++d)
    for (size_t m = 1; m <= s[d].size(); ++m)
      for (size_t e = 0; e < rank; ++e) {
        if (e == d) continue;
        v = s;
        v[e].insert(v[e].end(), s[d].end() - m, s[d].end());
        v[d].resize(s[d].size() - m);
        add(v);
      }
  // Collective-permutes: straight to the target; each dim's axes reordered
  // with those its target has first, in the target's order; swaps of
  // equal-size axes.
  add(t);
  for (size_t d = 0; d < rank; ++d) {
    v = s;
    std::stable_sort(v[d].begin(), v[d].end(), [&](int32_t a, int32_t b) {
      auto rank_of = [&](int32_t x) {
        auto it = std::find(t[d].begin(), t[d].end(), x);
        return it == t[d].end() ? t[d].size() : static_cast<size_t>(it - t[d].begin());
      };
      return rank_of(a) < rank_of(b);
    });
    add(v);
  }
  for (size_t a = 0; a < ctx.axis_sizes.size(); ++a) {
    if (where[a] < 0) continue;
    for (size_t b = 0; b < ctx.axis_sizes.size(); ++b) {
      if (b == a || ctx.axis_sizes[a] != ctx.axis_sizes[b] || (where[b] >= 0 && b < a)) continue;
      v = s;
      for (auto& l : v)
        for (int32_t& x : l) x = x == static_cast<int32_t>(a) ? static_cast<int32_t>(b) : x == static_cast<int32_t>(b) ? static_cast<int32_t>(a) : x;
      add(v);
    }
  }
}

// The A* bound: a lower bound on the time still to come from a state, the
// largest of
//   - one step latency, unless slices alone reach the target;
//   - over 64 evenly spaced devices, the bytes a device still lacks of its
//     target shard (its target box less its overlap with the box it holds)
//     at the fastest link's rate;
//   - on nodes:K where a node is exactly the plan mesh's minor pieces (an
//     iota mesh cut at the node boundary), the sum of: over the nodes of
//     those devices, the bytes a node lacks (what its devices need of their
//     target shards and no device of the node holds) over its K network
//     links, plus one step latency if it lacks any; and, while the shard is
//     smaller than the target's, the local copy of the least target shard.
// Each is consistent, so the first complete plan taken from the queue is the
// cheapest the search can reach: a step's receives add at most what they
// bring to a device's overlap; a slice never makes the target need less; a
// node gains at most what its devices receive from other nodes, and a step
// takes at least as long as each of them receives, since with nodes as whole
// pieces every device of a group sees the same links and group steps are
// priced exactly for each; the first step to grow the shard to the target's
// is a gather, an all-to-all or the exchange, which lays out its output (a
// permute keeps the shard, a slice shrinks it). The terms of the sum bound
// the receives, the step latency and the copies of a step, which add up.
// The node term is why nodes:K searches stay small: links inside a node are
// far faster than between nodes, so the bytes a device lacks bound little
// there.
//
// A state's boxes are per-dim products, and a node's holdings and needs too
// (it is a product of pieces, each in one dim), so overlaps are kept per dim
// and list of pieces: states share most of their dims.
class SearchBound {
 public:
  SearchBound(const PlanContext& ctx, const AxisLists& target) : ctx_(ctx), target_(target) {
    const Topology& topo = *ctx.topology;
    latency_ps_ = Picoseconds(topo.step_latency_us());
    fastest_ = topo.FastestBytesPerUs();
    const int64_t n = ctx.num_devices();
    for (int64_t i = 0, k = std::min<int64_t>(64, n); i < k; ++i) {
      const int64_t pos = i * n / k;
      Sample sample{pos, CoordinatesOf(pos), {}, 1};
      for (size_t d = 0; d < target.size(); ++d) {
        sample.target.push_back(Box(target[d], sample.coords, d));
        sample.volume *= sample.target.back().second - sample.target.back().first;
      }
      device_ceiling_ps_ =
          std::max(device_ceiling_ps_, Picoseconds(static_cast<double>(sample.volume * ctx.element_bytes) / fastest_));
      samples_.push_back(std::move(sample));
    }
    if (topo.kind() != Topology::Kind::kNodes || topo.Uniform() || !ctx.plan_mesh->mesh.is_iota()) return;
    const int64_t k = topo.devices_per_node();
    int64_t span = 1;
    size_t first = ctx.axis_sizes.size();
    while (first > 0 && span < k) span *= ctx.axis_sizes[--first];
    if (span != k) return;
    first_inside_ = first;
    node_rate_ = static_cast<double>(k) * topo.network().bytes_per_us;
    target_shard_bytes_ = ctx.ShardBytes(target);
    int64_t least = ctx.element_bytes;  // the least target shard, unpadded
    for (size_t d = 0; d < target.size(); ++d) {
      int64_t parts = 1;
      for (int32_t a : target[d]) parts *= ctx.axis_sizes[a];
      const int64_t extent = ctx.shape[d], c = (extent + parts - 1) / parts;
      least *= std::max<int64_t>(0, extent - (parts - 1) * c);
    }
    grow_copy_us_ = topo.CopyTime(least);
    for (const Sample& sample : samples_) {
      const int64_t base = sample.pos / k * k;
      if (!nodes_.empty() && nodes_.back().base == base) continue;
      NodeNeeds node{base, CoordinatesOf(base), {}, 1};
      for (size_t d = 0; d < target.size(); ++d) {
        // Disjoint blocks, merged where they touch: fewer to overlap.
        std::vector<std::pair<int64_t, int64_t>> blocks = Blocks(target[d], node.coords, d), merged;
        std::sort(blocks.begin(), blocks.end());
        for (const auto& [lo, hi] : blocks) {
          if (!merged.empty() && merged.back().second == lo) merged.back().second = hi;
          else merged.push_back({lo, hi});
        }
        node.target.push_back(std::move(merged));
        int64_t length = 0;
        for (const auto& [lo, hi] : node.target.back()) length += hi - lo;
        node.volume *= length;
      }
      nodes_.push_back(std::move(node));
    }
  }

  int64_t Remaining(const AxisLists& s) {
    const std::vector<const DimOverlaps*>& dims = Overlaps(s);
    int64_t transfer_ps = NodeRemaining(s, dims);
    if (transfer_ps < device_ceiling_ps_) {  // else the devices' term cannot exceed the nodes'
      int64_t missing = 0;
      for (size_t i = 0; i < samples_.size(); ++i) {
        int64_t have = 1;
        for (const DimOverlaps* o : dims) have *= o->device[i];
        missing = std::max(missing, samples_[i].volume - have);
      }
      transfer_ps = std::max(transfer_ps, Picoseconds(static_cast<double>(missing * ctx_.element_bytes) / fastest_));
    }
    std::vector<bool> used(ctx_.axis_sizes.size(), false);
    for (const auto& l : s)
      for (int32_t a : l) used[a] = true;
    bool slices_suffice = true;
    for (size_t d = 0; d < s.size() && slices_suffice; ++d) {
      slices_suffice = IsPrefix(s[d], target_[d]);
      for (size_t i = s[d].size(); slices_suffice && i < target_[d].size(); ++i) slices_suffice = !used[target_[d][i]];
    }
    return slices_suffice ? transfer_ps : std::max(latency_ps_, transfer_ps);
  }

  // The state whose neighbours are bounded next: they share most of its
  // dims, which are then found without a lookup.
  void Expanding(const AxisLists& s) {
    parent_.clear();
    parent_dims_ = Overlaps(s);
    parent_ = s;
  }

  // The node term alone (0 where it does not apply): a bound on any step
  // straight to the target, the exchange included.
  int64_t NodeRemaining(const AxisLists& s) { return NodeRemaining(s, Overlaps(s)); }

 private:
  struct Sample {
    int64_t pos;
    std::vector<int64_t> coords;  // per piece
    std::vector<std::pair<int64_t, int64_t>> target;  // per dim
    int64_t volume;
  };
  struct NodeNeeds {
    int64_t base;  // its first mesh position
    std::vector<int64_t> coords;  // of its first position, per piece
    std::vector<std::vector<std::pair<int64_t, int64_t>>> target;  // per dim, disjoint blocks its devices need
    int64_t volume;  // elements in their union
  };
  // Of one dim split by one list of pieces: per sample, the length of its
  // target box it holds; per node, of the blocks its devices need.
  struct DimOverlaps {
    std::vector<int64_t> device, node;
  };

  // The overlaps of each dim of s (valid until the next call).
  const std::vector<const DimOverlaps*>& Overlaps(const AxisLists& s) {
    dims_.clear();
    for (size_t d = 0; d < s.size(); ++d) {
      if (d < parent_.size() && s[d] == parent_[d]) {
        dims_.push_back(parent_dims_[d]);
        continue;
      }
      key_.assign(1, static_cast<char>(d));
      for (int32_t a : s[d]) key_.push_back(static_cast<char>(a));
      auto [it, fresh] = cache_.try_emplace(key_);
      if (fresh) {
        DimOverlaps& o = it->second;
        for (const Sample& sample : samples_) {
          const auto [tl, th] = sample.target[d];
          const auto [sl, sh] = Box(s[d], sample.coords, d);
          o.device.push_back(std::max<int64_t>(0, std::min(th, sh) - std::max(tl, sl)));
        }
        // A node's overlap depends only on its coordinates on the pieces
        // across nodes that split this dim here or in the target.
        std::vector<int32_t>& across = across_;
        across.clear();
        for (const std::vector<int32_t>* l : {&s[d], &target_[d]})
          for (int32_t a : *l)
            if (static_cast<size_t>(a) < first_inside_ && std::find(across.begin(), across.end(), a) == across.end())
              across.push_back(a);
        int64_t combos = 1;
        for (int32_t a : across) combos *= ctx_.axis_sizes[a];
        seen_.assign(nodes_.empty() ? 0 : combos, -1);
        if (!nodes_.empty()) Inside(s[d], offsets_);
        const int64_t extent = ctx_.shape[d], c = BlockLength(s[d], d);
        for (const NodeNeeds& node : nodes_) {
          int64_t at = 0;
          for (int32_t a : across) at = at * ctx_.axis_sizes[a] + node.coords[a];
          int64_t& overlap = seen_[at];
          if (overlap < 0) {
            overlap = 0;
            const int64_t first = FirstBlock(s[d], node.coords);
            for (int64_t v : offsets_) {
              const int64_t lo = (first + v) * c, hi = std::min(lo + c, extent);
              for (const auto& [tl, th] : node.target[d])
                overlap += std::max<int64_t>(0, std::min(hi, th) - std::max(lo, tl));
            }
          }
          o.node.push_back(overlap);
        }
      }
      dims_.push_back(&it->second);
    }
    return dims_;
  }

  int64_t NodeRemaining(const AxisLists& s, const std::vector<const DimOverlaps*>& dims) const {
    if (nodes_.empty()) return 0;
    int64_t missing = 0;
    for (size_t j = 0; j < nodes_.size(); ++j) {
      int64_t held = 1;
      for (const DimOverlaps* o : dims) held *= o->node[j];
      missing = std::max(missing, nodes_[j].volume - held);
    }
    double us = 0;
    if (missing > 0)
      us = ctx_.topology->step_latency_us() + static_cast<double>(missing * ctx_.element_bytes) / node_rate_;
    if (ctx_.ShardBytes(s) < target_shard_bytes_) us += grow_copy_us_;
    return Picoseconds(us);
  }

  std::vector<int64_t> CoordinatesOf(int64_t pos) const {
    std::vector<int64_t> c(ctx_.axis_sizes.size());
    for (size_t a = 0; a < c.size(); ++a) c[a] = ctx_.Coordinate(pos, static_cast<int32_t>(a));
    return c;
  }

  // The box of dim d of the device at `coords`, split by `pieces`.
  std::pair<int64_t, int64_t> Box(const std::vector<int32_t>& pieces, const std::vector<int64_t>& coords,
                                  size_t d) const {
    int64_t k = 1, coord = 0;
    for (int32_t a : pieces) {
      k *= ctx_.axis_sizes[a];
      coord = coord * ctx_.axis_sizes[a] + coords[a];
    }
    const int64_t extent = ctx_.shape[d], c = (extent + k - 1) / k;
    return {std::min(coord * c, extent), std::min((coord + 1) * c, extent)};
  }

  // The length of the blocks `pieces` cut dim d into.
  int64_t BlockLength(const std::vector<int32_t>& pieces, size_t d) const {
    int64_t k = 1;
    for (int32_t a : pieces) k *= ctx_.axis_sizes[a];
    return (ctx_.shape[d] + k - 1) / k;
  }

  // The block that the first device of the node at `base` (coordinates of
  // that device) holds when `pieces` cut a dim.
  int64_t FirstBlock(const std::vector<int32_t>& pieces, const std::vector<int64_t>& base) const {
    int64_t x = 0;
    for (int32_t a : pieces) x = x * ctx_.axis_sizes[a] + (static_cast<size_t>(a) < first_inside_ ? base[a] : 0);
    return x;
  }

  // The blocks the devices of a node hold past the first device's, when
  // `pieces` cut a dim: the coordinates on pieces inside the node vary,
  // those across nodes are the first device's. Distinct, so the blocks are
  // disjoint.
  void Inside(const std::vector<int32_t>& pieces, std::vector<int64_t>& offsets) const {
    offsets.assign(1, 0);
    for (int32_t a : pieces) {
      const int64_t size = ctx_.axis_sizes[a];
      for (int64_t& x : offsets) x *= size;
      if (static_cast<size_t>(a) < first_inside_) continue;
      const size_t n = offsets.size();
      for (int64_t v = 1; v < size; ++v)
        for (size_t i = 0; i < n; ++i) offsets.push_back(offsets[i] + v);
    }
  }

  // The non-empty blocks of dim d the devices of the node at `base` hold.
  std::vector<std::pair<int64_t, int64_t>> Blocks(const std::vector<int32_t>& pieces, const std::vector<int64_t>& base,
                                                  size_t d) {
    const int64_t extent = ctx_.shape[d], c = BlockLength(pieces, d), first = FirstBlock(pieces, base);
    Inside(pieces, offsets_);
    std::vector<std::pair<int64_t, int64_t>> blocks;
    for (int64_t v : offsets_)
      if ((first + v) * c < extent) blocks.push_back({(first + v) * c, std::min((first + v + 1) * c, extent)});
    return blocks;
  }

  const PlanContext& ctx_;
  const AxisLists& target_;
  int64_t latency_ps_ = 0;
  double fastest_ = 1, node_rate_ = 1, grow_copy_us_ = 0;
  int64_t target_shard_bytes_ = 0;
  int64_t device_ceiling_ps_ = 0;  // the devices' term where a device lacks its whole target box
  std::vector<Sample> samples_;
  size_t first_inside_ = 0;     // pieces from here on lie inside a node
  std::vector<NodeNeeds> nodes_;  // empty where the node term does not apply
  std::unordered_map<std::string, DimOverlaps> cache_;
  AxisLists parent_;
  std::vector<const DimOverlaps*> parent_dims_;
  // Scratch, kept to spare allocations.
  std::string key_;
  std::vector<const DimOverlaps*> dims_;
  std::vector<int64_t> offsets_, seen_;
  std::vector<int32_t> across_;
};

class NamedPlanner {
 public:
  NamedPlanner(const PlanMesh& pm, const Layout& source, const Layout& target, const PlannerOptions& o, int64_t cap)
      : pm_(pm), ctx_(pm, o.topology, source.shape(), source.element_bytes()), source_(source), target_(target),
        options_(o), cap_(cap) {}

  // The cheapest path of edges from the source state to the target state.
  std::optional<std::vector<std::pair<AxisLists, Edge>>> Search(std::vector<PlanCandidate>& candidates,
                                                                int64_t& explored) {
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
        Layout from = StateLayout(pm_, s, source_.shape(), source_.dtype());
        Exchange ex = Exchange::Create(from, target_).value();
        ExchangeDraft d = DraftExchange(ex, *ctx_.topology, /*detailed=*/false);
        // Padded shards on both sides, plus the staging the exchange needs.
        const int64_t peak = ctx_.ShardBytes(s) + ctx_.ShardBytes(pm_.target) + d.max_staging_bytes;
        // Sampled devices may all miss the node that needs most from other
        // nodes; the exchange takes at least that node's share, and so never
        // less than the bound the search ordered by.
        const double time_us = std::max(d.time_us, static_cast<double>(bound.NodeRemaining(s)) * 1e-6);
        Edge e{true, pm_.target, {}, time_us, d.max_recv_bytes, peak, d.total_bytes};
        candidates.push_back(Price(Path(nodes, u), "") );
        candidates.back().steps.push_back(EdgeText(pm_, s, e));
        candidates.back().time_us += e.time_us;
        candidates.back().max_recv_bytes = SaturatingAdd(candidates.back().max_recv_bytes, e.recv_bytes);
        candidates.back().peak_bytes = std::max(candidates.back().peak_bytes, peak);
        // The default cap keeps XLA's gather-everything fallback out; it never
        // excludes the one-step minimal exchange, the plan that moves least.
        const bool exempt = options_.memory_cap_bytes == 0 && s == pm_.source;
        candidates.back().note = peak <= cap_ || exempt ? "priced" : "over the memory cap";
        // Where one structured collective reaches the target in no more time
        // and bytes (most into a device, and in all), the exchange is that
        // collective's messages priced one by one: only summation order tells
        // them apart (one part in 1e9), and the real collective is the better
        // program. It is the edge instead, which also spares the exact
        // pricing a chosen exchange needs (per pair: n^2 at n devices).
        if (structured) {
          std::optional<StepDraft> direct = DraftStep(ctx_, s, pm_.target, /*detailed=*/false);
          if (direct && direct->peak_bytes <= cap_ && direct->recv_bytes <= d.max_recv_bytes &&
              Total(*direct) <= d.total_bytes &&
              direct->time_us <= time_us * (1 + 1e-9)) {
            Edge collective{false, {}, {}, direct->time_us, direct->recv_bytes, direct->peak_bytes, Total(*direct)};
            collective.draft = std::move(*direct);
            const Cost c = cost + collective.cost();
            candidates.back().note = "priced; one collective moving as much as fast is drafted in its place";
            relax(u, target_key, node_of(target_key), pm_.target, std::move(collective), c);
            continue;
          }
        }
        if (peak <= cap_ || exempt) {
          const Cost c = cost + e.cost();
          relax(u, target_key, node_of(target_key), pm_.target, std::move(e), c);
        }
      }
    }
    return std::nullopt;
  }

  // A fixed sequence of states (a baseline), as edges; nullopt if a step has no structured form.
  std::optional<std::vector<std::pair<AxisLists, Edge>>> Walk(const std::vector<AxisLists>& states) {
    std::vector<std::pair<AxisLists, Edge>> path;
    for (size_t i = 0; i + 1 < states.size(); ++i) {
      if (states[i] == states[i + 1]) continue;  // e.g. a replicated source gathers nothing
      std::optional<StepDraft> d = DraftStep(ctx_, states[i], states[i + 1], /*detailed=*/false);
      if (!d) return std::nullopt;
      path.push_back({states[i], Edge{false, states[i + 1], *d, d->time_us, d->recv_bytes, d->peak_bytes, Total(*d)}});
    }
    return path;
  }

  // Shardy's reshard-to-collectives order: slices first, then one
  // all-to-all per axis moved between dims, collective-permutes where axes
  // are out of order, all-gathers of misplaced minor axes last; gathering
  // everything where uneven dims block every single step.
  std::vector<AxisLists> ShardyStates() {
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

  std::vector<AxisLists> RematStates() { return {pm_.source, AxisLists(pm_.source.size()), pm_.target}; }

  // Bytes all devices receive through a drafted step.
  int64_t Total(const StepDraft& d) const {
    // A permute drafted without its pairs is priced as if every device moved.
    if (d.op == StepOp::kCollectivePermute && !d.pairs.empty()) return d.recv_bytes * static_cast<int64_t>(d.pairs.size());
    return d.recv_bytes * ctx_.num_devices();
  }

  PlanStep Finalize(PlanBuilder& b, const AxisLists& from, const Edge& e) {
    const Layout in = StateLayout(pm_, from, source_.shape(), source_.dtype());
    const Layout out = StateLayout(pm_, e.to, source_.shape(), source_.dtype());
    PlanStep step{StepOp::kExchange, in, out};
    step.input_spec = StateText(pm_, from);
    step.output_spec = StateText(pm_, e.to);
    step.input_shard = ctx_.ShardShape(from);
    step.output_shard = ctx_.ShardShape(e.to);
    const size_t n = b.num_devices();
    if (e.exchange) {
      FillExchange(step, Exchange::Create(in, out).value(), *ctx_.topology);
      // Buffers are padded shards here: the peak counts them so.
      std::vector<int64_t> peak(n);
      for (size_t i = 0; i < n; ++i)
        peak[i] = ctx_.ShardBytes(from) + ctx_.ShardBytes(e.to) + step.send_bytes[i] + step.recv_bytes[i];
      step.peak_bytes = DeviceValues::Each(std::move(peak));
      return step;
    }
    const StepDraft d = *DraftStep(ctx_, from, e.to, /*detailed=*/true);
    step.op = d.op;
    step.group_axes = d.group;
    if (!d.group.empty()) step.group_spec = AxesText(pm_, d.group);
    step.group_size = 1;
    for (int32_t a : d.group) step.group_size *= ctx_.axis_sizes[a];
    step.num_groups = d.op == StepOp::kSlice ? 0 : ctx_.num_devices() / step.group_size;
    step.program = d.program;
    step.time_us = d.time_us;
    step.peak_bytes = DeviceValues::Uniform(n, d.peak_bytes);
    if (d.op == StepOp::kCollectivePermute) {
      step.send_bytes = step.recv_bytes = step.sends = step.recvs = DeviceValues::Uniform(n, 0);
      for (const auto& [s, t] : d.pairs) {
        const size_t si = b.Index(pm_.mesh.device(s)), ti = b.Index(pm_.mesh.device(t));
        step.send_bytes.Set(si, d.send_bytes);
        step.sends.Set(si, 1);
        step.recv_bytes.Set(ti, d.recv_bytes);
        step.recvs.Set(ti, 1);
      }
    } else {
      step.send_bytes = DeviceValues::Uniform(n, d.send_bytes);
      step.recv_bytes = DeviceValues::Uniform(n, d.recv_bytes);
      step.sends = step.recvs = DeviceValues::Uniform(n, d.messages);
    }
    return step;
  }

  static void FillExchange(PlanStep& step, const Exchange& ex, const Topology& topo) {
    const ExchangeDraft d = DraftExchange(ex, topo, /*detailed=*/true);
    step.op = StepOp::kExchange;
    ProgramOp op{ProgramOp::Kind::kExchange, step.output_shard};
    step.program = {op};
    step.time_us = d.time_us;
    step.send_bytes = DeviceValues::Each(d.send_bytes);
    step.recv_bytes = DeviceValues::Each(d.recv_bytes);
    step.sends = DeviceValues::Each(d.sends);
    step.recvs = DeviceValues::Each(d.recvs);
    step.peak_bytes = DeviceValues::Each(d.peak);
  }

  PlanCandidate Price(const std::vector<std::pair<AxisLists, Edge>>& path, std::string note) const {
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

  const PlanContext& context() const { return ctx_; }

 private:
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
  const PlannerOptions& options_;
  int64_t cap_;
};

// Both over held tiles, not devices: replicas hold the same tile.
int64_t MaxLocalBytes(const Layout& l) {
  int64_t m = 0;
  for (int64_t t = 0; t < l.num_tiles(); ++t)
    if (!l.Holders(t).empty()) m = std::max(m, l.TileElements(t) * l.element_bytes());
  return m;
}

std::vector<int64_t> LargestTile(const Layout& l) {
  std::vector<int64_t> s(l.rank(), 0);
  for (int64_t t = 0; t < l.num_tiles(); ++t) {
    if (l.Holders(t).empty()) continue;
    const std::vector<int64_t> ls = l.LocalShape(l.Holders(t)[0]);
    for (int64_t i = 0; i < l.rank(); ++i) s[i] = std::max(s[i], ls[i]);
  }
  return s;
}

// XLA's fallback without a common mesh: every target device receives the
// source shards it lacks, one message per source tile.
BaselineCost ExplicitRemat(const Layout& source, const Layout& target, const Topology& topo) {
  BaselineCost b{"full_rematerialization"};
  const Baseline base = FullRematerialization(source, target);
  b.max_recv_bytes = base.max_recv_bytes;
  b.total_bytes = base.total_bytes;
  b.peak_bytes = base.peak_bytes;
  b.collectives = 1;
  b.ops = {"all-gather", "slice"};
  const int64_t eb = source.element_bytes();
  const auto& devs = target.devices();
  const int64_t n = static_cast<int64_t>(devs.size()), samples = n <= 256 ? n : 32;
  for (int64_t i = 0; i < samples; ++i) {
    const int64_t dev = devs[i * n / samples];
    const int64_t own = source.TileOf(dev);
    double t = 0;
    for (int64_t tile = 0; tile < source.num_tiles(); ++tile) {
      if (tile == own || source.Holders(tile).empty()) continue;
      t += topo.MessageTime(source.Holders(tile)[0], dev, source.TileElements(tile) * eb);
    }
    // Lay out the gathered array, then slice the target shard from it.
    b.time_us = std::max(b.time_us, StepTime(topo, t, source.num_elements() * eb + target.LocalBytes(dev),
                                             b.max_recv_bytes > 0));
  }
  return b;
}

// Where both layouts cut the array alike and only the devices holding each
// tile differ: one collective-permute over explicit device pairs (positions
// index plan.devices()); each tile's new holders take it from its old ones
// that no longer hold it, in ascending order.
std::optional<PlanStep> ExplicitPermute(const PlanBuilder& b, const Layout& source, const Layout& target,
                                        const Topology& topo) {
  if (source.rank() != target.rank() || source.devices().size() != target.devices().size()) return std::nullopt;
  for (int64_t d = 0; d < source.rank(); ++d)
    if (!(source.dim(d) == target.dim(d))) return std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t tile = 0; tile < source.num_tiles(); ++tile) {
    const auto h = source.Holders(tile), r = target.Holders(tile);
    if (h.size() != r.size()) return std::nullopt;
    std::vector<int64_t> senders, receivers;
    std::set_difference(h.begin(), h.end(), r.begin(), r.end(), std::back_inserter(senders));
    std::set_difference(r.begin(), r.end(), h.begin(), h.end(), std::back_inserter(receivers));
    for (size_t i = 0; i < senders.size(); ++i)
      pairs.push_back({static_cast<int64_t>(b.Index(senders[i])), static_cast<int64_t>(b.Index(receivers[i]))});
  }
  PlanStep step{StepOp::kCollectivePermute, source, target};
  step.input_shard = LargestTile(source);
  step.output_shard = step.input_shard;
  const int64_t bytes = [&] {
    int64_t n = source.element_bytes();
    for (int64_t e : step.input_shard) n *= e;
    return n;
  }();
  std::sort(pairs.begin(), pairs.end());
  ProgramOp op{ProgramOp::Kind::kCollectivePermute, step.input_shard};
  op.pairs = pairs;
  step.program = {op};
  const size_t n = b.num_devices();
  step.send_bytes = step.recv_bytes = step.sends = step.recvs = DeviceValues::Uniform(n, 0);
  step.peak_bytes = DeviceValues::Uniform(n, 2 * bytes);
  for (const auto& [s, t] : pairs) {
    step.send_bytes.Set(s, bytes);
    step.recv_bytes.Set(t, bytes);
    step.sends.Set(s, 1);
    step.recvs.Set(t, 1);
    step.time_us = std::max(step.time_us, topo.MessageTime(b.device(s), b.device(t), bytes));
  }
  step.time_us = StepTime(topo, step.time_us, StepCopiedBytes(step.op, bytes, bytes), /*communicates=*/true);
  return step;
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
  RESHARD_RETURN_IF_ERROR(Exchange::Validate(source, target));
  PlanResult result{CollectivePlan{}, ComputeLowerBound(source, target)};
  const int64_t floor = MaxLocalBytes(source) + MaxLocalBytes(target);
  const int64_t cap = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : 2 * floor;
  result.memory_cap_bytes = cap;
  const bool ragged = options.strategy != Strategy::kCollectives && HasRaggedExchange(options.target);
  if (options.strategy == Strategy::kExchange && !HasRaggedExchange(options.target))
    return Status::NotSupported(fmt::format("the exchange strategy needs a ragged all-to-all, which {} lacks",
                                            PlanTargetName(options.target)));
  const int64_t node = options.topology.kind() == Topology::Kind::kNodes ? options.topology.devices_per_node() : 1;
  std::optional<PlanMeshes> pm = FindPlanMesh(source, target, options.meshes, node);
  PlanBuilder builder(source, target);

  if (!pm) {
    // Explicit layouts (other device sets, non-mesh tile lists, block-cyclic):
    // a collective-permute where only the devices differ, else the exchange.
    result.baselines.push_back(ExplicitRemat(source, target, options.topology));
    if (source == target) {
      result.plan = builder.Finish();
      return result;
    }
    std::optional<PlanStep> permute;
    if (options.strategy != Strategy::kExchange) permute = ExplicitPermute(builder, source, target, options.topology);
    std::optional<PlanStep> exchange;
    if (ragged) {
      PlanStep step{StepOp::kExchange, source, target};
      step.input_shard = LargestTile(source);
      step.output_shard = LargestTile(target);
      NamedPlanner::FillExchange(step, Exchange::Create(source, target).value(), options.topology);
      exchange = std::move(step);
    }
    auto price = [](const PlanStep& st) {
      return Cost{Picoseconds(st.time_us), st.recv_bytes.Max(), st.recv_bytes.Sum(), st.op == StepOp::kExchange ? 1 : 0, 1};
    };
    auto peak = [](const PlanStep& st) { return st.peak_bytes.Max(); };
    std::optional<PlanStep> chosen;
    for (std::optional<PlanStep>* c : {&permute, &exchange}) {
      if (!*c) continue;
      result.candidates.push_back(PlanCandidate{{std::string(StepOpName((*c)->op))}, (*c)->time_us,
                                                (*c)->recv_bytes.Max(),
                                                peak(**c), peak(**c) > cap ? "over the memory cap" : "priced"});
      if (peak(**c) <= cap && (!chosen || price(**c) < price(*chosen))) chosen = **c;
    }
    if (!chosen && options.memory_cap_bytes == 0) {
      // The default cap is soft (as for named layouts): take the cheapest.
      for (std::optional<PlanStep>* c : {&permute, &exchange})
        if (*c && (!chosen || price(**c) < price(*chosen))) chosen = **c;
      if (chosen) {
        result.candidates.push_back(PlanCandidate{
            {}, 0, 0, 0, fmt::format("no plan fits the default memory cap of {} B; planned without a cap", cap)});
        result.memory_cap_bytes = 0;
        result.memory_cap_lifted = true;
      }
    }
    if (!chosen) {
      if (!permute && !exchange)
        return Status::NotSupported(
            "the layouts are not named shardings over one mesh and differ in more than their devices, so only the "
            "ragged exchange moves this data, and " +
            std::string(options.strategy == Strategy::kCollectives
                            ? "the collectives strategy excludes it"
                            : fmt::format("the target {} has none", PlanTargetName(options.target))));
      return Status::InvalidArgument(fmt::format(
          "no plan fits the memory cap of {} bytes per device: the only plans for these layouts need {}", cap,
          std::min(permute ? peak(*permute) : INT64_MAX, exchange ? peak(*exchange) : INT64_MAX)));
    }
    for (PlanCandidate& c : result.candidates)
      if (!c.steps.empty() && c.steps[0] == StepOpName(chosen->op)) c.note = "chosen";
    builder.Add(std::move(*chosen));
    result.plan = builder.Finish();
    return result;
  }

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
      NamedPlanner planner(mesh, source, target, options, try_cap);
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
          if (remat) {
            auto [ops, n] = ops_of(*remat);
            result.baselines.push_back(BaselineOf("full_rematerialization", planner.Price(*remat, "baseline"), devices, n, ops));
          }
          if (shardy) {
            auto [ops, n] = ops_of(*shardy);
            result.baselines.push_back(BaselineOf("shardy", planner.Price(*shardy, "baseline"), devices, n, ops));
          }
        }
      }
      if (mesh.source != mesh.target) found = planner.Search(result.candidates, result.states_explored);
      else found.emplace();
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
  // Never dominated by the Shardy-style sequence: where it uses no more
  // collectives and receives fewer bytes (per-step maxima summed, as both are
  // priced), it is the plan. On a flat network only: across nodes a plan may
  // rightly receive more bytes to send fewer of them over the slow links.
  if (best && shardy && options.strategy != Strategy::kExchange && options.topology.kind() == Topology::Kind::kFlat) {
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
    NamedPlanner planner(meshes[0], source, target, options, INT64_MAX);
    const int64_t least = std::min(remat ? planner.Price(*remat, "").peak_bytes : INT64_MAX,
                                   shardy ? planner.Price(*shardy, "").peak_bytes : INT64_MAX);
    if (options.strategy == Strategy::kExchange)
      return Status::InvalidArgument(fmt::format(
          "no plan fits the memory cap of {} bytes per device: the exchange needs more", cap));
    return Status::InvalidArgument(fmt::format(
        "no plan fits the memory cap of {} bytes per device (the source and target shards alone need {}; the "
        "baselines need {})",
        cap, floor, least == INT64_MAX ? std::string("more") : std::to_string(least)));
  }
  if (best_cap != cap)
    result.candidates.push_back(PlanCandidate{
        {}, 0, 0, 0, fmt::format("no plan fits the default memory cap of {} B; planned without a cap", cap)});
  result.memory_cap_bytes = best_cap == INT64_MAX ? 0 : best_cap;
  result.memory_cap_lifted = best_cap != cap;
  NamedPlanner planner(meshes[best_mesh], source, target, options, INT64_MAX);
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
    if (exchange.totals().time_us < result.plan.totals().time_us) {
      result.candidates.push_back(PlanCandidate{
          {}, 0, 0, 0, "priced exactly, the one-step exchange is faster than the plan found: it is the plan"});
      result.plan = std::move(exchange);
    }
  }
  return result;
}

}  // namespace reshard
