#include "reshard/dtype.h"

#include <array>
#include <string>

namespace reshard {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int64_t bytes;
};

constexpr std::array<DTypeInfo, 15> kTypes = {{
    {DType::kPred, "pred", 1}, {DType::kS8, "s8", 1},     {DType::kU8, "u8", 1},
    {DType::kS16, "s16", 2},   {DType::kU16, "u16", 2},   {DType::kF16, "f16", 2},
    {DType::kBF16, "bf16", 2}, {DType::kS32, "s32", 4},   {DType::kU32, "u32", 4},
    {DType::kF32, "f32", 4},   {DType::kS64, "s64", 8},   {DType::kU64, "u64", 8},
    {DType::kF64, "f64", 8},   {DType::kC64, "c64", 8},   {DType::kC128, "c128", 16},
}};

}  // namespace

int64_t ByteSize(DType t) { return kTypes[static_cast<size_t>(t)].bytes; }
std::string_view DTypeName(DType t) { return kTypes[static_cast<size_t>(t)].name; }

bool IsFloatingPoint(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64 || t == DType::kC64 ||
         t == DType::kC128;
}

Result<DType> ParseDType(std::string_view name) {
  std::string known;
  for (const DTypeInfo& info : kTypes) {
    if (info.name == name) return info.type;
    known += known.empty() ? "" : ", ";
    known += info.name;
  }
  return Status::InvalidArgument("unknown element type '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace reshard
