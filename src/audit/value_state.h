// ValueState: which elements of one global array each device's local buffer
// holds, while XLA's partitioned program reshapes, slices and exchanges it.
//
// Each local dim is a list of modes, major to minor; a mode of extent e maps
// its index i to global coordinate i * stride along one global dim (or
// nowhere: a replica mode, stride 0, whose copies hold the same data). Each
// device adds its own origin: offsets[device * rank + g]. So local index
// (i_0, ..., i_k) holds the global element whose coordinate along g is
// offsets[device][g] + sum of i_m * stride_m over the modes of dim g. An index
// at or past a mode's `valid` count, or a coordinate at or past the global
// extent, is padding (XLA's shards are padded at the end).
//
// Example: f32[16,16,16] as {devices=[2,1,4]<=[4,2]T(1,0)} is local [8,16,4]
// with one mode per dim ({8, g0, 1}, {16, g1, 1}, {4, g2, 1}) and device 2x+y
// at offsets (8y, 0, 4x). An all-gather of dim 2 over x prepends a mode
// {4, g2, 4} to dim 2, which coalesces with {4, g2, 1} into {16, g2, 1}.
//
// Every operation returns nullopt when the result is not of this form (the
// caller stops following the value). Immutable values; offsets are shared.
#ifndef RESHARD_SRC_AUDIT_VALUE_STATE_H_
#define RESHARD_SRC_AUDIT_VALUE_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "audit/hlo_module.h"
#include "audit/replica_groups.h"
#include "reshard/dtype.h"
#include "reshard/layout.h"
#include "reshard/status.h"

namespace reshard::audit {

struct Mode {
  int64_t extent = 1;
  int32_t dim = -1;    // global dim, or -1 for a replica mode
  int64_t stride = 0;  // global coordinate per index step (0 for replica modes)
  int64_t valid = 1;   // indices >= valid are padding
  friend bool operator==(const Mode&, const Mode&) = default;
};

// Coordinates, strides and extents stay below this; an op whose result would
// not is not followed (hostile text cannot overflow int64 here).
inline constexpr int64_t kStateLimit = int64_t{1} << 52;

// a * b if it stays within kStateLimit in magnitude.
std::optional<int64_t> MulWithinLimit(int64_t a, int64_t b);

struct ValueState {
  std::vector<int64_t> global_shape;
  std::vector<std::vector<Mode>> dims;  // local dims, modes major to minor
  std::shared_ptr<const std::vector<int64_t>> offsets;  // devices x rank
  int64_t devices = 0;

  int64_t rank() const { return static_cast<int64_t>(global_shape.size()); }
  int64_t local_rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t Extent(size_t d) const;
  std::vector<int64_t> LocalShape() const;
  int64_t Offset(int64_t device, int64_t g) const { return (*offsets)[device * rank() + g]; }
  // Same modes and offsets.
  bool SameAs(const ValueState& o) const;
  std::string ToString() const;  // modes only, for debugging
};

// Coalesces adjacent modes of every local dim and drops those that carry no
// index: the form every operation below returns.
void NormalizeModes(ValueState& s);

// The state of a value with a tiled sharding: local_shape[d] = ceil(global/k),
// device p holds tile coordinates c: offsets c[d] * local_shape[d].
// `tile_of_device[p]` lists p's tile coordinates (rank entries), or is empty
// for a replicated value.
std::optional<ValueState> TiledState(const std::vector<int64_t>& global_shape, const std::vector<int64_t>& local_shape,
                                     const std::vector<std::vector<int64_t>>& tile_of_device, int64_t devices);

// Local ops (row-major reshape; transpose: result dim i is input dim perm[i]).
std::optional<ValueState> Reshape(const ValueState& s, const std::vector<int64_t>& new_dims);
std::optional<ValueState> Transpose(const ValueState& s, const std::vector<int64_t>& perm);
// A bitcast between physical layouts: transpose to `from`'s physical order,
// reshape to `to`'s physical dims, transpose back to `to`'s logical order.
std::optional<ValueState> Bitcast(const ValueState& s, const HloShape& from, const HloShape& to);
// Keeps [start, start + size) of local dim d; starts: one per device, or one for all.
std::optional<ValueState> SliceDim(const ValueState& s, size_t d, const std::vector<int64_t>& starts, int64_t size);
// Adds `high` padding elements at the end of dim d (negative: removes them).
std::optional<ValueState> PadHigh(const ValueState& s, size_t d, int64_t high);
// Concatenation of parts with the same modes along dim d.
std::optional<ValueState> Concatenate(const std::vector<const ValueState*>& parts, size_t d);

// Collectives. Groups must cover every device once, all of one size.
std::optional<ValueState> AllGather(const ValueState& s, size_t d, const DeviceGroups& groups);
std::optional<ValueState> AllToAll(const ValueState& s, size_t d, const DeviceGroups& groups);
// Tuple all-to-all: operand i goes to member i; result j came from member j.
std::optional<std::vector<ValueState>> AllToAllTuple(const std::vector<const ValueState*>& operands, const DeviceGroups& groups);
// Every device must be the target of exactly one pair.
std::optional<ValueState> CollectivePermute(const ValueState& s, const std::vector<std::pair<int64_t, int64_t>>& pairs);

// Whether every device holds the whole array.
bool HoldsWholeArray(const ValueState& s);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_VALUE_STATE_H_
