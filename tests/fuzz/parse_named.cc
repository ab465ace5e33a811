// Fuzzes the JAX, Shardy and HLO V3 parsers and name binding against a fixed
// mesh: print(parse(s)) must parse to itself, and bound shardings must give a
// layout or a clean error.
#include "fuzz_common.h"
#include "reshard/named_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reshard;
  const std::string_view text = fuzz::AsText(data, size);
  static const Mesh mesh = Mesh::Create({{"x", 4}, {"y", 2}, {"z", 3}}).value();
  for (auto parse : {&ParseJaxSpec, &ParseShardySharding, &ParseHloV3}) {
    Result<NamedText> t = parse(text);
    if (!t.ok()) { fuzz::CheckError(t.status()); continue; }
    const std::string printed = PrintNamedText(*t);
    Result<NamedText> again = parse(printed);
    fuzz::Check(again.ok() && PrintNamedText(*again) == printed, "round trip of " + printed);
    if (t->inline_mesh && t->inline_mesh->num_devices() > 4096) continue;
    Result<NamedSharding> s = BindNamedText(*t, mesh, text);
    if (!s.ok()) { fuzz::CheckError(s.status()); continue; }
    std::vector<int64_t> shape(s->dims().size(), 5);
    Result<Layout> l = s->ToLayout(shape, DType::kF32);
    if (!l.ok()) fuzz::CheckError(l.status());
    Result<HloSharding> h = s->ToHlo();
    if (!h.ok()) fuzz::CheckError(h.status());
  }
  return 0;
}
