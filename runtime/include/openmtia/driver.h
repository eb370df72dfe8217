/* openmtia driver ABI: what a device driver implements, in C.
 *
 * A driver is a shared library that exports one function,
 * openmtia_driver_get(), returning a table of function pointers
 * (OmtiaDriver). The framework side (openmtia's torch integration and its
 * policy: caching allocator, stream pools, configuration) calls the device
 * only through that table. The header compiles as C99 and as C++17; no C++
 * type, exception or ownership of an allocation crosses it.
 *
 * Versions (OMTIA_DRIVER_ABI_MAJOR / _MINOR):
 * - The minor version grows when something is added in a way an older
 *   caller or driver can tell apart: a function appended to the end of
 *   OmtiaDriver, a field appended to the end of an argument struct, a new
 *   status code, flag bit or option name. Every table and argument struct
 *   starts with `struct_size`: a caller reads a table field, and a driver an
 *   argument field, only if it lies within the struct_size the other side
 *   set (OMTIA_HAS_FIELD).
 * - The major version grows with any other change: a field removed, moved
 *   or retyped, a function's meaning changed. A caller refuses a driver of
 *   another major version.
 *
 * Calls: every function returns an OmtiaStatus. On failure the calling
 * thread's last error (get_last_error) holds the code, a message and what
 * else the code carries; it stays valid until the thread's next call into
 * the driver. Handles are opaque; a handle passed after its destroy call,
 * or from another driver, is undefined behaviour. Functions may be called
 * from any host thread unless their comment says otherwise.
 *
 * Asynchrony: a stream runs the work enqueued on it in order, asynchronously
 * to the host. Work that fails makes its stream's error sticky: the next
 * stream_synchronize of that stream (or device_synchronize of its device,
 * or event_synchronize of an event recorded after it) returns
 * OMTIA_ERROR_TASK_FAILED naming the failed task, once, and the stream
 * keeps running later work.
 *
 * runtime/README.md gives each call's contract and its CUDA equivalent.
 */
#ifndef OPENMTIA_DRIVER_H_
#define OPENMTIA_DRIVER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OMTIA_DRIVER_ABI_MAJOR 1
#define OMTIA_DRIVER_ABI_MINOR 7

/* The name of the one function a driver library exports. */
#define OMTIA_DRIVER_ENTRY_POINT "openmtia_driver_get"

#if defined(_WIN32)
#define OMTIA_DRIVER_EXPORT __declspec(dllexport)
#else
#define OMTIA_DRIVER_EXPORT __attribute__((visibility("default")))
#endif

/* Whether `field` of *p lies within the size its producer set. */
#define OMTIA_HAS_FIELD(p, type, field) \
  ((p)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

typedef enum OmtiaStatus {
  OMTIA_SUCCESS = 0,
  OMTIA_ERROR_OUT_OF_MEMORY = 1,   /* device or pinned memory exhausted */
  OMTIA_ERROR_INVALID_DEVICE = 2,  /* device index out of range */
  OMTIA_ERROR_INVALID_VALUE = 3,   /* bad argument: unknown pointer, null out-pointer, ... */
  OMTIA_ERROR_TASK_FAILED = 4,     /* asynchronous work failed; reported at a synchronization */
  OMTIA_ERROR_CAPTURING = 5,       /* not permitted while the stream is captured into a graph */
  OMTIA_ERROR_FORKED = 6,          /* the device was used by the parent of this forked process */
  OMTIA_ERROR_NOT_SUPPORTED = 7,   /* the driver lacks the capability (see OmtiaDeviceProperties.flags) */
  OMTIA_ERROR_NOT_READY = 8,       /* a query's work has not finished (stream_query, event_query) */
  OMTIA_ERROR_INTERNAL = 9,        /* anything else; the message says what */
  OMTIA_ERROR_DEVICE_LOST = 10     /* ABI 1.6: the device is lost (off the bus): every later call on it fails */
} OmtiaStatus;

typedef struct OmtiaStream_* OmtiaStream;
typedef struct OmtiaEvent_* OmtiaEvent;
typedef struct OmtiaGraph_* OmtiaGraph;

/* ------------------------------------------------------------ errors */

typedef struct OmtiaErrorInfo {
  size_t struct_size;
  OmtiaStatus code;
  const char* message; /* never null; "" after a success */
  /* OMTIA_ERROR_TASK_FAILED: the failed task's name (else "") */
  const char* task;
  /* OMTIA_ERROR_OUT_OF_MEMORY: the device (-1: pinned host memory), the
   * bytes asked for, in use and the capacity (else 0) */
  int device;
  size_t requested, used, capacity;
} OmtiaErrorInfo;

/* ------------------------------------------------------------ start */

/* A named setting for initialize(): the driver takes the names it
 * documents and ignores others. The emulator's: "device_count",
 * "device_memory" (bytes per device), "launch_queue_depth" (pending work
 * per stream before a launch waits), "strict_memory" (1: host threads
 * cannot touch device memory, which is then not HOST_ADDRESSABLE),
 * "help_first" (1, the default: a host thread that waits for a stream runs
 * the stream's queued work itself; 0: it sleeps while a driver thread runs
 * it), "inline_launches" (where work launched onto an idle stream runs: 0,
 * the default, never on the launching thread; 1 always there; 2 there while
 * the process's threads wait for cores: see the emulator's README),
 * "one_team" (1, the default: work that calls work_runs_parallel keeps its
 * stream's next work on the driver thread; 0: host threads run it as any). */
typedef struct OmtiaOption {
  const char* name;
  int64_t value;
} OmtiaOption;

typedef struct OmtiaInitArgs {
  size_t struct_size;
  const OmtiaOption* options;
  size_t num_options;
} OmtiaInitArgs;

/* ------------------------------------------------------------ devices */

enum {
  /* the host may dereference device pointers (else it must copy) */
  OMTIA_DEVICE_HOST_ADDRESSABLE = 1u << 0,
  /* launch_host_func runs host functions on the stream */
  OMTIA_DEVICE_HOST_CALLBACKS = 1u << 1,
  /* stream capture and graph launch */
  OMTIA_DEVICE_GRAPHS = 1u << 2,
  /* work runs asynchronously to the launching thread */
  OMTIA_DEVICE_ASYNC = 1u << 3
};

typedef struct OmtiaDeviceProperties {
  size_t struct_size;
  char name[256];
  size_t total_memory;
  int major, minor; /* compute capability */
  int processor_count;
  uint32_t flags; /* OMTIA_DEVICE_* */
} OmtiaDeviceProperties;

/* ------------------------------------------------------------ memory */

typedef enum OmtiaMemoryType {
  OMTIA_MEMORY_UNREGISTERED = 0, /* not the driver's */
  OMTIA_MEMORY_HOST_PINNED = 1,
  OMTIA_MEMORY_DEVICE = 2
} OmtiaMemoryType;

typedef struct OmtiaPointerAttributes {
  size_t struct_size;
  OmtiaMemoryType type;
  int device; /* OMTIA_MEMORY_DEVICE: its device, else -1 */
  void* base; /* the start of the allocation holding the pointer (else null) */
  size_t size; /* and its size (else 0) */
} OmtiaPointerAttributes;

typedef enum OmtiaCopyKind {
  OMTIA_COPY_HOST_TO_DEVICE = 0,
  OMTIA_COPY_DEVICE_TO_HOST = 1,
  OMTIA_COPY_DEVICE_TO_DEVICE = 2
} OmtiaCopyKind;

/* ------------------------------------------------------------ streams and work */

typedef struct OmtiaStreamCreateArgs {
  size_t struct_size;
  int device;
  int priority; /* 0 normal; lower is more urgent, down to stream_priority_range's greatest */
  /* a number of the caller's, shown in messages and activity records
   * ("mtia:0 stream 3") */
  int64_t label;
} OmtiaStreamCreateArgs;

/* Work of a host function on a stream. `fn` runs once the work before it on
 * the stream finished: on an asynchronous driver after the launch returned,
 * on a driver thread or on a host thread that waits for the stream (a
 * help-first wait, bracketed by the host work hook); it returns null for success,
 * or a message, which the driver copies before fn's thread does anything
 * else (a thread-local buffer of the caller's will do). `destroy` (may be
 * null) runs on a host thread that calls into the driver (a later launch,
 * query or synchronization of the stream; never on the driver's thread)
 * once fn ran, or when a graph holding the work is cleared or destroyed:
 * what `user` owns may need locks the host holds while it waits for the
 * device. In a graph, fn may run many times and destroy once. */
typedef const char* (*OmtiaHostFn)(void* user);
typedef void (*OmtiaDestroyFn)(void* user);

typedef struct OmtiaLaunchArgs {
  size_t struct_size;
  OmtiaHostFn fn;
  void* user;
  OmtiaDestroyFn destroy;
  const char* name; /* for tracing and error messages; copied */
  uint32_t flags;   /* OMTIA_LAUNCH_* (ABI 1.1; MAY_BLOCK 1.2) */
} OmtiaLaunchArgs;

/* The work may block until a host thread acts (a test's gate, a callback that
 * waits for the program): an asynchronous driver runs it on a driver thread
 * only, never on a host thread that waits for the stream or launches it. */
enum { OMTIA_LAUNCH_WAITS_FOR_HOST = 1u << 0 };
/* The work may wait for something outside its stream (another stream's work,
 * another process: a collective, a wait for one): an asynchronous driver
 * never runs it on the thread that launches it (the launch would block
 * there); a host thread that waits for the stream may run it (ABI 1.2). */
enum { OMTIA_LAUNCH_MAY_BLOCK = 1u << 1 };

enum { OMTIA_EVENT_TIMING = 1u << 0 };

/* ------------------------------------------------------------ hooks */

/* Every wait of the driver for room in a stream's launch queue runs as
 * hook(wait, arg) (e.g. to release an interpreter lock around wait(arg)). */
typedef void (*OmtiaWaitHook)(void (*wait)(void*), void* arg);
/* Called on a driver thread that ran everything queued to its stream and
 * woke a host thread waiting for it, before it sleeps. */
typedef void (*OmtiaIdleHook)(void);
/* Called on a host thread around the work it runs itself (begin 1 before,
 * 0 after): a wait that runs its stream's queued work, or a driver that runs
 * work on the launching thread. */
typedef void (*OmtiaHostWorkHook)(int begin);

/* ------------------------------------------------------------ activity */

typedef struct OmtiaActivityRecord {
  size_t struct_size;
  int device;
  int64_t stream_label; /* the stream's OmtiaStreamCreateArgs.label */
  const char* name;     /* valid during the callback only */
  uint64_t correlation; /* what the correlation hook returned at the launch */
  int64_t start_ns, end_ns; /* nanoseconds since the Unix epoch */
  const char* error;        /* ABI 1.4: the work's failure message, or NULL;
                               valid during the callback only */
} OmtiaActivityRecord;

/* Called on the launching thread at each launch (0 if unset). */
typedef uint64_t (*OmtiaCorrelationHook)(void);
/* Called on a driver thread once a piece of work ran. */
typedef void (*OmtiaActivityCallback)(const OmtiaActivityRecord* record, void* user);

/* ------------------------------------------------------------ faults (ABI 1.5; 1.6; 1.7) */

/* Faults on demand, for tests of error paths: the driver fails as a real
 * device would, when asked. */
typedef enum OmtiaFaultKind {
  OMTIA_FAULT_DEVICE_OOM = 1, /* mem_alloc returns OMTIA_ERROR_OUT_OF_MEMORY */
  OMTIA_FAULT_PINNED_OOM = 2, /* host_alloc returns OMTIA_ERROR_OUT_OF_MEMORY */
  OMTIA_FAULT_KERNEL = 3,     /* a piece of work faults instead of running: its
                                 stream's error, at the next synchronization;
                                 with OMTIA_FAULT_STICKY, the device's context
                                 is lost too: every later call on the device
                                 returns OMTIA_ERROR_TASK_FAILED */
  OMTIA_FAULT_DEVICE_LOST = 4, /* ABI 1.6: at a piece of work the device is lost:
                                 that work and all queued after it never run, and
                                 every later call on the device returns
                                 OMTIA_ERROR_DEVICE_LOST; other devices go on */
  OMTIA_FAULT_HANG = 5,       /* ABI 1.6: a piece of work hangs: its stream runs
                                 nothing more until clear_faults or shutdown
                                 release it (it then fails, not run) */
  OMTIA_FAULT_CORRUPT = 6     /* ABI 1.7: data a piece of work received from
                                 outside the device (a collective's payload,
                                 data_received) arrives with one bit flipped,
                                 as over a faulty link; nothing is reported */
} OmtiaFaultKind;

typedef struct OmtiaFaultArgs {
  size_t struct_size;
  int kind;          /* OmtiaFaultKind */
  int device;        /* the device whose events count (-1: any; pinned memory has none) */
  int64_t stream;    /* faults of work: work of the stream of this label only (-1: any) */
  const char* name;  /* faults of work: work of this name only (NULL: any); copied */
  uint64_t after;    /* the matching event that fails first, counted from the injection (1: the next) */
  uint64_t times;    /* how many matching events fail from there on (0: every one) */
  double rate;       /* > 0: instead, each matching event fails with this probability */
  uint64_t seed;     /* of the rate's draws: the same seed fails the same events */
  uint32_t flags;    /* ABI 1.6: OMTIA_FAULT_STICKY */
} OmtiaFaultArgs;

#define OMTIA_FAULT_STICKY 1u /* OMTIA_FAULT_KERNEL: the fault poisons its device (CUDA's sticky errors) */

/* ------------------------------------------------------------ the table */

typedef struct OmtiaDriver {
  size_t struct_size;
  uint32_t abi_major, abi_minor;
  const char* name; /* e.g. "emulated" */

  /* errors: the calling thread's last failure (info->struct_size set by the caller) */
  OmtiaStatus (*get_last_error)(OmtiaErrorInfo* info);

  /* start and end. initialize: once, before any other call but
   * get_last_error, in_bad_fork and device_count (which initializes with no
   * options); again returns OMTIA_ERROR_INVALID_VALUE. shutdown: waits
   * until every stream ran what was launched, then ends the driver's
   * threads: later launches run on the launching thread before returning
   * (errors still reported at the next synchronization). Irreversible. */
  OmtiaStatus (*initialize)(const OmtiaInitArgs* args);
  OmtiaStatus (*shutdown)(void);
  /* *forked = 1 in a child forked after the parent used a device (started
   * work or allocated device memory); every call that would use a device
   * then returns OMTIA_ERROR_FORKED. */
  OmtiaStatus (*in_bad_fork)(int* forked);

  /* devices */
  OmtiaStatus (*device_count)(int* count);
  OmtiaStatus (*device_properties)(int device, OmtiaDeviceProperties* props);
  OmtiaStatus (*mem_get_info)(int device, size_t* free_bytes, size_t* total_bytes);

  /* memory. mem_alloc: 256-byte aligned; 0 bytes gives null.
   * mem_free: waits until the device ran the work launched so far (which
   * may use the memory), as cudaFree does. */
  OmtiaStatus (*mem_alloc)(int device, size_t bytes, void** ptr);
  OmtiaStatus (*mem_free)(int device, void* ptr);
  OmtiaStatus (*host_alloc)(size_t bytes, void** ptr); /* pinned host memory */
  OmtiaStatus (*host_free)(void* ptr);
  OmtiaStatus (*pointer_get_attributes)(const void* ptr, OmtiaPointerAttributes* attrs);

  /* copies. memcpy: now, not ordered after any stream's work; device to
   * device may cross devices. memcpy_async: ordered on the stream. */
  OmtiaStatus (*memcpy)(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind);
  OmtiaStatus (*memcpy_async)(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind, OmtiaStream stream);

  /* streams */
  OmtiaStatus (*stream_create)(const OmtiaStreamCreateArgs* args, OmtiaStream* stream);
  /* after its work ran; the handle is invalid once it returns */
  OmtiaStatus (*stream_destroy)(OmtiaStream stream);
  OmtiaStatus (*stream_priority_range)(int* least, int* greatest);
  /* returns at once, or once the stream's launch queue has room. A launch
   * that returns an error enqueued nothing and never calls destroy (the
   * caller still owns user). */
  OmtiaStatus (*launch_host_func)(OmtiaStream stream, const OmtiaLaunchArgs* args);
  /* OMTIA_SUCCESS when everything launched ran, else OMTIA_ERROR_NOT_READY */
  OmtiaStatus (*stream_query)(OmtiaStream stream);
  OmtiaStatus (*stream_synchronize)(OmtiaStream stream);
  /* work launched on `stream` from now on waits for the event's last
   * record (a never-recorded event: no wait) */
  OmtiaStatus (*stream_wait_event)(OmtiaStream stream, OmtiaEvent event);
  OmtiaStatus (*device_synchronize)(int device);
  /* like device_synchronize, but reports no error and releases nothing
   * (safe under the caller's own locks) */
  OmtiaStatus (*device_wait_idle)(int device);
  /* *yes = 1 on a thread of the driver that runs work */
  OmtiaStatus (*on_driver_thread)(int* yes);

  /* events (flags: OMTIA_EVENT_*). An event belongs to the device it was
   * first recorded on: recording it on another gives OMTIA_ERROR_INVALID_VALUE. */
  OmtiaStatus (*event_create)(uint32_t flags, OmtiaEvent* event);
  OmtiaStatus (*event_destroy)(OmtiaEvent event);
  OmtiaStatus (*event_record)(OmtiaEvent event, OmtiaStream stream);
  /* OMTIA_SUCCESS when never recorded or its last record was reached, else OMTIA_ERROR_NOT_READY */
  OmtiaStatus (*event_query)(OmtiaEvent event);
  OmtiaStatus (*event_synchronize)(OmtiaEvent event);
  /* both timing events, both reached */
  OmtiaStatus (*event_elapsed_ms)(OmtiaEvent start, OmtiaEvent end, double* ms);
  OmtiaStatus (*event_device)(OmtiaEvent event, int* device); /* -1 if never recorded */

  /* graphs (OMTIA_DEVICE_GRAPHS). While a stream is captured, work launched
   * on it is recorded into the graph instead of running; synchronizing or
   * querying the stream, or recording an event on it, returns
   * OMTIA_ERROR_CAPTURING. A launched graph runs its work in order as one
   * piece of work of the stream it is launched on. */
  OmtiaStatus (*graph_create)(OmtiaGraph* graph);
  OmtiaStatus (*graph_destroy)(OmtiaGraph graph);
  OmtiaStatus (*stream_begin_capture)(OmtiaStream stream, OmtiaGraph graph);
  OmtiaStatus (*stream_end_capture)(OmtiaStream stream);
  OmtiaStatus (*stream_is_capturing)(OmtiaStream stream, int* capturing);
  OmtiaStatus (*graph_task_count)(OmtiaGraph graph, size_t* count);
  /* valid until the graph is cleared, destroyed or recorded into again */
  OmtiaStatus (*graph_task_name)(OmtiaGraph graph, size_t index, const char** name);
  OmtiaStatus (*graph_launch)(OmtiaGraph graph, OmtiaStream stream);
  OmtiaStatus (*graph_clear)(OmtiaGraph graph);

  /* hooks (null: none) */
  OmtiaStatus (*set_wait_hook)(OmtiaWaitHook hook);
  OmtiaStatus (*set_idle_hook)(OmtiaIdleHook hook);
  /* activity records of every piece of work (null callback: off, costing
   * a load per launch and per piece of work) */
  OmtiaStatus (*set_activity_callback)(OmtiaCorrelationHook correlation, OmtiaActivityCallback callback, void* user);
  /* ABI 1.1 */
  OmtiaStatus (*set_host_work_hook)(OmtiaHostWorkHook hook);
  /* ABI 1.3: called from inside a piece of work about to spread over several
   * host cores (a thread team of the thread that runs it). A driver that runs
   * work on host threads (a wait that runs its stream's work, a launch that
   * runs it) leaves that stream's next work to its own thread, whose team
   * persists, until pieces run without this call again; *on_host is 1 when
   * the calling piece runs on such a host thread (its team is best ended
   * after the piece: the host work hook's end), else 0. */
  OmtiaStatus (*work_runs_parallel)(int* on_host);
  /* ABI 1.5: arm a fault (OmtiaFaultArgs), or disarm them all. A driver
   * that cannot inject a kind returns OMTIA_ERROR_NOT_SUPPORTED. */
  OmtiaStatus (*inject_fault)(const OmtiaFaultArgs* fault);
  OmtiaStatus (*clear_faults)(void);
  /* ABI 1.6: work the host runs itself for the device (a synchronous call,
   * after waiting for `stream`) named `name`, about to run: *faulted is 1
   * if an armed fault fails it (it counts as a piece of work of the stream),
   * and the driver then records the failure as the stream's error, reported
   * at its next synchronization as if the work had run there; else 0. On a
   * broken device it fails as every call does. */
  OmtiaStatus (*host_work_fault)(OmtiaStream stream, const char* name, int* faulted);
  /* ABI 1.7: a piece of work of `stream` named `name` received `bytes` at
   * `data` (memory of the device, or host memory staged for it) from outside
   * the device: a collective's payload. An armed OMTIA_FAULT_CORRUPT that
   * matches it flips one bit of the data (the same bit for the same seed)
   * and sets *corrupted to 1; else 0. Each call counts as one event. */
  OmtiaStatus (*data_received)(OmtiaStream stream, const char* name, void* data, size_t bytes, int* corrupted);
} OmtiaDriver;

/* The entry point: the driver's table (static, never freed), or null if it
 * cannot serve a caller built against `caller_abi_major`. */
typedef const OmtiaDriver* (*OmtiaDriverGetFn)(uint32_t caller_abi_major);
OMTIA_DRIVER_EXPORT const OmtiaDriver* openmtia_driver_get(uint32_t caller_abi_major);

#ifdef __cplusplus
}
#endif

#endif /* OPENMTIA_DRIVER_H_ */
