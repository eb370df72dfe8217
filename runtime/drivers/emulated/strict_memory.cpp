// Strict device memory by page protection (strict_memory.h).
#include "strict_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine.h"

namespace omr {
namespace engine {
namespace strict {
namespace {

enum Role : int { kUnknown = 0, kHost = 1, kDevice = 2 };
// initial-exec: the fault handler reads them without a TLS allocation
__attribute__((tls_model("initial-exec"))) thread_local int t_role = kUnknown;

std::atomic<bool> g_enabled{false};
std::atomic<Lookup> g_lookup{nullptr};
std::atomic<int> g_running[kMaxDevices];  // tasks of each device running now
size_t g_page = 4096;

// The allocations device work opened, closed again by close(). Guarded by a
// spin lock the fault handler can take (it is never held across a fault).
struct Opened {
  void* base;
  size_t bytes;
  int device;
};
constexpr size_t kMaxOpened = 8192;
Opened g_opened[kMaxOpened];
size_t g_num_opened = 0;
std::atomic_flag g_lock = ATOMIC_FLAG_INIT;
struct SpinLock {
  SpinLock() {
    while (g_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinLock() { g_lock.clear(std::memory_order_release); }
};

struct sigaction g_previous;  // the handler before ours

size_t pages(size_t bytes) { return (bytes + g_page - 1) / g_page * g_page; }

void writeAll(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void onFault(int sig, siginfo_t* info, void* context);

// A fault that is not the device's own: the handler that was there before
// ours runs once (Python's faulthandler prints the traceback), then the
// default action ends the process (returning retries the access; a signal
// sent by kill or raise, faulthandler's own, is raised again).
void chain(int sig, siginfo_t* info, void* context) {
  static std::atomic<bool> chained{false};
  if (!chained.exchange(true)) {
    if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction && g_previous.sa_sigaction != &onFault)
      g_previous.sa_sigaction(sig, info, context);
    else if (!(g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_handler != SIG_DFL &&
             g_previous.sa_handler != SIG_IGN)
      g_previous.sa_handler(sig);
  }
  signal(sig, SIG_DFL);
  if (info->si_code <= 0) raise(sig);  // (pending until this handler returns)
}

void onFault(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  Lookup lookup = g_lookup.load(std::memory_order_acquire);
  int device = -1;
  void* base = nullptr;
  size_t size = 0;
  if (info->si_code != SEGV_ACCERR || !lookup || !lookup(info->si_addr, &device, &base, &size)) {
    errno = saved_errno;
    return chain(sig, info, context);  // not device memory: not ours
  }
  const int role = t_role;
  if (role == kDevice || (role == kUnknown && g_running[device].load() > 0)) {
    // the device's own work: open the allocation until the next close()
    SpinLock lk;
    if (::mprotect(base, pages(size), PROT_READ | PROT_WRITE) == 0 && g_num_opened < kMaxOpened)
      g_opened[g_num_opened++] = {base, pages(size), device};
    errno = saved_errno;
    return;
  }
  char msg[512];
  int n = std::snprintf(msg, sizeof msg,
                        "openmtia: host access to device memory: a host thread touched address %p, inside mtia:%d's "
                        "allocation at %p (%zu bytes). With OPENMTIA_STRICT_MEMORY=1 only the device's own work may "
                        "read or write device memory: copy it to the host (tensor.cpu(), .item()) or run the access "
                        "as a task on an mtia stream.\n",
                        info->si_addr, device, base, size);
  if (n > 0) writeAll(msg, std::min(static_cast<size_t>(n), sizeof msg - 1));
  errno = saved_errno;
  chain(sig, info, context);
}

// Puts our handler first (again, if another was installed since: Python's
// faulthandler, say, which would end the process at a device thread's fault).
void install() {
  struct sigaction current;
  if (::sigaction(SIGSEGV, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
      current.sa_sigaction == &onFault)
    return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &onFault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  struct sigaction previous;
  if (::sigaction(SIGSEGV, &sa, &previous) != 0)
    throw Error(ErrorCode::kInternal, std::string("strict memory: sigaction failed: ") + std::strerror(errno));
  g_previous = previous;
}

}  // namespace

bool enabled() noexcept { return g_enabled.load(std::memory_order_relaxed); }

void enable() {
  long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) g_page = static_cast<size_t>(page);
  install();
  g_enabled.store(true);
}

void* map(int, size_t bytes) {
  void* p = ::mmap(nullptr, pages(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap(void* p, size_t bytes) {
  {
    SpinLock lk;  // (a later mapping at this address is not ours to close)
    for (size_t i = 0; i < g_num_opened;) {
      if (g_opened[i].base == p) g_opened[i] = g_opened[--g_num_opened];
      else ++i;
    }
  }
  ::munmap(p, pages(bytes));
}

void markHostThread() noexcept {
  if (t_role == kUnknown) t_role = kHost;
  install();  // (cheap when ours is still first: one sigaction query)
}

void markDeviceThread(int) noexcept { t_role = kDevice; }

DeviceWork::DeviceWork(int) noexcept : saved_(t_role) { t_role = kDevice; }

DeviceWork::~DeviceWork() {
  t_role = saved_;
  if (saved_ != kDevice) close(-1);  // what it opened is closed before the host goes on
}

void taskStarted(int device) noexcept { g_running[device].fetch_add(1); }
void taskEnded(int device) noexcept { g_running[device].fetch_sub(1); }

void close(int device) noexcept {
  SpinLock lk;
  for (size_t i = 0; i < g_num_opened;) {
    if (device < 0 || g_opened[i].device == device) {
      ::mprotect(g_opened[i].base, g_opened[i].bytes, PROT_NONE);
      g_opened[i] = g_opened[--g_num_opened];
    } else {
      ++i;
    }
  }
}

void setLookup(Lookup lookup) noexcept { g_lookup.store(lookup, std::memory_order_release); }

}  // namespace strict
}  // namespace engine
}  // namespace omr
