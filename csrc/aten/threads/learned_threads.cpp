// How many threads a fallback kernel uses, learned per op and size.
//
// A CPU kernel over enough work runs on every thread of the worker's
// OpenMP team (aten/threads/kernel_threads.h): on a host with cores to spare that is what
// makes it fast. But the device's threads share the host's cores with the
// program's own threads, and some kernels do not scale: FBGEMM's
// table-batched embedding backward (a parallel radix sort, barriers between
// its passes) ran 1.3 ms on the worker's two threads and 0.97 ms on one, on
// a 2-core VM where the Python thread kept launching (CPU PyTorch's own two
// threads: 1.24 ms, one: 0.93). Whether a kernel gains from its threads is a
// fact of the kernel, its size and the host, so it is measured where it
// runs: the first calls of an op in a size class (its work's power of two)
// run on every thread and on one in turn, timed, and the class keeps every
// thread only where that saved at least kAllMustSave of one thread's time
// (one thread leaves the other cores to the host and the other streams).
// As cuDNN's benchmark mode, this makes a kernel's thread count, and so the
// rounding of a parallel reduction, depend on timings: by default only the
// kernels of ops outside ATen learn (ATen's keep CPU PyTorch's bits: with
// every op learning, bf16 norms and activations run on one thread left
// CPU's bits and, for the norms, CPU's error bound), and under
// torch.use_deterministic_algorithms the work alone decides.
#include "aten/threads/learned_threads.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/operator_name.h>
#include <c10/util/llvmMathExtras.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "aten/fallback/fallback.h"
#include "aten/threads/kernel_threads.h"

namespace openmtia {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTrials = 3;              // timed calls each way
constexpr double kAllMustSave = 0.1;    // every thread must save this share of one thread's time
enum Choice { kLearning, kAll, kOne };

int64_t median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

struct LearnedEntry {
  std::string op;
  int size_class = 0;
  std::atomic<int> choice{kLearning};
  std::mutex mu;
  bool warmed = false;               // the first call ran (untimed: cold caches, new pages)
  int all_running = 0, one_running = 0;  // trials started and not yet recorded, each way
  std::vector<int64_t> all_ns, one_ns;   // the trials' kernel times
};

namespace {

std::mutex g_mu;
// by the op's schema and the size class; entries live until exit
std::map<std::pair<const void*, int>, std::unique_ptr<LearnedEntry>>& entries() {
  static auto* m = new std::map<std::pair<const void*, int>, std::unique_ptr<LearnedEntry>>();
  return *m;
}

LearnedEntry& entryFor(const c10::OperatorHandle& op, int size_class) {
  const std::pair<const void*, int> key{&op.schema(), size_class};
  std::lock_guard<std::mutex> lk(g_mu);
  auto& e = entries()[key];
  if (!e) {
    e = std::make_unique<LearnedEntry>();
    e->op = c10::toString(op.schema().operator_name());  // ("aten::mm.out"; no "." without an overload)
    e->size_class = size_class;
  }
  return *e;
}

}  // namespace

KernelThreadsMode kernelThreadsMode() {
  static const KernelThreadsMode mode = [] {
    const char* s = std::getenv("OPENMTIA_KERNEL_THREADS");
    if (!s || !*s || std::strcmp(s, "extensions") == 0) return KernelThreadsMode::kExtensions;
    if (std::strcmp(s, "learn") == 0) return KernelThreadsMode::kLearn;
    if (std::strcmp(s, "size") == 0) return KernelThreadsMode::kSize;
    std::fprintf(stderr, "openmtia: ignoring OPENMTIA_KERNEL_THREADS=%s (extensions, learn or size)\n", s);
    return KernelThreadsMode::kExtensions;
  }();
  return mode;
}

namespace {

bool learns(const c10::OperatorHandle& op) {
  switch (kernelThreadsMode()) {
    case KernelThreadsMode::kLearn:
      return true;
    case KernelThreadsMode::kExtensions:
      return op.schema().name().rfind("aten::", 0) != 0;
    case KernelThreadsMode::kSize:
      break;
  }
  return false;
}

}  // namespace

LearnedThreads::LearnedThreads(const c10::OperatorHandle& op, int64_t work) {
  if (work < kParallelWork || at::globalContext().deterministicAlgorithms() || !learns(op)) {
    useKernelThreads(work);  // one thread below kParallelWork: nothing to learn
    return;
  }
  LearnedEntry& e = entryFor(op, static_cast<int>(c10::llvm::Log2_64(work)));  // (its size class)
  int choice = e.choice.load(std::memory_order_acquire);
  if (choice == kLearning) {
    std::lock_guard<std::mutex> lk(e.mu);
    choice = e.choice.load();
    if (!e.warmed) {
      e.warmed = true;
      choice = kAll;
    } else if (choice == kLearning) {  // a trial: every thread and one in turn (fewer so far first)
      trial_ = &e;
      parallel_ = e.all_ns.size() + e.all_running <= e.one_ns.size() + e.one_running;
      ++(parallel_ ? e.all_running : e.one_running);
    }
  }
  const bool all = trial_ ? parallel_ : choice == kAll;
  useKernelThreads(all ? work : 0);
  if (trial_) start_ = Clock::now();
}

LearnedThreads::~LearnedThreads() {
  if (!trial_) return;
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
  LearnedEntry& e = *trial_;
  std::lock_guard<std::mutex> lk(e.mu);
  --(parallel_ ? e.all_running : e.one_running);
  if (std::uncaught_exceptions() > 0) return;  // a kernel that threw is not timed: a later call runs its trial
  (parallel_ ? e.all_ns : e.one_ns).push_back(ns);
  if (e.all_ns.size() < kTrials || e.one_ns.size() < kTrials || e.choice.load() != kLearning) return;
  const int64_t all = median(e.all_ns), one = median(e.one_ns);
  const Choice choice = all <= one * (1.0 - kAllMustSave) ? kAll : kOne;
  e.choice.store(choice, std::memory_order_release);
  if (debugFallback())
    std::fprintf(stderr, "openmtia: %s, work 2^%d: %s (every thread %.3f ms, one %.3f ms)\n", e.op.c_str(),
                 e.size_class, choice == kAll ? "every thread" : "one thread", all / 1e6, one / 1e6);
}

std::vector<LearnedChoice> learnedThreadChoices() {
  std::vector<LearnedChoice> out;
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& [key, e] : entries()) {
    std::lock_guard<std::mutex> elk(e->mu);
    const int c = e->choice.load();
    out.push_back({e->op, e->size_class, c == kAll ? "all" : c == kOne ? "one" : "learning",
                   e->all_ns.empty() ? 0 : median(e->all_ns), e->one_ns.empty() ? 0 : median(e->one_ns)});
  }
  return out;
}

}  // namespace openmtia
