#include "aten/fallback/plan_cache.h"
#include "runtime/host_memory_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace openmtia {

size_t Plan::bytes() const {
  size_t n = sizeof(Plan) + is_list.size() + resized.size() * sizeof(resized[0]);
  auto meta = [](const Meta& m) { return sizeof(Out) + (m.sizes.size() + m.strides.size()) * sizeof(int64_t); };
  for (const auto& r : returns)
    for (const auto& o : r) n += meta(o.meta);
  for (const auto& [k, m] : resized) n += meta(m);
  return n;
}

Plan::Meta metaOf(const at::Tensor& t) {
  return {t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type(), t.is_conj(), t.is_neg()};
}

bool sameMeta(const at::Tensor& t, const Plan::Meta& m) {
  return t.sizes().equals(m.sizes) && t.strides().equals(m.strides) && t.storage_offset() == m.offset &&
         t.is_conj() == m.conj && t.is_neg() == m.neg;
}

namespace {

// Ops whose output shapes follow from the values of their numbers.
bool numbersDecideShapes(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  return name == "aten::arange" || name == "aten::range";
}

bool isNumberType(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  return t->kind() == c10::TypeKind::FloatType || t->kind() == c10::TypeKind::NumberType ||
         t->kind() == c10::TypeKind::ComplexType;
}

// The ranges argument checks look at: NaN, -inf, < -1, -1, (-1, 0), 0, (0, 1), 1, > 1, inf.
int64_t numberClass(double v) {
  if (std::isnan(v)) return 0;
  if (v == -std::numeric_limits<double>::infinity()) return 1;
  if (v < -1) return 2;
  if (v == -1) return 3;
  if (v < 0) return 4;
  if (v == 0) return 5;
  if (v < 1) return 6;
  if (v == 1) return 7;
  if (v < std::numeric_limits<double>::infinity()) return 8;
  return 9;
}

}  // namespace

KeyBuilder::KeyBuilder(const c10::OperatorHandle& op, Shapes shapes)
    : shapes_(shapes == Shapes::kKept), exact_numbers_(numbersDecideShapes(op)) {
  key_.reserve(256);
  put(shapes_ ? '@' : 'F', static_cast<int64_t>(reinterpret_cast<intptr_t>(&op.schema())));
}

void KeyBuilder::addState(int64_t v) { put('G', v); }

namespace {
// SymInt, SymInt?, SymInt[], SymInt[]? arguments (the schema's real types):
// sizes, as the tensors' are.
bool isSymIntType(const c10::TypePtr& t) {
  c10::TypePtr e = t;
  if (auto opt = e->cast<c10::OptionalType>()) e = opt->getElementType();
  if (auto list = e->cast<c10::ListType>()) e = list->getElementType();
  return e->kind() == c10::TypeKind::SymIntType;
}
}  // namespace

bool KeyBuilder::add(const c10::IValue& v, const c10::TypePtr& type) {
  // A family omits sizes given as SymInt arguments too (a table's total
  // dimension, a count of values to come): the Meta kernel plans from them.
  // Whether one is given, and a list's length, stay.
  if (!shapes_ && isSymIntType(type)) {
    if (v.isNone()) return put('s', -1), true;
    if (v.isList()) return put('s', static_cast<int64_t>(v.toListRef().size())), true;
    return put('s', 0), true;
  }
  if (v.isTensor()) return tensor(v.toTensor());
  if (v.isTensorList()) {
    auto l = v.toTensorList();
    put('L', l.size());
    for (const at::Tensor& t : l) tensor(t);
    return true;
  }
  if (v.isOptionalTensorList()) {
    auto l = v.toOptionalTensorList();
    put('O', l.size());
    for (const std::optional<at::Tensor>& t : l) {
      if (t.has_value()) tensor(*t);
      else put('n', 0);
    }
    return true;
  }
  if (v.isNone()) return put('N', 0), true;
  if (v.isGenerator()) return put('g', 0), true;  // plans do not depend on it
  if (v.isBool()) return put('b', v.toBool()), true;
  const bool number_type = !exact_numbers_ && isNumberType(type);
  if (v.isInt()) {
    if (number_type) return number('j', static_cast<double>(v.toInt()));  // an int Scalar
    return put('i', v.toInt()), true;  // an int argument: a size, a dim, ...
  }
  if (v.isDouble()) {
    if (number_type) return number('d', v.toDouble());
    return putBytes('d', v.toDouble()), true;
  }
  if (v.isComplexDouble()) {
    if (!number_type) return false;
    auto c = v.toComplexDouble();
    return number('c', c.real()) && number('c', c.imag());
  }
  if (v.isIntList()) {
    auto l = v.toIntList();
    put('I', l.size());
    for (int64_t x : l) put('i', x);
    return true;
  }
  if (v.isDoubleList()) {  // scale factors and the like: they may decide shapes
    auto l = v.toDoubleList();
    put('D', l.size());
    for (double x : l) putBytes('d', x);
    return true;
  }
  if (v.isBoolList()) {
    auto l = v.toBoolList();
    put('B', l.size());
    for (bool x : l) put('b', x);
    return true;
  }
  if (v.isList()) {  // Scalar[] (a foreach op's scalar per tensor): each as a Scalar argument is keyed
    c10::TypePtr e = type;
    if (auto opt = e->cast<c10::OptionalType>()) e = opt->getElementType();
    auto list_type = e->cast<c10::ListType>();
    if (!list_type || list_type->getElementType()->kind() != c10::TypeKind::NumberType) return false;
    const auto& l = v.toListRef();
    put('S', l.size());
    for (const c10::IValue& x : l) {
      double d;
      if (x.isInt()) d = static_cast<double>(x.toInt());
      else if (x.isDouble()) d = x.toDouble();
      else return false;  // (complex scalars: no cache)
      if (exact_numbers_) putBytes(x.isInt() ? 'j' : 'd', d);
      else number(x.isInt() ? 'j' : 'd', d);
    }
    return true;
  }
  if (v.isDevice()) return put('v', static_cast<int64_t>(v.toDevice().type()) * 1000 + v.toDevice().index()), true;
  if (v.isString()) {
    put('s', v.toStringRef().size());
    key_.append(v.toStringRef());
    return true;
  }
  return false;  // SymInts, objects, ...: no cache
}

bool KeyBuilder::number(char tag, double v) {
  int64_t order = 3;  // against the previous number of the call: <, ==, >, or none
  if (last_number_) order = std::isnan(v) || std::isnan(*last_number_) ? 4 : v < *last_number_ ? 0 : v == *last_number_ ? 1 : 2;
  last_number_ = v;
  put(tag, numberClass(v) | order << 8);
  return true;
}

bool KeyBuilder::tensor(const at::Tensor& t) {
  if (!t.defined()) return put('u', 0), true;
  put('t', static_cast<int64_t>(t.device().type()) * 1000 + t.device().index());
  int64_t s = storageIndex(t);
  put('a', s);
  offsets_.emplace_back(s, t.storage_offset());
  put('y', static_cast<int64_t>(t.scalar_type()) | (t.is_conj() << 8) | (t.is_neg() << 9) |
               (static_cast<int64_t>(t.layout()) << 10) |
               (static_cast<int64_t>(t.unsafeGetTensorImpl()->is_wrapped_number()) << 16));
  put('r', t.dim());
  if (!shapes_) put('e', t.numel() == 0);  // a family's calls are all empty there, or none is
  for (int64_t d = 0; shapes_ && d < t.dim(); ++d) {
    put('z', t.size(d));
    put('x', t.stride(d));
  }
  return true;
}

// Which earlier tensor argument's storage t shares (aliasing decides memory
// overlap checks), by order of first appearance.
int64_t KeyBuilder::storageIndex(const at::Tensor& t) {
  const void* s = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  if (!s) return -1;
  int64_t i = -1;
  if (storages_.size() < 32) {
    auto it = std::find(storages_.begin(), storages_.end(), s);
    if (it != storages_.end()) i = it - storages_.begin();
  } else {
    if (index_.empty())
      for (size_t k = 0; k < storages_.size(); ++k) index_.emplace(storages_[k], k);
    auto it = index_.find(s);
    if (it != index_.end()) i = static_cast<int64_t>(it->second);
    else index_.emplace(s, storages_.size());
  }
  if (i < 0) {
    storages_.push_back(s);
    uses_.push_back(0);
    i = static_cast<int64_t>(storages_.size()) - 1;
  }
  ++uses_[i];
  return i;
}

std::string KeyBuilder::key() {
  // the offsets of tensors that share a storage: they decide whether they overlap
  for (const auto& [s, off] : offsets_)
    if (s >= 0 && uses_[s] > 1) put('o', off);
  return std::move(key_);
}

void KeyBuilder::put(char tag, int64_t v) { putBytes(tag, v); }

template <typename T>
void KeyBuilder::putBytes(char tag, const T& v) {
  key_.push_back(tag);
  key_.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// ------------------------------------------------------------------ the cache

namespace {
constexpr int64_t kDefaultMaxEntries = 50000;
constexpr int64_t kDefaultMaxBytes = int64_t{64} << 20;
constexpr size_t kEntryOverhead = 96;  // list node, index node, control block
}  // namespace

std::shared_ptr<const Plan> PlanCache::get(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void PlanCache::put(const std::string& key, std::shared_ptr<const Plan> plan) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    stats_.bytes -= static_cast<int64_t>(it->second->second->bytes());
    it->second->second = std::move(plan);
    stats_.bytes += static_cast<int64_t>(it->second->second->bytes());
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.emplace_front(key, std::move(plan));
    index_.emplace(std::string_view(lru_.front().first), lru_.begin());
    stats_.bytes += static_cast<int64_t>(key.size() + kEntryOverhead + lru_.front().second->bytes());
    ++stats_.entries;
  }
  evict();
}

void PlanCache::evict() {
  const int64_t max_entries = stats_.max_entries > 0 ? stats_.max_entries : kDefaultMaxEntries;
  const int64_t max_bytes = stats_.max_bytes > 0 ? stats_.max_bytes : kDefaultMaxBytes;
  while (stats_.entries > 1 && (stats_.entries > max_entries || stats_.bytes > max_bytes)) {
    const Entry& e = lru_.back();
    stats_.bytes -= static_cast<int64_t>(e.first.size() + kEntryOverhead + e.second->bytes());
    --stats_.entries;
    ++stats_.evictions;
    index_.erase(std::string_view(e.first));
    lru_.pop_back();
  }
}

void PlanCache::countFirstCall() {
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.first_calls;
}

void PlanCache::countShapeCall() {
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.shape_calls;
}

PlanCacheStats PlanCache::stats() {
  std::lock_guard<std::mutex> lk(mu_);
  PlanCacheStats s = stats_;
  if (s.max_entries <= 0) s.max_entries = kDefaultMaxEntries;
  if (s.max_bytes <= 0) s.max_bytes = kDefaultMaxBytes;
  return s;
}

void PlanCache::setLimits(int64_t max_entries, int64_t max_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  stats_.max_entries = max_entries;
  stats_.max_bytes = max_bytes;
  evict();
}

void PlanCache::clear() {
  std::lock_guard<std::mutex> lk(mu_);
  index_.clear();
  lru_.clear();
  stats_.entries = stats_.bytes = 0;
}

namespace {
// The plans' host memory in torch.mtia.memory_stats() (host.plan_cache.*).
const bool kStatsRegistered = registerHostMemoryStats([] {
  PlanCacheStats s = planCache().stats();
  return HostMemoryStats{{"plan_cache.bytes", s.bytes},
                         {"plan_cache.entries", s.entries},
                         {"plan_cache.max_bytes", s.max_bytes},
                         {"plan_cache.evictions", s.evictions}};
});
}  // namespace

PlanCache& planCache() {
  static PlanCache* cache = new PlanCache();
  return *cache;
}

}  // namespace openmtia
