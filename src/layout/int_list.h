// Integer lists as XLA and reshard texts print them: "4,2" (no spaces).
#ifndef RESHARD_SRC_LAYOUT_INT_LIST_H_
#define RESHARD_SRC_LAYOUT_INT_LIST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace reshard {

inline std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace reshard

#endif  // RESHARD_SRC_LAYOUT_INT_LIST_H_
