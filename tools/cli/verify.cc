// reshard verify: plan as `plan` does, execute the plan step by step in the
// reference simulator, check every element exactly.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "reshard/planner.h"
#include "exec/simulator.h"

namespace reshard::cli {
namespace {

void RunVerify(const PairOptions& o) {
  LayoutPair pair = LoadPair(o);
  // Size first, from the layouts alone (linear in the devices): the simulator
  // holds at least three buffers of the largest shard on every device, so a
  // case over its limit is refused before anything is planned.
  const Layout& src = pair.source.layout;
  const Layout& dst = pair.target.layout;
  std::vector<int64_t> devices = src.devices();
  devices.insert(devices.end(), dst.devices().begin(), dst.devices().end());
  std::sort(devices.begin(), devices.end());
  const int64_t n = std::unique(devices.begin(), devices.end()) - devices.begin();
  const int64_t largest = std::max(MaxLocalBytes(src), MaxLocalBytes(dst)) / src.element_bytes();
  if (largest > kMaxSimulatedElements / 3 / std::max<int64_t>(1, n))
    throw CliError(kExitUnmet, fmt::format("too large to simulate: {} devices with shards of up to {} elements need "
                                           "more than {} elements in all buffers",
                                           n, largest, kMaxSimulatedElements));
  const PlannerOptions options = MakePlannerOptions(o, pair, /*emitting=*/false);
  Result<PlanResult> planned = PlanReshard(pair.source.layout, pair.target.layout, options);
  if (!planned.ok())
    ThrowIfError(planned.status(), "", planned.status().code() == Status::Code::kNotSupported ? kExitUnmet : kExitBadInput);
  const CollectivePlan& plan = planned->plan;
  const PlanTotals& t = plan.totals();
  const LowerBound& lb = planned->lower_bound;
  const SimulationReport r = SimulatePlan(plan);
  if (r.too_large) throw CliError(kExitUnmet, r.first_problem);
  const bool minimal = lb.max_recv_bytes == t.max_recv_bytes && lb.total_bytes == t.total_bytes;
  // The one-step exchange between plain layouts promises the lower bound;
  // other plans may send padding, and the reducing exchange (from or into
  // partial sums) every part its keepers lack, or parts routed into a target
  // part whose bound is not tight (docs/cost_model.md, "Partial targets").
  const bool bound_promised = options.strategy == Strategy::kExchange && !src.partial() && !dst.partial();
  std::string problem = r.first_problem;
  if (bound_promised && !minimal)
    problem += fmt::format("{}the exchange's traffic exceeds the lower bound: {} B max into a device and {} B in all, "
                           "against {} B and {} B",
                           problem.empty() ? "" : "; ", t.max_recv_bytes, t.total_bytes, lb.max_recv_bytes,
                           lb.total_bytes);
  const bool ok = r.ok() && problem.empty();
  const std::vector<std::string> ops = plan.OpNames();
  if (o.common.json) {
    std::cout << nlohmann::ordered_json{{"ok", ok},
                                        {"devices", r.devices},
                                        {"steps", ops},
                                        {"elements_checked", r.elements_checked},
                                        {"mismatches", r.mismatches},
                                        {"peak_bytes", r.peak_bytes},
                                        {"claimed_peak_bytes", t.peak_bytes},
                                        {"max_recv_bytes", t.max_recv_bytes},
                                        {"lower_bound_max_recv_bytes", lb.max_recv_bytes},
                                        {"minimal", minimal},
                                        {"problem", problem}}
                     .dump()
              << "\n";
  } else if (ok) {
    std::cout << fmt::format(
        "verified: {} elements on {} devices arrived exactly after {} ({}); peak {} B within the plan's {} B; "
        "{} B max into a device, {}\n",
        r.elements_checked, r.devices, Plural(static_cast<int64_t>(ops.size()), "step"),
        ops.empty() ? std::string("nothing to move") : fmt::format("{}", fmt::join(ops, ", ")), r.peak_bytes,
        t.peak_bytes, t.max_recv_bytes,
        minimal ? std::string("the lower bound") : fmt::format("the lower bound is {} B", lb.max_recv_bytes));
  } else {
    std::cout << fmt::format("FAILED: {} mismatches in {} elements; {}\n", r.mismatches, r.elements_checked, problem);
  }
  if (!ok) ExitCode() = kExitUnmet;
}

}  // namespace

void RegisterVerify(CLI::App& app) {
  auto o = std::make_shared<PairOptions>();
  CLI::App* cmd = app.add_subcommand("verify", "plan as plan does, run the plan step by step in the reference simulator and check every element");
  AddPairOptions(cmd, *o);
  cmd->callback([o]() { RunVerify(*o); });
}

}  // namespace reshard::cli
