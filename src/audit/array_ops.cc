// The analyzer's ops on arrays (analyzer.h): local ops that keep an array and its
// layout, and ops whose result is a new array with a layout that follows.
#include "audit/analyzer.h"

#include <map>

#include <algorithm>

#include "audit/derived_layout.h"

namespace reshard::audit::analysis {

namespace {

bool SameInterpretation(const Interpretation& a, const Interpretation& b) {
  return a.shape == b.shape && a.local_shape == b.local_shape && a.offsets == b.offsets;
}

}  // namespace

AV Analyzer::Elementwise(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  std::vector<TPtr> tracked;
  bool all_uniform = true;
  for (const AV* o : ops) {
    if (o->partial) return AV{};
    if (o->t) tracked.push_back(o->t);
    all_uniform = all_uniform && (o->uniform || (o->ints && !o->ints->per_device));
  }
  if (tracked.empty()) return all_uniform ? Uniform() : AV{};
  if (ins.shape.is_tuple) return AV{};
  for (const TPtr& t : tracked)
    if (t->state.LocalShape() != ins.shape.dims) return AV{};
  if (ins.opcode == "bitcast-convert" && ins.shape.dims != tracked[0]->state.LocalShape()) return AV{};
  bool same = true;
  for (const TPtr& t : tracked) same = same && t->origin == tracked[0]->origin && t->state.SameAs(tracked[0]->state);
  if (same) return FromTracked(Continue(tracked, tracked[0]->state, ins, false));
  // Different arrays in one layout: their result is a new array in that layout. The
  // partitioner aligns an elementwise op's operands element by element, so an operand
  // that is no layout of its own array (a slice of a stacked array: scan's weights)
  // takes the layout of the others.
  std::optional<Interpretation> first;
  for (const TPtr& t : tracked) {
    std::optional<Interpretation> in = Interpret(t->state);
    if (!in) continue;
    if (!first) first = std::move(in);
    else if (!SameInterpretation(*in, *first)) return AV{};
  }
  if (!first) return AV{};
  return FromTracked(OriginFromInterpretation(ins, *first, ins.shape.element_type));
}

AV Analyzer::Local(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops) {
  if (ops.size() == 1 && ops[0]->partial && !ins.shape.is_tuple) return PartialLocal(c, ins, *ops[0]->partial);
  if (ops.size() != 1 || !ops[0]->t || ins.shape.is_tuple) {
    if (ops.size() == 1 && ops[0]->uniform) return Uniform();
    return AV{};
  }
  const TPtr& t = ops[0]->t;
  std::optional<ValueState> st = LocalState(c, ins, t->state);
  if (!st) return AV{};
  return FromTracked(Continue({t}, std::move(*st), ins, false));
}

std::optional<ValueState> Analyzer::LocalState(const HloComputation& c, const HloInstruction& ins, const ValueState& s) {
  std::optional<ValueState> st;
  if (ins.opcode == "reshape") {
    st = Reshape(s, ins.shape.dims);
  } else if (ins.opcode == "transpose") {
    std::optional<std::vector<int64_t>> perm = IntsAttr(ins, "dimensions", false);
    if (perm) st = Transpose(s, *perm);
  } else if (ins.opcode == "bitcast") {
    st = Bitcast(s, c.instructions[ins.operands[0]].shape, ins.shape);
  } else {
    st = s;  // copy, convert: the same elements
  }
  if (!st || st->LocalShape() != ins.shape.dims) return std::nullopt;
  return st;
}

AV Analyzer::PartialLocal(const HloComputation& c, const HloInstruction& ins, const Partial& p) {
  // Partial sums rearranged before their reduction (XLA bitcasts a dot's result
  // to the shape it all-reduces): the same rearrangement of the layout they will have.
  std::optional<ValueState> st = LocalState(c, ins, RebaseState(p.layout, devices_));
  std::optional<Interpretation> in = st ? Interpret(*st) : std::nullopt;
  if (!in) return AV{};
  AV v;
  auto moved = std::make_shared<Partial>(p);
  moved->layout = std::move(*in);
  v.partial = std::move(moved);
  return v;
}

AV Analyzer::Slice(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  if (ops.empty() || !ops[0]->t || ins.shape.is_tuple) {
    if (!ops.empty() && ops[0]->uniform) return Uniform();
    return AV{};
  }
  const TPtr& t = ops[0]->t;
  const std::vector<int64_t> shape = t->state.LocalShape();
  const size_t rank = shape.size();
  if (ins.shape.dims.size() != rank) return AV{};
  std::vector<std::vector<int64_t>> starts(rank);
  if (ins.opcode == "slice") {
    const std::string* spec = ins.Attr("slice");
    if (spec == nullptr) return AV{};
    std::string_view s = Trim(*spec);
    if (s.size() < 2) return AV{};
    std::vector<std::string_view> parts = SplitTop(s.substr(1, s.size() - 2));
    if (parts.size() != rank) return AV{};
    for (size_t d = 0; d < rank; ++d) {
      std::string_view p = parts[d];
      if (p.size() < 2 || p.front() != '[') return AV{};
      std::vector<std::string_view> f = SplitTop(p.substr(1, p.size() - 2), ':');
      std::optional<std::vector<int64_t>> a = f.size() >= 2 ? ParseIntList(f[0]) : std::nullopt;
      if (!a || a->size() != 1 || (f.size() == 3 && Trim(f[2]) != "1")) return AV{};
      starts[d] = {(*a)[0]};
    }
  } else {
    // dynamic-slice(operand, s0, s1, ...) or dynamic-slice(operand, vector)
    std::vector<IntPtr> idx;
    for (size_t k = 1; k < ops.size(); ++k) idx.push_back(ops[k]->ints);
    for (size_t d = 0; d < rank; ++d) {
      IntPtr v;
      int64_t at = 0;
      if (idx.size() == rank) {
        v = idx[d];
        if (v && v->elements() != 1) v = nullptr;
      } else if (idx.size() == 1 && idx[0] && idx[0]->elements() == static_cast<int64_t>(rank)) {
        v = idx[0];
        at = static_cast<int64_t>(d);
      }
      if (!v) {
        Note("dynamic-slice %" + ins.name + ": offsets not computed from partition-id alone; the value is not followed");
        return AV{};
      }
      const int64_t hi = shape[d] - ins.shape.dims[d];
      if (hi < 0) return AV{};
      if (!v->per_device) {
        starts[d] = {std::clamp(v->At(0, at), int64_t{0}, hi)};
      } else {
        starts[d].resize(static_cast<size_t>(devices_));
        for (int64_t p = 0; p < devices_; ++p) starts[d][p] = std::clamp(v->At(p, at), int64_t{0}, hi);
      }
    }
  }
  std::optional<ValueState> st = t->state;
  for (size_t d = 0; d < rank && st; ++d) {
    if (starts[d].size() == 1 && starts[d][0] == 0 && ins.shape.dims[d] == shape[d]) continue;
    st = SliceDim(*st, d, starts[d], ins.shape.dims[d]);
  }
  if (!st) return AV{};
  TPtr moved = Continue({t}, *st, ins, true);
  // A static slice of whole dims of an unmoved value may be a user's sub-array.
  std::optional<Interpretation> in = Interpret(t->state);
  if (ins.opcode == "slice" && !t->moved && in && in->identity) {
    bool whole_dims = true;
    for (size_t d = 0; d < rank; ++d) {
      if (starts[d].size() == 1 && starts[d][0] == 0 && ins.shape.dims[d] == shape[d]) continue;
      whole_dims = whole_dims && in->local_shape[d] == in->shape[d];
      for (int64_t p = 0; p < devices_; ++p) whole_dims = whole_dims && in->offsets[p * rank + d] == 0;
    }
    if (whole_dims) {
      auto sub = std::make_shared<Tracked::SubArray>();
      for (size_t d = 0; d < rank; ++d) {
        const bool cut = !(starts[d].size() == 1 && starts[d][0] == 0 && ins.shape.dims[d] == shape[d]);
        sub->start.push_back(cut ? starts[d][0] : 0);
        sub->size.push_back(cut ? ins.shape.dims[d] : in->shape[d]);
      }
      sub->state = *st;
      std::const_pointer_cast<Tracked>(moved)->sub = std::move(sub);
    }
  }
  return FromTracked(std::move(moved));
}

AV Analyzer::Pad(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  if (ops.empty() || !ops[0]->t || ins.shape.is_tuple) return AV{};
  const TPtr& t = ops[0]->t;
  const std::string* spec = ins.Attr("padding");
  if (spec == nullptr) return AV{};
  std::vector<std::string_view> dims = SplitTop(*spec, 'x');
  if (dims.size() != static_cast<size_t>(t->state.local_rank())) return AV{};
  std::optional<ValueState> st = t->state;
  for (size_t d = 0; d < dims.size() && st; ++d) {
    std::vector<std::string_view> f = SplitTop(dims[d], '_');
    if (f.size() < 2 || f.size() > 3) return AV{};
    std::optional<std::vector<int64_t>> lo = ParseIntList(f[0]), hi = ParseIntList(f[1]);
    if (!lo || !hi || lo->size() != 1 || hi->size() != 1 || (*lo)[0] != 0 || (f.size() == 3 && Trim(f[2]) != "0")) return AV{};
    st = PadHigh(*st, d, (*hi)[0]);
  }
  if (!st || st->LocalShape() != ins.shape.dims) return AV{};
  return FromTracked(Continue({t}, std::move(*st), ins, true));
}

AV Analyzer::Concat(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  std::optional<std::vector<int64_t>> d = IntsAttr(ins, "dimensions", false);
  if (!d || d->size() != 1 || ops.empty() || ins.shape.is_tuple) return AV{};
  std::vector<TPtr> ts;
  std::vector<const ValueState*> parts;
  for (const AV* o : ops) {
    if (!o->t || o->t->origin != ops[0]->t->origin) return AV{};
    ts.push_back(o->t);
    parts.push_back(&o->t->state);
  }
  if ((*d)[0] < 0) return AV{};
  std::optional<ValueState> st = Concatenate(parts, static_cast<size_t>((*d)[0]));
  if (!st || st->LocalShape() != ins.shape.dims) return AV{};
  return FromTracked(Continue(ts, std::move(*st), ins, true));
}

AV Analyzer::NewArray(const HloInstruction& ins, std::optional<Interpretation> out, bool partial) {
  if (!out || out->local_shape != ins.shape.dims) return AV{};
  // A whole reduction every device made alone: the same scalar everywhere, carried along
  // with the values it meets, not a value of its own.
  if (!partial && out->shape.empty()) return Uniform();
  if (!partial) return FromTracked(OriginFromInterpretation(ins, *out, ins.shape.element_type));
  AV v;
  auto part = std::make_shared<Partial>();
  part->layout = std::move(*out);
  part->name = ins.name;
  part->line = ins.line;
  part->element_type = ins.shape.element_type;
  v.partial = std::move(part);
  return v;
}

AV Analyzer::Broadcast(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  if (ops.size() != 1) return AV{};
  if (!ops[0]->t) return (ops[0]->uniform || (ops[0]->ints && !ops[0]->ints->per_device)) ? Uniform() : AV{};
  std::optional<std::vector<int64_t>> map = IntsAttr(ins, "dimensions", true);
  std::optional<Interpretation> in = Interpret(ops[0]->t->state);
  if (!map || !in || ins.shape.is_tuple) return AV{};
  return NewArray(ins, BroadcastLayout(*in, *map, ins.shape.dims, devices_), false);
}

AV Analyzer::Dot(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  if (ops.size() != 2 || !ops[0]->t || !ops[1]->t || ins.shape.is_tuple) return AV{};
  std::optional<Interpretation> l = Interpret(ops[0]->t->state), r = Interpret(ops[1]->t->state);
  std::optional<std::vector<int64_t>> lb = IntsAttr(ins, "lhs_batch_dims", true), lc = IntsAttr(ins, "lhs_contracting_dims", true),
                                      rb = IntsAttr(ins, "rhs_batch_dims", true), rc = IntsAttr(ins, "rhs_contracting_dims", true);
  if (!l || !r || !lb || !lc || !rb || !rc) return AV{};
  bool partial = false;
  std::optional<Interpretation> out = DotLayout(*l, *r, DotDims{*lb, *lc, *rb, *rc}, devices_, &partial);
  return NewArray(ins, std::move(out), partial);
}

AV Analyzer::Reduce(const HloInstruction& ins, const std::vector<const AV*>& ops) {
  if (ops.size() != 2 || !ops[0]->t || ins.shape.is_tuple) return AV{};
  std::optional<Interpretation> in = Interpret(ops[0]->t->state);
  std::optional<std::vector<int64_t>> reduced = IntsAttr(ins, "dimensions", false);
  if (!in || !reduced) return AV{};
  bool partial = false;
  std::optional<Interpretation> out = ReduceLayout(*in, *reduced, devices_, &partial);
  AV v = NewArray(ins, std::move(out), partial);
  if (v.partial) {
    // Each device's part: where its shard sits along the reduced dims.
    const size_t rank = in->shape.size();
    std::map<std::vector<int64_t>, int> parts;
    std::vector<uint64_t> held(static_cast<size_t>(devices_));
    for (int64_t p = 0; p < devices_ && parts.size() <= 64; ++p) {
      std::vector<int64_t> at;
      for (int64_t d : *reduced) at.push_back(in->offsets[static_cast<size_t>(p) * rank + static_cast<size_t>(d)]);
      const int k = parts.try_emplace(std::move(at), static_cast<int>(parts.size())).first->second;
      if (k < 64) held[static_cast<size_t>(p)] = uint64_t{1} << k;
    }
    if (parts.size() <= 64) {
      auto part = std::make_shared<Partial>(*v.partial);
      part->held = std::move(held);
      v.partial = std::move(part);
    }
  }
  return v;
}

}  // namespace reshard::audit::analysis
