// What a trace records of device work (see trace_records.h).
#include "profiler/trace_records.h"

#include <libkineto.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "runtime/tracing.h"

namespace openmtia::profiler {
namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Correlation ids Kineto pushes around each host op, per launching thread.
thread_local std::vector<uint64_t> tls_correlation;
uint64_t currentCorrelation() { return tls_correlation.empty() ? 0 : tls_correlation.back(); }

// A work's name, kept for the process: the driver's name is valid only
// during its report, and copying it into every record cost the device's
// thread an allocation a task. Names are few (ops, copies, kernels).
const std::string* internName(const char* name) {
  thread_local std::unordered_map<std::string_view, const std::string*> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  static std::mutex mu;
  // (never freed: threads outlive static destruction)
  static std::unordered_set<std::string>* names = new std::unordered_set<std::string>();
  const std::string* interned;
  {
    std::lock_guard<std::mutex> lk(mu);
    interned = &*names->insert(name).first;
  }
  cache.emplace(*interned, interned);
  return interned;
}

// What a thread recorded for the recording session (its id: `session`). A buffer
// holds an earlier session's records until its thread records again, or
// the next session's end drains the buffers. Buffers are never freed: a
// thread that exits leaves its buffer (its records still count) to the
// next thread that records.
struct ThreadBuffer {
  std::mutex mu;  // (taken by its thread, and by the session's end)
  uint64_t session = 0;
  std::vector<Record> records;
  std::vector<Launch> launches;
};

std::atomic<uint64_t> g_session{0};  // the recording session's id, or 0
std::atomic<uint64_t> g_sessions{0};
std::mutex g_buffers_mu;
std::vector<ThreadBuffer*>* g_buffers = new std::vector<ThreadBuffer*>();  // every buffer
std::vector<ThreadBuffer*>* g_free_buffers = new std::vector<ThreadBuffer*>();  // those of exited threads

struct ThreadBufferOwner {
  ThreadBuffer* buffer = nullptr;
  ~ThreadBufferOwner() {
    if (!buffer) return;
    std::lock_guard<std::mutex> lk(g_buffers_mu);
    g_free_buffers->push_back(buffer);
  }
};
thread_local ThreadBufferOwner t_buffer;

// The calling thread's buffer, locked by `lk`, for `session`, or null when no session records.
ThreadBuffer* lockedBuffer(std::unique_lock<std::mutex>& lk, uint64_t session) {
  if (!session) return nullptr;
  if (!t_buffer.buffer) {
    std::lock_guard<std::mutex> g(g_buffers_mu);
    if (!g_free_buffers->empty()) {
      t_buffer.buffer = g_free_buffers->back();
      g_free_buffers->pop_back();
    } else {
      t_buffer.buffer = new ThreadBuffer();
      g_buffers->push_back(t_buffer.buffer);
    }
  }
  ThreadBuffer* b = t_buffer.buffer;
  lk = std::unique_lock<std::mutex>(b->mu);
  if (b->session != session) {
    b->records.clear();
    b->launches.clear();
    b->session = session;
  }
  return b;
}

// Correlation ids of device work: never reused in the process (a trace
// exported per profiler step holds them unique too), and apart from the
// host ops' (Kineto's own, counted from 1), which share the trace's
// "correlation" namespace in torch's events: 2^30 up (a trace's ids are
// 32-bit).
constexpr uint64_t kFirstCorrelation = uint64_t{1} << 30;
std::atomic<uint64_t> g_next_correlation{kFirstCorrelation};

// The thread's submissions in progress (nested: a task run inline may
// submit), each with its start and, once the tag hook gave it a
// correlation, its launch's place in the thread's buffer.
struct Submission {
  int64_t start_ns;
  uint64_t session = 0;
  size_t launch = 0;  // (with session: its index in the buffer's launches)
};
thread_local std::vector<Submission> t_submissions;

void submitted(int begin) {
  if (begin) {
    t_submissions.push_back({nowNs()});
    return;
  }
  if (t_submissions.empty()) return;
  const Submission s = t_submissions.back();
  t_submissions.pop_back();
  if (!s.session) return;
  std::unique_lock<std::mutex> lk;
  ThreadBuffer* b = lockedBuffer(lk, g_session.load(std::memory_order_acquire));
  if (b && b->session == s.session && s.launch < b->launches.size()) b->launches[s.launch].end_ns = nowNs();
}

// The tag hook: on the submitting thread, inside the submission.
uint64_t tagSubmission() {
  const uint64_t id = ++g_next_correlation;
  const int64_t now = nowNs();
  Launch l{id, currentCorrelation(), libkineto::systemThreadId(), now, now};
  std::unique_lock<std::mutex> lk;
  const uint64_t session = g_session.load(std::memory_order_acquire);
  ThreadBuffer* b = lockedBuffer(lk, session);
  if (!b) return id;
  if (!t_submissions.empty()) {
    l.start_ns = t_submissions.back().start_ns;
    t_submissions.back().session = session;
    t_submissions.back().launch = b->launches.size();
  }
  b->launches.push_back(l);
  return id;
}

void collect(const omr::TaskRecord& r) {
  std::unique_lock<std::mutex> lk;
  ThreadBuffer* b = lockedBuffer(lk, g_session.load(std::memory_order_acquire));
  if (b)
    b->records.push_back({r.device, r.stream, internName(r.name), r.tag, r.start_ns, r.end_ns, r.error ? r.error : ""});
}

}  // namespace

void pushHostCorrelation(uint64_t id) { tls_correlation.push_back(id); }
void popHostCorrelation() {
  if (!tls_correlation.empty()) tls_correlation.pop_back();
}

uint64_t beginRecording() {
  const uint64_t id = ++g_sessions;
  g_session.store(id, std::memory_order_release);
  // (runtime/tracing.h: tasks and host work)
  openmtia::setTracing(&tagSubmission, &collect, &submitted);
  return id;
}

void endRecording(uint64_t id) {
  if (!id) return;
  openmtia::setTracing(nullptr, nullptr, nullptr);
  g_session.compare_exchange_strong(id, 0);
}

void takeRecords(uint64_t id, std::vector<Record>& records, std::vector<Launch>& launches) {
  {
    std::lock_guard<std::mutex> g(g_buffers_mu);
    for (ThreadBuffer* b : *g_buffers) {
      std::lock_guard<std::mutex> lk(b->mu);
      if (!id || b->session != id) continue;
      records.insert(records.end(), std::make_move_iterator(b->records.begin()), std::make_move_iterator(b->records.end()));
      launches.insert(launches.end(), b->launches.begin(), b->launches.end());
      b->records = {};  // (its memory back: a long trace's buffers are large)
      b->launches = {};
      b->session = 0;
    }
  }
  // (in the order they happened)
  std::stable_sort(records.begin(), records.end(), [](const Record& a, const Record& b) { return a.start_ns < b.start_ns; });
  std::stable_sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) { return a.start_ns < b.start_ns; });
}

}  // namespace openmtia::profiler
