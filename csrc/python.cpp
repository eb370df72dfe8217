// The openmtia._C Python module. Loading it registers everything (hooks,
// guard, allocator, kernels, fallback) through static initializers.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "common.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "openmtia: an open MTIA backend for PyTorch";
  m.def("_default_generators", [] {
    py::tuple out(openmtia::deviceCount());
    for (c10::DeviceIndex i = 0; i < openmtia::deviceCount(); ++i)
      out[i] = py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(openmtia::defaultGenerator(i)));
    return out;
  });
  m.def("_device_memory_info", [](int device) {
    size_t free_b = 0, total = 0;
    OMR_CALL(omr::memGetInfo(device, &free_b, &total));
    return py::make_tuple(free_b, total);
  });
  // For tests of asynchronous error reporting: enqueue a task that fails.
  m.def("_launch_failing_task", [](int device, const std::string& name, const std::string& message) {
    openmtia::checkDevice(static_cast<c10::DeviceIndex>(device));
    openmtia::launchOnCurrentStream(static_cast<c10::DeviceIndex>(device), name.c_str(),
                                    [message] { throw std::runtime_error(message); });
  });
}
