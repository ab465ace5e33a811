// Block-cyclic redistribution against COSTA (docs/benchmarks.md, "Against
// COSTA"): the same matrices, ranks and run for a floor, ScaLAPACK's pdgemr2d
// (where linked), COSTA's transform and reshard's MpiReshard. Under mpirun;
// rank 0 prints a markdown table. Process grid p x q as square as the ranks
// allow (2 x 4 at 8 ranks, 2 x 2 at 4), row-major, so that process (r, c) is
// rank r * q + c in all three libraries. Cases, on an M x N matrix of doubles:
//   64 x 64 blocks on p x q    ->  128 x 128 blocks on q x p
//   64 x 64 blocks on p x q    ->  one block per process on q x p
//   row blocks on ranks x 1    ->  column blocks on 1 x ranks
//   512 x 512 blocks on p x q  ->  1024 x 1024 blocks on q x p
// Local buffers are ScaLAPACK's: column-major with lld = the local rows;
// reshard takes them as BufferFormat::ColumnMajor(lld), COSTA as
// block_cyclic_layout(..., lld, 'C', rank). The source holds each element's
// global column-major index; every output is compared with it element by
// element on every rank (exit status 1 on any mismatch).
//
// Timed, each run after a barrier, the slowest rank's time, in rounds: every
// round runs every tool once (the order rotates by round), after one untimed
// run of each; the table gives medians over the rounds.
//   floor          one MPI_Alltoallv of exactly the per-pair byte counts that
//                  reshard's plan sends, on buffers packed beforehand;
//   pdgemr2d       ScaLAPACK, which plans inside every call;
//   COSTA          costa::transform on layouts built once; it plans (grid
//                  cover, message lists) inside every call;
//   reshard reused MpiReshard created once, Execute each round;
//   reshard each   MpiReshard::Create + Execute (+ destruction) each round;
//                  "of which Create" and "of which Execute" are those two
//                  calls inside it (medians, slowest rank); the rest is the
//                  object's destruction.
//
//   OMP_NUM_THREADS=1 mpirun -np 8 build/bench/costa_bench [--rounds N] [--size N] [--smoke]
// --size: M = N (default 8192); --rounds: default 7; --smoke: a 1000 x 700
// matrix (blocks that do not divide it), two rounds.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <costa/grid2grid/transform.hpp>
#include <costa/layout.hpp>

#include "mpi_harness.h"
#include "reshard/device_program.h"
#include "reshard/exchange.h"
#include "reshard/mpi.h"
#include "reshard/notation.h"

#ifdef RESHARD_BENCH_WITH_SCALAPACK
// BLACS's C interface and ScaLAPACK's Fortran routine (LP64 ints).
extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int* nprow, int* npcol, int* myrow, int* mycol);
void Cblacs_gridexit(int context);
void pdgemr2d_(const int* m, const int* n, const double* a, const int* ia, const int* ja, const int* desca, double* b,
               const int* ib, const int* jb, const int* descb, const int* ictxt);
}
constexpr bool kWithScalapack = true;
#else
constexpr bool kWithScalapack = false;
#endif

namespace reshard {
namespace {

using namespace bench;  // rank, ranks, Die, Must, AllTrue, SumOverRanks, Slowest

// ScaLAPACK's numroc: how many of `n` indices, in blocks of `nb` dealt
// cyclically over `procs` from process 0, process `iproc` holds.
int Numroc(int n, int nb, int iproc, int procs) {
  const int blocks = n / nb, base = blocks / procs * nb, extra = blocks % procs;
  if (iproc < extra) return base + nb;
  if (iproc == extra) return base + n % nb;
  return base;
}

int64_t Global(int local, int block, int coord, int procs) {
  return int64_t{local / block} * procs * block + int64_t{coord} * block + local % block;
}

// An M x N matrix of doubles, block-cyclic over an nprow x npcol row-major
// process grid from process (0, 0): this rank's part, ScaLAPACK's descriptor
// and reshard's layout.
struct Matrix {
  int m = 0, n = 0, mb = 0, nb = 0, nprow = 0, npcol = 0, myrow = 0, mycol = 0;
  int local_rows = 0, local_cols = 0, lld = 1;
  int context = -1;  // BLACS grid (ScaLAPACK builds only)
  std::array<int, 9> desc = {};
  std::string text;
  Layout layout;

  size_t elements() const { return static_cast<size_t>(lld) * static_cast<size_t>(std::max(1, local_cols)); }
  double Expected(int i, int j) const {
    return static_cast<double>(Global(i, mb, myrow, nprow) + Global(j, nb, mycol, npcol) * m);
  }
};

Matrix MakeMatrix(int m, int n, int mb, int nb, int nprow, int npcol) {
  const int myrow = rank / npcol, mycol = rank % npcol;
  const int rows = Numroc(m, mb, myrow, nprow), cols = Numroc(n, nb, mycol, npcol);
  const std::string text = fmt::format("blockcyclic(block=[{},{}], grid=[{},{}])", mb, nb, nprow, npcol);
  Matrix a{.m = m, .n = n, .mb = mb, .nb = nb, .nprow = nprow, .npcol = npcol, .myrow = myrow, .mycol = mycol,
           .local_rows = rows, .local_cols = cols, .lld = std::max(1, rows), .text = text,
           .layout = Must(ParseLayout(text, {m, n}, DType::kF64, std::nullopt), text).layout};
  const std::vector<int64_t> local = a.layout.LocalShape(rank);
  if (local != std::vector<int64_t>{rows, cols})
    Die(fmt::format("{}: reshard's local shape [{}, {}], numroc's [{}, {}]", text, local[0], local[1], rows, cols));
#ifdef RESHARD_BENCH_WITH_SCALAPACK
  int grid_rows = 0, grid_cols = 0, blacs_row = 0, blacs_col = 0;
  Cblacs_get(-1, 0, &a.context);
  Cblacs_gridinit(&a.context, "Row", nprow, npcol);
  Cblacs_gridinfo(a.context, &grid_rows, &grid_cols, &blacs_row, &blacs_col);
  if (blacs_row != myrow || blacs_col != mycol)
    Die(fmt::format("BLACS puts rank {} at ({}, {}) of {} x {}", rank, blacs_row, blacs_col, nprow, npcol));
  a.desc = {1, a.context, m, n, mb, nb, 0, 0, a.lld};
#endif
  return a;
}

// A COSTA layout over `a`'s local buffer `data`.
costa::grid_layout<double> CostaLayout(const Matrix& a, double* data) {
  return costa::block_cyclic_layout<double>(a.m, a.n, a.mb, a.nb, 1, 1, a.m, a.n, a.nprow, a.npcol, 'R', 0, 0, data,
                                            a.lld, 'C', rank);
}

// Mismatches of `out` (b's local buffer) against the expected global indices,
// the first one reported.
bool Check(const Matrix& b, const std::vector<double>& out, std::string_view tool, std::string_view name) {
  for (int j = 0; j < b.local_cols; ++j)
    for (int i = 0; i < b.local_rows; ++i) {
      const double got = out[static_cast<size_t>(i) + static_cast<size_t>(j) * b.lld];
      if (got != b.Expected(i, j)) {
        fmt::print(stderr, "rank {}: {}, {}: local ({}, {}): expected {}, got {}\n", rank, name, tool, i, j,
                   b.Expected(i, j), got);
        return false;
      }
    }
  return true;
}

struct Case {
  std::string name;
  Matrix from, to;
};

enum Tool { kFloor, kPdgemr2d, kCosta, kReused, kEachCall, kTools };
constexpr const char* kToolNames[kTools] = {"floor", "pdgemr2d", "COSTA", "reshard reused", "reshard each call"};

struct Row {
  std::string name, from, to, transport;
  double median[kTools] = {};
  // Inside "each call", medians of the slowest rank: MpiReshard::Create, and the new object's Execute.
  double create = 0, first_execute = 0;
  double ratio_lo = 0, ratio_hi = 0;  // per-round COSTA / reshard reused, min and max
  bool verified = true;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

Row RunCase(const Case& c, int rounds) {
  const Matrix &a = c.from, &b = c.to;
  Row row;
  row.name = c.name;
  row.from = a.text;
  row.to = b.text;
  std::vector<double> source(a.elements(), -1);
  for (int j = 0; j < a.local_cols; ++j)
    for (int i = 0; i < a.local_rows; ++i) source[static_cast<size_t>(i) + static_cast<size_t>(j) * a.lld] = a.Expected(i, j);
  std::vector<std::vector<double>> out(kTools);  // each tool's output; the floor has none
  for (int t = kPdgemr2d; t < kTools; ++t)
    if (t != kPdgemr2d || kWithScalapack) out[t].assign(b.elements(), -1);

  MpiOptions o;
  o.source_format = BufferFormat::ColumnMajor(a.lld);
  o.target_format = BufferFormat::ColumnMajor(b.lld);
  MpiReshard reused = Must(MpiReshard::Create(MPI_COMM_WORLD, a.layout, b.layout, o), "MpiReshard::Create");
  row.transport = reused.step_transports().front();
  // reshard's buffers are exactly its layouts' (lld x local columns); ScaLAPACK's hold at least one element.
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(source.data()),
                                      static_cast<size_t>(reused.source_bytes()));
  auto target = [&](Tool t) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(out[t].data()), static_cast<size_t>(reused.target_bytes()));
  };
  MpiRunStats stats;

  // The floor: the plan's per-pair byte counts, one MPI_Alltoallv.
  AlltoallvFloor floor = MakeAlltoallvFloor(a.layout, b.layout);

  costa::grid_layout<double> costa_from = CostaLayout(a, source.data()), costa_to = CostaLayout(b, out[kCosta].data());
  [[maybe_unused]] const int one = 1;
  // This rank's MpiReshard::Create, and the new object's Execute, inside "each call", per run.
  std::vector<double> create_seconds, execute_seconds;

  const std::function<void()> run[kTools] = {
      [&] { floor.Run(); },
      [&] {
#ifdef RESHARD_BENCH_WITH_SCALAPACK
        pdgemr2d_(&a.m, &a.n, source.data(), &one, &one, a.desc.data(), out[kPdgemr2d].data(), &one, &one,
                  b.desc.data(), &a.context);
#endif
      },
      [&] { costa::transform<double>(costa_from, costa_to, MPI_COMM_WORLD); },
      [&] { stats = Must(reused.Execute(in, target(kReused)), "Execute"); },
      [&] {
        const double start = MPI_Wtime();
        MpiReshard r = Must(MpiReshard::Create(MPI_COMM_WORLD, a.layout, b.layout, o), "MpiReshard::Create");
        const double created = MPI_Wtime();
        Must(r.Execute(in, target(kEachCall)), "Execute");
        create_seconds.push_back(created - start);
        execute_seconds.push_back(MPI_Wtime() - created);
      },
  };
  std::vector<double> times[kTools];
  for (int round = -1; round < rounds; ++round)  // round -1: untimed
    for (int k = 0; k < kTools; ++k) {
      const int t = (k + std::max(round, 0)) % kTools;
      if (t == kPdgemr2d && !kWithScalapack) continue;
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      run[t]();
      const double seconds = Slowest(MPI_Wtime() - start);
      if (round >= 0) times[t].push_back(seconds);
    }
  if (SumOverRanks(floor.recv_bytes) != SumOverRanks(stats.bytes_received)) Die("the floor's byte counts are not the plan's");

  bool ok = true;
  for (int t = kPdgemr2d; t < kTools; ++t)
    if (t != kPdgemr2d || kWithScalapack) ok = Check(b, out[t], kToolNames[t], c.name) && ok;
  row.verified = AllTrue(ok);
  for (std::vector<double>* v : {&create_seconds, &execute_seconds}) {
    v->erase(v->begin());  // the untimed run's
    for (double& x : *v) x = Slowest(x);
  }
  row.create = Median(create_seconds);
  row.first_execute = Median(execute_seconds);
  for (int t = 0; t < kTools; ++t)
    if (!times[t].empty()) row.median[t] = Median(times[t]);
  row.ratio_lo = row.ratio_hi = times[kCosta][0] / times[kReused][0];
  for (int i = 0; i < rounds; ++i) {
    row.ratio_lo = std::min(row.ratio_lo, times[kCosta][i] / times[kReused][i]);
    row.ratio_hi = std::max(row.ratio_hi, times[kCosta][i] / times[kReused][i]);
  }
  return row;
}

int Main(int argc, char** argv) {
  int m = 8192, n = 8192, rounds = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--smoke") {
      m = 1000, n = 700, rounds = 2;
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--size" && i + 1 < argc) {
      m = n = std::atoi(argv[++i]);
    } else {
      Die(fmt::format("unknown argument {} (usage: costa_bench [--rounds N] [--size N] [--smoke])", arg));
    }
  }
  if (rounds < 1 || m < 1) Die("--rounds and --size take positive numbers");
  int p = 1;  // process grid p x q, as square as the ranks allow
  for (int d = 1; d * d <= ranks; ++d)
    if (ranks % d == 0) p = d;
  const int q = ranks / p;
  auto up = [](int x, int y) { return (x + y - 1) / y; };
  const Matrix blocks64 = MakeMatrix(m, n, 64, 64, p, q);
  const std::vector<Case> cases = {
      {"64^2 blocks p x q -> 128^2 blocks q x p", blocks64, MakeMatrix(m, n, 128, 128, q, p)},
      {"64^2 blocks p x q -> one block per rank q x p", blocks64, MakeMatrix(m, n, up(m, q), up(n, p), q, p)},
      {"row blocks -> column blocks", MakeMatrix(m, n, up(m, ranks), n, ranks, 1),
       MakeMatrix(m, n, m, up(n, ranks), 1, ranks)},
      {"512^2 blocks p x q -> 1024^2 blocks q x p", MakeMatrix(m, n, 512, 512, p, q),
       MakeMatrix(m, n, 1024, 1024, q, p)},
  };
  std::vector<Row> rows;
  for (const Case& c : cases) rows.push_back(RunCase(c, rounds));
#ifdef RESHARD_BENCH_WITH_SCALAPACK
  std::vector<int> contexts;  // each grid once (cases share the 64^2 source)
  for (const Case& c : cases) contexts.insert(contexts.end(), {c.from.context, c.to.context});
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  for (int context : contexts) Cblacs_gridexit(context);
#endif

  bool verified = true;
  for (const Row& r : rows) verified = verified && r.verified;
  if (rank != 0) return verified ? 0 : 1;
  fmt::print("{} x {} doubles, {} ranks (p x q = {} x {}); seconds: median of {} interleaved rounds, slowest rank{}\n\n",
             m, n, ranks, p, q, rounds, kWithScalapack ? "" : "; pdgemr2d not linked (no ScaLAPACK)");
  for (const Row& r : rows) fmt::print("- {}: `{}` -> `{}` (reshard runs {})\n", r.name, r.from, r.to, r.transport);
  fmt::print(
      "\n| case | floor s | pdgemr2d s | COSTA s | reshard reused s | reshard each call s | pdgemr2d/floor | "
      "COSTA/floor | reshard reused/floor | reshard each call/floor | COSTA / reshard reused (rounds min-max) | "
      "COSTA / reshard each call | of which Create s | of which Execute s | verified |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double* t = r.median;
    const std::string pd = kWithScalapack ? fmt::format("{:.4g}", t[kPdgemr2d]) : "-";
    const std::string pdf = kWithScalapack ? fmt::format("{:.2f}", t[kPdgemr2d] / t[kFloor]) : "-";
    fmt::print("| {} | {:.4g} | {} | {:.4g} | {:.4g} | {:.4g} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} ({:.2f}-{:.2f}) | "
               "{:.2f} | {:.3g} | {:.3g} | {} |\n",
               r.name, t[kFloor], pd, t[kCosta], t[kReused], t[kEachCall], pdf, t[kCosta] / t[kFloor],
               t[kReused] / t[kFloor], t[kEachCall] / t[kFloor], t[kCosta] / t[kReused], r.ratio_lo, r.ratio_hi,
               t[kCosta] / t[kEachCall], r.create, r.first_execute, r.verified ? "yes" : "NO");
  }
  return verified ? 0 : 1;
}

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) { return reshard::bench::RunUnderMpi(argc, argv, reshard::Main); }
