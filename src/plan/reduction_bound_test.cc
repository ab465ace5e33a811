#include "plan/reduction_bound.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <unordered_map>

#include "reshard/dtensor.h"
#include "reshard/notation.h"

namespace reshard {
namespace {

Layout Parse(const std::string& text, std::vector<int64_t> shape, const Mesh& mesh) {
  Result<ParsedLayout> p = ParseLayout(text, shape, DType::kF32, mesh);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p->layout;
}

// The rows of issue 17: f32[16,16] on mesh x=4,y=2. Shardy's all-reduce +
// slice receives 1536 B into each device, a reduce-scatter over x 768 B.
TEST(ReductionBound, IssueRows) {
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  struct Row {
    const char *from, *to;
    int64_t max_recv;
  } rows[] = {
      // Replicas over y split the reduction: half each, then swap halves.
      {"P(None, None, unreduced={'x'})", "P('x', None)", 512},
      {"P(None, None, unreduced={'x'})", "P(('x','y'), None)", 384},
      {"P('y', None, unreduced={'x'})", "P(None, ('x','y'))", 448},
      // all-reduce over x receives 2(k-1)/k of the array, 1536 B; y's
      // replicas may each reduce-scatter half, then gather: 384 + 896.
      {"P(None, None, unreduced={'x'})", "P()", 1280},
      // DTensor's order (all-gather, then a reduce-scatter twice the size) receives 1280.
      {"[Partial(), Shard(0)]", "[Shard(0), Shard(0)]", 448},
      {"[Partial(), Replicate()]", "[Shard(0), Replicate()]", 512},
      {"[Partial(), Replicate()]", "[Partial(), Replicate()]", 0},
      // Partial targets: the keepers of one y part must agree. Each row is
      // held by one of a part's four keepers, so three receive it (3 x 256
      // elements over 8 devices); four different x parts, so all four
      // receive (4 x 256 over 8).
      {"P('x', None)", "P(None, None, unreduced={'y'})", 384},
      {"[Partial(), Replicate()]", "[Replicate(), Partial()]", 512},
      // max cannot split into sums: one of the eight target parts (one
      // device each) receives the three x parts it lacks (3 x 256 over 8).
      {"[Partial('max'), Shard(0)]", "[Partial(), Partial()]", 384},
  };
  for (const Row& r : rows) {
    const Layout a = Parse(r.from, {16, 16}, m), b = Parse(r.to, {16, 16}, m);
    EXPECT_EQ(ComputeLowerBound(a, b).max_recv_bytes, r.max_recv) << r.from << " -> " << r.to;
  }
}

// The classic collectives' known bounds, per device, as bytes over k devices.
TEST(ReductionBound, ReduceScatterAndAllReduce) {
  for (int64_t k : {2, 3, 4, 8}) {
    const Mesh m = Mesh::Create({{"x", k}}).value();
    const Layout partial = Parse("[Partial()]", {24 * k}, m);
    // reduce-scatter: (k-1)/k of the array; all-reduce: 2(k-1)/k.
    EXPECT_EQ(ComputeLowerBound(partial, Parse("[Shard(0)]", {24 * k}, m)).max_recv_bytes, (k - 1) * 24 * 4);
    EXPECT_EQ(ComputeLowerBound(partial, Parse("[Replicate()]", {24 * k}, m)).max_recv_bytes, 2 * (k - 1) * 24 * 4);
  }
}

// An avg of integers truncates its division, so its parts meet in one
// target part unless the target is an avg over a multiple of its parts:
// into sum parts or avg parts of another count the bound then counts the
// whole reduction at one part's keepers; in floats, or into an avg over
// twice as many parts, each part may stay where it is (0 B).
TEST(ReductionBound, AnAvgOfIntegersDoesNotSplit) {
  EXPECT_TRUE(ReductionSplits(4, ReduceOp::kAvg, 4, ReduceOp::kSum, DType::kF32));
  EXPECT_FALSE(ReductionSplits(4, ReduceOp::kAvg, 4, ReduceOp::kSum, DType::kS32));
  EXPECT_FALSE(ReductionSplits(4, ReduceOp::kAvg, 2, ReduceOp::kAvg, DType::kU8));
  EXPECT_TRUE(ReductionSplits(2, ReduceOp::kAvg, 4, ReduceOp::kAvg, DType::kU8));
  EXPECT_TRUE(ReductionSplits(4, ReduceOp::kAvg, 4, ReduceOp::kAvg, DType::kS64));
  EXPECT_TRUE(ReductionSplits(4, ReduceOp::kSum, 2, ReduceOp::kAvg, DType::kS32));
  EXPECT_FALSE(ReductionSplits(4, ReduceOp::kMax, 4, ReduceOp::kSum, DType::kF32));
  const Mesh m = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  auto bound = [&](const char* from, const char* to, DType dtype) {
    const Layout a = ParseLayout(from, {16, 16}, dtype, m).value().layout;
    const Layout b = ParseLayout(to, {16, 16}, dtype, m).value().layout;
    return ComputeLowerBound(a, b).max_recv_bytes;
  };
  const char* avg_x = "[Partial(\"avg\"), Replicate()]";
  EXPECT_EQ(bound(avg_x, "[Partial(), Replicate()]", DType::kF32), 0);
  EXPECT_GT(bound(avg_x, "[Partial(), Replicate()]", DType::kS32), 0);
  EXPECT_EQ(bound(avg_x, "[Partial(\"avg\"), Partial(\"avg\")]", DType::kS32), 0);  // 8 parts from 4
}

// Brute force in the knowledge model the proof uses: each device knows a
// set of parts; a reception u -> v adds u's knowledge to v's (one element's
// worth, however much it combines). The fewest receptions until the goal
// holds, by breadth-first search, is never below ElementReceptions, and
// equals it where the target is not partial.
struct Instance {
  int64_t devices = 0, parts = 1, target_parts = 1;
  bool split = true;  // whether target parts may take subsets of the parts (ReductionSplits)
  std::vector<int64_t> source_part;  // per device: its part, or -1
  std::vector<int64_t> target_part;  // per device: the target part it keeps, or -1
};

int64_t BruteForce(const Instance& in) {
  const int64_t n = in.devices, P = in.parts;
  auto goal = [&](uint32_t state) {
    auto knows = [&](int64_t d, int64_t p) { return (state >> (d * P + p)) & 1u; };
    if (in.target_parts == 1) {
      for (int64_t d = 0; d < n; ++d)
        if (in.target_part[d] == 0)
          for (int64_t p = 0; p < P; ++p)
            if (!knows(d, p)) return false;
      return true;
    }
    // Every part is known to every keeper of some target part: the same one
    // for all parts where the ops cannot split the reduction.
    for (int64_t p = 0; p < P; ++p) {
      bool placed = false;
      for (int64_t q = 0; q < in.target_parts && !placed; ++q) {
        bool all = true;
        for (int64_t d = 0; d < n; ++d)
          if (in.target_part[d] == q && !knows(d, p)) all = false;
        placed = all;
      }
      if (!placed) return false;
    }
    if (in.split) return true;
    for (int64_t q = 0; q < in.target_parts; ++q) {
      bool all = true;
      for (int64_t d = 0; d < n; ++d)
        for (int64_t p = 0; p < P; ++p)
          if (in.target_part[d] == q && !knows(d, p)) all = false;
      if (all) return true;
    }
    return false;
  };
  uint32_t start = 0;
  for (int64_t d = 0; d < n; ++d)
    if (in.source_part[d] >= 0) start |= 1u << (d * P + in.source_part[d]);
  std::unordered_map<uint32_t, int64_t> dist{{start, 0}};
  std::deque<uint32_t> queue{start};
  const uint32_t mask = (1u << P) - 1;
  while (!queue.empty()) {
    const uint32_t s = queue.front();
    queue.pop_front();
    if (goal(s)) return dist[s];
    for (int64_t u = 0; u < n; ++u)
      for (int64_t v = 0; v < n; ++v) {
        if (u == v) continue;
        const uint32_t ku = (s >> (u * P)) & mask;
        const uint32_t next = s | (ku << (v * P));
        if (next == s || dist.count(next)) continue;
        dist[next] = dist[s] + 1;
        queue.push_back(next);
      }
  }
  return -1;
}

TEST(ReductionBound, ElementReceptionsAgainstBruteForce) {
  std::mt19937_64 rng(17);
  int checked = 0, exact = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Instance in;
    in.devices = 2 + static_cast<int64_t>(rng() % 4);  // 2..5
    in.parts = 1 + static_cast<int64_t>(rng() % 3);    // 1..3
    in.target_parts = 1 + static_cast<int64_t>(rng() % 3);
    in.split = rng() % 3 != 0;
    // Every part held somewhere (a tile is held in every part), the rest random.
    in.source_part.assign(in.devices, -1);
    std::vector<int64_t> order(in.devices);
    for (int64_t d = 0; d < in.devices; ++d) order[d] = d;
    std::shuffle(order.begin(), order.end(), rng);
    if (in.parts > in.devices) continue;
    for (int64_t p = 0; p < in.parts; ++p) in.source_part[order[p]] = p;
    for (int64_t i = in.parts; i < in.devices; ++i)
      in.source_part[order[i]] = static_cast<int64_t>(rng() % (in.parts + 1)) - 1;
    in.target_part.assign(in.devices, -1);
    std::shuffle(order.begin(), order.end(), rng);
    if (in.target_parts > in.devices) continue;
    for (int64_t q = 0; q < in.target_parts; ++q) in.target_part[order[q]] = q;
    for (int64_t i = in.target_parts; i < in.devices; ++i)
      in.target_part[order[i]] = static_cast<int64_t>(rng() % (in.target_parts + 1)) - 1;
    std::vector<int64_t> holder_parts, keeper_parts;
    for (int64_t d = 0; d < in.devices; ++d)
      if (in.target_part[d] >= 0) {
        holder_parts.push_back(in.source_part[d]);
        keeper_parts.push_back(in.target_part[d]);
      }
    const int64_t formula = ElementReceptions(in.parts, in.target_parts, holder_parts, keeper_parts, in.split);
    const int64_t best = BruteForce(in);
    ASSERT_GE(best, 0);
    EXPECT_LE(formula, best) << "devices " << in.devices << " parts " << in.parts << " target parts " << in.target_parts
                             << " split " << in.split;
    if (in.target_parts == 1) {
      EXPECT_EQ(formula, best);
    }
    exact += formula == best;
    ++checked;
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(exact, checked / 2);
}

// The tile-by-tile sum equals the element-by-element one, on random DTensor
// layouts with partial mesh dims (uneven and empty shards included).
TEST(ReductionBound, TileSumsMatchElementSums) {
  std::mt19937_64 rng(1717);
  auto random_placements = [&](int64_t axes, int64_t rank, ReduceOp op) {
    std::vector<Placement> p(axes);
    for (auto& x : p) {
      const int r = static_cast<int>(rng() % 3);
      if (r == 0 && rank > 0) {
        x = Placement{Placement::Kind::kShard, static_cast<int64_t>(rng() % rank)};
      } else if (r == 1) {
        x = Placement{Placement::Kind::kPartial, 0, 1, op};
      }
    }
    return p;
  };
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<Mesh::Axis> axes;
    const int64_t num_axes = 1 + static_cast<int64_t>(rng() % 3);
    for (int64_t a = 0; a < num_axes; ++a) axes.push_back({std::string(1, static_cast<char>('a' + a)), 1 + static_cast<int64_t>(rng() % 3)});
    const Mesh m = Mesh::Create(axes).value();
    const int64_t rank = 1 + static_cast<int64_t>(rng() % 2);
    std::vector<int64_t> shape(rank);
    for (auto& s : shape) s = static_cast<int64_t>(rng() % 7);
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
    const Layout a = PlacementsToLayout(random_placements(num_axes, rank, ops[rng() % 4]), m, shape, DType::kF32).value();
    const Layout b = PlacementsToLayout(random_placements(num_axes, rank, ops[rng() % 4]), m, shape, DType::kF32).value();
    if (!a.partial() && !b.partial()) {
      // Without reductions the formula is the plain bound.
      EXPECT_EQ(ReductionLowerBound(a, b).max_recv_bytes, ComputeLowerBound(a, b).max_recv_bytes) << a << " -> " << b;
      EXPECT_EQ(ReductionLowerBound(a, b).total_bytes, ComputeLowerBound(a, b).total_bytes) << a << " -> " << b;
      continue;
    }
    // Element by element: keepers of each element and the source part each holds.
    // Also what the direct schedule (every keeper receives each part it lacks
    // from one holder) takes into each device: a schedule, so never below the bound.
    int64_t total = 0;
    std::unordered_map<int64_t, int64_t> direct;
    std::vector<int64_t> index(rank, 0);
    const int64_t elements = a.num_elements();
    for (int64_t e = 0; e < elements; ++e) {
      int64_t rest = e;
      for (int64_t d = rank - 1; d >= 0; --d) { index[d] = rest % shape[d]; rest /= shape[d]; }
      auto holds = [&](const Layout& l, int64_t dev) {
        for (const Box& box : l.DeviceBoxes(dev)) {
          bool in = true;
          for (int64_t d = 0; d < rank; ++d) in = in && box.dims[d].lo <= index[d] && index[d] < box.dims[d].hi;
          if (in) return true;
        }
        return false;
      };
      std::vector<int64_t> holder_parts, keeper_parts;
      for (int64_t dev : b.devices())
        if (holds(b, dev)) {
          holder_parts.push_back(holds(a, dev) ? a.PartOf(dev) : -1);
          keeper_parts.push_back(b.PartOf(dev));
          direct[dev] += a.reduction().parts - (holder_parts.back() >= 0 ? 1 : 0);
        }
      total += ElementReceptions(a.reduction().parts, b.reduction().parts, holder_parts, keeper_parts,
                                 ReductionSplits(a.reduction().parts, a.reduction().op, b.reduction().parts,
                                                 b.reduction().op, a.dtype()));
    }
    if (!b.partial()) {
      int64_t direct_max = 0;
      for (const auto& [dev, n] : direct) direct_max = std::max(direct_max, n);
      EXPECT_LE(ReductionLowerBound(a, b).max_recv_bytes, direct_max * 4) << a << " -> " << b;
    }
    EXPECT_EQ(ReductionLowerBound(a, b).total_bytes, total * 4) << a << " -> " << b;
  }
}

}  // namespace
}  // namespace reshard
