// How many threads a device kernel uses.
//
// The emulated device's kernels are ATen's CPU kernels (and Inductor's C++
// kernels) run by the stream workers. There, as on the host, they use OpenMP
// and MKL's threads. For a tiny kernel a parallel region costs far more than
// the work, and its team keeps spinning afterwards on the cores the host
// thread launches from: a 4x32x32 mm took 3 us on one thread and 40-90 us on
// two (2 cores). So a kernel over little data runs on one thread; larger ones
// keep the full thread count. (Inductor's C++ kernels name their thread
// count in their own parallel regions.)
//
// "Little" is twice ATen's own grain (kParallelWork: 64K elements of work,
// operands and results). That holds while the device's threads are the
// process's only OpenMP team beside at most an idle host thread: libgomp
// spins a team's threads between parallel regions only while the process
// has no more OpenMP threads than cores (else ~100 spins, then they sleep,
// and every region pays for waking them: 40-50 us on a 2-core VM). So a CPU
// kernel the host thread runs itself (a synchronous call) runs on one
// thread below kParallelWork, and after a larger one the host thread's team
// ends (HostKernelScope; ending it after every call made conformance's two
// processes 1.7x slower: a team made again and again by the alternating CPU
// reference ops and first calls), and a worker's team ends when it goes idle
// after waking a host thread that slept waiting for it (endThreadTeam, the
// runtime's idle hook; at every idle it cost a thread per parallel kernel
// where the host launches slower than the device runs): a team left spinning took the
// core of the host thread a finished synchronize woke, until the next
// scheduler tick (4 ms per synchronize, in 6 of 10 runs of 20 adds of 256K
// elements and a synchronize). Measured on a 2-core AMD EPYC VM, per op
// (CPU / mtia before this, with a 2M threshold and the host's team / now):
// add of 256K float32 elements 16 / 30 / 18 us, gelu 31 / 54 / 32 us,
// softmax over 1024 rows of 256 55 / 109 / 56 us, sum of 1M 24 / 44 / 25
// us, a bmm of 16 x 128x64 @ 64x128 172 / 213 / 164 us; the main job's
// step 25.4 (CPU, float32) / 30.5 / 26.0-28.6 ms, 19.0-19.4 / 14.3-16.0 ms in bf16.
//
// A product of matrices counts its multiply-adds (kMatrixParallelMacs, 2M,
// is where two threads start to pay on a 2-core Xeon VM: a mm of 64x64x64
// took 27 us on two threads and 9 on one, 1024x32x32 23 / 20 us,
// 128x128x128 32 / 31 us, 1024x64x64 53 / 61 us, 256x256x256 162 / 248 us,
// in a loop on an idle device). Counted as elements times 16 before, a
// product of two 37x37 matrices went parallel: the DLRM step's small
// linear layers, run beside other streams' work and the host thread, took
// 200 us each instead of 15.
// A program's own CPU work on its threads still makes teams of its own
// (the device's threads then sleep between regions again).
//
// How the teams' idle threads wait (spin, or sleep after a brief spin) is
// team_wait.cpp's: they sleep while the host thread is busy, and then a
// worker keeps its team (endIdleWorkerTeam).
#include <dlfcn.h>

#include <algorithm>

#include <string>
#include <unordered_set>

#include "openmtia/runtime.h"
#include "aten/low_precision/low_precision.h"
#include "aten/per_op.h"
#include "aten/threads/team_wait.h"
#include "aten/threads/kernel_threads.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>

namespace openmtia {
namespace {

// Resolved at run time: the OpenMP runtime and MKL are the ones torch loaded
// (absent in other builds: then there is nothing to limit).
struct ThreadControls {
  void (*omp_set)(int) = nullptr;
  int (*omp_get)() = nullptr;
  int (*mkl_set_local)(int) = nullptr;
  int (*omp_pause_all)(int) = nullptr;  // omp_pause_resource_all (OpenMP 5.0)
  ThreadControls() {
    omp_set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    omp_get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    omp_pause_all = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
    // MKL's C entry (mkl_set_num_threads_local is its Fortran one, by pointer)
    if (void* cpu = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD)) {
      mkl_set_local = reinterpret_cast<int (*)(int)>(dlsym(cpu, "MKL_Set_Num_Threads_Local"));
      dlclose(cpu);
    }
    if (!omp_set || !omp_get) omp_set = nullptr;
  }
};

const ThreadControls& controls() {
  static ThreadControls c;
  return c;
}

}  // namespace

int64_t workElements(const std::vector<c10::IValue>& values) {
  int64_t n = 0;
  for (const auto& v : values) {
    if (v.isTensor()) {
      n += v.toTensor().defined() ? v.toTensor().numel() : 0;
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) n += t.defined() ? t.numel() : 0;
    }
  }
  return n;
}

int64_t kernelWork(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args, int64_t elements) {
  // kProduct: the matrices are arguments 0 and 1 (mm, bmm), or 1 and 2
  // (addmm, baddbmm, addbmm: after the added tensor)
  enum Kind { kElements, kProduct, kProductAfterSelf, kDense, kForeach };
  const Kind kind = perOp(&op.schema(), [&] {
    const std::string& name = op.schema().name();
    if (name == "aten::mm" || name == "aten::bmm") return kProduct;
    if (name.rfind("aten::_foreach_", 0) == 0) return kForeach;
    static const std::unordered_set<std::string> added = {"aten::addmm", "aten::addmm_",   "aten::baddbmm",
                                                          "aten::baddbmm_", "aten::addbmm", "aten::addbmm_"};
    if (added.count(name)) return kProductAfterSelf;
    return lowPrecisionMatrixOps().count(name) > 0 || name.rfind("aten::_scaled_dot_product", 0) == 0 ? kDense
                                                                                                      : kElements;
  });
  if (kind == kDense) return elements * kDenseWorkScale;
  if (kind == kElements) return elements;
  if (kind == kForeach) {
    // a list op runs one kernel per tensor (CPU's foreach kernel): each
    // kernel's work is its own tensor's and its operands', so the largest
    // counts (the list's total made 24 small kernels of an optimizer step
    // parallel regions each: on busy cores a region can wait a scheduler
    // tick for its second thread)
    int64_t largest = 0, lists = 1;  // (+1: its result)
    for (const auto& v : args) {
      if (!v.isTensorList()) continue;
      ++lists;
      for (const at::Tensor& t : v.toTensorList()) largest = std::max<int64_t>(largest, t.defined() ? t.numel() : 0);
    }
    return largest * lists;
  }
  // [..., m, k] @ [..., k, n]: the first's elements times n multiply-adds
  const size_t nargs = op.schema().arguments().size();
  if (args.size() < nargs) return elements * kDenseWorkScale;
  const size_t i = args.size() - nargs + (kind == kProduct ? 0 : 1);  // (args may be a longer stack's tail)
  if (!args[i].isTensor() || !args[i + 1].isTensor()) return elements * kDenseWorkScale;
  const at::Tensor& a = args[i].toTensor();
  const at::Tensor& b = args[i + 1].toTensor();
  if (!a.defined() || !b.defined() || b.dim() < 2) return elements * kDenseWorkScale;
  return a.numel() * b.size(-1) / kMatrixMacsPerElement;
}

namespace {
// useKernelThreads' setting of the calling thread: changed only when it
// must (a run of small kernels pays for the switch once: the calls cost
// microseconds, as much as a small kernel).
thread_local bool serial = false;
thread_local int default_omp = 0;
thread_local bool host_team = false;  // a claimed task's parallel kernel ran on this host thread
}  // namespace

void useKernelThreads(int64_t work_elements) {
  const auto& c = controls();
  const bool want_serial = work_elements < kParallelWork;
  if (!want_serial) noteParallelKernel();
  if (c.omp_set && !want_serial) beforeParallelKernel(serial ? default_omp : c.omp_get());
  if (!c.omp_set || want_serial == serial) return;
  if (want_serial) {
    // From many threads to one: with libgomp's own waits
    // (OPENMTIA_TEAM_WAIT=spin) the team ends. libgomp spins an idle team's
    // threads for their next region up to ~15 ms here (300K pauses) before
    // they sleep, on the cores the host thread and the next kernels need: in
    // the DLRM train step the worker and its team's second thread spent ~40%
    // of the worker's time in the barrier's spin loop. A new team costs
    // ~50us, and its first region more: the team stays where team_wait.cpp
    // lets idle threads spin only while the host mostly waits.
    if (teamWaitMode() == TeamWait::kSpin) endThreadTeam();
    default_omp = c.omp_get();
    c.omp_set(1);
    if (c.mkl_set_local) c.mkl_set_local(1);
  } else {
    c.omp_set(default_omp);
    if (c.mkl_set_local) c.mkl_set_local(0);  // 0: MKL's global setting again
  }
  serial = want_serial;
}

void noteParallelKernel() {
  if (omr::workRunsParallel()) host_team = true;
}

void restoreThreadCounts() {
  if (host_team) {
    host_team = false;
    endThreadTeam();
  }
  if (!serial) return;
  const auto& c = controls();
  c.omp_set(default_omp);
  if (c.mkl_set_local) c.mkl_set_local(0);
  serial = false;
}

void endThreadTeam() {
  // omp_pause_soft (1): the calling thread's idle team ends (its threads
  // exit); its next parallel region makes a new one. Outside a parallel
  // region only (libgomp refuses inside one).
  const auto& c = controls();
  if (c.omp_pause_all) c.omp_pause_all(1);
}

void endIdleWorkerTeam() {
  if (!teamsSleep()) endThreadTeam();
}

HostKernelScope::HostKernelScope(int64_t work) {
  const auto& c = controls();
  active_ = c.omp_set && !omr::onStreamWorker();
  if (!active_ || work >= kParallelWork) return;
  omp_threads_ = c.omp_get();
  if (omp_threads_ <= 1) return;
  c.omp_set(1);
  if (c.mkl_set_local) mkl_threads_ = c.mkl_set_local(1);  // (returns the count it replaces)
}

HostKernelScope::~HostKernelScope() {
  if (!active_) return;
  const auto& c = controls();
  if (omp_threads_ > 1) {
    c.omp_set(omp_threads_);
    if (c.mkl_set_local) c.mkl_set_local(mkl_threads_);
  } else if (omp_threads_ == 0) {  // the kernel ran on every thread
    endThreadTeam();
  }
}

void forEachThread(int64_t n, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t ranges = std::min<int64_t>(n, at::get_num_threads());
  if (ranges <= 1) return n > 0 ? f(0, n) : void();
  // (at::parallel_for is inline, and this file is not built with OpenMP: a
  // TensorIterator's for_each over the ranges' indices runs in ATen's team,
  // one index per thread)
  at::Tensor index = at::arange(ranges, at::kLong);
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .add_output(index)
                                .resize_outputs(false)
                                .set_check_mem_overlap(false)
                                .check_all_same_dtype(false)
                                .build();
  iter.for_each(
      [&](char** data, const int64_t* strides, int64_t size) {
        for (int64_t k = 0; k < size; ++k) {
          const int64_t i = *reinterpret_cast<const int64_t*>(data[0] + k * strides[0]);
          f(n * i / ranges, n * (i + 1) / ranges);
        }
      },
      1);
}

}  // namespace openmtia
