// at::MTIAHooksInterface implementation: how ATen and torch.mtia reach openmtia.
#include <ATen/detail/MTIAHooksInterface.h>
#include <torch/csrc/utils/pybind.h>

#include "common.h"

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

  PyObject* memoryStats(c10::DeviceIndex index) const override {
    if (index < 0) index = currentDevice();
    MemoryStats m = openmtia::memoryStats(index);
    py::dict dram;
    dram["allocated_bytes"] = m.allocated;
    dram["peak_bytes"] = m.peak;
    dram["num_allocs"] = m.num_allocs;
    dram["num_frees"] = m.num_frees;
    dram["num_ooms"] = m.num_ooms;
    py::dict out;
    out["dram"] = dram;
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
    return d.release().ptr();
  }
  void emptyCache() const override { deviceAllocator()->emptyCache({0, 0}); }
  void resetPeakMemoryStats(c10::DeviceIndex index) const override {
    openmtia::resetPeakMemoryStats(index < 0 ? currentDevice() : index);
  }
};

}  // namespace openmtia

namespace at {
// The registry key is the class name: it must be exactly "MTIAHooks".
using MTIAHooks = openmtia::MTIAHooks;
REGISTER_MTIA_HOOKS(MTIAHooks);
}  // namespace at
