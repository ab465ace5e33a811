// Test support for the threads-as-ranks tests (thread_comm_test.cc,
// thread_comm_p2p_test.cc): every test runs its ranks on real threads, on
// fibers all on the test's thread (driven, as RankThreads runs its first
// thread's) and on fibers over two threads of their own.
#ifndef RESHARD_SRC_EXEC_THREAD_COMM_TESTING_H_
#define RESHARD_SRC_EXEC_THREAD_COMM_TESTING_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/fibers.h"
#include "reshard/thread_comm.h"

namespace reshard {
namespace thread_comm_testing {

// Where the ranks run: 0, a thread each; 1, fibers all on the test's own
// thread; 2, fibers over two threads of their own.
inline int fiber_threads = 0;

// The fixture of a suite instantiated over those three (RanksOnName).
class RanksOn : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { fiber_threads = GetParam(); }
};

inline std::string RanksOnName(const ::testing::TestParamInfo<int>& info) {
  return info.param == 0 ? std::string("Threads")
         : info.param == 1 ? std::string("FibersOnTheCaller")
                           : "FibersOver" + std::to_string(info.param);
}

// Runs `body` as rank k of `ranks` (on thread k, or fiber k) and joins them all.
inline void RunRanks(int ranks, const std::function<void(Comm&)>& body, double timeout_seconds = 10,
                     int copiers = 0) {
  std::vector<std::unique_ptr<Comm>> comms = MakeThreadComms(ranks, timeout_seconds, copiers);
  if (fiber_threads > 0) {
    auto fibers = Fibers::Start(static_cast<size_t>(ranks), fiber_threads, [&](size_t k) { body(*comms[k]); },
                                fiber_threads == 1 ? Fibers::FirstThread::kCallers : Fibers::FirstThread::kOwn);
    ASSERT_TRUE(fibers.ok()) << fibers.status().ToString();
    return;  // run to their end (driven ones here) and joined as `fibers` goes
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < ranks; ++k) threads.emplace_back([&, k] { body(*comms[static_cast<size_t>(k)]); });
  for (std::thread& t : threads) t.join();
}

// `n` bytes of a pattern of `seed`.
inline std::vector<std::byte> Bytes(int64_t n, int seed) {
  std::vector<std::byte> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<std::byte>((seed * 31 + i) & 0xff);
  return v;
}

}  // namespace thread_comm_testing
}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_THREAD_COMM_TESTING_H_
