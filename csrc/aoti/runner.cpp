// The AOTInductor model runner of mtia: what AOTIModelPackageLoader (Python's
// aoti_load_package, C++'s torch::inductor::AOTIModelPackageLoader) creates
// for a package whose device key is "mtia". torch 2.13 registers "cpu" only.
//
// The model library is built against the CPU flavour of torch's model
// runtime (no USE_* device macro): its kernels launch themselves on the
// current mtia stream (aoti_mtia.h), so the runner passes no stream, and its
// constructor maps the device string (cpu_wrapper.py's model constructor,
// openmtia_aoti_model_device). The runner only makes the model's device
// current while it runs, so that the ops it calls through the dispatcher
// find their streams there too.
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <memory>
#include <string>
#include <vector>

#include "aoti/aoti_mtia.h"

namespace {

class AOTIModelContainerRunnerMtia : public torch::inductor::AOTIModelContainerRunner {
 public:
  AOTIModelContainerRunnerMtia(const std::string& so_path, size_t num_models, const std::string& device_str,
                               const std::string& bin_dir, bool run_single_threaded)
      : AOTIModelContainerRunnerMtia(so_path, num_models, modelDevice(device_str), bin_dir, run_single_threaded) {}

 protected:
  std::vector<at::Tensor> run_impl(std::vector<AtenTensorHandle>& input_handles, void* stream_handle) override {
    // an input on another device would be read by the kernels as if it were
    // on this one: refuse it, naming both (the model itself checks dtypes,
    // sizes and strides: cpp_wrapper.py)
    for (size_t i = 0; i < input_handles.size(); ++i) {
      const at::Tensor* t = reinterpret_cast<const at::Tensor*>(input_handles[i]);
      TORCH_CHECK(!t->defined() || t->device() == device_,
                  "AOTInductor model loaded for ", device_, ": input ", i, " is on ", t->device(),
                  " (move the inputs to ", device_, ")");
    }
    c10::DeviceGuard guard(device_);
    return AOTIModelContainerRunner::run_impl(input_handles, stream_handle);
  }

 private:
  // the model gets the device with its index ("mtia:N"), so both agree
  AOTIModelContainerRunnerMtia(const std::string& so_path, size_t num_models, c10::Device device,
                               const std::string& bin_dir, bool run_single_threaded)
      : AOTIModelContainerRunner(so_path, num_models, device.str(), bin_dir, run_single_threaded), device_(device) {}

  // "mtia" is the current device at load; throws naming a device that is not mtia
  static c10::Device modelDevice(const std::string& device_str) {
    int32_t type = 0, index = 0;
    openmtia_aoti_model_device(device_str, type, index);
    return c10::Device(c10::DeviceType::MTIA, static_cast<c10::DeviceIndex>(index));
  }

  c10::Device device_;
};

std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create(const std::string& so_path, size_t num_models,
                                                                  const std::string& device_str,
                                                                  const std::string& bin_dir,
                                                                  const bool run_single_threaded) {
  return std::make_unique<AOTIModelContainerRunnerMtia>(so_path, num_models, device_str, bin_dir,
                                                        run_single_threaded);
}

const torch::inductor::RegisterAOTIModelRunner kRegister("mtia", &create);

}  // namespace
