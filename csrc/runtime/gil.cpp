// The Python interpreter, as kernels and waits need it (see gil.h): through
// the interpreter the Python module installs (interpreter.h), else as if
// there were none.
#include "runtime/gil.h"
#include "runtime/interpreter.h"

namespace openmtia {

void withoutGil(const std::function<void()>& fn) {
  if (const Interpreter* i = interpreter()) i->without_gil(fn);
  else fn();
}

int withPythonWarningsRecorded(const std::function<void()>& fn) {
  if (const Interpreter* i = interpreter()) return i->with_warnings_recorded(fn);
  fn();
  return 0;
}

bool isInterrupt(const std::exception& e) {
  const Interpreter* i = interpreter();
  return i && i->is_interrupt(e);
}

}  // namespace openmtia
