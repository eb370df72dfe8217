// Memory history: torch.mtia.record_memory_history(), the events of the
// snapshot (python/memory_snapshot.cpp) in the format of
// torch.cuda.memory._snapshot(): alloc / free_requested / free_completed /
// segment_alloc / segment_free / oom entries, with Python and C++ stacks when
// asked.
#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/interpreter.h"
#include "runtime/memory_history.h"

namespace openmtia {
namespace {

using Entry = MemoryHistoryEntry;

struct History {
  std::mutex mu;
  std::atomic<bool> enabled{false};  // read without the lock by every allocation and free
  bool python = false, cpp = false;
  size_t max_entries = 0;  // 0: unbounded
  MemoryHistoryTraces traces;
  MemoryHistoryBlockContexts block_context;

  void add(c10::DeviceIndex device, Entry e) {  // with mu held
    auto& t = traces[device];
    t.push_back(std::move(e));
    if (max_entries && t.size() > max_entries) t.pop_front();
  }
};

History& history() {
  static History* h = [] {
    auto* h = new History();  // never destroyed: holds Python frames
    h->traces.resize(deviceCount());
    return h;
  }();
  return *h;
}

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::shared_ptr<c10::GatheredContext> allocationContext() {
  History& h = history();
  if (!h.enabled.load(std::memory_order_relaxed)) return nullptr;
  bool python, cpp;
  {
    std::lock_guard<std::mutex> lk(h.mu);
    if (!h.enabled || (!h.python && !h.cpp)) return nullptr;
    python = h.python;
    cpp = h.cpp;
  }
  return torch::CapturedTraceback::gather(python, /*script=*/false, cpp);
}

void recordAlloc(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream,
                 std::shared_ptr<c10::GatheredContext> context) {
  History& h = history();
  if (!h.enabled.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lk(h.mu);
  if (!h.enabled) return;
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (context) h.block_context[addr] = context;
  h.add(device, {"alloc", addr, size, stream, nowUs(), std::move(context)});
}

void recordFree(c10::DeviceIndex device, void* ptr, size_t size, int64_t stream) {
  History& h = history();
  if (!h.enabled.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lk(h.mu);
  if (!h.enabled) return;
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  std::shared_ptr<c10::GatheredContext> context;
  auto it = h.block_context.find(addr);
  if (it != h.block_context.end()) {
    context = std::move(it->second);
    h.block_context.erase(it);
  }
  // tasks hold their memory until they are done: the free completes at once
  int64_t t = nowUs();
  h.add(device, {"free_requested", addr, size, stream, t, context});
  h.add(device, {"free_completed", addr, size, stream, t, context});
}

void recordOom(c10::DeviceIndex device, size_t requested, size_t device_free) {
  History& h = history();
  if (!h.enabled.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lk(h.mu);
  if (!h.enabled) return;
  h.add(device, {"oom", 0, requested, 0, nowUs(), nullptr, device_free});
}

void recordMemoryHistory(const std::optional<std::string>& enabled, const std::string& stacks, size_t max_entries) {
  TORCH_CHECK(!enabled || *enabled == "all" || *enabled == "state",
              "record_memory_history: enabled must be None, 'state' or 'all', got '", *enabled, "'");
  TORCH_CHECK(stacks == "python" || stacks == "cpp" || stacks == "all",
              "record_memory_history: stacks must be 'python', 'cpp' or 'all', got '", stacks, "'");
  History& h = history();
  {
    std::lock_guard<std::mutex> lk(h.mu);
    h.enabled = enabled.has_value();
    h.python = h.enabled && stacks != "cpp";
    h.cpp = h.enabled && stacks != "python";
    h.max_entries = (enabled && *enabled == "state") ? 1 : max_entries;
    if (!h.enabled) {
      for (auto& t : h.traces) t.clear();
      h.block_context.clear();
    }
  }
  if (h.python)
    if (const Interpreter* i = interpreter()) i->enable_python_tracebacks();  // lets gather() read Python frames
  for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
    deviceCache(i).setSegmentObserver(
        !h.enabled ? omr::CachingAllocator::SegmentObserver()
                   : [i](bool alloc, uintptr_t addr, size_t size, omr::StreamId stream) {
                       History& hh = history();
                       std::lock_guard<std::mutex> lk(hh.mu);
                       if (hh.enabled)
                         hh.add(i, {alloc ? "segment_alloc" : "segment_free", addr, size, stream, nowUs(), nullptr});
                     });
}

void visitMemoryHistory(const std::function<void(const MemoryHistoryTraces&, const MemoryHistoryBlockContexts&)>& fn) {
  History& h = history();
  std::lock_guard<std::mutex> lk(h.mu);
  fn(h.traces, h.block_context);
}

}  // namespace openmtia
