// Host-CPU emulation of the openmtia device runtime (see openmtia/runtime.h).
#include "engine.h"

#include "faults.h"

#include <cxxabi.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <sched.h>
#include <thread>
#include <vector>

#include "openmtia/recycler.h"
#include "inline_policy.h"
#include "strict_memory.h"

namespace omr {
namespace engine {
namespace {

using Clock = std::chrono::steady_clock;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}
constexpr size_t kAlignment = 256;
constexpr int kSpinMicros = 50;      // how long an idle worker polls before sleeping
constexpr int kSyncSpinMicros = 20;  // how long a synchronizing host thread polls before sleeping
// One thread team: a host thread runs a stream's tasks (help-first waits,
// inline launches) only once this many of them in a row ran without
// parallel regions (workRunsParallel()). A task over several cores runs on
// its worker, whose OpenMP team persists between tasks. Run by a host
// thread that waited, it made the host's own team beside the worker's, both
// spinning on 2 cores: an AdamW step over the GPT's parameters (8 list
// tasks) ran at 0.47x CPU PyTorch's speed, 0.82x once they stayed on the
// worker (2-core AMD EPYC VM).
constexpr int kSerialTasksBeforeHostRuns = 8;
constexpr int kTrimAfterMillis = 5;  // how long a worker idles before it returns free heap memory
constexpr size_t kDefaultQueueDepth = 1024;

std::atomic<bool> g_used{false};      // a stream was started or device memory allocated
// when a worker last trimmed the heap (malloc_trim trims every arena of the
// process: one idle worker's trim serves the others that ran before it)
std::atomic<int64_t> g_last_trim_ns{0};
std::atomic<bool> g_bad_fork{false};  // this process was forked after g_used
std::atomic<bool> g_workers_stopped{false};  // stopWorkers() ran: tasks run inline
std::atomic<WaitHook> g_wait_hook{nullptr};
std::atomic<HostWorkHook> g_host_work_hook{nullptr};
// Help-first waits (RuntimeConfig::help_first): a host thread that waits for
// a stream runs the stream's queued tasks itself while no worker has claimed
// them, instead of sleeping while a worker (that may not have a core yet)
// does. On cores shared with other busy threads this saves a worker's
// wake-up and the host's sleep and wake-up per wait, and the wait ends as
// soon as the work is done; where a worker already runs the tasks, the host
// waits as before.
std::atomic<bool> g_help_first{true};
// One thread team (RuntimeConfig::one_team, kSerialTasksBeforeHostRuns).
std::atomic<bool> g_one_team{true};
std::atomic<bool> g_hold_workers{false};  // holdWorkersForTesting()
RuntimeConfig g_config;                  // configure(): read once, when the runtime is made
std::atomic<bool> g_runtime_made{false};

void checkNotForked() {
  if (g_bad_fork.load(std::memory_order_relaxed))
    throw Error(ErrorCode::kForked,
                "Cannot re-initialize MTIA in forked subprocess. To use MTIA with multiprocessing, you must use the "
                "'spawn' start method");
}

void markUsed() {
  if (g_used.load(std::memory_order_relaxed)) return;
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, [] { g_bad_fork = g_used.load(); }); });
  g_used = true;
}

// Runs wait() through the wait hook (which may release an interpreter lock).
template <typename F>
void hookedWait(F& wait) {
  WaitHook hook = g_wait_hook.load();
  auto call = [](void* f) { (*static_cast<F*>(f))(); };
  if (hook) hook(call, &wait);
  else call(&wait);
}


// A set of [ptr, ptr+size) ranges with lookup of the range holding an address.
class RangeMap {
 public:
  void add(const void* p, size_t n) { ranges_[reinterpret_cast<uintptr_t>(p)] = n; }
  // Returns the size of the range that starts at p, 0 if none.
  size_t remove(const void* p) {
    auto it = ranges_.find(reinterpret_cast<uintptr_t>(p));
    if (it == ranges_.end()) return 0;
    size_t n = it->second;
    ranges_.erase(it);
    return n;
  }
  // The range holding p: its start and size ({nullptr, 0} if none).
  std::pair<void*, size_t> find(const void* p) const {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return {nullptr, 0};
    --it;
    if (a >= it->first + std::max<size_t>(it->second, 1)) return {nullptr, 0};
    return {reinterpret_cast<void*>(it->first), it->second};
  }
  // Whether [p, p + len) lies in one range.
  bool contains(const void* p, size_t len = 1) const {
    auto [base, size] = find(p);
    return base && reinterpret_cast<uintptr_t>(p) + std::max<size_t>(len, 1) <=
                       reinterpret_cast<uintptr_t>(base) + std::max<size_t>(size, 1);
  }

 private:
  std::map<uintptr_t, size_t> ranges_;
};

// Tracing (setTracing): read by every launch and task, set rarely.
std::atomic<TagHook> g_tag_hook{nullptr};
std::atomic<TraceSink> g_trace_sink{nullptr};

thread_local bool t_on_worker = false;  // onStreamWorker()
thread_local bool t_task_parallel = false;  // the running task called workRunsParallel()
thread_local int t_claimed_run = 0;         // >0: the host thread runs tasks it claimed from a worker's stream
std::atomic<IdleHook> g_idle_hook{nullptr};

int64_t unixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool timing = false;
  int device = -1;
  StreamId stream = 0;
  uint64_t version = 0;     // number of records
  uint64_t done_version = 0;
  uint64_t record_seq = 0;  // the last record's task on its stream (0: not known)
  Clock::time_point time;   // when the last record was reached
};

// A graph's recorded tasks: run any number of times, destroyed with it.
struct GraphTasks {
  std::vector<std::pair<std::string, HostTask>> tasks;
  GraphTasks() = default;
  GraphTasks(const GraphTasks&) = delete;
  GraphTasks& operator=(const GraphTasks&) = delete;
  ~GraphTasks() {
    for (auto& t : tasks)
      if (t.second.destroy) t.second.destroy(t.second.user);
  }
};

// A Task (std::function) as a HostTask: fn turns what it throws into the message.
const char* runBoxed(void* user) {
  return omr::detail::runCatching(*static_cast<Task*>(user));
}
void destroyBoxed(void* user) { Recycler<Task>::release(static_cast<Task*>(user)); }
HostTask box(Task task) { return HostTask{&runBoxed, Recycler<Task>::make(std::move(task)), &destroyBoxed}; }

struct Stream {
  int device = 0;
  StreamId id = 0;
  int64_t label = 0;  // its number in messages and trace records (streamCreate's; else its id)
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  struct Entry {
    std::string name;
    HostTask task;
    uint64_t tag = 0;
    // a stream_wait_event task: the event and version it waits for (the
    // task holds the event's state until it is destroyed)
    EventState* waits_on = nullptr;
    uint64_t waits_version = 0;
  };
  // Entries [popped, enqueued) in order: [popped, completed) have run and wait
  // to be destroyed by the host (drain()), [started, enqueued) wait to run.
  // The host alone allocates and frees queue memory and what tasks captured
  // (no cross-thread malloc traffic); the worker only reads entries, which a
  // push_back never moves. The worker takes all waiting entries at once and
  // publishes completions without the lock (unless someone waits), so the
  // host's launches rarely meet it on the lock.
  std::deque<Entry> queue;
  uint64_t enqueued = 0, started = 0, popped = 0;  // under mu
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> enqueued_seen{0};  // `enqueued`, readable without the lock
  std::atomic<int> waiters{0};             // threads in waitFor()
  std::atomic<int> worker_cpu{-1};         // the core the worker last ran tasks on
  // The least completion count a sleeping waiter needs (UINT64_MAX: none). A
  // worker wakes the waiters only when `completed` reaches it, not at every
  // task: a host thread woken per task takes a core from the kernel's own
  // threads (a 1M-element add ran at half speed behind a sleeping sync).
  std::atomic<uint64_t> wake_at{UINT64_MAX};
  // How many of the last tasks ran in a row without parallel regions
  // (saturating at kSerialTasksBeforeHostRuns; written by whoever runs the
  // stream's tasks, one at a time). Below it, host threads leave the tasks
  // to the worker.
  std::atomic<int> serial_run{kSerialTasksBeforeHostRuns};
  bool hostMayRun() const {
    return serial_run.load(std::memory_order_relaxed) >= kSerialTasksBeforeHostRuns ||
           !g_one_team.load(std::memory_order_relaxed);
  }
  std::string error_task, error_msg;  // first failure not yet reported
  bool has_error = false;
  std::shared_ptr<struct GraphTasks> capture;  // under mu: the graph being captured, if any
  std::thread worker;

  void checkNotCapturing(const char* what) {
    std::lock_guard<std::mutex> lk(mu);
    if (capture)
      throw Error(ErrorCode::kCapturing, std::string(what) + " is not permitted while mtia:" + std::to_string(device) +
                                             " stream " + std::to_string(label) + " is being captured into a graph");
  }

  // After stopWorkers(): no worker; every task runs on the thread that
  // launches it, before the launch returns (in launch order: inline_mu).
  bool inline_mode = false;  // under mu
  bool stop = false;         // under mu: the worker ends once its queue is empty
  std::recursive_mutex inline_mu;

  void start() {
    if (g_workers_stopped.load()) {
      inline_mode = true;
      return;
    }
    worker = std::thread([this] {
      // named for debuggers and profilers: mtia<device>s<stream label>
      std::string name = "mtia" + std::to_string(device) + "s" + std::to_string(label);
      pthread_setname_np(pthread_self(), name.c_str());
      t_on_worker = true;
      if (strict::enabled()) strict::markDeviceThread(device);
      run();
    });
  }
  // Runs everything launched so far, then ends the worker (stopWorkers()).
  void stopWorker() {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!worker.joinable()) return;
      stop = true;
      cv_work.notify_one();
    }
    worker.join();
    drain();
  }
  void run() {
    std::vector<Entry*> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu);
        if (!workerMayClaim() && !stop) {
          // Launches often come in bursts: poll briefly before sleeping, so the
          // next task does not pay for waking a sleeping thread.
          uint64_t seen = started;
          lk.unlock();
          if (strict::enabled()) strict::close(device);  // idle: what its tasks opened is closed
          auto until = Clock::now() + std::chrono::microseconds(kSpinMicros);
          while (enqueued_seen.load(std::memory_order_acquire) == seen && Clock::now() < until)
            std::this_thread::yield();
          // still idle after waking a host thread that slept waiting for it:
          // the worker is about to sleep, and the host needs a core (setIdleHook)
          IdleHook idle = g_idle_hook.load(std::memory_order_relaxed);
          if (idle && woke_host && enqueued_seen.load(std::memory_order_acquire) == seen) idle();
          woke_host = false;
          lk.lock();
          // idle for kTrimAfterMillis after running tasks: return the free heap memory
          if (ran_ns > g_last_trim_ns.load() &&
              !cv_work.wait_for(lk, std::chrono::milliseconds(kTrimAfterMillis),
                                [this] { return workerMayClaim() || stop; })) {
            lk.unlock();
            trimHeap();
            lk.lock();
          }
        }
        cv_work.wait(lk, [this] { return workerMayClaim() || (stop && started == enqueued && completed == started); });
        if (started == enqueued) {  // stopped, and every task ran
          inline_mode = true;
          return;
        }
        for (; started < enqueued; ++started) batch.push_back(&queue[started - popped]);
      }
      worker_cpu.store(sched_getcpu(), std::memory_order_relaxed);
      for (Entry* e : batch) execute(*e);
      batch.clear();
      sampleWorkerThread();  // (inline launches: whether the workers find cores)
      ran_ns = Clock::now().time_since_epoch().count();
    }
  }
  // Whether the worker may claim the waiting tasks (with mu held): there are
  // some, and no task claimed before them is still running (on a host thread
  // that helps: help()).
  bool workerMayClaim() {
    return started < enqueued && completed.load() == started &&
           (stop || !g_hold_workers.load(std::memory_order_relaxed));
  }
  // Help-first: runs the queued tasks up to task `seq` on the calling host
  // thread, in order, while no worker has claimed them. Claims are made
  // under mu, and only while no claimed task runs (completed == started), so
  // each task runs once and in order whoever runs it. Returns once task
  // `seq` ran, or when the rest is a worker's: it is running tasks (the
  // host then waits as before), or the next task waits for the host
  // (kTaskWaitsForHost).
  void help(uint64_t seq) {
    std::vector<Entry*> batch;
    while (completed.load() < seq) {
      {
        std::lock_guard<std::mutex> lk(mu);
        if (inline_mode || completed.load() != started || !hostMayRun()) return;
        const uint64_t end = std::min(seq, enqueued);
        for (; started < end; ++started) {
          Entry& e = queue[started - popped];
          if (e.task.flags & kTaskWaitsForHost) break;
          batch.push_back(&e);
        }
        if (batch.empty()) return;
      }
      runOnHost(batch, true);
      batch.clear();
      std::lock_guard<std::mutex> lk(mu);
      handBackToWorker();
    }
  }
  // After a host thread ran claimed tasks (with mu held): what is left (or a
  // stop) is the worker's now; with nothing left a sleeping worker sleeps on
  // (a wake-up for nothing costs it two switches).
  void handBackToWorker() {
    if (enqueued > started || stop) cv_work.notify_one();
  }
  // Runs tasks on the calling host thread as the device's work. `claimed`:
  // taken from the worker (help, inline launch); then once one of them ran
  // parallel regions, the rest goes back to the worker (its team persists:
  // kSerialTasksBeforeHostRuns).
  void runOnHost(const std::vector<Entry*>& batch, bool claimed) {
    HostWorkHook hook = g_host_work_hook.load(std::memory_order_relaxed);
    if (hook) hook(1);
    if (claimed) ++t_claimed_run;
    size_t ran = 0;
    {
      std::optional<strict::DeviceWork> device_work;  // (a task run on a host thread is the device's work)
      if (strict::enabled()) device_work.emplace(device);
      for (Entry* e : batch) {
        if (e->waits_on) helpRecord(e->waits_on, e->waits_version);
        ++ran;
        if (execute(*e) && claimed && !hostMayRun()) break;
      }
    }
    if (claimed) --t_claimed_run;
    if (ran < batch.size()) {  // claimed, not run: the worker's again (it claims none while started > completed)
      std::lock_guard<std::mutex> lk(mu);
      started = completed.load();
    }
    if (hook) hook(0);
  }
  // Before a helped stream_wait_event: helps the stream the event's record
  // is queued to, up to that record (else, with that stream's worker
  // asleep or without a core, the host would only wait for it).
  static void helpRecord(EventState* st, uint64_t version);
  // The stream's error, raised at its next synchronization (the first one
  // recorded since the last raise).
  void recordError(const std::string& task, const std::string& msg) {
    std::lock_guard<std::mutex> lk(mu);
    if (has_error) return;
    has_error = true;
    error_task = task;
    error_msg = msg;
  }
  // A faulted piece of work's error; a sticky fault or a lost device breaks
  // the device (faults.h) from now on.
  std::string faultedWork(faults::WorkFault fault, const std::string& name) {
    const std::string where = "'" + name + "' on stream " + std::to_string(label);
    const std::string dev = "mtia:" + std::to_string(device);
    if (fault == faults::WorkFault::kLost) {
      faults::breakDevice(device, true, "openmtia: " + dev + " is lost (it fell off the bus in " + where +
                                            "): its memory and queued work are gone, and every later call on it "
                                            "fails until the process restarts");
      return "injected fault: " + dev + " fell off the bus in '" + name + "'";
    }
    if (fault == faults::WorkFault::kHang) {
      faults::hang();  // (until the faults are cleared, or the process ends)
      return "injected fault: '" + name + "' hung " + dev + " stream " + std::to_string(label) +
             " until the fault was released (it did not run)";
    }
    if (fault == faults::WorkFault::kStickyFault) {
      faults::breakDevice(device, false, "openmtia: " + dev + " is unusable: a sticky fault in " + where +
                                             " corrupted its context, and every later call on it fails until the "
                                             "process restarts (as CUDA's sticky errors)");
      return "injected fault: the device faulted in '" + name + "' (sticky: " + dev + "'s context is lost)";
    }
    return "injected fault: the device faulted in '" + name + "'";
  }
  // Runs one task (on the worker, on a host thread that helps, or inline
  // after stopWorkers()) and publishes its completion. Returns whether it
  // ran parallel regions (workRunsParallel()).
  bool execute(Entry& e) {
    std::string err;
    bool failed = false;
    TraceSink sink = g_trace_sink.load(std::memory_order_relaxed);
    int64_t start_ns = sink ? unixNowNs() : 0;
    const bool strict_memory = strict::enabled();
    if (strict_memory) strict::taskStarted(device);
    const bool outer_parallel = t_task_parallel;  // (a task that runs another stream's inline)
    t_task_parallel = false;
    try {
      faults::WorkFault fault = faults::WorkFault::kNone;
      if (faults::broken(device)) {
        failed = true;  // a broken device runs nothing more
        err = faults::brokenMessage(device);
      } else if ((fault = faults::workHit(device, label, e.name.c_str())) != faults::WorkFault::kNone) {
        failed = true;  // a faulting kernel, or a lost device: it does not run (inject_fault)
        err = faultedWork(fault, e.name);
      } else if (const char* msg = e.task.fn(e.task.user)) {
        failed = true;
        err = msg;
      }
    } catch (abi::__forced_unwind&) {
      if (strict_memory) strict::taskEnded(device);
      // the thread is being ended (a task that took the GIL while Python
      // finalizes gets pthread_exit): let the unwinding through, or the
      // process aborts ("FATAL: exception not rethrown")
      throw;
    } catch (const std::exception& ex) {
      failed = true;
      err = ex.what();
    } catch (...) {
      failed = true;
      err = "unknown exception";
    }
    if (strict_memory) strict::taskEnded(device);
    const bool parallel = t_task_parallel;
    t_task_parallel = outer_parallel;
    const int serial = serial_run.load(std::memory_order_relaxed);
    if (parallel) serial_run.store(0, std::memory_order_relaxed);
    else if (serial < kSerialTasksBeforeHostRuns) serial_run.store(serial + 1, std::memory_order_relaxed);
    if (sink) sink(TaskRecord{device, label, e.name.c_str(), e.tag, start_ns, unixNowNs(), failed ? err.c_str() : nullptr});
    // What a task captured is released by the host (drain()), never here:
    // destructors may need locks the host holds while it waits for us
    // (e.g. the Python GIL when a tensor's last reference goes away).
    if (failed) recordError(e.name, err);
    const uint64_t now = completed.fetch_add(1) + 1;  // seq_cst, paired with sleepUntil()
    if (waiters.load() > 0 && now >= wake_at.load()) {
      std::lock_guard<std::mutex> lk(mu);
      wake_at = UINT64_MAX;  // (the waiters not done yet lower it again)
      cv_done.notify_all();
      woke_host = true;
    }
    return parallel;
  }
  // Idle a while after running tasks: hands the free memory of the heap
  // arenas back to the system. The tasks' CPU kernels allocate their
  // temporaries on this thread and its OpenMP team, whose glibc arenas keep
  // what they free (fragmented, it is never trimmed by itself): a transformer
  // over 200 new lengths grew the process by 50-140 MiB, CPU PyTorch by
  // 17-31, this by 20. A sync in every step does not trim at every step: only
  // an idle worker (kTrimAfterMillis) does, unless another one trimmed since
  // this one last ran tasks.
  int64_t ran_ns = 0;  // when this worker last finished tasks (its own)
  bool woke_host = false;  // the worker woke a sleeping host thread since it last idled
  void trimHeap() {
    g_last_trim_ns.store(Clock::now().time_since_epoch().count());
#ifdef __GLIBC__
    malloc_trim(0);
#endif
  }
  // Destroys finished tasks on the calling (host) thread.
  void drain() {
    Trash trash;
    std::lock_guard<std::mutex> lk(mu);
    collect(trash.tasks);
  }
  // Waits until the queue holds fewer than `depth` pending tasks. A full
  // queue waits until it is half empty, so the host thread does not wake
  // (and take a core from the kernels) once per finished task.
  void waitForRoom(size_t depth) {
    const uint64_t seen = enqueued_seen.load(std::memory_order_acquire);
    if (seen - completed.load() < depth) return;
    auto wait = [this, target = seen - depth / 2] {
      if (mayHelp()) help(target);
      sleepUntil(target);
    };
    hookedWait(wait);
  }
  // Sleeps until `completed` reaches `seq` (woken by the worker only then).
  void sleepUntil(uint64_t seq) {
    std::unique_lock<std::mutex> lk(mu);
    ++waiters;  // seq_cst: a worker that misses our wake_at sees ...
    while (completed.load() < seq) {  // ... its completion here
      if (seq < wake_at.load()) wake_at = seq;
      if (completed.load() >= seq) break;
      cv_done.wait(lk);
    }
    --waiters;
  }
  // Returns the task's sequence number, 0 if it was recorded into the graph
  // being captured.
  uint64_t push(const char* name, HostTask fn, size_t depth, uint64_t tag = 0, EventState* waits_on = nullptr,
               uint64_t waits_version = 0) {
    if (depth) waitForRoom(depth);
    Trash trash;  // destroyed after the lock is released
    std::unique_lock<std::mutex> lk(mu);
    if (capture) {  // recorded, not run (one lock per launch: its check is here)
      capture->tasks.emplace_back(name, fn);
      return 0;
    }
    if (inline_mode) {
      lk.unlock();
      return runInline(name, fn, tag);
    }
    queue.push_back({name, fn, tag, waits_on, waits_version});
    uint64_t seq = ++enqueued;
    enqueued_seen.store(seq, std::memory_order_release);
    collect(trash.tasks);
    // Inline launch: onto an idle stream (nothing of it waits or runs, so
    // running it now keeps the stream's order), a task that cannot block the
    // launch, launched by a host thread, runs there when the policy says so
    // (inline_policy.h). Claimed as help() claims: under mu.
    if (seq == started + 1 && completed.load() == started && !waits_on &&
        !(fn.flags & (kTaskWaitsForHost | kTaskMayBlock)) && !t_on_worker && hostMayRun() && runLaunchHere()) {
      Entry* e = &queue.back();
      started = seq;
      lk.unlock();
      runOnHost({e}, true);
      std::lock_guard<std::mutex> again(mu);
      handBackToWorker();  // (what was launched meanwhile)
      collect(trash.tasks);
      return seq;
    }
    cv_work.notify_one();
    return seq;
  }
  // push() of a Task, boxed (and destroyed here if push throws: not taken).
  uint64_t push(const char* name, Task fn, size_t depth, uint64_t tag = 0, EventState* waits_on = nullptr,
               uint64_t waits_version = 0) {
    HostTask t = box(std::move(fn));
    try {
      return push(name, t, depth, tag, waits_on, waits_version);
    } catch (...) {
      t.destroy(t.user);
      throw;
    }
  }
  uint64_t runInline(const char* name, HostTask fn, uint64_t tag) {
    std::lock_guard<std::recursive_mutex> order(inline_mu);
    Entry* e;
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lk(mu);
      queue.push_back({name, fn, tag});
      e = &queue.back();
      seq = ++enqueued;
      started = enqueued;
      enqueued_seen.store(seq, std::memory_order_release);
    }
    runOnHost({e}, false);
    drain();
    return seq;
  }
  // Finished tasks, destroyed with it (outside the stream lock). Its buffer
  // is reused per thread: no allocation per launch.
  struct Trash {
    std::vector<HostTask> tasks;
    Trash() { tasks.swap(spare()); }  // (a task's destroy may launch, and so drain, again)
    ~Trash() {
      for (const HostTask& t : tasks)
        if (t.destroy) t.destroy(t.user);
      tasks.clear();
      spare().swap(tasks);
    }
    static std::vector<HostTask>& spare() {
      thread_local std::vector<HostTask> v;
      return v;
    }
  };
  void collect(std::vector<HostTask>& out) {  // with mu held
    for (uint64_t done = completed.load(); popped < done; ++popped) {
      out.push_back(queue.front().task);
      queue.pop_front();
    }
  }
  void waitFor(uint64_t seq) {
    if (mayHelp()) help(seq);
    waitIdle(seq);
    drain();
  }
  static bool mayHelp() { return !t_on_worker && g_help_first.load(std::memory_order_relaxed); }
  // Waits for task `seq` without destroying finished tasks (nor running any:
  // deviceWaitIdle's callers may hold locks a task could need).
  void waitIdle(uint64_t seq) {
    // A short task is done within microseconds: poll briefly before sleeping,
    // so a launch-then-synchronize does not pay for waking this thread. Not
    // on the worker's own core (the poll would only delay it), and without
    // yielding: a thread that yields stays runnable while the worker runs,
    // and the scheduler's balancing then moves it to the other core, behind
    // a kernel's OpenMP thread spinning there until the next tick (4 ms
    // syncs in 1-15% of the syncs of a loop of 10 ops of 1M elements and a
    // synchronize on a 2-core VM).
    if (worker_cpu.load(std::memory_order_relaxed) != sched_getcpu()) {
      auto until = Clock::now() + std::chrono::microseconds(kSyncSpinMicros);
      while (completed.load() < seq && Clock::now() < until) cpuRelax();
    }
    if (completed.load() >= seq) return;
    sleepUntil(seq);
  }
  uint64_t enqueuedNow() {
    std::lock_guard<std::mutex> lk(mu);
    return enqueued;
  }
  // Raises (and clears) a pending task error.
  void raiseError() {
    std::unique_lock<std::mutex> lk(mu);
    if (!has_error) return;
    has_error = false;
    std::string task = std::move(error_task), msg = std::move(error_msg);
    lk.unlock();
    throw TaskError(task, "openmtia: asynchronous task '" + task + "' failed on mtia:" +
                              std::to_string(device) + " stream " + std::to_string(label) +
                              ": " + msg);
  }
  void synchronize() {
    checkNotCapturing("synchronizing");
    waitFor(enqueuedNow());
    if (strict::enabled()) strict::close(device);  // (before the host reads anything)
    raiseError();
  }
};

struct Device {
  int index = 0;
  size_t capacity = 0;
  std::mutex mem_mu;
  size_t used = 0;
  RangeMap allocations;
  std::mutex stream_mu;
  // the streams streamCreate made, by id (retired once destroyed: ids are
  // not reused)
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<int64_t> labels;
  std::vector<char> retired;
  bool valid(StreamId id) {  // with stream_mu held
    return id >= 0 && id < static_cast<StreamId>(streams.size()) && !retired[id];
  }
  Stream& stream(StreamId id) {
    std::lock_guard<std::mutex> lk(stream_mu);
    if (!valid(id)) throw Error(ErrorCode::kInvalidValue, "invalid mtia stream id " + std::to_string(id));
    auto& s = streams[id];
    if (!s) {  // workers start lazily: an idle stream costs nothing
      markUsed();
      s = std::make_unique<Stream>();
      s->device = index;
      s->id = id;
      s->label = labels[id];
      s->start();
    }
    return *s;
  }
  std::vector<Stream*> startedStreams() {
    std::lock_guard<std::mutex> lk(stream_mu);
    std::vector<Stream*> out;
    for (auto& s : streams)
      if (s) out.push_back(s.get());
    return out;
  }
};

class Runtime {
 public:
  static Runtime& get() {
    static Runtime* rt = new Runtime();  // never destroyed: workers outlive main()
    return *rt;
  }
  int count() const { return static_cast<int>(devices_.size()); }
  Device& device(int d) {
    checkDevice(d);
    return *devices_[d];
  }
  std::mutex pinned_mu;
  RangeMap pinned;
  bool launch_blocking = false;  // OPENMTIA_LAUNCH_BLOCKING=1
  size_t queue_depth = kDefaultQueueDepth;  // OPENMTIA_LAUNCH_QUEUE_DEPTH

 private:
  Runtime() {
    g_runtime_made = true;
    // (the framework reads OPENMTIA_* and configures: the engine reads no environment)
    int n = 2;
    size_t cap = size_t(8) << 30;
    const RuntimeConfig& c = g_config;
    if (c.device_count >= 0) n = c.device_count;
    if (c.device_memory > 0) cap = c.device_memory;
    if (c.launch_queue_depth > 0) queue_depth = c.launch_queue_depth;
    if (c.launch_blocking >= 0) launch_blocking = c.launch_blocking == 1;
    if (c.help_first >= 0) g_help_first = c.help_first == 1;
    if (c.one_team >= 0) g_one_team = c.one_team == 1;
    if (c.inline_launches >= 0) setInlineMode(static_cast<InlineMode>(c.inline_launches));
    for (int i = 0; i < n; ++i) {
      devices_.push_back(std::make_unique<Device>());
      devices_.back()->index = i;
      devices_.back()->capacity = cap;
    }
    if (c.strict_memory == 1) {
      strict::setLookup(&faultLookup);
      strict::enable();
    }
  }
  // For the fault handler: the device allocation holding addr (no thread
  // touches device memory while it holds the allocation table's lock).
  static bool faultLookup(const void* addr, int* device, void** base, size_t* size) {
    Allocation a = pointerAllocation(addr);
    if (a.device < 0) return false;
    *device = a.device;
    *base = a.base;
    *size = a.size;
    return true;
  }
  std::vector<std::unique_ptr<Device>> devices_;
};

Stream& getStream(int device, StreamId id) {
  checkNotForked();
  if (strict::enabled()) strict::markHostThread();
  return Runtime::get().device(device).stream(id);
}

void Stream::helpRecord(EventState* st, uint64_t version) {
  int device;
  StreamId stream;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->done_version >= version) return;
    if (st->version == version) seq = st->record_seq;  // (re-recorded since: that record is not known)
    device = st->device;
    stream = st->stream;
  }
  if (seq) getStream(device, stream).help(seq);
}

}  // namespace

bool inBadFork() noexcept { return g_bad_fork.load(); }

// ---------------------------------------------------------------- devices
int deviceCount() noexcept {
  try {
    return Runtime::get().count();
  } catch (...) {
    return 0;
  }
}

void checkDevice(int device) {
  int n = deviceCount();
  if (device < 0 || device >= n)
    throw Error(ErrorCode::kInvalidDevice, "invalid mtia device index " + std::to_string(device) +
                                               " (device count is " + std::to_string(n) + ")");
}

DeviceProperties deviceProperties(int device) {
  Device& d = Runtime::get().device(device);
  DeviceProperties p;
  p.name = "openmtia emulated device";
  p.total_memory = d.capacity;
  p.major = 1;
  p.minor = 0;
  p.processor_count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.host_addressable = !strict::enabled();
  return p;
}

void memGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  Device& d = Runtime::get().device(device);
  std::lock_guard<std::mutex> lk(d.mem_mu);
  if (free_bytes) *free_bytes = d.capacity - d.used;
  if (total_bytes) *total_bytes = d.capacity;
}

// ---------------------------------------------------------------- memory
void* deviceMalloc(int device, size_t bytes) {
  checkNotForked();
  Device& d = Runtime::get().device(device);
  if (bytes == 0) return nullptr;
  markUsed();
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  {
    std::lock_guard<std::mutex> lk(d.mem_mu);
    if (rounded > d.capacity - d.used || faults::hit(faults::Kind::kDeviceOutOfMemory, device))
      throw OutOfMemoryError(device, bytes, d.used, d.capacity);
    d.used += rounded;
  }
  if (strict::enabled()) strict::markHostThread();
  void* p = strict::enabled() ? strict::map(device, rounded) : std::aligned_alloc(kAlignment, rounded);
  std::lock_guard<std::mutex> lk(d.mem_mu);
  if (!p) {
    d.used -= rounded;
    throw OutOfMemoryError(device, bytes, d.used, d.capacity);
  }
  d.allocations.add(p, rounded);
  return p;
}

void deviceFree(int device, void* ptr) {
  if (!ptr) return;
  checkNotForked();
  Device& d = Runtime::get().device(device);
  deviceWaitIdle(device);  // queued work may still use the memory
  {
    std::lock_guard<std::mutex> lk(d.mem_mu);
    size_t n = d.allocations.remove(ptr);
    if (n == 0) throw Error(ErrorCode::kInvalidValue, "deviceFree: pointer not allocated on mtia:" + std::to_string(device));
    d.used -= n;
    if (strict::enabled()) strict::unmap(ptr, n);  // (under mem_mu: the fault handler's lookup finds it or nothing)
  }
  if (!strict::enabled()) std::free(ptr);
}

Allocation pointerAllocation(const void* ptr) {
  Runtime& rt = Runtime::get();
  if (!ptr) return {};
  for (int i = 0; i < rt.count(); ++i) {
    Device& d = rt.device(i);
    std::lock_guard<std::mutex> lk(d.mem_mu);
    auto [base, size] = d.allocations.find(ptr);
    if (base) return {i, base, size};
  }
  std::lock_guard<std::mutex> lk(rt.pinned_mu);
  auto [base, size] = rt.pinned.find(ptr);
  return {-1, base, size};
}

int pointerDevice(const void* ptr) { return pointerAllocation(ptr).device; }

void* hostMallocPinned(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = faults::hit(faults::Kind::kPinnedOutOfMemory, -1) ? nullptr : std::aligned_alloc(kAlignment, rounded);
  if (!p) throw Error(ErrorCode::kOutOfMemory, "pinned host allocation of " + formatBytes(bytes) + " failed");
  Runtime& rt = Runtime::get();
  std::lock_guard<std::mutex> lk(rt.pinned_mu);
  rt.pinned.add(p, rounded);
  return p;
}

void hostFreePinned(void* ptr) {
  if (!ptr) return;
  Runtime& rt = Runtime::get();
  {
    std::lock_guard<std::mutex> lk(rt.pinned_mu);
    if (rt.pinned.remove(ptr) == 0) throw Error(ErrorCode::kInvalidValue, "hostFreePinned: pointer is not pinned memory");
  }
  std::free(ptr);
}

bool isPinned(const void* ptr) {
  if (!ptr) return false;
  Runtime& rt = Runtime::get();
  std::lock_guard<std::mutex> lk(rt.pinned_mu);
  return rt.pinned.contains(ptr);
}

// ---------------------------------------------------------------- streams
void checkStream(int device, StreamId stream) {
  Device& d = Runtime::get().device(device);
  std::lock_guard<std::mutex> lk(d.stream_mu);
  if (!d.valid(stream)) throw Error(ErrorCode::kInvalidValue, "invalid mtia stream id " + std::to_string(stream));
}

StreamId streamCreate(int device, int64_t label) {
  checkNotForked();
  Device& d = Runtime::get().device(device);
  std::lock_guard<std::mutex> lk(d.stream_mu);
  d.streams.emplace_back();
  d.labels.push_back(label);
  d.retired.push_back(0);
  return static_cast<StreamId>(d.streams.size() - 1);
}

void streamDestroy(int device, StreamId stream) {
  checkNotForked();
  Device& d = Runtime::get().device(device);
  std::unique_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lk(d.stream_mu);
    if (!d.valid(stream)) throw Error(ErrorCode::kInvalidValue, "invalid mtia stream id " + std::to_string(stream));
    if (d.streams[stream]) d.streams[stream]->checkNotCapturing("destroying a stream");
    s = std::move(d.streams[stream]);
    d.retired[stream] = 1;
  }
  if (s) s->stopWorker();  // runs what was launched, ends the worker, destroys finished tasks
}

size_t launchQueueDepth() { return Runtime::get().queue_depth; }

void configure(const RuntimeConfig& config) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  if (g_runtime_made.load())
    throw Error(ErrorCode::kInvalidValue, "the runtime is configured before its first use, and once");
  if (config.device_count > kMaxDevices)
    throw Error(ErrorCode::kInvalidValue, "device_count " + std::to_string(config.device_count) + " exceeds " +
                                              std::to_string(kMaxDevices));
  g_config = config;
}

void setWaitHook(WaitHook hook) { g_wait_hook = hook; }

void setIdleHook(IdleHook hook) { g_idle_hook.store(hook); }

void setHostWorkHook(HostWorkHook hook) { g_host_work_hook.store(hook); }

void holdWorkersForTesting(bool hold) {
  g_hold_workers = hold;
  if (hold) return;
  Runtime& rt = Runtime::get();
  for (int d = 0; d < rt.count(); ++d)
    for (Stream* s : rt.device(d).startedStreams()) {
      std::lock_guard<std::mutex> lk(s->mu);
      s->cv_work.notify_one();
    }
}

void setTracing(TagHook tag, TraceSink sink) {
  g_tag_hook.store(tag);
  g_trace_sink.store(sink);
}

namespace {
uint64_t tagNow() {
  TagHook tag_hook = g_tag_hook.load(std::memory_order_relaxed);
  return tag_hook ? tag_hook() : 0;
}
template <typename T>
void launchOn(int device, StreamId stream, const char* name, T task) {
  Stream& s = getStream(device, stream);
  const uint64_t seq = s.push(name, std::move(task), Runtime::get().queue_depth, tagNow());
  if (seq && Runtime::get().launch_blocking) s.synchronize();  // raise at the failing task (0: captured)
}
}  // namespace

void launch(int device, StreamId stream, const char* name, HostTask task) { launchOn(device, stream, name, task); }

void launch(int device, StreamId stream, const char* name, Task task) { launchOn(device, stream, name, std::move(task)); }

bool launchBlocking() { return Runtime::get().launch_blocking; }

bool onStreamWorker() noexcept { return t_on_worker; }

bool workRunsParallel() noexcept {
  t_task_parallel = true;
  return t_claimed_run > 0 && g_one_team.load(std::memory_order_relaxed);
}

bool streamQuery(int device, StreamId stream) {
  Stream& s = getStream(device, stream);
  s.checkNotCapturing("querying");
  bool idle;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    idle = s.completed.load() == s.enqueued;
  }
  s.drain();
  return idle;
}

void streamSynchronize(int device, StreamId stream) { getStream(device, stream).synchronize(); }

bool hostWorkFaults(int device, StreamId stream, const char* name) {
  Stream& s = getStream(device, stream);
  const faults::WorkFault fault = faults::workHit(device, s.label, name);
  if (fault == faults::WorkFault::kNone) return false;
  s.recordError(name, s.faultedWork(fault, name));
  return true;
}

bool dataReceived(int device, StreamId stream, const char* name, void* data, size_t bytes) {
  return faults::corrupt(device, getStream(device, stream).label, name, data, bytes);
}

void deviceSynchronize(int device) {
  checkNotForked();
  auto streams = Runtime::get().device(device).startedStreams();
  for (Stream* s : streams) s->checkNotCapturing("synchronizing the device");
  for (Stream* s : streams) s->waitFor(s->enqueuedNow());
  if (strict::enabled()) strict::close(device);
  for (Stream* s : streams) s->raiseError();
}

void deviceWaitIdle(int device) {
  checkNotForked();
  for (Stream* s : Runtime::get().device(device).startedStreams()) s->waitIdle(s->enqueuedNow());
}

void stopWorkers() {
  faults::releaseHangs();         // (a hung stream's work ends with the process)
  if (g_bad_fork.load()) return;  // the parent's workers do not exist here
  g_workers_stopped = true;       // streams started from now on have no worker
  Runtime& rt = Runtime::get();
  for (int d = 0; d < rt.count(); ++d)
    for (Stream* s : rt.device(d).startedStreams()) s->stopWorker();
}

// ---------------------------------------------------------------- events
struct Event {
  std::shared_ptr<EventState> st = std::make_shared<EventState>();
};

Event* eventCreate(bool enable_timing) {
  auto* e = new Event();
  e->st->timing = enable_timing;
  return e;
}

void eventDestroy(Event* event) { delete event; }

void eventRecord(Event* event, int device, StreamId stream) {
  Stream& s = getStream(device, stream);
  s.checkNotCapturing("recording an event");
  std::shared_ptr<EventState> st = event->st;
  uint64_t version;
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->device >= 0 && st->device != device)
      throw Error(ErrorCode::kInvalidValue, "Event device " + std::to_string(st->device) +
                                                " does not match recording stream's device " + std::to_string(device) +
                                                ".");
    version = ++st->version;
    st->device = device;
    st->stream = stream;
  }
  // without st->mu: the task takes it (on the worker, or here when tasks run inline)
  const uint64_t seq = s.push("event_record", Task([st, version] {
    auto now = Clock::now();
    std::lock_guard<std::mutex> lk2(st->mu);
    if (version >= st->done_version) {
      st->done_version = version;
      st->time = now;
    }
    st->cv.notify_all();
  }), Runtime::get().queue_depth, tagNow());
  std::lock_guard<std::mutex> lk(st->mu);
  if (st->version == version) st->record_seq = seq;
}

// Waits (st.mu held by `lk`) until the event reached `version`: true; false
// if its device broke first (a lost device or a sticky fault): its record
// then never runs, and nothing may wait for it forever (a stream of another
// device, the host, or the process's exit joining a worker that waits).
bool waitForEvent(EventState& st, std::unique_lock<std::mutex>& lk, uint64_t version) {
  auto reached = [&] { return st.done_version >= version; };
  while (!st.cv.wait_for(lk, std::chrono::milliseconds(20), reached))
    if (faults::broken(st.device)) return false;
  return true;
}

void streamWaitEvent(int device, StreamId stream, Event* event) {
  std::shared_ptr<EventState> st = event->st;
  uint64_t version;
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->version == 0) return;
    version = st->version;
  }
  Stream& s = getStream(device, stream);
  EventState* waits_on = st.get();
  const uint64_t seq = s.push("stream_wait_event", Task([st, version] {
    std::unique_lock<std::mutex> lk(st->mu);
    if (waitForEvent(*st, lk, version)) return;
    const int broke = st->device;
    lk.unlock();
    faults::checkUsable(broke);  // (this wait fails with the broken device's error)
  }), Runtime::get().queue_depth, tagNow(), waits_on, version);
  if (seq && Runtime::get().launch_blocking) s.synchronize();
}

bool eventQuery(Event* event) {
  std::lock_guard<std::mutex> lk(event->st->mu);
  return event->st->done_version >= event->st->version;
}

void eventSynchronize(Event* event) {
  checkNotForked();
  std::shared_ptr<EventState> st = event->st;
  int device;
  StreamId stream;
  {
    std::unique_lock<std::mutex> lk(st->mu);
    if (st->version == 0) return;
    uint64_t version = st->version;
    if (st->done_version < version && Stream::mayHelp()) {
      lk.unlock();
      Stream::helpRecord(st.get(), version);
      lk.lock();
    }
    const bool reached = waitForEvent(*st, lk, version);
    device = st->device;
    stream = st->stream;
    if (!reached) {
      lk.unlock();
      faults::checkUsable(device);  // its device broke: its error
    }
  }
  if (strict::enabled()) strict::close(device);
  getStream(device, stream).raiseError();
}

double eventElapsedMs(Event* start, Event* end) {
  auto check = [](Event* e, const char* which) {
    std::lock_guard<std::mutex> lk(e->st->mu);
    if (!e->st->timing)
      throw Error(ErrorCode::kInvalidValue, std::string("elapsed_time: ") + which + " event was created without enable_timing=True");
    if (e->st->version == 0)
      throw Error(ErrorCode::kInvalidValue, std::string("elapsed_time: ") + which + " event has not been recorded");
    if (e->st->done_version < e->st->version)
      throw Error(ErrorCode::kInvalidValue, std::string("elapsed_time: ") + which + " event has not completed yet");
    return e->st->time;
  };
  auto t0 = check(start, "start");
  auto t1 = check(end, "end");
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

int eventDevice(Event* event) {
  std::lock_guard<std::mutex> lk(event->st->mu);
  return event->st->device;
}

// ---------------------------------------------------------------- copies
namespace {
void checkCopy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  auto isDev = [&](const void* p) {
    for (int i = 0; i < deviceCount(); ++i) {
      Device& d = Runtime::get().device(i);
      std::lock_guard<std::mutex> lk(d.mem_mu);
      if (d.allocations.contains(p, bytes)) return true;
    }
    return false;
  };
  bool src_dev = kind != CopyKind::kHostToDevice;
  bool dst_dev = kind != CopyKind::kDeviceToHost;
  if (src_dev && !isDev(src)) throw Error(ErrorCode::kInvalidValue, "memcpy: source range is not device memory");
  if (dst_dev && !isDev(dst)) throw Error(ErrorCode::kInvalidValue, "memcpy: destination range is not device memory");
}
}  // namespace

namespace {
// A copy's name, as profilers name copies: by direction, and whether the
// host side is pinned.
const char* copyName(void* dst, const void* src, CopyKind kind) {
  if (kind == CopyKind::kDeviceToDevice) return "Memcpy DtoD (Device -> Device)";
  if (kind == CopyKind::kHostToDevice)
    return isPinned(src) ? "Memcpy HtoD (Pinned -> Device)" : "Memcpy HtoD (Pageable -> Device)";
  return isPinned(dst) ? "Memcpy DtoH (Device -> Pinned)" : "Memcpy DtoH (Device -> Pageable)";
}
}  // namespace

void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  checkNotForked();
  checkCopy(dst, src, bytes, kind);
  if (!bytes) return;
  // traced as work of the device's default stream (as a synchronous copy is
  // on a GPU's), which the caller waited for
  TraceSink sink = g_trace_sink.load(std::memory_order_relaxed);
  const uint64_t tag = sink ? tagNow() : 0;
  const int64_t start_ns = sink ? unixNowNs() : 0;
  if (!strict::enabled()) {
    std::memcpy(dst, src, bytes);
  } else {
    strict::markHostThread();
    strict::DeviceWork device_work(-1);  // the device's copy engine, on the calling thread
    std::memcpy(dst, src, bytes);
  }
  if (sink) {
    const int device = pointerDevice(kind == CopyKind::kHostToDevice ? dst : src);
    sink(TaskRecord{device < 0 ? 0 : device, 0, copyName(dst, src, kind), tag, start_ns, unixNowNs()});
  }
}

void memcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, int device, StreamId stream) {
  checkCopy(dst, src, bytes, kind);
  if (bytes == 0) return;
  launch(device, stream, copyName(dst, src, kind), [dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

struct Graph {
  std::shared_ptr<GraphTasks> tasks = std::make_shared<GraphTasks>();
};

Graph* graphCreate() { return new Graph(); }

void graphDestroy(Graph* graph) { delete graph; }

void streamBeginCapture(int device, StreamId stream, Graph* graph) {
  Stream& s = getStream(device, stream);
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.capture) throw Error(ErrorCode::kCapturing, "mtia stream " + std::to_string(stream) + " is already capturing");
  s.capture = graph->tasks;
}

void streamEndCapture(int device, StreamId stream) {
  Stream& s = getStream(device, stream);
  std::lock_guard<std::mutex> lk(s.mu);
  if (!s.capture) throw Error(ErrorCode::kInvalidValue, "mtia stream " + std::to_string(stream) + " is not capturing");
  s.capture.reset();
}

bool streamIsCapturing(int device, StreamId stream) {
  Stream& s = getStream(device, stream);
  std::lock_guard<std::mutex> lk(s.mu);
  return s.capture != nullptr;
}

size_t graphTaskCount(const Graph* graph) { return graph->tasks->tasks.size(); }

std::vector<std::string> graphTaskNames(const Graph* graph) {
  std::vector<std::string> names;
  for (const auto& task : graph->tasks->tasks) names.push_back(task.first);
  return names;
}

void graphLaunch(Graph* graph, int device, StreamId stream) {
  launch(device, stream, "graph", Task([tasks = graph->tasks] {
    for (auto& [name, task] : tasks->tasks) {
      if (const char* msg = task.fn(task.user))
        throw Error(ErrorCode::kTaskFailed, "in graph task '" + name + "': " + msg);
    }
  }));
}

void graphClear(Graph* graph) { graph->tasks = std::make_shared<GraphTasks>(); }

}  // namespace engine
}  // namespace omr
