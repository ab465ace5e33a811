// What every backend shares: error agreement and the same-input check over
// the Comm interface, and the defaults of its optional calls.
#include "reshard/comm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <string>

#include "exec/fingerprint.h"

namespace reshard {
namespace {

Status FromCode(Status::Code code, std::string msg) {
  switch (code) {
    case Status::Code::kInvalidArgument: return Status::InvalidArgument(std::move(msg));
    case Status::Code::kNotSupported: return Status::NotSupported(std::move(msg));
    case Status::Code::kUnavailable: return Status::Unavailable(std::move(msg));
    default: return Status::Internal(std::move(msg));
  }
}

// "rank 3", "ranks 0 and 2", "ranks 0, 2 and 5", "ranks 0, 1, 2, ... (12 ranks)".
std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  if (ranks.size() > 6) return fmt::format("ranks {}, {}, {}, ... ({} ranks)", ranks[0], ranks[1], ranks[2], ranks.size());
  const std::vector<int> head(ranks.begin(), ranks.end() - 1);
  return fmt::format("ranks {} and {}", fmt::join(head, ", "), ranks.back());
}

}  // namespace

Result<std::unique_ptr<BoxExchange>> Comm::PrepareBoxes(const DeviceProgram&, std::span<const int>, std::span<const int>) {
  return Status::NotSupported(fmt::format("the {} backend has no in-place box messages", name()));
}

Status Comm::StartBoxes(const BoxExchange&, const std::byte*, std::byte*, BoxesEnd, int64_t&) {
  return Status::NotSupported(fmt::format("the {} backend has no in-place box messages", name()));
}

Status AgreeStatus(Comm& comm, const Status& local) {
  const int rank = comm.rank(), size = comm.size();
  const int64_t h = local.ok() ? 0 : static_cast<int64_t>(MixText(static_cast<uint64_t>(local.code()), local.message()) >> 2);
  // The lowest failing rank; whether every rank failed; the least and (negated) the greatest message hash.
  int64_t v[4] = {local.ok() ? size : rank, local.ok() ? 0 : 1, h, -h};
  RESHARD_RETURN_IF_ERROR(comm.AllReduce(v, Comm::ReduceOp::kMin));
  if (v[0] == size) return Status::Ok();
  const int first = static_cast<int>(v[0]);
  const bool shared = v[1] == 1 && v[2] == -v[3];
  std::string msg = local.message();
  int64_t header[2] = {static_cast<int64_t>(local.code()), static_cast<int64_t>(msg.size())};
  RESHARD_RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<int64_t>(header)), first));
  msg.resize(static_cast<size_t>(header[1]));
  RESHARD_RETURN_IF_ERROR(comm.Broadcast(std::as_writable_bytes(std::span<char>(msg.data(), msg.size())), first));
  return FromCode(static_cast<Status::Code>(header[0]), shared ? msg : fmt::format("rank {}: {}", first, msg));
}

Status CheckSame(Comm& comm, uint64_t hash, std::string_view what) {
  const int size = comm.size();
  // Equal everywhere where the least hash is the greatest (~ turns a min
  // into a max without overflow): one small all-reduce, where gathering
  // every rank's hash on every rank costs N^2 over thousands of ranks.
  const int64_t h = std::bit_cast<int64_t>(hash);
  int64_t least[2] = {h, ~h};
  RESHARD_RETURN_IF_ERROR(comm.AllReduce(least, Comm::ReduceOp::kMin));
  if (least[0] == ~least[1]) return Status::Ok();
  std::vector<uint64_t> all(static_cast<size_t>(size));
  RESHARD_RETURN_IF_ERROR(comm.AllGather(std::span<const uint64_t>(&hash, 1), all));
  std::vector<uint64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() == sorted.back()) return Status::Ok();
  // The version most ranks hold, and whether another is held as often.
  uint64_t common = 0;
  size_t most = 0;
  bool tie = false;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    if (j - i > most) {
      most = j - i;
      common = sorted[i];
      tie = false;
    } else if (j - i == most) {
      tie = true;
    }
    i = j;
  }
  const char* rule = "(every rank must pass the same layouts, plan and options)";
  if (tie) {
    size_t other = 1;
    while (all[other] == all[0]) ++other;
    return Status::InvalidArgument(fmt::format("rank 0's and rank {}'s {} differ {}", other, what, rule));
  }
  std::vector<int> odd;
  for (int k = 0; k < size; ++k)
    if (all[static_cast<size_t>(k)] != common) odd.push_back(k);
  return Status::InvalidArgument(odd.size() == 1 ? fmt::format("rank {}'s {} differ from the others' {}", odd[0], what, rule)
                                                 : fmt::format("the {} of {} differ from the others' {}", what,
                                                               RankList(odd), rule));
}

}  // namespace reshard
