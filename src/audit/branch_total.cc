// Totals that count one branch of each conditional (branch_total.h).
#include "audit/branch_total.h"

#include <climits>
#include <cstddef>
#include <map>

#include "layout/checked_math.h"

namespace reshard::audit {
namespace {

// Saturating, as the audit's totals are.
void Add(int64_t& a, int64_t b) { a = SaturatingAdd(a, b); }

// The total of `items` (indices into all), all of whose paths share their
// first `depth` entries.
BranchTotal Total(const std::vector<BranchItem>& all, const std::vector<std::size_t>& items, std::size_t depth) {
  BranchTotal sum;
  // conditional -> branch -> its items
  std::map<int64_t, std::map<int64_t, std::vector<std::size_t>>> inner;
  for (std::size_t i : items) {
    const BranchItem& item = all[i];
    if (item.branch.size() == depth) {
      Add(sum.xla, item.xla);
      Add(sum.reshard, item.reshard);
    } else {
      inner[item.branch[depth].first][item.branch[depth].second].push_back(i);
    }
  }
  for (const auto& [conditional, branches] : inner) {
    BranchTotal best;
    bool first = true;
    for (const auto& [branch, in] : branches) {
      const BranchTotal t = Total(all, in, depth + 1);
      const bool more = t.xla > best.xla || (t.xla == best.xla && t.xla - t.reshard > best.xla - best.reshard);
      if (first || more) best = t;
      first = false;
    }
    Add(sum.xla, best.xla);
    Add(sum.reshard, best.reshard);
  }
  return sum;
}

}  // namespace

BranchTotal OneRunTotal(const std::vector<BranchItem>& items) {
  std::vector<std::size_t> all(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) all[i] = i;
  return Total(items, all, 0);
}

}  // namespace reshard::audit
