// A threads-as-ranks group's barrier: the last rank to arrive sets up what
// every rank shares, and where that throws, every rank sees the error and
// the barrier still opens (no rank waits for its timeout).
#include "exec/thread_group.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace reshard
