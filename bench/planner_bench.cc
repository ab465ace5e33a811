// Search time of PlanReshard (the whole call: plan mesh, A* search over
// structured steps and the ragged exchange, baselines, candidates), layouts
// built outside the timed loop:
//   - the canonical case (f32[16,16,16], mesh x=4,y=2);
//   - 4-D tensors over 4 mesh axes on 512 devices (a=8,b=4,c=4,d=4) and 4096
//     devices (a=16,b=4,c=8,d=8), each pair under target any and jax-cpu and
//     topology flat and nodes:8;
//   - full-to-full on n = 65536, 262144 and 2^20 devices: f32[n,n], x=n,
//     P('x', None) -> P(None, 'x').
// Targets (issues): < 10 ms up to 4 dims, 4 axes, 512 devices; < 100 ms at
// 4096; full-to-full < 2 s at 262144 devices and < 10 s at 2^20.
//   build/bench/planner_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reshard/mesh.h"
#include "reshard/notation.h"
#include "reshard/planner.h"
#include "reshard/topology.h"

namespace reshard {
namespace {

Layout MustParse(const std::string& text, const std::vector<int64_t>& shape, const Mesh& mesh) {
  return ParseLayout(text, shape, DType::kF32, mesh).value().layout;
}

struct Case {
  Layout src, dst;
  PlannerOptions options;
};

Case MakeCase(const Mesh& mesh, const std::vector<int64_t>& shape, const std::string& from, const std::string& to,
              PlanTarget target, const Topology& topology) {
  PlannerOptions o;
  o.target = target;
  o.topology = topology;
  o.meshes = {mesh};
  return {MustParse(from, shape, mesh), MustParse(to, shape, mesh), o};
}

// The whole PlanReshard call per iteration; reports what the search did.
void RunPlanner(benchmark::State& state, const Case& c) {
  std::optional<PlanResult> last;
  for (auto _ : state) {
    Result<PlanResult> r = PlanReshard(c.src, c.dst, c.options);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(r);
    last = std::move(r).value();
  }
  if (!last) return;
  state.counters["states"] = static_cast<double>(last->states_explored);
  state.counters["steps"] = static_cast<double>(last->plan.steps().size());
  state.counters["collectives"] = static_cast<double>(last->plan.totals().collectives);
  state.counters["modeled_us"] = last->plan.totals().time_us;
  state.counters["recv_B"] = static_cast<double>(last->plan.totals().max_recv_bytes);
  state.counters["bound_B"] = static_cast<double>(last->lower_bound.max_recv_bytes);
}

void BM_Canonical(benchmark::State& state) {
  Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}}).value();
  Case c = MakeCase(mesh, {16, 16, 16}, "P('y', None, 'x')", "P(None, ('x', 'y'), None)", PlanTarget::kAny,
                    Topology::Flat());
  RunPlanner(state, c);
}
BENCHMARK(BM_Canonical)->Unit(benchmark::kMicrosecond);

struct Pair {
  const char* name;
  const char* from;
  const char* to;
};

// 4 tensor dims, 4 mesh axes a, b, c, d.
const Pair kPairs[] = {
    {"abcd_to_dc.ba.", "P('a', 'b', 'c', 'd')", "P(('d', 'c'), None, ('b', 'a'), None)"},
    {"ab.c.d._to_.d.ca.b", "P(('a', 'b'), 'c', 'd', None)", "P(None, 'd', ('c', 'a'), 'b')"},
    {"a.b.cd_to_cd.a.b", "P('a', None, 'b', ('c', 'd'))", "P(('c', 'd'), 'a', None, 'b')"},
    {"ab..._to_..cd", "P(('a', 'b'), None, None, None)", "P(None, None, 'c', 'd')"},
};

void RegisterFourAxis() {
  struct MeshCase {
    int64_t devices;
    std::vector<Mesh::Axis> axes;
  };
  const MeshCase meshes[] = {
      {512, {{"a", 8}, {"b", 4}, {"c", 4}, {"d", 4}}},
      {4096, {{"a", 16}, {"b", 4}, {"c", 8}, {"d", 8}}},
  };
  for (const MeshCase& m : meshes) {
    for (const Pair& p : kPairs) {
      for (PlanTarget target : {PlanTarget::kAny, PlanTarget::kJaxCpu}) {
        for (const char* topo : {"flat", "nodes:8"}) {
          const std::string name = "BM_FourAxis/" + std::to_string(m.devices) + "/" + p.name + "/" +
                                   std::string(PlanTargetName(target)) + "/" + topo;
          const Mesh mesh = Mesh::Create(m.axes).value();
          const Topology topology = Topology::Parse(topo).value();
          const Case c = MakeCase(mesh, {256, 256, 256, 256}, p.from, p.to, target, topology);
          benchmark::RegisterBenchmark(name.c_str(), [c](benchmark::State& state) { RunPlanner(state, c); })
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

// f32[n, n] over x=n, rows to columns; n is the benchmark's argument.
void BM_FullToFull(benchmark::State& state) {
  const int64_t n = state.range(0);
  Mesh mesh = Mesh::Create({{"x", n}}).value();
  Case c = MakeCase(mesh, {n, n}, "P('x', None)", "P(None, 'x')", PlanTarget::kAny, Topology::Flat());
  RunPlanner(state, c);
}
BENCHMARK(BM_FullToFull)->Arg(65536)->Arg(262144)->Arg(1048576)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace reshard

int main(int argc, char** argv) {
  reshard::RegisterFourAxis();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
