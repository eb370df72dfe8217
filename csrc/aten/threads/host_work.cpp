#include "aten/threads/host_work.h"

#include <ATen/ThreadLocalState.h>

#include <optional>
#include <thread>

#include "aten/threads/kernel_threads.h"

namespace openmtia {
namespace {

// A fresh thread's state, captured once on a thread of its own.
const at::ThreadLocalState& freshState() {
  static const at::ThreadLocalState* state = [] {
    const at::ThreadLocalState* s = nullptr;
    std::thread([&s] { s = new at::ThreadLocalState(); }).join();
    return s;
  }();
  return *state;
}

// The program's state while the thread runs device work (nested helps keep
// the outermost's).
thread_local int t_depth = 0;
thread_local std::optional<at::ThreadLocalState> t_program_state;

}  // namespace

void hostWork(int begin) {
  if (begin) {
    if (t_depth++ > 0) return;
    t_program_state.emplace();
    at::ThreadLocalState::setThreadLocalState(freshState());
    return;
  }
  if (t_depth == 0 || --t_depth > 0) return;
  restoreThreadCounts();
  at::ThreadLocalState::setThreadLocalState(*t_program_state);
  t_program_state.reset();
}

}  // namespace openmtia
