// Fuzzes the auditor's readers and the analysis behind them: HLO module text,
// XLA's rematerialization log lines, and values followed through collectives.
// Audit() must return a report or an error with a message, never crash, and
// its report must print. The first byte picks how the rest is used:
//   0  as the whole input;
//   1  as the body of an entry computation after a sharded parameter %p
//      (so short inputs reach the analysis of collectives);
//   2  as the shardings and operation of a rematerialization log line.
#include <string>

#include "fuzz_common.h"
#include "reshard/audit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reshard;
  if (size == 0) return 0;
  const std::string_view rest = fuzz::AsText(data + 1, size - 1);
  std::string text;
  switch (data[0] % 3) {
    case 0:
      text = std::string(rest);
      break;
    case 1:
      text = "HloModule m, num_partitions=8\n\nENTRY %main (p: f32[8,16,4]) -> f32[16,2,16] {\n"
             "  %p = f32[8,16,4]{2,1,0} parameter(0), sharding={devices=[2,1,4]<=[4,2]T(1,0)}\n"
             "  %pid = u32[] partition-id()\n" +
             std::string(rest) + "\n}\n";
      break;
    default:
      text = "W0 spmd_partitioner.cc:656] [SPMD] Involuntary full rematerialization. The compiler cannot go from sharding " +
             std::string(rest) + ". As the last resort\n";
      break;
  }
  AuditOptions options;
  options.max_devices = 64;  // bounds the work per input
  Result<AuditReport> r = Audit({{"fuzz", text}}, options);
  if (!r.ok()) {
    fuzz::CheckError(r.status());
    return 0;
  }
  const std::string json = AuditJson(*r).dump();
  const std::string table = AuditTable(*r);
  fuzz::Check(!json.empty() && !table.empty(), "empty report");
  for (const AuditFinding& f : r->findings)
    fuzz::Check(f.xla_max_recv_bytes > f.reshard_max_recv_bytes || f.kind == AuditKind::kNone, "a finding that saves nothing");
  return 0;
}
