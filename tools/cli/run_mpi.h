// reshard run --backend mpi: the run subcommand's MPI path, built where
// reshard has its MPI backend (RESHARD_HAVE_MPI).
#ifndef RESHARD_TOOLS_CLI_RUN_MPI_H_
#define RESHARD_TOOLS_CLI_RUN_MPI_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common.h"

namespace reshard::cli {

// What a rank reads off its command line.
struct MpiRequest {
  LayoutPair pair;
  PlannerOptions planner;
  int64_t max_memory = 0;  // bytes one rank's buffers may need; 0: 70% of physical memory over the ranks
  bool priced_chunks = false;  // RankOptions::priced_chunks
  int repeat = 5;              // timed runs after the warm-up
};

// Runs a reshard over MPI_COMM_WORLD (MPI initialized and finalized here):
// every rank calls `prepare`, checks the request (the ranks it needs, its
// memory, that every rank was given the same one) and plans it, then fills its
// source part with tags, runs one warm-up and the request's `repeat` timed runs, and checks
// its target part exactly. Rank 0 prints the report (per rank and in total, or
// the JSON object).
//
// Errors: until the run starts, an error on any rank is thrown on every rank
// alike (CliError::print only on rank 0): the message of the lowest failing
// rank, prefixed "rank K: " unless every rank failed with that message; so
// are errors allocating and filling the buffers and checking the result. A
// failure where the other ranks would wait in a collective (creating, the
// runs, the report) is printed by the rank that met it, prefixed with its
// rank, and ends the job with MPI_Abort.
void RunMpi(bool json, const std::function<MpiRequest()>& prepare);

// A rank whose command line did not parse, where it names `run --backend
// mpi` under a launcher: it joins the other ranks' first agreement (RunMpi's
// reading of the command line) failing with `message`, so every rank throws
// the same error, printed by rank 0 ("rank K: " before it unless every rank
// failed alike), instead of this rank leaving alone and unheard.
[[noreturn]] void FailWithTheRanks(int exit_code, const std::string& message);

// Whether a command line names `run` with `--backend mpi`: the ranks it
// starts meet in RunMpi's agreements, even where it does not parse.
bool NamesMpiRun(int argc, char** argv);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_RUN_MPI_H_
