// The client's count of host threads at work (activeHostThreads), over the
// emulated driver: a thread that launched in the last 0.5 ms and is not
// waiting for the device counts; one that waits (a synchronize, a blocking
// copy) or has not launched for longer does not, nor does a stream worker.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "openmtia/runtime.h"

namespace {

using namespace std::chrono_literals;

// The most host threads at work that a task on the device's default stream
// sees over 20 ms, after sleeping `delay` (a most: a thread at work may be
// off its core for a moment on a loaded host).
std::atomic<int> g_seen{-2};

void launchProbe(std::chrono::milliseconds delay) {
  g_seen = -2;
  omr::launch(0, omr::kDefaultStream, "probe", [delay] {
    std::this_thread::sleep_for(delay);
    int most = 0;
    for (auto until = std::chrono::steady_clock::now() + 20ms; std::chrono::steady_clock::now() < until;)
      most = std::max(most, omr::activeHostThreads());
    g_seen = most;
  });
}

TEST(HostActivity, AThreadThatLaunchedCountsUntilItWaitsOrHalfAMillisecondPasses) {
  ASSERT_GT(omr::deviceCount(), 0) << omr::driverError();
  omr::deviceSynchronize(0);
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(omr::activeHostThreads(), 0);
  launchProbe(30ms);
  omr::deviceSynchronize(0);  // waits while the probe runs
  EXPECT_EQ(g_seen, 0);
  launchProbe(30ms);
  std::this_thread::sleep_for(80ms);  // launched, then no launch for longer than the window
  EXPECT_EQ(g_seen, 0);
  EXPECT_EQ(omr::activeHostThreads(), 0);
  omr::deviceSynchronize(0);
}

TEST(HostActivity, EachLaunchingThreadCountsAndAnEndedOneNoLonger) {
  ASSERT_GT(omr::deviceCount(), 0) << omr::driverError();
  launchProbe(30ms);
  std::atomic<bool> stop{false};
  std::thread other([&] {  // a second host thread, launching every 0.1 ms
    while (!stop) {
      omr::launch(0, omr::streamFromPool(0, 0), "tiny", [] {});
      std::this_thread::sleep_for(100us);
    }
  });
  while (g_seen == -2) {  // this one at work too, until the probe ran
    omr::launch(0, omr::streamFromPool(0, 0), "tiny", [] {});
    std::this_thread::sleep_for(100us);
  }
  stop = true;
  EXPECT_EQ(g_seen, 2);
  other.join();
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(omr::activeHostThreads(), 0);  // (the ended thread's slot is free)
  omr::deviceSynchronize(0);
}

}  // namespace
