// bf16 and fp16 matrix ops at float32 speed on hosts without native kernels.
//
// mtia runs the host CPU's kernels. On a CPU without native bf16 (or fp16)
// instructions, CPU PyTorch's bf16 mm is ~50x slower than float32, its
// convolutions ~20x: the device would be slowest in its own training dtype.
// There, the matrix ops (mm, addmm, bmm, baddbmm, addbmm, the convolutions and
// their backward) of bf16/fp16 operands run in float32: the op's task
// converts the operands, runs the float32 kernel, and rounds each result once
// to the operands' dtype. That is how CPU's native low-precision kernels
// define the numerics (float32 accumulation, one rounding per result), so the
// results agree with those within torch.testing's bf16/fp16 tolerances; where
// CPU's kernel rounds partial sums to the dtype (col2im, addbmm's per-batch
// sums) they differ by more, and are closer to the float64 result than CPU's.
//
// The path is chosen per dtype (OPENMTIA_LOW_PRECISION):
//   auto     (default) native where the host has the instructions and ATen
//            uses them (avx512_bf16/amx_bf16 for bf16, avx512_fp16/amx_fp16
//            for fp16, with ATen's CPU capability at AVX512), else float32;
//   float32  always float32 (what a host without native low precision does);
//   native   always the CPU kernel of the dtype itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace c10 {
class OperatorHandle;
}

namespace openmtia {

enum class LowPrecisionPath { kNative, kFloat32 };

// bf16 or fp16.
bool isLowPrecision(c10::ScalarType t);

// The path of matrix ops of `dtype` operands (bf16 or fp16; others: kNative).
LowPrecisionPath lowPrecisionPath(c10::ScalarType dtype);
// The path of an activation of `dtype` (low_precision/activations.h):
// kFloat32 (the fused kernel) in mode float32, kNative in mode native; in
// mode auto kNative only where CPU's kernel of the dtype is oneDNN's native
// one (`onednn`: gelu and its backward, erf form, on a host where the dtype
// is native), which is faster; CPU's other low-precision activations are
// ATen's loops, slower than the fused kernel on every host measured.
LowPrecisionPath activationPath(c10::ScalarType dtype, bool onednn);
// "auto", "float32" or "native": sets the mode (throws on another value), as
// OPENMTIA_LOW_PRECISION does at start.
void setLowPrecisionMode(const std::string& mode);
std::string lowPrecisionMode();

// Whether the fallback's CPU kernel for this call of `op` (its arguments
// last on `stack`) computes in float32: a matrix op whose floating tensors
// share one low-precision dtype whose path is kFloat32, or an order op
// (lowPrecisionOrderOps) of one. Any overload: the functional, in-place and
// out= ones.
bool float32Call(const c10::OperatorHandle& op, const torch::jit::Stack& stack);
// Runs the CPU kernel over the host tensors on `stack`: the op itself, or
// with float32 the op over float32 copies of the bf16/fp16 tensors, then each
// written argument and each fresh result rounded once to their dtype; in a
// task, bmm and baddbmm with entries enough for every thread run chunked
// (each thread converts, multiplies and rounds a few entries at a time, in
// its cache; low_precision.cpp). (In
// the fallback's tasks and synchronous calls, so one task does it all.)
// In a task, `work` is the kernel's (useKernelThreads): each conversion then
// runs with the threads its own size calls for, not the kernel's (a parallel
// region costs the worker 40-50 us to wake its team: three conversions with
// two threads cost a 832x128x384 mm 200 us, on one thread 30 us). 0 leaves
// the calling thread's setting alone (the host's synchronous calls).
void callCpuKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool float32, int64_t work = 0);
// Device memory for the float32 stand-ins of a float32 call (its bf16/fp16
// `tensors`: arguments and fresh outputs, one float32 buffer of each one's
// element count). The task serves its conversions and the kernel's float32
// results from them (ResultPlacement): memory the caching allocator reuses,
// instead of fresh heap pages each call. The caller holds them until the
// task is launched (so no two share a block) and frees them then.
std::vector<at::Tensor> float32Scratch(const std::vector<at::Tensor>& tensors);
// How many calls took the float32 path so far (for tests).
int64_t lowPrecisionFloat32Calls();
// How many calls ran over int16 views (lowPrecisionBitsOps), for tests.
int64_t lowPrecisionBitsCalls();
// How many of those ran chunked (bmm, baddbmm: entries in float32 a few at a
// time on each thread; see low_precision.cpp), for tests.
int64_t lowPrecisionChunkedCalls();
// How many batch entries of those ran through the host GEMM (host_gemm.h:
// each entry one run of memory per operand; else ATen's bmm per chunk),
// for tests.
int64_t lowPrecisionGemmEntries();
// The matrix ops, "aten::name" (every overload).
const std::unordered_set<std::string>& lowPrecisionMatrixOps();
// The order ops (sort, topk, kthvalue, median, nanmedian, mode, cummax,
// cummin), "aten::name":
// float32Call takes their bf16/fp16 calls where activationPath says
// kFloat32 (not in mode native). Widening is exact and keeps the order of
// every pair (NaN, +-0 and ties included), so CPU's float32 kernel makes
// the same comparisons as its bf16/fp16 one: the same values and indices,
// bit for bit. CPU's low-precision kernels convert at each comparison: on
// 1024 rows of 1024, fp16 sort took 1.16-1.20x float32's time, topk 1.17,
// kthvalue 1.61-1.68, cummax 1.7 (bf16) and 13.7 (fp16) (AVX2 and AVX-512
// hosts alike).
const std::unordered_set<std::string>& lowPrecisionOrderOps();
// Ops whose CPU bf16/fp16 kernels are slower than their float32 ones plus
// the conversions on every host, "aten::name": sdpa's flash kernels
// (csrc/aten/attention.cpp) and xlogy. float32Call takes their bf16/fp16 calls
// where activationPath says kFloat32 (not in mode native), on hosts with
// native bf16 too: CPU's bf16 flash backward took 6.6 ms for the main job's
// attention (64x4x12x32, causal) against 0.58 ms over float32 stand-ins
// (float32 itself 0.50); on 1024x1024 (AVX2 setting; bf16 / fp16 time over
// float32's) xlogy 1.11/1.16 -> 1.05 (xlogy of two alike contiguous
// tensors is the activation loops' now, 0.2-0.3: these are its other forms). (Functions of one tensor, erfinv,
// erfc and sinc among them, are tables of CPU's results instead:
// low_precision/tables.h. Not std()/var() of every element, 7.4 -> 1.17:
// CPU's bf16 kernel accumulates in float64, float32's overflows to NaN for
// values near bf16's largest; float64 stand-ins would cost 1.22.) The
// conversions cost about two passes of a memory-bound float32 op: not for
// cheap ops (bf16 group_norm went 1.3 -> 1.8x float32's time over
// stand-ins, fp16 avg_pool2d 1.05 -> 1.1, clamp with tensor bounds 3.3 ->
// 5.3, maximum 1.5 -> 11).
const std::unordered_set<std::string>& lowPrecisionStandInOps();
// Ops that only move elements (flip, gather, scatter with a tensor of
// values), "aten::name": where activationPath says kFloat32 (not in mode
// native), callCpuKernel runs their bf16/fp16 calls over int16 views of
// the same bytes, CPU's kernel for 2-byte integers: the same bits, and on
// 1024x1024 (AVX2 and AVX-512 hosts) the last-dim flip took 3.3x float32's
// time in bf16/fp16 and 0.55x in int16, gather 1.57x and 1.0x, scatter
// 1.3-1.8x and 1.24x. (index_select, index, take, cat, clone and the other
// copies cost the same in every 2-byte dtype.)
const std::unordered_set<std::string>& lowPrecisionBitsOps();

}  // namespace openmtia
