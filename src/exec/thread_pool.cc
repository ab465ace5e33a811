#include "exec/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace reshard {

ThreadPool::ThreadPool(int threads) {
  threads = ResolveThreads(threads);
  try {
    workers_.reserve(static_cast<size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  } catch (const std::exception& e) {
    // Without this, the members would be destroyed under the running workers:
    // the condition variables they wait on first, then joinable threads.
    const size_t started = workers_.size();
    Stop();
    status_ = Status::Unavailable(
        fmt::format("could not start {} threads: thread {} failed to start ({})", threads, started + 2, e.what()));
  }
}

ThreadPool::~ThreadPool() { Stop(); }

void ThreadPool::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::Drain() {
  for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*job_)(i);
}

// Every worker takes part in every loop (wakes, drains, reports), so a loop's
// job and bounds stay fixed until all workers have reported.
void ThreadPool::Work() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> l(mu_);
      start_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Drain();
    {
      std::lock_guard<std::mutex> l(mu_);
      ++busy_;  // here: workers finished with this loop
    }
    done_.notify_one();
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& f) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    job_ = &f;
    n_ = n;
    busy_ = 0;
    next_.store(0);
    ++generation_;
  }
  start_.notify_all();
  Drain();
  std::unique_lock<std::mutex> l(mu_);
  done_.wait(l, [&] { return busy_ == static_cast<int>(workers_.size()); });
}

}  // namespace reshard
