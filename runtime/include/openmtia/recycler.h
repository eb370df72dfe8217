// Recycler<T>: a per-thread list of freed T's storage for the next new T on
// that thread, so that a launch's small bookkeeping objects cost no malloc
// (the launch path of a tiny op is a few hundred nanoseconds). Objects made
// on one thread may be released on another; each thread keeps at most
// kKeep freed ones and returns the rest to the heap.
#pragma once

#include <cstddef>
#include <new>
#include <utility>

namespace omr {

template <typename T>
class Recycler {
 public:
  template <typename... Args>
  static T* make(Args&&... args) {
    List& l = list();
    void* p = l.head;
    if (p) {
      l.head = *static_cast<void**>(p);
      --l.size;
    } else {
      p = ::operator new(sizeof(Slot));
    }
    return new (p) T(std::forward<Args>(args)...);
  }
  static void release(T* t) {
    t->~T();
    List& l = list();
    if (l.size >= kKeep) return ::operator delete(static_cast<void*>(t));
    *reinterpret_cast<void**>(t) = l.head;
    l.head = t;
    ++l.size;
  }

 private:
  static constexpr size_t kKeep = 256;
  union Slot {
    void* next;
    alignas(T) unsigned char bytes[sizeof(T)];
  };
  struct List {
    void* head = nullptr;
    size_t size = 0;
    ~List() {
      while (head) {
        void* next = *static_cast<void**>(head);
        ::operator delete(head);
        head = next;
      }
    }
  };
  static List& list() {
    thread_local List l;
    return l;
  }
};

}  // namespace omr
