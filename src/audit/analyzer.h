// The analyzer behind AnalyzeModule (tracker.h): one forward pass over an
// SPMD-partitioned module that follows array values as ValueStates. Internal to
// src/audit; its members are defined in the files named for what they hold:
//
//   tracker.cc         the pass: bookkeeping, origins from sharding attributes,
//                      evaluation of each instruction, and the reshards found
//   array_ops.cc       local ops that keep an array and its layout (elementwise,
//                      reshape, bitcast, transpose, slices, pads, concatenations),
//                      and ops whose result is a new array (broadcast, dot, reduce)
//   collective_ops.cc  collectives: the bytes each device receives, and how
//                      they move the values followed
//   control_flow.cc    computations run by an instruction: fusions, calls and
//                      async wrappers, `while` loops, conditionals
//
// Not thread-safe: one Analyzer per module, used once.
#ifndef RESHARD_SRC_AUDIT_ANALYZER_H_
#define RESHARD_SRC_AUDIT_ANALYZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "audit/hlo_module.h"
#include "audit/int_eval.h"
#include "audit/replica_groups.h"
#include "audit/tracker.h"
#include "audit/interpretation.h"
#include "audit/value_state.h"

namespace reshard::audit::analysis {

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
  // Where known (a reduce's sums, at most 64 distinct parts), per device the
  // parts its value sums so far, one bit a part: an all-reduce over groups
  // ORs its group's, and completes the sums once every device has every
  // part (XLA reduces a scalar over x, then over y). Empty: any all-reduce
  // completes them.
  std::vector<uint64_t> held = {};
};

// The abstract value of one instruction.
struct AV {
  TPtr t;
  IntPtr ints;
  std::shared_ptr<const std::vector<AV>> tuple;
  std::shared_ptr<const Partial> partial;
  bool uniform = false;  // equal on every device and not followed (constants, broadcast scalars, iota)
};

// Helpers shared by the files of the analyzer (tracker.cc).
bool Contains(const std::vector<std::string_view>& list, std::string_view op);
// "all-gather-start" -> "all-gather"; other opcodes unchanged.
std::string BaseOp(const std::string& op);
// The integer list of attribute `key`; absent: empty if absent_is_empty, else nullopt.
std::optional<std::vector<int64_t>> IntsAttr(const HloInstruction& ins, std::string_view key, bool absent_is_empty);
extern const std::vector<std::string_view> kCollectives;

class Analyzer {
 public:
  Analyzer(const HloModule& m, ModuleAnalysis& out) : m_(m), out_(out), devices_(out.devices) {}
  // Follows the module from its entry computation and fills `out`.
  void Run();

 private:
  // ---- the pass (tracker.cc): bookkeeping, origins from sharding attributes, evaluation, results
  void Note(const std::string& n);
  void Issue(const HloInstruction& ins, const std::string& reason);
  void CollectOrigins(const AV& v, std::set<const OriginInfo*>* origins) const;
  void CollectTracked(const AV& v, std::vector<TPtr>* ts) const;
  // `v` is consumed by something that does not carry it on.
  void Stop(const AV& v);
  // Marks each operand value the result does not carry on as ended.
  void MarkUses(const std::vector<const AV*>& ops, const AV& result);
  TPtr NewOrigin(const HloInstruction& ins, ValueState state, const std::string& element_type = "");
  TPtr OriginFromInterpretation(const HloInstruction& ins, const Interpretation& in, const std::string& element_type);
  // A new value that starts where `t` is, in `t`'s state: its origin is `name` at `line`,
  // whose state is `origin_state` (t's own when null).
  TPtr Restart(const TPtr& t, const std::string& name, int64_t line, const ValueState* origin_state = nullptr);
  // Carries `from` on to `state` at `ins`; `move`: the elements held change. A value
  // that has finished a rematerialization (gathered whole, then cut to a layout)
  // and moves again through a collective ends there; the move starts a new value.
  TPtr Continue(const std::vector<TPtr>& from, ValueState state, const HloInstruction& ins, bool move, int collective = -1);
  std::optional<ValueState> StateFromSharding(const std::string& text, const HloShape& shape, const HloInstruction& ins);
  // Gives an untracked result the layout its sharding attribute states.
  void ApplySharding(const HloInstruction& ins, AV* v);
  AV Eval(const HloComputation& c, const std::vector<AV>& params, int depth);
  static std::vector<int> TopoOrder(const HloComputation& c);
  const HloComputation* Callee(const HloInstruction& ins, std::string_view key);
  static AV Uniform();
  static AV FromTracked(TPtr t);
  static AV TupleOf(std::vector<AV> elems);
  AV EvalInstruction(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops,
                     const std::vector<AV>& params, int depth);
  AV EvalCore(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops,
              const std::vector<AV>& params, int depth);
  // `s` in the coordinates of the sub-array [start, start + size); nullopt if it holds elements outside it.
  static std::optional<ValueState> Crop(const ValueState& s, const std::vector<int64_t>& start, const std::vector<int64_t>& size);
  void Finish();

  // ---- ops on arrays (array_ops.cc): those that keep the array and its layout, and those
  // whose result is a new array with a layout that follows
  AV Elementwise(const HloInstruction& ins, const std::vector<const AV*>& ops);
  AV Local(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops);
  // reshape, transpose, bitcast (copy and convert: unchanged) of a state; nullopt if not followed.
  static std::optional<ValueState> LocalState(const HloComputation& c, const HloInstruction& ins, const ValueState& s);
  // The same rearrangement of partial sums, before their reduction.
  AV PartialLocal(const HloComputation& c, const HloInstruction& ins, const Partial& p);
  AV Slice(const HloInstruction& ins, const std::vector<const AV*>& ops);
  AV Pad(const HloInstruction& ins, const std::vector<const AV*>& ops);
  AV Concat(const HloInstruction& ins, const std::vector<const AV*>& ops);
  AV NewArray(const HloInstruction& ins, std::optional<Interpretation> out, bool partial);
  AV Broadcast(const HloInstruction& ins, const std::vector<const AV*>& ops);
  AV Dot(const HloInstruction& ins, const std::vector<const AV*>& ops);
  AV Reduce(const HloInstruction& ins, const std::vector<const AV*>& ops);

  // ---- collectives (collective_ops.cc): their bytes, and how they move the values followed
  int RecordCollective(const HloComputation& c, const HloInstruction& ins, const std::string& op, int64_t group_size,
                       std::vector<int64_t> recv, std::string element_type);
  std::optional<DeviceGroups> Groups(const HloInstruction& ins);
  int64_t OperandBytes(const HloComputation& c, const HloInstruction& ins) const;
  // The collective's output shape (for -start forms, the output inside the tuple).
  static HloShape OutputShape(const HloInstruction& ins, const std::string& base);
  // Records a collective's bytes; returns its index, or -1.
  int Collective(const HloComputation& c, const HloInstruction& ins, const std::string& base, const DeviceGroups* groups);
  // The element type of the data a collective moves: its array operands' (all of one type), or "".
  static std::string MovedElementType(const HloComputation& c, const HloInstruction& ins);
  AV EvalCollective(const HloComputation& c, const HloInstruction& ins, const std::vector<const AV*>& ops, const std::string& base);
  // all-reduce / reduce-scatter of a partial dot: the dot's result, complete.
  AV Reduction(const HloInstruction& ins, const std::vector<const AV*>& ops, const std::string& base, const DeviceGroups* groups);

  // ---- control flow (control_flow.cc)
  // fusion, call, async-start: the called computation, on the operands.
  AV Call(const HloInstruction& ins, const std::vector<const AV*>& ops, int depth);
  // while: its body once, from the loop-carried layouts (tracker.h); collectives inside
  // run trip-count times.
  AV While(const HloInstruction& ins, const std::vector<const AV*>& ops, int depth);
  // conditional: each branch on its operand, its collectives in that branch;
  // each branch's moves end at its root; the result, where all branches
  // agree, starts anew at the conditional.
  AV Conditional(const HloInstruction& ins, const std::vector<const AV*>& ops, int depth);
  // The value as the loop body sees it in any iteration: followed arrays start anew
  // at `at` in the same state; integers that differ per device are forgotten.
  AV LoopCarried(const AV& v, const HloInstruction& at);
  // The value with every followed array starting anew at `at`, in the same state.
  AV Restarted(const AV& v, const HloInstruction& at);
  // Whether two values have the same layouts and integers (any_iteration: integers equal
  // on every device may differ, as a loop counter does from one iteration to the next).
  static bool SameState(const AV& a, const AV& b, bool any_iteration);

  const HloModule& m_;
  ModuleAnalysis& out_;
  int64_t devices_;
  int64_t next_id_ = 1;
  int64_t evaluations_ = 0;
  std::map<int64_t, TPtr> stopped_;
  std::map<std::string, int> collective_index_;
  int64_t executions_ = 1;  // of the computation being evaluated (ModuleCollective::executions)
  std::string loop_;        // the innermost while around it
  BranchPath branch_;       // the conditional branches around it
  int64_t conditionals_ = 0;
};

}  // namespace reshard::audit::analysis

#endif  // RESHARD_SRC_AUDIT_ANALYZER_H_
