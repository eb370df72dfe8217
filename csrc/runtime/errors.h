// The device type, and driver errors as the Python exceptions torch raises.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include "openmtia/runtime.h"

namespace openmtia {

constexpr c10::DeviceType kMTIA = c10::DeviceType::MTIA;

// Runs `expr`, turning runtime errors into the c10 errors Python maps to the
// right exception types (torch.OutOfMemoryError, RuntimeError).
#define OMR_CALL(expr)                                                       \
  [&]() -> decltype(auto) {                                                  \
    try {                                                                    \
      return expr;                                                           \
    } catch (const omr::OutOfMemoryError& e_) {                              \
      TORCH_CHECK_WITH(OutOfMemoryError, false, e_.what());                  \
    } catch (const omr::Error& e_) {                                         \
      TORCH_CHECK(false, e_.what());                                         \
    }                                                                        \
  }()

}  // namespace openmtia
