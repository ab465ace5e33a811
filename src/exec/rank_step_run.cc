// Running one step as the transport chosen for it (rank_step_choice.cc):
// the grouped collectives, the all-to-all-v, box messages and
// point-to-point, each packing, unpacking and combining as its program says.
#include <algorithm>
#include <cstring>
#include <vector>

#include "exec/rank_step.h"
#include "exec/row_walk.h"

namespace reshard {
namespace {

int64_t Sum(const std::vector<int64_t>& counts) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

}  // namespace

namespace rank_step {

void RunCopies(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst, int64_t together) {
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    RunCopy(p, op, src, dst, 0, CopyUnits(p, op), together);
  }
}

void Unpack(const CopyProgram& p, int32_t begin, int32_t end, const std::byte* src, std::byte* dst, int64_t together) {
  thread_local std::vector<CopyRange> copies;
  copies.clear();
  for (int32_t k = begin; k < end; ++k) {
    const CopyOp& op = p.ops[static_cast<size_t>(k)];
    copies.push_back({&p, &op, src, dst, 0, CopyUnits(p, op)});
  }
  RunInterleaved(copies, 0, 1, together);
}

void RunAll(const CopyProgram& p, const std::byte* src, std::byte* dst) {
  RunCopies(p, 0, static_cast<int32_t>(p.ops.size()), src, dst, p.bytes);
}

void PackAll(const DeviceProgram& p, const std::byte* in, std::byte* send) {
  for (size_t m = 0; m < p.send_peer.size(); ++m)
    if (p.Packs(m)) RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, send, p.send_bytes);
}

}  // namespace rank_step

using rank_step::PackAll;
using rank_step::RunAll;
using rank_step::RunCopies;
using rank_step::Unpack;

Status RankReshard::State::RunGrouped(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  if (s.group == nullptr) return Status::Ok();
  if (s.reduce_scatter) return RunReduceScatter(s, in, out, stats);
  if (!s.allgather) return s.chunk > 0 ? RunAlltoall(s, in, out, stats) : RunAlltoallv(s, in, out, stats, *s.group);
  // The input is the message: no packing (but padding to the chunk). Each
  // received message is then unpacked from its member's slot of the
  // gathered buffer.
  int64_t request = kNoRequest;
  if (s.chunk > 0) {
    const std::byte* mine = in;
    if (p.input_bytes < s.chunk) {  // padded with zeros: no stale bytes go to the peers
      if (p.input_bytes > 0) std::memcpy(send.data(), in, static_cast<size_t>(p.input_bytes));
      std::memset(send.data() + p.input_bytes, 0, static_cast<size_t>(s.chunk - p.input_bytes));
      mine = send.data();
    }
    RESHARD_RETURN_IF_ERROR(s.group->StartAllgather(mine, s.chunk, recv.data(), request));
  } else {
    RESHARD_RETURN_IF_ERROR(s.group->StartAllgatherv(in, p.input_bytes, recv.data(), s.recv_counts, s.recv_displs, request));
  }
  RunAll(p.local, in, out);
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  // Its input went to every other member; its own slot is not a message.
  const int64_t others = s.group_size - 1;
  stats.step_bytes_sent.back() += (s.chunk > 0 ? s.chunk : p.input_bytes) * others;
  stats.step_bytes_received.back() += s.chunk > 0 ? s.chunk * others : Sum(s.recv_counts) - p.input_bytes;
  for (size_t m = 0; m < s.recv_rank.size(); ++m)
    Unpack(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data() + s.recv_base[m] - p.recv_offset[m], out,
              p.unpack.bytes);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunAlltoall(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  // Message m packed into its member's chunk (every message its own copy:
  // chunks do not share staged boxes), then one equal-chunk all-to-all.
  PackChunks(s, in);
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(s.group->StartAlltoall(send.data(), s.chunk, recv.data(), request));
  RunAll(p.local, in, out);  // while the messages travel
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  const int64_t others = s.group_size - 1;
  stats.step_bytes_sent.back() += s.chunk * others;
  stats.step_bytes_received.back() += s.chunk * others;
  for (size_t m = 0; m < s.recv_rank.size(); ++m)
    Unpack(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1],
           recv.data() + s.recv_base[m] - p.recv_offset[m], out, p.unpack.bytes);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunReduceScatter(const StepRun& s, const std::byte* in, std::byte* out,
                                           RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  // Each message packed into its member's chunk, the rest of every chunk
  // zeroed (reduced, never read); this rank's own chunk the identity, so
  // what comes back is the other members' contributions reduced.
  PackChunks(s, in);
  FillIdentity(s.reduction.op, s.dtype, send.data() + static_cast<int64_t>(s.my_member) * s.chunk, s.chunk);
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(s.group->StartReduceScatter(send.data(), s.chunk, recv.data(), s.dtype, s.reduction.op, request));
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  const int64_t others = s.group_size - 1;
  stats.step_bytes_sent.back() += s.chunk * others;
  stats.step_bytes_received.back() += s.chunk * others;
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  if (p.recv_peer.empty()) return Status::Ok();  // no output
  // Its own contribution writes, the others' reduced chunk combines (then
  // avg divides): one element, one order, whatever the backend's.
  const Contribution both[2] = {
      {&p.local, 0, static_cast<int64_t>(p.local.ops.size()), in, true},
      {&p.unpack, p.unpack_begin[0], p.unpack_begin[1], recv.data() - p.recv_offset[0], false}};
  ApplyContributions(both, s.reduction, s.scale, s.dtype, out);
  return Status::Ok();
}

Status RankReshard::State::RunAllReduce(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  if (s.group == nullptr) return Status::Ok();  // not in the mesh: no part
  // The input, then the identity up to the members' chunks (the buffer the
  // ring priced); the reduced bytes back into the output, avg divided.
  // Staged only where padded (or where the input is the output's buffer,
  // which a backend may not be given twice).
  const int64_t bytes = s.program->input_bytes, buffer = s.group_size * s.chunk;
  const bool padded = buffer > bytes;
  const std::byte* from = in;
  if (padded || in == out) {
    if (bytes > 0) std::memcpy(send.data(), in, static_cast<size_t>(bytes));
    FillIdentity(s.reduction.op, s.dtype, send.data() + bytes, buffer - bytes);
    from = send.data();
  }
  std::byte* into = padded ? recv.data() : out;
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(s.group->StartAllReduce(from, buffer, into, s.dtype, s.reduction.op, request));
  RESHARD_RETURN_IF_ERROR(s.group->Wait(request));
  if (padded && bytes > 0) std::memcpy(out, recv.data(), static_cast<size_t>(bytes));
  const int64_t elements = bytes / ByteSize(s.dtype);
  if (s.reduction.op == ReduceOp::kAvg) DivideElements(out, elements, s.dtype, s.reduction.parts);
  if (s.scale != 1) ScaleElements(out, elements, s.dtype, s.scale);
  // What a ring moves: 2 (k - 1) chunks each way.
  const int64_t messages = 2 * (s.group_size - 1);
  stats.step_bytes_sent.back() += messages * s.chunk;
  stats.step_bytes_received.back() += messages * s.chunk;
  stats.messages_sent += messages;
  return Status::Ok();
}

Status RankReshard::State::RunAlltoallv(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats,
                                       Comm& over) {
  const DeviceProgram& p = *s.program;
  PackAll(p, in, send.data());
  int64_t request = kNoRequest;
  RESHARD_RETURN_IF_ERROR(over.StartAlltoallv(send.data(), s.send_counts, s.send_displs, recv.data(), s.recv_counts,
                                              s.recv_displs, request));
  if (!s.reduces()) RunAll(p.local, in, out);  // while the messages travel
  RESHARD_RETURN_IF_ERROR(over.Wait(request));
  stats.step_bytes_sent.back() += Sum(s.send_counts);
  stats.step_bytes_received.back() += Sum(s.recv_counts);
  if (s.reduces())
    Reduce(s, in, out);
  else
    RunAll(p.unpack, recv.data(), out);
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunBoxes(const StepRun& s, const std::byte* in, std::byte* out, Comm::BoxesEnd end,
                                    RankRunStats& stats) {
  int64_t request = kNoRequest;
  // The backend reads the input and writes the output in place; the local
  // copies touch other bytes of the output meanwhile.
  RESHARD_RETURN_IF_ERROR(comm->StartBoxes(*s.boxes, in, out, end, request));
  if (!s.boxes->copies_local()) RunAll(s.program->local, in, out);
  RESHARD_RETURN_IF_ERROR(comm->Wait(request));
  stats.step_bytes_sent.back() += s.boxes->bytes_sent();
  stats.step_bytes_received.back() += s.boxes->bytes_received();
  stats.messages_sent += static_cast<int64_t>(s.send_rank.size());
  return Status::Ok();
}

Status RankReshard::State::RunPointToPoint(const StepRun& s, const std::byte* in, std::byte* out, RankRunStats& stats) {
  const DeviceProgram& p = *s.program;
  const int64_t chunk = Chunk();
  // Receives first, every chunk of every message. Chunks of one message go in
  // order: messages between one pair never overtake, so when a message's last
  // chunk has arrived, its earlier chunks have been matched. Only the last
  // chunks are waited on together (a wait scans every request it is given:
  // with every chunk's request, time grew with the square of the chunks);
  // the earlier ones are then completed message by message.
  const size_t messages = s.recv_rank.size();
  std::vector<int64_t> last(messages, kNoRequest), earlier;
  std::vector<size_t> earlier_begin(messages + 1, 0);  // message m's earlier chunks: [begin[m], begin[m + 1])
  std::vector<int> ready;  // messages complete before any wait: no bytes, or received at once
  int64_t unpacked = 0;
  for (size_t m = 0; m < messages; ++m) {
    for (int64_t off = 0; off < p.recv_count[m]; off += chunk) {
      const int64_t len = std::min(chunk, p.recv_count[m] - off);
      if (last[m] != kNoRequest) earlier.push_back(last[m]);
      RESHARD_RETURN_IF_ERROR(comm->StartRecv(recv.data() + p.recv_offset[m] + off, len, s.recv_rank[m], last[m]));
      stats.step_bytes_received.back() += len;
    }
    earlier_begin[m + 1] = earlier.size();
    if (last[m] == kNoRequest) ready.push_back(static_cast<int>(m));
  }
  std::vector<int> done;
  // Unpacks every message whose chunks have all arrived; waits for at least one when `block`.
  auto drain = [&](bool block) -> Status {
    done.swap(ready);
    ready.clear();
    if (done.empty() || !block) RESHARD_RETURN_IF_ERROR(comm->WaitSome(last, block && done.empty(), done));
    for (int k : done) {
      const size_t m = static_cast<size_t>(k);
      const size_t b = earlier_begin[m];
      RESHARD_RETURN_IF_ERROR(comm->WaitAll(std::span<int64_t>(earlier.data() + b, earlier_begin[m + 1] - b)));
      if (!s.reduces()) Unpack(p.unpack, p.unpack_begin[m], p.unpack_begin[m + 1], recv.data(), out, p.unpack.bytes);
      ++unpacked;
    }
    done.clear();
    return Status::Ok();
  };
  // Sends in flight are bounded: OpenMPI's progress engine walks its list of
  // pending sends on every call, so 80K chunks posted at once took time
  // quadratic in their number (20 s). At most one chunk per message, or 256,
  // whichever is more, is in flight; the oldest half is completed first.
  const size_t max_in_flight = std::max<size_t>(256, s.send_rank.size());
  std::vector<int64_t> sends;
  size_t completed = 0;  // sends [0, completed) are done
  std::vector<bool> staged(s.send_rank.size(), false);  // by owner: its box is in the send buffer
  for (size_t m : s.send_order) {
    const size_t owner = static_cast<size_t>(p.pack_owner[m]);
    if (!staged[owner]) {  // this message's ops write its box where its owner's would
      RunCopies(p.pack, p.pack_begin[m], p.pack_begin[m + 1], in, send.data(), p.send_bytes);
      staged[owner] = true;
    }
    for (int64_t off = 0; off < p.send_count[m]; off += chunk) {
      if (sends.size() - completed >= max_in_flight) {
        const size_t half = max_in_flight / 2;
        RESHARD_RETURN_IF_ERROR(comm->WaitAll(std::span<int64_t>(sends.data() + completed, half)));
        completed += half;
      }
      const int64_t len = std::min(chunk, p.send_count[m] - off);
      int64_t r = kNoRequest;
      RESHARD_RETURN_IF_ERROR(comm->StartSend(send.data() + p.send_offset[m] + off, len, s.send_rank[m], r));
      sends.push_back(r);
      ++stats.messages_sent;
      stats.step_bytes_sent.back() += len;
    }
    if (messages > 0) RESHARD_RETURN_IF_ERROR(drain(false));
  }
  if (!s.reduces()) RunAll(p.local, in, out);
  while (unpacked < static_cast<int64_t>(messages)) RESHARD_RETURN_IF_ERROR(drain(true));
  if (s.reduces()) Reduce(s, in, out);
  return comm->WaitAll(std::span<int64_t>(sends.data() + completed, sends.size() - completed));
}

}  // namespace reshard
