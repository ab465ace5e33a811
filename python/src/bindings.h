// The Python module reshard._core: type conversion and Status -> exception,
// nothing else (the library does the work).
//
// Error rule, for every function of the module (stated once here, as
// leveldb's c.h states its own):
//   Status::kInvalidArgument  -> ValueError           (bad input: the message is
//                                                     the library's, with the
//                                                     column and a caret for text)
//   Status::kNotSupported     -> NotImplementedError  (valid input reshard does not
//                                                     handle yet)
//   Status::kInternal, kUnavailable -> RuntimeError
// Arguments of the wrong Python type raise TypeError (nanobind's own).
#ifndef RESHARD_PYTHON_SRC_BINDINGS_H_
#define RESHARD_PYTHON_SRC_BINDINGS_H_

#include <nanobind/nanobind.h>

#include <utility>

#include "reshard/status.h"

namespace reshard::python {

// Raises the Python exception the error rule above names for `s` (REQUIRES: !s.ok()).
[[noreturn]] void Raise(const Status& s);

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

void BindLayout(nanobind::module_& m);  // layout.cc: Mesh, Layout, NamedSharding, parse, print
void BindPlan(nanobind::module_& m);    // plan.cc: plan, PlanResult, Step, emit
void BindAudit(nanobind::module_& m);   // audit.cc: audit_json

}  // namespace reshard::python

#endif  // RESHARD_PYTHON_SRC_BINDINGS_H_
