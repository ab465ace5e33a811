// Fibers: every body runs to its end, never more at once than threads, and
// waits end by notification or by their deadline, in fibers as on threads.
#include "exec/fibers.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cfenv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace reshard {
namespace {

using Clock = Fibers::Clock;

// Rounds of a barrier among `n` fibers over `threads` threads: every round
// completes, fiber k stays on one thread, the one of every fiber k' with
// k' = k mod threads, and no two fibers of a thread run at once.
void RunRounds(size_t n, int threads, int rounds) {
  std::mutex mu;
  std::condition_variable cv;
  int64_t arrived = 0;
  std::atomic<int> running{0}, most{0};
  std::vector<int> done(n, 0);
  std::vector<std::thread::id> thread_of(n);
  {
    auto fibers = Fibers::Start(n, threads, [&](size_t k) {
      EXPECT_TRUE(InFiber());
      thread_of[k] = std::this_thread::get_id();
      for (int r = 1; r <= rounds; ++r) {
        EXPECT_EQ(thread_of[k], std::this_thread::get_id()) << k;
        const int now = ++running;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        --running;
        std::unique_lock<std::mutex> lock(mu);
        if (++arrived == static_cast<int64_t>(n) * r) NotifyAll(cv);
        Wait(lock, cv, [&] { return arrived >= static_cast<int64_t>(n) * r; });
      }
      done[k] = 1;
    });
    ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
    EXPECT_EQ(fibers.value()->threads(), std::min(n, static_cast<size_t>(threads)));
  }  // joined here
  EXPECT_EQ(arrived, static_cast<int64_t>(n) * rounds);
  EXPECT_LE(most.load(), threads);
  const size_t count = std::min(n, static_cast<size_t>(threads));
  for (size_t k = 0; k < n; ++k) {
    EXPECT_EQ(done[k], 1) << k;
    for (size_t j = 0; j < n; ++j) EXPECT_EQ(thread_of[k] == thread_of[j], k % count == j % count) << k << " " << j;
  }
}

TEST(Fibers, BarrierRoundsOverFewerThreads) {
  RunRounds(8, 2, 200);
  RunRounds(64, 3, 20);
  RunRounds(5, 1, 50);
  RunRounds(2, 8, 50);  // more threads than fibers: one each
}

// Each fiber's floating-point control (its rounding mode: the x87 and SSE
// control words) and its values in registers across a switch are its own:
// two fibers on the test's own thread, each in its own rounding mode, take
// turns at a barrier many times and round alike each time, and the thread
// is back in its own mode when they end (neither resets it).
TEST(Fibers, EachKeepsItsRoundingModeAndValuesAcrossSwitches) {
  constexpr int kRounds = 100;
  const int modes[2] = {FE_UPWARD, FE_DOWNWARD};
  std::mutex mu;
  std::condition_variable cv;
  int64_t arrived = 0;
  std::atomic<int> wrong{0};
  {
    auto fibers = Fibers::Start(2, 1, [&](size_t k) {
      EXPECT_EQ(std::fesetround(modes[k]), 0);
      volatile double third = 1.0, three = 3.0;  // divided at run time, in the fiber's mode
      const double up = third / three;
      // Integers kept live across every switch (in callee-saved registers,
      // where the compiler puts them: they must come back unchanged).
      uint64_t a = 0x0123456789abcdefULL * (k + 1), b = ~a, c = a ^ 0x5555555555555555ULL;
      for (int r = 1; r <= kRounds; ++r) {
        {
          std::unique_lock<std::mutex> lock(mu);
          if (++arrived == 2 * r) NotifyAll(cv);
          Wait(lock, cv, [&] { return arrived >= 2 * r; });
        }
        if (std::fegetround() != modes[k] || third / three != up) ++wrong;
        a = a * 3 + 1, b = b * 5 + 2, c = c * 7 + 3;
      }
      uint64_t a2 = 0x0123456789abcdefULL * (k + 1), b2 = ~a2, c2 = a2 ^ 0x5555555555555555ULL;
      for (int r = 1; r <= kRounds; ++r) a2 = a2 * 3 + 1, b2 = b2 * 5 + 2, c2 = c2 * 7 + 3;
      if (a != a2 || b != b2 || c != c2) ++wrong;
    }, Fibers::FirstThread::kCallers);
    ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);  // the thread's own mode, restored by the switch back
}

TEST(Fibers, AWaitNobodyEndsEndsAtItsDeadline) {
  std::atomic<int> timeouts{0};
  std::mutex mu;
  std::condition_variable cv;
  const auto start = Clock::now();
  {
    auto fibers = Fibers::Start(4, 2, [&](size_t k) {
      std::unique_lock<std::mutex> lock(mu);
      const auto deadline = Clock::now() + std::chrono::milliseconds(20 + 20 * static_cast<int>(k));
      while (WaitUntil(lock, cv, deadline) == std::cv_status::no_timeout) {
      }
      EXPECT_GE(Clock::now(), deadline);
      ++timeouts;
    });
    ASSERT_TRUE(fibers.ok());
  }
  EXPECT_EQ(timeouts.load(), 4);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST(Fibers, WaitOnAThreadIsTheConditionVariables) {
  EXPECT_FALSE(InFiber());
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::thread other([&] {
    std::lock_guard<std::mutex> lock(mu);
    ready = true;
    NotifyAll(cv);
  });
  std::unique_lock<std::mutex> lock(mu);
  Wait(lock, cv, [&] { return ready; });
  lock.unlock();
  other.join();
  lock.lock();
  EXPECT_EQ(WaitUntil(lock, cv, Clock::now() + std::chrono::milliseconds(5)), std::cv_status::timeout);
}

// A fiber waits on what a plain thread does, and the reverse.
TEST(Fibers, FibersAndThreadsWakeEachOther) {
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;
  {
    auto fibers = Fibers::Start(3, 1, [&](size_t k) {
      std::unique_lock<std::mutex> lock(mu);
      for (int r = 0; r < 100; ++r) {
        // Fiber k moves step from 4r+k to 4r+k+1; the thread moves 4r+3.
        Wait(lock, cv, [&] { return step == 4 * r + static_cast<int>(k); });
        ++step;
        NotifyAll(cv);
      }
    });
    ASSERT_TRUE(fibers.ok());
    std::unique_lock<std::mutex> lock(mu);
    for (int r = 0; r < 100; ++r) {
      Wait(lock, cv, [&] { return step == 4 * r + 3; });
      ++step;
      NotifyAll(cv);
    }
  }
  EXPECT_EQ(step, 400);
}

// Driven: the first thread's fibers run only in Drive, on the thread that
// calls it, which may differ from one Drive to the next; the others on
// threads of their own; the destructor runs the driven ones to their end.
TEST(Fibers, DrivenFibersRunOnTheCallersThread) {
  std::mutex mu;
  std::condition_variable cv;
  int job = 0, answered = 0;
  bool stop = false;
  std::vector<std::thread::id> ran_on(6);
  {
    auto fibers = Fibers::Start(
        6, 2,
        [&](size_t k) {
          for (int seen = 0;;) {
            std::unique_lock<std::mutex> lock(mu);
            Wait(lock, cv, [&] { return stop || job != seen; });
            if (stop) return;
            seen = job;
            ran_on[k] = std::this_thread::get_id();
            if (++answered == 6) NotifyAll(cv);
          }
        },
        Fibers::FirstThread::kCallers);
    ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
    Fibers& f = **fibers;
    auto run = [&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        answered = 0;
        ++job;
        NotifyAll(cv);
      }
      f.Drive([&] {
        std::lock_guard<std::mutex> lock(mu);
        return answered == 6;
      });
      EXPECT_FALSE(InFiber());
    };
    for (int r = 0; r < 20; ++r) {
      run();
      for (size_t k = 0; k < 6; ++k) {
        if (k % 2 == 0) {
          EXPECT_EQ(ran_on[k], std::this_thread::get_id()) << k;
        } else {
          EXPECT_NE(ran_on[k], std::this_thread::get_id()) << k;
        }
      }
    }
    std::thread::id other;
    std::thread([&] {
      other = std::this_thread::get_id();
      run();
    }).join();
    EXPECT_EQ(ran_on[0], other);
    EXPECT_EQ(ran_on[4], other);
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
    NotifyAll(cv);
  }  // the driven fibers end here
  EXPECT_EQ(job, 21);
}

#if !defined(__SANITIZE_ADDRESS__)  // (AddressSanitizer needs terabytes of address space)
// In a child process: 4096 fibers' stacks in 256 MiB more address space
// than the process maps. 0 where Start refused them (Unavailable) and no
// body ran.
int StartUnderASmallAddressSpace() {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20);
  const rlimit as{limit, limit};
  if (setrlimit(RLIMIT_AS, &as) != 0) return 2;
  bool ran = false;
  auto f = Fibers::Start(4096, 2, [&](size_t) { ran = true; });
  const bool refused = !f.ok() && f.status().code() == Status::Code::kUnavailable &&
                       f.status().message().rfind("could not map the 4096 fiber stacks", 0) == 0;
  return refused && !ran ? 0 : 1;
}

// Stacks the address space cannot hold: Unavailable, and no body runs.
TEST(Fibers, StacksThatCannotBeMappedAreUnavailable) {
  EXPECT_EXIT(std::exit(StartUnderASmallAddressSpace()), ::testing::ExitedWithCode(0), "");
}
#endif

// The process's mappings (lines of /proc/self/maps).
size_t Mappings() {
  std::ifstream maps("/proc/self/maps");
  size_t lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
}

// Where the kernel guards a stack inside its mapping (guard regions), all
// stacks are one mapping: more fibers start and run than a process may
// hold mappings (65,530 by default), which two a fiber would exceed.
// (Under AddressSanitizer 1,000: each stack's shadow, unpoisoned at the
// start, is 128 KiB of memory, 5 GB for 40,000.)
TEST(Fibers, StacksAreOneMappingWhereGuardsAreRegions) {
  if (Fibers::GuardsTakeMappings()) GTEST_SKIP() << "this kernel guards a stack with a mapping of its own";
#if defined(__SANITIZE_ADDRESS__)
  constexpr size_t kCount = 1000;
#else
  constexpr size_t kCount = 40000;
#endif
  std::atomic<size_t> ran{0};
  const size_t before = Mappings();
  {
    auto fibers = Fibers::Start(kCount, 2, [&](size_t) { ran.fetch_add(1); });
    ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
    EXPECT_LT(Mappings(), before + 64);  // (the fibers' mapping, a thread's stack and heap)
  }
  EXPECT_EQ(ran.load(), kCount);
}

// Frames of a page each, `depth` deep, each written at its lowest byte, so
// none steps over a guard.
[[gnu::noinline]] int Deep(int depth) {
  volatile char frame[4096];
  frame[0] = static_cast<char>(depth);
  if (depth == 0) return frame[0];
  return Deep(depth - 1) + frame[0];
}

// A fiber that overflows its stack by a few pages faults on its guard
// (those pages), before it could write into the stack below (fiber 0's).
TEST(Fibers, AStackOverflowFaults) {
  static_assert(Fibers::kGuardBytes >= 8 * 4096);
  const int depth = static_cast<int>(Fibers::kStackBytes / 4096) + 4;
  EXPECT_DEATH(
      {
        auto fibers = Fibers::Start(2, 1, [&](size_t k) {
          if (k == 1) std::printf("%d\n", Deep(depth));
        });
      },
      "");
}

TEST(Fibers, NoFibers) {
  auto fibers = Fibers::Start(0, 2, [](size_t) { ADD_FAILURE(); });
  EXPECT_TRUE(fibers.ok());
}

}  // namespace
}  // namespace reshard
