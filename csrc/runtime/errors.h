// The device type, and driver errors as the Python exceptions torch raises.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include "openmtia/runtime.h"

namespace openmtia {

constexpr c10::DeviceType kMTIA = c10::DeviceType::MTIA;

// Throws the c10 error Python maps to the exception torch raises for a
// device's error of that kind: torch.OutOfMemoryError; for the device's own
// failures (work that failed, a device lost or poisoned by a sticky fault)
// torch.AcceleratorError, as CUDA's errors are, its error_code the driver's
// status (OmtiaStatus); RuntimeError for the rest.
[[noreturn]] void throwDriverError(const omr::Error& e);

// Runs `expr`, turning runtime errors into those c10 errors.
#define OMR_CALL(expr)                           \
  [&]() -> decltype(auto) {                      \
    try {                                        \
      return expr;                               \
    } catch (const omr::Error& e_) {             \
      ::openmtia::throwDriverError(e_);          \
    }                                            \
  }()

}  // namespace openmtia
