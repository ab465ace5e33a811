// ForEachLocal: a device's local elements of a layout, in local (row-major)
// order, each with its global row-major index: what the checkers compare
// element by element without holding the array.
#ifndef RESHARD_SRC_EXEC_LOCAL_ELEMENTS_H_
#define RESHARD_SRC_EXEC_LOCAL_ELEMENTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reshard/layout.h"

namespace reshard {

// Calls f(local element index, global row-major index) for every element of
// device's local buffer, in local order. Each dim's part of the tile is held
// as runs of global indices (adjacent cells merged): memory in the tile's
// cells, not its elements (per element it took 8 bytes: 1.6 GB for a 1-D
// array of 200M elements).
template <typename F>
void ForEachLocal(const Layout& l, int64_t device, F&& f) {
  struct Run {
    int64_t lo, hi;
  };
  const int64_t t = l.TileOf(device);
  if (t < 0) return;
  const std::vector<int32_t> coords = l.TileCoords(t);
  const size_t rank = static_cast<size_t>(l.rank());
  std::vector<std::vector<Run>> runs(rank);
  std::vector<int64_t> stride(rank, 1);
  int64_t s = 1;
  for (size_t d = rank; d-- > 0;) {
    const std::vector<int64_t>& cuts = l.dim(static_cast<int64_t>(d)).cuts;
    for (int32_t k : l.TileCells(static_cast<int64_t>(d), coords[d])) {
      const int64_t lo = cuts[static_cast<size_t>(k)], hi = cuts[static_cast<size_t>(k) + 1];
      if (lo == hi) continue;
      if (!runs[d].empty() && runs[d].back().hi == lo)
        runs[d].back().hi = hi;
      else
        runs[d].push_back({lo, hi});
    }
    if (runs[d].empty()) return;
    stride[d] = s;
    s *= l.shape()[d];
  }
  if (rank == 0) {
    f(0, 0);
    return;
  }
  // An odometer over the outer dims: per dim, its run and global index.
  std::vector<size_t> run(rank, 0);
  std::vector<int64_t> g(rank);
  for (size_t d = 0; d < rank; ++d) g[d] = runs[d][0].lo;
  const std::vector<Run>& inner = runs[rank - 1];
  int64_t local = 0;
  while (true) {
    int64_t base = 0;
    for (size_t d = 0; d + 1 < rank; ++d) base += g[d] * stride[d];
    for (const Run& r : inner)
      for (int64_t x = r.lo; x < r.hi; ++x) f(local++, base + x);
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++g[d] < runs[d][run[d]].hi) break;
      if (++run[d] < runs[d].size()) {
        g[d] = runs[d][run[d]].lo;
        break;
      }
      run[d] = 0;
      g[d] = runs[d][0].lo;
    }
  }
}

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_LOCAL_ELEMENTS_H_
