// openmtia._C_test: what only the tests need, built only for them
// (OPENMTIA_TEST_MODULE=1 at install: scripts/test.sh). It reaches the
// device through openmtia._C's C extension API (extension_api.h), as any
// other extension would, and links no part of _C.
//
// - launch_blocking_task(device, timeout_s): holds the current stream of
//   `device` until the returned gate is released;
// - launch_failing_task(device, name, message): a task that fails;
// - launch_thread_probe(device): a task that records the thread that ran it;
// - the ops openmtia_test::double_a and double_b: a C++ CPU kernel and no
//   meta kernel (tests/test_async.py gives them meta kernels that disagree
//   with it).
#include <ATen/Parallel.h>
#include <ATen/ops/full_like.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "python/extension_api.h"

namespace py = pybind11;

namespace {

const OpenmtiaExtensionApi& api() {
  static const OpenmtiaExtensionApi* a = [] {
    py::object capsule = py::module_::import("openmtia._C").attr("_extension_api");
    auto* p = static_cast<const OpenmtiaExtensionApi*>(
        PyCapsule_GetPointer(capsule.ptr(), OPENMTIA_EXTENSION_API_CAPSULE));
    if (!p) throw py::error_already_set();
    if (p->struct_size < sizeof(OpenmtiaExtensionApi)) throw std::runtime_error("openmtia._C's extension API is too old");
    return p;
  }();
  return *a;
}

void launch(int device, const std::string& name, OmtiaHostFn fn, void* user, OmtiaDestroyFn destroy,
            uint32_t flags = 0) {
  const char* error = api().launch_on_current_stream_with_flags(device, name.c_str(), fn, user, destroy, flags);
  if (error) throw std::runtime_error(error);
}

// A gate a test task waits on, so tests can hold a stream busy. Waiting never
// needs the GIL.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    std::lock_guard<std::mutex> lk(mu);
    open = true;
    cv.notify_all();
  }
  // false: not released within timeout_s
  bool wait(double timeout_s) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::duration<double>(timeout_s), [this] { return open; });
  }
};

struct GateTask {
  std::shared_ptr<Gate> gate;
  double timeout_s;
  std::string error;
};

struct FailingTask {
  std::string message;
};

// Which thread ran a task (the native id: threading.get_native_id()), and in
// which order among the probes (0: not run).
struct Probe {
  std::atomic<long> thread_id{0};
  std::atomic<long> order{0};
};
std::atomic<long> g_probes_run{0};

}  // namespace

TORCH_LIBRARY(openmtia_test, m) {
  m.def("double_a(Tensor x) -> Tensor");
  m.def("double_b(Tensor x) -> Tensor");
  // A kernel that takes all_ms on more than one thread and one_ms on one,
  // and returns x's shape filled with its thread count; it fails where
  // fail (one element) is not 0 (the fallback's learned threads,
  // csrc/aten/threads/learned_threads.h)
  m.def("threads_cost(Tensor x, Tensor fail, float all_ms, float one_ms) -> Tensor");
}
TORCH_LIBRARY_IMPL(openmtia_test, CPU, m) {
  m.impl("double_a", [](const at::Tensor& x) { return x.mul(2); });
  m.impl("double_b", [](const at::Tensor& x) { return x.mul(2); });
  m.impl("threads_cost", [](const at::Tensor& x, const at::Tensor& fail, double all_ms, double one_ms) {
    TORCH_CHECK(fail.item<float>() == 0, "threads_cost failed on purpose");
    const int threads = at::get_num_threads();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(threads > 1 ? all_ms : one_ms));
    return at::full_like(x, threads);
  });
}

PYBIND11_MODULE(_C_test, m) {
  m.doc() = "openmtia's test-only bindings (built with OPENMTIA_TEST_MODULE=1)";
  py::class_<Gate, std::shared_ptr<Gate>>(m, "Gate").def("release", &Gate::release);
  // A gate not released within `timeout_s` opens all the same (nothing hangs)
  // but fails its task: the next sync of the stream raises, so the test that
  // held it fails (something it expected to return at once waited instead).
  m.def("launch_blocking_task", [](int device, double timeout_s) {
    py::object props = py::module_::import("torch").attr("mtia").attr("get_device_properties")(device);
    // on a synchronous driver the gate would hold the launching thread itself
    if (!props["asynchronous"].cast<bool>())
      throw std::runtime_error(
          "launch_blocking_task needs an asynchronous driver (OMTIA_DEVICE_ASYNC); the loaded one runs tasks on "
          "the launching thread (a test that holds a stream is marked needs_async)");
    auto* task = new GateTask{std::make_shared<Gate>(), timeout_s, {}};
    std::shared_ptr<Gate> gate = task->gate;
    launch(device, "test_gate",
           [](void* u) -> const char* {
             auto* t = static_cast<GateTask*>(u);
             if (t->gate->wait(t->timeout_s)) return nullptr;
             t->error = "test gate not released within " + std::to_string(t->timeout_s) +
                        " s: the test held the stream and something waited for it";
             return t->error.c_str();
           },
           task, [](void* u) { delete static_cast<GateTask*>(u); },
           OMTIA_LAUNCH_WAITS_FOR_HOST);  // (it waits for the test's thread: never run by a waiting host thread)
    return gate;
  }, py::arg("device"), py::arg("timeout_s") = 30.0);
  // A task that records the thread that ran it (help-first waits: a host
  // thread that waits for the stream may run it).
  py::class_<Probe, std::shared_ptr<Probe>>(m, "Probe")
      .def_property_readonly("thread_id", [](const Probe& p) { return p.thread_id.load(); })
      .def_property_readonly("order", [](const Probe& p) { return p.order.load(); });
  m.def("launch_thread_probe", [](int device) {
    auto probe = std::make_shared<Probe>();
    launch(device, "test_probe",
           [](void* u) -> const char* {
             auto* p = static_cast<std::shared_ptr<Probe>*>(u);
             (*p)->thread_id = static_cast<long>(syscall(SYS_gettid));
             (*p)->order = ++g_probes_run;
             return nullptr;
           },
           new std::shared_ptr<Probe>(probe), [](void* u) { delete static_cast<std::shared_ptr<Probe>*>(u); });
    return probe;
  });
  // For tests of asynchronous error reporting: a task that fails.
  m.def("launch_failing_task", [](int device, const std::string& name, const std::string& message) {
    launch(device, name, [](void* u) -> const char* { return static_cast<FailingTask*>(u)->message.c_str(); },
           new FailingTask{message}, [](void* u) { delete static_cast<FailingTask*>(u); });
  });
}
