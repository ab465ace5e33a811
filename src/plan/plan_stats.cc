#include "reshard/plan_stats.h"

#include <algorithm>
#include <unordered_map>

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
      index_[devices[i]] = i;
    }
    stats_.devices = static_cast<int64_t>(devices.size());
  }

  void Add(int64_t from, int64_t to, int64_t bytes) {
    if (from == to) {
      if (auto it = index_.find(to); it != index_.end()) stats_.per_device[it->second].local_bytes += bytes;
      stats_.local_bytes += bytes;
      return;
    }
    if (auto it = index_.find(from); it != index_.end()) {
      stats_.per_device[it->second].send_bytes += bytes;
      ++stats_.per_device[it->second].sends;
    }
    if (auto it = index_.find(to); it != index_.end()) {
      stats_.per_device[it->second].recv_bytes += bytes;
      ++stats_.per_device[it->second].recvs;
    }
    ++stats_.messages;
  }

  PlanStats Finish() {
    for (DeviceStats& d : stats_.per_device) {
      d.peak_bytes = d.source_bytes + d.target_bytes + d.send_bytes + d.recv_bytes;
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
  std::unordered_map<int64_t, size_t> index_;
};

}  // namespace

PlanStats ComputeStats(const Exchange& exchange, const std::function<void(const Transfer&)>& also) {
  StatsBuilder b(exchange.source(), exchange.target(), exchange.devices());
  const int64_t eb = exchange.source().element_bytes();
  exchange.ForEachTransfer([&](const Transfer& t) {
    b.Add(t.from, t.to, t.elements * eb);
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
  for (const Transfer& t : plan.transfers()) b.Add(t.from, t.to, plan.Bytes(t));
  return b.Finish();
}

LowerBound ComputeLowerBound(const Layout& source, const Layout& target) {
  LowerBound lb;
  for (int64_t dev : target.devices()) {
    const int64_t t = target.TileOf(dev);
    if (t < 0) continue;
    int64_t need = target.TileElements(t);
    int64_t held = 0;
    const int64_t s = source.TileOf(dev);
    if (s >= 0 && need > 0) {
      std::vector<int32_t> sc = source.TileCoords(s), tc = target.TileCoords(t);
      held = 1;
      for (int64_t d = 0; d < source.rank(); ++d)
        held *= OverlapLength(source.TileIntervals(d, sc[d]), target.TileIntervals(d, tc[d]));
    }
    const int64_t bytes = (need - held) * source.element_bytes();
    lb.max_recv_bytes = std::max(lb.max_recv_bytes, bytes);
    lb.total_bytes += bytes;
  }
  return lb;
}

Baseline FullRematerialization(const Layout& source, const Layout& target) {
  Baseline b;
  const int64_t whole = source.num_elements() * source.element_bytes();
  for (int64_t dev : target.devices()) {
    const int64_t recv = whole - source.LocalBytes(dev);
    b.max_recv_bytes = std::max(b.max_recv_bytes, recv);
    b.total_bytes += recv;
    b.peak_bytes = std::max(b.peak_bytes, whole);
  }
  return b;
}

}  // namespace reshard
