// The lower bound where either layout carries a pending reduction (partial
// sums): what any schedule must receive, in all devices together and into
// the busiest one. docs/cost_model.md#partial-sums proves it.
//
// Per element, in the model where a reception carries one element's worth
// of data (a value, or any combination of values a device has), and a
// device holds at most one part of the element:
//   P source parts, target not partial, R devices keep the element:
//     P = 1:  R - h, h of those devices already hold it;
//     P >= 2: P + R - 2 when one of them holds a part, else P + R - 1
//             (all-reduce: 2k - 2; reduce-scatter: k - 1);
//   target partial (Q >= 2 parts): P - m, m the distinct source parts the
//     target's holders of the element hold.
// The first two are exact (a gather to one keeper, then a broadcast, meets
// them); the partial-target one is a valid bound that plans need not meet.
// Into the busiest device: at least the largest count of target elements a
// device keeps and does not hold whole (target not partial), and at least
// the total shared over every device of either layout.
#ifndef RESHARD_SRC_PLAN_REDUCTION_BOUND_H_
#define RESHARD_SRC_PLAN_REDUCTION_BOUND_H_

#include <cstdint>
#include <span>

#include "reshard/layout.h"
#include "reshard/plan_stats.h"

namespace reshard {

// Receptions one element needs. holder_parts: for each device that keeps the
// element in the target, the source part it holds of it, or -1 for none.
int64_t ElementReceptions(int64_t source_parts, int64_t target_parts, std::span<const int64_t> holder_parts);

// REQUIRES: same shape and dtype. Work is bounded by kMaxBoundWork pairs of
// (target holder, overlapping source tile); past it only the per-device
// part of the bound is kept (still a bound, looser).
LowerBound ReductionLowerBound(const Layout& source, const Layout& target);
inline constexpr int64_t kMaxBoundWork = int64_t{1} << 26;

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_REDUCTION_BOUND_H_
