// The op openmtia::_aoti_launch: how libopenmtia_aoti.so (aoti_mtia.h), which
// links libtorch only, finds the launch of this runtime. Its value is the
// address of launchHostTaskOnCurrentStream, a C function with the signature
// of openmtia_aoti_launch.
#include <torch/library.h>

#include <cstdint>

#include "runtime/stream.h"

namespace openmtia {
namespace {

int64_t aotiLaunch() { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&launchHostTaskOnCurrentStream)); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(openmtia, m) { m.def("_aoti_launch() -> int", &aotiLaunch); }

}  // namespace openmtia
