// RankThreads: a compiled program's devices as persistent ranks, each
// running its part through the step runner (RankReshard over threads as
// ranks, thread_comm.h): the in-process executor's Transport::kRanks. Each
// rank is a fiber (fibers.h), the fibers run over a few threads (the
// copiers' count), the first of them the caller's, in each Start and Run:
// ranks hand over without the kernel's scheduler where they wait, and never
// more copy at once than there are threads.
//
// Started once for a program, the fibers, their comms and their runners
// (each rank's staging, sub-groups and box messages, and the direct copies
// its box messages pair into) stay, and every later Run only hands each
// rank its buffers and waits: so a run measures what MPI's persistent
// reshard runs (MpiReshard::Execute), not the creation of N ranks and N
// runners. Creation is every rank's RankReshard::Create: its errors are
// agreed across ranks and returned by Start.
//
// One fiber and one runner per device: at most MaxRankDevices()
// (executor.h) devices; a stack or thread the system cannot give is Unavailable before
// any rank reaches a collective. A Run that fails leaves the object unusable (the runners run
// no more, rank_reshard.h): the caller starts a new one.
//
// REQUIRES: the program outlives every Run (and Start); idle ranks do
// not read it. Not thread-safe: one Run at a time.
#ifndef RESHARD_SRC_EXEC_RANK_THREADS_H_
#define RESHARD_SRC_EXEC_RANK_THREADS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reshard/device_program.h"
#include "reshard/rank_reshard.h"
#include "reshard/status.h"

namespace reshard {

class RankThreads {
 public:
  // The hook every rank calls after each program step (the checker's): once
  // every rank's output of the step is in place, rank 0 calls `hook` with
  // them all, and no rank goes on until it returns. It runs in rank 0's
  // fiber, on the thread that called Run (fibers.h): it may block that
  // thread (the checker runs a thread pool), but must not wait on a rank
  // nor run another RankThreads.
  using Hook = std::function<void(size_t step, std::span<const std::span<const std::byte>> outputs)>;

  // The ranks' comms (MakeThreadComms): how long a rank waits at a barrier
  // before its group breaks, how many ranks copy at once (and the threads
  // the ranks run on; 0: the hardware's count), and whether box messages
  // come first (false: the runner chooses as over MPI).
  struct CommSettings {
    double timeout_seconds = 600;
    int copiers = 0;
    bool boxes_copy_once = true;
  };

  // About what each rank holds beyond its buffers and staging: its runner,
  // its comm, its fiber and the stack pages it touches (5.8 KiB measured:
  // a transpose's peak memory over 65,536 and 262,144 devices against the
  // pool's).
  static constexpr int64_t kRankBytes = int64_t{8} << 10;

  // Starts one fiber per device of `program`, over `comms.copiers` threads
  // (0: the hardware's count), and creates every rank's runner with
  // `options`.
  static Result<std::unique_ptr<RankThreads>> Start(const PlanProgram& program, const RankOptions& options,
                                                    Hook hook, const CommSettings& comms);
  ~RankThreads();  // stops every rank and joins the threads
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Every rank executes once, rank k with sources[k] and targets[k]; the
  // ranks' figures, indexed like the program's devices, or the first error
  // a rank met: the one every rank agreed on, or, where one rank failed
  // alone (the others' waits then end at once: ThreadCommsBreaker), its
  // own; of two that failed alone at once, either.
  Result<std::vector<RankRunStats>> Run(std::span<const std::span<const std::byte>> sources,
                                        std::span<const std::span<std::byte>> targets);

  // The transport of each program step (RankReshard::step_transports).
  const std::vector<std::string>& transports() const;
  bool broken() const;  // a Run failed: start a new one

 private:
  struct Shared;
  explicit RankThreads(std::unique_ptr<Shared> shared);
  std::unique_ptr<Shared> shared_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_RANK_THREADS_H_
