// Execution benchmarks: the pack/unpack kernel against plain memcpy of the
// same bytes, over inner contiguous runs from 4 B to 1 MiB, and the
// in-process executor against memcpy of the bytes it moves. Ratios are read
// within one run of this program (docs/benchmarks.md, "Execution").
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "exec/copy_kernel.h"
#include "reshard/device_program.h"
#include "exec/exec_checker.h"
#include "reshard/executor.h"
#include "reshard/host_buffer.h"
#include "reshard/notation.h"
#include "reshard/planner.h"

namespace reshard {
namespace {

constexpr int64_t kCopyBytes = int64_t{32} << 20;  // bytes each kernel iteration moves

void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes), 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Memcpy)->Arg(kCopyBytes)->Arg(int64_t{1} << 20)->Arg(int64_t{64} << 20);

// Pack (range(1) == 0) or unpack (1): kCopyBytes in runs of range(0) bytes,
// every other run of a buffer twice as large (a box half as wide as its buffer).
void BM_PackUnpack(benchmark::State& state) {
  const int64_t run = state.range(0);
  const bool unpack = state.range(1) == 1;
  const int64_t rows = kCopyBytes / run;
  std::vector<char> strided(static_cast<size_t>(2 * kCopyBytes), 1), packed(static_cast<size_t>(kCopyBytes), 2);
  CopyProgram p;
  const std::vector<int64_t> extent = {rows, run}, wide = {2 * run, 1}, tight = {run, 1};
  if (unpack)
    p.AddBox(extent, 0, tight, 0, wide, 1);
  else
    p.AddBox(extent, 0, wide, 0, tight, 1);
  const CopyOp& op = p.ops.at(0);
  const std::byte* src = reinterpret_cast<const std::byte*>(unpack ? packed.data() : strided.data());
  std::byte* dst = reinterpret_cast<std::byte*>(unpack ? strided.data() : packed.data());
  for (auto _ : state) {
    RunCopy(p, op, src, dst, 0, CopyUnits(p, op));
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kCopyBytes);
  state.counters["run_bytes"] = static_cast<double>(run);
}
BENCHMARK(BM_PackUnpack)
    ->ArgsProduct({{4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}, {0, 1}})
    ->ArgNames({"run", "unpack"});

// The canonical reshard, f32[n,n,2n]-ish: P('y',None,'x') -> P(None,('x','y'),None)
// over 8 devices, at range(0) total bytes, staged (range(1) == 0) or direct (1),
// 2 threads. Reports bytes written into target buffers per second.
void BM_InProcess(benchmark::State& state) {
  const int64_t total = state.range(0);
  // shape [a, 64, 64] f32 with a * 16 KiB == total
  const std::vector<int64_t> shape = {total / (64 * 64 * 4), 64, 64};
  const Layout src = ParseLayout("{devices=[2,1,4]<=[4,2]T(1,0)}", shape, DType::kF32, std::nullopt).value().layout;
  const Layout dst = ParseLayout("{devices=[1,8,1]<=[8]}", shape, DType::kF32, std::nullopt).value().layout;
  const PlanProgram program = PlanProgram::Compile(PlanReshard(src, dst, PlannerOptions{}).value().plan).value();
  const size_t n = program.devices().size();
  std::vector<HostBuffer> a, b;
  std::vector<std::span<const std::byte>> sources(n);
  std::vector<std::span<std::byte>> targets(n), fill(n);
  for (size_t i = 0; i < n; ++i) {
    a.emplace_back(src.LocalBytes(program.devices()[i]));
    b.emplace_back(dst.LocalBytes(program.devices()[i]));
    sources[i] = a[i].span();
    targets[i] = b[i].span();
    fill[i] = a[i].span();
  }
  FillSources(program, fill, 2);
  ExecOptions o;
  o.threads = 2;
  o.transport = state.range(1) == 1 ? Transport::kDirect : Transport::kStaged;
  std::unique_ptr<Executor> ex = MakeInProcessExecutor(o);
  int64_t moved = ex->Run(program, sources, targets).value().bytes_moved;  // warm-up
  for (auto _ : state) {
    moved = ex->Run(program, sources, targets).value().bytes_moved;
    benchmark::ClobberMemory();
  }
  std::vector<std::span<const std::byte>> out(targets.begin(), targets.end());
  if (CheckTargets(program, out, 2).mismatches != 0) state.SkipWithError("wrong result");
  state.SetBytesProcessed(state.iterations() * moved);
}
BENCHMARK(BM_InProcess)
    ->ArgsProduct({{int64_t{1} << 20, int64_t{64} << 20}, {0, 1}})
    ->ArgNames({"bytes", "direct"})
    ->UseRealTime();

// memcpy of the same bytes with the same 2 threads (the executor's reference).
void BM_MemcpyThreads(benchmark::State& state) {
  double gbps = 0;
  for (auto _ : state) gbps = MeasureMemcpyGbps(state.range(0), 2, 3);  // best of 3, buffers allocated outside the timing
  state.counters["memcpy_gbps"] = gbps;  // read this, not the time (which includes allocation)
}
BENCHMARK(BM_MemcpyThreads)->Arg(int64_t{1} << 20)->Arg(int64_t{64} << 20)->UseRealTime();

}  // namespace
}  // namespace reshard

BENCHMARK_MAIN();
