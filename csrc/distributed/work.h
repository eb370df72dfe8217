// The execution side of openmtia's c10d backend: a collective is a task on a
// communication stream of the device, its Work makes the caller's stream wait
// for it; the future of a collective of mtia tensors is complete at the call
// (device-aware, as NCCL's), and a completion thread settles the others.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "runtime/event_checks.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace openmtia::dist {

// One collective in flight: set done (or failed) by its task.
struct CommOp {
  // `devices`: those of a device-aware future (completed at the call, see
  // completeOnStream); none: a host future, completed by the Completer.
  CommOp(std::string name, std::vector<at::Tensor> outputs, std::vector<c10::Device> devices = {});

  void finish(std::exception_ptr error);  // called once, by the task
  // Waits until done; false if `timeout` (ms > 0) ran out first.
  bool waitDone(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  bool isDone();
  std::exception_ptr error();
  // Completes the (device-aware) future now, with an event on `stream` after
  // the collective's task: as an NCCL future, waiting for it makes the
  // waiter's stream wait, not the host; the event carries a check that raises
  // the collective's failure on that stream (runtime/event_checks.h).
  void completeOnStream(const c10::Stream& stream);
  // Waits until done, then throws the failure if there is one: run as a task
  // by a stream that waits for the collective.
  EventCheck failureCheck() const;

  const std::string name;                 // "all_reduce", ...
  const std::vector<at::Tensor> outputs;  // Work::result() and the future's value
  const c10::intrusive_ptr<c10::ivalue::Future> future;  // value: `outputs`

 private:
  struct Outcome {  // shared with the checks of the future's events, which outlive nothing else of the op
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    bool waitDone(std::chrono::milliseconds timeout);
  };
  const std::shared_ptr<Outcome> outcome_ = std::make_shared<Outcome>();
};

// What a Work's wait() does.
enum class WaitMode {
  kStream,  // the caller's current mtia stream waits for the collective (NCCL's semantics)
  kHost,    // the calling thread waits: barriers and collectives of CPU tensors
};

class MtiaWork : public c10d::Work {
 public:
  MtiaWork(int rank, c10d::OpType type, const char* profiling_title, std::shared_ptr<CommOp> op, WaitMode mode,
           int device);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void blockCurrentStream() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::shared_ptr<CommOp> op_;
  WaitMode mode_;
  int device_;
};

// Settles the host futures of finished collectives, in order, on a host thread of
// its own: future callbacks (DDP's comm hooks, Python callbacks) never run on
// a device stream's worker, where taking the GIL or launching could deadlock.
class Completer {
 public:
  Completer();
  ~Completer();
  void add(std::shared_ptr<CommOp> op);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<CommOp>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// Raises `error` as torch.distributed.DistBackendError.
[[noreturn]] void raiseDistError(const std::string& what);
std::string describe(std::exception_ptr error);

}  // namespace openmtia::dist
