// MTIAGraph: torch.mtia.MTIAGraph / torch.mtia.graph capture and replay.
//
// Capture puts the current stream in the runtime's capture mode: the tasks
// ops launch on it are recorded, not run (omr::streamBeginCapture). Tasks
// hold the memory they use, so a graph's tensors keep their device addresses
// for as long as the graph holds its tasks; allocations made while capturing
// come from the graph's own pool (a cache pool no other allocation uses, or a
// pool shared with graph_pool_handle()). Replay launches the recorded tasks,
// in order, as one task of the current stream. Random ops captured in a graph
// draw, at each replay, fresh offsets from their generator (as CUDA graphs do
// with Philox seed and offset): replays give new values, reproducible from
// the seed.
#include <ATen/core/GraphImplInterface.h>
#include <c10/core/DeviceGuard.h>

#include <fstream>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "runtime/graphs.h"
#include "runtime/stream.h"

namespace openmtia {
namespace {

struct CaptureKey {
  c10::DeviceIndex device;
  omr::StreamId stream;
  bool operator==(const CaptureKey& o) const { return device == o.device && stream == o.stream; }
};
struct CaptureKeyHash {
  size_t operator()(const CaptureKey& k) const { return (size_t(k.device) << 32) ^ size_t(k.stream); }
};

struct GraphState {
  omr::Graph* graph = nullptr;
  c10::DeviceIndex device = -1;
  omr::StreamId stream = 0;
  c10::MempoolId_t pool{0, 0};
  bool keep_graph = false;  // false: instantiated at capture_end; true: at instantiate() or the first replay()
  bool capturing = false, captured = false, instantiated = false;
  std::shared_ptr<GraphRng> rng;
};

struct Registry {
  std::mutex mu;
  int64_t next_graph = 1;
  uint64_t next_pool = 1;
  std::unordered_map<int64_t, GraphState> graphs;
  std::unordered_map<CaptureKey, int64_t, CaptureKeyHash> captures;  // capturing streams
  std::atomic<size_t> num_captures{0};  // captures.size(), for the hot paths' lock-free check
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: graphs may outlive static destructors
  return *r;
}

GraphState& graphOf(Registry& r, int64_t handle) {
  auto it = r.graphs.find(handle);
  TORCH_CHECK(it != r.graphs.end(), "MTIAGraph: unknown or destroyed graph ", handle);
  return it->second;
}

// Cache pools of graphs live beside the per-stream pools of the caching
// allocator, under stream keys no stream has.
constexpr omr::StreamId kGraphPoolKeyBase = 1 << 20;

}  // namespace

int64_t graphCreate(bool keep_graph) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  int64_t h = r.next_graph++;
  r.graphs[h].graph = omr::graphCreate();
  r.graphs[h].keep_graph = keep_graph;
  return h;
}

void graphReset(int64_t handle) {
  Registry& r = registry();
  omr::Graph* g;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    GraphState& s = graphOf(r, handle);
    TORCH_CHECK(!s.capturing, "MTIAGraph: reset while capturing; end the capture first");
    s.captured = s.instantiated = false;
    s.rng.reset();
    g = s.graph;
  }
  omr::graphClear(g);  // the recorded tasks, and the memory they hold, are released here
}

void graphDestroy(int64_t handle) {  // from a destructor: never throws
  Registry& r = registry();
  omr::Graph* g = nullptr;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.graphs.find(handle);
    if (it == r.graphs.end()) return;
    GraphState& s = it->second;
    if (s.capturing) {  // destroyed mid-capture: the stream stops capturing
      try {
        omr::streamEndCapture(s.device, s.stream);
      } catch (const std::exception&) {
      }
      r.captures.erase({s.device, s.stream});
      r.num_captures = r.captures.size();
    }
    g = s.graph;
    r.graphs.erase(it);
  }
  omr::graphDestroy(g);  // the recorded tasks, and the memory they hold, are released here
}

c10::MempoolId_t graphPoolHandle() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return {0, r.next_pool++};
}

void graphCaptureBegin(int64_t handle, c10::MempoolId_t pool) {
  c10::DeviceIndex device = currentDevice();
  c10::Stream stream = currentStream(device);
  TORCH_CHECK(stream.id() != 0,
              "MTIAGraph: capture must begin on a non-default stream (torch.mtia.graph uses "
              "torch.mtia.graph.default_capture_stream; or enter `with torch.mtia.stream(torch.mtia.Stream()):`)");
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  GraphState& s = graphOf(r, handle);
  TORCH_CHECK(!s.capturing && !s.captured, "MTIAGraph: this graph already holds a capture; reset() it first");
  CaptureKey key{device, streamId(stream)};
  TORCH_CHECK(!r.captures.count(key), "MTIAGraph: the stream is already capturing");
  OMR_CALL(omr::streamBeginCapture(device, streamId(stream), s.graph));
  s.device = device;
  s.stream = streamId(stream);
  s.pool = (pool.first == 0 && pool.second == 0) ? c10::MempoolId_t{r.next_pool++, 0} : pool;
  s.capturing = true;
  s.rng = std::make_shared<GraphRng>();
  r.captures[key] = handle;
  r.num_captures = r.captures.size();
}

void graphCaptureEnd(int64_t handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  GraphState& s = graphOf(r, handle);
  TORCH_CHECK(s.capturing, "MTIAGraph: capture_end without capture_begin");
  OMR_CALL(omr::streamEndCapture(s.device, s.stream));
  r.captures.erase({s.device, s.stream});
  r.num_captures = r.captures.size();
  s.capturing = false;
  s.captured = true;
  s.instantiated = !s.keep_graph;  // CUDAGraph's contract
}

void graphInstantiate(int64_t handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  GraphState& s = graphOf(r, handle);
  TORCH_CHECK(s.captured, "MTIAGraph: instantiate before the capture ended");
  s.instantiated = true;
}

void graphReplay(int64_t handle) {
  Registry& r = registry();
  std::shared_ptr<GraphRng> rng;
  omr::Graph* g;
  c10::DeviceIndex device;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    GraphState& s = graphOf(r, handle);
    TORCH_CHECK(s.captured, "MTIAGraph: replay before the capture ended");
    s.instantiated = true;  // keep_graph=True: the first replay instantiates
    rng = s.rng;
    g = s.graph;
    device = s.device;
  }
  c10::DeviceGuard guard(c10::Device(kMTIA, device));
  if (!rng->generators.empty()) {
    // this replay's offsets, taken now in program order, set in stream order
    std::vector<uint64_t> seeds, bases;
    for (size_t i = 0; i < rng->generators.size(); ++i) {
      seeds.push_back(rng->generators[i].current_seed());
      bases.push_back(reserveRandomOffsets(rng->generators[i], rng->counts[i]));
    }
    launchOnCurrentStream(device, "graph_rng", [rng, seeds = std::move(seeds), bases = std::move(bases)] {
      rng->seeds = seeds;
      rng->bases = bases;
    });
  }
  OMR_CALL(omr::graphLaunch(g, device, streamId(currentStream(device))));
}

std::vector<std::string> graphTaskNames(int64_t handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return omr::graphTaskNames(graphOf(r, handle).graph);
}

c10::MempoolId_t graphPool(int64_t handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return graphOf(r, handle).pool;
}

namespace {

// The graph capturing on (device, stream), if any; r.mu must be held.
GraphState* captureOn(Registry& r, c10::DeviceIndex device, omr::StreamId stream) {
  auto it = r.captures.find({device, stream});
  return it == r.captures.end() ? nullptr : &graphOf(r, it->second);
}

}  // namespace

bool isCapturing(c10::DeviceIndex device) {
  Registry& r = registry();
  if (r.num_captures.load() == 0) return false;  // (every op asks)
  std::lock_guard<std::mutex> lk(r.mu);
  return captureOn(r, device, streamId(currentStream(device))) != nullptr;
}

std::shared_ptr<GraphRng> capturingRng(c10::DeviceIndex device) {
  Registry& r = registry();
  if (r.num_captures.load() == 0) return nullptr;  // (every random op asks)
  std::lock_guard<std::mutex> lk(r.mu);
  GraphState* g = captureOn(r, device, streamId(currentStream(device)));
  return g ? g->rng : nullptr;
}

omr::StreamId allocationPoolKey(c10::DeviceIndex device, omr::StreamId stream) {
  Registry& r = registry();
  if (r.num_captures.load() == 0) return stream;  // (every allocation asks)
  std::lock_guard<std::mutex> lk(r.mu);
  GraphState* g = captureOn(r, device, stream);
  if (!g) return stream;
  const c10::MempoolId_t& pool = g->pool;
  // graph pools {id, 0} and handles {0, id} take their ids from one counter
  return kGraphPoolKeyBase + static_cast<omr::StreamId>(pool.first + pool.second);
}

namespace {

// torch.accelerator.Graph on mtia: the same graphs as torch.mtia.MTIAGraph.
struct MTIAGraphImpl final : public at::GraphImplInterface {
  explicit MTIAGraphImpl(const at::GraphImplArgs& args = {}) : handle(graphCreate(args.keep_graph)) {}
  ~MTIAGraphImpl() override { graphDestroy(handle); }
  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode) override { graphCaptureBegin(handle, pool); }
  void capture_end() override { graphCaptureEnd(handle); }
  void instantiate() override { graphInstantiate(handle); }
  void replay() override { graphReplay(handle); }
  void reset() override { graphReset(handle); }
  c10::MempoolId_t pool() const override { return graphPool(handle); }
  void enable_debug_mode() override {}  // a capture is always kept as a list of named tasks
  void debug_dump(const std::string& path) override {  // one line per recorded task, in order
    std::ofstream out(path);
    TORCH_CHECK(out, "MTIAGraph: cannot write ", path);
    for (const std::string& name : graphTaskNames(handle)) out << name << "\n";
  }
  const int64_t handle;
};

}  // namespace
}  // namespace openmtia

namespace at {
// The registry key is the device type's name: "MTIA".
C10_REGISTER_CLASS(GraphImplRegistry, MTIA, openmtia::MTIAGraphImpl);
}  // namespace at
