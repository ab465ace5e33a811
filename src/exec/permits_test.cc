// Permits: a permit is taken only while one is free, a waiter gets one as
// it is given back, and a fiber waiting for one lets its thread's other
// fibers run (the one that holds it among them).
#include "exec/permits.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace reshard {
namespace {

TEST(Permits, TakenOnlyWhileOneIsFree) {
  Permits p(2);
  EXPECT_TRUE(p.TryAcquire());
  EXPECT_TRUE(p.TryAcquire());
  EXPECT_FALSE(p.TryAcquire());
  EXPECT_EQ(p.free(), 0);
  p.Release();
  EXPECT_EQ(p.free(), 1);
  EXPECT_TRUE(p.TryAcquire());
  EXPECT_FALSE(p.TryAcquire());
}

// Threads contending for 2 permits: never more than 2 held at once, and
// every thread gets its turns.
TEST(Permits, ThreadsNeverHoldMoreThanTheCount) {
  Permits p(2);
  std::atomic<int> held{0}, most{0}, turns{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 200; ++r) {
        if (!p.TryAcquire()) p.Acquire();
        const int now = ++held;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --held;
        ++turns;
        p.Release();
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(turns.load(), 1200);
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(p.free(), 2);
}

TEST(Permits, AWaiterGetsThePermitGivenBack) {
  Permits p(1);
  ASSERT_TRUE(p.TryAcquire());
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    p.Acquire();
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load());
  p.Release();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(p.free(), 0);
}

// Both fibers on one thread: fiber 1 waits for the permit fiber 0 holds.
// Were Acquire to block the thread, fiber 0 could never give it back.
TEST(Permits, AFiberWaitingLetsTheHolderOnItsThreadRun) {
  Permits p(1);
  std::mutex mu;
  std::condition_variable cv;
  bool trying = false;
  std::vector<int> order;
  {
    auto fibers = Fibers::Start(2, 1, [&](size_t k) {
      if (k == 0) {
        ASSERT_TRUE(p.TryAcquire());
        std::unique_lock<std::mutex> lock(mu);
        Wait(lock, cv, [&] { return trying; });  // fiber 1 is at Acquire
        order.push_back(0);
        lock.unlock();
        p.Release();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        trying = true;
        NotifyAll(cv);
      }
      p.Acquire();
      order.push_back(1);
      p.Release();
    });
    ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.free(), 1);
}

}  // namespace
}  // namespace reshard
