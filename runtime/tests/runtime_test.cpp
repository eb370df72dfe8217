#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "openmtia/runtime.h"

using namespace std::chrono_literals;

TEST(Devices, CountAndProperties) {
  ASSERT_GE(omr::deviceCount(), 2);  // default 2 (ctest does not set the env)
  auto p = omr::deviceProperties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_GE(p.processor_count, 1);
  EXPECT_THROW(omr::deviceProperties(omr::deviceCount()), omr::Error);
  EXPECT_THROW(omr::deviceProperties(-1), omr::Error);
}

TEST(Devices, ParseByteSize) {
  EXPECT_EQ(omr::parseByteSize("1024"), 1024u);
  EXPECT_EQ(omr::parseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(omr::parseByteSize("4G"), 4ull << 30);
  EXPECT_EQ(omr::parseByteSize("4GiB"), 4ull << 30);
  EXPECT_EQ(omr::parseByteSize("1.5k"), 1536u);
  EXPECT_THROW(omr::parseByteSize("lots"), omr::Error);
  EXPECT_THROW(omr::parseByteSize("4X"), omr::Error);
}

TEST(Memory, AllocFreeAccounting) {
  size_t free0, total;
  omr::memGetInfo(1, &free0, &total);
  void* p = omr::deviceMalloc(1, 1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  size_t free1;
  omr::memGetInfo(1, &free1, nullptr);
  EXPECT_EQ(free0 - free1, 1024u);  // rounded to 256
  EXPECT_EQ(omr::pointerDevice(p), 1);
  EXPECT_EQ(omr::pointerDevice(static_cast<char*>(p) + 999), 1);
  omr::deviceFree(1, p);
  omr::memGetInfo(1, &free1, nullptr);
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(omr::deviceMalloc(0, 0), nullptr);
  int on_stack;
  EXPECT_EQ(omr::pointerDevice(&on_stack), -1);
  EXPECT_THROW(omr::deviceFree(0, &on_stack), omr::Error);
}

TEST(Memory, OutOfMemoryIsAnErrorAndDeviceStaysUsable) {
  size_t free0, total;
  omr::memGetInfo(0, &free0, &total);
  try {
    omr::deviceMalloc(0, total + 1);
    FAIL() << "expected OutOfMemoryError";
  } catch (const omr::OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), omr::ErrorCode::kOutOfMemory);
    EXPECT_EQ(e.requested, total + 1);
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  void* p = omr::deviceMalloc(0, 4096);
  EXPECT_NE(p, nullptr);
  omr::deviceFree(0, p);
  size_t free1;
  omr::memGetInfo(0, &free1, nullptr);
  EXPECT_EQ(free1, free0);
}

TEST(Memory, Pinned) {
  void* p = omr::hostMallocPinned(100);
  EXPECT_TRUE(omr::isPinned(p));
  EXPECT_TRUE(omr::isPinned(static_cast<char*>(p) + 50));
  int x;
  EXPECT_FALSE(omr::isPinned(&x));
  EXPECT_FALSE(omr::isPinned(nullptr));
  omr::hostFreePinned(p);
  EXPECT_FALSE(omr::isPinned(p));
  EXPECT_THROW(omr::hostFreePinned(&x), omr::Error);
}

TEST(Streams, InOrderAndAsynchronous) {
  std::atomic<bool> release{false};
  std::vector<int> order;
  omr::launch(0, omr::kDefaultStream, "block", [&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  for (int i = 0; i < 100; ++i) omr::launch(0, omr::kDefaultStream, "push", [&order, i] { order.push_back(i); });
  // launch returned while the stream is blocked: execution is asynchronous
  EXPECT_FALSE(omr::streamQuery(0, omr::kDefaultStream));
  EXPECT_TRUE(order.empty());
  release = true;
  omr::streamSynchronize(0, omr::kDefaultStream);
  EXPECT_TRUE(omr::streamQuery(0, omr::kDefaultStream));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(Streams, PoolAndPriorities) {
  auto a = omr::streamFromPool(0, 0), b = omr::streamFromPool(0, -1);
  EXPECT_NE(a, omr::kDefaultStream);
  EXPECT_EQ(omr::streamPriority(a), 0);
  EXPECT_EQ(omr::streamPriority(b), -1);
  EXPECT_EQ(omr::streamPriority(omr::kDefaultStream), 0);
  EXPECT_THROW(omr::launch(0, 1000, "x", [] {}), omr::Error);
  EXPECT_THROW(omr::launch(99, 0, "x", [] {}), omr::Error);
}

TEST(Streams, TwoStreamsRunConcurrently) {
  // each task waits for the other to start: only possible if they overlap
  std::atomic<int> started{0};
  auto task = [&] {
    started++;
    auto t0 = std::chrono::steady_clock::now();
    while (started < 2 && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
    if (started < 2) throw std::runtime_error("streams did not overlap");
  };
  auto s1 = omr::streamFromPool(1, 0), s2 = omr::streamFromPool(1, -1);
  omr::launch(1, s1, "a", task);
  omr::launch(1, s2, "b", task);
  EXPECT_NO_THROW(omr::deviceSynchronize(1));
}

// The idle hook runs on the worker once it ran every queued task and woke
// the host thread that slept in a synchronize; tasks run on a worker, the
// launching thread is not one.
std::atomic<int> g_idle_calls{0};
std::atomic<int> g_idle_on_worker{0};

TEST(Streams, IdleHookRunsOnTheWorkerOnceItsQueueIsEmpty) {
  EXPECT_FALSE(omr::onStreamWorker());
  omr::setIdleHook([] {
    g_idle_calls++;
    g_idle_on_worker += omr::onStreamWorker();
  });
  auto s = omr::streamFromPool(0, 0);
  std::atomic<bool> on_worker{false}, release{false};
  std::atomic<int> ran{0};
  omr::launch(0, s, "first", [&] {
    on_worker = omr::onStreamWorker();
    while (!release) std::this_thread::sleep_for(1ms);
    ran++;
  });
  for (int i = 0; i < 5; ++i) omr::launch(0, s, "next", [&] { ran++; });
  std::this_thread::sleep_for(20ms);
  const int while_busy = g_idle_calls.load();  // the worker has queued work: not idle
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);  // the synchronize below sleeps by then
    release = true;
  });
  omr::streamSynchronize(0, s);
  releaser.join();
  auto t0 = std::chrono::steady_clock::now();
  while (g_idle_calls.load() == while_busy && std::chrono::steady_clock::now() - t0 < 5s)
    std::this_thread::sleep_for(1ms);
  omr::setIdleHook(nullptr);
  EXPECT_EQ(ran.load(), 6);
  EXPECT_TRUE(on_worker.load());
  EXPECT_GT(g_idle_calls.load(), while_busy);
  EXPECT_EQ(g_idle_on_worker.load(), g_idle_calls.load());
}

TEST(Streams, ManyThreadsManyStreams) {
  std::atomic<long> sum{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      int dev = t % 2;
      auto s = omr::streamFromPool(dev, t % 3 == 0 ? -1 : 0);
      for (int i = 0; i < 500; ++i) omr::launch(dev, s, "add", [&sum, i] { sum += i; });
      omr::streamSynchronize(dev, s);
    });
  }
  for (auto& th : threads) th.join();
  omr::deviceSynchronize(0);
  omr::deviceSynchronize(1);
  EXPECT_EQ(sum.load(), 8L * (499L * 500 / 2));
}

TEST(Errors, TaskErrorRaisedAtSyncAndRuntimeStaysUsable) {
  auto s = omr::streamFromPool(0, 0);
  std::atomic<int> after{0};
  omr::launch(0, s, "my_failing_kernel", [] { throw std::runtime_error("index 7 out of range"); });
  omr::launch(0, s, "after", [&] { after = 1; });
  try {
    omr::streamSynchronize(0, s);
    FAIL() << "expected TaskError";
  } catch (const omr::TaskError& e) {
    EXPECT_EQ(e.task, "my_failing_kernel");
    EXPECT_NE(std::string(e.what()).find("index 7 out of range"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("my_failing_kernel"), std::string::npos);
  }
  EXPECT_EQ(after.load(), 1);
  // reported once, then the stream works again
  EXPECT_NO_THROW(omr::streamSynchronize(0, s));
  omr::launch(0, s, "ok", [&] { after = 2; });
  EXPECT_NO_THROW(omr::streamSynchronize(0, s));
  EXPECT_EQ(after.load(), 2);
}

TEST(Errors, DeviceSynchronizeReportsAnyStream) {
  auto s = omr::streamFromPool(1, -1);
  omr::launch(1, s, "bad", [] { throw std::runtime_error("boom"); });
  EXPECT_THROW(omr::deviceSynchronize(1), omr::TaskError);
  EXPECT_NO_THROW(omr::deviceSynchronize(1));
}

TEST(Events, RecordWaitQuerySync) {
  auto s1 = omr::streamFromPool(0, 0), s2 = omr::streamFromPool(0, -1);
  omr::Event* ev = omr::eventCreate(false);
  EXPECT_TRUE(omr::eventQuery(ev));  // never recorded
  EXPECT_EQ(omr::eventDevice(ev), -1);
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  omr::launch(0, s1, "block", [&] {
    while (!release) std::this_thread::sleep_for(1ms);
    value = 1;
  });
  omr::eventRecord(ev, 0, s1);
  EXPECT_EQ(omr::eventDevice(ev), 0);
  omr::streamWaitEvent(0, s2, ev);
  int seen = -1;
  omr::launch(0, s2, "read", [&] { seen = value.load(); });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(omr::eventQuery(ev));
  EXPECT_FALSE(omr::streamQuery(0, s2));  // s2 is held by the event
  release = true;
  omr::eventSynchronize(ev);
  EXPECT_TRUE(omr::eventQuery(ev));
  omr::streamSynchronize(0, s2);
  EXPECT_EQ(seen, 1);
  omr::eventDestroy(ev);
}

TEST(Events, ElapsedTime) {
  omr::Event* a = omr::eventCreate(true);
  omr::Event* b = omr::eventCreate(true);
  omr::Event* untimed = omr::eventCreate(false);
  omr::eventRecord(a, 0, 0);
  omr::launch(0, 0, "sleep", [] { std::this_thread::sleep_for(30ms); });
  omr::eventRecord(b, 0, 0);
  omr::eventRecord(untimed, 0, 0);
  omr::eventSynchronize(b);
  double ms = omr::eventElapsedMs(a, b);
  EXPECT_GE(ms, 25.0);
  EXPECT_LT(ms, 5000.0);
  EXPECT_THROW(omr::eventElapsedMs(a, untimed), omr::Error);
  omr::eventDestroy(a);
  omr::eventDestroy(b);
  omr::eventDestroy(untimed);
}

TEST(Events, DestroyWhilePendingIsSafe) {
  std::atomic<bool> release{false};
  omr::launch(0, 0, "block", [&] { while (!release) std::this_thread::sleep_for(1ms); });
  omr::Event* e = omr::eventCreate(true);
  omr::eventRecord(e, 0, 0);
  omr::eventDestroy(e);
  release = true;
  EXPECT_NO_THROW(omr::deviceSynchronize(0));
}

TEST(Copies, AllDirectionsSyncAndAsync) {
  const size_t n = 1 << 16;
  std::vector<unsigned char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7);
  void* d0 = omr::deviceMalloc(0, n);
  void* d0b = omr::deviceMalloc(0, n);
  void* d1 = omr::deviceMalloc(1, n);
  omr::memcpy(d0, host.data(), n, omr::CopyKind::kHostToDevice);
  omr::memcpy(d0b, d0, n, omr::CopyKind::kDeviceToDevice);
  omr::memcpy(d1, d0b, n, omr::CopyKind::kDeviceToDevice);  // across devices
  omr::memcpy(back.data(), d1, n, omr::CopyKind::kDeviceToHost);
  EXPECT_EQ(back, host);

  unsigned char* pinned = static_cast<unsigned char*>(omr::hostMallocPinned(n));
  auto s = omr::streamFromPool(1, 0);
  std::atomic<bool> release{false};
  omr::launch(1, s, "block", [&] { while (!release) std::this_thread::sleep_for(1ms); });
  std::memset(pinned, 0, n);
  omr::memcpyAsync(pinned, d1, n, omr::CopyKind::kDeviceToHost, 1, s);
  EXPECT_EQ(pinned[1], 0);  // not yet copied: the stream is held
  release = true;
  omr::streamSynchronize(1, s);
  EXPECT_EQ(std::memcmp(pinned, host.data(), n), 0);
  std::memset(pinned, 3, n);
  omr::memcpyAsync(d0, pinned, n, omr::CopyKind::kHostToDevice, 0, 0);
  omr::memcpyAsync(d0b, d0, n, omr::CopyKind::kDeviceToDevice, 0, 0);
  omr::streamSynchronize(0, 0);
  EXPECT_EQ(static_cast<unsigned char*>(d0b)[n - 1], 3);

  EXPECT_THROW(omr::memcpy(back.data(), host.data(), n, omr::CopyKind::kDeviceToHost), omr::Error);
  EXPECT_THROW(omr::memcpy(d0, host.data(), n + 4096, omr::CopyKind::kHostToDevice), omr::Error);
  omr::hostFreePinned(pinned);
  omr::deviceFree(0, d0);
  omr::deviceFree(0, d0b);
  omr::deviceFree(1, d1);
}

TEST(Streams, CapturesAreReleasedOnTheHost) {
  struct Probe {
    std::thread::id* released_on = nullptr;
    ~Probe() { if (released_on) *released_on = std::this_thread::get_id(); }
  };
  std::thread::id released;
  auto probe = std::make_shared<Probe>();
  probe->released_on = &released;
  auto s = omr::streamFromPool(0, 0);
  omr::launch(0, s, "hold", [probe] {});
  probe.reset();
  std::this_thread::sleep_for(20ms);  // the task has run on the worker by now
  omr::streamSynchronize(0, s);
  EXPECT_EQ(released, std::this_thread::get_id());
}

TEST(Graphs, CaptureRecordsAndLaunchReplays) {
  omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Graph* g = omr::graphCreate();
  std::vector<int> order;
  omr::streamBeginCapture(0, s, g);
  EXPECT_TRUE(omr::streamIsCapturing(0, s));
  omr::launch(0, s, "a", [&] { order.push_back(1); });
  omr::launch(0, s, "b", [&] { order.push_back(2); });
  EXPECT_THROW(omr::streamSynchronize(0, s), omr::Error);  // not while capturing
  EXPECT_THROW(omr::streamQuery(0, s), omr::Error);
  EXPECT_THROW(omr::deviceSynchronize(0), omr::Error);
  omr::streamEndCapture(0, s);
  EXPECT_EQ(omr::graphTaskCount(g), 2u);
  omr::streamSynchronize(0, s);
  EXPECT_TRUE(order.empty());  // recorded, not run
  omr::graphLaunch(g, 0, s);
  omr::graphLaunch(g, 0, s);
  omr::streamSynchronize(0, s);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 1, 2}));
  omr::graphDestroy(g);
}

TEST(Graphs, AFailingGraphTaskIsReportedWithItsName) {
  omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Graph* g = omr::graphCreate();
  omr::streamBeginCapture(0, s, g);
  omr::launch(0, s, "bad_kernel", [] { throw std::runtime_error("boom"); });
  omr::streamEndCapture(0, s);
  omr::graphLaunch(g, 0, s);
  try {
    omr::streamSynchronize(0, s);
    FAIL() << "expected the task error";
  } catch (const omr::TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_kernel"), std::string::npos) << e.what();
  }
  omr::streamSynchronize(0, s);  // reported once
  omr::graphDestroy(g);
}

TEST(Memory, FormatsSizesAsCudasAllocatorDoes) {
  EXPECT_EQ(omr::formatBytes(512), "512 bytes");
  EXPECT_EQ(omr::formatBytes(1024), "1024 bytes");
  EXPECT_EQ(omr::formatBytes(164864), "161.00 KiB");
  EXPECT_EQ(omr::formatBytes(1 << 20), "1024.00 KiB");
  EXPECT_EQ(omr::formatBytes(2255872), "2.15 MiB");
  EXPECT_EQ(omr::formatBytes(size_t(12) << 30), "12.00 GiB");
}

namespace {
std::mutex g_records_mu;
std::vector<std::tuple<std::string, uint64_t, int64_t, int64_t, int>> g_records;
thread_local uint64_t g_current_tag = 0;
}  // namespace

TEST(Tracing, TasksReportStreamNameTagAndTimes) {
  g_records.clear();
  omr::setTracing([] { return g_current_tag; },
                  [](const omr::TaskRecord& r) {
                    std::lock_guard<std::mutex> lk(g_records_mu);
                    g_records.emplace_back(*r.name, r.tag, r.start_ns, r.end_ns, r.stream);
                  });
  omr::StreamId s = omr::streamFromPool(0, 0);
  g_current_tag = 7;
  omr::launch(0, s, "first", [] { std::this_thread::sleep_for(2ms); });
  g_current_tag = 8;
  omr::launch(0, s, "second", [] {});
  g_current_tag = 0;
  omr::streamSynchronize(0, s);
  omr::setTracing(nullptr, nullptr);
  omr::launch(0, s, "untraced", [] {});
  omr::streamSynchronize(0, s);
  std::lock_guard<std::mutex> lk(g_records_mu);
  ASSERT_EQ(g_records.size(), 2u);
  EXPECT_EQ(std::get<0>(g_records[0]), "first");
  EXPECT_EQ(std::get<1>(g_records[0]), 7u);
  EXPECT_EQ(std::get<0>(g_records[1]), "second");
  EXPECT_EQ(std::get<1>(g_records[1]), 8u);
  EXPECT_EQ(std::get<4>(g_records[0]), s);
  EXPECT_GE(std::get<3>(g_records[0]) - std::get<2>(g_records[0]), 2000000);  // ran 2 ms or more
  EXPECT_LE(std::get<3>(g_records[0]), std::get<2>(g_records[1]));              // in order
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(std::get<3>(g_records[1]), now);
  EXPECT_GT(std::get<2>(g_records[0]), now - int64_t(60) * 1000000000);  // Unix-epoch nanoseconds
}

namespace {
// Runs in a child process (stopWorkers() cannot be undone); returns what failed.
std::string stopWorkersScenario() {
  std::string failed;
  auto check = [&](bool ok, const char* what) {
    if (!ok) failed += std::string(what) + "\n";
  };
  // work queued behind a slow task has all run when stopWorkers() returns
  std::atomic<int> ran{0};
  omr::launch(0, 1, "slow", [&] {
    std::this_thread::sleep_for(100ms);
    ++ran;
  });
  for (int i = 0; i < 50; ++i) omr::launch(0, 1, "queued", [&] { ++ran; });
  omr::launch(1, 0, "other_device", [&] { ++ran; });
  omr::stopWorkers();
  check(ran.load() == 52, "stopWorkers() returned before the queued tasks ran");
  // later launches run on the launching thread, in order, before launch() returns
  std::thread::id ran_on;
  omr::launch(0, 1, "inline", [&] { ran_on = std::this_thread::get_id(); });
  check(ran_on == std::this_thread::get_id(), "a launch after stopWorkers() did not run on the launching thread");
  std::atomic<int> started_later{0};
  omr::launch(1, 5, "never_started_stream", [&] { ++started_later; });  // a stream first used now
  check(started_later.load() == 1, "a stream first used after stopWorkers() did not run its task");
  // errors stay asynchronous: raised at the next synchronization, with the task's name
  omr::launch(0, 1, "fails_inline", [] { throw std::runtime_error("boom"); });
  try {
    omr::streamSynchronize(0, 1);
    check(false, "the failing task's error was not raised at the sync");
  } catch (const omr::TaskError& e) {
    check(e.task == "fails_inline", "the error names another task");
  }
  // events, stream waits, copies and frees keep working
  omr::Event* e = omr::eventCreate(true);
  omr::eventRecord(e, 0, 1);
  check(omr::eventQuery(e), "an event recorded after stopWorkers() is not complete");
  omr::streamWaitEvent(0, 2, e);
  omr::eventSynchronize(e);
  omr::eventDestroy(e);
  void* d = omr::deviceMalloc(0, 64);
  int v = 7, back = 0;
  omr::memcpyAsync(d, &v, sizeof v, omr::CopyKind::kHostToDevice, 0, 0);
  omr::memcpyAsync(&back, d, sizeof v, omr::CopyKind::kDeviceToHost, 0, 0);
  omr::streamSynchronize(0, 0);
  check(back == 7, "a round trip through device memory after stopWorkers() lost the value");
  omr::deviceFree(0, d);
  omr::deviceSynchronize(0);
  omr::stopWorkers();  // a second call is harmless
  return failed;
}
}  // namespace

TEST(Streams, StopWorkersRunsQueuedWorkThenRunsLaunchesInline) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: no worker threads forked
  EXPECT_EXIT(
      {
        std::string failed = stopWorkersScenario();
        std::fprintf(stderr, "%s", failed.c_str());
        std::exit(failed.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}
