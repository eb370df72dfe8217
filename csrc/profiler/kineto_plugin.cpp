// Device work in torch.profiler, in the shape of a real MTIA's trace: a
// Kineto child profiler (IActivityProfiler, the plugin interface whose
// headers ship in the wheel) for the MTIA activity types. While a trace
// records, every submission to a stream (a task, a copy, an event record or
// wait, a graph replay) gets a correlation id of its own, unique in the
// process, and a launch event on the submitting thread (MTIA_RUNTIME, named
// as a real MTIA runtime's calls: traceNames), spanning the submission; the
// driver reports the work when it ran (MTIA_CCP_EVENTS) with that id, and
// the trace links the two with a flow arrow. The device event's "External id" is the launching host op's, so
// torch counts its time as that op's device time. Streams are numbered as a
// real MTIA's (the default stream 1, the pool's 101 and up: no work on a
// stream 0); each device's row is named from its own index.
// Kineto's inline activity code formats with fmt, which torch's libraries do
// not export: this file compiles it in.
#define FMT_HEADER_ONLY
#include <ThreadUtil.h>
#include <libkineto.h>
#include <output_base.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "openmtia/runtime.h"
#include "profiler/kineto_plugin.h"
#include "profiler/trace_records.h"

namespace openmtia::profiler {
namespace {

using namespace libkineto;

// `text` as a JSON string's inside: Kineto writes a quoted metadata value as
// it is, but for backslashes, which it turns to slashes; so double quotes
// become single ones and control characters spaces.
std::string jsonSafe(std::string text) {
  for (char& c : text) {
    if (c == '"') c = '\'';
    else if (c == '\\') c = '/';
    else if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return text;
}

// A stream's number in traces, as a real MTIA numbers them: the default
// stream 1, the others from 101.
int64_t traceStream(int stream) { return stream == 0 ? 1 : 100 + stream; }

// A piece of work's names in traces, by its kind, in the names tools sort
// device work by. The device event's: a copy keeps the driver's name
// ("Memcpy HtoD (Pinned -> Device)" and so on: memory), a collective is
// "hccl:" (MTIA's collective library: communication), a wait and an event
// record "Stream Wait Event Sync" and "Event Record Sync" (synchronization,
// by HTA 0.5.0's "^.*Sync" and its source's "^Stream Wait Event"; not CUDA's
// exact "Stream Wait Event", which HTA takes for a cuda_sync record and keeps
// in a critical path's window without its launch), a kernel its host op's
// name after "mtia:", so that tables list an op and its kernel apart. The
// launch's, as a real MTIA runtime names its host calls: "enqueueCommand
// memcpyHtoDAsync" and so on by direction, "enqueueCommand memsetAsync",
// "enqueueCommand waitOnEvent", "recordEvent", and for a kernel or a
// collective "runFunction - job_prep_and_submit_for_execution" (the
// launches tools count as kernel launches).
struct TraceNames {
  std::string device, launch;
};
TraceNames traceNames(const std::string& name) {
  static const std::string kKernelLaunch = "runFunction - job_prep_and_submit_for_execution";
  if (name.rfind("Memcpy ", 0) == 0 && name.size() >= 11)
    return {name, "enqueueCommand memcpy" + name.substr(7, 4) + "Async"};
  if (name.rfind("Memset", 0) == 0) return {name, "enqueueCommand memsetAsync"};
  if (name.rfind("c10d:", 0) == 0) return {"hccl:" + name.substr(5), kKernelLaunch};
  if (name == "stream_wait_event" || name == "c10d_wait") return {"Stream Wait Event Sync", "enqueueCommand waitOnEvent"};
  if (name == "event_record") return {"Event Record Sync", "recordEvent"};
  return {"mtia:" + name, kKernelLaunch};
}

class Session final : public IActivityProfilerSession {
 public:
  ~Session() override {
    detach();
    drain();  // (a session dropped unstopped: its records' memory back)
  }

  void start() override {
    records_.clear();
    launches_.clear();
    id_ = beginRecording();
    status_ = TraceStatus::RECORDING;
  }

  void stop() override {
    // the tasks launched while recording report when they ran
    for (int d = 0; d < omr::deviceCount(); ++d) {
      if (!omr::inBadFork()) omr::deviceWaitIdle(d);
    }
    detach();
    drain();
    status_ = TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(ActivityLogger& logger, getLinkedActivityCallback linked, int64_t start, int64_t end) override {
    buffer_ = std::make_unique<CpuTraceBuffer>();
    buffer_->span = TraceSpan(start, end, "openmtia");
    std::unordered_map<uint64_t, const Launch*> launched;
    for (const Launch& l : launches_) launched.emplace(l.correlation, &l);
    const int32_t pid = static_cast<int32_t>(getpid());
    // The launching host op's External id, if there was one (without a
    // linked activity, Kineto would print the event's own id as its
    // External id): work submitted outside any op (an event record from
    // Python) has none.
    auto correlate = [&](GenericTraceActivity& act, uint64_t correlation, uint64_t external) {
      if (external && linked) act.linked = linked(static_cast<int32_t>(external));
      act.id = act.linked ? static_cast<int32_t>(correlation) : 0;
      act.addMetadata("correlation", correlation);
      act.flow.id = static_cast<uint32_t>(correlation);
      act.flow.type = kLinkAsyncCpuGpu;
    };
    // the launches of the work that ran (a launch whose work never ran, as
    // one captured into a graph, has no device event to point to), named
    // by what they launched
    std::unordered_map<uint64_t, const Record*> ran;
    for (const Record& r : records_)
      if (r.correlation) ran.emplace(r.correlation, &r);
    for (const Launch& l : launches_) {
      auto work = ran.find(l.correlation);
      if (work == ran.end()) continue;
      const Record& r = *work->second;
      auto act = std::make_unique<GenericTraceActivity>(buffer_->span, ActivityType::MTIA_RUNTIME,
                                                        traceNames(*r.name).launch);
      act->addMetadata("device", r.device);
      act->addMetadata("stream_id", traceStream(r.stream));
      act->startTime = l.start_ns;
      act->endTime = std::max(l.end_ns, l.start_ns);
      act->device = pid;
      act->resource = l.tid;
      act->threadId = l.tid;
      correlate(*act, l.correlation, l.external);
      act->flow.start = true;
      buffer_->activities.push_back(std::move(act));
    }
    for (const Record& r : records_) {
      auto act = std::make_unique<GenericTraceActivity>(buffer_->span, ActivityType::MTIA_CCP_EVENTS,
                                                        traceNames(*r.name).device);
      const int64_t stream = traceStream(r.stream);
      act->startTime = r.start_ns;
      act->endTime = r.end_ns;
      act->device = r.device;
      act->resource = stream;
      act->addMetadata("device", r.device);
      act->addMetadata("stream", stream);
      if (!r.error.empty()) act->addMetadataQuoted("error", jsonSafe(r.error));  // a failed task, as it failed
      auto l = r.correlation ? launched.find(r.correlation) : launched.end();
      if (l != launched.end()) {
        correlate(*act, r.correlation, l->second->external);
        act->flow.start = false;
      }
      streams_.insert({r.device, stream});
      buffer_->activities.push_back(std::move(act));
    }
    for (const auto& a : buffer_->activities) logger.handleGenericActivity(*a);
  }

  std::unique_ptr<DeviceInfo> getDeviceInfo() override {
    // (one row a session: its work's device, the first if there were
    // several; Kineto takes one device a child profiler)
    const int device = streams_.empty() ? 0 : streams_.begin()->first;
    return std::make_unique<DeviceInfo>(DeviceInfo{device, 1000 + device, "MTIA " + std::to_string(device), "mtia"});
  }

  std::vector<ResourceInfo> getResourceInfos() override {
    std::vector<ResourceInfo> out;
    for (const auto& [device, stream] : streams_)
      out.push_back(ResourceInfo{stream, stream, device, "Stream " + std::to_string(stream)});
    return out;
  }

  std::unique_ptr<CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { pushHostCorrelation(id); }
  void popCorrelationId() override { popHostCorrelation(); }

 private:
  void detach() { endRecording(id_); }
  // Takes the session's records from the threads' buffers.
  void drain() { takeRecords(id_, records_, launches_); }

  uint64_t id_ = 0;
  std::vector<Record> records_;
  std::vector<Launch> launches_;
  std::unique_ptr<CpuTraceBuffer> buffer_;
  std::set<std::pair<int, int64_t>> streams_;
};

class MtiaActivityProfiler final : public IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return types_; }

  std::unique_ptr<IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                      const Config& /*config*/) override {
    if (!types.count(ActivityType::MTIA_CCP_EVENTS)) return nullptr;
    return std::make_unique<Session>();
  }
  std::unique_ptr<IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                      const std::set<ActivityType>& types,
                                                      const Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "openmtia";
  std::set<ActivityType> types_{ActivityType::MTIA_CCP_EVENTS, ActivityType::MTIA_RUNTIME};
};

}  // namespace

void registerKinetoPlugin() {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<MtiaActivityProfiler>(); });
}

}  // namespace openmtia::profiler
