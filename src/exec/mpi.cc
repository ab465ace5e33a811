// The MPI backend: each rank compiles its own part of the plan into a
// DeviceProgram and runs it with MPI_Ialltoallv or staggered point-to-point.
#include "reshard/mpi.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>

#include "exec/copy_kernel.h"
#include "reshard/host_buffer.h"

namespace reshard {
namespace {

int64_t Sum(const std::vector<int>& counts) {
  int64_t n = 0;
  for (int c : counts) n += c;
  return n;
}

Status FromCode(Status::Code code, std::string msg) {
  switch (code) {
    case Status::Code::kInvalidArgument: return Status::InvalidArgument(std::move(msg));
    case Status::Code::kNotSupported: return Status::NotSupported(std::move(msg));
    case Status::Code::kUnavailable: return Status::Unavailable(std::move(msg));
    default: return Status::Internal(std::move(msg));
  }
}

Status MpiCall(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Internal(fmt::format("{} failed: {}", what, std::string_view(text, static_cast<size_t>(len))));
}

uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + (h >> 29); }

uint64_t MixText(uint64_t h, std::string_view text) {
  for (char c : text) h = Mix(h, static_cast<unsigned char>(c));
  return Mix(h, text.size());
}

// Every rank learns whether any rank failed, and all return the status of the
// lowest failing rank: "rank K: " before its message unless every rank failed
// with that same code and message (an error every rank shares names none).
// The one way errors leave a collective call, so no rank goes on to a
// collective the others skip.
Status Agree(MPI_Comm comm, int rank, int size, const Status& local) {
  const int64_t h = local.ok() ? 0 : static_cast<int64_t>(MixText(static_cast<uint64_t>(local.code()), local.message()) >> 2);
  // The lowest failing rank; whether every rank failed; the least and (negated) the greatest message hash.
  int64_t v[4] = {local.ok() ? size : rank, local.ok() ? 0 : 1, h, -h};
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_MIN, comm), "MPI_Allreduce"));
  if (v[0] == size) return Status::Ok();
  const int first = static_cast<int>(v[0]);
  const bool shared = v[1] == 1 && v[2] == -v[3];
  std::string msg = local.message();
  int header[2] = {static_cast<int>(local.code()), static_cast<int>(msg.size())};
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Bcast(header, 2, MPI_INT, first, comm), "MPI_Bcast"));
  msg.resize(static_cast<size_t>(header[1]));
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Bcast(msg.data(), header[1], MPI_CHAR, first, comm), "MPI_Bcast"));
  return FromCode(static_cast<Status::Code>(header[0]), shared ? msg : fmt::format("rank {}: {}", first, msg));
}

// "rank 3", "ranks 0 and 2", "ranks 0, 2 and 5", "ranks 0, 1, 2, ... (12 ranks)".
std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  if (ranks.size() > 6) return fmt::format("ranks {}, {}, {}, ... ({} ranks)", ranks[0], ranks[1], ranks[2], ranks.size());
  const std::vector<int> head(ranks.begin(), ranks.end() - 1);
  return fmt::format("ranks {} and {}", fmt::join(head, ", "), ranks.back());
}

// InvalidArgument on every rank unless every rank passes the same `hash` of
// what the ranks must share (`what`: "layouts or options"). It names the
// ranks that differ from the version most ranks hold ("rank 2's layouts or
// options differ from the others'"); where no version is held by more ranks
// than any other (two ranks that differ), rank 0 and the first rank that
// differs from it ("rank 0's and rank 1's layouts or options differ").
Status CheckSame(MPI_Comm comm, int size, uint64_t hash, std::string_view what) {
  std::vector<uint64_t> all(static_cast<size_t>(size));
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm), "MPI_Allgather"));
  std::vector<uint64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() == sorted.back()) return Status::Ok();
  // The version most ranks hold, and whether another is held as often.
  uint64_t common = 0;
  size_t most = 0;
  bool tie = false;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    if (j - i > most) {
      most = j - i;
      common = sorted[i];
      tie = false;
    } else if (j - i == most) {
      tie = true;
    }
    i = j;
  }
  const char* rule = "(every rank must pass the same layouts, plan and options)";
  if (tie) {
    size_t other = 1;
    while (all[other] == all[0]) ++other;
    return Status::InvalidArgument(fmt::format("rank 0's and rank {}'s {} differ {}", other, what, rule));
  }
  std::vector<int> odd;
  for (int k = 0; k < size; ++k)
    if (all[static_cast<size_t>(k)] != common) odd.push_back(k);
  return Status::InvalidArgument(odd.size() == 1 ? fmt::format("rank {}'s {} differ from the others' {}", odd[0], what, rule)
                                                 : fmt::format("the {} of {} differ from the others' {}", what,
                                                               RankList(odd), rule));
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
  return h;
}

// The planner options every rank must share (the plan follows from them and the layouts).
uint64_t PlannerOptionsHash(const PlannerOptions& o) {
  uint64_t h = Mix(static_cast<uint64_t>(o.strategy), static_cast<uint64_t>(o.target));
  h = Mix(h, static_cast<uint64_t>(o.memory_cap_bytes));
  h = MixText(h, o.topology.ToString());
  for (const Mesh& m : o.meshes) h = MixText(h, m.ToString());
  return h;
}

void RunCopies(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst) {
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    RunCopy(p, op, src, dst, 0, CopyUnits(p, op));
  }
}

void RunAll(const CopyProgram& p, const std::byte* src, std::byte* dst) {
  RunCopies(p, 0, static_cast<int32_t>(p.ops.size()), src, dst);
}

void Grow(HostBuffer& b, int64_t bytes) {
  if (b.size() < bytes) b = HostBuffer(bytes);
}

// Whether ops [begin, end) of `p` (one message) fill its staged bytes in
// order, each op one contiguous span of them, so that the ops' elements
// listed op after op are the message's bytes in order. The staged side is
// the destination of a pack, the source of an unpack. True of a message that
// is one box (tiled layouts); a block-cyclic message's boxes interleave.
bool StagedInOrder(const CopyProgram& p, int32_t begin, int32_t end, bool staged_is_dst) {
  int64_t next = -1;
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    const int64_t offset = staged_is_dst ? op.dst_offset : op.src_offset;
    if (next >= 0 && offset != next) return false;
    std::vector<int64_t> strides;
    for (int32_t d = 0; d < op.num_dims; ++d) {
      const CopyDim& c = p.dims[static_cast<size_t>(op.first_dim + d)];
      strides.push_back(staged_is_dst ? c.dst_stride : c.src_stride);
    }
    int64_t span = op.run_bytes;
    for (int32_t d = op.num_dims; d-- > 0;) {
      if (strides[static_cast<size_t>(d)] != span) return false;
      span *= p.dims[static_cast<size_t>(op.first_dim + d)].count;
    }
    next = offset + span;
  }
  return true;
}

// Ops [begin, end) of `p` (one message) as one MPI datatype over the buffer
// the ops address on the `sending` side (pack: their source; unpack: their
// destination). Its type map must list the bytes in the order the message
// carries them. REQUIRES: StagedInOrder, so op after op, each op's dims in
// the staged side's memory order (a pack op's are; an unpack op's are
// re-sorted by their source strides), is that order.
Result<MPI_Datatype> MessageType(const CopyProgram& p, int32_t begin, int32_t end, bool sending) {
  std::vector<MPI_Datatype> parts;
  std::vector<MPI_Aint> displs;
  auto free_parts = [&]() {
    for (MPI_Datatype& t : parts) MPI_Type_free(&t);
  };
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    std::vector<CopyDim> dims(p.dims.begin() + op.first_dim, p.dims.begin() + op.first_dim + op.num_dims);
    if (!sending)
      std::stable_sort(dims.begin(), dims.end(), [](const CopyDim& a, const CopyDim& b) { return a.src_stride > b.src_stride; });
    MPI_Datatype t;
    if (op.run_bytes > INT_MAX) {
      free_parts();
      return Status::Internal("a copy run exceeds 2^31 bytes");
    }
    MPI_Type_contiguous(static_cast<int>(op.run_bytes), MPI_BYTE, &t);
    for (size_t d = dims.size(); d-- > 0;) {
      MPI_Datatype outer;
      const int64_t stride = sending ? dims[d].src_stride : dims[d].dst_stride;
      MPI_Type_create_hvector(static_cast<int>(dims[d].count), 1, static_cast<MPI_Aint>(stride), t, &outer);
      MPI_Type_free(&t);
      t = outer;
    }
    parts.push_back(t);
    displs.push_back(static_cast<MPI_Aint>(sending ? op.src_offset : op.dst_offset));
  }
  std::vector<int> ones(parts.size(), 1);
  MPI_Datatype message;
  const int rc = MPI_Type_create_struct(static_cast<int>(parts.size()), ones.data(), displs.data(), parts.data(), &message);
  free_parts();  // the struct keeps what it needs
  RESHARD_RETURN_IF_ERROR(MpiCall(rc, "MPI_Type_create_struct"));
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Type_commit(&message), "MPI_Type_commit"));
  return message;
}

}  // namespace

std::string_view MpiTransportName(MpiTransport t) {
  switch (t) {
    case MpiTransport::kAuto: return "auto";
    case MpiTransport::kAlltoallv: return "alltoallv";
    case MpiTransport::kPointToPoint: return "p2p";
    case MpiTransport::kDatatypes: return "alltoallw";
  }
  return "?";
}

// One step as this rank runs it.
struct StepRun {
  DeviceProgram program;  // this rank's part; empty where it takes no part
  bool p2p = false;
  std::vector<int> send_rank, recv_rank;  // per message, the peer's rank
  std::vector<size_t> send_order;         // messages, staggered: peers rank+1, rank+2, ... first
  // MPI_Alltoallv's arrays, one entry per rank of `comm` (bytes).
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  // A structured step whose messages all stay inside its groups runs over a
  // sub-communicator per group (members ranked as the collective orders
  // them): MPI_Ialltoallv, or MPI_Iallgatherv where every message is the
  // sender's whole input.
  // kDatatypes: per rank of `comm`, the message as an MPI datatype over this
  // rank's input (send) or output (receive) buffer, so MPI_Alltoallw reads
  // and writes the boxes in place: no staging.
  bool datatypes = false;
  std::vector<MPI_Datatype> send_types, recv_types;
  bool grouped = false;  // the same on every rank; `group` is null where a rank is in no group
  MPI_Comm group = MPI_COMM_NULL;
  int group_size = 0;
  bool allgather = false;
  std::vector<int> recv_base;  // all-gather: where message m starts in the gathered buffer
};

struct MpiReshard::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  MpiOptions options;
  std::vector<StepRun> steps;
  std::vector<std::string> ops;
  int64_t source_bytes = 0, target_bytes = 0;
  // Staging, and intermediate layouts' buffers (alternating). Sized at
  // creation, first touched by the first Execute.
  HostBuffer send, recv, between[2];

  ~State() {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (StepRun& s : steps) {
      if (s.group != MPI_COMM_NULL) MPI_Comm_free(&s.group);
      for (std::vector<MPI_Datatype>* types : {&s.send_types, &s.recv_types})
        for (MPI_Datatype& t : *types)
          if (t != MPI_BYTE) MPI_Type_free(&t);
    }
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  // Duplicates the communicator and checks that every rank passed the same
  // layouts and options (`hash` of them).
  Status Begin(MPI_Comm user, const MpiOptions& o, uint64_t hash);
  // Compiles this rank's part of every step and picks each step's transport.
  Status Prepare(const std::vector<Layout>& layouts, const std::vector<std::string>& step_ops,
                 const CollectivePlan* plan = nullptr);
  // Moves a structured step onto its groups' sub-communicators where its
  // messages allow (the same choice on every rank).
  Status UseGroups(StepRun& s, const PlanStep& step, const Mesh& mesh);
  // Sets s.datatypes where every rank's messages are their bytes in order
  // (StagedInOrder), so each can be one datatype.
  Status AllInOrder(StepRun& s);
  Status RunGrouped(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats);
  // Over `over`: the whole communicator, or the step's group (the counts are then by member).
  Status RunAlltoallv(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats, MPI_Comm over);
  Status RunAlltoallw(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats);
  Status RunPointToPoint(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats);
};

namespace {

// MPI's per-rank count and displacement arrays of `s`, `n` ranks, all zero.
void ZeroArrays(StepRun& s, size_t n) {
  s.send_counts.assign(n, 0);
  s.send_displs.assign(n, 0);
  s.recv_counts.assign(n, 0);
  s.recv_displs.assign(n, 0);
}

// MPI_Alltoallv's arrays from the program's messages.
void FillAlltoallv(StepRun& s, int size) {
  ZeroArrays(s, static_cast<size_t>(size));
  for (size_t m = 0; m < s.send_rank.size(); ++m) {
    s.send_counts[static_cast<size_t>(s.send_rank[m])] = static_cast<int>(s.program.send_count[m]);
    s.send_displs[static_cast<size_t>(s.send_rank[m])] = static_cast<int>(s.program.send_offset[m]);
  }
  for (size_t m = 0; m < s.recv_rank.size(); ++m) {
    s.recv_counts[static_cast<size_t>(s.recv_rank[m])] = static_cast<int>(s.program.recv_count[m]);
    s.recv_displs[static_cast<size_t>(s.recv_rank[m])] = static_cast<int>(s.program.recv_offset[m]);
  }
}

// MPI_Alltoallw's arrays: one datatype per message, count 1, displacement 0
// (the offsets are in the types); MPI_BYTE with count 0 for other ranks.
Status BuildTypes(StepRun& s, int size) {
  ZeroArrays(s, static_cast<size_t>(size));
  s.send_types.assign(static_cast<size_t>(size), MPI_BYTE);
  s.recv_types.assign(static_cast<size_t>(size), MPI_BYTE);
  const DeviceProgram& p = s.program;
  for (size_t m = 0; m < s.send_rank.size(); ++m) {
    const size_t r = static_cast<size_t>(s.send_rank[m]);
    RESHARD_ASSIGN_OR_RETURN(s.send_types[r], MessageType(p.pack, p.pack_begin[m], p.pack_begin[m + 1], true));
    s.send_counts[r] = 1;
  }
  for (size_t m = 0; m < s.recv_rank.size(); ++m) {
    const size_t r = static_cast<size_t>(s.recv_rank[m]);
    RESHARD_ASSIGN_OR_RETURN(s.recv_types[r], MessageType(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], false));
    s.recv_counts[r] = 1;
  }
  return Status::Ok();
}

}  // namespace

Status MpiReshard::State::Prepare(const std::vector<Layout>& layouts, const std::vector<std::string>& step_ops,
                                  const CollectivePlan* plan) {
  State& st = *this;
  const int rank = st.rank, size = st.size;
  // Every layout device must be a rank: the same answer on every rank, as the layouts agree.
  for (const Layout& l : layouts)
    if (!l.devices().empty() && l.devices().back() >= size)
      return Status::InvalidArgument(fmt::format("the layouts name device {}, but the communicator has {} ranks",
                                                 l.devices().back(), size));
  st.ops = step_ops;
  std::vector<PlanProgram> programs;  // one per step: this rank's part of each step's exchange
  Status compiled = Status::Ok();
  for (size_t i = 0; i + 1 < layouts.size() && compiled.ok(); ++i) {
    CompileOptions co;
    co.only_device = rank;
    if (i == 0) co.source_format = st.options.source_format;
    if (i + 2 == layouts.size()) co.target_format = st.options.target_format;
    Result<Exchange> ex = plan != nullptr && i < plan->steps().size() ? StepExchange(*plan, i)
                                                                      : Exchange::Create(layouts[i], layouts[i + 1]);
    if (!ex.ok()) {
      compiled = ex.status();
      break;
    }
    Result<PlanProgram> p = PlanProgram::Compile(*ex, co);
    if (!p.ok()) {
      compiled = p.status();
      break;
    }
    programs.push_back(std::move(p).value());
  }
  RESHARD_RETURN_IF_ERROR(Agree(st.comm, rank, size, compiled));

  int64_t send_max = 0, recv_max = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    const PlanProgram& p = programs[i];
    StepRun& s = st.steps.emplace_back();  // owned from here: its datatypes and groups are freed with the state
    const int64_t me = p.IndexOf(rank);
    if (me >= 0) s.program = p.steps()[0].devices[static_cast<size_t>(me)];
    for (int64_t peer : s.program.send_peer) s.send_rank.push_back(static_cast<int>(p.devices()[static_cast<size_t>(peer)]));
    for (int64_t peer : s.program.recv_peer) s.recv_rank.push_back(static_cast<int>(p.devices()[static_cast<size_t>(peer)]));
    for (size_t m = 0; m < s.send_rank.size(); ++m) s.send_order.push_back(m);
    std::stable_sort(s.send_order.begin(), s.send_order.end(), [&](size_t a, size_t b) {
      return (s.send_rank[a] - rank + size) % size < (s.send_rank[b] - rank + size) % size;
    });
    // The step's global figures, the same on every rank: the busiest rank's
    // peers, whether any message is too large for an int count, and the
    // bytes and messages of all ranks.
    bool too_large = s.program.send_bytes > INT_MAX || s.program.recv_bytes > INT_MAX;
    int64_t bytes = 0;
    for (int64_t c : s.program.send_count) {
      bytes += c;
      too_large = too_large || c > st.options.max_message_bytes;
    }
    int64_t most[2] = {static_cast<int64_t>(std::max(s.send_rank.size(), s.recv_rank.size())), too_large ? 1 : 0};
    int64_t sums[2] = {bytes, static_cast<int64_t>(s.send_rank.size())}, most_all[2], sums_all[2];
    RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Allreduce(most, most_all, 2, MPI_INT64_T, MPI_MAX, st.comm), "MPI_Allreduce"));
    RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Allreduce(sums, sums_all, 2, MPI_INT64_T, MPI_SUM, st.comm), "MPI_Allreduce"));
    const bool sparse = most_all[0] * 2 <= size;
    const bool large = sums_all[1] > 0 && sums_all[0] / sums_all[1] >= (int64_t{1} << 20);
    const MpiTransport asked = st.options.transport;
    if (most_all[1] != 0 || asked == MpiTransport::kPointToPoint) {
      s.p2p = true;  // asked for, or a message an int count cannot say
    } else {
      // A structured collective runs as one, over its groups; then
      // datatypes where every message allows; then the shape rule.
      if (asked != MpiTransport::kDatatypes && plan != nullptr && plan->mesh() && i < plan->steps().size()) {
        const PlanStep& ps = plan->steps()[i];
        if ((ps.op == StepOp::kAllToAll || ps.op == StepOp::kAllGather) && !ps.group_axes.empty())
          RESHARD_RETURN_IF_ERROR(st.UseGroups(s, ps, *plan->mesh()));
      }
      if (!s.grouped && asked != MpiTransport::kAlltoallv) RESHARD_RETURN_IF_ERROR(st.AllInOrder(s));
      s.p2p = !s.grouped && !s.datatypes && asked == MpiTransport::kAuto && (sparse || large);
    }
    if (s.datatypes) {
      RESHARD_RETURN_IF_ERROR(Agree(st.comm, rank, size, BuildTypes(s, size)));
    } else {
      if (!s.p2p && !s.grouped) FillAlltoallv(s, size);
      send_max = std::max(send_max, s.program.send_bytes);
      recv_max = std::max(recv_max, s.program.recv_bytes);
    }
    if (i == 0) st.source_bytes = s.program.input_bytes;
    if (i + 1 == programs.size()) st.target_bytes = s.program.output_bytes;
    if (i + 1 < programs.size()) Grow(st.between[i % 2], s.program.output_bytes);
  }
  Grow(st.send, send_max);
  Grow(st.recv, recv_max);  // an all-gather may have asked for more already
  return Status::Ok();
}

Status MpiReshard::State::AllInOrder(StepRun& s) {
  bool in_order = true;
  for (size_t m = 0; m < s.send_rank.size() && in_order; ++m)
    in_order = StagedInOrder(s.program.pack, s.program.pack_begin[m], s.program.pack_begin[m + 1], true);
  for (size_t m = 0; m < s.recv_rank.size() && in_order; ++m)
    in_order = StagedInOrder(s.program.unpack, s.program.unpack_begin[m], s.program.unpack_begin[m + 1], false);
  int mine = in_order ? 1 : 0, all = 0;
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce"));
  s.datatypes = all == 1;
  return Status::Ok();
}

Status MpiReshard::State::UseGroups(StepRun& s, const PlanStep& step, const Mesh& mesh) {
  const int64_t n = mesh.num_devices();
  std::vector<int64_t> position(static_cast<size_t>(size), -1);  // rank -> mesh position
  for (int64_t pos = 0; pos < n; ++pos)
    if (mesh.device(pos) < size) position[static_cast<size_t>(mesh.device(pos))] = pos;
  // Groups and member order as the plan's (Mesh::GroupOf, MemberIndex).
  auto color = [&](int64_t pos) { return mesh.GroupOf(pos, step.group_axes); };
  auto member = [&](int64_t pos) { return mesh.MemberIndex(pos, step.group_axes); };
  const int64_t me = position[static_cast<size_t>(rank)];
  bool inside = me >= 0 || (s.send_rank.empty() && s.recv_rank.empty());
  for (const std::vector<int>* peers : {&s.send_rank, &s.recv_rank})
    for (int peer : *peers)
      inside = inside && me >= 0 && position[static_cast<size_t>(peer)] >= 0 &&
               color(position[static_cast<size_t>(peer)]) == color(me);
  const DeviceProgram& p = s.program;
  // An all-gather where every message is this rank's whole input, packed as
  // is, and goes to every other member: then what each member receives from
  // another is that member's whole input, as MPI_Allgatherv has it.
  const int64_t members = mesh.GroupSize(step.group_axes);
  bool whole = step.op == StepOp::kAllGather &&
               static_cast<int64_t>(s.send_rank.size()) == (s.program.input_bytes > 0 ? members - 1 : 0);
  for (size_t m = 0; m < s.send_rank.size() && whole; ++m) {
    const int32_t b = p.pack_begin[m];
    whole = p.pack_begin[m + 1] == b + 1 && p.pack.ops[static_cast<size_t>(b)].num_dims == 0 &&
            p.pack.ops[static_cast<size_t>(b)].src_offset == 0 && p.send_count[m] == p.input_bytes;
  }
  int flags[2] = {inside ? 1 : 0, whole ? 1 : 0}, all[2] = {0, 0};
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Allreduce(flags, all, 2, MPI_INT, MPI_MIN, comm), "MPI_Allreduce"));
  if (all[0] == 0) return Status::Ok();  // some message crosses groups: the whole communicator it is
  s.grouped = true;
  const int my_color = me >= 0 ? static_cast<int>(color(me)) : MPI_UNDEFINED;
  const int my_key = me >= 0 ? static_cast<int>(member(me)) : 0;
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Comm_split(comm, my_color, my_key, &s.group), "MPI_Comm_split"));
  if (s.group == MPI_COMM_NULL) return Status::Ok();  // not in the mesh: nothing to do in this step
  MPI_Comm_set_errhandler(s.group, MPI_ERRORS_RETURN);
  MPI_Comm_size(s.group, &s.group_size);
  const size_t g = static_cast<size_t>(s.group_size);
  auto member_of = [&](int peer) { return static_cast<size_t>(member(position[static_cast<size_t>(peer)])); };
  ZeroArrays(s, g);
  s.allgather = all[1] != 0;
  if (s.allgather) {
    // Every member's whole input, in member order; this rank's own slot too.
    s.recv_counts[static_cast<size_t>(my_key)] = static_cast<int>(p.input_bytes);
    for (size_t m = 0; m < s.recv_rank.size(); ++m) s.recv_counts[member_of(s.recv_rank[m])] = static_cast<int>(p.recv_count[m]);
    int64_t at = 0;
    for (size_t k = 0; k < g; ++k) {
      s.recv_displs[k] = static_cast<int>(at);
      at += s.recv_counts[k];
    }
    if (at > INT_MAX) return Status::Internal("an all-gather's gathered buffer exceeds 2^31 bytes");
    for (size_t m = 0; m < s.recv_rank.size(); ++m) s.recv_base.push_back(s.recv_displs[member_of(s.recv_rank[m])]);
    Grow(recv, at);
    return Status::Ok();
  }
  for (size_t m = 0; m < s.send_rank.size(); ++m) {
    s.send_counts[member_of(s.send_rank[m])] = static_cast<int>(p.send_count[m]);
    s.send_displs[member_of(s.send_rank[m])] = static_cast<int>(p.send_offset[m]);
  }
  for (size_t m = 0; m < s.recv_rank.size(); ++m) {
    s.recv_counts[member_of(s.recv_rank[m])] = static_cast<int>(p.recv_count[m]);
    s.recv_displs[member_of(s.recv_rank[m])] = static_cast<int>(p.recv_offset[m]);
  }
  return Status::Ok();
}

Status MpiReshard::State::RunGrouped(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats) {
  const DeviceProgram& p = s.program;
  if (s.group == MPI_COMM_NULL) return Status::Ok();
  MPI_Request req;
  if (s.allgather) {
    // The input is the message: no packing. Each received message is then
    // unpacked from its member's slot of the gathered buffer.
    RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Iallgatherv(in, static_cast<int>(p.input_bytes), MPI_BYTE, recv.data(),
                                                    s.recv_counts.data(), s.recv_displs.data(), MPI_BYTE, s.group, &req),
                                    "MPI_Iallgatherv"));
    RunAll(p.local, in, out);
    RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait (all-gather)"));
    // Its input went to every other member; its own slot is not a message.
    stats.step_bytes_sent.back() += p.input_bytes * (s.group_size - 1);
    stats.step_bytes_received.back() += Sum(s.recv_counts) - p.input_bytes;
    for (size_t m = 0; m < s.recv_rank.size(); ++m)
      RunCopies(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data() + s.recv_base[m] - p.recv_offset[m], out);
  } else {
    return RunAlltoallv(s, in, out, stats, s.group);
  }
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status MpiReshard::State::Begin(MPI_Comm user, const MpiOptions& o, uint64_t hash) {
  State& st = *this;
  const MPI_Comm comm = user;
  const MpiOptions& options = o;
  if (comm == MPI_COMM_NULL) return Status::InvalidArgument("the communicator is MPI_COMM_NULL");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return Status::InvalidArgument("MPI is not initialized (call MPI_Init first)");
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Comm_dup(comm, &st.comm), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(st.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(st.comm, &st.rank);
  MPI_Comm_size(st.comm, &st.size);
  st.options = options;
  hash = Mix(hash, static_cast<uint64_t>(options.transport));
  hash = Mix(hash, static_cast<uint64_t>(options.max_message_bytes));
  hash = Mix(hash, options.planner.has_value() ? PlannerOptionsHash(*options.planner) : 1);
  // Leading dimensions may differ by rank, orders may not: messages are
  // staged in the source buffers' order (device_program.h).
  hash = Mix(hash, static_cast<uint64_t>(options.source_format.order) * 2 + static_cast<uint64_t>(options.target_format.order));
  RESHARD_RETURN_IF_ERROR(CheckSame(st.comm, st.size, hash, "layouts or options"));
  Status local = Status::Ok();
  if (options.max_message_bytes < 1)
    local = Status::InvalidArgument(fmt::format("max_message_bytes is {}; it must be at least 1", options.max_message_bytes));
  return Agree(st.comm, st.rank, st.size, local);
}

Result<MpiReshard> MpiReshard::Create(MPI_Comm comm, const Layout& source, const Layout& target,
                                      const MpiOptions& options) {
  auto st = std::make_unique<State>();
  RESHARD_RETURN_IF_ERROR(st->Begin(comm, options, Mix(source.Hash(), target.Hash())));
  if (!options.planner) {
    RESHARD_RETURN_IF_ERROR(st->Prepare({source, target}, {"exchange"}));
    return MpiReshard(std::move(st));
  }
  // Every rank plans alike (the planner is deterministic); a failure is the same everywhere,
  // but agree on it anyway, and on the plan, so options that differ cannot slip through.
  Result<PlanResult> planned = PlanReshard(source, target, *options.planner);
  RESHARD_RETURN_IF_ERROR(Agree(st->comm, st->rank, st->size, planned.status()));
  const CollectivePlan& plan = planned->plan;
  std::vector<Layout> layouts = {plan.source()};
  for (const PlanStep& s : plan.steps()) layouts.push_back(s.output);
  RESHARD_RETURN_IF_ERROR(CheckSame(st->comm, st->size, PlanHash(plan), "planner options (their plans)"));
  if (layouts.size() == 1) layouts.push_back(plan.target());
  RESHARD_RETURN_IF_ERROR(st->Prepare(layouts, plan.OpNames(), &plan));
  return MpiReshard(std::move(st));
}

Result<MpiReshard> MpiReshard::Create(MPI_Comm comm, const CollectivePlan& plan, const MpiOptions& options) {
  auto st = std::make_unique<State>();
  std::vector<Layout> layouts = {plan.source()};
  for (const PlanStep& s : plan.steps()) layouts.push_back(s.output);
  MpiOptions o = options;
  o.planner.reset();  // the plan is given
  RESHARD_RETURN_IF_ERROR(st->Begin(comm, o, PlanHash(plan)));
  if (layouts.size() == 1) layouts.push_back(plan.target());
  RESHARD_RETURN_IF_ERROR(st->Prepare(layouts, plan.OpNames(), &plan));
  return MpiReshard(std::move(st));
}

MpiReshard::MpiReshard(std::unique_ptr<State> state) : state_(std::move(state)) {}
MpiReshard::MpiReshard(MpiReshard&&) noexcept = default;
MpiReshard& MpiReshard::operator=(MpiReshard&&) noexcept = default;
MpiReshard::~MpiReshard() = default;

int64_t MpiReshard::source_bytes() const { return state_->source_bytes; }
int64_t MpiReshard::target_bytes() const { return state_->target_bytes; }
const std::vector<std::string>& MpiReshard::step_ops() const { return state_->ops; }

std::vector<std::string> MpiReshard::step_transports() const {
  std::vector<std::string> t;
  for (const StepRun& s : state_->steps) {
    if (s.p2p)
      t.emplace_back("p2p");
    else if (s.datatypes)
      t.emplace_back("alltoallw");
    else if (s.grouped)
      t.push_back(fmt::format("{} over groups", s.allgather ? "allgatherv" : "alltoallv"));
    else
      t.emplace_back("alltoallv");
  }
  return t;
}

Status MpiReshard::State::RunAlltoallv(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats,
                                       MPI_Comm over) {
  const DeviceProgram& p = s.program;
  RunAll(p.pack, in, send.data());
  MPI_Request req;
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Ialltoallv(send.data(), s.send_counts.data(), s.send_displs.data(), MPI_BYTE,
                                                 recv.data(), s.recv_counts.data(), s.recv_displs.data(), MPI_BYTE, over,
                                                 &req),
                                  "MPI_Ialltoallv"));
  RunAll(p.local, in, out);  // while the messages travel
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait (all-to-all-v)"));
  stats.step_bytes_sent.back() += Sum(s.send_counts);
  stats.step_bytes_received.back() += Sum(s.recv_counts);
  RunAll(p.unpack, recv.data(), out);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status MpiReshard::State::RunAlltoallw(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats) {
  MPI_Request req;
  // MPI reads the input and writes the output through the datatypes; the
  // local copies touch other bytes of the output meanwhile.
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Ialltoallw(in, s.send_counts.data(), s.send_displs.data(), s.send_types.data(), out,
                                                 s.recv_counts.data(), s.recv_displs.data(), s.recv_types.data(), comm,
                                                 &req),
                                  "MPI_Ialltoallw"));
  RunAll(s.program.local, in, out);
  RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait (all-to-all-w)"));
  for (size_t r = 0; r < s.send_counts.size(); ++r) {
    int send_size = 0, recv_size = 0;
    MPI_Type_size(s.send_types[r], &send_size);
    MPI_Type_size(s.recv_types[r], &recv_size);
    stats.step_bytes_sent.back() += int64_t{s.send_counts[r]} * send_size;
    stats.step_bytes_received.back() += int64_t{s.recv_counts[r]} * recv_size;
  }
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status MpiReshard::State::RunPointToPoint(const StepRun& s, const std::byte* in, std::byte* out, MpiRunStats& stats) {
  const DeviceProgram& p = s.program;
  const int64_t chunk = options.max_message_bytes;
  // Receives first, every chunk of every message. Chunks of one message go in
  // order on one tag: MPI never lets messages of one (source, tag) overtake,
  // so when a message's last chunk has arrived, its earlier chunks have been
  // matched. Only the last chunks are waited on together (MPI_Waitsome scans
  // every request it is given each time: with every chunk's request, time
  // grew with the square of the chunks); the earlier ones are then completed
  // message by message.
  const size_t messages = s.recv_rank.size();
  std::vector<MPI_Request> last(messages, MPI_REQUEST_NULL), earlier;
  std::vector<size_t> earlier_begin(messages + 1, 0);  // message m's earlier chunks: [begin[m], begin[m + 1])
  int64_t unpacked = 0;
  for (size_t m = 0; m < messages; ++m) {
    for (int64_t off = 0; off < p.recv_count[m]; off += chunk) {
      const int len = static_cast<int>(std::min(chunk, p.recv_count[m] - off));
      if (last[m] != MPI_REQUEST_NULL) earlier.push_back(last[m]);
      RESHARD_RETURN_IF_ERROR(MpiCall(
          MPI_Irecv(recv.data() + p.recv_offset[m] + off, len, MPI_BYTE, s.recv_rank[m], 0, comm, &last[m]), "MPI_Irecv"));
      stats.step_bytes_received.back() += len;
    }
    earlier_begin[m + 1] = earlier.size();
    if (p.recv_count[m] == 0) {  // nothing to wait for
      RunCopies(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data(), out);
      ++unpacked;
    }
  }
  std::vector<int> done(messages);
  // Unpacks every message whose chunks have all arrived; waits for at least one when `block`.
  auto drain = [&](bool block) -> Status {
    int count = 0;
    if (block)
      RESHARD_RETURN_IF_ERROR(MpiCall(
          MPI_Waitsome(static_cast<int>(messages), last.data(), &count, done.data(), MPI_STATUSES_IGNORE), "MPI_Waitsome"));
    else
      RESHARD_RETURN_IF_ERROR(MpiCall(
          MPI_Testsome(static_cast<int>(messages), last.data(), &count, done.data(), MPI_STATUSES_IGNORE), "MPI_Testsome"));
    for (int k = 0; k < count && count != MPI_UNDEFINED; ++k) {
      const size_t m = static_cast<size_t>(done[static_cast<size_t>(k)]);
      const size_t b = earlier_begin[m];
      RESHARD_RETURN_IF_ERROR(MpiCall(MPI_Waitall(static_cast<int>(earlier_begin[m + 1] - b), earlier.data() + b,
                                                  MPI_STATUSES_IGNORE),
                                      "MPI_Waitall (chunks)"));
      RunCopies(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data(), out);
      ++unpacked;
    }
    return Status::Ok();
  };
  // Sends in flight are bounded: OpenMPI's progress engine walks its list of
  // pending sends on every call, so 80K chunks posted at once took time
  // quadratic in their number (20 s). At most one chunk per message, or 256,
  // whichever is more, is in flight; the oldest half is completed first.
  const size_t max_in_flight = std::max<size_t>(256, s.send_rank.size());
  std::vector<MPI_Request> sends;
  size_t completed = 0;  // sends [0, completed) are done
  for (size_t m : s.send_order) {
    RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, send.data());
    for (int64_t off = 0; off < p.send_count[m]; off += chunk) {
      if (sends.size() - completed >= max_in_flight) {
        const size_t half = max_in_flight / 2;
        RESHARD_RETURN_IF_ERROR(MpiCall(
            MPI_Waitall(static_cast<int>(half), sends.data() + completed, MPI_STATUSES_IGNORE), "MPI_Waitall (sends)"));
        completed += half;
      }
      const int len = static_cast<int>(std::min(chunk, p.send_count[m] - off));
      MPI_Request r;
      RESHARD_RETURN_IF_ERROR(MpiCall(
          MPI_Isend(send.data() + p.send_offset[m] + off, len, MPI_BYTE, s.send_rank[m], 0, comm, &r), "MPI_Isend"));
      sends.push_back(r);
      ++stats.messages_sent;
      stats.step_bytes_sent.back() += len;
    }
    if (messages > 0) RESHARD_RETURN_IF_ERROR(drain(false));
  }
  RunAll(p.local, in, out);
  while (unpacked < static_cast<int64_t>(s.recv_rank.size())) RESHARD_RETURN_IF_ERROR(drain(true));
  return MpiCall(MPI_Waitall(static_cast<int>(sends.size() - completed), sends.data() + completed, MPI_STATUSES_IGNORE),
                 "MPI_Waitall (sends)");
}

Result<MpiRunStats> MpiReshard::Execute(std::span<const std::byte> source, std::span<std::byte> target) {
  State& st = *state_;
  Status sizes = Status::Ok();
  if (static_cast<int64_t>(source.size()) != st.source_bytes)
    sizes = Status::InvalidArgument(
        fmt::format("its source buffer holds {} bytes; its part of the source layout needs {}", source.size(), st.source_bytes));
  else if (static_cast<int64_t>(target.size()) != st.target_bytes)
    sizes = Status::InvalidArgument(
        fmt::format("its target buffer holds {} bytes; its part of the target layout needs {}", target.size(), st.target_bytes));
  RESHARD_RETURN_IF_ERROR(Agree(st.comm, st.rank, st.size, sizes));
  const auto start = std::chrono::steady_clock::now();
  MpiRunStats stats;
  const std::byte* in = source.data();
  for (size_t i = 0; i < st.steps.size(); ++i) {
    const StepRun& s = st.steps[i];
    std::byte* out = i + 1 == st.steps.size() ? target.data() : st.between[i % 2].data();
    stats.step_bytes_sent.push_back(0);
    stats.step_bytes_received.push_back(0);
    // A failed MPI call fails the whole job under MPI's default handler; here
    // it is returned, and the others may wait on this rank: MPI_Abort is the
    // caller's call to make.
    RESHARD_RETURN_IF_ERROR(s.p2p         ? st.RunPointToPoint(s, in, out, stats)
                            : s.datatypes ? st.RunAlltoallw(s, in, out, stats)
                            : s.grouped   ? st.RunGrouped(s, in, out, stats)
                                          : st.RunAlltoallv(s, in, out, stats, st.comm));
    stats.bytes_moved += s.program.unpack.bytes + s.program.local.bytes;
    stats.bytes_sent += s.program.send_bytes;
    stats.bytes_received += s.program.recv_bytes;
    in = out;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

Status MpiTransform(MPI_Comm comm, const Layout& source, const Layout& target, std::span<const std::byte> source_buffer,
                    std::span<std::byte> target_buffer, const MpiOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(MpiReshard r, MpiReshard::Create(comm, source, target, options));
  return r.Execute(source_buffer, target_buffer).status();
}

}  // namespace reshard
