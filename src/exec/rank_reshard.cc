// The step runner: one rank's part of a compiled plan run over a Comm, with
// each step's transport chosen once, the same on every rank.
#include "reshard/rank_reshard.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>

#include "exec/copy_kernel.h"
#include "exec/fingerprint.h"
#include "exec/reduce_kernel.h"
#include "exec/row_walk.h"
#include "exec/staging_cache.h"
#include "reshard/host_buffer.h"

namespace reshard {
namespace {

int64_t Sum(const std::vector<int64_t>& counts) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

// What the ranks must share to run a plan together: each step's op, groups,
// program and layouts. Two plans with this hash equal run the same collectives.
uint64_t PlanHash(const CollectivePlan& plan) {
  uint64_t h = Mix(plan.source().Hash(), plan.target().Hash());
  for (const PlanStep& s : plan.steps()) {
    h = Mix(h, static_cast<uint64_t>(s.op));
    h = Mix(h, s.output.Hash());
    h = Mix(h, static_cast<uint64_t>(s.group_size));
    h = Mix(h, static_cast<uint64_t>(s.num_groups));
    for (int32_t a : s.group_axes) h = Mix(h, static_cast<uint64_t>(a));
    for (const ProgramOp& op : s.program) {
      h = Mix(h, static_cast<uint64_t>(op.kind));
      for (int64_t e : op.shape) h = Mix(h, static_cast<uint64_t>(e));
      for (int32_t a : op.axes) h = Mix(h, static_cast<uint64_t>(a));
    }
  }
  // The mesh orders the groups' members (the sub-groups' ranks).
  return plan.mesh() ? MixText(h, plan.mesh()->ToString()) : h;
}

// The same of a compiled program: its layouts, its copy forms and each step's op and groups.
uint64_t ProgramHash(const PlanProgram& program) {
  uint64_t h = static_cast<uint64_t>(program.copies());
  for (const Layout& l : program.layouts()) h = Mix(h, l.Hash());
  for (const StepProgram& s : program.steps()) {
    h = Mix(h, static_cast<uint64_t>(s.op));
    for (int32_t a : s.group_axes) h = Mix(h, static_cast<uint64_t>(a));
  }
  return program.mesh() ? MixText(h, program.mesh()->ToString()) : h;
}

// The planner options every rank must share (the plan follows from them and the layouts).
uint64_t PlannerOptionsHash(const PlannerOptions& o) {
  uint64_t h = Mix(static_cast<uint64_t>(o.strategy), static_cast<uint64_t>(o.target));
  h = Mix(h, static_cast<uint64_t>(o.memory_cap_bytes));
  h = MixText(h, o.topology.ToString());
  for (const Mesh& m : o.meshes) h = MixText(h, m.ToString());
  return h;
}

// Copies ops [begin, end) of `p`. `together`: the bytes the whole pass
// copies (a step's packing, unpacking or local copies), so that a pass well
// beyond the caches writes with streaming stores even where each box is
// small (RunCopy), as the in-process executor's passes do.
void RunCopies(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst, int64_t together) {
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    RunCopy(p, op, src, dst, 0, CopyUnits(p, op), together);
  }
}

// Unpacks ops [begin, end) of `p` (one message's boxes) a row of each box in
// turn (RunInterleaved): a block-cyclic message's boxes are column strips of
// the same output rows, which box after box would walk once per box.
void Unpack(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst, int64_t together) {
  thread_local std::vector<CopyRange> copies;
  copies.clear();
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    copies.push_back({&p, &op, src, dst, 0, CopyUnits(p, op)});
  }
  RunInterleaved(copies, 0, 1, together);
}

void RunAll(const CopyProgram& p, const std::byte* src, std::byte* dst) {
  RunCopies(p, 0, static_cast<int32_t>(p.ops.size()), src, dst, p.bytes);
}

// Stages every message: each distinct box once (DeviceProgram::pack_owner).
void PackAll(const DeviceProgram& p, const std::byte* in, std::byte* send) {
  for (size_t m = 0; m < p.send_peer.size(); ++m)
    if (p.Packs(m)) RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, send, p.send_bytes);
}


// Whether one message (ops [begin, end) of `p`, `bytes` long) can be a box
// message: its copies list its bytes in order (one box, or boxes one after
// another), or, where its boxes interleave in the staged buffer (block-cyclic
// layouts), its runs average at least kBoxRunBytes, since the backend then
// describes it run by run (MPI: an hindexed type of 12 bytes a run, and
// more inside MPI) and a message of element-sized runs would cost more to
// describe than to pack. Over MPI on this 2-core machine, box messages beat
// packing at every run size measured, 64-byte runs (8x8 f64 blocks) up:
// docs/benchmarks.md, "Against COSTA".
bool BoxableMessage(const CopyProgram& p, int32_t begin, int32_t end, int64_t bytes, bool staged_is_dst) {
  constexpr int64_t kBoxRunBytes = 64;
  if (StagedInOrder(p, begin, end, staged_is_dst)) return true;
  return bytes >= kBoxRunBytes * RunCount(p, begin, end);
}

// The output spans (offset, bytes) ops [begin, end) of `p` write, sorted,
// adjacent spans merged.
std::vector<std::pair<int64_t, int64_t>> WrittenSpans(const CopyProgram& p, int32_t begin, int32_t end) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    ForEachRun(p, op, [&](int64_t, int64_t dst) { spans.emplace_back(dst, op.run_bytes); });
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& [at, bytes] : spans)
    if (!merged.empty() && merged.back().first + merged.back().second == at)
      merged.back().second += bytes;
    else
      merged.emplace_back(at, bytes);
  return merged;
}

// Whether this rank's part of a reducing step is a member's part of a
// reduce-scatter over `members` ranks, as Comm::StartReduceScatter runs it:
// no output (and then nothing received or copied locally), or an output
// that takes one contribution from every member, its own as local copies and
// every other member's as one message, each message as long as the local
// copies, unpacked by the same copies at its own offset (so every member
// staged its contribution in one order, and the reduced chunk unpacks
// with them), and writing the spans the local copies write; no identity fill.
bool ReduceScatterShaped(const DeviceProgram& p, int64_t members) {
  if (!p.fill.ops.empty() || members < 2) return false;
  if (p.recv_peer.empty() && p.local.bytes == 0) return true;
  if (static_cast<int64_t>(p.recv_peer.size()) != members - 1 || p.local.bytes == 0) return false;
  const int32_t b0 = p.unpack_begin[0], e0 = p.unpack_begin[1];
  for (size_t m = 0; m < p.recv_peer.size(); ++m) {
    const int32_t b = p.unpack_begin[m], e = p.unpack_begin[m + 1];
    if (p.recv_count[m] != p.local.bytes || e - b != e0 - b0) return false;
    for (int32_t k = 0; k < e - b; ++k) {
      const CopyOp& x = p.unpack.ops[static_cast<size_t>(b + k)];
      const CopyOp& y = p.unpack.ops[static_cast<size_t>(b0 + k)];
      if (x.src_offset - p.recv_offset[m] != y.src_offset - p.recv_offset[0] || x.dst_offset != y.dst_offset ||
          x.run_bytes != y.run_bytes || x.num_dims != y.num_dims)
        return false;
      for (int32_t d = 0; d < x.num_dims; ++d)
        if (p.unpack.dims[static_cast<size_t>(x.first_dim + d)] != p.unpack.dims[static_cast<size_t>(y.first_dim + d)])
          return false;
    }
  }
  return WrittenSpans(p.unpack, b0, e0) == WrittenSpans(p.local, 0, static_cast<int32_t>(p.local.ops.size()));
}

// Whether `device`'s buffers before program step `first` and after program
// step `last` (one all-reduce's program steps) hold the same boxes in the
// same tight format, so that its output is the element-wise reduction of its
// group's inputs, as Comm::StartAllReduce gives it, byte for byte: true of
// an all-reduce (its output is its input's tiles without the reduction)
// unless the caller's buffer formats differ or leave gaps, which the call
// would write. A device in neither layout takes part with nothing.
bool AllReduceShaped(const PlanProgram& pp, size_t first, size_t last, int64_t device) {
  const Layout& in = pp.layouts()[first];
  const Layout& out = pp.layouts()[last + 1];
  const bool holds_in = device >= 0 && in.TileOf(device) >= 0, holds_out = device >= 0 && out.TileOf(device) >= 0;
  if (!holds_in && !holds_out) return true;
  if (holds_in != holds_out || in.DeviceBoxes(device) != out.DeviceBoxes(device)) return false;
  const BufferFormat in_format = pp.FormatOf(first, device), out_format = pp.FormatOf(last + 1, device);
  return in_format == out_format && in_format.leading_dim == 0;
}

const DeviceProgram& EmptyProgram() {
  static const DeviceProgram empty = [] {
    DeviceProgram p;
    p.pack_begin = {0};
    p.unpack_begin = {0};
    p.direct_begin = {0};
    return p;
  }();
  return empty;
}

}  // namespace

void FreeCachedStaging() { StagingCache::Instance().Clear(); }

std::string_view StepTransportName(StepTransport t) {
  switch (t) {
    case StepTransport::kAuto: return "auto";
    case StepTransport::kAlltoallv: return "alltoallv";
    case StepTransport::kPointToPoint: return "p2p";
    case StepTransport::kDatatypes: return "alltoallw";
  }
  return "?";
}

// One step as this rank runs it.
struct StepRun {
  const DeviceProgram* program = nullptr;  // this rank's part; empty where it takes no part
  std::unique_ptr<DeviceProgram> expanded;  // the part, where the step is written per group pattern
  bool p2p = false;
  std::vector<int> send_rank, recv_rank;  // per message, the peer's rank
  std::vector<size_t> send_order;         // messages, staggered: peers rank+1, rank+2, ... first
  // The all-to-all-v's arrays, one entry per rank of the Comm it runs over (bytes).
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  // Box messages (Comm::PrepareBoxes): no staging.
  std::unique_ptr<BoxExchange> boxes;
  // A structured step whose messages all stay inside its groups runs over
  // one sub-group per mesh group (members ranked as the collective orders
  // them): an all-to-all-v, or an all-gather-v where every message is the
  // sender's whole input. `group` is null where this rank is in no group.
  bool grouped = false;
  std::unique_ptr<Comm> group;
  int group_size = 0;
  bool allgather = false;
  // The equal-chunk collective (Comm::StartAllgather, StartAlltoall) an
  // all-gather or all-to-all over groups runs as, every message padded to
  // this (RankOptions::priced_chunks: the chunk the plan priced; without it,
  // an all-gather whose inputs are all one size); 0 where the v-form runs
  // instead (exact counts, no bytes, or past what one call carries).
  int64_t chunk = 0;
  // Equal-chunk all-to-all: where message m goes in the send buffer (its
  // member's chunk), and the chunks of the members this rank sends nothing
  // to (zeroed each run: the send buffer is shared between steps).
  std::vector<int64_t> send_base, idle_base;
  std::vector<int64_t> recv_base;  // where message m starts in the gathered or received buffer
  // A reduce-scatter run as the backend's (Comm::StartReduceScatter), in
  // chunks of `chunk`: RankOptions::priced_chunks, and every member's part
  // ReduceScatterShaped. This rank's own slot holds the identity; its own
  // contribution is combined after, with the others' reduced chunk.
  bool reduce_scatter = false;
  int my_member = 0;
  // An all-reduce run as the backend's (Comm::StartAllReduce), its program
  // steps all in one call by the first (RankOptions::priced_chunks, every
  // rank's part AllReduceShaped): on members times `chunk` bytes, the input
  // padded with the op's identity; `through`: its last program step, which
  // writes the output. `fused`: a later program step of it, which runs
  // nothing.
  bool all_reduce = false;
  size_t through = 0;
  bool fused = false;
  // A reducing step: its local copies and messages are applied in part
  // order once every message has arrived (reduce_kernel.h), never as each arrives.
  Reduction reduction = {};
  int64_t scale = 1;  // StepProgram::scale
  DType dtype = DType::kF32;
  bool by_parts = false;  // StepProgram::by_parts
  bool reduces() const { return by_parts; }
  int64_t plan_step = 0;  // StepProgram::plan_step
};

struct RankReshard::State {
  std::unique_ptr<Comm> comm;
  int rank = 0, size = 1;
  RankOptions options;
  std::unique_ptr<PlanProgram> owned;  // the program, where this object compiled it
  const PlanProgram* program = nullptr;
  bool rank_is_index = false;  // rank k is program->devices()[k] (else device d is rank d)
  std::vector<StepRun> steps;
  std::vector<std::string> ops;
  int64_t source_bytes = 0, target_bytes = 0, peak_bytes = 0;
  // Staging, and intermediate layouts' buffers (alternating), with the bytes
  // the plan needs of each (a buffer from the staging cache may be larger).
  // Sized at creation; given back to the cache on destruction.
  struct Staging {
    HostBuffer buffer;
    int64_t need = 0;
    std::byte* data() { return buffer.data(); }
  };
  Staging send, recv, between[2];
  Status allocated = Status::Ok();  // the first allocation that failed, agreed at the end of Prepare
  // A failed Execute may leave messages in flight into the buffers: they
  // are then never reused (nor freed), and the object runs no more.
  bool failed = false;

  ~State() {
    for (Staging* b : {&send, &recv, &between[0], &between[1]}) {
      if (failed)
        (void)new HostBuffer(std::move(b->buffer));  // leaked on purpose: a pending receive may still write it
      else
        StagingCache::Instance().Give(std::move(b->buffer));
    }
  }
  // Makes `b` hold at least `bytes`; an allocation that fails is kept in
  // `allocated` (every rank goes on to the same collectives, then agrees).
  void Grow(Staging& b, int64_t bytes) {
    b.need = std::max(b.need, bytes);
    if (b.buffer.size() >= bytes) return;
    try {
      HostBuffer fresh = StagingCache::Instance().Take(bytes);
      StagingCache::Instance().Give(std::move(b.buffer));
      b.buffer = std::move(fresh);
    } catch (const std::bad_alloc&) {
      if (allocated.ok())
        allocated = Status::Unavailable(fmt::format("could not allocate {} bytes of staging", bytes));
    }
  }

  // The rank of the device at `index` of the program's devices.
  int PeerRank(int64_t index) const {
    return rank_is_index ? static_cast<int>(index) : static_cast<int>(program->devices()[static_cast<size_t>(index)]);
  }
  // Checks that every rank passed the same layouts and options (`hash` of them).
  Status Begin(std::unique_ptr<Comm> c, const RankOptions& o, uint64_t hash);
  // Compiles this rank's part (device d is rank d), then Prepare.
  Status CompileOwnPart(const Layout& source, const Layout& target, std::vector<std::string> step_ops,
                        const std::function<Result<PlanProgram>(const CompileOptions&)>& compile);
  // Picks each step's transport and sizes the buffers.
  Status Prepare();
  // Moves a structured step onto its groups' sub-groups where its messages
  // allow (the same choice on every rank).
  Status UseGroups(StepRun& s, const StepProgram& step);
  // Whether every rank's messages can be box messages (BoxableMessage).
  Result<bool> AllBoxable(const StepRun& s);
  int64_t Chunk() const { return std::min(options.max_message_bytes, comm->max_count()); }
  // Whether an equal-chunk collective of `chunk`-byte messages over `members`
  // fits one call: each message within the limit, the buffer within a count.
  bool OneCallCarries(int64_t chunk, size_t members) const {
    return chunk > 0 && chunk <= Chunk() && static_cast<int64_t>(members) <= comm->max_count() / chunk;
  }
  Status RunGrouped(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats);
  // Over `over`: the whole Comm, or the step's group (the counts are then by member).
  Status RunAlltoallv(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats, Comm& over);
  Status RunAlltoall(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats);
  Status RunReduceScatter(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats);
  // Every rank's mesh position (-1: not a device of the program's mesh).
  std::vector<int64_t> PositionsOfRanks() const;
  // Runs program steps [first, last], one all-reduce over `step`'s groups,
  // as one Comm::StartAllReduce where every rank's part allows (the same
  // choice on every rank); false where they run step by step.
  Result<bool> UseAllReduce(StepRun& s, const StepProgram& step, size_t first, size_t last);
  Status RunAllReduce(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats);
  // An equal-chunk collective's send buffer: message m packed at
  // s.send_base[m], each chunk's tail and the idle members' chunks zeroed
  // (no stale bytes go to the peers).
  void PackChunks(const StepRun& s, const std::byte* in) {
    const DeviceProgram& p = *s.program;
    for (size_t m = 0; m < s.send_rank.size(); ++m) {
      std::byte* at = send.data() + s.send_base[m];
      RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, at - p.send_offset[m], p.send_bytes);
      if (p.send_count[m] < s.chunk)
        std::memset(at + p.send_count[m], 0, static_cast<size_t>(s.chunk - p.send_count[m]));
    }
    for (int64_t at : s.idle_base) std::memset(send.data() + at, 0, static_cast<size_t>(s.chunk));
  }
  Status RunBoxes(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats);
  Status RunPointToPoint(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats);
  // A reducing step's local and received copies, in part order, once every message is in `recv`.
  void Reduce(const StepRun& s, const std::byte* in, std::byte* out) {
    const std::byte* base = recv.data();
    RunReducingCopies(*s.program, s.reduction, s.scale, s.dtype, in, s.program->unpack, s.program->unpack_begin,
                      [base](size_t) { return base; }, out);
  }
  Result<RankRunStats> Run(std::span<const std::byte> source, std::span<std::byte> target, const AfterStep& after_step);
  bool clean_error = false;  // the last Run's error came from an agreement, with nothing in flight
};

namespace {

// The per-rank count and displacement arrays of `s`, `n` ranks, all zero.
void ZeroArrays(StepRun& s, size_t n) {
  s.send_counts.assign(n, 0);
  s.send_displs.assign(n, 0);
  s.recv_counts.assign(n, 0);
  s.recv_displs.assign(n, 0);
}

// The all-to-all-v's arrays from the program's messages.
void FillAlltoallv(StepRun& s, int size) {
  ZeroArrays(s, static_cast<size_t>(size));
  const DeviceProgram& p = *s.program;
  for (size_t m = 0; m < s.send_rank.size(); ++m) {
    s.send_counts[static_cast<size_t>(s.send_rank[m])] = p.send_count[m];
    s.send_displs[static_cast<size_t>(s.send_rank[m])] = p.send_offset[m];
  }
  for (size_t m = 0; m < s.recv_rank.size(); ++m) {
    s.recv_counts[static_cast<size_t>(s.recv_rank[m])] = p.recv_count[m];
    s.recv_displs[static_cast<size_t>(s.recv_rank[m])] = p.recv_offset[m];
  }
}

}  // namespace

Status RankReshard::State::Begin(std::unique_ptr<Comm> c, const RankOptions& o, uint64_t hash) {
  if (c == nullptr) return Status::InvalidArgument("no Comm given");
  comm = std::move(c);
  rank = comm->rank();
  size = comm->size();
  options = o;
  hash = Mix(hash, static_cast<uint64_t>(o.transport));
  hash = Mix(hash, static_cast<uint64_t>(o.max_message_bytes));
  hash = Mix(hash, o.priced_chunks ? 2 : 1);
  hash = Mix(hash, o.planner.has_value() ? PlannerOptionsHash(*o.planner) : 1);
  // Leading dimensions may differ by rank, orders may not: messages are
  // staged in the source buffers' order (device_program.h).
  hash = Mix(hash, static_cast<uint64_t>(o.source_format.order) * 2 + static_cast<uint64_t>(o.target_format.order));
  RESHARD_RETURN_IF_ERROR(CheckSame(*comm, hash, "layouts or options"));
  Status local = Status::Ok();
  if (o.max_message_bytes < 1)
    local = Status::InvalidArgument(fmt::format("max_message_bytes is {}; it must be at least 1", o.max_message_bytes));
  return AgreeStatus(*comm, local);
}

Status RankReshard::State::Prepare() {
  const PlanProgram& pp = *program;
  const int64_t me = rank_is_index ? rank : pp.IndexOf(rank);
  int64_t send_max = 0, recv_max = 0;
  for (size_t i = 0; i < pp.steps().size(); ++i) {
    const StepProgram& sp = pp.steps()[i];
    StepRun& s = steps.emplace_back();  // owned from here: its box messages and groups are freed with the state
    s.program = me >= 0 ? &sp.devices[static_cast<size_t>(me)] : &EmptyProgram();
    if (me >= 0 && sp.group_copies != nullptr) {
      // A step written per group pattern: this rank's messages, expanded.
      s.expanded = std::make_unique<DeviceProgram>(
          GroupDeviceProgram(*sp.group_copies, sp.devices[static_cast<size_t>(me)], static_cast<size_t>(me)));
      s.program = s.expanded.get();
    }
    const DeviceProgram& p = *s.program;
    s.reduction = sp.reduction;
    s.scale = sp.scale;
    s.by_parts = sp.by_parts;
    s.plan_step = sp.plan_step;
    s.dtype = pp.layouts()[i].dtype();
    const StepTransport asked = options.transport;
    // An all-reduce over groups with priced chunks: all its program steps
    // in the first one's call, where every rank's part allows.
    bool fused = false;
    if (i > 0 && (steps[i - 1].all_reduce || steps[i - 1].fused) && steps[i - 1].plan_step == s.plan_step) {
      s.fused = fused = true;
    } else if (options.priced_chunks && pp.mesh() && sp.all_reduce_chunk > 0 && asked == StepTransport::kAuto) {
      s.through = i;
      while (s.through + 1 < pp.steps().size() && pp.steps()[s.through + 1].plan_step == sp.plan_step) ++s.through;
      RESHARD_ASSIGN_OR_RETURN(fused, UseAllReduce(s, sp, i, s.through));
    }
    if (fused) {
      if (i == 0) source_bytes = p.input_bytes;
      if (i + 1 == pp.steps().size()) target_bytes = p.output_bytes;
      // (A program step whose output the call never writes needs no buffer.)
      const bool written = !s.all_reduce || s.through == i;
      if (i + 1 < pp.steps().size() && written) Grow(between[i % 2], p.output_bytes);
      continue;
    }
    for (int64_t peer : p.send_peer) s.send_rank.push_back(PeerRank(peer));
    for (int64_t peer : p.recv_peer) s.recv_rank.push_back(PeerRank(peer));
    for (size_t m = 0; m < s.send_rank.size(); ++m) s.send_order.push_back(m);
    std::stable_sort(s.send_order.begin(), s.send_order.end(), [&](size_t a, size_t b) {
      return (s.send_rank[a] - rank + size) % size < (s.send_rank[b] - rank + size) % size;
    });
    // The step's global figures, the same on every rank: the busiest rank's
    // peers, whether any message is too large for one call, and the bytes
    // and messages of all ranks.
    bool too_large = p.send_bytes > comm->max_count() || p.recv_bytes > comm->max_count();
    int64_t bytes = 0;
    for (int64_t c : p.send_count) {
      bytes += c;
      too_large = too_large || c > Chunk();
    }
    int64_t most[2] = {static_cast<int64_t>(std::max(s.send_rank.size(), s.recv_rank.size())), too_large ? 1 : 0};
    int64_t sums[2] = {bytes, static_cast<int64_t>(s.send_rank.size())};
    RESHARD_RETURN_IF_ERROR(comm->AllReduce(most, Comm::ReduceOp::kMax));
    RESHARD_RETURN_IF_ERROR(comm->AllReduce(sums, Comm::ReduceOp::kSum));
    const bool sparse = most[0] * 2 <= size;
    const bool large = sums[1] > 0 && sums[0] / sums[1] >= (int64_t{1} << 20);
    if (most[1] != 0 || asked == StepTransport::kPointToPoint) {
      s.p2p = true;  // asked for, or a message one call cannot carry
    } else {
      // A structured collective runs as one, over its groups; then box
      // messages where every message allows; then the shape rule.
      // (A reducing step: only a reduce-scatter, or an all-reduce's first
      // half, with priced chunks, run as the backend's where every member's
      // part lines up, else combined once its messages have arrived.)
      if (asked != StepTransport::kDatatypes && pp.mesh() && !sp.group_axes.empty() &&
          (!s.reduces() ||
           ((sp.op == StepOp::kReduceScatter || sp.op == StepOp::kAllReduce) && options.priced_chunks)))
        RESHARD_RETURN_IF_ERROR(UseGroups(s, sp));
      bool boxes = false;
      // Box messages write the output as they land: a reducing step combines after.
      if (!s.grouped && !s.reduces() && asked != StepTransport::kAlltoallv && comm->has_boxes()) {
        RESHARD_ASSIGN_OR_RETURN(boxes, AllBoxable(s));
      }
      if (boxes) {
        Result<std::unique_ptr<BoxExchange>> made = comm->PrepareBoxes(p, s.send_rank, s.recv_rank);
        RESHARD_RETURN_IF_ERROR(AgreeStatus(*comm, made.status()));
        s.boxes = std::move(made).value();
      }
      s.p2p = !s.grouped && !s.boxes && asked == StepTransport::kAuto && (sparse || large);
    }
    if (!s.boxes) {
      if (!s.p2p && !s.grouped) FillAlltoallv(s, size);
      send_max = std::max(send_max, p.send_bytes);
      recv_max = std::max(recv_max, p.recv_bytes);
    }
    if (i == 0) source_bytes = p.input_bytes;
    if (i + 1 == pp.steps().size()) target_bytes = p.output_bytes;
    if (i + 1 < pp.steps().size()) Grow(between[i % 2], p.output_bytes);
  }
  Grow(send, send_max);
  Grow(recv, recv_max);  // an all-gather may have asked for more already
  peak_bytes = source_bytes + target_bytes + send.need + recv.need + between[0].need + between[1].need;
  return AgreeStatus(*comm, allocated);
}

Result<bool> RankReshard::State::AllBoxable(const StepRun& s) {
  const DeviceProgram& p = *s.program;
  bool boxable = true;
  for (size_t m = 0; m < s.send_rank.size() && boxable; ++m)
    boxable = BoxableMessage(p.pack, p.pack_begin[m], p.pack_begin[m + 1], p.send_count[m], true);
  for (size_t m = 0; m < s.recv_rank.size() && boxable; ++m)
    boxable = BoxableMessage(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], p.recv_count[m], false);
  int64_t all = boxable ? 1 : 0;
  RESHARD_RETURN_IF_ERROR(comm->AllReduce(std::span<int64_t>(&all, 1), Comm::ReduceOp::kMin));
  return all == 1;
}

std::vector<int64_t> RankReshard::State::PositionsOfRanks() const {
  const MeshPositions positions(*program->mesh());
  std::vector<int64_t> position_of_rank(static_cast<size_t>(size), -1);
  for (int64_t r = 0; r < size; ++r) {
    const int64_t dev = rank_is_index ? (r < static_cast<int64_t>(program->devices().size())
                                             ? program->devices()[static_cast<size_t>(r)] : -1)
                                      : r;
    if (dev >= 0) position_of_rank[static_cast<size_t>(r)] = positions.Of(dev);
  }
  return position_of_rank;
}

Result<bool> RankReshard::State::UseAllReduce(StepRun& s, const StepProgram& step, size_t first, size_t last) {
  const Mesh& mesh = *program->mesh();
  const std::vector<int32_t>& axes = step.all_reduce_axes;
  const int64_t members = mesh.GroupSize(axes);
  const int64_t me = rank_is_index ? rank : program->IndexOf(rank);
  const int64_t device = me >= 0 ? program->devices()[static_cast<size_t>(me)] : -1;
  const std::vector<int64_t> position_of_rank = PositionsOfRanks();
  const int64_t pos = position_of_rank[static_cast<size_t>(rank)];
  // Its buffers line up, fit the ring's buffer, and, where it holds data,
  // it is a member of a group (a device off the mesh would write nothing).
  const int64_t input = s.program->input_bytes;
  const bool fits = input <= members * step.all_reduce_chunk && (pos >= 0 || input == 0);
  int64_t all = AllReduceShaped(*program, first, last, device) && fits &&
                        OneCallCarries(step.all_reduce_chunk, static_cast<size_t>(members))
                    ? 1 : 0;
  RESHARD_RETURN_IF_ERROR(comm->AllReduce(std::span<int64_t>(&all, 1), Comm::ReduceOp::kMin));
  if (all == 0) return false;
  Result<std::unique_ptr<Comm>> split = comm->Split(pos >= 0 ? static_cast<int>(mesh.GroupOf(pos, axes)) : -1,
                                                    pos >= 0 ? static_cast<int>(mesh.MemberIndex(pos, axes)) : 0);
  RESHARD_RETURN_IF_ERROR(AgreeStatus(*comm, split.status()));
  s.group = std::move(split).value();
  s.group_size = s.group ? s.group->size() : 0;
  s.all_reduce = true;
  s.chunk = step.all_reduce_chunk;
  Grow(send, members * s.chunk);
  Grow(recv, members * s.chunk);
  return true;
}

Status RankReshard::State::UseGroups(StepRun& s, const StepProgram& step) {
  const Mesh& mesh = *program->mesh();
  const std::vector<int32_t>& axes = step.group_axes;
  // Rank -> mesh position, for this rank and its peers.
  const std::vector<int64_t> position_of_rank = PositionsOfRanks();
  auto color = [&](int64_t pos) { return mesh.GroupOf(pos, axes); };
  auto member = [&](int64_t pos) { return mesh.MemberIndex(pos, axes); };
  const int64_t me = position_of_rank[static_cast<size_t>(rank)];
  bool inside = me >= 0 || (s.send_rank.empty() && s.recv_rank.empty());
  for (const std::vector<int>* peers : {&s.send_rank, &s.recv_rank})
    for (int peer : *peers) {
      const int64_t pos = position_of_rank[static_cast<size_t>(peer)];
      inside = inside && me >= 0 && pos >= 0 && color(pos) == color(me);
    }
  const DeviceProgram& p = *s.program;
  // An all-gather where every message is this rank's whole input, packed as
  // is, and goes to every other member: then what each member receives from
  // another is that member's whole input, as an all-gather-v has it.
  const int64_t members = mesh.GroupSize(axes);
  // (An all-reduce's second half gathers its pieces: an all-gather.)
  bool whole = (step.op == StepOp::kAllGather || (step.op == StepOp::kAllReduce && !s.reduces())) &&
               static_cast<int64_t>(s.send_rank.size()) == (p.input_bytes > 0 ? members - 1 : 0);
  for (size_t m = 0; m < s.send_rank.size() && whole; ++m) {
    const int32_t b = p.pack_begin[m];
    whole = p.pack_begin[m + 1] == b + 1 && p.pack.ops[static_cast<size_t>(b)].num_dims == 0 &&
            p.pack.ops[static_cast<size_t>(b)].src_offset == 0 && p.send_count[m] == p.input_bytes;
  }
  // The gathered buffer holds every member's input: one call must carry it.
  int64_t gathered = p.input_bytes;
  for (int64_t c : p.recv_count) gathered += c;
  whole = whole && gathered <= comm->max_count();
  const bool shaped = s.reduces() && ReduceScatterShaped(p, members);
  int64_t all[3] = {inside ? 1 : 0, whole ? 1 : 0, shaped ? 1 : 0};
  RESHARD_RETURN_IF_ERROR(comm->AllReduce(all, Comm::ReduceOp::kMin));
  if (all[0] == 0) return Status::Ok();  // some message crosses groups: the whole Comm it is
  if (s.reduces() && all[2] == 0) return Status::Ok();  // not the backend's reduce-scatter: reduced after an all-to-all-v
  s.grouped = true;
  const int my_color = me >= 0 ? static_cast<int>(color(me)) : -1;
  const int my_key = me >= 0 ? static_cast<int>(member(me)) : 0;
  Result<std::unique_ptr<Comm>> split = comm->Split(my_color, my_key);
  RESHARD_RETURN_IF_ERROR(AgreeStatus(*comm, split.status()));
  s.group = std::move(split).value();
  if (s.group == nullptr) return Status::Ok();  // not in the mesh: nothing to do in this step
  s.group_size = s.group->size();
  const size_t g = static_cast<size_t>(s.group_size);
  auto member_of = [&](int peer) { return static_cast<size_t>(member(position_of_rank[static_cast<size_t>(peer)])); };
  ZeroArrays(s, g);
  s.allgather = all[1] != 0;
  if (s.allgather) {
    // Every member's whole input, in member order; this rank's own slot too.
    s.recv_counts[static_cast<size_t>(my_key)] = p.input_bytes;
    for (size_t m = 0; m < s.recv_rank.size(); ++m) s.recv_counts[member_of(s.recv_rank[m])] = p.recv_count[m];
    int64_t at = 0;
    for (size_t k = 0; k < g; ++k) {
      s.recv_displs[k] = at;
      at += s.recv_counts[k];
    }
    // Every member sees every member's size, so a group decides alike.
    const int64_t largest = *std::max_element(s.recv_counts.begin(), s.recv_counts.end());
    const bool even = std::all_of(s.recv_counts.begin(), s.recv_counts.end(), [&](int64_t c) { return c == largest; });
    const int64_t chunk = options.priced_chunks ? std::max(step.chunk_bytes, largest) : even ? largest : 0;
    if (OneCallCarries(chunk, g)) s.chunk = chunk;
    for (size_t m = 0; m < s.recv_rank.size(); ++m)
      s.recv_base.push_back(s.chunk > 0 ? static_cast<int64_t>(member_of(s.recv_rank[m])) * s.chunk
                                        : s.recv_displs[member_of(s.recv_rank[m])]);
    Grow(recv, s.chunk > 0 ? static_cast<int64_t>(g) * s.chunk : at);
    if (s.chunk > p.input_bytes) Grow(send, s.chunk);  // the input, padded
    return Status::Ok();
  }
  for (size_t m = 0; m < s.send_rank.size(); ++m) {
    s.send_counts[member_of(s.send_rank[m])] = p.send_count[m];
    s.send_displs[member_of(s.send_rank[m])] = p.send_offset[m];
  }
  for (size_t m = 0; m < s.recv_rank.size(); ++m) {
    s.recv_counts[member_of(s.recv_rank[m])] = p.recv_count[m];
    s.recv_displs[member_of(s.recv_rank[m])] = p.recv_offset[m];
  }
  if (!options.priced_chunks) return Status::Ok();
  // An all-to-all (or an all-gather whose messages are not every sender's
  // whole input, run as one): its members agree on the chunk, the priced
  // one unless a message of the group is larger, which no plan makes.
  int64_t chunk = std::max({step.chunk_bytes, *std::max_element(s.send_counts.begin(), s.send_counts.end()),
                            *std::max_element(s.recv_counts.begin(), s.recv_counts.end())});
  RESHARD_RETURN_IF_ERROR(s.group->AllReduce(std::span<int64_t>(&chunk, 1), Comm::ReduceOp::kMax));
  // (A chunk above the message limit: the v-form, whose messages fit.)
  if (!OneCallCarries(chunk, g)) return Status::Ok();
  s.chunk = chunk;
  s.reduce_scatter = s.reduces();
  s.my_member = my_key;
  for (size_t m = 0; m < s.send_rank.size(); ++m)
    s.send_base.push_back(static_cast<int64_t>(member_of(s.send_rank[m])) * chunk);
  for (size_t m = 0; m < s.recv_rank.size(); ++m)
    s.recv_base.push_back(static_cast<int64_t>(member_of(s.recv_rank[m])) * chunk);
  for (size_t k = 0; k < g; ++k)
    if (s.send_counts[k] == 0 && static_cast<int>(k) != my_key) s.idle_base.push_back(static_cast<int64_t>(k) * chunk);
  Grow(send, static_cast<int64_t>(g) * chunk);
  Grow(recv, static_cast<int64_t>(g) * chunk);
  return Status::Ok();
}

Status RankReshard::State::RunGrouped(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  if (s.group == nullptr) return Status::Ok();
  if (s.reduce_scatter) return RunReduceScatter(s, in, out, stats);
  if (!s.allgather) return s.chunk > 0 ? RunAlltoall(s, in, out, stats) : RunAlltoallv(s, in, out, stats, *s.group);
  // The input is the message: no packing (but padding to the chunk). Each
  // received message is then unpacked from its member's slot of the
  // gathered buffer.
  int64_t request = kNoRequest;
  if (s.chunk > 0) {
    const std::byte* mine = in;
    if (p.input_bytes < s.chunk) {  // padded with zeros: no stale bytes go to the peers
      if (p.input_bytes > 0) std::memcpy(send.data(), in, static_cast<size_t>(p.input_bytes));
      std::memset(send.data() + p.input_bytes, 0, static_cast<size_t>(s.chunk - p.input_bytes));
      mine = send.data();
    }
    RESHARD_RETURN_IF_ERROR(s.group->StartAllgather(mine, s.chunk, recv.data(), request));
  } else {
    RESHARD_RETURN_IF_ERROR(s.group->StartAllgatherv(in, p.input_bytes, recv.data(), s.recv_counts, s.recv_displs, request));
  }
  RunAll(p.local, in, out);
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  // Its input went to every other member; its own slot is not a message.
  const int64_t others = s.group_size - 1;
  stats.step_bytes_sent.back() += (s.chunk > 0 ? s.chunk : p.input_bytes) * others;
  stats.step_bytes_received.back() += s.chunk > 0 ? s.chunk * others : Sum(s.recv_counts) - p.input_bytes;
  for (size_t m = 0; m < s.recv_rank.size(); ++m)
    Unpack(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data() + s.recv_base[m] - p.recv_offset[m], out,
              p.unpack.bytes);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunAlltoall(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  // Message m packed into its member's chunk (every message its own copy:
  // chunks do not share staged boxes), then one equal-chunk all-to-all.
  PackChunks(s, in);
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(s.group->StartAlltoall(send.data(), s.chunk, recv.data(), request));
  RunAll(p.local, in, out);  // while the messages travel
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  const int64_t others = s.group_size - 1;
  stats.step_bytes_sent.back() += s.chunk * others;
  stats.step_bytes_received.back() += s.chunk * others;
  for (size_t m = 0; m < s.recv_rank.size(); ++m)
    Unpack(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1],
           recv.data() + s.recv_base[m] - p.recv_offset[m], out, p.unpack.bytes);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunReduceScatter(const StepRun& s, const std::byte* in, std::byte* out,
                                           RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  // Each message packed into its member's chunk, the rest of every chunk
  // zeroed (reduced, never read); this rank's own chunk the identity, so
  // what comes back is the other members' contributions reduced.
  PackChunks(s, in);
  FillIdentity(s.reduction.op, s.dtype, send.data() + static_cast<int64_t>(s.my_member) * s.chunk, s.chunk);
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(s.group->StartReduceScatter(send.data(), s.chunk, recv.data(), s.dtype, s.reduction.op, request));
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  const int64_t others = s.group_size - 1;
  stats.step_bytes_sent.back() += s.chunk * others;
  stats.step_bytes_received.back() += s.chunk * others;
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  if (p.recv_peer.empty()) return Status::Ok();  // no output
  // Its own contribution writes, the others' reduced chunk combines (then
  // avg divides): one element, one order, whatever the backend's.
  const Contribution both[2] = {
      {&p.local, 0, static_cast<int64_t>(p.local.ops.size()), in, true},
      {&p.unpack, p.unpack_begin[0], p.unpack_begin[1], recv.data() - p.recv_offset[0], false}};
  ApplyContributions(both, s.reduction, s.scale, s.dtype, out);
  return Status::Ok();
}

Status RankReshard::State::RunAllReduce(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  if (s.group == nullptr) return Status::Ok();  // not in the mesh: no part
  // The input, then the identity up to the members' chunks (the buffer the
  // ring priced); the reduced bytes back into the output, avg divided.
  // Staged only where padded (or where the input is the output's buffer,
  // which a backend may not be given twice).
  const int64_t bytes = s.program->input_bytes, buffer = s.group_size * s.chunk;
  const bool padded = buffer > bytes;
  const std::byte* from = in;
  if (padded || in == out) {
    if (bytes > 0) std::memcpy(send.data(), in, static_cast<size_t>(bytes));
    FillIdentity(s.reduction.op, s.dtype, send.data() + bytes, buffer - bytes);
    from = send.data();
  }
  std::byte* into = padded ? recv.data() : out;
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(s.group->StartAllReduce(from, buffer, into, s.dtype, s.reduction.op, request));
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  if (padded && bytes > 0) std::memcpy(out, recv.data(), static_cast<size_t>(bytes));
  const int64_t elements = bytes / ByteSize(s.dtype);
  if (s.reduction.op == ReduceOp::kAvg) DivideElements(out, elements, s.dtype, s.reduction.parts);
  if (s.scale != 1) ScaleElements(out, elements, s.dtype, s.scale);
  // What a ring moves: 2 (k - 1) chunks each way.
  const int64_t messages = 2 * (s.group_size - 1);
  stats.step_bytes_sent.back() += messages * s.chunk;
  stats.step_bytes_received.back() += messages * s.chunk;
  stats.messages_sent += messages;
  return Status::Ok();
}

Status RankReshard::State::RunAlltoallv(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats,
                                       Comm& over) {
  const DeviceProgram& p = *s.program;
  PackAll(p, in, send.data());
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(over.StartAlltoallv(send.data(), s.send_counts, s.send_displs, recv.data(), s.recv_counts,
                                              s.recv_displs, request));
  if (!s.reduces()) RunAll(p.local, in, out);  // while the messages travel
  RESHARD_RETURN_IF_ERROR(over.Wait(request));
  stats.step_bytes_sent.back() += Sum(s.send_counts);
  stats.step_bytes_received.back() += Sum(s.recv_counts);
  if (s.reduces())
    Reduce(s, in, out);
  else
    RunAll(p.unpack, recv.data(), out);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunBoxes(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  int64_t request = kNoRequest;
  // The backend reads the input and writes the output in place; the local
  // copies touch other bytes of the output meanwhile.
  RESHARD_RETURN_IF_ERROR(comm->StartBoxes(*s.boxes, in, out, request));
  RunAll(s.program->local, in, out);
  RESHARD_RETURN_IF_ERROR(comm->Wait(request));
  stats.step_bytes_sent.back() += s.boxes->bytes_sent();
  stats.step_bytes_received.back() += s.boxes->bytes_received();
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunPointToPoint(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  const int64_t chunk = Chunk();
  // Receives first, every chunk of every message. Chunks of one message go in
  // order: messages between one pair never overtake, so when a message's last
  // chunk has arrived, its earlier chunks have been matched. Only the last
  // chunks are waited on together (a wait scans every request it is given:
  // with every chunk's request, time grew with the square of the chunks);
  // the earlier ones are then completed message by message.
  const size_t messages = s.recv_rank.size();
  std::vector<int64_t> last(messages, kNoRequest), earlier;
  std::vector<size_t> earlier_begin(messages + 1, 0);  // message m's earlier chunks: [begin[m], begin[m + 1])
  std::vector<int> ready;  // messages complete before any wait: no bytes, or received at once
  int64_t unpacked = 0;
  for (size_t m = 0; m < messages; ++m) {
    for (int64_t off = 0; off < p.recv_count[m]; off += chunk) {
      const int64_t len = std::min(chunk, p.recv_count[m] - off);
      if (last[m] != kNoRequest) earlier.push_back(last[m]);
      RESHARD_RETURN_IF_ERROR(comm->StartRecv(recv.data() + p.recv_offset[m] + off, len, s.recv_rank[m], last[m]));
      stats.step_bytes_received.back() += len;
    }
    earlier_begin[m + 1] = earlier.size();
    if (last[m] == kNoRequest) ready.push_back(static_cast<int>(m));
  }
  std::vector<int> done;
  // Unpacks every message whose chunks have all arrived; waits for at least one when `block`.
  auto drain = [&](bool block) -> Status {
    done.swap(ready);
    ready.clear();
    if (done.empty() || !block) RESHARD_RETURN_IF_ERROR(comm->WaitSome(last, block && done.empty(), done));
    for (int k : done) {
      const size_t m = static_cast<size_t>(k);
      const size_t b = earlier_begin[m];
      RESHARD_RETURN_IF_ERROR(comm->WaitAll(std::span<int64_t>(earlier.data() + b, earlier_begin[m + 1] - b)));
      if (!s.reduces()) Unpack(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data(), out, p.unpack.bytes);
      ++unpacked;
    }
    done.clear();
    return Status::Ok();
  };
  // Sends in flight are bounded: OpenMPI's progress engine walks its list of
  // pending sends on every call, so 80K chunks posted at once took time
  // quadratic in their number (20 s). At most one chunk per message, or 256,
  // whichever is more, is in flight; the oldest half is completed first.
  const size_t max_in_flight = std::max<size_t>(256, s.send_rank.size());
  std::vector<int64_t> sends;
  size_t completed = 0;  // sends [0, completed) are done
  std::vector<bool> staged(s.send_rank.size(), false);  // by owner: its box is in the send buffer
  for (size_t m : s.send_order) {
    const size_t owner = static_cast<size_t>(p.pack_owner[m]);
    if (!staged[owner]) {  // this message's ops write its box where its owner's would
      RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, send.data(), p.send_bytes);
      staged[owner] = true;
    }
    for (int64_t off = 0; off < p.send_count[m]; off += chunk) {
      if (sends.size() - completed >= max_in_flight) {
        const size_t half = max_in_flight / 2;
        RESHARD_RETURN_IF_ERROR(comm->WaitAll(std::span<int64_t>(sends.data() + completed, half)));
        completed += half;
      }
      const int64_t len = std::min(chunk, p.send_count[m] - off);
      int64_t r = kNoRequest;
      RESHARD_RETURN_IF_ERROR(comm->StartSend(send.data() + p.send_offset[m] + off, len, s.send_rank[m], r));
      sends.push_back(r);
      ++stats.messages_sent;
      stats.step_bytes_sent.back() += len;
    }
    if (messages > 0) RESHARD_RETURN_IF_ERROR(drain(false));
  }
  if (!s.reduces()) RunAll(p.local, in, out);
  while (unpacked < static_cast<int64_t>(messages)) RESHARD_RETURN_IF_ERROR(drain(true));
  if (s.reduces()) Reduce(s, in, out);
  return comm->WaitAll(std::span<int64_t>(sends.data() + completed, sends.size() - completed));
}

Status RankReshard::State::CompileOwnPart(const Layout& source, const Layout& target, std::vector<std::string> step_ops,
                                          const std::function<Result<PlanProgram>(const CompileOptions&)>& compile) {
  // Every layout device must be a rank: the same answer on every rank, as the layouts agree.
  for (const Layout* l : {&source, &target})
    if (!l->devices().empty() && l->devices().back() >= size)
      return Status::InvalidArgument(
          fmt::format("the layouts name device {}, but the communicator has {} ranks", l->devices().back(), size));
  CompileOptions co;
  co.only_device = rank;
  co.copies = CopyForms::kStaged;  // a rank packs and unpacks; it never reads another rank's buffers
  co.source_format = options.source_format;
  co.target_format = options.target_format;
  Result<PlanProgram> compiled = compile(co);
  RESHARD_RETURN_IF_ERROR(AgreeStatus(*comm, compiled.status()));
  owned = std::make_unique<PlanProgram>(std::move(compiled).value());
  program = owned.get();
  ops = std::move(step_ops);
  return Prepare();
}

Result<RankReshard> RankReshard::Create(std::unique_ptr<Comm> comm, const Layout& source, const Layout& target,
                                        const RankOptions& options) {
  if (!options.planner && source.partial() && !target.partial()) {
    // The one-step plan of partial sums: the reducing exchange.
    RankOptions o = options;
    o.planner = PlannerOptions{};
    o.planner->strategy = Strategy::kExchange;
    return Create(std::move(comm), source, target, o);
  }
  auto st = std::make_unique<State>();
  RESHARD_RETURN_IF_ERROR(st->Begin(std::move(comm), options, Mix(source.Hash(), target.Hash())));
  if (options.planner) {
    // Every rank plans alike (the planner is deterministic); a failure is the same everywhere,
    // but agree on it anyway, and on the plan, so options that differ cannot slip through.
    Result<PlanResult> planned = PlanReshard(source, target, *options.planner);
    RESHARD_RETURN_IF_ERROR(AgreeStatus(*st->comm, planned.status()));
    RESHARD_RETURN_IF_ERROR(CheckSame(*st->comm, PlanHash(planned->plan), "planner options (their plans)"));
    RankOptions o = options;
    o.planner.reset();
    std::unique_ptr<Comm> c = std::move(st->comm);
    return Create(std::move(c), planned->plan, o);
  }
  RESHARD_RETURN_IF_ERROR(st->CompileOwnPart(source, target, {"exchange"}, [&](const CompileOptions& co) -> Result<PlanProgram> {
    RESHARD_ASSIGN_OR_RETURN(Exchange ex, Exchange::Create(source, target));
    return PlanProgram::Compile(ex, co);
  }));
  return RankReshard(std::move(st));
}

Result<RankReshard> RankReshard::Create(std::unique_ptr<Comm> comm, const CollectivePlan& plan,
                                        const RankOptions& options) {
  auto st = std::make_unique<State>();
  RankOptions o = options;
  o.planner.reset();  // the plan is given
  RESHARD_RETURN_IF_ERROR(st->Begin(std::move(comm), o, PlanHash(plan)));
  RESHARD_RETURN_IF_ERROR(st->CompileOwnPart(plan.source(), plan.target(), plan.OpNames(),
                                             [&](const CompileOptions& co) { return PlanProgram::Compile(plan, co); }));
  return RankReshard(std::move(st));
}

Result<RankReshard> RankReshard::Create(std::unique_ptr<Comm> comm, const PlanProgram& program,
                                        const RankOptions& options) {
  auto st = std::make_unique<State>();
  RESHARD_RETURN_IF_ERROR(st->Begin(std::move(comm), options, ProgramHash(program)));
  // The runner packs and unpacks: without those copies it would send nothing.
  RESHARD_RETURN_IF_ERROR(AgreeStatus(
      *st->comm, program.has_staged_copies()
                     ? Status::Ok()
                     : Status::InvalidArgument("this program was compiled without the staged copies (pack and "
                                               "unpack) the step runner runs (CompileOptions::copies)")));
  if (static_cast<size_t>(st->size) != program.devices().size())
    return Status::InvalidArgument(fmt::format("the program has {} devices, but the communicator has {} ranks",
                                               program.devices().size(), st->size));
  st->program = &program;
  st->rank_is_index = true;
  for (const StepProgram& s : program.steps())
    st->ops.emplace_back(StepOpName(s.op));
  RESHARD_RETURN_IF_ERROR(st->Prepare());
  return RankReshard(std::move(st));
}

RankReshard::RankReshard(std::unique_ptr<State> state) : state_(std::move(state)) {}
RankReshard::RankReshard(RankReshard&&) noexcept = default;
RankReshard& RankReshard::operator=(RankReshard&&) noexcept = default;
RankReshard::~RankReshard() = default;

int64_t RankReshard::source_bytes() const { return state_->source_bytes; }
int64_t RankReshard::target_bytes() const { return state_->target_bytes; }
const std::vector<std::string>& RankReshard::step_ops() const { return state_->ops; }
Comm& RankReshard::comm() { return *state_->comm; }

std::vector<std::string> RankReshard::step_transports() const {
  std::vector<std::string> t;
  for (const StepRun& s : state_->steps) {
    if (s.p2p)
      t.emplace_back("p2p");
    else if (s.boxes)
      t.emplace_back("alltoallw");
    else if (s.reduce_scatter)
      t.emplace_back("reduce_scatter over groups");
    else if (s.all_reduce)
      t.emplace_back("allreduce over groups");
    else if (s.fused)
      t.emplace_back("in the allreduce");
    else if (s.grouped)
      t.push_back(fmt::format("{} over groups", s.allgather ? (s.chunk > 0 ? "allgather" : "allgatherv")
                                                            : (s.chunk > 0 ? "alltoall" : "alltoallv")));
    else
      t.emplace_back("alltoallv");
  }
  return t;
}

Result<RankRunStats> RankReshard::Execute(std::span<const std::byte> source, std::span<std::byte> target,
                                          const AfterStep& after_step) {
  State& st = *state_;
  if (st.failed) return Status::Internal("an earlier Execute of this object failed; it runs no more");
  Result<RankRunStats> r = st.Run(source, target, after_step);
  // An error agreed by every rank before any message moved leaves the object usable.
  if (!r.ok() && !st.clean_error) st.failed = true;
  return r;
}

Result<RankRunStats> RankReshard::State::Run(std::span<const std::byte> source, std::span<std::byte> target,
                                             const AfterStep& after_step) {
  State& st = *this;
  st.clean_error = false;
  Status sizes = Status::Ok();
  if (static_cast<int64_t>(source.size()) != st.source_bytes)
    sizes = Status::InvalidArgument(
        fmt::format("its source buffer holds {} bytes; its part of the source layout needs {}", source.size(), st.source_bytes));
  else if (static_cast<int64_t>(target.size()) != st.target_bytes)
    sizes = Status::InvalidArgument(
        fmt::format("its target buffer holds {} bytes; its part of the target layout needs {}", target.size(), st.target_bytes));
  st.clean_error = true;
  RESHARD_RETURN_IF_ERROR(AgreeStatus(*st.comm, sizes));
  st.clean_error = false;
  const auto start = std::chrono::steady_clock::now();
  RankRunStats stats;
  stats.peak_bytes = st.peak_bytes;
  const std::byte* in = source.data();
  // Where program step i writes (an all-reduce run in one call: where its
  // last program step does).
  auto out_of = [&](size_t i) { return i + 1 == st.steps.size() ? target.data() : st.between[i % 2].data(); };
  for (size_t i = 0; i < st.steps.size(); ++i) {
    const StepRun& s = st.steps[i];
    std::byte* out = out_of(i);
    // Per plan step: an all-reduce's two program steps add up.
    if (i == 0 || s.plan_step != st.steps[i - 1].plan_step) {
      stats.step_bytes_sent.push_back(0);
      stats.step_bytes_received.push_back(0);
    }
    // A failed call is returned on the rank it failed on, and the others may
    // wait on this rank: aborting the job is the caller's call to make.
    const int64_t sent = stats.step_bytes_sent.back(), received = stats.step_bytes_received.back();
    if (s.all_reduce) {
      out = out_of(s.through);
      RESHARD_RETURN_IF_ERROR(st.RunAllReduce(s, in, out, stats));
      stats.bytes_moved += s.program->input_bytes;
    } else if (!s.fused) {
      RESHARD_RETURN_IF_ERROR(s.p2p     ? st.RunPointToPoint(s, in, out, stats)
                              : s.boxes ? st.RunBoxes(s, in, out, stats)
                              : s.grouped ? st.RunGrouped(s, in, out, stats)
                                          : st.RunAlltoallv(s, in, out, stats, *st.comm));
      stats.bytes_moved += s.program->unpack.bytes + s.program->local.bytes;
    }
    // What the backend carried (priced chunks: their padding too).
    stats.bytes_sent += stats.step_bytes_sent.back() - sent;
    stats.bytes_received += stats.step_bytes_received.back() - received;
    // (An all-reduce run in one call leaves no output of its first program
    // step: the hook sees its last one's.)
    const bool whole = !s.all_reduce || s.through == i;
    if (after_step && whole) {
      Status hook = after_step(i, std::span<const std::byte>(out, static_cast<size_t>(s.program->output_bytes)));
      st.clean_error = true;  // between steps nothing is in flight
      RESHARD_RETURN_IF_ERROR(AgreeStatus(*st.comm, hook));
      st.clean_error = false;
    }
    in = out;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace reshard
