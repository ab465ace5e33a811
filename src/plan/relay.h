// Relays: the second round that lets a reducing exchange (partial sums into
// a layout with no reduction) meet the lower bound where delivering every
// part straight to its keeper cannot.
//
// Direct delivery gives a keeper that holds no part of its rows one message
// per part of them, while a keeper holding a part gets one fewer. The bound
// (docs/cost_model.md, "Partial sums") lets a part holder with room receive
// another part's piece first and send the keeper the two combined: the
// keeper receives that piece once instead of twice. FindRelays chooses such
// pieces (Relay, collective_plan.h) greedily: while the busiest receiver can
// hand half its excess over some part holder of its rows to that holder, it
// does, cut along one dim at an index the transfer's own cells give.
//
// The rules every consumer follows (the planner's figures, the compiled
// programs, the simulator, the execution checker, the Python exchange):
// RoundOneClip and RoundTwoClip (collective_plan.h) say what a relayed
// transfer moves in each round; RelayOf finds the relay of a (donor, keeper)
// or (donor, helper) pair; RelaysHold (here) checks the invariants a plan's
// relays must keep.
#ifndef RESHARD_SRC_PLAN_RELAY_H_
#define RESHARD_SRC_PLAN_RELAY_H_

#include <cstdint>
#include <span>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/exchange.h"
#include "reshard/layout.h"
#include "reshard/status.h"

namespace reshard {

// Relays are sought on reducing exchanges over at most this many devices
// (each relay looks at every pair of the busiest keeper's senders), and
// over at most 2^22 such pairs in all.
inline constexpr int64_t kMaxRelayDevices = 256;

// Whether FindRelays may find any for this pair: `source` partial, `target`
// not, parts routed whole, and at most kMaxRelayDevices devices.
bool MayRelay(const Layout& source, const Layout& target);

// The relays for the reducing exchange `parts` (Exchange::CreateReducing(
// source, target)) whose direct receives per device (indexed as
// parts.front().devices()) are `recv_bytes`: each one lowers the busiest
// receiver's bytes and raises no other device's to its level. Empty where
// none helps or !MayRelay.
std::vector<Relay> FindRelays(const std::vector<Exchange>& parts, const Layout& source, const Layout& target,
                              std::span<const int64_t> recv_bytes);

// OK where `relays` keep the invariants of Relay (collective_plan.h) for the
// reducing exchange `parts` from `source` to `target`
// (Exchange::CreateReducing): besides the layouts' rules, each donor sends
// its keeper `elements` below the split and is not of the lowest part that
// reaches the keeper, and each helper sends the keeper its part of the same
// elements. Internal naming the first that does not.
Status RelaysHold(std::span<const Relay> relays, const std::vector<Exchange>& parts, const Layout& source,
                  const Layout& target);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_RELAY_H_
