// IntData: small integer arrays evaluated per device, for the offsets of
// dynamic-slices in a partitioned module. XLA computes a device's shard
// offset from partition-id() through arithmetic and constant tables:
//
//   %constant.6 = s32[8]{0} constant({0, 8, 0, 8, 0, 8, 0, 8})
//   %dynamic-slice.9 = s32[1]{0} dynamic-slice(%constant.6, %partition-id), dynamic_slice_sizes={1}
//   %bitcast.1 = s32[] bitcast(%dynamic-slice.9)
//
// Values are either the same on every device (`per_device` false: `v` holds
// the array once) or per device (`v` holds devices x elements). Sizes are
// capped (kMaxIntElements over all devices); anything larger, any overflow or
// any op not listed is simply not evaluated (nullopt).
#ifndef RESHARD_SRC_AUDIT_INT_EVAL_H_
#define RESHARD_SRC_AUDIT_INT_EVAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "audit/hlo_module.h"

namespace reshard::audit {

inline constexpr int64_t kMaxIntElements = int64_t{1} << 22;

struct IntData {
  std::vector<int64_t> dims;
  bool per_device = false;
  std::vector<int64_t> v;

  int64_t elements() const;
  int64_t At(int64_t device, int64_t i) const { return per_device ? v[device * elements() + i] : v[i]; }
};
using IntPtr = std::shared_ptr<const IntData>;

// Whether the element type holds integers (pred included).
bool IsIntegerType(std::string_view element_type);

// The literal of `constant(...)` for an integer shape, or nullopt.
IntPtr IntConstant(const HloInstruction& ins);
// partition-id(): each device its own id.
IntPtr PartitionIds(int64_t devices);
// Evaluates `ins` over integer operands (null where an operand is not known);
// `devices` is the module's partition count.
IntPtr EvalInt(const HloInstruction& ins, const std::vector<IntPtr>& operands, int64_t devices);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_INT_EVAL_H_
