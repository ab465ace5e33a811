// RankThreads (rank_threads.h): persistent ranks as fibers (fibers.h), each
// looping over runs of its RankReshard until stopped.
#include "exec/rank_threads.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "exec/fibers.h"
#include "reshard/executor.h"
#include "reshard/thread_comm.h"

namespace reshard {

struct RankThreads::Shared {
  const PlanProgram* program = nullptr;
  RankOptions options;
  Hook hook;
  size_t n = 0;
  std::vector<std::unique_ptr<Comm>> comms;  // each moved into its rank's runner
  // Breaks every group of the comms (ThreadCommsBreaker): a rank that fails
  // alone, its error not agreed (an exception, a failed call), ends the
  // others' waits for it at once, not at their timeout.
  std::function<void(std::string_view)> breaker;

  // The run asked for and each rank's answer, without a lock: over
  // thousands of ranks, each taking one mutex to read its job and again to
  // answer made the ranks' threads queue on it. The caller writes the
  // buffers and clears the results, then counts the job (release); a rank
  // reads them once it sees the count move (acquire), writes its own result
  // and counts its answer; the caller reads the results once all have.
  std::condition_variable cv;  // notified (NotifyAll) at a new job, a stop and the last answer
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> job{0};     // runs asked for so far
  std::atomic<size_t> answered{0};  // ranks done with creation, or with the run under way
  std::vector<std::optional<Result<RankRunStats>>> results;
  std::span<const std::span<const std::byte>> sources;
  std::span<const std::span<std::byte>> targets;
  bool broken = false;  // the caller's alone
  // Under `mu`: the first error any rank met, in the creation or the run
  // under way: what every rank agreed on, or the one that broke the others'
  // waits.
  std::mutex mu;
  Status first_failure = Status::Ok();
  std::vector<std::span<const std::byte>> outputs;  // the hook's: each rank's output of the step
  std::vector<std::string> transports;              // rank 0's, written before it answers its creation
  // Last: its ranks use all of the above until they end (~Shared).
  std::unique_ptr<Fibers> fibers;

  // However it goes (a failed start, an exception), the ranks are told to
  // stop and end before what they use goes.
  ~Shared() {
    if (fibers) StopAndJoin();
  }

  // After this rank's result is written.
  void Answer() {
    if (answered.fetch_add(1, std::memory_order_acq_rel) + 1 == n) NotifyAll(cv);
  }

  // Rank k failed with `status`: kept if it is the first, then every other
  // rank's waits end (with an error naming it) instead of at their timeout.
  // Harmless where every rank failed alike (an agreed error). REQUIRES:
  // `mu` not held.
  void Failed(size_t k, const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (first_failure.ok()) first_failure = status;
    }
    breaker(fmt::format("rank {} failed: {}", k, status.message()));
  }

  // Rank k's whole life (a fiber's): create its runner, then run each job
  // asked for until stopped.
  void Rank(size_t k) {
    std::optional<RankReshard> runner;
    Status status = Status::Ok();
    try {
      Result<RankReshard> r = RankReshard::Create(std::move(comms[k]), *program, options);
      status = r.status();
      if (r.ok()) runner.emplace(std::move(r).value());
    } catch (const std::exception& e) {  // e.g. bad_alloc: never out of a fiber
      status = Status::Internal(fmt::format("rank {}: {}", k, e.what()));
    }
    if (!status.ok()) Failed(k, status);
    if (k == 0 && runner) transports = runner->step_transports();  // the same on every rank
    Answer();
    RankReshard::AfterStep after_step;
    if (hook && runner) {
      // Every rank's output is in place before the hook reads them all, and
      // the hook is done before any rank goes on to overwrite one.
      after_step = [this, k, &runner](size_t step, std::span<const std::byte> output) -> Status {
        outputs[k] = output;
        RESHARD_RETURN_IF_ERROR(runner->comm().Barrier());
        if (k == 0) hook(step, outputs);
        return runner->comm().Barrier();
      };
    }
    uint64_t seen = 0;
    for (;;) {
      // (Woken by NotifyAll: a fiber's pause ends at any notification.)
      while (!stop.load(std::memory_order_acquire) && job.load(std::memory_order_acquire) == seen)
        PauseUntil(Fibers::Clock::time_point::max());
      if (stop.load(std::memory_order_acquire)) return;
      seen = job.load(std::memory_order_relaxed);
      const std::span<const std::byte> source = sources[k];
      const std::span<std::byte> target = targets[k];
      std::optional<Result<RankRunStats>> result;
      try {
        if (runner)
          result.emplace(runner->Execute(source, target, after_step));
        else
          result.emplace(status);
      } catch (const std::exception& e) {
        result.emplace(Status::Internal(fmt::format("rank {}: {}", k, e.what())));
      }
      if (!result->ok()) Failed(k, result->status());
      results[k] = std::move(result);
      Answer();
    }
  }

  // The caller works as the first of the ranks' threads until every rank
  // has answered (Fibers::Drive).
  void DriveUntilAnswered() {
    fibers->Drive([this] { return answered.load(std::memory_order_acquire) == n; });
  }

  void StopAndJoin() {
    stop.store(true, std::memory_order_release);
    NotifyAll(cv);
    fibers.reset();
  }
};

RankThreads::RankThreads(std::unique_ptr<Shared> shared) : shared_(std::move(shared)) {}

RankThreads::~RankThreads() {
  if (shared_) shared_->StopAndJoin();
}

Result<std::unique_ptr<RankThreads>> RankThreads::Start(const PlanProgram& program, const RankOptions& options,
                                                        Hook hook, const CommSettings& comms) {
  const size_t n = program.devices().size();
  if (n == 0) return Status::InvalidArgument("threads as ranks need a program with devices");
  RESHARD_RETURN_IF_ERROR(CheckRankDevices(static_cast<int64_t>(n)));
  auto shared = std::make_unique<Shared>();
  Shared& s = *shared;
  s.program = &program;
  s.options = options;
  s.options.joined_by_caller = true;  // Run joins every rank; so does the hook's barrier
  s.hook = std::move(hook);
  s.n = n;
  s.comms = MakeThreadComms(static_cast<int>(n), comms.timeout_seconds, comms.copiers, comms.boxes_copy_once);
  s.breaker = ThreadCommsBreaker(*s.comms[0]);
  s.results.resize(n);
  s.outputs.resize(n);
  // No rank runs unless every thread and stack could be had: a failure
  // here is before any rank reaches a collective.
  const int threads = ResolveThreads(comms.copiers);
  RESHARD_ASSIGN_OR_RETURN(
      s.fibers, Fibers::Start(n, threads, [&s](size_t k) { s.Rank(k); }, Fibers::FirstThread::kCallers));
  s.DriveUntilAnswered();
  // Creation agrees its errors across ranks; a rank that failed alone
  // broke the others' waits: the first error is the cause.
  if (!s.first_failure.ok()) {
    const Status error = s.first_failure;
    s.StopAndJoin();
    return error;
  }
  return std::unique_ptr<RankThreads>(new RankThreads(std::move(shared)));
}

Result<std::vector<RankRunStats>> RankThreads::Run(std::span<const std::span<const std::byte>> sources,
                                                   std::span<const std::span<std::byte>> targets) {
  Shared& s = *shared_;
  if (s.broken) return Status::Internal("an earlier run of these ranks failed");
  s.sources = sources;
  s.targets = targets;
  for (auto& r : s.results) r.reset();
  s.answered.store(0, std::memory_order_relaxed);
  s.job.fetch_add(1, std::memory_order_release);
  NotifyAll(s.cv);
  s.DriveUntilAnswered();
  std::vector<RankRunStats> stats;
  stats.reserve(s.n);
  // An agreed error is every rank's; one rank's alone broke the others'
  // waits: either way the first is the cause.
  if (!s.first_failure.ok()) {
    s.broken = true;
    return s.first_failure;
  }
  for (size_t k = 0; k < s.n; ++k) stats.push_back(std::move(s.results[k]->value()));
  return stats;
}

const std::vector<std::string>& RankThreads::transports() const { return shared_->transports; }
bool RankThreads::broken() const { return shared_->broken; }

}  // namespace reshard
