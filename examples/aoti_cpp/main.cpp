// Runs an AOTInductor package on mtia from C++, without Python: the way a
// C++ server deploys a model exported with torch.export and compiled with
// torch._inductor.aoti_compile_and_package on mtia.
//
//   aoti_mtia PACKAGE.pt2 INPUT.pt OUTPUT.pt [DEVICE_INDEX] [RUNS]
//
// INPUT.pt holds one tensor (torch.save from Python, or torch::pickle_save);
// it is moved to mtia:DEVICE_INDEX and run RUNS times (default 1); the
// output of the last run is written to OUTPUT.pt as a CPU tensor
// (torch.load reads it), and a summary is printed. Any error is printed, and
// the exit status is 1.
#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <openmtia/openmtia.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<char> readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void writeFile(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " PACKAGE.pt2 INPUT.pt OUTPUT.pt [DEVICE_INDEX] [RUNS]\n";
    return 2;
  }
  try {
    const std::string package = argv[1], input_path = argv[2], output_path = argv[3];
    const int device_index = argc > 4 ? std::stoi(argv[4]) : 0;
    const int runs = argc > 5 ? std::stoi(argv[5]) : 1;

    openmtia::init();  // the driver: errors here name why mtia is unavailable
    const c10::Device device(c10::DeviceType::MTIA, static_cast<c10::DeviceIndex>(device_index));
    torch::inductor::AOTIModelPackageLoader loader(package, "model", /*run_single_threaded=*/false,
                                                   /*num_runners=*/1, static_cast<c10::DeviceIndex>(device_index));

    at::Tensor input = torch::jit::pickle_load(readFile(input_path)).toTensor().to(device);
    std::vector<at::Tensor> outputs;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i) outputs = loader.run({input});
    at::Tensor out = outputs.at(0).cpu();  // waits for the device
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / runs;

    writeFile(output_path, torch::jit::pickle_save(out));
    std::cout << "package " << package << " on " << device << ": input " << input.sizes() << " -> output "
              << out.sizes() << " " << out.scalar_type() << ", sum " << out.sum().item<double>() << ", "
              << ms << " ms per run (" << runs << " run" << (runs == 1 ? "" : "s") << ")\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "aoti_mtia: " << e.what() << "\n";
    return 1;
  }
}
