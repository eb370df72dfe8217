// The host side of a reduce-overhead replay (openmtia/inductor/graphs.py), in
// C++ because it is what remains of a small model's step once its kernels are
// one graph launch.
//
// A ReplayIO is made for one recording: the graph's static input buffers and
// outputs, and what its inputs were (sizes, strides, dtype and device of each
// tensor the replay copies in; the address of each static one; the value of
// each integer). copyIn(inputs) checks that this call's inputs match all of
// it (else returns false: the caller takes another recording) and queues one
// task that copies the copied-in inputs into the buffers. copyOut() allocates
// a copy of each output and queues one task that fills them: results held
// across calls are never overwritten by the next replay.
#include <ATen/EmptyTensor.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <vector>

#include "openmtia/runtime.h"
#include "compile/graph_replay.h"
#include "runtime/device_allocator.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace openmtia {
namespace {

bool sameLayout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.device() == b.device() && a.sizes().equals(b.sizes()) &&
         a.strides().equals(b.strides());
}

size_t spanBytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

class ReplayIO {
 public:
  // inputs: the recorded call's inputs (tensors, ints); buffers: for each
  // input, the graph's static buffer it is copied into, or None (a static
  // input, used in place; or not a tensor); outputs: the graph's outputs.
  ReplayIO(const py::list& inputs, const py::list& buffers, std::vector<at::Tensor> outputs, int device)
      : outputs_(std::move(outputs)), device_(static_cast<c10::DeviceIndex>(device)) {
    TORCH_CHECK(inputs.size() == buffers.size(), "ReplayIO: inputs and buffers differ in length");
    for (size_t i = 0; i < inputs.size(); ++i) {
      Entry e;
      PyObject* obj = inputs[i].ptr();
      if (THPVariable_Check(obj)) {
        e.kind = buffers[i].is_none() ? Entry::kStatic : Entry::kCopied;
        e.tensor = e.kind == Entry::kStatic ? THPVariable_Unpack(obj) : buffers[i].cast<at::Tensor>();
        e.copyable = e.tensor.is_non_overlapping_and_dense();
      } else if (PyLong_Check(obj)) {
        e.kind = Entry::kInt;
        e.value = PyLong_AsLongLong(obj);
      } else {
        e.kind = Entry::kOther;
      }
      entries_.push_back(std::move(e));
    }
    for (const auto& o : outputs_) dense_outputs_ &= !o.defined() || o.is_non_overlapping_and_dense();
  }

  bool copyIn(const py::list& inputs) const {
    if (inputs.size() != entries_.size()) return false;
    std::vector<std::pair<void*, const void*>> copies;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      PyObject* obj = inputs[i].ptr();
      switch (e.kind) {
        case Entry::kStatic: {
          if (!THPVariable_Check(obj)) return false;
          const at::Tensor& t = THPVariable_Unpack(obj);
          if (t.data_ptr() != e.tensor.data_ptr() || !sameLayout(t, e.tensor)) return false;
          break;
        }
        case Entry::kCopied: {
          if (!THPVariable_Check(obj) || !e.copyable) return false;
          const at::Tensor& t = THPVariable_Unpack(obj);
          if (!sameLayout(t, e.tensor)) return false;
          if (t.data_ptr() != e.tensor.data_ptr()) {
            copies.emplace_back(e.tensor.data_ptr(), t.data_ptr());
            sizes.push_back(spanBytes(t));
          }
          break;
        }
        case Entry::kInt: {
          if (!PyLong_Check(obj) || PyLong_AsLongLong(obj) != e.value) return false;
          break;
        }
        default:
          return false;  // an input the fast path does not compare
      }
    }
    if (!copies.empty()) {
      launchOnCurrentStream(device_, "graph_inputs", [copies = std::move(copies), sizes = std::move(sizes)] {
        for (size_t i = 0; i < copies.size(); ++i) std::memcpy(copies[i].first, copies[i].second, sizes[i]);
      });
    }
    return true;
  }

  // None if an output is not dense (the caller clones it then).
  py::object copyOut() const {
    if (!dense_outputs_) return py::none();
    std::vector<at::Tensor> out;
    std::vector<std::pair<void*, const void*>> copies;
    std::vector<size_t> sizes;
    for (const auto& o : outputs_) {
      if (!o.defined()) {
        out.emplace_back();
        continue;
      }
      at::Tensor c = at::detail::empty_strided_generic(o.sizes(), o.strides(), deviceAllocator(),
                                                       c10::DispatchKeySet(c10::DispatchKey::MTIA), o.scalar_type());
      if (o.numel() > 0) {
        copies.emplace_back(c.data_ptr(), o.data_ptr());
        sizes.push_back(spanBytes(o));
      }
      out.push_back(std::move(c));
    }
    if (!copies.empty()) {
      launchOnCurrentStream(device_, "graph_outputs", [copies = std::move(copies), sizes = std::move(sizes)] {
        for (size_t i = 0; i < copies.size(); ++i) std::memcpy(copies[i].first, copies[i].second, sizes[i]);
      });
    }
    return py::cast(out);
  }

 private:
  struct Entry {
    enum Kind { kStatic, kCopied, kInt, kOther } kind = kOther;
    at::Tensor tensor;  // the static input, or the buffer a copied input goes to
    bool copyable = false;
    int64_t value = 0;
  };
  std::vector<Entry> entries_;
  std::vector<at::Tensor> outputs_;
  bool dense_outputs_ = true;
  c10::DeviceIndex device_;
};

}  // namespace

void initGraphReplayBindings(py::module& m) {
  py::class_<ReplayIO>(m, "_ReplayIO")
      .def(py::init<const py::list&, const py::list&, std::vector<at::Tensor>, int>())
      .def("copy_in", &ReplayIO::copyIn)
      .def("copy_out", &ReplayIO::copyOut);
}

}  // namespace openmtia
