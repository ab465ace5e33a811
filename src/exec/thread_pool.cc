#include "exec/thread_pool.h"

namespace reshard {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
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
