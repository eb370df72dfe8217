// bf16 and fp16 matrix ops through float32 (see low_precision.h).
#include "openmtia/runtime.h"
#include "aten/host_gemm.h"
#include "aten/low_precision/kernels.h"
#include "aten/low_precision/low_precision.h"
#include "aten/low_precision/tables.h"
#include "aten/per_op.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/device_allocator.h"
#include "runtime/result_placement.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <algorithm>

#include <atomic>
#include <cstdlib>
#include <fstream>


namespace openmtia {
namespace {

enum class Mode { kAuto, kFloat32, kNative };

Mode parseMode(const std::string& s) {
  if (s == "auto") return Mode::kAuto;
  if (s == "float32") return Mode::kFloat32;
  if (s == "native") return Mode::kNative;
  TORCH_CHECK(false, "OPENMTIA_LOW_PRECISION must be auto, float32 or native, not '", s, "'");
}

std::atomic<Mode>& mode() {
  static std::atomic<Mode> m{[] {
    const char* s = std::getenv("OPENMTIA_LOW_PRECISION");
    if (!s || !*s) return Mode::kAuto;
    try {
      return parseMode(s);
    } catch (const c10::Error&) {
      TORCH_WARN("ignoring OPENMTIA_LOW_PRECISION='", s, "' (auto, float32 or native)");
      return Mode::kAuto;
    }
  }()};
  return m;
}

// The host CPU's feature flags, as the kernel reports them.
bool cpuHasFlag(const std::string& flag) {
  static const std::string flags = [] {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("flags", 0) == 0) return " " + line.substr(line.find(':') + 1) + " ";
    return std::string();
  }();
  return flags.find(" " + flag + " ") != std::string::npos;
}

// Whether CPU PyTorch's kernels of `dtype` run on native instructions here:
// the host has them, and ATen uses its AVX512 kernels (ATEN_CPU_CAPABILITY
// may lower it, as on a host without them).
bool nativeOnThisHost(c10::ScalarType dtype) {
  static const bool avx512 = at::get_cpu_capability().rfind("AVX512", 0) == 0;  // "AVX512": avx512 or amx
  static const bool bf16 = avx512 && (cpuHasFlag("avx512_bf16") || cpuHasFlag("amx_bf16"));
  static const bool fp16 = avx512 && (cpuHasFlag("avx512_fp16") || cpuHasFlag("amx_fp16"));
  return dtype == at::kBFloat16 ? bf16 : fp16;
}

std::atomic<int64_t> g_float32_calls{0};

bool isWritten(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

}  // namespace

bool isLowPrecision(c10::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

namespace {

// The path of `dtype` in the current mode; in auto, kNative where `native`.
LowPrecisionPath pathInMode(c10::ScalarType dtype, bool native) {
  if (!isLowPrecision(dtype)) return LowPrecisionPath::kNative;
  switch (mode().load()) {
    case Mode::kFloat32:
      return LowPrecisionPath::kFloat32;
    case Mode::kNative:
      return LowPrecisionPath::kNative;
    case Mode::kAuto:
      break;
  }
  return native ? LowPrecisionPath::kNative : LowPrecisionPath::kFloat32;
}

}  // namespace

LowPrecisionPath lowPrecisionPath(c10::ScalarType dtype) { return pathInMode(dtype, nativeOnThisHost(dtype)); }

LowPrecisionPath activationPath(c10::ScalarType dtype, bool onednn) {
  return pathInMode(dtype, onednn && nativeOnThisHost(dtype));
}

void setLowPrecisionMode(const std::string& s) { mode() = parseMode(s); }

std::string lowPrecisionMode() {
  switch (mode().load()) {
    case Mode::kFloat32:
      return "float32";
    case Mode::kNative:
      return "native";
    case Mode::kAuto:
      break;
  }
  return "auto";
}

// A tensor float32 whatever the operands' dtype: attention's logsumexp (an
// output of the flash kernels, an input of their backward). It takes no
// part in the dtype check and stays float32.
bool float32ByDesign(const c10::Argument& a) { return a.name() == "logsumexp"; }

bool float32Call(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  // 1: a matrix op, 2: an order or attention op, 0: neither
  const int kind = perOp(&op.schema(), [&] {
    const std::string& name = op.schema().name();
    if (lowPrecisionMatrixOps().count(name)) return 1;
    return lowPrecisionOrderOps().count(name) || lowPrecisionStandInOps().count(name) ? 2 : 0;
  });
  if (kind == 0) return false;
  const size_t nargs = op.schema().arguments().size();
  std::optional<c10::ScalarType> low;
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (float32ByDesign(op.schema().arguments()[i - (stack.size() - nargs)])) continue;
    if (v.isTensorList() || v.isOptionalTensorList()) return false;
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_floating_point()) continue;
    if (v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) continue;  // a Python number: it keeps the dtype
    if (low && v.toTensor().scalar_type() != *low) return false;  // mixed: CPU's kernel decides (and raises)
    low = v.toTensor().scalar_type();
  }
  return low && isLowPrecision(*low) &&
         (kind == 1 ? lowPrecisionPath(*low) : activationPath(*low, /*onednn=*/false)) == LowPrecisionPath::kFloat32;
}

namespace {

// A batched matrix call: out = beta * self + alpha * (a @ b) per batch entry
// (bmm: no self), its operands of one low-precision dtype.
struct BatchedCall {
  at::Tensor a, b, self, out;
  c10::Scalar beta = 0, alpha = 1;
};

// The bytes [first, last] a tensor's elements span (non-negative strides).
std::pair<uintptr_t, uintptr_t> span(const at::Tensor& t) {
  const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  uintptr_t last = first + t.element_size() - 1;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d) * t.element_size();
  return {first, last};
}

bool disjoint(const at::Tensor& a, const at::Tensor& b) {
  const auto x = span(a), y = span(b);
  return x.second < y.first || y.second < x.first;
}

bool sameView(const at::Tensor& a, const at::Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.sizes().equals(b.sizes()) && a.strides().equals(b.strides());
}

// The batched call on `stack` (bmm.out, baddbmm.out, baddbmm_), or nothing:
// another op or overload, or operands the chunked path does not take (an
// out= tensor the kernel must resize; the kernel then raises or resizes).
std::optional<BatchedCall> batchedCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& schema = op.schema();
  const bool bmm = schema.name() == "aten::bmm" && schema.overload_name() == "out";
  const bool baddbmm = (schema.name() == "aten::baddbmm" && schema.overload_name() == "out") ||
                       (schema.name() == "aten::baddbmm_" && schema.overload_name().empty());
  if (!bmm && !baddbmm) return std::nullopt;
  const size_t first = stack.size() - schema.arguments().size();
  auto arg = [&](size_t i) -> const c10::IValue& { return stack[first + i]; };
  BatchedCall c;
  if (bmm) {
    c.a = arg(0).toTensor(), c.b = arg(1).toTensor(), c.out = arg(2).toTensor();
  } else {
    c.self = arg(0).toTensor(), c.a = arg(1).toTensor(), c.b = arg(2).toTensor();
    c.beta = arg(3).toScalar(), c.alpha = arg(4).toScalar();
    c.out = schema.name() == "aten::baddbmm_" ? c.self : arg(5).toTensor();
  }
  if (c.a.dim() != 3 || c.b.dim() != 3 || c.out.dim() != 3) return std::nullopt;
  const int64_t n = c.a.size(0);
  if (c.a.numel() == 0 || c.b.numel() == 0 || c.b.size(0) != n || c.a.size(2) != c.b.size(1) ||
      !c.out.sizes().equals({n, c.a.size(1), c.b.size(2)}))
    return std::nullopt;
  const auto dtype = c.a.scalar_type();
  if (c.b.scalar_type() != dtype || c.out.scalar_type() != dtype) return std::nullopt;
  // An entry's result is written after its operands are read: the output may
  // be an operand itself, but not share memory with one otherwise (nor with
  // itself). (Host views of one device tensor are distinct tensors: compared
  // by the memory they span.)
  if (at::has_internal_overlap(c.out) != at::MemOverlap::No) return std::nullopt;
  for (const at::Tensor* t : {&c.a, &c.b, &c.self})
    if (t->defined() && !disjoint(c.out, *t) && !sameView(c.out, *t)) return std::nullopt;
  if (c.self.defined()) {
    if (c.self.scalar_type() != dtype || !at::is_expandable_to(c.self.sizes(), c.out.sizes())) return std::nullopt;
    c.self = c.self.expand(c.out.sizes());
  }
  return c;
}

// Float32 storage for a thread's entries: one buffer per thread, at most
// kChunkElements (so a thread keeps 1 MB, not the largest call's operands),
// else a tensor freed after the entry.
constexpr int64_t kChunkElements = int64_t{1} << 18;

at::Tensor chunkScratch(int64_t elements) {
  thread_local std::vector<float> buffer;
  if (elements > kChunkElements) return at::empty({elements}, at::kFloat);
  if (buffer.empty()) buffer.resize(kChunkElements);
  return at::from_blob(buffer.data(), {elements}, at::TensorOptions().dtype(at::kFloat));
}

// The float32 stand-in of `t` in `buf` from element `at`: t's own strides
// where t is dense (a transposed operand stays transposed, and converts as
// one run of memory), else contiguous.
at::Tensor standIn(const at::Tensor& buf, int64_t at, const at::Tensor& t) {
  const at::Tensor region = buf.narrow(0, at, t.numel());
  if (t.is_non_overlapping_and_dense()) return region.as_strided(t.sizes(), t.strides());
  return region.view(t.sizes());
}

// Whether each batch entry of `t` (its dims 1 and 2) is one run of memory:
// row-major (false) or column-major (true; a transposed operand, as
// attention's k^T). Nothing for other layouts and negated views.
std::optional<bool> entryLayout(const at::Tensor& t) {
  if (t.is_neg()) return std::nullopt;
  const int64_t r = t.size(1), c = t.size(2);
  if ((c == 1 || t.stride(2) == 1) && (r == 1 || t.stride(1) == c)) return false;
  if ((r == 1 || t.stride(1) == 1) && (c == 1 || t.stride(2) == r)) return true;
  return std::nullopt;
}

// The layouts of c's operands and output where the host GEMM takes c's
// entries (hostGemm, on raw memory: no ATen call per entry): each entry
// one run of memory, float32 stand-ins of an entry within kChunkElements,
// the vector loops and a host GEMM present.
struct GemmLayouts {
  bool a, b, out;
};

std::atomic<int64_t> g_gemm_entries{0};

std::optional<GemmLayouts> gemmLayouts(const BatchedCall& c) {
  if (kernelIsa() == KernelIsa::kNone || !hostGemmAvailable()) return std::nullopt;
  const int64_t rows = c.a.size(1), inner = c.a.size(2), cols = c.b.size(2);
  if (rows * inner + inner * cols + rows * cols > kChunkElements) return std::nullopt;
  if (!hostGemmTakes(rows, cols, inner, std::max(rows, inner), std::max(inner, cols), std::max(rows, cols)))
    return std::nullopt;
  const auto a = entryLayout(c.a), b = entryLayout(c.b), out = entryLayout(c.out);
  if (!a || !b || !out) return std::nullopt;
  return GemmLayouts{*a, *b, *out};
}

// Entries [begin, end) of `c` through the host GEMM, one at a time on the
// calling thread: its operands widened into the thread's buffer, the
// product (plus beta * self) computed there in the output's layout, and
// rounded once into the output. (A transposed output gets c^T = b^T a^T.)
void runGemmEntries(const BatchedCall& c, const GemmLayouts& layout, int64_t begin, int64_t end) {
  const int64_t rows = c.a.size(1), inner = c.a.size(2), cols = c.b.size(2);
  const bool bf16 = c.a.scalar_type() == at::kBFloat16;
  float* fa = chunkScratch(rows * inner + inner * cols + rows * cols).data_ptr<float>();
  float* fb = fa + rows * inner;
  float* fc = fb + inner * cols;
  const bool beta0 = c.beta.isFloatingPoint() ? c.beta.toDouble() == 0 : c.beta.toLong() == 0;
  const float alpha = static_cast<float>(c.alpha.toDouble()), beta = beta0 ? 0.f : static_cast<float>(c.beta.toDouble());
  const auto* a_low = static_cast<const uint16_t*>(c.a.const_data_ptr());
  const auto* b_low = static_cast<const uint16_t*>(c.b.const_data_ptr());
  auto* out_low = static_cast<uint16_t*>(c.out.data_ptr());
  // fc's layout as a tensor (for self, which may be broadcast: ATen's copy)
  const at::Tensor fc_view =
      at::from_blob(fc, {rows, cols}, layout.out ? at::IntArrayRef{1, rows} : at::IntArrayRef{cols, 1},
                    at::TensorOptions().dtype(at::kFloat));
  for (int64_t i = begin; i < end; ++i) {
    widenLoop(bf16, a_low + i * c.a.stride(0), fa, rows * inner);
    widenLoop(bf16, b_low + i * c.b.stride(0), fb, inner * cols);
    if (c.self.defined() && !beta0) convertOrCopy(fc_view, c.self.select(0, i));  // (beta 0: CPU ignores self)
    const GemmOperand a{fa, layout.a ? rows : inner, layout.a}, b{fb, layout.b ? inner : cols, layout.b};
    if (layout.out)
      hostGemm(cols, rows, inner, alpha, GemmOperand{b.data, b.ld, !b.transposed},
               GemmOperand{a.data, a.ld, !a.transposed}, beta, fc, rows);
    else
      hostGemm(rows, cols, inner, alpha, a, b, beta, fc, cols);
    narrowLoop(bf16, fc, out_low + i * c.out.stride(0), rows * cols);
  }
  g_gemm_entries.fetch_add(end - begin, std::memory_order_relaxed);
}

// Runs `c` in float32 in chunks of batch entries, one range of entries per
// thread of ATen's team in one parallel region: each thread converts a few
// entries of the operands to float32 (up to kChunkElements together), runs
// the float32 kernel over them (on that thread) and rounds their results
// once, then takes the next few. The float32 operands stay in the thread's
// cache between the three steps, and the region wakes the team once: the
// whole-tensor path converts each operand and the result in passes of their
// own: 1.33-1.39x the float32 kernel's time on a 16 x 128x64 @ 64x128 bmm
// on an AVX2 host, this 1.10-1.17x. Same arithmetic: the float32 kernel of the op on
// each entry, one rounding per result.
void runEntries(const BatchedCall& c, int64_t begin, int64_t end) {
  const int64_t rows = c.a.size(1), inner = c.a.size(2), cols = c.b.size(2);
  const int64_t per_entry = rows * inner + inner * cols + rows * cols;
  const int64_t step = std::max<int64_t>(1, kChunkElements / per_entry);
  for (int64_t s = begin; s < end; s += step) {
    const int64_t k = std::min(step, end - s);
    at::Tensor buf = chunkScratch(k * per_entry);
    const at::Tensor a_low = c.a.narrow(0, s, k), b_low = c.b.narrow(0, s, k), out_low = c.out.narrow(0, s, k);
    const at::Tensor a = standIn(buf, 0, a_low);
    const at::Tensor b = standIn(buf, a.numel(), b_low);
    at::Tensor out = standIn(buf, a.numel() + b.numel(), out_low);
    convertOrCopy(a, a_low);
    convertOrCopy(b, b_low);
    if (c.self.defined()) {
      // (beta 0: CPU's kernel ignores self, NaN and inf included)
      if (!(c.beta.isFloatingPoint() ? c.beta.toDouble() == 0 : c.beta.toLong() == 0))
        out.copy_(c.self.narrow(0, s, k));
      out.baddbmm_(a, b, c.beta, c.alpha);
    } else {
      at::bmm_out(out, a, b);
    }
    convertOrCopy(out_low, out);
  }
}

std::atomic<int64_t> g_batched_calls{0};

// Whether `c` runs chunked: entries enough to share evenly among the
// threads (else the whole-tensor path, whose float32 kernel is parallel
// inside one entry).
// (The task's threads: one below kParallelWork, useKernelThreads.)
bool chunked(const BatchedCall& c) {
  const int64_t n = c.a.size(0), threads = at::get_num_threads();
  return n % threads == 0 || n >= 4 * threads;
}

void runBatched(const BatchedCall& c) {
  g_batched_calls.fetch_add(1, std::memory_order_relaxed);
  if (const auto layout = gemmLayouts(c)) {
    forEachThread(c.a.size(0), [&](int64_t begin, int64_t end) { runGemmEntries(c, *layout, begin, end); });
    return;
  }
  forEachThread(c.a.size(0), [&](int64_t begin, int64_t end) { runEntries(c, begin, end); });
}

// t converted to `dtype` (float32 and bf16/fp16 either way) in t's layout:
// through the vector loops in ranges on the task's threads where t is dense
// (ATen's copy kernel took 10% of a bf16 256x512 @ 512x512 mm's time on an
// AVX2 host), else ATen's copy.
at::Tensor convertedTo(const at::Tensor& t, c10::ScalarType dtype) {
  if (t.is_non_overlapping_and_dense()) {
    at::Tensor out = at::empty_strided(t.sizes(), t.strides(), t.options().dtype(dtype));
    if (convertLowPrecision(out, t, /*threads=*/true)) return out;
  }
  return t.to(dtype);
}

}  // namespace

namespace {

std::atomic<int64_t> g_bits_calls{0};

// Whether this call of a bit-moving op (lowPrecisionBitsOps) runs over
// int16 views: its floating tensors share one low-precision dtype whose
// activationPath is kFloat32 (not mode native), and the overload takes no
// number that would be converted to the dtype (scatter's value, its reduce).
bool bitsCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const bool bits = perOp(&op.schema(), [&] {
    const auto& schema = op.schema();
    const std::string& overload = schema.overload_name();
    if (!lowPrecisionBitsOps().count(schema.name())) return false;
    return schema.name().rfind("aten::scatter", 0) != 0 || overload == "src" || overload == "src_out";
  });
  if (!bits) return false;
  const size_t nargs = op.schema().arguments().size();
  std::optional<c10::ScalarType> low;
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_floating_point()) continue;
    if (low && v.toTensor().scalar_type() != *low) return false;  // mixed: CPU's kernel decides (and raises)
    low = v.toTensor().scalar_type();
  }
  return low && isLowPrecision(*low) && activationPath(*low, /*onednn=*/false) == LowPrecisionPath::kFloat32;
}

// The op over int16 views of its bf16/fp16 tensors (the same bytes): fresh
// int16 results are viewed back as the dtype, returned arguments are the
// arguments themselves.
void callOverBits(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  g_bits_calls.fetch_add(1, std::memory_order_relaxed);
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  c10::ScalarType low = at::kBFloat16;
  std::vector<std::pair<at::Tensor, at::Tensor>> viewed;  // (argument, its int16 view)
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (!v.isTensor() || !v.toTensor().defined() || !isLowPrecision(v.toTensor().scalar_type())) continue;
    const at::Tensor t = v.toTensor();
    low = t.scalar_type();
    at::Tensor bits = t.view(at::kShort);
    viewed.emplace_back(t, bits);
    v = std::move(bits);
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (auto& [t, bits] : viewed)  // (an out= argument the kernel resized: its storage is t's)
    if (!t.sizes().equals(bits.sizes()) || !t.strides().equals(bits.strides()))
      t.set_(bits.storage(), bits.storage_offset(), bits.sizes(), bits.strides());
  const size_t nrets = op.schema().returns().size();
  for (size_t i = stack->size() - nrets; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().scalar_type() != at::kShort) continue;
    const at::Tensor r = v.toTensor();
    auto w = std::find_if(viewed.begin(), viewed.end(), [&](const auto& p) { return p.second.is_same(r); });
    v = w != viewed.end() ? w->first : r.view(low);
  }
}

}  // namespace

void callCpuKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool float32, int64_t work) {
  if (!float32) {
    if (callOverTable(op, stack, work)) return;
    if (bitsCall(op, *stack)) return callOverBits(op, stack);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  g_float32_calls.fetch_add(1, std::memory_order_relaxed);
  if (work) {
    auto batched = batchedCall(op, *stack);
    if (batched && chunked(*batched)) {
      ResultPlacement none({});  // (no result of the kernel's is an output here)
      runBatched(*batched);
      const size_t nargs = op.schema().arguments().size();
      const at::Tensor out = batched->out;
      stack->erase(stack->end() - nargs, stack->end());
      stack->emplace_back(out);
      return;
    }
  }
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  c10::ScalarType low = at::kBFloat16;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (argument, its float32 stand-in)
  std::vector<std::pair<at::Tensor, at::Tensor>> converted;  // (each argument converted, its stand-in)
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (!v.isTensor()) continue;
    const at::Tensor t = v.toTensor();
    if (!t.defined() || !isLowPrecision(t.scalar_type())) continue;
    low = t.scalar_type();
    // the same elements twice (attention's q = k = v, as one tensor or as
    // two views alike): one stand-in, as CPU's kernel reads one memory
    auto same = std::find_if(converted.begin(), converted.end(), [&](const auto& p) {
      const at::Tensor& u = p.first;
      return u.is_same(t) || (u.data_ptr() == t.data_ptr() && u.scalar_type() == t.scalar_type() &&
                              u.sizes().equals(t.sizes()) && u.strides().equals(t.strides()));
    });
    const bool fresh = same == converted.end();
    if (fresh) {
      if (work) useKernelThreads(t.numel());  // (a conversion's own thread count: see below)
      converted.emplace_back(t, convertedTo(t, at::kFloat));  // its values too: an in-place op reads them
    }
    at::Tensor f = fresh ? converted.back().second : same->second;
    // (an out= that is an input's memory: written back once, into it)
    if (isWritten(args[i]) && std::none_of(written.begin(), written.end(), [&](const auto& p) { return p.second.is_same(f); }))
      written.emplace_back(t, f);
    v = std::move(f);
  }
  if (work) useKernelThreads(work);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (auto& [t, f] : written) {  // each written argument rounded once
    if (work) useKernelThreads(t.numel());
    if (!t.sizes().equals(f.sizes())) t.resize_(f.sizes());  // as the kernel resizes an out= argument
    convertOrCopy(t, f, /*threads=*/true);
  }
  const size_t nrets = op.schema().returns().size();
  for (size_t i = stack->size() - nrets; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().scalar_type() != at::kFloat) continue;
    if (float32ByDesign(op.schema().returns()[i - (stack->size() - nrets)])) continue;
    const at::Tensor r = v.toTensor();
    auto w = std::find_if(written.begin(), written.end(), [&](const auto& p) { return p.second.is_same(r); });
    if (work && w == written.end()) useKernelThreads(r.numel());
    v = w != written.end() ? w->first : convertedTo(r, low);  // a returned argument, or a fresh result rounded once
  }
}

std::vector<at::Tensor> float32Scratch(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0 || !isLowPrecision(t.scalar_type())) continue;
    out.push_back(at::detail::empty_generic({t.numel()}, deviceAllocator(), c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                            at::kFloat, std::nullopt));
  }
  return out;
}

int64_t lowPrecisionFloat32Calls() { return g_float32_calls.load(); }
int64_t lowPrecisionChunkedCalls() { return g_batched_calls.load(); }
int64_t lowPrecisionBitsCalls() { return g_bits_calls.load(); }
int64_t lowPrecisionGemmEntries() { return g_gemm_entries.load(); }

const std::unordered_set<std::string>& lowPrecisionMatrixOps() {
  static const std::unordered_set<std::string> ops = {
      "aten::mm",     "aten::addmm",   "aten::addmm_",       "aten::bmm",          "aten::baddbmm",
      "aten::baddbmm_", "aten::addbmm", "aten::addbmm_",     "aten::convolution", "aten::_convolution",
      "aten::convolution_backward"};
  return ops;
}

const std::unordered_set<std::string>& lowPrecisionStandInOps() {
  static const std::unordered_set<std::string> ops = {
      "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
      "aten::xlogy"};
  return ops;
}

const std::unordered_set<std::string>& lowPrecisionBitsOps() {
  static const std::unordered_set<std::string> ops = {"aten::flip", "aten::gather", "aten::scatter", "aten::scatter_"};
  return ops;
}

const std::unordered_set<std::string>& lowPrecisionOrderOps() {
  static const std::unordered_set<std::string> ops = {
      "aten::sort",      "aten::topk", "aten::kthvalue", "aten::median", "aten::nanmedian", "aten::mode",
      "aten::_cummax_helper", "aten::_cummin_helper"};  // (cummax/cummin's CPU kernels)
  return ops;
}

}  // namespace openmtia
