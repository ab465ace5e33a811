// Interpretation: a ValueState (value_state.h) read as a tiled layout, so
// that the audit can price the move between two states as reshard plans it.
//
// Local dim d with one mode of stride s over global dim g is a dim of the
// array read; several local dims over one g split it (a reshape of the
// global array). A global dim no local dim steps along, held at one index
// by every device, is dropped: the value is the array at that index (a
// layer sliced out of stacked weights). A state no such reading fits (modes
// mixing dims, strides that skip, devices at different indices of a dropped
// dim) has none: the audit does not price it.
#ifndef RESHARD_SRC_AUDIT_INTERPRETATION_H_
#define RESHARD_SRC_AUDIT_INTERPRETATION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "audit/value_state.h"
#include "reshard/dtype.h"
#include "reshard/layout.h"
#include "reshard/status.h"

namespace reshard::audit {

// A state read as a tiled layout of an array whose dims are the local dims:
// local dim d with one mode of stride s over global dim g is a dim of the
// array; several local dims over one g split it (a reshape of the global
// array). `signature` names that array: per local dim (g, stride, size),
// then per dropped global dim (-3, g, index).
struct Interpretation {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> signature;
  std::vector<int64_t> local_shape;
  std::vector<int64_t> offsets;  // devices x rank, coordinates in `shape`
  bool identity = false;          // the array is the state's own global array
};
// A state that holds the whole array on every device is read as its local view,
// replicated, whatever dims a reshape merged.
std::optional<Interpretation> Interpret(const ValueState& s);
// The layout of an interpretation (tiles of XLA's ceil rule, one per device).
Result<Layout> ToLayout(const Interpretation& in, DType dtype);
// The state of an interpretation as the origin of a new array (one mode per dim).
ValueState RebaseState(const Interpretation& in, int64_t devices);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_INTERPRETATION_H_
