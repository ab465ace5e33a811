// DeviceProgram: the one executable form of a plan. Every executor (the
// in-process one, MPI, later NCCL) runs only this.
//
// A plan step becomes, per device, a flat program of three parts:
//   pack    copies from the device's input buffer into one contiguous send
//           buffer, one message after another (ascending receiver);
//   the exchange  messages: per peer a byte count and an offset into the
//           send buffer (sends) or the receive buffer (receives), exactly the
//           counts and displacements MPI_Alltoallv and NCCL take;
//   unpack  copies from the receive buffer into the output buffer, and
//   local   copies from the input buffer straight into the output buffer.
// Every copy is an N-d box with byte strides on both sides, its dims merged
// where they are contiguous on both sides, so its inner run is as long as the
// two buffers allow. Copies, dims and messages live in flat arrays (no heap
// object per transfer).
//
// A step from or to a partial layout (a pending reduction, layout.h) is
// lowered part by part (Exchange::CreateReducing): for each part, the
// minimal exchange from the devices that hold it to the devices it is
// routed to (every device of a target with no reduction, one part of a
// partial target, or with tile routes each tile of the part, within each
// target tile, to its own target part). A device sends only its own part, so each pair of
// devices still exchanges at most one message, and every output element
// receives one contribution of each part routed to it, combined at the
// device that keeps it (a reduce-scatter, an all-reduce or a reducing
// exchange alike); a partial target's devices that get no part hold the
// identity. Equal partial layouts lower to local copies.
//
// Each step is lowered through the minimal exchange between the step's input
// and output layouts (exchange.h): a structured collective (all-to-all,
// all-gather, collective-permute, slice) and the ragged exchange alike become
// pack + one exchange of contiguous chunks + unpack. The data each device
// holds after the step is exactly what the step's output layout states; the
// buffers are the layouts' exact local buffers (no padding). An all-gather or
// all-to-all over mesh groups is lowered with sender groups (StepExchange):
// every message stays inside the receiver's group, sent by the member that
// holds it, as the collective sends it; elsewhere which peer sends a
// replicated element follows the exchange's sender rule. The SPMD program
// ops of collective_plan.h remain what SimulatePlan checks and the emitters
// print. An all-gather or all-to-all over mesh groups whose layouts repeat
// from group to group is written once per group pattern instead
// (GroupCopies, below): no program per message.
//
// Immutable after compilation; thread-safe to read.
#ifndef RESHARD_DEVICE_PROGRAM_H_
#define RESHARD_DEVICE_PROGRAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <span>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/copy_program.h"
#include "reshard/exchange.h"
#include "reshard/mesh.h"
#include "reshard/status.h"
#include "reshard/step_lowering.h"

namespace reshard {

// One device's part of one step.
struct DeviceProgram {
  int64_t device = 0;                     // device id
  int64_t input_bytes = 0, output_bytes = 0;  // its exact local buffers before and after the step
  int64_t send_bytes = 0, recv_bytes = 0;     // its send (each distinct box once) and receive buffers
  // Messages, ascending peer. Peers are indices into PlanProgram::devices().
  std::vector<int64_t> send_peer, send_count, send_offset;
  std::vector<int64_t> recv_peer, recv_count, recv_offset;
  // Where each received message starts in its sender's send buffer (what a
  // one-sided or shared-memory transport reads).
  std::vector<int64_t> recv_peer_offset;
  CopyProgram pack;    // input buffer -> send buffer
  // pack.ops[pack_begin[m], pack_begin[m+1]) fill sent message m.
  std::vector<int32_t> pack_begin;
  // A box sent to several receivers (the replicas of a target tile) is
  // staged once (StagedBoxes, exchange.h): message m's bytes are those of
  // message pack_owner[m], at the same offset (pack_owner[m] == m for the
  // first message of each box). Every message's pack ops (where compiled:
  // CompileOptions::copies) still describe its own box in full; packing
  // every message runs the owners' ops only (Packs). Send offsets may therefore repeat, as MPI_Alltoallv allows.
  std::vector<int32_t> pack_owner;
  bool Packs(size_t m) const { return pack_owner[m] == static_cast<int32_t>(m); }
  CopyProgram unpack;  // receive buffer -> output buffer
  CopyProgram local;   // input buffer -> output buffer
  // unpack.ops[unpack_begin[m], unpack_begin[m+1]) read received message m.
  std::vector<int32_t> unpack_begin;
  // For transports where the receiver can read its sender's input buffer
  // (shared memory): received message m as copies straight from sender
  // recv_peer[m]'s input buffer into this output buffer, pack and unpack in
  // one, direct.ops[direct_begin[m], direct_begin[m+1]).
  CopyProgram direct;
  std::vector<int32_t> direct_begin;
  // A reducing step only (StepProgram::reduction): the part each received
  // message carries (its sender's), and the part of the local copies (this
  // device's own). Output elements take one contribution of every part
  // routed to the device; executors apply them in part order (RunReducingCopies), after every
  // message has arrived. Empty and 0 on other steps.
  std::vector<int64_t> recv_part;
  int64_t local_part = 0;
  // A reducing step only: whether received message m's copies write the
  // elements they cover (its part is the first routed to them: the device's
  // lowest part, or with tile routes the lowest part whose tile is routed
  // here, PartRoutes::FirstInto) or combine with what an earlier part wrote;
  // local_writes, the same for the local copies. Empty and false elsewhere.
  std::vector<uint8_t> recv_writes;
  bool local_writes = false;
  // A step into a partial target: where no part is routed to this device
  // (PartRoutes, part_routes.h), its output, or with tile routes the boxes of
  // the tiles no part routes to its target part, as copies whose destinations are
  // filled with `fill_element` (one element: the identity of the target's
  // op) before any part is applied. Empty elsewhere.
  CopyProgram fill;
  std::vector<std::byte> fill_element;
  // A relayed step's round 2 only: the output boxes where a part arrives
  // combined inside another part's message (a relay's piece, carried by its
  // helper), op by op with that part (relayed_part[k] for relayed.ops[k]).
  // Not run: what the execution checker counts as that part's copies.
  CopyProgram relayed;
  std::vector<int64_t> relayed_part;
};

// How a device's local buffer is laid out in memory. The layouts' local
// buffers are row-major and tight; an HPC code may hold its own arrays
// column-major (Fortran order, as ScaLAPACK holds a local matrix) and with a
// leading dimension larger than the contiguous extent. `leading_dim` is the
// element stride of the dim next to the contiguous one (dim 1 column-major,
// dim rank-2 row-major); 0 means tight. Example: a [5,3] local matrix
// column-major with leading_dim 8 has element strides {1, 8} and fills
// 8 * 3 elements.
struct BufferFormat {
  enum class Order { kRowMajor, kColumnMajor };
  Order order = Order::kRowMajor;
  int64_t leading_dim = 0;

  static BufferFormat ColumnMajor(int64_t leading_dim = 0) { return {Order::kColumnMajor, leading_dim}; }
  bool tight_row_major() const { return order == Order::kRowMajor && leading_dim == 0; }
  // Element strides of a buffer of `shape` in this format.
  std::vector<int64_t> Strides(std::span<const int64_t> shape) const;
  // The buffer's size: its outermost stride times that dim's extent (0 when
  // any extent is 0). InvalidArgument when leading_dim is below the
  // contiguous extent.
  Result<int64_t> Bytes(std::span<const int64_t> shape, int64_t element_bytes) const;
  friend bool operator==(const BufferFormat&, const BufferFormat&) = default;
};

// A structured step's copies written once per group pattern, not once per
// message (an all-gather over 8192 devices has 67 million messages but one
// pattern of 8192 copies). Compiled for an all-gather, all-to-all,
// reduce-scatter or all-reduce over mesh groups (CompileOptions::
// group_patterns, every device's part; an all-reduce's two program steps
// each) where every device holds one box in the input and one in the output
// (no block-cyclic tiles) and no two members of a group hold the same input
// tile of the same part. A reducing step (its input partial) then gives
// each receiver one box of every part from its group, applied in part order
// (reduce_kernel.h): each part's boxes cover the receiver's output once;
// into a partial output, where each group's parts are all routed to the one
// target part its receivers hold (the parts of other groups to others).
// Groups whose boxes fall alike (each member's
// extents, and its boxes' offsets from the group's first input box, equal)
// share a pattern: one for even shards, one more for each way uneven shards
// fall. Within a pattern, what member s sends member r depends only on
// (r, s): the box in_tile(s) ∩ out_tile(r), at the same places in their
// local buffers in every group, and members whose output tiles coincide
// (all of them, in an all-gather) share one receiver class. The senders are the exchange's with sender groups (each
// element's one holder in the receiver's group), so the bytes each device
// sends and receives are StepExchange's (a reducing step's: each part's
// holder in the group, as the reduce-scatter was priced). Other steps keep
// per-message programs. Immutable; shared by copies of the program.
struct GroupCopies {
  int64_t group_size = 0;              // k
  // Per program device index: its group (0, 1, ... in order of their first
  // position) and its member index (Mesh::MemberIndex).
  std::vector<int32_t> group, member;
  // members[g * k + m]: the program device index of member m of group g.
  std::vector<int32_t> members;
  // Groups whose members' boxes fall alike (extents, and offsets from the
  // group's first input box) share a pattern: one for even shards, a few
  // where uneven shards fall differently in some groups.
  struct Pattern {
    std::vector<int32_t> receiver_class;  // per member index (first appearance order)
    int32_t classes = 0;
    // Its pairs (class c, sender member s) are pairs_at + c * k + s of the
    // pair arrays below.
    int64_t pairs_at = 0;
    // Per member index: the bytes its messages carry out of it and into it
    // (local copies excluded), what StepExchange's messages carry; and, in
    // the staged form, its send buffer's bytes.
    std::vector<int64_t> sent, received, staged;
    // A reducing step only (parts > 1): per member index, its part's rank
    // among the parts its group's members hold (dense from 0, the members
    // holding elements only: groups of one pattern may hold different
    // parts); the members in ascending rank, the order a receiver applies
    // their boxes in (rank 0's write, the others combine).
    std::vector<int32_t> part_rank;
    std::vector<int32_t> part_order;
    // Whether member m's boxes write (rank 0) rather than combine.
    bool Writes(int64_t m) const { return part_rank[static_cast<size_t>(m)] == 0; }
    // The parts routed to each receiver (PartRoutes::PartsInto): all of the
    // input's where the output holds no reduction; 1 where the step does
    // not reduce; 0 where no receiver of the pattern keeps an element.
    int64_t parts_in = 1;
  };
  // The input's part count (1: the step does not reduce).
  int64_t parts = 1;
  std::vector<Pattern> patterns;
  std::vector<int32_t> pattern_of;  // per group
  // Per pair: copies.ops[begin[pair], begin[pair + 1]) copy the sender's box
  // from its input buffer into a receiver's output buffer; where the sender
  // is the receiver itself, these are its local copies. Without the direct
  // form (CopyForms::kStaged) only the local copies are held (the other
  // pairs' ranges are empty).
  CopyProgram copies;
  bool has_direct = false;  // every pair's direct copies held
  std::vector<int64_t> begin;       // pairs + 1 entries
  std::vector<int64_t> pair_bytes;  // per pair: its box's bytes (0: none)
  // The staged form (empty where the program has the direct one alone):
  // member s stages its box for class c once, at stage_offset[pair] of its
  // send buffer (-1 where the box is empty or no receiver of the class but s
  // takes it; indexed by pair, so that a receiver reads its senders' in
  // order), by pack.ops[pack_begin[pair], pack_begin[pair + 1]);
  // a receiver unpacks the box by unpack.ops[unpack_begin[pair],
  // unpack_begin[pair + 1]), reading from the staged box's start (its ops'
  // source offsets are relative to it). A box is staged in the order of the
  // step's staging format (device_program.cc).
  CopyProgram pack, unpack;
  std::vector<int64_t> pack_begin, stage_offset, unpack_begin;

  int64_t Pairs() const { return static_cast<int64_t>(pair_bytes.size()); }
  bool has_staged() const { return !unpack_begin.empty(); }
  // The pattern of program device `index`'s group.
  const Pattern& PatternOf(size_t index) const {
    return patterns[static_cast<size_t>(pattern_of[static_cast<size_t>(group[index])])];
  }
  // The pair of member s's box into a receiver of member index r, or of class c.
  size_t Pair(const Pattern& p, int64_t r, int64_t s) const {
    return PairOfClass(p, p.receiver_class[static_cast<size_t>(r)], s);
  }
  size_t PairOfClass(const Pattern& p, int64_t c, int64_t s) const {
    return static_cast<size_t>(p.pairs_at + c * group_size + s);
  }
  // The ops (direct) of a pair.
  std::pair<int64_t, int64_t> Ops(size_t pair) const { return {begin[pair], begin[pair + 1]}; }
};

// The copy programs a compiled step holds (DeviceProgram): pack and unpack
// (kStaged: MPI, threads as ranks, the staged transport), the direct copies
// (kDirect: the shared-memory direct transport), or both.
enum class CopyForms { kBoth, kStaged, kDirect };

struct CompileOptions {
  // >= 0: compile only this device's part (the other devices' programs are
  // empty), built from Exchange::DevicePlan, so its cost is proportional to
  // the device's peers.
  int64_t only_device = -1;
  // Formats of the plan's source and target buffers (every device's, or the
  // one device's). Intermediate buffers of multi-step plans are the
  // executor's own: row-major and tight. The first step's messages are
  // staged in the source format's order (a column-major source packs whole
  // columns), so every device's source must be in the same order; leading
  // dimensions may differ.
  BufferFormat source_format = {}, target_format = {};
  // Which copy programs to compile: a transport runs one form only (the
  // staged pack and unpack, or the direct copies of a shared-memory
  // transport), and each is a copy op or more per message (an all-gather
  // over thousands of devices has millions). The forms left out are empty
  // (their begin arrays still span every message, each range empty);
  // running a transport whose form a program lacks is InvalidArgument.
  CopyForms copies = CopyForms::kBoth;
  // Whether an all-gather, all-to-all, reduce-scatter or all-reduce over
  // mesh groups whose layouts repeat from group to group is written once
  // per group pattern
  // (GroupCopies) rather than per message, when every device's part is
  // compiled (only_device < 0). false: every step per message, the
  // reference the tests compare the patterns against.
  bool group_patterns = true;
};

struct StepProgram {
  std::vector<DeviceProgram> devices;  // indexed like PlanProgram::devices()
  // The plan step this program runs: its op, and for an all-gather,
  // all-to-all or reduce-scatter over mesh groups, or either half of an
  // all-reduce whose ring pieces are all one size, the plan mesh's group
  // axes (members ordered as Mesh::MemberIndex orders them), which a backend
  // runs over sub-groups.
  // kExchange and no axes for a program compiled from an exchange.
  StepOp op = StepOp::kExchange;
  std::vector<int32_t> group_axes = {};
  // With group axes: the chunk the plan priced the collective's messages at
  // (its padded shard's, or piece's, bytes), the same in every group; what
  // a backend pads each message to, running the equal-chunk collective
  // (an all-reduce's halves: a piece).
  int64_t chunk_bytes = 0;
  // The first of an all-reduce's two program steps, over mesh groups: the
  // plan step's group axes and its ring chunk (PricedChunkBytes), what a
  // backend's all-reduce call (Comm::StartAllReduce) runs both program
  // steps as, in one call on a buffer of members times that chunk. Empty
  // and 0 elsewhere.
  std::vector<int32_t> all_reduce_axes = {};
  int64_t all_reduce_chunk = 0;
  // A step compiled part by part (its input or its output partial, the two
  // different): `reduction` is how receivers combine the parts routed to them
  // (PartRoutes::combine) and the input's part count. Otherwise parts == 1
  // and by_parts is false.
  Reduction reduction = {};
  // A step into an avg target not routed one to one (PartRoutes::scale):
  // what each receiver multiplies its combined elements by, last. 1 elsewhere.
  int64_t scale = 1;
  bool by_parts = false;
  bool reduces() const { return by_parts; }
  // A relayed reducing exchange (Relay, collective_plan.h) compiles to two
  // program steps: round 1 (relay_round 1), from the source into a copy of
  // it, where each relay's donor sends its piece to its helper, which
  // combines it into its own values (its local copy is part 0 and writes,
  // the piece part 1 and combines: reduction {op, 2}, avg as sum); round 2
  // (relay_round 2), the reducing exchange from that copy, each donor's
  // message to its keeper without the piece. 0 elsewhere.
  int relay_round = 0;
  // Set where the step's copies are written per group pattern
  // (GroupCopies): its DevicePrograms then hold their buffer sizes,
  // send_bytes (the staged form's send buffer; 0 in the direct form) and
  // recv_bytes alone, no messages and no copies; the in-process executor
  // runs the pattern, and a rank its own device's messages, expanded from
  // it (GroupDeviceProgram).
  std::shared_ptr<const GroupCopies> group_copies = {};
  // The index of the plan step this program step runs: its own, except that
  // an all-reduce compiles to two program steps (see PlanProgram). 0 for a
  // program compiled from an exchange.
  int64_t plan_step = 0;
};

// The copy pairs (GroupCopies::Pairs) plan step `step` compiles to where
// it is written per group pattern (an all-reduce: where both its program
// steps are); nullopt where it compiles per message (or, an all-reduce,
// partly so). What a memory estimate counts, by the tests Compile applies
// (src/exec/group_copies.h).
std::optional<int64_t> GroupCopyPairs(const CollectivePlan& plan, size_t step);
// Device `index`'s part of a staged step written per group pattern, as the
// per-message program it stands for: its messages (ascending peer), each
// box staged once, pack, unpack and local copies; `dp` gives its buffer
// sizes. What a per-rank runner takes. Its recv_peer_offset entries are -1
// (as where the senders' programs are not compiled: CompileOptions::
// only_device): the in-process staged transport reads senders' send buffers
// from the pattern, not from expanded programs. A reducing step's parts
// (recv_part, local_part) are their ranks in the group (Pattern::part_rank),
// which order and mark the writers as the parts themselves do. No fill:
// every receiver of a pattern takes every part routed to it. REQUIRES:
// gc.has_staged().
DeviceProgram GroupDeviceProgram(const GroupCopies& gc, const DeviceProgram& dp, size_t index);

// A whole plan compiled: one StepProgram per plan step, but two for an
// all-reduce, which runs as a ring moves it: a reducing step into pieces
// (each tile cut among its parts, part p's holders keeping piece p:
// ReducedPieces), then their gathering, (k - 1) / k of the shard into each
// device each, as priced. Buffers between steps are the step
// layouts' exact local buffers.
class PlanProgram {
 public:
  // Compiles every device's part of every step. Checks each copy against the
  // bounds of the buffers it touches, and each message against both sides'
  // buffers, so a planner bug is an Internal error here, never memory
  // corruption later. Cost: proportional to the plan's transfers and boxes.
  // Example: the canonical f32[16,16,16] P('y',None,'x') -> P(None,('x','y'),None)
  // plan gives one step, an all-to-all over all 8 devices: per message
  // (CompileOptions::group_patterns false), device 0 sends 7 messages of 256
  // bytes, copies 256 bytes locally, and packs each message as 8 runs of 32
  // bytes (a [8,2,4] box of its [8,16,4] buffer); by default, one pattern of
  // 64 such boxes (8 receiver classes by 8 senders) for every device.
  static Result<PlanProgram> Compile(const CollectivePlan& plan, const CompileOptions& options = {});
  // The one-step program of the minimal exchange.
  static Result<PlanProgram> Compile(const Exchange& exchange, const CompileOptions& options = {});
  // The layouts a plan's compiled program passes through, source first and
  // target last (layouts() of its Compile): each step's output, and before an
  // all-reduce's its ReducedPieces. `plan_steps`, where given, gets each
  // program step's plan step. What executors' buffers hold between steps.
  static std::vector<Layout> StepLayouts(const CollectivePlan& plan, std::vector<int64_t>* plan_steps = nullptr);
  // Only `device`'s part; Compile with options.only_device = device.
  static Result<PlanProgram> CompileDevice(const CollectivePlan& plan, int64_t device);

  const Layout& source() const { return layouts_.front(); }
  const Layout& target() const { return layouts_.back(); }
  // Every device of either layout (and any intermediate), ascending.
  const std::vector<int64_t>& devices() const { return devices_; }
  int64_t element_bytes() const { return source().element_bytes(); }
  const std::vector<StepProgram>& steps() const { return steps_; }
  // The plan mesh of a program compiled from a plan over one (the mesh the
  // steps' group_axes index).
  const std::optional<Mesh>& mesh() const { return mesh_; }
  // The plan mesh's device -> position lookup (null without a mesh), built
  // once at compile and shared by copies: the ranks of one process each
  // look up their peers' positions in it (a table per rank would cost
  // O(devices) each on a mesh of listed device ids).
  const MeshPositions* mesh_positions() const { return mesh_positions_.get(); }
  // Layout after step i is layouts()[i + 1]; layouts()[0] is the source.
  const std::vector<Layout>& layouts() const { return layouts_; }
  int64_t IndexOf(int64_t device) const;  // -1 when absent
  // The formats the source and target buffers were compiled for.
  const BufferFormat& source_format() const { return source_format_; }
  const BufferFormat& target_format() const { return target_format_; }
  // The format of `device`'s buffer holding layouts()[layout]: the source
  // format for the source, the target format for the target, tight
  // row-major between (the executor's own buffers). A program compiled for
  // one device (CompileOptions::only_device) has those formats on that
  // device alone; the others' buffers are their own processes' (tight
  // row-major here).
  BufferFormat FormatOf(size_t layout, int64_t device) const;
  // The copy programs compiled (CompileOptions::copies).
  CopyForms copies() const { return copies_; }
  bool has_staged_copies() const { return copies_ != CopyForms::kDirect; }
  bool has_direct_copies() const { return copies_ != CopyForms::kStaged; }
  // Names this object's compiled arrays: no other program's in this process
  // (a copy gets a new id; a move carries it, since the arrays move along;
  // ids are never reused; 0 after being moved from). What an executor
  // derives from a program (the order of its copies, their tasks) it may
  // keep under this id and reuse on the next run of it.
  uint64_t id() const { return id_.value(); }

 private:
  class InstanceId {
   public:
    InstanceId() : value_(Next()) {}
    InstanceId(const InstanceId&) : value_(Next()) {}
    InstanceId(InstanceId&& o) noexcept : value_(o.value_) { o.value_ = 0; }
    InstanceId& operator=(const InstanceId& o) {
      if (this != &o) value_ = Next();
      return *this;
    }
    InstanceId& operator=(InstanceId&& o) noexcept {
      if (this != &o) {
        value_ = o.value_;
        o.value_ = 0;
      }
      return *this;
    }
    uint64_t value() const { return value_; }

   private:
    static uint64_t Next();
    uint64_t value_;
  };

  // `exchange`, when given, is the one step's exchange (layouts has two entries).
  // `exchange`: the one exchange of a single-step program; null: each step's
  // (StepExchange of `plan`, or between its layouts without a plan).
  // `plan_steps`: per step, the plan step it runs.
  static Result<PlanProgram> Build(std::vector<Layout> layouts, const CompileOptions& options, const Exchange* exchange,
                                   const CollectivePlan* plan, const std::vector<int64_t>& plan_steps);
  std::vector<int64_t> devices_;
  std::vector<Layout> layouts_;
  std::vector<StepProgram> steps_;
  std::optional<Mesh> mesh_;
  std::shared_ptr<const MeshPositions> mesh_positions_;
  BufferFormat source_format_, target_format_;
  int64_t only_device_ = -1;  // CompileOptions::only_device
  CopyForms copies_ = CopyForms::kBoth;
  InstanceId id_;
};

}  // namespace reshard

#endif  // RESHARD_DEVICE_PROGRAM_H_
