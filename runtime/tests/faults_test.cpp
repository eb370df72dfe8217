// Faults on demand through the client (omr::parseFaults, omr::injectFault)
// and the emulated driver below it: what each fault fails, and when.
#include <gtest/gtest.h>

#include <string>
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
  EXPECT_EQ(omr::parseFaults("kernel:rank=1", 1).size(), 1u);
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
  EXPECT_EQ(message("hang"), "fault 'hang': unknown fault kind 'hang' (oom, pinned_oom, kernel)");
  EXPECT_EQ(message("oom:times=-1"), "fault 'oom:times=-1': times=-1 is not a count");
  EXPECT_EQ(message("kernel:after=0"), "fault 'kernel:after=0': after counts from 1 (the next event)");
  EXPECT_EQ(message("pinned_oom:device=0"), "fault 'pinned_oom:device=0': pinned memory belongs to no device");
  EXPECT_EQ(message("kernel:rate=0"), "fault 'kernel:rate=0': rate=0 is not a probability in (0, 1]");
}

TEST(Faults, AKernelFaultFailsTheChosenWorkOnlyAndItDoesNotRun) {
  Cleared cleared;
  const omr::StreamId s = omr::streamFromPool(0, 0);
  omr::Fault f;
  f.kind = omr::FaultKind::kKernel;
  f.name = "b";
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
