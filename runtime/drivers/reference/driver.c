/* openmtia reference driver: openmtia/driver.h in plain C99 (plus POSIX
 * threads and GCC's __thread), the file to copy to start a port.
 *
 * Its "device" is host memory with per-device accounting. Streams are
 * synchronous: a launch runs its host function on the calling thread before
 * it returns. That is allowed (the driver does not report
 * OMTIA_DEVICE_ASYNC) and keeps every rule of the contract easy to see:
 * in-order work, sticky per-stream errors reported at the next
 * synchronization, destroy callbacks on a host thread, events with timing,
 * graphs, activity records, fork detection. A port replaces the bodies
 * that touch memory and run work with its hardware's, and keeps the rest.
 *
 * Options (initialize): device_count (default 2), device_memory (bytes per
 * device, default 8 GiB).
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "openmtia/driver.h"

/* ------------------------------------------------------------ state */

#define MAX_DEVICES 64
#define ALIGNMENT 256

struct OmtiaStream_ {
  int device;
  int priority;
  int64_t label;
  OmtiaGraph capture; /* the graph being captured, or null */
  int has_error;      /* the first failure not yet reported */
  char error_task[256];
  char error_message[768];
  int refs;      /* 1 while alive, + 1 per event whose last record is on it */
  int destroyed; /* stream_destroy ran (freed once refs is 0) */
  struct OmtiaStream_* next; /* the list of live streams */
};

struct OmtiaEvent_ {
  int timing;
  int device; /* -1 until first recorded */
  int recorded;
  struct timespec time;
  OmtiaStream stream; /* of the last record (a reference), or null */
};

typedef struct Work {
  OmtiaHostFn fn;
  void* user;
  OmtiaDestroyFn destroy;
  char* name;
} Work;

struct OmtiaGraph_ {
  Work* work;
  size_t count, capacity;
};

typedef struct Allocation {
  char* base;
  size_t size;
  int device; /* -1: pinned host memory */
} Allocation;

/* One lock guards everything below: the reference is about clarity, not
 * contention. Host functions run without it (they may call back in). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_used;     /* memory allocated or work launched: a fork child may not use devices */
static int g_bad_fork; /* this process is such a child */
static int g_device_count = 2;
static size_t g_device_memory = (size_t)8 << 30;
static size_t g_used_bytes[MAX_DEVICES];
static Allocation* g_allocations;
static size_t g_num_allocations, g_allocations_capacity;
static OmtiaStream g_streams;
static OmtiaWaitHook g_wait_hook; /* kept; a synchronous driver never waits for room */
static OmtiaIdleHook g_idle_hook; /* kept; a synchronous driver never idles */
static OmtiaHostWorkHook g_host_work_hook; /* around every piece of work: it runs on the launching thread */
static OmtiaCorrelationHook g_correlation;
static OmtiaActivityCallback g_activity;
static void* g_activity_user;

/* The calling thread's last failure. */
static __thread struct {
  OmtiaStatus code;
  char message[1024];
  char task[256];
  int device;
  size_t requested, used, capacity;
} t_error;

static OmtiaStatus ok(void) {
  t_error.code = OMTIA_SUCCESS;
  t_error.message[0] = '\0';
  t_error.task[0] = '\0';
  t_error.device = 0;
  t_error.requested = t_error.used = t_error.capacity = 0;
  return OMTIA_SUCCESS;
}

static OmtiaStatus fail(OmtiaStatus code, const char* format, ...) {
  va_list args;
  ok();
  t_error.code = code;
  va_start(args, format);
  vsnprintf(t_error.message, sizeof t_error.message, format, args);
  va_end(args);
  return code;
}

static void copyText(char* dst, size_t n, const char* src) {
  snprintf(dst, n, "%s", src ? src : "");
}

static int64_t unixNowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ------------------------------------------------------------ start */

static void afterFork(void) { g_bad_fork = g_used; }

static void initOnce(void) {
  if (g_initialized) return;
  pthread_atfork(NULL, NULL, afterFork);
  g_initialized = 1;
}

#define FORK_CHECK()                                                                                       \
  do {                                                                                                     \
    if (g_bad_fork)                                                                                        \
      return fail(OMTIA_ERROR_FORKED,                                                                      \
                  "Cannot re-initialize MTIA in forked subprocess. To use MTIA with multiprocessing, you " \
                  "must use the 'spawn' start method");                                                   \
  } while (0)

static OmtiaStatus checkDevice(int device) {
  if (device < 0 || device >= g_device_count)
    return fail(OMTIA_ERROR_INVALID_DEVICE, "invalid mtia device %d (%d devices)", device, g_device_count);
  return OMTIA_SUCCESS;
}

static OmtiaStatus getLastError(OmtiaErrorInfo* info) {
  OmtiaErrorInfo full;
  size_t size;
  if (!info || !OMTIA_HAS_FIELD(info, OmtiaErrorInfo, message)) return OMTIA_ERROR_INVALID_VALUE;
  size = info->struct_size;
  full.struct_size = size;
  full.code = t_error.code;
  full.message = t_error.message;
  full.task = t_error.task;
  full.device = t_error.device;
  full.requested = t_error.requested;
  full.used = t_error.used;
  full.capacity = t_error.capacity;
  memcpy(info, &full, size < sizeof full ? size : sizeof full);
  return OMTIA_SUCCESS;
}

static OmtiaStatus initialize(const OmtiaInitArgs* args) {
  size_t i;
  OmtiaStatus s = OMTIA_SUCCESS;
  pthread_mutex_lock(&g_mu);
  if (g_initialized) {
    s = fail(OMTIA_ERROR_INVALID_VALUE, "the driver is initialized once, before its other calls");
  } else if (args && OMTIA_HAS_FIELD(args, OmtiaInitArgs, num_options)) {
    for (i = 0; i < args->num_options && s == OMTIA_SUCCESS; ++i) {
      const OmtiaOption* o = &args->options[i];
      if (!o->name) continue;
      if (!strcmp(o->name, "device_count")) {
        if (o->value < 0 || o->value > MAX_DEVICES)
          s = fail(OMTIA_ERROR_INVALID_VALUE, "device_count %lld is not in [0, %d]", (long long)o->value, MAX_DEVICES);
        else g_device_count = (int)o->value;
      } else if (!strcmp(o->name, "device_memory")) {
        if (o->value <= 0) s = fail(OMTIA_ERROR_INVALID_VALUE, "device_memory must be > 0");
        else g_device_memory = (size_t)o->value;
      }
    }
  }
  if (s == OMTIA_SUCCESS) {
    initOnce();
    ok();
  }
  pthread_mutex_unlock(&g_mu);
  return s;
}

static OmtiaStatus shutdownDriver(void) { return ok(); /* no threads to end: work never outlives its launch */ }

static OmtiaStatus inBadFork(int* forked) {
  if (!forked) return fail(OMTIA_ERROR_INVALID_VALUE, "forked is null");
  *forked = g_bad_fork;
  return ok();
}

/* ------------------------------------------------------------ devices */

static OmtiaStatus deviceCount(int* count) {
  if (!count) return fail(OMTIA_ERROR_INVALID_VALUE, "count is null");
  pthread_mutex_lock(&g_mu);
  initOnce();
  *count = g_device_count;
  pthread_mutex_unlock(&g_mu);
  return ok();
}

static OmtiaStatus deviceProperties(int device, OmtiaDeviceProperties* props) {
  if (!props || !OMTIA_HAS_FIELD(props, OmtiaDeviceProperties, flags))
    return fail(OMTIA_ERROR_INVALID_VALUE, "props is null or its struct_size is too small");
  if (checkDevice(device)) return t_error.code;
  memset(props->name, 0, sizeof props->name);
  snprintf(props->name, sizeof props->name, "openmtia reference device %d", device);
  props->total_memory = g_device_memory;
  props->major = 1;
  props->minor = 0;
  props->processor_count = (int)sysconf(_SC_NPROCESSORS_ONLN);
  props->flags = OMTIA_DEVICE_HOST_ADDRESSABLE | OMTIA_DEVICE_HOST_CALLBACKS | OMTIA_DEVICE_GRAPHS;
  return ok();
}

static OmtiaStatus memGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return fail(OMTIA_ERROR_INVALID_VALUE, "free_bytes or total_bytes is null");
  if (checkDevice(device)) return t_error.code;
  pthread_mutex_lock(&g_mu);
  *free_bytes = g_device_memory - g_used_bytes[device];
  *total_bytes = g_device_memory;
  pthread_mutex_unlock(&g_mu);
  return ok();
}

/* ------------------------------------------------------------ memory */

/* The allocation holding [p, p + n) (n 0: holding p), with g_mu held. A
 * linear search: a framework's caching allocator makes few, large ones. */
static Allocation* findAllocation(const void* p, size_t n) {
  size_t i;
  const char* a = (const char*)p;
  for (i = 0; i < g_num_allocations; ++i) {
    Allocation* al = &g_allocations[i];
    if (a >= al->base && a < al->base + al->size && (size_t)(a - al->base) + n <= al->size) return al;
  }
  return NULL;
}

static int addAllocation(char* base, size_t size, int device) {
  if (g_num_allocations == g_allocations_capacity) {
    size_t cap = g_allocations_capacity ? 2 * g_allocations_capacity : 64;
    Allocation* grown = (Allocation*)realloc(g_allocations, cap * sizeof *grown);
    if (!grown) return 0;
    g_allocations = grown;
    g_allocations_capacity = cap;
  }
  g_allocations[g_num_allocations].base = base;
  g_allocations[g_num_allocations].size = size;
  g_allocations[g_num_allocations].device = device;
  ++g_num_allocations;
  return 1;
}

static void removeAllocation(Allocation* al) { *al = g_allocations[--g_num_allocations]; }

static size_t roundUp(size_t n) { return (n + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

static char* alignedAlloc(size_t size) {
  void* p = NULL;
  return posix_memalign(&p, ALIGNMENT, size) == 0 ? (char*)p : NULL;
}

static OmtiaStatus memAlloc(int device, size_t bytes, void** ptr) {
  char* p;
  size_t size = roundUp(bytes);
  if (!ptr) return fail(OMTIA_ERROR_INVALID_VALUE, "ptr is null");
  FORK_CHECK();
  if (checkDevice(device)) return t_error.code;
  *ptr = NULL;
  if (bytes == 0) return ok();
  pthread_mutex_lock(&g_mu);
  g_used = 1;
  if (size < bytes || size > g_device_memory - g_used_bytes[device]) {
    size_t used = g_used_bytes[device];
    pthread_mutex_unlock(&g_mu);
    fail(OMTIA_ERROR_OUT_OF_MEMORY, "mtia:%d out of memory: tried to allocate %zu bytes (%zu of %zu bytes in use)",
         device, bytes, used, g_device_memory);
    t_error.device = device;
    t_error.requested = bytes;
    t_error.used = used;
    t_error.capacity = g_device_memory;
    return OMTIA_ERROR_OUT_OF_MEMORY;
  }
  p = alignedAlloc(size);
  if (!p || !addAllocation(p, size, device)) {
    pthread_mutex_unlock(&g_mu);
    free(p);
    return fail(OMTIA_ERROR_OUT_OF_MEMORY, "mtia:%d: the host has no memory for %zu bytes", device, bytes);
  }
  g_used_bytes[device] += size;
  pthread_mutex_unlock(&g_mu);
  *ptr = p;
  return ok();
}

static OmtiaStatus memFree(int device, void* ptr) {
  Allocation* al;
  if (!ptr) return ok();
  FORK_CHECK();
  if (checkDevice(device)) return t_error.code;
  /* (cudaFree waits for the device's work: here it has all run already) */
  pthread_mutex_lock(&g_mu);
  al = findAllocation(ptr, 0);
  if (!al || al->base != ptr || al->device != device) {
    pthread_mutex_unlock(&g_mu);
    return fail(OMTIA_ERROR_INVALID_VALUE, "mem_free: %p is not an allocation of mtia:%d", ptr, device);
  }
  g_used_bytes[device] -= al->size;
  removeAllocation(al);
  pthread_mutex_unlock(&g_mu);
  free(ptr);
  return ok();
}

static OmtiaStatus hostAlloc(size_t bytes, void** ptr) {
  char* p;
  size_t size = roundUp(bytes);
  if (!ptr) return fail(OMTIA_ERROR_INVALID_VALUE, "ptr is null");
  *ptr = NULL;
  if (bytes == 0) return ok();
  p = size >= bytes ? alignedAlloc(size) : NULL;
  pthread_mutex_lock(&g_mu);
  if (!p || !addAllocation(p, size, -1)) {
    pthread_mutex_unlock(&g_mu);
    free(p);
    fail(OMTIA_ERROR_OUT_OF_MEMORY, "pinned host allocation of %zu bytes failed", bytes);
    t_error.device = -1;
    t_error.requested = bytes;
    return OMTIA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_unlock(&g_mu);
  *ptr = p;
  return ok();
}

static OmtiaStatus hostFree(void* ptr) {
  Allocation* al;
  if (!ptr) return ok();
  pthread_mutex_lock(&g_mu);
  al = findAllocation(ptr, 0);
  if (!al || al->base != ptr || al->device != -1) {
    pthread_mutex_unlock(&g_mu);
    return fail(OMTIA_ERROR_INVALID_VALUE, "host_free: %p is not pinned memory", ptr);
  }
  removeAllocation(al);
  pthread_mutex_unlock(&g_mu);
  free(ptr);
  return ok();
}

static OmtiaStatus pointerGetAttributes(const void* ptr, OmtiaPointerAttributes* attrs) {
  Allocation* al;
  if (!attrs || !OMTIA_HAS_FIELD(attrs, OmtiaPointerAttributes, size))
    return fail(OMTIA_ERROR_INVALID_VALUE, "attrs is null or its struct_size is too small");
  pthread_mutex_lock(&g_mu);
  al = ptr ? findAllocation(ptr, 0) : NULL;
  attrs->type = !al ? OMTIA_MEMORY_UNREGISTERED : al->device >= 0 ? OMTIA_MEMORY_DEVICE : OMTIA_MEMORY_HOST_PINNED;
  attrs->device = al ? al->device : -1;
  attrs->base = al ? al->base : NULL;
  attrs->size = al ? al->size : 0;
  pthread_mutex_unlock(&g_mu);
  return ok();
}

/* Whether [p, p + n) lies in one device allocation. */
static int isDeviceRange(const void* p, size_t n) {
  Allocation* al;
  pthread_mutex_lock(&g_mu);
  al = findAllocation(p, n);
  pthread_mutex_unlock(&g_mu);
  return al && al->device >= 0;
}

static OmtiaStatus checkCopy(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind) {
  if (kind != OMTIA_COPY_HOST_TO_DEVICE && kind != OMTIA_COPY_DEVICE_TO_HOST && kind != OMTIA_COPY_DEVICE_TO_DEVICE)
    return fail(OMTIA_ERROR_INVALID_VALUE, "unknown copy kind %d", (int)kind);
  if (bytes == 0) return OMTIA_SUCCESS;
  if (kind != OMTIA_COPY_HOST_TO_DEVICE && !isDeviceRange(src, bytes))
    return fail(OMTIA_ERROR_INVALID_VALUE, "memcpy: source range is not device memory");
  if (kind != OMTIA_COPY_DEVICE_TO_HOST && !isDeviceRange(dst, bytes))
    return fail(OMTIA_ERROR_INVALID_VALUE, "memcpy: destination range is not device memory");
  return OMTIA_SUCCESS;
}

static const char* copyName(OmtiaCopyKind kind, void* dst, const void* src);

/* Reports a piece of work to `activity` (the callback loaded once by the
 * caller: it may be cleared meanwhile). */
static void reportActivity(OmtiaActivityCallback activity, int device, int64_t label, const char* name,
                           uint64_t correlation, int64_t start_ns, int64_t end_ns, const char* error) {
  OmtiaActivityRecord r;
  r.struct_size = sizeof r;
  r.device = device;
  r.stream_label = label;
  r.name = name;
  r.correlation = correlation;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.error = error;
  activity(&r, g_activity_user);
}

/* Traced as work of the device's default stream (label 0), as a synchronous
 * copy is on a GPU's. */
static OmtiaStatus memcpySync(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind) {
  OmtiaActivityCallback activity = g_activity;
  OmtiaCorrelationHook correlation = g_correlation;
  int64_t start = 0;
  uint64_t tag = 0;
  Allocation* al;
  int device;
  FORK_CHECK();
  if (checkCopy(dst, src, bytes, kind)) return t_error.code;
  if (!bytes) return ok();
  if (activity) {
    start = unixNowNs();
    tag = correlation ? correlation() : 0;
  }
  memcpy(dst, src, bytes);
  if (activity) {
    pthread_mutex_lock(&g_mu);
    al = findAllocation(kind == OMTIA_COPY_HOST_TO_DEVICE ? dst : src, 0);
    device = al && al->device >= 0 ? al->device : 0;
    pthread_mutex_unlock(&g_mu);
    reportActivity(activity, device, 0, copyName(kind, dst, src), tag, start, unixNowNs(), NULL);
  }
  return ok();
}

/* ------------------------------------------------------------ streams and work */

static void releaseStream(OmtiaStream s) { /* with g_mu held */
  OmtiaStream* p;
  if (--s->refs > 0) return;
  for (p = &g_streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  free(s);
}

static OmtiaStatus streamCreate(const OmtiaStreamCreateArgs* args, OmtiaStream* stream) {
  OmtiaStream s;
  if (!args || !OMTIA_HAS_FIELD(args, OmtiaStreamCreateArgs, label) || !stream)
    return fail(OMTIA_ERROR_INVALID_VALUE, "args or stream is null, or args->struct_size is too small");
  FORK_CHECK();
  if (checkDevice(args->device)) return t_error.code;
  s = (OmtiaStream)calloc(1, sizeof *s);
  if (!s) return fail(OMTIA_ERROR_OUT_OF_MEMORY, "no host memory for a stream");
  s->device = args->device;
  s->priority = args->priority < 0 ? -1 : 0;
  s->label = args->label;
  s->refs = 1;
  pthread_mutex_lock(&g_mu);
  s->next = g_streams;
  g_streams = s;
  pthread_mutex_unlock(&g_mu);
  *stream = s;
  return ok();
}

static OmtiaStatus streamDestroy(OmtiaStream s) {
  if (!s) return fail(OMTIA_ERROR_INVALID_VALUE, "stream is null");
  if (s->capture) return fail(OMTIA_ERROR_CAPTURING, "destroying a stream is not permitted while it is captured");
  pthread_mutex_lock(&g_mu);
  s->destroyed = 1;
  releaseStream(s);
  pthread_mutex_unlock(&g_mu);
  return ok();
}

static OmtiaStatus streamPriorityRange(int* least, int* greatest) {
  if (!least || !greatest) return fail(OMTIA_ERROR_INVALID_VALUE, "least or greatest is null");
  *least = 0;
  *greatest = -1;
  return ok();
}

/* Records the stream's first unreported failure. */
static void setStreamError(OmtiaStream s, const char* task, const char* message) {
  pthread_mutex_lock(&g_mu);
  if (!s->has_error) {
    s->has_error = 1;
    copyText(s->error_task, sizeof s->error_task, task);
    copyText(s->error_message, sizeof s->error_message, message);
  }
  pthread_mutex_unlock(&g_mu);
}

/* Reports (and clears) the stream's failure, as OMTIA_ERROR_TASK_FAILED. */
static OmtiaStatus raiseStreamError(OmtiaStream s) {
  char task[256], message[768];
  pthread_mutex_lock(&g_mu);
  if (!s->has_error) {
    pthread_mutex_unlock(&g_mu);
    return ok();
  }
  s->has_error = 0;
  copyText(task, sizeof task, s->error_task);
  copyText(message, sizeof message, s->error_message);
  pthread_mutex_unlock(&g_mu);
  fail(OMTIA_ERROR_TASK_FAILED, "openmtia: asynchronous task '%s' failed on mtia:%d stream %lld: %s", task, s->device,
       (long long)s->label, message);
  copyText(t_error.task, sizeof t_error.task, task);
  return OMTIA_ERROR_TASK_FAILED;
}

/* An activity record of a marker (an event record or wait): work of no
 * duration here, where the stream's work before it has run already. */
static void reportMarker(OmtiaStream s, const char* name) {
  OmtiaActivityCallback activity = g_activity;
  OmtiaCorrelationHook correlation = g_correlation;
  int64_t now;
  if (!activity) return;
  now = unixNowNs();
  reportActivity(activity, s->device, s->label, name, correlation ? correlation() : 0, now, now, NULL);
}

/* Runs one piece of work now, on the calling thread (this driver's "device"). */
static void runWork(OmtiaStream s, const char* name, OmtiaHostFn fn, void* user, uint64_t correlation) {
  OmtiaActivityCallback activity = g_activity;
  int64_t start = activity ? unixNowNs() : 0;
  OmtiaHostWorkHook host_work = g_host_work_hook;
  const char* err;
  if (host_work) host_work(1);
  err = fn(user);
  if (host_work) host_work(0);
  if (err) setStreamError(s, name, err);
  if (activity) reportActivity(activity, s->device, s->label, name, correlation, start, unixNowNs(), err);
}

static OmtiaStatus appendWork(OmtiaGraph g, const OmtiaLaunchArgs* a) {
  Work* w;
  if (g->count == g->capacity) {
    size_t cap = g->capacity ? 2 * g->capacity : 16;
    Work* grown = (Work*)realloc(g->work, cap * sizeof *grown);
    if (!grown) return fail(OMTIA_ERROR_OUT_OF_MEMORY, "no host memory for a graph");
    g->work = grown;
    g->capacity = cap;
  }
  w = &g->work[g->count];
  w->name = (char*)malloc(strlen(a->name ? a->name : "") + 1);
  if (!w->name) return fail(OMTIA_ERROR_OUT_OF_MEMORY, "no host memory for a graph");
  strcpy(w->name, a->name ? a->name : "");
  w->fn = a->fn;
  w->user = a->user;
  w->destroy = a->destroy;
  ++g->count;
  return ok();
}

static OmtiaStatus launchHostFunc(OmtiaStream s, const OmtiaLaunchArgs* a) {
  OmtiaCorrelationHook correlation = g_correlation;
  if (!s || !a || !OMTIA_HAS_FIELD(a, OmtiaLaunchArgs, name))
    return fail(OMTIA_ERROR_INVALID_VALUE, "stream or args is null, or args->struct_size is too small");
  if (!a->fn) return fail(OMTIA_ERROR_INVALID_VALUE, "args->fn is null");
  FORK_CHECK();
  if (s->capture) return appendWork(s->capture, a); /* recorded, not run */
  g_used = 1;
  runWork(s, a->name ? a->name : "", a->fn, a->user, correlation && g_activity ? correlation() : 0);
  if (a->destroy) a->destroy(a->user); /* on this (host) thread, once fn ran */
  return ok();
}

typedef struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
} Copy;

static const char* runCopy(void* user) {
  Copy* c = (Copy*)user;
  memcpy(c->dst, c->src, c->bytes);
  return NULL;
}

/* Whether p lies in pinned host memory. */
static int isPinnedHost(const void* p) {
  Allocation* al;
  int pinned;
  pthread_mutex_lock(&g_mu);
  al = findAllocation(p, 0);
  pinned = al && al->device < 0;
  pthread_mutex_unlock(&g_mu);
  return pinned;
}

/* A copy's name, as profilers name copies: by direction, and whether the
 * host side is pinned. */
static const char* copyName(OmtiaCopyKind kind, void* dst, const void* src) {
  if (kind == OMTIA_COPY_DEVICE_TO_DEVICE) return "Memcpy DtoD (Device -> Device)";
  if (kind == OMTIA_COPY_HOST_TO_DEVICE)
    return isPinnedHost(src) ? "Memcpy HtoD (Pinned -> Device)" : "Memcpy HtoD (Pageable -> Device)";
  return isPinnedHost(dst) ? "Memcpy DtoH (Device -> Pinned)" : "Memcpy DtoH (Device -> Pageable)";
}

/* A copy is work like any other (so a graph can record it). */
static OmtiaStatus memcpyAsync(void* dst, const void* src, size_t bytes, OmtiaCopyKind kind, OmtiaStream s) {
  OmtiaLaunchArgs a;
  OmtiaStatus st;
  Copy* c;
  if (!s) return fail(OMTIA_ERROR_INVALID_VALUE, "stream is null");
  FORK_CHECK();
  if (checkCopy(dst, src, bytes, kind)) return t_error.code;
  if (bytes == 0) return ok();
  c = (Copy*)malloc(sizeof *c);
  if (!c) return fail(OMTIA_ERROR_OUT_OF_MEMORY, "no host memory for a copy");
  c->dst = dst;
  c->src = src;
  c->bytes = bytes;
  a.struct_size = sizeof a;
  a.fn = runCopy;
  a.user = c;
  a.destroy = free;
  a.name = copyName(kind, dst, src);
  a.flags = 0;
  st = launchHostFunc(s, &a);
  if (st != OMTIA_SUCCESS) free(c); /* (not launched: still ours) */
  return st;
}

static OmtiaStatus notCapturing(OmtiaStream s, const char* what) {
  if (s->capture)
    return fail(OMTIA_ERROR_CAPTURING, "%s is not permitted while mtia:%d stream %lld is being captured into a graph",
                what, s->device, (long long)s->label);
  return OMTIA_SUCCESS;
}

static OmtiaStatus streamQuery(OmtiaStream s) {
  if (!s) return fail(OMTIA_ERROR_INVALID_VALUE, "stream is null");
  if (notCapturing(s, "querying")) return t_error.code;
  return ok(); /* everything launched has run */
}

static OmtiaStatus streamSynchronize(OmtiaStream s) {
  if (!s) return fail(OMTIA_ERROR_INVALID_VALUE, "stream is null");
  FORK_CHECK();
  if (notCapturing(s, "synchronizing")) return t_error.code;
  return raiseStreamError(s);
}

static OmtiaStatus streamWaitEvent(OmtiaStream s, OmtiaEvent e) {
  if (!s || !e) return fail(OMTIA_ERROR_INVALID_VALUE, "stream or event is null");
  if (e->recorded && !s->capture) reportMarker(s, "stream_wait_event");
  return ok(); /* the event's work has run: nothing to wait for */
}

static OmtiaStatus deviceSynchronize(int device) {
  OmtiaStream s;
  OmtiaStream failed = NULL;
  FORK_CHECK();
  if (checkDevice(device)) return t_error.code;
  pthread_mutex_lock(&g_mu);
  for (s = g_streams; s; s = s->next)
    if (s->device == device && !s->destroyed) {
      if (s->capture) {
        pthread_mutex_unlock(&g_mu);
        return notCapturing(s, "synchronizing the device");
      }
      if (s->has_error && !failed) failed = s;
    }
  if (failed) ++failed->refs;
  pthread_mutex_unlock(&g_mu);
  if (failed) {
    OmtiaStatus st = raiseStreamError(failed);
    pthread_mutex_lock(&g_mu);
    releaseStream(failed);
    pthread_mutex_unlock(&g_mu);
    return st;
  }
  return ok();
}

static OmtiaStatus deviceWaitIdle(int device) {
  if (checkDevice(device)) return t_error.code;
  return ok();
}

static OmtiaStatus onDriverThread(int* yes) {
  if (!yes) return fail(OMTIA_ERROR_INVALID_VALUE, "yes is null");
  *yes = 0; /* work runs on the threads that launch it */
  return ok();
}

/* ------------------------------------------------------------ events */

static OmtiaStatus eventCreate(uint32_t flags, OmtiaEvent* event) {
  OmtiaEvent e;
  if (!event) return fail(OMTIA_ERROR_INVALID_VALUE, "event is null");
  if (flags & ~(uint32_t)OMTIA_EVENT_TIMING) return fail(OMTIA_ERROR_INVALID_VALUE, "unknown event flags %u", flags);
  e = (OmtiaEvent)calloc(1, sizeof *e);
  if (!e) return fail(OMTIA_ERROR_OUT_OF_MEMORY, "no host memory for an event");
  e->timing = (flags & OMTIA_EVENT_TIMING) != 0;
  e->device = -1;
  *event = e;
  return ok();
}

static OmtiaStatus eventDestroy(OmtiaEvent e) {
  if (!e) return fail(OMTIA_ERROR_INVALID_VALUE, "event is null");
  pthread_mutex_lock(&g_mu);
  if (e->stream) releaseStream(e->stream);
  pthread_mutex_unlock(&g_mu);
  free(e);
  return ok();
}

static OmtiaStatus eventRecord(OmtiaEvent e, OmtiaStream s) {
  if (!e || !s) return fail(OMTIA_ERROR_INVALID_VALUE, "event or stream is null");
  FORK_CHECK();
  if (notCapturing(s, "recording an event")) return t_error.code;
  if (e->device >= 0 && e->device != s->device)
    return fail(OMTIA_ERROR_INVALID_VALUE, "Event device %d does not match recording stream's device %d.", e->device,
                s->device);
  pthread_mutex_lock(&g_mu);
  if (e->stream) releaseStream(e->stream);
  e->stream = s;
  ++s->refs;
  e->device = s->device;
  e->recorded = 1;
  clock_gettime(CLOCK_MONOTONIC, &e->time); /* the work before it has run: reached now */
  pthread_mutex_unlock(&g_mu);
  reportMarker(s, "event_record");
  return ok();
}

static OmtiaStatus eventQuery(OmtiaEvent e) {
  if (!e) return fail(OMTIA_ERROR_INVALID_VALUE, "event is null");
  return ok();
}

static OmtiaStatus eventSynchronize(OmtiaEvent e) {
  if (!e) return fail(OMTIA_ERROR_INVALID_VALUE, "event is null");
  FORK_CHECK();
  return e->stream && !e->stream->destroyed ? raiseStreamError(e->stream) : ok();
}

static OmtiaStatus eventElapsedMs(OmtiaEvent start, OmtiaEvent end, double* ms) {
  if (!start || !end || !ms) return fail(OMTIA_ERROR_INVALID_VALUE, "start, end or ms is null");
  if (!start->timing || !end->timing)
    return fail(OMTIA_ERROR_INVALID_VALUE, "elapsed_time: %s event was created without enable_timing=True",
                start->timing ? "end" : "start");
  if (!start->recorded || !end->recorded)
    return fail(OMTIA_ERROR_INVALID_VALUE, "elapsed_time: %s event has not been recorded",
                start->recorded ? "end" : "start");
  *ms = (double)(end->time.tv_sec - start->time.tv_sec) * 1e3 + (double)(end->time.tv_nsec - start->time.tv_nsec) / 1e6;
  return ok();
}

static OmtiaStatus eventDevice(OmtiaEvent e, int* device) {
  if (!e || !device) return fail(OMTIA_ERROR_INVALID_VALUE, "event or device is null");
  *device = e->device;
  return ok();
}

/* ------------------------------------------------------------ graphs */

static OmtiaStatus graphCreate(OmtiaGraph* graph) {
  if (!graph) return fail(OMTIA_ERROR_INVALID_VALUE, "graph is null");
  *graph = (OmtiaGraph)calloc(1, sizeof **graph);
  if (!*graph) return fail(OMTIA_ERROR_OUT_OF_MEMORY, "no host memory for a graph");
  return ok();
}

static OmtiaStatus graphClear(OmtiaGraph g) {
  size_t i;
  if (!g) return fail(OMTIA_ERROR_INVALID_VALUE, "graph is null");
  for (i = 0; i < g->count; ++i) {
    if (g->work[i].destroy) g->work[i].destroy(g->work[i].user);
    free(g->work[i].name);
  }
  free(g->work);
  g->work = NULL;
  g->count = g->capacity = 0;
  return ok();
}

static OmtiaStatus graphDestroy(OmtiaGraph g) {
  if (graphClear(g)) return t_error.code;
  free(g);
  return ok();
}

static OmtiaStatus streamBeginCapture(OmtiaStream s, OmtiaGraph g) {
  if (!s || !g) return fail(OMTIA_ERROR_INVALID_VALUE, "stream or graph is null");
  if (s->capture) return fail(OMTIA_ERROR_CAPTURING, "mtia stream %lld is already capturing", (long long)s->label);
  s->capture = g;
  return ok();
}

static OmtiaStatus streamEndCapture(OmtiaStream s) {
  if (!s) return fail(OMTIA_ERROR_INVALID_VALUE, "stream is null");
  if (!s->capture) return fail(OMTIA_ERROR_INVALID_VALUE, "mtia stream %lld is not capturing", (long long)s->label);
  s->capture = NULL;
  return ok();
}

static OmtiaStatus streamIsCapturing(OmtiaStream s, int* capturing) {
  if (!s || !capturing) return fail(OMTIA_ERROR_INVALID_VALUE, "stream or capturing is null");
  *capturing = s->capture != NULL;
  return ok();
}

static OmtiaStatus graphTaskCount(OmtiaGraph g, size_t* count) {
  if (!g || !count) return fail(OMTIA_ERROR_INVALID_VALUE, "graph or count is null");
  *count = g->count;
  return ok();
}

static OmtiaStatus graphTaskName(OmtiaGraph g, size_t index, const char** name) {
  if (!g || !name) return fail(OMTIA_ERROR_INVALID_VALUE, "graph or name is null");
  if (index >= g->count) return fail(OMTIA_ERROR_INVALID_VALUE, "graph task %zu of %zu", index, g->count);
  *name = g->work[index].name;
  return ok();
}

/* A graph's work that fails ends the graph there, reported as its stream's
 * failure of task "graph" (as the emulator reports it). */
static const char* runGraph(void* user) {
  static __thread char message[768];
  OmtiaGraph g = (OmtiaGraph)user;
  size_t i;
  for (i = 0; i < g->count; ++i) {
    const char* err = g->work[i].fn(g->work[i].user);
    if (err) {
      snprintf(message, sizeof message, "in graph task '%s': %s", g->work[i].name, err);
      return message;
    }
  }
  return NULL;
}

static OmtiaStatus graphLaunch(OmtiaGraph g, OmtiaStream s) {
  OmtiaLaunchArgs a;
  if (!g || !s) return fail(OMTIA_ERROR_INVALID_VALUE, "graph or stream is null");
  a.struct_size = sizeof a;
  a.fn = runGraph;
  a.user = g;
  a.destroy = NULL;
  a.name = "graph";
  a.flags = 0;
  return launchHostFunc(s, &a);
}

/* ------------------------------------------------------------ hooks */

static OmtiaStatus setWaitHook(OmtiaWaitHook hook) {
  g_wait_hook = hook;
  return ok();
}

static OmtiaStatus setIdleHook(OmtiaIdleHook hook) {
  g_idle_hook = hook;
  return ok();
}

static OmtiaStatus setHostWorkHook(OmtiaHostWorkHook hook) {
  g_host_work_hook = hook;
  return ok();
}

/* Work runs on the stream threads only: nothing to leave to them. */
static OmtiaStatus workRunsParallel(int* on_host) {
  if (!on_host) return fail(OMTIA_ERROR_INVALID_VALUE, "on_host is null");
  *on_host = 0;
  return ok();
}

static OmtiaStatus setActivityCallback(OmtiaCorrelationHook correlation, OmtiaActivityCallback callback, void* user) {
  pthread_mutex_lock(&g_mu);
  g_correlation = correlation;
  g_activity_user = user;
  g_activity = callback;
  pthread_mutex_unlock(&g_mu);
  return ok();
}

/* This driver injects no faults (ABI 1.5): the emulated one does. */
static OmtiaStatus injectFault(const OmtiaFaultArgs* fault) {
  (void)fault;
  return fail(OMTIA_ERROR_NOT_SUPPORTED, "the reference driver injects no faults (the emulated driver does)");
}

static OmtiaStatus clearFaults(void) { return ok(); }

static OmtiaStatus hostWorkFault(OmtiaStream stream, const char* name, int* faulted) {
  (void)stream;
  (void)name;
  if (!faulted) return fail(OMTIA_ERROR_INVALID_VALUE, "faulted is null");
  *faulted = 0; /* (no fault is ever armed) */
  return ok();
}

/* Received data is left as it is (ABI 1.7): no corrupt fault is ever armed. */
static OmtiaStatus dataReceived(OmtiaStream stream, const char* name, void* data, size_t bytes, int* corrupted) {
  (void)name;
  (void)data;
  (void)bytes;
  if (!stream) return fail(OMTIA_ERROR_INVALID_VALUE, "stream is null");
  if (!corrupted) return fail(OMTIA_ERROR_INVALID_VALUE, "corrupted is null");
  *corrupted = 0; /* (no fault is ever armed) */
  return ok();
}

/* ------------------------------------------------------------ the table */

static const OmtiaDriver kDriver = {
    sizeof(OmtiaDriver), OMTIA_DRIVER_ABI_MAJOR, OMTIA_DRIVER_ABI_MINOR, "reference",
    getLastError, initialize, shutdownDriver, inBadFork,
    deviceCount, deviceProperties, memGetInfo,
    memAlloc, memFree, hostAlloc, hostFree, pointerGetAttributes,
    memcpySync, memcpyAsync,
    streamCreate, streamDestroy, streamPriorityRange, launchHostFunc, streamQuery, streamSynchronize,
    streamWaitEvent, deviceSynchronize, deviceWaitIdle, onDriverThread,
    eventCreate, eventDestroy, eventRecord, eventQuery, eventSynchronize, eventElapsedMs, eventDevice,
    graphCreate, graphDestroy, streamBeginCapture, streamEndCapture, streamIsCapturing, graphTaskCount,
    graphTaskName, graphLaunch, graphClear,
    setWaitHook, setIdleHook, setActivityCallback,
    setHostWorkHook, workRunsParallel,
    injectFault, clearFaults, hostWorkFault, dataReceived,
};

OMTIA_DRIVER_EXPORT const OmtiaDriver* openmtia_driver_get(uint32_t caller_abi_major) {
  return caller_abi_major == OMTIA_DRIVER_ABI_MAJOR ? &kDriver : NULL;
}
