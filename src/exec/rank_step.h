// The step runner's private state (rank_reshard.h): one step as one rank
// runs it (StepRun), the state a RankReshard keeps, and the copy loops its
// transports share. Choosing each step's transport lives in
// rank_step_choice.cc, running it in rank_step_run.cc, creation and the
// run loop in rank_reshard.cc.
#ifndef RESHARD_EXEC_RANK_STEP_H_
#define RESHARD_EXEC_RANK_STEP_H_

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "exec/copy_kernel.h"
#include "exec/reduce_kernel.h"
#include "exec/staging_cache.h"
#include "reshard/comm.h"
#include "reshard/device_program.h"
#include "reshard/host_buffer.h"
#include "reshard/mesh.h"
#include "reshard/rank_reshard.h"

namespace reshard {

// The copy loops of the runner's transports (rank_step_run.cc), in a
// namespace of their own: generic names, used only by the runner.
namespace rank_step {

// Copies ops [begin, end) of `p`. `together`: the bytes the whole pass
// copies (a step's packing, unpacking or local copies), so that a pass well
// beyond the caches writes with streaming stores even where each box is
// small (RunCopy), as the in-process executor's passes do.
void RunCopies(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst, int64_t together);
// Unpacks ops [begin, end) of `p` (one message's boxes) a row of each box in
// turn (RunInterleaved): a block-cyclic message's boxes are column strips of
// the same output rows, which box after box would walk once per box.
void Unpack(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst, int64_t together);
// Every op of `p`, as one pass.
void RunAll(const CopyProgram& p, const std::byte* src, std::byte* dst);
// Stages every message: each distinct box once (DeviceProgram::pack_owner).
void PackAll(const DeviceProgram& p, const std::byte* in, std::byte* send);

}  // namespace rank_step

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
      // (Leaked on purpose: a pending receive may still write it; an empty
      // one it cannot, as where a rank's wrong buffer size ends a run of
      // box messages before anything moved.)
      if (failed && b->buffer.size() > 0)
        (void)new HostBuffer(std::move(b->buffer));
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
  // Rank r's mesh position (-1: not a device of the program's mesh).
  int64_t PositionOfRank(const MeshPositions& positions, int r) const;
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
      rank_step::RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, at - p.send_offset[m], p.send_bytes);
      if (p.send_count[m] < s.chunk)
        std::memset(at + p.send_count[m], 0, static_cast<size_t>(s.chunk - p.send_count[m]));
    }
    for (int64_t at : s.idle_base) std::memset(send.data() + at, 0, static_cast<size_t>(s.chunk));
  }
  // `end`: kOwnCopies only for a run's last step, where the caller joins (RankOptions::joined_by_caller).
  Status RunBoxes(const StepRun& s, const std::byte* in, std::byte* out, Comm::BoxesEnd end, RankRunStats& stats);
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

}  // namespace reshard

#endif  // RESHARD_EXEC_RANK_STEP_H_
