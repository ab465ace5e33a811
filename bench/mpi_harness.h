// What the MPI benchmarks share: fail-fast helpers (a failed call aborts the
// whole job, naming the rank), reductions over MPI_COMM_WORLD, and the timing
// rule (best of N runs of the slowest rank, each after a barrier).
#ifndef RESHARD_BENCH_MPI_HARNESS_H_
#define RESHARD_BENCH_MPI_HARNESS_H_

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "reshard/status.h"

namespace reshard::bench {

inline int rank = 0, ranks = 1;  // this process's rank and the world's size, set by main

[[noreturn]] inline void Die(const std::string& what) {
  fmt::print(stderr, "rank {}: {}\n", rank, what);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

template <class T>
T Must(Result<T> r, std::string_view what) {
  if (!r.ok()) Die(fmt::format("{}: {}", what, r.status().ToString()));
  return std::move(r).value();
}

inline bool AllTrue(bool mine) {
  int in = mine ? 1 : 0, all = 0;
  MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

inline int64_t SumOverRanks(int64_t mine) {
  int64_t all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

inline double Slowest(double mine) {
  double all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

// Best over `repeats` runs of the slowest rank's time; a barrier before each
// run, so every rank starts together and the slowest one is the step's time.
// One run first, untimed: it pays the page faults of fresh buffers and MPI's
// connection setup.
template <class F>
double BestOf(int repeats, F&& run) {
  run();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeats; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    run();
    best = std::min(best, Slowest(MPI_Wtime() - start));
  }
  return best;
}

// A benchmark's main: MPI initialized around `run`, rank and ranks set.
inline int RunUnderMpi(int argc, char** argv, int (*run)(int, char**)) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int rc = run(argc, argv);
  MPI_Finalize();
  return rc;
}

}  // namespace reshard::bench

#endif  // RESHARD_BENCH_MPI_HARNESS_H_
