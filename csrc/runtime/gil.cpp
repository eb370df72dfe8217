// The Python interpreter, as kernels and waits need it (see gil.h).
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "runtime/gil.h"

namespace py = pybind11;

namespace openmtia {

void withoutGil(const std::function<void()>& fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    fn();
  } else {
    fn();
  }
}

int withPythonWarningsRecorded(const std::function<void()>& fn) {
  if (!Py_IsInitialized()) {
    fn();
    return 0;
  }
  py::gil_scoped_acquire gil;
  py::module_ warnings = py::module_::import("warnings");
  py::object recorder = warnings.attr("catch_warnings")(py::arg("record") = true);
  py::list log = recorder.attr("__enter__")();
  warnings.attr("simplefilter")("always");
  try {
    fn();  // a Python kernel takes the GIL it needs (this thread holds it)
  } catch (...) {
    recorder.attr("__exit__")(py::none(), py::none(), py::none());
    throw;
  }
  recorder.attr("__exit__")(py::none(), py::none(), py::none());
  return static_cast<int>(py::len(log));
}

bool isInterrupt(const std::exception& e) {
  // Python errors reach C++ as torch's python_error or pybind11's
  // error_already_set (Python kernels called through the dispatcher)
  PyObject* type = nullptr;
  if (auto* pe = dynamic_cast<const python_error*>(&e)) type = pe->type;
  else if (auto* be = dynamic_cast<const py::error_already_set*>(&e)) type = be->type().ptr();
  if (!type) return false;
  py::gil_scoped_acquire gil;
  return !PyErr_GivenExceptionMatches(type, PyExc_Exception);  // BaseException only
}

}  // namespace openmtia
