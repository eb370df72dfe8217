// FBGEMM's inference lookup (the IntNBit table-batched embedding) on mtia.
//
// TorchRec places a quantized table on a device other than CPU at
// EmbeddingLocation.DEVICE: its rows are in the device's memory
// (`weights_dev`), and `weights_placements` says DEVICE for each table.
// The kernel that runs on the device here is FBGEMM's CPU kernel, which
// reads a table from `dev_weights` when its placement says HOST and refuses
// DEVICE (it has no device memory of its own). On this device the two mean
// the same memory: the lookup's task reads the device's storage, so DEVICE
// becomes HOST for the kernel, as a stream-ordered device op on the
// placements (a tensor of T int32s), and the call goes on to the fallback
// (asynchronous, planned by the meta function in meta_functions.cpp).
// MANAGED and MANAGED_CACHING (UVM) placements stay: the kernel reads those
// from `uvm_weights`.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include "aten/fallback/fallback.h"

namespace openmtia {
namespace {

// FBGEMM's PlacementType (embedding_common.h).
constexpr int64_t kDevice = 0;
constexpr int64_t kHost = 3;

void intNBitLookup(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  static const size_t index = *schema.argumentIndexWithName("weights_placements");
  c10::IValue& v = (*stack)[stack->size() - schema.arguments().size() + index];
  const at::Tensor placements = v.toTensor();
  if (placements.defined() && placements.device().type() == c10::DeviceType::MTIA)
    v = at::where(placements.eq(kDevice), kHost, placements).to(placements.scalar_type());
  mtiaFallback(op, keys, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(fbgemm, MTIA, m) {
  m.impl("int_nbit_split_embedding_codegen_lookup_function",
         torch::CppFunction::makeFromBoxedFunction<&intNBitLookup>());
}

}  // namespace openmtia
