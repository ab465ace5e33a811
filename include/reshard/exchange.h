// The minimal exchange between two layouts of one array: every element a
// device needs and does not already hold arrives exactly once, from one
// holder, in a single round (a generalized all-to-all, "all-to-all-v").
//
// Both layouts are grids (see layout.h), so what one source tile sends to one
// target tile is a cross product of per-dim segment lists. The planner builds,
// per dim, the overlaps of source and target cells once; a transfer is then
// one overlap per dim, and its boxes and buffer offsets follow. This keeps one
// device's part (Exchange::DevicePlan) proportional to that device's peers,
// not to the whole device-by-device plan.
//
// Sender rule where source data is replicated: a receiver that holds the
// source tile copies locally. Otherwise, for source tile S with holders
// h_0 < ... < h_{n-1}, the receiving pair (target tile T, device r holding T)
// has position rank(T) * slots + index(r): rank(T) is how many of the target
// tiles S overlaps come before T in row-major order, index(r) is r's place
// among T's holders (ascending), and slots is the most holders any target
// tile has. The pair goes to h_k, k = (position - local copies at earlier
// positions) mod n. This is a closed form of (S, T, r): one device finds its
// senders without the rest of the plan, and DevicePlan, Plan and
// ForEachTransfer agree.
//
// Sender groups (optional, for a structured step lowered through the
// exchange): devices carry a group key; a receiver whose group holds the
// source tile is sent to by the holder in its group with the lowest id, so
// a collective's messages stay inside its groups; elsewhere the rule above
// (positions as if no receiver were served by its group).
//
// Guarantee: when every target tile S overlaps has the same number of
// holders (true of every notation reshard parses), h_i sends
// ceil((m - i) / n) of S's m messages: floor or ceil of m / n, exactly
// balanced. A device holds one source tile, so when those messages are of
// equal size (as when both layouts split evenly) the most bytes any device
// sends is optimal too. Otherwise a holder sends at most ceil(C * slots / n)
// messages (C: target tiles S overlaps), and bytes are balanced only as far
// as message counts are: at most that many of S's largest messages.
//
// Exchange, ExchangePlan: immutable after creation; const methods are
// thread-safe.
#ifndef RESHARD_EXCHANGE_H_
#define RESHARD_EXCHANGE_H_

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reshard/box.h"
#include "reshard/layout.h"
#include "reshard/part_routes.h"
#include "reshard/status.h"

namespace reshard {

// A run along one dim: global [global_lo, global_lo + length), found at
// src_offset in the sender's local buffer and dst_offset in the receiver's.
struct Segment {
  int64_t global_lo = 0, length = 0, src_offset = 0, dst_offset = 0;
  friend bool operator==(const Segment&, const Segment&) = default;
};

class ExchangePlan;
struct Transfer;

// Of a transfer, the elements whose global index along dim `dim` lies in
// [lo, hi); dim < 0 keeps all. A relayed step's pieces (Relay,
// collective_plan.h): the donor's elements below the split go to the helper,
// the rest to the keeper. The one rule every lowering of a relay clips by.
struct TransferClip {
  int64_t dim = -1, lo = 0, hi = 0;
  // Per dim, the elements of transfer `t` of `plan` it keeps along it (the
  // clipped segments' lengths summed): the shape a sender stages them in.
  std::vector<int64_t> Shape(const ExchangePlan& plan, const Transfer& t) const;
  // The elements of transfer `t` of `plan` it keeps: Shape's product.
  int64_t Elements(const ExchangePlan& plan, const Transfer& t) const;
  // Segment `s` along dim `d` clipped, its offsets moved alike; length 0
  // where nothing of it is kept.
  Segment Apply(const Segment& s, int64_t d) const {
    if (d != dim) return s;
    const int64_t a = std::max(lo, s.global_lo), b = std::min(hi, s.global_lo + s.length);
    if (b <= a) return Segment{a, 0, s.src_offset, s.dst_offset};
    return Segment{a, b - a, s.src_offset + (a - s.global_lo), s.dst_offset + (a - s.global_lo)};
  }
};

// A transfer's box: per dim, an overlap id of an exchange's tables. Held
// inline up to kInline dims and on the heap beyond, so that a transfer costs
// no heap block of its own (an all-gather over thousands of devices lists
// millions of transfers). Reads as a sequence of int32_t; compares and
// converts as std::vector<int32_t> does.
class OverlapIds {
 public:
  using value_type = int32_t;
  using iterator = const int32_t*;
  using const_iterator = const int32_t*;
  static constexpr size_t kInline = 6;  // (the union is 24 bytes with a pointer in it either way)

  OverlapIds() : inline_{} {}
  OverlapIds(std::span<const int32_t> ids) : inline_{} { Assign(ids); }  // NOLINT: converts as a vector would
  OverlapIds(const std::vector<int32_t>& ids) : OverlapIds(std::span<const int32_t>(ids)) {}  // NOLINT
  OverlapIds(const OverlapIds& o) : OverlapIds(std::span<const int32_t>(o.begin(), o.end())) {}
  OverlapIds(OverlapIds&& o) noexcept;
  OverlapIds& operator=(const OverlapIds& o);
  OverlapIds& operator=(OverlapIds&& o) noexcept;
  OverlapIds& operator=(std::span<const int32_t> ids) {
    Assign(ids);
    return *this;
  }
  OverlapIds& operator=(const std::vector<int32_t>& ids) { return *this = std::span<const int32_t>(ids); }
  ~OverlapIds() { Free(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int32_t* data() const { return size_ > kInline ? heap_ : inline_; }
  const int32_t* begin() const { return data(); }
  const int32_t* end() const { return data() + size_; }
  int32_t operator[](size_t d) const { return data()[d]; }
  operator std::vector<int32_t>() const { return {begin(), end()}; }  // NOLINT

  friend bool operator==(const OverlapIds& a, const OverlapIds& b);
  friend std::strong_ordering operator<=>(const OverlapIds& a, const OverlapIds& b);

 private:
  void Assign(std::span<const int32_t> ids);
  void Free();
  uint32_t size_ = 0;
  union {
    int32_t inline_[kInline];
    int32_t* heap_;
  };
};

// Elements moving from `from`'s source buffer to `to`'s target buffer: the
// cross product over dims of the segment lists of overlaps[d]. from == to is a
// local copy.
struct Transfer {
  int64_t from = 0, to = 0;
  int64_t elements = 0;
  OverlapIds overlaps;  // per dim, an overlap id of the plan's tables
};

// Staging: a sender stages each distinct box it sends once, and the
// messages that carry one box to several receivers (the replicas of a target
// tile) share those bytes. Two transfers from one device move the same box
// exactly when their overlaps are equal. The one rule the stats, the
// simulators and the compiled programs count staging by. Example: f32[8]
// held whole by device 0, replicated over devices 1..3 as the target: device
// 0 sends three 32-byte messages and stages 32 bytes, not 96.
class StagedBoxes {
 public:
  // True when t's box is new for its sender (it is staged), false when the
  // sender staged it already. Local copies (from == to) are never staged.
  bool Add(const Transfer& t);
  // The same rule, naming who stages: `message` when t's box is new for its
  // sender (recorded as its stager), else the message recorded first for
  // it; -1 for a local copy. Example: messages 0, 1, 2 of one box give 0,
  // 0, 0.
  int64_t Stager(const Transfer& t, int64_t message);
  // Add's answer for transfers that come box by box: every transfer of one
  // box from one sender right after the other, never that box again (a
  // device's sends from Exchange::ForEachDeviceTransfer). Compares with the
  // last box only: no table of every box (a sender of an all-to-all over
  // 2^20 devices sends 2^20 boxes). Not to be mixed with Add or Stager on
  // one object: each keeps its own record.
  bool AddInRuns(const Transfer& t);
  void Clear() {
    seen_.clear();
    has_last_ = false;
  }

 private:
  // Hashed, not ordered: a compiled step asks once per message, and a
  // sender of an all-gather over thousands of devices sends thousands.
  struct BoxHash {
    size_t operator()(const std::pair<int64_t, OverlapIds>& box) const;
  };
  std::unordered_map<std::pair<int64_t, OverlapIds>, int64_t, BoxHash> seen_;
  bool has_last_ = false;  // AddInRuns' last box
  int64_t last_from_ = 0;
  OverlapIds last_box_;
};

class ExchangeTables;  // per-dim overlaps of source and target cells (internal)

class ExchangePlan {
 public:
  const Layout& source() const;
  const Layout& target() const;
  // Sorted by (from, to). Local copies included.
  const std::vector<Transfer>& transfers() const { return transfers_; }
  std::span<const Segment> Segments(const Transfer& t, int64_t d) const;
  // The global boxes the transfer moves, in packing order.
  std::vector<Box> Boxes(const Transfer& t) const;
  int64_t Bytes(const Transfer& t) const { return t.elements * source().element_bytes(); }

 private:
  friend class Exchange;
  std::shared_ptr<const ExchangeTables> tables_;
  std::vector<Transfer> transfers_;
};

class Exchange {
 public:
  // REQUIRES nothing; fails unless both layouts have the same shape and dtype,
  // and unless the array's bytes times (devices + 4) fit in int64, which keeps
  // every statistic of the plan exact.
  static Result<Exchange> Create(const Layout& source, const Layout& target);
  // With sender groups: `group_key(device)` names each device's group.
  static Result<Exchange> Create(const Layout& source, const Layout& target,
                                 std::function<int64_t(int64_t device)> group_key);
  // Only the transfers `delivers(source tile, receiver)` keeps: the others
  // are left out (the sender rule's positions stay those of the whole
  // exchange, so every device still finds its senders alone). `receivers`,
  // where given, lists what `delivers` keeps of each (source tile, target
  // tile) pair, ascending: the exchange then visits only those (linear in
  // its transfers, not in each target tile's holders).
  static Result<Exchange> CreateRouted(
      const Layout& source, const Layout& target, std::function<bool(int64_t source_tile, int64_t receiver)> delivers,
      std::function<std::span<const int64_t>(int64_t source_tile, int64_t target_tile)> receivers = {});
  // Create's checks alone, without building the exchange.
  static Status Validate(const Layout& source, const Layout& target);
  // The reducing exchange: for each part of `source` (a layout with no
  // reduction is one part), in part order, the minimal exchange from the
  // devices that hold that part (Layout::PartLayout) to the devices its
  // contributions go to (PartRoutes): every device of a target with no
  // reduction, or one part of a partial target (with tile routes, below,
  // each of the part's tiles its own). A device sends only its own
  // part, so each element gets one contribution of every part routed to it,
  // combined at the device that keeps it. The one lowering of a step from or
  // to a partial layout: the planner prices it, the simulator and the
  // compiled programs (device_program.h) run it.
  // With tile routes (PartRoutes::tile_to), per source part one exchange
  // into every target device, each tile of the part delivered only to the
  // devices of the target part it is routed to (CreateRouted).
  // InvalidArgument unless one of the layouts is partial and they differ;
  // NotSupported where the dtype cannot be reduced (CheckReducible).
  static Result<std::vector<Exchange>> CreateReducing(const Layout& source, const Layout& target);
  // The routes CreateReducing follows. REQUIRES: same devices' numbering;
  // valid for any pair (a pair of layouts with no reduction: one part to
  // every device).
  static PartRoutes RouteParts(const Layout& source, const Layout& target);

  const Layout& source() const;
  const Layout& target() const;
  // Every device of either layout, ascending.
  const std::vector<int64_t>& devices() const { return devices_; }

  // The whole plan, materialized.
  ExchangePlan Plan() const;
  // One device's part: what it sends, receives and copies locally. Cost is
  // proportional to its peers (each sender found in O(rank + log devices)),
  // plus, when its source tile is replicated, that tile's other receivers,
  // which it walks to find the ones it serves.
  ExchangePlan DevicePlan(int64_t device) const;
  // DevicePlan's transfers, visited without storing them: what the device
  // receives (in no set order), then what it sends, box by box (every send
  // of one box right after the other, as StagedBoxes::AddInRuns takes them).
  void ForEachDeviceTransfer(int64_t device, const std::function<void(const Transfer&)>& visit) const;
  // DevicePlan without the sends: what `device` receives and copies locally,
  // at the cost of its senders alone (no walk over its tile's receivers).
  ExchangePlan ReceivePlan(int64_t device) const;
  // What `receiver` gets in Create(source, target) (no sender groups, no
  // filter), without building the exchange: one visit per source tile its
  // target tile overlaps, with the elements they share, in no set order; a
  // local copy where source.TileOf(receiver) is that tile, else one message
  // from one of its holders. For pricing an exchange that may never be
  // built, with no tables: a binary search over the source's cuts per cell
  // of its tile and dim, then one step per source cell those cells cover
  // (a message, or an empty cell passed over), plus, where a dim's source
  // cells repeat tiles, a sort of their list. REQUIRES: Validate(source,
  // target) is OK, and neither layout is partial.
  static void ForEachReceived(const Layout& source, const Layout& target, int64_t receiver,
                              const std::function<void(int64_t source_tile, int64_t elements)>& visit);
  // Visits every transfer of the whole plan without storing it (grouped by
  // source tile; order otherwise unspecified).
  void ForEachTransfer(const std::function<void(const Transfer&)>& visit) const;

 private:
  Exchange() = default;
  std::shared_ptr<const ExchangeTables> tables_;
  std::vector<int64_t> devices_;
};

}  // namespace reshard

#endif  // RESHARD_EXCHANGE_H_
