// Faults on demand through the client (omr::parseFaults, omr::injectFault)
// and the emulated driver below it: what each fault fails, and when.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "openmtia/runtime.h"

namespace {

struct Cleared {
  ~Cleared() { omr::clearFaults(); }
};

// Runs `names` as tasks on `stream` in order; returns the names of those that
// failed (one synchronize after each).
std::vector<std::string> failing(omr::StreamId stream, const std::vector<std::string>& names) {
  std::vector<std::string> failed;
  for (const std::string& n : names) {
    omr::launch(0, stream, n.c_str(), [] {});
    try {
      omr::streamSynchronize(0, stream);
    } catch (const omr::TaskError&) {
      failed.push_back(n);
    }
  }
  return failed;
}

// A fault of `kind` on the pieces of work named `name` (the rest as a
// fault's defaults: the next one, once).
omr::Fault workFault(omr::FaultKind kind, std::string name) {
  omr::Fault f;
  f.kind = kind;
  f.name = std::move(name);
  return f;
}

}  // namespace

TEST(Faults, ParsesAListAndKeepsThisRanksFaults) {
  auto faults = omr::parseFaults("kernel:op=aten::mm,after=3,times=2;oom:device=1,times=0;kernel:rank=1", 0);
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].kind, omr::FaultKind::kKernel);
  EXPECT_EQ(faults[0].name, "aten::mm");
  EXPECT_EQ(faults[0].after, 3u);
  EXPECT_EQ(faults[0].times, 2u);
  EXPECT_EQ(faults[1].kind, omr::FaultKind::kDeviceOutOfMemory);
  EXPECT_EQ(faults[1].device, 1);
  EXPECT_EQ(faults[1].times, 0u);
  EXPECT_FALSE(faults[0].sticky);
  auto more = omr::parseFaults("kernel:sticky=1;lost:device=1,op=aten::mm,after=4", 0);
  ASSERT_EQ(more.size(), 2u);
  EXPECT_TRUE(more[0].sticky);
  EXPECT_EQ(more[1].kind, omr::FaultKind::kDeviceLost);
  EXPECT_EQ(more[1].device, 1);
  EXPECT_EQ(more[1].name, "aten::mm");
  EXPECT_EQ(more[1].after, 4u);
  auto corrupt = omr::parseFaults("corrupt:op=c10d:all_reduce,after=2,seed=7", 0);
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt[0].kind, omr::FaultKind::kCorrupt);
  EXPECT_EQ(corrupt[0].name, "c10d:all_reduce");
  EXPECT_EQ(corrupt[0].after, 2u);
  EXPECT_EQ(corrupt[0].seed, 7u);
  EXPECT_EQ(omr::parseFaults("kernel:rank=1", 1).size(), 1u);
  EXPECT_EQ(omr::parseFaults("kernel:restart=0", 0).size(), 1u);  // (a job's first run)
  EXPECT_EQ(omr::parseFaults("kernel:restart=0", 0, 1).size(), 0u);
  EXPECT_EQ(omr::parseFaults("kernel:rank=1,restart=1", 1, 1).size(), 1u);
  EXPECT_EQ(omr::parseFaults("kernel:rank=1,restart=1", 0, 1).size(), 0u);
  EXPECT_TRUE(omr::parseFaults("", 0).empty());
}

TEST(Faults, ABadListSaysWhatIsWrong) {
  auto message = [](const char* spec) {
    try {
      omr::parseFaults(spec, 0);
    } catch (const omr::Error& e) {
      EXPECT_EQ(e.code(), omr::ErrorCode::kInvalidValue);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("disk"), "fault 'disk': unknown fault kind 'disk' (oom, pinned_oom, kernel, lost, hang, corrupt)");
  EXPECT_EQ(message("kernel:sticky=2"), "fault 'kernel:sticky=2': sticky=2 is not 0 or 1");
  EXPECT_EQ(message("oom:sticky=1"),
            "fault 'oom:sticky=1': unknown setting 'sticky' (device, after, times, rate, seed, rank, restart)");
  EXPECT_EQ(message("oom:times=-1"), "fault 'oom:times=-1': times=-1 is not a count");
  EXPECT_EQ(message("kernel:after=0"), "fault 'kernel:after=0': after counts from 1 (the next event)");
  EXPECT_EQ(message("pinned_oom:device=0"), "fault 'pinned_oom:device=0': pinned memory belongs to no device");
  EXPECT_EQ(message("kernel:rate=0"), "fault 'kernel:rate=0': rate=0 is not a probability in (0, 1]");
}

TEST(Faults, AKernelFaultFailsTheChosenWorkOnlyAndItDoesNotRun) {
  Cleared cleared;
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Fault f = workFault(omr::FaultKind::kKernel, "b");
  f.after = 2;
  f.times = 2;
  omr::injectFault(f);
  EXPECT_EQ(failing(s, {"a", "b", "a", "b", "b", "b"}), (std::vector<std::string>{"b", "b"}));  // b's 2nd and 3rd
  bool ran = false;
  omr::clearFaults();
  f.name.clear();
  f.after = 1;
  f.times = 1;
  omr::injectFault(f);
  omr::launch(0, s, "skipped", [&ran] { ran = true; });
  EXPECT_THROW(omr::streamSynchronize(0, s), omr::TaskError);
  EXPECT_FALSE(ran);  // a faulting kernel does not run
  EXPECT_EQ(failing(s, {"after"}), std::vector<std::string>{});
}

TEST(Faults, AnOutOfMemoryFaultFailsDeviceAllocationsOfItsDevice) {
  Cleared cleared;
  omr::Fault f;
  f.kind = omr::FaultKind::kDeviceOutOfMemory;
  f.device = 0;
  f.times = 0;
  omr::injectFault(f);
  EXPECT_THROW(omr::deviceMalloc(0, 1024), omr::OutOfMemoryError);
  if (omr::deviceCount() > 1) {
    void* p = omr::deviceMalloc(1, 1024);
    EXPECT_NE(p, nullptr);
    omr::deviceFree(1, p);
  }
  omr::clearFaults();
  void* p = omr::deviceMalloc(0, 1024);
  EXPECT_NE(p, nullptr);
  omr::deviceFree(0, p);
}

namespace {

// A broken device stays broken for the rest of its process: these run in a
// child process of their own (a death test), which exits 0 if every check
// held, else 1 after printing the first that did not.
#define CHILD_CHECK(cond)                                            \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "failed: %s (line %d)\n", #cond, __LINE__); \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)

// The error code and message of `f`'s omr::Error, or (kInternal, "none").
template <typename F>
std::pair<omr::ErrorCode, std::string> errorOf(F&& f) {
  try {
    f();
  } catch (const omr::Error& e) {
    return {e.code(), e.what()};
  }
  return {omr::ErrorCode::kInternal, "none"};
}

// After `fault` hit a task "bad" on device 0: every call on device 0 fails
// with `code`, naming the device and `says`; the queued work never ran;
// device 1 (if any) goes on; frees do not fail.
void brokenDeviceChild(const omr::Fault& fault, omr::ErrorCode code, const std::string& says) {
  void* kept = omr::deviceMalloc(0, 1024);
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::injectFault(fault);
  bool queued_ran = false;
  omr::launch(0, s, "bad", [] {});
  // (accepted while "bad" has not run yet, else refused as every call)
  auto queued = errorOf([&] { omr::launch(0, s, "queued", [&queued_ran] { queued_ran = true; }); });
  auto first = errorOf([&] { omr::streamSynchronize(0, s); });
  CHILD_CHECK(first.first == code);
  CHILD_CHECK(queued.second == "none" || queued == first);
  CHILD_CHECK(first.second.find("mtia:0") != std::string::npos && first.second.find(says) != std::string::npos);
  CHILD_CHECK(!queued_ran);
  CHILD_CHECK(errorOf([&] { omr::streamSynchronize(0, s); }) == first);  // every later call, not once
  CHILD_CHECK(errorOf([&] { omr::launch(0, s, "later", [] {}); }) == first);
  CHILD_CHECK(errorOf([&] { omr::deviceMalloc(0, 1024); }) == first);
  CHILD_CHECK(errorOf([&] { omr::deviceSynchronize(0); }) == first);
  CHILD_CHECK(errorOf([&] { omr::deviceFree(0, kept); }).second == "none");
  if (omr::deviceCount() > 1) {
    bool ran = false;
    const omr::StreamId other = omr::streamFromPool(1, 0);
    omr::launch(1, other, "fine", [&ran] { ran = true; });
    omr::streamSynchronize(1, other);
    CHILD_CHECK(ran);
  }
  std::exit(0);
}

// Streams that wait for an event whose record was queued behind the work
// that lost its device (the record never runs): the waits fail with the
// device's error, on that device's other stream and on another device, never
// blocking for ever; so do the host's wait for the event and the end of the
// stream workers (the exit of a rank whose device was lost hung there).
void waitsForABrokenDevicesEventChild() {
  CHILD_CHECK(omr::deviceCount() > 1);
  omr::Fault f = workFault(omr::FaultKind::kDeviceLost, "bad");
  f.device = 0;
  omr::injectFault(f);
  const omr::StreamId s = omr::streamFromPool(0, 0), same = omr::streamFromPool(0, 0);
  const omr::StreamId other = omr::streamFromPool(1, 0);
  CHILD_CHECK(s != same);
  std::atomic<bool> go{false};
  omr::launch(0, s, "gate", [&go] {  // (the waits start before the device breaks)
    for (int i = 0; i < 500 && !go.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  omr::launch(0, s, "bad", [] {});
  omr::Event* e = omr::eventCreate(false);
  omr::eventRecord(e, 0, s);
  omr::streamWaitEvent(0, same, e);
  omr::streamWaitEvent(1, other, e);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  go = true;
  const auto lost = errorOf([&] { omr::streamSynchronize(1, other); });
  CHILD_CHECK(lost.first == omr::ErrorCode::kTaskFailed);  // (its wait, work of device 1, failed)
  CHILD_CHECK(lost.second.find("mtia:0 is lost") != std::string::npos);
  CHILD_CHECK(errorOf([&] { omr::eventSynchronize(e); }).first == omr::ErrorCode::kDeviceLost);
  bool ran = false;  // device 1 goes on
  omr::launch(1, other, "fine", [&ran] { ran = true; });
  omr::streamSynchronize(1, other);
  CHILD_CHECK(ran);
  omr::stopWorkers();  // (joins the workers: device 0's other stream's too)
  std::exit(0);
}

}  // namespace

TEST(FaultsDeathTest, WaitsForAnEventOfADeviceLostBeforeItsRecordFailAndNeverBlock) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(waitsForABrokenDevicesEventChild(), ::testing::ExitedWithCode(0), "");
}

TEST(FaultsDeathTest, AStickyKernelFaultBreaksItsDeviceOnlyAndEveryLaterCallOnItFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  omr::Fault f = workFault(omr::FaultKind::kKernel, "bad");
  f.sticky = true;
  EXPECT_EXIT(brokenDeviceChild(f, omr::ErrorCode::kTaskFailed, "sticky fault in 'bad'"),
              ::testing::ExitedWithCode(0), "");
}

TEST(FaultsDeathTest, ALostDeviceFailsEveryLaterCallOnItSayingSoAndOthersGoOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  omr::Fault f = workFault(omr::FaultKind::kDeviceLost, "bad");
  f.device = 0;
  EXPECT_EXIT(brokenDeviceChild(f, omr::ErrorCode::kDeviceLost, "is lost (it fell off the bus in 'bad'"),
              ::testing::ExitedWithCode(0), "");
}

TEST(Faults, ANonStickyKernelFaultLeavesItsDeviceUsable) {
  Cleared cleared;
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Fault f = workFault(omr::FaultKind::kKernel, "bad");
  omr::injectFault(f);
  EXPECT_EQ(failing(s, {"bad", "good", "bad"}), std::vector<std::string>{"bad"});
  void* p = omr::deviceMalloc(0, 1024);
  omr::deviceFree(0, p);
}

TEST(Faults, WorkTheHostRunsItselfCountsAndFailsAtTheStreamsNextSynchronization) {
  Cleared cleared;
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Fault f = workFault(omr::FaultKind::kKernel, "host");
  f.after = 2;
  omr::injectFault(f);
  EXPECT_FALSE(omr::hostWorkFaults(0, s, "host"));
  EXPECT_FALSE(omr::hostWorkFaults(0, s, "other"));
  omr::streamSynchronize(0, s);
  EXPECT_TRUE(omr::hostWorkFaults(0, s, "host"));  // the second
  try {
    omr::streamSynchronize(0, s);
    ADD_FAILURE() << "no error at the synchronization";
  } catch (const omr::TaskError& e) {
    EXPECT_EQ(e.task, "host");
    EXPECT_NE(std::string(e.what()).find("injected fault: the device faulted in 'host'"), std::string::npos) << e.what();
  }
  omr::streamSynchronize(0, s);  // once
  EXPECT_FALSE(omr::hostWorkFaults(0, s, "host"));
}

// The bits of `a` that differ from `b`'s.
static int bitsDiffering(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += __builtin_popcount(a[i] ^ b[i]);
  return n;
}

TEST(Faults, ACorruptFaultFlipsOneBitOfTheChosenReceivedDataTheSameForTheSameSeed) {
  Cleared cleared;
  const omr::StreamId s = omr::streamFromPool(0, 0);
  const std::vector<unsigned char> sent(4096, 0x5a);
  auto received = [&](const char* name) {
    std::vector<unsigned char> data = sent;
    const bool corrupted = omr::dataReceived(0, s, name, data.data(), data.size());
    EXPECT_EQ(corrupted, bitsDiffering(data, sent) == 1) << name;
    return data;
  };
  EXPECT_FALSE(omr::dataReceived(0, s, "c10d:all_reduce", nullptr, 0));  // nothing armed
  omr::Fault f = workFault(omr::FaultKind::kCorrupt, "c10d:all_reduce");
  f.after = 2;
  f.seed = 3;
  omr::injectFault(f);
  EXPECT_EQ(received("c10d:all_reduce"), sent);  // the first: left as it was
  EXPECT_EQ(received("c10d:broadcast"), sent);   // another name
  const std::vector<unsigned char> first = received("c10d:all_reduce");  // the second: one bit flipped
  EXPECT_EQ(bitsDiffering(first, sent), 1);
  EXPECT_EQ(received("c10d:all_reduce"), sent);  // once
  omr::streamSynchronize(0, s);                  // (nothing is reported: the data is wrong, silently)
  omr::clearFaults();
  omr::injectFault(f);
  received("c10d:all_reduce");
  EXPECT_EQ(received("c10d:all_reduce"), first);  // the same seed flips the same bit
}

TEST(Faults, AHungStreamRunsNothingMoreUntilTheFaultIsClearedThenGoesOn) {
  Cleared cleared;
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Fault f = workFault(omr::FaultKind::kHang, "stuck");
  omr::injectFault(f);
  bool stuck_ran = false, after_ran = false;
  omr::launch(0, s, "stuck", [&stuck_ran] { stuck_ran = true; });
  omr::launch(0, s, "after", [&after_ran] { after_ran = true; });
  auto sync = std::async(std::launch::async, [s] { omr::streamSynchronize(0, s); });
  // no timeout of its own, as CUDA's synchronize
  EXPECT_EQ(sync.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  EXPECT_FALSE(omr::streamQuery(0, s));
  EXPECT_FALSE(after_ran);
  omr::clearFaults();  // releases it: it fails, not run; the stream goes on
  try {
    sync.get();
    ADD_FAILURE() << "no error";
  } catch (const omr::TaskError& e) {
    EXPECT_EQ(e.task, "stuck");
    EXPECT_NE(std::string(e.what()).find("'stuck' hung mtia:0 stream"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(stuck_ran);
  EXPECT_TRUE(after_ran);
  EXPECT_EQ(failing(s, {"stuck"}), std::vector<std::string>{});
}
