// Compiled graphs replayed as mtia graphs: the bindings openmtia/inductor calls.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openmtia {

void initGraphReplayBindings(pybind11::module& m);

}  // namespace openmtia
