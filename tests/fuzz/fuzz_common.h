// Shared checks of the parser fuzzers: a parse either fails with a message or
// yields a value whose printed text parses back to the same text.
#ifndef RESHARD_TESTS_FUZZ_FUZZ_COMMON_H_
#define RESHARD_TESTS_FUZZ_FUZZ_COMMON_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "reshard/status.h"

namespace reshard::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Aborts (a finding) when `ok` is false.
inline void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
    std::abort();
  }
}

inline void CheckError(const Status& s) { Check(!s.ok() && !s.message().empty(), "error without a message"); }

}  // namespace reshard::fuzz

#endif  // RESHARD_TESTS_FUZZ_FUZZ_COMMON_H_
