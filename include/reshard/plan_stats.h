// PlanStats: what an exchange costs, and what it is measured against.
//
// Byte counts are of the array's element type. Per device:
//   send_bytes / recv_bytes  moved to / from other devices (local copies excluded)
//   peak_bytes               source buffer + target buffer + send staging +
//                            receive staging, all live during the exchange
// Plan: maxima and sums of those; total_bytes is the sum of recv_bytes;
// collectives counts steps that communicate (0 or 1 for the exchange).
//
// LowerBound: each device must receive what its target buffer holds minus
// what its source buffer already holds of it; computed from the layouts
// alone, independently of any plan. Where either layout carries a pending
// reduction, the bound counts the receptions combining partial values needs
// (src/plan/reduction_bound.h; proof in docs/cost_model.md).
// FullRematerialization: what XLA does when it gives up: all-gather the
// whole array onto every target device, then slice. Each target device
// receives the array minus its own source shard; its peak is the gathered
// array (in-place all-gather, the slice taken as a view; a lower estimate).
// From partial sums, XLA all-reduces the whole array: each target device
// receives 2(k-1)/k of it (a ring over k parts) and holds it twice.
#ifndef RESHARD_PLAN_STATS_H_
#define RESHARD_PLAN_STATS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "reshard/exchange.h"
#include "reshard/layout.h"

namespace reshard {

struct DeviceStats {
  int64_t device = 0;
  int64_t source_bytes = 0, target_bytes = 0;
  int64_t send_bytes = 0, recv_bytes = 0, local_bytes = 0;
  int64_t sends = 0, recvs = 0;  // messages
  int64_t staged_bytes = 0;      // its distinct boxes sent, each staged once (StagedBoxes)
  int64_t peak_bytes = 0;        // source + target + staged + received
};

struct PlanStats {
  int64_t devices = 0;
  int64_t collectives = 0;
  int64_t messages = 0;
  int64_t max_send_bytes = 0, max_recv_bytes = 0, total_bytes = 0, local_bytes = 0, peak_bytes = 0;
  std::vector<DeviceStats> per_device;  // ascending device id
};

struct LowerBound {
  int64_t max_recv_bytes = 0, total_bytes = 0;
};

struct Baseline {
  int64_t max_recv_bytes = 0, total_bytes = 0, peak_bytes = 0;
};

// Streams over the whole plan; never stores it. `also`, when given, sees
// every transfer of the same pass (so callers need not plan twice).
PlanStats ComputeStats(const Exchange& exchange, const std::function<void(const Transfer&)>& also = nullptr);
// Stats of a materialized plan (a whole plan, or one device's part: then only
// that device's entry is complete). Lists every device of both layouts.
PlanStats ComputeStats(const ExchangePlan& plan);
LowerBound ComputeLowerBound(const Layout& source, const Layout& target);
Baseline FullRematerialization(const Layout& source, const Layout& target);

}  // namespace reshard

#endif  // RESHARD_PLAN_STATS_H_
