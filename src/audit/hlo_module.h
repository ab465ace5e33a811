// An XLA HLO module as text: the reader the auditor uses.
//
// Reads the text XLA prints for a module (`HloModule::ToString`, the
// `--xla_dump_to` files, `jax.jit(f).lower(...).compile().as_text()`):
//
//   HloModule jit_f, is_scheduled=true, entry_computation_layout={...}, num_partitions=8
//   FileNames / FunctionNames / FileLocations / StackFrames sections (jax 0.10.2)
//   %comp (p: f32[8]) -> f32[8] {            a computation, or ENTRY %main ...
//     %p = f32[8]{0} parameter(0), sharding={devices=[8]<=[8]}
//     ROOT %n = f32[8]{0} negate(%p), metadata={...}
//   }
//
// Each instruction keeps its name, shape (arrays with element type, dims and
// minor-to-major layout; tuples), opcode, operands (names resolved to
// instructions of the same computation; printed as `%x`, bare `x`, or with a
// type prefix `f32[8]{0} %x`), its attributes as raw text by key, and its
// line. Literals of `constant(...)` are kept as text. An instruction may span
// several lines while its brackets are open.
//
// Two kinds of trouble: lines the reader does not know inside a module are
// listed as issues (line and reason) and skipped, so one odd line costs only
// what depends on it; text that breaks the module's structure (unbalanced
// brackets, an operand never defined, a computation never closed) makes
// ParseHloModule fail with the line and column.
#ifndef RESHARD_SRC_AUDIT_HLO_MODULE_H_
#define RESHARD_SRC_AUDIT_HLO_MODULE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reshard/status.h"

namespace reshard::audit {

struct HloShape {
  bool is_tuple = false;
  std::string element_type;             // "f32", "bf16", "pred", "token", ...
  std::vector<int64_t> dims;
  std::vector<int64_t> minor_to_major;  // empty: the default (descending)
  std::vector<HloShape> elements;       // tuple elements

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t num_elements() const;
  // Physical dim order, major first: reverse(minor_to_major), or 0..rank-1.
  std::vector<int64_t> MajorToMinor() const;
  std::string ToString() const;  // "f32[8,16]" or "(f32[8], s32[])", without layouts
};

// Bits of one element, or -1 for a type the reader does not know.
int64_t ElementBits(std::string_view element_type);
// Bytes of the whole shape (tuples summed), rounded up; -1 if a type is unknown.
int64_t ShapeBytes(const HloShape& shape);

// Reads a shape at the start of `text`; `used` is set to the characters read.
Result<HloShape> ParseHloShape(std::string_view text, size_t* used);

struct HloInstruction {
  std::string name;
  HloShape shape;
  std::string opcode;
  std::vector<int> operands;                // indices into the computation's instructions
  std::string literal;                      // constant(...) / parameter(N) / other non-name operand text
  std::vector<std::pair<std::string, std::string>> attrs;
  bool is_root = false;
  int64_t line = 0;                         // 1-based, in the source text
  std::string text;                         // the instruction as written (joined if it spanned lines)

  // The raw value of attribute `key`, or nullptr.
  const std::string* Attr(std::string_view key) const;
};

struct HloComputation {
  std::string name;
  bool is_entry = false;
  int64_t line = 0;
  std::vector<HloInstruction> instructions;
  int root = -1;
  std::unordered_map<std::string, int> by_name;
};

struct HloIssue {
  int64_t line = 0;
  std::string text;
  std::string reason;
};

struct HloModule {
  std::string name;
  int64_t line = 0;  // of the HloModule header
  int64_t num_partitions = 1;
  int64_t replica_count = 1;
  std::vector<HloComputation> computations;
  std::unordered_map<std::string, int> by_name;
  int entry = -1;
  std::vector<HloIssue> issues;  // lines inside the module the reader did not understand

  const HloComputation* Find(std::string_view name) const;
};

// Reads the module whose `HloModule` header is lines[first] (0-based); lines
// are the source text split at '\n'. On success `*next` is the index of the
// first line after the module (the first line at top level that is neither
// blank, nor a section, nor a computation). Fails on broken structure, with
// the 1-based line and column.
Result<HloModule> ParseHloModule(const std::vector<std::string_view>& lines, size_t first, size_t* next);

// Whether `line` starts an HLO module ("HloModule name...").
bool IsModuleHeader(std::string_view line);

// Helpers shared by the readers of attributes.
// The index just past the bracket group that opens at text[i] ('(', '[', '{'),
// skipping quoted strings; npos if it does not close.
size_t MatchClose(std::string_view text, size_t i);
// Splits at top-level `sep` (outside brackets and quotes), trimming spaces.
std::vector<std::string_view> SplitTop(std::string_view text, char sep = ',');
std::string_view Trim(std::string_view s);
// "{1,2,3}" or "1,2,3" -> {1,2,3}; nullopt if anything else is there.
std::optional<std::vector<int64_t>> ParseIntList(std::string_view text);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_HLO_MODULE_H_
