// The openmtia._C Python module. Loading it registers everything (hooks,
// guard, allocator, kernels, fallback) through static initializers.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "openmtia/runtime.h"
#include "aten/fallback/fallback.h"
#include "aten/threads/learned_threads.h"
#include "aten/fallback/plan_cache.h"
#include "aten/host_gemm.h"
#include "aten/low_precision/activations.h"
#include "aten/low_precision/arithmetic.h"
#include "aten/low_precision/comparisons.h"
#include "aten/low_precision/indexed.h"
#include "aten/low_precision/kernels.h"
#include "aten/low_precision/low_precision.h"
#include "aten/low_precision/norm.h"
#include "aten/low_precision/reductions.h"
#include "aten/low_precision/softmax.h"
#include "aten/low_precision/tables.h"
#include "aten/pointwise.h"
#include "aten/prebuilt.h"
#include "aten/threads/team_wait.h"
#include "aten/threads/host_work.h"
#include "aten/threads/kernel_threads.h"
#include "compile/graph_replay.h"
#include "compile/kernels.h"
#include "distributed/backend.h"
#include "profiler/kineto_plugin.h"
#include "python/extension_api.h"
#include "runtime/gil.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "runtime/generator.h"
#include "runtime/graphs.h"
#include "runtime/host_views.h"
#include "python/interpreter.h"
#include "python/process_exit.h"
#include "runtime/stream.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "openmtia: an open MTIA backend for PyTorch";
  openmtia::installPythonInterpreter();  // libopenmtia's link to this interpreter
  // The driver (OPENMTIA_DRIVER): without one, mtia is unavailable (no
  // devices) and openmtia/_device.py warns why; importing still works.
  m.def("_driver_name", &omr::driverName);
  m.def("_driver_error", &omr::driverError);
  if (omr::driverError().empty()) {
    // A launch into a full queue waits without holding the GIL.
    omr::setWaitHook([](void (*wait)(void*), void* arg) { openmtia::withoutGil([&] { wait(arg); }); });
    omr::setIdleHook(openmtia::endIdleWorkerTeam);  // (kernel_threads.cpp)
    omr::setHostWorkHook(openmtia::hostWork);       // a host thread that runs device tasks (host_work.h)
  }
  m.def("_default_generators", [] {
    py::tuple out(openmtia::deviceCount());
    for (c10::DeviceIndex i = 0; i < openmtia::deviceCount(); ++i)
      out[i] = py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(openmtia::defaultGenerator(i)));
    return out;
  });
  openmtia::initProcessExitBindings(m);
  openmtia::initCompileBindings(m);
  openmtia::initGraphReplayBindings(m);
  openmtia::dist::initDistributedBindings(m);
  openmtia::profiler::registerKinetoPlugin();  // device tasks in torch.profiler
  m.def("_cpu_kernel_over_composite_ops", &openmtia::cpuKernelOverCompositeOps);
  m.def("_structured_ops", &openmtia::structuredOps);
  m.def("_unboxed_ops", [] {
    std::vector<std::string> out;
    for (const auto& name : openmtia::unboxedOps()) out.push_back("aten::" + name);
    return out;
  });
  // A CPU tensor over an mtia tensor's memory (for host code that runs in
  // stream order: the caller has synchronized the stream that writes it).
  m.def("_host_view", [](const at::Tensor& t) {
    TORCH_CHECK(t.device().type() == openmtia::kMTIA, "_host_view: expected an mtia tensor, got ", t.device());
    return openmtia::hostView(t);
  });
  m.def("_is_capturing", [](int device) {
    auto index = device < 0 ? openmtia::currentDevice() : static_cast<c10::DeviceIndex>(device);
    openmtia::checkDevice(index);
    return openmtia::isCapturing(index);
  }, py::arg("device") = -1);
  m.def("_staged_result_count", &openmtia::stagedResultCount);
  // bf16/fp16 matrix ops (csrc/aten/low_precision/low_precision.h): the mode (OPENMTIA_LOW_PRECISION)
  // and the path it gives a dtype.
  m.def("_low_precision_mode", &openmtia::lowPrecisionMode);
  m.def("_set_low_precision_mode", &openmtia::setLowPrecisionMode);
  m.def("_low_precision_path", [](py::object dtype) {
    TORCH_CHECK(THPDtype_Check(dtype.ptr()), "_low_precision_path: expected a torch.dtype");
    auto path = openmtia::lowPrecisionPath(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
    return path == openmtia::LowPrecisionPath::kFloat32 ? "float32" : "native";
  });
  m.def("_low_precision_float32_calls", &openmtia::lowPrecisionFloat32Calls);
  m.def("_low_precision_bits_calls", &openmtia::lowPrecisionBitsCalls);
  m.def("_fused_indexed_calls", &openmtia::fusedIndexedCalls);
  m.def("_low_precision_table_calls", &openmtia::lowPrecisionTableCalls);
  m.def("_low_precision_tables_made", &openmtia::lowPrecisionTablesMade);
  m.def("_low_precision_chunked_calls", &openmtia::lowPrecisionChunkedCalls);
  m.def("_low_precision_gemm_entries", &openmtia::lowPrecisionGemmEntries);
  // the host GEMM (host_gemm.h; OPENMTIA_HOST_GEMM=0 at start disables it)
  m.def("_host_gemm", &openmtia::hostGemmAvailable);
  m.def("_set_host_gemm", &openmtia::setHostGemm);
  // a kernel's work from which it runs on every thread, and a matrix op's
  // weight per element (kernel_threads.cpp), for tests
  m.def("_parallel_work", [] { return openmtia::kParallelWork; });
  // how the device's idle OpenMP threads wait now: "spin", "sleep" or "off"
  // (team_wait.h), and how many host threads wait for the devices
  m.def("_team_wait_state", [] { return std::string(openmtia::teamWaitState()); });
  m.def("_host_threads_waiting", [] { return omr::hostThreadsWaiting(); });
  m.def("_host_waited_ns", [] { return omr::hostWaitedNs(); });
  m.def("_host_launches", [] { return omr::hostLaunches(); });
  // how often device work on a host thread swapped its thread state (host_work.h)
  m.def("_host_work_state_swaps", &openmtia::hostWorkStateSwaps);
  // openmtia.faults: arms the faults of a list in OPENMTIA_FAULTS's form
  // (runtime.h, parseFaults: the same parser, the same errors), or none.
  m.def("_inject_faults", [](const std::string& spec, int rank, int restart) {
    for (const omr::Fault& f : OMR_CALL(omr::parseFaults(spec, rank, restart))) OMR_CALL(omr::injectFault(f));
  });
  m.def("_clear_faults", [] { OMR_CALL(omr::clearFaults()); });
  m.def("_dense_work_scale", [] { return openmtia::kDenseWorkScale; });
  // what the fallback learned of its kernels' threads (learned_threads.h):
  // [(op, size class, "all" / "one" / "learning", all threads' ns, one's ns)]
  m.def("_kernel_thread_choices", [] {
    py::list out;
    for (const auto& c : openmtia::learnedThreadChoices())
      out.append(py::make_tuple(c.op, c.size_class, c.choice, c.all_ns, c.one_ns));
    return out;
  });
  m.def("_kernel_threads_mode", [] {
    switch (openmtia::kernelThreadsMode()) {
      case openmtia::KernelThreadsMode::kExtensions: return std::string("extensions");
      case openmtia::KernelThreadsMode::kLearn: return std::string("learn");
      case openmtia::KernelThreadsMode::kSize: break;
    }
    return std::string("size");
  });
  // the work a fallback kernel of the op ("aten::mm", overload "") over
  // these tensor arguments counts (useKernelThreads: every thread from _parallel_work)
  m.def("_kernel_work", [](const std::string& name, const std::string& overload, py::list args) {
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
    std::vector<c10::IValue> stack;
    for (const auto& a : args) stack.emplace_back(a.cast<at::Tensor>());  // (tensors only)
    const auto& formal = op.schema().arguments();
    for (size_t i = stack.size(); i < formal.size() && formal[i].default_value(); ++i)
      stack.push_back(*formal[i].default_value());  // the rest: their defaults
    return openmtia::kernelWork(op, stack, openmtia::workElements(stack));
  });
  // a task on the current stream that sets its threads as a kernel over
  // `work` elements does (useKernelThreads), records how many it got, then
  // holds the stream for hold_s seconds, for tests
  struct KernelThreadsProbe {
    std::atomic<int> threads{-1};
  };
  py::class_<KernelThreadsProbe, std::shared_ptr<KernelThreadsProbe>>(m, "_KernelThreadsProbe")
      .def_property_readonly("threads", [](const KernelThreadsProbe& p) { return p.threads.load(); });
  m.def("_probe_kernel_threads", [](int64_t work, double hold_s) {
    auto probe = std::make_shared<KernelThreadsProbe>();
    const auto device = c10::impl::getDeviceGuardImpl(c10::DeviceType::MTIA)->getDevice().index();
    openmtia::launchOnCurrentStream(device, "kernel_threads_probe", [probe, work, hold_s] {
      openmtia::useKernelThreads(work);
      probe->threads = at::get_num_threads();
      std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
    }, omr::kTaskWaitsForHost);  // (only a worker runs it: it reports a worker's threads)
    return probe;
  });
  // bf16/fp16 activations through the fused kernel (low_precision/activations.h)
  m.def("_fused_activation_calls", &openmtia::fusedActivationCalls);
  m.def("_fused_reduction_calls", &openmtia::fusedReductionCalls);
  m.def("_fused_softmax_calls", &openmtia::fusedSoftmaxCalls);
  m.def("_fused_norm_calls", &openmtia::fusedNormCalls);
  m.def("_fused_comparison_calls", &openmtia::fusedComparisonCalls);
  m.def("_fused_arithmetic_calls", &openmtia::fusedArithmeticCalls);
  m.def("_loop_min_elements", &openmtia::loopMinElements);
  m.def("_set_loop_min_elements", &openmtia::setLoopMinElements);
  m.def("_activation_isa", [] {
    const auto isa = openmtia::kernelIsa();
    return isa == openmtia::KernelIsa::kAvx512 ? "avx512" : isa == openmtia::KernelIsa::kAvx2 ? "avx2" : "none";
  });
  m.def("_set_activation_isa", [](const std::string& name) {
    TORCH_CHECK(name == "avx512" || name == "avx2" || name == "none", "_set_activation_isa: avx512, avx2 or none");
    openmtia::setKernelIsa(name == "avx512" ? openmtia::KernelIsa::kAvx512
                           : name == "avx2" ? openmtia::KernelIsa::kAvx2
                                            : openmtia::KernelIsa::kNone);
  });
  // (onednn: gelu and its backward, whose native kernel may be oneDNN's)
  m.def("_activation_path", [](py::object dtype, bool onednn) {
    TORCH_CHECK(THPDtype_Check(dtype.ptr()), "_activation_path: expected a torch.dtype");
    return openmtia::activationPath(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type, onednn) ==
                   openmtia::LowPrecisionPath::kFloat32
               ? "float32"
               : "native";
  });
  m.def("_low_precision_matrix_ops", [] {
    const auto& ops = openmtia::lowPrecisionMatrixOps();
    return std::vector<std::string>(ops.begin(), ops.end());
  });
  // The fallback's plan cache (csrc/aten/fallback/plan_cache.h): its size, bounds and counts.
  m.def("_plan_cache_stats", [] {
    openmtia::PlanCacheStats s = openmtia::planCache().stats();
    py::dict d;
    d["entries"] = s.entries;
    d["bytes"] = s.bytes;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["evictions"] = s.evictions;
    d["first_calls"] = s.first_calls;
    d["shape_calls"] = s.shape_calls;
    d["max_entries"] = s.max_entries;
    d["max_bytes"] = s.max_bytes;
    return d;
  });
  // Bounds of the plan cache (<= 0: the default); for tests of its eviction.
  m.def("_set_plan_cache_limits", [](int64_t max_entries, int64_t max_bytes) {
    openmtia::planCache().setLimits(max_entries, max_bytes);
  });
  m.def("_clear_plan_cache", [] { openmtia::planCache().clear(); });
  m.def("_prebuilt_kernel_count", &openmtia::prebuiltKernelCount);
  m.def("_device_memory_info", [](int device) {
    size_t free_b = 0, total = 0;
    OMR_CALL(omr::memGetInfo(device, &free_b, &total));
    return py::make_tuple(free_b, total);
  });
  // what other extensions (and openmtia._C_test) may call: python/extension_api.h
  openmtia::initExtensionApiBindings(m);
}
