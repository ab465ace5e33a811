// Shared pieces of the reshard subcommands: the common options, how they
// become a shape, a mesh and layouts, and how failures become exit codes.
#ifndef RESHARD_TOOLS_CLI_COMMON_H_
#define RESHARD_TOOLS_CLI_COMMON_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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
};

struct CommonOptions {
  std::string shape;
  std::string dtype = "f32";
  std::string mesh;
  std::string devices;
  bool json = false;
};

void AddCommonOptions(CLI::App* app, CommonOptions& o);

// `text` as error messages quote it: at most 100 characters ("..." where cut),
// bytes that are not UTF-8 as '?'.
std::string Short(const std::string& text);
// "1,2,3" or "[1,2,3]" -> {1,2,3}; throws CliError(2) naming `option` and the column.
std::vector<int64_t> ParseIntList(const std::string& text, const std::string& option);
// "16,16,16" -> {16,16,16}; "" or "[]" -> rank 0. Throws CliError(2).
std::vector<int64_t> ParseShape(const std::string& text);
DType ParseDTypeOrThrow(const std::string& text);
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
  std::string memory_cap;
  std::optional<double> alpha_us, bandwidth_gbps, intra_alpha_us, intra_bandwidth_gbps, hop_alpha_us, step_latency_us,
      copy_bandwidth_gbps;
  bool bandwidth_only = false;
};
struct LayoutPair {
  ParsedLayout source, target;
  std::vector<Mesh> meshes;  // every mesh the texts were stated over or suggest, for the planner
};
void AddPairOptions(CLI::App* app, PairOptions& o);
// A side without a device set of its own ({replicated} with no mesh) takes the other side's.
LayoutPair LoadPair(const PairOptions& o);
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
