// Audit: where an XLA program reshards its arrays, what XLA pays for each
// reshard, and what reshard's plan would pay instead.
//
// Audit reads XLA's own outputs as text:
//
//   * HLO modules after SPMD partitioning (`--xla_dump_to=DIR` files
//     *after_optimizations.txt, `jax.jit(f).lower(...).compile().as_text()`),
//     as jax 0.10.2 and XLA of that age print them;
//   * XLA's log lines "[SPMD] Involuntary full rematerialization. The compiler
//     cannot go from sharding A to B efficiently for HLO operation %x = ..."
//     (absl logging on standard error).
//
// In a module it follows each array from where its layout is known (a
// `sharding=` attribute, or the layouts of a dot's, reduce's or elementwise
// op's operands) through local ops and collectives to where it is consumed,
// and calls the collectives in between one reshard from the first layout to
// the last (src/audit/tracker.h says exactly how). Each reshard is priced
// both ways in bytes received by the busiest device: XLA's collectives as
// written, and `PlanReshard` between the same two layouts under the
// bandwidth-only model for `options.target` (jax-cpu by default: structured
// collectives only, the ones XLA itself can run on every backend). A reshard
// is a finding when XLA receives more than both reshard's plan and the lower
// bound:
//
//   full-rematerialization  XLA gathers the whole array on every device and
//                           cuts it down again (or its log says so);
//   excess                  any other reshard that moves more than needed.
//
// A logged rematerialization matched to a reshard of the HLO given is one
// finding; a logged one without HLO is priced as XLA's fallback (all-gather
// of every sharded dim, then a slice) and marked `estimated`.
//
// Modules that reshard.jax compiles only to compare lowerings (their names
// contain "reshard_comparison_only") never run: they are not audited, and log
// lines attributed to them are not counted (docs/audit.md says how).
//
// Bytes are those of the element type XLA moves the array as, which its
// collectives state (XLA:CPU moves bf16 arrays as f32): reshard's plan is
// priced in the same type, as it runs on that backend too.
//
// Errors: InvalidArgument (with the input's name and line) for text that is
// not what it claims to be: an HLO module whose structure is broken
// (unbalanced brackets, an operand never defined, a computation never
// closed), or binary data. Syntax that is well formed but unknown to this
// reader (an attribute form, a sharding kind, a log line of another wording)
// is not an error: it is listed in `not_understood` with its line, and what
// depends on it is not audited. Pure function of its inputs; thread-safe.
#ifndef RESHARD_AUDIT_H_
#define RESHARD_AUDIT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/dtype.h"
#include "reshard/planner.h"
#include "reshard/status.h"

namespace reshard {

// One text to read: its name (a file path, or "-" for standard input) and content.
struct AuditInput {
  std::string name;
  std::string text;
};

struct AuditOptions {
  // The collectives reshard's plans may use (PlannerOptions::target).
  PlanTarget target = PlanTarget::kJaxCpu;
  // Also list the reshards that move no more than needed (kind kNone).
  bool all_reshards = false;
  // Modules with more partitions, and logged shardings over more devices, are
  // noted and not audited (the cost of following values grows with devices).
  int64_t max_devices = 65536;
};

// kNone: a reshard that moves no more than reshard's plan (listed only with all_reshards).
enum class AuditKind { kFullRematerialization, kExcess, kNone };
std::string_view AuditKindName(AuditKind k);  // "full-rematerialization", "excess", "none"

struct AuditCollective {
  std::string op;           // "all-gather", "all-to-all", "collective-permute", ...
  std::string instruction;  // its name in the module
  int64_t line = 0;
  int64_t group_size = 0;   // 0: not known
  int64_t max_recv_bytes = 0;
};

struct AuditFinding {
  AuditKind kind = AuditKind::kExcess;
  std::string source;          // the input the finding was read from
  std::string module;          // the HLO module; empty for a finding from the log alone
  std::string instruction;     // the array resharded, as XLA names it
  std::string to_instruction;  // where it reaches the target layout (HLO findings)
  int64_t line = 0;            // of `instruction` in the module, or of the log line
  std::vector<int64_t> shape;  // global
  DType dtype = DType::kF32;
  // The element type XLA moves the array as: its collectives' (XLA:CPU moves bf16 as f32),
  // or for a finding from the log alone, the backend's rule where the inputs show the backend.
  // Both sides, and the lower bound, are priced in it; `moved_as_reason` says why when it is not `dtype`.
  DType moved_as = DType::kF32;
  std::string moved_as_reason;
  std::string from, to;        // HLO sharding text
  bool logged = false;         // XLA's log reported it
  bool estimated = false;      // XLA's side estimated from the log alone

  // Times the reshard runs per run of the module: inside a `while` loop (every
  // lax.scan), the loop's trip count as XLA states it (backend_config
  // known_trip_count), multiplied over nested loops; 0 when a loop around it has
  // none (counted once). Byte fields are per run of the reshard; totals multiply.
  int64_t trip_count = 1;
  std::string loop;            // the innermost `while` instruction around it, or ""

  int64_t xla_max_recv_bytes = 0;
  std::vector<AuditCollective> xla_collectives;
  double xla_time_us = 0;      // the same bandwidth-only model as reshard's

  int64_t reshard_max_recv_bytes = 0;
  std::vector<std::string> reshard_collectives;  // op per collective step
  std::vector<std::string> reshard_steps;        // "all-to-all over {a,b}: [{b}, {}, {a}] -> [{}, {a, b}, {}]"
  double reshard_time_us = 0;
  int64_t lower_bound_max_recv_bytes = 0;

  int64_t saving_bytes() const { return xla_max_recv_bytes - reshard_max_recv_bytes; }
  // Per run of the module: saving_bytes() times the trip count (once if not known).
  int64_t total_saving_bytes() const;
};

struct AuditModule {
  std::string source, name;
  int64_t line = 0;
  int64_t devices = 1;
  int64_t reshards = 0;              // reshards found in it (findings or not)
  int64_t findings = 0;
  int64_t xla_recv_bytes = 0;        // summed over its findings, times their trip counts
  int64_t reshard_recv_bytes = 0;
  int64_t collectives = 0;           // every collective of the module
  int64_t collective_recv_bytes = 0; // their bytes into the busiest device, times the trip counts of their loops, summed
  // Collectives that are part of no reshard found and complete no partial sums: the
  // values they move are not followed (a note says so). Nothing is left out silently.
  std::vector<AuditCollective> not_attributed;
};

struct AuditIssue {
  std::string source;
  int64_t line = 0;
  std::string text;
  std::string reason;
};

struct AuditReport {
  std::vector<AuditFinding> findings;  // worst first (most bytes saved per run of the module); kNone ones last
  int64_t reshards = 0;                // reshards found in the modules, findings or not
  std::vector<AuditModule> modules;
  std::vector<AuditIssue> not_understood;
  std::vector<std::string> notes;      // what was read but could not be followed
  int64_t log_lines = 0;               // rematerialization lines read
  int64_t xla_recv_bytes = 0, reshard_recv_bytes = 0;  // over findings, times their trip counts
};

Result<AuditReport> Audit(const std::vector<AuditInput>& inputs, const AuditOptions& options = {});

// {"findings": [...], "totals": {...}, "modules": [...], "not_understood": [...], "notes": [...]}
// (docs/audit.md).
nlohmann::ordered_json AuditJson(const AuditReport& report);
// A table for people, worst first, with totals per module and overall.
std::string AuditTable(const AuditReport& report);

}  // namespace reshard

#endif  // RESHARD_AUDIT_H_
