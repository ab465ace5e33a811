// reshard._core: the module definition and the Status -> exception rule
// (bindings.h states it).
#include <nanobind/nanobind.h>

#include "bindings.h"

namespace reshard::python {

void Raise(const Status& s) {
  PyObject* type = PyExc_RuntimeError;
  if (s.code() == Status::Code::kInvalidArgument) type = PyExc_ValueError;
  if (s.code() == Status::Code::kNotSupported) type = PyExc_NotImplementedError;
  // The whole message, a NUL in the text quoted included (PyErr_SetString stops at the first).
  const std::string& m = s.message();
  PyObject* text = PyUnicode_DecodeUTF8(m.data(), static_cast<Py_ssize_t>(m.size()), "replace");
  if (text == nullptr) throw nanobind::python_error();
  PyErr_SetObject(type, text);
  Py_DECREF(text);
  throw nanobind::python_error();
}

}  // namespace reshard::python

NB_MODULE(_core, m) {
  m.doc() =
      "reshard's C++ library: layouts in every notation, collective plans, emitters.\n\n"
      "Errors: ValueError for bad input (the library's message, with the column for text), "
      "NotImplementedError for valid input not supported yet, RuntimeError for internal errors.";
  reshard::python::BindLayout(m);
  reshard::python::BindPlan(m);
  reshard::python::BindAudit(m);
}
