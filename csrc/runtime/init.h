// openmtia for C++ programs, installed as <openmtia/openmtia.h>: link
// libopenmtia (CMake: find_package(openmtia), target openmtia::openmtia) and
// mtia is a torch device like any other, with no Python in the process.
#pragma once

namespace openmtia {

// Loads mtia's driver if it is not loaded yet (OPENMTIA_DRIVER: emulated,
// reference or a path; by default the emulated driver beside libopenmtia.so,
// as in Python) and checks there is a device. Throws c10::Error naming why
// mtia is unavailable. Linking the library already registers the backend
// with torch; calling init also makes that link explicit (a linker that drops
// unreferenced libraries keeps this one) and fails early.
void init();

}  // namespace openmtia
