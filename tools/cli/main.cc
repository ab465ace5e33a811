// reshard: inspect, convert and plan reshards of distributed arrays.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <new>

#include "common.h"

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
    // Under mpirun every rank parses the same command line: rank 0 speaks for all.
    if (reshard::cli::LauncherRank() <= 0)
      reshard::cli::PrintError("reshard: error: ", reshard::cli::ShortenMessage(e.what()));
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
