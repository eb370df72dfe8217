// Inline launches (inline_policy.h): a task launched onto an idle stream runs
// on the launching thread when the mode says so ("always"; "auto" while the
// process's threads wait for cores), in stream order, with its error raised
// at the next synchronize; work that may block, or waits for the host, and
// work launched onto a busy stream go to the worker.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine.h"
#include "inline_policy.h"

namespace eng = omr::engine;

using namespace std::chrono_literals;

namespace {

// Sets the mode for one test, then puts back "never" (engine_test.cpp's).
struct Mode {
  explicit Mode(eng::InlineMode m) { eng::setInlineMode(m); }
  ~Mode() { eng::setInlineMode(eng::InlineMode::kNever); }
};

// Launches `f` with the task flags `flags`.
void launchFlagged(eng::StreamId s, const char* name, std::function<void()> f, uint32_t flags) {
  auto* owned = new std::function<void()>(std::move(f));
  eng::launch(0, s, name,
              omr::HostTask{[](void* u) -> const char* {
                              (*static_cast<std::function<void()>*>(u))();
                              return nullptr;
                            },
                            owned, [](void* u) { delete static_cast<std::function<void()>*>(u); }, flags});
}

}  // namespace

TEST(InlineLaunch, AlwaysRunsATaskOnAnIdleStreamInsideTheLaunch) {
  Mode mode(eng::InlineMode::kAlways);
  auto s = eng::streamCreate(0, 31);
  std::thread::id ran_on;
  bool on_worker = true;
  eng::launch(0, s, "t", [&] {
    ran_on = std::this_thread::get_id();
    on_worker = eng::onStreamWorker();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // before the launch returned
  EXPECT_FALSE(on_worker);
  EXPECT_TRUE(eng::streamQuery(0, s));
  eng::streamSynchronize(0, s);
  eng::streamDestroy(0, s);
}

TEST(InlineLaunch, NeverHandsTheTaskToTheWorker) {
  Mode mode(eng::InlineMode::kNever);
  auto s = eng::streamCreate(0, 32);
  std::atomic<bool> on_worker{false}, ran{false};
  eng::launch(0, s, "t", [&] {
    on_worker = eng::onStreamWorker();
    ran = true;
  });
  // (no synchronize: a waiting host thread would run it itself, help-first)
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!ran && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(on_worker.load());
  eng::streamSynchronize(0, s);
  eng::streamDestroy(0, s);
}

TEST(InlineLaunch, AnInlineTasksErrorIsRaisedAtTheNextSynchronizeNotAtTheLaunch) {
  Mode mode(eng::InlineMode::kAlways);
  auto s = eng::streamCreate(0, 33);
  std::thread::id ran_on;
  EXPECT_NO_THROW(eng::launch(0, s, "fails inline", [&] {
    ran_on = std::this_thread::get_id();
    throw std::runtime_error("bad index");
  }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  int after = 0;
  eng::launch(0, s, "after", [&after] { after = 1; });
  EXPECT_EQ(after, 1);  // the stream goes on
  try {
    eng::streamSynchronize(0, s);
    ADD_FAILURE() << "the inline task's error was not raised at the synchronize";
  } catch (const omr::TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("fails inline"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad index"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(eng::streamSynchronize(0, s));  // raised once
  eng::streamDestroy(0, s);
}

TEST(InlineLaunch, WorkThatMayBlockOrWaitsForTheHostAndWorkBehindItAreNotRunInTheLaunch) {
  Mode mode(eng::InlineMode::kAlways);
  auto s = eng::streamCreate(0, 34);
  for (uint32_t flags : {eng::kTaskMayBlock, eng::kTaskWaitsForHost}) {
    std::atomic<bool> release{false};
    std::vector<int> order;
    // the stream is held by work that waits (here for the host): not run in
    // its launch, and what is launched behind it queues (the stream is busy)
    launchFlagged(s, "held", [&release, &order] {
      while (!release) std::this_thread::sleep_for(1ms);
      order.push_back(0);
    }, flags);
    eng::launch(0, s, "behind", [&order] { order.push_back(1); });
    EXPECT_TRUE(order.empty()) << "flags " << flags;  // neither ran inside its launch
    release = true;
    eng::streamSynchronize(0, s);
    EXPECT_EQ(order, (std::vector<int>{0, 1}));
    // on an idle stream too: it runs after its launch returned (on a worker,
    // or, may-block work, on a host thread that waits for the stream)
    std::atomic<bool> launched{false};
    std::thread::id ran_on;
    bool ran_after_launch = false;
    launchFlagged(s, "flagged on an idle stream", [&] {
      ran_on = std::this_thread::get_id();
      ran_after_launch = launched.load();
    }, flags);
    launched = true;
    eng::streamSynchronize(0, s);
    EXPECT_TRUE(ran_after_launch) << "flags " << flags;
    if (flags == eng::kTaskWaitsForHost) EXPECT_NE(ran_on, std::this_thread::get_id());
  }
  eng::streamDestroy(0, s);
}

TEST(InlineLaunch, AStreamWaitingForAnEventQueuesItsWorkBehindTheWait) {
  Mode mode(eng::InlineMode::kAlways);
  auto a = eng::streamCreate(0, 35), b = eng::streamCreate(0, 36);
  eng::Event* e = eng::eventCreate(false);
  std::atomic<bool> release{false};
  std::atomic<int> step{0};
  omr::HostTask gate{[](void* u) -> const char* {
                       auto* r = static_cast<std::atomic<bool>*>(u);
                       while (!*r) std::this_thread::sleep_for(1ms);
                       return nullptr;
                     },
                     &release, nullptr, eng::kTaskWaitsForHost};
  eng::launch(0, a, "gate", gate);
  eng::launch(0, a, "a", [&step] { step = 1; });
  eng::eventRecord(e, 0, a);
  eng::streamWaitEvent(0, b, e);
  int seen = -1;
  eng::launch(0, b, "b", [&] { seen = step.load(); });  // not inline: b waits for the event
  EXPECT_EQ(seen, -1);
  release = true;
  eng::streamSynchronize(0, b);
  EXPECT_EQ(seen, 1);
  eng::eventDestroy(e);
  eng::streamDestroy(0, a);
  eng::streamDestroy(0, b);
}

TEST(InlineLaunch, AutoRunsLaunchesInlineWhileItsThreadsWaitForCores) {
  // more busy threads than the process's cores: the launching thread waits
  // for a core (its schedstat says so), and launches onto an idle stream
  // then run on it
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cores = CPU_COUNT(&set);
  Mode mode(eng::InlineMode::kAuto);
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < 2 * cores; ++i)
    hogs.emplace_back([&stop] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  auto s = eng::streamCreate(0, 37);
  bool inline_seen = false;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!inline_seen && std::chrono::steady_clock::now() < until) {
    std::thread::id ran_on;
    eng::launch(0, s, "probe", [&ran_on] {
      ran_on = std::this_thread::get_id();
      auto t0 = std::chrono::steady_clock::now();  // a little work (the threads want cores)
      while (std::chrono::steady_clock::now() - t0 < 100us) {
      }
    });
    eng::streamSynchronize(0, s);
    inline_seen = ran_on == std::this_thread::get_id() && eng::coreContentionInline();
  }
  stop = true;
  for (auto& t : hogs) t.join();
  EXPECT_TRUE(inline_seen) << "smoothed wait fraction " << eng::coreContentionSmoothed();
  eng::streamDestroy(0, s);
}

// CoreContention's decisions, from given samples.
TEST(CoreContention, EntersAtSustainedWaitsAndLeavesAfterItsDwell) {
  eng::CoreContention c;
  int64_t t = 1'000'000'000;
  const int64_t ms = 1'000'000;
  for (int i = 0; i < 20; ++i) c.feed(0, 2 * ms, t += 2 * ms);  // no waits: the workers
  EXPECT_FALSE(c.inlineNow());
  c.feed(1 * ms, 2 * ms, t += 2 * ms);  // one sample of 50%: not yet (smoothed 0.15)
  EXPECT_FALSE(c.inlineNow());
  c.feed(1 * ms, 2 * ms, t += 2 * ms);  // sustained: inline
  EXPECT_TRUE(c.inlineNow());
  const int64_t entered = t;
  // waits end (launching inline, the threads have their cores): stays inline for its dwell
  while (c.inlineNow() && t - entered < 10 * eng::CoreContention::kMinDwellNs) c.feed(0, 2 * ms, t += 2 * ms);
  EXPECT_FALSE(c.inlineNow());
  EXPECT_GE(t - entered, eng::CoreContention::kMinDwellNs);
  EXPECT_LE(t - entered, eng::CoreContention::kMinDwellNs + 20 * ms);
}

TEST(CoreContention, EachProbeThatMeetsContentionAgainDoublesTheDwellAndASettledPeriodResetsIt) {
  eng::CoreContention c;
  int64_t t = 1'000'000'000;
  const int64_t ms = 1'000'000;
  auto contend = [&] {
    while (!c.inlineNow()) c.feed(2 * ms, 2 * ms, t += 2 * ms);
  };
  auto calm = [&] {
    while (c.inlineNow()) c.feed(0, 2 * ms, t += 2 * ms);
  };
  contend();
  EXPECT_EQ(c.dwellNs(), eng::CoreContention::kMinDwellNs);
  for (int probe = 1; probe <= 3; ++probe) {
    calm();  // the dwell ends: the workers are tried again ...
    contend();  // ... and meet contention at once
    EXPECT_EQ(c.dwellNs(), eng::CoreContention::kMinDwellNs << probe);
  }
  calm();
  for (int i = 0; i < 600; ++i) c.feed(0, 2 * ms, t += 2 * ms);  // the workers keep their cores 1.2 s
  contend();
  EXPECT_EQ(c.dwellNs(), eng::CoreContention::kMinDwellNs);
}

TEST(InlineLaunch, AfterAParallelTaskLaunchesGoToTheWorkerUntil8SerialTasksRan) {
  Mode mode(eng::InlineMode::kAlways);
  auto s = eng::streamCreate(0, 38);
  bool on_host = false;
  eng::launch(0, s, "parallel", [&] { on_host = eng::workRunsParallel(); });
  EXPECT_TRUE(on_host);  // inline, and told so
  std::vector<std::thread::id> ran_on(9);
  for (int i = 0; i < 9; ++i) {
    eng::launch(0, s, "t", [&ran_on, i] { ran_on[i] = std::this_thread::get_id(); });
    eng::streamSynchronize(0, s);  // (the stream idle again)
  }
  for (int i = 0; i < 8; ++i) EXPECT_NE(ran_on[i], std::this_thread::get_id()) << i;  // the worker's
  EXPECT_EQ(ran_on[8], std::this_thread::get_id());  // inline again
  eng::streamDestroy(0, s);
}
