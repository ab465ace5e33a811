#include "reshard/plan_stats.h"

#include <algorithm>

#include "plan/reduction_bound.h"

namespace reshard {
namespace {

class StatsBuilder {
 public:
  StatsBuilder(const Layout& src, const Layout& dst, std::vector<int64_t> devices) {
    stats_.per_device.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      DeviceStats& d = stats_.per_device[i];
      d.device = devices[i];
      d.source_bytes = src.LocalBytes(devices[i]);
      d.target_bytes = dst.LocalBytes(devices[i]);
    }
    stats_.devices = static_cast<int64_t>(devices.size());
    devices_ = std::move(devices);
  }

  // Position of `device` among the devices (ascending), or nullptr.
  DeviceStats* Find(int64_t device) {
    const int64_t i = PositionIn(devices_, device);
    return i < 0 ? nullptr : &stats_.per_device[static_cast<size_t>(i)];
  }

  void Add(int64_t from, int64_t to, int64_t bytes, bool staged) {
    if (staged)
      if (DeviceStats* d = Find(from)) d->staged_bytes += bytes;
    if (from == to) {
      if (DeviceStats* d = Find(to)) d->local_bytes += bytes;
      stats_.local_bytes += bytes;
      return;
    }
    if (DeviceStats* d = Find(from)) {
      d->send_bytes += bytes;
      ++d->sends;
    }
    if (DeviceStats* d = Find(to)) {
      d->recv_bytes += bytes;
      ++d->recvs;
    }
    ++stats_.messages;
  }

  PlanStats Finish() {
    for (DeviceStats& d : stats_.per_device) {
      d.peak_bytes = d.source_bytes + d.target_bytes + d.staged_bytes + d.recv_bytes;
      stats_.max_send_bytes = std::max(stats_.max_send_bytes, d.send_bytes);
      stats_.max_recv_bytes = std::max(stats_.max_recv_bytes, d.recv_bytes);
      stats_.peak_bytes = std::max(stats_.peak_bytes, d.peak_bytes);
      stats_.total_bytes += d.recv_bytes;
    }
    stats_.collectives = stats_.messages > 0 ? 1 : 0;
    return std::move(stats_);
  }

 private:
  PlanStats stats_;
  std::vector<int64_t> devices_;  // ascending
};

}  // namespace

PlanStats ComputeStats(const Exchange& exchange, const std::function<void(const Transfer&)>& also) {
  StatsBuilder b(exchange.source(), exchange.target(), exchange.devices());
  const int64_t eb = exchange.source().element_bytes();
  // Transfers come grouped by source tile, and a box is staged by one
  // sender of one source tile: the set of staged boxes restarts with each tile.
  StagedBoxes staged;
  int64_t tile = -1;
  const Layout& source = exchange.source();
  exchange.ForEachTransfer([&](const Transfer& t) {
    const int64_t from_tile = source.TileOf(t.from);
    if (from_tile != tile) {
      staged.Clear();
      tile = from_tile;
    }
    b.Add(t.from, t.to, t.elements * eb, staged.Add(t));
    if (also) also(t);
  });
  return b.Finish();
}

PlanStats ComputeStats(const ExchangePlan& plan) {
  std::vector<int64_t> devices = plan.source().devices();
  devices.insert(devices.end(), plan.target().devices().begin(), plan.target().devices().end());
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  StatsBuilder b(plan.source(), plan.target(), devices);
  StagedBoxes staged;  // transfers sorted by sender: restart with each
  for (size_t i = 0; i < plan.transfers().size(); ++i) {
    const Transfer& t = plan.transfers()[i];
    if (i > 0 && plan.transfers()[i - 1].from != t.from) staged.Clear();
    b.Add(t.from, t.to, plan.Bytes(t), staged.Add(t));
  }
  return b.Finish();
}

LowerBound ComputeLowerBound(const Layout& source, const Layout& target) {
  if (source.partial() || target.partial()) return ReductionLowerBound(source, target);
  // Per device O(rank), no allocation where each tile is one cell per dim
  // (every mesh tiling): the held part of a target tile is a product of
  // per-dim interval overlaps. Both device lists are ascending, so walked together.
  const int64_t rank = source.rank();
  auto one_cell = [](const DimGrid& g) {
    if (g.cell_tile.size() != static_cast<size_t>(g.tiles)) return false;
    for (size_t k = 0; k < g.cell_tile.size(); ++k)
      if (g.cell_tile[k] != static_cast<int32_t>(k)) return false;
    return true;
  };
  std::vector<bool> simple(rank);
  for (int64_t d = 0; d < rank; ++d) simple[d] = one_cell(source.dim(d)) && one_cell(target.dim(d));
  auto held = [&](int64_t s, int64_t t) {
    int64_t n = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const DimGrid &a = source.dim(d), &b = target.dim(d);
      const int32_t sc = static_cast<int32_t>(s % a.tiles), tc = static_cast<int32_t>(t % b.tiles);
      s /= a.tiles;
      t /= b.tiles;
      n *= simple[d] ? std::max<int64_t>(0, std::min(a.cuts[sc + 1], b.cuts[tc + 1]) - std::max(a.cuts[sc], b.cuts[tc]))
                     : OverlapLength(source.TileIntervals(d, sc), target.TileIntervals(d, tc));
    }
    return n;
  };
  LowerBound lb;
  const std::vector<int64_t>& from = source.devices();
  size_t j = 0;
  for (int64_t dev : target.devices()) {
    const int64_t t = target.TileOf(dev);
    if (t < 0) continue;
    const int64_t need = target.TileElements(t);
    while (j < from.size() && from[j] < dev) ++j;
    const int64_t s = j < from.size() && from[j] == dev ? source.TileOf(dev) : -1;
    const int64_t have = s >= 0 && need > 0 ? held(s, t) : 0;
    const int64_t bytes = (need - have) * source.element_bytes();
    lb.max_recv_bytes = std::max(lb.max_recv_bytes, bytes);
    lb.total_bytes += bytes;
  }
  return lb;
}

Baseline FullRematerialization(const Layout& source, const Layout& target) {
  Baseline b;
  const int64_t whole = source.num_elements() * source.element_bytes();
  if (source.partial()) {
    // XLA all-reduces partial sums whole, then slices: a ring receives
    // 2(k-1)/k of the array, k the parts.
    const int64_t k = source.reduction().parts;
    for (size_t i = 0; i < target.devices().size(); ++i) {
      const int64_t recv = static_cast<int64_t>(2.0 * static_cast<double>(k - 1) / static_cast<double>(k) * static_cast<double>(whole));
      b.max_recv_bytes = std::max(b.max_recv_bytes, recv);
      b.total_bytes += recv;
      b.peak_bytes = std::max(b.peak_bytes, 2 * whole);
    }
    return b;
  }
  for (int64_t dev : target.devices()) {
    const int64_t recv = whole - source.LocalBytes(dev);
    b.max_recv_bytes = std::max(b.max_recv_bytes, recv);
    b.total_bytes += recv;
    b.peak_bytes = std::max(b.peak_bytes, whole);
  }
  return b;
}

}  // namespace reshard
