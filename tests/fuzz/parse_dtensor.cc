// Fuzzes DTensor placement and block-cyclic parsing, and their layouts.
#include "fuzz_common.h"
#include "reshard/block_cyclic.h"
#include "reshard/block_cyclic_text.h"
#include "reshard/dtensor.h"
#include "reshard/dtensor_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reshard;
  const std::string_view text = fuzz::AsText(data, size);
  static const Mesh mesh = Mesh::Create({{"a", 2}, {"b", 3}}).value();
  Result<std::vector<Placement>> p = ParsePlacements(text);
  if (p.ok()) {
    const std::string printed = PrintPlacements(*p);
    Result<std::vector<Placement>> again = ParsePlacements(printed);
    fuzz::Check(again.ok() && *again == *p, "round trip of " + printed);
    Result<Layout> l = PlacementsToLayout(*p, mesh, {7, 5}, DType::kF32);
    if (!l.ok()) fuzz::CheckError(l.status());
  } else {
    fuzz::CheckError(p.status());
  }
  Result<BlockCyclic> bc = ParseBlockCyclic(text);
  if (bc.ok()) {
    const std::string printed = PrintBlockCyclic(*bc);
    fuzz::Check(ParseBlockCyclic(printed).ok() && *ParseBlockCyclic(printed) == *bc, "round trip of " + printed);
    int64_t procs = 1;
    for (int64_t g : bc->grid) procs = g > 64 || procs * g > 64 ? 65 : procs * g;
    if (procs <= 64) {
      Result<Layout> l = BlockCyclicToLayout(*bc, {}, std::vector<int64_t>(bc->block.size(), 9), DType::kF32);
      if (!l.ok()) fuzz::CheckError(l.status());
    }
  } else {
    fuzz::CheckError(bc.status());
  }
  return 0;
}
