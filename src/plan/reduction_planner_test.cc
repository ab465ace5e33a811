#include "plan/reduction_planner.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "exec/exec_checker.h"
#include "exec/simulator.h"
#include "plan/plan_builder.h"
#include "plan/relay.h"
#include "reshard/device_program.h"
#include "reshard/notation.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, const Mesh& mesh) {
  Result<ParsedLayout> p = ParseLayout(text, {16, 16}, DType::kF32, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

// Issue 17's rows, f32[16,16] on mesh x=4,y=2, priced by bytes: the plan,
// the all-reduce-first baseline (Shardy's order) and the bound.
TEST(ReductionPlanner, IssueRowsByBytes) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  struct Row {
    const char *from, *to;
    int64_t plan, bound;
    std::vector<std::string> ops;
    int64_t dtensor;  // DTensor's order, priced: what DTensor moves (tests/torch checks it against DTensor)
    std::vector<std::string> dtensor_ops;
  } rows[] = {
      // y's replicas of the partial values each reduce half, then swap halves.
      {"P(None, None, unreduced={'x'})", "P('x', None)", 512, 512, {"reduce-scatter", "all-gather"}, 768, {"reduce-scatter"}},
      {"P(None, None, unreduced={'x'})", "P(('x','y'), None)", 384, 384, {"reduce-scatter"}, 768,
       {"reduce-scatter", "slice"}},
      // DTensor gathers y's shards first (x's Partial is not y's prefix of Shard(1)).
      {"P('y', None, unreduced={'x'})", "P(None, ('x','y'))", 448, 448, {"reduce-scatter", "all-to-all"}, 1280,
       {"all-gather", "reduce-scatter", "slice"}},
      {"P(None, None, unreduced={'x'})", "P()", 1280, 1280, {"reduce-scatter", "all-gather"}, 1536, {"all-reduce"}},
      // The bound reduces each element at a keeper that holds a part; a
      // reduce-scatter over x leaves half the rows a permute away. DTensor:
      // the issue's 1280 B.
      {"[Partial(), Shard(0)]", "[Shard(0), Shard(0)]", 512, 448, {"reduce-scatter", "collective-permute"}, 1280,
       {"all-gather", "reduce-scatter", "slice"}},
  };
  for (const Row& r : rows) {
    PlannerOptions o;
    o.topology = o.topology.BandwidthOnly();
    o.strategy = Strategy::kCollectives;
    o.meshes = {m};
    Result<PlanResult> p = PlanReshard(Parse(r.from, m), Parse(r.to, m), o);
    ASSERT_TRUE(p.ok()) << r.from << " -> " << r.to << ": " << p.status();
    EXPECT_EQ(p->plan.totals().max_recv_bytes, r.plan) << r.from << " -> " << r.to;
    EXPECT_EQ(p->lower_bound.max_recv_bytes, r.bound) << r.from << " -> " << r.to;
    EXPECT_EQ(p->plan.OpNames(), r.ops) << r.from << " -> " << r.to;
    ASSERT_EQ(p->baselines.size(), 2u);
    EXPECT_EQ(p->baselines[0].name, "all_reduce_first");
    EXPECT_GE(p->baselines[0].max_recv_bytes, p->plan.totals().max_recv_bytes);
    EXPECT_EQ(p->baselines[1].name, "dtensor_order");
    EXPECT_EQ(p->baselines[1].max_recv_bytes, r.dtensor) << r.from << " -> " << r.to;
    EXPECT_EQ(p->baselines[1].ops, r.dtensor_ops) << r.from << " -> " << r.to;
    const SimulationReport sim = SimulatePlan(p->plan);
    EXPECT_TRUE(sim.ok()) << r.from << " -> " << r.to << ": " << sim.first_problem;
  }
}

// What is not planned is refused with the bound: partial targets where
// the target has no ragged exchange, and reductions not over whole mesh axes
// there too.
TEST(ReductionPlanner, RefusesWhatItCannotPlanWithTheBound) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {m};
  // From a plain source, a partial target is reached by the reducing exchange alone: refused where the target has
  // no ragged exchange.
  PlannerOptions cpu = o;
  cpu.target = PlanTarget::kJaxCpu;
  Result<PlanResult> p = PlanReshard(Parse("P('x', None)", m), Parse("P('x', None, unreduced={'y'})", m), cpu);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kNotSupported);
  EXPECT_NE(p.status().message().find("at least"), std::string::npos) << p.status();
  // Parts that follow no mesh axis: devices 0..3 part 0, 4..7 part 1, over one tile.
  std::vector<DeviceTile> placement;
  for (int64_t d = 0; d < 8; ++d) placement.push_back({d, 0, d < 4 ? 0 : 1});
  std::vector<DeviceTile> shuffled = placement;
  std::swap(shuffled[1].part, shuffled[4].part);
  const Layout odd = Layout::Create({16, 16}, DType::kF32, {DimGrid::Ceil(16, 1), DimGrid::Ceil(16, 1)}, shuffled,
                                    {ReduceOp::kSum, 2}).value();
  // They have no structured plan: the reducing exchange moves them, where
  // the target has a ragged exchange; jax-cpu has none, so it is refused.
  p = PlanReshard(odd, Parse("P('x', None)", m), o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->plan.OpNames(), std::vector<std::string>{"exchange"});
  EXPECT_TRUE(SimulatePlan(p->plan).ok()) << SimulatePlan(p->plan).first_problem;
  // Each device keeps 4 rows of 16 (256 B) and holds one of their two parts: it receives the other.
  EXPECT_EQ(p->plan.totals().max_recv_bytes, 256);
  Result<PlanProgram> program = PlanProgram::Compile(p->plan);
  ASSERT_TRUE(program.ok()) << program.status();
  Result<CheckReport> run = RunChecked(*program, 2);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->ok()) << run->first_problem;
  o.target = PlanTarget::kJaxCpu;
  p = PlanReshard(odd, Parse("P('x', None)", m), o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kNotSupported) << p.status();
  EXPECT_NE(p.status().message().find("at least"), std::string::npos) << p.status();
}

// An all-reduce runs as a ring moves it: each device receives 2 (k - 1) / k
// of its shard, the bytes the plan prices, in two program steps.
TEST(ReductionPlanner, AnAllReduceRunsAsARing) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {m};
  Result<PlanResult> p = PlanReshard(Parse("P(None, None, unreduced={'x'})", m), Parse("P()", m), o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->plan.OpNames(), std::vector<std::string>{"all-reduce"});
  Result<PlanProgram> program = PlanProgram::Compile(p->plan);
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(program->steps().size(), 2u);
  for (Transport t : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
    Result<CheckReport> run = RunChecked(*program, 2, t);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_TRUE(run->ok()) << run->first_problem;
    ASSERT_EQ(run->stats.steps.size(), 1u);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(run->stats.steps[0].received[i], 1536) << i;  // 2 x 3 x 256 B: the ring's, as priced
      EXPECT_EQ(p->plan.steps()[0].recv_bytes[i], 1536) << i;
    }
  }
}

// The exchange strategy plans partial sums as one reducing exchange; where
// the collectives cost more, the auto strategy picks it too.
TEST(ReductionPlanner, TheReducingExchangeIsPlannedAndRuns) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {m};
  o.strategy = Strategy::kExchange;
  const Layout src = Parse("P('y', None, unreduced={'x'})", m), dst = Parse("P(None, ('x', 'y'))", m);
  Result<PlanResult> p = PlanReshard(src, dst, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->plan.OpNames(), std::vector<std::string>{"exchange"});
  // Every device keeps 2 columns of 16 rows (128 B); the 8 rows of its own y
  // half come in 3 other parts, the other 8 rows in all 4: 3 x 64 + 4 x 64.
  EXPECT_EQ(p->plan.totals().max_recv_bytes, 448);
  EXPECT_TRUE(SimulatePlan(p->plan).ok()) << SimulatePlan(p->plan).first_problem;
  for (Transport t : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
    Result<CheckReport> run = RunChecked(PlanProgram::Compile(p->plan).value(), 2, t);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_TRUE(run->ok()) << run->first_problem;
  }
}

// Issue 17's DTensor row at its bound: four keepers hold no part of their
// rows, so direct delivery brings each 4 x 128 B; with relays (relay.h) a
// part holder with room first combines a row of another part's (64 B) and
// sends it with its own, and every device receives 448 B, the bound, in
// both rounds together. Priced by bytes with memory for it: the relayed
// exchange holds a copy of each shard (2112 B at most a device, over the
// default cap of 1280, which leaves the collectives' 512 B).
TEST(ReductionPlanner, RelaysBringTheDTensorRowToItsBound) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {m};
  o.topology = o.topology.BandwidthOnly();
  const Layout src = Parse("[Partial(), Shard(0)]", m), dst = Parse("[Shard(0), Shard(0)]", m);
  Result<PlanResult> capped = PlanReshard(src, dst, o);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->plan.totals().max_recv_bytes, 512);
  o.memory_cap_bytes = 4096;
  Result<PlanResult> p = PlanReshard(src, dst, o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->plan.OpNames(), std::vector<std::string>{"exchange"});
  const PlanStep& step = p->plan.steps()[0];
  ASSERT_EQ(step.relays.size(), 4u);
  EXPECT_TRUE(RelaysHold(step.relays, Exchange::CreateReducing(src, dst).value(), src, dst).ok());
  // Keepers 1, 3, 4 and 6 each lose one 64-byte row to a helper: 0, 2, 5 and 7.
  for (const Relay& r : step.relays) {
    EXPECT_EQ(r.elements * 4, 64);
    EXPECT_EQ(r.keeper % 2 == 1, r.keeper < 4) << r.keeper;  // 1 and 3 keep rows of y=0's half, 4 and 6 of y=1's
  }
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(step.recv_bytes[i], 448) << i;
  EXPECT_EQ(p->plan.totals().max_recv_bytes, p->lower_bound.max_recv_bytes);
  EXPECT_EQ(p->plan.totals().total_bytes, p->lower_bound.total_bytes);
  EXPECT_TRUE(SimulatePlan(p->plan).ok()) << SimulatePlan(p->plan).first_problem;
  Result<PlanProgram> program = PlanProgram::Compile(p->plan);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->steps().size(), 2u);
  EXPECT_EQ(program->steps()[0].relay_round, 1);
  EXPECT_EQ(program->steps()[1].relay_round, 2);
  for (Transport t : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
    Result<CheckReport> run = RunChecked(*program, 2, t);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_TRUE(run->ok()) << run->first_problem;
    ASSERT_EQ(run->stats.steps.size(), 1u);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(run->stats.steps[0].received[i], 448) << i;
  }
  // Under latency the second round costs more than it saves: the collectives.
  o.topology = Topology::Flat();
  Result<PlanResult> timed = PlanReshard(src, dst, o);
  ASSERT_TRUE(timed.ok()) << timed.status();
  for (const PlanStep& st : timed->plan.steps()) EXPECT_TRUE(st.relays.empty());
}

// A relay that cut its keeper's writing part would leave elements unwritten,
// and one whose helper holds another tile carries nothing: the compiler and
// the simulator refuse both (RelaysHold).
TEST(ReductionPlanner, ARelayCuttingTheWritingPartIsRefused) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  PlannerOptions o;
  o.meshes = {m};
  o.topology = o.topology.BandwidthOnly();
  o.memory_cap_bytes = 4096;
  Result<PlanResult> p = PlanReshard(Parse("[Partial(), Shard(0)]", m), Parse("[Shard(0), Shard(0)]", m), o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->plan.steps().size(), 1u);
  PlanStep step = p->plan.steps()[0];
  ASSERT_FALSE(step.relays.empty());
  // Keeper 1's rows come from devices 0, 2, 4, 6 in parts 0..3: part 0 (device 0) writes.
  Relay& r = step.relays[0];
  ASSERT_EQ(r.keeper, 1);
  Relay cut = r;
  cut.donor = 0;
  cut.helper = 2;
  step.relays = {cut};
  auto with_step = [&](const PlanStep& s) {
    PlanBuilder b(p->plan.source(), p->plan.target());
    if (p->plan.mesh()) b.SetMesh(*p->plan.mesh());
    b.Add(s);
    return b.Finish();
  };
  Result<PlanProgram> program = PlanProgram::Compile(with_step(step));
  ASSERT_FALSE(program.ok());
  EXPECT_NE(program.status().message().find("lowest that reaches the keeper"), std::string::npos) << program.status();
  EXPECT_FALSE(SimulatePlan(with_step(step)).ok());
  // Its split moved: the relay states other elements than it moves.
  cut = r;
  cut.split += 1;
  step.relays = {cut};
  program = PlanProgram::Compile(with_step(step));
  ASSERT_FALSE(program.ok());
  EXPECT_NE(program.status().message().find("below the split"), std::string::npos) << program.status();
  // A relay whose helper holds another tile is no relay.
  cut = r;
  cut.helper = 1;
  step.relays = {cut};
  EXPECT_FALSE(SimulatePlan(with_step(step)).ok());
}

// Targets with a pending reduction: one reducing exchange, each source part
// (or each tile of each part, within each target tile) routed into one part of the target (PartRoutes), exact in every executor
// and in every reducible dtype, the bytes as planned.
TEST(ReductionPlanner, PartialTargetsAreRoutedPartByPart) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  struct Row {
    const char *from, *to;
    int64_t max_recv;  // bytes into the busiest device, f32
  } rows[] = {
      // The y = 0 devices keep their rows; the y = 1 devices hold zeros.
      {"P('x', None)", "P('x', None, unreduced={'y'})", 0},
      // Each device keeps half of its own part.
      {"P(None, None, unreduced={'x'})", "P('y', None, unreduced={'x'})", 0},
      // Tile by tile, each half of each x part stays on its one device as a
      // part of its own (the identity in the other half); whole parts would
      // gather each x part's other half on one device (512 B).
      {"P('y', None, unreduced={'x'})", "P(None, None, unreduced={'x','y'})", 0},
      {"[Partial('max'), Shard(0)]", "[Partial('max'), Partial('max')]", 0},
      // Other ops: all four parts of a tile into one target part, each
      // tile into its own, at the bound (every part into one target part,
      // as whole routing does, receives 896 B).
      {"[Partial('max'), Shard(0)]", "[Shard(1), Partial()]", 384},
      // Reduce, then route: a reduce-scatter of the maxima over x onto
      // [{y, x}, {}] (384 B, the bound), then each device's rows stay as a
      // part of their own (0 B). Routing parts receives 1536 B (3584 B whole).
      {"[Partial('max'), Shard(0)]", "[Partial(), Partial()]", 384},
      // x's 4 parts into y's 2: routing parts, each y half sums two x parts
      // and a device holding neither receives both (2 x 1024 B, over the
      // memory cap); reducing first onto a y half each (1536 B), then
      // keeping it, fits.
      {"P(None, None, unreduced={'x'})", "P(None, None, unreduced={'y'})", 1536},
      // Each part gathers its other half of the rows over y (8 x 16 x 4 B).
      {"[Partial(), Shard(0)]", "[Partial(), Replicate()]", 512},
      {"[Partial('avg'), Shard(0)]", "[Partial('avg'), Replicate()]", 512},
      {"[Partial('max'), Replicate()]", "[Replicate(), Partial('max')]", -1},
      {"[Partial('sum'), Replicate()]", "[Replicate(), Partial('max')]", -1},
      {"[Partial('avg'), Replicate()]", "[Replicate(), Partial('avg')]", -1},
      {"[Replicate(), Shard(1)]", "[Partial('min'), Shard(1)]", 0},
      // An avg target's parts each hold their share times the part count
      // (PartRoutes::scale), the identity elsewhere: (4v + 0 + 0 + 0) / 4
      // is v, so every device keeps what it holds. Each part holding the
      // whole value would gather the array (768 B on the first row).
      {"[Shard(1), Replicate()]", "[Partial('avg'), Replicate()]", 0},
      {"[Shard(0), Replicate()]", "[Partial('avg'), Shard(1)]", 0},
      {"[Partial(), Replicate()]", "[Partial('avg'), Replicate()]", 0},
      // Max parts reduce first (384 B, the bound), then stay, scaled by the
      // target's 8 parts.
      {"[Partial('max'), Shard(0)]", "[Partial('avg'), Partial('avg')]", 384},
  };
  for (const Row& r : rows) {
    PlannerOptions o;
    o.meshes = {m};
    const Layout src = Parse(r.from, m), dst = Parse(r.to, m);
    Result<PlanResult> p = PlanReshard(src, dst, o);
    ASSERT_TRUE(p.ok()) << r.from << " -> " << r.to << ": " << p.status();
    // The reducing exchange, unless the parts move alike (same axes and op:
    // then structured steps only).
    const std::vector<std::string> ops = p->plan.OpNames();
    if (!(src.partial() && src.reduction() == dst.reduction())) {
      ASSERT_EQ(ops.back(), "exchange") << r.from << " -> " << r.to;
    } else if (ops.back() != "exchange") {
      EXPECT_EQ(std::count(ops.begin(), ops.end(), "exchange"), 0) << r.from << " -> " << r.to;
    }
    if (!src.partial()) {
      EXPECT_EQ(p->plan.OpNames().size(), 1u) << r.from << " -> " << r.to;
    }
    if (r.max_recv >= 0) {
      EXPECT_EQ(p->plan.totals().max_recv_bytes, r.max_recv) << r.from << " -> " << r.to;
    }
    EXPECT_GE(p->plan.totals().max_recv_bytes, p->lower_bound.max_recv_bytes) << r.from << " -> " << r.to;
    const SimulationReport sim = SimulatePlan(p->plan);
    EXPECT_TRUE(sim.ok()) << r.from << " -> " << r.to << ": " << sim.first_problem;
    for (DType dt : {DType::kF32, DType::kBF16, DType::kS8, DType::kU16, DType::kF64}) {
      Result<ParsedLayout> a = ParseLayout(r.from, {16, 16}, dt, m), b = ParseLayout(r.to, {16, 16}, dt, m);
      ASSERT_TRUE(a.ok() && b.ok());
      Result<PlanResult> typed = PlanReshard(a->layout, b->layout, o);
      ASSERT_TRUE(typed.ok()) << typed.status();
      Result<PlanProgram> program = PlanProgram::Compile(typed->plan);
      ASSERT_TRUE(program.ok()) << program.status();
      for (Transport t : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
        Result<CheckReport> run = RunChecked(*program, 2, t);
        ASSERT_TRUE(run.ok()) << run.status();
        EXPECT_TRUE(run->ok()) << r.from << " -> " << r.to << " " << DTypeName(dt) << ": " << run->first_problem;
        ASSERT_EQ(run->stats.steps.size(), typed->plan.steps().size());
        for (size_t k = 0; k < run->stats.steps.size(); ++k)
          for (size_t i = 0; i < 8; ++i)
            EXPECT_EQ(run->stats.steps[k].received[i], typed->plan.steps()[k].recv_bytes[i]) << r.from << " -> " << r.to;
      }
    }
  }
}

// Partial sums over x into partial sums over y cannot move alike: reducing
// first, then routing is searched before the reducing exchange (every x
// part into every device of its y part), which is not drafted where its
// floors show it cannot win. Each time it is left out, drafting it alone
// (Strategy::kExchange) confirms it would have lost: over the cap, or
// slower under the model than the plan chosen.
TEST(ReductionPlanner, ReducingFirstOutpricesTheUndraftedExchange) {
  int undrafted_by_cap = 0, undrafted_by_cost = 0;
  for (const int64_t x : {2, 4, 8, 16, 64}) {
    const Mesh m = Mesh::Create({{"x", x}, {"y", 2}}).value();
    const Layout source = Parse("P(None, None, unreduced={'x'})", m), target = Parse("P(None, None, unreduced={'y'})", m);
    for (const bool bytes : {false, true}) {
      PlannerOptions o;
      o.meshes = {m};
      if (bytes) {
        o.topology = o.topology.BandwidthOnly();
        o.memory_cap_bytes = int64_t{1} << 30;
      }
      Result<PlanResult> r = PlanReshard(source, target, o);
      ASSERT_TRUE(r.ok()) << x << ": " << r.status();
      const auto undrafted = std::find_if(r->candidates.begin(), r->candidates.end(),
                                          [](const PlanCandidate& c) { return c.note.starts_with("not drafted"); });
      if (undrafted == r->candidates.end()) continue;
      EXPECT_EQ(r->plan.OpNames().back(), "exchange") << x;  // the routing, after reducing
      EXPECT_GT(r->plan.steps().size(), 1u) << x;
      PlannerOptions alone = o;
      alone.strategy = Strategy::kExchange;
      Result<PlanResult> e = PlanReshard(source, target, alone);
      ASSERT_TRUE(e.ok()) << x << ": " << e.status();
      ASSERT_EQ(e->plan.steps().size(), 1u) << x;
      const int64_t cap = bytes ? o.memory_cap_bytes : r->memory_cap_bytes;
      if (undrafted->note.find("memory cap") != std::string::npos) {
        ++undrafted_by_cap;
        EXPECT_GT(e->plan.totals().peak_bytes, cap) << x;
      } else {
        ++undrafted_by_cost;
        EXPECT_GT(e->plan.totals().time_us, r->plan.totals().time_us) << x << (bytes ? ", by bytes" : "");
      }
      // Its floors never exceed what drafting it finds.
      EXPECT_LE(undrafted->time_us, e->plan.totals().time_us + 1e-9) << x;
      EXPECT_LE(undrafted->peak_bytes, e->plan.totals().peak_bytes) << x;
    }
  }
  EXPECT_GE(undrafted_by_cap, 3);
  EXPECT_GE(undrafted_by_cost, 3);
}

// From partial sums into partial sums over the same axes and op, the parts
// move alike: with no ragged exchange (Strategy::kCollectives) the plain
// pair's structured plan, each step between layouts partial over x, run
// exactly; the exchange strategy keeps the reducing exchange; over a mesh
// whose device order numbers the parts otherwise tile by tile, no
// structured plan (NotSupported with the bound).
TEST(ReductionPlanner, SamePartsMoveAlike) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  struct Row {
    const char *from, *to, *op;
    int64_t max_recv;
  } rows[] = {
      {"P('y', None, unreduced={'x'})", "P(None, 'y', unreduced={'x'})", "all-to-all", 256},
      {"[Partial(), Shard(0)]", "[Partial(), Replicate()]", "all-gather", 512},
      {"[Partial('max'), Replicate()]", "[Partial('max'), Shard(1)]", "slice", 0},
      {"[Partial('avg'), Shard(1)]", "[Partial('avg'), Shard(0)]", "all-to-all", 256},
  };
  for (const Row& r : rows) {
    const Layout src = Parse(r.from, m), dst = Parse(r.to, m);
    PlannerOptions o;
    o.meshes = {m};
    o.strategy = Strategy::kCollectives;
    Result<PlanResult> p = PlanReshard(src, dst, o);
    ASSERT_TRUE(p.ok()) << r.from << " -> " << r.to << ": " << p.status();
    EXPECT_EQ(p->plan.OpNames(), std::vector<std::string>{r.op}) << r.from << " -> " << r.to;
    EXPECT_EQ(p->plan.totals().max_recv_bytes, r.max_recv) << r.from << " -> " << r.to;
    EXPECT_TRUE(p->plan.steps()[0].output.partial());
    const SimulationReport sim = SimulatePlan(p->plan);
    EXPECT_TRUE(sim.ok()) << r.from << " -> " << r.to << ": " << sim.first_problem;
    Result<PlanProgram> program = PlanProgram::Compile(p->plan);
    ASSERT_TRUE(program.ok()) << program.status();
    for (Transport t : {Transport::kStaged, Transport::kDirect, Transport::kRanks}) {
      Result<CheckReport> run = RunChecked(*program, 2, t);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_TRUE(run->ok()) << r.from << " -> " << r.to << ": " << run->first_problem;
    }
    o.strategy = Strategy::kExchange;
    p = PlanReshard(src, dst, o);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->plan.OpNames(), std::vector<std::string>{"exchange"}) << r.from << " -> " << r.to;
  }
  // Devices [5,1,4,3,2,0] on x=2,y=3: the part of x = 0 is the lowest
  // holder's in one row block (device 1 before 2) but not in another
  // (device 3 before 5), so part numbers do not follow x.
  const Mesh permuted = Mesh::Create({{"x", 2}, {"y", 3}}, {5, 1, 4, 3, 2, 0}).value();
  const Layout src = ParseLayout("[Partial('max'), Shard(0)]", {6, 12}, DType::kF32, permuted)->layout;
  const Layout dst = ParseLayout("[Partial('max'), Shard(1)]", {6, 12}, DType::kF32, permuted)->layout;
  PlannerOptions o;
  o.meshes = {permuted};
  o.strategy = Strategy::kCollectives;
  Result<PlanResult> p = PlanReshard(src, dst, o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kNotSupported) << p.status();
  o.strategy = Strategy::kAuto;
  p = PlanReshard(src, dst, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan.OpNames(), std::vector<std::string>{"exchange"});
  EXPECT_TRUE(SimulatePlan(p->plan).ok());
}

}  // namespace
}  // namespace reshard
