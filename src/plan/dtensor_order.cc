#include "plan/dtensor_order.h"

#include <algorithm>
#include <cstddef>

namespace reshard {
namespace {

// One mesh dim's placement: Shard(dim), Replicate() or Partial().
struct MeshDimPlacement {
  enum class Kind { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;  // kShard only
  friend bool operator==(const MeshDimPlacement&, const MeshDimPlacement&) = default;
  bool IsShard(int64_t d) const { return kind == Kind::kShard && dim == d; }
};
using Placements = std::vector<MeshDimPlacement>;

// A state's placements, or nullopt where a tensor dim is split against mesh order.
std::optional<Placements> PlacementsOf(const AxisLists& state, const std::vector<int32_t>& partial, size_t axes) {
  Placements p(axes);
  for (size_t d = 0; d < state.size(); ++d)
    for (size_t i = 0; i < state[d].size(); ++i) {
      if (i > 0 && state[d][i - 1] > state[d][i]) return std::nullopt;
      p[static_cast<size_t>(state[d][i])] = {MeshDimPlacement::Kind::kShard, static_cast<int64_t>(d)};
    }
  for (int32_t a : partial) p[static_cast<size_t>(a)] = {MeshDimPlacement::Kind::kPartial, 0};
  return p;
}

// The state of placements: each tensor dim split by its Shard mesh dims, in mesh order.
AxisLists StateOf(const Placements& p, size_t rank) {
  AxisLists s(rank);
  for (size_t a = 0; a < p.size(); ++a)
    if (p[a].kind == MeshDimPlacement::Kind::kShard) s[static_cast<size_t>(p[a].dim)].push_back(static_cast<int32_t>(a));
  return s;
}

// DTensor's greedy sequence of placements after each change (the header's rule).
std::vector<std::pair<size_t, Placements>> GreedyChanges(Placements current, const Placements& target,
                                                         const PlanContext& ctx) {
  std::vector<std::pair<size_t, Placements>> changes;
  auto set = [&](size_t a, const MeshDimPlacement& to) {
    if (current[a] == to) return;
    current[a] = to;
    changes.emplace_back(a, current);
  };
  int64_t shards = 1;
  for (size_t a = 0; a < current.size(); ++a)
    if (current[a].kind == MeshDimPlacement::Kind::kShard) shards *= ctx.axis_sizes[a];
  if (shards > 1)
    for (size_t a = current.size(); a-- > 0;) {
      MeshDimPlacement to = target[a];
      if (to.kind == MeshDimPlacement::Kind::kShard)
        for (size_t i = 0; i < a; ++i)
          if (current[i].IsShard(to.dim) != target[i].IsShard(to.dim)) to = {};
      set(a, to);
    }
  for (size_t a = 0; a < current.size(); ++a) set(a, target[a]);
  return changes;
}

}  // namespace

std::optional<DTensorOrder> DTensorOrderPath(const PlanContext& ctx, const PlanMesh& mesh,
                                             const std::vector<int32_t>& partial, ReduceOp op) {
  const size_t axes = ctx.axis_sizes.size(), rank = ctx.shape.size();
  // Each plan-mesh axis must be one whole mesh dim of the caller's mesh, in order.
  if (mesh.origin.size() != axes || static_cast<size_t>(mesh.original.num_axes()) != axes) return std::nullopt;
  for (size_t a = 0; a < axes; ++a)
    if (mesh.origin[a].is_sub_axis() || mesh.origin[a].axis != static_cast<int64_t>(a)) return std::nullopt;
  std::optional<Placements> from = PlacementsOf(mesh.source, partial, axes);
  std::optional<Placements> to = PlacementsOf(mesh.target, {}, axes);
  if (!from || !to) return std::nullopt;

  DTensorOrder order;
  std::vector<int32_t> pending = partial;
  Placements before = *from;
  for (const auto& [a, after] : GreedyChanges(*from, *to, ctx)) {
    const AxisLists s = StateOf(before, rank), t = StateOf(after, rank);
    const MeshDimPlacement was = before[a], now = after[a];
    std::optional<StepDraft> d;
    StepOp expected = StepOp::kCopy;
    if (was.kind == MeshDimPlacement::Kind::kPartial) {
      if (now.kind == MeshDimPlacement::Kind::kPartial) return std::nullopt;
      d = DraftReduction(ctx, s, t, {static_cast<int32_t>(a)}, op, /*detailed=*/false);
      expected = now.kind == MeshDimPlacement::Kind::kShard ? StepOp::kReduceScatter : StepOp::kAllReduce;
    } else {
      if (now.kind == MeshDimPlacement::Kind::kPartial) return std::nullopt;  // partial targets: not DTensor's greedy
      d = DraftStep(ctx, s, t, /*detailed=*/false);
      expected = was.kind == MeshDimPlacement::Kind::kReplicate ? StepOp::kSlice
                 : now.kind == MeshDimPlacement::Kind::kReplicate ? StepOp::kAllGather
                                                                  : StepOp::kAllToAll;
    }
    if (!d || d->op != expected) return std::nullopt;
    Edge e;
    e.to = t;
    e.draft = *d;
    e.time_us = d->time_us;
    e.recv_bytes = d->recv_bytes;
    e.peak_bytes = d->peak_bytes;
    e.total_bytes = d->recv_bytes * ctx.num_devices();
    order.path.emplace_back(s, std::move(e));
    order.pending.push_back(pending);
    if (was.kind == MeshDimPlacement::Kind::kPartial) std::erase(pending, static_cast<int32_t>(a));
    before = after;
  }
  return order;
}

}  // namespace reshard
