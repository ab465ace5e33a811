// A threads-as-ranks group's barrier: the last rank to arrive sets up what
// every rank shares, and where that throws, every rank sees the error and
// the barrier still opens (no rank waits for its timeout).
#include "exec/thread_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace reshard {
namespace {

TEST(ThreadGroup, ASetUpThatThrowsIsEveryRanksErrorAndTheBarrierOpens) {
  constexpr int kRanks = 3;
  std::shared_ptr<thread_group::Group> g =
      std::make_shared<thread_group::Family>()->Make(kRanks, /*timeout_seconds=*/600, true, 1, std::make_shared<Permits>(1));
  const std::function<void()> fails = [] { throw std::runtime_error("out of memory"); };
  const std::function<void()> works = [] {};
  std::vector<std::thread> threads;
  for (int k = 0; k < kRanks; ++k)
    threads.emplace_back([&, k] {
      EXPECT_TRUE(g->Arrive(k, "Split", true, &fails).ok());
      EXPECT_NE(g->last_status.message().find("setting up Split for every rank: out of memory"), std::string::npos)
          << g->last_status;
      EXPECT_TRUE(g->Arrive(k, "Split", true, &works).ok());  // the next barrier clears it
      EXPECT_TRUE(g->last_status.ok()) << g->last_status;
    });
  for (std::thread& t : threads) t.join();
}

// A break racing the barriers of ranks as fibers over two threads: a
// barrier a rank failed (it saw the group broken) opens for no rank.
TEST(ThreadGroup, ABarrierARankFailedOpensForNone) {
  constexpr int kRanks = 16, kBarriers = 200, kTrials = 1000;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::shared_ptr<thread_group::Group> g = std::make_shared<thread_group::Family>()->Make(
        kRanks, /*timeout_seconds=*/600, true, 1, std::make_shared<Permits>(1));
    std::vector<int> passed(kRanks, 0), failed_at(kRanks, -1);
    {
      auto fibers = Fibers::Start(kRanks, 2, [&](size_t k) {
        for (int b = 0; b < kBarriers; ++b) {
          if (!g->Arrive(static_cast<int>(k), "Barrier").ok()) {
            failed_at[k] = b;
            return;
          }
          passed[k] = b + 1;
        }
      });
      ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
      std::this_thread::sleep_for(std::chrono::microseconds(trial % 97));
      g->family->BreakAll("broken by the test");
    }  // every fiber has returned
    for (int k = 0; k < kRanks; ++k)
      for (int j = 0; j < kRanks && failed_at[k] >= 0; ++j)
        ASSERT_LE(passed[j], failed_at[k]) << "trial " << trial << ": rank " << j << " passed barrier " << failed_at[k]
                                           << ", which rank " << k << " failed";
  }
}

}  // namespace
}  // namespace reshard
