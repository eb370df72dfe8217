// The current mtia stream of each thread and device (like CUDA's).
#include <array>
#include <exception>
#include <stdexcept>
#include <string>

#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {
thread_local std::array<int16_t, omr::kMaxDevices> tls_stream{};  // 0 = default stream
}  // namespace

c10::Stream makeStream(c10::DeviceIndex index, omr::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kMTIA, index), static_cast<c10::StreamId>(id));
}

c10::Stream currentStream(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkDevice(index);
  return makeStream(index, tls_stream[index]);
}

c10::Stream defaultStream(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkDevice(index);
  return makeStream(index, omr::kDefaultStream);
}

void setCurrentStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kMTIA, "expected an mtia stream, got a ", stream.device_type(), " stream");
  OMR_CALL(omr::checkStream(stream.device_index(), streamId(stream)));
  tls_stream[stream.device_index()] = static_cast<int16_t>(stream.id());
}

omr::StreamId currentStreamId(c10::DeviceIndex device) { return tls_stream[device]; }

void rethrowWithoutBacktrace(const c10::Error& e) { throw std::runtime_error(e.what_without_backtrace()); }

void syncCurrentStream(c10::DeviceIndex device) { OMR_CALL(omr::streamSynchronize(device, tls_stream[device])); }

const char* launchHostTaskOnCurrentStream(int device, const char* name, OmtiaHostFn fn, void* user,
                                          OmtiaDestroyFn destroy) noexcept {
  return launchHostTaskOnCurrentStreamWithFlags(device, name, fn, user, destroy, 0);
}

const char* launchHostTaskOnCurrentStreamWithFlags(int device, const char* name, OmtiaHostFn fn, void* user,
                                                   OmtiaDestroyFn destroy, uint32_t flags) noexcept {
  thread_local std::string error;
  try {
    if (!fn) throw std::invalid_argument("launch_on_current_stream: fn is null");
    checkDevice(static_cast<c10::DeviceIndex>(device));
  } catch (const std::exception& e) {
    if (destroy) destroy(user);
    error = e.what();
    return error.c_str();
  }
  try {
    // the C task as it is: the client hands it to the driver, which runs
    // destroy (also when the launch fails)
    launchOnCurrentStream(static_cast<c10::DeviceIndex>(device), name ? name : "extension_task",
                          omr::HostTask{fn, user, destroy,
                                        (flags & OMTIA_LAUNCH_WAITS_FOR_HOST) ? omr::kTaskWaitsForHost : 0u});
    return nullptr;
  } catch (const std::exception& e) {
    error = e.what();
    return error.c_str();
  }
}

}  // namespace openmtia
