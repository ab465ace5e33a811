// RankReshard: one rank's part of a persistent reshard, run over any Comm
// (comm.h). The step runner every backend shares: MPI (MpiReshard, mpi.h, a
// thin face over this class) and the in-process executor's
// Transport::kRanks (threads as ranks, thread_comm.h). Transport choice,
// grouping onto sub-groups, chunking and error agreement are written here
// once.
//
//   RankReshard r = *RankReshard::Create(std::move(comm), source, target);
//   r.Execute(my_source_bytes, my_target_bytes);   // as often as needed
//
// Creation is collective over the Comm. With layouts or a plan, device d of
// the layouts is rank d, and each rank compiles only its own part (cost
// proportional to its peers); from a compiled PlanProgram (the in-process
// face), rank k runs program.devices()[k]'s part. By default the plan is the
// one-step minimal exchange (from partial sums, the one-step reducing
// exchange); RankOptions::planner runs the collective
// planner instead (every rank plans the same way) and runs each of its steps
// in turn.
//
// Transports, chosen per step at creation, the same on every rank:
//   kAlltoallv      pack every message, one all-to-all-v, unpack: best for
//                   many small messages, where the backend's algorithms win;
//   kPointToPoint   receives posted first, then each message packed and sent
//                   at once, partners staggered (rank + 1, rank + 2, ...),
//                   and each message unpacked as it arrives;
//   kDatatypes      no staging: where the backend has box messages
//                   (Comm::has_boxes: MPI derived datatypes and
//                   MPI_Ialltoallw; threads as ranks, copies straight from
//                   the senders' inputs) and every message's copies are its bytes
//                   in order, or its boxes interleave in staged order with
//                   runs of 64 bytes or more on average (16 where box
//                   messages copy once: threads) (block-cyclic
//                   layouts: the backend lists the runs); other steps run
//                   the all-to-all-v;
//   kAuto           a structured step over its groups (below); else box
//                   messages wherever they apply; else point-to-point where
//                   the step is sparse (the busiest rank talks to at most
//                   half the ranks) or its messages are large (1 MiB or more
//                   on average), else the all-to-all-v. Where the
//                   backend's box messages copy once (Comm::boxes_copy_once:
//                   threads as ranks), box messages come first, and the
//                   groups only where they do not apply (not with
//                   priced_chunks, which asks for the group collectives).
// A structured step (an all-to-all or all-gather over mesh groups) whose
// messages all stay inside its groups runs as a collective over one
// sub-group per mesh group (Comm::Split, members ranked as Mesh::MemberIndex
// orders them): an all-to-all-v, or an all-gather-v straight from the input
// buffer when every message is the sender's whole input (and the gathered
// buffer fits one call; the equal-chunk all-gather where every input is one
// size). With RankOptions::priced_chunks, the equal-chunk all-to-all and
// all-gather instead, every message padded (with zeros) to the chunk the
// plan priced, where that chunk fits one message. kPointToPoint, kDatatypes,
// or a message too large for one call, override this.
// A reducing step (from partial sums, device_program.h) runs as an
// all-to-all-v, over its groups' sub-groups where it is a structured step
// (a reduce-scatter, an all-reduce's halves, parts moved alike) whose
// messages stay inside them (only its group members take part in each call), else over the
// whole Comm (point-to-point where asked or where a message needs chunks),
// never as box messages: each rank combines its own part and what it
// received in part order once everything has arrived, so every transport
// gives the same bits (reduce_kernel.h).
// Steps run as their minimal exchange (device_program.h): no padding is sent
// but with RankOptions::priced_chunks.
// Messages larger than RankOptions::max_message_bytes (or the backend's
// Comm::max_count) are sent as several point-to-point chunks.
//
// Errors are values, the same on every rank: layouts or options that differ
// between ranks, a layout device outside the group, staging that cannot be
// allocated, or (at Execute) a buffer of the wrong size on any rank is an
// error on every rank, naming the rank, and nothing moves. A backend call
// that fails midway is Internal on the rank it failed on; the other ranks
// may then wait for it (MPI: aborting the job is the caller's call; threads
// as ranks: their timeout), and the object runs no more (its buffers, into
// which messages may still be in flight, are never reused).
//
// Staging outlives the object: its send, receive and intermediate buffers of
// 2 MiB or more go to a process-wide cache when it is destroyed (the largest
// four are kept), and the next object takes one of at most twice its need
// from there, so a reshard created for every call does not pay fresh memory
// every call (COSTA keeps its staging in a process-wide context the same
// way). FreeCachedStaging() releases them.
//
// Not thread-safe: one Execute at a time per object.
#ifndef RESHARD_RANK_RESHARD_H_
#define RESHARD_RANK_RESHARD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/comm.h"
#include "reshard/device_program.h"
#include "reshard/layout.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

enum class StepTransport { kAuto, kAlltoallv, kPointToPoint, kDatatypes };
std::string_view StepTransportName(StepTransport t);  // "auto", "alltoallv", "p2p", "alltoallw"

struct RankOptions {
  StepTransport transport = StepTransport::kAuto;
  int64_t max_message_bytes = (int64_t{1} << 31) - 1;
  // This rank's buffer formats: each rank may pass its own leading
  // dimension, but every rank the same order. Ignored by the PlanProgram
  // form (the program was compiled for its formats).
  BufferFormat source_format = {}, target_format = {};
  // Unset: the one-step minimal exchange. Set: PlanReshard with these options.
  std::optional<PlannerOptions> planner = std::nullopt;
  // Planned all-gathers and all-to-alls over mesh groups as the equal-chunk
  // collectives (Comm::StartAllgather, StartAlltoall), every message padded
  // to the chunk the plan priced (StepProgram::chunk_bytes): what XLA and
  // NCCL run, moving the plan's send_bytes and recv_bytes byte for byte.
  // Planned reduce-scatters over mesh groups likewise as the backend's
  // (Comm::StartReduceScatter), where each member's output takes one whole
  // contribution from every member (even shards; uneven ones padded): the
  // element arithmetic is the reduce kernel's, but the backend picks the
  // order of the combinations, so float sums may round otherwise than the
  // part order the other paths keep (reduce_kernel.h). Planned all-reduces
  // over mesh groups as one backend all-reduce (Comm::StartAllReduce) on
  // the ring's priced buffer (members times StepProgram::all_reduce_chunk,
  // the input padded with the op's identity), where each rank's buffers
  // before and after hold the same boxes in one tight format; the ring's
  // 2 (k - 1) chunks are what it counts as moved.
  // Off: exact counts (the v-forms; an all-gather of even shards is the
  // equal-chunk one either way), which move no padding and, over MPI on
  // this machine, run faster (docs/execution.md, "Transports").
  bool priced_chunks = false;
  // Set by a caller that runs every rank itself (threads as ranks:
  // RankThreads): it starts every rank's Execute together and waits until
  // all have returned before it reads any output or reuses any buffer (its
  // after_step hook, likewise, waits for every rank before it reads one),
  // and a rank's error ends the others' waits (ThreadCommsBreaker). Then
  // Execute does not agree on the buffer sizes: a wrong one is
  // InvalidArgument on its own rank, whose error ends the others' run, not
  // an error every rank returns before anything moved. And a run's last box
  // exchange ends for a rank once it has made its share of
  // the copies (Comm::BoxesEnd::kOwnCopies): two waits a run fewer, each
  // over thousands of ranks a switch to every rank's cold stack.
  // InvalidArgument on a comm whose ranks are not in this process
  // (Comm::ranks_in_process: MPI's). A caller that sets it
  // without that join or that breaker gets outputs read too early, or a
  // wrong size waited for until the comms' timeout.
  bool joined_by_caller = false;
};

// This rank's figures for one Execute.
struct RankRunStats {
  int64_t bytes_moved = 0;  // written into this rank's target and intermediate buffers
  int64_t bytes_sent = 0, bytes_received = 0;  // to and from other ranks, as the backend carried them
  int64_t messages_sent = 0;  // chunks counted
  int64_t peak_bytes = 0;     // most bytes this rank needs at once: its buffers, staging and intermediates
  double seconds = 0;         // this rank's wall time
  // Per plan step (an all-reduce's two program steps together,
  // StepProgram::plan_step): the bytes this rank handed the backend to carry to and from
  // other ranks (the counts of its calls), which tests check against the
  // plan's send_bytes / recv_bytes.
  std::vector<int64_t> step_bytes_sent = {}, step_bytes_received = {};
};

// Frees the staging buffers that destroyed RankReshard objects left for the
// next ones. Thread-safe.
void FreeCachedStaging();

class RankReshard {
 public:
  // Collective over `comm`. Every rank passes equal layouts and options
  // (buffer formats excepted). Device d is rank d.
  static Result<RankReshard> Create(std::unique_ptr<Comm> comm, const Layout& source, const Layout& target,
                                    const RankOptions& options = {});
  // Runs a given plan (every rank passes the same plan). Device d is rank d.
  static Result<RankReshard> Create(std::unique_ptr<Comm> comm, const CollectivePlan& plan,
                                    const RankOptions& options = {});
  // Runs rank k's part of a program compiled for every device (or for rank
  // k's device alone): rank k is program.devices()[k]; InvalidArgument
  // unless comm->size() == program.devices().size(), or where `program`
  // lacks the staged copies (CompileOptions::copies). REQUIRES: `program`
  // outlives the result.
  static Result<RankReshard> Create(std::unique_ptr<Comm> comm, const PlanProgram& program,
                                    const RankOptions& options = {});

  RankReshard(RankReshard&&) noexcept;
  RankReshard& operator=(RankReshard&&) noexcept;
  ~RankReshard();

  // This rank's buffer sizes in bytes (0 where it holds nothing).
  int64_t source_bytes() const;
  int64_t target_bytes() const;
  // The transport each program step runs with (an all-reduce runs as two,
  // device_program.h), the same on every rank: "alltoallv",
  // "p2p", "alltoallw", "alltoallv over groups", "allgather over groups" (equal
  // chunks: even shards, or padded with priced_chunks), "allgatherv over
  // groups" or "alltoall over groups" (padded equal chunks, priced_chunks),
  // "reduce_scatter over groups" (the backend's, priced_chunks),
  // "allreduce over groups" (the backend's, priced_chunks with no transport
  // forced: an all-reduce's first program step, its second then "in the
  // allreduce").
  std::vector<std::string> step_transports() const;
  // The plan's step ops, "exchange" for the default one-step plan.
  const std::vector<std::string>& step_ops() const;
  Comm& comm();

  // Called on every rank after each program step (PlanProgram::steps()) with
  // this rank's output buffer of that step, but the first of an all-reduce
  // run whole by the backend (priced_chunks), whose output is never
  // written; an error from it on any rank stops the run on every rank.
  using AfterStep = std::function<Status(size_t step, std::span<const std::byte> output)>;
  // Collective. REQUIRES: source.size() == source_bytes(), target.size() ==
  // target_bytes() (checked on every rank first; a wrong size anywhere is
  // InvalidArgument everywhere and nothing moves).
  Result<RankRunStats> Execute(std::span<const std::byte> source, std::span<std::byte> target,
                               const AfterStep& after_step = {});

 private:
  struct State;
  explicit RankReshard(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace reshard

#endif  // RESHARD_RANK_RESHARD_H_
