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
   * the thread's next call). The GIL may be held. fn runs on a driver thread
   * without the GIL, or on a host thread that waits for the stream (help-first
   * waits), which may hold it: a task that may wait for the program (for
   * another thread to act) is launched with OMTIA_LAUNCH_WAITS_FOR_HOST. */
  const char* (*launch_on_current_stream)(int device, const char* name, OmtiaHostFn fn, void* user,
                                          OmtiaDestroyFn destroy);
  /* The same with OMTIA_LAUNCH_* flags (openmtia/driver.h). */
  const char* (*launch_on_current_stream_with_flags)(int device, const char* name, OmtiaHostFn fn, void* user,
                                                     OmtiaDestroyFn destroy, uint32_t flags);
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
