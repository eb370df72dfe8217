// libopenmtia_aoti.so: aoti_mtia.h's functions (the generated ops are in
// c_shim_mtia.cpp). It links libtorch only; openmtia's runtime, loaded
// privately by Python (or linked by a C++ program), registers the op
// openmtia::_aoti_launch (launch_api.cpp), whose value is its launch function.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceType.h>

#include <atomic>
#include <exception>
#include <string>

#include "aoti/aoti_mtia.h"

namespace {

using Launch = const char* (*)(int, const char*, OpenmtiaAotiTaskFn, void*, OpenmtiaAotiDestroyFn);

Launch launchFunction() {
  static std::atomic<Launch> cached{nullptr};
  Launch launch = cached.load(std::memory_order_acquire);
  if (launch) return launch;
  auto op = c10::Dispatcher::singleton().findSchema({"openmtia::_aoti_launch", ""});
  if (!op) return nullptr;  // not loaded (yet): look again on the next call
  launch = reinterpret_cast<Launch>(op->typed<int64_t()>().call());
  cached.store(launch, std::memory_order_release);
  return launch;
}

}  // namespace

extern "C" {

int32_t aoti_torch_device_type_mtia(void) { return static_cast<int32_t>(c10::DeviceType::MTIA); }

const char* openmtia_aoti_launch(int32_t device, const char* name, OpenmtiaAotiTaskFn fn, void* user,
                                 OpenmtiaAotiDestroyFn destroy) {
  thread_local std::string error;
  error.clear();
  Launch launch = nullptr;
  try {
    launch = launchFunction();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!launch) {
    if (destroy) destroy(user);
    if (error.empty())
      error = "this code runs on mtia, but openmtia is not loaded in this process "
              "(Python: import openmtia; C++: link the openmtia backend library)";
    return error.c_str();
  }
  return launch(device, name, fn, user, destroy);
}

}  // extern "C"
