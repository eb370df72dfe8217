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
// "Little" is larger than on the host. Beside the host's OpenMP team the
// worker's makes more OpenMP threads than cores, so libgomp spins only
// briefly before its threads sleep, and every parallel region of the worker
// pays for waking its team: 40-50 us on this 2-core VM (measured: a 64K-
// element add 3.9 us on CPU, 49 us on mtia with two threads, 6.8 us with
// one), and the host thread launching the next ops competes for the cores.
// One thread is faster up to about 2M elements of work (operands and
// results) of a memory-bound kernel: a sum of 1M float32 elements (work 1M)
// took 87 us on two threads and 44 us on one (CPU: 26 us), 2M 86 and 89 us,
// 4M 162 and 170 us; an add of 1M (work 2M) 115 and 87 us at a threshold of
// 1M, 2M 145 and 159 us. A matrix op's elements count kDenseWorkScale times
// (its work grows faster than its elements): up to about 128K of them.
#include <dlfcn.h>

#include "common.h"
#include "low_precision.h"

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
  ThreadControls() {
    omp_set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    omp_get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
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

int64_t kernelWork(const c10::OperatorHandle& op, int64_t elements) {
  const bool matrix = perOp(&op.schema(), [&] {
    const std::string& name = op.schema().name();
    return lowPrecisionMatrixOps().count(name) > 0 || name.rfind("aten::_scaled_dot_product", 0) == 0;
  });
  return matrix ? elements * kDenseWorkScale : elements;
}

void useKernelThreads(int64_t work_elements) {
  // The setting is per thread and changed only when it must: a run of small
  // kernels pays for the switch once (the calls cost microseconds, as much as
  // a small kernel).
  thread_local bool serial = false;
  thread_local int default_omp = 0;
  const auto& c = controls();
  const bool want_serial = work_elements < kParallelWork;
  if (!c.omp_set || want_serial == serial) return;
  if (want_serial) {
    default_omp = c.omp_get();
    c.omp_set(1);
    if (c.mkl_set_local) c.mkl_set_local(1);
  } else {
    c.omp_set(default_omp);
    if (c.mkl_set_local) c.mkl_set_local(0);  // 0: MKL's global setting again
  }
  serial = want_serial;
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
