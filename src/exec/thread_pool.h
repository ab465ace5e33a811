// A fixed pool of worker threads running parallel loops: ParallelFor(n, f)
// calls f(i) for every i in [0, n) on the workers and the caller, and
// returns when all are done. One loop at a time: ParallelFor is not
// reentrant and must be called from one thread.
#ifndef RESHARD_SRC_EXEC_THREAD_POOL_H_
#define RESHARD_SRC_EXEC_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace reshard {

class ThreadPool {
 public:
  // threads: total threads including the caller; <= 0 means the hardware's count.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& f);

 private:
  void Work();
  void Drain();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int busy_ = 0;  // workers done with the current loop
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_THREAD_POOL_H_
