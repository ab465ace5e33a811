// The execution checker: runs a compiled plan with tagged data and proves
// the result exact, in time and memory linear in the data.
//
// Every element's value is a tag of its global row-major index g, written at
// the element's real size: the low bytes of (g + 1) * 0x9E3779B97F4A7C15
// (an odd multiplier, so tags differ for indices below 2^(8 x size)); a
// 16-byte element also carries g + 1 in its high half. The checker
//   - compiles and bounds-checks every copy (PlanProgram::Compile does),
//   - counts, from the program's copies, how often each output element of
//     every step is written, and reports any written never or twice,
//   - fills the sources with tags, executes, and compares every step's
//     output with its layout, element by element,
//   - reports what the executor really held per device.
// Nothing holds a full copy of the array: tags are computed, not stored,
// and a tile's indices are walked as runs of cells (memory in its cells, not
// its elements).
// Stateless; thread-safe.
// An oracle for tests and `reshard run`, not part of the installed API
// (src/, not include/reshard/).
#ifndef RESHARD_SRC_EXEC_EXEC_CHECKER_H_
#define RESHARD_SRC_EXEC_EXEC_CHECKER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reshard/device_program.h"
#include "reshard/exchange.h"
#include "reshard/executor.h"
#include "reshard/layout.h"

namespace reshard {

// How tags are written. Without a reduction they are bit patterns (above),
// never added. A plan from partial sums combines values, and one into an avg
// target whose parts scale what they hold (PartRoutes::scale) multiplies
// them, so its tags are numbers in the array's type, chosen so that every
// sum, average, max, min or scaling on the way is exact in any order (the
// modulus divided by the scale; a scale above the exact range floors it at
// 1, and the executors and this checker then wrap or round alike; an avg
// source of more parts than the exact range holds 1 in every part, and its
// expected value is the reduce kernel's sum in part order, divided): element
// g is n = (g mod modulus) + 1, and
// a partial layout's part values reduce to n (sum: parts of 0 or 1 and a last
// part making up the rest; avg: n in every part; max: n - 0 or 1 and n; min:
// n + 0 or 1 and n), so a part lost, doubled or taken from another element of
// a different n changes the result. A partial target's device holds the
// source's parts routed to its part (Exchange::RouteParts) combined in part
// order (and scaled), or the identity where none is: checked exactly. That these reduce,
// over the target's parts, to n again is the routes' own rule, tested on its
// own (Exchange.RoutedPartsReduceToTheSourcesReduction), not here. The
// routes of a plan into a partial target start at its last step's input
// (the source, or a plain layout it reduced the source onto), or are
// composed over its steps from the source (ValueRoutesOf).
struct TagScheme {
  int64_t modulus = 0;      // 0: bit tags (nothing combines or scales values)
  Reduction source = {};    // the source's reduction
  PartRoutes routes = {};   // where a partial target's values come from
  std::optional<Layout> tiles = {};  // with tile routes, the layout they route
  // The routes start at a plain layout the plan reduced the source onto, so
  // each element routed holds the reduced value (else: the source's parts).
  bool routed_reduced = false;
};
// The scheme for a reshard from `source` to `target`: numbers where the
// source is partial or the routes scale. A partial target's values are routed from
// `routes_from`, the input of the plan's last step: the source, a plain
// layout (a plan that reduces, then routes), or a layout partial as the
// source is, each device holding the part it held there (parts moved alike:
// each holds its part's source values).
TagScheme TagSchemeFor(const Layout& source, const Layout& target, const Layout& routes_from);
inline TagScheme TagSchemeFor(const Layout& source, const Layout& target) { return TagSchemeFor(source, target, source); }
// Whether the oracles can state the target's values: it is not partial, or
// its routes start at the source, at a layout with no pending reduction, or
// at one whose devices hold the parts they held in the source (as the
// planner makes them). Where it is not, the oracles compose every step's
// routes instead (ComposedRoutes); plans neither covers, RunChecked and the
// simulator refuse.
bool TargetValuesStated(const Layout& source, const Layout& target, const Layout& routes_from);
// The routes of a plan that passes through `chain` (its source, then each
// step's output, the target last) composed from the source: each source
// part into the target part its steps' routes (Exchange::RouteParts, which
// the executors follow) take it to, where every layout is partial under one
// op (sum, max or min: a sum of sums is the sum of the parts) and every step
// routes parts whole, with no scale, or keeps every part in itself
// (PartRoutes::KeepsParts, tile routes included); nullopt elsewhere. A partial target's
// device then holds the source parts composed into its part, combined: what
// a plan that reduces some axes before moving the parts runs to.
std::optional<PartRoutes> ComposedRoutes(std::span<const Layout* const> chain);
// The layouts a plan (or compiled program) passes through: its source, each
// step's output (the target last; the target alone after the source where
// it has no steps).
std::vector<const Layout*> LayoutChain(const CollectivePlan& plan);
std::vector<const Layout*> LayoutChain(const PlanProgram& program);
// Where the oracles take a partial target's values from, for a plan through
// `chain`: `from`, the last step's input, and its routes where
// TargetValuesStated; else the source and ComposedRoutes (composed: true);
// nullopt where neither states them.
struct ValueRoutes {
  const Layout* from;
  PartRoutes routes;
  bool composed;
};
std::optional<ValueRoutes> ValueRoutesOf(std::span<const Layout* const> chain);
// Whether ValueRoutesOf states a plan's (or compiled program's) values.
bool PlanValuesStated(const CollectivePlan& plan);
bool PlanValuesStated(const PlanProgram& program);
// The scheme of a plan: routes from its last step's input where
// TargetValuesStated, else the composed routes from its source (ValueRoutesOf).
// REQUIRES: PlanValuesStated(plan).
TagScheme TagSchemeFor(const CollectivePlan& plan);

// Writes device's local buffer of `source` with every element's tag (a
// partial layout's: the device's part of it).
// REQUIRES: buffer.size() == source.LocalBytes(device).
void FillTags(const Layout& source, int64_t device, std::span<std::byte> buffer, const TagScheme& scheme = {});

struct TagCheck {
  int64_t checked = 0, mismatches = 0;
  std::string first_problem = {};
};
// Compares device's local buffer of `layout`, a target (or a step's output)
// of the reshard `scheme` describes, with the tags. A partial layout's: the
// parts routed to the device's part.
TagCheck CheckTags(const Layout& layout, int64_t device, std::span<const std::byte> buffer, const TagScheme& scheme = {});

// FillTags / CheckTags over every device of the program's source / target
// (TagSchemeFor its source),
// `threads` at a time (<= 0: the hardware's count; at most kMaxThreads, and
// fewer where the system cannot start them: the work is the same). Buffers
// indexed like PlanProgram::devices().
void FillSources(const PlanProgram& program, std::span<const std::span<std::byte>> sources, int threads = 0);
TagCheck CheckTargets(const PlanProgram& program, std::span<const std::span<const std::byte>> targets, int threads = 0);

// Every output element of every step written exactly once by the program's
// unpack and local copies, and by its direct and local copies (each form
// where compiled: CompileOptions::copies) (a reducing
// step's: once per part routed to the device, exactly the parts the routes
// give it, and a device no part reaches filled once with the identity).
// InvalidArgument names the first that is not.
Status CheckCoverage(const PlanProgram& program);

struct CheckReport {
  ExecStats stats;
  int64_t elements_checked = 0;  // elements of the target layout compared
  int64_t mismatches = 0;        // over every step
  std::string first_problem = {};
  bool ok() const { return mismatches == 0 && first_problem.empty(); }
};
// Runs `program` on the in-process executor with tagged sources and checks
// every step. REQUIRES: the program compiled for tight row-major buffers.
// Fails (the Status) only on a malformed program, wrong buffers, or threads
// the system cannot start (Unavailable).
// Under Transport::kRanks, `ranks` sets the runner's transport and message
// limit; under Transport::kDirect and kStaged, `max_scheduled_group_copies`
// the executor's (ExecOptions: 0 runs every step written per group pattern
// device by device).
struct RankChoice {
  StepTransport transport = StepTransport::kAuto;
  int64_t max_message_bytes = (int64_t{1} << 31) - 1;
  bool priced_chunks = false;
  bool choose_as_mpi = false;  // ExecOptions::rank_choose_as_mpi
  int64_t max_scheduled_group_copies = ExecOptions{}.max_scheduled_group_copies;
};
Result<CheckReport> RunChecked(const PlanProgram& program, int threads = 0, Transport transport = Transport::kStaged,
                               RankChoice ranks = {});

}  // namespace reshard

#endif  // RESHARD_SRC_EXEC_EXEC_CHECKER_H_
