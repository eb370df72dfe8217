// The host's float32 GEMM (see host_gemm.h).
#include "aten/host_gemm.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace openmtia {
namespace {

// Fortran BLAS, LP64: column-major, every argument by pointer.
using Sgemm = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

Sgemm findSgemm() {
  void* cpu = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (!cpu) return nullptr;
  auto f = reinterpret_cast<Sgemm>(dlsym(cpu, "sgemm_"));
  dlclose(cpu);  // (NOLOAD: only drops the reference this call took)
  return f;
}

Sgemm sgemm() {
  static const Sgemm f = findSgemm();
  return f;
}

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{[] {
    const char* s = std::getenv("OPENMTIA_HOST_GEMM");
    return !(s && std::strcmp(s, "0") == 0);
  }()};
  return on;
}

bool fits(int64_t v) { return v >= 1 && v <= std::numeric_limits<int>::max(); }

}  // namespace

bool hostGemmAvailable() { return sgemm() && enabled().load(std::memory_order_relaxed); }

bool setHostGemm(bool on) {
  enabled() = on;
  return hostGemmAvailable() == on;
}

bool hostGemmTakes(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  return fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc);
}

void hostGemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b, float beta, float* c,
              int64_t ldc) {
  // Row-major c (m x n) is column-major c^T (n x m): c^T = b^T a^T. A
  // row-major operand is its transpose column-major ('N' gives that
  // transpose), a transposed one is itself column-major ('T').
  const char ta = b.transposed ? 'T' : 'N', tb = a.transposed ? 'T' : 'N';
  const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
  const int lda = static_cast<int>(b.ld), ldb = static_cast<int>(a.ld), ldC = static_cast<int>(ldc);
  sgemm()(&ta, &tb, &M, &N, &K, &alpha, b.data, &lda, a.data, &ldb, &beta, c, &ldC);
}

}  // namespace openmtia
