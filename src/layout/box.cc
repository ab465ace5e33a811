#include "reshard/box.h"

namespace reshard {

int64_t OverlapLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    total += Intersect(a[i], b[j]).size();
    if (a[i].hi < b[j].hi) ++i; else ++j;
  }
  return total;
}

int64_t Box::volume() const {
  int64_t v = 1;
  for (const Interval& i : dims) v *= i.size();
  return v;
}

std::string Box::ToString() const {
  if (dims.empty()) return "[]";
  std::string s;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d) s += "x";
    s += "[" + std::to_string(dims[d].lo) + "," + std::to_string(dims[d].hi) + ")";
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Box& b) { return os << b.ToString(); }

}  // namespace reshard
