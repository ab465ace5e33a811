// DType: an array's element type, named as XLA names it (f32, bf16, ...).
// Only the byte size matters for movement; the name is kept for printing.
#ifndef RESHARD_DTYPE_H_
#define RESHARD_DTYPE_H_

#include <cstdint>
#include <string_view>

#include "reshard/status.h"

namespace reshard {

enum class DType { kPred, kS8, kU8, kS16, kU16, kF16, kBF16, kS32, kU32, kF32, kS64, kU64, kF64, kC64, kC128 };

// Bytes per element: pred, s8, u8 -> 1; ... c128 -> 16.
int64_t ByteSize(DType t);
// The XLA name: "f32".
std::string_view DTypeName(DType t);
// Whether `t` is a floating-point type (f16, bf16, f32, f64, and the complex
// types, whose components are): where arithmetic rounds rather than wraps
// or truncates.
bool IsFloatingPoint(DType t);
// Inverse of DTypeName. Error names the unknown text and lists the known names.
Result<DType> ParseDType(std::string_view name);

}  // namespace reshard

#endif  // RESHARD_DTYPE_H_
