#include "plan/plan_builder.h"

#include <fmt/format.h>

#include <iterator>

namespace reshard {

PlanBuilder::PlanBuilder(const Layout& source, const Layout& target) {
  plan_.source_ = source;
  plan_.target_ = target;
  // Both layouts' devices, ascending: the source's own list where they agree
  // (over one mesh), else their union.
  if (source.SameDevices(target)) {
    plan_.devices_are_source_ = true;
    return;
  }
  plan_.devices_ = DevicesOfBoth(source, target);
}

void PlanBuilder::SetMesh(const Mesh& mesh) {
  plan_.mesh_ = mesh;
  for (const Mesh::Axis& a : mesh.axes()) plan_.axis_labels_.push_back(a.name);
}

CollectivePlan PlanBuilder::Finish() {
  PlanTotals& t = plan_.totals_;
  const size_t n = plan_.devices().size();
  bool uniform = true;
  for (const PlanStep& s : plan_.steps_) {
    if (IsCollective(s.op)) t.collectives += s.rounds();
    t.time_us += s.time_us;
    t.peak_bytes = std::max(t.peak_bytes, s.peak_bytes.Max());
    t.total_bytes += s.recv_bytes.Sum();
    uniform = uniform && s.send_bytes.uniform() && s.recv_bytes.uniform();
  }
  if (uniform) {  // SPMD all through: one device stands for all
    const CollectivePlan::DeviceTotals d = n ? plan_.TotalsOf(0) : CollectivePlan::DeviceTotals{};
    t.max_send_bytes = d.send_bytes;
    t.max_recv_bytes = d.recv_bytes;
  } else {
    for (size_t i = 0; i < n; ++i) {
      const CollectivePlan::DeviceTotals d = plan_.TotalsOf(i);
      t.max_send_bytes = std::max(t.max_send_bytes, d.send_bytes);
      t.max_recv_bytes = std::max(t.max_recv_bytes, d.recv_bytes);
    }
  }
  if (plan_.steps_.empty())
    for (size_t i = 0; i < n; ++i) t.peak_bytes = std::max(t.peak_bytes, plan_.TotalsOf(i).peak_bytes);
  return std::move(plan_);
}

PlanCandidate CapLiftedCandidate(int64_t cap) {
  return PlanCandidate{{}, 0, 0, 0, fmt::format("no plan fits the default memory cap of {} B; planned without a cap", cap)};
}

}  // namespace reshard
