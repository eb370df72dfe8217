// at::MTIAHooksInterface implementation: how ATen and torch.mtia reach openmtia.
#include <ATen/detail/MTIAHooksInterface.h>

#include "openmtia/runtime.h"
#include "runtime/gil.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "runtime/graphs.h"
#include "runtime/host_allocator.h"
#include "runtime/interpreter.h"
#include "runtime/memory_history.h"
#include "runtime/stream.h"

namespace openmtia {

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

  // The methods that return Python objects: the Python module's (interpreter.h)
  PyObject* memoryStats(c10::DeviceIndex index) const override {
    return requireInterpreter("torch.mtia.memory_stats").memory_stats(index);
  }
  PyObject* getDeviceCapability(c10::DeviceIndex index) const override {
    return requireInterpreter("torch.mtia.get_device_capability").device_capability(index);
  }
  PyObject* getDeviceProperties(c10::DeviceIndex index) const override {
    return requireInterpreter("torch.mtia.get_device_properties").device_properties(index);
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
    return requireInterpreter("torch.mtia.memory._snapshot").memory_snapshot(local_path);
  }
  // torch.mtia.attach_out_of_memory_observer(fn): fn(device, requested bytes,
  // bytes allocated, bytes free on the device) before the OutOfMemoryError.
  void attachOutOfMemoryObserver(PyObject* observer) const override {
    requireInterpreter("torch.mtia.attach_out_of_memory_observer").attach_out_of_memory_observer(observer);
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
