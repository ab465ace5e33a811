// Plans the canonical case through the public API, as any C++ user would.
#include <iostream>

#include "reshard/notation.h"
#include "reshard/planner.h"

int main() {
  using namespace reshard;
  const Result<ParsedLayout> src = ParseLayout("{devices=[2,1,4]<=[4,2]T(1,0)}", {16, 16, 16}, DType::kF32, std::nullopt);
  const Result<ParsedLayout> dst = ParseLayout("{devices=[1,8,1]<=[8]}", {16, 16, 16}, DType::kF32, std::nullopt);
  if (!src.ok() || !dst.ok()) return 1;
  const Result<PlanResult> r = PlanReshard(src->layout, dst->layout, PlannerOptions{});
  if (!r.ok()) return 1;
  std::cout << r->plan.OpNames().size() << " step: " << r->plan.OpNames()[0] << ", "
            << r->plan.totals().max_recv_bytes << " bytes into each device\n";
  return r->plan.totals().max_recv_bytes == 1792 ? 0 : 1;
}
