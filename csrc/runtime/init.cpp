// openmtia::init (see init.h).
#include <c10/util/Exception.h>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/init.h"

namespace openmtia {

void init() {
  const std::string error = omr::driverError();
  TORCH_CHECK(error.empty(), "openmtia: mtia is unavailable: ", error);
  TORCH_CHECK(deviceCount() > 0, "openmtia: the mtia driver '", omr::driverName(), "' reports no device");
}

}  // namespace openmtia
