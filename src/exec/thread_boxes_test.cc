// Threads' box messages without threads: what Prepare builds from a
// program's copies, how a receiver's walk meets its sender's, and the
// direct copies it folds them into (the collective that runs them:
// thread_comm_test.cc).
#include "exec/thread_boxes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "exec/copy_kernel.h"
#include "exec/exec_checker.h"
#include "reshard/exchange.h"
#include "reshard/host_buffer.h"
#include "reshard/notation.h"

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

// Rank 0 sends rank 1 one box of `extent` bytes, read from its input at 0
// with strides `in` and written into rank 1's output at `at` with strides
// `out`, packed tight in between: the two ranks' programs.
std::pair<DeviceProgram, DeviceProgram> OneBox(std::span<const int64_t> extent, std::span<const int64_t> in, int64_t at,
                                               std::span<const int64_t> out) {
  std::vector<int64_t> tight(extent.size(), 1);
  for (size_t d = extent.size() - 1; d-- > 0;) tight[d] = tight[d + 1] * extent[d + 1];
  int64_t bytes = 1;
  for (int64_t e : extent) bytes *= e;
  DeviceProgram sender, receiver;
  sender.pack.AddBox(extent, 0, in, 0, tight, 1);
  sender.send_count = {bytes};
  sender.send_offset = {0};
  sender.pack_begin = {0, 1};
  sender.unpack_begin = {0};
  receiver.unpack.AddBox(extent, 0, tight, at, out, 1);
  receiver.recv_count = {bytes};
  receiver.recv_offset = {0};
  receiver.unpack_begin = {0, 1};
  receiver.pack_begin = {0};
  return {std::move(sender), std::move(receiver)};
}

// What delivering runs in[k] -> out[k] of Bytes(in_bytes, 0) writes into an
// output of out_bytes filled with 0xee (Deliver's).
std::vector<std::byte> Delivered(const std::vector<ByteRun>& in, const std::vector<ByteRun>& out, int64_t in_bytes,
                                 int64_t out_bytes) {
  const std::vector<std::byte> src = Bytes(in_bytes, 0);
  std::vector<std::byte> want(static_cast<size_t>(out_bytes), std::byte{0xee});
  for (size_t k = 0; k < in.size(); ++k)
    std::copy_n(src.begin() + in[k].buffer, in[k].bytes, want.begin() + out[k].buffer);
  return want;
}

// A message of `rows` rows of `pieces` pieces of `piece` bytes, sent in row
// order: piece j of row r at r * in_row + j * in_step in the input, at
// out_at + r * out_row + j * out_step in the output.
struct RowsOfPieces {
  std::vector<ByteRun> in, out;
  int64_t staged = 0;  // the message's bytes
};
RowsOfPieces MakeRowsOfPieces(int64_t rows, int64_t pieces, int64_t piece, int64_t in_row, int64_t in_step,
                              int64_t out_at, int64_t out_row, int64_t out_step) {
  RowsOfPieces m;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < pieces; ++j, m.staged += piece) {
      m.in.push_back({r * in_row + j * in_step, m.staged, piece});
      m.out.push_back({out_at + r * out_row + j * out_step, m.staged, piece});
    }
  return m;
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
  const ThreadBoxes* ranks[] = {from->get(), to->get()};
  const std::unique_ptr<BoxCopies> paired = ThreadBoxes::Pair(ranks, 1);
  EXPECT_EQ(paired->program.bytes, receiver.recv_count[0]);
  const std::byte* inputs[] = {in.data(), nullptr};
  std::byte* outputs[] = {nullptr, out.data()};
  for (int64_t k = 0; k < paired->schedule.tasks(); ++k) paired->schedule.RunTask(k, inputs, outputs);
  return out;
}

// The copies of a message from rank 0 to rank 1, paired.
std::unique_ptr<BoxCopies> PairOf(const DeviceProgram& sender, const DeviceProgram& receiver) {
  Result<std::unique_ptr<ThreadBoxes>> from = ThreadBoxes::Prepare(sender, std::vector<int>{1}, {}, 2);
  Result<std::unique_ptr<ThreadBoxes>> to = ThreadBoxes::Prepare(receiver, {}, std::vector<int>{0}, 2);
  EXPECT_TRUE(from.ok() && to.ok());
  if (!from.ok() || !to.ok()) return nullptr;
  const ThreadBoxes* ranks[] = {from->get(), to->get()};
  std::unique_ptr<BoxCopies> paired = ThreadBoxes::Pair(ranks, 2);
  return paired;
}

// The copies of one rank with no messages (its local copies alone), paired.
std::unique_ptr<BoxCopies> PairAlone(const DeviceProgram& p) {
  Result<std::unique_ptr<ThreadBoxes>> mine = ThreadBoxes::Prepare(p, {}, {}, 1);
  EXPECT_TRUE(mine.ok()) << mine.status();
  if (!mine.ok()) return nullptr;
  const ThreadBoxes* ranks[] = {mine->get()};
  return ThreadBoxes::Pair(ranks, 1);
}

// One rank's paired copies, its schedule run task by task from an input of
// `in_bytes` into an output of `out_bytes`, write what its local copies
// `local`, run one by one, write.
void ExpectWritesAsLocalCopies(const CopyProgram& local, const BoxCopies& paired, int64_t in_bytes, int64_t out_bytes) {
  const std::vector<std::byte> in = Bytes(in_bytes, 3);
  std::vector<std::byte> want(static_cast<size_t>(out_bytes), std::byte{0xee}), got = want;
  for (const CopyOp& op : local.ops) RunCopy(local, op, in.data(), want.data(), 0, CopyUnits(local, op));
  const std::byte* inputs[] = {in.data()};
  std::byte* outputs[] = {got.data()};
  for (int64_t k = 0; k < paired.schedule.tasks(); ++k) paired.schedule.RunTask(k, inputs, outputs);
  EXPECT_EQ(got, want);
}

// Expects `p` to be n copies of one dim, copy k reading at src.first + k *
// src.second and writing at dst.first + k * dst.second, runs of `run` bytes
// repeated over `dim`.
void ExpectOneDimCopies(const CopyProgram& p, size_t n, std::pair<int64_t, int64_t> src,
                        std::pair<int64_t, int64_t> dst, int64_t run, const CopyDim& dim) {
  ASSERT_EQ(p.ops.size(), n);
  for (size_t k = 0; k < n; ++k) {
    const CopyOp& op = p.ops[k];
    const int64_t i = static_cast<int64_t>(k);
    EXPECT_EQ(op.src_offset, src.first + i * src.second) << k;
    EXPECT_EQ(op.dst_offset, dst.first + i * dst.second) << k;
    EXPECT_EQ(op.run_bytes, run) << k;
    ASSERT_EQ(op.num_dims, 1) << k;
    EXPECT_EQ(p.dims[static_cast<size_t>(op.first_dim)], dim) << k;
  }
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
  const int64_t extent[] = {2, 4}, in_rows[] = {8, 1}, out_rows[] = {16, 1};
  const auto [sender, receiver] = OneBox(extent, in_rows, 3, out_rows);
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

TEST(ThreadBoxes, PairedRunsFoldBackIntoOneBox) {
  // A [3,4,8] box of bytes, contiguous in the sender's input, written into
  // rows of 32 bytes, planes of 160: 96 runs of 8 bytes fold into one
  // copy of two dims (4 rows a plane, 3 planes).
  const int64_t extent[] = {3, 4, 8}, tight[] = {32, 8, 1}, wide[] = {160, 32, 1};
  const auto [sender, receiver] = OneBox(extent, tight, 5, wide);
  const std::unique_ptr<BoxCopies> direct = PairOf(sender, receiver);
  ASSERT_NE(direct, nullptr);
  ASSERT_EQ(direct->program.ops.size(), 1u);
  const CopyOp& op = direct->program.ops[0];
  EXPECT_EQ(op.src_offset, 0);
  EXPECT_EQ(op.dst_offset, 5);
  EXPECT_EQ(op.run_bytes, 8);
  ASSERT_EQ(op.num_dims, 2);
  EXPECT_EQ(direct->program.dims[0], (CopyDim{.count = 3, .src_stride = 32, .dst_stride = 160}));
  EXPECT_EQ(direct->program.dims[1], (CopyDim{.count = 4, .src_stride = 8, .dst_stride = 32}));
  EXPECT_EQ(direct->program.bytes, 96);
}

// Planes of 4 KiB or more stay copies of their own: a [3,64,64] box (planes
// of 64 rows of 64 bytes) pairs into 3 copies of one dim, which the copy
// schedule interleaves with the other boxes writing the same target rows.
TEST(ThreadBoxes, PlanesOfAPageOrMoreAreNotFolded) {
  const int64_t extent[] = {3, 64, 64}, tight[] = {4096, 64, 1}, wide[] = {20480, 128, 1};
  const auto [sender, receiver] = OneBox(extent, tight, 0, wide);
  const std::unique_ptr<BoxCopies> direct = PairOf(sender, receiver);
  ASSERT_NE(direct, nullptr);
  ExpectOneDimCopies(direct->program, 3, {0, 4096}, {0, 20480}, 64,
                     CopyDim{.count = 64, .src_stride = 64, .dst_stride = 128});
  EXPECT_EQ(direct->program.bytes, 3 * 4096);
}

TEST(ThreadBoxes, RowsEndingInAPieceOfAnotherLengthFoldApart) {
  // Eight rows, each a 32-byte piece (an uneven array's last column) then
  // eight of 64 bytes, 128 apart: rows of 1 KiB in the input, 2 KiB in the
  // output, sent in row order. The short pieces fold into one column, the
  // others into one box of eight planes, where the short piece of each row
  // used to end the long ones' planes.
  std::vector<ByteRun> in, out;
  int64_t staged = 0;
  for (int64_t r = 0; r < 8; ++r) {
    in.push_back({r * 1024, staged, 32});
    out.push_back({r * 2048, staged, 32});
    staged += 32;
    for (int64_t j = 0; j < 8; ++j, staged += 64) {
      in.push_back({r * 1024 + 64 + j * 128, staged, 64});
      out.push_back({r * 2048 + 64 + j * 128, staged, 64});
    }
  }
  const DeviceProgram sender = OneMessage(true, in), receiver = OneMessage(false, out);
  const std::unique_ptr<BoxCopies> paired = PairOf(sender, receiver);
  ASSERT_NE(paired, nullptr);
  ASSERT_EQ(paired->program.ops.size(), 2u);
  const bool column_first = paired->program.ops[0].run_bytes == 32;
  const CopyOp& column = paired->program.ops[column_first ? 0 : 1];
  const CopyOp& planes = paired->program.ops[column_first ? 1 : 0];
  EXPECT_EQ(column.src_offset, 0);
  EXPECT_EQ(column.dst_offset, 0);
  EXPECT_EQ(column.run_bytes, 32);
  ASSERT_EQ(column.num_dims, 1);
  EXPECT_EQ(paired->program.dims[static_cast<size_t>(column.first_dim)],
            (CopyDim{.count = 8, .src_stride = 1024, .dst_stride = 2048}));
  EXPECT_EQ(planes.src_offset, 64);
  EXPECT_EQ(planes.dst_offset, 64);
  EXPECT_EQ(planes.run_bytes, 64);
  ASSERT_EQ(planes.num_dims, 2);
  EXPECT_EQ(paired->program.dims[static_cast<size_t>(planes.first_dim)],
            (CopyDim{.count = 8, .src_stride = 1024, .dst_stride = 2048}));
  EXPECT_EQ(paired->program.dims[static_cast<size_t>(planes.first_dim) + 1],
            (CopyDim{.count = 8, .src_stride = 128, .dst_stride = 128}));
  EXPECT_EQ(paired->program.bytes, staged);
  EXPECT_EQ(Deliver(sender, receiver, 8 * 1024, 8 * 2048), Delivered(in, out, 8 * 1024, 8 * 2048));
}

// A box of 16 planes or more whose rows are pieces of a line or more is
// copied as columns, a one-dim copy down the rows for each piece of a row
// (the copy schedule's loop for one-dim copies takes them); with fewer
// rows, or pieces under a line, it stays one copy of two dims.
TEST(ThreadBoxes, ManyRowsOfLinePiecesAreCopiedAsColumns) {
  for (const auto& [rows, piece] : {std::pair<int64_t, int64_t>{16, 64}, {40, 96}, {15, 64}, {16, 32}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows of 3 pieces of " << piece << " bytes");
    // Each row: 3 pieces, 2 * piece apart in the input (rows of 1 KiB),
    // 3 * piece apart in the output (rows of 2 KiB), sent in row order.
    const auto [in, out, staged] = MakeRowsOfPieces(rows, 3, piece, 1024, 2 * piece, 8, 2048, 3 * piece);
    const DeviceProgram sender = OneMessage(true, in), receiver = OneMessage(false, out);
    const std::unique_ptr<BoxCopies> paired = PairOf(sender, receiver);
    ASSERT_NE(paired, nullptr);
    EXPECT_EQ(paired->program.bytes, staged);
    if (rows >= 16 && piece >= 64) {
      ExpectOneDimCopies(paired->program, 3, {0, 2 * piece}, {8, 3 * piece}, piece,
                         CopyDim{.count = rows, .src_stride = 1024, .dst_stride = 2048});
    } else {
      ASSERT_EQ(paired->program.ops.size(), 1u);
      const CopyOp& op = paired->program.ops[0];
      ASSERT_EQ(op.num_dims, 2);
      EXPECT_EQ(paired->program.dims[static_cast<size_t>(op.first_dim)],
                (CopyDim{.count = rows, .src_stride = 1024, .dst_stride = 2048}));
      EXPECT_EQ(paired->program.dims[static_cast<size_t>(op.first_dim) + 1],
                (CopyDim{.count = 3, .src_stride = 2 * piece, .dst_stride = 3 * piece}));
    }
    EXPECT_EQ(Deliver(sender, receiver, rows * 1024, rows * 2048), Delivered(in, out, rows * 1024, rows * 2048));
  }
}

// Rows of a page or more whose pieces are 512 bytes or more, repeated at
// fixed strides, are copied as columns whatever their count (the pool's
// direct copies' shape: the rows of a message beside local boxes of that
// shape made groups that read their sources out of order); a lone row,
// pieces under 512 bytes, or planes spanning more than 1 MiB (40 rows 32
// KiB apart) stay rows.
TEST(ThreadBoxes, PlanesOfLongRowsOfLongPiecesAreCopiedAsColumns) {
  for (const auto& [rows, piece] :
       {std::pair<int64_t, int64_t>{8, 512}, {2, 1024}, {32, 512}, {1, 512}, {8, 256}, {40, 512}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows of 10 pieces of " << piece << " bytes");
    // Each row: 10 pieces, 2 * piece apart in the input (rows 32 KiB
    // apart), side by side in the output (rows 32 KiB apart, 64 bytes in),
    // sent in row order: every row reaches a page in the input.
    const auto [in, out, staged] = MakeRowsOfPieces(rows, 10, piece, 32768, 2 * piece, 64, 32768, piece);
    const DeviceProgram sender = OneMessage(true, in), receiver = OneMessage(false, out);
    const std::unique_ptr<BoxCopies> paired = PairOf(sender, receiver);
    ASSERT_NE(paired, nullptr);
    EXPECT_EQ(paired->program.bytes, staged);
    if (rows > 1 && piece >= 512 && rows <= 32) {
      ExpectOneDimCopies(paired->program, 10, {0, 2 * piece}, {64, piece}, piece,
                         CopyDim{.count = rows, .src_stride = 32768, .dst_stride = 32768});
    } else {
      ExpectOneDimCopies(paired->program, static_cast<size_t>(rows), {0, 32768}, {64, 32768}, piece,
                         CopyDim{.count = 10, .src_stride = 2 * piece, .dst_stride = piece});
    }
    EXPECT_EQ(Deliver(sender, receiver, rows * 32768, rows * 32768), Delivered(in, out, rows * 32768, rows * 32768));
  }
}

// A rank's local boxes refolded into columns: two boxes of 16 rows of 64
// bytes, side by side in its rows, refold in destination order into rows
// of two pieces, 16 planes of them, and so into the two columns they were.
TEST(ThreadBoxes, LocalBoxesOfLinePiecesRefoldIntoColumns) {
  DeviceProgram p;
  p.pack_begin = {0};
  p.unpack_begin = {0};
  const int64_t extent[] = {16, 64}, in_rows[] = {512, 1}, out_rows[] = {1024, 1};
  p.local.AddBox(extent, 0, in_rows, 0, out_rows, 1);
  p.local.AddBox(extent, 128, in_rows, 192, out_rows, 1);
  const std::unique_ptr<BoxCopies> paired = PairAlone(p);
  ASSERT_NE(paired, nullptr);
  ExpectOneDimCopies(paired->program, 2, {0, 128}, {0, 192}, 64,
                     CopyDim{.count = 16, .src_stride = 512, .dst_stride = 1024});
  ExpectWritesAsLocalCopies(p.local, *paired, 16 * 512, 16 * 1024);
}

// Rows whose pieces lie a page or more apart stay copies of their own:
// folded into planes they made boxes whose spans reached far beyond their
// bytes, which chain every copy they overlap into one group of the copy
// schedule.
TEST(ThreadBoxes, RowsSpanningAPageAreNotFoldedIntoPlanes) {
  // Four rows of two 64-byte pieces 8 KiB apart, the rows 64 bytes apart.
  std::vector<ByteRun> runs;
  int64_t staged = 0;
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 2; ++j, staged += 64) runs.push_back({r * 64 + j * 8192, staged, 64});
  const DeviceProgram sender = OneMessage(true, runs), receiver = OneMessage(false, runs);
  const std::unique_ptr<BoxCopies> paired = PairOf(sender, receiver);
  ASSERT_NE(paired, nullptr);
  ASSERT_EQ(paired->program.ops.size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    const CopyOp& op = paired->program.ops[r];
    EXPECT_EQ(op.src_offset, static_cast<int64_t>(r) * 64);
    EXPECT_EQ(op.run_bytes, 64);
    ASSERT_EQ(op.num_dims, 1);
    EXPECT_EQ(paired->program.dims[static_cast<size_t>(op.first_dim)],
              (CopyDim{.count = 2, .src_stride = 8192, .dst_stride = 8192}));
  }
}

TEST(ThreadBoxes, ShortLocalBoxesAreRefoldedInDestinationOrder) {
  // A rank's local copies: four 8-row boxes of 64 B, side by side in rows
  // of 256 B of its input and of 512 B of its output (each box 512 B, under
  // a page), and one box of 16 rows of 512 B (8 KiB). The short ones fold,
  // row after row of the output, into one copy of 8 rows of 256 B; the
  // long one stays as it is.
  DeviceProgram p;
  p.pack_begin = {0};
  p.unpack_begin = {0};
  const int64_t narrow[] = {8, 64}, wide[] = {16, 512};
  const int64_t in_rows[] = {256, 1}, out_rows[] = {512, 1}, in_wide[] = {512, 1}, out_wide[] = {1024, 1};
  for (int64_t b = 0; b < 4; ++b) p.local.AddBox(narrow, b * 64, in_rows, b * 64, out_rows, 1);
  p.local.AddBox(wide, 2048, in_wide, 4096, out_wide, 1);
  ASSERT_EQ(p.local.ops.size(), 5u);
  const std::unique_ptr<BoxCopies> paired = PairAlone(p);
  ASSERT_NE(paired, nullptr);
  ASSERT_EQ(paired->program.ops.size(), 2u);
  const CopyOp& wide_op = paired->program.ops[0];
  EXPECT_EQ(wide_op.src_offset, 2048);
  EXPECT_EQ(wide_op.dst_offset, 4096);
  EXPECT_EQ(wide_op.run_bytes, 512);
  const CopyOp& folded = paired->program.ops[1];
  EXPECT_EQ(folded.src_offset, 0);
  EXPECT_EQ(folded.dst_offset, 0);
  EXPECT_EQ(folded.run_bytes, 256);
  ASSERT_EQ(folded.num_dims, 1);
  EXPECT_EQ(paired->program.dims[static_cast<size_t>(folded.first_dim)],
            (CopyDim{.count = 8, .src_stride = 256, .dst_stride = 512}));
  EXPECT_EQ(paired->program.bytes, p.local.bytes);
  // And the schedule writes what the copies as given write.
  ExpectWritesAsLocalCopies(p.local, *paired, 2048 + 16 * 512, 4096 + 16 * 1024);
}

// The same of runs of 16 bytes (bf16 8x8 blocks): four 8-row boxes of 16 B
// side by side in rows of 64 B and of 128 B fold into 8 rows of 64 B.
TEST(ThreadBoxes, LocalBoxesOf16ByteRunsAreRefolded) {
  DeviceProgram p;
  p.pack_begin = {0};
  p.unpack_begin = {0};
  const int64_t narrow[] = {8, 16}, in_rows[] = {64, 1}, out_rows[] = {128, 1};
  for (int64_t b = 0; b < 4; ++b) p.local.AddBox(narrow, b * 16, in_rows, b * 16, out_rows, 1);
  const std::unique_ptr<BoxCopies> paired = PairAlone(p);
  ASSERT_NE(paired, nullptr);
  ASSERT_EQ(paired->program.ops.size(), 1u);
  const CopyOp& folded = paired->program.ops[0];
  EXPECT_EQ(folded.run_bytes, 64);
  ASSERT_EQ(folded.num_dims, 1);
  EXPECT_EQ(paired->program.dims[static_cast<size_t>(folded.first_dim)],
            (CopyDim{.count = 8, .src_stride = 64, .dst_stride = 128}));
  ExpectWritesAsLocalCopies(p.local, *paired, 8 * 64, 8 * 128);
}

TEST(ThreadBoxes, LocalBoxesOfPageLongPlanesAreSplitIntoPlanes) {
  // A rank's local copies: a 4-D box of 2 x 3 planes, each 16 rows of 256 B
  // (4 KiB, as long as BoxFolder leaves a message's planes of pieces under
  // 512 bytes), and a 3-D box
  // of 16 planes of 2 rows (512 B planes, 8 KiB in all). The first becomes
  // six copies of one plane each, in row-major order of its outer dims, as
  // a message's pieces would; the second stays as it is.
  DeviceProgram p;
  p.pack_begin = {0};
  p.unpack_begin = {0};
  const int64_t long_planes[] = {2, 3, 16, 256}, short_planes[] = {16, 2, 256};
  const int64_t long_in[] = {65536, 16384, 512, 1}, long_out[] = {40000, 12000, 300, 1};
  const int64_t short_in[] = {1536, 512, 1}, short_out[] = {600, 300, 1};
  p.local.AddBox(long_planes, 0, long_in, 0, long_out, 1);
  p.local.AddBox(short_planes, 131072, short_in, 100000, short_out, 1);
  ASSERT_EQ(p.local.ops.size(), 2u);
  ASSERT_EQ(p.local.ops[0].num_dims, 3);
  ASSERT_EQ(p.local.ops[1].num_dims, 2);
  const std::unique_ptr<BoxCopies> paired = PairAlone(p);
  ASSERT_NE(paired, nullptr);
  const CopyProgram& got_ops = paired->program;
  ASSERT_EQ(got_ops.ops.size(), 7u);
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t q = 0; q < 3; ++q) {
      const CopyOp& plane = got_ops.ops[static_cast<size_t>(o * 3 + q)];
      EXPECT_EQ(plane.src_offset, o * 65536 + q * 16384);
      EXPECT_EQ(plane.dst_offset, o * 40000 + q * 12000);
      EXPECT_EQ(plane.run_bytes, 256);
      ASSERT_EQ(plane.num_dims, 1);
      EXPECT_EQ(got_ops.dims[static_cast<size_t>(plane.first_dim)],
                (CopyDim{.count = 16, .src_stride = 512, .dst_stride = 300}));
    }
  EXPECT_EQ(got_ops.ops[6].src_offset, 131072);
  EXPECT_EQ(got_ops.ops[6].num_dims, 2);
  EXPECT_EQ(got_ops.bytes, p.local.bytes);
  // And the schedule writes what the copies as given write.
  ExpectWritesAsLocalCopies(p.local, *paired, 131072 + 16 * 1536, 100000 + 16 * 600);
}

TEST(ThreadBoxes, RandomMessagesArriveWhereTheReceiverPlacesThem) {
  // Random messages: the sender's input cut into random runs placed in the
  // message in a random order, the receiver's output likewise, and runs
  // of one length at random strides (which fold). Every byte must land
  // where the receiver's walk puts it, and nothing else be written.
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t bytes = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    // One side's runs: the message's bytes cut at random (or into runs of
    // one length), each at its own place in a buffer with gaps.
    auto side = [&](int64_t& buffer_bytes) {
      std::vector<int64_t> cuts = {0, bytes};
      const int64_t even = std::uniform_int_distribution<int64_t>(1, 9)(rng);
      const bool regular = rng() % 2 == 0;
      for (int64_t c = 1; c < bytes; ++c)
        if (regular ? c % even == 0 : rng() % 5 == 0) cuts.push_back(c);
      std::sort(cuts.begin(), cuts.end());
      std::vector<size_t> order(cuts.size() - 1);
      std::iota(order.begin(), order.end(), 0);
      if (rng() % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
      const int64_t gap = std::uniform_int_distribution<int64_t>(0, 3)(rng);
      std::vector<ByteRun> runs;
      int64_t at = 0;
      for (size_t k : order) {
        runs.push_back({at, cuts[k], cuts[k + 1] - cuts[k]});
        at += cuts[k + 1] - cuts[k] + gap;
      }
      buffer_bytes = at;
      return runs;
    };
    int64_t in_bytes = 0, out_bytes = 0;
    const std::vector<ByteRun> sent = side(in_bytes), received = side(out_bytes);
    const std::vector<std::byte> out =
        Deliver(OneMessage(true, sent), OneMessage(false, received), in_bytes, out_bytes);
    // The reference: message byte m comes from the sender's run holding it
    // and goes to the receiver's.
    const std::vector<std::byte> in = Bytes(in_bytes, 0);
    std::vector<std::byte> message(static_cast<size_t>(bytes));
    for (const ByteRun& r : sent)
      for (int64_t i = 0; i < r.bytes; ++i)
        message[static_cast<size_t>(r.staged + i)] = in[static_cast<size_t>(r.buffer + i)];
    std::vector<std::byte> want(static_cast<size_t>(out_bytes), std::byte{0xee});
    for (const ByteRun& r : received)
      for (int64_t i = 0; i < r.bytes; ++i)
        want[static_cast<size_t>(r.buffer + i)] = message[static_cast<size_t>(r.staged + i)];
    ASSERT_EQ(out, want) << "trial " << trial;
  }
}

// Every rank's box messages of a compiled program's one step, paired.
std::unique_ptr<BoxCopies> PairProgram(const PlanProgram& program) {
  const StepProgram& step = program.steps()[0];
  const int n = static_cast<int>(step.devices.size());
  std::vector<std::unique_ptr<ThreadBoxes>> prepared;
  std::vector<const ThreadBoxes*> ranks;
  for (const DeviceProgram& dp : step.devices) {
    const std::vector<int> to(dp.send_peer.begin(), dp.send_peer.end()), from(dp.recv_peer.begin(), dp.recv_peer.end());
    Result<std::unique_ptr<ThreadBoxes>> boxes = ThreadBoxes::Prepare(dp, to, from, n);
    EXPECT_TRUE(boxes.ok()) << boxes.status();
    if (!boxes.ok()) return nullptr;
    ranks.push_back(boxes->get());
    prepared.push_back(std::move(*boxes));
  }
  return ThreadBoxes::Pair(ranks, 2);  // (keeps no pointer to the prepared messages)
}

// Where the program holds its direct copies and they are fewer ops than the
// folded pieces, they are the messages' copies. 25x25 f64 blocks on 4x2
// into 2x2 on 1x8 (the 3584^2 pair of docs/benchmarks.md scaled down): the
// staged order walks each message row by row across blocks whose columns
// do not line up, and folds into many short boxes; the direct copies are
// one column of rows per pair of blocks. Both move every element where the
// target places it.
TEST(ThreadBoxes, FewerDirectCopiesAreTakenOverFoldedPieces) {
  const std::vector<int64_t> shape = {448, 448};
  const Layout src =
      ParseLayout("blockcyclic(block=[25,25],grid=[4,2])", shape, DType::kF64, std::nullopt).value().layout;
  const Layout dst =
      ParseLayout("blockcyclic(block=[2,2],grid=[1,8])", shape, DType::kF64, std::nullopt).value().layout;
  const Exchange ex = Exchange::Create(src, dst).value();
  CompileOptions staged;
  staged.copies = CopyForms::kStaged;
  const PlanProgram both = PlanProgram::Compile(ex).value();  // (both forms)
  const PlanProgram staged_only = PlanProgram::Compile(ex, staged).value();
  size_t direct_ops = 0, local_ops = 0;
  for (const DeviceProgram& dp : both.steps()[0].devices) {
    direct_ops += dp.direct.ops.size();
    local_ops += dp.local.ops.size();
  }
  const std::unique_ptr<BoxCopies> direct = PairProgram(both), folded = PairProgram(staged_only);
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(folded, nullptr);
  EXPECT_EQ(direct->program.ops.size(), direct_ops + local_ops);
  EXPECT_GT(folded->program.ops.size(), 4 * direct->program.ops.size());
  for (const BoxCopies* copies : {direct.get(), folded.get()}) {
    std::vector<HostBuffer> in, out;
    std::vector<const std::byte*> inputs;
    std::vector<std::byte*> outputs;
    for (int64_t d : both.devices()) {
      in.emplace_back(src.LocalBytes(d));
      out.emplace_back(dst.LocalBytes(d));
      FillTags(src, d, in.back().span());
      inputs.push_back(in.back().data());
      outputs.push_back(out.back().data());
    }
    for (int64_t k = 0; k < copies->schedule.tasks(); ++k) copies->schedule.RunTask(k, inputs, outputs);
    for (size_t i = 0; i < out.size(); ++i) {
      const TagCheck check = CheckTags(dst, both.devices()[i], out[i].span());
      EXPECT_EQ(check.mismatches, 0) << (copies == direct.get() ? "direct" : "folded") << ", device " << i << ": "
                                     << check.first_problem;
    }
  }
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
