// PlanBuilder: assembles a CollectivePlan, its only writer (CollectivePlan
// names it a friend, so the plan stays immutable to everyone else).
//
// Built from the two layouts, it holds the plan's device list: the union of
// both layouts' devices, ascending and distinct, so that a step's per-device
// values index it by position (Index). Steps are appended in order; Finish
// sums them into the plan's totals and hands the plan over, after which the
// builder is spent.
//
// Not thread-safe; one builder per plan.
#ifndef RESHARD_SRC_PLAN_PLAN_BUILDER_H_
#define RESHARD_SRC_PLAN_PLAN_BUILDER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "reshard/collective_plan.h"
#include "reshard/layout.h"
#include "reshard/mesh.h"
#include "reshard/planner.h"

namespace reshard {

class PlanBuilder {
 public:
  PlanBuilder(const Layout& source, const Layout& target);
  // The mesh the plan's groups are named over, and its axis labels.
  void SetMesh(const Mesh& mesh);
  // The position of `device` in the plan's device list.
  // REQUIRES: `device` is in the source or the target layout.
  size_t Index(int64_t device) const { return static_cast<size_t>(PositionIn(plan_.devices(), device)); }
  size_t num_devices() const { return plan_.devices().size(); }
  int64_t device(size_t index) const { return plan_.devices()[index]; }
  void Add(PlanStep step) { plan_.steps_.push_back(std::move(step)); }

  // The plan with its totals. The builder is spent afterwards.
  CollectivePlan Finish();

 private:
  CollectivePlan plan_;
};

// The line a plan result's candidates carry where no plan fit the default
// memory cap of `cap` bytes and the plan was made without one (every
// planner that lifts the soft default cap says so alike).
PlanCandidate CapLiftedCandidate(int64_t cap);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_PLAN_BUILDER_H_
