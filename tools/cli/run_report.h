// What `reshard run` reports, the same for every backend: the JSON
// keys first, in their order, then each backend's own.
#ifndef RESHARD_TOOLS_CLI_RUN_REPORT_H_
#define RESHARD_TOOLS_CLI_RUN_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

namespace reshard::cli {

struct RunFigures {
  int64_t bytes_moved = 0;
  double seconds = 0, gbps = 0, memcpy_gbps = 0, fraction_of_memcpy = 0;
  bool verified = false;
};

// GB/s are 1e9 bytes per second; 0 where a time is 0.
inline RunFigures MakeRunFigures(int64_t bytes_moved, double seconds, double memcpy_gbps, bool verified) {
  RunFigures f{bytes_moved, seconds, 0, memcpy_gbps, 0, verified};
  f.gbps = seconds > 0 ? static_cast<double>(bytes_moved) / seconds / 1e9 : 0;
  f.fraction_of_memcpy = memcpy_gbps > 0 ? f.gbps / memcpy_gbps : 0;
  return f;
}

// {"backend","bytes_moved","seconds","gbps","memcpy_gbps","fraction_of_memcpy","verified"}.
inline nlohmann::ordered_json RunJson(std::string_view backend, const RunFigures& f) {
  return {{"backend", backend},          {"bytes_moved", f.bytes_moved},
          {"seconds", f.seconds},        {"gbps", f.gbps},
          {"memcpy_gbps", f.memcpy_gbps}, {"fraction_of_memcpy", f.fraction_of_memcpy},
          {"verified", f.verified}};
}

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_RUN_REPORT_H_
