// reshard run: plan as `plan` does, compile the plan to its device programs,
// execute it on real buffers (the in-process executor: every device's
// buffers in this process), check the result exactly, and report what moved
// and how fast against plain memcpy of the same bytes, measured in this run.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common.h"
#include "exec/exec_checker.h"
#include "layout/checked_math.h"
#include "reshard/device_program.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/planner.h"
#include "run_memory.h"
#include "run_report.h"
#ifdef RESHARD_HAVE_MPI
#include "run_mpi.h"
#endif

namespace reshard::cli {
namespace {

constexpr int64_t kMaxRepeat = 1000000;

struct RunOptions {
  PairOptions pair;
  std::string backend = "in-process";
  // Each set when given, as given.
  std::optional<std::string> repeat, threads, max_memory, transport;
  bool priced_chunks = false;
};

// run's own flags, checked: the same answer on every rank of an MPI run.
struct RunFlags {
  int repeat = 5;          // timed runs after the warm-up
  int threads = 0;         // 0: the hardware's count
  int64_t max_memory = 0;  // 0: the default limit
  Transport transport = Transport::kAuto;  // resolved once the layouts' devices are known
  bool priced_chunks = false;
};

RunFlags CheckRunFlags(const RunOptions& o) {
  RunFlags f;
  if (o.repeat) f.repeat = static_cast<int>(ParseInteger(*o.repeat, "--repeat", 1, kMaxRepeat));
  if (o.backend == "mpi" && o.threads)
    throw CliError(kExitBadInput,
                   "--threads applies to --backend in-process only (each MPI rank copies on one thread)");
  if (o.backend == "mpi" && o.transport)
    throw CliError(kExitBadInput,
                   "--transport applies to --backend in-process only (--backend mpi picks an MPI transport "
                   "for each step)");
  if (o.priced_chunks && o.backend != "mpi" && o.transport && *o.transport != "ranks" && *o.transport != "auto")
    throw CliError(kExitBadInput,
                   "--priced-chunks applies to --backend mpi and --transport ranks only (the per-rank step runner's "
                   "collectives)");
  f.priced_chunks = o.priced_chunks;
  if (o.threads) {
    try {
      f.threads = static_cast<int>(ParseInteger(*o.threads, "--threads", 1, kMaxThreads));
    } catch (const CliError& e) {
      throw CliError(e.exit_code, std::string(e.what()) + " (leave --threads out for the hardware's count)");
    }
  }
  if (o.max_memory) f.max_memory = ParseByteSize(*o.max_memory, "--max-memory");
  if (o.transport == "staged") f.transport = Transport::kStaged;
  if (o.transport == "direct") f.transport = Transport::kDirect;
  if (o.transport == "ranks") f.transport = Transport::kRanks;
  return f;
}

// A progress bar on stderr, only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(int total) : total_(total), on_(isatty(STDERR_FILENO) != 0 && total > 1) {}
  void Update(int done) {
    if (!on_) return;
    const int width = 30, filled = width * done / total_;
    std::cerr << fmt::format("\r[{}{}] {}/{} runs", std::string(filled, '#'), std::string(width - filled, ' '), done, total_)
              << std::flush;
  }
  ~Progress() {
    if (on_) std::cerr << "\r" << std::string(50, ' ') << "\r" << std::flush;
  }

 private:
  int total_;
  bool on_;
};

void RunRun(const RunOptions& o) {
  if (o.backend == "mpi") {
#ifdef RESHARD_HAVE_MPI
    // Everything a rank reads off its command line is checked inside RunMpi,
    // where every rank learns of any rank's error.
    RunMpi(o.pair.common.json, [&o]() {
      const RunFlags f = CheckRunFlags(o);
      LayoutPair pair = LoadPair(o.pair);
      PlannerOptions planner = MakePlannerOptions(o.pair, pair, /*emitting=*/false);
      return MpiRequest{std::move(pair), std::move(planner), f.max_memory, f.priced_chunks, f.repeat};
    });
    return;
#else
    throw CliError(kExitUnmet, "this reshard was built without MPI (configure with -DRESHARD_WITH_MPI=ON and run under mpirun)");
#endif
  }
  RunFlags flags = CheckRunFlags(o);
  LayoutPair pair = LoadPair(o.pair);
  const size_t devices = DevicesOfBoth(pair.source.layout, pair.target.layout).size();
  // auto: the step runner (ranks) up to kAutoRankDevices devices and, once
  // planned, kMaxRankMessages messages (AutoTransport), unless only the
  // direct transport's memory fits (threads as ranks stage both ways, as
  // MPI ranks do); checked before planning and again with the plan. With
  // --priced-chunks, which only the ranks run, the ranks up to
  // MaxRankDevices().
  const bool automatic = flags.transport == Transport::kAuto;
  if (flags.transport == Transport::kRanks)
    ThrowIfError(CheckRankDevices(static_cast<int64_t>(devices)), "", kExitUnmet);
  if (automatic)
    flags.transport = flags.priced_chunks && static_cast<int64_t>(devices) <= MaxRankDevices()
                          ? Transport::kRanks
                          : AutoTransport(static_cast<int64_t>(devices), 0);
  // Size limits first, from the layouts alone: nothing is planned or allocated
  // unless the buffers, the memcpy measurement and the checker fit; then
  // again with the plan (intermediate buffers and the programs) before it is
  // compiled (run_memory.h).
  // Threads as ranks map a fiber's stack per device of the two layouts.
  auto limit_of = [&](Transport t) {
    return RunMemoryLimit(flags.max_memory, 1, flags.threads, t == Transport::kRanks ? static_cast<int64_t>(devices) : 0);
  };
  auto before = [&](Transport t) {
    return EstimateBeforePlanning(pair.source.layout, pair.target.layout, /*per_rank=*/false, flags.threads, t);
  };
  // The estimate of the transport chosen, after auto's fallback to direct
  // where only direct's fits (each transport's estimate made once).
  auto need_of = [&](const auto& estimate) {
    MemoryEstimate need = estimate(flags.transport);
    if (automatic && flags.transport == Transport::kRanks && need.bytes > limit_of(Transport::kRanks).bytes) {
      MemoryEstimate direct = estimate(Transport::kDirect);
      if (direct.bytes <= limit_of(Transport::kDirect).bytes) {
        flags.transport = Transport::kDirect;
        need = std::move(direct);
      }
    }
    return need;
  };
  auto check_priced = [&] {
    if (flags.priced_chunks && flags.transport != Transport::kRanks)
      throw CliError(kExitBadInput,
                     fmt::format("--priced-chunks applies to the per-rank step runner's collectives (--transport "
                                 "ranks), which runs at most {} devices and within --max-memory; these layouts have {}",
                                 MaxRankDevices(), devices));
  };
  const MemoryEstimate need_before = need_of(before);
  check_priced();
  CheckMemory(need_before, limit_of(flags.transport), /*per_rank=*/false);
  const PlannerOptions options = MakePlannerOptions(o.pair, pair, /*emitting=*/false);
  Result<PlanResult> planned = PlanReshard(pair.source.layout, pair.target.layout, options);
  if (!planned.ok())
    ThrowIfError(planned.status(), "", planned.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
  // auto, the plan's messages known: the pool where the ranks would hold
  // too many (AutoTransport); with --priced-chunks, which only the ranks
  // run, the ranks still, within --max-memory.
  if (automatic && !flags.priced_chunks && flags.transport == Transport::kRanks) {
    int64_t messages = 0;
    for (const PlanStep& s : planned->plan.steps()) messages = SaturatingAdd(messages, s.sends.Sum());
    flags.transport = AutoTransport(static_cast<int64_t>(devices), messages);
  }
  auto with_plan = [&](Transport t) {
    return EstimateWithPlan(planned->plan, /*per_rank=*/false, flags.threads, t, flags.priced_chunks);
  };
  const MemoryEstimate need_with_plan = need_of(with_plan);
  check_priced();
  CheckMemory(need_with_plan, limit_of(flags.transport), /*per_rank=*/false);
  // Only the copies the transport runs (a copy op or more per message
  // each): threads as ranks pack and unpack, and take a box exchange's
  // direct copies where they are fewer than its paired ones (thread_boxes.h).
  CompileOptions compile;
  compile.copies = flags.transport == Transport::kDirect  ? CopyForms::kDirect
                   : flags.transport == Transport::kRanks ? CopyForms::kBoth
                                                          : CopyForms::kStaged;
  Result<PlanProgram> program = PlanProgram::Compile(planned->plan, compile);
  ThrowIfError(program.status(), "compiling the plan", kExitInternal);
  const PlanProgram& p = *program;

  const size_t n = p.devices().size();
  std::vector<HostBuffer> src, dst;
  std::vector<std::span<const std::byte>> sources(n);
  std::vector<std::span<std::byte>> targets(n), fill(n);
  for (size_t i = 0; i < n; ++i) {
    src.emplace_back(p.source().LocalBytes(p.devices()[i]));
    dst.emplace_back(p.target().LocalBytes(p.devices()[i]));
    sources[i] = src[i].span();
    fill[i] = src[i].span();
    targets[i] = dst[i].span();
  }
  ExecOptions eo;
  eo.threads = flags.threads;
  eo.transport = flags.transport;
  eo.rank_priced_chunks = flags.priced_chunks;
  std::unique_ptr<Executor> executor = MakeInProcessExecutor(eo);
  // Threads or stacks the system cannot give are a request it cannot meet,
  // not a bug. (Threads as ranks map a stack per device besides --threads'.)
  const char* hint = flags.transport == Transport::kRanks
                         ? "executing (threads as ranks map a stack per device, and start --threads threads)"
                         : "executing (fewer --threads may fit)";
  auto check = [hint](const Status& s) {
    if (s.code() == Status::Code::kUnavailable) ThrowIfError(s, hint, kExitUnmet);
    ThrowIfError(s, "executing", kExitInternal);
  };
  FillSources(p, fill, flags.threads);
  InjectedFailure(0, "fill");
  // One warm-up run (first touch of the send buffers), then the timed runs; the best counts.
  InjectedFailure(0, "execute");
  Result<ExecStats> stats = executor->Run(p, sources, targets);
  check(stats.status());
  double best = stats->seconds;
  {
    Progress progress(flags.repeat);
    for (int r = 0; r < flags.repeat; ++r) {
      stats = executor->Run(p, sources, targets);
      check(stats.status());
      best = r == 0 ? stats->seconds : std::min(best, stats->seconds);
      progress.Update(r + 1);
    }
  }
  InjectedFailure(0, "check");
  std::vector<std::span<const std::byte>> results(targets.begin(), targets.end());
  const TagCheck tags = CheckTargets(p, results, flags.threads);
  const bool verified = tags.mismatches == 0;
  const int64_t moved = stats->bytes_moved;
  const RunFigures f = MakeRunFigures(moved, best, MeasureMemcpyGbps(moved, flags.threads, flags.repeat), verified);
  const double gbps = f.gbps, memcpy_gbps = f.memcpy_gbps, fraction = f.fraction_of_memcpy;
  const std::vector<std::string> ops = planned->plan.OpNames();
  // Threads as ranks: each step's transport, as `--backend mpi` prints them
  // (none for a plan without steps, one local copy).
  const std::vector<std::string> transports = ops.empty() ? std::vector<std::string>{} : stats->rank_transports;
  if (o.pair.common.json) {
    nlohmann::ordered_json j = RunJson("in-process", f);
    j.update(nlohmann::ordered_json{{"devices", n},
                                    {"steps", ops},
                                    {"bytes_sent", stats->bytes_sent},
                                    {"peak_bytes", stats->peak_bytes},
                                    {"elements_checked", tags.checked},
                                    {"repeat", flags.repeat},
                                    {"transport", flags.transport == Transport::kStaged  ? "staged"
                                                  : flags.transport == Transport::kRanks ? "ranks"
                                                                                         : "direct"},
                                    {"transports", transports},
                                    {"problem", tags.first_problem}});
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format(
        "{}: {} into target buffers ({} as messages) on {} devices, {} ({}); best of {}: {:.6f} s, {:.2f} GB/s; "
        "memcpy of the same bytes {:.2f} GB/s ({:.0f}%); peak {} per device\n",
        verified ? "verified" : "FAILED", FormatBytes(moved), FormatBytes(stats->bytes_sent), n,
        Plural(static_cast<int64_t>(ops.size()), "step"),
        ops.empty()          ? std::string("a local copy")
        : transports.empty() ? fmt::format("{}", fmt::join(ops, ", "))
                             : fmt::format("{}, over {}", fmt::join(ops, ", "), fmt::join(transports, ", ")),
        flags.repeat, best, gbps,
        memcpy_gbps, 100 * fraction, FormatBytes(stats->peak_bytes));
    if (!verified) std::cout << fmt::format("{} mismatches; {}\n", tags.mismatches, tags.first_problem);
  }
  if (!verified) ExitCode() = kExitUnmet;
}

}  // namespace

void RegisterRun(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "plan as plan does, execute the plan on real buffers, check every element and report the bandwidth");
  AddPairOptions(cmd, o->pair);
  // Read by CheckRunFlags.
  auto text = [cmd](const char* name, std::optional<std::string>& to, const std::string& help) {
    return AddTextOption(cmd, name, to, help);
  };
  text("--repeat", o->repeat, fmt::format("timed runs after one warm-up, 1 to {}; the best counts (default: 5)", kMaxRepeat));
  text("--threads", o->threads,
       fmt::format("in-process: copy threads (ranks: the threads the ranks run on), 1 to {} (default: the hardware's "
                   "count)",
                   kMaxThreads));
  cmd->add_option("--backend", o->backend,
                  "in-process (every device in this process) or mpi (under mpirun: device d is rank d; each rank "
                  "holds only its own buffers)")
      ->check(CLI::IsMember({"in-process", "mpi"}))
      ->capture_default_str();
  text("--transport", o->transport,
       fmt::format(
           "in-process: ranks (every device a rank, a fiber over --threads threads, running the per-rank "
           "step runner MPI runs, each message copied once where the step allows) or direct (one schedule of "
           "every device's copies over --threads threads, one copy per message, sender's buffer to receiver's) or "
           "staged (the same, packing into send buffers and unpacking from them: the path MPI and NCCL "
           "take) or auto (the default: ranks up to {} devices and {} messages, direct above; ranks "
           "run at most {} devices here)",
           kAutoRankDevices, kMaxRankMessages, MaxRankDevices()))
      ->check(CLI::IsMember({"auto", "ranks", "direct", "staged"}));
  cmd->add_flag("--priced-chunks", o->priced_chunks,
                "mpi or ranks: run planned all-gathers and all-to-alls over mesh groups as equal-chunk collectives, "
                "every message padded to the chunk the plan priced (as XLA and NCCL run them), not with exact counts");
  text("--max-memory", o->max_memory,
       "refuse, before planning, runs whose buffers need more, e.g. 8G (default: 70% of physical memory; with mpi, "
       "per rank, 70% over the ranks)");
  cmd->callback([o]() { RunRun(*o); });
}

}  // namespace reshard::cli
