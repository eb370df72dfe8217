// openmtia's C extension API (see extension_api.h).
#include <torch/csrc/utils/pybind.h>

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "python/extension_api.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

const char* launchOnCurrentStream(int device, const char* name, OmtiaHostFn fn, void* user, OmtiaDestroyFn destroy) {
  thread_local std::string error;
  // (owns user from here on: destroyed with the task, or now if the launch fails)
  std::shared_ptr<void> owned(user, [destroy](void* u) {
    if (destroy) destroy(u);
  });
  try {
    TORCH_CHECK(fn, "launch_on_current_stream: fn is null");
    checkDevice(static_cast<c10::DeviceIndex>(device));
    openmtia::launchOnCurrentStream(static_cast<c10::DeviceIndex>(device), name ? name : "extension_task",
                                    [fn, owned] {
                                      if (const char* message = fn(owned.get())) throw std::runtime_error(message);
                                    });
    return nullptr;
  } catch (const std::exception& e) {
    error = e.what();
    return error.c_str();
  }
}

const OpenmtiaExtensionApi kApi = {sizeof(OpenmtiaExtensionApi), &launchOnCurrentStream};

}  // namespace

void initExtensionApiBindings(pybind11::module& m) {
  m.attr("_extension_api") =
      pybind11::capsule(static_cast<const void*>(&kApi), OPENMTIA_EXTENSION_API_CAPSULE);
}

}  // namespace openmtia
