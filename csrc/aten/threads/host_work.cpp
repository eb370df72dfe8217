#include "aten/threads/host_work.h"

#include <ATen/DTensorState.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/record_function.h>
#include <c10/core/AutogradState.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/PythonDispatcherTLS.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
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

// What of a fresh thread's state the kernels can see, captured with it.
struct FreshParts {
  c10::impl::LocalDispatchKeySet keys;
  c10::AutogradState autograd{true, false, true, true};
  bool record_function = true;
};

const FreshParts& freshParts() {
  static const FreshParts* parts = [] {
    FreshParts* p = nullptr;
    std::thread([&p] {
      p = new FreshParts{c10::impl::tls_local_dispatch_key_set(), c10::AutogradState::get_tls_state(),
                         at::isRecordFunctionEnabled()};
    }).join();
    return p;
  }();
  return *parts;
}

// Whether the calling thread's state is a fresh thread's in everything a
// kernel below autograd can see: its dispatch keys but autograd's (autocast, functorch's
// transforms, the Python dispatcher and functionalization add theirs), its
// autograd modes, the profiler's thread-local callbacks and debug info,
// Python dispatch and torch-function modes. Then device work runs in it as
// it is (a host thread that waits or launches in a plain loop, the common
// case), without the two swaps of its whole state (a microsecond a task:
// every Python object, callback and autocast dtype it holds, copied and set
// back). Saved-tensor hooks and the thread's Python objects only reach
// autograd and Python, above the kernels.
bool runsAsFresh() {
  const FreshParts& f = freshParts();
  const c10::impl::LocalDispatchKeySet keys = c10::impl::tls_local_dispatch_key_set();
  // (a launch runs its task inline from inside the dispatcher, below
  // autograd: autograd's keys excluded, as the device's kernels run anyway)
  constexpr c10::DispatchKeySet below = c10::autograd_dispatch_keyset_with_ADInplaceOrView;
  if (!(keys.included_ == f.keys.included_) || !((keys.excluded_ - below) == (f.keys.excluded_ - below))) return false;
  const c10::AutogradState& a = c10::AutogradState::get_tls_state();
  if (a.get_grad_mode() != f.autograd.get_grad_mode() || a.get_inference_mode() != f.autograd.get_inference_mode() ||
      a.get_fw_grad_mode() != f.autograd.get_fw_grad_mode() ||
      a.get_multithreading_enabled() != f.autograd.get_multithreading_enabled() ||
      a.get_view_replay_enabled() != f.autograd.get_view_replay_enabled())
    return false;
  return at::isRecordFunctionEnabled() == f.record_function && !at::hasThreadLocalCallbacks() &&
         !c10::ThreadLocalDebugInfo::current() && !c10::impl::TorchDispatchModeTLS::any_modes_set() &&
         c10::impl::PythonDispatcherTLS::get_state() == nullptr && at::impl::PythonTorchFunctionTLS::stack_len() == 0 &&
         at::impl::PythonTorchFunctionTLS::get_disabled_state() == at::impl::TorchFunctionDisabledState::ENABLED &&
         !at::functionalization::impl::getFunctionalizationReapplyViewsTLS() &&
         !at::get_dtensor_allow_implicit_replication();
}

// The program's state while the thread runs device work (nested helps keep
// the outermost's), when it differed from a fresh thread's.
thread_local int t_depth = 0;
std::atomic<int64_t> g_swaps{0};
thread_local std::optional<at::ThreadLocalState> t_program_state;

}  // namespace

void hostWork(int begin) {
  if (begin) {
    if (t_depth++ > 0 || runsAsFresh()) return;
    g_swaps.fetch_add(1, std::memory_order_relaxed);
    t_program_state.emplace();
    at::ThreadLocalState::setThreadLocalState(freshState());
    return;
  }
  if (t_depth == 0 || --t_depth > 0) return;
  restoreThreadCounts();
  if (!t_program_state) return;
  at::ThreadLocalState::setThreadLocalState(*t_program_state);
  t_program_state.reset();
}

int64_t hostWorkStateSwaps() { return g_swaps.load(std::memory_order_relaxed); }

}  // namespace openmtia
