// reshard run --backend mpi: the MPI backend (reshard/mpi.h) on tagged data.
#include "run_mpi.h"

#include "run_report.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "reshard/exec_checker.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/mpi.h"

namespace reshard::cli {
namespace {

// MPI for the length of the run; finalized however the run ends.
class MpiSession {
 public:
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

double MaxOver(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

int64_t SumOver(int64_t v) {
  int64_t out = v;
  MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

}  // namespace

void RunMpi(const PairOptions& o, const LayoutPair& pair, int repeat, int64_t max_memory) {
  MpiSession mpi;
  const Layout& source = pair.source.layout;
  const Layout& target = pair.target.layout;
  // Size limits first, the same answer on every rank: the busiest rank's
  // buffers (source, target, and staging up to as much again).
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{1} << 34;
  const int64_t limit = max_memory > 0 ? max_memory : physical / 10 * 7 / mpi.size();
  const int64_t need = 2 * (MaxLocalBytes(source) + MaxLocalBytes(target));
  if (need > limit)
    throw CliError(kExitUnmet, fmt::format("one rank's buffers need about {}, more than the limit of {} per rank "
                                           "(--max-memory)",
                                           FormatBytes(need), FormatBytes(limit)));
  MpiOptions options;
  options.planner = MakePlannerOptions(o, pair, /*emitting=*/false);
  Result<MpiReshard> created = MpiReshard::Create(MPI_COMM_WORLD, source, target, options);
  ThrowIfError(created.status(), "",
               created.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
  MpiReshard& r = *created;
  HostBuffer src(r.source_bytes()), dst(r.target_bytes());
  FillTags(source, mpi.rank(), src.span());

  Result<MpiRunStats> stats = r.Execute(src.span(), dst.span());  // warm-up: first touch of every buffer
  ThrowIfError(stats.status(), "executing", kExitInternal);
  double best = 0, own_best = 0;
  for (int k = 0; k < repeat; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    stats = r.Execute(src.span(), dst.span());
    ThrowIfError(stats.status(), "executing", kExitInternal);
    const double slowest = MaxOver(stats->seconds);
    best = k == 0 ? slowest : std::min(best, slowest);
    own_best = k == 0 ? stats->seconds : std::min(own_best, stats->seconds);
  }
  const TagCheck check = CheckTags(target, mpi.rank(), dst.span());
  const int64_t mismatches = SumOver(check.mismatches), checked = SumOver(check.checked);
  // memcpy of each rank's own bytes, every rank at once: the same parallelism as the run.
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t own_moved = stats->bytes_moved;
  const double own_memcpy = MeasureMemcpyGbps(own_moved, 1, repeat);
  const double memcpy_seconds = MaxOver(own_memcpy > 0 ? static_cast<double>(own_moved) / 1e9 / own_memcpy : 0);
  const int64_t moved = SumOver(own_moved), sent = SumOver(stats->bytes_sent);

  // Per rank: bytes moved, best seconds, the first mismatch it saw.
  std::vector<int64_t> moved_by(static_cast<size_t>(mpi.size()));
  std::vector<double> seconds_by(static_cast<size_t>(mpi.size()));
  MPI_Gather(&own_moved, 1, MPI_INT64_T, moved_by.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  MPI_Gather(&own_best, 1, MPI_DOUBLE, seconds_by.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  const bool verified = mismatches == 0;
  if (!verified) ExitCode() = kExitUnmet;
  if (!check.first_problem.empty()) std::cerr << fmt::format("rank {}: {}\n", mpi.rank(), check.first_problem);
  if (mpi.rank() != 0) return;

  const RunFigures f = MakeRunFigures(moved, best, memcpy_seconds > 0 ? static_cast<double>(moved) / memcpy_seconds / 1e9 : 0,
                                      verified);
  const double gbps = f.gbps, memcpy_gbps = f.memcpy_gbps, fraction = f.fraction_of_memcpy;
  const std::vector<std::string> transports = r.step_transports();
  if (o.common.json) {
    nlohmann::ordered_json per_rank = nlohmann::ordered_json::array();
    for (int k = 0; k < mpi.size(); ++k) {
      const size_t i = static_cast<size_t>(k);
      per_rank.push_back({{"rank", k},
                          {"bytes_moved", moved_by[i]},
                          {"seconds", seconds_by[i]},
                          {"gbps", seconds_by[i] > 0 ? static_cast<double>(moved_by[i]) / seconds_by[i] / 1e9 : 0}});
    }
    nlohmann::ordered_json j = RunJson("mpi", f);
    j.update(nlohmann::ordered_json{{"ranks", mpi.size()},
                                    {"steps", r.step_ops()},
                                    {"transports", transports},
                                    {"bytes_sent", sent},
                                    {"elements_checked", checked},
                                    {"repeat", repeat},
                                    {"per_rank", per_rank}});
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << fmt::format(
      "{}: {} into target buffers ({} as messages) on {} ranks, {} ({}, over {}); best of {}: {:.6f} s, {:.2f} GB/s "
      "in total; memcpy of the same bytes on every rank at once {:.2f} GB/s ({:.0f}%)\n",
      verified ? "verified" : "FAILED", FormatBytes(moved), FormatBytes(sent), mpi.size(),
      Plural(static_cast<int64_t>(r.step_ops().size()), "step"), fmt::join(r.step_ops(), ", "),
      fmt::join(transports, ", "), repeat, best, gbps, memcpy_gbps, 100 * fraction);
  for (int k = 0; k < mpi.size(); ++k) {
    const size_t i = static_cast<size_t>(k);
    std::cout << fmt::format("  rank {:>3}: {} in {:.6f} s, {:.2f} GB/s\n", k, FormatBytes(moved_by[i]), seconds_by[i],
                             seconds_by[i] > 0 ? static_cast<double>(moved_by[i]) / seconds_by[i] / 1e9 : 0);
  }
  if (!verified) std::cout << fmt::format("{} mismatches of {} elements\n", mismatches, checked);
}

}  // namespace reshard::cli
