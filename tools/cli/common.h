// Shared pieces of the reshard subcommands: the common options, how they
// become a shape, a mesh and layouts, and how failures become exit codes.
#ifndef RESHARD_TOOLS_CLI_COMMON_H_
#define RESHARD_TOOLS_CLI_COMMON_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reshard/byte_count.h"
#include "reshard/notation.h"
#include "reshard/planner.h"

namespace reshard::cli {

// Exit codes: 0 success; 1 the request is valid but cannot be met (a layout
// not expressible in a notation, a feature not supported yet, a failed
// verification); 2 bad input; 3 an internal error.
inline constexpr int kExitUnmet = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;

struct CliError : std::runtime_error {
  CliError(int code, const std::string& msg) : std::runtime_error(msg), exit_code(code) {}
  int exit_code;
  // False on the ranks of an MPI run that leave an error every rank shares to rank 0 to print.
  bool print = true;
};

// What a std::bad_alloc becomes: exit status 1 (kExitUnmet), never an abort.
inline constexpr const char* kOutOfMemory =
    "out of memory (the system refused an allocation)";

// Test only (tests/exec/cli_run_tests.cmake), not a user option: with
// RESHARD_TEST_FAIL=RANK:POINT in the environment, process RANK (0 outside
// MPI) throws std::bad_alloc at POINT ("fill", "execute" or "check" in run),
// as if it ran out of memory there.
void InjectedFailure(int rank, const char* point);

// This process's rank when an MPI launcher (mpirun, mpiexec, srun) started it,
// read from the launcher's environment; -1 otherwise.
int LauncherRank();
// An error message as main prints it: on each line that is not an indented
// echo of a text, every run of more than 110 characters without a space (a
// token longer than any quoted through Short) is cut to its first 100, "..."
// and the punctuation that closed it; a line stops at 500 characters and a
// message at 20 lines ("..." where cut). Valid UTF-8 whatever the message.
std::string ShortenMessage(const std::string& message);
// Writes prefix + message + newline to stderr in one write, so that under
// mpirun another process's output (the launcher's abort notice) cannot land
// inside the line.
void PrintError(std::string_view prefix, std::string_view message);

struct CommonOptions {
  std::string shape;
  std::string dtype = "f32";
  std::string mesh;
  std::string devices;
  bool json = false;
};

void AddCommonOptions(CLI::App* app, CommonOptions& o);
// For text options: a value "@PATH" is replaced by the contents of the file
// PATH (at most 64 MiB, trailing spaces and newlines removed); an unreadable
// file is a CLI::ValidationError naming the option.
const CLI::Validator& AtFile();
// An option whose value is kept as given: `to` is set when the option is
// given, and the caller reads (and refuses) the text.
CLI::Option* AddTextOption(CLI::App* app, const std::string& name, std::optional<std::string>& to,
                           const std::string& help);
// The one rule for empty values (docs/cli.md: an option's value is never
// empty): every option of every subcommand of `app` that takes a value refuses
// an empty one as "OPTION: empty value; expected WHAT" (exit status 2, a
// CLI::ValidationError), checked after an @FILE is read (an empty file is an
// empty value) and before any other check of the value. `--shape ''` alone is
// a value (a scalar). Call once, after every subcommand is registered.
void RefuseEmptyValues(CLI::App& app);
// What an option takes, as its errors say it: "a number from 0 to 1000000".
std::string IntegerExpected(int64_t lo, int64_t hi);
std::string NumberExpected(double lo, double hi);

// `text` as error messages quote it: at most 100 characters ("..." where cut),
// bytes that are not UTF-8 as '?'.
std::string Short(const std::string& text);
// "1,2,3" or "[1,2,3]" -> {1,2,3}; throws CliError(2) naming `option` and the column.
std::vector<int64_t> ParseIntList(const std::string& text, const std::string& option);
// A decimal integer in [lo, hi]: "8" -> 8. Throws CliError(2) naming `option`.
int64_t ParseInteger(const std::string& text, const std::string& option, int64_t lo, int64_t hi);
// A finite decimal number in [lo, hi]: "0.5", "25", "1e3". No sign, inf or
// nan. Throws CliError(2) naming `option`.
double ParseNumber(const std::string& text, const std::string& option, double lo, double hi);
// A byte count (--memory-cap, --max-memory), read by the library's one parser
// (reshard/byte_count.h). Throws CliError(2) naming `option`, the text and the
// column.
int64_t ParseByteSize(const std::string& text, const std::string& option);
// "16,16,16" -> {16,16,16}; "" or "[]" -> rank 0. Throws CliError(2).
std::vector<int64_t> ParseShape(const std::string& text);
DType ParseDTypeOrThrow(const std::string& text);
// --shape and --dtype together: the array's bytes must fit int64 (else the
// layouts' own check would blame the layout text).
struct ArrayType {
  std::vector<int64_t> shape;
  DType dtype;
};
ArrayType ParseArrayType(const CommonOptions& o);
// --mesh text with --devices ids applied; --devices alone gives a one-axis mesh.
std::optional<Mesh> BuildMesh(const std::string& mesh_text, const std::string& devices_text, const std::string& option);
// Throws CliError(2) naming the option on failure.
ParsedLayout LoadLayout(const std::string& text, const std::vector<int64_t>& shape, DType dtype,
                        const std::optional<Mesh>& mesh, const std::string& option);

// The options of plan and verify, and the two layouts they name.
struct PairOptions {
  CommonOptions common;
  std::string from, to, from_mesh, to_mesh;
  std::string strategy = "auto";
  std::string topology = "flat";
  std::string target;  // --for; empty: any (jax-cpu when emitting HLO or JAX)
  // Each set when given, as given (never empty: RefuseEmptyValues), and read by MakePlannerOptions.
  std::optional<std::string> memory_cap;
  std::optional<std::string> alpha_us, bandwidth_gbps, intra_alpha_us, intra_bandwidth_gbps, hop_alpha_us,
      step_latency_us, copy_bandwidth_gbps;
  bool bandwidth_only = false;
};
struct LayoutPair {
  ParsedLayout source, target;
  std::vector<Mesh> meshes;  // every mesh the texts were stated over or suggest, for the planner
};
void AddPairOptions(CLI::App* app, PairOptions& o);
// A side without a device set of its own ({replicated} with no mesh) takes the other side's.
LayoutPair LoadPair(const PairOptions& o);
// The cost flags' ranges: latencies in us, bandwidths in GB/s.
inline constexpr double kMaxLatencyUs = 1e6;
inline constexpr double kMinBandwidthGbps = 1e-3, kMaxBandwidthGbps = 1e6;
// The planner's options from the flags; `emitting` picks jax-cpu when --for is absent. Throws CliError(2).
PlannerOptions MakePlannerOptions(const PairOptions& o, const LayoutPair& pair, bool emitting);

// Throws CliError(code) with the status message when !s.ok().
void ThrowIfError(const Status& s, const std::string& context, int code = kExitBadInput);

// Bytes of every device's local buffer of `l`, in all and the largest one
// (the sizes `run` and `verify` check before planning).
int64_t TotalLocalBytes(const Layout& l);
int64_t MaxLocalBytes(const Layout& l);

std::string FormatShape(const std::vector<int64_t>& shape, DType dtype);  // "f32[16,16,16]"
std::string FormatBytes(int64_t bytes);                                   // "14336 B (14.0 KiB)"
std::string Plural(int64_t n, const std::string& word);                   // "1 device", "8 devices"

// The exit code main returns after a subcommand ran without throwing.
int& ExitCode();

void RegisterShow(CLI::App& app);
void RegisterConvert(CLI::App& app);
void RegisterPlan(CLI::App& app);
void RegisterVerify(CLI::App& app);
void RegisterRun(CLI::App& app);
void RegisterAudit(CLI::App& app);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_COMMON_H_
