// The Python interpreter, when there is one (see interpreter.h).
#include <c10/util/Exception.h>

#include <atomic>

#include "runtime/interpreter.h"

namespace openmtia {
namespace {
std::atomic<const Interpreter*> installed{nullptr};
}  // namespace

const Interpreter* interpreter() { return installed.load(std::memory_order_acquire); }

void installInterpreter(const Interpreter* i) { installed.store(i, std::memory_order_release); }

const Interpreter& requireInterpreter(const char* what) {
  const Interpreter* i = interpreter();
  TORCH_CHECK(i != nullptr, what, " returns a Python object, and this process has no openmtia Python module");
  return *i;
}

}  // namespace openmtia
