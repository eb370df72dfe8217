// The emulation engine's own behaviour, beyond the driver contract (which
// driver_conformance_test.cpp checks through the C ABI, for every driver):
// each stream has a worker thread of its own, so streams run concurrently,
// and the idle hook runs only once a worker's queue is empty.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "engine.h"

namespace eng = omr::engine;

using namespace std::chrono_literals;

TEST(Streams, TwoStreamsRunConcurrently) {
  // each task waits for the other to start: only possible if they overlap
  std::atomic<int> started{0};
  auto task = [&] {
    started++;
    auto t0 = std::chrono::steady_clock::now();
    while (started < 2 && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
    if (started < 2) throw std::runtime_error("streams did not overlap");
  };
  auto s1 = eng::streamCreate(1, 1), s2 = eng::streamCreate(1, 2);
  eng::launch(1, s1, "a", task);
  eng::launch(1, s2, "b", task);
  EXPECT_NO_THROW(eng::deviceSynchronize(1));
  eng::streamDestroy(1, s1);
  eng::streamDestroy(1, s2);
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
  auto s = eng::streamCreate(0, 3);
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
  eng::streamDestroy(0, s);
}
