// The reference simulator: executes an exchange plan on virtual devices with
// real data and checks the result bit for bit.
//
// Every element carries a unique 64-bit tag (its global row-major index + 1),
// whatever the element type, so a misplaced, missing or duplicated element
// cannot go unnoticed. Memory is accounted in the element type's bytes:
// source and target buffers are live throughout; each sender packs all its
// outgoing transfers into staging, each receiver takes them into staging, then
// unpacks; local copies go straight from source to target buffer.
// Stateless; thread-safe. An oracle for tests and `reshard verify`, not
// part of the installed API (src/, not include/reshard/).
#ifndef RESHARD_SRC_EXEC_SIMULATOR_H_
#define RESHARD_SRC_EXEC_SIMULATOR_H_

#include <cstdint>
#include <string>

#include "reshard/collective_plan.h"
#include "reshard/exchange.h"
#include "reshard/plan_stats.h"

namespace reshard {

// The most elements (source plus target buffers over all devices) Simulate
// will hold: 2^27, about 2 GiB of tags with their staging.
inline constexpr int64_t kMaxSimulatedElements = int64_t{1} << 27;

struct SimulationReport {
  bool too_large = false;         // refused: more than kMaxSimulatedElements
  int64_t devices = 0;
  int64_t elements_checked = 0;   // target elements compared (at the end of a collective plan)
  int64_t mismatches = 0;         // wrong value, never written, or written twice
  int64_t peak_bytes = 0;         // most bytes any device held at once
  int64_t peak_excess_devices = 0;  // devices that held more than the stats claim
  std::string first_problem;      // empty when exact and within the peak
  bool ok() const { return !too_large && mismatches == 0 && peak_excess_devices == 0; }
};

// REQUIRES: `plan` is a whole plan (every transfer of the exchange);
// `claimed` its stats (peak per device checked against them). Plans over more
// than kMaxSimulatedElements are refused (too_large) before allocating.
SimulationReport Simulate(const ExchangePlan& plan, const PlanStats& claimed);

// Runs a collective plan step by step: every op of every step's program on
// every device, grouped collectives by the plan mesh's groups, the ragged
// exchange by its transfers. After each step every device's buffer is
// compared with the step's output layout (padding positions excepted), and
// what a device held during the step with the step's stated peak_bytes.
// Refuses (too_large) plans whose buffers exceed kMaxSimulatedElements.
SimulationReport SimulatePlan(const CollectivePlan& plan);

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_SIMULATOR_H_
