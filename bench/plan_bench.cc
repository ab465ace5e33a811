// Planning time: the canonical case, full-to-full 3-D reshards (every device
// sends to every other) at 64, 512 and 4096 devices, and one device's part of
// a reshard from a replicated source at 512, 2048 and 4096 devices.
//   build/bench/plan_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "reshard/exchange.h"
#include "reshard/notation.h"
#include "reshard/plan_stats.h"

namespace reshard {
namespace {

Layout MustParse(const std::string& text, const std::vector<int64_t>& shape, const std::optional<Mesh>& mesh) {
  return ParseLayout(text, shape, DType::kF32, mesh).value().layout;
}

struct Case {
  Layout src, dst;
};

Case Canonical() {
  return {MustParse("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16}, std::nullopt),
          MustParse("{devices=[1,8,1]<=[8]}", {16, 16, 16}, std::nullopt)};
}

// Mesh s x s x s; rows split over all devices -> columns split over all devices.
Case FullToFull(int64_t side) {
  Mesh mesh = Mesh::Create({{"x", side}, {"y", side}, {"z", side}}).value();
  const int64_t n = side * side * side;
  std::vector<int64_t> shape = {4 * n, 4 * n, 16};
  return {MustParse("P(('x', 'y', 'z'), None, None)", shape, mesh), MustParse("P(None, ('x', 'y', 'z'), None)", shape, mesh)};
}

void BM_CanonicalPlan(benchmark::State& state) {
  Case c = Canonical();
  for (auto _ : state) {
    Exchange ex = Exchange::Create(c.src, c.dst).value();
    benchmark::DoNotOptimize(ex.Plan());
  }
}
BENCHMARK(BM_CanonicalPlan)->Unit(benchmark::kMicrosecond);

void BM_CanonicalPlanAndStats(benchmark::State& state) {
  Case c = Canonical();
  for (auto _ : state) {
    Exchange ex = Exchange::Create(c.src, c.dst).value();
    benchmark::DoNotOptimize(ComputeStats(ex));
    benchmark::DoNotOptimize(ComputeLowerBound(c.src, c.dst));
  }
}
BENCHMARK(BM_CanonicalPlanAndStats)->Unit(benchmark::kMicrosecond);

int64_t Side(int64_t devices) { return devices == 64 ? 4 : devices == 512 ? 8 : 16; }

void BM_FullToFullWholePlanStats(benchmark::State& state) {
  Case c = FullToFull(Side(state.range(0)));
  int64_t transfers = 0;
  for (auto _ : state) {
    Exchange ex = Exchange::Create(c.src, c.dst).value();
    PlanStats s = ComputeStats(ex);
    transfers = s.messages;
    benchmark::DoNotOptimize(s);
  }
  state.counters["messages"] = static_cast<double>(transfers);
  state.counters["messages/s"] = benchmark::Counter(static_cast<double>(transfers), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FullToFullWholePlanStats)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_FullToFullWholePlanMaterialized(benchmark::State& state) {
  Case c = FullToFull(Side(state.range(0)));
  for (auto _ : state) {
    Exchange ex = Exchange::Create(c.src, c.dst).value();
    benchmark::DoNotOptimize(ex.Plan());
  }
}
BENCHMARK(BM_FullToFullWholePlanMaterialized)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);

// One device's part (device N/2+1), planner set up once (every rank builds its Exchange once).
void TimeOneDevicePart(benchmark::State& state, const Case& c) {
  Exchange ex = Exchange::Create(c.src, c.dst).value();
  const int64_t device = state.range(0) / 2 + 1;
  size_t transfers = 0;
  for (auto _ : state) {
    ExchangePlan part = ex.DevicePlan(device);
    transfers = part.transfers().size();
    benchmark::DoNotOptimize(part);
  }
  state.counters["transfers"] = static_cast<double>(transfers);
}

void BM_FullToFullOneDevice(benchmark::State& state) { TimeOneDevicePart(state, FullToFull(Side(state.range(0)))); }
BENCHMARK(BM_FullToFullOneDevice)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMicrosecond);

// One device's part including building the planner from the two layouts.
void BM_FullToFullOneDeviceFromScratch(benchmark::State& state) {
  Case c = FullToFull(Side(state.range(0)));
  const int64_t device = state.range(0) / 2 + 1;
  for (auto _ : state) {
    Exchange ex = Exchange::Create(c.src, c.dst).value();
    benchmark::DoNotOptimize(ex.DevicePlan(device));
  }
}
BENCHMARK(BM_FullToFullOneDeviceFromScratch)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMicrosecond);

// Mesh a=2, b=n/2 on f32[4096,4096]: rows split over b and replicated over a
// -> columns split over all n devices. Every source tile has two holders and n
// receivers, so the sender rule for replicated sources decides who sends what.
Case Replicated(int64_t devices) {
  Mesh mesh = Mesh::Create({{"a", 2}, {"b", devices / 2}}).value();
  std::vector<int64_t> shape = {4096, 4096};
  return {MustParse("P('b', None)", shape, mesh), MustParse("P(None, ('a', 'b'))", shape, mesh)};
}

// One device's part with a replicated source, planner set up once.
void BM_ReplicatedSourceOneDevice(benchmark::State& state) {
  TimeOneDevicePart(state, Replicated(state.range(0)));
}
BENCHMARK(BM_ReplicatedSourceOneDevice)->Arg(512)->Arg(2048)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace reshard

BENCHMARK_MAIN();
