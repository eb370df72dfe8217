// MTIA generators: one default generator per device. Each holds its own
// mt19937 engine (a host CPU generator) so mtia randomness is seeded and
// replayed through torch.mtia / torch.Generator(device="mtia"), independent
// of the CPU default generator and of the other devices.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <deque>
#include <mutex>

#include "common.h"

namespace openmtia {
namespace {

struct MTIAGeneratorImpl final : public c10::GeneratorImpl {
  explicit MTIAGeneratorImpl(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kMTIA, index), c10::DispatchKeySet(c10::DispatchKey::MTIA)),
        host_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override { host_.set_current_seed(seed); }
  uint64_t current_seed() const override { return host_.current_seed(); }
  uint64_t seed() override { return host_.seed(); }
  void set_offset(uint64_t) override { TORCH_CHECK(false, "mtia generators do not support set_offset"); }
  uint64_t get_offset() const override { TORCH_CHECK(false, "mtia generators do not support get_offset"); }
  void set_state(const c10::TensorImpl& new_state) override { host_.unsafeGetGeneratorImpl()->set_state(new_state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override { return host_.unsafeGetGeneratorImpl()->get_state(); }
  static c10::DeviceType device_type() { return kMTIA; }

  at::Generator host_;

 private:
  MTIAGeneratorImpl* clone_impl() const override {
    auto* g = new MTIAGeneratorImpl(device().index());
    g->host_ = host_.clone();
    return g;
  }
};

}  // namespace

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

at::Generator hostGeneratorOf(const at::Generator& gen) {
  TORCH_CHECK(gen.device().type() == kMTIA, "expected an mtia generator, got one for ", gen.device());
  return gen.get<MTIAGeneratorImpl>()->host_;
}

}  // namespace openmtia
