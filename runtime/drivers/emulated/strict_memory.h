// Strict device memory (RuntimeConfig::strict_memory, OPENMTIA_STRICT_MEMORY=1):
// host threads cannot read or write device memory; only the device's own
// work can (its stream workers, the threads its kernels run on, and the
// engine's own copies). A host access is a fault that ends the process with
//   openmtia: host access to device memory: ... mtia:<d> ... <address> ...
// never a silent success.
//
// Memory protection keys would give each thread its own access rights; this
// host (and many VMs) has none, so the engine uses page protection: device
// memory is mapped PROT_NONE, and a fault decides who touched it.
//  - A device thread (a stream worker, or the engine's own copy on a host
//    thread, DeviceWork) opens the allocation (read/write) and goes on.
//  - A host thread (one that used the runtime: launched, synchronized,
//    allocated) gets the message above.
//  - Any other thread (a kernel's OpenMP threads, a library's) counts as the
//    device's while a task of that device runs, else as the host.
// Opened allocations are closed again when the device goes idle (a worker
// runs out of tasks) and when a host thread returns from a synchronization,
// so a host access between device work always faults. One access is not
// caught: a host thread's, while a task of the same device holds the
// allocation open.
#pragma once

#include <cstddef>

namespace omr {
namespace engine {
namespace strict {

bool enabled() noexcept;
// Turns strict memory on (before any device allocation); throws Error if the
// host cannot protect pages or handle faults.
void enable();

// Device memory: `bytes` rounded up to whole pages, closed (PROT_NONE).
void* map(int device, size_t bytes);
void unmap(void* p, size_t bytes);

// The calling thread is a host thread (it called the runtime's API).
void markHostThread() noexcept;
// The calling thread is a stream worker of `device`, for good.
void markDeviceThread(int device) noexcept;

// The device's own work on the calling thread (a task run inline, a
// synchronous copy): it may touch device memory until the scope ends.
class DeviceWork {
 public:
  explicit DeviceWork(int device) noexcept;
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;

 private:
  int saved_;
};

// A task of `device` starts / ends (for threads that are neither host nor
// device threads: a kernel's OpenMP team).
void taskStarted(int device) noexcept;
void taskEnded(int device) noexcept;

// Closes what device work opened on `device` (-1: every device).
void close(int device) noexcept;

// The allocation table's lookup for the fault handler: the device and
// allocation holding `addr`, without blocking (false if none or unknown).
using Lookup = bool (*)(const void* addr, int* device, void** base, size_t* size);
void setLookup(Lookup lookup) noexcept;

}  // namespace strict
}  // namespace engine
}  // namespace omr
