#include "plan/relay.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

namespace reshard {

bool MayRelay(const Layout& source, const Layout& target) {
  if (!source.partial() || target.partial()) return false;
  // (Either layout's own devices first: no union built over millions of them.)
  const auto many = [](const Layout& l) { return static_cast<int64_t>(l.devices().size()) > kMaxRelayDevices; };
  if (many(source) || many(target) || static_cast<int64_t>(DevicesOfBoth(source, target).size()) > kMaxRelayDevices)
    return false;
  return Exchange::RouteParts(source, target).tile_to == nullptr;
}

namespace {

// A transfer into the keeper, with the part it carries.
struct Incoming {
  int64_t part = 0, from = 0, elements = 0;
  std::vector<std::vector<Segment>> segments;  // per dim, ascending global index
};

// The cut of `t` along one dim that moves the most elements, at most `want`:
// (elements, dim, split); elements 0 where no whole index fits.
struct Cut {
  int64_t elements = 0;
  int32_t dim = 0;
  int64_t split = 0;
};
Cut BestCut(const Incoming& t, int64_t want) {
  Cut best;
  for (size_t d = 0; d < t.segments.size(); ++d) {
    int64_t length = 0;
    for (const Segment& s : t.segments[d]) length += s.length;
    if (length == 0) continue;
    const int64_t per_index = t.elements / length;
    if (per_index == 0) continue;
    const int64_t indices = std::min(length, want / per_index);
    if (indices == 0 || indices * per_index <= best.elements) continue;
    // The split: just past the indices-th index in global order.
    int64_t left = indices, split = 0;
    for (const Segment& s : t.segments[d]) {
      if (left <= s.length) {
        split = s.global_lo + left;
        break;
      }
      left -= s.length;
    }
    best = Cut{indices * per_index, static_cast<int32_t>(d), split};
  }
  return best;
}

}  // namespace

std::vector<Relay> FindRelays(const std::vector<Exchange>& parts, const Layout& source, const Layout& target,
                              std::span<const int64_t> recv_bytes) {
  std::vector<Relay> relays;
  if (parts.empty() || !MayRelay(source, target)) return relays;
  const std::vector<int64_t>& devices = parts.front().devices();
  const int64_t eb = source.element_bytes();
  std::vector<int64_t> recv(recv_bytes.begin(), recv_bytes.end());
  if (recv.size() != devices.size()) return relays;
  // What each keeper receives, and its lowest part, gathered once per keeper.
  struct Keeper {
    std::vector<Incoming> in;
    int64_t lowest = std::numeric_limits<int64_t>::max();
  };
  std::map<int64_t, Keeper> keepers;
  auto keeper = [&](int64_t k) -> const Keeper& {
    auto [it, fresh] = keepers.try_emplace(k);
    if (!fresh) return it->second;
    Keeper& kp = it->second;
    for (size_t p = 0; p < parts.size(); ++p) {
      const ExchangePlan xp = parts[p].ReceivePlan(k);
      for (const Transfer& t : xp.transfers()) {
        if (t.to != k) continue;
        kp.lowest = std::min(kp.lowest, static_cast<int64_t>(p));
        if (t.from == k) continue;
        Incoming in{static_cast<int64_t>(p), t.from, t.elements, {}};
        for (int64_t d = 0; d < source.rank(); ++d) {
          std::span<const Segment> segs = xp.Segments(t, d);
          in.segments.emplace_back(segs.begin(), segs.end());
          std::sort(in.segments.back().begin(), in.segments.back().end(),
                    [](const Segment& a, const Segment& b) { return a.global_lo < b.global_lo; });
        }
        kp.in.push_back(std::move(in));
      }
    }
    return kp;
  };
  // The pairs the relays found so far take: (donor, keeper), (donor,
  // helper), (helper, keeper) (Relay's invariants).
  std::set<std::pair<int64_t, int64_t>> donor_keeper, donor_helper, helper_keeper;
  // Pairs of a keeper's senders looked at, in all: past 2^22 the search
  // stops with the relays it has (each found lowers the busiest receiver).
  int64_t work = 0;
  int64_t least = *std::max_element(recv.begin(), recv.end());
  size_t kept = 0;
  for (size_t round = 0; round < devices.size() * parts.size() && work < (int64_t{1} << 22); ++round) {
    const size_t ki = static_cast<size_t>(std::max_element(recv.begin(), recv.end()) - recv.begin());
    const int64_t k = devices[ki];
    const int64_t tile = target.TileOf(k);
    if (tile < 0 || target.Holders(tile).size() != 1) break;
    const Keeper& kp = keeper(k);
    Relay best;
    for (const Incoming& donor : kp.in) {
      if (donor.part == kp.lowest || donor_keeper.count({donor.from, k}) || helper_keeper.count({donor.from, k})) continue;
      for (const Incoming& helper : kp.in) {
        ++work;
        const int64_t h = helper.from;
        if (helper.part == donor.part || h == donor.from || helper.elements != donor.elements ||
            source.TileOf(h) != source.TileOf(donor.from) || donor_helper.count({donor.from, h}) ||
            donor_keeper.count({h, k}))
          continue;
        const int64_t hi = PositionIn(devices, h);
        if (hi < 0) continue;
        const int64_t want = (recv[ki] - recv[static_cast<size_t>(hi)]) / 2 / eb;
        if (want <= best.elements) continue;
        const Cut cut = BestCut(donor, want);
        if (cut.elements > best.elements) best = Relay{donor.from, h, k, cut.dim, cut.split, cut.elements};
      }
    }
    if (best.elements == 0) break;
    relays.push_back(best);
    donor_keeper.insert({best.donor, k});
    donor_helper.insert({best.donor, best.helper});
    helper_keeper.insert({best.helper, k});
    recv[ki] -= best.elements * eb;
    recv[static_cast<size_t>(PositionIn(devices, best.helper))] += best.elements * eb;
    const int64_t busiest = *std::max_element(recv.begin(), recv.end());
    if (busiest < least) least = busiest, kept = relays.size();
  }
  // Only the relays up to the last that lowered the busiest device's bytes
  // (where several tie, the others' are lowered first): none where none did.
  relays.resize(kept);
  return relays;
}

Status RelaysHold(std::span<const Relay> relays, const std::vector<Exchange>& parts, const Layout& source,
                  const Layout& target) {
  std::map<int64_t, int64_t> lowest;  // per keeper, the lowest part that reaches it
  for (size_t i = 0; i < relays.size(); ++i) {
    const Relay& r = relays[i];
    auto bad = [&](const char* why) {
      return Status::Internal(fmt::format("relay {} (donor {}, helper {}, keeper {}): {}", i, r.donor, r.helper, r.keeper, why));
    };
    if (!source.partial() || target.partial()) return bad("relays need a partial source and a target with no reduction");
    if (r.donor == r.helper || r.donor == r.keeper || r.helper == r.keeper) return bad("its devices are not distinct");
    if (r.dim < 0 || r.dim >= source.rank() || r.elements <= 0) return bad("no elements along a dim of the array");
    const int64_t tile = source.TileOf(r.donor);
    if (tile < 0 || source.TileOf(r.helper) != tile) return bad("the donor and the helper do not hold one source tile");
    if (source.PartOf(r.donor) == source.PartOf(r.helper)) return bad("the donor and the helper hold one part");
    const int64_t kept = target.TileOf(r.keeper);
    if (kept < 0 || target.Holders(kept).size() != 1) return bad("the keeper is not its target tile's one holder");
    const std::optional<DonorTransfer> piece = DonorTransferOf(parts, r);
    if (!piece || RoundOneClip(r).Elements(piece->plan, piece->transfer()) != r.elements)
      return bad("the donor does not send the keeper its elements below the split");
    Relay as_helper = r;
    as_helper.donor = r.helper;
    const std::optional<DonorTransfer> carried = DonorTransferOf(parts, as_helper);
    if (!carried || carried->transfer().elements != piece->transfer().elements)
      return bad("the helper does not send the keeper its part of the same elements");
    auto [at, fresh] = lowest.try_emplace(r.keeper, -1);
    for (size_t p = 0; fresh && p < parts.size() && at->second < 0; ++p) {
      const ExchangePlan xp = parts[p].ReceivePlan(r.keeper);
      for (const Transfer& t : xp.transfers())
        if (t.to == r.keeper && t.elements > 0) at->second = static_cast<int64_t>(p);
    }
    if (source.PartOf(r.donor) == at->second)
      return bad("the donor's part is the lowest that reaches the keeper, whose messages write its elements");
    for (size_t j = 0; j < i; ++j) {
      const Relay& o = relays[j];
      if (o.donor == r.donor && (o.keeper == r.keeper || o.helper == r.helper))
        return bad("a second relay of one (donor, keeper) or (donor, helper) pair");
      if (o.keeper == r.keeper && (o.donor == r.helper || o.helper == r.donor))
        return bad("a device both donor and helper for one keeper");
    }
  }
  return Status::Ok();
}

}  // namespace reshard
