// The client's tests run over the emulated driver with its inline launches
// off (RuntimeConfig::inline_launches 0): they check the client's policy over
// an asynchronous driver (a synchronize that waits while a driver thread
// runs the work), which on loaded cores would otherwise run inside the
// launch. Set before any test uses the runtime.
#include <gtest/gtest.h>

#include "openmtia/runtime.h"

namespace {

class NeverInline : public ::testing::Environment {
  void SetUp() override {
    omr::RuntimeConfig config;
    config.inline_launches = 0;
    omr::configure(config);
  }
};
const ::testing::Environment* const kNeverInline = ::testing::AddGlobalTestEnvironment(new NeverInline);

}  // namespace
