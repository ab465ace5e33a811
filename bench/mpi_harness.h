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
#include <vector>

#include "reshard/device_program.h"
#include "reshard/exchange.h"
#include "reshard/layout.h"
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

// The floor of a reshard: one raw MPI_Alltoallv of the byte counts this
// rank's part of the minimal exchange sends and receives, on buffers already
// packed (at least one byte each, so their data pointers are never null).
struct AlltoallvFloor {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<std::byte> send, recv;
  int64_t recv_bytes = 0;  // this rank's

  void Run() {
    MPI_Alltoallv(send.data(), send_counts.data(), send_displs.data(), MPI_BYTE, recv.data(), recv_counts.data(),
                  recv_displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  }
};

inline AlltoallvFloor MakeAlltoallvFloor(const Layout& source, const Layout& target) {
  CompileOptions co;
  co.only_device = rank;
  const PlanProgram program = Must(PlanProgram::Compile(Must(Exchange::Create(source, target), "Exchange"), co), "Compile");
  const int64_t me = program.IndexOf(rank);
  const DeviceProgram p = me >= 0 ? program.steps()[0].devices[static_cast<size_t>(me)] : DeviceProgram{};
  AlltoallvFloor f;
  for (std::vector<int>* v : {&f.send_counts, &f.send_displs, &f.recv_counts, &f.recv_displs}) v->assign(ranks, 0);
  for (size_t m = 0; m < p.send_peer.size(); ++m)
    f.send_counts[program.devices()[p.send_peer[m]]] = static_cast<int>(p.send_count[m]);
  for (size_t m = 0; m < p.recv_peer.size(); ++m)
    f.recv_counts[program.devices()[p.recv_peer[m]]] = static_cast<int>(p.recv_count[m]);
  for (int k = 1; k < ranks; ++k) {
    f.send_displs[k] = f.send_displs[k - 1] + f.send_counts[k - 1];
    f.recv_displs[k] = f.recv_displs[k - 1] + f.recv_counts[k - 1];
  }
  // Every message packed apart (the floor does not share the staging of a box sent twice).
  const int64_t sent = ranks > 0 ? int64_t{f.send_displs[ranks - 1]} + f.send_counts[ranks - 1] : 0;
  f.send.assign(static_cast<size_t>(std::max<int64_t>(1, sent)), std::byte{1});
  f.recv.resize(static_cast<size_t>(std::max<int64_t>(1, p.recv_bytes)));
  f.recv_bytes = p.recv_bytes;
  return f;
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
