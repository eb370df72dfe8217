// Driver errors as the Python exceptions torch raises (see errors.h).
#include "runtime/errors.h"

#include "openmtia/driver.h"

namespace openmtia {

void throwDriverError(const omr::Error& e) {
  switch (e.code()) {
    case omr::ErrorCode::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    case omr::ErrorCode::kTaskFailed:
      throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, OMTIA_ERROR_TASK_FAILED, e.what());
    case omr::ErrorCode::kDeviceLost:
      throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, OMTIA_ERROR_DEVICE_LOST, e.what());
    default:
      TORCH_CHECK(false, e.what());
  }
}

}  // namespace openmtia
