// Interval and Box: half-open index ranges of an N-d array.
//
// An Interval is [lo, hi) with lo <= hi; a Box is one Interval per dimension
// (rank 0 boxes hold exactly one element). Both are small immutable values.
#ifndef RESHARD_BOX_H_
#define RESHARD_BOX_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace reshard {

struct Interval {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t size() const { return hi - lo; }
  bool empty() const { return hi <= lo; }
  friend bool operator==(const Interval&, const Interval&) = default;
  friend auto operator<=>(const Interval&, const Interval&) = default;
};

// The overlap of a and b; empty (possibly with lo > hi clamped) when disjoint.
inline Interval Intersect(Interval a, Interval b) {
  Interval r{a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

// Total length of the overlap of two sorted, disjoint interval lists.
int64_t OverlapLength(const std::vector<Interval>& a, const std::vector<Interval>& b);

struct Box {
  std::vector<Interval> dims;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  // Number of elements; 1 for rank 0.
  int64_t volume() const;
  // "[0,8)x[0,16)x[4,8)"; "[]" for rank 0.
  std::string ToString() const;
  friend bool operator==(const Box&, const Box&) = default;
  friend auto operator<=>(const Box&, const Box&) = default;
};

std::ostream& operator<<(std::ostream& os, const Box& b);

}  // namespace reshard

#endif  // RESHARD_BOX_H_
