// The analyzer's collectives (analyzer.h): the bytes each device receives through
// each, and how all-gathers, all-to-alls, collective-permutes and reductions move
// the values followed.
#include "audit/analyzer.h"

#include <fmt/format.h>

#include <algorithm>

#include "layout/checked_math.h"

namespace reshard::audit::analysis {

int Analyzer::RecordCollective(const HloComputation& c, const HloInstruction& ins, const std::string& op, int64_t group_size,
                               std::vector<int64_t> recv, std::string element_type) {
  const std::string key = c.name + "/" + ins.name;
  auto it = collective_index_.find(key);
  if (it != collective_index_.end()) return it->second;
  ModuleCollective mc;
  mc.op = op;
  mc.name = ins.name;
  mc.computation = c.name;
  mc.line = ins.line;
  mc.group_size = group_size;
  mc.element_type = std::move(element_type);
  mc.executions = executions_;
  mc.loop = loop_;
  mc.branch = branch_;
  if (recv.size() > 1 && std::all_of(recv.begin(), recv.end(), [&](int64_t b) { return b == recv[0]; })) {
    const int64_t all = recv[0];
    recv.assign(1, all);
  }
  mc.recv_bytes = std::move(recv);
  out_.collectives.push_back(std::move(mc));
  const int index = static_cast<int>(out_.collectives.size()) - 1;
  collective_index_[key] = index;
  return index;
}

std::optional<DeviceGroups> Analyzer::Groups(const HloInstruction& ins) {
  Result<DeviceGroups> g = ReadReplicaGroups(ins, devices_);
  if (!g.ok()) {
    Issue(ins, "replica groups not understood: " + g.status().message());
    return std::nullopt;
  }
  return std::move(g).value();
}

namespace {

// Elements of a shape, a tuple's summed (saturating: a shape's own count does).
int64_t Elements(const HloShape& s) {
  if (!s.is_tuple) return s.num_elements();
  int64_t sum = 0;
  for (const HloShape& e : s.elements) sum = SaturatingAdd(sum, Elements(e));
  return sum;
}

int64_t OperandElements(const HloComputation& c, const HloInstruction& ins) {
  int64_t sum = 0;
  for (int o : ins.operands) sum = SaturatingAdd(sum, Elements(c.instructions[o].shape));
  return sum;
}

}  // namespace

int64_t Analyzer::OperandBytes(const HloComputation& c, const HloInstruction& ins) const {
  int64_t sum = 0;
  for (int o : ins.operands) {
    const int64_t b = ShapeBytes(c.instructions[o].shape);
    if (b < 0) return -1;
    sum += b;
  }
  return sum;
}

HloShape Analyzer::OutputShape(const HloInstruction& ins, const std::string& base) {
  if (ins.opcode == base + "-start" && ins.shape.is_tuple && ins.shape.elements.size() >= 2 &&
      (base == "all-gather" || base == "collective-permute"))
    return ins.shape.elements[1];
  return ins.shape;
}

int Analyzer::Collective(const HloComputation& c, const HloInstruction& ins, const std::string& base, const DeviceGroups* groups) {
  const int64_t in = OperandBytes(c, ins);
  const int64_t out = ShapeBytes(OutputShape(ins, base));
  if (in < 0 || out < 0) {
    Issue(ins, "element type not understood");
    return -1;
  }
  int64_t k = groups ? static_cast<int64_t>((*groups)[0].size()) : 0;
  // The shapes must say what the collective does (a dump edited or cut
  // wrong): an output that no such collective makes is not priced, or it
  // would be taken as what XLA moves. In elements (sub-byte types round up
  // in bytes), a collective-permute's first operand only (an in-place one
  // also takes its output buffer and offsets).
  const int64_t in_elements = base == "collective-permute" && !ins.operands.empty()
                                  ? Elements(c.instructions[ins.operands[0]].shape)
                                  : OperandElements(c, ins);
  const int64_t out_elements = Elements(OutputShape(ins, base));
  int64_t want = -1;  // the output's elements, from the operands'; -1: not checked, -2: none fits
  if (base == "all-gather" && k > 0) {
    if (!CheckedMul(in_elements, k, &want)) want = -2;
  } else if (base == "reduce-scatter" && k > 0) {
    want = in_elements % k == 0 ? in_elements / k : -2;
  } else if (base == "all-to-all" || base == "collective-permute" || base == "all-reduce") {
    want = in_elements;
  }
  if (want != -1 && want != out_elements) {
    Issue(ins, fmt::format("its output shape ({} elements) is not what {}{} makes of its operands ({} elements)",
                           out_elements, base, k > 0 ? fmt::format(" over groups of {}", k) : std::string(),
                           in_elements));
    return -1;
  }
  std::vector<int64_t> recv(1, 0);
  if (base == "all-gather") {
    recv[0] = std::max<int64_t>(0, out - in);
  } else if (base == "all-to-all") {
    if (k == 0 && ins.operands.size() > 1) k = static_cast<int64_t>(ins.operands.size());
    recv[0] = k > 0 ? in / k * (k - 1) : in;
  } else if (base == "collective-permute") {
    const std::string* p = ins.Attr("source_target_pairs");
    const int64_t bytes = ins.operands.empty() ? 0 : ShapeBytes(c.instructions[ins.operands[0]].shape);
    recv.assign(static_cast<size_t>(devices_), 0);
    if (p != nullptr) {
      Result<std::vector<std::pair<int64_t, int64_t>>> pairs = ParseSourceTargetPairs(*p);
      if (!pairs.ok()) {
        Issue(ins, "source_target_pairs not understood: " + pairs.status().message());
        recv.assign(1, bytes);
      } else {
        for (const auto& [s, t] : *pairs)
          if (s != t && t >= 0 && t < devices_) recv[t] = bytes;
      }
    }
  } else if (base == "all-reduce") {
    recv[0] = in;
  } else if (base == "reduce-scatter") {
    recv[0] = k > 0 ? out * (k - 1) : out;
  } else if (base == "ragged-all-to-all") {
    recv[0] = ins.operands.size() > 1 ? ShapeBytes(c.instructions[ins.operands[1]].shape) : out;
  } else {
    recv[0] = in;
  }
  return RecordCollective(c, ins, base, k, std::move(recv), MovedElementType(c, ins));
}

std::string Analyzer::MovedElementType(const HloComputation& c, const HloInstruction& ins) {
  std::string type;
  for (int o : ins.operands) {
    const HloShape& s = c.instructions[o].shape;
    if (s.is_tuple) return "";
    if (!type.empty() && type != s.element_type) return "";
    type = s.element_type;
  }
  return type;
}

AV Analyzer::EvalCollective(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops, const std::string& base) {
  std::optional<DeviceGroups> groups;
  if (base != "collective-permute") {
    groups = Groups(ins);
  }
  const int index = Collective(c, ins, base, groups ? &*groups : nullptr);
  const bool start = ins.opcode == base + "-start";
  auto wrap = [&](AV r) {
    if (start && (base == "all-gather" || base == "collective-permute") && ins.shape.is_tuple && !ops.empty())
      return TupleOf({*ops[0], r});
    return r;
  };
  if (index < 0) return AV{};
  if (base == "all-reduce" || base == "reduce-scatter") {
    // Completing a dot's or reduce's partial sums is computation, not a reshard.
    if (ops.size() == 1 && ops[0]->partial) out_.collectives[index].role = ModuleCollective::Role::kReduction;
    return wrap(Reduction(ins, ops, base, groups ? &*groups : nullptr));
  }
  if (base == "collective-permute") {
    const std::string* p = ins.Attr("source_target_pairs");
    if (ops.empty() || !ops[0]->t || p == nullptr) return AV{};
    Result<std::vector<std::pair<int64_t, int64_t>>> pairs = ParseSourceTargetPairs(*p);
    if (!pairs.ok()) return AV{};
    std::optional<ValueState> st = CollectivePermute(ops[0]->t->state, *pairs);
    if (!st) {
      Note("collective-permute %" + ins.name + " leaves some devices without data; the value is not followed");
      return AV{};
    }
    return wrap(FromTracked(Continue({ops[0]->t}, std::move(*st), ins, true, index)));
  }
  if (!groups) return AV{};
  if (base == "all-gather") {
    std::optional<std::vector<int64_t>> d = IntsAttr(ins, "dimensions", false);
    if (!d || d->size() != 1 || (*d)[0] < 0) return AV{};
    std::vector<AV> outs;
    for (const AV* o : ops) {
      if (!o->t) {
        outs.push_back(AV{});
        continue;
      }
      std::optional<ValueState> st = AllGather(o->t->state, static_cast<size_t>((*d)[0]), *groups);
      outs.push_back(st ? FromTracked(Continue({o->t}, std::move(*st), ins, true, index)) : AV{});
    }
    if (outs.size() == 1 && !(ins.shape.is_tuple && !start)) return wrap(outs[0]);
    return wrap(TupleOf(std::move(outs)));
  }
  if (base == "all-to-all") {
    if (ops.size() > 1 || ins.shape.is_tuple) {
      std::vector<const ValueState*> in;
      std::vector<TPtr> ts;
      for (const AV* o : ops) {
        if (!o->t || o->t->origin != ops[0]->t->origin) return AV{};
        in.push_back(&o->t->state);
        ts.push_back(o->t);
      }
      std::optional<std::vector<ValueState>> outs = AllToAllTuple(in, *groups);
      if (!outs) return AV{};
      std::vector<AV> elems;
      for (ValueState& s : *outs) elems.push_back(FromTracked(Continue(ts, std::move(s), ins, true, index)));
      if (!ins.shape.is_tuple && elems.size() == 1) return elems[0];
      return TupleOf(std::move(elems));
    }
    std::optional<std::vector<int64_t>> d = IntsAttr(ins, "dimensions", false);
    if (!d || d->size() != 1 || (*d)[0] < 0 || ops.empty() || !ops[0]->t) return AV{};
    std::optional<ValueState> st = AllToAll(ops[0]->t->state, static_cast<size_t>((*d)[0]), *groups);
    if (!st) return AV{};
    return FromTracked(Continue({ops[0]->t}, std::move(*st), ins, true, index));
  }
  return AV{};
}

AV Analyzer::Reduction(const HloInstruction& ins, const std::vector<const AV*>& ops, const std::string& base, const DeviceGroups* groups) {
  if (ops.size() != 1 || !ops[0]->partial) return AV{};
  const Partial& p = *ops[0]->partial;
  if (base == "all-reduce" && !p.held.empty() && groups != nullptr) {
    // Each device now sums its group's parts; complete once each has all.
    std::vector<uint64_t> held = p.held;
    for (const std::vector<int64_t>& g : *groups) {
      uint64_t both = 0;
      for (int64_t q : g)
        if (q >= 0 && q < devices_) both |= p.held[static_cast<size_t>(q)];
      for (int64_t q : g)
        if (q >= 0 && q < devices_) held[static_cast<size_t>(q)] = both;
    }
    uint64_t all = 0;
    for (uint64_t h : p.held) all |= h;
    if (std::any_of(held.begin(), held.end(), [all](uint64_t h) { return h != all; })) {
      AV v;
      auto part = std::make_shared<Partial>(p);
      part->held = std::move(held);
      v.partial = std::move(part);
      return v;
    }
  }
  if (base == "all-reduce") {
    // A completed scalar sum is equal on every device (Uniform, as NewArray's).
    if (p.layout.shape.empty()) return Uniform();
    return FromTracked(OriginFromInterpretation(ins, p.layout, p.element_type));
  }
  std::optional<std::vector<int64_t>> d = IntsAttr(ins, "dimensions", false);
  if (!d || d->size() != 1 || groups == nullptr) return AV{};
  ValueState st = RebaseState(p.layout, devices_);
  const size_t dim = static_cast<size_t>((*d)[0]);
  std::vector<int64_t> group_of, pos(static_cast<size_t>(devices_), -1);
  for (const auto& g : *groups)
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] >= 0 && g[i] < devices_) pos[g[i]] = static_cast<int64_t>(i);
  if (dim >= static_cast<size_t>(st.local_rank()) || ins.shape.is_tuple || ins.shape.rank() != st.local_rank()) return AV{};
  const int64_t size = ins.shape.dims[dim];
  std::vector<int64_t> starts(static_cast<size_t>(devices_));
  for (int64_t q = 0; q < devices_; ++q) {
    if (pos[q] < 0 || __builtin_mul_overflow(pos[q], size, &starts[q])) return AV{};
  }
  std::optional<ValueState> sliced = SliceDim(st, dim, starts, size);
  if (!sliced) return AV{};
  std::optional<Interpretation> in = Interpret(*sliced);
  if (!in) return AV{};
  return FromTracked(OriginFromInterpretation(ins, *in, p.element_type));
}

}  // namespace reshard::audit::analysis
