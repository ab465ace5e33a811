// Choosing each step's transport (rank_reshard.h): the same choice on
// every rank, agreed by small collectives at creation; the groups, box
// messages and equal chunks a step runs with, and the buffers it needs.
#include <algorithm>
#include <utility>
#include <vector>

#include "exec/rank_step.h"
#include "exec/row_walk.h"

namespace reshard {
namespace {

constexpr int64_t kBoxRunBytes = 64, kCopyOnceBoxRunBytes = 16;

// Whether one message (ops [begin, end) of `p`, `bytes` long) can be a box
// message: its copies list its bytes in order (one box, or boxes one after
// another), or, where its boxes interleave in the staged buffer (block-cyclic
// layouts), its runs average at least kBoxRunBytes, since the backend then
// describes it run by run (MPI: an hindexed type of 12 bytes a run, and
// more inside MPI) and a message of element-sized runs would cost more to
// describe than to pack. Over MPI on this 2-core machine, box messages beat
// packing at every run size measured, 64-byte runs (8x8 f64 blocks) up:
// docs/benchmarks.md, "Against COSTA". Where box messages copy each byte
// once (threads: Comm::boxes_copy_once), runs of kCopyOnceBoxRunBytes do:
// their list (24 bytes a run) is no more than the 2 bytes a byte that
// staging holds, and the staged path copies every byte three times (8x8
// blocks at 64 MiB: f32 20.0 ms a run staged, 9.3 as box messages; bf16
// 10.1 and 4.8; docs/benchmarks.md, "Small blocks and short lines by source").
bool BoxableMessage(const CopyProgram& p, int32_t begin, int32_t end, int64_t bytes, bool staged_is_dst,
                    int64_t box_run_bytes) {
  if (StagedInOrder(p, begin, end, staged_is_dst)) return true;
  return bytes >= box_run_bytes * RunCount(p, begin, end);
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
      // (A reducing step too: an all-to-all-v over its groups, combined
      // once its messages have arrived; a reduce-scatter, or an
      // all-reduce's first half, with priced chunks, as the backend's
      // reduce-scatter where every member's part lines up.)
      // Where box messages copy each byte once (shared memory), they come
      // first, as the fastest way any step's messages move there, unless
      // priced chunks ask for the collectives the plan priced.
      const bool boxes_first = comm->boxes_copy_once() && asked == StepTransport::kAuto && !options.priced_chunks;
      const bool structured = asked != StepTransport::kDatatypes && pp.mesh() && !sp.group_axes.empty();
      if (structured && !boxes_first) RESHARD_RETURN_IF_ERROR(UseGroups(s, sp));
      bool boxes = false;
      // Box messages write the output as they land: a reducing step combines after.
      if (!s.grouped && !s.reduces() && asked != StepTransport::kAlltoallv && comm->has_boxes()) {
        RESHARD_ASSIGN_OR_RETURN(boxes, AllBoxable(s));
      }
      if (structured && boxes_first && !boxes) RESHARD_RETURN_IF_ERROR(UseGroups(s, sp));
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
  const int64_t run_bytes = comm->boxes_copy_once() ? kCopyOnceBoxRunBytes : kBoxRunBytes;
  bool boxable = true;
  for (size_t m = 0; m < s.send_rank.size() && boxable; ++m)
    boxable = BoxableMessage(p.pack, p.pack_begin[m], p.pack_begin[m + 1], p.send_count[m], true, run_bytes);
  for (size_t m = 0; m < s.recv_rank.size() && boxable; ++m)
    boxable = BoxableMessage(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], p.recv_count[m], false, run_bytes);
  int64_t all = boxable ? 1 : 0;
  RESHARD_RETURN_IF_ERROR(comm->AllReduce(std::span<int64_t>(&all, 1), Comm::ReduceOp::kMin));
  return all == 1;
}

int64_t RankReshard::State::PositionOfRank(const MeshPositions& positions, int r) const {
  const int64_t dev = !rank_is_index ? r
                      : r < static_cast<int64_t>(program->devices().size()) ? program->devices()[static_cast<size_t>(r)]
                                                                             : -1;
  return dev >= 0 ? positions.Of(dev) : -1;
}

Result<bool> RankReshard::State::UseAllReduce(StepRun& s, const StepProgram& step, size_t first, size_t last) {
  const Mesh& mesh = *program->mesh();
  const std::vector<int32_t>& axes = step.all_reduce_axes;
  const int64_t members = mesh.GroupSize(axes);
  const int64_t me = rank_is_index ? rank : program->IndexOf(rank);
  const int64_t device = me >= 0 ? program->devices()[static_cast<size_t>(me)] : -1;
  const int64_t pos = PositionOfRank(*program->mesh_positions(), rank);
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
  // The mesh positions of this rank and of each message's peer (its own
  // peers only: a table of every rank's on every rank costs N^2 over
  // thousands of ranks).
  auto color = [&](int64_t pos) { return mesh.GroupOf(pos, axes); };
  auto member = [&](int64_t pos) { return mesh.MemberIndex(pos, axes); };
  int64_t me = -1;
  std::vector<int64_t> send_pos, recv_pos;
  const MeshPositions& positions = *program->mesh_positions();
  me = PositionOfRank(positions, rank);
  for (int peer : s.send_rank) send_pos.push_back(PositionOfRank(positions, peer));
  for (int peer : s.recv_rank) recv_pos.push_back(PositionOfRank(positions, peer));
  bool inside = me >= 0 || (s.send_rank.empty() && s.recv_rank.empty());
  for (const std::vector<int64_t>* peers : {&send_pos, &recv_pos})
    for (int64_t pos : *peers) inside = inside && me >= 0 && pos >= 0 && color(pos) == color(me);
  const DeviceProgram& p = *s.program;
  // An all-gather where every message is this rank's whole input, packed as
  // is, and goes to every other member: then what each member receives from
  // another is that member's whole input, as an all-gather-v has it.
  const int64_t members = mesh.GroupSize(axes);
  // (An all-reduce's second half gathers its pieces: an all-gather.)
  bool whole = !s.reduces() && (step.op == StepOp::kAllGather || step.op == StepOp::kAllReduce) &&
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
  // (Only the backend's reduce-scatter, with priced chunks, asks; the options are every rank's.)
  const bool shaped = options.priced_chunks && s.reduces() &&
                      (step.op == StepOp::kReduceScatter || step.op == StepOp::kAllReduce) &&
                      ReduceScatterShaped(p, members);
  int64_t all[3] = {inside ? 1 : 0, whole ? 1 : 0, shaped ? 1 : 0};
  RESHARD_RETURN_IF_ERROR(comm->AllReduce(all, Comm::ReduceOp::kMin));
  if (all[0] == 0) return Status::Ok();  // some message crosses groups: the whole Comm it is
  s.grouped = true;
  const int my_color = me >= 0 ? static_cast<int>(color(me)) : -1;
  const int my_key = me >= 0 ? static_cast<int>(member(me)) : 0;
  Result<std::unique_ptr<Comm>> split = comm->Split(my_color, my_key);
  RESHARD_RETURN_IF_ERROR(AgreeStatus(*comm, split.status()));
  s.group = std::move(split).value();
  if (s.group == nullptr) return Status::Ok();  // not in the mesh: nothing to do in this step
  s.group_size = s.group->size();
  const size_t g = static_cast<size_t>(s.group_size);
  auto member_of = [&](int64_t pos) { return static_cast<size_t>(member(pos)); };
  ZeroArrays(s, g);
  s.allgather = all[1] != 0;
  if (s.allgather) {
    // Every member's whole input, in member order; this rank's own slot too.
    s.recv_counts[static_cast<size_t>(my_key)] = p.input_bytes;
    for (size_t m = 0; m < s.recv_rank.size(); ++m) s.recv_counts[member_of(recv_pos[m])] = p.recv_count[m];
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
      s.recv_base.push_back(s.chunk > 0 ? static_cast<int64_t>(member_of(recv_pos[m])) * s.chunk
                                        : s.recv_displs[member_of(recv_pos[m])]);
    Grow(recv, s.chunk > 0 ? static_cast<int64_t>(g) * s.chunk : at);
    if (s.chunk > p.input_bytes) Grow(send, s.chunk);  // the input, padded
    return Status::Ok();
  }
  for (size_t m = 0; m < s.send_rank.size(); ++m) {
    s.send_counts[member_of(send_pos[m])] = p.send_count[m];
    s.send_displs[member_of(send_pos[m])] = p.send_offset[m];
  }
  for (size_t m = 0; m < s.recv_rank.size(); ++m) {
    s.recv_counts[member_of(recv_pos[m])] = p.recv_count[m];
    s.recv_displs[member_of(recv_pos[m])] = p.recv_offset[m];
  }
  // (A reducing step not run as the backend's reduce-scatter: combined
  // after an all-to-all-v over its group.)
  if (!options.priced_chunks || (s.reduces() && all[2] == 0)) return Status::Ok();
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
    s.send_base.push_back(static_cast<int64_t>(member_of(send_pos[m])) * chunk);
  for (size_t m = 0; m < s.recv_rank.size(); ++m)
    s.recv_base.push_back(static_cast<int64_t>(member_of(recv_pos[m])) * chunk);
  for (size_t k = 0; k < g; ++k)
    if (s.send_counts[k] == 0 && static_cast<int>(k) != my_key) s.idle_base.push_back(static_cast<int64_t>(k) * chunk);
  Grow(send, static_cast<int64_t>(g) * chunk);
  Grow(recv, static_cast<int64_t>(g) * chunk);
  return Status::Ok();
}

}  // namespace reshard
