#include "testing/planned_traffic.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>

#include "reshard/device_program.h"

namespace reshard::testing {
namespace {

// Whether every device's exact buffer is its padded shard, before and after.
bool Unpadded(const PlanStep& step) {
  auto bytes = [&](const std::vector<int64_t>& shard) {
    int64_t b = step.input.element_bytes();
    for (int64_t e : shard) b *= e;
    return b;
  };
  const int64_t in = bytes(step.input_shard), out = bytes(step.output_shard);
  for (int64_t d : step.input.devices())
    if (step.input.LocalBytes(d) != in) return false;
  for (int64_t d : step.output.devices())
    if (step.output.LocalBytes(d) != out) return false;
  return true;
}

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

void ExpectPlannedTraffic(const CollectivePlan& plan, const std::vector<int64_t>& devices,
                          const std::vector<StepTraffic>& traffic, const std::string& what, bool priced_chunks) {
  ASSERT_EQ(devices, plan.devices()) << what;
  if (plan.steps().empty()) {  // equal layouts: compiled as one local copy, no message
    for (const StepTraffic& t : traffic) EXPECT_EQ(Sum(t.received), 0) << what;
    return;
  }
  ASSERT_EQ(traffic.size(), plan.steps().size()) << what;
  for (size_t s = 0; s < traffic.size(); ++s) {
    const PlanStep& step = plan.steps()[s];
    const StepTraffic& t = traffic[s];
    const std::string where = what + ", step " + std::to_string(s + 1) + " (" + std::string(StepOpName(step.op)) + ")";
    ASSERT_EQ(t.sent.size(), devices.size()) << where;
    ASSERT_EQ(t.received.size(), devices.size()) << where;
    EXPECT_EQ(Sum(t.sent), Sum(t.received)) << where;
    const bool grouped = (step.op == StepOp::kAllGather || step.op == StepOp::kAllToAll) && !step.group_axes.empty();
    const bool exact = step.op == StepOp::kExchange || (Unpadded(step) && step.op != StepOp::kAllReduce) ||
                       (grouped && priced_chunks);
    // An all-reduce runs through ReducedPieces: a device receives the other
    // parts of its own piece, then every other piece of its shard. Where the
    // pieces are equal boxes, that is the ring's 2 (k - 1) / k priced.
    // With priced chunks, an all-reduce over groups is one backend call on
    // the ring's buffer: it moves what the plan priced, device by device.
    const bool one_call = priced_chunks && step.op == StepOp::kAllReduce && !step.group_axes.empty() && plan.mesh() &&
                          plan.mesh()->GroupSize(step.group_axes) > 1;
    const std::optional<Layout> pieces = one_call ? std::nullopt : RingPieces(step);
    bool even = pieces.has_value() && Unpadded(step);
    for (size_t i = 0; i < devices.size() && even; ++i)
      even = pieces->LocalBytes(devices[i]) * step.input.reduction().parts == step.output.LocalBytes(devices[i]);
    for (size_t i = 0; i < devices.size(); ++i) {
      if (pieces) {
        const int64_t piece = pieces->LocalBytes(devices[i]), shard = step.output.LocalBytes(devices[i]);
        EXPECT_EQ(t.received[i], (step.input.reduction().parts - 1) * piece + shard - piece)
            << where << ", device " << devices[i];
        if (even) {
          EXPECT_EQ(t.received[i], step.recv_bytes[i]) << where << ", device " << devices[i];
        }
      } else if (exact || one_call) {
        EXPECT_EQ(t.received[i], step.recv_bytes[i]) << where << ", device " << devices[i];
      } else {
        EXPECT_LE(t.received[i], step.recv_bytes[i]) << where << ", device " << devices[i];
      }
      // Sends: the exchange's own; a grouped collective's, sent inside its
      // groups (StepExchange) as the plan prices them where nothing is padded.
      if (step.op == StepOp::kExchange || (exact && grouped) || one_call) {
        EXPECT_EQ(t.sent[i], step.send_bytes[i]) << where << ", device " << devices[i];
      }
    }
  }
}

}  // namespace reshard::testing
