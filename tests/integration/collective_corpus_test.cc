// The collective-plan corpus: tests/data/collective_cases.tsv holds cases
// from XLA's and Shardy's documentation and tests, the canonical case in every
// notation, uneven shapes, device reorders, other device sets, DTensor
// nesting, sub-axes and replicated sources and targets
// (gen_collective_cases.py). For every case and target: the plan runs exactly
// in the simulator, is no costlier than a baseline, never uses a collective
// its target lacks, and by bytes alone meets the lower bound.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "reshard/emit.h"
#include "reshard/hlo_text.h"
#include "reshard/named_text.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "exec/simulator.h"

namespace reshard {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

struct Case {
  std::string name;
  Layout source, target;
  std::vector<Mesh> meshes;
};

// As the CLI reads a pair: the mesh (with its device ids) for named texts,
// the other side's devices for {replicated}, and the meshes HLO texts suggest.
std::vector<Case> LoadCases() {
  std::ifstream in(std::string(RESHARD_TEST_DATA_DIR) + "/collective_cases.tsv");
  EXPECT_TRUE(in) << "missing corpus";
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = Split(line, '\t');
    EXPECT_GE(f.size(), 6u) << line;
    if (f.size() < 6) continue;
    std::vector<int64_t> shape;
    for (const std::string& e : Split(f[1], ',')) shape.push_back(std::stoll(e));
    std::optional<Mesh> mesh;
    if (!f[2].empty()) {
      Mesh m = ParseMesh(f[2]).value();
      if (!f[3].empty()) {
        std::vector<int64_t> ids;
        for (const std::string& e : Split(f[3], ',')) ids.push_back(std::stoll(e));
        m = Mesh::Create(m.axes(), ids).value();
      }
      mesh = m;
    }
    Result<ParsedLayout> src = ParseLayout(f[4], shape, DType::kF32, mesh);
    Result<ParsedLayout> dst = ParseLayout(f[5], shape, DType::kF32, mesh);
    if (!src.ok() && dst.ok())
      src = ParseLayout(f[4], shape, DType::kF32, Mesh::Create({{"d", static_cast<int64_t>(dst->layout.devices().size())}}, dst->layout.devices()).value());
    if (!dst.ok() && src.ok())
      dst = ParseLayout(f[5], shape, DType::kF32, Mesh::Create({{"d", static_cast<int64_t>(src->layout.devices().size())}}, src->layout.devices()).value());
    EXPECT_TRUE(src.ok() && dst.ok()) << line << ": " << src.status() << " " << dst.status();
    if (!src.ok() || !dst.ok()) continue;
    Case c{f[0], src->layout, dst->layout, {}};
    for (const std::optional<Mesh>& m : {mesh, src->mesh, dst->mesh})
      if (m) c.meshes.push_back(*m);
    for (const std::string& text : {f[4], f[5]})
      if (Result<HloSharding> h = ParseHloSharding(text); h.ok())
        for (Mesh& m : SuggestMeshes(*h)) c.meshes.push_back(std::move(m));
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(CollectiveCorpus, EveryPlanRunsExactlyAndBeatsTheBaselines) {
  const std::vector<Case> cases = LoadCases();
  ASSERT_GE(cases.size(), 60u);
  int structured_only = 0, beats_shardy = 0, named = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (PlanTarget target : {PlanTarget::kAny, PlanTarget::kJaxCpu}) {
      for (const char* topology : {"flat", "nodes:4", "torus:2x4"}) {
        PlannerOptions o;
        o.meshes = c.meshes;
        o.target = target;
        o.topology = Topology::Parse(topology).value();
        Result<PlanResult> r = PlanReshard(c.source, c.target, o);
        if (!r.ok()) {
          ASSERT_EQ(target, PlanTarget::kJaxCpu) << topology << ": " << r.status();
          ASSERT_EQ(r.status().code(), Status::Code::kNotSupported) << r.status();
          continue;
        }
        const SimulationReport sim = SimulatePlan(r->plan);
        ASSERT_TRUE(sim.ok()) << topology << ": " << sim.first_problem;
        for (const BaselineCost& b : r->baselines)
          if (r->memory_cap_bytes == 0 || b.peak_bytes <= r->memory_cap_bytes) {
            EXPECT_LE(r->plan.totals().time_us, b.time_us * (1 + 1e-9) + 1e-9) << topology << " vs " << b.name;
          }
        if (target == PlanTarget::kJaxCpu) {
          for (const PlanStep& s : r->plan.steps()) EXPECT_NE(s.op, StepOp::kExchange);
          EXPECT_TRUE(EmitHlo(r->plan).ok());
          if (r->plan.mesh()) {
            EXPECT_TRUE(EmitJax(r->plan).ok()) << EmitJax(r->plan).status();
          }
          structured_only += std::string(topology) == "flat";
        }
        if (target == PlanTarget::kAny && std::string(topology) == "flat") {
          named += r->plan.mesh().has_value();
          for (const BaselineCost& b : r->baselines)
            beats_shardy += b.name == "shardy" && r->plan.totals().time_us < b.time_us * (1 - 1e-9);
        }
      }
    }
    // By bytes alone, uncapped, with the ragged exchange: the lower bound.
    PlannerOptions o;
    o.meshes = c.meshes;
    o.topology = o.topology.BandwidthOnly();
    o.memory_cap_bytes = INT64_MAX;
    Result<PlanResult> r = PlanReshard(c.source, c.target, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes);
    EXPECT_EQ(r->plan.totals().total_bytes, r->lower_bound.total_bytes);
  }
  EXPECT_GE(named, 60);
  EXPECT_GE(structured_only, 60);
  EXPECT_GE(beats_shardy, 10);
}

TEST(CollectiveCorpus, CanonicalCaseInEveryNotation) {
  int seen = 0;
  for (const Case& c : LoadCases()) {
    if (!c.name.starts_with("canonical") || c.source.shape() != std::vector<int64_t>{16, 16, 16}) continue;
    SCOPED_TRACE(c.name);
    ++seen;
    PlannerOptions o;
    o.meshes = c.meshes;
    Result<PlanResult> r = PlanReshard(c.source, c.target, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->plan.OpNames(), (std::vector<std::string>{"all-to-all"}));
    EXPECT_EQ(r->plan.steps()[0].group_size, 8);
    EXPECT_EQ(r->plan.totals().max_recv_bytes, 1792);
    for (const BaselineCost& b : r->baselines) {
      if (b.name == "shardy") {
        EXPECT_EQ(b.ops, (std::vector<std::string>{"all-to-all", "all-to-all"}));
        EXPECT_EQ(b.max_recv_bytes, 2560);
      } else {
        EXPECT_EQ(b.max_recv_bytes, 14336);
      }
    }
    const std::string hlo = EmitHlo(r->plan).value();
    EXPECT_EQ(hlo.find("all-gather"), std::string::npos);
    EXPECT_NE(hlo.find("all-to-all("), std::string::npos);
    EXPECT_EQ(hlo.find("all-to-all("), hlo.rfind("all-to-all("));
  }
  EXPECT_GE(seen, 6);
}

}  // namespace
}  // namespace reshard
