#include <fmt/format.h>

#include <algorithm>

#include "reshard/emit.h"

namespace reshard {

std::string ReplicaGroupsText(const CollectivePlan& plan, const std::vector<int32_t>& axes) {
  const Mesh& mesh = *plan.mesh();
  const int64_t n = mesh.num_devices();
  const int64_t k = mesh.GroupSize(axes);
  if (mesh.is_iota() && n > 256) {
    // XLA's compact form: the groups are the rows of the iota over the mesh,
    // transposed to put the group axes last.
    std::vector<int64_t> sizes, perm;
    for (const Mesh::Axis& a : mesh.axes()) sizes.push_back(a.size);
    for (int64_t a = 0; a < mesh.num_axes(); ++a)
      if (std::find(axes.begin(), axes.end(), a) == axes.end()) perm.push_back(a);
    perm.insert(perm.end(), axes.begin(), axes.end());
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
    if (identity || sizes.empty()) return fmt::format("[{},{}]<=[{}]", n / k, k, n);
    return fmt::format("[{},{}]<=[{}]T({})", n / k, k, fmt::join(sizes, ","), fmt::join(perm, ","));
  }
  // Groups by their first position (row-major over the other axes), members
  // in member order: Mesh's groups, as the executors run them.
  std::string out = "{";
  for (int64_t pos = 0; pos < n; ++pos) {
    if (mesh.GroupOf(pos, axes) != pos) continue;
    out += out.size() > 1 ? ",{" : "{";
    const std::vector<int64_t> members = mesh.GroupMembers(pos, axes);
    for (size_t i = 0; i < members.size(); ++i) out += (i ? "," : "") + std::to_string(mesh.device(members[i]));
    out += "}";
  }
  return out + "}";
}

}  // namespace reshard
