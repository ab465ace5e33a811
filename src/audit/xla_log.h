// XLA's log line for a full rematerialization (spmd_partitioner.cc, absl
// logging on standard error):
//
//   W1130 06:59:12.335303 18087 spmd_partitioner.cc:656] [SPMD] Involuntary
//   full rematerialization. The compiler cannot go from sharding
//   {devices=[2,1,4]<=[4,2]T(1,0)} to {devices=[1,8,1]<=[8]} efficiently for
//   HLO operation %param = f32[8,16,4]{2,1,0} parameter(0), sharding=...
//   As the last resort, SPMD will replicate the tensor ...
//
// (one line). The operation's shape is its local shape; the global shape is
// the local shape times the source sharding's tile counts.
#ifndef RESHARD_SRC_AUDIT_XLA_LOG_H_
#define RESHARD_SRC_AUDIT_XLA_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "audit/hlo_module.h"
#include "reshard/status.h"

namespace reshard::audit {

struct LogRematerialization {
  std::string from, to;       // HLO sharding texts
  std::string instruction;    // without '%'
  std::string op_name;        // the operation's metadata op_name ("jit(f)/mul"), or ""
  HloShape local_shape;
  std::vector<int64_t> global_shape;
};

// Whether the line reports a full rematerialization.
bool IsRematerializationLine(std::string_view line);
// Reads such a line. Errors say which part is not understood.
Result<LogRematerialization> ParseRematerializationLine(std::string_view line);

}  // namespace reshard::audit

#endif  // RESHARD_SRC_AUDIT_XLA_LOG_H_
