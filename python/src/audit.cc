// audit(): the C++ audit (include/reshard/audit.h) over texts handed in from
// Python, its report as the JSON text `reshard audit --json` prints. Conversions
// only; errors follow the rule in bindings.h.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "reshard/audit.h"

namespace nb = nanobind;

namespace reshard::python {

void BindAudit(nb::module_& m) {
  m.def(
      "audit_json",
      [](const std::vector<std::pair<std::string, std::string>>& texts, const std::string& target,
         bool all_reshards) {
        std::vector<AuditInput> inputs;
        inputs.reserve(texts.size());
        for (const auto& [name, text] : texts) inputs.push_back({name, text});
        AuditOptions options;
        options.target = Unwrap(ParsePlanTarget(target));
        options.all_reshards = all_reshards;
        AuditReport report;
        {
          nb::gil_scoped_release release;  // a pure function of its inputs
          Result<AuditReport> r = Audit(inputs, options);
          if (!r.ok()) {
            nb::gil_scoped_acquire acquire;
            Raise(r.status());
          }
          report = std::move(r).value();
        }
        return AuditJson(report).dump();
      },
      nb::arg("texts"), nb::arg("target") = "jax-cpu", nb::arg("all_reshards") = false,
      "The audit of XLA's texts [(name, text)]: HLO modules after SPMD partitioning and XLA's log lines. "
      "Returns the JSON text of `reshard audit --json` (docs/audit.md).");
}

}  // namespace reshard::python
