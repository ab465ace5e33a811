// The cost model of one plan step (docs/cost_model.md, "Formulas"), in one
// place: every step's modeled time (structured steps, the ragged exchange,
// the explicit permute and the rematerialization baseline) is put together
// here from what its devices send, receive and copy.
//
//   step time = slowest device's message time
//             + copy(bytes that device copies locally)
//             + step latency, for a step that communicates
//
// A device's message time is the larger of its send and receive sums of
// Topology::MessageTime (full duplex), or its receives alone under the
// bandwidth-only model. The local copies are those an executor makes: pack
// what is sent where it is not one contiguous buffer (an all-to-all's chunks,
// the exchange's messages), then lay out the output (not for a permute,
// which receives straight into place). Structured steps and the exchange are
// priced alike, so they compare on their messages alone.
#ifndef RESHARD_SRC_PLAN_COST_MODEL_H_
#define RESHARD_SRC_PLAN_COST_MODEL_H_

#include <cstdint>

#include "reshard/collective_plan.h"
#include "reshard/topology.h"

namespace reshard {

// One device's message time from its send and receive sums.
double DeviceMessageTime(const Topology& topology, double send_us, double recv_us);

// The bytes one device copies locally in a step of kind `op` that sends
// `sent_bytes` and leaves `output_bytes` in its output buffer.
int64_t StepCopiedBytes(StepOp op, int64_t sent_bytes, int64_t output_bytes);

// The step's time from its slowest device's message time and the bytes it
// copies; `communicates` adds the step latency.
double StepTime(const Topology& topology, double messages_us, int64_t copied_bytes, bool communicates);

}  // namespace reshard

#endif  // RESHARD_SRC_PLAN_COST_MODEL_H_
