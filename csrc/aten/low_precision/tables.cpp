// Tables of CPU's bf16/fp16 results (low_precision/tables.h).
#include "openmtia/runtime.h"
#include "aten/low_precision/kernels.h"
#include "aten/low_precision/low_precision.h"
#include "aten/low_precision/tables.h"
#include "aten/per_op.h"
#include "aten/threads/kernel_threads.h"
#include "runtime/result_placement.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/Functions.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>


namespace openmtia {
namespace {

constexpr int64_t kPatterns = int64_t{1} << 16;

std::atomic<int64_t> g_calls{0};
std::atomic<int64_t> g_made{0};

// One table per output of the op: entry p is the output's bits for the
// input whose bits are p.
using Tables = std::vector<std::vector<uint16_t>>;

bool isWrittenArg(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

// A Python number beside the tensor (fmod(x, 0.7) reaches the device as
// fmod.Tensor with a wrapped number): part of the key, as a number.
bool wrappedNumber(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.dim() == 0 && t.unsafeGetTensorImpl()->is_wrapped_number();
}

// The bytes of a number argument in the key, or nothing for an argument
// that keeps the call off the table path.
std::optional<std::string> numberKey(const c10::IValue& v) {
  auto bits = [](char tag, const void* p, size_t n) {
    std::string s(1, tag);
    s.append(static_cast<const char*>(p), n);
    return s;
  };
  if (v.isNone()) return std::string("n");
  if (v.isDouble()) {
    const double d = v.toDouble();
    return bits('d', &d, sizeof d);
  }
  if (v.isInt()) {
    const int64_t i = v.toInt();
    return bits('i', &i, sizeof i);
  }
  if (v.isBool()) return std::string(v.toBool() ? "T" : "F");
  if (v.isString()) return "s" + v.toStringRef() + '\0';
  if (v.isScalar()) {  // (a Scalar argument arrives as one of the above; complex does not)
    return std::nullopt;
  }
  if (v.isTensor() && wrappedNumber(v.toTensor())) {
    const at::Tensor& t = v.toTensor();
    if (t.scalar_type() == at::kDouble) {
      const double d = t.item<double>();
      return bits('D', &d, sizeof d);
    }
    if (t.scalar_type() == at::kLong) {
      const int64_t i = t.item<int64_t>();
      return bits('I', &i, sizeof i);
    }
    if (t.scalar_type() == at::kBool) return std::string(t.item<bool>() ? "t" : "f");
  }
  return std::nullopt;
}

// pow's exponents the table path takes: not an integer or +-0.5, which
// CPU's kernel computes as products, sqrt, rsqrt or reciprocals (cheap, and
// for -0.5 in bf16 its result for a value changes with the value's place in
// the tensor, so no table can be CPU's everywhere).
bool plainExponent(const c10::Scalar& e) {
  if (!e.isFloatingPoint()) return false;
  const double d = e.toDouble();
  return d != std::trunc(d) && std::abs(d) != 0.5;
}

// The call's shape, where the table path takes it.
struct TableCall {
  size_t self = 0;             // argument index of the tensor the outputs are functions of
  std::vector<size_t> written;  // argument indices of written tensors (out=, in-place self)
  std::string key;
};

bool plainDense(const at::Tensor& t) { return !t.is_neg() && !t.is_conj() && t.is_non_overlapping_and_dense(); }

std::optional<TableCall> tableCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& schema = op.schema();
  const bool listed = perOp(&schema, [&] {
    return lowPrecisionTableOps().count(schema.name() + "." + schema.overload_name()) > 0;
  });
  if (!listed) return std::nullopt;
  const auto& args = schema.arguments();
  const size_t first = stack.size() - args.size();
  TableCall c;
  std::optional<size_t> self;
  std::string key = schema.name();
  while (key.back() == '_') key.pop_back();  // (exp_ and exp share a table)
  const bool pow = key == "aten::pow", exp2 = key == "aten::exp2";
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (isWrittenArg(args[i])) {
      if (!v.isTensor()) return std::nullopt;
      c.written.push_back(i);
      if (i == 0) self = 0;  // an in-place op's self
      continue;
    }
    if (v.isTensor() && !wrappedNumber(v.toTensor())) {
      if (self) return std::nullopt;  // a second tensor
      self = i;
      continue;
    }
    const auto k = numberKey(v);
    if (!k) return std::nullopt;
    key += *k;
    if (pow && v.isScalar() && !plainExponent(v.toScalar())) return std::nullopt;
  }
  if (self != size_t{0}) return std::nullopt;  // (self first: not remainder(2.0, x))
  const at::Tensor& x = stack[first + *self].toTensor();
  if (!x.defined() || !isLowPrecision(x.scalar_type()) || x.numel() <= loopMinElements() || !plainDense(x))
    return std::nullopt;
  if (activationPath(x.scalar_type(), /*onednn=*/false) != LowPrecisionPath::kFloat32) return std::nullopt;
  // (exp2 is cheaper than a lookup on the 16-lane loops' hosts: CPU's own
  // bf16/fp16 kernel there, 0.9-1.07x float32's time against the table's 1.6-1.8)
  if (exp2 && kernelIsa() == KernelIsa::kAvx512) return std::nullopt;
  if (c.written.empty() && !x.is_contiguous()) return std::nullopt;  // (fresh results are made contiguous)
  for (size_t w : c.written) {
    const at::Tensor& o = stack[first + w].toTensor();
    if (w == *self) continue;
    // an out= of x's dtype, sizes and strides, not sharing x's memory (else
    // CPU's kernel: it resizes, casts, or raises)
    if (!o.defined() || o.scalar_type() != x.scalar_type() || !o.sizes().equals(x.sizes()) ||
        !o.strides().equals(x.strides()) || !plainDense(o) || o.data_ptr() == x.data_ptr())
      return std::nullopt;
    if (o.storage().is_alias_of(x.storage())) return std::nullopt;
  }
  key += x.scalar_type() == at::kBFloat16 ? "|bf16" : "|fp16";
  c.self = *self;
  c.key = std::move(key);
  return c;
}

// Every bit pattern of `dtype`, in order.
at::Tensor allPatterns(c10::ScalarType dtype) {
  at::Tensor bits = at::empty({kPatterns}, at::TensorOptions().dtype(at::kShort));
  auto* p = static_cast<uint16_t*>(bits.data_ptr());
  for (int64_t i = 0; i < kPatterns; ++i) p[i] = static_cast<uint16_t>(i);
  return bits.view(dtype);
}

// The tables of `c`'s op: CPU's kernel of the dtype over every pattern, the
// call's numbers as they are. Empty when the kernel's results are not of
// x's dtype and sizes (the call then runs CPU's kernel).
Tables makeTables(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const TableCall& c) {
  const auto& args = op.schema().arguments();
  const size_t first = stack.size() - args.size();
  const c10::ScalarType dtype = stack[first + c.self].toTensor().scalar_type();
  ResultPlacement none({});  // (the table's 128 KB are no output of the task's)
  torch::jit::Stack s(stack.begin() + first, stack.end());
  s[c.self] = allPatterns(dtype);
  for (size_t w : c.written)
    if (w != c.self) s[w] = at::empty({0}, at::TensorOptions().dtype(dtype));
  std::vector<at::Tensor> outputs;
  if (c.written.empty()) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &s);
    for (const c10::IValue& v : s) outputs.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  } else {
    torch::jit::Stack copy = s;  // (the written tensors, as the kernel leaves them)
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &s);
    for (size_t w : c.written) outputs.push_back(copy[w].toTensor());
  }
  Tables tables;
  for (const at::Tensor& o : outputs) {
    if (!o.defined() || o.scalar_type() != dtype || o.numel() != kPatterns) return {};
    const at::Tensor bits = o.contiguous().view(at::kShort);
    std::vector<uint16_t> t(kPatterns);
    std::memcpy(t.data(), bits.data_ptr(), kPatterns * sizeof(uint16_t));
    tables.push_back(std::move(t));
  }
  g_made.fetch_add(1, std::memory_order_relaxed);
  return tables;
}

// The kept tables by key (shared: a dropped one stays alive in the call
// using it); an empty Tables marks an op whose results the path cannot take.
struct Cache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const Tables>> tables;
  std::deque<std::string> order;  // oldest first
};

Cache& cache() {
  static Cache* c = new Cache();  // (never destroyed: tasks may run at exit)
  return *c;
}

std::shared_ptr<const Tables> tablesFor(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                        const TableCall& c) {
  Cache& k = cache();
  {
    std::lock_guard<std::mutex> lk(k.mu);
    auto it = k.tables.find(c.key);
    if (it != k.tables.end()) return it->second;
  }
  auto made = std::make_shared<const Tables>(makeTables(op, stack, c));  // (outside the lock: a kernel runs)
  std::lock_guard<std::mutex> lk(k.mu);
  auto [it, fresh] = k.tables.emplace(c.key, made);
  if (fresh) {
    k.order.push_back(c.key);
    while (k.order.size() > kMaxTables) {
      k.tables.erase(k.order.front());
      k.order.pop_front();
    }
  }
  return it->second;
}

void lookUp(const uint16_t* table, const uint16_t* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint16_t a = table[in[i]], b = table[in[i + 1]], c = table[in[i + 2]], d = table[in[i + 3]];
    out[i] = a, out[i + 1] = b, out[i + 2] = c, out[i + 3] = d;
  }
  for (; i < n; ++i) out[i] = table[in[i]];
}

}  // namespace

bool callOverTable(const c10::OperatorHandle& op, torch::jit::Stack* stack, int64_t work) {
  const auto c = tableCall(op, *stack);
  if (!c) return false;
  const std::shared_ptr<const Tables> tables = tablesFor(op, *stack, *c);
  const size_t nargs = op.schema().arguments().size(), first = stack->size() - nargs;
  const at::Tensor x = (*stack)[first + c->self].toTensor();
  const size_t nouts = c->written.empty() ? op.schema().returns().size() : c->written.size();
  if (tables->size() != nouts) return false;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<at::Tensor> outs;
  if (c->written.empty()) {
    for (size_t i = 0; i < nouts; ++i) outs.push_back(at::empty(x.sizes(), x.options()));  // (a task's placed results)
  } else {
    for (size_t w : c->written) outs.push_back((*stack)[first + w].toTensor());
  }
  // x and each output: one run of memory in the same element order
  const auto* in = static_cast<const uint16_t*>(x.const_data_ptr());
  std::vector<uint16_t*> out_ptrs;
  for (const at::Tensor& o : outs) out_ptrs.push_back(static_cast<uint16_t*>(o.data_ptr()));
  const int64_t n = x.numel();
  if (work) useKernelThreads(n);
  forEachThread(n, [&](int64_t begin, int64_t end) {
    // (an in-place output is x itself: each element is read before written,
    // so its own output goes last)
    for (size_t j = outs.size(); j-- > 0;) lookUp((*tables)[j].data(), in + begin, out_ptrs[j] + begin, end - begin);
  });
  stack->erase(stack->end() - nargs, stack->end());
  for (at::Tensor& o : outs) stack->emplace_back(std::move(o));
  return true;
}

const std::unordered_set<std::string>& lowPrecisionTableOps() {
  static const std::unordered_set<std::string> ops = [] {
    std::unordered_set<std::string> s;
    // functions of one tensor without numbers: functional, out= and in-place
    for (const char* n : {"exp", "exp2", "expm1", "log2", "log10", "log1p", "tan", "asin", "acos", "atan", "sinh",
                          "cosh", "asinh", "acosh", "atanh", "erfc", "erfinv", "sinc", "lgamma", "digamma", "i0", "sin", "cos", "tanh", "erf",
                          "mish"}) {
      const std::string name = std::string("aten::") + n;
      s.insert(name + ".");
      s.insert(name + ".out");
      s.insert(name + "_.");
    }
    for (const char* n : {"special_i0e", "special_i1", "special_i1e"}) {
      const std::string name = std::string("aten::") + n;
      s.insert(name + ".");
      s.insert(name + ".out");
    }
    // with numbers
    for (const char* n : {"aten::elu", "aten::softplus", "aten::logit", "aten::celu"}) {
      s.insert(std::string(n) + ".");
      s.insert(std::string(n) + ".out");
    }
    for (const char* n : {"aten::elu_.", "aten::logit_.", "aten::celu_.", "aten::log_sigmoid_forward.",
                          "aten::log_sigmoid_forward.output", "aten::pow.Tensor_Scalar",
                          "aten::pow.Tensor_Scalar_out", "aten::pow_.Scalar", "aten::fmod.Scalar",
                          "aten::fmod.Scalar_out", "aten::fmod_.Scalar", "aten::remainder.Scalar",
                          "aten::remainder.Scalar_out", "aten::remainder_.Scalar", "aten::fmod.Tensor",
                          "aten::fmod.Tensor_out", "aten::fmod_.Tensor", "aten::remainder.Tensor",
                          "aten::remainder.Tensor_out", "aten::remainder_.Tensor"})
      s.insert(n);
    return s;
  }();
  return ops;
}

int64_t lowPrecisionTableCalls() { return g_calls.load(); }
int64_t lowPrecisionTablesMade() { return g_made.load(); }

}  // namespace openmtia
