#include "plan/search_bound.h"

#include <algorithm>

#include "plan/search_state.h"
#include "reshard/topology.h"

namespace reshard {

SearchBound::SearchBound(const PlanContext& ctx, const AxisLists& target) : ctx_(ctx), target_(target) {
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

int64_t SearchBound::Remaining(const AxisLists& s) {
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

const std::vector<const SearchBound::DimOverlaps*>& SearchBound::Overlaps(const AxisLists& s) {
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

int64_t SearchBound::NodeRemaining(const AxisLists& s, const std::vector<const DimOverlaps*>& dims) const {
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

std::vector<int64_t> SearchBound::CoordinatesOf(int64_t pos) const {
  std::vector<int64_t> c(ctx_.axis_sizes.size());
  for (size_t a = 0; a < c.size(); ++a) c[a] = ctx_.Coordinate(pos, static_cast<int32_t>(a));
  return c;
}

std::pair<int64_t, int64_t> SearchBound::Box(const std::vector<int32_t>& pieces, const std::vector<int64_t>& coords,
                                             size_t d) const {
  int64_t k = 1, coord = 0;
  for (int32_t a : pieces) {
    k *= ctx_.axis_sizes[a];
    coord = coord * ctx_.axis_sizes[a] + coords[a];
  }
  const int64_t extent = ctx_.shape[d], c = (extent + k - 1) / k;
  return {std::min(coord * c, extent), std::min((coord + 1) * c, extent)};
}

int64_t SearchBound::BlockLength(const std::vector<int32_t>& pieces, size_t d) const {
  int64_t k = 1;
  for (int32_t a : pieces) k *= ctx_.axis_sizes[a];
  return (ctx_.shape[d] + k - 1) / k;
}

int64_t SearchBound::FirstBlock(const std::vector<int32_t>& pieces, const std::vector<int64_t>& base) const {
  int64_t x = 0;
  for (int32_t a : pieces) x = x * ctx_.axis_sizes[a] + (static_cast<size_t>(a) < first_inside_ ? base[a] : 0);
  return x;
}

void SearchBound::Inside(const std::vector<int32_t>& pieces, std::vector<int64_t>& offsets) const {
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

std::vector<std::pair<int64_t, int64_t>> SearchBound::Blocks(const std::vector<int32_t>& pieces,
                                                             const std::vector<int64_t>& base, size_t d) {
  const int64_t extent = ctx_.shape[d], c = BlockLength(pieces, d), first = FirstBlock(pieces, base);
  Inside(pieces, offsets_);
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (int64_t v : offsets_)
    if ((first + v) * c < extent) blocks.push_back({(first + v) * c, std::min((first + v + 1) * c, extent)});
  return blocks;
}

}  // namespace reshard
