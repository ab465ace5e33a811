// reshard run --backend mpi: the MPI backend (reshard/mpi.h) on tagged data.
#include "run_mpi.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <new>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "exec/exec_checker.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/mpi.h"
#include "reshard/planner.h"
#include "run_memory.h"
#include "run_report.h"

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

uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + (h >> 29); }
uint64_t MixText(uint64_t h, std::string_view text) {
  for (char c : text) h = Mix(h, static_cast<unsigned char>(c));
  return Mix(h, text.size());
}

// Throws `e`, an error every rank throws alike, on every rank, once rank 0
// has printed it: a rank that exits non-zero makes mpirun kill the others,
// so none leaves before the message is out.
[[noreturn]] void ThrowFromRankZero(const MpiSession& mpi, CliError e) {
  if (mpi.rank() == 0) PrintError("reshard: error: ", ShortenMessage(e.what()));
  MPI_Barrier(MPI_COMM_WORLD);
  e.print = false;
  throw e;
}

// The exit code and message of the exception being handled (call inside a catch block).
std::pair<int, std::string> CurrentError() {
  try {
    throw;
  } catch (const CliError& e) {
    return {e.exit_code, e.what()};
  } catch (const std::bad_alloc&) {
    return {kExitUnmet, kOutOfMemory};
  } catch (const std::exception& e) {
    return {kExitInternal, fmt::format("internal error: {}", e.what())};
  } catch (...) {
    return {kExitInternal, "internal error: an exception of an unknown type"};
  }
}

// Runs `f`, which every rank runs together but which may fail on one rank
// alone while the others wait for it in a collective (a failed MPI call in
// Execute, memory running out): any exception prints this rank's error,
// "rank K: " before it, and ends the whole job with MPI_Abort (the exit code
// mpirun returns), so no rank hangs.
void OrAbort(const MpiSession& mpi, const std::function<void()>& f) {
  int code = kExitInternal;
  std::string msg;
  try {
    f();
    return;
  } catch (...) {
    std::tie(code, msg) = CurrentError();
  }
  std::cerr << fmt::format("reshard: error: rank {}: {}\n", mpi.rank(), ShortenMessage(msg)) << std::flush;
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return
}

// Runs `f` on every rank. When it throws on any rank, every rank throws the
// error of the lowest failing rank, printed by rank 0 alone: "rank K: " before
// it unless every rank failed with that same message.
void Agreed(const MpiSession& mpi, const std::function<void()>& f) {
  int code = 0;
  std::string msg;
  try {
    f();
  } catch (...) {
    std::tie(code, msg) = CurrentError();
  }
  const int64_t h = code == 0 ? 0 : static_cast<int64_t>(MixText(static_cast<uint64_t>(code), msg) >> 2);
  // The lowest failing rank; whether every rank failed; the least and (negated) the greatest message hash.
  int64_t v[4] = {code != 0 ? mpi.rank() : mpi.size(), code != 0 ? 1 : 0, h, -h};
  MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  if (v[0] == mpi.size()) return;
  const int first = static_cast<int>(v[0]);
  const bool alike = v[1] == 1 && v[2] == -v[3];
  int header[2] = {code, static_cast<int>(msg.size())};
  MPI_Bcast(header, 2, MPI_INT, first, MPI_COMM_WORLD);
  msg.resize(static_cast<size_t>(header[1]));
  MPI_Bcast(msg.data(), header[1], MPI_CHAR, first, MPI_COMM_WORLD);
  ThrowFromRankZero(mpi, CliError(header[0], alike ? msg : fmt::format("rank {}: {}", first, msg)));
}

// "rank 3", "ranks 0 and 2", "ranks 0, 2 and 5", "ranks 0, 1, 2, ... (12 ranks)".
std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  if (ranks.size() > 6)
    return fmt::format("ranks {}, {}, {}, ... ({} ranks)", ranks[0], ranks[1], ranks[2], ranks.size());
  const std::vector<int> head(ranks.begin(), ranks.end() - 1);
  return fmt::format("ranks {} and {}", fmt::join(head, ", "), ranks.back());
}

// What the ranks must share to run together: the layouts, the planner's options, the repeat count.
uint64_t RequestHash(const MpiRequest& r) {
  uint64_t h = Mix(0xcbf29ce484222325ull, r.pair.source.layout.Hash());  // in order: source, then target
  h = Mix(h, r.pair.target.layout.Hash());
  h = Mix(h, static_cast<uint64_t>(r.planner.strategy));
  h = Mix(h, static_cast<uint64_t>(r.planner.target));
  h = Mix(h, static_cast<uint64_t>(r.planner.memory_cap_bytes));
  h = MixText(h, r.planner.topology.ToString());
  for (const Mesh& m : r.planner.meshes) h = MixText(h, m.ToString());
  h = Mix(h, r.priced_chunks ? 2 : 1);
  return Mix(h, static_cast<uint64_t>(r.repeat));
}

// Collective: throws the same CliError on every rank (printed by rank 0)
// unless every rank holds `hash`. It names the ranks that differ from the
// version most ranks hold; without one version held by more ranks than any
// other, rank 0 and the first rank that differs from it.
void CheckSameOnEveryRank(const MpiSession& mpi, uint64_t hash) {
  std::vector<uint64_t> all(static_cast<size_t>(mpi.size()));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  std::map<uint64_t, int> count;
  for (uint64_t h : all) ++count[h];
  if (count.size() == 1) return;
  int most = 0, holders_of_most = 0;
  uint64_t common = 0;
  for (const auto& [h, c] : count) {
    if (c > most) {
      most = c;
      common = h;
      holders_of_most = 1;
    } else if (c == most) {
      ++holders_of_most;
    }
  }
  const char* rule = "(every rank must be given the same layouts and options)";
  std::string msg;
  if (holders_of_most == 1) {
    std::vector<int> odd;
    for (int k = 0; k < mpi.size(); ++k)
      if (all[static_cast<size_t>(k)] != common) odd.push_back(k);
    msg = fmt::format("{} {} given other layouts or options than the other {} {}", RankList(odd),
                      odd.size() == 1 ? "was" : "were", Plural(mpi.size() - static_cast<int64_t>(odd.size()), "rank"),
                      rule);
  } else {
    size_t other = 1;
    while (all[other] == all[0]) ++other;
    msg = fmt::format("rank 0 and rank {} were given different layouts or options {}", other, rule);
  }
  ThrowFromRankZero(mpi, CliError(kExitBadInput, msg));
}

// Rank 0 prints the figures (every rank takes part in the reductions).
void Report(const MpiSession& mpi, const MpiReshard& r, const TagCheck& check, const MpiRunStats& stats, double best,
            double own_best, int repeat, bool json) {
  const int64_t mismatches = SumOver(check.mismatches), checked = SumOver(check.checked);
  // memcpy of each rank's own bytes, every rank at once: the same parallelism as the run.
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t own_moved = stats.bytes_moved;
  const double own_memcpy = MeasureMemcpyGbps(own_moved, 1, repeat);
  const double memcpy_seconds = MaxOver(own_memcpy > 0 ? static_cast<double>(own_moved) / 1e9 / own_memcpy : 0);
  const int64_t moved = SumOver(own_moved), sent = SumOver(stats.bytes_sent);

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
  // A plan without steps is one local copy on each rank: no transport.
  const std::vector<std::string>& ops = r.step_ops();
  const std::vector<std::string> transports = ops.empty() ? std::vector<std::string>{} : r.step_transports();
  if (json) {
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
                                    {"steps", ops},
                                    {"transports", transports},
                                    {"bytes_sent", sent},
                                    {"elements_checked", checked},
                                    {"repeat", repeat},
                                    {"per_rank", per_rank}});
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << fmt::format(
      "{}: {} into target buffers ({} as messages) on {}, {} ({}); best of {}: {:.6f} s, {:.2f} GB/s "
      "in total; memcpy of the same bytes on every rank at once {:.2f} GB/s ({:.0f}%)\n",
      verified ? "verified" : "FAILED", FormatBytes(moved), FormatBytes(sent), Plural(mpi.size(), "rank"),
      Plural(static_cast<int64_t>(ops.size()), "step"),
      ops.empty() ? std::string("a local copy")
                  : fmt::format("{}, over {}", fmt::join(ops, ", "), fmt::join(transports, ", ")),
      repeat, best, gbps, memcpy_gbps, 100 * fraction);
  for (int k = 0; k < mpi.size(); ++k) {
    const size_t i = static_cast<size_t>(k);
    std::cout << fmt::format("  rank {:>3}: {} in {:.6f} s, {:.2f} GB/s\n", k, FormatBytes(moved_by[i]), seconds_by[i],
                             seconds_by[i] > 0 ? static_cast<double>(moved_by[i]) / seconds_by[i] / 1e9 : 0);
  }
  if (!verified) std::cout << fmt::format("{} mismatches of {} elements\n", mismatches, checked);
}

}  // namespace

void FailWithTheRanks(int exit_code, const std::string& message) {
  MpiSession mpi;
  Agreed(mpi, [&]() { throw CliError(exit_code, message); });
  throw CliError(exit_code, message);  // (Agreed has thrown it already)
}

bool NamesMpiRun(int argc, char** argv) {
  bool run = false, mpi = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    run = run || a == "run";
    mpi = mpi || a == "--backend=mpi" || (a == "--backend" && i + 1 < argc && std::string_view(argv[i + 1]) == "mpi");
  }
  return run && mpi;
}

void RunMpi(bool json, const std::function<MpiRequest()>& prepare) {
  // Read before MPI_Init: whether a launcher started this process (a
  // singleton's MPI_Init may set variables of its own).
  const bool launched = LauncherRank() >= 0;
  MpiSession mpi;
  // 1. Every rank reads its command line ...
  std::optional<MpiRequest> request;
  Agreed(mpi, [&]() { request.emplace(prepare()); });
  // 2. ... and every rank was given the same one.
  CheckSameOnEveryRank(mpi, RequestHash(*request));
  const int repeat = request->repeat;
  const Layout& source = request->pair.source.layout;
  const Layout& target = request->pair.target.layout;
  // 3. The ranks it needs, the memory and the plan: the same answer on every
  // rank (but for the memory limit, where ranks run on different machines).
  std::optional<PlanResult> planned;
  Agreed(mpi, [&]() {
    int64_t last = -1;
    for (const Layout* l : {&source, &target})
      if (!l->devices().empty()) last = std::max(last, *std::max_element(l->devices().begin(), l->devices().end()));
    if (last >= mpi.size()) {
      std::string msg = fmt::format("the layouts name device {}, but the communicator has {} (device d runs on rank d)",
                                    last, Plural(mpi.size(), "rank"));
      if (!launched)
        msg += fmt::format(
            "; this process was not started by an MPI launcher: run it as mpirun -np {} reshard run "
            "--backend mpi ...",
            last + 1);
      throw CliError(kExitBadInput, msg);
    }
    // Size limits before planning, from the layouts (the busiest rank's
    // buffers), and again with the plan (intermediate buffers, programs).
    const MemoryLimit limit = RunMemoryLimit(request->max_memory, mpi.size(), 1);
    CheckMemory(EstimateBeforePlanning(source, target, /*per_rank=*/true, 1), limit, /*per_rank=*/true);
    Result<PlanResult> p = PlanReshard(source, target, request->planner);
    ThrowIfError(p.status(), "", p.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
    CheckMemory(EstimateWithPlan(p->plan, /*per_rank=*/true, 1, Transport::kStaged, request->priced_chunks), limit,
                /*per_rank=*/true);
    planned.emplace(std::move(p).value());
  });
  // 4. Creating is collective and agrees on its errors itself: rank 0 prints them.
  // (Its buffers are allocated there: running out of memory ends the job.)
  std::optional<Result<MpiReshard>> made;
  MpiOptions options;
  options.priced_chunks = request->priced_chunks;
  OrAbort(mpi, [&]() { made.emplace(MpiReshard::Create(MPI_COMM_WORLD, planned->plan, options)); });
  Result<MpiReshard>& created = *made;
  try {
    ThrowIfError(created.status(), "",
                 created.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
  } catch (const CliError& e) {
    ThrowFromRankZero(mpi, e);
  }
  MpiReshard& r = *created;
  // 5. Buffers and tags: this rank's own work, agreed like the checks.
  std::optional<HostBuffer> src, dst;
  Agreed(mpi, [&]() {
    src.emplace(r.source_bytes());
    dst.emplace(r.target_bytes());
    FillTags(source, mpi.rank(), src->span(), TagSchemeFor(planned->plan));
    InjectedFailure(mpi.rank(), "fill");
  });

  // 6. The runs: a failure on one rank (a failed MPI call, memory) while the
  // others wait in a collective ends the job (MPI_Abort), printed by that rank.
  Result<MpiRunStats> stats = Status::Internal("not run");
  double best = 0, own_best = 0;
  OrAbort(mpi, [&]() {
    InjectedFailure(mpi.rank(), "execute");
    stats = r.Execute(src->span(), dst->span());  // warm-up: first touch of every buffer
    ThrowIfError(stats.status(), "executing", kExitInternal);
    for (int k = 0; k < repeat; ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      stats = r.Execute(src->span(), dst->span());
      ThrowIfError(stats.status(), "executing", kExitInternal);
      const double slowest = MaxOver(stats->seconds);
      best = k == 0 ? slowest : std::min(best, slowest);
      own_best = k == 0 ? stats->seconds : std::min(own_best, stats->seconds);
    }
  });
  TagCheck check;
  Agreed(mpi, [&]() {
    InjectedFailure(mpi.rank(), "check");
    check = CheckTags(target, mpi.rank(), dst->span(), TagSchemeFor(planned->plan));
  });
  OrAbort(mpi, [&]() { Report(mpi, r, check, *stats, best, own_best, repeat, json); });
}

}  // namespace reshard::cli
