// at::MTIAHooksInterface implementation: how ATen and torch.mtia reach openmtia.
#include <ATen/detail/MTIAHooksInterface.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/CachingHostAllocator.h>

#include "openmtia/runtime.h"
#include "runtime/gil.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "runtime/graphs.h"
#include "runtime/host_allocator.h"
#include "runtime/host_memory_stats.h"
#include "runtime/memory_history.h"
#include "runtime/stream.h"

namespace openmtia {

namespace py = pybind11;

struct MTIAHooks final : public at::MTIAHooksInterface {
  MTIAHooks() = default;
  explicit MTIAHooks(at::MTIAHooksArgs) {}

  bool isBuilt() const override { return true; }
  bool hasMTIA() const override { return deviceCount() > 0; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return openmtia::deviceCount(); }
  c10::DeviceIndex getDeviceCount() const override { return openmtia::deviceCount(); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < openmtia::deviceCount();
  }
  void deviceSynchronize(c10::DeviceIndex index) const override {
    // torch.mtia.synchronize() calls this holding the GIL: let other Python
    // threads run meanwhile, as torch.cuda.synchronize() does
    withoutGil([&] { OMR_CALL(omr::deviceSynchronize(index < 0 ? currentDevice() : index)); });
  }
  std::string showConfig() const override {
    std::string s = "openmtia emulated accelerator: " + std::to_string(openmtia::deviceCount()) + " device(s)\n";
    for (int i = 0; i < openmtia::deviceCount(); ++i) {
      auto p = omr::deviceProperties(i);
      s += "  mtia:" + std::to_string(i) + " " + p.name + ", " + std::to_string(p.total_memory >> 20) + " MiB\n";
    }
    return s;
  }
  void setCurrentDevice(c10::DeviceIndex index) const override { openmtia::setCurrentDevice(index); }
  c10::DeviceIndex getCurrentDevice() const override { return currentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = currentDevice();
    if (index >= 0 && index != old) openmtia::setCurrentDevice(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }
  c10::Stream getCurrentStream(c10::DeviceIndex index) const override { return currentStream(index); }
  int64_t getCurrentRawStream(c10::DeviceIndex index) const override { return currentStream(index).id(); }
  c10::Stream getDefaultStream(c10::DeviceIndex index) const override { return defaultStream(index); }
  void setCurrentStream(const c10::Stream& stream) const override { openmtia::setCurrentStream(stream); }
  bool isPinnedPtr(const void* data) const override { return omr::isPinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinnedAllocator(); }
  c10::Device getDeviceFromPtr(void* data) const override {
    int d = omr::pointerDevice(data);
    TORCH_CHECK(d >= 0, "pointer ", data, " is not mtia device memory");
    return c10::Device(kMTIA, static_cast<c10::DeviceIndex>(d));
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return openmtia::defaultGenerator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return openmtia::newGenerator(index); }

  // torch.mtia.memory_stats(): the "dram" section torch/mtia/memory.py reads,
  // plus the CUDA-style breakdown under the keys torch.cuda.memory_stats()
  // uses ("allocated_bytes.all.current", "num_ooms", ...).
  PyObject* memoryStats(c10::DeviceIndex index) const override {
    if (index < 0) index = currentDevice();
    omr::CacheStats m = deviceCache(index).stats();
    py::dict out;
    py::dict dram;
    dram["allocated_bytes"] = m.allocated_bytes[omr::kAggregatePool].current;
    dram["peak_bytes"] = m.allocated_bytes[omr::kAggregatePool].peak;
    dram["reserved_bytes"] = m.reserved_bytes[omr::kAggregatePool].current;
    dram["peak_reserved_bytes"] = m.reserved_bytes[omr::kAggregatePool].peak;
    dram["num_allocs"] = m.allocation[omr::kAggregatePool].allocated;
    dram["num_frees"] = m.allocation[omr::kAggregatePool].freed;
    dram["num_ooms"] = m.num_ooms;
    out["dram"] = dram;
    const char* pools[] = {"all", "small_pool", "large_pool"};
    omr::forEachStatArray(m, [&](const char* name, const omr::Stat(&arr)[omr::kNumStatPools]) {
      for (int p = 0; p < omr::kNumStatPools; ++p) {
        std::string key = std::string(name) + "." + pools[p] + ".";
        out[py::str(key + "current")] = arr[p].current;
        out[py::str(key + "peak")] = arr[p].peak;
        out[py::str(key + "allocated")] = arr[p].allocated;
        out[py::str(key + "freed")] = arr[p].freed;
      }
    });
    out["num_alloc_retries"] = m.num_alloc_retries;
    out["num_ooms"] = m.num_ooms;
    out["num_device_alloc"] = m.num_device_alloc;
    out["num_device_free"] = m.num_device_free;
    out["num_sync_all_streams"] = m.num_sync_all_streams;
    out["oversize_allocations.current"] = m.oversize_allocations;
    out["max_split_size"] = m.max_split_size;
    // pinned host memory (process-wide; PyTorch's caching host allocator):
    // held (in use and cached) and in use
    at::HostStats pinned = at::getHostAllocator(kMTIA)->get_stats();
    out["host.pinned.allocated_bytes"] = pinned.allocated_bytes.current;
    out["host.pinned.active_bytes"] = pinned.active_bytes.current;
    // host memory the layers above keep (process-wide; the fallback's plans:
    // docs/memory.md), registered by them
    for (const auto& [name, value] : hostMemoryStats()) out[py::str("host." + name)] = value;
    return out.release().ptr();
  }
  PyObject* getDeviceCapability(c10::DeviceIndex index) const override {
    if (index < 0) index = currentDevice();
    auto p = OMR_CALL(omr::deviceProperties(index));
    return py::make_tuple(p.major, p.minor).release().ptr();
  }
  PyObject* getDeviceProperties(c10::DeviceIndex index) const override {
    if (index < 0) index = currentDevice();
    auto p = OMR_CALL(omr::deviceProperties(index));
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
  void emptyCache() const override { deviceAllocator()->emptyCache({0, 0}); }
  int64_t mtiagraphCreate(bool keep_graph) const override { return graphCreate(keep_graph); }
  void mtiagraphDestroy(int64_t handle) const override { graphDestroy(handle); }
  void mtiagraphCaptureBegin(int64_t handle, c10::MempoolId_t pool) const override {
    graphCaptureBegin(handle, pool);
  }
  void mtiagraphCaptureEnd(int64_t handle) const override { graphCaptureEnd(handle); }
  void mtiagraphInstantiate(int64_t handle) const override { graphInstantiate(handle); }
  void mtiagraphReplay(int64_t handle) const override { graphReplay(handle); }
  void mtiagraphReset(int64_t handle) const override { graphReset(handle); }
  c10::MempoolId_t mtiagraphPool(int64_t handle) const override { return graphPool(handle); }
  c10::MempoolId_t graphPoolHandle() const override { return openmtia::graphPoolHandle(); }
  void recordMemoryHistory(const std::optional<std::string>& enabled, const std::string& stacks,
                           size_t max_entries) const override {
    openmtia::recordMemoryHistory(enabled, stacks, max_entries);
  }
  PyObject* memorySnapshot(const std::optional<std::string>& local_path) const override {
    return openmtia::memorySnapshot(local_path);
  }
  // torch.mtia.attach_out_of_memory_observer(fn): fn(device, requested bytes,
  // bytes allocated, bytes free on the device) before the OutOfMemoryError.
  void attachOutOfMemoryObserver(PyObject* observer) const override {
    auto fn = std::make_shared<py::object>(py::reinterpret_borrow<py::object>(observer));
    for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
      deviceCache(i).attachOomObserver([fn](int device, int64_t requested, int64_t allocated, int64_t free_b) {
        py::gil_scoped_acquire gil;
        (*fn)(device, requested, allocated, free_b);
      });
  }
  void resetPeakMemoryStats(c10::DeviceIndex index) const override {
    deviceCache(index < 0 ? currentDevice() : index).resetPeakStats();
  }
};

}  // namespace openmtia

namespace at {
// The registry key is the class name: it must be exactly "MTIAHooks".
using MTIAHooks = openmtia::MTIAHooks;
REGISTER_MTIA_HOOKS(MTIAHooks);
}  // namespace at
