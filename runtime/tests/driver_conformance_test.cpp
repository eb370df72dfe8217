// Driver conformance: what every driver (openmtia/driver.h) must do, through
// the C ABI only. Run as `openmtia_driver_conformance path/to/driver.so`;
// CTest runs it for every driver in the tree.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "openmtia/driver.h"

extern "C" int openmtia_driver_header_c99_check(const OmtiaDriver* d);

namespace {

const char* g_path = nullptr;
const OmtiaDriver* D = nullptr;
constexpr size_t kDeviceMemory = 64 << 20;  // initialize's option: 64 MiB per device
constexpr int64_t kQueueDepth = 8;

OmtiaErrorInfo lastError() {
  OmtiaErrorInfo info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(D->get_last_error(&info), OMTIA_SUCCESS);
  return info;
}

#define OK(call) ASSERT_EQ((call), OMTIA_SUCCESS) << lastError().message

uint32_t deviceFlags(int device = 0) {
  OmtiaDeviceProperties p{};
  p.struct_size = sizeof p;
  EXPECT_EQ(D->device_properties(device, &p), OMTIA_SUCCESS);
  return p.flags;
}

// Whether the driver has graphs; if not, checks that it says so.
bool graphsOrNotSupported() {
  if (deviceFlags() & OMTIA_DEVICE_GRAPHS) return true;
  OmtiaGraph g = nullptr;
  EXPECT_EQ(D->graph_create(&g), OMTIA_ERROR_NOT_SUPPORTED);
  return false;
}

// RAII over a stream, for the tests' brevity.
struct Stream {
  OmtiaStream s = nullptr;
  explicit Stream(int device = 0, int priority = 0, int64_t label = 7) {
    OmtiaStreamCreateArgs a{};
    a.struct_size = sizeof a;
    a.device = device;
    a.priority = priority;
    a.label = label;
    EXPECT_EQ(D->stream_create(&a, &s), OMTIA_SUCCESS) << lastError().message;
  }
  ~Stream() {
    if (s) EXPECT_EQ(D->stream_destroy(s), OMTIA_SUCCESS) << lastError().message;
  }
};

// Launches a C++ callable as a host function (its destroy deletes it).
template <typename F>
OmtiaStatus launch(OmtiaStream s, const char* name, F f) {
  auto* owned = new F(std::move(f));
  OmtiaLaunchArgs a{};
  a.struct_size = sizeof a;
  a.fn = [](void* u) -> const char* { return (*static_cast<F*>(u))(); };
  a.user = owned;
  a.destroy = [](void* u) { delete static_cast<F*>(u); };
  a.name = name;
  return D->launch_host_func(s, &a);
}

TEST(Driver, EntryPointAndVersion) {
  void* lib = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto get = reinterpret_cast<OmtiaDriverGetFn>(dlsym(lib, OMTIA_DRIVER_ENTRY_POINT));
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get(OMTIA_DRIVER_ABI_MAJOR), D);  // the same static table
  EXPECT_EQ(get(OMTIA_DRIVER_ABI_MAJOR + 1), nullptr);
  EXPECT_GE(D->struct_size, sizeof(OmtiaDriver));
  EXPECT_EQ(D->abi_major, OMTIA_DRIVER_ABI_MAJOR);
  EXPECT_GE(D->abi_minor, 0u);
  ASSERT_NE(D->name, nullptr);
  EXPECT_GT(std::strlen(D->name), 0u);
  EXPECT_EQ(openmtia_driver_header_c99_check(D), 1);
}

TEST(Driver, InitializeOnceWithItsOptions) {
  OmtiaInitArgs args{};
  args.struct_size = sizeof args;
  EXPECT_EQ(D->initialize(&args), OMTIA_ERROR_INVALID_VALUE);  // (main() initialized it)
  EXPECT_NE(std::string(lastError().message), "");
  size_t free_b = 0, total = 0;
  OK(D->mem_get_info(0, &free_b, &total));
  EXPECT_EQ(total, kDeviceMemory);
  EXPECT_LE(free_b, total);
}

TEST(Driver, DevicesAndProperties) {
  int n = 0;
  OK(D->device_count(&n));
  ASSERT_EQ(n, 2);  // initialize's option
  OmtiaDeviceProperties p{};
  p.struct_size = sizeof p;
  OK(D->device_properties(1, &p));
  EXPECT_GT(std::strlen(p.name), 0u);
  EXPECT_EQ(p.total_memory, kDeviceMemory);
  EXPECT_GT(p.processor_count, 0);
  EXPECT_TRUE(p.flags & OMTIA_DEVICE_HOST_CALLBACKS);
  EXPECT_EQ(D->device_properties(2, &p), OMTIA_ERROR_INVALID_DEVICE);
  OmtiaErrorInfo e = lastError();
  EXPECT_EQ(e.code, OMTIA_ERROR_INVALID_DEVICE);
  EXPECT_NE(std::string(e.message), "");
  EXPECT_EQ(D->device_count(nullptr), OMTIA_ERROR_INVALID_VALUE);
  // ABI 1.3: on a host thread outside any work, nothing runs here
  int on_host = -1;
  OK(D->work_runs_parallel(&on_host));
  EXPECT_EQ(on_host, 0);
  EXPECT_EQ(D->work_runs_parallel(nullptr), OMTIA_ERROR_INVALID_VALUE);
}

TEST(Driver, LastErrorIsPerThreadAndSizedByTheCaller) {
  EXPECT_EQ(D->device_properties(-1, nullptr), OMTIA_ERROR_INVALID_VALUE);
  std::thread([] {
    int n;
    EXPECT_EQ(D->device_count(&n), OMTIA_SUCCESS);
    EXPECT_EQ(lastError().code, OMTIA_SUCCESS);  // not the other thread's
  }).join();
  // an older caller's smaller struct: only its fields are written
  struct {
    OmtiaErrorInfo head;
    char canary[64];
  } small;
  std::memset(&small, 0x5a, sizeof small);
  small.head.struct_size = offsetof(OmtiaErrorInfo, task);
  OK(D->get_last_error(&small.head));
  EXPECT_EQ(small.head.code, OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(&small.head)[offsetof(OmtiaErrorInfo, task)], 0x5a);
}

TEST(Driver, DeviceMemoryAndPointerAttributes) {
  void* p = nullptr;
  OK(D->mem_alloc(1, 1000, &p));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  OmtiaPointerAttributes a{};
  a.struct_size = sizeof a;
  OK(D->pointer_get_attributes(static_cast<char*>(p) + 10, &a));
  EXPECT_EQ(a.type, OMTIA_MEMORY_DEVICE);
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.base, p);
  EXPECT_GE(a.size, 1000u);
  int local = 0;
  OK(D->pointer_get_attributes(&local, &a));
  EXPECT_EQ(a.type, OMTIA_MEMORY_UNREGISTERED);
  EXPECT_EQ(a.device, -1);
  OK(D->mem_free(1, p));
  OK(D->pointer_get_attributes(p, &a));
  EXPECT_EQ(a.type, OMTIA_MEMORY_UNREGISTERED);
  EXPECT_EQ(D->mem_free(1, &local), OMTIA_ERROR_INVALID_VALUE);
  void* none = &local;
  OK(D->mem_alloc(0, 0, &none));
  EXPECT_EQ(none, nullptr);
}

TEST(Driver, OutOfMemoryIsAnErrorNotACrash) {
  void* p = nullptr;
  EXPECT_EQ(D->mem_alloc(0, kDeviceMemory + 1, &p), OMTIA_ERROR_OUT_OF_MEMORY);
  OmtiaErrorInfo e = lastError();
  EXPECT_EQ(e.device, 0);
  EXPECT_EQ(e.requested, kDeviceMemory + 1);
  EXPECT_EQ(e.capacity, kDeviceMemory);
  EXPECT_NE(std::string(e.message).find("out of memory"), std::string::npos) << e.message;
  OK(D->mem_alloc(0, 1 << 20, &p));  // still usable
  OK(D->mem_free(0, p));
}

TEST(Driver, PinnedHostMemory) {
  void* h = nullptr;
  OK(D->host_alloc(4096, &h));
  ASSERT_NE(h, nullptr);
  static_cast<char*>(h)[4095] = 1;  // host memory: the host may touch it
  OmtiaPointerAttributes a{};
  a.struct_size = sizeof a;
  OK(D->pointer_get_attributes(static_cast<char*>(h) + 100, &a));
  EXPECT_EQ(a.type, OMTIA_MEMORY_HOST_PINNED);
  EXPECT_EQ(a.base, h);
  OK(D->host_free(h));
  int local;
  EXPECT_EQ(D->host_free(&local), OMTIA_ERROR_INVALID_VALUE);
}

TEST(Driver, CopiesRoundTrip) {
  std::vector<int> src(1000), dst(1000, 0);
  for (int i = 0; i < 1000; ++i) src[i] = i * 7;
  void *a = nullptr, *b = nullptr;
  OK(D->mem_alloc(0, 4000, &a));
  OK(D->mem_alloc(1, 4000, &b));
  OK(D->memcpy(a, src.data(), 4000, OMTIA_COPY_HOST_TO_DEVICE));
  OK(D->memcpy(b, a, 4000, OMTIA_COPY_DEVICE_TO_DEVICE));  // across devices
  OK(D->memcpy(dst.data(), b, 4000, OMTIA_COPY_DEVICE_TO_HOST));
  EXPECT_EQ(dst, src);
  // a range beyond the allocation, or host memory named as device memory
  EXPECT_EQ(D->memcpy(a, src.data(), 4096 + 1, OMTIA_COPY_HOST_TO_DEVICE), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->memcpy(dst.data(), src.data(), 4, OMTIA_COPY_DEVICE_TO_HOST), OMTIA_ERROR_INVALID_VALUE);
  Stream s(0);
  std::vector<int> back(1000, 0);
  OK(D->memcpy_async(a, src.data(), 4000, OMTIA_COPY_HOST_TO_DEVICE, s.s));
  OK(D->memcpy_async(back.data(), a, 4000, OMTIA_COPY_DEVICE_TO_HOST, s.s));
  OK(D->stream_synchronize(s.s));
  EXPECT_EQ(back, src);
  OK(D->mem_free(0, a));
  OK(D->mem_free(1, b));
}

TEST(Driver, StreamRunsItsWorkInOrder) {
  Stream s(0);
  std::vector<int> seen;
  for (int i = 0; i < 1000; ++i) OK(launch(s.s, "append", [&seen, i]() -> const char* {
      seen.push_back(i);
      return nullptr;
    }));
  OK(D->stream_synchronize(s.s));
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], i);
  OK(D->stream_query(s.s));
}

TEST(Driver, HostFunctionsRunAfterTheLaunchReturnsAndAreDestroyedOnTheHost) {
  // An asynchronous driver runs work on a driver thread, or on a host thread
  // that waits for the stream (help-first waits: here, the synchronize), never
  // inside the launch; on_driver_thread says which. A synchronous one runs it
  // in the launch, on the launching thread.
  int flags = 0;
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  Stream s(0);
  struct Probe {
    std::thread::id ran_on, destroyed_on;
    int on_driver_thread = -1;
    std::atomic<bool> launched{false};
    bool ran_after_launch = false;
  } probe;
  OmtiaLaunchArgs a{};
  a.struct_size = sizeof a;
  a.fn = [](void* u) -> const char* {
    auto* pr = static_cast<Probe*>(u);
    pr->ran_on = std::this_thread::get_id();
    pr->ran_after_launch = pr->launched.load();
    D->on_driver_thread(&pr->on_driver_thread);
    return nullptr;
  };
  a.destroy = [](void* u) { static_cast<Probe*>(u)->destroyed_on = std::this_thread::get_id(); };
  a.user = &probe;
  a.name = "probe";
  OK(D->launch_host_func(s.s, &a));
  probe.launched = true;
  OK(D->stream_synchronize(s.s));
  EXPECT_EQ(probe.destroyed_on, std::this_thread::get_id());
  EXPECT_EQ(probe.on_driver_thread, probe.ran_on == std::this_thread::get_id() ? 0 : 1);
  if (async) {
    EXPECT_TRUE(probe.ran_after_launch);
  } else {
    EXPECT_EQ(probe.ran_on, std::this_thread::get_id());
    EXPECT_FALSE(probe.ran_after_launch);
  }
  OK(D->on_driver_thread(&flags));
  EXPECT_EQ(flags, 0);
}

TEST(Driver, FailedWorkIsReportedAtTheNextSynchronizeOnce) {
  Stream s(0, 0, 42);
  std::atomic<int> after{0};
  OK(launch(s.s, "bad kernel", []() -> const char* { return "index 9 is out of bounds"; }));
  OK(launch(s.s, "later", [&after]() -> const char* {
    after = 1;
    return nullptr;
  }));
  EXPECT_EQ(D->stream_synchronize(s.s), OMTIA_ERROR_TASK_FAILED);
  OmtiaErrorInfo e = lastError();
  EXPECT_STREQ(e.task, "bad kernel");
  const std::string msg = e.message;
  EXPECT_NE(msg.find("index 9 is out of bounds"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stream 42"), std::string::npos) << msg;  // the stream's label
  EXPECT_EQ(after.load(), 1);  // the stream kept running
  OK(D->stream_synchronize(s.s));  // reported once
}

TEST(Driver, StreamsWaitForEventsOfOthers) {
  Stream a(0), b(0, -1);
  OmtiaEvent ev = nullptr;
  OK(D->event_create(OMTIA_EVENT_TIMING, &ev));
  std::atomic<int> step{0};
  int seen_by_b = -1;
  OK(launch(a.s, "slow", [&step]() -> const char* {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    step = 1;
    return nullptr;
  }));
  OK(D->event_record(ev, a.s));
  OK(D->stream_wait_event(b.s, ev));
  OK(launch(b.s, "after", [&]() -> const char* {
    seen_by_b = step.load();
    return nullptr;
  }));
  OK(D->stream_synchronize(b.s));
  EXPECT_EQ(seen_by_b, 1);
  int device = -2;
  OK(D->event_device(ev, &device));
  EXPECT_EQ(device, 0);
  OK(D->event_destroy(ev));
}

TEST(Driver, EventsTimeTheWorkBetweenThem) {
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  Stream s(0);
  OmtiaEvent t0 = nullptr, t1 = nullptr, plain = nullptr;
  OK(D->event_create(OMTIA_EVENT_TIMING, &t0));
  OK(D->event_create(OMTIA_EVENT_TIMING, &t1));
  OK(D->event_create(0, &plain));
  OK(D->event_query(t1));  // never recorded: done
  // an asynchronous driver's work waits for the host's go (a synchronous
  // one's runs inside the launch: it must not wait)
  std::atomic<bool> go{!async};
  OK(D->event_record(t0, s.s));
  OK(launch(s.s, "gate", [&go]() -> const char* {
    while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return nullptr;
  }));
  OK(D->event_record(t1, s.s));
  OK(D->event_record(plain, s.s));
  double ms = 0;
  if (async) {
    EXPECT_EQ(D->event_query(t1), OMTIA_ERROR_NOT_READY);
    EXPECT_EQ(D->stream_query(s.s), OMTIA_ERROR_NOT_READY);
    EXPECT_EQ(D->event_elapsed_ms(t0, t1, &ms), OMTIA_ERROR_INVALID_VALUE);  // not reached yet
    go = true;
  }
  OK(D->event_synchronize(t1));
  OK(D->event_query(t1));
  OK(D->event_elapsed_ms(t0, t1, &ms));
  EXPECT_GE(ms, 19.0);
  OK(D->event_synchronize(plain));
  EXPECT_EQ(D->event_elapsed_ms(t0, plain, &ms), OMTIA_ERROR_INVALID_VALUE);  // no timing
  // an event belongs to the device it was first recorded on
  Stream other(1);
  EXPECT_EQ(D->event_record(t0, other.s), OMTIA_ERROR_INVALID_VALUE);
  for (OmtiaEvent e : {t0, t1, plain}) OK(D->event_destroy(e));
}

TEST(Driver, GraphsRecordAndReplay) {
  if (!graphsOrNotSupported()) return;
  Stream s(0);
  OmtiaGraph g = nullptr;
  OK(D->graph_create(&g));
  static std::atomic<int> destroyed{0};
  destroyed = 0;
  int count = 0;
  OK(D->stream_begin_capture(s.s, g));
  int capturing = 0;
  OK(D->stream_is_capturing(s.s, &capturing));
  EXPECT_EQ(capturing, 1);
  for (const char* name : {"one", "two", "three"}) {
    OmtiaLaunchArgs a{};
    a.struct_size = sizeof a;
    a.fn = [](void* u) -> const char* {
      ++*static_cast<int*>(u);
      return nullptr;
    };
    a.user = &count;
    a.destroy = [](void*) { ++destroyed; };
    a.name = name;
    OK(D->launch_host_func(s.s, &a));
  }
  EXPECT_EQ(D->stream_synchronize(s.s), OMTIA_ERROR_CAPTURING);
  OK(D->stream_end_capture(s.s));
  EXPECT_EQ(count, 0);  // recorded, not run
  size_t n = 0;
  OK(D->graph_task_count(g, &n));
  EXPECT_EQ(n, 3u);
  const char* name = nullptr;
  const char* first = nullptr;
  OK(D->graph_task_name(g, 0, &first));
  OK(D->graph_task_name(g, 1, &name));
  EXPECT_STREQ(name, "two");
  EXPECT_STREQ(first, "one");  // still valid: until the graph is cleared, destroyed or recorded into
  const char* again = nullptr;
  OK(D->graph_task_name(g, 0, &again));
  EXPECT_EQ(again, first);
  OK(D->graph_launch(g, s.s));
  OK(D->graph_launch(g, s.s));
  OK(D->stream_synchronize(s.s));
  EXPECT_EQ(count, 6);
  EXPECT_EQ(destroyed.load(), 0);  // the graph still holds its work
  OK(D->graph_destroy(g));
  EXPECT_EQ(destroyed.load(), 3);  // once each
}

TEST(Driver, AFullLaunchQueueWaitsThroughTheWaitHook) {
  static std::atomic<int> waits{0};
  waits = 0;
  OK(D->set_wait_hook([](void (*wait)(void*), void* arg) {
    ++waits;
    wait(arg);
  }));
  Stream s(0);
  std::atomic<int> ran{0};
  for (int i = 0; i < 4 * kQueueDepth; ++i) OK(launch(s.s, "slow", [&ran]() -> const char* {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++ran;
      return nullptr;
    }));
  OK(D->stream_synchronize(s.s));
  OK(D->set_wait_hook(nullptr));
  EXPECT_EQ(ran.load(), 4 * kQueueDepth);
  // a synchronous driver has no queue to wait for
  if (deviceFlags() & OMTIA_DEVICE_ASYNC) EXPECT_GT(waits.load(), 0);
  else EXPECT_EQ(waits.load(), 0);
}

TEST(Driver, ActivityRecordsNameTheWork) {
  struct Seen {
    std::mutex mu;
    std::vector<std::string> names;
    std::vector<int64_t> labels;
    std::vector<uint64_t> correlations;
    bool ordered = true;
  } seen;
  static std::atomic<uint64_t> next{100};
  OK(D->set_activity_callback([]() -> uint64_t { return next++; },
                              [](const OmtiaActivityRecord* r, void* u) {
                                auto* s = static_cast<Seen*>(u);
                                std::lock_guard<std::mutex> lk(s->mu);
                                s->names.push_back(r->name);
                                s->labels.push_back(r->stream_label);
                                s->correlations.push_back(r->correlation);
                                s->ordered = s->ordered && r->start_ns <= r->end_ns && r->start_ns > 0;
                              },
                              &seen));
  Stream s(0, 0, 9);
  OK(launch(s.s, "first", []() -> const char* { return nullptr; }));
  OK(launch(s.s, "second", []() -> const char* { return nullptr; }));
  OK(D->stream_synchronize(s.s));
  OK(D->set_activity_callback(nullptr, nullptr, nullptr));
  OK(launch(s.s, "untraced", []() -> const char* { return nullptr; }));
  OK(D->stream_synchronize(s.s));
  std::lock_guard<std::mutex> lk(seen.mu);
  ASSERT_EQ(seen.names, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(seen.labels, (std::vector<int64_t>{9, 9}));
  EXPECT_EQ(seen.correlations, (std::vector<uint64_t>{100, 101}));
  EXPECT_TRUE(seen.ordered);
}

TEST(Driver, ActivityRecordsCarryAFailuresMessage) {
  struct Seen {
    std::mutex mu;
    std::vector<std::pair<std::string, std::string>> records;  // name, error ("-": none)
  } seen;
  OK(D->set_activity_callback(nullptr,
                              [](const OmtiaActivityRecord* r, void* u) {
                                auto* s = static_cast<Seen*>(u);
                                ASSERT_TRUE(OMTIA_HAS_FIELD(r, OmtiaActivityRecord, error));
                                std::lock_guard<std::mutex> lk(s->mu);
                                s->records.emplace_back(r->name, r->error ? r->error : "-");
                              },
                              &seen));
  Stream s(0);
  OK(launch(s.s, "fine", []() -> const char* { return nullptr; }));
  OK(launch(s.s, "broken", []() -> const char* { return "it broke"; }));
  EXPECT_EQ(D->stream_synchronize(s.s), OMTIA_ERROR_TASK_FAILED);
  OK(D->set_activity_callback(nullptr, nullptr, nullptr));
  std::lock_guard<std::mutex> lk(seen.mu);
  EXPECT_EQ(seen.records, (std::vector<std::pair<std::string, std::string>>{{"fine", "-"}, {"broken", "it broke"}}));
}

TEST(Driver, DestroyingAStreamRunsItsWorkFirst) {
  std::atomic<int> ran{0};
  {
    Stream s(1);
    for (int i = 0; i < 20; ++i) OK(launch(s.s, "work", [&ran]() -> const char* {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ++ran;
        return nullptr;
      }));
  }  // stream_destroy
  EXPECT_EQ(ran.load(), 20);
  OmtiaStreamCreateArgs bad{};
  bad.struct_size = sizeof bad;
  bad.device = 5;
  OmtiaStream s = nullptr;
  EXPECT_EQ(D->stream_create(&bad, &s), OMTIA_ERROR_INVALID_DEVICE);
  int least = 1, greatest = 1;
  OK(D->stream_priority_range(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_LE(greatest, 0);
}

TEST(Driver, BadArgumentsAreErrorsNotCrashes) {
  Stream s(0);
  OmtiaLaunchArgs a{};
  a.struct_size = 4;  // no room for its fields
  a.fn = [](void*) -> const char* { return nullptr; };
  EXPECT_EQ(D->launch_host_func(s.s, &a), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(lastError().message).find("struct_size"), std::string::npos) << lastError().message;
  a.struct_size = sizeof a;
  a.fn = nullptr;
  EXPECT_EQ(D->launch_host_func(s.s, &a), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->launch_host_func(nullptr, &a), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->stream_synchronize(nullptr), OMTIA_ERROR_INVALID_VALUE);
  OmtiaEvent e = nullptr;
  EXPECT_EQ(D->event_create(1u << 7, &e), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->event_create(0, nullptr), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->memcpy(nullptr, nullptr, 8, static_cast<OmtiaCopyKind>(9)), OMTIA_ERROR_INVALID_VALUE);
  const char* name = nullptr;
  EXPECT_EQ(D->graph_task_name(nullptr, 0, &name), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->stream_query(nullptr), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->stream_end_capture(nullptr), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->stream_end_capture(s.s), OMTIA_ERROR_INVALID_VALUE);  // not capturing
  OK(D->stream_synchronize(s.s));  // the stream is fine
}

TEST(Driver, AFailingGraphTaskAndDeviceSynchronize) {
  Stream s(1, 0, 5);
  OmtiaGraph g = nullptr;
  OK(D->graph_create(&g));
  void* dev = nullptr;
  OK(D->mem_alloc(1, 64, &dev));
  int host_in = 1234, host_out = 0;
  OK(D->stream_begin_capture(s.s, g));
  OK(D->memcpy_async(dev, &host_in, sizeof host_in, OMTIA_COPY_HOST_TO_DEVICE, s.s));  // copies are recorded too
  OK(D->memcpy_async(&host_out, dev, sizeof host_out, OMTIA_COPY_DEVICE_TO_HOST, s.s));
  OK(launch(s.s, "fails", []() -> const char* { return "bad value"; }));
  OK(D->stream_end_capture(s.s));
  EXPECT_EQ(host_out, 0);
  OK(D->graph_launch(g, s.s));
  EXPECT_EQ(D->device_synchronize(1), OMTIA_ERROR_TASK_FAILED);  // the device's sync reports it
  OmtiaErrorInfo e = lastError();
  EXPECT_STREQ(e.task, "graph");
  EXPECT_NE(std::string(e.message).find("in graph task 'fails': bad value"), std::string::npos) << e.message;
  EXPECT_EQ(host_out, 1234);
  OK(D->device_synchronize(1));  // once
  OK(D->graph_destroy(g));
  OK(D->mem_free(1, dev));
}

TEST(Driver, AForkedChildCannotUseTheDevices) {
  void* p = nullptr;
  OK(D->mem_alloc(0, 256, &p));  // the parent used a device
  pid_t pid = fork();
  if (pid == 0) {
    int forked = 0, n = 0;
    void* q = nullptr;
    OmtiaErrorInfo e{};
    e.struct_size = sizeof e;
    bool good = D->in_bad_fork(&forked) == OMTIA_SUCCESS && forked == 1 &&
                D->mem_alloc(0, 256, &q) == OMTIA_ERROR_FORKED && D->get_last_error(&e) == OMTIA_SUCCESS &&
                std::string(e.message).find("forked subprocess") != std::string::npos &&
                D->device_count(&n) == OMTIA_SUCCESS && n == 2;  // still readable
    _exit(good ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  int forked = 1;
  OK(D->in_bad_fork(&forked));
  EXPECT_EQ(forked, 0);
  OK(D->mem_free(0, p));
}


TEST(Driver, MemoryIsAccountedPerDevice) {
  size_t free0 = 0, free1 = 0, total = 0, other0 = 0, other1 = 0;
  OK(D->mem_get_info(1, &free0, &total));
  OK(D->mem_get_info(0, &other0, &total));
  void* p = nullptr;
  OK(D->mem_alloc(1, 1000, &p));
  OK(D->mem_get_info(1, &free1, &total));
  EXPECT_GE(free0 - free1, 1000u);  // (rounded up as the driver allocates)
  EXPECT_LE(free0 - free1, 1000u + 4096);
  OK(D->mem_get_info(0, &other1, &total));
  EXPECT_EQ(other1, other0);  // the other device's memory is its own
  OK(D->mem_free(1, p));
  OK(D->mem_get_info(1, &free1, &total));
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(D->mem_get_info(2, &free1, &total), OMTIA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(D->mem_get_info(0, &free1, nullptr), OMTIA_ERROR_INVALID_VALUE);
}

TEST(Driver, ALaunchReturnsBeforeItsWorkRunsOnAnAsynchronousDriver) {
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  Stream s(0);
  std::atomic<bool> release{!async};
  std::vector<int> order;
  OK(launch(s.s, "block", [&release]() -> const char* {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return nullptr;
  }));
  const int held = kQueueDepth - 2;  // (more would wait for room in the launch queue)
  for (int i = 0; i < held; ++i) OK(launch(s.s, "push", [&order, i]() -> const char* {
      order.push_back(i);
      return nullptr;
    }));
  if (async) {  // the launches returned while the stream is held
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(D->stream_query(s.s), OMTIA_ERROR_NOT_READY);
    EXPECT_TRUE(order.empty());
    release = true;
  } else {  // the work ran inside each launch
    EXPECT_EQ(order.size(), size_t(held));
  }
  for (int i = held; i < 100; ++i) OK(launch(s.s, "push", [&order, i]() -> const char* {
      order.push_back(i);
      return nullptr;
    }));
  OK(D->stream_synchronize(s.s));
  OK(D->stream_query(s.s));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(Driver, ManyThreadsLaunchOnManyStreams) {
  std::atomic<long> sum{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&sum, t] {
      Stream s(t % 2, t % 3 == 0 ? -1 : 0, 100 + t);
      for (int i = 0; i < 500; ++i) EXPECT_EQ(launch(s.s, "add", [&sum, i]() -> const char* {
                                                sum += i;
                                                return nullptr;
                                              }),
                                              OMTIA_SUCCESS);
      EXPECT_EQ(D->stream_synchronize(s.s), OMTIA_SUCCESS);
    });
  for (auto& th : threads) th.join();
  OK(D->device_synchronize(0));
  OK(D->device_synchronize(1));
  EXPECT_EQ(sum.load(), 8L * (499L * 500 / 2));
}

TEST(Driver, AStreamStaysUsableAfterItsErrorWasReported) {
  Stream s(1, -1, 3);
  OK(launch(s.s, "boom", []() -> const char* { return "boom"; }));
  EXPECT_EQ(D->device_synchronize(1), OMTIA_ERROR_TASK_FAILED);  // any stream of the device
  EXPECT_STREQ(lastError().task, "boom");
  OK(D->device_synchronize(1));  // once
  int ran = 0;
  OK(launch(s.s, "ok", [&ran]() -> const char* {
    ran = 2;
    return nullptr;
  }));
  OK(D->stream_synchronize(s.s));
  EXPECT_EQ(ran, 2);
  // an event recorded after the failure reports it at its synchronize
  OmtiaEvent ev = nullptr;
  OK(D->event_create(0, &ev));
  OK(launch(s.s, "fails again", []() -> const char* { return "bad"; }));
  OK(D->event_record(ev, s.s));
  EXPECT_EQ(D->event_synchronize(ev), OMTIA_ERROR_TASK_FAILED);
  EXPECT_STREQ(lastError().task, "fails again");
  OK(D->stream_synchronize(s.s));  // reported once
  OK(D->event_destroy(ev));
}

TEST(Driver, AnEventHoldsTheStreamsThatWaitForIt) {
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  Stream a(0), b(0, -1);
  OmtiaEvent ev = nullptr;
  OK(D->event_create(0, &ev));
  int device = 5;
  OK(D->event_device(ev, &device));
  EXPECT_EQ(device, -1);  // never recorded
  OK(D->event_query(ev));
  std::atomic<bool> release{!async};
  std::atomic<int> value{0};
  OK(launch(a.s, "block", [&]() -> const char* {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    value = 1;
    return nullptr;
  }));
  OK(D->event_record(ev, a.s));
  OK(D->stream_wait_event(b.s, ev));
  int seen = -1;
  OK(launch(b.s, "read", [&]() -> const char* {
    seen = value.load();
    return nullptr;
  }));
  if (async) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(D->event_query(ev), OMTIA_ERROR_NOT_READY);
    EXPECT_EQ(D->stream_query(b.s), OMTIA_ERROR_NOT_READY);  // b is held by the event
    EXPECT_EQ(seen, -1);
    release = true;
  }
  OK(D->event_synchronize(ev));
  OK(D->event_query(ev));
  OK(D->stream_synchronize(b.s));
  EXPECT_EQ(seen, 1);
  OK(D->event_destroy(ev));
}

TEST(Driver, DestroyingAPendingEventIsSafe) {
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  Stream s(0);
  std::atomic<bool> release{!async};
  OK(launch(s.s, "block", [&release]() -> const char* {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return nullptr;
  }));
  OmtiaEvent e = nullptr;
  OK(D->event_create(OMTIA_EVENT_TIMING, &e));
  OK(D->event_record(e, s.s));
  Stream waiter(0);
  OK(D->stream_wait_event(waiter.s, e));
  OK(D->event_destroy(e));  // (its records stay in the streams)
  release = true;
  OK(D->stream_synchronize(waiter.s));
  OK(D->device_synchronize(0));
}

TEST(Driver, AsynchronousCopiesAreOrderedOnTheirStream) {
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  const size_t n = 1 << 16;
  std::vector<unsigned char> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7);
  void *d0 = nullptr, *d0b = nullptr, *d1 = nullptr, *pinned_v = nullptr;
  OK(D->mem_alloc(0, n, &d0));
  OK(D->mem_alloc(0, n, &d0b));
  OK(D->mem_alloc(1, n, &d1));
  OK(D->host_alloc(n, &pinned_v));
  auto* pinned = static_cast<unsigned char*>(pinned_v);
  OK(D->memcpy(d1, host.data(), n, OMTIA_COPY_HOST_TO_DEVICE));
  Stream s(1);
  std::atomic<bool> release{!async};
  OK(launch(s.s, "block", [&release]() -> const char* {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return nullptr;
  }));
  std::memset(pinned, 0, n);
  OK(D->memcpy_async(pinned, d1, n, OMTIA_COPY_DEVICE_TO_HOST, s.s));
  if (async) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(pinned[1], 0);  // not yet: the stream is held
    release = true;
  }
  OK(D->stream_synchronize(s.s));
  EXPECT_EQ(std::memcmp(pinned, host.data(), n), 0);
  // host -> device -> device -> other device -> host, in stream order
  Stream s0(0);
  std::memset(pinned, 3, n);
  OK(D->memcpy_async(d0, pinned, n, OMTIA_COPY_HOST_TO_DEVICE, s0.s));
  OK(D->memcpy_async(d0b, d0, n, OMTIA_COPY_DEVICE_TO_DEVICE, s0.s));
  OK(D->memcpy_async(d1, d0b, n, OMTIA_COPY_DEVICE_TO_DEVICE, s0.s));
  std::vector<unsigned char> back(n, 0);
  OK(D->memcpy_async(back.data(), d1, n, OMTIA_COPY_DEVICE_TO_HOST, s0.s));  // pageable host memory too
  OK(D->stream_synchronize(s0.s));
  EXPECT_EQ(back, std::vector<unsigned char>(n, 3));
  EXPECT_EQ(D->memcpy_async(d0, pinned, n + 4096, OMTIA_COPY_HOST_TO_DEVICE, s0.s), OMTIA_ERROR_INVALID_VALUE);
  OK(D->stream_synchronize(s0.s));
  OK(D->host_free(pinned));
  OK(D->mem_free(0, d0));
  OK(D->mem_free(0, d0b));
  OK(D->mem_free(1, d1));
}

TEST(Driver, ACapturedStreamRefusesSynchronizationUntilTheCaptureEnds) {
  if (!graphsOrNotSupported()) return;
  Stream s(0);
  OmtiaGraph g = nullptr;
  OK(D->graph_create(&g));
  OmtiaEvent ev = nullptr;
  OK(D->event_create(0, &ev));
  OK(D->stream_begin_capture(s.s, g));
  EXPECT_EQ(D->stream_begin_capture(s.s, g), OMTIA_ERROR_CAPTURING);  // already
  EXPECT_EQ(D->stream_query(s.s), OMTIA_ERROR_CAPTURING);
  EXPECT_EQ(D->device_synchronize(0), OMTIA_ERROR_CAPTURING);
  EXPECT_EQ(D->event_record(ev, s.s), OMTIA_ERROR_CAPTURING);
  EXPECT_NE(std::string(lastError().message).find("captur"), std::string::npos) << lastError().message;
  OK(D->stream_end_capture(s.s));
  int capturing = 1;
  OK(D->stream_is_capturing(s.s, &capturing));
  EXPECT_EQ(capturing, 0);
  OK(D->stream_query(s.s));
  OK(D->device_synchronize(0));
  OK(D->event_destroy(ev));
  OK(D->graph_destroy(g));
}

TEST(Driver, ClearingAGraphDropsItsWorkAndItRecordsAgain) {
  if (!graphsOrNotSupported()) return;
  Stream s(0);
  OmtiaGraph g = nullptr;
  OK(D->graph_create(&g));
  static std::atomic<int> destroyed{0};
  destroyed = 0;
  std::vector<int> order;
  auto record = [&](int value, const char* name) {
    struct Push {
      std::vector<int>* order;
      int value;
    };
    OmtiaLaunchArgs a{};
    a.struct_size = sizeof a;
    a.fn = [](void* u) -> const char* {
      auto* p = static_cast<Push*>(u);
      p->order->push_back(p->value);
      return nullptr;
    };
    a.user = new Push{&order, value};
    a.destroy = [](void* u) {
      delete static_cast<Push*>(u);
      ++destroyed;
    };
    a.name = name;
    return D->launch_host_func(s.s, &a);
  };
  OK(D->stream_begin_capture(s.s, g));
  OK(record(1, "a"));
  OK(record(2, "b"));
  OK(D->stream_end_capture(s.s));
  OK(D->graph_clear(g));
  EXPECT_EQ(destroyed.load(), 2);
  size_t n = 5;
  OK(D->graph_task_count(g, &n));
  EXPECT_EQ(n, 0u);
  OK(D->stream_begin_capture(s.s, g));
  OK(record(3, "c"));
  OK(D->stream_end_capture(s.s));
  OK(D->graph_launch(g, s.s));
  OK(D->stream_synchronize(s.s));
  EXPECT_EQ(order, std::vector<int>{3});
  OK(D->graph_destroy(g));
  EXPECT_EQ(destroyed.load(), 3);
}

TEST(Driver, ActivityRecordsCarryTheWorksTimesInUnixNanoseconds) {
  struct Times {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> spans;
    std::vector<int> devices;
  } seen;
  OK(D->set_activity_callback(nullptr,
                              [](const OmtiaActivityRecord* r, void* u) {
                                auto* t = static_cast<Times*>(u);
                                std::lock_guard<std::mutex> lk(t->mu);
                                t->spans.emplace_back(r->start_ns, r->end_ns);
                                t->devices.push_back(r->device);
                              },
                              &seen));
  Stream s(1);
  OK(launch(s.s, "sleeps", []() -> const char* {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return nullptr;
  }));
  OK(launch(s.s, "next", []() -> const char* { return nullptr; }));
  OK(D->stream_synchronize(s.s));
  OK(D->set_activity_callback(nullptr, nullptr, nullptr));
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lk(seen.mu);
  ASSERT_EQ(seen.spans.size(), 2u);
  EXPECT_EQ(seen.devices, (std::vector<int>{1, 1}));
  EXPECT_GE(seen.spans[0].second - seen.spans[0].first, 2000000);  // ran 2 ms or more
  EXPECT_LE(seen.spans[0].second, seen.spans[1].first);            // in order
  EXPECT_LE(seen.spans[1].second, now);
  EXPECT_GT(seen.spans[0].first, now - int64_t(60) * 1000000000);  // Unix-epoch nanoseconds
}

// The idle hook runs on a driver thread once its stream's queue is empty; a
// synchronous driver has no such thread and never calls it.
// (a call counts itself off the driver thread before it counts itself: the host
// may read the counters while a call is between its two updates)
std::atomic<int> g_idle_calls{0}, g_idle_off_driver_thread{0};

TEST(Driver, TheIdleHookRunsOnADriverThreadWithNothingQueued) {
  const bool async = deviceFlags() & OMTIA_DEVICE_ASYNC;
  g_idle_calls = 0;
  g_idle_off_driver_thread = 0;
  OK(D->set_idle_hook([] {
    int yes = 0;
    D->on_driver_thread(&yes);
    if (!yes) ++g_idle_off_driver_thread;
    ++g_idle_calls;
  }));
  Stream s(0);
  std::atomic<int> ran{0};
  // the last piece of work outlasts the host's poll, so that the host sleeps
  // in stream_synchronize and the driver wakes it (the hook's condition): work
  // done before the host waited woke no one, and ran no hook (a flaky run).
  // The host synchronizes once a driver thread runs the work (else it may run
  // the work itself: help-first waits).
  std::atomic<bool> first_started{false};
  for (int i = 0; i < 5; ++i) OK(launch(s.s, "work", [&ran, &first_started, i]() -> const char* {
      if (i == 0) first_started = true;
      if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (i == 4) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ++ran;
      return nullptr;
    }));
  auto t_start = std::chrono::steady_clock::now();
  while (async && !first_started && std::chrono::steady_clock::now() - t_start < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  OK(D->stream_synchronize(s.s));
  auto t0 = std::chrono::steady_clock::now();
  while (async && g_idle_calls.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  OK(D->set_idle_hook(nullptr));
  EXPECT_EQ(ran.load(), 5);
  if (async) EXPECT_GT(g_idle_calls.load(), 0);
  else EXPECT_EQ(g_idle_calls.load(), 0);
  EXPECT_EQ(g_idle_off_driver_thread.load(), 0);
}

// shutdown() cannot be undone: its scenario runs in a re-executed copy of
// this binary (a death test), which initializes the driver afresh.
std::string shutdownScenario() {
  std::string failed;
  auto check = [&failed](bool ok, const char* what) {
    if (!ok) failed += std::string(what) + "\n";
  };
  std::atomic<int> ran{0};
  auto* s = new Stream(0);
  auto* other = new Stream(1);
  check(launch(s->s, "slow", [&ran]() -> const char* {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          ++ran;
          return nullptr;
        }) == OMTIA_SUCCESS, "launch");
  for (int i = 0; i < 50; ++i) launch(s->s, "queued", [&ran]() -> const char* {
      ++ran;
      return nullptr;
    });
  launch(other->s, "other device", [&ran]() -> const char* {
    ++ran;
    return nullptr;
  });
  check(D->shutdown() == OMTIA_SUCCESS, "shutdown failed");
  check(ran.load() == 52, "shutdown returned before the launched work ran");
  // later launches run on the launching thread before they return
  std::thread::id ran_on;
  launch(s->s, "inline", [&ran_on]() -> const char* {
    ran_on = std::this_thread::get_id();
    return nullptr;
  });
  check(ran_on == std::this_thread::get_id(), "a launch after shutdown did not run on the launching thread");
  int yes = 1;
  D->on_driver_thread(&yes);
  check(yes == 0, "the host thread counts as a driver thread");
  Stream later(1, 0, 77);  // a stream first made now
  int started = 0;
  launch(later.s, "new stream", [&started]() -> const char* {
    ++started;
    return nullptr;
  });
  check(started == 1, "a stream made after shutdown did not run its work");
  // errors stay asynchronous: reported at the next synchronize, with the work's name
  launch(s->s, "fails inline", []() -> const char* { return "boom"; });
  check(D->stream_synchronize(s->s) == OMTIA_ERROR_TASK_FAILED, "the failure was not reported at the sync");
  check(std::string(lastError().task) == "fails inline", "the error names other work");
  // events, waits, copies and frees keep working
  OmtiaEvent e = nullptr;
  D->event_create(OMTIA_EVENT_TIMING, &e);
  D->event_record(e, s->s);
  check(D->event_query(e) == OMTIA_SUCCESS, "an event recorded after shutdown is not complete");
  check(D->stream_wait_event(other->s, e) == OMTIA_SUCCESS, "stream_wait_event");
  check(D->event_synchronize(e) == OMTIA_SUCCESS, "event_synchronize");
  D->event_destroy(e);
  void* d = nullptr;
  D->mem_alloc(0, 64, &d);
  int v = 7, back = 0;
  D->memcpy_async(d, &v, sizeof v, OMTIA_COPY_HOST_TO_DEVICE, s->s);
  D->memcpy_async(&back, d, sizeof v, OMTIA_COPY_DEVICE_TO_HOST, s->s);
  check(D->stream_synchronize(s->s) == OMTIA_SUCCESS && back == 7, "a round trip after shutdown lost the value");
  check(D->mem_free(0, d) == OMTIA_SUCCESS, "mem_free");
  delete s;
  delete other;
  check(D->device_synchronize(0) == OMTIA_SUCCESS, "device_synchronize");
  check(D->shutdown() == OMTIA_SUCCESS, "a second shutdown failed");
  return failed;
}

TEST(Driver, ShutdownRunsLaunchedWorkThenRunsLaunchesInline) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: no driver threads forked
  EXPECT_EXIT(
      {
        std::string failed = shutdownScenario();
        std::fprintf(stderr, "%s", failed.c_str());
        std::exit(failed.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Driver, ReceivedDataIsLeftAsItIsWithNoFaultArmed) {
  Stream s(0);
  std::vector<unsigned char> data(64, 0x5a);
  int corrupted = -1;
  OK(D->data_received(s.s, "c10d:all_reduce", data.data(), data.size(), &corrupted));
  EXPECT_EQ(corrupted, 0);
  EXPECT_EQ(data, std::vector<unsigned char>(64, 0x5a));
  EXPECT_EQ(D->data_received(s.s, "c10d:all_reduce", data.data(), data.size(), nullptr), OMTIA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D->data_received(nullptr, "c10d:all_reduce", data.data(), data.size(), &corrupted),
            OMTIA_ERROR_INVALID_VALUE);
  OK(D->stream_synchronize(s.s));
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s path/to/driver.so [gtest flags]\n", argv[0]);
    return 2;
  }
  g_path = argv[1];
  void* lib = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  auto get = reinterpret_cast<OmtiaDriverGetFn>(dlsym(lib, OMTIA_DRIVER_ENTRY_POINT));
  D = get ? get(OMTIA_DRIVER_ABI_MAJOR) : nullptr;
  if (!D) {
    std::fprintf(stderr, "%s: no driver of ABI major %d\n", g_path, OMTIA_DRIVER_ABI_MAJOR);
    return 2;
  }
  // "inline_launches" 0: the emulator's work on the launching thread (when
  // the process has no core to spare) is off, so that the work of these
  // tests runs on driver threads as the contract's asynchrony says; the
  // inline path has the engine's own tests (engine_test.cpp, InlineLaunch).
  const OmtiaOption options[] = {{"device_count", 2}, {"device_memory", int64_t(kDeviceMemory)},
                                 {"launch_queue_depth", kQueueDepth}, {"an_option_of_another_driver", 1},
                                 {"inline_launches", 0}};
  OmtiaInitArgs args{};
  args.struct_size = sizeof args;
  args.options = options;
  args.num_options = 5;
  if (D->initialize(&args) != OMTIA_SUCCESS) {
    OmtiaErrorInfo e{};
    e.struct_size = sizeof e;
    D->get_last_error(&e);
    std::fprintf(stderr, "initialize: %s\n", e.message);
    return 2;
  }
  return RUN_ALL_TESTS();
}
