// Box messages for threads as ranks (thread_boxes.h): preparing a rank's
// walks, and pairing every rank's with its peers' into copies of one schedule.
#include "exec/thread_boxes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "exec/copy_kernel.h"
#include "exec/row_walk.h"

namespace reshard {
namespace {

// One message's runs in staged order, as (offset in the rank's buffer,
// bytes): from its run list, or from its copies op after op, each op's rows
// row-major over its dims, which StagedInOrder makes the staged order. A
// pull walk (two messages' runs are walked against each other), where
// ForEachRun (row_walk.h) pushes.
class RunStream {
 public:
  RunStream(const ThreadBoxes& boxes, const ThreadBoxes::Message& m, bool sending)
      : m_(m), sending_(sending), list_(boxes.runs().data()), k_(m.ops ? m.begin : m.runs_begin) {}

  // The next run; false past the last.
  bool Next(int64_t& at, int64_t& bytes) {
    if (m_.ops == nullptr) {
      if (k_ >= m_.runs_end) return false;
      const BoxRun& r = list_[k_++];
      at = r.at;
      bytes = r.bytes;
      return true;
    }
    while (row_ >= rows_) {  // the next op with rows
      if (k_ >= m_.end) return false;
      StartOp(m_.ops->ops[static_cast<size_t>(k_++)]);
    }
    at = offset_;
    bytes = run_bytes_;
    // Row-major: the last dim fastest, carrying into the ones before.
    ++row_;
    for (size_t d = dims_.size(); d-- > 0;) {
      offset_ += dims_[d].first;
      if (++index_[d] < dims_[d].second) break;
      offset_ -= dims_[d].first * dims_[d].second;
      index_[d] = 0;
    }
    return true;
  }

 private:
  // (StagedInOrder holds: an op's dims as stored are the staged side's
  // memory order, outermost first.)
  void StartOp(const CopyOp& op) {
    const CopyProgram& p = *m_.ops;
    dims_.clear();
    rows_ = 1;
    for (int32_t d = 0; d < op.num_dims; ++d) {
      const CopyDim& c = p.dims[static_cast<size_t>(op.first_dim + d)];
      dims_.emplace_back(sending_ ? c.src_stride : c.dst_stride, c.count);
      rows_ *= c.count;
    }
    index_.assign(dims_.size(), 0);
    row_ = 0;
    offset_ = sending_ ? op.src_offset : op.dst_offset;
    run_bytes_ = op.run_bytes;
  }

  const ThreadBoxes::Message& m_;
  const bool sending_;
  const BoxRun* list_;
  int64_t k_;
  std::vector<std::pair<int64_t, int64_t>> dims_;  // (the buffer side's stride, count), outermost first
  std::vector<int64_t> index_;
  int64_t rows_ = 0, row_ = 0, offset_ = 0, run_bytes_ = 0;
};

// Ops [begin, end) of `p` as message `m` of `bytes` bytes staged at `base`:
// op after op where they are in staged order and start at `base`, else
// their runs sorted by staged offset into `runs`. Internal unless they
// tile the message's bytes exactly.
Status AddMessage(const CopyProgram& p, int32_t begin, int32_t end, int64_t base, int64_t bytes, bool sending,
                  ThreadBoxes::Message& m, std::vector<BoxRun>& runs) {
  m.bytes = bytes;
  if (StagedInOrder(p, begin, end, /*staged_is_dst=*/sending)) {
    int64_t covered = 0;
    for (int32_t k = begin; k < end; ++k) covered += p.OpBytes(p.ops[static_cast<size_t>(k)]);
    const CopyOp* first = begin < end ? &p.ops[static_cast<size_t>(begin)] : nullptr;
    if (covered == bytes && (first == nullptr || (sending ? first->dst_offset : first->src_offset) == base)) {
      m.ops = &p;
      m.begin = begin;
      m.end = end;
      return Status::Ok();
    }
  }
  m.ops = nullptr;
  m.runs_begin = static_cast<int64_t>(runs.size());
  int64_t next = 0;
  for (const StagedRun& s : StagedRuns(p, begin, end, sending)) {
    const BoxRun r{s.staged - base, s.buffer, s.bytes};
    if (r.staged != next)
      return Status::Internal(fmt::format("a box message's runs leave a gap or overlap at byte {} of {}", next, bytes));
    next += r.bytes;
    if (static_cast<int64_t>(runs.size()) > m.runs_begin && runs.back().at + runs.back().bytes == r.at)
      runs.back().bytes += r.bytes;
    else
      runs.push_back(r);
  }
  m.runs_end = static_cast<int64_t>(runs.size());
  if (next != bytes) return Status::Internal(fmt::format("a box message's runs cover {} of its {} bytes", next, bytes));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ThreadBoxes>> ThreadBoxes::Prepare(const DeviceProgram& p, std::span<const int> send_rank,
                                                          std::span<const int> recv_rank, int size) {
  static std::atomic<uint64_t> next_id{1};
  auto boxes = std::make_unique<ThreadBoxes>();
  boxes->size_ = size;
  boxes->id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  boxes->local_ = &p.local;
  // One side's messages: to the send ranks from the pack copies, or from
  // the receive ranks into the unpack copies.
  auto add_side = [&](bool sending) -> Status {
    const std::span<const int> ranks = sending ? send_rank : recv_rank;
    const CopyProgram& copies = sending ? p.pack : p.unpack;
    const std::vector<int32_t>& begin = sending ? p.pack_begin : p.unpack_begin;
    const std::vector<int64_t>& offset = sending ? p.send_offset : p.recv_offset;
    const std::vector<int64_t>& count = sending ? p.send_count : p.recv_count;
    std::vector<Message>& list = sending ? boxes->to_ : boxes->from_;
    list.reserve(ranks.size());
    for (size_t m = 0; m < ranks.size(); ++m) {
      if (ranks[m] < 0 || ranks[m] >= size)
        return Status::Internal(fmt::format("PrepareBoxes: peer {} is not a rank of {}", ranks[m], size));
      if (count[m] < 0) return Status::Internal(fmt::format("PrepareBoxes: {} bytes", count[m]));
      Message& message = list.emplace_back(Message{.peer = ranks[m]});
      RESHARD_RETURN_IF_ERROR(
          AddMessage(copies, begin[m], begin[m + 1], offset[m], count[m], sending, message, boxes->runs_));
      if (!sending && m + 1 < p.direct_begin.size()) {
        int64_t covered = 0;
        for (int32_t k = p.direct_begin[m]; k < p.direct_begin[m + 1]; ++k)
          covered += p.direct.OpBytes(p.direct.ops[static_cast<size_t>(k)]);
        if (covered == count[m]) {
          message.direct = &p.direct;
          message.direct_begin = p.direct_begin[m];
          message.direct_end = p.direct_begin[m + 1];
        }
      }
      (sending ? boxes->sent_ : boxes->received_) += count[m];
    }
    std::sort(list.begin(), list.end(), [](const Message& a, const Message& b) { return a.peer < b.peer; });
    for (size_t m = 1; m < list.size(); ++m)
      if (list[m].peer == list[m - 1].peer)
        return Status::Internal(
            fmt::format("PrepareBoxes: two messages {} rank {}", sending ? "to" : "from", list[m].peer));
    return Status::Ok();
  };
  RESHARD_RETURN_IF_ERROR(add_side(/*sending=*/true));
  RESHARD_RETURN_IF_ERROR(add_side(/*sending=*/false));
  boxes->runs_.shrink_to_fit();
  return boxes;
}

const ThreadBoxes::Message* ThreadBoxes::Find(const std::vector<Message>& list, int peer) {
  const auto it = std::lower_bound(list.begin(), list.end(), peer, [](const Message& m, int p) { return m.peer < p; });
  return it == list.end() || it->peer != peer ? nullptr : &*it;
}

namespace {

// Calls piece(from, to, bytes) for each stretch where the current runs of
// sender's message `sent` (offsets in its input) and receiver's `expected`
// (in its output) overlap, in the message's order: both walks tile its
// bytes, so the overlap of the current runs is one piece, then the walk past
// whichever ends first steps on.
template <typename Piece>
void ForEachPiece(const ThreadBoxes& sender, const ThreadBoxes::Message& sent, const ThreadBoxes& receiver,
                  const ThreadBoxes::Message& expected, Piece piece) {
  RunStream s(sender, sent, /*sending=*/true), r(receiver, expected, /*sending=*/false);
  int64_t s_at = 0, s_bytes = 0, r_at = 0, r_bytes = 0;
  bool s_more = s.Next(s_at, s_bytes), r_more = r.Next(r_at, r_bytes);
  while (s_more && r_more) {
    const int64_t n = std::min(s_bytes, r_bytes);
    if (n > 0) piece(s_at, r_at, n);
    s_at += n, s_bytes -= n, r_at += n, r_bytes -= n;
    if (s_bytes == 0) s_more = s.Next(s_at, s_bytes);
    if (r_bytes == 0) r_more = r.Next(r_at, r_bytes);
  }
}

// Planes shorter than this fold into one copy (BoxFolder::EndRow says why).
constexpr int64_t kFoldPlaneBytes = 4096;
// A folded box of kColumnPlanes planes or more whose rows are pieces of
// kColumnRunBytes (a cache line) or more is copied as columns
// (BoxFolder::EmitPlane says why; but see kLongColumnSpanBytes for rows of
// a page or more).
constexpr int64_t kColumnPlanes = 16;
constexpr int64_t kColumnRunBytes = 64;
// Rows of a page or more whose pieces are this long or longer fold into
// planes copied as columns, however few (BoxFolder::EmitPlane says why).
constexpr int64_t kLongColumnRunBytes = 512;
// ... unless the box spans more than this in either buffer: its planes then
// stay rows (EmitPlane).
constexpr int64_t kLongColumnSpanBytes = int64_t{1} << 20;

// Folds pieces (from, to, bytes), in the order given, back into box copies of
// up to two strided dims: a piece that extends a box's last one on both sides
// lengthens its run; one that repeats it at fixed positive strides is its next
// row; a row under 4 KiB (or a row of pieces of 512 bytes or more) that repeats
// the box's last at fixed strides is its next plane. Up to kOpenBoxes boxes
// fold at once: a piece goes to the most recent box it extends, else starts a
// row of the most recent box whose last row began with a piece of its length,
// else starts a box (the least recent one emitted where all are open). Where
// rows end in a piece of another length (an uneven array's last column of
// blocks), that piece, folding into the same box, ended each row's box, and the
// short pieces stayed single runs: 8x8 f64 blocks into 24x24 over 3000 x 3000
// had 6,016 of them, now 750 columns of 8 rows (7.7 ms a run, 6.0 apart). A box
// of kColumnPlanes planes or more whose rows are pieces of a line or more, or
// of two planes or more whose rows of a page or more are pieces of 512 bytes or
// more and which spans at most 1 MiB, is emitted as columns, a one-dim copy for
// each piece of a row (EmitPlane); a box of such long rows spanning more, as a
// copy of each row. One message's pieces: its ops go to `program`, each with
// `peer` appended to `tags`.
class BoxFolder {
 public:
  BoxFolder(CopyProgram& program, std::vector<int32_t>& tags, int32_t peer)
      : program_(program), tags_(tags), peer_(peer) {}

  void Add(int64_t from, int64_t to, int64_t bytes) {
    // open_[0, open_count_) are the open boxes, the most recent first.
    for (int k = 0; k < open_count_; ++k)
      if (Extend(open_[static_cast<size_t>(k)].row, from, to, bytes)) return Touch(k);
    int k = 0;
    while (k < open_count_ && open_[static_cast<size_t>(k)].row.first != bytes) ++k;
    if (k < open_count_) {
      EndRow(open_[static_cast<size_t>(k)]);
    } else if (open_count_ < kOpenBoxes) {
      open_[static_cast<size_t>(open_count_)] = Box{};
      ++open_count_;
    } else {
      k = kOpenBoxes - 1;
      Box& oldest = open_[static_cast<size_t>(k)];
      EndRow(oldest);
      EmitPlane(oldest.plane);
      oldest = Box{};
    }
    open_[static_cast<size_t>(k)].row = Row{.from = from, .to = to, .run = bytes, .count = 1, .first = bytes};
    Touch(k);
  }

  // Emits what is pending. Call once after the last Add.
  void Finish() {
    for (int k = 0; k < open_count_; ++k) {
      Box& b = open_[static_cast<size_t>(k)];
      EndRow(b);
      EmitPlane(b.plane);
    }
    open_count_ = 0;
  }

 private:
  static constexpr int kOpenBoxes = 4;

  // `first`: the length of the piece that began the row (a run may lengthen).
  struct Row {
    int64_t from = 0, to = 0, run = 0, count = 0, from_stride = 0, to_stride = 0, first = 0;
  };
  struct Plane {
    Row row;
    int64_t planes = 0, from_stride = 0, to_stride = 0;
  };
  // A box being folded: its planes so far and the row after them.
  struct Box {
    Row row;
    Plane plane;
  };

  // Whether a row reaches a page, in its bytes or its span in either
  // buffer: it then folds into planes only as columns (LongColumns).
  static bool LongRow(const Row& r) {
    return r.count * r.run >= kFoldPlaneBytes ||
           (r.count - 1) * std::max(r.from_stride, r.to_stride) + r.run >= kFoldPlaneBytes;
  }
  // A row that reaches a page whose pieces are kLongColumnRunBytes or
  // more: its planes fold, to be copied as columns (EmitPlane).
  static bool LongColumns(const Row& r) { return r.count > 1 && r.run >= kLongColumnRunBytes && LongRow(r); }

  // The bytes box `p` spans in the buffer where it spans more.
  static int64_t Span(const Plane& p) {
    return std::max((p.planes - 1) * p.from_stride + (p.row.count - 1) * p.row.from_stride,
                    (p.planes - 1) * p.to_stride + (p.row.count - 1) * p.row.to_stride) +
           p.row.run;
  }

  static bool SameShape(const Row& a, const Row& b) {
    return a.run == b.run && a.count == b.count &&
           (a.count == 1 || (a.from_stride == b.from_stride && a.to_stride == b.to_stride));
  }

  // Whether the piece extends row `r` (its run, or its next run), and if so extends it.
  static bool Extend(Row& r, int64_t from, int64_t to, int64_t bytes) {
    if (r.count == 0) return false;
    if (r.count == 1 && from == r.from + r.run && to == r.to + r.run) {
      r.run += bytes;
      return true;
    }
    if (bytes != r.run) return false;
    const int64_t ds = from - r.from, dt = to - r.to;
    if (r.count == 1 && ds > 0 && dt > 0) {
      r.from_stride = ds, r.to_stride = dt, r.count = 2;
      return true;
    }
    if (r.count > 1 && ds == r.count * r.from_stride && dt == r.count * r.to_stride) {
      ++r.count;
      return true;
    }
    return false;
  }

  // Moves open box k to the front (the most recent).
  void Touch(int k) { std::rotate(open_.begin(), open_.begin() + k, open_.begin() + k + 1); }

  void EndRow(Box& b) {
    Row& row = b.row;
    if (row.count == 0) return;
    Plane& p = b.plane;
    // Only planes under a page fold: a row of rows that long is a box of
    // its own, which the copy schedule interleaves row by row with the
    // other boxes writing the same target rows, as the pool copies them
    // (block-cyclic 32x32 f64 blocks to 64x64, 128 MiB: 14.3 ms folded,
    // 5.0 not; 64x64 to 128x128 at 256 MiB: 13.8 against 10.4). Short
    // planes still fold: the canonical case's 512-byte ones, thousands to
    // a message, and 8x8 or 16x16 blocks ran slower unfolded (38.5 against
    // 22.7 ms, 20.3 against 11.0). Nor do rows that reach a page in either
    // buffer: a column of runs down a block's rows, folded into planes
    // block after block, reached across the sender's whole input, and the
    // copy schedule's groups by source chain every copy a copy's span
    // overlaps (8x8 f64 blocks into 24x24 over 3000 x 3000: 10.2 ms a run
    // folded, 7.7 not). Rows that long whose pieces are 512 bytes or more
    // fold all the same, as they are copied as columns (EmitPlane).
    if (p.planes > 0 && SameShape(p.row, row) && (!LongRow(row) || LongColumns(row))) {
      const int64_t ds = row.from - p.row.from, dt = row.to - p.row.to;
      if (p.planes == 1 && ds > 0 && dt > 0) {
        p.from_stride = ds, p.to_stride = dt, p.planes = 2;
        row.count = 0;
        return;
      }
      if (p.planes > 1 && ds == p.planes * p.from_stride && dt == p.planes * p.to_stride) {
        ++p.planes;
        row.count = 0;
        return;
      }
    }
    EmitPlane(p);
    p = Plane{.row = row, .planes = 1};
    row.count = 0;
  }

  void EmitPlane(Plane& p) {
    if (p.planes == 0) return;
    // A box of kColumnPlanes planes or more whose rows are pieces of a line
    // or more each (a sender's blocks along a row, all for one target: f64
    // 48x48 blocks on 1x8 into 16x16 on 1x8) is copied as columns, a copy
    // of one dim down the planes for each piece of a row, as the pool's
    // direct copies are: the copy schedule runs groups of one-dim copies in
    // one loop along the rows (RunInterleaved, OrderAlongRows), while a
    // copy of two dims whose inner rows lie apart takes a row of its pieces
    // a turn. 4096^2 f64 48x48 blocks into 16x16 on 1x8: 7.74 ms a run
    // folded, 5.24 as columns; f32 200x200 on 1x8 into 64x64 on 1x8,
    // 5053^2: 6.31 and 4.46 (on the ranks, medians of 5 alternated runs,
    // builds with the rule switched, not kept). Runs under a line stay
    // folded: a row of them writes parts of the same target lines, and as
    // columns the bf16 canonical case (16-byte runs) took 6.21 ms against
    // 4.33 and the f32 one with eight senders a row (32 bytes) 13.3 against
    // 8.6. So do boxes of fewer planes (8-row blocks as columns of 8 rows:
    // f64 8x8 blocks on 4x2 into 200x200 on 1x8, 3584^2, 7.40 ms against
    // 5.60 folded). Columns are more ops than the box: Pair's choice of the
    // direct copies where they are fewer counts them, as it counts the
    // direct copies, which have the columns' shape.
    // Planes of rows of a page or more whose pieces are 512 bytes or more
    // (LongColumns) are copied as columns however few: as rows, a copy a
    // row, they ran beside the rank's local boxes, columns of the same
    // pieces, in groups by source that read rows and columns in turn (f32
    // 8x8 blocks on 8x1 into 128x128 on 4x2, 5053^2, 8-row columns of
    // 512-byte pieces: 1.36x `direct`'s time; as columns, 0.81 to 0.84 of
    // the time as rows, on the ranks, medians of 7 to 11 alternated runs).
    // Pieces of 64 or 128 bytes so took up to 1.9x the time (f64 24x24
    // blocks on 8x1 into 8x8 on 2x4; docs/benchmarks.md, "Random
    // block-cyclic pairs: columns of long rows"). Where such a box spans
    // more than kLongColumnSpanBytes in either buffer, each plane is its
    // row's copy, as before rows that long folded: 256 planes of 64 KiB
    // rows of a 3-D array (f32[256,256,256] P(None,'y',None) to
    // P(None,None,'y'), spanning 32 MiB) as columns beside the rank's local
    // boxes, split into their planes (AddLocalCopies), took 21.7 ms a run
    // against 7.1 to 10.0 as rows.
    const CopyDim planes{.count = p.planes, .src_stride = p.from_stride, .dst_stride = p.to_stride};
    const CopyDim row{.count = p.row.count, .src_stride = p.row.from_stride, .dst_stride = p.row.to_stride};
    const bool long_columns = p.planes > 1 && LongColumns(p.row);
    if (long_columns && Span(p) > kLongColumnSpanBytes) {
      for (int64_t k = 0; k < p.planes; ++k)
        Emit(p.row.from + k * p.from_stride, p.row.to + k * p.to_stride, p.row.run, {row});
    } else if ((p.planes >= kColumnPlanes && p.row.count > 1 && p.row.run >= kColumnRunBytes) || long_columns) {
      for (int64_t i = 0; i < p.row.count; ++i)
        Emit(p.row.from + i * p.row.from_stride, p.row.to + i * p.row.to_stride, p.row.run, {planes});
    } else {
      Emit(p.row.from, p.row.to, p.row.run, {planes, row});
    }
    p = Plane{};
  }

  // Appends a copy of `run` bytes at from / to over `dims` (outermost
  // first; those of one step left out), tagged with the peer.
  void Emit(int64_t from, int64_t to, int64_t run, std::initializer_list<CopyDim> dims) {
    CopyOp op{.src_offset = from,
              .dst_offset = to,
              .run_bytes = run,
              .first_dim = static_cast<int32_t>(program_.dims.size()),
              .num_dims = 0};
    int64_t runs = 1;
    for (const CopyDim& d : dims) {
      if (d.count < 2) continue;
      program_.dims.push_back(d);
      ++op.num_dims;
      runs *= d.count;
    }
    program_.ops.push_back(op);
    program_.bytes += runs * run;
    tags_.push_back(peer_);
  }

  CopyProgram& program_;
  std::vector<int32_t>& tags_;
  const int32_t peer_;
  std::array<Box, kOpenBoxes> open_;
  int open_count_ = 0;
};

// Appends `op` of `from` to `program` as one copy per plane: its innermost
// dim and run, at each index of its outer dims, in row-major order.
// REQUIRES: op.num_dims >= 2.
void AppendPlanes(const CopyProgram& from, const CopyOp& op, CopyProgram& program) {
  const CopyDim* dims = &from.dims[static_cast<size_t>(op.first_dim)];
  const int outer = op.num_dims - 1;
  const CopyDim inner = dims[outer];
  int64_t planes = 1;
  for (int d = 0; d < outer; ++d) planes *= dims[d].count;
  const CopyDim& step = dims[outer - 1];
  ForEachStretch(dims, outer, 0, planes, [&](int64_t src, int64_t dst, int64_t n, int64_t) {
    for (int64_t i = 0; i < n; ++i) {
      program.ops.push_back(CopyOp{.src_offset = op.src_offset + src + i * step.src_stride,
                                   .dst_offset = op.dst_offset + dst + i * step.dst_stride,
                                   .run_bytes = op.run_bytes,
                                   .first_dim = static_cast<int32_t>(program.dims.size()),
                                   .num_dims = 1});
      program.dims.push_back(inner);
      program.bytes += inner.count * op.run_bytes;
    }
  });
}

// A rank's local copies, from its own input, into `program`, each op's sender
// appended to `tags` (the rank). Boxes under kFoldPlaneBytes with runs of
// kRefoldRunBytes or more are refolded from their runs in destination order, as
// a message's pieces are folded in its order, so that they take the shape of
// the messages' copies writing the same target rows: block-cyclic 8x8 f64
// blocks arrive as copies of whole rows of blocks, and local ones left as 8-row
// boxes split each destination group into copies of two shapes, which the
// schedule interleaves row against column (the 8x8 to 64x64 pair at 128 MiB: 24
// ms a run, 15 refolded, as `direct`'s 14; bf16 8x8 blocks into 64x64, 32 MiB,
// whose 16-byte runs stayed blocks: 4.6 ms, 2.0 refolded, their groups then
// joined by source, CopySchedule). The runs are listed, sorted, then folded, 24
// bytes each: the bound on their length keeps the list at most 1.5 times the
// bytes they copy, one rank's local copies at a time. Boxes of more than one
// plane whose planes (rows of rows) are kFoldPlaneBytes or longer are split
// into their planes, a copy each, as BoxFolder leaves such planes of a message
// (but for planes of rows of pieces of 512 bytes or more spanning at most 1
// MiB, which it copies as columns: a local box of them is split into its planes
// all the same; docs/benchmarks.md, "Random block-cyclic pairs: columns of long
// rows"): a local box spanning the rank's whole input, left whole, chained
// every message copy reading it into one group by source, which then read
// hundreds of rows at once (f32[256,256,128] P('y','x',None) to
// P(None,None,('x','y')), 32 MiB: 3.1 ms a run against `direct`'s 1.3). The
// planes are at most a kFoldPlaneBytes-th of the bytes. Other copies stay as
// they are.
void AddLocalCopies(const CopyProgram& local, int32_t rank, CopyProgram& program, std::vector<int32_t>& tags) {
  constexpr int64_t kRefoldRunBytes = 16;
  struct Piece {
    int64_t from, to, bytes;
  };
  std::vector<Piece> pieces;
  const int64_t ops = static_cast<int64_t>(local.ops.size());
  int64_t kept = 0;  // ops [kept, k) are appended as they are
  for (int64_t k = 0; k <= ops; ++k) {
    const CopyOp* op = k < ops ? &local.ops[static_cast<size_t>(k)] : nullptr;
    const bool refold =
        op != nullptr && op->num_dims > 0 && op->run_bytes >= kRefoldRunBytes && local.OpBytes(*op) < kFoldPlaneBytes;
    const bool split =
        op != nullptr && op->num_dims > 1 &&
        local.dims[static_cast<size_t>(op->first_dim + op->num_dims - 1)].count * op->run_bytes >= kFoldPlaneBytes;
    if (op != nullptr && !refold && !split) continue;
    program.Append(local, kept, k);
    kept = k + 1;
    if (split)
      AppendPlanes(local, *op, program);
    else if (op != nullptr)
      ForEachRun(local, *op, [&](int64_t from, int64_t to) { pieces.push_back(Piece{from, to, op->run_bytes}); });
  }
  tags.resize(program.ops.size(), rank);
  if (pieces.empty()) return;
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.to < b.to; });
  BoxFolder folder(program, tags, rank);
  for (const Piece& p : pieces) folder.Add(p.from, p.to, p.bytes);
  folder.Finish();
}

}  // namespace

Status MessageSizeMismatch(int receiver, int64_t expected, int sender, int64_t sent) {
  return Status::Internal(
      fmt::format("rank {} expected {} bytes from rank {}, which sent {}", receiver, expected, sender, sent));
}

std::unique_ptr<BoxCopies> ThreadBoxes::Pair(std::span<const ThreadBoxes* const> ranks, int threads) {
  auto pair = std::make_unique<BoxCopies>();
  // Every message's two lengths: each one a receiver expects, then each one
  // sent that its receiver does not name (0 bytes expected).
  for (size_t r = 0; r < ranks.size() && pair->mismatch.ok(); ++r)
    for (const Message& expected : ranks[r]->from_) {
      const Message* sent = ranks[static_cast<size_t>(expected.peer)]->To(static_cast<int>(r));
      const int64_t bytes = sent != nullptr ? sent->bytes : 0;
      if (bytes != expected.bytes) {
        pair->mismatch = MessageSizeMismatch(static_cast<int>(r), expected.bytes, expected.peer, bytes);
        break;
      }
    }
  for (size_t s = 0; s < ranks.size() && pair->mismatch.ok(); ++s)
    for (const Message& sent : ranks[s]->to_)
      if (sent.bytes != 0 && ranks[static_cast<size_t>(sent.peer)]->From(static_cast<int>(s)) == nullptr) {
        pair->mismatch = MessageSizeMismatch(sent.peer, 0, static_cast<int>(s), sent.bytes);
        break;
      }
  CopyProgram& program = pair->program;
  std::vector<int32_t> sender, receiver;  // each op's ranks
  // Every message's copies: paired and folded, or its direct copies.
  // Returns how many ops the messages took (the local copies not counted).
  auto build = [&](bool direct) {
    program = CopyProgram{};
    sender.clear();
    receiver.clear();
    size_t message_ops = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const ThreadBoxes& mine = *ranks[r];
      const int32_t rank = static_cast<int32_t>(r);
      for (const Message& expected : mine.from_) {
        const ThreadBoxes& boxes = *ranks[static_cast<size_t>(expected.peer)];
        const Message* sent = boxes.To(rank);
        if (sent == nullptr || expected.bytes == 0) continue;
        const size_t before = program.ops.size();
        if (direct) {
          program.Append(*expected.direct, expected.direct_begin, expected.direct_end);
          sender.resize(program.ops.size(), expected.peer);
        } else {
          BoxFolder folder(program, sender, expected.peer);
          ForEachPiece(boxes, *sent, mine, expected,
                       [&](int64_t from, int64_t to, int64_t bytes) { folder.Add(from, to, bytes); });
          folder.Finish();
        }
        message_ops += program.ops.size() - before;
      }
      // (The local copies refold and split to match the folded messages'
      // shapes; beside the direct copies, as the pool runs them.)
      if (direct)
        program.Append(*mine.local_, 0, static_cast<int64_t>(mine.local_->ops.size()));
      else
        AddLocalCopies(*mine.local_, rank, program, sender);
      sender.resize(program.ops.size(), rank);
      receiver.resize(program.ops.size(), rank);
    }
    return message_ops;
  };
  const size_t folded_ops = build(/*direct=*/false);
  // The direct copies, where every message has them (not where the sizes
  // disagree: the mismatch is the pairing's to report) and they are fewer.
  size_t direct_ops = 0;
  bool direct = pair->mismatch.ok();
  for (size_t r = 0; r < ranks.size() && direct; ++r)
    for (const Message& expected : ranks[r]->from_) {
      if (expected.bytes == 0) continue;
      if (expected.direct == nullptr) {
        direct = false;
        break;
      }
      direct_ops += static_cast<size_t>(expected.direct_end - expected.direct_begin);
    }
  if (direct && direct_ops < folded_ops) build(/*direct=*/true);
  std::vector<ScheduledCopy> strided, contiguous;
  for (size_t k = 0; k < program.ops.size(); ++k) {
    const CopyOp& op = program.ops[k];
    const ScheduledCopy c{.program = &program, .op = &op, .src = sender[k], .dst = receiver[k], .src_delta = 0,
                          .units = CopyUnits(program, op)};
    (op.num_dims > 0 ? strided : contiguous).push_back(c);
  }
  pair->schedule = CopySchedule::Build(std::move(strided), std::move(contiguous), threads);
  return pair;
}

}  // namespace reshard
