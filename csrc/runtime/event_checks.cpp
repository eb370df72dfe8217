#include "runtime/event_checks.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace openmtia {
namespace {

thread_local EventCheck t_scope;

struct Table {
  std::mutex mu;
  std::unordered_map<void*, EventCheck> checks;
  std::atomic<size_t> size{0};  // lets the guard skip the lock while no event carries a check
};

Table& table() {
  static Table* t = new Table();  // (never destroyed: events may be destroyed at exit)
  return *t;
}

}  // namespace

EventCheckScope::EventCheckScope(EventCheck check) : previous_(std::move(t_scope)) { t_scope = std::move(check); }
EventCheckScope::~EventCheckScope() { t_scope = std::move(previous_); }

void noteEventRecorded(void* event) {
  Table& t = table();
  if (!t_scope && t.size.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lk(t.mu);
  if (t_scope) t.checks[event] = t_scope;
  else t.checks.erase(event);
  t.size.store(t.checks.size(), std::memory_order_release);
}

EventCheck eventCheck(void* event) {
  Table& t = table();
  if (t.size.load(std::memory_order_acquire) == 0) return {};
  std::lock_guard<std::mutex> lk(t.mu);
  auto it = t.checks.find(event);
  return it == t.checks.end() ? EventCheck() : it->second;
}

void forgetEvent(void* event) noexcept {
  Table& t = table();
  if (t.size.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lk(t.mu);
  t.checks.erase(event);
  t.size.store(t.checks.size(), std::memory_order_release);
}

}  // namespace openmtia
