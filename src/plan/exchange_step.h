// The ragged exchange as one step of a collective plan: its per-device
// traffic and modeled time over a topology.
//
// Every device sends and receives its messages of the minimal exchange
// (exchange.h) in one round; its time is the larger of its send and receive
// sums of per-message costs. `detailed` streams the whole exchange for exact
// per-device figures; otherwise, above 64 devices, the time is the largest
// over evenly spaced devices' own parts (each computed alone; 32 of them, or
// fewer above 2^17 devices so that the work stays near 2^22 transfers), and
// the bytes are the lower bound's, which the exchange meets exactly.
#ifndef RESHARD_SRC_PLAN_EXCHANGE_STEP_H_
#define RESHARD_SRC_PLAN_EXCHANGE_STEP_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/exchange.h"
#include "reshard/plan_stats.h"
#include "reshard/topology.h"

namespace reshard {

struct ExchangeDraft {
  // `messages`: all devices' together; sampled (not detailed, over 64
  // devices), the sample's scaled to every device.
  int64_t max_recv_bytes = 0, total_bytes = 0, peak_bytes = 0, messages = 0;
  int64_t max_staging_bytes = 0;  // most bytes one device stages (each distinct box once) and receives together
  double time_us = 0;
  // detailed only, per device of exchange.devices():
  std::vector<int64_t> send_bytes, recv_bytes, sends, recvs, staged_bytes, peak;
};

ExchangeDraft DraftExchange(const Exchange& exchange, const Topology& topology, bool detailed);

// A floor on DraftExchange(Exchange::Create(source, target), topology,
// false).time_us, without building the exchange (no overlap tables): the
// devices the draft samples, each priced by what it receives alone
// (Exchange::ForEachReceived), every message at the cheapest link from any
// holder of its tile, its sends and packing left out. `lb`: the pair's
// ComputeLowerBound. For a search that need not draft an exchange some
// collective already matches. REQUIRES: Exchange::Validate OK, neither
// layout partial.
double ExchangeTimeFloor(const Layout& source, const Layout& target, const Topology& topology, const LowerBound& lb);

// Floors on DraftReducingExchange(Exchange::CreateReducing(source,
// target), target, topology)'s time and peak, without building the
// exchange (every part into every device: devices x parts transfers). Every
// part holds every tile and is routed whole (Exchange::RouteParts) to every
// device of a target with no reduction, or of one target part, and a device
// holds one part, so a device must receive every routed part's piece of
// every source tile its target tile overlaps (but its own part's of its own
// tile), each piece a message of its own at least; nullopt where parts are
// routed tile by tile. Time:
// those messages at the cheapest link, on the devices ExchangeTimeFloor
// samples, plus the copies' floor (their average: every byte sent is
// packed and combined, every output byte laid out). Peak: the source and
// target shards, what the sampled devices receive, and what they stage
// where no replica in their part could send in their place. `lb`: the pair's
// ComputeLowerBound. Where relays may apply (MayRelay, relay.h), the lesser
// of that and a floor of the relayed exchange (the bound's bytes into one
// device, the outputs laid out, the shards held). For a planner that drafts
// the reducing exchange only where it could win. REQUIRES: `source`
// partial, Exchange::Validate OK.
struct ReducingExchangeFloors {
  double time_us = 0;
  int64_t peak_bytes = 0;
};
std::optional<ReducingExchangeFloors> ReducingExchangeFloor(const Layout& source, const Layout& target,
                                                            const Topology& topology, const LowerBound& lb);

// The reducing exchange (Exchange::CreateReducing: its parts' exchanges, in
// part order) as one step, detailed: each device's sends and receives summed
// over the parts (a device sends in its own part only), its time the larger
// of its send and receive sums, its copies priced as a reduction's (pack,
// combine what arrives, lay out the output: StepCopiedBytes), its peak the
// source and target shards, its staged boxes and everything it receives.
// `target`: the step's output layout (a partial target's devices hold a shard
// whether or not a part is routed to them).
// With `relays` (relay.h): both rounds, each priced as a step; a relay's
// bytes move from its keeper's receives to its helper's, and every device
// holds a copy of its shard for round 2.
ExchangeDraft DraftReducingExchange(const std::vector<Exchange>& parts, const Layout& target, const Topology& topology,
                                    std::span<const Relay> relays = {});

// Each device's bytes sent and received (other devices' only) by
// Exchange::CreateReducing(source, target), indexed as the devices of both
// layouts, ascending. Where parts are routed whole into target parts, each
// part's exchange is built among its own devices (Layout::DevicesByPart,
// PartLayoutOn), so
// linear in devices; else from CreateReducing itself (devices x parts).
// For checking what a step from partial sums moves against its price.
// REQUIRES: as CreateReducing.
struct ReducingExchangeTraffic {
  std::vector<int64_t> send_bytes, recv_bytes;
};
Result<ReducingExchangeTraffic> ReducingExchangeBytes(const Layout& source, const Layout& target);

// Makes `step` the exchange step `d` prices (detailed): its op, its one
// exchange program op over its output shard, time and per-device figures.
void FillExchangeStep(PlanStep& step, const ExchangeDraft& d);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_EXCHANGE_STEP_H_
