/* openmtia's C extension API: what another Python extension (a custom
 * kernel library, openmtia's own test module) may call in openmtia._C.
 *
 * `openmtia._C._extension_api` is a PyCapsule named "openmtia.extension_api"
 * holding a pointer to a static OpenmtiaExtensionApi. Fields are only
 * appended; a caller reads a field only if struct_size covers it. C, so no
 * C++ type crosses it (the caller may be built with another compiler). */
#ifndef OPENMTIA_EXTENSION_API_H_
#define OPENMTIA_EXTENSION_API_H_

#include <stddef.h>

#include "openmtia/driver.h" /* OmtiaHostFn, OmtiaDestroyFn */

#ifdef __cplusplus
extern "C" {
#endif

#define OPENMTIA_EXTENSION_API_CAPSULE "openmtia.extension_api"

typedef struct OpenmtiaExtensionApi {
  size_t struct_size;
  /* Enqueues fn(user) as a task named `name` on the calling thread's current
   * stream of mtia:`device`, in order with the ops launched there. fn returns
   * null, or a message (copied as fn returns): the task failed, and the stream's next
   * synchronization raises it (RuntimeError naming the task). destroy(user),
   * if set, runs on a host thread once the task is done with (also when the
   * launch fails). Returns null, or the launch's error message (valid until
   * the thread's next call). The GIL may be held; fn runs without it. */
  const char* (*launch_on_current_stream)(int device, const char* name, OmtiaHostFn fn, void* user,
                                          OmtiaDestroyFn destroy);
} OpenmtiaExtensionApi;

#ifdef __cplusplus
}
#endif

#endif /* OPENMTIA_EXTENSION_API_H_ */

#ifdef __cplusplus
#include <torch/csrc/utils/pybind.h>
namespace openmtia {
// Sets openmtia._C._extension_api (python/module.cpp).
void initExtensionApiBindings(pybind11::module& m);
}  // namespace openmtia
#endif
