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

#include "aten/prebuilt.h"

#include "prebuilt_includes.h"  // the kernel classes' headers

namespace openmtia {
namespace {

// The argument types handled here: an IValue converted to T (false if it
// holds something else).
bool convert(const c10::IValue& i, at::Tensor& v) { return i.isTensor() && (v = i.toTensor(), true); }
bool convert(const c10::IValue& i, at::Scalar& v) { return i.isScalar() && (v = i.toScalar(), true); }
bool convert(const c10::IValue& i, bool& v) { return i.isBool() && (v = i.toBool(), true); }
bool convert(const c10::IValue& i, int64_t& v) { return i.isInt() && (v = i.toInt(), true); }
bool convert(const c10::IValue& i, double& v) { return i.isDouble() && (v = i.toDouble(), true); }
bool convert(const c10::IValue& i, std::string& v) { return i.isString() && (v = i.toStringRef(), true); }
template <class T>
bool convert(const c10::IValue& i, std::optional<T>& v) {
  if (i.isNone()) return true;
  T x{};
  if (!convert(i, x)) return false;
  v = std::move(x);
  return true;
}

template <class T, class = void>
struct Convertible : std::false_type {};
template <class T>
struct Convertible<T, std::void_t<decltype(convert(std::declval<const c10::IValue&>(), std::declval<T&>()))>>
    : std::true_type {};

// Owns one argument of a kernel's meta()/impl() (stored as S) and gives the
// parameter of type T it binds to. The kernel's iterator borrows tensors from
// here, so holders never move once bound.
template <class T, class S = T>
struct Holder {
  static constexpr bool kSupported = Convertible<S>::value;
  S v{};
  bool bind(const c10::IValue& i) { return convert(i, v); }
  decltype(auto) get() const {
    if constexpr (std::is_same_v<T, S>) {
      return (v);  // a const reference
    } else if constexpr (std::is_same_v<T, at::OptionalTensorRef>) {
      return v ? at::OptionalTensorRef(*v) : at::OptionalTensorRef();
    } else if constexpr (std::is_same_v<T, at::OptionalScalarRef>) {
      return v ? at::OptionalScalarRef(&*v) : at::OptionalScalarRef();
    } else {
      return v ? T(*v) : T();  // std::optional<std::string_view>
    }
  }
};

// The storage of parameters that refer to their value.
template <class T>
struct StoredAs {
  using Type = T;
};
template <>
struct StoredAs<at::OptionalTensorRef> {
  using Type = std::optional<at::Tensor>;
};
template <>
struct StoredAs<at::OptionalScalarRef> {
  using Type = std::optional<at::Scalar>;
};
template <>
struct StoredAs<std::optional<std::string_view>> {
  using Type = std::optional<std::string>;
};
template <class T>
using HolderOf = Holder<T, typename StoredAs<T>::Type>;

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

  std::tuple<HolderOf<std::decay_t<M>>...> holders_;
  std::vector<at::Tensor> outs_;
  std::vector<at::Tensor> inputs_;     // the tensor arguments
  std::vector<at::Tensor> constants_;  // those whose values never change
  bool declined_ = false;
};

template <class Tuple>
struct AllSupported;
template <class... A>
struct AllSupported<std::tuple<A...>> : std::bool_constant<(HolderOf<std::decay_t<A>>::kSupported && ...)> {};

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
