// How many threads a fallback kernel uses, learned per op and size on the
// real data (see learned_threads.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace c10 {
class OperatorHandle;
}  // namespace c10

namespace openmtia {

// OPENMTIA_KERNEL_THREADS, read once. A CPU kernel the fallback runs on a
// stream, over enough work to run on every thread (useKernelThreads), runs
// on one thread instead where its first calls of that op and size ran no
// faster on every thread: in "extensions" (the default) the kernels of ops
// outside ATen (FBGEMM's, a program's own), whose threads their authors set;
// ATen's keep CPU PyTorch's thread count, and so its rounding bit for bit
// (a parallel reduction sums per thread). "learn": every op's. "size": none
// (by its work alone, aten/threads/kernel_threads.h).
enum class KernelThreadsMode { kExtensions, kLearn, kSize };
KernelThreadsMode kernelThreadsMode();

struct LearnedEntry;

// Around a fallback kernel in its task: sets the calling (stream worker)
// thread's threads for a kernel of `op` over `work` (kernelWork), as learned
// for the op and the size class of `work`; while that is being learned,
// times the kernel (the destructor records it, unless the kernel threw).
// Under torch.use_deterministic_algorithms, by the work alone.
class LearnedThreads {
 public:
  LearnedThreads(const c10::OperatorHandle& op, int64_t work);
  ~LearnedThreads();
  LearnedThreads(const LearnedThreads&) = delete;
  LearnedThreads& operator=(const LearnedThreads&) = delete;

 private:
  LearnedEntry* trial_ = nullptr;  // the entry this call is a timed trial of
  bool parallel_ = false;          // the trial's way: every thread, or one
  std::chrono::steady_clock::time_point start_;
};

// What was learned: per op and size class (work in [2^size_class,
// 2^(size_class+1))), the choice ("all", "one", or "learning") and the
// median kernel times of the trials each way (ns; 0 before they ran).
struct LearnedChoice {
  std::string op;
  int size_class = 0;
  std::string choice;
  int64_t all_ns = 0;
  int64_t one_ns = 0;
};
std::vector<LearnedChoice> learnedThreadChoices();

}  // namespace openmtia
