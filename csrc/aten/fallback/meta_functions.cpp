// Meta functions for ops without a Meta kernel (see meta_functions.h).
#include "aten/fallback/meta_functions.h"
#include "aten/per_op.h"

#include <ATen/core/operator_name.h>

#include <mutex>
#include <unordered_map>

namespace openmtia {
namespace fallback {

namespace {
struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, MetaFunction> fns;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

void registerMetaFunction(const std::string& name, MetaFunction fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.fns[name] = fn;
}

MetaFunction metaFunction(const c10::OperatorHandle& op) {
  // once per op and thread: the planner asks at every new shape (functions
  // are registered when the library loads, before any op runs)
  return perOp(&op.schema(), [&]() -> MetaFunction {
    const std::string name = c10::toString(op.schema().operator_name());  // ("aten::mm.out"; no "." without an overload)
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.fns.find(name);
    return it == r.fns.end() ? nullptr : it->second;
  });
}

}  // namespace fallback
}  // namespace openmtia
