// Prebuilt kernels for graph replays.
//
// Most pointwise ops are structured kernels that inherit TensorIteratorBase:
// their meta() builds a TensorIterator (broadcast shape, dtypes, strides, the
// operands' data pointers) and impl() runs the CPU loop over it. On a replay
// of a captured graph every address is the same as at capture, so the
// iterator can be built once, at capture time, and each replay only runs
// impl(): the ATen CPU kernel itself, with its numerics, minus the set-up that
// otherwise dominates small ops. (A CUDA graph likewise records kernel
// launches with their parameters already computed.)
//
// The kernel classes are ATen's own (at::native::structured_<kernel>, listed
// by tools/gen_structured_ops.py); a small subclass plays the part of the
// generated out=/in-place wrapper, with the outputs the fallback allocated.
// It declines (the fallback then records its usual boxed call) when:
//  - an output would have to be resized or restrided (a proxy output);
//  - an operand is a copy, made at build time, of a tensor whose values can
//    change between replays (a CPU TensorIterator converts inputs of another
//    dtype; some meta functions convert them too); converted copies of
//    constants (a Python number) are fine;
//  - an argument is of a type not handled here.
#include <ATen/TensorIterator.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/function_schema.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "common.h"

#include "prebuilt_includes.h"  // the kernel classes' headers

namespace openmtia {
namespace {

// Owns one argument of a kernel's meta()/impl() and gives the parameter it
// binds to. The kernel's iterator borrows tensors from here, so holders never
// move once bound.
template <class T>
struct Holder {
  static constexpr bool kSupported = false;
};

template <class T>
struct Plain {
  static constexpr bool kSupported = true;
  T v{};
  const T& get() const { return v; }
};

template <>
struct Holder<at::Tensor> : Plain<at::Tensor> {
  bool bind(const c10::IValue& i) {
    if (!i.isTensor()) return false;
    v = i.toTensor();
    return true;
  }
};

template <>
struct Holder<std::optional<at::Tensor>> : Plain<std::optional<at::Tensor>> {
  bool bind(const c10::IValue& i) {
    if (i.isNone()) return true;
    if (!i.isTensor()) return false;
    v = i.toTensor();
    return true;
  }
};

template <>
struct Holder<at::OptionalTensorRef> {
  static constexpr bool kSupported = true;
  at::Tensor v;
  bool bind(const c10::IValue& i) {
    if (i.isNone()) return true;
    if (!i.isTensor()) return false;
    v = i.toTensor();
    return true;
  }
  at::OptionalTensorRef get() const { return v.defined() ? at::OptionalTensorRef(v) : at::OptionalTensorRef(); }
};

template <>
struct Holder<at::Scalar> : Plain<at::Scalar> {
  bool bind(const c10::IValue& i) {
    if (!i.isScalar()) return false;
    v = i.toScalar();
    return true;
  }
};

template <>
struct Holder<std::optional<at::Scalar>> : Plain<std::optional<at::Scalar>> {
  bool bind(const c10::IValue& i) {
    if (i.isNone()) return true;
    if (!i.isScalar()) return false;
    v = i.toScalar();
    return true;
  }
};

template <>
struct Holder<at::OptionalScalarRef> {
  static constexpr bool kSupported = true;
  std::optional<at::Scalar> v;
  bool bind(const c10::IValue& i) {
    if (i.isNone()) return true;
    if (!i.isScalar()) return false;
    v = i.toScalar();
    return true;
  }
  at::OptionalScalarRef get() const { return v ? at::OptionalScalarRef(&*v) : at::OptionalScalarRef(); }
};

template <>
struct Holder<bool> : Plain<bool> {
  bool bind(const c10::IValue& i) {
    if (!i.isBool()) return false;
    v = i.toBool();
    return true;
  }
};

template <>
struct Holder<int64_t> : Plain<int64_t> {
  bool bind(const c10::IValue& i) {
    if (!i.isInt()) return false;
    v = i.toInt();
    return true;
  }
};

template <>
struct Holder<double> : Plain<double> {
  bool bind(const c10::IValue& i) {
    if (!i.isDouble()) return false;
    v = i.toDouble();
    return true;
  }
};

template <>
struct Holder<std::optional<std::string_view>> {
  static constexpr bool kSupported = true;
  std::optional<std::string> v;
  bool bind(const c10::IValue& i) {
    if (i.isNone()) return true;
    if (!i.isString()) return false;
    v = i.toStringRef();
    return true;
  }
  std::optional<std::string_view> get() const { return v ? std::optional<std::string_view>(*v) : std::nullopt; }
};

template <class F>
struct MemFn;
template <class C, class R, class... A>
struct MemFn<R (C::*)(A...)> {
  using Ret = R;
  using Args = std::tuple<A...>;
};

// A kernel of class Base whose meta() takes M...; impl() takes M... and then
// one output per return.
template <class Base, size_t NumOuts, class... M>
class Prebuilt final : public Base, public PrebuiltKernel {
 public:
  Prebuilt(std::vector<at::Tensor> outs, const std::vector<at::Tensor>& constants)
      : outs_(std::move(outs)), constants_(constants) {}

  bool bindArgs(const std::vector<c10::IValue>& args) {
    if (args.size() != sizeof...(M) || outs_.size() != NumOuts) return false;
    for (const auto& a : args)
      if (a.isTensor()) inputs_.push_back(a.toTensor());
    return bindEach(args, std::index_sequence_for<M...>{});
  }

  // Builds the iterator; false if replays could not reuse it.
  bool prepare() {
    try {
      callMeta(std::index_sequence_for<M...>{});
    } catch (const std::exception&) {
      return false;
    }
    return !declined_ && reusable();
  }

  void run() override {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // as the boxed CPU call
    callImpl(std::index_sequence_for<M...>{}, std::make_index_sequence<NumOuts>{});
  }

  const at::Tensor& maybe_get_output(int64_t i) override { return outs_[i]; }

  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    if (!fits(i, sizes, options) || !outs_[i].strides().equals(strides)) declined_ = true;  // needs a proxy
    Base::set_output_raw_strided(i, sizes, strides, options);
  }

  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    if (!fits(i, sizes, options)) declined_ = true;  // would be resized
    Base::set_output_raw_strided(i, sizes, strides, options);
  }

 private:
  template <size_t... I>
  bool bindEach(const std::vector<c10::IValue>& args, std::index_sequence<I...>) {
    return (std::get<I>(holders_).bind(args[I]) && ...);
  }
  template <size_t... I>
  void callMeta(std::index_sequence<I...>) {
    this->meta(std::get<I>(holders_).get()...);
  }
  template <size_t... I, size_t... J>
  void callImpl(std::index_sequence<I...>, std::index_sequence<J...>) {
    this->impl(std::get<I>(holders_).get()..., outs_[J]...);
  }

  bool fits(int64_t i, at::IntArrayRef sizes, const at::TensorOptions& options) const {
    const at::Tensor& o = outs_[i];
    return o.sizes().equals(sizes) && o.dtype() == options.dtype();
  }

  // Every operand must read or write the memory of a tensor given (so it
  // sees each replay's values), or be a converted copy of a constant. (A meta
  // function may convert an input itself, e.g. pow's base.to(common_dtype),
  // or the iterator may, keeping the original.)
  bool reusable() const {
    auto given = [&](const at::TensorBase& t) {
      if (!t.defined() || !t.has_storage()) return false;
      const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
      auto same = [&](const at::Tensor& g) { return g.defined() && g.storage().unsafeGetStorageImpl() == s; };
      return std::any_of(outs_.begin(), outs_.end(), same) || std::any_of(inputs_.begin(), inputs_.end(), same);
    };
    for (const auto& op : this->operands_) {
      if (given(op.tensor_base())) continue;
      if (op.is_output || !op.original_tensor_base().defined()) return false;
      const c10::TensorImpl* orig = op.original_tensor_base().unsafeGetTensorImpl();
      if (std::none_of(constants_.begin(), constants_.end(),
                       [&](const at::Tensor& c) { return c.unsafeGetTensorImpl() == orig; }))
        return false;  // a converted snapshot of a device tensor
    }
    return true;
  }

  std::tuple<Holder<std::decay_t<M>>...> holders_;
  std::vector<at::Tensor> outs_;
  std::vector<at::Tensor> inputs_;     // the tensor arguments
  std::vector<at::Tensor> constants_;  // those whose values never change
  bool declined_ = false;
};

template <class Tuple>
struct AllSupported;
template <class... A>
struct AllSupported<std::tuple<A...>> : std::bool_constant<(Holder<std::decay_t<A>>::kSupported && ...)> {};

template <class Base, size_t NumOuts, class Tuple>
struct PrebuiltFor;
template <class Base, size_t NumOuts, class... M>
struct PrebuiltFor<Base, NumOuts, std::tuple<M...>> {
  using Type = Prebuilt<Base, NumOuts, M...>;
};

// impl()'s parameters are meta()'s followed by the outputs (structured ops
// with precomputed values have others: not handled).
template <class MetaArgs, class ImplArgs, size_t... I>
constexpr bool implExtendsMeta(std::index_sequence<I...>) {
  return (std::is_same_v<std::tuple_element_t<I, MetaArgs>, std::tuple_element_t<I, ImplArgs>> && ...);
}

template <class Base>
std::shared_ptr<PrebuiltKernel> make(const std::vector<c10::IValue>& args, std::vector<at::Tensor> outs,
                                     const std::vector<at::Tensor>& constants) {
  using MetaFn = MemFn<decltype(&Base::meta)>;
  using ImplFn = MemFn<decltype(&Base::impl)>;
  using MetaArgs = typename MetaFn::Args;
  using ImplArgs = typename ImplFn::Args;
  constexpr size_t kMeta = std::tuple_size_v<MetaArgs>;
  constexpr size_t kImpl = std::tuple_size_v<ImplArgs>;
  if constexpr (std::is_void_v<typename MetaFn::Ret> && kImpl > kMeta && AllSupported<MetaArgs>::value) {
    if constexpr (implExtendsMeta<MetaArgs, ImplArgs>(std::make_index_sequence<kMeta>{})) {
      using K = typename PrebuiltFor<Base, kImpl - kMeta, MetaArgs>::Type;
      auto k = std::make_shared<K>(std::move(outs), constants);
      if (k->bindArgs(args) && k->prepare()) return k;
    }
  }
  return nullptr;
}

using Factory = std::shared_ptr<PrebuiltKernel> (*)(const std::vector<c10::IValue>&, std::vector<at::Tensor>,
                                                    const std::vector<at::Tensor>&);

const std::unordered_map<std::string, Factory>& factories() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, Factory>();
#define OPENMTIA_PREBUILT(name, overload, cls) t->emplace(std::string(name) + "." + overload, &make<cls>);
#include "prebuilt_kernels.h"
#undef OPENMTIA_PREBUILT
    return t;
  }();
  return *table;
}

std::atomic<int64_t> prebuilt_count{0};

}  // namespace

std::shared_ptr<PrebuiltKernel> prebuildKernel(const c10::FunctionSchema& schema, std::vector<c10::IValue> args,
                                               std::vector<at::Tensor> outs, const std::vector<at::Tensor>& constants) {
  std::string key = schema.name() + "." + schema.overload_name();
  // relu is clamp_min(self, 0) in ATen's CPU kernel (Activation.cpp), which
  // rejects bool
  if ((key == "aten::relu." || key == "aten::relu_.") && args.size() == 1 && args[0].isTensor() &&
      args[0].toTensor().scalar_type() != at::kBool) {
    key = key == "aten::relu." ? "aten::clamp_min." : "aten::clamp_min_.";
    args.emplace_back(at::Scalar(int64_t(0)));
  }
  auto it = factories().find(key);
  if (it == factories().end()) return nullptr;
  auto kernel = it->second(args, std::move(outs), constants);
  if (kernel) prebuilt_count.fetch_add(1, std::memory_order_relaxed);
  return kernel;
}

int64_t prebuiltKernelCount() { return prebuilt_count.load(); }

}  // namespace openmtia
