// The Python interpreter, as kernels and waits need it.
#pragma once

#include <exception>
#include <functional>

namespace openmtia {

// Runs fn with the GIL released if this thread holds it.
void withoutGil(const std::function<void()>& fn);
// Runs fn with Python's warnings recorded instead of shown (a Python meta
// kernel's, while the fallback plans a call); returns how many there were.
int withPythonWarningsRecorded(const std::function<void()>& fn);
// Whether e is a Python KeyboardInterrupt or SystemExit (raised by Python
// code the op called): never swallowed by a fallback path.
bool isInterrupt(const std::exception& e);

}  // namespace openmtia
