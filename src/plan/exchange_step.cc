#include "plan/exchange_step.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <span>

#include "plan/cost_model.h"
#include "plan/parts_into_memo.h"
#include "plan/relay.h"
#include "reshard/plan_stats.h"

namespace reshard {

namespace {

// The devices a sampled draft prices: evenly spaced, 32 of them, or fewer
// above 2^17 devices, since each costs its device's peers (up to every
// device): the work stays near 2^22 transfers.
std::vector<int64_t> SampledDevices(const std::vector<int64_t>& devices) {
  const int64_t n = static_cast<int64_t>(devices.size());
  const int64_t samples = std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(n, 1), 2, 32);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < samples && n > 0; ++i) out.push_back(devices[i * n / samples]);
  return out;
}

// An exchange's devices: both layouts' (the source's own list where they
// agree, as over one mesh, so nothing is copied there; else a union kept in
// `storage`).
const std::vector<int64_t>& ExchangeDevices(const Layout& source, const Layout& target, std::vector<int64_t>& storage) {
  if (source.SameDevices(target)) return source.devices();
  storage = DevicesOfBoth(source, target);
  return storage;
}

}  // namespace

double ExchangeTimeFloor(const Layout& source, const Layout& target, const Topology& topo, const LowerBound& lb) {
  std::vector<int64_t> storage;
  const std::vector<int64_t>& devices = ExchangeDevices(source, target, storage);
  // The devices a sampled draft prices (above 64 devices its time is the
  // largest of theirs); at 64 or fewer the draft is exact, and its time at
  // least any device's, so the same devices bound it there too.
  const bool communicates = lb.total_bytes > 0;
  double floor = 0;
  for (const int64_t dev : SampledDevices(devices)) {
    const int64_t own = source.TileOf(dev);
    double recv = 0;
    Exchange::ForEachReceived(source, target, dev, [&](int64_t tile, int64_t elements) {
      if (tile == own) return;  // a local copy
      const int64_t bytes = elements * source.element_bytes();
      // The sender rule picks one of the tile's holders: the cheapest is a floor.
      // (Past 8 holders, the cheapest link anywhere.)
      const std::span<const int64_t> holders = source.Holders(tile);
      double least = topo.LeastMessageTime(bytes);
      if (!holders.empty() && holders.size() <= 8) {
        least = topo.MessageTime(holders[0], dev, bytes);
        for (const int64_t h : holders) least = std::min(least, topo.MessageTime(h, dev, bytes));
      }
      recv += least;
    });
    // Its sends and its packing are not known without the exchange: none.
    floor = std::max(floor, StepTime(topo, DeviceMessageTime(topo, 0, recv),
                                     StepCopiedBytes(StepOp::kExchange, 0, target.LocalBytes(dev)), communicates));
  }
  return floor;
}

namespace {

// At most what `dev` stages in the reducing exchange of `source` (partial,
// parts routed whole by `routes`) into `target`: where no other device of its
// part holds its tile, it alone sends that part's contributions from the
// tile, so it stages the tile's overlap with every target tile that a device
// other than itself keeps in a target part its part is routed to (each box
// once: StagedBoxes). Else 0: a replica may send in its place. `plain`,
// `plain_target`: the layouts without their reductions. The tile's holders
// are scanned whole (at most the devices, for each of SampledDevices' few:
// linear in devices); a target tile's keepers up to kScan, past which it
// counts as not staged (still a floor).
int64_t StagedFloor(const Layout& source, const Layout& target, const Layout& plain, const Layout& plain_target,
                    const PartRoutes& routes, int64_t dev) {
  constexpr size_t kScan = 64;
  const int64_t own = source.TileOf(dev);
  if (own < 0) return 0;
  const int64_t part = source.PartOf(dev);
  for (const int64_t h : source.Holders(own))
    if (h != dev && source.PartOf(h) == part) return 0;
  const int64_t to = routes.to[static_cast<size_t>(part)];  // -1: every target device
  int64_t staged = 0;
  // The target tiles over `dev`'s source tile: plain_target's tiles as a
  // "source" received into plain's tile of `dev`.
  Exchange::ForEachReceived(plain_target, plain, dev, [&](int64_t tile, int64_t elements) {
    const std::span<const int64_t> keepers = plain_target.Holders(tile);
    for (size_t k = 0; k < keepers.size() && k < kScan; ++k)
      if (keepers[k] != dev && (to < 0 || target.PartOf(keepers[k]) == to)) {
        staged += elements * source.element_bytes();
        return;
      }
  });
  return staged;
}

}  // namespace

std::optional<ReducingExchangeFloors> ReducingExchangeFloor(const Layout& source, const Layout& target,
                                                            const Topology& topo, const LowerBound& lb) {
  std::vector<int64_t> storage;
  const std::vector<int64_t>& devices = ExchangeDevices(source, target, storage);
  // The parts routed to each target part (every part into a target with no
  // reduction); tile by tile, no floor here.
  const int64_t eb = source.element_bytes();
  const PartRoutes routes = Exchange::RouteParts(source, target);
  if (routes.tile_to) return std::nullopt;
  PartsIntoMemo routed_into(routes);
  // The pieces a device needs are those of the source's grid without the
  // reduction, once per part routed to it.
  const Layout plain = source.WithoutReduction(), plain_target = target.WithoutReduction();
  ReducingExchangeFloors out;
  double messages = 0;
  int64_t largest_output = 0, shards = 0;
  for (const int64_t dev : SampledDevices(devices)) {
    if (target.TileOf(dev) < 0) continue;
    const int64_t own = source.TileOf(dev), q = target.partial() ? target.PartOf(dev) : -1;
    const std::vector<int64_t>& into_parts = routed_into.Into(q);
    const int64_t into = static_cast<int64_t>(into_parts.size());
    const bool own_routed = own >= 0 && std::binary_search(into_parts.begin(), into_parts.end(), source.PartOf(dev));
    double recv = 0;
    int64_t recv_bytes = 0;
    Exchange::ForEachReceived(plain, plain_target, dev, [&](int64_t tile, int64_t elements) {
      const int64_t pieces = into - (tile == own && own_routed ? 1 : 0);
      recv += static_cast<double>(pieces) * topo.LeastMessageTime(elements * eb);
      recv_bytes += pieces * elements * eb;
    });
    messages = std::max(messages, DeviceMessageTime(topo, 0, recv));
    const int64_t output = target.LocalBytes(dev);
    largest_output = std::max(largest_output, output);
    out.peak_bytes = std::max(out.peak_bytes, source.LocalBytes(dev) + output + recv_bytes +
                                                  StagedFloor(source, target, plain, plain_target, routes, dev));
    shards = std::max(shards, source.LocalBytes(dev) + output);
  }
  // The copies' time is its busiest device's: at least the average, where
  // the bytes sent in all are those received, at least the bound's.
  int64_t outputs = 0;
  for (const int64_t dev : devices) outputs += target.LocalBytes(dev);
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(devices.size()));
  const int64_t average = (2 * lb.total_bytes + outputs) / n;
  out.time_us = StepTime(topo, messages, std::max(average, largest_output), lb.total_bytes > 0);
  // Relays (relay.h) take pieces off a keeper's messages and add a round:
  // the busiest device over both still receives the bound's bytes (each
  // message at least the cheapest link's), round 2 lays out every output,
  // and every device holds its shards.
  if (MayRelay(source, target)) {
    const double relayed = StepTime(topo, lb.max_recv_bytes > 0 ? topo.LeastMessageTime(lb.max_recv_bytes) : 0.0,
                                    largest_output, lb.total_bytes > 0);
    out.time_us = std::min(out.time_us, relayed);
    out.peak_bytes = std::min(out.peak_bytes, shards);
  }
  return out;
}

ExchangeDraft DraftExchange(const Exchange& ex, const Topology& topo, bool detailed) {
  ExchangeDraft out;
  const std::vector<int64_t>& devices = ex.devices();
  const int64_t n = static_cast<int64_t>(devices.size());
  const int64_t eb = ex.source().element_bytes();
  auto index = [&](int64_t dev) { return PositionIn(devices, dev); };
  if (detailed || n <= 64) {
    std::vector<double> send_time(n, 0), recv_time(n, 0);
    const PlanStats stats = ComputeStats(ex, [&](const Transfer& t) {
      if (t.from == t.to) return;
      const double c = topo.MessageTime(t.from, t.to, t.elements * eb);
      send_time[index(t.from)] += c;
      recv_time[index(t.to)] += c;
    });
    double messages = 0;
    for (int64_t i = 0; i < n; ++i) messages = std::max(messages, DeviceMessageTime(topo, send_time[i], recv_time[i]));
    int64_t copies = 0;
    for (const DeviceStats& d : stats.per_device)
      copies = std::max(copies, StepCopiedBytes(StepOp::kExchange, d.send_bytes, d.target_bytes));
    out.time_us = StepTime(topo, messages, copies, stats.messages > 0);
    out.max_recv_bytes = stats.max_recv_bytes;
    out.total_bytes = stats.total_bytes;
    out.peak_bytes = stats.peak_bytes;
    out.messages = stats.messages;
    for (const DeviceStats& d : stats.per_device) {
      out.max_staging_bytes = std::max(out.max_staging_bytes, d.staged_bytes + d.recv_bytes);
      out.send_bytes.push_back(d.send_bytes);
      out.recv_bytes.push_back(d.recv_bytes);
      out.sends.push_back(d.sends);
      out.recvs.push_back(d.recvs);
      out.staged_bytes.push_back(d.staged_bytes);
      out.peak.push_back(d.peak_bytes);
    }
    return out;
  }
  const LowerBound lb = ComputeLowerBound(ex.source(), ex.target());
  out.max_recv_bytes = lb.max_recv_bytes;
  out.total_bytes = lb.total_bytes;
  const std::vector<int64_t> sampled = SampledDevices(devices);
  for (const int64_t dev : sampled) {
    double send = 0, recv = 0;
    int64_t send_bytes = 0, recv_bytes = 0, staged_bytes = 0;
    StagedBoxes staged;
    ex.ForEachDeviceTransfer(dev, [&](const Transfer& t) {
      if (t.from == t.to) return;
      const int64_t b = t.elements * eb;
      const double c = topo.MessageTime(t.from, t.to, b);
      if (t.from == dev) {
        send += c;
        send_bytes += b;
        if (staged.AddInRuns(t)) staged_bytes += b;  // sends come box by box
      }
      if (t.to == dev) { recv += c; recv_bytes += b; ++out.messages; }
    });
    out.time_us = std::max(out.time_us, StepTime(topo, DeviceMessageTime(topo, send, recv),
                                                 StepCopiedBytes(StepOp::kExchange, send_bytes, ex.target().LocalBytes(dev)),
                                                 out.total_bytes > 0));
    out.peak_bytes = std::max(out.peak_bytes, ex.source().LocalBytes(dev) + ex.target().LocalBytes(dev) + staged_bytes + recv_bytes);
    out.max_staging_bytes = std::max(out.max_staging_bytes, staged_bytes + recv_bytes);
  }
  if (!sampled.empty())
    out.messages = static_cast<int64_t>(static_cast<double>(out.messages) * static_cast<double>(n) /
                                        static_cast<double>(sampled.size()));
  return out;
}

void FillExchangeStep(PlanStep& step, const ExchangeDraft& d) {
  step.op = StepOp::kExchange;
  step.program = {ProgramOp{ProgramOp::Kind::kExchange, step.output_shard}};
  step.time_us = d.time_us;
  step.send_bytes = DeviceValues::Each(d.send_bytes);
  step.recv_bytes = DeviceValues::Each(d.recv_bytes);
  step.sends = DeviceValues::Each(d.sends);
  step.recvs = DeviceValues::Each(d.recvs);
  step.peak_bytes = DeviceValues::Each(d.peak);
}

Result<ReducingExchangeTraffic> ReducingExchangeBytes(const Layout& source, const Layout& target) {
  std::vector<int64_t> storage;
  const std::vector<int64_t>& devices = ExchangeDevices(source, target, storage);
  ReducingExchangeTraffic out;
  out.send_bytes.assign(devices.size(), 0);
  out.recv_bytes.assign(devices.size(), 0);
  const int64_t eb = source.element_bytes();
  auto add = [&](const Exchange& ex) {
    ex.ForEachTransfer([&](const Transfer& t) {
      if (t.from == t.to) return;
      out.send_bytes[static_cast<size_t>(PositionIn(devices, t.from))] += t.elements * eb;
      out.recv_bytes[static_cast<size_t>(PositionIn(devices, t.to))] += t.elements * eb;
    });
  };
  const PartRoutes routes = Exchange::RouteParts(source, target);
  const bool whole = !routes.tile_to && target.partial() &&
                     std::all_of(routes.to.begin(), routes.to.end(), [](int64_t q) { return q >= 0; });
  if (!whole) {
    RESHARD_ASSIGN_OR_RETURN(std::vector<Exchange> parts, Exchange::CreateReducing(source, target));
    for (const Exchange& ex : parts) add(ex);
    return out;
  }
  // Part p's exchange (CreateReducing's) moves between the devices of source
  // part p and target part to[p] only: the others hold nothing of either.
  // Each target part's layout is made once, for the parts routed to it, in
  // turn (parts sorted by target part): one at a time, not every part's at
  // once (a lazily filled table of them took 129 MB where this takes 51 at
  // 2^18 devices).
  const std::vector<std::vector<int64_t>> from = source.DevicesByPart(), into = target.DevicesByPart();
  std::vector<int64_t> order(from.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return routes.to[static_cast<size_t>(a)] < routes.to[static_cast<size_t>(b)];
  });
  std::optional<Layout> made;
  int64_t made_part = -1;
  for (const int64_t p : order) {
    const int64_t q = routes.to[static_cast<size_t>(p)];
    if (q != made_part) {
      RESHARD_ASSIGN_OR_RETURN(Layout l, target.PartLayoutOn(q, into[static_cast<size_t>(q)]));
      made = std::move(l);
      made_part = q;
    }
    RESHARD_ASSIGN_OR_RETURN(Layout part, source.PartLayoutOn(p, from[static_cast<size_t>(p)]));
    RESHARD_ASSIGN_OR_RETURN(Exchange ex, Exchange::Create(part, *made));
    add(ex);
  }
  return out;
}

ExchangeDraft DraftReducingExchange(const std::vector<Exchange>& parts, const Layout& target, const Topology& topo,
                                    std::span<const Relay> relays) {
  ExchangeDraft out;
  if (parts.empty()) return out;
  const std::vector<int64_t>& devices = parts.front().devices();
  const size_t n = devices.size();
  const int64_t eb = parts.front().source().element_bytes();
  auto index = [&](int64_t dev) { return PositionIn(devices, dev); };
  std::vector<double> send_time(n, 0), recv_time(n, 0);
  out.send_bytes.assign(n, 0);
  out.recv_bytes.assign(n, 0);
  out.sends.assign(n, 0);
  out.recvs.assign(n, 0);
  out.staged_bytes.assign(n, 0);
  out.peak.assign(n, 0);
  for (const Exchange& ex : parts) {
    const PlanStats stats = ComputeStats(ex, [&](const Transfer& t) {
      if (t.from == t.to) return;
      // A relayed transfer moves in round 2 what its relay leaves (none: no
      // message; ComputeStats counted one, taken back here).
      const int64_t elements = RoundTwoOf(relays, t).elements;
      if (elements == 0) {
        --out.sends[static_cast<size_t>(index(t.from))];
        --out.recvs[static_cast<size_t>(index(t.to))];
        --out.messages;
        return;
      }
      const double c = topo.MessageTime(t.from, t.to, elements * eb);
      send_time[index(t.from)] += c;
      recv_time[index(t.to)] += c;
    });
    out.total_bytes += stats.total_bytes;
    out.messages += stats.messages;
    for (size_t i = 0; i < n; ++i) {
      const DeviceStats& d = stats.per_device[i];
      out.send_bytes[i] += d.send_bytes;
      out.recv_bytes[i] += d.recv_bytes;
      out.sends[i] += d.sends;
      out.recvs[i] += d.recvs;
      out.staged_bytes[i] += d.staged_bytes;
    }
  }
  // Relays (relay.h): round 1 sends each relay's piece from its donor to its
  // helper, every device copying its shard into round 2's input; round 2 is
  // the exchange with the pieces taken out of the donors' messages.
  std::vector<double> send_time1(relays.empty() ? 0 : n, 0), recv_time1(relays.empty() ? 0 : n, 0);
  std::vector<int64_t> sent1(send_time1.size(), 0), received1(send_time1.size(), 0);
  for (const Relay& r : relays) {
    const int64_t bytes = r.elements * eb;
    const size_t d = static_cast<size_t>(index(r.donor)), h = static_cast<size_t>(index(r.helper)),
                 k = static_cast<size_t>(index(r.keeper));
    const double c = topo.MessageTime(r.donor, r.helper, bytes);
    send_time1[d] += c;
    recv_time1[h] += c;
    sent1[d] += bytes;
    received1[h] += bytes;
    out.recv_bytes[k] -= bytes;
    out.recv_bytes[h] += bytes;
    ++out.sends[d];
    ++out.recvs[h];
    ++out.messages;
  }
  double messages = 0, messages1 = 0;
  int64_t copies = 0, copies1 = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t dev = devices[i];
    messages = std::max(messages, DeviceMessageTime(topo, send_time[i], recv_time[i]));
    const int64_t target_bytes = target.LocalBytes(dev);
    copies = std::max(copies, StepCopiedBytes(StepOp::kReduceScatter, out.send_bytes[i], target_bytes));
    int64_t shard = 0;  // the device's partial shard: in whichever part's layout holds it
    for (const Exchange& ex : parts) shard = std::max(shard, ex.source().LocalBytes(dev));
    out.peak[i] = shard + target_bytes + out.staged_bytes[i] + out.recv_bytes[i];
    if (!relays.empty()) {
      messages1 = std::max(messages1, DeviceMessageTime(topo, send_time1[i], recv_time1[i]));
      copies1 = std::max(copies1, StepCopiedBytes(StepOp::kReduceScatter, sent1[i], shard));
      // Round 2 reads a copy of the shard (the source stays the caller's).
      out.peak[i] += shard;
    }
    out.peak_bytes = std::max(out.peak_bytes, out.peak[i]);
    out.max_recv_bytes = std::max(out.max_recv_bytes, out.recv_bytes[i]);
    out.max_staging_bytes = std::max(out.max_staging_bytes, out.staged_bytes[i] + out.recv_bytes[i]);
  }
  out.time_us = StepTime(topo, messages, copies, out.messages > 0);
  if (!relays.empty()) out.time_us += StepTime(topo, messages1, copies1, true);
  return out;
}

}  // namespace reshard
