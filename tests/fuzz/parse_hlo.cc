// Fuzzes the HLO sharding parser: print(parse(s)) must parse to itself, and
// small shardings must convert to a layout or fail cleanly.
#include "fuzz_common.h"
#include "reshard/hlo_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reshard;
  Result<HloSharding> s = ParseHloSharding(fuzz::AsText(data, size));
  if (!s.ok()) { fuzz::CheckError(s.status()); return 0; }
  const std::string text = s->ToString();
  Result<HloSharding> again = ParseHloSharding(text);
  fuzz::Check(again.ok() && again->ToString() == text, "round trip of " + text);
  if (const auto* t = std::get_if<HloSharding::Tiled>(&s->kind()); t && t->tiles.num_devices() > 4096) return 0;
  std::vector<int64_t> shape(4, 7);
  for (size_t rank = 0; rank <= 4; ++rank) {
    shape.resize(rank);
    Result<Layout> l = s->ToLayout(shape, DType::kF32, std::nullopt);
    if (!l.ok()) fuzz::CheckError(l.status());
  }
  return 0;
}
