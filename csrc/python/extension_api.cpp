// openmtia's C extension API (see extension_api.h).
#include <torch/csrc/utils/pybind.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "python/extension_api.h"
#include "runtime/device.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

const char* launchOnCurrentStream(int device, const char* name, OmtiaHostFn fn, void* user, OmtiaDestroyFn destroy) {
  thread_local std::string error;
  try {
    if (!fn) throw std::invalid_argument("launch_on_current_stream: fn is null");
    checkDevice(static_cast<c10::DeviceIndex>(device));
  } catch (const std::exception& e) {
    if (destroy) destroy(user);  // (the launch owns user from the call on)
    error = e.what();
    return error.c_str();
  }
  try {
    // the C task as it is: the client hands it to the driver, which runs
    // destroy (also when the launch fails)
    openmtia::launchOnCurrentStream(static_cast<c10::DeviceIndex>(device), name ? name : "extension_task",
                                    omr::HostTask{fn, user, destroy});
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
