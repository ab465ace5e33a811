#include "reshard/collective_plan.h"

#include <limits>

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
    case ProgramOp::Kind::kReduceScatter: return "reduce-scatter";
    case ProgramOp::Kind::kAllReduce: return "all-reduce";
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
    case StepOp::kReduceScatter: return "reduce-scatter";
    case StepOp::kAllReduce: return "all-reduce";
  }
  return "?";
}

bool IsCollective(StepOp op) {
  return op == StepOp::kAllToAll || op == StepOp::kAllGather || op == StepOp::kCollectivePermute ||
         op == StepOp::kExchange || op == StepOp::kReduceScatter || op == StepOp::kAllReduce;
}

DeviceValues DeviceValues::Each(std::vector<int64_t> values) {
  DeviceValues d(values.size(), values.empty() ? 0 : values[0]);
  for (int64_t v : values)
    if (v != d.uniform_) {
      d.each_ = std::move(values);
      break;
    }
  return d;
}

void DeviceValues::Set(size_t i, int64_t value) {
  if (each_.empty()) {
    if (is_other_.empty()) {
      if (value == uniform_) return;
      other_ = value;
      is_other_.assign(size_, false);
    }
    if (value == uniform_ || value == other_) {
      is_other_[i] = value == other_;
      return;
    }
    // A third value: list every device's.
    each_.resize(size_);
    for (size_t j = 0; j < size_; ++j) each_[j] = is_other_[j] ? other_ : uniform_;
    std::vector<bool>().swap(is_other_);
  }
  each_[i] = value;
}

int64_t DeviceValues::Max() const {
  if (size_ == 0) return 0;
  if (!each_.empty()) {
    int64_t m = each_[0];
    for (int64_t v : each_) m = v > m ? v : m;
    return m;
  }
  if (is_other_.empty()) return uniform_;
  bool any_other = false, any_uniform = false;
  for (size_t j = 0; j < size_ && !(any_other && any_uniform); ++j) (is_other_[j] ? any_other : any_uniform) = true;
  int64_t m = any_other ? other_ : uniform_;
  if (any_uniform && uniform_ > m) m = uniform_;
  return m;
}

int64_t DeviceValues::Sum() const {
  if (!each_.empty()) {
    int64_t s = 0;
    for (int64_t v : each_) s += v;
    return s;
  }
  int64_t others = 0;
  for (bool b : is_other_) others += b ? 1 : 0;
  return uniform_ * (static_cast<int64_t>(size_) - others) + other_ * others;
}

CollectivePlan::DeviceTotals CollectivePlan::TotalsOf(size_t i) const {
  DeviceTotals t;
  for (const PlanStep& s : steps_) {
    t.send_bytes += s.send_bytes[i];
    t.recv_bytes += s.recv_bytes[i];
    t.sends += s.sends[i];
    t.recvs += s.recvs[i];
    t.peak_bytes = s.peak_bytes[i] > t.peak_bytes ? s.peak_bytes[i] : t.peak_bytes;
  }
  if (steps_.empty()) t.peak_bytes = source_->LocalBytes(devices()[i]) + target_->LocalBytes(devices()[i]);
  return t;
}

std::vector<std::string> CollectivePlan::OpNames() const {
  std::vector<std::string> out;
  for (const PlanStep& s : steps_) out.emplace_back(StepOpName(s.op));
  return out;
}

TransferClip RoundOneClip(const Relay& r) { return TransferClip{r.dim, std::numeric_limits<int64_t>::min(), r.split}; }
TransferClip RoundTwoClip(const Relay& r) { return TransferClip{r.dim, r.split, std::numeric_limits<int64_t>::max()}; }

const Relay* RelayOf(std::span<const Relay> relays, int64_t donor, int64_t peer, bool by_keeper) {
  for (const Relay& r : relays)
    if (r.donor == donor && (by_keeper ? r.keeper : r.helper) == peer) return &r;
  return nullptr;
}

RoundTwoTransfer RoundTwoOf(std::span<const Relay> relays, const Transfer& t) {
  const Relay* r = t.from == t.to || relays.empty() ? nullptr : RelayOf(relays, t.from, t.to, /*by_keeper=*/true);
  if (r == nullptr) return RoundTwoTransfer{TransferClip{}, t.elements, nullptr};
  return RoundTwoTransfer{RoundTwoClip(*r), t.elements - r->elements, r};
}

std::optional<DonorTransfer> DonorTransferOf(const std::vector<Exchange>& parts, const Relay& r) {
  // A device holds a tile only in its own part's exchange.
  for (const Exchange& ex : parts) {
    if (ex.source().TileOf(r.donor) < 0) continue;
    DonorTransfer out{ex.ReceivePlan(r.keeper), 0};
    for (size_t i = 0; i < out.plan.transfers().size(); ++i)
      if (out.plan.transfers()[i].from == r.donor) {
        out.index = i;
        return out;
      }
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace reshard
