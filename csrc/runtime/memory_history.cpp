// Memory history and snapshots: torch.mtia.record_memory_history() and
// torch.mtia.snapshot(), in the format of torch.cuda.memory._snapshot()
// ("segments" with their blocks, "device_traces" of alloc / free_requested /
// free_completed / segment_alloc / segment_free / oom entries, Python and C++
// stack frames when asked), so torch.cuda._memory_viz reads and renders it.
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/memory_history.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python), whose
// header needs nlohmann/json, which the wheel does not ship.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace openmtia {
namespace {

struct Entry {
  const char* action;
  uintptr_t addr;
  size_t size;
  int64_t stream;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;
  size_t device_free = 0;
};

struct History {
  std::mutex mu;
  std::atomic<bool> enabled{false};  // read without the lock by every allocation and free
  bool python = false, cpp = false;
  size_t max_entries = 0;  // 0: unbounded
  std::vector<std::deque<Entry>> traces;  // per device
  std::unordered_map<uintptr_t, std::shared_ptr<c10::GatheredContext>> block_context;

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
  if (h.enabled) torch::installCapturedTracebackPython();  // lets gather() read Python frames
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

PyObject* memorySnapshot(const std::optional<std::string>& path) {
  History& h = history();
  std::vector<std::vector<omr::SegmentInfo>> segments;
  for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) segments.push_back(deviceCache(i).snapshot());
  std::lock_guard<std::mutex> lk(h.mu);
  // symbolize every context once
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::unordered_map<const c10::GatheredContext*, size_t> index;
  auto note = [&](const std::shared_ptr<c10::GatheredContext>& c) {
    if (c && index.emplace(c.get(), tracebacks.size()).second)
      tracebacks.push_back(torch::getCapturedTracebackFromContext(c));
  };
  for (const auto& t : h.traces)
    for (const auto& e : t) note(e.context);
  for (const auto& [addr, c] : h.block_context) note(c);
  std::vector<py::object> frames = torch::py_symbolize(tracebacks);
  auto framesOf = [&](const std::shared_ptr<c10::GatheredContext>& c) -> py::object {
    if (!c) return py::list();
    return frames[index.at(c.get())];
  };

  py::list segs;
  for (c10::DeviceIndex d = 0; d < deviceCount(); ++d) {
    for (const auto& s : segments[d]) {
      py::dict seg;
      seg["device"] = d;
      seg["address"] = s.address;
      seg["total_size"] = s.total_size;
      seg["allocated_size"] = s.allocated_size;
      seg["active_size"] = s.active_size;
      seg["requested_size"] = s.requested_size;
      seg["stream"] = s.stream;
      seg["segment_type"] = s.large ? "large" : "small";
      seg["segment_pool_id"] = py::make_tuple(0, 0);
      seg["is_expandable"] = false;
      seg["frames"] = py::list();
      py::list blocks;
      for (const auto& b : s.blocks) {
        py::dict block;
        block["address"] = b.address;
        block["size"] = b.size;
        block["requested_size"] = b.allocated ? b.requested : 0;
        block["state"] = b.allocated ? "active_allocated" : "inactive";
        auto it = h.block_context.find(b.address);
        block["frames"] = b.allocated && it != h.block_context.end() ? framesOf(it->second) : py::list();
        blocks.append(block);
      }
      seg["blocks"] = blocks;
      segs.append(seg);
    }
  }
  py::list traces;
  for (const auto& t : h.traces) {
    py::list entries;
    for (const auto& e : t) {
      py::dict entry;
      entry["action"] = e.action;
      entry["addr"] = e.addr;
      entry["size"] = e.size;
      entry["stream"] = e.stream;
      entry["time_us"] = e.time_us;
      entry["frames"] = framesOf(e.context);
      if (std::string(e.action) == "oom") entry["device_free"] = e.device_free;
      entries.append(entry);
    }
    traces.append(entries);
  }
  py::dict out;
  out["segments"] = segs;
  out["device_traces"] = traces;
  py::dict settings;
  const auto& c = deviceCache(0).config();
  settings["max_split_size"] = c.max_split_size == SIZE_MAX ? -1 : static_cast<int64_t>(c.max_split_size);
  settings["garbage_collection_threshold"] = c.gc_threshold;
  out["allocator_settings"] = settings;
  if (path) {
    py::object f = py::module_::import("builtins").attr("open")(*path, "wb");
    py::module_::import("pickle").attr("dump")(out, f);
    f.attr("close")();
  }
  return out.release().ptr();
}

}  // namespace openmtia
