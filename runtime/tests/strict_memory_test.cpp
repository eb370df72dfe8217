// Strict device memory (engine option strict_memory): host threads cannot
// touch device memory, the device's own work can. Each test runs in a child
// process of its own (death tests re-run the binary: the option is set before
// the engine's first use there).
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine.h"

namespace eng = omr::engine;

namespace {

void startStrict() {
  eng::RuntimeConfig c;
  c.strict_memory = 1;
  eng::configure(c);
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "check failed: %s\n", what);
  std::exit(3);
}

}  // namespace

TEST(StrictMemory, AHostReadOfDeviceMemoryEndsTheProcessNamingDeviceAndAddress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        startStrict();
        char* p = static_cast<char*>(eng::deviceMalloc(1, 4096));
        std::fprintf(stderr, "address %p\n", static_cast<void*>(p + 100));
        volatile char c = p[100];
        (void)c;
        std::exit(0);  // (not reached)
      },
      testing::KilledBySignal(SIGSEGV),
      "openmtia: host access to device memory: a host thread touched address 0x[0-9a-f]+, inside mtia:1's allocation");
}

TEST(StrictMemory, AHostWriteAfterDeviceWorkFaultsToo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        startStrict();
        int* p = static_cast<int*>(eng::deviceMalloc(0, 1024));
        eng::StreamId s = eng::streamCreate(0, 0);
        eng::launch(0, s, "fill", eng::Task([p] { p[0] = 7; }));  // the device opens it ...
        eng::streamSynchronize(0, s);                  // ... and it is closed again before the host goes on
        p[1] = 1;
        std::exit(0);
      },
      testing::KilledBySignal(SIGSEGV), "host access to device memory.*mtia:0");
}

void deviceWorkAndCopies() {
  startStrict();
  if (eng::deviceProperties(0).host_addressable) fail("strict memory is reported host-addressable");
  const int n = 1 << 16;
  std::vector<float> host(n), back(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  float* a = static_cast<float*>(eng::deviceMalloc(0, n * sizeof(float)));
  float* b = static_cast<float*>(eng::deviceMalloc(0, n * sizeof(float)));
  eng::memcpy(a, host.data(), n * sizeof(float), eng::CopyKind::kHostToDevice);  // synchronous, on this thread
  const eng::StreamId s = eng::streamCreate(0, 1);
  for (int round = 0; round < 3; ++round) {
    eng::launch(0, s, "double", [a, b, n] {
      for (int i = 0; i < n; ++i) b[i] = 2 * a[i];
    });
    eng::memcpyAsync(a, b, n * sizeof(float), eng::CopyKind::kDeviceToDevice, 0, s);
  }
  eng::memcpyAsync(back.data(), a, n * sizeof(float), eng::CopyKind::kDeviceToHost, 0, s);
  eng::streamSynchronize(0, s);
  for (int i = 0; i < n; ++i)
    if (back[i] != 8.0f * i) fail("device work gave a wrong result");
  eng::deviceFree(0, a);
  eng::deviceFree(0, b);
  // a host thread that is not the launching one, with no device work
  // running, is the host too
  std::fprintf(stderr, "ok\n");
  std::exit(0);
}

TEST(StrictMemory, TheDevicesOwnWorkAndCopiesRunAndTheMemoryIsNotHostAddressable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        deviceWorkAndCopies();
      },
      testing::ExitedWithCode(0), "ok");
}
