// What `reshard run` allocates, estimated before it allocates: the one
// answer --max-memory is checked against, in-process and per MPI rank.
//
// Counted: the source and target buffers, send buffers up to the source's
// size, the buffers of a multi-step plan's intermediate layouts (two at a
// time), the compiled copy programs (k*ProgramBytesPerMessage per message,
// or k*GroupBytesPerPair per pair where a step is written per group
// pattern, and kProgramBytesPerDevice per device and step), box messages'
// run lists (an MPI rank's datatypes, kRunListBytesPerRun a run; threads as
// ranks, kThreadRunBytesPerRun; runs bounded from the grids), the
// checker's runs of cells (16 bytes per cell along each dim) and the two
// buffers of the memcpy measurement (up to 256 MiB each: it copies the bytes
// the run moved, every step's output and what arrived, which from partial
// sums is every part's piece, not only the target's). The limit is --max-memory, or 70% of
// physical memory (over the ranks with MPI), and never more than the
// address space the process may still map (ulimit -v) less its threads'
// stacks and 64 MiB, so a limit set there is a refusal, not a
// std::bad_alloc.
#ifndef RESHARD_TOOLS_CLI_RUN_MEMORY_H_
#define RESHARD_TOOLS_CLI_RUN_MEMORY_H_

#include <cstdint>
#include <string>

#include "reshard/collective_plan.h"
#include "reshard/executor.h"
#include "reshard/layout.h"

namespace reshard::cli {

// Measured: an all-gather of 16 KiB per device over 1024, 2048 and 4096
// devices (1.05M, 4.2M and 16.8M messages) grew the peak resident set by
// 196 to 200 bytes per message compiled with the direct copies alone (the
// pool's direct transport), 227 to 232 with the staged ones (pack and
// unpack: the staged transport, threads as ranks, MPI); rounded up. (Both
// forms at once, 288.)
inline constexpr int64_t kDirectProgramBytesPerMessage = 224;
inline constexpr int64_t kStagedProgramBytesPerMessage = 256;
inline constexpr int64_t kProgramBytesPerDevice = 1024;
// A step whose copies are written per group pattern (GroupCopies,
// device_program.h) holds per pair of the pattern a copy op, its dims and its
// range (32 + 24 * 8 + 8 bytes up to rank 9) in the direct form, three in the
// staged one (direct, pack and unpack), and the executor's schedule of at
// most ExecOptions::max_scheduled_group_copies copies of 40 bytes.
inline constexpr int64_t kDirectGroupBytesPerPair = 256;
inline constexpr int64_t kStagedGroupBytesPerPair = 768;
inline constexpr int64_t kScheduledCopyBytes = 40;
// An MPI rank's box messages of block-cyclic layouts list every contiguous
// run (an hindexed type): OpenMPI 4.1 keeps 44 bytes a run (measured: a
// type of 2^20 runs), and the rank builds it from lists of 60 bytes a run,
// freed once the type is made; counted together, rounded up.
inline constexpr int64_t kRunListBytesPerRun = 112;
// Threads as ranks list the runs of a box message not in order as 24-byte
// entries (up to as many again while the list grows by doubling, trimmed
// once built), built from a list of 24 bytes a run before adjacent runs
// merge, and each message as a 48-byte entry.
inline constexpr int64_t kThreadRunBytesPerRun = 72;
inline constexpr int64_t kThreadBytesPerMessage = 48;

struct MemoryEstimate {
  int64_t bytes = 0;
  std::string parts;  // "source, target and send buffers, ..." for the message
};

// From the layouts alone, before planning. `per_rank`: one MPI rank's share
// (the busiest rank's buffers, twice for staging); otherwise every device in
// this process, `threads` (0: the hardware's count) checking at once.
// `transport`: in process, the transport run (kRanks, --transport ranks:
// every device a rank running the per-rank runner, which stages as each MPI
// rank does).
MemoryEstimate EstimateBeforePlanning(const Layout& source, const Layout& target, bool per_rank, int threads,
                                      Transport transport = Transport::kStaged);
// The same plus what the plan adds: intermediate buffers and the programs;
// with `priced_chunks` (RankOptions::priced_chunks; per rank, or threads as
// ranks) also the staging its padded equal-chunk collectives need beyond
// the shards: k chunks each way, the rank's own included.
MemoryEstimate EstimateWithPlan(const CollectivePlan& plan, bool per_rank, int threads,
                                Transport transport = Transport::kStaged, bool priced_chunks = false);

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;  // "--max-memory", "70% of physical memory", "the address-space limit (ulimit -v)"
};
// The limit run refuses above. `flag`: --max-memory (0: unset); `ranks`:
// MPI ranks sharing the machine's memory by default (1 in-process);
// `threads`: the executor's threads (0: the hardware's count);
// `fibers`: threads as ranks' one per device, each a stack more
// (Fibers::MappedBytes: its stack and guard).
MemoryLimit RunMemoryLimit(int64_t flag, int ranks, int threads, int64_t fibers = 0);

// Throws CliError(kExitUnmet) when `need` exceeds `limit`: "running this
// needs about N (parts), more than the limit of M (source)".
void CheckMemory(const MemoryEstimate& need, const MemoryLimit& limit, bool per_rank);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_RUN_MEMORY_H_
