// Finds the reshards in one SPMD-partitioned HLO module: which array XLA moves
// from which layout to which, through which collectives.
//
// A forward pass over the entry computation (and every computation it runs:
// fusions, calls, async wrappers, `while` bodies and conditions, conditional
// branches) follows array values as ValueStates:
//
// * A value starts (an *origin*) where its layout is known: an instruction
//   with a `sharding=` attribute (parameters, results), or the result of a
//   dot, reduce, broadcast or elementwise op whose operands' layouts are known
//   (the result's layout follows from theirs), or an all-reduce that
//   completes a partial dot.
// * Local ops (copy, bitcast, reshape, transpose, convert, elementwise ops
//   with uniform other operands, slices, pads, concatenations) and the
//   collectives that move data (all-gather, all-to-all in array and tuple
//   form, collective-permute, their async -start/-done pairs) carry it on;
//   dynamic-slice offsets are evaluated per device from partition-id.
// * A value *ends* where something else consumes it (a dot, a reduction, the
//   program's result, an op this pass does not follow). If it moved between
//   its origin and its end, that is one reshard: the origin's layout, the
//   layout at the end (the last state that is a layout of the same array),
//   and the collectives on the way with the bytes each device receives.
//
// * A `while` body is followed once, from the layouts its loop-carried values
//   keep from one iteration to the next (evaluated again from the body's own
//   output where the first iteration's differ; integers that change per
//   iteration and per device are forgotten). Its reshards are one iteration's,
//   and carry the loop's trip count where XLA states it (backend_config
//   known_trip_count). A value that XLA gathers whole and cuts down to a
//   layout, then moves again, has finished one reshard and starts the next.
//
// Each collective of the module is listed once with its bytes and its role:
// part of a reshard, a reduction that completes a dot's or reduce's partial
// sums, or neither (the values it moves are not followed; a note says so).
#ifndef RESHARD_SRC_AUDIT_TRACKER_H_
#define RESHARD_SRC_AUDIT_TRACKER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "audit/branch_total.h"
#include "audit/hlo_module.h"
#include "reshard/layout.h"

namespace reshard::audit {

struct ModuleCollective {
  std::string op;           // "all-gather", "all-to-all", "collective-permute", "all-reduce", ...
  std::string name;         // the instruction
  std::string computation;
  int64_t line = 0;
  int64_t group_size = 0;   // 0 when not known
  std::string element_type; // of the data it moves, as the module states it ("f32" where XLA:CPU moves bf16)
  std::vector<int64_t> recv_bytes;  // per device (partition id); one entry when all receive alike
  // Times it runs per run of the module: the trip counts of the loops around it
  // multiplied; 0 when a loop around it has no known trip count. `loop`: the innermost.
  int64_t executions = 1;
  std::string loop;
  // The conditional branches around it, outermost first: (the conditional's
  // number in the module, the branch). One branch runs per run: totals count
  // one branch of each conditional (BranchPath).
  BranchPath branch;
  enum class Role { kNone, kReshard, kReduction };
  Role role = Role::kNone;
  int64_t MaxRecv() const;
  int64_t RecvOf(int64_t device) const { return recv_bytes.size() == 1 ? recv_bytes[0] : recv_bytes[device]; }
};

struct ModuleReshard {
  std::string from_instruction, to_instruction;
  int64_t from_line = 0, to_line = 0;
  std::vector<int64_t> shape;
  std::string element_type;        // the array's
  std::string moved_element_type;  // what its collectives carry, when they all carry one type; else ""
  std::vector<int64_t> source_local_shape;  // the local shape just before the first move
  std::optional<Layout> from, to;
  std::vector<int> collectives;  // indices into ModuleAnalysis::collectives, in program order
  bool through_whole_array = false;  // gathered the whole array on every device, then cut it down
  int64_t max_recv_bytes = 0;        // the most bytes one device receives over `collectives`
  int64_t trip_count = 1;            // its collectives' executions (ModuleCollective::executions)
  std::string loop;                  // the innermost `while` around it, or ""
  BranchPath branch;                 // the conditional branches around all its collectives
};

struct ModuleAnalysis {
  int64_t devices = 1;
  std::vector<ModuleCollective> collectives;
  std::vector<ModuleReshard> reshards;
  std::vector<HloIssue> issues;    // syntax inside the module not understood
  std::vector<std::string> notes;  // what the pass could not follow
};

// Modules with more than `max_devices` partitions are noted and not followed.
ModuleAnalysis AnalyzeModule(const HloModule& module, int64_t max_devices = int64_t{1} << 16);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_TRACKER_H_
