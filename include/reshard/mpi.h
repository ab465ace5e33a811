// MpiReshard: a persistent reshard over MPI. Device d of the layouts is rank
// d of the communicator; each rank passes its own local source buffer and
// receives its own local target buffer (as COSTA's transform).
//
//   reshard::MpiReshard r = *reshard::MpiReshard::Create(MPI_COMM_WORLD, source, target);
//   r.Execute(my_source_bytes, my_target_bytes);   // as often as needed
//
// A thin face: the step runner (RankReshard, rank_reshard.h) over the MPI
// Comm (mpi_comm.h, a duplicate of `comm`, so its messages never match the
// caller's). Everything else is the runner's and documented there: creation
// is collective; each rank builds and compiles only its own part of the plan
// (cost proportional to its peers); by default the one-step minimal
// exchange, with MpiOptions::planner the collective planner's plan, step by
// step; transports per step (kAuto, kAlltoallv = MPI_Ialltoallv,
// kPointToPoint = staggered MPI_Isend/MPI_Irecv, kDatatypes = derived
// datatypes and one MPI_Ialltoallw, no staging); structured steps over one
// sub-communicator per mesh group (MPI_Ialltoallv, MPI_Iallgather for even
// shards, MPI_Iallgatherv);
// messages above max_message_bytes (default 2^31 - 1, the most an MPI int
// count says) sent as point-to-point chunks.
//
// Errors are values, the same on every rank, never a hang: layouts or
// options that differ between ranks, a layout device outside the
// communicator, or (at Execute) a buffer of the wrong size on any rank is
// InvalidArgument on every rank, naming the rank. An MPI call that fails is
// Internal.
//
// Not thread-safe: one Execute at a time per object. MPI must be initialized
// (any thread level) before Create and finalized after the object is gone.
#ifndef RESHARD_MPI_H_
#define RESHARD_MPI_H_

#include <mpi.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/layout.h"
#include "reshard/mpi_comm.h"
#include "reshard/rank_reshard.h"
#include "reshard/status.h"

namespace reshard {

// The runner's names, as the MPI backend has always called them.
using MpiTransport = StepTransport;
using MpiOptions = RankOptions;
using MpiRunStats = RankRunStats;
inline std::string_view MpiTransportName(MpiTransport t) { return StepTransportName(t); }

class MpiReshard {
 public:
  // Collective over `comm`. Every rank passes equal layouts and options
  // (buffer formats excepted).
  static Result<MpiReshard> Create(MPI_Comm comm, const Layout& source, const Layout& target,
                                   const MpiOptions& options = {});
  // Runs a given plan (every rank passes the same plan).
  static Result<MpiReshard> Create(MPI_Comm comm, const CollectivePlan& plan, const MpiOptions& options = {});

  // This rank's buffer sizes in bytes (0 where it holds nothing).
  int64_t source_bytes() const { return runner_.source_bytes(); }
  int64_t target_bytes() const { return runner_.target_bytes(); }
  // The transport each step runs with, the same on every rank: "alltoallv",
  // "p2p", "alltoallw", "alltoallv over groups", "allgather over groups"
  // (equal chunks), "allgatherv over groups" or "alltoall over groups"
  // (RankReshard::step_transports).
  std::vector<std::string> step_transports() const { return runner_.step_transports(); }
  // The plan's step ops, "exchange" for the default one-step plan.
  const std::vector<std::string>& step_ops() const { return runner_.step_ops(); }

  // Collective. REQUIRES: source.size() == source_bytes(), target.size() ==
  // target_bytes() (checked on every rank first; a wrong size anywhere is
  // InvalidArgument everywhere and nothing moves).
  Result<MpiRunStats> Execute(std::span<const std::byte> source, std::span<std::byte> target) {
    return runner_.Execute(source, target);
  }

 private:
  explicit MpiReshard(RankReshard runner) : runner_(std::move(runner)) {}
  RankReshard runner_;
};

// One-shot form: Create, then Execute once.
Status MpiTransform(MPI_Comm comm, const Layout& source, const Layout& target, std::span<const std::byte> source_buffer,
                    std::span<std::byte> target_buffer, const MpiOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_MPI_H_
