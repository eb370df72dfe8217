// The host's float32 GEMM, called directly: the BLAS that CPU PyTorch's own
// float32 matmuls run (MKL's sgemm_ in the x86 wheels), found in
// libtorch_cpu at run time.
//
// For kernels that run many small GEMMs of their own on one thread (the
// float32 path's chunked bmm, low_precision.cpp): a call through ATen
// (at::bmm_out, at::mm_out) costs a few microseconds of dispatch and
// set-up, 10-20% of a 128x64x128 product. No BLAS found (a wheel built
// without one), or OPENMTIA_HOST_GEMM=0: hostGemmAvailable() is false and
// callers take ATen's ops.
#pragma once

#include <cstdint>

namespace openmtia {

// A row-major operand of a product: element (i, j) at data[i * ld + j], or
// at data[j * ld + i] where transposed (its memory holds the transpose
// row-major: a column-major matrix).
struct GemmOperand {
  const float* data;
  int64_t ld;
  bool transposed;
};

// Whether hostGemm() runs: a BLAS was found and it is enabled.
bool hostGemmAvailable();
// Enables or disables it (tests run both paths); false if there is none.
bool setHostGemm(bool enabled);

// c = alpha * (a @ b) + beta * c for a m x k, b k x n and c m x n
// row-major with leading dimension ldc, float32 accumulation, on the
// calling thread's BLAS threads (one inside a parallel region). beta 0:
// c's values are not read (NaN in c does not propagate), as BLAS defines
// it. Sizes within the BLAS's 32-bit integers, m, n, k >= 1. Only where
// hostGemmAvailable().
void hostGemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b, float beta, float* c,
              int64_t ldc);
// Whether hostGemm() takes these sizes and leading dimensions (32-bit).
bool hostGemmTakes(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc);

}  // namespace openmtia
