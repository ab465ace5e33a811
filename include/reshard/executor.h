// Executor: runs a compiled plan (PlanProgram, device_program.h) on real
// buffers, all devices from one process. The in-process executor (N virtual
// devices, the embedded default and what every test runs) implements it.
// Per-rank backends implement Comm (comm.h) instead, under the one step
// runner (rank_reshard.h): MPI (mpi.h), and threads as ranks, which this
// executor runs by default (Transport::kRanks, or kAuto up to
// kAutoRankDevices devices and kMaxRankMessages messages): a face over the
// runner MPI runs.
//
// Buffers are the layouts' exact local buffers, row-major, indexed like
// PlanProgram::devices(): sources[i] holds device i's part of the source
// layout, targets[i] receives its part of the target layout (an empty span
// for a device that holds nothing). Sizes are checked before anything runs;
// a wrong size is InvalidArgument naming the device, never a partial run.
//
// Under kRanks every device is a rank running its part (a fiber over a few
// threads, kept with its runner between runs of one program): each message
// copied once from its sender's input into its receiver's output where the
// step allows (box messages), else staged as over MPI. Under kStaged and
// kDirect (the pool transports, for more devices than runners fit) the
// executor runs each step as
// the program says: every device packs its messages into its send buffer
// and copies its local part, then every device unpacks what it receives,
// reading each message in place from its sender's send buffer; or, with
// kDirect, every message is one copy from its sender's input. Copies spread
// over a thread pool; large ones are split into row ranges. It holds the
// sources, the targets, one send buffer per device (reused across runs) and
// the intermediate layouts' buffers of multi-step plans, freed as soon as
// the next step has read them: never a full copy of the array unless a step's
// layout is one.
//
// An executor object runs one plan at a time (not thread-safe); the program
// is only read. Under kRanks the ranks are kept for the program last run
// (its PlanProgram::id at the same address) and started again for another.
#ifndef RESHARD_EXECUTOR_H_
#define RESHARD_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/device_program.h"
#include "reshard/rank_reshard.h"
#include "reshard/status.h"

namespace reshard {

// How the in-process executor moves a message. kRanks runs the step runner
// MPI runs (RankReshard, rank_reshard.h) with every device a rank of the
// threads-as-ranks backend (thread_comm.h), each rank a fiber, the fibers
// running over ExecOptions::threads threads: transport choice, sub-groups, chunking
// and error agreement as under MPI, each message copied once from its
// sender's input into its receiver's output (box messages over shared
// memory) wherever the step allows, the ranks and their runners kept
// between runs of one program. Every rank holds a runner and a fiber
// stack, so plans over more than MaxRankDevices() devices are Unavailable;
// each rank costs a run 0.2 to 0.8 us more than the pool on this machine
// (docs/benchmarks.md, "Threads as ranks: two waits a run fewer"). The two others run
// every device's copies of a step as one
// schedule over a pool of ExecOptions::threads threads, with no runner per
// device: kStaged packs each message into its sender's send
// buffer and unpacks it from there (the path MPI and NCCL take); kDirect
// copies it once, from the sender's input buffer straight into the
// receiver's output buffer (DeviceProgram::direct). kAuto, the default:
// kRanks up to kAutoRankDevices devices and kMaxRankMessages messages,
// kDirect above (AutoTransport), or the other where the program lacks that
// one's copies; through the API also
// the pool where the ranks' stacks or threads cannot be had (Unavailable). kStaged and kRanks run a
// program's staged copies, kDirect its direct ones: a program compiled
// without them (CompileOptions::copies) is InvalidArgument.
enum class Transport { kAuto, kStaged, kDirect, kRanks };

// What one step moved as messages, per device (indexed like
// PlanProgram::devices()), counted from the copies the transport made: the
// bytes a device's messages carried out of it and into it. A backend's
// figures are checked against the plan's send_bytes / recv_bytes
// (docs/execution.md, "Planned and executed bytes").
struct StepTraffic {
  std::vector<int64_t> sent = {}, received = {};
};

struct ExecStats {
  int64_t bytes_moved = 0;  // bytes written into every step's output buffers (received or copied locally)
  int64_t bytes_sent = 0;   // of which arrived as messages
  int64_t peak_bytes = 0;   // most bytes one device held: its buffers, send buffer and intermediates
  std::vector<int64_t> peak_per_device = {};  // indexed like PlanProgram::devices()
  std::vector<StepTraffic> steps = {};        // per plan step (StepProgram::plan_step: an all-reduce's two program steps add up)
  double seconds = 0;
  // In-process, staged or direct: copy phases whose way of running (sliced,
  // or grouped by destination and in which order) came from the executor's
  // previous run of the same program (PlanProgram::id), into any buffers,
  // not decided and sorted again (phases of contiguous copies only count
  // too: their chunking is kept likewise).
  int64_t phases_reused = 0;
  // Under Transport::kRanks: the transport each program step ran with
  // (RankReshard::step_transports). Empty otherwise.
  std::vector<std::string> rank_transports = {};
  Transport transport = Transport::kAuto;  // the one that ran (kAuto resolved)
};


// The most threads an executor or checker uses (ExecOptions::threads and the
// `threads` arguments): larger counts are taken as this one. `reshard run
// --threads` refuses more.
inline constexpr int kMaxThreads = 1024;
// The threads such a count stands for: the hardware's thread count where it
// is <= 0 (at least 1), at most kMaxThreads.
int ResolveThreads(int threads);

// The most devices threads as ranks run (Transport::kRanks): 16,384 where
// each rank's fiber stack takes two of the process's mappings (the stack
// and its guard, below Linux 6.13; Linux allows a process 65,530 by
// default), else 2^20, where all stacks are one mapping (a MiB of address
// space each; a rank holds about 6 KiB of memory: RankThreads::kRankBytes).
int64_t MaxRankDevices();
// Unavailable, naming the limit and why, where `devices` is more than
// MaxRankDevices(); else Ok.
Status CheckRankDevices(int64_t devices);
// The most devices kAuto gives threads as ranks: each rank costs a run 0.2
// to 0.8 us more than the pool, whose time grows with the bytes moved, not
// the devices (a transpose over 16,384 devices took 1.9x the pool's time,
// over 262,144 10.8x; docs/benchmarks.md, "Threads as ranks: two waits a
// run fewer").
inline constexpr int64_t kAutoRankDevices = 16384;
// The most messages kAuto gives threads as ranks: every rank expands its
// own messages of every step, each with its copies and box runs (an
// all-gather over 1024 devices, a million messages, held 382 MB more than
// the pool's one program per group pattern; over 4096, 16.8 M, 5.4 GB).
inline constexpr int64_t kMaxRankMessages = int64_t{1} << 21;

// What kAuto runs for a plan over `devices` devices whose steps send
// `messages` messages in all (a program with both forms of copies): kRanks
// up to kAutoRankDevices devices (and MaxRankDevices()) and
// kMaxRankMessages messages, else kDirect.
Transport AutoTransport(int64_t devices, int64_t messages);
// The messages every step of `program` sends, all devices' (a step written
// per group pattern: k - 1 from each device of a group of k), what
// AutoTransport weighs.
int64_t ProgramMessages(const PlanProgram& program);

struct ExecOptions {
  // <= 0: the hardware's thread count; at most kMaxThreads. When the system
  // cannot start them all, Run returns Unavailable (and runs nothing).
  // Under kRanks: the most threads the ranks' fibers run on (the caller's
  // among them; rank_bytes_per_thread takes fewer for small programs), so
  // also how many ranks copy at once.
  int threads = 0;
  Transport transport = Transport::kAuto;
  // Under Transport::kRanks (given, or kAuto's choice): the runner's
  // transport and message limit; with rank_priced_chunks, ignored where
  // the pool runs.
  StepTransport rank_transport = StepTransport::kAuto;
  int64_t rank_max_message_bytes = (int64_t{1} << 31) - 1;
  bool rank_priced_chunks = false;  // RankOptions::priced_chunks
  // Under Transport::kRanks: choose each step's transport as over MPI,
  // whose box messages copy twice (Comm::boxes_copy_once): structured steps
  // over their groups before box messages. Off: box messages first, the
  // fastest in one process. The MPI suites' choices, run in process.
  bool rank_choose_as_mpi = false;
  // Under Transport::kRanks: the ranks' fibers run on one thread per this
  // many bytes of the program's targets, at least one and at most
  // `threads`. Waking a second thread costs a small reshard more than that
  // thread copies: the canonical case at 16 KiB took 10 us a run on one
  // thread and 20 on two, at 512 KiB 31 and 40, at 1 MiB 61 and 35-70. 0:
  // `threads` always (the checker's runs, RunChecked, so that every test
  // runs its ranks on all the threads it asks for).
  int64_t rank_bytes_per_thread = int64_t{512} << 10;
  // A step whose copies are written per group pattern (GroupCopies,
  // device_program.h), direct or staged, runs from a per-copy schedule (40
  // bytes a copy; large copies split over threads, small ones batched) up
  // to this many copies, and above it device by device from the pattern
  // itself, each device's copies on one thread, with no list (an all-gather
  // over 8192 devices makes 67 million copies).
  int64_t max_scheduled_group_copies = int64_t{1} << 16;
  // Called after every program step with the step's output buffers (the
  // checker's hook); under Transport::kRanks with rank_priced_chunks, not
  // after the first of an all-reduce run whole (its output is never written).
  // Under kRanks it runs inside rank 0 (a fiber, on the thread that called
  // Run), the other ranks waiting: it must not run another kRanks executor.
  std::function<void(size_t step, std::span<const std::span<const std::byte>> outputs)> after_step = {};
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string_view name() const = 0;  // "in-process", "mpi"
  // REQUIRES: buffers sized as the program's source and target layouts say.
  virtual Result<ExecStats> Run(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                                std::span<const std::span<std::byte>> targets) = 0;
};

std::unique_ptr<Executor> MakeInProcessExecutor(ExecOptions options = {});

// Plain memcpy bandwidth in GB/s (1e9 bytes/s) of `bytes` bytes, split over
// `threads` threads (as many as start), best of `repeat` runs: the reference
// executors are measured against. Copies through two buffers of at most 256 MiB.
double MeasureMemcpyGbps(int64_t bytes, int threads, int repeat = 3);

// Checks buffer sizes against the layouts (shared by every backend).
Status CheckBuffers(const PlanProgram& program, std::span<const std::span<const std::byte>> sources,
                    std::span<const std::span<std::byte>> targets);

}  // namespace reshard

#endif  // RESHARD_EXECUTOR_H_
