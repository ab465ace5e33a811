// reshard verify: plan, execute in the reference simulator, check exactly.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "reshard/exchange.h"
#include "reshard/plan_stats.h"
#include "reshard/simulator.h"

namespace reshard::cli {
namespace {

void RunVerify(const PairOptions& o) {
  LayoutPair pair = LoadPair(o);
  Result<Exchange> ex = Exchange::Create(pair.source.layout, pair.target.layout);
  ThrowIfError(ex.status(), "");
  const PlanStats stats = ComputeStats(*ex);
  const LowerBound lb = ComputeLowerBound(pair.source.layout, pair.target.layout);
  const SimulationReport r = Simulate(ex->Plan(), stats);
  if (r.too_large) throw CliError(kExitUnmet, r.first_problem);
  const bool minimal = lb.max_recv_bytes == stats.max_recv_bytes && lb.total_bytes == stats.total_bytes;
  const bool ok = r.ok() && minimal;
  if (o.common.json) {
    std::cout << nlohmann::ordered_json{{"ok", ok},
                                {"devices", r.devices},
                                {"elements_checked", r.elements_checked},
                                {"mismatches", r.mismatches},
                                {"peak_bytes", r.peak_bytes},
                                {"claimed_peak_bytes", stats.peak_bytes},
                                {"minimal", minimal},
                                {"problem", r.first_problem}}
                     .dump()
              << "\n";
  } else if (ok) {
    std::cout << fmt::format(
        "verified: {} elements on {} devices arrived exactly (unique tags, each written once); peak {} B within the plan's "
        "{} B; traffic equals the lower bound ({} B total, {} B max per device)\n",
        r.elements_checked, r.devices, r.peak_bytes, stats.peak_bytes, stats.total_bytes, stats.max_recv_bytes);
  } else {
    std::cout << fmt::format("FAILED: {} mismatches in {} elements; {}{}\n", r.mismatches, r.elements_checked, r.first_problem,
                             minimal ? "" : "; traffic exceeds the lower bound");
  }
  if (!ok) ExitCode() = kExitUnmet;
}

}  // namespace

void RegisterVerify(CLI::App& app) {
  auto o = std::make_shared<PairOptions>();
  CLI::App* cmd = app.add_subcommand("verify", "plan, run in the reference simulator and check every element");
  AddPairOptions(cmd, *o);
  cmd->callback([o]() { RunVerify(*o); });
}

}  // namespace reshard::cli
