// The canonical reshard through the library API: parse two JAX layouts, plan
// the minimal exchange, print what device 0 sends and receives, then run it
// on 8 in-process devices and check every element. Its output is diffed in
// CI against plan_canonical.output.
#include <iostream>
#include <span>
#include <vector>

#include "reshard/device_program.h"
#include "reshard/exchange.h"
#include "reshard/executor.h"
#include "reshard/named_text.h"
#include "reshard/notation.h"
#include "reshard/plan_stats.h"

namespace {

// Walks a device's buffer (its one box of the array, row-major) and calls
// f(local index, global row-major index) for each element.
template <typename F>
void ForEachElement(const reshard::Layout& l, int64_t device, F&& f) {
  const reshard::Box box = l.DeviceBoxes(device).at(0);
  std::vector<int64_t> at;
  for (const reshard::Interval& iv : box.dims) at.push_back(iv.lo);
  for (int64_t local = 0; local < box.volume(); ++local) {
    int64_t global = 0;
    for (int64_t d = 0; d < l.rank(); ++d) global = global * l.shape()[d] + at[d];
    f(local, global);
    for (int64_t d = l.rank() - 1; d >= 0 && ++at[d] == box.dims[d].hi; --d) at[d] = box.dims[d].lo;
  }
}

}  // namespace

int main() {
  using namespace reshard;
  const Mesh mesh = ParseMesh("x=4,y=2").value();
  const std::vector<int64_t> shape = {16, 16, 16};
  Result<ParsedLayout> src = ParseLayout("P('y', None, 'x')", shape, DType::kF32, mesh);
  Result<ParsedLayout> dst = ParseLayout("P(None, ('x','y'), None)", shape, DType::kF32, mesh);
  if (!src.ok() || !dst.ok()) {
    std::cerr << (src.ok() ? dst.status() : src.status()) << "\n";
    return 2;
  }
  std::cout << "source as HLO: " << PrintLayout(src->layout, Notation::kHlo, mesh).value() << "\n";
  std::cout << "target as HLO: " << PrintLayout(dst->layout, Notation::kHlo, mesh).value() << "\n";

  Result<Exchange> exchange = Exchange::Create(src->layout, dst->layout);
  if (!exchange.ok()) return 2;
  const PlanStats stats = ComputeStats(*exchange);
  const LowerBound bound = ComputeLowerBound(src->layout, dst->layout);
  const Baseline remat = FullRematerialization(src->layout, dst->layout);
  std::cout << "max bytes into a device: " << stats.max_recv_bytes << " (lower bound " << bound.max_recv_bytes
            << ", XLA full rematerialization " << remat.max_recv_bytes << ")\n";
  std::cout << "total bytes moved: " << stats.total_bytes << " in " << stats.collectives << " collective\n";

  // One device's part, as one rank would compute it.
  const ExchangePlan part = exchange->DevicePlan(0);
  for (const Transfer& t : part.transfers()) {
    std::cout << "  " << t.from << " -> " << t.to << ": " << part.Bytes(t) << " B";
    for (const Box& b : part.Boxes(t)) std::cout << " " << b;
    std::cout << (t.from == t.to ? "  (local copy)\n" : "\n");
  }

  // Run it: each source element holds its global row-major index; after the
  // exchange, so must each target element.
  Result<PlanProgram> program = PlanProgram::Compile(*exchange);
  if (!program.ok()) return 2;
  const std::vector<int64_t>& devices = program->devices();
  std::vector<std::vector<float>> in(devices.size()), out(devices.size());
  std::vector<std::span<const std::byte>> sources;
  std::vector<std::span<std::byte>> targets;
  for (size_t i = 0; i < devices.size(); ++i) {
    in[i].resize(static_cast<size_t>(src->layout.LocalBytes(devices[i]) / 4));
    out[i].resize(static_cast<size_t>(dst->layout.LocalBytes(devices[i]) / 4));
    ForEachElement(src->layout, devices[i], [&](int64_t local, int64_t global) { in[i][local] = static_cast<float>(global); });
    sources.push_back(std::as_bytes(std::span(in[i])));
    targets.push_back(std::as_writable_bytes(std::span(out[i])));
  }
  Result<ExecStats> run = MakeInProcessExecutor()->Run(*program, sources, targets);
  if (!run.ok()) return 2;
  int64_t checked = 0, wrong = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    ForEachElement(dst->layout, devices[i], [&](int64_t local, int64_t global) {
      ++checked;
      wrong += out[i][local] != static_cast<float>(global);
    });
  std::cout << (wrong == 0 ? "executed exactly: " : "EXECUTION FAILED: ") << checked << " elements checked, "
            << run->bytes_sent << " bytes sent\n";
  return wrong == 0 ? 0 : 1;
}
