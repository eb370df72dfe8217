#include "openmtia/runtime.h"
#include "distributed/work.h"
#include "runtime/event_checks.h"
#include "runtime/gil.h"
#include "runtime/graphs.h"
#include "runtime/stream.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>


namespace openmtia::dist {

CommOp::CommOp(std::string name_, std::vector<at::Tensor> outputs_, std::vector<c10::Device> devices)
    : name(std::move(name_)),
      outputs(std::move(outputs_)),
      future(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                      std::move(devices))) {}

void CommOp::finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> lk(outcome_->mu);
  outcome_->done = true;
  outcome_->error = std::move(error);
  outcome_->cv.notify_all();
}

EventCheck CommOp::failureCheck() const {
  std::shared_ptr<Outcome> outcome = outcome_;
  return std::make_shared<const std::function<void()>>([outcome] {
    outcome->waitDone(std::chrono::milliseconds(0));
    std::lock_guard<std::mutex> lk(outcome->mu);
    if (outcome->error) throw std::runtime_error(describe(outcome->error));
  });
}

void CommOp::completeOnStream(const c10::Stream& stream) {
  c10::StreamGuard on(stream);
  EventCheckScope scope(failureCheck());
  future->markCompleted(c10::IValue(outputs));
}

bool CommOp::Outcome::waitDone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu);
  if (timeout.count() > 0) return cv.wait_for(lk, timeout, [this] { return done; });
  cv.wait(lk, [this] { return done; });
  return true;
}

bool CommOp::waitDone(std::chrono::milliseconds timeout) { return outcome_->waitDone(timeout); }

bool CommOp::isDone() {
  std::lock_guard<std::mutex> lk(outcome_->mu);
  return outcome_->done;
}

std::exception_ptr CommOp::error() {
  std::lock_guard<std::mutex> lk(outcome_->mu);
  return outcome_->error;
}

std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

void raiseDistError(const std::string& what) { C10_THROW_ERROR(DistBackendError, what); }

MtiaWork::MtiaWork(int rank, c10d::OpType type, const char* profiling_title, std::shared_ptr<CommOp> op,
                   WaitMode mode, int device)
    : c10d::Work(rank, type, profiling_title), op_(std::move(op)), mode_(mode), device_(device) {}

bool MtiaWork::isCompleted() { return op_->isDone(); }
bool MtiaWork::isSuccess() const { return op_->isDone() && !op_->error(); }
std::exception_ptr MtiaWork::exception() const { return op_->error(); }
std::vector<at::Tensor> MtiaWork::result() { return op_->outputs; }
void MtiaWork::synchronize() { wait(kNoTimeout); }
c10::intrusive_ptr<c10::ivalue::Future> MtiaWork::getFuture() { return op_->future; }

bool MtiaWork::wait(std::chrono::milliseconds timeout) {
  if (op_->isDone() || mode_ == WaitMode::kHost || timeout.count() > 0 || isCapturing(device_)) {
    // Nothing left to order, or the caller asked to wait here (a timeout, a
    // barrier, CPU tensors), or the stream is captured: the host waits.
    bool done = true;
    withoutGil([&] { done = op_->waitDone(timeout); });
    if (!done)
      raiseDistError("openmtia: " + op_->name + " did not complete within " + std::to_string(timeout.count()) +
                     " ms");
    if (auto error = op_->error()) raiseDistError(describe(error));
    return true;
  }
  blockCurrentStream();
  return true;
}

void MtiaWork::blockCurrentStream() {
  // The stream's worker waits, not the host; a failure of the collective
  // becomes the stream's error, raised at its next synchronization.
  launchOnCurrentStream(static_cast<c10::DeviceIndex>(device_), "c10d_wait",
                        [check = op_->failureCheck()] { (*check)(); }, omr::kTaskMayBlock);
}

Completer::Completer() : thread_([this] { run(); }) {}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void Completer::add(std::shared_ptr<CommOp> op) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_.push_back(std::move(op));
  cv_.notify_all();
}

void Completer::run() {
  for (;;) {
    std::shared_ptr<CommOp> op;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    op->waitDone();
    if (auto error = op->error()) {
      op->future->setError(std::make_exception_ptr(c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, describe(error))));
    } else {
      op->future->markCompleted(c10::IValue(op->outputs));
    }
  }
}

}  // namespace openmtia::dist
