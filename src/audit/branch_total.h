// Totals over one run of a module whose reshards and collectives may sit in
// conditional branches. Only one branch of a conditional runs per run, so
// adding every branch's bytes would claim more than any run moves: of each
// conditional, the branch that moves the most (its total through XLA; ties:
// the larger saving) is counted, and the others not.
#ifndef RESHARD_SRC_AUDIT_BRANCH_TOTAL_H_
#define RESHARD_SRC_AUDIT_BRANCH_TOTAL_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace reshard::audit {

// The conditional branches around an instruction, outermost first:
// (the conditional's number, the branch's index).
using BranchPath = std::vector<std::pair<int64_t, int64_t>>;

struct BranchItem {
  BranchPath branch;
  int64_t xla = 0;      // bytes through XLA's collectives (times its trip count)
  int64_t reshard = 0;  // what reshard's plan moves instead (0 where not priced)
};

struct BranchTotal {
  int64_t xla = 0, reshard = 0;
};

// Saturating sums, as the audit's byte totals are.
BranchTotal OneRunTotal(const std::vector<BranchItem>& items);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_BRANCH_TOTAL_H_
