// The canonical reshard through the library API: parse two JAX layouts, plan
// the minimal exchange, print what device 0 sends and receives, and check the
// whole plan in the reference simulator. Its output is diffed in CI against
// plan_canonical.output.
#include <iostream>

#include "reshard/exchange.h"
#include "reshard/named_text.h"
#include "reshard/notation.h"
#include "reshard/plan_stats.h"
#include "reshard/simulator.h"

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

  const SimulationReport report = Simulate(exchange->Plan(), stats);
  std::cout << (report.ok() ? "simulated exactly: " : "SIMULATION FAILED: ") << report.elements_checked
            << " elements checked\n";
  return report.ok() ? 0 : 1;
}
