// What `reshard run` allocates, estimated before it allocates (run_memory.h).
#include "run_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>

#include "common.h"
#include "exec/fibers.h"
#include "exec/rank_threads.h"
#include "layout/checked_math.h"
#include "reshard/device_program.h"

namespace reshard::cli {
namespace {

constexpr int64_t kMemcpyBufferBytes = int64_t{1} << 28;  // MeasureMemcpyGbps's buffers, each at most this
constexpr int64_t kMiB = int64_t{1} << 20;

// The checker's runs of cells: 16 bytes per cell along each dim, a bound
// for any one device's tile.
int64_t CheckerBytes(const Layout& l) {
  int64_t cells = 0;
  for (int64_t d = 0; d < l.rank(); ++d) cells += static_cast<int64_t>(l.dim(d).cuts.size());
  return 16 * cells;
}

void Add(MemoryEstimate& e, int64_t bytes, const char* part) {
  if (bytes <= 0) return;
  e.bytes += bytes;
  e.parts += e.parts.empty() ? part : fmt::format(", {}", part);
}

// Bytes of one device's (per_rank) or every device's buffer of `l`.
int64_t Bytes(const Layout& l, bool per_rank) { return per_rank ? MaxLocalBytes(l) : TotalLocalBytes(l); }


// The shortest piece the two grids cut the last dim into, in bytes: no
// contiguous run of a message between them is shorter (a box along the last
// dim is a union of such pieces). 0 for a rank-0 array or an empty last dim.
int64_t ShortestRunBytes(const Layout& in, const Layout& out) {
  if (in.rank() == 0) return 0;
  const int64_t last = in.rank() - 1;
  std::vector<int64_t> cuts = in.dim(last).cuts;
  cuts.insert(cuts.end(), out.dim(last).cuts.begin(), out.dim(last).cuts.end());
  std::sort(cuts.begin(), cuts.end());
  int64_t piece = std::numeric_limits<int64_t>::max();
  for (size_t k = 1; k < cuts.size(); ++k)
    if (cuts[k] > cuts[k - 1]) piece = std::min(piece, cuts[k] - cuts[k - 1]);
  return piece == std::numeric_limits<int64_t>::max() ? 0 : SaturatingMul(piece, in.element_bytes());
}

// Box messages' run lists (rank_step_run.cc's box messages), a bound for
// one step from `in` to `out` whose ranks send and receive at most `sent`
// and `received` bytes (every message counted: a box sent to several
// receivers is one type per message), `per_run` bytes a run (MPI's
// datatypes, kRunListBytesPerRun; threads as ranks, kThreadRunBytesPerRun). Where the tiles of either
// layout hold several cells (block cyclic), a message may run as one
// hindexed type listing every contiguous run, each at least
// ShortestRunBytes, and BoxableMessage takes no such message whose runs
// average under 64 bytes: runs are at most the bytes over the longer of
// the two. Zero for layouts of one cell per tile: their messages are one
// box each, in order (MPI: a nested vector type per copy; threads: the
// copies walked as they are).
int64_t RunListBytes(const Layout& in, const Layout& out, int64_t sent, int64_t received,
                     int64_t per_run = kRunListBytesPerRun) {
  bool cells = false;
  for (const Layout* l : {&in, &out})
    for (int64_t d = 0; d < l->rank(); ++d)
      cells = cells || static_cast<int64_t>(l->dim(d).cuts.size()) - 1 > l->dim(d).tiles;
  const int64_t shortest = ShortestRunBytes(in, out);
  if (!cells || shortest == 0) return 0;
  const int64_t run_bytes = std::max<int64_t>(64, shortest);
  const int64_t runs = sent / run_bytes + received / run_bytes + 2;
  return SaturatingMul(runs, per_run);
}

// Threads as ranks' box messages, for one step whose devices send and
// receive `sent` and `received` bytes in all in `messages` messages: the
// run lists of messages not in order (RunListBytes) and
// kThreadBytesPerMessage a message on each side.
int64_t ThreadBoxBytes(const Layout& in, const Layout& out, int64_t sent, int64_t received, int64_t messages) {
  return SaturatingAdd(RunListBytes(in, out, sent, received, kThreadRunBytesPerRun),
                       SaturatingMul(2 * messages, kThreadBytesPerMessage));
}

// The most devices holding one tile of `l` (its replication).
int64_t MaxHolders(const Layout& l) {
  int64_t most = 1;
  for (int64_t t = 0; t < l.num_tiles(); ++t) most = std::max(most, static_cast<int64_t>(l.Holders(t).size()));
  return most;
}

// Before planning: a rank sends each element it holds at most once to each
// holder of the element's target tile, and receives at most its target.
int64_t RunListBytes(const Layout& source, const Layout& target) {
  return RunListBytes(source, target, SaturatingMul(MaxLocalBytes(source), MaxHolders(target)), MaxLocalBytes(target));
}

}  // namespace

namespace {

// EstimateBeforePlanning, the memcpy measurement copying `moved` bytes.
MemoryEstimate Estimate(const Layout& source, const Layout& target, bool per_rank, int threads, Transport transport,
                        int64_t moved) {
  const bool as_ranks = transport == Transport::kRanks;
  MemoryEstimate e;
  const int64_t src = Bytes(source, per_rank), dst = Bytes(target, per_rank);
  // MPI stages both ways (send and receive buffers up to as much again); in
  // process the send buffers are at most the source. Threads as ranks stage
  // both ways, as MPI ranks do (each box sent once: at most the source;
  // receives at most the target); their sends copy nothing more.
  if (as_ranks && !per_rank)
    Add(e, 2 * (src + dst), "source, target and staging buffers");
  else
    Add(e, per_rank ? 2 * (src + dst) : 2 * src + dst, "source, target and staging buffers");
  if (per_rank) Add(e, RunListBytes(source, target), "MPI datatypes' run lists");
  if (as_ranks && !per_rank)
    Add(e, SaturatingMul(static_cast<int64_t>(DevicesOfBoth(source, target).size()), RankThreads::kRankBytes),
        "the ranks' runners and stacks");
  Add(e, 2 * std::min(moved, kMemcpyBufferBytes), "the memcpy measurement");
  Add(e, (CheckerBytes(source) + CheckerBytes(target)) * (per_rank ? 1 : ResolveThreads(threads)), "the checker");
  return e;
}

}  // namespace

MemoryEstimate EstimateBeforePlanning(const Layout& source, const Layout& target, bool per_rank, int threads,
                                      Transport transport) {
  return Estimate(source, target, per_rank, threads, transport, Bytes(target, per_rank));
}

MemoryEstimate EstimateWithPlan(const CollectivePlan& plan, bool per_rank, int threads, Transport transport,
                                bool priced_chunks) {
  const bool as_ranks = transport == Transport::kRanks;
  const std::vector<PlanStep>& steps = plan.steps();
  // The memcpy measurement copies as many bytes as the run moved
  // (ExecStats::bytes_moved: every step's output written; from partial sums,
  // every part's piece that arrives is written into it too), not only the
  // target's.
  int64_t moved = 0;
  for (const PlanStep& s : steps) {
    const int64_t parts = s.input.partial() ? (per_rank ? s.recv_bytes.Max() : s.recv_bytes.Sum()) : 0;
    moved = SaturatingAdd(moved, SaturatingAdd(parts, Bytes(s.output, per_rank)));
  }
  MemoryEstimate e = Estimate(plan.source(), plan.target(), per_rank, threads, transport,
                              std::max(moved, Bytes(plan.target(), per_rank)));
  // Intermediate layouts: the outputs of every step but the last. In
  // process two are held at a time (a step's input and output); an MPI rank
  // keeps two buffers, each the largest of every other one.
  // (The program's layouts: an all-reduce passes through its pieces.)
  const std::vector<Layout> layouts = PlanProgram::StepLayouts(plan);
  const size_t outputs = layouts.size() - 1;  // program steps; output i is layouts[i + 1]
  int64_t between = 0, alternate[2] = {0, 0};
  for (size_t i = 0; i + 1 < outputs; ++i) {
    const int64_t b = Bytes(layouts[i + 1], per_rank);
    alternate[i % 2] = std::max(alternate[i % 2], b);
    if (i + 2 < outputs) between = std::max(between, b + Bytes(layouts[i + 2], per_rank));
    between = std::max(between, b);
  }
  // Threads as ranks keep, per device, two alternating buffers as an MPI rank does.
  int64_t per_device_alternate = 0;
  if (as_ranks && !per_rank)
    for (int64_t d : plan.devices()) {
      int64_t alt[2] = {0, 0};
      for (size_t i = 0; i + 1 < outputs; ++i) alt[i % 2] = std::max(alt[i % 2], layouts[i + 1].LocalBytes(d));
      per_device_alternate += alt[0] + alt[1];
    }
  Add(e, per_rank ? alternate[0] + alternate[1] : as_ranks ? per_device_alternate : between, "intermediate buffers");

  // The compiled programs: the direct copies alone in process under the
  // direct transport, both forms under threads as ranks (which take a box
  // exchange's direct copies where they are fewer), else the staged ones
  // (run.cc compiles those forms only).
  const int64_t per_message =
      !per_rank && transport == Transport::kDirect ? kDirectProgramBytesPerMessage : kStagedProgramBytesPerMessage;
  const int64_t devices = static_cast<int64_t>(plan.source().devices().size() + plan.target().devices().size());
  int64_t programs = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const PlanStep& s = steps[i];
    const int64_t messages = per_rank ? std::max(s.sends.Max(), s.recvs.Max()) : s.sends.Sum();
    // run.cc compiles one form of the copies: in process, a structured step
    // that repeats from group to group is one pattern (threads as ranks
    // each expand their own messages from it: a program per message).
    const std::optional<int64_t> pairs =
        !per_rank && !as_ranks ? GroupCopyPairs(plan, i) : std::nullopt;
    const int64_t per_pair = transport == Transport::kDirect ? kDirectGroupBytesPerPair : kStagedGroupBytesPerPair;
    // (Threads as ranks pair box messages into one schedule of copies straight
    // from sender to receiver beside the staged and direct programs: as many
    // again as a direct program holds.)
    const int64_t copies =
        pairs ? *pairs * per_pair + ExecOptions{}.max_scheduled_group_copies * kScheduledCopyBytes
              : messages * (per_message + (as_ranks && !per_rank ? 2 * kDirectProgramBytesPerMessage : 0));
    programs += copies + (per_rank ? 1 : devices) * kProgramBytesPerDevice;
  }
  if (steps.empty()) programs = (per_rank ? 1 : devices) * kProgramBytesPerDevice;
  Add(e, programs, "copy programs");
  // Priced chunks: the staging counted above is at most the shards; a
  // padded equal-chunk collective stages k chunks each way.
  if (priced_chunks && (per_rank || as_ranks) && plan.mesh()) {
    int64_t staged = 0;
    for (size_t i = 0; i < steps.size(); ++i)
      if (const int64_t chunk = PricedChunkBytes(plan, i); chunk > 0)
        staged = std::max(staged, SaturatingMul(2 * plan.mesh()->GroupSize(steps[i].group_axes), chunk));
    const int64_t all = per_rank ? staged : SaturatingMul(staged, static_cast<int64_t>(plan.devices().size()));
    const int64_t counted = SaturatingAdd(Bytes(plan.source(), per_rank), Bytes(plan.target(), per_rank));
    if (all > counted) Add(e, all - counted, "priced chunks' padded staging");
  }
  // A rank keeps every step's types for as long as its plan lives; each
  // step's bytes bounded by its busiest device's (the estimate before
  // planning counted a bound for one step, source to target).
  if (per_rank) {
    int64_t lists = 0;
    for (const PlanStep& s : steps)
      lists = SaturatingAdd(lists, RunListBytes(s.input, s.output, s.send_bytes.Max(), s.recv_bytes.Max()));
    Add(e, lists - RunListBytes(plan.source(), plan.target()), "more MPI datatypes' run lists");
  }
  // Threads as ranks keep every device's box messages of every step, each
  // step's bytes all its devices'.
  if (as_ranks && !per_rank) {
    int64_t lists = 0;
    for (const PlanStep& s : steps)
      lists = SaturatingAdd(lists, ThreadBoxBytes(s.input, s.output, s.send_bytes.Sum(), s.recv_bytes.Sum(),
                                                  s.sends.Sum()));
    Add(e, lists, "box messages");
  }
  return e;
}

MemoryLimit RunMemoryLimit(int64_t flag, int ranks, int threads, int64_t fibers) {
  MemoryLimit limit;
  if (flag > 0) {
    limit = {flag, "--max-memory"};
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{1} << 34;
    limit = {physical / 10 * 7 / std::max(1, ranks),
             ranks > 1 ? "--max-memory; default: 70% of physical memory over the ranks"
                       : "--max-memory; default: 70% of physical memory"};
  }
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return limit;
  // What the process maps now (its first field of /proc/self/statm, in
  // pages), the stacks of its threads (the executor's, and as many again
  // filling, checking and measuring memcpy) and of threads as ranks'
  // fibers, and 64 MiB to spare.
  int64_t mapped = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> mapped;
  mapped *= sysconf(_SC_PAGE_SIZE);
  rlimit stack{};
  const int64_t stack_bytes = getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY
                                  ? std::min<int64_t>(static_cast<int64_t>(stack.rlim_cur), 64 * kMiB)
                                  : 8 * kMiB;
  const int64_t stacks =
      2 * int64_t{ResolveThreads(threads)} * stack_bytes + fibers * static_cast<int64_t>(Fibers::MappedBytes());
  const int64_t left = std::max<int64_t>(
      0, static_cast<int64_t>(std::min<rlim_t>(as.rlim_cur, std::numeric_limits<int64_t>::max())) - mapped - stacks -
             64 * kMiB);
  if (left < limit.bytes)
    limit = {left, fmt::format("the address space left under ulimit -v, less {} of stacks", FormatBytes(stacks))};
  return limit;
}

void CheckMemory(const MemoryEstimate& need, const MemoryLimit& limit, bool per_rank) {
  if (need.bytes <= limit.bytes) return;
  throw CliError(kExitUnmet, fmt::format("{} about {} ({}), more than the limit of {}{} ({})",
                                         per_rank ? "one rank needs" : "running this needs", FormatBytes(need.bytes),
                                         need.parts, FormatBytes(limit.bytes), per_rank ? " per rank" : "",
                                         limit.source));
}

}  // namespace reshard::cli
