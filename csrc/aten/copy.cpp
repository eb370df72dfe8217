// Copies between CPU and mtia and between mtia devices: any strides, any dtype
// conversion, truly asynchronous for non_blocking copies with pinned host memory.
//
// Byte transfers go through the runtime's memcpy on the current stream; layout
// and dtype changes run as device tasks (a strided copy kernel) on the stream.
#include <atomic>
#include <cstring>

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include "openmtia/runtime.h"
#include "aten/copy.h"
#include "aten/low_precision/kernels.h"
#include "aten/operand.h"
#include "aten/ops.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/errors.h"
#include "runtime/graphs.h"
#include "runtime/host_allocator.h"
#include "runtime/host_views.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

size_t spanBytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Copies src's dense span into dst's on `stream` of `dev` (same layout). A
// host-side storage is kept alive until the copy ran (holding the storage,
// not the tensor: a task never keeps a Python-owned tensor alive); device
// memory is not kept (the caching allocator orders its reuse).
void enqueueMemcpy(const at::Tensor& dst, const at::Tensor& src, omr::CopyKind kind, c10::DeviceIndex dev,
                   omr::StreamId stream) {
  OMR_CALL(omr::memcpyAsync(dst.data_ptr(), src.data_ptr(), spanBytes(src), kind, dev, stream));
  const at::Tensor& host = kind == omr::CopyKind::kHostToDevice ? src : dst;
  if (host.device().type() == c10::kCPU)
    OMR_CALL(omr::launch(dev, stream, "release", [keep = host.storage()] {}, omr::kTaskUntraced));
}

// Raises, at the call, what the task's CPU copy kernel would raise for these
// dtypes without reading any element: CPU's NotImplementedError for a dtype
// it cannot convert ("copy_" not implemented for 'UInt6': the bits, intN,
// uintN and float4 types). The kernel is tried once per pair of dtypes on two
// zeroed elements, strided as a layout-changing copy is (a dense copy of one
// dtype is a memcpy and never gets here); pairs that worked are remembered.
void checkCopyDtypes(at::ScalarType dst, at::ScalarType src) {
  constexpr int kTypes = static_cast<int>(at::ScalarType::NumOptions);
  static std::atomic<bool> works[kTypes][kTypes];
  std::atomic<bool>& known = works[static_cast<int>(dst)][static_cast<int>(src)];
  if (known.load(std::memory_order_relaxed)) return;
  at::Tensor s = at::empty({4}, at::TensorOptions().dtype(src));
  at::Tensor d = at::empty({2}, at::TensorOptions().dtype(dst));
  std::memset(s.data_ptr(), 0, s.nbytes());
  d.copy_(s.as_strided({2}, {2}));
  known.store(true, std::memory_order_relaxed);
}

}  // namespace

void launchCopyKernel(const at::Tensor& dst, const at::Tensor& src, const char* name) {
  auto dev = dst.device().index();
  checkCopyDtypes(dst.scalar_type(), src.scalar_type());
  // Two contiguous mtia tensors of one shape (a dtype conversion: .to(),
  // autocast's casts): their elements, taken at the call (Operand), without
  // the host views' work on the calling thread.
  if (src.device().type() == kMTIA && dst.is_contiguous() && src.is_contiguous() && dst.sizes().equals(src.sizes()) &&
      !dst.is_conj() && !src.is_conj() && !dst.is_neg() && !src.is_neg()) {
    launchOnCurrentStream(dev, name, [hd = Operand(dst), hs = Operand(src)] {
      useKernelThreads(hd.n + hs.n);
      at::AutoDispatchBelowADInplaceOrView guard;
      // float32 <-> bf16/fp16: the vector loops (CPU's values; float32 ->
      // bf16 1.3-1.8x faster than ATen's copy kernel, the others as fast)
      convertOrCopy(hd.host(), hs.host(), /*threads=*/true);
    });
    return;
  }
  // Views are taken now: a later in-place metadata change (resize_, t_, ...)
  // must not change what this task does. A CPU src (a 0-dim value) is kept by
  // its view.
  launchOnCurrentStream(dev, name, [hd = hostView(dst), hs = hostView(src)]() mutable {
    useKernelThreads(hd.numel() + hs.numel());
    at::AutoDispatchBelowADInplaceOrView guard;
    hd.copy_(hs);
  });
}

namespace {

at::Tensor emptyDeviceLike(const at::Tensor& like, at::ScalarType dtype, c10::DeviceIndex dev, bool keep_strides) {
  auto opts = at::TensorOptions().dtype(dtype).device(kMTIA, dev);
  return keep_strides ? at::empty_strided(like.sizes(), like.strides(), opts) : at::empty(like.sizes(), opts);
}

bool sameLayout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes().equals(b.sizes()) && a.strides().equals(b.strides()) && isDense(a) &&
         isDense(b);
}

// A device tensor holding src's values in `dtype`, dense, laid out like `like`
// when `like` is dense (so a single memcpy can move it), on src's stream.
at::Tensor denseOnDevice(const at::Tensor& src, at::ScalarType dtype, const at::Tensor& like) {
  bool like_dense = isDense(like) && like.sizes().equals(src.sizes());
  if (isDense(src) && src.scalar_type() == dtype && (!like_dense || src.strides().equals(like.strides())))
    return src;
  at::Tensor tmp = like_dense ? emptyDeviceLike(like, dtype, src.device().index(), true)
                              : emptyDeviceLike(src, dtype, src.device().index(), false);
  launchCopyKernel(tmp, src);
  return tmp;
}

// A non_blocking copy from pageable memory of up to this many bytes is
// staged: copied into pinned memory at the call, as a driver stages a
// pageable buffer for its DMA, and queued as a pinned copy (no wait for the
// stream). A larger one waits for the stream, as a copy without
// non_blocking does.
constexpr size_t kStagedCopyMaxBytes = size_t{64} << 20;

void copyHostToDevice(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  auto dev = dst.device().index();
  c10::DeviceGuard guard(dst.device());
  bool pinned = omr::isPinned(src.data_ptr());
  // host side: the bytes to transfer, dense
  at::Tensor hs = isDense(src) ? src : src.contiguous().resolve_conj().resolve_neg();
  bool async = non_blocking && pinned && hs.is_same(src);
  if (non_blocking && !async && spanBytes(hs) <= kStagedCopyMaxBytes && !isCapturing(dev)) {
    at::Tensor staged = at::empty_strided(hs.sizes(), hs.strides(), hs.options().pinned_memory(true));
    if (hs.numel() > 0) std::memcpy(staged.data_ptr(), hs.data_ptr(), spanBytes(hs));
    hs = staged;
    async = true;
  }
  auto stream = streamId(currentStream(dev));
  at::Tensor target = sameLayout(dst, hs) ? dst : emptyDeviceLike(hs, hs.scalar_type(), dev, true);
  enqueueMemcpy(target, hs, omr::CopyKind::kHostToDevice, dev, stream);
  if (async) recordPinnedUse(hs, currentStream(dev));
  else syncCurrentStream(dev);  // pageable memory: return once the source was consumed
  if (!target.is_same(dst)) launchCopyKernel(dst, target);
}

void copyDeviceToHost(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  auto dev = src.device().index();
  c10::DeviceGuard guard(src.device());
  at::Tensor ds = denseOnDevice(src, dst.scalar_type(), dst);
  bool direct = sameLayout(dst, ds);
  bool async = non_blocking && direct && omr::isPinned(dst.data_ptr());
  auto stream = streamId(currentStream(dev));
  at::Tensor target = direct ? dst : at::empty_strided(ds.sizes(), ds.strides(), ds.options().device(c10::kCPU));
  enqueueMemcpy(target, ds, omr::CopyKind::kDeviceToHost, dev, stream);
  if (async) {
    recordPinnedUse(target, currentStream(dev));
    return;
  }
  syncCurrentStream(dev);
  if (!direct) dst.copy_(target);
}

void copyBetweenDevices(const at::Tensor& dst, const at::Tensor& src) {
  auto sdev = src.device().index(), ddev = dst.device().index();
  auto sstream = streamId(currentStream(sdev)), dstream = streamId(currentStream(ddev));
  // The copy runs on the source device's current stream, ordered after the
  // destination's current stream, and the destination stream waits for it.
  omr::Event* dst_ready = omr::eventCreate(false);
  omr::Event* src_done = omr::eventCreate(false);
  try {
    OMR_CALL(omr::eventRecord(dst_ready, ddev, dstream));
    OMR_CALL(omr::streamWaitEvent(sdev, sstream, dst_ready));
    at::Tensor ds;
    {
      c10::DeviceGuard guard(src.device());
      ds = denseOnDevice(src, dst.scalar_type(), dst);
    }
    at::Tensor target = sameLayout(dst, ds) ? dst : emptyDeviceLike(ds, ds.scalar_type(), ddev, true);
    enqueueMemcpy(target, ds, omr::CopyKind::kDeviceToDevice, sdev, sstream);
    OMR_CALL(omr::eventRecord(src_done, sdev, sstream));
    OMR_CALL(omr::streamWaitEvent(ddev, dstream, src_done));
    if (!target.is_same(dst)) {
      c10::DeviceGuard guard(dst.device());
      launchCopyKernel(dst, target);
    }
  } catch (...) {
    omr::eventDestroy(dst_ready);
    omr::eventDestroy(src_done);
    throw;
  }
  omr::eventDestroy(dst_ready);  // pending waits keep their own reference
  omr::eventDestroy(src_done);
}

}  // namespace

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.defined() && src.defined(), "copy_: tensors must be defined");
  TORCH_CHECK(self.layout() == c10::kStrided && src.layout() == c10::kStrided,
              "openmtia: copy_ supports strided tensors only");
  auto dt = self.device().type(), st = src.device().type();
  TORCH_CHECK((dt == kMTIA || dt == c10::kCPU) && (st == kMTIA || st == c10::kCPU),
              "copy_: copies between ", src.device(), " and ", self.device(), " are not supported");
  if (!src.sizes().equals(self.sizes())) (void)src.expand(self.sizes());  // raises if src does not broadcast to self
  if (self.numel() == 0) return self;
  if (self.is_same(src)) return self;
  at::assert_no_internal_overlap(self);
  if (st == dt && self.device() == src.device()) at::assert_no_partial_overlap(self, src);
  if (!self.is_complex() && src.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
  }

  if (st == c10::kCPU) {
    copyHostToDevice(self, src, non_blocking);
  } else if (dt == c10::kCPU) {
    copyDeviceToHost(self, src, non_blocking);
  } else if (self.device() == src.device()) {
    c10::DeviceGuard guard(self.device());
    if (sameLayout(self, src)) {
      auto dev = self.device().index();
      enqueueMemcpy(self, src, omr::CopyKind::kDeviceToDevice, dev, streamId(currentStream(dev)));
    } else {
      launchCopyKernel(self, src);
    }
  } else {
    copyBetweenDevices(self, src);
  }
  return self;
}

namespace {

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  return _copy_from(self, dst, false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("copy_", &copy_);
  m.impl("_copy_from", &_copy_from);
  m.impl("_copy_from_and_resize", &_copy_from_and_resize);
}

}  // namespace openmtia
