// Threads as ranks: every collective Comm call on real threads, on fibers
// all on the test's thread and on fibers over two threads (fibers.h, as
// RankThreads runs them; thread_comm_testing.h), and the agreement helpers
// of comm.h over it, and the timeout that turns a rank missing from a
// collective into an error. Point to point: thread_comm_p2p_test.cc.
#include "reshard/thread_comm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "exec/fibers.h"
#include "exec/thread_comm_testing.h"
#include "reshard/device_program.h"

namespace reshard {
namespace {

using thread_comm_testing::Bytes;
using thread_comm_testing::RanksOnName;
using thread_comm_testing::RunRanks;

class ThreadComm : public thread_comm_testing::RanksOn {};
INSTANTIATE_TEST_SUITE_P(RanksOn, ThreadComm, ::testing::Values(0, 1, 2), RanksOnName);

TEST_P(ThreadComm, NameRankAndSize) {
  RunRanks(3, [](Comm& comm) {
    EXPECT_EQ(comm.name(), "threads");
    EXPECT_TRUE(comm.ranks_in_process());
    EXPECT_EQ(comm.size(), 3);
    EXPECT_GE(comm.rank(), 0);
    EXPECT_LT(comm.rank(), 3);
  });
}

TEST_P(ThreadComm, AllReduceMinMaxSum) {
  RunRanks(4, [](Comm& comm) {
    const int64_t r = comm.rank();
    // Back to back, so a fast rank's next all-reduce would show if it could
    // overwrite a slow one's inputs or result (one barrier each).
    for (int round = 0; round < 200; ++round) {
      int64_t v[3] = {r, -r, 10 + r};
      ASSERT_TRUE(comm.AllReduce(v, Comm::ReduceOp::kMin).ok());
      EXPECT_EQ(v[0], 0);
      EXPECT_EQ(v[1], -3);
      EXPECT_EQ(v[2], 10);
      int64_t w[3] = {r, -r, 10 + r};
      ASSERT_TRUE(comm.AllReduce(w, Comm::ReduceOp::kMax).ok());
      EXPECT_EQ(w[0], 3);
      EXPECT_EQ(w[1], 0);
      EXPECT_EQ(w[2], 13);
      int64_t s[3] = {r, -r, 10 + r};
      ASSERT_TRUE(comm.AllReduce(s, Comm::ReduceOp::kSum).ok());
      EXPECT_EQ(s[0], 6);
      EXPECT_EQ(s[1], -6);
      EXPECT_EQ(s[2], 46);
    }
  });
}

TEST_P(ThreadComm, AllGather) {
  RunRanks(4, [](Comm& comm) {
    const uint64_t r = static_cast<uint64_t>(comm.rank());
    const uint64_t mine[2] = {r * 10, r * 10 + 1};
    std::vector<uint64_t> all(8);
    ASSERT_TRUE(comm.AllGather(mine, all).ok());
    EXPECT_EQ(all, (std::vector<uint64_t>{0, 1, 10, 11, 20, 21, 30, 31}));
  });
}

TEST_P(ThreadComm, Broadcast) {
  RunRanks(4, [](Comm& comm) {
    std::vector<std::byte> bytes = comm.rank() == 2 ? Bytes(16, 7) : std::vector<std::byte>(16);
    ASSERT_TRUE(comm.Broadcast(bytes, 2).ok());
    EXPECT_EQ(bytes, Bytes(16, 7));
  });
}

TEST_P(ThreadComm, AgreeStatusNamesTheLowestFailingRank) {
  RunRanks(4, [](Comm& comm) {
    const Status local = comm.rank() == 2 ? Status::Internal("disk on fire") : Status::Ok();
    EXPECT_EQ(AgreeStatus(comm, local), Status::Internal("rank 2: disk on fire"));
  });
  RunRanks(4, [](Comm& comm) {
    const Status local = comm.rank() >= 1 ? Status::InvalidArgument("rank " + std::to_string(comm.rank())) : Status::Ok();
    EXPECT_EQ(AgreeStatus(comm, local), Status::InvalidArgument("rank 1: rank 1"));
  });
}

TEST_P(ThreadComm, AgreeStatusOfAnErrorEveryRankSharesNamesNone) {
  RunRanks(4, [](Comm& comm) {
    EXPECT_EQ(AgreeStatus(comm, Status::NotSupported("no GPU")), Status::NotSupported("no GPU"));
    EXPECT_TRUE(AgreeStatus(comm, Status::Ok()).ok());
  });
}

TEST_P(ThreadComm, CheckSameNamesTheOddRank) {
  RunRanks(4, [](Comm& comm) {
    EXPECT_TRUE(CheckSame(comm, 42, "layouts or options").ok());
    const Status st = CheckSame(comm, comm.rank() == 3 ? 7 : 42, "layouts or options");
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("rank 3's layouts or options differ from the others'"), std::string::npos) << st;
  });
}

// The agreement is one all-reduce of the least hash and the least
// complement: hashes at the ends of the signed range, equal or not.
TEST_P(ThreadComm, CheckSameAtTheEndsOfTheRange) {
  RunRanks(3, [](Comm& comm) {
    for (uint64_t h : {uint64_t{0}, ~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 63) - 1})
      EXPECT_TRUE(CheckSame(comm, h, "plans").ok()) << h;
    const Status st = CheckSame(comm, comm.rank() == 1 ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1, "plans");
    EXPECT_NE(st.message().find("rank 1's plans differ from the others'"), std::string::npos) << st;
    const Status top = CheckSame(comm, comm.rank() == 2 ? ~uint64_t{0} : 0, "plans");
    EXPECT_NE(top.message().find("rank 2's plans differ from the others'"), std::string::npos) << top;
  });
}

// Colors in descending rank order, keys tied in pairs: each new group ranks
// its members by key, then by parent rank; a negative color joins none.
TEST_P(ThreadComm, SplitOrdersTiedKeysByParentRank) {
  RunRanks(12, [](Comm& comm) {
    const int r = comm.rank();
    const int color = r == 11 ? -1 : 2 - r % 3;
    Result<std::unique_ptr<Comm>> sub = comm.Split(color, (11 - r) / 6);
    ASSERT_TRUE(sub.ok()) << sub.status();
    if (color < 0) {
      EXPECT_EQ(*sub, nullptr);
      return;
    }
    ASSERT_NE(*sub, nullptr);
    // Members of color c: ranks r with r % 3 == 2 - c (rank 11 left out);
    // keys 1 for r < 6, 0 above: the upper half first, each half by rank.
    std::vector<int> members;
    for (int key : {0, 1})
      for (int m = 0; m < 11; ++m)
        if (2 - m % 3 == color && (11 - m) / 6 == key) members.push_back(m);
    EXPECT_EQ((*sub)->size(), static_cast<int>(members.size()));
    EXPECT_EQ(members[static_cast<size_t>((*sub)->rank())], r);
  });
}

// One rank's breaker ends the waits for it at once, long before their
// timeout, in the first group and in a group split from it (rank 1 waits for
// rank 3 in their half, ranks 0 and 2 in the whole), and every later call
// into any group of the family fails alike (the other half's too).
TEST_P(ThreadComm, ABreakerEndsEveryGroupsWaitsAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  RunRanks(
      4,
      [](Comm& comm) {
        Result<std::unique_ptr<Comm>> half = comm.Split(comm.rank() % 2, comm.rank());
        ASSERT_TRUE(half.ok()) << half.status();
        if (comm.rank() == 3) ThreadCommsBreaker(comm)("rank 3 failed: out of paper");
        const Status waited = comm.rank() == 0 || comm.rank() == 2 ? comm.Barrier() : (*half)->Barrier();
        EXPECT_EQ(waited.code(), Status::Code::kInternal) << waited;
        EXPECT_NE(waited.message().find("out of paper"), std::string::npos) << waited;
        const Status later = comm.rank() == 0 || comm.rank() == 2 ? (*half)->Barrier() : comm.Barrier();
        EXPECT_NE(later.message().find("out of paper"), std::string::npos) << later;
      },
      /*timeout_seconds=*/600);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST_P(ThreadComm, SplitRanksByKeyThenParentRank) {
  RunRanks(8, [](Comm& comm) {
    Result<std::unique_ptr<Comm>> half = comm.Split(comm.rank() % 2, comm.rank() / 2);
    ASSERT_TRUE(half.ok()) << half.status();
    ASSERT_NE(*half, nullptr);
    Comm& sub = **half;
    EXPECT_EQ(sub.size(), 4);
    EXPECT_EQ(sub.rank(), comm.rank() / 2);
    // Each half is its own group: its collectives see only its members.
    int64_t parent_ranks = comm.rank();
    ASSERT_TRUE(sub.AllReduce(std::span<int64_t>(&parent_ranks, 1), Comm::ReduceOp::kSum).ok());
    EXPECT_EQ(parent_ranks, comm.rank() % 2 == 0 ? 0 + 2 + 4 + 6 : 1 + 3 + 5 + 7);
    int64_t requests[2] = {kNoRequest, kNoRequest};
    const std::byte token{static_cast<unsigned char>(comm.rank())};
    std::byte got{0xff};
    ASSERT_TRUE(sub.StartSend(&token, 1, (sub.rank() + 1) % 4, requests[0]).ok());
    ASSERT_TRUE(sub.StartRecv(&got, 1, (sub.rank() + 3) % 4, requests[1]).ok());
    ASSERT_TRUE(sub.WaitAll(requests).ok());
    EXPECT_EQ(static_cast<int>(got), (comm.rank() + 6) % 8);  // the previous member of the same half
  });
}

TEST_P(ThreadComm, SplitWithNegativeColorJoinsNone) {
  RunRanks(5, [](Comm& comm) {
    // Equal keys: ties go by parent rank; rank 4 joins none.
    Result<std::unique_ptr<Comm>> sub = comm.Split(comm.rank() == 4 ? -1 : 0, comm.rank() == 1 ? -1 : 0);
    ASSERT_TRUE(sub.ok()) << sub.status();
    if (comm.rank() == 4) {
      EXPECT_EQ(*sub, nullptr);
      return;
    }
    ASSERT_NE(*sub, nullptr);
    EXPECT_EQ((*sub)->size(), 4);
    const int expected[4] = {1, 0, 2, 3};  // parent rank 1 has the lowest key
    EXPECT_EQ((*sub)->rank(), expected[comm.rank()]);
    EXPECT_TRUE((*sub)->Barrier().ok());
  });
}

TEST_P(ThreadComm, AlltoallvWithUnevenCounts) {
  constexpr int kRanks = 3;
  RunRanks(kRanks, [](Comm& comm) {
    const int r = comm.rank();
    // Rank r sends (r + 1) * (k + 1) bytes to rank k, rank 1 nothing to rank 2.
    auto count = [](int from, int to) -> int64_t { return from == 1 && to == 2 ? 0 : (from + 1) * (to + 1); };
    std::vector<int64_t> send_counts(kRanks), send_displs(kRanks), recv_counts(kRanks), recv_displs(kRanks);
    std::vector<std::byte> send;
    int64_t recv_total = 0;
    for (int k = 0; k < kRanks; ++k) {
      send_counts[k] = count(r, k);
      send_displs[k] = static_cast<int64_t>(send.size());
      const std::vector<std::byte> part = Bytes(count(r, k), r * kRanks + k);
      send.insert(send.end(), part.begin(), part.end());
      recv_counts[k] = count(k, r);
      recv_displs[k] = recv_total + 1;  // a gap of one byte before each part, left untouched
      recv_total += count(k, r) + 1;
    }
    std::vector<std::byte> recv(static_cast<size_t>(recv_total), std::byte{0xee});
    int64_t request = 123;
    ASSERT_TRUE(comm.StartAlltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs,
                                    request)
                    .ok());
    EXPECT_EQ(request, kNoRequest);
    for (int k = 0; k < kRanks; ++k) {
      EXPECT_EQ(recv[static_cast<size_t>(recv_displs[k] - 1)], std::byte{0xee});
      const std::vector<std::byte> want = Bytes(count(k, r), k * kRanks + r);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), recv.begin() + recv_displs[k])) << "from rank " << k;
    }
  });
}

TEST_P(ThreadComm, AlltoallvCountMismatchIsInternalOnTheReceiver) {
  RunRanks(2, [](Comm& comm) {
    const std::byte send[4] = {};
    std::byte recv[8] = {};
    // Rank 0 sends 2 bytes to rank 1, which expects 3; the rest agree.
    const std::vector<int64_t> send_counts = comm.rank() == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 1};
    const std::vector<int64_t> recv_counts = comm.rank() == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{3, 1};
    const std::vector<int64_t> displs = {0, 2};
    int64_t request = kNoRequest;
    const Status st = comm.StartAlltoallv(send, send_counts, displs, recv, recv_counts, displs, request);
    if (comm.rank() == 0) {
      EXPECT_TRUE(st.ok()) << st;
    } else {
      EXPECT_EQ(st, Status::Internal("rank 1 expected 3 bytes from rank 0, which sent 2"));
    }
  });
}

// Box messages end to end: prepared, then run as one collective; a size
// mismatch is Internal on every rank, named as MPI's truncation, and the
// other messages still arrive (the walks themselves: thread_boxes_test.cc).
TEST_P(ThreadComm, BoxMessagesRunAndASizeMismatchIsInternalOnEveryRank) {
  for (const int64_t received : {8, 6}) {
    RunRanks(3, [received](Comm& comm) {
      ASSERT_TRUE(comm.has_boxes());
      // Rank 0 sends input bytes 0..7 to rank 1, which writes `received` of
      // them at 2, and bytes 0..3 to rank 2, which writes them at 1.
      DeviceProgram p;
      const int64_t one[] = {1};
      const int64_t sent_extent[] = {8}, four[] = {4}, received_extent[] = {received};
      if (comm.rank() == 0) {
        p.pack.AddBox(sent_extent, 0, one, 0, one, 1);
        p.pack.AddBox(four, 0, one, 8, one, 1);
        p.send_count = {8, 4};
        p.send_offset = {0, 8};
        p.pack_begin = {0, 1, 2};
        p.unpack_begin = {0};
      } else {
        if (comm.rank() == 1)
          p.unpack.AddBox(received_extent, 0, one, 2, one, 1);
        else
          p.unpack.AddBox(four, 0, one, 1, one, 1);
        p.recv_count = {comm.rank() == 1 ? received : 4};
        p.recv_offset = {0};
        p.unpack_begin = {0, 1};
        p.pack_begin = {0};
      }
      std::vector<int> to, from;
      if (comm.rank() == 0)
        to = {1, 2};
      else
        from = {0};
      Result<std::unique_ptr<BoxExchange>> boxes = comm.PrepareBoxes(p, to, from);
      ASSERT_TRUE(boxes.ok()) << boxes.status();
      const std::vector<std::byte> in = Bytes(8, comm.rank());
      std::vector<std::byte> out(10, std::byte{0xee});
      int64_t request = 7;
      const Status st = comm.StartBoxes(**boxes, in.data(), out.data(), Comm::BoxesEnd::kEveryCopy, request);
      EXPECT_EQ(request, kNoRequest);
      if (received == 8) {
        EXPECT_TRUE(st.ok()) << st;
      } else {
        EXPECT_EQ(st, Status::Internal("rank 1 expected 6 bytes from rank 0, which sent 8")) << comm.rank();
      }
      std::vector<std::byte> want(10, std::byte{0xee});
      const std::vector<std::byte> sent = Bytes(8, 0);
      if (comm.rank() == 1 && received == 8) std::copy(sent.begin(), sent.end(), want.begin() + 2);
      if (comm.rank() == 2) std::copy(sent.begin(), sent.begin() + 4, want.begin() + 1);
      if (comm.rank() != 1 || received == 8) {
        EXPECT_EQ(out, want) << comm.rank();
      }
    });
  }
}

// The pairing of a box exchange is kept with rank 0's prepared messages,
// keyed by every rank's: when another rank prepares its messages anew (its
// old ones destroyed, so the new ones may take their address) and rank 0
// keeps its own, the next run pairs again, and rank 2's bytes land where
// its new messages put them.
TEST_P(ThreadComm, BoxMessagesPreparedAnewOnAnotherRankArePairedAgain) {
  RunRanks(3, [](Comm& comm) {
    const int64_t one[] = {1}, four[] = {4};
    // Rank 0 sends input bytes 0..3 to ranks 1 and 2; rank 1 writes them at
    // 0, rank 2 at `at`.
    std::deque<DeviceProgram> programs;  // each outlives its prepared messages
    auto prepare = [&](int64_t at) {
      DeviceProgram& p = programs.emplace_back();
      std::vector<int> to, from;
      if (comm.rank() == 0) {
        p.pack.AddBox(four, 0, one, 0, one, 1);
        p.pack.AddBox(four, 0, one, 4, one, 1);
        p.send_count = {4, 4};
        p.send_offset = {0, 4};
        p.pack_begin = {0, 1, 2};
        p.unpack_begin = {0};
        to = {1, 2};
      } else {
        p.unpack.AddBox(four, 0, one, comm.rank() == 1 ? 0 : at, one, 1);
        p.recv_count = {4};
        p.recv_offset = {0};
        p.unpack_begin = {0, 1};
        p.pack_begin = {0};
        from = {0};
      }
      Result<std::unique_ptr<BoxExchange>> boxes = comm.PrepareBoxes(p, to, from);
      EXPECT_TRUE(boxes.ok()) << boxes.status();
      return boxes.ok() ? std::move(*boxes) : nullptr;
    };
    const std::vector<std::byte> in = Bytes(4, comm.rank());
    const std::vector<std::byte> sent = Bytes(4, 0);
    std::unique_ptr<BoxExchange> boxes = prepare(1);
    ASSERT_NE(boxes, nullptr);
    for (const int64_t at : {1, 1, 5, 3}) {
      if (comm.rank() == 2 && boxes != nullptr && at != 1) {
        boxes.reset();  // freed first: the new ones may take its address
        boxes = prepare(at);
      }
      ASSERT_NE(boxes, nullptr);
      std::vector<std::byte> out(10, std::byte{0xee}), want(10, std::byte{0xee});
      int64_t request = 7;
      ASSERT_TRUE(comm.StartBoxes(*boxes, in.data(), out.data(), Comm::BoxesEnd::kEveryCopy, request).ok());
      if (comm.rank() != 0) std::copy(sent.begin(), sent.end(), want.begin() + (comm.rank() == 1 ? 0 : at));
      EXPECT_EQ(out, want) << "rank " << comm.rank() << ", rank 2 writing at " << at;
    }
  });
}

// Rank 0's program of a pair: `bytes` bytes of its input sent whole to rank
// 1 (`sender`), or rank 1's: received whole into its output.
DeviceProgram OneBoxMessage(bool sender, int64_t bytes) {
  DeviceProgram program;
  const int64_t one[] = {1}, extent[] = {bytes};
  if (sender) {
    program.pack.AddBox(extent, 0, one, 0, one, 1);
    program.send_count = {bytes};
    program.send_offset = {0};
    program.pack_begin = {0, 1};
    program.unpack_begin = {0};
  } else {
    program.unpack.AddBox(extent, 0, one, 0, one, 1);
    program.recv_count = {bytes};
    program.recv_offset = {0};
    program.unpack_begin = {0, 1};
    program.pack_begin = {0};
  }
  return program;
}

// Six ranks split into three pairs, each pair's rank 0 sending `bytes`
// bytes to its rank 1 as box messages, 50 rounds, with one copy permit
// among them all; each round ends as `end` says (kOwnCopies: then a
// barrier of all six stands for the caller's join before the outputs are
// read, and another before the next round rewrites an input).
void RunPairsAtOneCopyPermit(Comm::BoxesEnd end, int64_t bytes) {
  RunRanks(
      6,
      [=](Comm& comm) {
        Result<std::unique_ptr<Comm>> pair = comm.Split(comm.rank() % 3, comm.rank());
        ASSERT_TRUE(pair.ok()) << pair.status();
        Comm& p = **pair;
        const bool sender = p.rank() == 0;
        const DeviceProgram program = OneBoxMessage(sender, bytes);
        Result<std::unique_ptr<BoxExchange>> boxes =
            p.PrepareBoxes(program, sender ? std::vector<int>{1} : std::vector<int>{},
                           sender ? std::vector<int>{} : std::vector<int>{0});
        ASSERT_TRUE(boxes.ok()) << boxes.status();
        const bool joined = end == Comm::BoxesEnd::kOwnCopies;
        std::vector<std::byte> in, out(static_cast<size_t>(bytes));
        for (int round = 0; round < 50; ++round) {
          in = Bytes(bytes, 100 * comm.rank() + round);
          int64_t request = 7;
          ASSERT_TRUE(p.StartBoxes(**boxes, in.data(), out.data(), end, request).ok());
          EXPECT_EQ(request, kNoRequest);
          if (joined) {
            ASSERT_TRUE(comm.Barrier().ok());
          }
          if (!sender) {
            ASSERT_EQ(out, Bytes(bytes, 100 * (comm.rank() - 3) + round)) << comm.rank() << " round " << round;
          }
          if (joined) {
            ASSERT_TRUE(comm.Barrier().ok());
          }
        }
      },
      10, /*copiers=*/1);
}

// Groups split from one set of comms share its copy permits: with one
// permit and three pairs exchanging box messages at once, every exchange
// still completes, each copied whole by a rank of its own group.
TEST_P(ThreadComm, GroupsTakeTurnsAtOneCopyPermit) { RunPairsAtOneCopyPermit(Comm::BoxesEnd::kEveryCopy, 4096); }

// A box exchange that ends at a rank's own copies (BoxesEnd::kOwnCopies)
// skips its second barrier: once every rank has returned, every output is
// whole, and the next exchange, over the same buffers rewritten, pairs and
// copies as before. With one copy permit among three pairs, most ranks
// leave the copying to another and return at once.
TEST_P(ThreadComm, BoxMessagesEndingAtOwnCopiesAreWholeOnceEveryRankHasReturned) {
  RunPairsAtOneCopyPermit(Comm::BoxesEnd::kOwnCopies, 8192);
}

TEST_P(ThreadComm, Allgatherv) {
  constexpr int kRanks = 4;
  RunRanks(kRanks, [](Comm& comm) {
    const int r = comm.rank();
    const std::vector<std::byte> mine = Bytes(r, r);  // rank 0 sends nothing
    std::vector<int64_t> counts(kRanks), displs(kRanks);
    for (int k = 0, at = 0; k < kRanks; at += k, ++k) {
      counts[k] = k;
      displs[k] = at;
    }
    std::vector<std::byte> recv(0 + 1 + 2 + 3);
    int64_t request = 5;
    ASSERT_TRUE(comm.StartAllgatherv(mine.data(), r, recv.data(), counts, displs, request).ok());
    EXPECT_EQ(request, kNoRequest);
    for (int k = 0; k < kRanks; ++k) {
      const std::vector<std::byte> want = Bytes(k, k);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), recv.begin() + displs[k])) << "from rank " << k;
    }
  });
}

TEST_P(ThreadComm, AllgatherOfEqualChunks) {
  constexpr int kRanks = 4;
  RunRanks(kRanks, [](Comm& comm) {
    const int r = comm.rank();
    const std::vector<std::byte> mine = Bytes(3, r);
    std::vector<std::byte> recv(3 * kRanks);
    int64_t request = 5;
    ASSERT_TRUE(comm.StartAllgather(mine.data(), 3, recv.data(), request).ok());
    EXPECT_EQ(request, kNoRequest);
    for (int k = 0; k < kRanks; ++k) {
      const std::vector<std::byte> want = Bytes(3, k);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), recv.begin() + 3 * k)) << "from rank " << k;
    }
  });
  // Unequal chunks are a caller's error, reported on every rank.
  RunRanks(2, [](Comm& comm) {
    const std::vector<std::byte> mine(4);
    std::vector<std::byte> recv(8);
    int64_t request = kNoRequest;
    EXPECT_FALSE(comm.StartAllgather(mine.data(), 2 + comm.rank(), recv.data(), request).ok());
  });
}

TEST_P(ThreadComm, AlltoallOfEqualChunks) {
  constexpr int kRanks = 4;
  constexpr int64_t kChunk = 5;
  RunRanks(kRanks, [](Comm& comm) {
    const int r = comm.rank();
    // Chunk k of rank r's send buffer goes to rank k: seeded by (r, k).
    std::vector<std::byte> send;
    for (int k = 0; k < kRanks; ++k) {
      const std::vector<std::byte> chunk = Bytes(kChunk, 10 * r + k);
      send.insert(send.end(), chunk.begin(), chunk.end());
    }
    std::vector<std::byte> recv(kChunk * kRanks);
    int64_t request = 5;
    ASSERT_TRUE(comm.StartAlltoall(send.data(), kChunk, recv.data(), request).ok());
    EXPECT_EQ(request, kNoRequest);
    for (int k = 0; k < kRanks; ++k) {
      const std::vector<std::byte> want = Bytes(kChunk, 10 * k + r);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), recv.begin() + kChunk * k)) << "from rank " << k;
    }
  });
  // Unequal chunks are a caller's error, reported on every rank.
  RunRanks(2, [](Comm& comm) {
    const std::vector<std::byte> send(8);
    std::vector<std::byte> recv(8);
    int64_t request = kNoRequest;
    EXPECT_FALSE(comm.StartAlltoall(send.data(), 3 + comm.rank(), recv.data(), request).ok());
  });
}

// Rank k gets every rank's chunk k combined, in the element type's
// arithmetic: s8 sums wrap, max keeps the largest, bf16 sums in f32 and
// rounds after each combination.
TEST_P(ThreadComm, ReduceScatterOfEqualChunks) {
  constexpr int kRanks = 4;
  RunRanks(kRanks, [](Comm& comm) {
    const int r = comm.rank();
    // s8: rank r's element i of chunk k is 40 * (r + 1) + k + i; four ranks sum past 127 and wrap.
    std::vector<int8_t> send(kRanks * 3);
    for (int k = 0; k < kRanks; ++k)
      for (int i = 0; i < 3; ++i) send[static_cast<size_t>(k * 3 + i)] = static_cast<int8_t>(40 * (r + 1) + k + i);
    std::vector<int8_t> recv(3);
    int64_t request = 5;
    ASSERT_TRUE(comm.StartReduceScatter(reinterpret_cast<const std::byte*>(send.data()), 3,
                                        reinterpret_cast<std::byte*>(recv.data()), DType::kS8, ReduceOp::kSum, request)
                    .ok());
    EXPECT_EQ(request, kNoRequest);
    for (int i = 0; i < 3; ++i) {
      const int sum = 40 * (1 + 2 + 3 + 4) + kRanks * (r + i);  // 400 + ...: wraps modulo 256
      EXPECT_EQ(recv[static_cast<size_t>(i)], static_cast<int8_t>(static_cast<uint8_t>(sum & 0xff))) << "element " << i;
    }
    // f32 max: rank r's chunk k holds (k + 1) * (r == k ? 10 : 1).
    std::vector<float> fsend(kRanks), frecv(1);
    for (int k = 0; k < kRanks; ++k) fsend[static_cast<size_t>(k)] = static_cast<float>((k + 1) * (r == k ? 10 : 1));
    ASSERT_TRUE(comm.StartReduceScatter(reinterpret_cast<const std::byte*>(fsend.data()), 4,
                                        reinterpret_cast<std::byte*>(frecv.data()), DType::kF32, ReduceOp::kMax, request)
                    .ok());
    EXPECT_EQ(frecv[0], static_cast<float>((r + 1) * 10));
    // bf16 sum: 256 + 1 + 1 + 1 in rank order rounds to 256 after each step
    // (bf16 keeps 8 significant bits); exact f32 would give 259.
    const uint16_t bf_256 = 0x4380, bf_1 = 0x3f80;
    std::vector<uint16_t> bsend(kRanks, r == 0 ? bf_256 : bf_1), brecv(1);
    ASSERT_TRUE(comm.StartReduceScatter(reinterpret_cast<const std::byte*>(bsend.data()), 2,
                                        reinterpret_cast<std::byte*>(brecv.data()), DType::kBF16, ReduceOp::kSum, request)
                    .ok());
    EXPECT_EQ(brecv[0], bf_256);
  });
  // Unequal chunks or types are a caller's error, reported on every rank.
  RunRanks(2, [](Comm& comm) {
    const std::vector<std::byte> send(16);
    std::vector<std::byte> recv(8);
    int64_t request = kNoRequest;
    EXPECT_FALSE(comm.StartReduceScatter(send.data(), 4 + 4 * comm.rank(), recv.data(), DType::kF32, ReduceOp::kSum,
                                         request)
                     .ok());
    EXPECT_FALSE(comm.StartReduceScatter(send.data(), 4, recv.data(), comm.rank() ? DType::kF32 : DType::kS32,
                                         ReduceOp::kSum, request)
                     .ok());
  });
}

TEST_P(ThreadComm, AllReduceOfOtherLengthsIsTheSameErrorOnEveryRank) {
  RunRanks(3, [](Comm& comm) {
    std::vector<int64_t> v(comm.rank() == 2 ? 3 : 2, 1);
    EXPECT_EQ(comm.AllReduce(v, Comm::ReduceOp::kSum),
              Status::Internal("AllReduce: rank 0 passed 2 values (op 2), rank 2 3 (op 2)"));
    int64_t w = comm.rank();  // and the group goes on
    ASSERT_TRUE(comm.AllReduce(std::span<int64_t>(&w, 1), Comm::ReduceOp::kMax).ok());
    EXPECT_EQ(w, 2);
  });
}

TEST_P(ThreadComm, AllReduceOfEqualBuffers) {
  constexpr int kRanks = 4;
  RunRanks(kRanks, [](Comm& comm) {
    const int r = comm.rank();
    // s8: rank r's element i is 40 * (r + 1) + i; four ranks sum past 127 and wrap.
    std::vector<int8_t> send(5);
    for (int i = 0; i < 5; ++i) send[static_cast<size_t>(i)] = static_cast<int8_t>(40 * (r + 1) + i);
    std::vector<int8_t> recv(5, 7);
    int64_t request = 5;
    ASSERT_TRUE(comm.StartAllReduce(reinterpret_cast<const std::byte*>(send.data()), 5,
                                    reinterpret_cast<std::byte*>(recv.data()), DType::kS8, ReduceOp::kSum, request)
                    .ok());
    EXPECT_EQ(request, kNoRequest);
    for (int i = 0; i < 5; ++i) {
      const int sum = 40 * (1 + 2 + 3 + 4) + kRanks * i;  // 400 + ...: wraps modulo 256
      EXPECT_EQ(recv[static_cast<size_t>(i)], static_cast<int8_t>(static_cast<uint8_t>(sum & 0xff))) << "element " << i;
    }
    // f32 min, every rank gets the same: element i is i - r on rank r.
    std::vector<float> fsend(3), frecv(3);
    for (int i = 0; i < 3; ++i) fsend[static_cast<size_t>(i)] = static_cast<float>(i - r);
    ASSERT_TRUE(comm.StartAllReduce(reinterpret_cast<const std::byte*>(fsend.data()), 12,
                                    reinterpret_cast<std::byte*>(frecv.data()), DType::kF32, ReduceOp::kMin, request)
                    .ok());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(frecv[static_cast<size_t>(i)], static_cast<float>(i - (kRanks - 1)));
    // bf16 sum: 256 + 1 + 1 + 1 in rank order rounds to 256 after each step.
    const uint16_t bf_256 = 0x4380, bf_1 = 0x3f80;
    std::vector<uint16_t> bsend(2, r == 0 ? bf_256 : bf_1), brecv(2);
    ASSERT_TRUE(comm.StartAllReduce(reinterpret_cast<const std::byte*>(bsend.data()), 4,
                                    reinterpret_cast<std::byte*>(brecv.data()), DType::kBF16, ReduceOp::kSum, request)
                    .ok());
    EXPECT_EQ(brecv[0], bf_256);
    EXPECT_EQ(brecv[1], bf_256);
  });
  // Unequal sizes, types or ops are a caller's error, reported on every rank.
  RunRanks(2, [](Comm& comm) {
    const std::vector<std::byte> send(16);
    std::vector<std::byte> recv(16);
    int64_t request = kNoRequest;
    EXPECT_FALSE(comm.StartAllReduce(send.data(), 4 + 4 * comm.rank(), recv.data(), DType::kF32, ReduceOp::kSum, request)
                     .ok());
    EXPECT_FALSE(comm.StartAllReduce(send.data(), 8, recv.data(), DType::kF32,
                                     comm.rank() ? ReduceOp::kMax : ReduceOp::kSum, request)
                     .ok());
  });
}

// The timeout that turns a rank missing from a collective into an error,
// not a hang.
TEST_P(ThreadComm, ARankMissingFromABarrierIsAnErrorNotAHang) {
  const auto start = std::chrono::steady_clock::now();
  RunRanks(
      2,
      [](Comm& comm) {
        if (comm.rank() == 1) return;  // never comes
        const Status st = comm.Barrier();
        EXPECT_EQ(st.code(), Status::Code::kInternal);
        EXPECT_EQ(st, Status::Internal("rank 0 waited 0.2 s for 1 of the 2 ranks at Barrier"));
        // Broken for good: the next wait fails at once.
        const auto again = std::chrono::steady_clock::now();
        EXPECT_EQ(comm.Barrier(), st);
        EXPECT_LT(std::chrono::steady_clock::now() - again, std::chrono::milliseconds(100));
      },
      0.2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

}  // namespace
}  // namespace reshard
