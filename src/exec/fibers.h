// Fibers: n bodies run as stackful fibers over a few threads, switching
// only where they wait.
//
// Why: threads as ranks (rank_threads.h) run one rank per device. With more
// ranks than cores, every barrier handed the cores from thread to thread
// through the kernel (11,399 context switches in 100 runs of a 64 MiB
// reshard over 8 ranks on 2 cores), and ranks that yielded while they
// waited took turns with the ranks that copied. As fibers, the ranks of one
// thread hand over without the kernel's scheduler, never more ranks run
// than there are threads, and a thread whose fibers all wait sleeps until
// something changes or the earliest of their waits times out.
//
// Waiting: code that may run in a fiber waits with WaitUntil (below), or
// PauseUntil for a condition read without a lock, never by blocking its
// thread on something another fiber of that thread must do; whoever
// changes what such a wait tests notifies with NotifyAll. The
// same code runs unchanged on plain threads: there WaitUntil is the
// condition variable's wait_until and NotifyAll its notify_all.
//
// A fiber may not wait while it holds a lock other than the one WaitUntil
// releases, nor inside a catch handler (the handled exception is the
// thread's, not the fiber's), nor keep what is a thread's (a thread_local's
// address, the thread's id) across a wait: a driven fiber (Drive) may go
// on on another thread. A body that throws ends the program, as a
// thread's would.
#ifndef RESHARD_SRC_EXEC_FIBERS_H_
#define RESHARD_SRC_EXEC_FIBERS_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "reshard/status.h"

namespace reshard {

class Fibers {
 public:
  using Clock = std::chrono::steady_clock;

  // Each fiber's stack, mapped on demand (only the pages it touches are
  // ever memory; all fibers' in one mapping), with a guard region below it, so an overflow faults
  // instead of writing into the stack mapped below (one frame may reach
  // past a single page). The step runner's deepest paths (error
  // formatting, under AddressSanitizer) use a few tens of KiB.
  static constexpr size_t kStackBytes = size_t{1} << 20;
  static constexpr size_t kGuardBytes = size_t{64} << 10;
  // The address space one fiber maps: its stack and its guard, in whole
  // pages (what an address-space limit must leave room for).
  static size_t MappedBytes();
  // Whether each fiber's guard splits the stacks' mapping (PROT_NONE), so
  // that n fibers hold 2n of the process's mappings (Linux allows 65,530 by
  // default), or is a guard region inside it (Linux 6.13 and later), so
  // that all fibers' stacks are one mapping.
  static bool GuardsTakeMappings();

  // Where the first scheduler's fibers run: on a thread of their own, like
  // the others, or on the caller's, only while it is in Drive.
  enum class FirstThread { kOwn, kCallers };

  // Starts body(k) for every k < n as a fiber, over min(n, threads)
  // schedulers (threads >= 1), fiber k on scheduler k % threads for its
  // whole life, each scheduler a thread of its own but the first where
  // `first` is kCallers. Unavailable where a stack, a thread or memory
  // cannot be had; then no body has run.
  static Result<std::unique_ptr<Fibers>> Start(size_t n, int threads, std::function<void(size_t)> body,
                                               FirstThread first = FirstThread::kOwn);
  // Runs the first scheduler's fibers on this thread until `done()`, tested
  // after each turn of them all (unlocked, outside any fiber), or until they
  // have all ended. Where work is handed to the fibers and waited for (a
  // run of every rank), the caller works as one of the threads instead of
  // waking one and sleeping: one thread fewer to wake, and none on the
  // caller's core. Between Drives those fibers do not run, and their waits'
  // deadlines pass unnoticed until the next. REQUIRES: started with
  // kCallers (else it returns at once); one caller at a time, not in a
  // fiber. The fibers may run on another thread at each Drive: fibers.h's
  // rules hold them to nothing a thread keeps across a wait.
  void Drive(const std::function<bool()>& done);

  // Joins the threads (kCallers: runs the first scheduler's fibers to their
  // end first). REQUIRES: every body returns (the caller tells them).
  ~Fibers();
  Fibers(const Fibers&) = delete;
  Fibers& operator=(const Fibers&) = delete;

  size_t threads() const;

 private:
  struct State;
  explicit Fibers(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// True in a fiber's body.
bool InFiber();

// The time WaitUntil's deadlines are measured against: on a thread, now; in
// a fiber, the time its thread read as this round of its fibers began (one
// read a round, not one a wait: over 16,384 ranks the clock took a twelfth
// of a run), earlier than now by at most the round's length.
Fibers::Clock::time_point WaitClockNow();

// cv.wait_until(lock, deadline) on a thread. In a fiber: releases `lock`,
// lets the thread's other fibers run (or the thread sleep, where all wait),
// takes `lock` again; it returns without a notification, as a spurious
// wakeup does, so callers test their condition in a loop. It times out once
// WaitClockNow() has reached `deadline`.
std::cv_status WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         Fibers::Clock::time_point deadline);

// In a fiber, WaitUntil holding no lock: lets the thread's other fibers
// run (or the thread sleep, where all wait) and returns, without a
// notification, as WaitUntil does; times out as it does. For a wait whose
// condition is read without a lock (an atomic that whoever changes it
// notifies with NotifyAll): a fiber resumed only to see that nothing moved
// need not take the lock. REQUIRES: InFiber().
std::cv_status PauseUntil(Fibers::Clock::time_point deadline);

// Waits until `done()`, with no deadline. REQUIRES: `lock` held.
template <typename Done>
void Wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Done done) {
  while (!done()) WaitUntil(lock, cv, Fibers::Clock::time_point::max());
}

// Locks `lock`'s mutex (REQUIRES: not held), first trying a while before
// blocking where another thread holds it: for mutexes many fibers take, each
// for a few instructions (no fiber holds one across a wait). A fiber blocked
// on a mutex sleeps its whole thread, every other fiber of it with it, and
// that thread's sleep and wakeup cost microseconds in the kernel: blocking
// there took a quarter of a transpose's run over 262,144 ranks on two threads.
void LockSpinning(std::unique_lock<std::mutex>& lock);
std::unique_lock<std::mutex> LockSpinning(std::mutex& mu);

// cv.notify_all(), and wakes every thread whose fibers all wait.
void NotifyAll(std::condition_variable& cv);

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_FIBERS_H_
