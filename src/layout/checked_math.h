// Overflow-checked int64 arithmetic for sizes that come from user input.
#ifndef RESHARD_SRC_LAYOUT_CHECKED_MATH_H_
#define RESHARD_SRC_LAYOUT_CHECKED_MATH_H_

#include <cstdint>

namespace reshard {

// Sets *out = a * b; returns false (leaving *out unspecified) on overflow.
inline bool CheckedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool CheckedAdd(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// a + b and a * b clamped to int64's range where they overflow: sums of
// costs and byte estimates, where only the order of the results matters
// past that (a plan for petabytes takes more picoseconds than int64 holds).
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? (b > 0 ? INT64_MAX : INT64_MIN) : out;
}
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? ((a < 0) != (b < 0) ? INT64_MIN : INT64_MAX) : out;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// min(i * c, n) for i, c >= 0, n >= 0, without overflowing when i * c would.
inline int64_t MulClamp(int64_t i, int64_t c, int64_t n) {
  int64_t p = 0;
  return CheckedMul(i, c, &p) && p < n ? p : n;
}

}  // namespace reshard

#endif  // RESHARD_SRC_LAYOUT_CHECKED_MATH_H_
