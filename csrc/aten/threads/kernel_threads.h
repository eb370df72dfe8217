// How many threads a kernel uses: one for small work, all for large (see kernel_threads.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace c10 {
struct IValue;
class OperatorHandle;
}  // namespace c10

namespace openmtia {

// Kernels over less work than this run on one thread (see kernel_threads.cpp).
constexpr int64_t kParallelWork = int64_t{1} << 16;
// An element of a transcendental kernel's (or a convolution's) counts this
// many times (its work grows faster).
constexpr int64_t kDenseWorkScale = 16;
// A product of matrices (mm, addmm, bmm, baddbmm, addbmm) runs on every
// thread from this many multiply-adds: below it, a parallel region costs
// more than it saves (see kernel_threads.cpp). Its work counts as its multiply-adds
// divided by kMatrixMacsPerElement, so that this many reach kParallelWork.
constexpr int64_t kMatrixParallelMacs = int64_t{1} << 21;
constexpr int64_t kMatrixMacsPerElement = kMatrixParallelMacs / kParallelWork;
// The elements of the tensors (and tensor lists) among `values`.
int64_t workElements(const std::vector<c10::IValue>& values);
// The work of a kernel of `op` over `args` (its arguments on the stack)
// whose tensors have `elements` elements, outputs included (for
// useKernelThreads): the elements, except for a product of matrices (its
// multiply-adds, scaled) and a convolution (kDenseWorkScale per element).
int64_t kernelWork(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args, int64_t elements);
// Sets how many threads the OpenMP and MKL parallel regions of the calling
// (worker) thread use for a kernel over `work_elements` elements: one below
// kParallelWork, all of them otherwise; going from all to one ends the
// thread's OpenMP team where idle threads spin for long (team_wait.h).
// Every kernel task calls it first. A kernel on all threads keeps CPU's
// thread count (and so its rounding) wherever it runs, and calls
// noteParallelKernel().
// (Elements count as work, except where kernelWork() says more.)
void useKernelThreads(int64_t work_elements);
// Before a kernel that runs a parallel region (an OpenMP team) in a device
// task: tells the driver (omr::workRunsParallel); on a host thread that
// claimed the task, its team ends after the host work (restoreThreadCounts).
// useKernelThreads calls it for a kernel on all threads; compiled kernels
// with a parallel region call it themselves.
void noteParallelKernel();
// Gives the calling thread back the OpenMP and MKL thread counts it had
// before useKernelThreads changed them, and ends the OpenMP team that a
// parallel kernel made on it (a host thread that ran device tasks:
// host_work.h): the device's team is the worker's.
void restoreThreadCounts();
// Ends the calling thread's OpenMP team, if it has one (its threads exit;
// its next parallel region makes a new team).
void endThreadTeam();
// On a stream worker that goes idle after waking a host thread: ends its
// team, unless idle OpenMP threads sleep now (team_wait.h). A stream
// worker's idle hook.
void endIdleWorkerTeam();
// Around a CPU kernel a host thread runs itself (a synchronous call) over
// `work` elements (as useKernelThreads counts them): below kParallelWork the
// kernel runs on one thread, as on a worker (the thread's OpenMP and MKL
// thread counts are restored after: they are the program's), so it makes no
// OpenMP team; above, on all threads, and the host thread's team ends after
// it, so the device's team is the only one and spins between its kernels'
// regions (kernel_threads.cpp). Nothing on a stream worker.
class HostKernelScope {
 public:
  explicit HostKernelScope(int64_t work);
  ~HostKernelScope();
  HostKernelScope(const HostKernelScope&) = delete;
  HostKernelScope& operator=(const HostKernelScope&) = delete;

 private:
  bool active_ = false;   // a host thread
  int omp_threads_ = 0;   // its OpenMP thread count while the kernel runs on one thread
  int mkl_threads_ = 0;   // its MKL thread-local count then (0: MKL's global one)
};
// Splits [0, n) into one contiguous range per thread of ATen's team (as
// many as the calling thread's parallel regions use, at most n) and runs
// f(begin, end) on each, in one parallel region (one call on the calling
// thread if that is one thread). Inside, ATen's kernels run on the thread
// that calls them.
void forEachThread(int64_t n, const std::function<void(int64_t, int64_t)>& f);

}  // namespace openmtia
