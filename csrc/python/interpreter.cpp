// The Python side of runtime/interpreter.h (see interpreter.h).
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>

#include "openmtia/runtime.h"
#include "python/interpreter.h"
#include "python/memory_snapshot.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/interpreter.h"
#include "runtime/memory_stats.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python).
namespace torch {
void installCapturedTracebackPython();
}  // namespace torch

namespace openmtia {
namespace {

void withoutGil(const std::function<void()>& fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    fn();
  } else {
    fn();
  }
}

int withWarningsRecorded(const std::function<void()>& fn) {
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

PyObject* memoryStatsDict(c10::DeviceIndex index) {
  py::dict out, dram;
  const std::string section = "dram.";
  for (const auto& [key, value] : memoryStats(index)) {
    if (key.compare(0, section.size(), section) == 0) dram[py::str(key.substr(section.size()))] = value;
    else out[py::str(key)] = value;
  }
  out["dram"] = dram;
  return out.release().ptr();
}

omr::DeviceProperties propertiesOf(c10::DeviceIndex index) {  // -1: the current device
  return OMR_CALL(omr::deviceProperties(index < 0 ? currentDevice() : index));
}

PyObject* deviceCapability(c10::DeviceIndex index) {
  auto p = propertiesOf(index);
  return py::make_tuple(p.major, p.minor).release().ptr();
}

PyObject* deviceProperties(c10::DeviceIndex index) {
  auto p = propertiesOf(index);
  py::dict d;
  d["name"] = p.name;
  d["total_memory"] = p.total_memory;
  d["major"] = p.major;
  d["minor"] = p.minor;
  d["multi_processor_count"] = p.processor_count;
  d["host_addressable"] = p.host_addressable;
  d["asynchronous"] = p.asynchronous;
  return d.release().ptr();
}

void attachOutOfMemoryObserver(PyObject* observer) {
  auto fn = std::make_shared<py::object>(py::reinterpret_borrow<py::object>(observer));
  for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
    deviceCache(i).attachOomObserver([fn](int device, int64_t requested, int64_t allocated, int64_t free_b) {
      py::gil_scoped_acquire gil;
      (*fn)(device, requested, allocated, free_b);
    });
}

const Interpreter kInterpreter = {
    &withoutGil,       &withWarningsRecorded, &isInterrupt,     &torch::installCapturedTracebackPython,
    &memoryStatsDict,  &deviceCapability,     &deviceProperties, &memorySnapshot,
    &attachOutOfMemoryObserver,
};

}  // namespace

void installPythonInterpreter() { installInterpreter(&kInterpreter); }

}  // namespace openmtia
