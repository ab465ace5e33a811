// The audit of real jax 0.10.2 programs (tests/data/audit, written by
// gen_audit_fixtures.py): each case's folder holds the compiled HLO, the
// --xla_dump_to file and XLA's log; cases.json says what the audit must find.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "reshard/audit.h"

namespace reshard {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(RESHARD_TEST_DATA_DIR) / "audit";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const nlohmann::json& Manifest() {
  static const nlohmann::json m = nlohmann::json::parse(ReadFile(kDir / "cases.json"));
  return m;
}

std::vector<AuditInput> Inputs(const std::string& name, bool hlo, bool dump, bool log) {
  std::vector<AuditInput> in;
  const fs::path dir = kDir / name;
  if (hlo) in.push_back({(dir / "compiled.hlo.txt").string(), ReadFile(dir / "compiled.hlo.txt")});
  if (dump)
    for (const auto& e : fs::directory_iterator(dir / "dump")) in.push_back({e.path().string(), ReadFile(e.path())});
  if (log) in.push_back({(dir / "xla.log").string(), ReadFile(dir / "xla.log")});
  return in;
}

AuditReport AuditOk(const std::vector<AuditInput>& in, bool all = false) {
  AuditOptions o;
  o.all_reshards = all;
  Result<AuditReport> r = Audit(in, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : AuditReport{};
}

std::string Describe(const AuditReport& r) { return AuditTable(r); }

TEST(AuditFixtures, ThereAreEnough) {
  const nlohmann::json& cases = Manifest()["cases"];
  EXPECT_GE(cases.size(), 21u);
  int logged = 0, clean = 0;
  for (const auto& c : cases) {
    logged += !c["logged_rematerializations"].empty();
    clean += c["expect"]["findings"].empty();
  }
  EXPECT_GE(logged, 5);
  EXPECT_GE(clean, 10);
}

// Every case, read whole (compiled text, dump and log): exactly the expected
// findings, nothing not understood, every logged rematerialization found.
TEST(AuditFixtures, EachCaseReportsWhatItShould) {
  for (const auto& c : Manifest()["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const AuditReport r = AuditOk(Inputs(name, true, true, true));
    const auto& want = c["expect"]["findings"];
    ASSERT_EQ(r.findings.size(), want.size()) << Describe(r);
    for (size_t k = 0; k < want.size(); ++k) {
      const AuditFinding& f = r.findings[k];
      EXPECT_EQ(AuditKindName(f.kind), want[k]["kind"].get<std::string>());
      EXPECT_EQ(f.from, want[k]["from"].get<std::string>());
      EXPECT_EQ(f.to, want[k]["to"].get<std::string>());
      EXPECT_EQ(f.xla_max_recv_bytes, want[k]["xla"].get<int64_t>());
      EXPECT_EQ(f.reshard_max_recv_bytes, want[k]["reshard"].get<int64_t>());
      EXPECT_EQ(f.logged, want[k]["logged"].get<bool>());
      // The type XLA's collectives carry, where it is not the array's (XLA:CPU moves bf16 as f32).
      EXPECT_EQ(DTypeName(f.moved_as), want[k].value("moved_as", std::string(DTypeName(f.dtype))));
      // Inside a loop: its trip count, as XLA states it.
      EXPECT_EQ(f.trip_count, want[k].value("trip_count", int64_t{1}));
      EXPECT_FALSE(f.estimated);
      EXPECT_GT(f.xla_max_recv_bytes, f.lower_bound_max_recv_bytes);
    }
    EXPECT_EQ(r.reshards, c["expect"]["reshards"].get<int64_t>()) << Describe(r);
    EXPECT_TRUE(r.not_understood.empty()) << Describe(r);
    bool not_followed = false;
    for (const std::string& n : r.notes) not_followed = not_followed || n.find("not followed") != std::string::npos;
    EXPECT_EQ(not_followed, !c["expect"]["followed"].get<bool>()) << Describe(r);
    EXPECT_EQ(r.log_lines, static_cast<int64_t>(c["logged_rematerializations"].size()));
    int logged = 0, want_logged = 0;
    for (const AuditFinding& f : r.findings) logged += f.logged;
    for (const auto& w : want) want_logged += w["logged"].get<bool>();
    EXPECT_EQ(logged, want_logged);
  }
}

// XLA's side of a reshard is what the independent Python reader counts when the
// module has no other collectives; where no finding is made, the reshards move
// no more than reshard's plan.
TEST(AuditFixtures, BytesAgreeWithHloBytesPy) {
  for (const auto& c : Manifest()["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const AuditReport r = AuditOk(Inputs(name, false, true, false), /*all=*/true);
    int64_t sum = 0;
    for (const AuditFinding& f : r.findings) {
      sum += f.xla_max_recv_bytes;
      if (f.kind == AuditKind::kNone) {
        EXPECT_LE(f.xla_max_recv_bytes, f.reshard_max_recv_bytes);
      }
    }
    const bool alone = r.findings.size() == 1 && r.modules.size() == 1 &&
                       r.modules[0].collectives == static_cast<int64_t>(r.findings[0].xla_collectives.size());
    if (alone) {
      EXPECT_EQ(sum, c["xla_recv_bytes_all_collectives"].get<int64_t>());
    }
  }
}

// The HLO alone (dump folder or compiled text) finds each logged
// rematerialization; the log alone estimates it with the logged shardings.
TEST(AuditFixtures, HloAloneAndLogAlone) {
  for (const auto& c : Manifest()["cases"]) {
    const auto& logged = c["logged_rematerializations"];
    const auto& want = c["expect"]["findings"];
    if (logged.empty() || want.empty()) continue;  // reshard_jax_seed: logged by a module that never runs
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const AuditReport dump = AuditOk(Inputs(name, false, true, false));
    ASSERT_EQ(dump.findings.size(), want.size()) << Describe(dump);
    EXPECT_EQ(dump.findings[0].xla_max_recv_bytes, want[0]["xla"].get<int64_t>());
    const AuditReport log = AuditOk(Inputs(name, false, false, true));
    // One estimate per distinct line: a line logged again (in each conditional branch) is one.
    std::set<std::string> distinct;
    for (const auto& l : logged)
      distinct.insert(l["from"].get<std::string>() + "|" + l["to"].get<std::string>() + "|" + l["instruction"].get<std::string>());
    ASSERT_EQ(log.findings.size(), distinct.size()) << Describe(log);
    EXPECT_TRUE(log.findings[0].estimated);
    EXPECT_EQ(log.findings[0].from, logged[0]["from"].get<std::string>());
    EXPECT_EQ(log.findings[0].to, logged[0]["to"].get<std::string>());
    EXPECT_EQ(log.findings[0].instruction, logged[0]["instruction"].get<std::string>());
  }
}

// XLA:CPU moves bf16 arrays as f32 (f16 as f16): both sides are priced in the type
// moved, so a bf16 reshard XLA does as well as reshard's plan is no finding, and a
// real one claims the saving in the bytes that move. Before: move_dim_bf16 was
// "excess 1536 B vs 768 B" and remat_canonical_bf16 claimed 14336 B vs 896 B.
TEST(AuditFixtures, Bf16IsPricedAsXlaCpuMovesIt) {
  for (const char* name : {"move_dim_bf16", "transpose_x8_bf16", "move_dim_f16"}) {
    SCOPED_TRACE(name);
    const AuditReport r = AuditOk(Inputs(name, true, true, true), /*all=*/true);
    ASSERT_EQ(r.findings.size(), 1u) << Describe(r);
    const AuditFinding& f = r.findings[0];
    EXPECT_EQ(f.kind, AuditKind::kNone) << Describe(r);
    EXPECT_EQ(f.xla_max_recv_bytes, f.reshard_max_recv_bytes);
    EXPECT_EQ(f.moved_as, f.dtype == DType::kBF16 ? DType::kF32 : f.dtype);
  }
  const AuditReport hlo = AuditOk(Inputs("remat_canonical_bf16", false, true, false));
  ASSERT_EQ(hlo.findings.size(), 1u);
  EXPECT_EQ(hlo.findings[0].dtype, DType::kBF16);
  EXPECT_EQ(hlo.findings[0].moved_as, DType::kF32);
  EXPECT_EQ(hlo.findings[0].xla_max_recv_bytes, 14336);
  EXPECT_EQ(hlo.findings[0].reshard_max_recv_bytes, 1792);
  EXPECT_EQ(hlo.findings[0].lower_bound_max_recv_bytes, 1792);
  EXPECT_NE(hlo.findings[0].moved_as_reason.find("carry f32"), std::string::npos);
  EXPECT_NE(AuditTable(hlo).find("moved as f32"), std::string::npos);

  // From the log alone: its PjRt lines name CPU devices, so XLA:CPU's rule applies.
  const AuditReport log = AuditOk(Inputs("remat_canonical_bf16", false, false, true));
  ASSERT_EQ(log.findings.size(), 1u);
  EXPECT_TRUE(log.findings[0].estimated);
  EXPECT_EQ(log.findings[0].moved_as, DType::kF32);
  EXPECT_EQ(log.findings[0].xla_max_recv_bytes, 14336);
  EXPECT_EQ(log.findings[0].reshard_max_recv_bytes, 1792);
  EXPECT_NE(log.findings[0].moved_as_reason.find("names XLA:CPU devices"), std::string::npos);
  // The rematerialization line alone does not say which backend: priced as bf16.
  std::string line;
  for (std::istringstream in(ReadFile(kDir / "remat_canonical_bf16" / "xla.log")); std::getline(in, line);)
    if (line.find("Involuntary full rematerialization") != std::string::npos) break;
  const AuditReport bare = AuditOk({{"remat.log", line + "\n"}});
  ASSERT_EQ(bare.findings.size(), 1u);
  EXPECT_EQ(bare.findings[0].moved_as, DType::kBF16);
  EXPECT_EQ(bare.findings[0].xla_max_recv_bytes, 7168);
  EXPECT_EQ(bare.findings[0].reshard_max_recv_bytes, 896);
}

// The random programs (random/programs.json): one in five is bf16. Each reshard found
// in a bf16 program is priced in f32, as XLA:CPU moves it, and none is a finding.
TEST(AuditRandomPrograms, Bf16ProgramsHaveNoFalseFinding) {
  const nlohmann::json programs = nlohmann::json::parse(ReadFile(kDir / "random" / "programs.json"))["programs"];
  const AuditReport r = AuditOk({{"modules.hlo.txt", ReadFile(kDir / "random" / "modules.hlo.txt")}}, /*all=*/true);
  int bf16 = 0, moving = 0, found = 0;
  for (const auto& p : programs) {
    if (p["dtype"] != "bfloat16") continue;
    ++bf16;
    moving += p["xla_recv_bytes_all_collectives"].get<int64_t>() > 0;
    for (const AuditFinding& f : r.findings) {
      if (f.module != p["module"].get<std::string>()) continue;
      SCOPED_TRACE(f.module);
      ++found;
      EXPECT_EQ(f.dtype, DType::kBF16);
      EXPECT_EQ(f.moved_as, DType::kF32);
      EXPECT_EQ(f.kind, AuditKind::kNone) << Describe(r);
    }
  }
  EXPECT_GE(bf16, 10);
  EXPECT_EQ(found, moving);
}

// `--all` finds the one reshard of each random program, between the program's two
// shardings as JAX states them, with the bytes of every collective of its module
// (tests/jax/hlo_bytes.py's count); a program whose move needs no collective (a
// slice) has none. Before: 7 of the 47 that move data listed no reshard (4 with the
// false note "not a pair of tiled layouts").
TEST(AuditRandomPrograms, AllFindsEachReshardWithItsModulesBytes) {
  const nlohmann::json programs = nlohmann::json::parse(ReadFile(kDir / "random" / "programs.json"))["programs"];
  const AuditReport r = AuditOk({{"modules.hlo.txt", ReadFile(kDir / "random" / "modules.hlo.txt")}}, /*all=*/true);
  EXPECT_EQ(r.modules.size(), programs.size());
  EXPECT_TRUE(r.notes.empty()) << Describe(r);
  EXPECT_TRUE(r.not_understood.empty()) << Describe(r);
  int moving = 0;
  for (const auto& p : programs) {
    const std::string module = p["module"];
    SCOPED_TRACE(module + ": " + p["src_spec"].get<std::string>() + " -> " + p["dst_spec"].get<std::string>());
    std::vector<const AuditFinding*> found;
    for (const AuditFinding& f : r.findings)
      if (f.module == module) found.push_back(&f);
    const int64_t bytes = p["xla_recv_bytes_all_collectives"].get<int64_t>();
    if (bytes == 0) {
      EXPECT_TRUE(found.empty());
      continue;
    }
    ++moving;
    ASSERT_EQ(found.size(), 1u) << Describe(r);
    const AuditFinding& f = *found[0];
    EXPECT_EQ(f.from, p["src_hlo"].get<std::string>());
    EXPECT_EQ(f.to, p["dst_hlo"].get<std::string>());
    EXPECT_EQ(f.xla_max_recv_bytes, bytes);
    EXPECT_EQ(f.xla_collectives.size(), p["collectives"].size());
    EXPECT_GE(f.xla_max_recv_bytes, f.lower_bound_max_recv_bytes);
  }
  EXPECT_GE(moving, 40);
}

// The canonical program fixed with reshard.jax.reshard, explained: the dump holds
// reshard.jax's two comparison modules (XLA's lowering, which rematerializes, and
// reshard's) and the log XLA's line for the first. Before: a full-rematerialization
// finding in jit_reshard_comparison_only. None of it is the user's.
TEST(AuditFixtures, ReshardJaxComparisonModulesAreNotTheUsers) {
  auto notes_with = [](const AuditReport& r, std::string_view text) {
    return std::count_if(r.notes.begin(), r.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  const AuditReport all = AuditOk(Inputs("reshard_jax_seed", true, true, true), /*all=*/true);
  ASSERT_EQ(all.findings.size(), 1u) << Describe(all);
  EXPECT_EQ(all.findings[0].kind, AuditKind::kNone);
  EXPECT_EQ(all.findings[0].module, "jit__lambda");
  EXPECT_FALSE(all.findings[0].logged);
  ASSERT_EQ(all.modules.size(), 1u);
  EXPECT_EQ(all.modules[0].name, "jit__lambda");
  EXPECT_EQ(notes_with(all, "compiled by reshard.jax only to compare"), 2) << Describe(all);
  EXPECT_EQ(notes_with(all, "is in reshard.jax's comparison program (op_name jit(reshard_comparison_only)"), 1) << Describe(all);

  // The log alone: its op_name names the comparison program.
  const AuditReport log = AuditOk(Inputs("reshard_jax_seed", false, false, true));
  EXPECT_TRUE(log.findings.empty()) << Describe(log);

  // A line without metadata is matched to the comparison module's reshard of its layouts.
  std::string line;
  for (std::istringstream in(ReadFile(kDir / "reshard_jax_seed" / "xla.log")); std::getline(in, line);)
    if (line.find("Involuntary full rematerialization") != std::string::npos) break;
  const size_t meta = line.find(", metadata=");
  ASSERT_NE(meta, std::string::npos);
  const std::string bare = line.substr(0, meta) + ". As the last resort, SPMD will replicate the tensor\n";
  std::vector<AuditInput> in = Inputs("reshard_jax_seed", false, true, false);
  in.push_back({"bare.log", bare});
  const AuditReport by_layouts = AuditOk(in);
  EXPECT_TRUE(by_layouts.findings.empty()) << Describe(by_layouts);
  EXPECT_EQ(notes_with(by_layouts, "is the reshard of reshard.jax's comparison module jit_reshard_comparison_only"), 1)
      << Describe(by_layouts);

  // A line that matches no reshard given cannot be told from a comparison module's
  // when the inputs hold any; without them it is estimated, as before.
  std::string other;
  for (std::istringstream s(ReadFile(kDir / "x16_canonical_analog" / "xla.log")); std::getline(s, other);)
    if (other.find("Involuntary full rematerialization") != std::string::npos) break;
  in.back() = {"other.log", other + "\n"};
  const AuditReport unmatched = AuditOk(in);
  EXPECT_TRUE(unmatched.findings.empty()) << Describe(unmatched);
  EXPECT_EQ(notes_with(unmatched, "whose log lines look the same: not counted"), 1) << Describe(unmatched);
  const AuditReport user_only = AuditOk({{"compiled.hlo.txt", ReadFile(kDir / "reshard_jax_seed" / "compiled.hlo.txt")},
                                         {"other.log", other + "\n"}});
  ASSERT_EQ(user_only.findings.size(), 1u) << Describe(user_only);
  EXPECT_TRUE(user_only.findings[0].estimated);
}

// lax.scan over 4 layers whose body rematerializes its carry twice per iteration:
// found from the HLO alone (before: "collectives inside %while.11 are not
// followed", no finding), each with the loop's trip count, and the totals count
// each iteration.
TEST(AuditFixtures, ScanBodyRematerializesFromTheHloAlone) {
  const AuditReport r = AuditOk(Inputs("scan_remat", false, true, false));
  ASSERT_EQ(r.findings.size(), 2u) << Describe(r);
  for (const AuditFinding& f : r.findings) {
    EXPECT_EQ(f.kind, AuditKind::kFullRematerialization);
    EXPECT_EQ(f.trip_count, 4);
    EXPECT_EQ(f.loop, "while.11");
    EXPECT_EQ(f.xla_max_recv_bytes, 14336);
    EXPECT_EQ(f.reshard_max_recv_bytes, 1792);
    EXPECT_FALSE(f.logged);
  }
  EXPECT_EQ(r.findings[0].from, "{devices=[1,8,1]<=[8]}");
  EXPECT_EQ(r.findings[1].from, "{devices=[2,1,4]<=[4,2]T(1,0)}");
  EXPECT_EQ(r.xla_recv_bytes, 4 * 28672);
  EXPECT_EQ(r.reshard_recv_bytes, 4 * 3584);
  ASSERT_EQ(r.modules.size(), 1u);
  EXPECT_EQ(r.modules[0].collectives, 3);
  EXPECT_EQ(r.modules[0].collective_recv_bytes, 4 * 28672);
  EXPECT_TRUE(r.modules[0].not_attributed.empty());
  EXPECT_TRUE(r.notes.empty()) << Describe(r);
}

TEST(AuditFixtures, TheCanonicalCase) {
  const AuditReport r = AuditOk(Inputs("canonical_jit", false, true, false));
  ASSERT_EQ(r.findings.size(), 1u);
  const AuditFinding& f = r.findings[0];
  EXPECT_EQ(f.kind, AuditKind::kFullRematerialization);
  EXPECT_EQ(f.xla_max_recv_bytes, 14336);
  EXPECT_EQ(f.reshard_max_recv_bytes, 1792);
  EXPECT_EQ(f.reshard_collectives, std::vector<std::string>{"all-to-all"});
  ASSERT_EQ(f.xla_collectives.size(), 2u);
  EXPECT_EQ(f.xla_collectives[0].op, "all-gather");
  EXPECT_EQ(f.xla_collectives[1].op, "all-gather");
}

}  // namespace
}  // namespace reshard
