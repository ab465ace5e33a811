#include "reshard/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "reshard/notation.h"
#include "exec/simulator.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, std::optional<Mesh> mesh = std::nullopt) {
  Result<ParsedLayout> p = ParseLayout(text, shape, DType::kF32, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

TEST(Planner, CanonicalCaseIsOneAllToAll) {
  Layout src = Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16});
  Layout dst = Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16});
  Result<PlanResult> r = PlanReshard(src, dst, PlannerOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const CollectivePlan& plan = r->plan;
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_EQ(plan.steps()[0].op, StepOp::kAllToAll);
  EXPECT_EQ(plan.steps()[0].group_size, 8);
  EXPECT_EQ(plan.totals().max_recv_bytes, 1792);
  EXPECT_EQ(plan.totals().total_bytes, 14336);
  ASSERT_EQ(r->baselines.size(), 2u);
  EXPECT_EQ(r->baselines[0].name, "full_rematerialization");
  EXPECT_EQ(r->baselines[0].max_recv_bytes, 14336);
  EXPECT_EQ(r->baselines[1].name, "shardy");
  EXPECT_EQ(r->baselines[1].max_recv_bytes, 2560);
  EXPECT_EQ(r->baselines[1].collectives, 2);
  SimulationReport sim = SimulatePlan(plan);
  EXPECT_TRUE(sim.ok()) << sim.first_problem;
  EXPECT_EQ(sim.elements_checked, 4096);
}

Layout Named(const std::string& spec, std::vector<int64_t> shape, const Mesh& mesh) { return Parse(spec, shape, mesh); }

TEST(Planner, CanonicalCaseOverItsMeshNamesTheAxes) {
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  Result<PlanResult> r = PlanReshard(Named("P('y', None, 'x')", {16, 16, 16}, mesh),
                                     Named("P(None, ('x','y'), None)", {16, 16, 16}, mesh), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->plan.steps().size(), 1u);
  const PlanStep& s = r->plan.steps()[0];
  EXPECT_EQ(s.group_spec, "{x,y}");
  EXPECT_EQ(s.input_spec, "[{y}, {}, {x}]");
  EXPECT_EQ(s.output_spec, "[{}, {x, y}, {}]");
  EXPECT_EQ(s.input_shard, (std::vector<int64_t>{8, 16, 4}));
  EXPECT_EQ(s.output_shard, (std::vector<int64_t>{16, 2, 16}));
  // Pre-transpose, the all-to-all on a leading dim of 8 chunks, post-transpose.
  int a2a = 0;
  for (const ProgramOp& op : s.program) a2a += op.kind == ProgramOp::Kind::kAllToAll;
  EXPECT_EQ(a2a, 1);
}

// On nodes of 8 with slow links between them, moving the whole array across
// nodes in one exchange costs 56 inter-node messages per device; the plan
// trades them for steps inside nodes and one inter-node message each.
TEST(Planner, HierarchicalPlanBeatsOneStepExchangeAcrossNodes) {
  const Mesh mesh = Mesh::Create({{"x", 64}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  o.topology = Topology::Nodes(8);
  const Layout src = Named("P('x', None)", {64, 64}, mesh), dst = Named("P(None, 'x')", {64, 64}, mesh);
  Result<PlanResult> r = PlanReshard(src, dst, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->plan.steps().size(), 2u);
  double exchange_time = -1;
  for (const PlanCandidate& c : r->candidates)
    if (c.steps.size() == 1 && c.steps[0].starts_with("exchange")) exchange_time = c.time_us;
  ASSERT_GT(exchange_time, 0) << "the one-step exchange was priced";
  EXPECT_LT(r->plan.totals().time_us * 2, exchange_time);
  EXPECT_TRUE(SimulatePlan(r->plan).ok());
  // With one flat network the single all-to-all wins again.
  o.topology = Topology::Flat();
  r = PlanReshard(src, dst, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->plan.OpNames(), (std::vector<std::string>{"all-to-all"}));
}

TEST(Planner, MemoryCapBelowEveryPlanIsAnError) {
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  o.memory_cap_bytes = 1000;  // less than the source and target shards (2 x 2048)
  Result<PlanResult> r = PlanReshard(Named("P('y', None, 'x')", {16, 16, 16}, mesh),
                                     Named("P(None, ('x','y'), None)", {16, 16, 16}, mesh), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("memory cap of 1000 bytes"), std::string::npos) << r.status();
}

// Above 64 devices the search prices an exchange from sampled devices; the
// cap must hold on every device all the same. On 640 devices across nodes a
// plan's last step, an exchange, fit the cap on the sample (8704 B) and
// needed 10752 B on 112 devices. Random pairs over 80 to 640 devices, on
// nodes and a torus: every step of every plan within the cap, except the
// one-step exchange the default cap never excludes, or where it was lifted.
// A one-step exchange is built message by message once chosen: past 2^24
// messages it is taken only where no structured plan is found (on a 512 x 512
// mesh, 2^27 messages built in 4.3 s to save 2% of the modeled time; on
// 1024 x 1024, 55 s). At 2^24 it is still a candidate, and chosen here; with
// the exchange strategy, where nothing else is searched, it is still found.
TEST(Planner, ExchangesOfVeryManyMessagesOnlyWhereNothingElseIs) {
  for (const int64_t n : {256, 272}) {
    const Mesh mesh = Mesh::Create({{"x", n}, {"y", n}}).value();
    PlannerOptions o;
    o.meshes = {mesh};
    const std::vector<int64_t> shape = {16 * n, 16 * n};
    const Layout src = Named("P('x','y')", shape, mesh), dst = Named("P(None,'x')", shape, mesh);
    Result<PlanResult> r = PlanReshard(src, dst, o);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::string> ops;
    for (const PlanStep& s : r->plan.steps()) ops.emplace_back(StepOpName(s.op));
    const bool listed = std::any_of(r->candidates.begin(), r->candidates.end(), [](const PlanCandidate& c) {
      return c.note.find("not an edge: about") != std::string::npos;
    });
    if (n == 256) {
      EXPECT_EQ(ops, std::vector<std::string>{"exchange"});  // 2^24 messages, the fastest plan
      EXPECT_FALSE(listed);
      continue;
    }
    EXPECT_EQ(ops, (std::vector<std::string>{"collective-permute", "all-gather"}));  // 272^3 messages listed
    EXPECT_TRUE(listed);
    EXPECT_EQ(r->plan.totals().max_recv_bytes, r->lower_bound.max_recv_bytes);
    o.strategy = Strategy::kExchange;
    r = PlanReshard(src, dst, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->plan.steps().size(), 1u);
    EXPECT_EQ(r->plan.steps()[0].op, StepOp::kExchange);
  }
}

TEST(Planner, EveryStepFitsTheCapOnEveryDeviceOfLargeMeshes) {
  const Mesh mesh = Mesh::Create({{"x", 8}, {"y", 2}, {"z", 5}, {"w", 8}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  o.topology = Topology::Nodes(8);
  auto check = [&](const Layout& src, const Layout& dst, const std::string& text) {
    Result<PlanResult> r = PlanReshard(src, dst, o);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    const auto& steps = r->plan.steps();
    const bool exempt = r->memory_cap_lifted || (steps.size() == 1 && steps[0].op == StepOp::kExchange);
    if (!exempt) {
      for (const PlanStep& s : steps) {
        EXPECT_LE(s.peak_bytes.Max(), r->memory_cap_bytes) << text << " " << StepOpName(s.op);
      }
    }
  };
  check(Named("P('y', 'x', 'z')", {64, 64, 1}, mesh), Named("P(None, 'z', None)", {64, 64, 1}, mesh), "the probe's case");
  std::mt19937_64 rng(20261206);
  const std::vector<std::vector<Mesh::Axis>> meshes = {
      {{"x", 8}, {"y", 2}, {"z", 5}, {"w", 8}}, {{"x", 4}, {"y", 4}, {"z", 5}}, {{"x", 16}, {"y", 8}}, {{"x", 10}, {"y", 8}}};
  const char* names[] = {"x", "y", "z", "w"};
  for (int i = 0; i < 96; ++i) {
    const Mesh m = Mesh::Create(meshes[static_cast<size_t>(i) % meshes.size()]).value();
    o.meshes = {m};
    o.topology = i % 3 == 2 ? Topology::Torus({8, static_cast<int64_t>(m.num_devices()) / 8}) : Topology::Nodes(i % 2 ? 4 : 8);
    auto spec = [&]() {
      std::vector<std::string> dims(3);
      for (int64_t a = 0; a < m.num_axes(); ++a) {
        const size_t d = rng() % 4;
        if (d < 3) dims[d] += std::string(dims[d].empty() ? "" : ",") + "'" + names[static_cast<size_t>(a)] + "'";
      }
      std::string out = "P(";
      for (size_t d = 0; d < 3; ++d)
        out += (d ? ", " : "") + (dims[d].empty() ? std::string("None") : "(" + dims[d] + ",)");
      return out + ")";
    };
    const std::vector<int64_t> shape = {64 + static_cast<int64_t>(rng() % 3), 64, 1 + static_cast<int64_t>(rng() % 8)};
    const std::string s = spec(), t = spec();
    check(Named(s, shape, m), Named(t, shape, m), m.ToString() + " " + s + " -> " + t);
  }
}

TEST(Planner, DefaultCapKeepsOutFullRematerialization) {
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  o.target = PlanTarget::kJaxCpu;
  Result<PlanResult> r = PlanReshard(Named("P('y', None, 'x')", {16, 16, 16}, mesh),
                                     Named("P(None, ('x','y'), None)", {16, 16, 16}, mesh), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->memory_cap_bytes, 2 * (2048 + 2048));
  EXPECT_LE(r->plan.totals().peak_bytes, r->memory_cap_bytes);
  EXPECT_GT(r->baselines[0].peak_bytes, r->memory_cap_bytes);  // the remat baseline would not fit
}

TEST(Planner, JaxCpuHasNoRaggedExchange) {
  // Other device sets that differ in more than their devices: only the exchange moves them.
  Layout src = Parse("{devices=[2,2]0,1,2,3}", {8, 8});
  Layout dst = Parse("{devices=[4,1]4,5,6,7}", {8, 8});
  PlannerOptions o;
  ASSERT_TRUE(PlanReshard(src, dst, o).ok());
  EXPECT_EQ(PlanReshard(src, dst, o)->plan.OpNames(), (std::vector<std::string>{"exchange"}));
  o.target = PlanTarget::kJaxCpu;
  Result<PlanResult> r = PlanReshard(src, dst, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotSupported);
  o.target = PlanTarget::kAny;
  o.strategy = Strategy::kCollectives;
  EXPECT_EQ(PlanReshard(src, dst, o).status().code(), Status::Code::kNotSupported);
}

TEST(Planner, SameTilesOnOtherDevicesIsOnePermute) {
  Layout src = Parse("{devices=[4]0,1,2,3}", {16});
  Layout dst = Parse("{devices=[4]4,5,6,7}", {16});
  PlannerOptions o;
  o.target = PlanTarget::kJaxCpu;
  Result<PlanResult> r = PlanReshard(src, dst, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->plan.OpNames(), (std::vector<std::string>{"collective-permute"}));
  EXPECT_EQ(r->plan.totals().max_recv_bytes, 16);
  EXPECT_TRUE(SimulatePlan(r->plan).ok());
}

// The rematerialization baseline is priced as every step is, full duplex: a
// tile's one holder sends it to every device lacking it. From one device to
// all, that holder sends 7 copies (XLA's fallback is no faster than the
// plan, which moves the same messages).
TEST(Planner, RematerializationBaselineCountsTheHoldersSends) {
  Layout src = Parse("{maximal device=0}", {1 << 20});
  Layout dst = Parse("{replicated}", {1 << 20}, Mesh::Create({{"x", 8}}).value());
  Result<PlanResult> r = PlanReshard(src, dst, PlannerOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->baselines.empty());
  const BaselineCost& remat = r->baselines[0];
  ASSERT_EQ(remat.name, "full_rematerialization");
  const Topology flat = Topology::Flat();
  double sends = 0;
  for (int64_t d = 1; d < 8; ++d) sends += flat.MessageTime(0, d, int64_t{4} << 20);
  EXPECT_GE(remat.time_us, sends);
  EXPECT_GE(remat.time_us, 0.9 * r->plan.totals().time_us);
}

TEST(Planner, StrategyExchangeIsOneRaggedStep) {
  PlannerOptions o;
  o.strategy = Strategy::kExchange;
  Result<PlanResult> r =
      PlanReshard(Parse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16}), Parse("{devices=[1,8,1]<=[8]}", {16, 16, 16}), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->plan.OpNames(), (std::vector<std::string>{"exchange"}));
  EXPECT_EQ(r->plan.totals().max_recv_bytes, 1792);
  EXPECT_TRUE(SimulatePlan(r->plan).ok());
  o.target = PlanTarget::kJaxCpu;
  EXPECT_EQ(PlanReshard(r->plan.source(), r->plan.target(), o).status().code(), Status::Code::kNotSupported);
}

TEST(Planner, UnevenDimsPadAndStillVerify) {
  // 10 rows over 4 then over 8: the shards are not nested, so no single
  // all-to-all moves them; without the ragged exchange the plan gathers.
  const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {mesh};
  o.target = PlanTarget::kJaxCpu;
  Result<PlanResult> r = PlanReshard(Named("P('x', None)", {10, 6}, mesh), Named("P(('x','y'), None)", {10, 6}, mesh), o);
  ASSERT_TRUE(r.ok()) << r.status();
  SimulationReport sim = SimulatePlan(r->plan);
  EXPECT_TRUE(sim.ok()) << sim.first_problem;
  for (const PlanStep& s : r->plan.steps()) EXPECT_NE(s.op, StepOp::kExchange);
}

TEST(Topology, ParsesAndPrices) {
  EXPECT_EQ(Topology::Parse("nodes:8")->devices_per_node(), 8);
  EXPECT_EQ(Topology::Parse("torus:4x4x2")->torus_dims(), (std::vector<int64_t>{4, 4, 2}));
  for (const char* bad : {"node:8", "nodes:", "nodes:0", "nodes:8x", "torus:4x", "torus:4x4x4x4", "ring"}) {
    Result<Topology> t = Topology::Parse(bad);
    EXPECT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find("column"), std::string::npos) << t.status();
  }
  const Topology nodes = Topology::Nodes(4);
  EXPECT_LT(nodes.MessageTime(0, 3, 1 << 20), nodes.MessageTime(0, 4, 1 << 20));  // inside a node is faster
  const Topology torus = Topology::Torus({4, 4});
  EXPECT_LT(torus.MessageTime(0, 1, 1 << 20), torus.MessageTime(0, 10, 1 << 20));  // 1 hop vs 4
  EXPECT_DOUBLE_EQ(torus.MessageTime(0, 3, 1000), torus.MessageTime(0, 1, 1000));  // wrap-around: 1 hop
  Topology bw = Topology::Flat();
  bw = bw.BandwidthOnly();
  EXPECT_DOUBLE_EQ(bw.MessageTime(0, 1, 25000), 1.0);
  EXPECT_EQ(bw.CopyTime(1 << 30), 0.0);
  // The least and the worst message time bound every pair's, and are met.
  for (const Topology& t : {Topology::Flat(), nodes, torus, Topology::Torus({2, 4, 2}), bw}) {
    for (int64_t bytes : {0, 1, 4096, 1 << 20}) {
      double least = 1e300, worst = 0;
      for (int64_t p = 0; p < 16; ++p)  // inside every torus listed
        for (int64_t q = 0; q < 16; ++q)
          if (p != q) {
            least = std::min(least, t.MessageTime(p, q, bytes));
            worst = std::max(worst, t.MessageTime(p, q, bytes));
          }
      EXPECT_DOUBLE_EQ(t.LeastMessageTime(bytes), least) << t.ToString() << " " << bytes;
      EXPECT_LE(worst, t.WorstMessageTime(bytes) * (1 + 1e-12)) << t.ToString() << " " << bytes;
    }
  }
}

}  // namespace
}  // namespace reshard
