// openmtia's C extension API (see extension_api.h).
#include <torch/csrc/utils/pybind.h>

#include "python/extension_api.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

const OpenmtiaExtensionApi kApi = {sizeof(OpenmtiaExtensionApi), &launchHostTaskOnCurrentStream,
                                   &launchHostTaskOnCurrentStreamWithFlags};

}  // namespace

void initExtensionApiBindings(pybind11::module& m) {
  m.attr("_extension_api") =
      pybind11::capsule(static_cast<const void*>(&kApi), OPENMTIA_EXTENSION_API_CAPSULE);
}

}  // namespace openmtia
