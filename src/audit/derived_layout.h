// The layout of a new array that an op makes from arrays of known layout, as
// SPMD code computes it: each device computes its part of the result from its
// parts of the operands, so the result's layout follows from theirs.
//
//   DotLayout        dot: batch dims (paired operand dims must hold the same
//                    range on each device), then lhs free dims, then rhs free
//                    dims. Contracting dims that a device does not hold whole
//                    leave partial sums (*partial = true): the layout is that
//                    of the result once an all-reduce completes it.
//   ReduceLayout     reduce over `dims`: the kept dims; reduced dims not held
//                    whole leave partial sums.
//   BroadcastLayout  broadcast with dimensions={...}: mapped dims keep the
//                    operand's ranges, new dims are whole on every device.
//
// Interpretations are per device (interpretation.h): offsets are devices x rank.
// nullopt when the operands do not fit the op's shapes or pairing.
#ifndef RESHARD_SRC_AUDIT_DERIVED_LAYOUT_H_
#define RESHARD_SRC_AUDIT_DERIVED_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "audit/interpretation.h"
#include "audit/value_state.h"

namespace reshard::audit {

struct DotDims {
  std::vector<int64_t> lhs_batch, lhs_contracting, rhs_batch, rhs_contracting;
};

std::optional<Interpretation> DotLayout(const Interpretation& lhs, const Interpretation& rhs, const DotDims& dims,
                                        int64_t devices, bool* partial);
std::optional<Interpretation> ReduceLayout(const Interpretation& in, const std::vector<int64_t>& reduced, int64_t devices,
                                           bool* partial);
std::optional<Interpretation> BroadcastLayout(const Interpretation& in, const std::vector<int64_t>& map,
                                              const std::vector<int64_t>& result_dims, int64_t devices);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_DERIVED_LAYOUT_H_
