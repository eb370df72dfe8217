// What openmtia does when the process exits: two steps, run by a Python
// atexit handler (openmtia/_device.py) before the interpreter finalizes.
//
// 1. Autograd's device threads let go of Python objects.
// torch's autograd engine runs a graph task's mtia nodes on a device thread
// (pt_autograd_<index>). When the task's last node finishes there, the caller
// of backward() wakes up, and the device thread lets go of its reference to
// the task a moment later: often it is the last one. The task holds the
// caller's thread-local state, which since torch 2.x includes a Python object
// (the contextvars copy torch.autograd stashes for device threads). If the
// interpreter is finalizing by then, that decref takes the GIL, Python ends the
// thread with pthread_exit inside a destructor, and the process aborts with
// "terminate called without an active exception" (the same race exists for
// CUDA; see pytorch/pytorch#38230 for its history).
//
// Before Python finalizes (a Python atexit handler, openmtia/_device.py), one
// tiny backward made of C++-only tensors runs on each device's autograd thread.
// A device thread takes ready tasks one at a time and drops a task before it
// takes the next, so once ours has run, any earlier task is gone; ours holds
// nothing of Python's, so whenever its own last reference goes, no GIL is needed.
//
// 2. The stream workers stop (omr::stopWorkers). They used to run on while
// the process tore itself down: a task still queued at exit could run during
// Python's finalization or while C++ static destructors destroyed torch's
// dispatcher (ThreadSanitizer caught a fallback task's redispatch racing
// Dispatcher's destructor). Now every task launched before exit runs first
// (exit does not drop device work, as a sync would not), then the workers
// end, and what is launched later (frees, event records during
// finalization, a user's atexit work) runs on the launching thread. The
// control of the kernel threads' waits ends too (aten/threads/team_wait.h).
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/utils/pybind.h>

#include "openmtia/runtime.h"
#include "aten/threads/team_wait.h"
#include "runtime/device.h"
#include "runtime/errors.h"
#include "python/process_exit.h"

namespace py = pybind11;

namespace openmtia {

namespace {
bool settleAutogradDeviceThreads() {
  py::gil_scoped_release no_gil;  // the earlier task's decref needs the GIL
  bool settled = true;
  for (c10::DeviceIndex d = 0; d < deviceCount(); ++d) {
    try {
      at::Tensor x = at::ones({1}, at::TensorOptions().device(kMTIA, d)).requires_grad_(true);
      torch::autograd::backward({x.mul(2).sum()});
    } catch (const c10::Error&) {
      // mtia unusable here (a forked child), or this device broke (lost, a
      // sticky fault) and runs nothing more: the other devices still settle
      settled = false;
    }
  }
  return settled;
}
}  // namespace

void initProcessExitBindings(py::module& m) {
  m.def("_settle_autograd_device_threads", &settleAutogradDeviceThreads,
        "Runs a backward free of Python objects on each mtia device's autograd thread (at exit)");
  m.def(
      "_stop_device_workers",
      [] {
        py::gil_scoped_release no_gil;  // a running task may need the GIL to finish
        OMR_CALL(omr::stopWorkers());
        stopTeamWait();
      },
      "Runs every launched task, then ends the stream workers: later launches run inline (at exit)");
}

}  // namespace openmtia
