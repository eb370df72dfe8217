// MTIA generators: one default generator per device, plus user generators
// (torch.Generator(device="mtia")).
//
// Like CUDA's Philox generators, an mtia generator is a (seed, offset) pair:
// each random op draws one offset on the host when it is issued, in program
// order, and its task later builds a private engine from (seed, offset). So
// random ops run asynchronously on the streams, their values do not depend on
// when tasks run, get_state/set_state replay them, devices are independent,
// and none of it touches the CPU default generator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/MT19937RNGEngine.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "openmtia/runtime.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "runtime/graphs.h"

namespace openmtia {
namespace {

constexpr size_t kStateBytes = 2 * sizeof(uint64_t);  // seed, offset

struct MTIAGeneratorImpl final : public c10::GeneratorImpl {
  explicit MTIAGeneratorImpl(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kMTIA, index), c10::DispatchKeySet(c10::DispatchKey::MTIA)), seed_(seed) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto state = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, at::kByte, std::nullopt, std::nullopt,
                                       std::nullopt, std::nullopt);
    uint64_t words[2] = {seed_, offset_};
    std::memcpy(state.data_ptr(), words, kStateBytes);
    return state.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK(new_state.dtype() == at::kByte && new_state.numel() == static_cast<int64_t>(kStateBytes),
                "RNG state must be a torch.ByteTensor of ", kStateBytes, " bytes (an mtia generator's state), got ",
                new_state.numel(), " elements of ", new_state.dtype());
    uint64_t words[2];
    std::memcpy(words, new_state.data(), kStateBytes);
    seed_ = words[0];
    offset_ = words[1];
  }
  static c10::DeviceType device_type() { return kMTIA; }

  RandomDraw draw() {
    std::lock_guard<std::mutex> lk(mutex_);
    return {seed_, offset_++};
  }
  uint64_t reserve(uint64_t n) {
    std::lock_guard<std::mutex> lk(mutex_);
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  MTIAGeneratorImpl* clone_impl() const override {
    auto* g = new MTIAGeneratorImpl(device().index(), seed_);
    g->offset_ = offset_;
    return g;
  }

  uint64_t seed_;
  uint64_t offset_ = 0;
};

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

at::Generator RandomDraw::engine() const {
  // a full mt19937 state from (seed, offset): distinct draws get unrelated
  // streams (seeding by a 32-bit value would repeat them)
  uint64_t x = graph ? graph->seeds[slot] : seed;
  uint64_t mixed = splitmix64(x);
  x = mixed ^ (graph ? graph->bases[slot] + offset : offset);
  at::mt19937 e;
  at::mt19937_data_pod pod = e.data();
  for (auto& word : pod.state_) word = static_cast<uint32_t>(splitmix64(x) >> 32);
  pod.left_ = 1;
  pod.next_ = 0;
  pod.seeded_ = true;
  e.set_data(pod);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  g.get<at::CPUGeneratorImpl>()->set_engine(e);
  return g;
}

const at::Generator& defaultGenerator(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkDevice(index);
  static std::once_flag once;
  static std::deque<at::Generator> gens;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) gens.push_back(at::make_generator<MTIAGeneratorImpl>(i));
  });
  return gens[index];
}

at::Generator newGenerator(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkDevice(index);
  return at::make_generator<MTIAGeneratorImpl>(index);
}

RandomDraw drawRandom(const at::Generator& gen) {
  TORCH_CHECK(gen.device().type() == kMTIA, "Expected a 'mtia' device type for generator but found '",
              gen.device().type(), "'");
  if (auto rng = capturingRng(gen.device().index())) {  // captured: an offset within each replay's share
    size_t slot = 0;
    while (slot < rng->generators.size() &&
           rng->generators[slot].unsafeGetGeneratorImpl() != gen.unsafeGetGeneratorImpl())
      ++slot;
    if (slot == rng->generators.size()) {
      rng->generators.push_back(gen);
      rng->counts.push_back(0);
    }
    RandomDraw d;
    d.seed = gen.current_seed();
    d.offset = rng->counts[slot]++;
    d.graph = rng;
    d.slot = slot;
    return d;
  }
  return gen.get<MTIAGeneratorImpl>()->draw();
}

uint64_t reserveRandomOffsets(const at::Generator& gen, uint64_t n) {
  return gen.get<MTIAGeneratorImpl>()->reserve(n);
}

namespace {

// As the CPU kernel (native_dropout_cpu), with the mask drawn on the device.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  double p1m = 1. - p;
  double scale = p1m == 0 ? 0. : 1. / p1m;  // p == 1 gives zeros, not NaN
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(p1m);
  return {input.mul(mask).mul_(scale), mask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) { m.impl("native_dropout", &native_dropout); }

}  // namespace openmtia
