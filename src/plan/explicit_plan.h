// Plans between explicit layouts: those no plan mesh names both (other
// device sets, tile lists that are not a mesh's, block-cyclic layouts), so
// the search over named states (named_planner.h) does not apply.
//
// Two plans are priced: one collective-permute over explicit device pairs
// where both layouts cut the array alike and only the devices holding each
// tile differ (not under the exchange strategy), and the ragged exchange
// where the target has one (not under the collectives strategy). The cheaper
// that fits the memory cap is the plan; under the default cap, which is
// soft, the cheaper of the two where neither fits. The baseline is XLA's
// full rematerialization, priced per message.
//
// A pure function: safe to call from any thread.
#ifndef RESHARD_SRC_PLAN_EXPLICIT_PLAN_H_
#define RESHARD_SRC_PLAN_EXPLICIT_PLAN_H_

#include <cstdint>
#include <vector>

#include "reshard/layout.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

// `result` with the plan from `source` to `target`, its baseline and the
// candidates priced. `cap` is the memory cap in force (the default one where
// options.memory_cap_bytes is 0).
// REQUIRES: Exchange::Validate(source, target) is OK; `result` holds the
// lower bound and memory_cap_bytes == cap; the strategy's target is possible
// (PlanReshard rejects the exchange strategy without a ragged exchange).
// Fails where no plan moves the data (NotSupported) or none fits an explicit
// cap (InvalidArgument).
// The largest local shape over the tiles `l` holds (replicas hold the same
// tile): the padded shard an exchange step of explicit layouts states.
std::vector<int64_t> LargestTile(const Layout& l);

Result<PlanResult> PlanExplicit(const Layout& source, const Layout& target, const PlannerOptions& options, int64_t cap,
                                PlanResult result);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_EXPLICIT_PLAN_H_
