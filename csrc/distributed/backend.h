// The c10d backend for mtia (Gloo behind it): the bindings openmtia/distributed calls.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openmtia::dist {

void initDistributedBindings(pybind11::module& m);

}  // namespace openmtia::dist
