// A fixed pool of worker threads running parallel loops: ParallelFor(n, f)
// calls f(i) for every i in [0, n) on the workers and the caller, and
// returns when all are done. One loop at a time: ParallelFor is not
// reentrant and must be called from one thread.
//
// Starting a thread can fail (the system is out of threads or of memory for
// their stacks). Then the pool stops and joins the workers it did start, before
// anything they wait on is destroyed, runs every loop on the caller alone, and
// status() says what failed: a pool never hangs and never loses a thread.
#ifndef RESHARD_SRC_EXEC_THREAD_POOL_H_
#define RESHARD_SRC_EXEC_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "reshard/executor.h"
#include "reshard/status.h"

namespace reshard {

class ThreadPool {
 public:
  // threads: total threads including the caller; <= 0 means the hardware's
  // count; more than kMaxThreads (executor.h) count as kMaxThreads.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Ok, or Unavailable when a worker could not be started (the pool then runs on the caller alone).
  const Status& status() const { return status_; }
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& f);

 private:
  void Work();
  void Drain();
  void Stop();  // stops and joins every worker

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int busy_ = 0;  // workers done with the current loop
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  Status status_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_THREAD_POOL_H_
