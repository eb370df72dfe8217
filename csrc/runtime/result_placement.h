// Result placement: a task's CPU kernel allocates its results in the device outputs' memory.
#pragma once

#include <cstddef>
#include <vector>

namespace openmtia {

// While alive, CPU allocations on this thread of exactly a slot's size are
// served from that slot (the first unused one), once each: a task lets the
// CPU kernel allocate its results in the device outputs' memory.
class ResultPlacement {
 public:
  struct Slot {
    void* ptr;
    size_t nbytes;
    bool taken = false;
  };
  explicit ResultPlacement(std::vector<Slot> slots);
  ~ResultPlacement();
  ResultPlacement(const ResultPlacement&) = delete;
  ResultPlacement& operator=(const ResultPlacement&) = delete;

 private:
  std::vector<Slot> slots_;
  std::vector<Slot>* saved_;
};

}  // namespace openmtia
