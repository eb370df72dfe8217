// The current mtia stream of each thread and device (like CUDA's), and launches on it.
#pragma once

#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <type_traits>
#include <utility>

#include "openmtia/driver.h"
#include "openmtia/runtime.h"
#include "runtime/errors.h"

namespace openmtia {

c10::Stream currentStream(c10::DeviceIndex index);  // -1: current device
c10::Stream defaultStream(c10::DeviceIndex index);
void setCurrentStream(const c10::Stream& stream);
c10::Stream makeStream(c10::DeviceIndex index, omr::StreamId id);
inline omr::StreamId streamId(const c10::Stream& s) { return static_cast<omr::StreamId>(s.id()); }

omr::StreamId currentStreamId(c10::DeviceIndex device);  // of the calling thread
// Enqueue `fn` (a callable that throws on failure) as a device task on the
// current stream of `device`.
// A task's c10::Error reaches the host (at the next sync) with its message
// only: not the kernel's C++ backtrace, which c10::Error::what() holds.
[[noreturn]] void rethrowWithoutBacktrace(const c10::Error& e);
// `flags`: omr::kTask* (kTaskMayBlock: the task waits for other streams or
// processes).
template <typename F>
void launchOnCurrentStream(c10::DeviceIndex device, const char* name, F&& fn, uint32_t flags = 0) {
  if constexpr (std::is_same_v<std::decay_t<F>, omr::HostTask>) {  // a C task: its errors are messages already
    omr::HostTask task = std::forward<F>(fn);
    task.flags |= flags;
    OMR_CALL(omr::launch(device, currentStreamId(device), name, task));
  } else {
    OMR_CALL(omr::launch(device, currentStreamId(device), name, [fn = std::forward<F>(fn)]() mutable {
      try {
        fn();
      } catch (const c10::Error& e) {
        rethrowWithoutBacktrace(e);
      }
    }, flags));
  }
}
// The same for C callers (the C extension API, the AOTInductor shim): never
// throws; returns null, or the error message (valid until the thread's next
// call). The launch owns `user` from the call on: destroy(user), if set, runs
// once the task is done with, also when the launch fails.
const char* launchHostTaskOnCurrentStream(int device, const char* name, OmtiaHostFn fn, void* user,
                                          OmtiaDestroyFn destroy) noexcept;
// With OMTIA_LAUNCH_* flags (OMTIA_LAUNCH_WAITS_FOR_HOST).
const char* launchHostTaskOnCurrentStreamWithFlags(int device, const char* name, OmtiaHostFn fn, void* user,
                                                   OmtiaDestroyFn destroy, uint32_t flags) noexcept;
// Waits for the current stream of `device` (raises pending task errors).
void syncCurrentStream(c10::DeviceIndex device);

}  // namespace openmtia
