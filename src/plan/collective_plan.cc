#include "reshard/collective_plan.h"

namespace reshard {

std::string_view ProgramOpName(ProgramOp::Kind k) {
  switch (k) {
    case ProgramOp::Kind::kReshape: return "reshape";
    case ProgramOp::Kind::kTranspose: return "transpose";
    case ProgramOp::Kind::kPad: return "pad";
    case ProgramOp::Kind::kSlice: return "slice";
    case ProgramOp::Kind::kDynamicSlice: return "dynamic-slice";
    case ProgramOp::Kind::kAllToAll: return "all-to-all";
    case ProgramOp::Kind::kAllGather: return "all-gather";
    case ProgramOp::Kind::kCollectivePermute: return "collective-permute";
    case ProgramOp::Kind::kExchange: return "exchange";
  }
  return "?";
}

std::string_view StepOpName(StepOp op) {
  switch (op) {
    case StepOp::kAllToAll: return "all-to-all";
    case StepOp::kAllGather: return "all-gather";
    case StepOp::kCollectivePermute: return "collective-permute";
    case StepOp::kExchange: return "exchange";
    case StepOp::kSlice: return "slice";
    case StepOp::kPad: return "pad";
    case StepOp::kCopy: return "copy";
  }
  return "?";
}

bool IsCollective(StepOp op) {
  return op == StepOp::kAllToAll || op == StepOp::kAllGather || op == StepOp::kCollectivePermute ||
         op == StepOp::kExchange;
}

std::vector<std::string> CollectivePlan::OpNames() const {
  std::vector<std::string> out;
  for (const PlanStep& s : steps_) out.emplace_back(StepOpName(s.op));
  return out;
}

}  // namespace reshard
