// Byte counts as people write them, read one way everywhere (the CLI's
// --memory-cap and --max-memory, Python's memory_cap=): "65536", or a
// binary unit after a number, "64K", "1.5M", "2G", "1T" (KiB, MiB, GiB, TiB
// too). Decimal digits, an optional fraction, then the unit; no spaces, signs
// or exponents. A fraction rounds down to a whole byte where a unit is given;
// without a unit the count is a whole number. At least 1 byte, at most
// kMaxByteCount.
#ifndef RESHARD_BYTE_COUNT_H_
#define RESHARD_BYTE_COUNT_H_

#include <cstdint>
#include <string_view>

#include "reshard/status.h"

namespace reshard {

inline constexpr int64_t kMaxByteCount = int64_t{1} << 62;
inline constexpr const char* kByteCountExpected = "a byte count such as 65536, 64K, 1.5M or 2G";

// InvalidArgument naming the character and its column, or the rule broken
// (the caller adds the option's name).
Result<int64_t> ParseByteCount(std::string_view text);

}  // namespace reshard

#endif  // RESHARD_BYTE_COUNT_H_
