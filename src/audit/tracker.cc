#include "audit/tracker.h"

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_set>

#include "audit/derived_layout.h"
#include "audit/int_eval.h"
#include "audit/replica_groups.h"
#include "audit/value_state.h"
#include "reshard/dtype.h"
#include "reshard/hlo_text.h"

namespace reshard::audit {
namespace {

constexpr int kMaxCallDepth = 32;
constexpr int64_t kMaxTrackedDevices = int64_t{1} << 16;
constexpr int64_t kMaxEvaluations = int64_t{1} << 21;

struct OriginInfo {
  std::string name;
  int64_t line = 0;
  std::string element_type;
  ValueState state;
};

struct Good {
  ValueState state;
  std::vector<int> collectives;
  bool whole = false;
  std::string at;
  int64_t line = 0;
};

// One array value being followed.
struct Tracked {
  std::shared_ptr<const OriginInfo> origin;
  ValueState state;
  bool moved = false;
  bool whole = false;  // held the whole array on every device after moving
  std::vector<int> collectives;
  std::shared_ptr<const ValueState> unmoved;  // the state before the first move
  std::shared_ptr<const std::vector<std::vector<int64_t>>> unmoved_signature;
  std::shared_ptr<const Good> good;  // last moved state that is a layout of the origin's array
  // A static slice of whole, unmoved dims: the value may be that sub-array
  // (a user's x[:10]) rather than a step of XLA's reshard; Finish tries both.
  struct SubArray {
    std::vector<int64_t> start, size;  // per global dim
    ValueState state;                  // right after the slice
  };
  std::shared_ptr<const SubArray> sub;
  std::string at;
  int64_t line = 0;
  int64_t id = 0;
};
using TPtr = std::shared_ptr<const Tracked>;

// A dot's result before the reduction over its split contracting dims.
struct Partial {
  Interpretation layout;
  std::string name, element_type;
  int64_t line = 0;
};

// The abstract value of one instruction.
struct AV {
  TPtr t;
  IntPtr ints;
  std::shared_ptr<const std::vector<AV>> tuple;
  std::shared_ptr<const Partial> partial;
  bool uniform = false;  // equal on every device and not followed (constants, broadcast scalars, iota)
};

bool Contains(const std::vector<std::string_view>& list, std::string_view op) {
  return std::find(list.begin(), list.end(), op) != list.end();
}

const std::vector<std::string_view> kUnary = {
    "copy", "convert", "negate", "abs", "exponential", "log", "tanh", "sqrt", "rsqrt", "cbrt", "ceil", "floor", "sign",
    "cosine", "sine", "tan", "logistic", "not", "round-nearest-afz", "round-nearest-even", "real", "imag", "is-finite",
    "popcnt", "count-leading-zeros", "erf", "exponential-minus-one", "log-plus-one", "reduce-precision", "bitcast-convert"};
const std::vector<std::string_view> kBinary = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                                               "remainder", "and", "or", "xor", "compare", "atan2", "shift-left",
                                               "shift-right-logical", "shift-right-arithmetic", "complex"};
const std::vector<std::string_view> kTernary = {"select", "clamp"};
const std::vector<std::string_view> kCollectives = {"all-gather", "all-to-all", "collective-permute", "all-reduce",
                                                    "reduce-scatter", "ragged-all-to-all", "collective-broadcast"};

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

bool SameInterpretation(const Interpretation& a, const Interpretation& b) {
  return a.shape == b.shape && a.local_shape == b.local_shape && a.offsets == b.offsets;
}

class Analyzer {
 public:
  Analyzer(const HloModule& m, ModuleAnalysis& out) : m_(m), out_(out), devices_(out.devices) {}

  void Run() {
    const HloComputation& entry = m_.computations[m_.entry];
    std::vector<AV> params;
    AV root = Eval(entry, params, 0);
    Stop(root);  // the program's result
    Finish();
  }

 private:
  // ---- bookkeeping -------------------------------------------------------
  void Note(const std::string& n) {
    if (std::find(out_.notes.begin(), out_.notes.end(), n) == out_.notes.end() && out_.notes.size() < 50) out_.notes.push_back(n);
  }
  void Issue(const HloInstruction& ins, const std::string& reason) {
    for (const HloIssue& i : out_.issues)
      if (i.line == ins.line && i.reason == reason) return;
    out_.issues.push_back({ins.line, ins.text.substr(0, 300), reason});
  }

  void CollectOrigins(const AV& v, std::set<const OriginInfo*>* origins) const {
    if (v.t) origins->insert(v.t->origin.get());
    if (v.tuple)
      for (const AV& e : *v.tuple) CollectOrigins(e, origins);
  }
  void CollectTracked(const AV& v, std::vector<TPtr>* ts) const {
    if (v.t) ts->push_back(v.t);
    if (v.tuple)
      for (const AV& e : *v.tuple) CollectTracked(e, ts);
  }
  // `v` is consumed by something that does not carry it on.
  void Stop(const AV& v) {
    std::vector<TPtr> ts;
    CollectTracked(v, &ts);
    for (const TPtr& t : ts) stopped_.emplace(t->id, t);
  }
  // Marks each operand value the result does not carry on as ended.
  void MarkUses(const std::vector<const AV*>& ops, const AV& result) {
    std::set<const OriginInfo*> carried;
    CollectOrigins(result, &carried);
    for (const AV* o : ops) {
      std::vector<TPtr> ts;
      CollectTracked(*o, &ts);
      for (const TPtr& t : ts)
        if (!carried.count(t->origin.get())) stopped_.emplace(t->id, t);
    }
  }

  TPtr NewOrigin(const HloInstruction& ins, ValueState state, const std::string& element_type = "") {
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

  TPtr OriginFromInterpretation(const HloInstruction& ins, const Interpretation& in, const std::string& element_type) {
    return NewOrigin(ins, RebaseState(in, devices_), element_type);
  }

  // Carries `from` on to `state` at `ins`; `move`: the elements held change.
  TPtr Continue(const std::vector<TPtr>& from, ValueState state, const HloInstruction& ins, bool move, int collective = -1) {
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

  int RecordCollective(const HloComputation& c, const HloInstruction& ins, const std::string& op, int64_t group_size,
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
    if (recv.size() > 1 && std::all_of(recv.begin(), recv.end(), [&](int64_t b) { return b == recv[0]; })) recv.resize(1);
    mc.recv_bytes = std::move(recv);
    out_.collectives.push_back(std::move(mc));
    const int index = static_cast<int>(out_.collectives.size()) - 1;
    collective_index_[key] = index;
    return index;
  }

  // ---- origins from sharding attributes -----------------------------------
  std::optional<ValueState> StateFromSharding(const std::string& text, const HloShape& shape, const HloInstruction& ins) {
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

  // Gives an untracked result the layout its sharding attribute states.
  void ApplySharding(const HloInstruction& ins, AV* v) {
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

  // ---- evaluation --------------------------------------------------------
  AV Eval(const HloComputation& c, const std::vector<AV>& params, int depth) {
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

  static std::vector<int> TopoOrder(const HloComputation& c) {
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

  const HloComputation* Callee(const HloInstruction& ins, std::string_view key) {
    const std::string* name = ins.Attr(key);
    if (name == nullptr) return nullptr;
    return m_.Find(Trim(*name));
  }

  std::optional<DeviceGroups> Groups(const HloInstruction& ins) {
    Result<DeviceGroups> g = ReadReplicaGroups(ins, devices_);
    if (!g.ok()) {
      Issue(ins, "replica groups not understood: " + g.status().message());
      return std::nullopt;
    }
    return std::move(g).value();
  }

  int64_t OperandBytes(const HloComputation& c, const HloInstruction& ins) const {
    int64_t sum = 0;
    for (int o : ins.operands) {
      const int64_t b = ShapeBytes(c.instructions[o].shape);
      if (b < 0) return -1;
      sum += b;
    }
    return sum;
  }

  // The collective's output shape (for -start forms, the output inside the tuple).
  static HloShape OutputShape(const HloInstruction& ins, const std::string& base) {
    if (ins.opcode == base + "-start" && ins.shape.is_tuple && ins.shape.elements.size() >= 2 &&
        (base == "all-gather" || base == "collective-permute"))
      return ins.shape.elements[1];
    return ins.shape;
  }

  // Records a collective's bytes; returns its index, or -1.
  int Collective(const HloComputation& c, const HloInstruction& ins, const std::string& base, const DeviceGroups* groups) {
    const int64_t in = OperandBytes(c, ins);
    const int64_t out = ShapeBytes(OutputShape(ins, base));
    if (in < 0 || out < 0) {
      Issue(ins, "element type not understood");
      return -1;
    }
    int64_t k = groups ? static_cast<int64_t>((*groups)[0].size()) : 0;
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

  // The element type of the data a collective moves: its array operands' (all of one type), or "".
  static std::string MovedElementType(const HloComputation& c, const HloInstruction& ins) {
    std::string type;
    for (int o : ins.operands) {
      const HloShape& s = c.instructions[o].shape;
      if (s.is_tuple) return "";
      if (!type.empty() && type != s.element_type) return "";
      type = s.element_type;
    }
    return type;
  }

  static AV Uniform() {
    AV v;
    v.uniform = true;
    return v;
  }
  static AV FromTracked(TPtr t) {
    AV v;
    v.t = std::move(t);
    return v;
  }
  static AV TupleOf(std::vector<AV> elems) {
    AV v;
    v.tuple = std::make_shared<const std::vector<AV>>(std::move(elems));
    return v;
  }

  AV EvalInstruction(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops,
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

  AV EvalCore(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops,
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
    if (op == "fusion" || op == "call" || op == "async-start") {
      const HloComputation* callee = Callee(ins, op == "call" ? "to_apply" : "calls");
      if (callee == nullptr) {
        Issue(ins, "called computation not found");
        for (const AV* o : ops) Stop(*o);
        return AV{};
      }
      std::vector<AV> args;
      for (const AV* o : ops) args.push_back(*o);
      AV r = Eval(*callee, args, depth + 1);
      if (op != "async-start") return r;
      return TupleOf({TupleOf(args), r, AV{}});
    }
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
    if (op == "while" || op == "conditional") {
      for (std::string_view key : {"body", "condition", "branch_computations", "true_computation", "false_computation"}) {
        const std::string* callees = ins.Attr(key);
        if (callees && HasCollectives(*callees, 0)) Note("collectives inside %" + ins.name + " (" + op + ") are not followed");
      }
      return AV{};
    }
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

  bool HasCollectives(const std::string& callees, int depth) {
    if (depth > 8) return false;
    std::string_view t = Trim(callees);
    if (!t.empty() && t.front() == '{' && t.back() == '}') t = t.substr(1, t.size() - 2);
    for (std::string_view name : SplitTop(t)) {
      const HloComputation* comp = m_.Find(Trim(name));
      if (comp == nullptr) continue;
      for (const HloInstruction& i : comp->instructions) {
        if (Contains(kCollectives, BaseOp(i.opcode))) return true;
        for (std::string_view key : {"calls", "to_apply", "body"}) {
          const std::string* sub = i.Attr(key);
          if (sub && HasCollectives(*sub, depth + 1)) return true;
        }
      }
    }
    return false;
  }

  // ---- ops that keep the array and its layout ------------------------------
  AV Elementwise(const HloInstruction& ins, const std::vector<const AV*>& ops) {
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
    // Different arrays in one layout: their result is a new array in that layout.
    std::optional<Interpretation> first = Interpret(tracked[0]->state);
    if (!first) return AV{};
    for (size_t k = 1; k < tracked.size(); ++k) {
      std::optional<Interpretation> in = Interpret(tracked[k]->state);
      if (!in || !SameInterpretation(*in, *first)) return AV{};
    }
    return FromTracked(OriginFromInterpretation(ins, *first, ins.shape.element_type));
  }

  AV Local(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops) {
    if (ops.size() != 1 || !ops[0]->t || ins.shape.is_tuple) {
      if (ops.size() == 1 && ops[0]->uniform) return Uniform();
      return AV{};
    }
    const TPtr& t = ops[0]->t;
    std::optional<ValueState> st;
    if (ins.opcode == "reshape") {
      st = Reshape(t->state, ins.shape.dims);
    } else if (ins.opcode == "transpose") {
      std::optional<std::vector<int64_t>> perm = IntsAttr(ins, "dimensions", false);
      if (perm) st = Transpose(t->state, *perm);
    } else {
      st = Bitcast(t->state, c.instructions[ins.operands[0]].shape, ins.shape);
    }
    if (!st || st->LocalShape() != ins.shape.dims) return AV{};
    return FromTracked(Continue({t}, std::move(*st), ins, false));
  }

  AV Slice(const HloInstruction& ins, const std::vector<const AV*>& ops) {
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

  AV Pad(const HloInstruction& ins, const std::vector<const AV*>& ops) {
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

  AV Concat(const HloInstruction& ins, const std::vector<const AV*>& ops) {
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

  // ---- collectives ---------------------------------------------------------
  AV EvalCollective(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops, const std::string& base) {
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
    if (base == "all-reduce" || base == "reduce-scatter") return wrap(Reduction(ins, ops, base, groups ? &*groups : nullptr));
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

  // all-reduce / reduce-scatter of a partial dot: the dot's result, complete.
  AV Reduction(const HloInstruction& ins, const std::vector<const AV*>& ops, const std::string& base, const DeviceGroups* groups) {
    if (ops.size() != 1 || !ops[0]->partial) return AV{};
    const Partial& p = *ops[0]->partial;
    if (base == "all-reduce") return FromTracked(OriginFromInterpretation(ins, p.layout, p.element_type));
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

  // ---- ops whose result is a new array with a layout that follows ---------
  AV NewArray(const HloInstruction& ins, std::optional<Interpretation> out, bool partial) {
    if (!out || out->local_shape != ins.shape.dims) return AV{};
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

  AV Broadcast(const HloInstruction& ins, const std::vector<const AV*>& ops) {
    if (ops.size() != 1) return AV{};
    if (!ops[0]->t) return (ops[0]->uniform || (ops[0]->ints && !ops[0]->ints->per_device)) ? Uniform() : AV{};
    std::optional<std::vector<int64_t>> map = IntsAttr(ins, "dimensions", true);
    std::optional<Interpretation> in = Interpret(ops[0]->t->state);
    if (!map || !in || ins.shape.is_tuple) return AV{};
    return NewArray(ins, BroadcastLayout(*in, *map, ins.shape.dims, devices_), false);
  }

  AV Dot(const HloInstruction& ins, const std::vector<const AV*>& ops) {
    if (ops.size() != 2 || !ops[0]->t || !ops[1]->t || ins.shape.is_tuple) return AV{};
    std::optional<Interpretation> l = Interpret(ops[0]->t->state), r = Interpret(ops[1]->t->state);
    std::optional<std::vector<int64_t>> lb = IntsAttr(ins, "lhs_batch_dims", true), lc = IntsAttr(ins, "lhs_contracting_dims", true),
                                        rb = IntsAttr(ins, "rhs_batch_dims", true), rc = IntsAttr(ins, "rhs_contracting_dims", true);
    if (!l || !r || !lb || !lc || !rb || !rc) return AV{};
    bool partial = false;
    std::optional<Interpretation> out = DotLayout(*l, *r, DotDims{*lb, *lc, *rb, *rc}, devices_, &partial);
    return NewArray(ins, std::move(out), partial);
  }

  AV Reduce(const HloInstruction& ins, const std::vector<const AV*>& ops) {
    if (ops.size() != 2 || !ops[0]->t || ins.shape.is_tuple) return AV{};
    std::optional<Interpretation> in = Interpret(ops[0]->t->state);
    std::optional<std::vector<int64_t>> reduced = IntsAttr(ins, "dimensions", false);
    if (!in || !reduced) return AV{};
    bool partial = false;
    std::optional<Interpretation> out = ReduceLayout(*in, *reduced, devices_, &partial);
    return NewArray(ins, std::move(out), partial);
  }

  // ---- results -------------------------------------------------------------
  // `s` in the coordinates of the sub-array [start, start + size); nullopt if it holds elements outside it.
  static std::optional<ValueState> Crop(const ValueState& s, const std::vector<int64_t>& start, const std::vector<int64_t>& size) {
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

  void Finish() {
    std::vector<std::tuple<const OriginInfo*, std::vector<int>, size_t>> seen;
    for (const auto& [id, t] : stopped_) {
      (void)id;
      if (!t->moved || !t->good || t->good->collectives.empty()) continue;
      const Good& g = *t->good;
      std::optional<Interpretation> to = Interpret(g.state);
      if (!to) continue;
      std::optional<Interpretation> from = to->identity ? Interpret(t->origin->state) : (t->unmoved ? Interpret(*t->unmoved) : std::nullopt);
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
      ModuleReshard r;
      r.from_instruction = t->origin->name;
      r.from_line = t->origin->line;
      r.to_instruction = g.at;
      r.to_line = g.line;
      r.shape = to->shape;
      r.element_type = t->origin->element_type;
      r.source_local_shape = t->unmoved ? t->unmoved->LocalShape() : t->origin->state.LocalShape();
      r.collectives = cs;
      for (size_t k = 0; k < cs.size(); ++k) {
        const std::string& e = out_.collectives[cs[k]].element_type;
        if (k == 0) r.moved_element_type = e;
        else if (e != r.moved_element_type) r.moved_element_type.clear();
      }
      r.through_whole_array = g.whole && !HoldsWholeArray(g.state);
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
      out_.reshards.push_back(std::move(r));
    }
    std::sort(out_.reshards.begin(), out_.reshards.end(), [](const ModuleReshard& a, const ModuleReshard& b) {
      return std::tie(a.from_line, a.to_line) < std::tie(b.from_line, b.to_line);
    });
  }

  const HloModule& m_;
  ModuleAnalysis& out_;
  int64_t devices_;
  int64_t next_id_ = 1;
  int64_t evaluations_ = 0;
  std::map<int64_t, TPtr> stopped_;
  std::map<std::string, int> collective_index_;
};

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
  Analyzer a(module, out);
  a.Run();
  return out;
}

}  // namespace reshard::audit
