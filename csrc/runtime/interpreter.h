// The Python interpreter, when openmtia runs inside one: what the glue needs
// of it, installed by the Python module when it loads
// (python/interpreter.cpp). libopenmtia holds no Python: a C++ program that
// links it has no interpreter, the GIL functions (gil.h) run their function
// as it is, and the torch.mtia hooks that return Python objects raise.
#pragma once

#include <ATen/detail/MTIAHooksInterface.h>  // PyObject, declared
#include <c10/core/Device.h>

#include <exception>
#include <functional>
#include <optional>
#include <string>

namespace openmtia {

struct Interpreter {
  void (*without_gil)(const std::function<void()>& fn);
  int (*with_warnings_recorded)(const std::function<void()>& fn);
  bool (*is_interrupt)(const std::exception& e);
  // lets torch::CapturedTraceback::gather read Python frames (memory history)
  void (*enable_python_tracebacks)();
  // the at::MTIAHooksInterface methods that return Python objects
  PyObject* (*memory_stats)(c10::DeviceIndex index);
  PyObject* (*device_capability)(c10::DeviceIndex index);
  PyObject* (*device_properties)(c10::DeviceIndex index);
  PyObject* (*memory_snapshot)(const std::optional<std::string>& path);
  void (*attach_out_of_memory_observer)(PyObject* observer);
};

// null without a Python module
const Interpreter* interpreter();
void installInterpreter(const Interpreter* interpreter);
// The interpreter, or an error naming what needed it.
const Interpreter& requireInterpreter(const char* what);

}  // namespace openmtia
