// The fallback's plans: what an op does with one call signature (which
// outputs are inputs, the metadata of new outputs, which inputs it resizes),
// the signature keys they are cached by, and the cache itself (bounded in
// entries and bytes, least recently used out first).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace openmtia {

struct Plan {
  bool async = false;  // false: every call runs synchronously
  struct Meta {
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;  // in `resized`: how far the op moves the input's offset
    at::ScalarType dtype = at::kFloat;
    bool conj = false, neg = false;  // the bits a kernel may set on a result (e.g. linalg's conjugate views)
  };
  struct Out {
    int input = -1;  // index into the flat list of tensor arguments, or -1: fresh
    bool undefined = false;  // an undefined tensor (e.g. a fused optimizer's backward returns no gradient)
    Meta meta;
  };
  std::vector<std::vector<Out>> returns;  // per return: one, or the list's elements
  std::vector<bool> is_list;
  std::vector<std::pair<int, Meta>> resized;  // inputs whose metadata the op changes
  bool fresh = false;  // every result is a new tensor (no input, no list)
  // The op's out= overload, when every result is fresh: the task then writes
  // straight into the device outputs (no host result to copy).
  std::optional<c10::OperatorHandle> out_op;

  size_t bytes() const;  // host memory it holds (for the cache's bound)
};

Plan::Meta metaOf(const at::Tensor& t);
bool sameMeta(const at::Tensor& t, const Plan::Meta& m);  // sizes, strides, offset

// The key of a call, its signature: what a plan depends on. The tensors'
// devices, dtypes, sizes and strides, which arguments share a storage (and
// the offsets of those that do, which decide overlaps), the other arguments.
// A view's storage offset is not part of it otherwise: a loop over the rows
// of a tensor is one signature. A Python number (a float, or a Scalar
// argument) enters by its type and its class (NaN, +-inf, +-1, 0, the sign
// and the unit interval, and its order against the previous number: the
// ranges kernels check), not its value: a learning rate that changes every
// step is one signature. Its value is kept where it decides an output's
// shape (arange, range, float lists).
//
// With `Shapes::kOmitted`, the key of the call's family: the signature
// without the tensors' sizes and strides (their ranks stay, and whether each
// is empty), nor the values of SymInt arguments (sizes too; the schema's
// real types say which). The calls of a family differ only in shapes (see async_call.h:
// a new shape in a known family is planned by the op's Meta kernel).
class KeyBuilder {
 public:
  enum class Shapes { kKept, kOmitted };
  explicit KeyBuilder(const c10::OperatorHandle& op, Shapes shapes = Shapes::kKept);
  // false: the argument cannot be keyed (the call is not cached)
  bool add(const c10::IValue& v, const c10::TypePtr& type);
  void addState(int64_t v);  // global state the call depends on
  std::string key();

 private:
  bool tensor(const at::Tensor& t);
  bool number(char tag, double v);
  int64_t storageIndex(const at::Tensor& t);
  void put(char tag, int64_t v);
  template <typename T>
  void putBytes(char tag, const T& v);

  std::string key_;
  bool shapes_;
  bool exact_numbers_;
  std::optional<double> last_number_;
  std::vector<const void*> storages_;
  std::unordered_map<const void*, size_t> index_;  // storages_, once it is long
  std::vector<std::pair<int64_t, int64_t>> offsets_;  // (storage index, offset) per tensor
  std::vector<int> uses_;                             // tensors per storage index
};

struct PlanCacheStats {
  int64_t entries = 0, bytes = 0, hits = 0, misses = 0, evictions = 0;
  int64_t first_calls = 0;  // a signature's first calls, run synchronously to make its plan
  int64_t shape_calls = 0;  // first calls of a known family's new shape, planned by the meta function
  int64_t max_entries = 0, max_bytes = 0;
};

class PlanCache {
 public:
  std::shared_ptr<const Plan> get(const std::string& key);
  void put(const std::string& key, std::shared_ptr<const Plan> plan);
  void countFirstCall();
  void countShapeCall();
  PlanCacheStats stats();
  void setLimits(int64_t max_entries, int64_t max_bytes);  // <= 0: the default
  void clear();

 private:
  void evict();  // under mu_
  using Entry = std::pair<std::string, std::shared_ptr<const Plan>>;
  std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index_;
  PlanCacheStats stats_;
};

PlanCache& planCache();

}  // namespace openmtia
