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

#include "engine.h"

namespace eng = omr::engine;

using namespace std::chrono_literals;

TEST(Devices, CountAndProperties) {
  ASSERT_GE(eng::deviceCount(), 2);  // default 2 (ctest does not set the env)
  auto p = eng::deviceProperties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_GE(p.processor_count, 1);
  EXPECT_THROW(eng::deviceProperties(eng::deviceCount()), eng::Error);
  EXPECT_THROW(eng::deviceProperties(-1), eng::Error);
}

TEST(Devices, ParseByteSize) {
  EXPECT_EQ(eng::parseByteSize("1024"), 1024u);
  EXPECT_EQ(eng::parseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(eng::parseByteSize("4G"), 4ull << 30);
  EXPECT_EQ(eng::parseByteSize("4GiB"), 4ull << 30);
  EXPECT_EQ(eng::parseByteSize("1.5k"), 1536u);
  EXPECT_THROW(eng::parseByteSize("lots"), eng::Error);
  EXPECT_THROW(eng::parseByteSize("4X"), eng::Error);
}

TEST(Memory, AllocFreeAccounting) {
  size_t free0, total;
  eng::memGetInfo(1, &free0, &total);
  void* p = eng::deviceMalloc(1, 1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  size_t free1;
  eng::memGetInfo(1, &free1, nullptr);
  EXPECT_EQ(free0 - free1, 1024u);  // rounded to 256
  EXPECT_EQ(eng::pointerDevice(p), 1);
  EXPECT_EQ(eng::pointerDevice(static_cast<char*>(p) + 999), 1);
  eng::deviceFree(1, p);
  eng::memGetInfo(1, &free1, nullptr);
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(eng::deviceMalloc(0, 0), nullptr);
  int on_stack;
  EXPECT_EQ(eng::pointerDevice(&on_stack), -1);
  EXPECT_THROW(eng::deviceFree(0, &on_stack), eng::Error);
}

TEST(Memory, OutOfMemoryIsAnErrorAndDeviceStaysUsable) {
  size_t free0, total;
  eng::memGetInfo(0, &free0, &total);
  try {
    eng::deviceMalloc(0, total + 1);
    FAIL() << "expected OutOfMemoryError";
  } catch (const eng::OutOfMemoryError& e) {
    EXPECT_EQ(e.code(), eng::ErrorCode::kOutOfMemory);
    EXPECT_EQ(e.requested, total + 1);
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  void* p = eng::deviceMalloc(0, 4096);
  EXPECT_NE(p, nullptr);
  eng::deviceFree(0, p);
  size_t free1;
  eng::memGetInfo(0, &free1, nullptr);
  EXPECT_EQ(free1, free0);
}

TEST(Memory, Pinned) {
  void* p = eng::hostMallocPinned(100);
  EXPECT_TRUE(eng::isPinned(p));
  EXPECT_TRUE(eng::isPinned(static_cast<char*>(p) + 50));
  int x;
  EXPECT_FALSE(eng::isPinned(&x));
  EXPECT_FALSE(eng::isPinned(nullptr));
  eng::hostFreePinned(p);
  EXPECT_FALSE(eng::isPinned(p));
  EXPECT_THROW(eng::hostFreePinned(&x), eng::Error);
}

TEST(Streams, InOrderAndAsynchronous) {
  std::atomic<bool> release{false};
  std::vector<int> order;
  eng::launch(0, eng::kDefaultStream, "block", [&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  for (int i = 0; i < 100; ++i) eng::launch(0, eng::kDefaultStream, "push", [&order, i] { order.push_back(i); });
  // launch returned while the stream is blocked: execution is asynchronous
  EXPECT_FALSE(eng::streamQuery(0, eng::kDefaultStream));
  EXPECT_TRUE(order.empty());
  release = true;
  eng::streamSynchronize(0, eng::kDefaultStream);
  EXPECT_TRUE(eng::streamQuery(0, eng::kDefaultStream));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(Streams, PoolAndPriorities) {
  auto a = eng::streamFromPool(0, 0), b = eng::streamFromPool(0, -1);
  EXPECT_NE(a, eng::kDefaultStream);
  EXPECT_EQ(eng::streamPriority(a), 0);
  EXPECT_EQ(eng::streamPriority(b), -1);
  EXPECT_EQ(eng::streamPriority(eng::kDefaultStream), 0);
  EXPECT_THROW(eng::launch(0, 1000, "x", [] {}), eng::Error);
  EXPECT_THROW(eng::launch(99, 0, "x", [] {}), eng::Error);
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
  auto s1 = eng::streamFromPool(1, 0), s2 = eng::streamFromPool(1, -1);
  eng::launch(1, s1, "a", task);
  eng::launch(1, s2, "b", task);
  EXPECT_NO_THROW(eng::deviceSynchronize(1));
}

// The idle hook runs on the worker once it ran every queued task and woke
// the host thread that slept in a synchronize; tasks run on a worker, the
// launching thread is not one.
std::atomic<int> g_idle_calls{0};
std::atomic<int> g_idle_on_worker{0};

TEST(Streams, IdleHookRunsOnTheWorkerOnceItsQueueIsEmpty) {
  EXPECT_FALSE(eng::onStreamWorker());
  eng::setIdleHook([] {
    g_idle_calls++;
    g_idle_on_worker += eng::onStreamWorker();
  });
  auto s = eng::streamFromPool(0, 0);
  std::atomic<bool> on_worker{false}, release{false};
  std::atomic<int> ran{0};
  eng::launch(0, s, "first", [&] {
    on_worker = eng::onStreamWorker();
    while (!release) std::this_thread::sleep_for(1ms);
    ran++;
  });
  for (int i = 0; i < 5; ++i) eng::launch(0, s, "next", [&] { ran++; });
  std::this_thread::sleep_for(20ms);
  const int while_busy = g_idle_calls.load();  // the worker has queued work: not idle
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);  // the synchronize below sleeps by then
    release = true;
  });
  eng::streamSynchronize(0, s);
  releaser.join();
  auto t0 = std::chrono::steady_clock::now();
  while (g_idle_calls.load() == while_busy && std::chrono::steady_clock::now() - t0 < 5s)
    std::this_thread::sleep_for(1ms);
  eng::setIdleHook(nullptr);
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
      auto s = eng::streamFromPool(dev, t % 3 == 0 ? -1 : 0);
      for (int i = 0; i < 500; ++i) eng::launch(dev, s, "add", [&sum, i] { sum += i; });
      eng::streamSynchronize(dev, s);
    });
  }
  for (auto& th : threads) th.join();
  eng::deviceSynchronize(0);
  eng::deviceSynchronize(1);
  EXPECT_EQ(sum.load(), 8L * (499L * 500 / 2));
}

TEST(Errors, TaskErrorRaisedAtSyncAndRuntimeStaysUsable) {
  auto s = eng::streamFromPool(0, 0);
  std::atomic<int> after{0};
  eng::launch(0, s, "my_failing_kernel", [] { throw std::runtime_error("index 7 out of range"); });
  eng::launch(0, s, "after", [&] { after = 1; });
  try {
    eng::streamSynchronize(0, s);
    FAIL() << "expected TaskError";
  } catch (const eng::TaskError& e) {
    EXPECT_EQ(e.task, "my_failing_kernel");
    EXPECT_NE(std::string(e.what()).find("index 7 out of range"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("my_failing_kernel"), std::string::npos);
  }
  EXPECT_EQ(after.load(), 1);
  // reported once, then the stream works again
  EXPECT_NO_THROW(eng::streamSynchronize(0, s));
  eng::launch(0, s, "ok", [&] { after = 2; });
  EXPECT_NO_THROW(eng::streamSynchronize(0, s));
  EXPECT_EQ(after.load(), 2);
}

TEST(Errors, DeviceSynchronizeReportsAnyStream) {
  auto s = eng::streamFromPool(1, -1);
  eng::launch(1, s, "bad", [] { throw std::runtime_error("boom"); });
  EXPECT_THROW(eng::deviceSynchronize(1), eng::TaskError);
  EXPECT_NO_THROW(eng::deviceSynchronize(1));
}

TEST(Events, RecordWaitQuerySync) {
  auto s1 = eng::streamFromPool(0, 0), s2 = eng::streamFromPool(0, -1);
  eng::Event* ev = eng::eventCreate(false);
  EXPECT_TRUE(eng::eventQuery(ev));  // never recorded
  EXPECT_EQ(eng::eventDevice(ev), -1);
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  eng::launch(0, s1, "block", [&] {
    while (!release) std::this_thread::sleep_for(1ms);
    value = 1;
  });
  eng::eventRecord(ev, 0, s1);
  EXPECT_EQ(eng::eventDevice(ev), 0);
  eng::streamWaitEvent(0, s2, ev);
  int seen = -1;
  eng::launch(0, s2, "read", [&] { seen = value.load(); });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(eng::eventQuery(ev));
  EXPECT_FALSE(eng::streamQuery(0, s2));  // s2 is held by the event
  release = true;
  eng::eventSynchronize(ev);
  EXPECT_TRUE(eng::eventQuery(ev));
  eng::streamSynchronize(0, s2);
  EXPECT_EQ(seen, 1);
  eng::eventDestroy(ev);
}

TEST(Events, ElapsedTime) {
  eng::Event* a = eng::eventCreate(true);
  eng::Event* b = eng::eventCreate(true);
  eng::Event* untimed = eng::eventCreate(false);
  eng::eventRecord(a, 0, 0);
  eng::launch(0, 0, "sleep", [] { std::this_thread::sleep_for(30ms); });
  eng::eventRecord(b, 0, 0);
  eng::eventRecord(untimed, 0, 0);
  eng::eventSynchronize(b);
  double ms = eng::eventElapsedMs(a, b);
  EXPECT_GE(ms, 25.0);
  EXPECT_LT(ms, 5000.0);
  EXPECT_THROW(eng::eventElapsedMs(a, untimed), eng::Error);
  eng::eventDestroy(a);
  eng::eventDestroy(b);
  eng::eventDestroy(untimed);
}

TEST(Events, DestroyWhilePendingIsSafe) {
  std::atomic<bool> release{false};
  eng::launch(0, 0, "block", [&] { while (!release) std::this_thread::sleep_for(1ms); });
  eng::Event* e = eng::eventCreate(true);
  eng::eventRecord(e, 0, 0);
  eng::eventDestroy(e);
  release = true;
  EXPECT_NO_THROW(eng::deviceSynchronize(0));
}

TEST(Copies, AllDirectionsSyncAndAsync) {
  const size_t n = 1 << 16;
  std::vector<unsigned char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7);
  void* d0 = eng::deviceMalloc(0, n);
  void* d0b = eng::deviceMalloc(0, n);
  void* d1 = eng::deviceMalloc(1, n);
  eng::memcpy(d0, host.data(), n, eng::CopyKind::kHostToDevice);
  eng::memcpy(d0b, d0, n, eng::CopyKind::kDeviceToDevice);
  eng::memcpy(d1, d0b, n, eng::CopyKind::kDeviceToDevice);  // across devices
  eng::memcpy(back.data(), d1, n, eng::CopyKind::kDeviceToHost);
  EXPECT_EQ(back, host);

  unsigned char* pinned = static_cast<unsigned char*>(eng::hostMallocPinned(n));
  auto s = eng::streamFromPool(1, 0);
  std::atomic<bool> release{false};
  eng::launch(1, s, "block", [&] { while (!release) std::this_thread::sleep_for(1ms); });
  std::memset(pinned, 0, n);
  eng::memcpyAsync(pinned, d1, n, eng::CopyKind::kDeviceToHost, 1, s);
  EXPECT_EQ(pinned[1], 0);  // not yet copied: the stream is held
  release = true;
  eng::streamSynchronize(1, s);
  EXPECT_EQ(std::memcmp(pinned, host.data(), n), 0);
  std::memset(pinned, 3, n);
  eng::memcpyAsync(d0, pinned, n, eng::CopyKind::kHostToDevice, 0, 0);
  eng::memcpyAsync(d0b, d0, n, eng::CopyKind::kDeviceToDevice, 0, 0);
  eng::streamSynchronize(0, 0);
  EXPECT_EQ(static_cast<unsigned char*>(d0b)[n - 1], 3);

  EXPECT_THROW(eng::memcpy(back.data(), host.data(), n, eng::CopyKind::kDeviceToHost), eng::Error);
  EXPECT_THROW(eng::memcpy(d0, host.data(), n + 4096, eng::CopyKind::kHostToDevice), eng::Error);
  eng::hostFreePinned(pinned);
  eng::deviceFree(0, d0);
  eng::deviceFree(0, d0b);
  eng::deviceFree(1, d1);
}

TEST(Streams, CapturesAreReleasedOnTheHost) {
  struct Probe {
    std::thread::id* released_on = nullptr;
    ~Probe() { if (released_on) *released_on = std::this_thread::get_id(); }
  };
  std::thread::id released;
  auto probe = std::make_shared<Probe>();
  probe->released_on = &released;
  auto s = eng::streamFromPool(0, 0);
  eng::launch(0, s, "hold", [probe] {});
  probe.reset();
  std::this_thread::sleep_for(20ms);  // the task has run on the worker by now
  eng::streamSynchronize(0, s);
  EXPECT_EQ(released, std::this_thread::get_id());
}

TEST(Graphs, CaptureRecordsAndLaunchReplays) {
  eng::StreamId s = eng::streamFromPool(0, 0);
  eng::Graph* g = eng::graphCreate();
  std::vector<int> order;
  eng::streamBeginCapture(0, s, g);
  EXPECT_TRUE(eng::streamIsCapturing(0, s));
  eng::launch(0, s, "a", [&] { order.push_back(1); });
  eng::launch(0, s, "b", [&] { order.push_back(2); });
  EXPECT_THROW(eng::streamSynchronize(0, s), eng::Error);  // not while capturing
  EXPECT_THROW(eng::streamQuery(0, s), eng::Error);
  EXPECT_THROW(eng::deviceSynchronize(0), eng::Error);
  eng::streamEndCapture(0, s);
  EXPECT_EQ(eng::graphTaskCount(g), 2u);
  eng::streamSynchronize(0, s);
  EXPECT_TRUE(order.empty());  // recorded, not run
  eng::graphLaunch(g, 0, s);
  eng::graphLaunch(g, 0, s);
  eng::streamSynchronize(0, s);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 1, 2}));
  eng::graphDestroy(g);
}

TEST(Graphs, AFailingGraphTaskIsReportedWithItsName) {
  eng::StreamId s = eng::streamFromPool(0, 0);
  eng::Graph* g = eng::graphCreate();
  eng::streamBeginCapture(0, s, g);
  eng::launch(0, s, "bad_kernel", [] { throw std::runtime_error("boom"); });
  eng::streamEndCapture(0, s);
  eng::graphLaunch(g, 0, s);
  try {
    eng::streamSynchronize(0, s);
    FAIL() << "expected the task error";
  } catch (const eng::TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_kernel"), std::string::npos) << e.what();
  }
  eng::streamSynchronize(0, s);  // reported once
  eng::graphDestroy(g);
}

TEST(Memory, FormatsSizesAsCudasAllocatorDoes) {
  EXPECT_EQ(eng::formatBytes(512), "512 bytes");
  EXPECT_EQ(eng::formatBytes(1024), "1024 bytes");
  EXPECT_EQ(eng::formatBytes(164864), "161.00 KiB");
  EXPECT_EQ(eng::formatBytes(1 << 20), "1024.00 KiB");
  EXPECT_EQ(eng::formatBytes(2255872), "2.15 MiB");
  EXPECT_EQ(eng::formatBytes(size_t(12) << 30), "12.00 GiB");
}

namespace {
std::mutex g_records_mu;
std::vector<std::tuple<std::string, uint64_t, int64_t, int64_t, int>> g_records;
thread_local uint64_t g_current_tag = 0;
}  // namespace

TEST(Tracing, TasksReportStreamNameTagAndTimes) {
  g_records.clear();
  eng::setTracing([] { return g_current_tag; },
                  [](const eng::TaskRecord& r) {
                    std::lock_guard<std::mutex> lk(g_records_mu);
                    g_records.emplace_back(r.name, r.tag, r.start_ns, r.end_ns, r.stream);
                  });
  eng::StreamId s = eng::streamFromPool(0, 0);
  g_current_tag = 7;
  eng::launch(0, s, "first", [] { std::this_thread::sleep_for(2ms); });
  g_current_tag = 8;
  eng::launch(0, s, "second", [] {});
  g_current_tag = 0;
  eng::streamSynchronize(0, s);
  eng::setTracing(nullptr, nullptr);
  eng::launch(0, s, "untraced", [] {});
  eng::streamSynchronize(0, s);
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
  eng::launch(0, 1, "slow", [&] {
    std::this_thread::sleep_for(100ms);
    ++ran;
  });
  for (int i = 0; i < 50; ++i) eng::launch(0, 1, "queued", [&] { ++ran; });
  eng::launch(1, 0, "other_device", [&] { ++ran; });
  eng::stopWorkers();
  check(ran.load() == 52, "stopWorkers() returned before the queued tasks ran");
  // later launches run on the launching thread, in order, before launch() returns
  std::thread::id ran_on;
  eng::launch(0, 1, "inline", [&] { ran_on = std::this_thread::get_id(); });
  check(ran_on == std::this_thread::get_id(), "a launch after stopWorkers() did not run on the launching thread");
  std::atomic<int> started_later{0};
  eng::launch(1, 5, "never_started_stream", [&] { ++started_later; });  // a stream first used now
  check(started_later.load() == 1, "a stream first used after stopWorkers() did not run its task");
  // errors stay asynchronous: raised at the next synchronization, with the task's name
  eng::launch(0, 1, "fails_inline", [] { throw std::runtime_error("boom"); });
  try {
    eng::streamSynchronize(0, 1);
    check(false, "the failing task's error was not raised at the sync");
  } catch (const eng::TaskError& e) {
    check(e.task == "fails_inline", "the error names another task");
  }
  // events, stream waits, copies and frees keep working
  eng::Event* e = eng::eventCreate(true);
  eng::eventRecord(e, 0, 1);
  check(eng::eventQuery(e), "an event recorded after stopWorkers() is not complete");
  eng::streamWaitEvent(0, 2, e);
  eng::eventSynchronize(e);
  eng::eventDestroy(e);
  void* d = eng::deviceMalloc(0, 64);
  int v = 7, back = 0;
  eng::memcpyAsync(d, &v, sizeof v, eng::CopyKind::kHostToDevice, 0, 0);
  eng::memcpyAsync(&back, d, sizeof v, eng::CopyKind::kDeviceToHost, 0, 0);
  eng::streamSynchronize(0, 0);
  check(back == 7, "a round trip through device memory after stopWorkers() lost the value");
  eng::deviceFree(0, d);
  eng::deviceSynchronize(0);
  eng::stopWorkers();  // a second call is harmless
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
