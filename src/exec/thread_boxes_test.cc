// Threads' box messages without threads: what Prepare builds from a
// program's copies and how a receiver's walk meets its sender's (the
// collective that runs them: thread_comm_test.cc).
#include "exec/thread_boxes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace reshard {
namespace {

std::vector<std::byte> Bytes(int64_t n, int seed) {
  std::vector<std::byte> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<std::byte>((seed * 31 + i) & 0xff);
  return v;
}

// One message's runs: `bytes` bytes at `buffer` in the rank's own buffer,
// placed at `staged` in the message.
struct ByteRun {
  int64_t buffer, staged, bytes;
};

// The sending program (`sending`: its runs `runs` packed in the order
// listed, one message) or the receiving one (its runs unpacked).
DeviceProgram OneMessage(bool sending, const std::vector<ByteRun>& runs) {
  DeviceProgram p;
  const int64_t one[] = {1};
  CopyProgram& copies = sending ? p.pack : p.unpack;
  int64_t bytes = 0;
  for (const ByteRun& r : runs) {
    const int64_t extent[] = {r.bytes};
    if (sending)
      copies.AddBox(extent, r.buffer, one, r.staged, one, 1);
    else
      copies.AddBox(extent, r.staged, one, r.buffer, one, 1);
    bytes += r.bytes;
  }
  const int32_t ops = static_cast<int32_t>(copies.ops.size());
  if (sending) {
    p.send_count = {bytes};
    p.send_offset = {0};
    p.pack_begin = {0, ops};
    p.unpack_begin = {0};
  } else {
    p.recv_count = {bytes};
    p.recv_offset = {0};
    p.unpack_begin = {0, ops};
    p.pack_begin = {0};
  }
  return p;
}

// Rank 0 runs `sender` to rank 1, which runs `receiver`; rank 1's output
// (`out_bytes`, 0xee where nothing is written) after its copy from rank
// 0's input Bytes(in_bytes, 0).
std::vector<std::byte> Deliver(const DeviceProgram& sender, const DeviceProgram& receiver, int64_t in_bytes,
                               int64_t out_bytes) {
  Result<std::unique_ptr<ThreadBoxes>> from = ThreadBoxes::Prepare(sender, std::vector<int>{1}, {}, 2);
  Result<std::unique_ptr<ThreadBoxes>> to = ThreadBoxes::Prepare(receiver, {}, std::vector<int>{0}, 2);
  EXPECT_TRUE(from.ok()) << from.status();
  EXPECT_TRUE(to.ok()) << to.status();
  std::vector<std::byte> out(static_cast<size_t>(out_bytes), std::byte{0xee});
  if (!from.ok() || !to.ok()) return out;
  EXPECT_EQ((*from)->bytes_sent(), sender.send_count[0]);
  EXPECT_EQ((*to)->bytes_received(), receiver.recv_count[0]);
  EXPECT_EQ((*from)->To(0), nullptr);
  EXPECT_EQ((*to)->From(1), nullptr);
  const ThreadBoxes::Message* sent = (*from)->To(1);
  const ThreadBoxes::Message* expected = (*to)->From(0);
  EXPECT_NE(sent, nullptr);
  EXPECT_NE(expected, nullptr);
  if (sent == nullptr || expected == nullptr) return out;
  const std::vector<std::byte> in = Bytes(in_bytes, 0);
  (*to)->CopyFrom(**from, *sent, in.data(), *expected, out.data());
  return out;
}

TEST(ThreadBoxes, RunsListedOutOfStagedOrderAreWalkedInIt) {
  // The message: input bytes 8..11, then 0..3 (listed the other way); the
  // receiver writes its first 2 bytes at 10 and the other 6 at 0.
  const DeviceProgram sender = OneMessage(true, {{0, 4, 4}, {8, 0, 4}});
  const DeviceProgram receiver = OneMessage(false, {{10, 0, 2}, {0, 2, 6}});
  ASSERT_FALSE(StagedInOrder(sender.pack, 0, 2, /*staged_is_dst=*/true));
  const std::vector<std::byte> out = Deliver(sender, receiver, 12, 12);
  const std::vector<std::byte> s = Bytes(12, 0);
  const std::vector<std::byte> message = {s[8], s[9], s[10], s[11], s[0], s[1], s[2], s[3]};
  const std::byte e{0xee};
  const std::vector<std::byte> want = {message[2], message[3], message[4], message[5], message[6], message[7],
                                       e, e, e, e, message[0], message[1]};
  EXPECT_EQ(out, want);
}

TEST(ThreadBoxes, CopiesInStagedOrderAreWalkedRowByRowWithoutAList) {
  // A [2,4] box of a [2,8] input (rows of 8 bytes), written at byte 3 of rows of 16.
  const int64_t extent[] = {2, 4}, packed[] = {4, 1}, in_rows[] = {8, 1}, out_rows[] = {16, 1};
  DeviceProgram sender, receiver;
  sender.pack.AddBox(extent, 0, in_rows, 0, packed, 1);
  sender.send_count = {8};
  sender.send_offset = {0};
  sender.pack_begin = {0, 1};
  sender.unpack_begin = {0};
  receiver.unpack.AddBox(extent, 0, packed, 3, out_rows, 1);
  receiver.recv_count = {8};
  receiver.recv_offset = {0};
  receiver.unpack_begin = {0, 1};
  receiver.pack_begin = {0};
  ASSERT_TRUE(StagedInOrder(sender.pack, 0, 1, /*staged_is_dst=*/true));
  ASSERT_TRUE(StagedInOrder(receiver.unpack, 0, 1, /*staged_is_dst=*/false));
  Result<std::unique_ptr<ThreadBoxes>> walked = ThreadBoxes::Prepare(sender, std::vector<int>{1}, {}, 2);
  ASSERT_TRUE(walked.ok()) << walked.status();
  EXPECT_TRUE((*walked)->runs().empty());
  const std::vector<std::byte> out = Deliver(sender, receiver, 16, 32);
  const std::vector<std::byte> s = Bytes(16, 0);
  std::vector<std::byte> want(32, std::byte{0xee});
  std::copy(s.begin(), s.begin() + 4, want.begin() + 3);
  std::copy(s.begin() + 8, s.begin() + 12, want.begin() + 19);
  EXPECT_EQ(out, want);
}

TEST(ThreadBoxes, AdjacentRunsAreMerged) {
  // Staged out of order (so listed), but bytes 0..3 and 4..7 of the input
  // follow each other: one run of 8 once sorted.
  const DeviceProgram sender = OneMessage(true, {{4, 4, 4}, {0, 0, 4}});
  Result<std::unique_ptr<ThreadBoxes>> boxes = ThreadBoxes::Prepare(sender, std::vector<int>{1}, {}, 2);
  ASSERT_TRUE(boxes.ok()) << boxes.status();
  ASSERT_EQ((*boxes)->runs().size(), 1u);
  EXPECT_EQ((*boxes)->runs()[0].bytes, 8);
}

TEST(ThreadBoxes, RunsMustTileTheMessage) {
  // Staged bytes 0..3 and 6..9 of a message counted as 8: a gap at 4.
  const DeviceProgram p = OneMessage(true, {{0, 0, 4}, {4, 6, 4}});
  EXPECT_EQ(ThreadBoxes::Prepare(p, std::vector<int>{0}, {}, 1).status(),
            Status::Internal("a box message's runs leave a gap or overlap at byte 4 of 8"));
}

TEST(ThreadBoxes, TwoMessagesToOnePeerAreAnError) {
  DeviceProgram p;
  const int64_t extent[] = {4}, one[] = {1};
  p.pack.AddBox(extent, 0, one, 0, one, 1);
  p.pack.AddBox(extent, 4, one, 4, one, 1);
  p.send_count = {4, 4};
  p.send_offset = {0, 4};
  p.pack_begin = {0, 1, 2};
  p.unpack_begin = {0};
  EXPECT_EQ(ThreadBoxes::Prepare(p, std::vector<int>{0, 0}, {}, 1).status(),
            Status::Internal("PrepareBoxes: two messages to rank 0"));
}

TEST(ThreadBoxes, APeerOutsideTheCommIsAnError) {
  const DeviceProgram p = OneMessage(true, {{0, 0, 4}});
  EXPECT_EQ(ThreadBoxes::Prepare(p, std::vector<int>{2}, {}, 2).status(),
            Status::Internal("PrepareBoxes: peer 2 is not a rank of 2"));
}

}  // namespace
}  // namespace reshard
