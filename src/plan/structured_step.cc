#include "plan/structured_step.h"

#include <algorithm>
#include <numeric>
#include <span>

#include "plan/cost_model.h"

namespace reshard {
namespace {

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

int64_t ShardExtent(int64_t n, int64_t k) { return (n + k - 1) / k; }

// Emits the ops of one step's program and tracks the buffers they need.
class ProgramBuilder {
 public:
  ProgramBuilder(std::vector<int64_t> shape, int64_t element_bytes) : shape_(std::move(shape)), eb_(element_bytes) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t Bytes(const std::vector<int64_t>& s) const { return Product(s) * eb_; }

  void Reshape(std::vector<int64_t> s) {
    if (s == shape_) return;
    Push({ProgramOp::Kind::kReshape, std::move(s)});
  }
  void Transpose(const std::vector<int64_t>& perm) {
    std::vector<int64_t> s;
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) {
      s.push_back(shape_[perm[i]]);
      identity = identity && perm[i] == static_cast<int64_t>(i);
    }
    if (identity) return;
    // Moving size-1 dims does not reorder memory: a reshape suffices.
    std::vector<int64_t> big_in, big_out;
    for (size_t i = 0; i < perm.size(); ++i) {
      if (shape_[i] != 1) big_in.push_back(static_cast<int64_t>(i));
      if (shape_[perm[i]] != 1) big_out.push_back(perm[i]);
    }
    if (big_in == big_out) return Reshape(std::move(s));
    ProgramOp op{ProgramOp::Kind::kTranspose, std::move(s)};
    op.perm = perm;
    Push(std::move(op));
  }
  void Pad(std::vector<int64_t> s) {
    if (s == shape_) return;
    Push({ProgramOp::Kind::kPad, std::move(s)});
  }
  void Slice(std::vector<int64_t> s) {
    if (s == shape_) return;
    Push({ProgramOp::Kind::kSlice, std::move(s)});
  }
  void DynamicSlice(int64_t dim, int64_t size, std::vector<int32_t> axes) {
    ProgramOp op{ProgramOp::Kind::kDynamicSlice, shape_};
    op.shape[dim] = size;
    op.dim = dim;
    op.axes = std::move(axes);
    Push(std::move(op));
  }
  void Collective(ProgramOp op) { Push(std::move(op)); }

  std::vector<ProgramOp> TakeOps() { return std::move(ops_); }
  int64_t peak_bytes() const { return peak_; }

 private:
  void Push(ProgramOp op) {
    const int64_t in = Bytes(shape_), out = Bytes(op.shape);
    if (op.kind != ProgramOp::Kind::kReshape) peak_ = std::max(peak_, in + out);
    shape_ = op.shape;
    ops_.push_back(std::move(op));
  }
  std::vector<int64_t> shape_;
  int64_t eb_;
  std::vector<ProgramOp> ops_;
  int64_t peak_ = 0;
};

struct DimChange {
  size_t prefix = 0;
  std::span<const int32_t> removed, added;  // S and T, in the states drafted
};

}  // namespace

PlanContext::PlanContext(const PlanMesh& pm, const Topology& topo, std::vector<int64_t> s, int64_t eb)
    : plan_mesh(&pm), topology(&topo), shape(std::move(s)), element_bytes(eb) {
  const auto& axes = pm.mesh.axes();
  axis_sizes.resize(axes.size());
  axis_strides.resize(axes.size());
  for (size_t a = 0; a < axes.size(); ++a) {  // the mesh's, kept flat for the hot loops
    axis_sizes[a] = axes[a].size;
    axis_strides[a] = pm.mesh.Stride(static_cast<int64_t>(a));
  }
}

std::vector<int64_t> PlanContext::ShardShape(const AxisLists& state) const {
  std::vector<int64_t> s;
  ShardShape(state, s);
  return s;
}

void PlanContext::ShardShape(const AxisLists& state, std::vector<int64_t>& out) const {
  out.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t k = 1;
    for (int32_t a : state[d]) k *= axis_sizes[a];
    out[d] = ShardExtent(shape[d], k);
  }
}

int64_t PlanContext::ShardBytes(const AxisLists& state) const { return Product(ShardShape(state)) * element_bytes; }

int64_t ShardIndexAt(const PlanContext& ctx, const AxisLists& state, int64_t pos) {
  int64_t t = 0;
  for (const std::vector<int32_t>& axes : state)
    for (int32_t a : axes) t = t * ctx.axis_sizes[a] + ctx.Coordinate(pos, a);
  return t;
}

int64_t PermuteMovers(const PlanContext& ctx, const AxisLists& from, const AxisLists& to) {
  int64_t movers = 0;
  for (int64_t pos = 0; pos < ctx.num_devices(); ++pos) movers += ShardIndexAt(ctx, from, pos) != ShardIndexAt(ctx, to, pos);
  return movers;
}

double GroupTime(const PlanContext& ctx, const std::vector<int32_t>& axes, int64_t bytes) {
  int64_t k = 1;
  for (int32_t a : axes) k *= ctx.axis_sizes[a];
  if (k <= 1) return 0;
  const Topology& topo = *ctx.topology;
  if (topo.Uniform()) return static_cast<double>(k - 1) * topo.MessageTime(0, 1, bytes);
  // A device's time is affine in the message size: a + b * bytes. Keep the
  // distinct (a, b) of the group's devices per axis set.
  uint64_t set = 0;
  for (int32_t a : axes) set |= uint64_t{1} << a;
  auto it = ctx.group_cost_cache.find(set);
  if (it == ctx.group_cost_cache.end()) {
    const Mesh& mesh = ctx.plan_mesh->mesh;
    const int64_t n = ctx.num_devices();
    const int64_t samples = std::min<int64_t>(64, n);  // evenly spaced devices; exact for symmetric meshes
    // On nodes:K a message costs one of two things, by whether its ends share
    // a node: price each once, and only sort the members.
    const bool nodes = topo.kind() == Topology::Kind::kNodes;
    const int64_t node = topo.devices_per_node();
    const double near0 = nodes ? topo.MessageTime(0, 1, 0) : 0, far0 = nodes ? topo.MessageTime(0, node, 0) : 0;
    const double near1 = nodes ? topo.MessageTime(0, 1, 1) - near0 : 0;
    const double far1 = nodes ? topo.MessageTime(0, node, 1) - far0 : 0;
    std::vector<std::pair<double, double>> lines;
    std::vector<int64_t> digit(axes.size());
    for (int64_t i = 0; i < samples; ++i) {
      const int64_t pos = samples == n ? i : i * n / samples;
      // The group's members in member order (row-major over `axes`),
      // walked without listing them.
      int64_t q = mesh.GroupOf(pos, axes);
      std::fill(digit.begin(), digit.end(), 0);
      double a = 0, b = 0;
      const int64_t first = mesh.device(pos) / node * node;  // of pos's node
      for (int64_t m = 0; m < k; ++m) {
        if (q != pos && nodes) {
          const int64_t dq = mesh.device(q);
          const bool near = dq >= first && dq < first + node;
          a += near ? near0 : far0;
          b += near ? near1 : far1;
        } else if (q != pos) {
          const double t0 = topo.MessageTime(mesh.device(pos), mesh.device(q), 0);
          a += t0;
          b += topo.MessageTime(mesh.device(pos), mesh.device(q), 1) - t0;
        }
        for (size_t j = axes.size(); j-- > 0;) {
          const int32_t x = axes[j];
          q += ctx.axis_strides[x];
          if (++digit[j] < ctx.axis_sizes[x]) break;
          digit[j] = 0;
          q -= ctx.axis_sizes[x] * ctx.axis_strides[x];
        }
      }
      lines.push_back({a, b});
    }
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    it = ctx.group_cost_cache.emplace(set, std::move(lines)).first;
  }
  double worst = 0;
  for (const auto& [a, b] : it->second) worst = std::max(worst, a + b * static_cast<double>(bytes));
  return worst;
}

namespace {

int64_t AxesProduct(const PlanContext& ctx, std::span<const int32_t> axes) {
  int64_t k = 1;
  for (int32_t a : axes) k *= ctx.axis_sizes[a];
  return k;
}

// Whether a dim changing from `from` to `to` (common prefix length p) keeps its blocks aligned.
bool IsPrefixOf(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

bool Aligned(const PlanContext& ctx, int64_t n, const std::vector<int32_t>& from, const std::vector<int32_t>& to,
             size_t p) {
  const int64_t kp = AxesProduct(ctx, std::span(from).first(p));
  if (kp == 1) return true;
  const int64_t kf = AxesProduct(ctx, from), kt = AxesProduct(ctx, to);
  return ShardExtent(n, kf) * (kf / kp) == ShardExtent(n, kt) * (kt / kp);
}

// The group's member order: plan-mesh order of its axes.
std::vector<int32_t> GroupAxes(const std::vector<DimChange>& changes, bool removed) {
  std::vector<int32_t> g;
  for (const DimChange& c : changes) {
    const auto& l = removed ? c.removed : c.added;
    g.insert(g.end(), l.begin(), l.end());
  }
  std::sort(g.begin(), g.end());
  return g;
}

// After a collective that left the group's members on a leading dim (sizes
// in `group` order), moves each gathered axis in front of its dim's extent,
// merges, and trims padding down to `to_shard`.
void ScatterLeading(const PlanContext& ctx, ProgramBuilder& b, const std::vector<int32_t>& group,
                    const std::vector<DimChange>& changes, const std::vector<int64_t>& rest,
                    const std::vector<int64_t>& to_shard) {
  const size_t rank = rest.size(), k = group.size();
  std::vector<int64_t> split;
  for (int32_t a : group) split.push_back(ctx.axis_sizes[a]);
  split.insert(split.end(), rest.begin(), rest.end());
  b.Reshape(split);
  std::vector<int64_t> perm, merged;
  for (size_t d = 0; d < rank; ++d) {
    int64_t extent = rest[d];
    for (int32_t a : changes[d].removed) {
      const size_t at = std::find(group.begin(), group.end(), a) - group.begin();
      perm.push_back(static_cast<int64_t>(at));
      extent *= ctx.axis_sizes[a];
    }
    perm.push_back(static_cast<int64_t>(k + d));
    merged.push_back(extent);
  }
  b.Transpose(perm);
  b.Reshape(merged);
  b.Slice(to_shard);
}

// Whether ScatterLeading's transpose moves data rather than only renaming
// dims (ProgramBuilder::Transpose then emits a transpose): the dims longer
// than 1 change order.
bool ScatterTransposes(const PlanContext& ctx, const std::vector<int32_t>& group, const std::vector<DimChange>& changes,
                       const std::vector<int64_t>& rest) {
  int64_t last = -1;
  auto next = [&](int64_t at, int64_t size) {
    if (size == 1) return false;
    const bool moved = at < last;
    last = at;
    return moved;
  };
  for (size_t d = 0; d < rest.size(); ++d) {
    for (int32_t a : changes[d].removed)
      if (next(std::find(group.begin(), group.end(), a) - group.begin(), ctx.axis_sizes[a])) return true;
    if (next(static_cast<int64_t>(group.size() + d), rest[d])) return true;
  }
  return false;
}

}  // namespace

std::optional<StepDraft> DraftStep(const PlanContext& ctx, const AxisLists& from, const AxisLists& to, bool detailed) {
  if (from == to) return std::nullopt;
  const size_t rank = ctx.shape.size();
  // The search drafts thousands of steps: its scratch keeps its capacity
  // (per thread, as callers may plan on several).
  thread_local std::vector<DimChange> changes;
  thread_local std::vector<int64_t> from_shard, to_shard, padded, rest;
  changes.assign(rank, {});
  bool any_removed = false, any_added = false, both_in_one_dim = false, same_counts = true;
  for (size_t d = 0; d < rank; ++d) {
    const auto &f = from[d], &t = to[d];
    size_t p = 0;
    while (p < f.size() && p < t.size() && f[p] == t[p]) ++p;
    changes[d] = {p, std::span(f).subspan(p), std::span(t).subspan(p)};
    any_removed = any_removed || !changes[d].removed.empty();
    any_added = any_added || !changes[d].added.empty();
    both_in_one_dim = both_in_one_dim || (!changes[d].removed.empty() && !changes[d].added.empty());
    same_counts = same_counts && AxesProduct(ctx, f) == AxesProduct(ctx, t);
  }
  bool structured = !both_in_one_dim;
  for (size_t d = 0; d < rank && structured; ++d)
    if (!changes[d].removed.empty() || !changes[d].added.empty())
      structured = Aligned(ctx, ctx.shape[d], from[d], to[d], changes[d].prefix);
  // Pieces appear once per state, so the S and T pieces are the same set when
  // their bits are.
  uint64_t removed_set = 0, added_set = 0;
  for (const DimChange& c : changes) {
    for (int32_t a : c.removed) removed_set |= uint64_t{1} << a;
    for (int32_t a : c.added) added_set |= uint64_t{1} << a;
  }
  if (structured && any_removed && any_added && removed_set != added_set) structured = false;
  if (!structured && !same_counts) return std::nullopt;
  ctx.ShardShape(from, from_shard);
  ctx.ShardShape(to, to_shard);
  const int64_t eb = ctx.element_bytes;
  StepDraft draft;
  // The search's drafts need only the peak of the program's buffers, which
  // follows from the shapes below; the program is built for the final plan.
  std::optional<ProgramBuilder> b;
  if (detailed) b.emplace(from_shard, eb);
  const int64_t from_bytes = Product(from_shard) * eb, to_bytes = Product(to_shard) * eb;
  int64_t peak = 0;
  std::vector<int32_t> gathered = GroupAxes(changes, true);

  if (structured && !any_removed) {
    // Slice: pick this device's block of each grown dim, by its coordinates.
    draft.op = StepOp::kSlice;
    padded = from_shard;
    for (size_t d = 0; d < rank; ++d)
      if (!changes[d].added.empty())
        padded[d] = to_shard[d] * AxesProduct(ctx, changes[d].added);
    if (detailed) {
      b->Pad(padded);
      for (size_t d = 0; d < rank; ++d)
        if (!changes[d].added.empty())
          b->DynamicSlice(static_cast<int64_t>(d), to_shard[d], {changes[d].added.begin(), changes[d].added.end()});
    } else {
      // The pad, then the first dynamic slice: each later one holds less.
      const int64_t padded_bytes = Product(padded) * eb;
      if (padded != from_shard) peak = from_bytes + padded_bytes;
      for (size_t d = 0; d < rank; ++d)
        if (!changes[d].added.empty()) {
          int64_t sliced = to_shard[d];
          for (size_t e = 0; e < rank; ++e) sliced *= e == d ? 1 : padded[e];
          peak = std::max(peak, padded_bytes + sliced * eb);
          break;
        }
    }
  } else if (structured && !any_added) {
    draft.op = StepOp::kAllGather;
    draft.group = std::move(gathered);
    const int64_t k = AxesProduct(ctx, draft.group);
    if (detailed) {
      std::vector<int64_t> lead = {1};
      lead.insert(lead.end(), from_shard.begin(), from_shard.end());
      b->Reshape(lead);
      ProgramOp ag{ProgramOp::Kind::kAllGather, lead};
      ag.shape[0] = k;
      ag.axes = draft.group;
      b->Collective(std::move(ag));
      ScatterLeading(ctx, *b, draft.group, changes, from_shard, to_shard);
    } else {
      // The gather, ScatterLeading's transpose where it moves data, and its
      // slice of the padding where there is some.
      peak = from_bytes + k * from_bytes;
      if (ScatterTransposes(ctx, draft.group, changes, from_shard)) peak = std::max(peak, 2 * k * from_bytes);
      bool trimmed = false;
      for (size_t d = 0; d < rank && !trimmed; ++d)
        trimmed = from_shard[d] * AxesProduct(ctx, changes[d].removed) != to_shard[d];
      if (trimmed) peak = std::max(peak, k * from_bytes + to_bytes);
    }
    const int64_t m = from_bytes;
    draft.send_bytes = draft.recv_bytes = (k - 1) * m;
    draft.messages = k - 1;
    draft.time_us = GroupTime(ctx, draft.group, m);
  } else if (structured) {
    draft.op = StepOp::kAllToAll;
    draft.group = std::move(gathered);
    // Each dim that grows is cut into its new axes' digits; those digits go
    // to the front in group order, one chunk per destination.
    padded = from_shard;
    for (size_t d = 0; d < rank; ++d)
      if (!changes[d].added.empty())
        padded[d] = to_shard[d] * AxesProduct(ctx, changes[d].added);
    rest.resize(rank);
    for (size_t d = 0; d < rank; ++d) rest[d] = changes[d].added.empty() ? padded[d] : to_shard[d];
    const int64_t k = AxesProduct(ctx, draft.group);
    if (detailed) {
      b->Pad(padded);
      std::vector<int64_t> digits, digit_of_axis(ctx.axis_sizes.size(), -1), rest_digit(rank);
      for (size_t d = 0; d < rank; ++d) {
        for (int32_t a : changes[d].added) {
          digit_of_axis[a] = static_cast<int64_t>(digits.size());
          digits.push_back(ctx.axis_sizes[a]);
        }
        rest_digit[d] = static_cast<int64_t>(digits.size());
        digits.push_back(rest[d]);
      }
      b->Reshape(digits);
      std::vector<int64_t> perm;
      for (int32_t a : draft.group) perm.push_back(digit_of_axis[a]);
      for (size_t d = 0; d < rank; ++d) perm.push_back(rest_digit[d]);
      b->Transpose(perm);
      std::vector<int64_t> lead = {k};
      lead.insert(lead.end(), rest.begin(), rest.end());
      b->Reshape(lead);
      ProgramOp a2a{ProgramOp::Kind::kAllToAll, lead};
      a2a.axes = draft.group;
      b->Collective(std::move(a2a));
      ScatterLeading(ctx, *b, draft.group, changes, rest, to_shard);
    } else {
      // Every op holds the padded shard in and out at most (the pad and the
      // final slice less), and the all-to-all does.
      peak = 2 * Product(padded) * eb;
    }
    const int64_t m = Product(rest) * eb;  // one chunk
    draft.send_bytes = draft.recv_bytes = (k - 1) * m;
    draft.messages = k - 1;
    draft.time_us = GroupTime(ctx, draft.group, m);
  } else if (same_counts) {
    // Collective-permute: per shard index, the devices that need it and do
    // not hold it are paired, in ascending order, with holders that no
    // longer keep it. Every shard index is held by as many devices in both
    // states (the same shard counts), so the pairs form a permutation.
    draft.op = StepOp::kCollectivePermute;
    const int64_t m = Product(from_shard) * eb;
    draft.send_bytes = draft.recv_bytes = m;
    draft.messages = 1;
    std::vector<std::pair<int32_t, int32_t>> pairs;  // detailed: (from, to) positions, ascending
    if (!detailed) {
      draft.time_us = ctx.topology->WorstMessageTime(m);
    } else {
      const int64_t n = ctx.num_devices();
      auto tile_of = [&](const AxisLists& s, int64_t pos) { return ShardIndexAt(ctx, s, pos); };
      // The k-th device (ascending) giving a shard index up pairs with the
      // k-th taking it. Counted per shard index, not sorted: positions
      // (< kMaxDevices = 2^24) and counts fit 32 bits, so at 2^24 devices
      // this holds 8 B a shard index and 4 a mover beside the pairs.
      int64_t shards = 1;
      for (const AxisLists* state : {&from, &to}) {
        int64_t k = 1;
        for (const std::vector<int32_t>& axes : *state)
          for (int32_t a : axes) k *= ctx.axis_sizes[a];
        shards = std::max(shards, k);
      }
      std::vector<int32_t> taker_begin(static_cast<size_t>(shards) + 1, 0), given(static_cast<size_t>(shards), 0);
      int64_t movers = 0;
      for (int64_t pos = 0; pos < n; ++pos) {
        const int64_t tf = tile_of(from, pos), tt = tile_of(to, pos);
        if (tf == tt) continue;
        ++given[static_cast<size_t>(tf)];
        ++taker_begin[static_cast<size_t>(tt) + 1];
        ++movers;
      }
      for (int64_t i = 0; i < shards; ++i) {
        if (given[static_cast<size_t>(i)] != taker_begin[static_cast<size_t>(i) + 1]) return std::nullopt;  // not a permutation
        taker_begin[static_cast<size_t>(i) + 1] += taker_begin[static_cast<size_t>(i)];
      }
      std::vector<int32_t>().swap(given);
      std::vector<int32_t> takers(static_cast<size_t>(movers));  // by shard index, ascending within each
      // taker_begin[i] is a cursor into bucket i; each ends where the next
      // began, so shifting them one place back restores the starts.
      for (int64_t pos = 0; pos < n; ++pos) {
        const int64_t tf = tile_of(from, pos), tt = tile_of(to, pos);
        if (tf != tt) takers[static_cast<size_t>(taker_begin[static_cast<size_t>(tt)]++)] = static_cast<int32_t>(pos);
      }
      std::copy_backward(taker_begin.begin(), taker_begin.end() - 1, taker_begin.end());
      taker_begin[0] = 0;
      // Givers in ascending order: the pairs come sorted.
      pairs.reserve(static_cast<size_t>(movers));
      for (int64_t pos = 0; pos < n; ++pos) {
        const int64_t tf = tile_of(from, pos), tt = tile_of(to, pos);
        if (tf != tt)
          pairs.push_back({static_cast<int32_t>(pos), takers[static_cast<size_t>(taker_begin[static_cast<size_t>(tf)]++)]});
      }
      const Mesh& mesh = ctx.plan_mesh->mesh;
      for (const auto& [s, t] : pairs)
        draft.time_us = std::max(draft.time_us, ctx.topology->MessageTime(mesh.device(s), mesh.device(t), m));
    }
    if (detailed) {
      ProgramOp cp{ProgramOp::Kind::kCollectivePermute, from_shard};
      cp.pairs = std::move(pairs);  // held by the program alone (8 B a mover)
      b->Collective(std::move(cp));
    } else {
      if (from_shard != to_shard) return std::nullopt;  // as the program's shape check below
      peak = 2 * from_bytes;
    }
  } else {
    return std::nullopt;
  }
  if (detailed && b->shape() != to_shard) return std::nullopt;  // a planner bug; never emit it
  draft.peak_bytes = std::max(detailed ? b->peak_bytes() : peak, from_bytes + to_bytes);
  draft.time_us = StepTime(*ctx.topology, draft.time_us, StepCopiedBytes(draft.op, draft.send_bytes, to_bytes),
                           IsCollective(draft.op));
  if (detailed) draft.program = b->TakeOps();
  return draft;
}

std::optional<StepDraft> DraftReduction(const PlanContext& ctx, const AxisLists& from, const AxisLists& to,
                                        const std::vector<int32_t>& group, ReduceOp op, bool detailed) {
  const size_t rank = ctx.shape.size();
  if (group.empty() || from.size() != rank || to.size() != rank) return std::nullopt;
  const int64_t k = AxesProduct(ctx, group);
  const std::vector<int64_t> from_shard = ctx.ShardShape(from), to_shard = ctx.ShardShape(to);
  const int64_t eb = ctx.element_bytes;
  const int64_t from_bytes = Product(from_shard) * eb, to_bytes = Product(to_shard) * eb;
  StepDraft draft;
  draft.group = group;
  ProgramBuilder b(from_shard, eb);
  if (from == to) {
    // All-reduce: a reduce-scatter of ceil(shard / k) chunks, then their all-gather.
    draft.op = StepOp::kAllReduce;
    const int64_t chunk = (Product(from_shard) + k - 1) / k * eb;
    draft.send_bytes = draft.recv_bytes = 2 * (k - 1) * chunk;
    draft.messages = 2 * (k - 1);
    draft.time_us = 2 * GroupTime(ctx, group, chunk);
    ProgramOp ar{ProgramOp::Kind::kAllReduce, from_shard};
    ar.axes = group;
    ar.reduce = op;
    b.Collective(std::move(ar));
    draft.peak_bytes = std::max(b.peak_bytes(), from_bytes + to_bytes);
  } else {
    // Reduce-scatter: every dim of `to` extends its `from` list; one dim's
    // extension holds every group axis, interleaved in any order with
    // axes that split nothing before (sliced locally in the same step, so
    // each replica of the partial values reduces only its share), and the
    // other dims' extensions hold such axes only.
    std::vector<int64_t> group_dim(ctx.axis_sizes.size(), -1);
    for (int32_t a : group) group_dim[a] = -2;  // group axis, not yet placed
    std::vector<bool> in_from(ctx.axis_sizes.size(), false);
    for (const auto& l : from)
      for (int32_t a : l) in_from[a] = true;
    int64_t dim = -1;
    for (size_t d = 0; d < rank; ++d) {
      if (!IsPrefixOf(from[d], to[d])) return std::nullopt;
      for (size_t i = from[d].size(); i < to[d].size(); ++i) {
        const int32_t a = to[d][i];
        if (in_from[a]) return std::nullopt;
        if (group_dim[a] == -2) {
          if (dim >= 0 && dim != static_cast<int64_t>(d)) return std::nullopt;  // the group spans two dims
          dim = static_cast<int64_t>(d);
          group_dim[a] = dim;
        }
      }
      if (to[d].size() != from[d].size() && !Aligned(ctx, ctx.shape[d], to[d], from[d], from[d].size()))
        return std::nullopt;
    }
    for (int32_t a : group)
      if (group_dim[a] < 0) return std::nullopt;  // a group axis left unplaced
    draft.op = StepOp::kReduceScatter;
    // Cut each extended dim into its new axes' digits (major to minor) and
    // its chunk; keep this device's digit of each sliced axis; bring the
    // group's digits to the front in group order: one chunk per member.
    std::vector<int64_t> padded = from_shard;
    for (size_t d = 0; d < rank; ++d)
      if (to[d].size() != from[d].size())
        padded[d] = to_shard[d] * AxesProduct(ctx, std::span(to[d]).subspan(from[d].size()));
    b.Pad(padded);
    std::vector<int64_t> digits, digit_of_axis(ctx.axis_sizes.size(), -1);
    std::vector<int32_t> sliced;
    for (size_t d = 0; d < rank; ++d) {
      for (size_t i = from[d].size(); i < to[d].size(); ++i) {
        digit_of_axis[to[d][i]] = static_cast<int64_t>(digits.size());
        digits.push_back(ctx.axis_sizes[to[d][i]]);
        if (group_dim[to[d][i]] < 0) sliced.push_back(to[d][i]);
      }
      digits.push_back(to[d].size() != from[d].size() ? to_shard[d] : from_shard[d]);
    }
    b.Reshape(digits);
    for (int32_t a : sliced) b.DynamicSlice(digit_of_axis[a], 1, {a});
    std::vector<int64_t> perm;
    std::vector<bool> front(digits.size(), false);
    for (int32_t a : group) {
      perm.push_back(digit_of_axis[a]);
      front[digit_of_axis[a]] = true;
    }
    for (size_t i = 0; i < digits.size(); ++i)
      if (!front[i]) perm.push_back(static_cast<int64_t>(i));
    b.Transpose(perm);
    std::vector<int64_t> lead = {k};
    lead.insert(lead.end(), to_shard.begin(), to_shard.end());
    b.Reshape(lead);
    std::vector<int64_t> one = lead;
    one[0] = 1;
    ProgramOp rs{ProgramOp::Kind::kReduceScatter, one};
    rs.axes = group;
    rs.reduce = op;
    b.Collective(std::move(rs));
    b.Reshape(to_shard);
    const int64_t chunk = to_bytes;
    draft.send_bytes = draft.recv_bytes = (k - 1) * chunk;
    draft.messages = k - 1;
    draft.time_us = GroupTime(ctx, group, chunk);
    draft.peak_bytes = std::max(b.peak_bytes(), from_bytes + to_bytes);
  }
  if (b.shape() != to_shard) return std::nullopt;  // a planner bug; never emit it
  draft.time_us = StepTime(*ctx.topology, draft.time_us, StepCopiedBytes(draft.op, draft.send_bytes, to_bytes), true);
  if (detailed) draft.program = b.TakeOps();
  return draft;
}

}  // namespace reshard
