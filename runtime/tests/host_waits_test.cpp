// The client's counts of host waits and launches (omr::hostThreadsWaiting,
// omr::hostWaitedNs, omr::hostLaunches), which the framework's policy reads
// to tell a host that waits for the devices from a busy or an idle one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "openmtia/runtime.h"

using namespace std::chrono_literals;

TEST(HostWaits, EveryLaunchAndGraphLaunchCountsOnce) {
  const int64_t before = omr::hostLaunches();
  for (int i = 0; i < 5; ++i) omr::launch(0, omr::kDefaultStream, "nothing", [] {});
  EXPECT_EQ(omr::hostLaunches() - before, 5);
  omr::Graph* g = omr::graphCreate();
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::streamBeginCapture(0, s, g);
  omr::launch(0, s, "captured", [] {});  // recorded, not run: still a launch call
  omr::streamEndCapture(0, s);
  EXPECT_EQ(omr::hostLaunches() - before, 6);
  omr::graphLaunch(g, 0, s);
  omr::graphLaunch(g, 0, s);
  EXPECT_EQ(omr::hostLaunches() - before, 8);
  omr::streamSynchronize(0, s);
  omr::deviceSynchronize(0);
  EXPECT_EQ(omr::hostLaunches() - before, 8);  // waits launch nothing
  omr::graphDestroy(g);
}

TEST(HostWaits, ASynchronizeCountsAsAWaitForAsLongAsItLasts) {
  omr::deviceSynchronize(0);
  const int64_t waited = omr::hostWaitedNs();
  EXPECT_EQ(omr::hostThreadsWaiting(), 0);
  omr::launch(0, omr::kDefaultStream, "sleep", [] { std::this_thread::sleep_for(200ms); });
  int seen = -1;
  std::thread probe([&] {
    std::this_thread::sleep_for(100ms);  // while the host thread waits below
    seen = omr::hostThreadsWaiting();
  });
  omr::streamSynchronize(0, omr::kDefaultStream);
  probe.join();
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(omr::hostThreadsWaiting(), 0);
  const int64_t ns = omr::hostWaitedNs() - waited;
  EXPECT_GE(ns, 150'000'000);  // (the task slept 200 ms; the probe started after the launch)
  EXPECT_LT(ns, 5'000'000'000);
}

namespace {
std::atomic<int> g_observed{0};
}

TEST(HostWaits, TheObserverHearsOfTheNextLaunchOnceAndOfEveryWait) {
  omr::deviceSynchronize(0);
  g_observed = 0;
  omr::setHostWaitObserver([] { g_observed++; });
  omr::launch(0, omr::kDefaultStream, "unobserved", [] {});
  EXPECT_EQ(g_observed, 0);  // launches are not observed unless asked
  omr::observeNextLaunch();
  omr::launch(0, omr::kDefaultStream, "observed", [] {});
  omr::launch(0, omr::kDefaultStream, "unobserved again", [] {});
  EXPECT_EQ(g_observed, 1);
  omr::launch(0, omr::kDefaultStream, "sleep", [] { std::this_thread::sleep_for(20ms); });
  omr::streamSynchronize(0, omr::kDefaultStream);
  EXPECT_EQ(g_observed, 3);  // the wait's start and end
  omr::setHostWaitObserver(nullptr);
}
