// Fuzzes mesh parsing and notation detection.
#include "fuzz_common.h"
#include "reshard/named_text.h"
#include "reshard/notation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reshard;
  const std::string_view text = fuzz::AsText(data, size);
  Result<Mesh> m = ParseMesh(text);
  if (m.ok()) {
    const std::string printed = PrintShardyMesh(*m);
    Result<Mesh> again = ParseMesh(printed);
    fuzz::Check(again.ok() && *again == *m, "round trip of " + printed);
  } else {
    fuzz::CheckError(m.status());
  }
  Result<Notation> n = DetectNotation(text);
  if (!n.ok()) fuzz::CheckError(n.status());
  return 0;
}
