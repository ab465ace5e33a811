// An MPI program that redistributes a matrix with reshard: 4 ranks hold a
// 10 x 9 matrix of doubles block-cyclically (2 x 2 blocks on a 2 x 2 process
// grid), each rank's part in Fortran order with a leading dimension, as a
// ScaLAPACK code holds it, and want it as row blocks (row-major). Run:
//   mpirun -np 4 build/examples/example_mpi_transform
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "reshard/mpi.h"
#include "reshard/notation.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::vector<int64_t> shape = {10, 9};
  const reshard::Layout from =
      reshard::ParseLayout("blockcyclic(block=[2,2], grid=[2,2])", shape, reshard::DType::kF64, std::nullopt)->layout;
  const reshard::Layout to =
      reshard::ParseLayout("{devices=[4,1]<=[4]}", shape, reshard::DType::kF64, std::nullopt)->layout;

  // This rank's block-cyclic part: local rows x cols, column-major, leading dimension rows + 1.
  const std::vector<int64_t> local = from.LocalShape(rank);
  reshard::MpiOptions options;
  options.source_format = reshard::BufferFormat::ColumnMajor(local[0] + 1);
  reshard::Result<reshard::MpiReshard> r = reshard::MpiReshard::Create(MPI_COMM_WORLD, from, to, options);
  if (!r.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, r.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // Element (i, j) of the global matrix is 100 i + j. Local row k of this
  // rank is global row (k / 2) * 4 + (rank / 2) * 2 + k % 2 (blocks of 2 over 2 process rows).
  std::vector<double> a(static_cast<size_t>(r->source_bytes() / 8), -1.0), b(static_cast<size_t>(r->target_bytes() / 8));
  auto global = [](int64_t k, int64_t p) { return (k / 2) * 4 + p * 2 + k % 2; };
  for (int64_t i = 0; i < local[0]; ++i)
    for (int64_t j = 0; j < local[1]; ++j)
      a[static_cast<size_t>(i + j * (local[0] + 1))] = 100.0 * global(i, rank / 2) + global(j, rank % 2);
  reshard::Result<reshard::MpiRunStats> s = r->Execute(std::as_bytes(std::span(a)), std::as_writable_bytes(std::span(b)));
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // Row blocks of ceil(10 / 4) = 3 rows: rank 3 holds row 9 only.
  int wrong = 0;
  const std::vector<int64_t> out = to.LocalShape(rank);
  for (int64_t i = 0; i < out[0]; ++i)
    for (int64_t j = 0; j < out[1]; ++j)
      wrong += b[static_cast<size_t>(i * out[1] + j)] != 100.0 * (3 * rank + i) + j;
  int total = 0;
  MPI_Reduce(&wrong, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("%d ranks: 10x9 doubles, block-cyclic (Fortran order) -> row blocks: %s; rank 0 row 0: %g %g %g ...\n",
                size, total == 0 ? "exact" : "WRONG", b[0], b[1], b[2]);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
