// The audit report as JSON and as a table for people.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "reshard/audit.h"

namespace reshard {
namespace {

std::vector<std::string> OpNames(const std::vector<AuditCollective>& cs) {
  std::vector<std::string> out;
  for (const AuditCollective& c : cs) out.push_back(c.op);  // opcodes: [a-z0-9-_] only
  return out;
}

// "2 all-gathers, 1 collective-permute" in order of first appearance.
std::string CountOps(const std::vector<std::string>& ops) {
  if (ops.empty()) return "nothing";
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& op : ops) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == op; });
    if (it == counts.end()) counts.emplace_back(op, 1);
    else ++it->second;
  }
  std::string out;
  for (const auto& [op, n] : counts) out += (out.empty() ? "" : ", ") + fmt::format("{} {}{}", n, op, n > 1 ? "s" : "");
  return out;
}

std::string Ratio(int64_t xla, int64_t ours) {
  if (ours <= 0) return xla > 0 ? "all" : "-";
  return fmt::format("{:.1f}x", static_cast<double>(xla) / static_cast<double>(ours));
}

std::string Shape(const AuditFinding& f) {
  return fmt::format("{}[{}]", DTypeName(f.dtype), fmt::join(f.shape, ","));
}

// `s` with every byte that is not part of valid UTF-8 replaced by '?', so the
// JSON of text read from arbitrary input always serializes.
std::string Utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n == 2) ok = c >= 0xC2;
    if (ok && n == 3) {
      const unsigned char d = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);
    }
    if (ok && n == 4) {
      const unsigned char d = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90);
    }
    if (!ok) {
      out += '?';
      ++i;
      continue;
    }
    out.append(s, i, n);
    i += n;
  }
  return out;
}

std::vector<std::string> Utf8(const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (const std::string& s : v) out.push_back(Utf8(s));
  return out;
}

nlohmann::ordered_json Details(const std::vector<AuditCollective>& cs) {
  using J = nlohmann::ordered_json;
  J out = J::array();
  for (const AuditCollective& c : cs)
    out.push_back(J{{"op", Utf8(c.op)}, {"instruction", Utf8(c.instruction)}, {"line", c.line}, {"group_size", c.group_size},
                    {"max_recv_bytes", c.max_recv_bytes}});
  return out;
}

double Round(double v) { return static_cast<double>(static_cast<int64_t>(v * 1000 + 0.5)) / 1000; }

}  // namespace

nlohmann::ordered_json AuditJson(const AuditReport& r) {
  using J = nlohmann::ordered_json;
  J findings = J::array();
  for (const AuditFinding& f : r.findings) {
    const J xla_details = Details(f.xla_collectives);
    findings.push_back(J{{"kind", AuditKindName(f.kind)},
                         {"instruction", Utf8(f.instruction)},
                         {"shape", f.shape},
                         {"dtype", DTypeName(f.dtype)},
                         {"from", Utf8(f.from)},
                         {"to", Utf8(f.to)},
                         {"xla",
                          J{{"max_recv_bytes", f.xla_max_recv_bytes},
                            {"collectives", OpNames(f.xla_collectives)},
                            {"modeled_time_us", Round(f.xla_time_us)},
                            {"estimated", f.estimated},
                            {"details", xla_details}}},
                         {"reshard",
                          J{{"max_recv_bytes", f.reshard_max_recv_bytes},
                            {"collectives", Utf8(f.reshard_collectives)},
                            {"modeled_time_us", Round(f.reshard_time_us)},
                            {"steps", Utf8(f.reshard_steps)}}},
                         {"lower_bound_max_recv_bytes", f.lower_bound_max_recv_bytes},
                         {"saving_bytes", f.saving_bytes()},
                         {"moved_as", DTypeName(f.moved_as)},
                         {"moved_as_reason", Utf8(f.moved_as_reason)},
                         {"logged", f.logged},
                         {"source", Utf8(f.source)},
                         {"module", Utf8(f.module)},
                         {"line", f.line},
                         {"to_instruction", Utf8(f.to_instruction)},
                         {"trip_count", f.trip_count},
                         {"loop", Utf8(f.loop)}});
  }
  J modules = J::array();
  for (const AuditModule& m : r.modules)
    modules.push_back(J{{"name", Utf8(m.name)},
                        {"source", Utf8(m.source)},
                        {"line", m.line},
                        {"devices", m.devices},
                        {"reshards", m.reshards},
                        {"findings", m.findings},
                        {"xla_recv_bytes", m.xla_recv_bytes},
                        {"reshard_recv_bytes", m.reshard_recv_bytes},
                        {"collectives", m.collectives},
                        {"collective_recv_bytes", m.collective_recv_bytes},
                        {"not_attributed", Details(m.not_attributed)}});
  J issues = J::array();
  for (const AuditIssue& i : r.not_understood)
    issues.push_back(J{{"source", Utf8(i.source)}, {"line", i.line}, {"text", Utf8(i.text)}, {"reason", Utf8(i.reason)}});
  size_t count = 0;
  for (const AuditFinding& f : r.findings) count += f.kind != AuditKind::kNone;
  return J{{"findings", findings},
           {"totals",
            J{{"findings", count},
              {"reshards", r.reshards},
              {"xla_recv_bytes", r.xla_recv_bytes},
              {"reshard_recv_bytes", r.reshard_recv_bytes},
              {"modules", r.modules.size()},
              {"log_lines", r.log_lines}}},
           {"modules", modules},
           {"not_understood", issues},
           {"notes", Utf8(r.notes)}};
}

std::string AuditTable(const AuditReport& r) {
  std::string out;
  size_t count = 0;
  for (const AuditFinding& f : r.findings) count += f.kind != AuditKind::kNone;
  out += fmt::format("reshard audit: {} finding{} in {} HLO module{} ({} reshard{} found), {} logged rematerialization{}\n",
                     count, count == 1 ? "" : "s", r.modules.size(), r.modules.size() == 1 ? "" : "s", r.reshards,
                     r.reshards == 1 ? "" : "s", r.log_lines, r.log_lines == 1 ? "" : "s");
  if (!r.findings.empty()) {
    // Columns: #, kind, array, shape, XLA B, reshard B, saving, XLA does, reshard does.
    std::vector<std::vector<std::string>> rows = {
        {"#", "kind", "array", "shape", "XLA B", "reshard B", "saving", "XLA does", "reshard does"}};
    for (size_t k = 0; k < r.findings.size(); ++k) {
      const AuditFinding& f = r.findings[k];
      rows.push_back({std::to_string(k + 1), std::string(AuditKindName(f.kind)), "%" + f.instruction, Shape(f),
                      std::to_string(f.xla_max_recv_bytes) + (f.estimated ? "~" : ""), std::to_string(f.reshard_max_recv_bytes),
                      fmt::format("{} ({})", f.saving_bytes(), Ratio(f.xla_max_recv_bytes, f.reshard_max_recv_bytes)),
                      CountOps(OpNames(f.xla_collectives)), CountOps(f.reshard_collectives)});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& row : rows)
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    const std::vector<bool> right = {true, false, false, false, true, true, true, false, false};
    out += "\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      std::string line = " ";
      for (size_t c = 0; c < rows[i].size(); ++c) {
        const std::string& cell = rows[i][c];
        const std::string pad(width[c] - cell.size(), ' ');
        line += (c ? "  " : "") + (right[c] ? pad + cell : cell + (c + 1 < rows[i].size() ? pad : ""));
      }
      out += line + "\n";
      if (i == 0) continue;
      const AuditFinding& f = r.findings[i - 1];
      std::string where = f.module.empty() ? fmt::format("{}:{}", f.source, f.line)
                                           : fmt::format("{}, {}:{}", f.module, f.source, f.line);
      if (!f.to_instruction.empty()) where += ", target layout at %" + f.to_instruction;
      if (f.logged) where += f.estimated ? "; from XLA's log (XLA's side estimated)" : "; logged by XLA";
      if (f.trip_count > 1)
        where += fmt::format("; inside %{}, which runs {} times (XLA's known_trip_count): bytes per run, totals {} times", f.loop,
                             f.trip_count, f.trip_count);
      else if (f.trip_count == 0)
        where += fmt::format("; inside %{}, whose trip count XLA does not state: counted once", f.loop);
      out += fmt::format("    {} -> {}\n    {}\n", f.from, f.to, where);
      if (f.moved_as != f.dtype) out += fmt::format("    moved as {}: {}\n", DTypeName(f.moved_as), f.moved_as_reason);
      if (!f.reshard_steps.empty()) out += fmt::format("    reshard: {}\n", fmt::join(f.reshard_steps, "; "));
    }
  }
  if (!r.modules.empty()) {
    out += "\nper module:\n";
    for (const AuditModule& m : r.modules)
      out += fmt::format("  {} ({}, {} devices): {} reshard{}, {} finding{} (XLA {} B, reshard {} B); {} collective{} in all, {} B\n",
                         m.name, m.source, m.devices, m.reshards, m.reshards == 1 ? "" : "s", m.findings,
                         m.findings == 1 ? "" : "s", m.xla_recv_bytes, m.reshard_recv_bytes, m.collectives,
                         m.collectives == 1 ? "" : "s", m.collective_recv_bytes);
    for (const AuditModule& m : r.modules) {
      if (m.not_attributed.empty()) continue;
      std::vector<std::string> names;
      for (const AuditCollective& c : m.not_attributed) names.push_back(fmt::format("%{} ({}, line {})", c.instruction, c.op, c.line));
      out += fmt::format("  {}: part of no reshard found: {}\n", m.name, fmt::join(names, ", "));
    }
  }
  out += fmt::format("total: {} finding{}: XLA {} B into the busiest device, reshard {} B", count, count == 1 ? "" : "s",
                     r.xla_recv_bytes, r.reshard_recv_bytes);
  if (r.reshard_recv_bytes > 0 && r.xla_recv_bytes > r.reshard_recv_bytes)
    out += fmt::format(" ({} less)", Ratio(r.xla_recv_bytes, r.reshard_recv_bytes));
  out += "\n";
  if (!r.not_understood.empty()) {
    out += fmt::format("\nnot understood ({}):\n", r.not_understood.size());
    for (const AuditIssue& i : r.not_understood) out += fmt::format("  {}:{}: {}\n    {}\n", i.source, i.line, i.reason, i.text);
  }
  if (!r.notes.empty()) {
    out += "\nnotes:\n";
    for (const std::string& n : r.notes) out += "  " + n + "\n";
  }
  return out;
}

}  // namespace reshard
