// reshard: inspect, convert and plan reshards of distributed arrays.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <new>
#include <string>

#include "common.h"
#ifdef RESHARD_HAVE_MPI
#include "run_mpi.h"
#endif

int main(int argc, char** argv) {
  CLI::App app{"reshard: move a distributed array between shardings with the least data movement"};
  app.require_subcommand(1);
  reshard::cli::RegisterShow(app);
  reshard::cli::RegisterConvert(app);
  reshard::cli::RegisterPlan(app);
  reshard::cli::RegisterVerify(app);
  reshard::cli::RegisterRun(app);
  reshard::cli::RegisterAudit(app);
  reshard::cli::RefuseEmptyValues(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string message = reshard::cli::ShortenMessage(e.what());
    const int rank = reshard::cli::LauncherRank();
#ifdef RESHARD_HAVE_MPI
    // Under mpirun the other ranks of `run --backend mpi` wait in their first
    // agreement: this rank's error joins it, and every rank ends with it.
    if (rank >= 0 && reshard::cli::NamesMpiRun(argc, argv)) {
      try {
        reshard::cli::FailWithTheRanks(reshard::cli::kExitBadInput, message);
      } catch (const reshard::cli::CliError& agreed) {
        if (agreed.print) reshard::cli::PrintError("reshard: error: ", reshard::cli::ShortenMessage(agreed.what()));
        return agreed.exit_code;
      }
    }
#endif
    // Elsewhere no rank can hear another, and every rank parses the same
    // command line: rank 0 (or a lone process) speaks for all.
    if (rank <= 0) reshard::cli::PrintError("reshard: error: ", message);
    return reshard::cli::kExitBadInput;
  } catch (const reshard::cli::CliError& e) {
    if (e.print) reshard::cli::PrintError("reshard: error: ", reshard::cli::ShortenMessage(e.what()));
    return e.exit_code;
  } catch (const std::bad_alloc&) {
    reshard::cli::PrintError("reshard: error: ", reshard::cli::kOutOfMemory);
    return reshard::cli::kExitUnmet;
  } catch (const std::exception& e) {
    reshard::cli::PrintError("reshard: internal error: ", reshard::cli::ShortenMessage(e.what()));
    return reshard::cli::kExitInternal;
  }
  return reshard::cli::ExitCode();
}
