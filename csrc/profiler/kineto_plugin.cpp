// Device kernels in torch.profiler: a Kineto child profiler (IActivityProfiler,
// the plugin interface whose headers ship in the wheel) for the MTIA activity
// types. While a trace records, the runtime reports every task (its stream,
// name, start and end) with the correlation id of the host op that launched
// it; the trace gets them as MTIA_CCP_EVENTS activities, which torch counts
// as mtia device time of that op, one row per (device, stream) in the chrome
// trace, with a flow arrow from the op.
// Kineto's inline activity code formats with fmt, which torch's libraries do
// not export: this file compiles it in.
#define FMT_HEADER_ONLY
#include <libkineto.h>
#include <output_base.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "openmtia/runtime.h"
#include "profiler/kineto_plugin.h"
#include "runtime/tracing.h"

namespace openmtia::profiler {
namespace {

using namespace libkineto;

// Correlation ids Kineto pushes around each host op, per launching thread.
thread_local std::vector<uint64_t> tls_correlation;
uint64_t currentCorrelation() { return tls_correlation.empty() ? 0 : tls_correlation.back(); }

struct Record {
  int device;
  int stream;
  std::string name;
  uint64_t correlation;
  int64_t start_ns, end_ns;
};

std::mutex g_mu;
std::vector<Record>* g_records = nullptr;  // the recording session's, or none

void collect(const omr::TaskRecord& r) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_records) g_records->push_back({r.device, r.stream, r.name, r.tag, r.start_ns, r.end_ns});
}

class Session final : public IActivityProfilerSession {
 public:
  ~Session() override { detach(); }

  void start() override {
    {
      std::lock_guard<std::mutex> lk(g_mu);
      records_.clear();
      g_records = &records_;
    }
    openmtia::setTracing(&currentCorrelation, &collect);  // (runtime/tracing.h: tasks and host work)
    status_ = TraceStatus::RECORDING;
  }

  void stop() override {
    // the tasks launched while recording report when they ran
    for (int d = 0; d < omr::deviceCount(); ++d) {
      if (!omr::inBadFork()) omr::deviceWaitIdle(d);
    }
    detach();
    status_ = TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(ActivityLogger& logger, getLinkedActivityCallback linked, int64_t start, int64_t end) override {
    buffer_ = std::make_unique<CpuTraceBuffer>();
    buffer_->span = TraceSpan(start, end, "openmtia");
    for (const Record& r : records_) {
      // "mtia:aten::mm": the kernel of the host op aten::mm (a distinct name,
      // as a CUDA kernel's, so that tables list the op and its kernel apart)
      auto act = std::make_unique<GenericTraceActivity>(buffer_->span, ActivityType::MTIA_CCP_EVENTS,
                                                        "mtia:" + r.name);
      act->startTime = r.start_ns;
      act->endTime = r.end_ns;
      act->id = static_cast<int32_t>(++next_id_);
      act->device = r.device;
      act->resource = r.stream;
      act->addMetadata("device", r.device);
      act->addMetadata("stream", r.stream);
      if (r.correlation) {
        act->addMetadata("correlation", r.correlation);
        act->flow.id = static_cast<uint32_t>(r.correlation);
        act->flow.type = kLinkAsyncCpuGpu;
        act->flow.start = false;
        if (linked) act->linked = linked(static_cast<int32_t>(r.correlation));
      }
      streams_.insert({r.device, r.stream});
      buffer_->activities.push_back(std::move(act));
    }
    for (const auto& a : buffer_->activities) logger.handleGenericActivity(*a);
  }

  std::unique_ptr<DeviceInfo> getDeviceInfo() override {
    return std::make_unique<DeviceInfo>(DeviceInfo{0, 1000, "mtia:0 (openmtia)", "mtia"});
  }

  std::vector<ResourceInfo> getResourceInfos() override {
    std::vector<ResourceInfo> out;
    for (const auto& [device, stream] : streams_)
      out.push_back(ResourceInfo{stream, stream, device, "mtia:" + std::to_string(device) + " stream " +
                                                             std::to_string(stream)});
    return out;
  }

  std::unique_ptr<CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { tls_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!tls_correlation.empty()) tls_correlation.pop_back();
  }

 private:
  void detach() {
    openmtia::setTracing(nullptr, nullptr);
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_records == &records_) g_records = nullptr;
  }

  std::vector<Record> records_;
  std::unique_ptr<CpuTraceBuffer> buffer_;
  std::set<std::pair<int, int>> streams_;
  int64_t next_id_ = 0;
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
