// ThreadPool: every index of a loop runs once, on the workers and the caller;
// a pool whose threads cannot all start joins those that did and runs on the
// caller alone, with an Unavailable status (issue 15: it used to destroy the
// condition variable its started workers waited on, and hang).
#include "exec/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <vector>

namespace reshard {
namespace {

TEST(ThreadPool, RunsEveryIndexOnce) {
  ThreadPool pool(4);
  ASSERT_TRUE(pool.status().ok()) << pool.status();
  EXPECT_EQ(pool.size(), 4);
  std::vector<std::atomic<int>> hits(1000);
  for (int loop = 0; loop < 3; ++loop) pool.ParallelFor(1000, [&](int64_t i) { ++hits[static_cast<size_t>(i)]; });
  for (const std::atomic<int>& h : hits) EXPECT_EQ(h.load(), 3);
}

#if defined(__SANITIZE_ADDRESS__)
#define RESHARD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RESHARD_ASAN 1
#endif
#endif

// In a child process with 256 MiB of address space to spare: 512 threads'
// stacks (8 MiB each) do not fit. AddressSanitizer needs terabytes of address
// space for its shadow, so that build skips this.
#ifndef RESHARD_ASAN
TEST(ThreadPool, ThreadsThatFailToStartAreAnErrorNotAHang) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // a hang ends in SIGALRM, which fails the test
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20);
    const rlimit lim{limit, limit};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(10);
    int code = 0;
    {
      ThreadPool pool(512);
      if (pool.status().ok())
        code = 11;  // every thread started: the limit did not bite
      else if (pool.status().code() != Status::Code::kUnavailable || pool.size() != 1)
        code = 12;
      else if (pool.status().message().find("could not start 512 threads: thread ") == std::string::npos)
        code = 13;
      std::atomic<int64_t> sum{0};
      pool.ParallelFor(100, [&](int64_t i) { sum += i; });
      if (code == 0 && sum.load() != 4950) code = 14;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed: signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed; 11: every thread started; 12: wrong status or size; "
                                       "13: wrong message; 14: a loop lost indices";
}
#endif

}  // namespace
}  // namespace reshard
