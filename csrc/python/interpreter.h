// The Python side of runtime/interpreter.h: what the glue needs of the
// interpreter (the GIL, Python warnings and interrupts, tracebacks) and the
// torch.mtia hooks that return Python objects.
#pragma once

namespace openmtia {

// Called once by the module's init.
void installPythonInterpreter();

}  // namespace openmtia
