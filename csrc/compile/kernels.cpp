// Compiled kernels as device work: the launch side of torch.compile on mtia.
//
// Inductor's C++ codegen (openmtia/inductor/cpp.py) compiles each generated
// kernel into a shared object with an entry `void entry(const int64_t* slots)`
// that unpacks one 64-bit slot per argument (a pointer, an integer or the bits
// of a double) and calls the kernel. A CompiledKernel holds that entry; a call
// from the generated wrapper code turns its arguments into slots now, on the
// calling thread, and launches the entry as a task on the current stream of
// the tensors' device: in order with the eager ops around it, and the call
// returns before the kernel has run.
//
// A CPU tensor the kernel only reads (a 0-dim step count of an optimizer, say)
// is passed by value, as CUDA passes CPU scalars: the launch copies its bytes
// into the task, since the host may change it before the task runs.
//
// Like the eager kernels (and CUDA's), the task holds raw device pointers, not
// references: memory the host frees is reused only by later work of the same
// stream (the caching allocator's stream order), and use from another stream
// needs record_stream. The task is re-runnable, so it can be captured into a
// graph (mode="reduce-overhead").
#include <ATen/EmptyTensor.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <string>
#include <vector>

#include "openmtia/runtime.h"
#include "aten/threads/kernel_threads.h"
#include "compile/kernels.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace openmtia {
namespace {

class CompiledKernel {
 public:
  using Entry = void (*)(const int64_t*);

  // kinds: one letter per argument: 'p' the data pointer of a tensor the
  // kernel reads, 'w' of one it writes, 'i' an integer, 'f' a floating-point
  // scalar. parallel: the kernel has an OpenMP parallel region (the driver is
  // told: noteParallelKernel).
  CompiledKernel(uintptr_t entry, std::string name, std::string kinds, bool parallel)
      : entry_(reinterpret_cast<Entry>(entry)), name_(std::move(name)), kinds_(std::move(kinds)), parallel_(parallel) {
    TORCH_CHECK(entry_ != nullptr, "compiled kernel ", name_, ": null entry point");
    for (char k : kinds_) TORCH_CHECK(k == 'p' || k == 'w' || k == 'i' || k == 'f', "compiled kernel ", name_, ": bad kind ", k);
  }

  void operator()(const py::args& args) const {
    TORCH_CHECK_TYPE(args.size() == kinds_.size(), "compiled kernel ", name_, " takes ", kinds_.size(),
                     " arguments, got ", args.size());
    std::vector<int64_t> slots(kinds_.size());
    std::vector<std::shared_ptr<std::vector<int64_t>>> by_value;  // CPU inputs' bytes
    c10::DeviceIndex device = -1;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      PyObject* obj = args[i].ptr();
      switch (kinds_[i]) {
        case 'p':
        case 'w': {
          TORCH_CHECK_TYPE(THPVariable_Check(obj), "compiled kernel ", name_, ": argument ", i,
                           " must be a tensor, got ", Py_TYPE(obj)->tp_name);
          const at::Tensor& t = THPVariable_Unpack(obj);
          if (t.device().is_cpu() && kinds_[i] == 'p') {
            by_value.push_back(copyOf(t));
            slots[i] = static_cast<int64_t>(reinterpret_cast<intptr_t>(by_value.back()->data()));
            break;
          }
          TORCH_CHECK(t.device().type() == kMTIA, "compiled kernel ", name_, " runs on mtia, but argument ", i,
                      " is on ", t.device());
          c10::DeviceIndex index = t.device().index();
          TORCH_CHECK(device == -1 || device == index, "compiled kernel ", name_,
                      ": arguments on several devices (mtia:", device, " and mtia:", index, ")");
          device = index;
          slots[i] = static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr()));
          break;
        }
        case 'i': {
          int64_t v = PyLong_AsLongLong(obj);
          if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
          slots[i] = v;
          break;
        }
        default: {
          double v = PyFloat_AsDouble(obj);
          if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
          std::memcpy(&slots[i], &v, sizeof v);
        }
      }
    }
    TORCH_CHECK(device >= 0, "compiled kernel ", name_, " has no tensor argument");
    launchOnCurrentStream(device, name_.c_str(),
                          [entry = entry_, slots = std::move(slots), by_value = std::move(by_value), parallel = parallel_] {
                            if (parallel) noteParallelKernel();
                            entry(slots.data());
                          });
  }

  const std::string& name() const { return name_; }

 private:
  // The bytes a kernel may read through t's data pointer and strides, copied
  // now (8-byte aligned). Only for small tensors: reading a large CPU tensor
  // in a device kernel is a device mismatch.
  std::shared_ptr<std::vector<int64_t>> copyOf(const at::Tensor& t) const {
    constexpr int64_t kMaxBytes = 1 << 16;
    int64_t extent = t.numel() == 0 ? 0 : 1;
    for (int64_t d = 0; d < t.dim(); ++d) {
      TORCH_CHECK(t.stride(d) >= 0, "compiled kernel ", name_, ": a CPU input with a negative stride");
      extent += (t.size(d) - 1) * t.stride(d);
    }
    const int64_t nbytes = extent * static_cast<int64_t>(t.element_size());
    TORCH_CHECK(nbytes <= kMaxBytes, "compiled kernel ", name_, " runs on mtia, but reads a CPU tensor of ", nbytes,
                " bytes (expected a CPU scalar, or a tensor on mtia)");
    auto copy = std::make_shared<std::vector<int64_t>>((nbytes + 7) / 8);
    if (nbytes) std::memcpy(copy->data(), t.const_data_ptr(), nbytes);
    return copy;
  }

  Entry entry_;
  std::string name_;
  std::string kinds_;
  bool parallel_;
};

}  // namespace

void initCompileBindings(py::module& m) {
  py::class_<CompiledKernel>(m, "_CompiledKernel")
      .def(py::init<uintptr_t, std::string, std::string, bool>(), py::arg("entry"), py::arg("name"), py::arg("kinds"),
           py::arg("parallel") = false)
      .def("__call__", &CompiledKernel::operator())
      .def_property_readonly("name", &CompiledKernel::name);
  // Allocation for generated code: torch.empty_strided on mtia:device (-1: the
  // current device) through the caching allocator, without Python's argument
  // parsing.
  m.def("_empty_strided", [](c10::IntArrayRef size, c10::IntArrayRef stride, py::object dtype, int device) -> at::Tensor {
    TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "dtype must be a torch.dtype");
    auto scalar_type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
    auto index = device < 0 ? currentDevice() : static_cast<c10::DeviceIndex>(device);
    checkDevice(index);
    c10::DeviceGuard guard(c10::Device(kMTIA, index));
    return at::detail::empty_strided_generic(size, stride, deviceAllocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::MTIA), scalar_type);
  }, py::arg("size"), py::arg("stride"), py::arg("dtype"), py::arg("device") = -1);
}

}  // namespace openmtia
