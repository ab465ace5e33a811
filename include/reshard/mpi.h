// MpiReshard: a persistent reshard over MPI. Device d of the layouts is rank
// d of the communicator; each rank passes its own local source buffer and
// receives its own local target buffer (as COSTA's transform).
//
//   reshard::MpiReshard r = *reshard::MpiReshard::Create(MPI_COMM_WORLD, source, target);
//   r.Execute(my_source_bytes, my_target_bytes);   // as often as needed
//
// Creation is collective over the communicator. Each rank builds only its own
// part of the plan (Exchange::DevicePlan: cost proportional to its peers),
// never the whole device-by-device plan, and compiles it once into a flat
// program (device_program.h); Execute runs that program. By default the plan
// is the one-step minimal exchange; MpiOptions::planner runs the collective
// planner instead (every rank plans the same way, deterministically) and
// executes each step of its plan in turn.
//
// Transports, chosen per step when the plan is created, the same on every rank
// (one small all-reduce decides):
//   kAlltoallv      pack every message, one MPI_Alltoallv, unpack: best for
//                   many small messages, where the library's algorithms win;
//   kPointToPoint   receives posted first, then each message packed and sent
//                   at once, partners staggered (rank + 1, rank + 2, ...),
//                   and each message unpacked as it arrives, so packing,
//                   transfer and unpacking overlap;
//   kDatatypes      no staging: every message is an MPI derived datatype
//                   (hvectors of the copies' boxes, one struct per message)
//                   over the input and the output buffer, and one
//                   MPI_Ialltoallw moves them; MPI's own transport does the
//                   packing, so a shared-memory run copies each byte twice
//                   instead of four times. Only for steps where every
//                   message's copies are its bytes in order (a message that
//                   is one box, as in tiled layouts); other steps (block-
//                   cyclic ones) run MPI_Alltoallv;
//   kAuto           derived datatypes wherever every message's copies are
//                   its bytes in order (they were the fastest transport in
//                   every case measured, docs/benchmarks.md); otherwise
//                   point-to-point where the step is sparse (the busiest rank
//                   talks to at most half the ranks) or its messages are
//                   large (1 MiB or more on average), else MPI_Alltoallv.
// A structured step of a planned plan (an all-to-all or all-gather over mesh
// axes) whose messages all stay inside its groups runs as a collective over
// one sub-communicator per group (MPI_Comm_split at creation, members ranked
// as the plan orders them): MPI_Ialltoallv, or MPI_Iallgatherv straight from
// the input buffer when every message is the sender's whole input. Only
// kPointToPoint, or a message too large for an int count, overrides this.
// Steps run as their minimal exchange (device_program.h): no padding is sent,
// so a group collective's counts may differ by member (the v-forms).
// Messages larger than MpiOptions::max_message_bytes (default 2^31 - 1, the
// most an MPI int count of bytes can say; OpenMPI 4.1 has no large-count
// calls) are sent as several point-to-point chunks; a step with such a
// message runs point-to-point whatever the transport asked.
//
// Errors are values, the same on every rank, never a hang: layouts or
// options that differ between ranks, a layout device outside the
// communicator, or (at Execute) a buffer of the wrong size on any rank is
// InvalidArgument on every rank, naming the rank. An MPI call that fails is
// Internal. The object uses a duplicate of the communicator, so its messages
// never match the caller's.
//
// Not thread-safe: one Execute at a time per object. MPI must be initialized
// (any thread level) before Create and finalized after the object is gone.
#ifndef RESHARD_MPI_H_
#define RESHARD_MPI_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/device_program.h"
#include "reshard/layout.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

enum class MpiTransport { kAuto, kAlltoallv, kPointToPoint, kDatatypes };
std::string_view MpiTransportName(MpiTransport t);  // "auto", "alltoallv", "p2p", "alltoallw"

struct MpiOptions {
  MpiTransport transport = MpiTransport::kAuto;
  int64_t max_message_bytes = (int64_t{1} << 31) - 1;
  // This rank's buffer formats: each rank may pass its own leading
  // dimension, but every rank the same order.
  BufferFormat source_format = {}, target_format = {};
  // Unset: the one-step minimal exchange. Set: PlanReshard with these options.
  std::optional<PlannerOptions> planner = std::nullopt;
};

// This rank's figures for one Execute.
struct MpiRunStats {
  int64_t bytes_moved = 0;  // written into this rank's target and intermediate buffers
  int64_t bytes_sent = 0, bytes_received = 0;
  int64_t messages_sent = 0;  // chunks counted
  double seconds = 0;         // this rank's wall time
  // Per step: the bytes this rank handed MPI to carry to and from other
  // ranks (the counts and datatype sizes of its calls), which tests check
  // against the plan's send_bytes / recv_bytes.
  std::vector<int64_t> step_bytes_sent = {}, step_bytes_received = {};
};

class MpiReshard {
 public:
  // Collective over `comm`. Every rank passes equal layouts and options
  // (buffer formats excepted).
  static Result<MpiReshard> Create(MPI_Comm comm, const Layout& source, const Layout& target,
                                   const MpiOptions& options = {});
  // Runs a given plan (every rank passes the same plan).
  static Result<MpiReshard> Create(MPI_Comm comm, const CollectivePlan& plan, const MpiOptions& options = {});

  MpiReshard(MpiReshard&&) noexcept;
  MpiReshard& operator=(MpiReshard&&) noexcept;
  ~MpiReshard();

  // This rank's buffer sizes in bytes (0 where it holds nothing).
  int64_t source_bytes() const;
  int64_t target_bytes() const;
  // The transport each step runs with, the same on every rank: "alltoallv",
  // "p2p", "alltoallv over groups" or "allgatherv over groups".
  std::vector<std::string> step_transports() const;
  // The plan's step ops, "exchange" for the default one-step plan.
  const std::vector<std::string>& step_ops() const;

  // Collective. REQUIRES: source.size() == source_bytes(), target.size() ==
  // target_bytes() (checked on every rank first; a wrong size anywhere is
  // InvalidArgument everywhere and nothing moves).
  Result<MpiRunStats> Execute(std::span<const std::byte> source, std::span<std::byte> target);

 private:
  struct State;
  explicit MpiReshard(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// One-shot form: Create, then Execute once.
Status MpiTransform(MPI_Comm comm, const Layout& source, const Layout& target, std::span<const std::byte> source_buffer,
                    std::span<std::byte> target_buffer, const MpiOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_MPI_H_
