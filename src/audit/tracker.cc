// AnalyzeModule and the analyzer's pass (analyzer.h): bookkeeping, origins from
// sharding attributes, evaluation of each instruction, and the reshards found.
#include "audit/analyzer.h"

#include <algorithm>
#include <climits>
#include <tuple>

#include "audit/derived_layout.h"
#include "reshard/dtype.h"
#include "reshard/hlo_text.h"

namespace reshard::audit::analysis {

namespace {

constexpr int kMaxCallDepth = 32;
constexpr int64_t kMaxEvaluations = int64_t{1} << 21;

const std::vector<std::string_view> kUnary = {
    "copy", "convert", "negate", "abs", "exponential", "log", "tanh", "sqrt", "rsqrt", "cbrt", "ceil", "floor", "sign",
    "cosine", "sine", "tan", "logistic", "not", "round-nearest-afz", "round-nearest-even", "real", "imag", "is-finite",
    "popcnt", "count-leading-zeros", "erf", "exponential-minus-one", "log-plus-one", "reduce-precision", "bitcast-convert"};
const std::vector<std::string_view> kBinary = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                                               "remainder", "and", "or", "xor", "compare", "atan2", "shift-left",
                                               "shift-right-logical", "shift-right-arithmetic", "complex"};
const std::vector<std::string_view> kTernary = {"select", "clamp"};

}  // namespace

const std::vector<std::string_view> kCollectives = {"all-gather", "all-to-all", "collective-permute", "all-reduce",
                                                    "reduce-scatter", "ragged-all-to-all", "collective-broadcast"};

bool Contains(const std::vector<std::string_view>& list, std::string_view op) {
  return std::find(list.begin(), list.end(), op) != list.end();
}

std::string BaseOp(const std::string& op) {
  for (std::string_view suffix : {"-start", "-done", "-update"}) {
    if (op.size() > suffix.size() && op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0)
      return op.substr(0, op.size() - suffix.size());
  }
  return op;
}

std::optional<std::vector<int64_t>> IntsAttr(const HloInstruction& ins, std::string_view key, bool absent_is_empty) {
  const std::string* v = ins.Attr(key);
  if (v == nullptr) return absent_is_empty ? std::optional<std::vector<int64_t>>(std::vector<int64_t>{}) : std::nullopt;
  return ParseIntList(*v);
}

void Analyzer::Run() {
  const HloComputation& entry = m_.computations[m_.entry];
  std::vector<AV> params;
  AV root = Eval(entry, params, 0);
  Stop(root);  // the program's result
  Finish();
}

void Analyzer::Note(const std::string& n) {
  if (std::find(out_.notes.begin(), out_.notes.end(), n) == out_.notes.end() && out_.notes.size() < 50) out_.notes.push_back(n);
}

void Analyzer::Issue(const HloInstruction& ins, const std::string& reason) {
  for (const HloIssue& i : out_.issues)
    if (i.line == ins.line && i.reason == reason) return;
  out_.issues.push_back({ins.line, ins.text.substr(0, 300), reason});
}

void Analyzer::CollectOrigins(const AV& v, std::set<const OriginInfo*>* origins) const {
  if (v.t) origins->insert(v.t->origin.get());
  if (v.tuple)
    for (const AV& e : *v.tuple) CollectOrigins(e, origins);
}

void Analyzer::CollectTracked(const AV& v, std::vector<TPtr>* ts) const {
  if (v.t) ts->push_back(v.t);
  if (v.tuple)
    for (const AV& e : *v.tuple) CollectTracked(e, ts);
}

void Analyzer::Stop(const AV& v) {
  std::vector<TPtr> ts;
  CollectTracked(v, &ts);
  for (const TPtr& t : ts) stopped_.emplace(t->id, t);
}

void Analyzer::MarkUses(const std::vector<const AV*>& ops, const AV& result) {
  std::set<const OriginInfo*> carried;
  CollectOrigins(result, &carried);
  for (const AV* o : ops) {
    std::vector<TPtr> ts;
    CollectTracked(*o, &ts);
    for (const TPtr& t : ts)
      if (!carried.count(t->origin.get())) stopped_.emplace(t->id, t);
  }
}

TPtr Analyzer::NewOrigin(const HloInstruction& ins, ValueState state, const std::string& element_type) {
  auto o = std::make_shared<OriginInfo>();
  o->name = ins.name;
  o->line = ins.line;
  o->element_type = !element_type.empty() ? element_type : ins.shape.is_tuple ? "" : ins.shape.element_type;
  o->state = state;
  auto t = std::make_shared<Tracked>();
  t->origin = std::move(o);
  t->state = std::move(state);
  t->at = ins.name;
  t->line = ins.line;
  t->id = next_id_++;
  return t;
}

TPtr Analyzer::OriginFromInterpretation(const HloInstruction& ins, const Interpretation& in, const std::string& element_type) {
  return NewOrigin(ins, RebaseState(in, devices_), element_type);
}

TPtr Analyzer::Restart(const TPtr& t, const std::string& name, int64_t line, const ValueState* origin_state) {
  auto o = std::make_shared<OriginInfo>();
  o->name = name;
  o->line = line;
  o->element_type = t->origin->element_type;
  o->state = origin_state != nullptr ? *origin_state : t->state;
  auto n = std::make_shared<Tracked>();
  n->origin = std::move(o);
  n->state = t->state;
  n->at = t->at;
  n->line = t->line;
  n->id = next_id_++;
  return n;
}

TPtr Analyzer::Continue(const std::vector<TPtr>& from_in, ValueState state, const HloInstruction& ins, bool move, int collective) {
  std::vector<TPtr> from = from_in;
  // XLA's fallback ends once the whole array is cut down to a layout: a later move
  // through a collective is the next reshard, from that layout.
  if (collective >= 0 && from.size() == 1 && from[0]->good && from[0]->good->whole &&
      !HoldsWholeArray(from[0]->good->state) && from[0]->good->collectives == from[0]->collectives) {
    stopped_.emplace(from[0]->id, from[0]);
    from[0] = Restart(from[0], from[0]->good->at, from[0]->good->line, &from[0]->good->state);
  }
  auto t = std::make_shared<Tracked>(*from[0]);
  for (size_t k = 1; k < from.size(); ++k) {
    for (int c : from[k]->collectives)
      if (std::find(t->collectives.begin(), t->collectives.end(), c) == t->collectives.end()) t->collectives.push_back(c);
    t->whole = t->whole || from[k]->whole;
    t->moved = t->moved || from[k]->moved;
    if (!t->unmoved && from[k]->unmoved) {
      t->unmoved = from[k]->unmoved;
      t->unmoved_signature = from[k]->unmoved_signature;
    }
  }
  t->state = std::move(state);
  t->id = next_id_++;
  t->at = ins.name;
  t->line = ins.line;
  if (move && !t->moved) {
    t->moved = true;
    t->unmoved = std::make_shared<ValueState>(from[0]->state);
    std::optional<Interpretation> u = Interpret(from[0]->state);
    if (u) t->unmoved_signature = std::make_shared<std::vector<std::vector<int64_t>>>(u->signature);
  }
  if (collective >= 0 && std::find(t->collectives.begin(), t->collectives.end(), collective) == t->collectives.end())
    t->collectives.push_back(collective);
  if (t->moved) {
    if (HoldsWholeArray(t->state)) t->whole = true;
    std::optional<Interpretation> in = Interpret(t->state);
    if (in && (in->identity || (t->unmoved_signature && *t->unmoved_signature == in->signature))) {
      auto g = std::make_shared<Good>();
      g->state = t->state;
      g->collectives = t->collectives;
      g->whole = t->whole;
      g->at = ins.name;
      g->line = ins.line;
      t->good = std::move(g);
    }
  }
  return t;
}

std::optional<ValueState> Analyzer::StateFromSharding(const std::string& text, const HloShape& shape, const HloInstruction& ins) {
  if (shape.is_tuple || shape.rank() == 0) return std::nullopt;
  Result<HloSharding> s = ParseHloSharding(text);
  if (!s.ok()) {
    if (s.status().code() == Status::Code::kNotSupported) Note("%" + ins.name + ": sharding " + text + " is not followed: " + s.status().message());
    else Issue(ins, "sharding not understood: " + s.status().message());
    return std::nullopt;
  }
  if (std::holds_alternative<HloSharding::Replicated>(s->kind())) return TiledState(shape.dims, shape.dims, {}, devices_);
  const auto* tiled = std::get_if<HloSharding::Tiled>(&s->kind());
  if (tiled == nullptr) return std::nullopt;
  const TileAssignment& ta = tiled->tiles;
  const int64_t rank = shape.rank();
  if (static_cast<int64_t>(ta.dims().size()) != rank + (tiled->replicate_last ? 1 : 0) || ta.num_devices() != devices_) {
    Note("%" + ins.name + ": sharding " + text + " does not match its shape or the module's " + std::to_string(devices_) + " partitions");
    return std::nullopt;
  }
  std::vector<std::vector<int64_t>> tile_of(static_cast<size_t>(devices_));
  std::vector<int64_t> coords(ta.dims().size());
  for (int64_t f = 0; f < ta.num_devices(); ++f) {
    int64_t r = f;
    for (size_t k = ta.dims().size(); k-- > 0;) {
      coords[k] = r % ta.dims()[k];
      r /= ta.dims()[k];
    }
    const int64_t dev = ta.device(f);
    if (dev < 0 || dev >= devices_ || !tile_of[dev].empty()) return std::nullopt;
    tile_of[dev].assign(coords.begin(), coords.begin() + rank);
  }
  std::vector<int64_t> global(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    if (__builtin_mul_overflow(shape.dims[d], ta.dims()[d], &global[d]) || global[d] > (int64_t{1} << 50)) return std::nullopt;
  return TiledState(global, shape.dims, tile_of, devices_);
}

void Analyzer::ApplySharding(const HloInstruction& ins, AV* v) {
  const std::string* sharding = ins.Attr("sharding");
  if (sharding == nullptr) return;
  if (!ins.shape.is_tuple) {
    if (v->t || v->tuple) return;
    std::optional<ValueState> st = StateFromSharding(*sharding, ins.shape, ins);
    if (st) {
      v->t = NewOrigin(ins, std::move(*st));
      v->uniform = false;
    }
    return;
  }
  // Tuple shardings: {{...}, {...}}.
  std::string_view text = Trim(*sharding);
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') return;
  std::vector<std::string_view> parts = SplitTop(text.substr(1, text.size() - 2));
  if (parts.size() != ins.shape.elements.size()) return;
  for (std::string_view p : parts)
    if (p.empty() || p[0] != '{') return;
  std::vector<AV> elems = v->tuple ? *v->tuple : std::vector<AV>(parts.size());
  if (elems.size() != parts.size()) return;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (elems[k].t || ins.shape.elements[k].is_tuple) continue;
    std::optional<ValueState> st = StateFromSharding(std::string(parts[k]), ins.shape.elements[k], ins);
    if (st) elems[k].t = NewOrigin(ins, std::move(*st));
  }
  v->tuple = std::make_shared<const std::vector<AV>>(std::move(elems));
}

AV Analyzer::Eval(const HloComputation& c, const std::vector<AV>& params, int depth) {
  if (depth > kMaxCallDepth) {
    Note("calls nested deeper than " + std::to_string(kMaxCallDepth) + " are not followed");
    return AV{};
  }
  std::vector<int> order = TopoOrder(c);
  std::vector<AV> values(c.instructions.size());
  for (int i : order) {
    if (++evaluations_ > kMaxEvaluations) {
      Note("the module is too large to follow completely; stopped after " + std::to_string(kMaxEvaluations) + " instructions");
      return AV{};
    }
    const HloInstruction& ins = c.instructions[i];
    std::vector<const AV*> ops;
    for (int o : ins.operands) ops.push_back(&values[o]);
    values[i] = EvalInstruction(c, ins, ops, params, depth);
    ApplySharding(ins, &values[i]);
  }
  if (c.root < 0) return AV{};
  return values[c.root];
}

std::vector<int> Analyzer::TopoOrder(const HloComputation& c) {
  const int n = static_cast<int>(c.instructions.size());
  std::vector<int> state(n, 0), order;
  order.reserve(n);
  std::vector<std::pair<int, size_t>> stack;
  for (int s = 0; s < n; ++s) {
    if (state[s]) continue;
    stack.emplace_back(s, 0);
    state[s] = 1;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const auto& operands = c.instructions[node].operands;
      if (next < operands.size()) {
        const int o = operands[next++];
        if (state[o] == 0) {
          state[o] = 1;
          stack.emplace_back(o, 0);
        }
        continue;
      }
      state[node] = 2;
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

const HloComputation* Analyzer::Callee(const HloInstruction& ins, std::string_view key) {
  const std::string* name = ins.Attr(key);
  if (name == nullptr) return nullptr;
  return m_.Find(Trim(*name));
}

AV Analyzer::Uniform() {
  AV v;
  v.uniform = true;
  return v;
}

AV Analyzer::FromTracked(TPtr t) {
  AV v;
  v.t = std::move(t);
  return v;
}

AV Analyzer::TupleOf(std::vector<AV> elems) {
  AV v;
  v.tuple = std::make_shared<const std::vector<AV>>(std::move(elems));
  return v;
}

AV Analyzer::EvalInstruction(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops,
                             const std::vector<AV>& params, int depth) {
  const std::string& op = ins.opcode;
  AV result = EvalCore(c, ins, ops, params, depth);
  // Integer data (offsets) flows alongside.
  if (!result.ints && !result.t && !result.tuple && op != "parameter" && op != "get-tuple-element") {
    if (op == "constant") {
      result.ints = IntConstant(ins);
      result.uniform = true;
    } else if (op == "partition-id") {
      result.ints = PartitionIds(devices_);
    } else if (op == "replica-id") {
      result.ints = std::make_shared<IntData>(IntData{{}, false, {0}});
      result.uniform = true;
    } else if (!ins.shape.is_tuple) {
      std::vector<IntPtr> in;
      bool any = false;
      for (const AV* o : ops) {
        in.push_back(o->ints);
        any = any || o->ints;
      }
      if (any || op == "iota") result.ints = EvalInt(ins, in, devices_);
    }
  }
  const bool structural = op == "fusion" || op == "call" || op == "async-start" || op == "parameter" ||
                          op == "tuple" || op == "get-tuple-element";
  if (!structural) MarkUses(ops, result);
  return result;
}

AV Analyzer::EvalCore(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops,
                      const std::vector<AV>& params, int depth) {
  const std::string& op = ins.opcode;
  const std::string base = BaseOp(op);
  if (ins.opcode.empty()) return AV{};  // a line the reader did not understand
  if (op == "parameter") {
    std::optional<std::vector<int64_t>> n = ParseIntList(ins.literal);
    if (n && n->size() == 1 && (*n)[0] >= 0 && static_cast<size_t>((*n)[0]) < params.size()) return params[(*n)[0]];
    return AV{};
  }
  if (op == "constant" || op == "iota" || op == "rng-bit-generator" || op == "rng") return Uniform();
  if (op == "partition-id" || op == "replica-id") return AV{};
  if (op == "tuple") {
    std::vector<AV> elems;
    for (const AV* o : ops) elems.push_back(*o);
    return TupleOf(std::move(elems));
  }
  if (op == "get-tuple-element") {
    std::optional<std::vector<int64_t>> idx = IntsAttr(ins, "index", false);
    if (ops.size() == 1 && ops[0]->tuple && idx && idx->size() == 1 && (*idx)[0] >= 0 &&
        static_cast<size_t>((*idx)[0]) < ops[0]->tuple->size())
      return (*ops[0]->tuple)[(*idx)[0]];
    return AV{};
  }
  if (op == "fusion" || op == "call" || op == "async-start") return Call(ins, ops, depth);
  if (op == "while") return While(ins, ops, depth);
  if (op == "conditional") return Conditional(ins, ops, depth);
  if (op == "async-update" || op == "optimization-barrier" || op == "add-dependency" || op == "domain") {
    return ops.empty() ? AV{} : *ops[0];
  }
  if (op == "async-done") {
    if (ops.size() == 1 && ops[0]->tuple && ops[0]->tuple->size() >= 2) return (*ops[0]->tuple)[1];
    return AV{};
  }
  if (op == "copy-start") return ops.empty() ? AV{} : TupleOf({*ops[0], *ops[0], AV{}});
  if (op == "copy-done") {
    if (ops.size() == 1 && ops[0]->tuple && !ops[0]->tuple->empty()) return (*ops[0]->tuple)[0];
    return AV{};
  }
  if (op == "all-gather-done" || op == "collective-permute-done") {
    if (ops.size() == 1 && ops[0]->tuple && ops[0]->tuple->size() >= 2) return (*ops[0]->tuple)[1];
    return ops.size() == 1 ? *ops[0] : AV{};
  }
  if (op == "all-reduce-done") return ops.size() == 1 ? *ops[0] : AV{};
  if (Contains(kCollectives, base)) return EvalCollective(c, ins, ops, base);
  if ((op == "copy" || op == "convert") && ops.size() == 1 && ops[0]->partial && !ins.shape.is_tuple)
    return PartialLocal(c, ins, *ops[0]->partial);
  if (Contains(kUnary, op) || Contains(kBinary, op) || Contains(kTernary, op)) return Elementwise(ins, ops);
  if (op == "broadcast") return Broadcast(ins, ops);
  if (op == "reshape" || op == "bitcast" || op == "transpose") return Local(c, ins, ops);
  if (op == "slice" || op == "dynamic-slice") return Slice(ins, ops);
  if (op == "pad") return Pad(ins, ops);
  if (op == "concatenate") return Concat(ins, ops);
  if (op == "dot") return Dot(ins, ops);
  if (op == "reduce") return Reduce(ins, ops);
  return AV{};
}

std::optional<ValueState> Analyzer::Crop(const ValueState& s, const std::vector<int64_t>& start, const std::vector<int64_t>& size) {
  if (static_cast<int64_t>(start.size()) != s.rank()) return std::nullopt;
  ValueState r = s;
  r.global_shape = size;
  auto o = std::make_shared<std::vector<int64_t>>(*s.offsets);
  for (int64_t p = 0; p < s.devices; ++p)
    for (int64_t g = 0; g < s.rank(); ++g) {
      int64_t& v = (*o)[p * s.rank() + g];
      v -= start[g];
      if (v < 0) return std::nullopt;
    }
  r.offsets = std::move(o);
  return r;
}

void Analyzer::Finish() {
  std::vector<std::tuple<const OriginInfo*, std::vector<int>, size_t>> seen;
  // A value used in a layout and moved on from it (returned as B and also
  // resharded back to A) forks there: what the other use took is a reshard
  // of its own, and the moves after the fork start from that layout. Per
  // origin, the layouts its uses ended in, with the collectives to each.
  std::map<const OriginInfo*, std::vector<const Good*>> ends;
  for (const auto& [id, t] : stopped_)
    if (t->moved && t->good && !t->good->collectives.empty()) ends[t->origin.get()].push_back(t->good.get());
  auto sorted = [](std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  for (const auto& [id, t] : stopped_) {
    (void)id;
    if (!t->moved || !t->good || t->good->collectives.empty()) continue;
    const Good& g = *t->good;
    std::optional<Interpretation> to = Interpret(g.state);
    if (!to) continue;
    // The fork this value's moves pass: the end, among its origin's others,
    // reached by the most of its collectives and no other.
    const Good* fork = nullptr;
    const std::vector<int> mine = sorted(g.collectives);
    for (const Good* e : ends[t->origin.get()]) {
      if (e == &g || e->collectives.size() >= g.collectives.size()) continue;
      const std::vector<int> theirs = sorted(e->collectives);
      if (!std::includes(mine.begin(), mine.end(), theirs.begin(), theirs.end())) continue;
      if (!fork || e->collectives.size() > fork->collectives.size()) fork = e;
    }
    std::optional<Interpretation> from = to->identity ? Interpret(t->origin->state) : (t->unmoved ? Interpret(*t->unmoved) : std::nullopt);
    if (fork) {
      std::optional<Interpretation> at = Interpret(fork->state);
      if (at && at->shape == to->shape) from = std::move(at);
      else fork = nullptr;
    }
    if (t->sub && (!from || from->shape != to->shape || !ToLayout(*to, DType::kU8).ok())) {
      // Read both ends as layouts of the sub-array the value was sliced to.
      std::optional<ValueState> a = Crop(t->sub->state, t->sub->start, t->sub->size);
      std::optional<ValueState> b = Crop(g.state, t->sub->start, t->sub->size);
      if (a && b) {
        from = Interpret(*a);
        to = Interpret(*b);
        if (!from || !to) continue;
      }
    }
    if (!from || from->shape != to->shape) continue;
    std::vector<int> cs = g.collectives;
    std::sort(cs.begin(), cs.end());
    if (fork) {
      const std::vector<int> before = sorted(fork->collectives);
      std::vector<int> after;
      std::set_difference(cs.begin(), cs.end(), before.begin(), before.end(), std::back_inserter(after));
      cs = std::move(after);
    }
    ModuleReshard r;
    r.from_instruction = fork ? fork->at : t->origin->name;
    r.from_line = fork ? fork->line : t->origin->line;
    r.to_instruction = g.at;
    r.to_line = g.line;
    r.shape = to->shape;
    r.element_type = t->origin->element_type;
    r.source_local_shape = fork ? fork->state.LocalShape() : t->unmoved ? t->unmoved->LocalShape() : t->origin->state.LocalShape();
    r.collectives = cs;
    for (size_t k = 0; k < cs.size(); ++k) {
      const std::string& e = out_.collectives[cs[k]].element_type;
      if (k == 0) r.moved_element_type = e;
      else if (e != r.moved_element_type) r.moved_element_type.clear();
    }
    r.through_whole_array = g.whole && !HoldsWholeArray(g.state) && !(fork && fork->whole);
    Result<DType> dtype = ParseDType(r.element_type);
    if (!dtype.ok()) {
      Note("the reshard of %" + r.from_instruction + " has element type " + r.element_type + ", which the planner does not price");
      continue;
    }
    Result<Layout> lf = ToLayout(*from, *dtype), lt = ToLayout(*to, *dtype);
    if (!lf.ok() || !lt.ok()) {
      Note("the reshard of %" + r.from_instruction + " at %" + r.to_instruction + " is not a pair of tiled layouts: " +
           (lf.ok() ? lt.status().message() : lf.status().message()));
      continue;
    }
    bool dup = false;
    for (const auto& [o, c, index] : seen) dup = dup || (o == t->origin.get() && c == cs && *out_.reshards[index].to == *lt);
    if (dup) continue;
    seen.emplace_back(t->origin.get(), cs, out_.reshards.size());
    r.from = std::move(lf).value();
    r.to = std::move(lt).value();
    std::vector<int64_t> per_device(static_cast<size_t>(devices_), 0);
    for (int c : cs)
      for (int64_t p = 0; p < devices_; ++p)
        if (__builtin_add_overflow(per_device[p], out_.collectives[c].RecvOf(p), &per_device[p])) per_device[p] = INT64_MAX;
    r.max_recv_bytes = *std::max_element(per_device.begin(), per_device.end());
    // It runs as often as its collectives; where they sit in different loops, the least.
    r.trip_count = out_.collectives[cs[0]].executions;
    r.loop = out_.collectives[cs[0]].loop;
    // Its branches: the innermost around any of its collectives (a value
    // moved before a conditional and on inside a branch ends in that branch,
    // and runs only when it runs); where they sit in branches apart, those
    // around all of them.
    r.branch = out_.collectives[cs[0]].branch;
    for (int c : cs) {
      const BranchPath& b = out_.collectives[c].branch;
      size_t k = 0;
      while (k < r.branch.size() && k < b.size() && r.branch[k] == b[k]) ++k;
      if (k == r.branch.size()) r.branch = b;            // b as deep or deeper on the same path
      else if (k < b.size()) r.branch.resize(k);         // apart: the common prefix
    }
    for (int c : cs) {
      const ModuleCollective& mc = out_.collectives[c];
      if (mc.executions == r.trip_count && mc.loop == r.loop) continue;
      Note("the reshard of %" + r.from_instruction + " at %" + r.to_instruction +
           " has collectives inside and outside a loop; it is counted as often as the one that runs least");
      if (mc.executions != 0 && (r.trip_count == 0 || mc.executions < r.trip_count)) {
        r.trip_count = mc.executions;
        r.loop = mc.loop;
      }
    }
    for (int c : cs) out_.collectives[c].role = ModuleCollective::Role::kReshard;
    out_.reshards.push_back(std::move(r));
  }
  std::sort(out_.reshards.begin(), out_.reshards.end(), [](const ModuleReshard& a, const ModuleReshard& b) {
    return std::tie(a.from_line, a.to_line) < std::tie(b.from_line, b.to_line);
  });
  // No silent gaps: every collective is part of a reshard, a reduction of partial sums, or named here.
  std::string unattributed;
  int64_t count = 0;
  for (const ModuleCollective& c : out_.collectives) {
    if (c.role != ModuleCollective::Role::kNone) continue;
    if (count++ < 8) unattributed += std::string(count > 1 ? ", " : "") + "%" + c.name + " (" + c.op + ", line " + std::to_string(c.line) + ")";
  }
  if (count > 0)
    Note(std::to_string(count) + " collective" + (count > 1 ? "s are" : " is") + " part of no reshard found: " + unattributed +
         (count > 8 ? ", ..." : "") + "; the values " + (count > 1 ? "they move" : "it moves") + " are not followed to a layout");
}

}  // namespace reshard::audit::analysis

namespace reshard::audit {

namespace {
constexpr int64_t kMaxTrackedDevices = int64_t{1} << 16;
}  // namespace

int64_t ModuleCollective::MaxRecv() const {
  int64_t m = 0;
  for (int64_t b : recv_bytes) m = std::max(m, b);
  return m;
}

ModuleAnalysis AnalyzeModule(const HloModule& module, int64_t max_devices) {
  ModuleAnalysis out;
  out.devices = module.num_partitions;
  if (module.entry < 0) {
    out.notes.push_back("the module has no ENTRY computation");
    return out;
  }
  if (module.replica_count > 1 && module.num_partitions > 1) {
    out.notes.push_back("modules with both replicas and partitions are not audited");
    return out;
  }
  if (module.num_partitions < 2) {
    out.notes.push_back("the module is not partitioned (num_partitions=1): nothing to audit");
    return out;
  }
  if (module.num_partitions > std::min(max_devices, kMaxTrackedDevices)) {
    out.notes.push_back("modules of more than " + std::to_string(std::min(max_devices, kMaxTrackedDevices)) + " partitions are not audited");
    return out;
  }
  for (const HloComputation& c : module.computations)
    for (const HloInstruction& i : c.instructions)
      if (i.opcode == "custom-call") {
        const std::string* target = i.Attr("custom_call_target");
        if (target && (*target == "\"Sharding\"" || *target == "\"SPMDFullToShardShape\"")) {
          out.notes.push_back("the module is not SPMD-partitioned yet (it holds Sharding custom-calls): audit the module after optimizations");
          return out;
        }
      }
  for (const HloComputation& c : module.computations)
    for (const HloInstruction& i : c.instructions)
      if (i.opcode == "constant" && i.literal.find("...") != std::string::npos) {
        out.notes.push_back("large constants are elided as {...} in this text (e.g. %" + i.name +
                            "), so offsets read from them cannot be computed: dump with XLA_FLAGS=--xla_dump_large_constants");
        goto done;
      }
done:
  analysis::Analyzer a(module, out);
  a.Run();
  return out;
}

}  // namespace reshard::audit

