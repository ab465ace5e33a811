#include "testing/random_named.h"

#include <algorithm>

namespace reshard::testing {

Mesh RandomNamedMesh(std::mt19937_64& rng) {
  const int axes = 1 + static_cast<int>(rng() % 3);
  std::vector<Mesh::Axis> a;
  int64_t n = 1;
  for (int i = 0; i < axes; ++i) {
    const int64_t size = std::vector<int64_t>{1, 2, 2, 3, 4}[rng() % 5];
    if (n * size > 16) break;
    a.push_back({std::string(1, static_cast<char>('x' + i)), size});
    n *= size;
  }
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  if (rng() % 3 == 0) std::shuffle(ids.begin(), ids.end(), rng);
  return Mesh::Create(a, ids).value();
}

NamedSharding RandomSpec(std::mt19937_64& rng, const Mesh& mesh, size_t rank) {
  std::vector<NamedSharding::Dim> dims(rank);
  std::vector<int64_t> order(mesh.num_axes());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t a : order) {
    const size_t slot = rng() % (rank + 1);  // rank: unused (replicated)
    if (slot < rank) dims[slot].axes.push_back(AxisRef{a, 1, 0});
  }
  return NamedSharding::Create(mesh, dims).value();
}

}  // namespace reshard::testing
