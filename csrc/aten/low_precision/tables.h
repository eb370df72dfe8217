// bf16 and fp16 elementwise functions of one tensor as tables of CPU's own
// results.
//
// A bf16 or fp16 tensor holds one of 65,536 bit patterns per element. For an
// op whose every output element is a function of one input element and the
// call's numbers (exp2, expm1, sinh, erfc, elu(x, alpha), fmod(x, 0.7),
// pow(x, 1.5), ...), the task runs CPU's kernel of the dtype once over all
// 65,536 patterns (a tensor of 128 KB) and keeps the results: a table. Each
// call then looks every element up in it, one load per element from a table
// that stays in the core's cache, whatever the function costs. The results
// are CPU's kernel's bits (its vector loop's; where CPU's scalar tail gives
// another bit, the table gives the vector loop's), including NaN payloads,
// infinities and signed zeros.
//
// CPU's kernels of these ops convert each vector to float32, compute there
// and round: on an AVX2 host (1M elements, 2 threads) bf16 expm1, log10,
// sinh, cosh, erfc, elu, selu, softplus and log_sigmoid cost 1.1-1.2x
// float32's time, exp2 1.5x, fmod 1.3x. A table costs a first call about
// one more pass of the kernel (its 65,536 elements), and then about as much
// as a copy.
//
// The path is taken where activationPath() (low_precision.h) says kFloat32
// for the dtype, i.e. not in OPENMTIA_LOW_PRECISION=native, for calls (the
// functional, in-place and out= overloads of lowPrecisionTableOps()) over a
// self of more than loopMinElements() elements (exp2: not on a host whose
// loops run 16 lanes, kernelIsa() kAvx512, where CPU's kernel is cheaper
// than a lookup) (32768 by default: a
// table's 65,536 would cost smaller calls more than their kernel;
// OPENMTIA_LOOP_MIN_ELEMENTS=0 sends every call through, as the
// conformance test does), contiguous (dense, with an
// out= of its sizes and strides, for in-place and out=), without neg/conj
// bits, whose other arguments are numbers (not complex). Any other call runs
// CPU's kernel itself. Tables are kept per (op, dtype, numbers), at most
// kMaxTables of them (128 KB each); the oldest is dropped first.
#pragma once

#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <unordered_set>

namespace c10 {
class OperatorHandle;
}

namespace openmtia {

constexpr size_t kMaxTables = 128;

// Runs this call of `op` (its arguments last on `stack`) through a table,
// leaving its results on the stack, if the table path takes it (see
// above); else returns false and leaves the stack alone. In a task or a
// synchronous call (the fallback's callCpuKernel); `work`: the task's
// (useKernelThreads), 0 in a synchronous call.
bool callOverTable(const c10::OperatorHandle& op, torch::jit::Stack* stack, int64_t work);

// "aten::name.overload" of every overload the table path takes.
const std::unordered_set<std::string>& lowPrecisionTableOps();
// How many calls ran through a table, and how many tables were made (for
// tests).
int64_t lowPrecisionTableCalls();
int64_t lowPrecisionTablesMade();

}  // namespace openmtia
