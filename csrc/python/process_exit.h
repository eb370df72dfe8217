// Process exit: the device's work finished and its threads ended before the interpreter goes.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace openmtia {

void initProcessExitBindings(pybind11::module& m);

}  // namespace openmtia
