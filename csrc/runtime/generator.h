// mtia random generators: drawn on the host in program order, run by tasks as CPU engines.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace openmtia {

const at::Generator& defaultGenerator(c10::DeviceIndex index);
at::Generator newGenerator(c10::DeviceIndex index);
// The random draws of a captured graph: per generator, how many offsets one
// replay takes, and (set by a task at each replay) where they start.
struct GraphRng {
  std::vector<at::Generator> generators;
  std::vector<uint64_t> counts;
  std::vector<uint64_t> seeds, bases;
};
// One random op's share of an mtia generator: drawn on the host when the op
// is issued (in program order), turned into a private host engine by its task.
// Captured in a graph, its offset is relative to the replay's base.
struct RandomDraw {
  uint64_t seed = 0, offset = 0;
  std::shared_ptr<GraphRng> graph;
  size_t slot = 0;
  at::Generator engine() const;  // a CPU generator for the CPU kernel
};
// Draws from an mtia generator (raises for a generator of another device type).
RandomDraw drawRandom(const at::Generator& mtia_gen);
// Advances an mtia generator by n offsets; returns the first.
uint64_t reserveRandomOffsets(const at::Generator& mtia_gen, uint64_t n);

}  // namespace openmtia
