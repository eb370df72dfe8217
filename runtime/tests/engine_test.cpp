// The emulation engine's own behaviour, beyond the driver contract (which
// driver_conformance_test.cpp checks through the C ABI, for every driver):
// each stream has a worker thread of its own, so streams run concurrently,
// and the idle hook runs only once a worker's queue is empty.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <stdexcept>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "engine.h"
#include "inline_policy.h"

namespace eng = omr::engine;

using namespace std::chrono_literals;

// These tests check the workers' asynchrony (a launch returns before its task
// ran): no task runs inside a launch, whatever the cores' load
// (inline_policy.h); InlineLaunch.* (inline_launch_test.cpp) set the mode
// they test and put this one back.
class NeverInline : public ::testing::Environment {
  void SetUp() override { eng::setInlineMode(eng::InlineMode::kNever); }
};
const ::testing::Environment* const kNeverInline = ::testing::AddGlobalTestEnvironment(new NeverInline);

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

// ------------------------------------------------------------ help-first waits
// With the workers held (they claim nothing), a host thread that waits for a
// stream runs its queued tasks itself: in order, each once.
// (a wait that did not run the tasks would wait for ever: after 10 s the
// workers are released, and the test fails)
struct HeldWorkers {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog;
  HeldWorkers() {
    eng::holdWorkersForTesting(true);
    watchdog = std::thread([this] {
      std::unique_lock<std::mutex> lk(mu);
      if (!cv.wait_for(lk, std::chrono::seconds(10), [this] { return done; })) {
        ADD_FAILURE() << "the waiting host thread did not run the queued tasks";
        eng::holdWorkersForTesting(false);
      }
    });
  }
  ~HeldWorkers() {
    {
      std::lock_guard<std::mutex> lk(mu);
      done = true;
      cv.notify_all();
    }
    watchdog.join();
    eng::holdWorkersForTesting(false);
  }
};

struct Ran {
  std::mutex mu;
  std::vector<std::pair<int, std::thread::id>> tasks;  // (index, thread)
  void add(int i) {
    std::lock_guard<std::mutex> lk(mu);
    tasks.emplace_back(i, std::this_thread::get_id());
  }
};

TEST(HelpFirst, AWaitingHostThreadRunsTheQueuedTasksInOrderOnce) {
  auto s = eng::streamCreate(0, 11);
  Ran ran;
  {
    HeldWorkers held;
    for (int i = 0; i < 200; ++i) eng::launch(0, s, "t", [&ran, i] { ran.add(i); });
    EXPECT_TRUE(ran.tasks.empty());  // launches return at once, the tasks queued
    eng::streamSynchronize(0, s);
  }
  ASSERT_EQ(ran.tasks.size(), 200u);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(ran.tasks[i].first, i);
    EXPECT_EQ(ran.tasks[i].second, std::this_thread::get_id());
  }
  eng::streamDestroy(0, s);
}

TEST(HelpFirst, TwoThreadsWaitingForOneStreamRunEachTaskOnce) {
  auto s = eng::streamCreate(0, 12);
  Ran ran;
  std::set<std::thread::id> hosts;
  {
    HeldWorkers held;
    for (int i = 0; i < 2000; ++i) eng::launch(0, s, "t", [&ran, i] {
        ran.add(i);
        if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // (the waits overlap)
      });
    std::thread other([&] { eng::streamSynchronize(0, s); });
    hosts = {std::this_thread::get_id(), other.get_id()};
    eng::streamSynchronize(0, s);
    other.join();
  }
  ASSERT_EQ(ran.tasks.size(), 2000u);
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(ran.tasks[i].first, i);
    EXPECT_EQ(hosts.count(ran.tasks[i].second), 1u);  // every task ran on a waiting host thread
  }
  eng::streamDestroy(0, s);
}

TEST(HelpFirst, AWaitForAnEventHelpsTheStreamThatRecordsIt) {
  // stream b waits for an event recorded on stream a; synchronizing b runs
  // a's tasks up to the record first, then b's
  auto a = eng::streamCreate(0, 13), b = eng::streamCreate(0, 14);
  eng::Event* e = eng::eventCreate(false);
  Ran ran;
  {
    HeldWorkers held;
    for (int i = 0; i < 50; ++i) eng::launch(0, a, "a", [&ran, i] { ran.add(i); });
    eng::eventRecord(e, 0, a);
    for (int i = 0; i < 10; ++i) eng::launch(0, a, "a_after", [&ran, i] { ran.add(1000 + i); });
    eng::streamWaitEvent(0, b, e);
    for (int i = 0; i < 50; ++i) eng::launch(0, b, "b", [&ran, i] { ran.add(100 + i); });
    eng::streamSynchronize(0, b);
    ASSERT_EQ(ran.tasks.size(), 100u);  // a's tasks after the record are not b's to run
    for (int i = 0; i < 50; ++i) EXPECT_EQ(ran.tasks[i].first, i);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(ran.tasks[50 + i].first, 100 + i);
    for (auto& t : ran.tasks) EXPECT_EQ(t.second, std::this_thread::get_id());
    eng::eventSynchronize(e);  // (recorded: nothing to wait for)
  }
  eng::streamSynchronize(0, a);
  EXPECT_EQ(ran.tasks.size(), 110u);
  eng::eventDestroy(e);
  eng::streamDestroy(0, a);
  eng::streamDestroy(0, b);
}

TEST(HelpFirst, AnEventSynchronizeRunsTheTasksUpToTheRecord) {
  auto s = eng::streamCreate(0, 15);
  eng::Event* e = eng::eventCreate(false);
  Ran ran;
  {
    HeldWorkers held;
    for (int i = 0; i < 20; ++i) eng::launch(0, s, "t", [&ran, i] { ran.add(i); });
    eng::eventRecord(e, 0, s);
    eng::launch(0, s, "after", [&ran] { ran.add(99); });
    eng::eventSynchronize(e);
    EXPECT_TRUE(eng::eventQuery(e));
    EXPECT_EQ(ran.tasks.size(), 20u);
  }
  eng::streamSynchronize(0, s);
  EXPECT_EQ(ran.tasks.size(), 21u);
  eng::eventDestroy(e);
  eng::streamDestroy(0, s);
}

TEST(HelpFirst, AHelpedTasksErrorIsRaisedAtTheSynchronizeAndTheStreamGoesOn) {
  auto s = eng::streamCreate(0, 16);
  Ran ran;
  {
    HeldWorkers held;
    eng::launch(0, s, "fails", [] { throw std::runtime_error("bad data"); });
    eng::launch(0, s, "next", [&ran] { ran.add(1); });
    EXPECT_THROW(eng::streamSynchronize(0, s), omr::TaskError);
    EXPECT_EQ(ran.tasks.size(), 1u);
    EXPECT_NO_THROW(eng::streamSynchronize(0, s));  // raised once
  }
  eng::streamDestroy(0, s);
}

TEST(HelpFirst, ATaskThatWaitsForTheHostRunsOnlyOnAWorker) {
  auto s = eng::streamCreate(0, 17);
  Ran ran;
  std::thread::id gate_thread;
  {
    HeldWorkers held;
    eng::launch(0, s, "before", [&ran] { ran.add(0); });
    omr::HostTask gate{[](void* u) -> const char* {
                         *static_cast<std::thread::id*>(u) = std::this_thread::get_id();
                         return nullptr;
                       },
                       &gate_thread, nullptr, eng::kTaskWaitsForHost};
    eng::launch(0, s, "gate", gate);
    eng::launch(0, s, "after", [&ran] { ran.add(1); });
    std::thread release([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      eng::holdWorkersForTesting(false);
    });
    eng::streamSynchronize(0, s);  // runs "before", leaves the gate to the worker once released
    release.join();
  }
  ASSERT_EQ(ran.tasks.size(), 2u);
  EXPECT_EQ(ran.tasks[0].second, std::this_thread::get_id());
  EXPECT_NE(gate_thread, std::this_thread::get_id());
  EXPECT_NE(gate_thread, std::thread::id());
  eng::streamDestroy(0, s);
}

std::atomic<int> g_host_work_begins{0}, g_host_work_ends{0};

TEST(HelpFirst, TheHostWorkHookBracketsTheHelpedTasks) {
  eng::setHostWorkHook([](int begin) { (begin ? g_host_work_begins : g_host_work_ends)++; });
  auto s = eng::streamCreate(0, 18);
  std::atomic<int> inside{-1};
  {
    HeldWorkers held;
    eng::launch(0, s, "t", [&inside] { inside = g_host_work_begins - g_host_work_ends; });
    eng::streamSynchronize(0, s);
  }
  eng::setHostWorkHook(nullptr);
  EXPECT_EQ(inside.load(), 1);
  EXPECT_EQ(g_host_work_begins.load(), g_host_work_ends.load());
  EXPECT_GE(g_host_work_begins.load(), 1);
  eng::streamDestroy(0, s);
}

// ------------------------------------------------------------ one thread team
// A task that runs parallel regions (workRunsParallel) stays on its stream's
// worker, whose OpenMP team persists: a host thread that claimed it hands
// the rest back, and host threads leave the stream to its worker until 8
// tasks in a row ran without parallel regions.

TEST(OneTeam, AHostThreadThatRanAParallelTaskHandsTheRestBackToTheWorker) {
  auto s = eng::streamCreate(0, 19);
  Ran ran;
  std::atomic<int> on_host{-1};
  {
    HeldWorkers held;
    eng::launch(0, s, "parallel", [&] {
      ran.add(0);
      on_host = eng::workRunsParallel() ? 1 : 0;
      eng::holdWorkersForTesting(false);  // (the worker may claim what is handed back)
    });
    for (int i = 1; i < 5; ++i) eng::launch(0, s, "t", [&ran, i] { ran.add(i); });
    eng::streamSynchronize(0, s);
  }
  ASSERT_EQ(ran.tasks.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ran.tasks[i].first, i);
  EXPECT_EQ(ran.tasks[0].second, std::this_thread::get_id());  // claimed by the synchronize
  EXPECT_EQ(on_host.load(), 1);
  for (int i = 1; i < 5; ++i) EXPECT_NE(ran.tasks[i].second, std::this_thread::get_id()) << i;
  // on the worker the call says so
  eng::launch(0, s, "parallel", [&] { on_host = eng::workRunsParallel() ? 1 : 0; });
  while (!eng::streamQuery(0, s)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(on_host.load(), 0);
  eng::streamSynchronize(0, s);
  eng::streamDestroy(0, s);
}

TEST(OneTeam, HostThreadsLeaveTheStreamToItsWorkerUntil8SerialTasksRan) {
  auto s = eng::streamCreate(0, 20);
  eng::launch(0, s, "parallel", [] { eng::workRunsParallel(); });
  eng::streamSynchronize(0, s);
  Ran ran;
  size_t ran_before_release = 99;
  eng::holdWorkersForTesting(true);
  for (int i = 0; i < 8; ++i) eng::launch(0, s, "t", [&ran, i] { ran.add(i); });
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    {
      std::lock_guard<std::mutex> lk(ran.mu);
      ran_before_release = ran.tasks.size();
    }
    eng::holdWorkersForTesting(false);
  });
  eng::streamSynchronize(0, s);  // sleeps: the tasks are the worker's
  release.join();
  EXPECT_EQ(ran_before_release, 0u);
  ASSERT_EQ(ran.tasks.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ran.tasks[i].first, i);
    EXPECT_NE(ran.tasks[i].second, std::this_thread::get_id()) << i;
  }
  // 8 serial tasks ran: a waiting host thread runs the queued tasks again
  Ran after;
  {
    HeldWorkers held;
    for (int i = 0; i < 3; ++i) eng::launch(0, s, "t", [&after, i] { after.add(i); });
    eng::streamSynchronize(0, s);
  }
  ASSERT_EQ(after.tasks.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(after.tasks[i].second, std::this_thread::get_id()) << i;
  eng::streamDestroy(0, s);
}
