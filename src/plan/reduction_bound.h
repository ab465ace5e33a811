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
//   target partial (Q >= 2 parts): the larger of P - m, m the distinct
//     source parts the target's holders of the element hold, and, since
//     the keepers of one target part end with one value (made of a set of
//     source parts, the sets covering every part) and a keeper receives
//     nothing only where its part's set is empty or the one part it holds:
//     the smaller of the smallest count of keepers of a target part (some
//     set of two parts or more) and, where P <= Q (every set of one part
//     at most, on distinct target parts), the P smallest counts of a target
//     part's keepers that do not hold its commonest source part. Where the
//     ops cannot split the reduction among target parts (P >= 2, ops that
//     differ and are not both sum or avg: max(a, b) is no sum f(a) + g(b)), one target
//     part forms it whole: the fewest over target parts of the count above
//     for its keepers; so too for an avg of integers (ReductionSplits).
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
// element in the target, the source part it holds of it, or -1 for none;
// keeper_parts, parallel (REQUIRES: the same size where target_parts >= 2,
// read only then): the target part it keeps it in; parts_split:
// ReductionSplits of the two layouts.
int64_t ElementReceptions(int64_t source_parts, int64_t target_parts, std::span<const int64_t> holder_parts,
                          std::span<const int64_t> keeper_parts, bool parts_split);

// Whether the target's op can spread a reduction of source_parts parts over
// its target_parts parts, each target part taking a subset: one part, the
// same op, or sum and avg (linear) on both sides; but an avg of integers,
// whose division truncates, only into an avg whose part count is a
// multiple of its own (each target part holding its subset's sum times the
// ratio of the counts): trunc((a + b) / 2) is no f(a) + g(b).
bool ReductionSplits(int64_t source_parts, ReduceOp source_op, int64_t target_parts, ReduceOp target_op,
                     DType dtype);

// REQUIRES: same shape and dtype. Work is bounded by kMaxBoundWork pairs of
// (target holder, overlapping source tile); past it only the per-device
// part of the bound is kept (still a bound, looser).
LowerBound ReductionLowerBound(const Layout& source, const Layout& target);
inline constexpr int64_t kMaxBoundWork = int64_t{1} << 26;

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_REDUCTION_BOUND_H_
