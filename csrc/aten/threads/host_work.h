// A host thread that runs the device's tasks itself: a wait that helps its
// stream (help-first, the runtime's), or a driver that runs every task on
// the launching thread. The driver calls hostWork(1) before and hostWork(0)
// after (omr::setHostWorkHook); in between the thread is the device's:
// - its thread-local state is a fresh thread's, as on a stream worker: the
//   program's grad mode, dispatch modes, autocast and profiler callbacks do
//   not reach the kernels (a TorchDispatchMode on the host would see the
//   device's internal CPU calls; the profiler would record them as host ops);
//   a thread whose state is already a fresh one's in all that (a plain loop)
//   keeps it, without swapping it twice;
// - after, its state and its OpenMP and MKL thread counts are the program's
//   again (a small kernel's task sets them to one thread).
#pragma once

#include <cstdint>

namespace openmtia {

void hostWork(int begin);
// How many times device work on a host thread swapped the thread's state
// (it was not a fresh thread's), for tests.
int64_t hostWorkStateSwaps();

}  // namespace openmtia
