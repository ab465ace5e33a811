// reshard run --backend mpi: the run subcommand's MPI path, built where
// reshard has its MPI backend (RESHARD_HAVE_MPI).
#ifndef RESHARD_TOOLS_CLI_RUN_MPI_H_
#define RESHARD_TOOLS_CLI_RUN_MPI_H_

#include <cstdint>

#include "common.h"

namespace reshard::cli {

// Runs `pair` over MPI_COMM_WORLD (MPI initialized and finalized here): every
// rank plans alike, fills its source part with tags, runs one warm-up and
// `repeat` timed runs, and checks its target part exactly. Rank 0 prints the
// report (per rank and in total, or the JSON object). `max_memory` bounds
// the bytes one rank's buffers need (0: 70% of physical memory over the ranks).
// Throws CliError on every rank alike.
void RunMpi(const PairOptions& options, const LayoutPair& pair, int repeat, int64_t max_memory);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_RUN_MPI_H_
