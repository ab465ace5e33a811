// CollectivePlan: a reshard as a sequence of steps, each one real collective
// (or a local step), the one plan type every consumer reads: the simulator,
// the executors and the emitters (JSON, XLA HLO, JAX).
//
// Each step has an exact input and output Layout and an SPMD program: every
// device runs the same ProgramOps on the same local shapes, and
// device-dependent offsets come from the device's coordinates in the plan's
// mesh (as JAX's axis_index), never from per-pair lists. Local buffers are
// the padded shards XLA and shard_map use: along a dim split k ways a shard
// is ceil(n/k) long, and elements past n are padding (sent by equal-chunk
// collectives and counted by the cost model).
//
// Groups are named by axes of the plan's mesh: the devices that share their
// coordinates on every other axis form a group, members ordered row-major
// over the listed axes (XLA's iota replica groups, JAX's axis_name tuples).
// The plan mesh is the layouts' common mesh with each axis cut into pieces at
// every sub-axis boundary either layout (or the topology's node size) uses,
// so every step names whole axes. A ragged exchange step (kExchange) has no
// group: it is the minimal exchange between its input and output layouts.
//
// Immutable after planning; thread-safe to read.
#ifndef RESHARD_COLLECTIVE_PLAN_H_
#define RESHARD_COLLECTIVE_PLAN_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/exchange.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"

namespace reshard {

// One instruction of a step's SPMD program.
//   kReshape       row-major reshape to `shape`
//   kTranspose     result dim i is input dim perm[i]
//   kPad           grow each dim to `shape` with trailing zeros
//   kSlice         keep [0, shape[d]) of each dim
//   kDynamicSlice  along `dim`, keep shape[dim] elements from offset
//                  (linear index of the device over `axes`) * shape[dim]
//   kAllToAll      input dim 0 has one chunk per group member: chunk i goes
//                  to member i; output chunk j came from member j
//   kAllGather     input dim 0 is 1; output dim 0 holds member j's input at j
//   kCollectivePermute  each (source, target) pair of mesh positions sends
//                  the whole buffer; a device no pair targets keeps its input
//   kExchange      the ragged minimal exchange from the step's input layout
//                  to its output layout (variable sizes, one round)
//   kReduceScatter input dim 0 has one chunk per group member (partial
//                  values); member i keeps the reduction (`reduce`) of every
//                  member's chunk i, as dim 0 of size 1
//   kAllReduce     every member keeps the reduction of every member's buffer
// Reductions combine members' values in member order (0, 1, ...), so a plan
// computes the same floating-point result however it is run.
struct ProgramOp {
  enum class Kind {
    kReshape, kTranspose, kPad, kSlice, kDynamicSlice, kAllToAll, kAllGather, kCollectivePermute, kExchange,
    kReduceScatter, kAllReduce
  };
  Kind kind = Kind::kReshape;
  std::vector<int64_t> shape = {};  // the result's local shape
  std::vector<int64_t> perm = {};
  int64_t dim = 0;
  std::vector<int32_t> axes = {};  // plan-mesh axes: dynamic-slice offsets, collective groups
  // Collective-permute: (from, to) mesh positions (or, between explicit
  // layouts, indexes of CollectivePlan::devices()); 32 bits, as both stay
  // under 2^31 (kMaxDevices devices a layout), 8 bytes a mover.
  std::vector<std::pair<int32_t, int32_t>> pairs = {};
  ReduceOp reduce = ReduceOp::kSum;                      // reduce-scatter, all-reduce
};
std::string_view ProgramOpName(ProgramOp::Kind k);  // "reshape", ..., "all-to-all", "exchange"

// Per-device values of a step, indexed like CollectivePlan::devices().
// Structured steps are SPMD, so their values are usually one number for
// every device: stored so, and expanded only where devices differ (a
// permute's movers, the exchange), which keeps plans over 2^24 devices small.
// Where devices hold one of two values (a permute: movers and the rest), a
// bit a device says which.
class DeviceValues {
 public:
  DeviceValues() = default;
  static DeviceValues Uniform(size_t devices, int64_t value) { return DeviceValues(devices, value); }
  // Stored as one number when all equal.
  static DeviceValues Each(std::vector<int64_t> values);

  size_t size() const { return size_; }
  bool uniform() const { return each_.empty() && is_other_.empty(); }
  int64_t operator[](size_t i) const {
    if (!each_.empty()) return each_[i];
    return !is_other_.empty() && is_other_[i] ? other_ : uniform_;
  }
  // Stores a second value as a bit a device, a third as a list of all.
  void Set(size_t i, int64_t value);
  int64_t Max() const;
  int64_t Sum() const;

 private:
  DeviceValues(size_t n, int64_t v) : size_(n), uniform_(v) {}
  size_t size_ = 0;
  int64_t uniform_ = 0;
  int64_t other_ = 0;            // with is_other_
  std::vector<bool> is_other_;   // empty, or per device: holds other_, not uniform_
  std::vector<int64_t> each_;
};

enum class StepOp { kAllToAll, kAllGather, kCollectivePermute, kExchange, kSlice, kPad, kCopy, kReduceScatter, kAllReduce };
// "all-to-all", "all-gather", "collective-permute", "exchange", "slice", "pad", "copy", "reduce-scatter", "all-reduce"
std::string_view StepOpName(StepOp op);
bool IsCollective(StepOp op);

// A relay of a reducing exchange step (kExchange from partial sums into a
// layout with no reduction, where a keeper's busiest receive is above the
// lower bound): of what `donor` sends `keeper`, the elements whose global
// index along `dim` is below `split` go first to `helper`, which holds the
// same source tile in another part and combines them into its own values
// there (round 1); in round 2 the helper's message to the keeper carries
// both parts there, and the donor's carries the rest. A keeper then
// receives less and a helper with room more, as the bound's schedule does
// (docs/cost_model.md, "Relays"). The step runs as two program steps
// (PlanProgram), both its rounds priced in the step's figures.
// Invariants (RelaysHold, relay.h): the donor and the helper hold one
// source tile, in parts neither the lowest routed to the keeper (the
// donor's) nor equal; the keeper alone holds its target tile; one relay per
// (donor, keeper) and per (donor, helper); no device both donor and helper
// for one keeper.
struct Relay {
  int64_t donor = 0, helper = 0, keeper = 0;
  int32_t dim = 0;
  int64_t split = 0;
  int64_t elements = 0;  // moved in round 1 (below the split)
  friend bool operator==(const Relay&, const Relay&) = default;
};
// What a relay's donor-to-keeper transfer moves in each round: below the
// split (to the helper, into its copy of the same tile), and from the split
// on (to the keeper). The one rule every lowering of a relay clips by.
TransferClip RoundOneClip(const Relay& r);
TransferClip RoundTwoClip(const Relay& r);
// The relay whose donor is `donor` and whose keeper (by_keeper) or helper
// (!by_keeper) is `peer`, or null.
const Relay* RelayOf(std::span<const Relay> relays, int64_t donor, int64_t peer, bool by_keeper);
// What round 2 moves of transfer `t` of a relayed step's reducing exchange:
// all of it, unclipped, where no relay cuts it (relay null); else that
// relay, its RoundTwoClip and the elements it leaves (0: no message).
struct RoundTwoTransfer {
  TransferClip clip = {};
  int64_t elements = 0;
  const Relay* relay = nullptr;
};
RoundTwoTransfer RoundTwoOf(std::span<const Relay> relays, const Transfer& t);
// The transfer relay `r` cuts, in the step's reducing exchange `parts`
// (Exchange::CreateReducing, one exchange per part): the keeper's receive
// plan of the donor's part, and the donor's transfer in it; nullopt where
// the donor sends the keeper nothing.
struct DonorTransfer {
  ExchangePlan plan;
  size_t index = 0;
  const Transfer& transfer() const { return plan.transfers()[index]; }
};
std::optional<DonorTransfer> DonorTransferOf(const std::vector<Exchange>& parts, const Relay& r);

struct PlanStep {
  StepOp op = StepOp::kCopy;
  Layout input, output;                   // exact layouts before and after
  std::string input_spec = {}, output_spec = {};    // over the plan mesh, "[{y}, {}, {x}]"; empty for explicit layouts
  std::vector<int64_t> input_shard = {}, output_shard = {};  // padded local shapes (explicit layouts: the largest tile)
  std::string group_spec = {};            // "{x,y}": the group's axes as the caller's mesh names them
  std::vector<int32_t> group_axes = {};      // plan-mesh axes of the group, in member order
  int64_t group_size = 1;
  int64_t num_groups = 0;
  std::vector<ProgramOp> program = {};
  // Per device: bytes sent and received through this step (padding
  // included), messages, and the most bytes it holds at once.
  DeviceValues send_bytes = {}, recv_bytes = {}, sends = {}, recvs = {}, peak_bytes = {};
  double time_us = 0;                     // modeled, the slowest device
  // A reducing exchange's relays (above), in the order found; empty elsewhere.
  std::vector<Relay> relays = {};
  // The rounds it runs in: 2 for a relayed exchange, else 1 (a collective
  // step is as many collective calls).
  int64_t rounds() const { return relays.empty() ? 1 : 2; }
};

struct PlanTotals {
  int64_t collectives = 0;  // collective calls: a relayed exchange counts its two rounds
  int64_t max_send_bytes = 0, max_recv_bytes = 0, total_bytes = 0, peak_bytes = 0;
  double time_us = 0;
};

class CollectivePlan {
 public:
  const Layout& source() const { return *source_; }
  const Layout& target() const { return *target_; }
  // Every device of either layout, ascending: the index of per-device vectors.
  const std::vector<int64_t>& devices() const { return devices_are_source_ ? source_->devices() : devices_; }
  // The plan mesh, when both layouts are named shardings over one mesh.
  const std::optional<Mesh>& mesh() const { return mesh_; }
  // Per plan-mesh axis: its name in the caller's mesh ("x", or the sub-axis "x:(1)2").
  const std::vector<std::string>& axis_labels() const { return axis_labels_; }
  const std::vector<PlanStep>& steps() const { return steps_; }
  const PlanTotals& totals() const { return totals_; }
  // "all-to-all" per step, in order (local steps included).
  std::vector<std::string> OpNames() const;

  // One device's totals over every step (peak: its largest step peak).
  struct DeviceTotals {
    int64_t send_bytes = 0, recv_bytes = 0, sends = 0, recvs = 0, peak_bytes = 0;
  };
  DeviceTotals TotalsOf(size_t device_index) const;

 private:
  friend class PlanBuilder;
  std::optional<Layout> source_, target_;
  std::vector<int64_t> devices_;
  bool devices_are_source_ = false;  // both layouts' devices are the source's: devices_ is empty
  std::optional<Mesh> mesh_;
  std::vector<std::string> axis_labels_;
  std::vector<PlanStep> steps_;
  PlanTotals totals_;
};

}  // namespace reshard

#endif  // RESHARD_COLLECTIVE_PLAN_H_
