// Fingerprints of what ranks must share (layouts, plans, options, error
// texts): a running 64-bit mix that every rank computes alike, so one
// all-gather or all-reduce of it tells whether the ranks agree. Not a
// cryptographic hash: it tells agreement between cooperating ranks, nothing more.
#ifndef RESHARD_SRC_EXEC_FINGERPRINT_H_
#define RESHARD_SRC_EXEC_FINGERPRINT_H_

#include <cstdint>
#include <string_view>

namespace reshard {

inline uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + (h >> 29); }

inline uint64_t MixText(uint64_t h, std::string_view text) {
  for (char c : text) h = Mix(h, static_cast<unsigned char>(c));
  return Mix(h, text.size());
}

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_FINGERPRINT_H_
