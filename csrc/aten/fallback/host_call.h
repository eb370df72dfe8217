// The fallback's synchronous path: the CPU kernel run now, on the calling
// thread, over host tensors of the arguments (see fallback.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace openmtia {
namespace fallback {

class HostCall {
 public:
  HostCall(const c10::OperatorHandle& op, torch::jit::Stack* stack) : op_(op), stack_(stack) {}

  // The op's device, after checking that its tensors are on one device.
  c10::DeviceIndex device();

  // Runs the CPU kernel now, after waiting for the current stream if `wait`.
  void run(bool wait);

 private:
  void findDevice(size_t first, size_t nargs);

  at::Tensor hostTensor(const at::Tensor& t);

  // A sparse COO mtia tensor as a CPU one over host tensors of its members
  // (indices, values, checked against the sizes); the CPU kernel then is the
  // sparse one (SparseCPU).
  at::Tensor hostSparse(const at::Tensor& t);

  // A sparse CPU result as an mtia one over device tensors of its members.
  at::Tensor deviceSparse(const at::Tensor& h);

  // A sparse argument the kernel may have changed (out=, in-place): its new
  // members, sizes and flags go to the mtia tensor.
  void writeBackSparse(const at::Tensor& device, const at::Tensor& host);

  c10::IValue toHost(const c10::IValue& v, const c10::TypePtr& type);

  // Storage swaps and metadata changes made by the CPU kernel (out= resizes)
  // go back to the mtia tensors.
  void writeBack();

  at::Tensor deviceTensor(const at::Tensor& h);

  c10::IValue toDevice(const c10::IValue& v);

  struct Pair {
    at::Tensor device, host;
  };
  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  c10::DeviceIndex device_ = -1;
  bool waited_ = false;  // for the current stream
  bool staged_ = false;  // host copies of the device storages (device memory not host-addressable)
  std::unordered_set<c10::StorageImpl*> written_;                  // (staged) device storages the op may write
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages_;  // device storage -> host storage
  std::unordered_map<c10::TensorImpl*, Pair> by_impl_;            // device impl -> pair
  std::unordered_map<c10::TensorImpl*, at::Tensor> host_impl_to_device_;
  std::unordered_map<c10::StorageImpl*, c10::Storage> host_storage_to_device_;
  std::unordered_set<c10::TensorImpl*> host_inputs_;
  std::vector<Pair> sparse_;                           // sparse arguments (device, host)
  std::optional<c10::DispatchKey> sparse_key_;         // SparseCPU: a sparse call
};

}  // namespace fallback
}  // namespace openmtia
