// The analyzer's control flow (analyzer.h): the computations an instruction runs.
//
//   fusion, call, async-start   the callee, once, on the operands
//   while                       the body, once per distinct loop state (tracker.h):
//                               collectives inside run trip-count times
//   conditional                 each branch on its operand
#include <algorithm>

#include "audit/analyzer.h"

namespace reshard::audit::analysis {
namespace {

// backend_config={..."known_trip_count":{"n":"4"}...}: XLA's own count, or nullopt.
std::optional<int64_t> KnownTripCount(const HloInstruction& ins) {
  const std::string* config = ins.Attr("backend_config");
  if (config == nullptr) return std::nullopt;
  const size_t at = config->find("\"known_trip_count\"");
  if (at == std::string::npos) return std::nullopt;
  const size_t n = config->find("\"n\"", at);
  if (n == std::string::npos) return std::nullopt;
  size_t i = config->find(':', n);
  if (i == std::string::npos) return std::nullopt;
  ++i;
  while (i < config->size() && (config->at(i) == ' ' || config->at(i) == '"')) ++i;
  int64_t v = 0;
  size_t digits = 0;
  for (; i < config->size() && config->at(i) >= '0' && config->at(i) <= '9'; ++i, ++digits)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, config->at(i) - '0', &v)) return std::nullopt;
  if (digits == 0) return std::nullopt;
  return v;
}

// Per element of the body's parameter tuple: whether the body changes it (its root
// does not pass element k of its parameter through as element k).
std::vector<bool> Variant(const HloComputation& body, size_t elements) {
  std::vector<bool> variant(elements, true);
  if (body.root < 0) return variant;
  const HloInstruction& root = body.instructions[body.root];
  if (root.opcode != "tuple" || root.operands.size() != elements) return variant;
  for (size_t k = 0; k < elements; ++k) {
    const HloInstruction& e = body.instructions[root.operands[k]];
    if (e.opcode != "get-tuple-element" || e.operands.size() != 1) continue;
    const HloInstruction& p = body.instructions[e.operands[0]];
    std::optional<std::vector<int64_t>> index = IntsAttr(e, "index", false);
    variant[k] = !(p.opcode == "parameter" && index && index->size() == 1 && (*index)[0] == static_cast<int64_t>(k));
  }
  return variant;
}

constexpr int kMaxLoopPasses = 3;

}  // namespace

AV Analyzer::Call(const HloInstruction& ins, const std::vector<const AV*>& ops, int depth) {
  const std::string& op = ins.opcode;
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

AV Analyzer::LoopCarried(const AV& v, const HloInstruction& at) {
  AV out;
  if (v.t) out.t = Restart(v.t, at.name, at.line);
  if (v.ints && !v.ints->per_device) out.ints = v.ints;  // the first iteration's stands for any (a layer index)
  out.uniform = v.uniform && !v.t;
  if (v.tuple) {
    std::vector<AV> elems;
    for (const AV& e : *v.tuple) elems.push_back(LoopCarried(e, at));
    out.tuple = std::make_shared<const std::vector<AV>>(std::move(elems));
  }
  return out;
}

bool Analyzer::SameState(const AV& a, const AV& b, bool any_iteration) {
  if (static_cast<bool>(a.t) != static_cast<bool>(b.t) || static_cast<bool>(a.tuple) != static_cast<bool>(b.tuple) ||
      static_cast<bool>(a.ints) != static_cast<bool>(b.ints) || a.uniform != b.uniform || a.partial || b.partial)
    return false;
  if (a.t && !a.t->state.SameAs(b.t->state)) return false;
  // Across iterations, integers equal on every device stand for any iteration's (a loop
  // counter, a layer index): only per-device ones, which LoopCarried forgets, could
  // change a layout.
  if (a.ints && (a.ints->dims != b.ints->dims || a.ints->per_device != b.ints->per_device ||
                 ((a.ints->per_device || !any_iteration) && a.ints->v != b.ints->v)))
    return false;
  if (a.tuple) {
    if (a.tuple->size() != b.tuple->size()) return false;
    for (size_t k = 0; k < a.tuple->size(); ++k)
      if (!SameState((*a.tuple)[k], (*b.tuple)[k], any_iteration)) return false;
  }
  return true;
}

AV Analyzer::While(const HloInstruction& ins, const std::vector<const AV*>& ops, int depth) {
  const HloComputation* body = Callee(ins, "body");
  const HloComputation* condition = Callee(ins, "condition");
  if (body == nullptr || condition == nullptr || ops.size() != 1) {
    Issue(ins, "while: body or condition not found");
    for (const AV* o : ops) Stop(*o);
    return AV{};
  }
  const std::optional<int64_t> trip = KnownTripCount(ins);
  if (!trip) Note("%" + ins.name + ": XLA states no trip count for this loop; what runs inside it is counted once");
  const int64_t outer = executions_;
  const std::string outer_loop = loop_;
  if (!trip || outer == 0 || __builtin_mul_overflow(outer, *trip, &executions_)) executions_ = 0;
  loop_ = ins.name;

  // Loop-invariant elements enter as they are; the others as the body sees them in any
  // iteration. Where an iteration's output differs from its input (a carry that starts
  // as zeros), the body is followed again from its own output, and what the earlier
  // pass ended is forgotten.
  const AV& init = *ops[0];
  std::vector<bool> variant = Variant(*body, init.tuple ? init.tuple->size() : 1);
  auto carried = [&](const AV& from_init, const AV* from_body) {
    if (!init.tuple) return LoopCarried(from_body ? *from_body : from_init, ins);
    std::vector<AV> elems = *init.tuple;
    for (size_t k = 0; k < elems.size(); ++k)
      if (variant[k]) elems[k] = LoopCarried(from_body && from_body->tuple && k < from_body->tuple->size() ? (*from_body->tuple)[k]
                                                                                                         : elems[k], ins);
    return TupleOf(std::move(elems));
  };
  AV in = carried(init, nullptr);
  AV out;
  for (int pass = 0;; ++pass) {
    const std::map<int64_t, TPtr> before = stopped_;
    out = Eval(*body, {in}, depth + 1);
    AV next = carried(init, &out);
    if (SameState(next, in, /*any_iteration=*/true)) break;
    if (pass + 1 == kMaxLoopPasses) {
      Note("%" + ins.name + ": the loop-carried values change layout from one iteration to the next; followed in iteration " +
           std::to_string(pass + 1));
      break;
    }
    stopped_ = before;
    in = std::move(next);
  }
  Eval(*condition, {in}, depth + 1);
  executions_ = outer;
  loop_ = outer_loop;
  return out;
}

AV Analyzer::Conditional(const HloInstruction& ins, const std::vector<const AV*>& ops, int depth) {
  std::vector<const HloComputation*> branches;
  if (const std::string* list = ins.Attr("branch_computations")) {
    std::string_view t = Trim(*list);
    if (t.size() >= 2 && t.front() == '{' && t.back() == '}') t = t.substr(1, t.size() - 2);
    for (std::string_view name : SplitTop(t)) branches.push_back(m_.Find(Trim(name)));
  } else {
    branches = {Callee(ins, "true_computation"), Callee(ins, "false_computation")};
  }
  if (branches.empty() || ops.size() != branches.size() + 1 ||
      std::any_of(branches.begin(), branches.end(), [](const HloComputation* b) { return b == nullptr; })) {
    Issue(ins, "conditional: branches not found");
    for (const AV* o : ops) Stop(*o);
    return AV{};
  }
  // Each branch as if it runs (its collectives counted as often as the
  // conditional, in that branch: one branch runs per run).
  const int64_t id = conditionals_++;
  std::vector<AV> results;
  for (size_t b = 0; b < branches.size(); ++b) {
    branch_.emplace_back(id, static_cast<int64_t>(b));
    results.push_back(Eval(*branches[b], {*ops[b + 1]}, depth + 1));
    branch_.pop_back();
  }
  // What a branch moved ends there (a reshard in each branch); what they all
  // return alike goes on from the conditional.
  for (const AV& r : results) Stop(r);
  for (const AV& r : results)
    if (!SameState(r, results[0], /*any_iteration=*/false)) return AV{};
  return Restarted(results[0], ins);
}

AV Analyzer::Restarted(const AV& v, const HloInstruction& at) {
  AV out = v;
  if (v.t) out.t = Restart(v.t, at.name, at.line);
  if (v.tuple) {
    std::vector<AV> elems;
    for (const AV& e : *v.tuple) elems.push_back(Restarted(e, at));
    out.tuple = std::make_shared<const std::vector<AV>>(std::move(elems));
  }
  return out;
}

}  // namespace reshard::audit::analysis
