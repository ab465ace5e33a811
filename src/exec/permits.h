// Permits: a counting semaphore whose waits go through fibers.h, for ranks
// run on threads or as fibers: ThreadComm's copy permits (how many ranks
// copy box messages at once, thread_comm.h).
//
// Not std::counting_semaphore: its acquire blocks the thread, where a rank
// run as a fiber must let its thread's other ranks run, and the standard
// lets its try_acquire fail while permits are left, where a rank that
// finds none leaves the tasks to the ranks copying. Thread-safe.
#ifndef RESHARD_SRC_EXEC_PERMITS_H_
#define RESHARD_SRC_EXEC_PERMITS_H_

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "exec/fibers.h"

namespace reshard {

class Permits {
 public:
  explicit Permits(int count) : free_(count) {}
  Permits(const Permits&) = delete;
  Permits& operator=(const Permits&) = delete;

  // Takes one; false only where none is left.
  bool TryAcquire() {
    int free = free_.load();
    while (free > 0)
      if (free_.compare_exchange_weak(free, free - 1)) return true;
    return false;
  }

  // Takes one, waiting (a fiber: letting its thread's others run) until
  // one is free. No deadline: a permit is held only while its holder
  // copies, never across a wait.
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    Wait(lock, cv_, [&] { return TryAcquire(); });
    --waiting_;
  }

  void Release() {
    free_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);  // (a waiter is past its test, or waiting)
    if (waiting_ > 0) NotifyAll(cv_);
  }

  int free() const { return free_.load(); }

 private:
  std::atomic<int> free_;
  std::mutex mu_;
  int waiting_ = 0;  // under `mu_`
  std::condition_variable cv_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_PERMITS_H_
