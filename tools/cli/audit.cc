// reshard audit: read XLA's HLO dumps and logs, list the reshards that move
// more than they need, and what reshard's plans would move instead.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "common.h"
#include "reshard/audit.h"

namespace reshard::cli {
namespace {

namespace fs = std::filesystem;

struct AuditOptionsCli {
  std::vector<std::string> paths;
  std::string target = "jax-cpu";
  bool json = false;
  bool all = false;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Files of a dump folder worth reading: optimized modules and logs.
bool Wanted(const fs::path& p) {
  const std::string name = p.filename().string();
  return EndsWith(name, "after_optimizations.txt") || EndsWith(name, ".hlo") || EndsWith(name, ".hlo.txt") ||
         EndsWith(name, ".log") || EndsWith(name, ".stderr");
}

std::string ReadAll(std::istream& in) {
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<AuditInput> LoadInputs(const std::vector<std::string>& paths) {
  std::vector<AuditInput> inputs;
  for (const std::string& path : paths) {
    if (path == "-") {
      inputs.push_back({"-", ReadAll(std::cin)});
      continue;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw CliError(kExitBadInput, path + ": no such file or folder");
    if (fs::is_directory(st)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file() && Wanted(it->path())) files.push_back(it->path());
      if (ec) throw CliError(kExitBadInput, path + ": " + ec.message());
      if (files.empty())
        throw CliError(kExitBadInput, path + ": no *after_optimizations.txt, *.hlo, *.hlo.txt, *.log or *.stderr file in this folder");
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) {
        std::ifstream in(f, std::ios::binary);
        if (!in) throw CliError(kExitBadInput, f.string() + ": cannot be read");
        inputs.push_back({f.string(), ReadAll(in)});
      }
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CliError(kExitBadInput, path + ": cannot be read");
    inputs.push_back({path, ReadAll(in)});
  }
  return inputs;
}

void RunAudit(const AuditOptionsCli& o) {
  AuditOptions options;
  Result<PlanTarget> target = ParsePlanTarget(o.target);
  ThrowIfError(target.status(), "--for");
  options.target = *target;
  options.all_reshards = o.all;
  const std::vector<AuditInput> inputs = LoadInputs(o.paths);
  Result<AuditReport> report = Audit(inputs, options);
  ThrowIfError(report.status(), "");
  if (o.json) {
    std::cout << AuditJson(*report).dump() << "\n";
  } else {
    std::cout << AuditTable(*report);
  }
}

}  // namespace

void RegisterAudit(CLI::App& app) {
  auto o = std::make_shared<AuditOptionsCli>();
  CLI::App* cmd = app.add_subcommand(
      "audit", "find the reshards in XLA's HLO dumps and logs that move more than needed, and what reshard's plans would move");
  cmd->add_option("paths", o->paths, "HLO module text, XLA log, a dump folder, or - for standard input")->required();
  cmd->add_option("--for", o->target,
                  "the collectives reshard's plans may use: jax-cpu (default: structured collectives, as XLA), any, xla, "
                  "jax-gpu, mpi, nccl")
      ->check(CLI::IsMember({"any", "xla", "jax-cpu", "jax-gpu", "mpi", "nccl"}))
      ->capture_default_str();
  cmd->add_flag("--all", o->all, "also list the reshards that move no more than reshard's plan (kind \"none\")");
  cmd->add_flag("--json", o->json, "one JSON object: findings, totals, modules, not_understood, notes");
  cmd->callback([o]() { RunAudit(*o); });
}

}  // namespace reshard::cli
