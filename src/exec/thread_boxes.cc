// Box messages for threads as ranks (thread_boxes.h): preparing a rank's
// walks and copying one message run against run.
#include "exec/thread_boxes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

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
  auto boxes = std::make_unique<ThreadBoxes>();
  boxes->size_ = size;
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

void ThreadBoxes::CopyFrom(const ThreadBoxes& sender, const Message& sent, const std::byte* in,
                           const Message& expected, std::byte* out) const {
  RunStream s(sender, sent, /*sending=*/true), r(*this, expected, /*sending=*/false);
  int64_t s_at = 0, s_bytes = 0, r_at = 0, r_bytes = 0;
  bool s_more = s.Next(s_at, s_bytes), r_more = r.Next(r_at, r_bytes);
  while (s_more && r_more) {
    const int64_t n = std::min(s_bytes, r_bytes);
    if (n > 0) std::memcpy(out + r_at, in + s_at, static_cast<size_t>(n));
    s_at += n, s_bytes -= n, r_at += n, r_bytes -= n;
    if (s_bytes == 0) s_more = s.Next(s_at, s_bytes);
    if (r_bytes == 0) r_more = r.Next(r_at, r_bytes);
  }
}

}  // namespace reshard
