// Planned = executed: what a backend's messages carried in each step,
// against the bytes the plan priced (docs/execution.md, "Planned and
// executed bytes").
//
// Every step is lowered through the minimal exchange between its layouts
// (device_program.h), so:
//   - an exchange step moves exactly its plan's send_bytes and recv_bytes,
//     device by device;
//   - a structured step whose shards are not padded makes every device
//     receive exactly its plan's recv_bytes; with padding it receives no
//     more (the collective's chunks count their padding, the exchange moves
//     real elements only);
//   - an all-gather or all-to-all over mesh groups sends inside its groups
//     (StepExchange): unpadded, every device sends exactly its plan's
//     send_bytes; a collective-permute of replicated shards picks its senders
//     by the exchange's rule, not the plan's pairs, so there only the sum of
//     sends is checked (equal to what was received).
#ifndef RESHARD_TESTS_TESTING_PLANNED_TRAFFIC_H_
#define RESHARD_TESTS_TESTING_PLANNED_TRAFFIC_H_

#include <string>
#include <vector>

#include "reshard/collective_plan.h"
#include "reshard/executor.h"

namespace reshard::testing {

// Checks (gtest EXPECTs) each step's traffic against the plan. `devices`:
// the indices the traffic vectors use (PlanProgram::devices()).
// `priced_chunks`: the traffic is a runner's that ran every all-gather and
// all-to-all over groups as its equal-chunk collective padded to the priced
// chunk (RankOptions::priced_chunks, no transport forced, no message above
// the limit), so those move exactly what the plan prices, padded or not,
// and every all-reduce over groups as one backend all-reduce on the ring's
// buffer (default buffer formats), which moves what the plan prices too
// (the runner runs one so only with priced chunks and no transport
// forced; callers pass false for runs with a lower message limit, whose
// all-reduces must then not run whole: none of their pairs is partial).
void ExpectPlannedTraffic(const CollectivePlan& plan, const std::vector<int64_t>& devices,
                          const std::vector<StepTraffic>& traffic, const std::string& what,
                          bool priced_chunks = false);

}  // namespace reshard::testing

#endif  // RESHARD_TESTS_TESTING_PLANNED_TRAFFIC_H_
