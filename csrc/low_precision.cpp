// bf16 and fp16 matrix ops through float32 (see low_precision.h).
#include "low_precision.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Version.h>
#include <algorithm>

#include <atomic>
#include <cstdlib>
#include <fstream>

#include "common.h"

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

bool float32Call(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (!perOp(&op.schema(), [&] { return lowPrecisionMatrixOps().count(op.schema().name()) > 0; })) return false;
  const size_t nargs = op.schema().arguments().size();
  std::optional<c10::ScalarType> low;
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensorList() || v.isOptionalTensorList()) return false;
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_floating_point()) continue;
    if (low && v.toTensor().scalar_type() != *low) return false;  // mixed: CPU's kernel decides (and raises)
    low = v.toTensor().scalar_type();
  }
  return low && isLowPrecision(*low) && lowPrecisionPath(*low) == LowPrecisionPath::kFloat32;
}

void callCpuKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool float32, int64_t work) {
  if (!float32) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  g_float32_calls.fetch_add(1, std::memory_order_relaxed);
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  c10::ScalarType low = at::kBFloat16;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (argument, its float32 stand-in)
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (!v.isTensor()) continue;
    const at::Tensor t = v.toTensor();
    if (!t.defined() || !isLowPrecision(t.scalar_type())) continue;
    low = t.scalar_type();
    if (work) useKernelThreads(t.numel());  // (a conversion's own thread count: see below)
    at::Tensor f = t.to(at::kFloat);  // its values too: an in-place op reads them
    if (isWritten(args[i])) written.emplace_back(t, f);
    v = std::move(f);
  }
  if (work) useKernelThreads(work);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (auto& [t, f] : written) {  // each written argument rounded once
    if (work) useKernelThreads(t.numel());
    if (!t.sizes().equals(f.sizes())) t.resize_(f.sizes());  // as the kernel resizes an out= argument
    t.copy_(f);
  }
  const size_t nrets = op.schema().returns().size();
  for (size_t i = stack->size() - nrets; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!v.isTensor() || !v.toTensor().defined() || v.toTensor().scalar_type() != at::kFloat) continue;
    const at::Tensor r = v.toTensor();
    auto w = std::find_if(written.begin(), written.end(), [&](const auto& p) { return p.second.is_same(r); });
    if (work && w == written.end()) useKernelThreads(r.numel());
    v = w != written.end() ? w->first : r.to(low);  // a returned argument, or a fresh result rounded once
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

const std::unordered_set<std::string>& lowPrecisionMatrixOps() {
  static const std::unordered_set<std::string> ops = {
      "aten::mm",     "aten::addmm",   "aten::addmm_",       "aten::bmm",          "aten::baddbmm",
      "aten::baddbmm_", "aten::addbmm", "aten::addbmm_",     "aten::convolution", "aten::_convolution",
      "aten::convolution_backward"};
  return ops;
}

}  // namespace openmtia
