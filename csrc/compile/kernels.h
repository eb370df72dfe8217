// Inductor's kernels as stream tasks: the bindings openmtia/inductor calls.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openmtia {

void initCompileBindings(pybind11::module& m);

}  // namespace openmtia
