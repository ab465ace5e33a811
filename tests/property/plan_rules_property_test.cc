// Property test of the rules a plan keeps whatever the layouts (issue 15),
// over random pairs that the other property tests draw rarely: replicated and
// partially replicated targets, sub-axes, uneven shapes, meshes up to 256
// devices. Under the default memory cap:
//   1. priced by bytes alone (--bandwidth-only) with the ragged exchange
//      available, a plan receives the lower bound into the busiest device;
//   2. under the default model a plan is never modeled slower than the
//      one-step minimal exchange;
//   3. under either model a plan is never dominated by the Shardy-style
//      baseline (as many collectives or more, and more bytes).
// Every plan of the first 1000 pairs also runs in the simulator.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "reshard/named_sharding.h"
#include "reshard/planner.h"
#include "exec/simulator.h"

namespace reshard {
namespace {

struct Pair {
  Layout source, target;
  Mesh mesh;
  std::string text;
};

Mesh RandomMesh(std::mt19937_64& rng) {
  static const std::vector<int64_t> kSizes = {1, 2, 2, 3, 4, 4, 8};
  const int axes = 1 + static_cast<int>(rng() % 3);
  std::vector<Mesh::Axis> a;
  int64_t n = 1;
  for (int i = 0; i < axes; ++i) {
    const int64_t size = kSizes[rng() % kSizes.size()] * (rng() % 4 == 0 ? 4 : 1);
    if (n * size > 256) break;
    a.push_back({std::string(1, static_cast<char>('x' + i)), size});
    n *= size;
  }
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  if (rng() % 4 == 0) std::shuffle(ids.begin(), ids.end(), rng);
  return Mesh::Create(a, ids).value();
}

// Each axis (or, for axes of size 4 or more split in two, each of its two
// sub-axes) goes to a random dim or stays unused; `replicate` leaves more unused.
NamedSharding RandomSpec(std::mt19937_64& rng, const Mesh& mesh, size_t rank, int replicate_in_4) {
  std::vector<NamedSharding::Dim> dims(rank);
  for (int64_t a = 0; a < mesh.num_axes(); ++a) {
    const int64_t size = mesh.axes()[a].size;
    std::vector<AxisRef> pieces = {AxisRef{a, 1, 0}};
    if (size >= 4 && size % 2 == 0 && rng() % 3 == 0) pieces = {AxisRef{a, 1, 2}, AxisRef{a, 2, size / 2}};
    for (const AxisRef& r : pieces) {
      if (static_cast<int>(rng() % 4) < replicate_in_4) continue;
      dims[rng() % rank].axes.push_back(r);
    }
  }
  // A dim's sub-axes of one axis must come major first.
  for (auto& d : dims)
    std::stable_sort(d.axes.begin(), d.axes.end(), [](const AxisRef& x, const AxisRef& y) {
      return x.axis == y.axis && x.pre_size < y.pre_size;
    });
  Result<NamedSharding> s = NamedSharding::Create(mesh, dims);
  if (s.ok()) return *s;
  return NamedSharding::Create(mesh, std::vector<NamedSharding::Dim>(rank)).value();
}

std::string SpecText(const NamedSharding& s) {
  std::string out = "[";
  for (const auto& d : s.dims()) {
    out += "{";
    for (const AxisRef& r : d.axes) out += r.ToString(s.mesh()) + " ";
    out += "}";
  }
  return out + "]";
}

bool Uneven(const Layout& l) {
  for (int64_t d = 0; d < l.rank(); ++d)
    if (l.shape()[d] % l.dim(d).tiles != 0) return true;
  return false;
}

Pair RandomPair(std::mt19937_64& rng) {
  Mesh mesh = RandomMesh(rng);
  const size_t rank = 1 + rng() % 3;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < rank; ++d)
    shape.push_back(rng() % 2 ? 8 * (1 + static_cast<int64_t>(rng() % 4)) : 1 + static_cast<int64_t>(rng() % 13));
  NamedSharding s = RandomSpec(rng, mesh, rank, 0), t = RandomSpec(rng, mesh, rank, static_cast<int>(rng() % 3));
  std::string text = "shape [";
  for (int64_t e : shape) text += std::to_string(e) + ",";
  text += "] mesh " + mesh.ToString() + " " + SpecText(s) + " -> " + SpecText(t);
  const DType dtype = rng() % 3 == 0 ? DType::kBF16 : DType::kF32;
  return Pair{s.ToLayout(shape, dtype).value(), t.ToLayout(shape, dtype).value(), mesh, text};
}

const BaselineCost* Shardy(const PlanResult& r) {
  for (const BaselineCost& b : r.baselines)
    if (b.name == "shardy") return &b;
  return nullptr;
}

int64_t Collectives(const CollectivePlan& plan) {
  int64_t n = 0;
  for (const PlanStep& s : plan.steps()) n += IsCollective(s.op);
  return n;
}

void ExpectNotDominated(const PlanResult& r, const std::string& what) {
  const BaselineCost* shardy = Shardy(r);
  if (!shardy) return;
  // A baseline over the memory cap is no plan to be dominated by.
  if (r.memory_cap_bytes > 0 && shardy->peak_bytes > r.memory_cap_bytes) return;
  const bool dominated = Collectives(r.plan) >= shardy->collectives &&
                         r.plan.totals().max_recv_bytes > shardy->max_recv_bytes;
  EXPECT_FALSE(dominated) << what << ": " << Collectives(r.plan) << " collectives, "
                          << r.plan.totals().max_recv_bytes << " B; Shardy-style " << shardy->collectives << ", "
                          << shardy->max_recv_bytes << " B";
}

TEST(PlanRulesProperty, FiveThousandPairs) {
  std::mt19937_64 rng(20261201);
  int replicated_targets = 0, sub_axes = 0, uneven = 0, large = 0;
  for (int i = 0; i < 5000; ++i) {
    const Pair p = RandomPair(rng);
    replicated_targets += p.target.Holders(0).size() > 1;
    sub_axes += p.text.find(":(") != std::string::npos;
    uneven += Uneven(p.source) || Uneven(p.target);
    large += p.mesh.num_devices() >= 64;
    PlannerOptions o;
    o.meshes = {p.mesh};
    // 1. bytes alone, default cap
    o.topology = o.topology.BandwidthOnly();
    Result<PlanResult> bytes = PlanReshard(p.source, p.target, o);
    ASSERT_TRUE(bytes.ok()) << p.text << ": " << bytes.status();
    EXPECT_EQ(bytes->plan.totals().max_recv_bytes, bytes->lower_bound.max_recv_bytes) << "bandwidth-only " << p.text;
    ExpectNotDominated(*bytes, "bandwidth-only " + p.text);
    // 2. the default model, default cap
    o.topology = Topology::Flat();
    Result<PlanResult> plan = PlanReshard(p.source, p.target, o);
    ASSERT_TRUE(plan.ok()) << p.text << ": " << plan.status();
    PlannerOptions ex = o;
    ex.strategy = Strategy::kExchange;
    ex.memory_cap_bytes = INT64_MAX;
    Result<PlanResult> exchange = PlanReshard(p.source, p.target, ex);
    ASSERT_TRUE(exchange.ok()) << p.text << ": " << exchange.status();
    EXPECT_LE(plan->plan.totals().time_us, exchange->plan.totals().time_us * (1 + 1e-9) + 1e-9)
        << "default model " << p.text;
    ExpectNotDominated(*plan, "default " + p.text);
    if (i < 1000) {
      SimulationReport sim = SimulatePlan(plan->plan);
      ASSERT_TRUE(sim.ok()) << p.text << ": " << sim.first_problem;
      SimulationReport sim_bytes = SimulatePlan(bytes->plan);
      ASSERT_TRUE(sim_bytes.ok()) << p.text << ": " << sim_bytes.first_problem;
    }
  }
  // The generator draws what the rules are about.
  EXPECT_GT(replicated_targets, 1000);
  EXPECT_GT(sub_axes, 500);
  EXPECT_GT(uneven, 500);
  EXPECT_GT(large, 300);
}

}  // namespace
}  // namespace reshard
