// Threads as ranks, point to point: unbuffered sends matched in order from
// either side, requests and their waits, size mismatches, and the timeouts
// that turn a missing message or receiver into an error instead of a hang; on
// threads and on fibers (thread_comm_testing.h).
#include "reshard/thread_comm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "exec/fibers.h"
#include "exec/thread_comm_testing.h"

namespace reshard {
namespace {

using thread_comm_testing::Bytes;
using thread_comm_testing::RanksOnName;
using thread_comm_testing::RunRanks;

class ThreadCommPointToPoint : public thread_comm_testing::RanksOn {};
INSTANTIATE_TEST_SUITE_P(RanksOn, ThreadCommPointToPoint, ::testing::Values(0, 1, 2), RanksOnName);

TEST_P(ThreadCommPointToPoint, ChunkedMessagesArriveInTheOrderSent) {
  const std::vector<int64_t> sizes = {3, 5, 0, 7, 1000};
  for (const bool receives_first : {false, true}) {
    RunRanks(2, [&](Comm& comm) {
      if (comm.rank() == 0) {
        if (receives_first) {
          ASSERT_TRUE(comm.Barrier().ok());
        }
        std::vector<std::vector<std::byte>> chunks;
        std::vector<int64_t> requests;
        for (size_t i = 0; i < sizes.size(); ++i) {
          chunks.push_back(Bytes(sizes[i], static_cast<int>(i)));
          requests.push_back(kNoRequest);
          ASSERT_TRUE(comm.StartSend(chunks.back().data(), sizes[i], 1, requests.back()).ok());
          EXPECT_GE(requests.back(), 0);
        }
        if (!receives_first) {
          ASSERT_TRUE(comm.Barrier().ok());
        }
        // Unbuffered: a chunk's buffer is the sender's again only once its send completed.
        ASSERT_TRUE(comm.WaitAll(requests).ok());
        for (std::vector<std::byte>& chunk : chunks) std::fill(chunk.begin(), chunk.end(), std::byte{0});
        return;
      }
      if (!receives_first) {
        ASSERT_TRUE(comm.Barrier().ok());
      }
      std::vector<std::vector<std::byte>> got;
      std::vector<int64_t> requests;
      for (int64_t size : sizes) {
        got.emplace_back(static_cast<size_t>(size));
        requests.push_back(kNoRequest);
        ASSERT_TRUE(comm.StartRecv(got.back().data(), size, 0, requests.back()).ok());
        EXPECT_GE(requests.back(), 0);
      }
      if (receives_first) {
        ASSERT_TRUE(comm.Barrier().ok());
      }
      // Waiting for the last one alone still matches the earlier ones first.
      ASSERT_TRUE(comm.Wait(requests.back()).ok());
      EXPECT_EQ(requests.back(), kNoRequest);
      EXPECT_EQ(got.back(), Bytes(sizes.back(), static_cast<int>(sizes.size() - 1)));
      ASSERT_TRUE(comm.WaitAll(requests).ok());
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(requests[i], kNoRequest);
        EXPECT_EQ(got[i], Bytes(sizes[i], static_cast<int>(i))) << "message " << i << (receives_first ? ", receives first" : "");
      }
    });
  }
}

TEST_P(ThreadCommPointToPoint, ASendIsPendingUntilTheReceiverPostsItsReceive) {
  RunRanks(2, [](Comm& comm) {
    std::vector<std::byte> data = comm.rank() == 0 ? Bytes(16, 3) : std::vector<std::byte>(16);
    int64_t request = kNoRequest;
    std::vector<int> done;
    if (comm.rank() == 0) {
      ASSERT_TRUE(comm.StartSend(data.data(), 16, 1, request).ok());
      EXPECT_GE(request, 0);
      ASSERT_TRUE(comm.WaitSome(std::span<int64_t>(&request, 1), false, done).ok());
      EXPECT_TRUE(done.empty());  // no receive yet: not copied, not complete
      ASSERT_TRUE(comm.Barrier().ok());
      ASSERT_TRUE(comm.Barrier().ok());  // rank 1 has posted its receive
      ASSERT_TRUE(comm.WaitSome(std::span<int64_t>(&request, 1), false, done).ok());
      EXPECT_EQ(done, std::vector<int>{0});
      EXPECT_EQ(request, kNoRequest);
      return;
    }
    ASSERT_TRUE(comm.Barrier().ok());
    ASSERT_TRUE(comm.StartRecv(data.data(), 16, 0, request).ok());
    EXPECT_EQ(data, Bytes(16, 3));  // matched at once: the send was queued
    ASSERT_TRUE(comm.Barrier().ok());
    ASSERT_TRUE(comm.Wait(request).ok());
    EXPECT_EQ(data, Bytes(16, 3));
  });
}

TEST_P(ThreadCommPointToPoint, BothOrdersOfPostingDeliverAtTheSecondStart) {
  for (const bool send_first : {true, false}) {
    RunRanks(2, [&](Comm& comm) {
      const bool sender = comm.rank() == 0;
      std::vector<std::byte> data = sender ? Bytes(32, 5) : std::vector<std::byte>(32);
      int64_t request = kNoRequest;
      auto start = [&] {
        return sender ? comm.StartSend(data.data(), 32, 1, request) : comm.StartRecv(data.data(), 32, 0, request);
      };
      const bool first = sender == send_first;
      if (first) {
        ASSERT_TRUE(start().ok());
      }
      ASSERT_TRUE(comm.Barrier().ok());
      if (!first) {
        ASSERT_TRUE(start().ok());
        // The second start found the first and copied: both complete now.
        std::vector<int> done;
        ASSERT_TRUE(comm.WaitSome(std::span<int64_t>(&request, 1), false, done).ok());
        EXPECT_EQ(done, std::vector<int>{0}) << (send_first ? "send first" : "receive first");
      }
      ASSERT_TRUE(comm.Barrier().ok());
      ASSERT_TRUE(comm.Wait(request).ok());
      EXPECT_EQ(data, Bytes(32, 5)) << (send_first ? "send first" : "receive first");
    });
  }
}

TEST_P(ThreadCommPointToPoint, ASendBufferIsTheSendersAgainOnlyWhenItsRequestCompletes) {
  std::atomic<bool> receive_posted{false};
  RunRanks(2, [&](Comm& comm) {
    int64_t request = kNoRequest;
    if (comm.rank() == 0) {
      std::vector<std::byte> data = Bytes(64, 9);
      ASSERT_TRUE(comm.StartSend(data.data(), 64, 1, request).ok());
      ASSERT_TRUE(comm.Wait(request).ok());
      EXPECT_TRUE(receive_posted.load());  // the wait lasted until rank 1 received
      std::fill(data.begin(), data.end(), std::byte{0});  // now rank 0's to rewrite
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<std::byte> data(64);
    receive_posted = true;
    ASSERT_TRUE(comm.StartRecv(data.data(), 64, 0, request).ok());
    ASSERT_TRUE(comm.Wait(request).ok());
    EXPECT_EQ(data, Bytes(64, 9));
  });
}

TEST_P(ThreadCommPointToPoint, WaitSomeDoesNotBlockUnlessAsked) {
  RunRanks(2, [](Comm& comm) {
    if (comm.rank() == 0) {
      ASSERT_TRUE(comm.Barrier().ok());  // rank 1 has looked before anything is sent
      const std::vector<std::byte> a = Bytes(4, 1), b = Bytes(6, 2);
      int64_t requests[2] = {kNoRequest, kNoRequest};
      ASSERT_TRUE(comm.StartSend(a.data(), 4, 1, requests[0]).ok());
      ASSERT_TRUE(comm.Barrier().ok());
      ASSERT_TRUE(comm.StartSend(b.data(), 6, 1, requests[1]).ok());
      ASSERT_TRUE(comm.WaitAll(requests).ok());  // `a` and `b` live until received
      return;
    }
    std::vector<std::byte> a(4), b(6);
    std::vector<int64_t> requests(3, kNoRequest);  // the middle one stays kNoRequest: already complete
    ASSERT_TRUE(comm.StartRecv(a.data(), 4, 0, requests[0]).ok());
    ASSERT_TRUE(comm.StartRecv(b.data(), 6, 0, requests[2]).ok());
    std::vector<int> done;
    ASSERT_TRUE(comm.WaitSome(requests, false, done).ok());
    EXPECT_TRUE(done.empty());
    ASSERT_TRUE(comm.Barrier().ok());
    ASSERT_TRUE(comm.Barrier().ok());  // now `a` was sent and `b` not yet, maybe
    ASSERT_TRUE(comm.WaitSome(requests, true, done).ok());
    ASSERT_FALSE(done.empty());
    EXPECT_EQ(done[0], 0);
    EXPECT_EQ(requests[0], kNoRequest);
    EXPECT_EQ(a, Bytes(4, 1));
    while (requests[2] != kNoRequest) ASSERT_TRUE(comm.WaitSome(requests, true, done).ok());
    EXPECT_EQ(done.back(), 2);
    EXPECT_EQ(b, Bytes(6, 2));
    // Nothing left to wait for: a blocking WaitSome returns at once, with nothing.
    done.clear();
    ASSERT_TRUE(comm.WaitSome(requests, true, done).ok());
    EXPECT_TRUE(done.empty());
  });
}

TEST_P(ThreadCommPointToPoint, MessageSizeMismatchIsInternal) {
  RunRanks(2, [](Comm& comm) {
    int64_t request = kNoRequest;
    if (comm.rank() == 0) {
      const std::vector<std::byte> data = Bytes(8, 0);
      ASSERT_TRUE(comm.StartSend(data.data(), 8, 1, request).ok());
      EXPECT_TRUE(comm.Wait(request).ok());  // the error is the receiver's; the send completes with Ok
      return;
    }
    std::vector<std::byte> data(4);
    ASSERT_TRUE(comm.StartRecv(data.data(), 4, 0, request).ok());
    const Status st = comm.Wait(request);
    EXPECT_EQ(st, Status::Internal("rank 1 expected 4 bytes from rank 0, which sent 8"));
    EXPECT_EQ(request, kNoRequest);
  });
}

TEST_P(ThreadCommPointToPoint, AMessageNeverSentIsAnErrorNotAHang) {
  const auto start = std::chrono::steady_clock::now();
  RunRanks(
      2,
      [](Comm& comm) {
        if (comm.rank() == 0) {
          std::byte b{};
          int64_t request = kNoRequest;
          ASSERT_TRUE(comm.StartRecv(&b, 1, 1, request).ok());
          EXPECT_EQ(comm.Wait(request), Status::Internal("rank 0 waited 0.2 s for a message from rank 1"));
        }  // rank 1 never sends
      },
      0.2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_P(ThreadCommPointToPoint, ASendNeverReceivedIsAnErrorNotAHang) {
  const auto start = std::chrono::steady_clock::now();
  RunRanks(
      2,
      [](Comm& comm) {
        if (comm.rank() == 0) {
          const std::byte b{};
          int64_t request = kNoRequest;
          ASSERT_TRUE(comm.StartSend(&b, 1, 1, request).ok());
          EXPECT_EQ(comm.Wait(request), Status::Internal("rank 0 waited 0.2 s for rank 1 to receive a message"));
        }  // rank 1 never receives
      },
      0.2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

}  // namespace
}  // namespace reshard
