#include "plan/search_state.h"

#include <fmt/format.h>

#include "layout/mesh_grid.h"
#include "reshard/named_sharding.h"

namespace reshard {

std::string StateText(const PlanMesh& pm, const AxisLists& s) {
  std::string out = "[";
  for (size_t d = 0; d < s.size(); ++d) out += (d ? ", {" : "{") + pm.AxesText(s[d], ", ") + "}";
  return out + "]";
}

std::string AxesText(const PlanMesh& pm, const std::vector<int32_t>& axes) { return "{" + pm.AxesText(axes, ",") + "}"; }

std::string StateText(const PlanMesh& pm, const AxisLists& s, const std::vector<int32_t>& unreduced) {
  return unreduced.empty() ? StateText(pm, s) : StateText(pm, s) + " unreduced " + AxesText(pm, unreduced);
}

Result<Layout> StateLayout(const PlanMesh& pm, const AxisLists& s, const std::vector<int64_t>& shape, DType dtype,
                           const std::vector<int32_t>& unreduced, ReduceOp op) {
  std::vector<std::vector<AxisRef>> dims;
  for (const auto& l : s) {
    dims.emplace_back();
    for (int32_t a : l) dims.back().push_back(AxisRef{a, 1, 0});
  }
  std::vector<AxisRef> partial;
  for (int32_t a : unreduced) partial.push_back(AxisRef{a, 1, 0});
  return BuildMeshLayout(pm.mesh, shape, dtype, dims, SplitRule::kCeil, {}, partial, op);
}

Layout StateLayout(const PlanMesh& pm, const AxisLists& s, const std::vector<int64_t>& shape, DType dtype) {
  // A state over the plan mesh's whole axes is always a valid named sharding.
  return StateLayout(pm, s, shape, dtype, {}, ReduceOp::kSum).value();
}

std::string EdgeText(const PlanMesh& pm, const AxisLists& from, const Edge& e) {
  if (e.exchange) return fmt::format("exchange (ragged): {} -> {}", StateText(pm, from), StateText(pm, e.to));
  std::string op(StepOpName(e.draft.op));
  if (!e.draft.group.empty()) op += " over " + AxesText(pm, e.draft.group);
  return fmt::format("{}: {} -> {}", op, StateText(pm, from), StateText(pm, e.to));
}

AxisLists StateOfKey(const std::string& key) {
  AxisLists s(1);
  for (char c : key) {
    if (c == static_cast<char>(0xFF)) s.emplace_back();
    else s.back().push_back(static_cast<unsigned char>(c));
  }
  s.pop_back();
  return s;
}

}  // namespace reshard
