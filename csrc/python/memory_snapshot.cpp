// torch.mtia.memory._snapshot() (see memory_snapshot.h).
#include <torch/csrc/profiler/combined_traceback.h>

#include <unordered_map>
#include <vector>

#include "openmtia/runtime.h"
#include "python/memory_snapshot.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/memory_history.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python), whose
// header needs nlohmann/json, which the wheel does not ship.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace openmtia {

PyObject* memorySnapshot(const std::optional<std::string>& path) {
  std::vector<std::vector<omr::SegmentInfo>> segments;
  for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) segments.push_back(deviceCache(i).snapshot());
  py::dict out;
  visitMemoryHistory([&](const MemoryHistoryTraces& history_traces,
                         const MemoryHistoryBlockContexts& block_context) {
    // symbolize every context once
    std::vector<torch::CapturedTraceback*> tracebacks;
    std::unordered_map<const c10::GatheredContext*, size_t> index;
    auto note = [&](const std::shared_ptr<c10::GatheredContext>& c) {
      if (c && index.emplace(c.get(), tracebacks.size()).second)
        tracebacks.push_back(torch::getCapturedTracebackFromContext(c));
    };
    for (const auto& t : history_traces)
      for (const auto& e : t) note(e.context);
    for (const auto& [addr, c] : block_context) note(c);
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
          auto it = block_context.find(b.address);
          block["frames"] = b.allocated && it != block_context.end() ? framesOf(it->second) : py::list();
          blocks.append(block);
        }
        seg["blocks"] = blocks;
        segs.append(seg);
      }
    }
    py::list traces;
    for (const auto& t : history_traces) {
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
    out["segments"] = segs;
    out["device_traces"] = traces;
  });
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
