// reshard run: plan as `plan` does, compile the plan to its device programs,
// execute it on real buffers (the in-process executor: every device's
// buffers in this process), check the result exactly, and report what moved
// and how fast against plain memcpy of the same bytes, measured in this run.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "run_report.h"
#include "reshard/device_program.h"
#include "reshard/exec_checker.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/planner.h"
#ifdef RESHARD_HAVE_MPI
#include "run_mpi.h"
#endif

namespace reshard::cli {
namespace {

struct RunOptions {
  PairOptions pair;
  int repeat = 5;
  int threads = 0;
  std::string backend = "in-process";
  std::string max_memory;
  std::string transport = "direct";
};

int64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{1} << 34;
}

// "8G", "512M", "65536" -> bytes (K, M, G: powers of 1024). Throws CliError(2).
int64_t ParseSize(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = used ? text.substr(used) : "";
  const double scale = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (!used || scale < 0 || v <= 0 || v * scale > 9e18)
    throw CliError(kExitBadInput, fmt::format("--max-memory: '{}' is not a size such as 65536, 64K, 1.5M or 8G", text));
  return static_cast<int64_t>(v * scale);
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
  if (o.repeat < 1) throw CliError(kExitBadInput, "--repeat must be at least 1");
  if (o.backend == "mpi") {
#ifdef RESHARD_HAVE_MPI
    RunMpi(o.pair, LoadPair(o.pair), o.repeat, o.max_memory.empty() ? 0 : ParseSize(o.max_memory));
    return;
#else
    throw CliError(kExitUnmet, "this reshard was built without MPI (configure with -DRESHARD_WITH_MPI=ON and run under mpirun)");
#endif
  }
  LayoutPair pair = LoadPair(o.pair);
  // Size limits first, from the layouts alone: nothing is planned or allocated
  // unless the buffers (source, target, and send buffers up to the source's
  // size) fit.
  const int64_t limit = o.max_memory.empty() ? PhysicalMemory() / 10 * 7 : ParseSize(o.max_memory);
  const int64_t src_bytes = TotalLocalBytes(pair.source.layout), dst_bytes = TotalLocalBytes(pair.target.layout);
  const int64_t need = 2 * src_bytes + dst_bytes;
  if (need > limit)
    throw CliError(kExitUnmet, fmt::format("running this needs about {} (source, target and send buffers), more than the "
                                           "limit of {} (--max-memory)",
                                           FormatBytes(need), FormatBytes(limit)));
  const PlannerOptions options = MakePlannerOptions(o.pair, pair, /*emitting=*/false);
  Result<PlanResult> planned = PlanReshard(pair.source.layout, pair.target.layout, options);
  if (!planned.ok())
    ThrowIfError(planned.status(), "", planned.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
  Result<PlanProgram> program = PlanProgram::Compile(planned->plan);
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
  FillSources(p, fill, o.threads);
  ExecOptions eo;
  eo.threads = o.threads;
  eo.transport = o.transport == "staged" ? Transport::kStaged : Transport::kDirect;
  std::unique_ptr<Executor> executor = MakeInProcessExecutor(eo);
  // One warm-up run (first touch of the send buffers), then the timed runs; the best counts.
  Result<ExecStats> stats = executor->Run(p, sources, targets);
  ThrowIfError(stats.status(), "executing", kExitInternal);
  double best = stats->seconds;
  {
    Progress progress(o.repeat);
    for (int r = 0; r < o.repeat; ++r) {
      stats = executor->Run(p, sources, targets);
      ThrowIfError(stats.status(), "executing", kExitInternal);
      best = r == 0 ? stats->seconds : std::min(best, stats->seconds);
      progress.Update(r + 1);
    }
  }
  std::vector<std::span<const std::byte>> results(targets.begin(), targets.end());
  const TagCheck check = CheckTargets(p, results, o.threads);
  const bool verified = check.mismatches == 0;
  const int64_t moved = stats->bytes_moved;
  const RunFigures f = MakeRunFigures(moved, best, MeasureMemcpyGbps(moved, o.threads, o.repeat), verified);
  const double gbps = f.gbps, memcpy_gbps = f.memcpy_gbps, fraction = f.fraction_of_memcpy;
  const std::vector<std::string> ops = planned->plan.OpNames();
  if (o.pair.common.json) {
    nlohmann::ordered_json j = RunJson("in-process", f);
    j.update(nlohmann::ordered_json{{"devices", n},
                                    {"steps", ops},
                                    {"bytes_sent", stats->bytes_sent},
                                    {"peak_bytes", stats->peak_bytes},
                                    {"elements_checked", check.checked},
                                    {"repeat", o.repeat},
                                    {"transport", o.transport},
                                    {"problem", check.first_problem}});
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format(
        "{}: {} into target buffers ({} as messages) on {} devices, {} ({}); best of {}: {:.6f} s, {:.2f} GB/s; "
        "memcpy of the same bytes {:.2f} GB/s ({:.0f}%); peak {} per device\n",
        verified ? "verified" : "FAILED", FormatBytes(moved), FormatBytes(stats->bytes_sent), n,
        Plural(static_cast<int64_t>(ops.size()), "step"),
        ops.empty() ? std::string("a local copy") : fmt::format("{}", fmt::join(ops, ", ")), o.repeat, best, gbps,
        memcpy_gbps, 100 * fraction, FormatBytes(stats->peak_bytes));
    if (!verified) std::cout << fmt::format("{} mismatches; {}\n", check.mismatches, check.first_problem);
  }
  if (!verified) ExitCode() = kExitUnmet;
}

}  // namespace

void RegisterRun(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "plan as plan does, execute the plan on real buffers, check every element and report the bandwidth");
  AddPairOptions(cmd, o->pair);
  cmd->add_option("--repeat", o->repeat, "timed runs after one warm-up; the best counts")->capture_default_str();
  cmd->add_option("--threads", o->threads, "copy threads (default: the hardware's count)");
  cmd->add_option("--backend", o->backend,
                  "in-process (every device in this process) or mpi (under mpirun: device d is rank d; each rank "
                  "holds only its own buffers)")
      ->check(CLI::IsMember({"in-process", "mpi"}))
      ->capture_default_str();
  cmd->add_option("--transport", o->transport,
                  "in-process: direct (one copy per message, sender's buffer to receiver's) or staged (pack into a "
                  "send buffer, unpack from it: the path MPI and NCCL take)")
      ->check(CLI::IsMember({"direct", "staged"}))
      ->capture_default_str();
  cmd->add_option("--max-memory", o->max_memory,
                  "refuse, before planning, runs whose buffers need more, e.g. 8G (default: 70% of physical memory; "
                  "with mpi, per rank, 70% over the ranks)");
  cmd->callback([o]() { RunRun(*o); });
}

}  // namespace reshard::cli
