#include "plan/cost_model.h"

#include <algorithm>

namespace reshard {

double DeviceMessageTime(const Topology& topology, double send_us, double recv_us) {
  return topology.receive_only() ? recv_us : std::max(send_us, recv_us);
}

int64_t StepCopiedBytes(StepOp op, int64_t sent_bytes, int64_t output_bytes) {
  switch (op) {
    case StepOp::kAllToAll:
    case StepOp::kExchange:
      return sent_bytes + output_bytes;  // pack the messages, lay out the output
    case StepOp::kReduceScatter:
    case StepOp::kAllReduce:
      // Pack the chunks, combine every chunk that arrives with the local
      // one (the reduction's arithmetic, as local work), lay out the output.
      return 2 * sent_bytes + output_bytes;
    case StepOp::kCollectivePermute:
      return 0;  // the shard is sent as is and received in place
    case StepOp::kAllGather:
    case StepOp::kSlice:
    case StepOp::kPad:
    case StepOp::kCopy:
      return output_bytes;
  }
  return output_bytes;
}

double StepTime(const Topology& topology, double messages_us, int64_t copied_bytes, bool communicates) {
  return messages_us + topology.CopyTime(copied_bytes) + (communicates ? topology.step_latency_us() : 0.0);
}

}  // namespace reshard
