// Block-cyclic redistribution: reshard's MpiReshard against ScaLAPACK's
// pdgemr2d on the same matrices, the same ranks, in the same run
// (docs/benchmarks.md, "Block-cyclic against ScaLAPACK pdgemr2d"). Under
// mpirun; rank 0 prints a markdown table. Process grid p x q as square as the
// ranks allow (2 x 4 at 8 ranks), BLACS row-major ordering, so that process
// (r, c) is rank r * q + c, as in reshard's block-cyclic device order. Cases,
// on an M x N matrix of doubles:
//   64 x 64 blocks on p x q  ->  128 x 128 blocks on q x p
//   64 x 64 blocks on p x q  ->  one block per process on p x q
// Local buffers are ScaLAPACK's: column-major with lld = numroc of the local
// rows; reshard takes them as BufferFormat::ColumnMajor(lld). The source holds
// each element's global column-major index; both results are compared with
// it, element by element on every rank (exit status 1 on any mismatch).
// Seconds: best of N runs, each after a barrier, the slowest rank.
//
//   mpirun -np 8 build/bench/scalapack_bench [--smoke]
// --smoke: a 1000 x 700 matrix (blocks that do not divide it), two runs.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpi_harness.h"
#include "reshard/mpi.h"
#include "reshard/notation.h"

// BLACS's C interface and ScaLAPACK's Fortran routines (LP64 ints).
extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int* nprow, int* npcol, int* myrow, int* mycol);
void Cblacs_gridexit(int context);
int numroc_(const int* n, const int* nb, const int* iproc, const int* isrcproc, const int* nprocs);
void pdgemr2d_(const int* m, const int* n, const double* a, const int* ia, const int* ja, const int* desca, double* b,
               const int* ib, const int* jb, const int* descb, const int* ictxt);
}

namespace reshard {
namespace {

using namespace bench;  // rank, ranks, Die, Must, AllTrue, SumOverRanks, Slowest, BestOf

// A BLACS process grid, row-major.
struct Grid {
  int context = 0, nprow = 0, npcol = 0, myrow = 0, mycol = 0;
};

Grid MakeGrid(int nprow, int npcol) {
  Grid g;
  Cblacs_get(-1, 0, &g.context);
  Cblacs_gridinit(&g.context, "Row", nprow, npcol);
  Cblacs_gridinfo(g.context, &g.nprow, &g.npcol, &g.myrow, &g.mycol);
  if (g.myrow * g.npcol + g.mycol != rank)
    Die(fmt::format("BLACS puts rank {} at ({}, {}) of {} x {}", rank, g.myrow, g.mycol, nprow, npcol));
  return g;
}

// An M x N matrix of doubles, block-cyclic over `grid` from process (0, 0):
// ScaLAPACK's descriptor, this rank's local extent, and reshard's layout of it.
struct Matrix {
  int m = 0, n = 0, mb = 0, nb = 0;
  Grid grid;
  int local_rows = 0, local_cols = 0, lld = 1;
  std::array<int, 9> desc = {};
  std::string text;
  Layout layout;
};

Matrix MakeMatrix(int m, int n, int mb, int nb, const Grid& grid) {
  const int zero = 0;
  const int rows = numroc_(&m, &mb, &grid.myrow, &zero, &grid.nprow);
  const int cols = numroc_(&n, &nb, &grid.mycol, &zero, &grid.npcol);
  const int lld = std::max(1, rows);
  const std::string text = fmt::format("blockcyclic(block=[{},{}], grid=[{},{}])", mb, nb, grid.nprow, grid.npcol);
  Layout layout = Must(ParseLayout(text, {m, n}, DType::kF64, std::nullopt), text).layout;
  const std::vector<int64_t> local = layout.LocalShape(rank);
  if (local != std::vector<int64_t>{rows, cols})
    Die(fmt::format("{}: reshard's local shape [{}, {}], numroc's [{}, {}]", text, local[0], local[1], rows, cols));
  return {m, n, mb, nb, grid, rows, cols, lld, {1, grid.context, m, n, mb, nb, 0, 0, lld}, text, std::move(layout)};
}

int64_t Global(int local, int block, int coord, int procs) {
  return int64_t{local / block} * procs * block + int64_t{coord} * block + local % block;
}

// Each element's global column-major index, in `a`'s local buffer.
std::vector<double> IndexValues(const Matrix& a) {
  std::vector<double> v(static_cast<size_t>(a.lld) * static_cast<size_t>(std::max(1, a.local_cols)), -1);
  for (int j = 0; j < a.local_cols; ++j)
    for (int i = 0; i < a.local_rows; ++i)
      v[static_cast<size_t>(i) + static_cast<size_t>(j) * a.lld] = static_cast<double>(
          Global(i, a.mb, a.grid.myrow, a.grid.nprow) + Global(j, a.nb, a.grid.mycol, a.grid.npcol) * a.m);
  return v;
}

// `m`'s local buffer `v` (column-major, m.lld) as a tight row-major one.
std::vector<double> RowMajor(const Matrix& m, const std::vector<double>& v) {
  std::vector<double> r(static_cast<size_t>(m.local_rows) * static_cast<size_t>(m.local_cols));
  for (int i = 0; i < m.local_rows; ++i)
    for (int j = 0; j < m.local_cols; ++j)
      r[static_cast<size_t>(i) * m.local_cols + j] = v[static_cast<size_t>(i) + static_cast<size_t>(j) * m.lld];
  return r;
}

struct Row {
  std::string from, to;
  double pdgemr2d = 0, plan = 0;
  double ours[4] = {};  // auto, alltoallv, p2p; auto on row-major buffers
  std::string auto_transport;
  bool verified = true;
};

Row RunCase(const Matrix& a, const Matrix& b, int repeats) {
  Row row;
  row.from = a.text;
  row.to = b.text;
  const std::vector<double> source = IndexValues(a), expected = IndexValues(b);
  std::vector<double> theirs(expected.size()), ours(expected.size());
  const int one = 1;
  row.pdgemr2d = BestOf(repeats, [&] {
    pdgemr2d_(&a.m, &a.n, source.data(), &one, &one, a.desc.data(), theirs.data(), &one, &one, b.desc.data(),
              &a.grid.context);
  });

  // The same move on tight row-major buffers of the same values (reshard's
  // own format, not ScaLAPACK's): what the column-major buffers cost.
  const std::vector<double> source_rm = RowMajor(a, source), expected_rm = RowMajor(b, expected);
  std::vector<double> ours_rm(expected_rm.size());
  bool ok = true;
  const MpiTransport transports[4] = {MpiTransport::kAuto, MpiTransport::kAlltoallv, MpiTransport::kPointToPoint,
                                      MpiTransport::kAuto};
  for (int t = 0; t < 4; ++t) {
    const bool row_major = t == 3;
    MpiOptions o;
    o.transport = transports[t];
    if (!row_major) {
      o.source_format = BufferFormat::ColumnMajor(a.lld);
      o.target_format = BufferFormat::ColumnMajor(b.lld);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MpiReshard r = Must(MpiReshard::Create(MPI_COMM_WORLD, a.layout, b.layout, o), "MpiReshard::Create");
    const double plan = Slowest(MPI_Wtime() - start);
    if (t == 0) {
      row.plan = plan;
      row.auto_transport = r.step_transports().front();
    }
    // reshard's buffers are exactly its layouts' (lld x local columns); ScaLAPACK's hold at least one element.
    const std::vector<double>& in = row_major ? source_rm : source;
    std::vector<double>& out = row_major ? ours_rm : ours;
    std::fill(out.begin(), out.end(), -1);
    const std::span<const std::byte> in_bytes(reinterpret_cast<const std::byte*>(in.data()),
                                              static_cast<size_t>(r.source_bytes()));
    const std::span<std::byte> out_bytes(reinterpret_cast<std::byte*>(out.data()),
                                         static_cast<size_t>(r.target_bytes()));
    row.ours[t] = BestOf(repeats, [&] { Must(r.Execute(in_bytes, out_bytes), "Execute"); });
    for (int j = 0; j < b.local_cols && ok; ++j)
      for (int i = 0; i < b.local_rows && ok; ++i) {
        const size_t k = static_cast<size_t>(i) + static_cast<size_t>(j) * b.lld;
        const double mine = row_major ? ours_rm[static_cast<size_t>(i) * b.local_cols + j] : ours[k];
        if (theirs[k] != expected[k] || mine != expected[k]) {
          fmt::print(stderr, "rank {}: {} -> {} [{}{}]: local ({}, {}): expected {}, pdgemr2d {}, reshard {}\n", rank,
                     a.text, b.text, MpiTransportName(transports[t]), row_major ? ", row-major" : "", i, j, expected[k],
                     theirs[k], mine);
          ok = false;
        }
      }
  }
  row.verified = AllTrue(ok);
  return row;
}

int Main(int argc, char** argv) {
  int m = 8192, n = 8192, repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--smoke") {
      m = 1000, n = 700, repeats = 2;
    } else {
      Die(fmt::format("unknown argument {} (usage: scalapack_bench [--smoke])", argv[i]));
    }
  }
  int p = 1;  // process grid p x q, as square as the ranks allow
  for (int d = 1; d * d <= ranks; ++d)
    if (ranks % d == 0) p = d;
  const int q = ranks / p;
  const Grid pq = MakeGrid(p, q), qp = MakeGrid(q, p);
  const Matrix source = MakeMatrix(m, n, 64, 64, pq);
  std::vector<Row> rows = {RunCase(source, MakeMatrix(m, n, 128, 128, qp), repeats),
                           RunCase(source, MakeMatrix(m, n, (m + p - 1) / p, (n + q - 1) / q, pq), repeats)};
  Cblacs_gridexit(pq.context);
  Cblacs_gridexit(qp.context);

  bool verified = true;
  if (rank == 0)
    fmt::print(
        "{} x {} doubles, {} ranks; seconds: best of {} runs, slowest rank\n\n"
        "| from | to | pdgemr2d s | reshard (auto) s | alltoallv s | p2p s | auto, row-major buffers s | "
        "reshard plan s | pdgemr2d / reshard | verified |\n|---|---|---|---|---|---|---|---|---|---|\n",
        m, n, ranks, repeats);
  for (const Row& r : rows) {
    verified = verified && r.verified;
    if (rank == 0)
      fmt::print("| `{}` | `{}` | {:.4g} | {:.4g} ({}) | {:.4g} | {:.4g} | {:.4g} | {:.4g} | {:.2f} | {} |\n", r.from,
                 r.to, r.pdgemr2d, r.ours[0], r.auto_transport, r.ours[1], r.ours[2], r.ours[3], r.plan,
                 r.pdgemr2d / r.ours[0], r.verified ? "yes" : "NO");
  }
  return verified ? 0 : 1;
}

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) { return reshard::bench::RunUnderMpi(argc, argv, reshard::Main); }
