// Per-op properties, computed once per op and thread.
#pragma once

#include <unordered_map>

namespace openmtia {

// A property of an op (`key`: its schema's address) that `compute` gives,
// computed once per op and thread (no lock): for what the fallback asks of an
// op at every call. Each call site (its own `compute` type) has its own cache.
template <typename Compute>
auto perOp(const void* key, Compute compute) -> decltype(compute()) {
  thread_local std::unordered_map<const void*, decltype(compute())> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, compute()).first;
  return it->second;
}

}  // namespace openmtia
