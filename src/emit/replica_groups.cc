#include <fmt/format.h>

#include <algorithm>

#include "reshard/emit.h"

namespace reshard {

std::string ReplicaGroupsText(const CollectivePlan& plan, const std::vector<int32_t>& axes) {
  const Mesh& mesh = *plan.mesh();
  const int64_t n = mesh.num_devices();
  std::vector<int64_t> sizes, strides(mesh.num_axes(), 1);
  for (const Mesh::Axis& a : mesh.axes()) sizes.push_back(a.size);
  for (int64_t a = mesh.num_axes() - 2; a >= 0; --a) strides[a] = strides[a + 1] * sizes[a + 1];
  int64_t k = 1;
  for (int32_t a : axes) k *= sizes[a];
  std::vector<int64_t> perm;
  for (int64_t a = 0; a < mesh.num_axes(); ++a)
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) perm.push_back(a);
  perm.insert(perm.end(), axes.begin(), axes.end());
  if (mesh.is_iota() && n > 256) {
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
    if (identity || sizes.empty()) return fmt::format("[{},{}]<=[{}]", n / k, k, n);
    return fmt::format("[{},{}]<=[{}]T({})", n / k, k, fmt::join(sizes, ","), fmt::join(perm, ","));
  }
  // Row-major over (other axes, group axes): consecutive runs of k are groups.
  std::string out = "{";
  std::vector<int64_t> coord(perm.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t pos = 0;
    for (size_t j = 0; j < perm.size(); ++j) pos += coord[j] * strides[perm[j]];
    out += i % k == 0 ? (i ? "},{" : "{") : ",";
    out += std::to_string(mesh.device(pos));
    for (size_t j = perm.size(); j-- > 0;) {
      if (++coord[j] < sizes[perm[j]]) break;
      coord[j] = 0;
    }
  }
  return out + "}}";
}

}  // namespace reshard
