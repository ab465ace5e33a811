// PartsIntoMemo: PartRoutes::PartsInto per target part, each worked out on
// its first ask, for walks over receivers, where every device of a target
// part asks the same (PartsInto scans every part). An internal helper of the
// planner, the simulator and the executors' checks, not part of the API.
#ifndef RESHARD_SRC_PLAN_PARTS_INTO_MEMO_H_
#define RESHARD_SRC_PLAN_PARTS_INTO_MEMO_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "reshard/exchange.h"

namespace reshard {

// Keeps a pointer to `routes`, which must outlive it.
class PartsIntoMemo {
 public:
  explicit PartsIntoMemo(const PartRoutes& routes) : routes_(&routes) {}
  // PartRoutes::PartsInto(part); valid until the memo is destroyed
  // (references into an unordered_map survive later inserts).
  const std::vector<int64_t>& Into(int64_t part) {
    auto [it, fresh] = into_.try_emplace(part);
    if (fresh) it->second = routes_->PartsInto(part);
    return it->second;
  }

 private:
  const PartRoutes* routes_;
  std::unordered_map<int64_t, std::vector<int64_t>> into_;
};

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_PARTS_INTO_MEMO_H_
