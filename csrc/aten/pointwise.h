// The unboxed kernels: the common case of pointwise ops, launched without the fallback.
#pragma once

#include <string>
#include <unordered_set>

namespace openmtia {

// Ops with an unboxed kernel for their common case (pointwise.cpp and
// low_precision/activations.cpp), as "name.overload" without "aten::".
const std::unordered_set<std::string>& unboxedOps();

}  // namespace openmtia
