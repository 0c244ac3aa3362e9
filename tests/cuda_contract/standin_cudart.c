/*
 * standin_cudart.c — a strict stand-in for the CUDA runtime functions the CUDA
 * backend calls (compiled against the real cuda_runtime_api.h): devices
 * (STANDIN_DEVICE_COUNT, default 2; CUDA_VISIBLE_DEVICES; STANDIN_DRIVER_VERSION
 * for "driver too old"), per-thread current device, tracked device and pinned
 * memory, streams as FIFO worker threads (src/backend/cpu/cpu_stream.c), events,
 * cudaStreamWaitEvent, cudaLaunchHostFunc, and use-after-destroy detection.
 * Violations cite cuda_runtime_api.h (CUDA 13.0) or the CUDA Programming Guide
 * section "Stream and Event Behavior" (cited as PG:stream-event).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "backend/cpu/cpu_stream.h"
#include "simt_api.h"
#include "standin.h"

/* The vendor entry points are exported, as the real libraries export them (tests call them directly). */
#pragma GCC visibility push(default)

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu
#define MAX_DEV 16

struct CUstream_st {
    unsigned magic;
    int device;
    unsigned flags;
    int priority;
    cpu_stream *q;
};
struct CUevent_st {
    unsigned magic;
    int device;
    unsigned flags;
    int recorded;
    cpu_event *e;
};

static standin_set live_streams = STANDIN_SET_INIT;
static standin_set live_events = STANDIN_SET_INIT;
static _Thread_local int current_device;
static _Thread_local cudaError_t last_error;
static _Thread_local int in_host_fn;
static _Thread_local char launch_failure_text[1100];
static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *default_streams[MAX_DEV];

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

/* A query that finds work pending. driver_types.h calls cudaErrorNotReady "not actually an error" but does
 * not say that cudaGetLastError will not return it afterwards; the stand-in takes the reading that demands
 * more of the caller and keeps it as the last error, so code that checks launches with cudaGetLastError
 * must take it off after a query (PyTorch's CUDAStream::query does the same). */
static cudaError_t query_not_ready(void) { return fail(cudaErrorNotReady); }

int standin_in_host_fn(void) { return in_host_fn; }

void standin_api_enter(const char *api)
{
    if (in_host_fn)
        standin_violation(api, "cuda_runtime_api.h:4087",
                          "called from inside a cudaLaunchHostFunc callback: \"The host function must not make any "
                          "CUDA API calls\"");
}

/* ---- devices ---- */

static int physical_count(void)
{
    long n = standin_env_long("STANDIN_DEVICE_COUNT", 2);
    return n < 0 ? 0 : n > MAX_DEV ? MAX_DEV : (int)n;
}

/* CUDA_VISIBLE_DEVICES: indices up to the first invalid or absent one. */
int standin_device_count(void)
{
    int phys = physical_count();
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd) return phys;
    int n = 0;
    const char *p = cvd;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= phys) break;
        n++;
        p = end;
        if (*p == ',') p++;
        else break;
    }
    return n;
}

static int driver_version(void) { return (int)standin_env_long("STANDIN_DRIVER_VERSION", CUDART_VERSION); }
static int driver_ok(void) { return driver_version() >= CUDART_VERSION; }
int standin_current_device(void) { return current_device; }

static size_t device_memory_bytes(void) { return (size_t)standin_env_long("STANDIN_MEM_MB", 4096) << 20; }

static cudaError_t check_runtime(void)
{
    if (!driver_ok()) return fail(cudaErrorInsufficientDriver);
    if (standin_device_count() == 0) return fail(cudaErrorNoDevice);
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    standin_api_enter("cudaDriverGetVersion");
    if (!v) return fail(cudaErrorInvalidValue);
    *v = driver_version();
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    standin_api_enter("cudaRuntimeGetVersion");
    if (!v) return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    standin_api_enter("cudaGetDeviceCount");
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 0;
    cudaError_t e = check_runtime();
    if (e) return e;
    *count = standin_device_count();
    return cudaSuccess;
}

static cudaError_t check_device(const char *api, int d)
{
    cudaError_t e = check_runtime();
    if (e) return e;
    if (d < 0 || d >= standin_device_count()) {
        (void)api;
        return fail(cudaErrorInvalidDevice);
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    standin_api_enter("cudaSetDevice");
    cudaError_t e = check_device("cudaSetDevice", d);
    if (e) return e;
    /* cuda_runtime_api.h:1637: cudaSetDevice "will also immediately initialize the runtime state on the primary
     * context" (hundreds of MiB of device memory per GPU): counted, so code that only asks about a device can be
     * checked not to set it. */
    static const char *const contexts[16] = {
        "primary_context_0", "primary_context_1", "primary_context_2", "primary_context_3", "primary_context_4",
        "primary_context_5", "primary_context_6", "primary_context_7", "primary_context_8", "primary_context_9",
        "primary_context_10", "primary_context_11", "primary_context_12", "primary_context_13",
        "primary_context_14", "primary_context_15"};
    static atomic_int made[16];
    if (d < 16 && atomic_exchange(&made[d], 1) == 0) standin_count(contexts[d]);
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    standin_api_enter("cudaGetDevice");
    if (!d) return fail(cudaErrorInvalidValue);
    *d = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    standin_api_enter("cudaGetDeviceProperties");
    if (!p) return fail(cudaErrorInvalidValue);
    cudaError_t e = check_device("cudaGetDeviceProperties", d);
    if (e) return e;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "gpucore contract stand-in device %d (host memory, SIMT kernels)", d);
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->warpSize = 32;
    p->totalGlobalMem = device_memory_bytes();
    p->l2CacheSize = 50 << 20;
    p->sharedMemPerBlock = 49152;
    p->sharedMemPerBlockOptin = SIMT_MAX_DYNAMIC_SMEM;
    p->maxThreadsPerBlock = 1024;
    p->pciDomainID = 0;
    p->pciBusID = 0x10 + d;
    p->pciDeviceID = 0;
    p->unifiedAddressing = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int d)
{
    standin_api_enter("cudaDeviceGetAttribute");
    if (!v) return fail(cudaErrorInvalidValue);
    cudaError_t e = check_device("cudaDeviceGetAttribute", d);
    if (e) return e;
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = 4; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = SIMT_MAX_DYNAMIC_SMEM; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    standin_api_enter("cudaDeviceGetPCIBusId");
    if (!bus || len < 13) return fail(cudaErrorInvalidValue);
    cudaError_t e = check_device("cudaDeviceGetPCIBusId", d);
    if (e) return e;
    snprintf(bus, (size_t)len, "%04x:%02x:%02x.0", 0, 0x10 + d, 0);
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int a, int b)
{
    standin_api_enter("cudaDeviceCanAccessPeer");
    if (!can) return fail(cudaErrorInvalidValue);
    cudaError_t e = check_device("cudaDeviceCanAccessPeer", a);
    if (!e) e = check_device("cudaDeviceCanAccessPeer", b);
    if (e) return e;
    *can = a != b;
    return cudaSuccess;
}

/* peer_enabled[a][b]: device a may access device b's memory directly (cudaDeviceEnablePeerAccess
 * called with a current). Copies between devices are counted "peer_copy_direct" when the
 * stream's device has access to the other side, else "peer_copy_staged" (through host memory). */
static atomic_int peer_enabled[MAX_DEV][MAX_DEV];

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    standin_api_enter("cudaDeviceEnablePeerAccess");
    cudaError_t e = check_device("cudaDeviceEnablePeerAccess", peer);
    if (e) return e;
    if (flags != 0) {
        standin_violation("cudaDeviceEnablePeerAccess", "cuda_runtime_api.h:8511",
                          "flags %u: \"Returns ::cudaErrorInvalidValue if flags is not 0\"", flags);
        return fail(cudaErrorInvalidValue);
    }
    int can = 0;
    (void)cudaDeviceCanAccessPeer(&can, current_device, peer);
    if (!can) {
        standin_violation("cudaDeviceEnablePeerAccess", "cuda_runtime_api.h:8505",
                          "device %d cannot access device %d: \"Returns ::cudaErrorInvalidDevice if "
                          "::cudaDeviceCanAccessPeer() indicates that the current device cannot directly access "
                          "memory from peerDevice\"", current_device, peer);
        return fail(cudaErrorInvalidDevice);
    }
    if (current_device >= MAX_DEV || peer >= MAX_DEV) return fail(cudaErrorInvalidDevice);
    if (atomic_exchange(&peer_enabled[current_device][peer], 1))
        return fail(cudaErrorPeerAccessAlreadyEnabled); /* cuda_runtime_api.h:8508; also the last error */
    standin_count("peer_access_enabled");
    return cudaSuccess;
}

static void count_peer_copy(int stream_device, standin_mem_info d, standin_mem_info s)
{
    if (d.kind != STANDIN_MEM_DEVICE || s.kind != STANDIN_MEM_DEVICE || d.device == s.device) return;
    int other = d.device == stream_device ? s.device : d.device;
    int direct = stream_device < MAX_DEV && other < MAX_DEV && atomic_load(&peer_enabled[stream_device][other]);
    standin_count(direct ? "peer_copy_direct" : "peer_copy_staged");
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    standin_api_enter("cudaDeviceGetStreamPriorityRange");
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    standin_api_enter("cudaMemGetInfo");
    cudaError_t e = check_runtime();
    if (e) return e;
    size_t total = device_memory_bytes(), used = standin_mem_device_bytes(current_device);
    if (free_b) *free_b = used > total ? 0 : total - used;
    if (total_b) *total_b = total;
    return cudaSuccess;
}

/* ---- errors ---- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaError(stand-in: unnamed)";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return launch_failure_text[0] ? launch_failure_text : "unspecified launch failure";
    default: return "stand-in CUDA error";
    }
}

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    standin_api_enter("cudaMalloc");
    if (!p) return fail(cudaErrorInvalidValue);
    *p = NULL;
    cudaError_t e = check_runtime();
    if (e) return e;
    if (bytes == 0) return cudaSuccess;
    if (standin_mem_device_bytes(current_device) + bytes > device_memory_bytes()) return fail(cudaErrorMemoryAllocation);
    void *m = NULL;
    if (posix_memalign(&m, 256, bytes) != 0) return fail(cudaErrorMemoryAllocation);
    standin_mem_add(m, bytes, STANDIN_MEM_DEVICE, current_device);
    *p = m;
    return cudaSuccess;
}

static void sync_device_streams(int device)
{
    void *list[256];
    size_t n = standin_set_list(&live_streams, list, 256);
    for (size_t i = 0; i < n; i++) {
        struct CUstream_st *s = list[i];
        if (s->device == device) cpu_stream_synchronize(s->q);
    }
}

cudaError_t cudaFree(void *p)
{
    standin_api_enter("cudaFree");
    cudaError_t e = check_runtime();
    if (e) return e;
    if (!p) return cudaSuccess; /* also creates the context */
    standin_mem_info was;
    standin_mem_info now = standin_mem_find(p);
    if (now.kind == STANDIN_MEM_DEVICE && now.base == (char *)p) sync_device_streams(now.device); /* cudaFree syncs */
    if (!standin_mem_remove(p, STANDIN_MEM_DEVICE, &was)) {
        standin_violation("cudaFree", "cuda_runtime_api.h:4752", "%p is not the start of a live cudaMalloc allocation%s",
                          p, now.kind == STANDIN_MEM_FREED ? " (double free)" : now.kind == STANDIN_MEM_PINNED ?
                          " (it is cudaHostAlloc memory: use cudaFreeHost)" : "");
        return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    standin_api_enter("cudaHostAlloc");
    if (!p) return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return fail(cudaErrorInvalidValue);
    void *m = NULL;
    if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0) return fail(cudaErrorMemoryAllocation);
    standin_mem_add(m, bytes ? bytes : 1, STANDIN_MEM_PINNED, current_device);
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    standin_api_enter("cudaFreeHost");
    if (!p) return cudaSuccess;
    if (!standin_mem_remove(p, STANDIN_MEM_PINNED, NULL)) {
        standin_violation("cudaFreeHost", "cuda_runtime_api.h cudaFreeHost", "%p is not live cudaHostAlloc memory", p);
        return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* ---- streams ---- */

static struct CUstream_st *new_stream(int device, unsigned flags, int priority)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (cpu_stream_create(&s->q) != GPUCORE_OK) { free(s); return NULL; }
    s->magic = STREAM_MAGIC;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    standin_set_add(&live_streams, s);
    return s;
}

struct CUstream_st *standin_stream(const char *api, void *handle)
{
    if (handle == NULL || handle == (void *)cudaStreamLegacy || handle == (void *)cudaStreamPerThread) {
        int d = current_device;
        pthread_mutex_lock(&default_lock);
        if (!default_streams[d]) default_streams[d] = new_stream(d, 0, 0);
        struct CUstream_st *s = default_streams[d];
        pthread_mutex_unlock(&default_lock);
        return s;
    }
    if (!standin_set_has(&live_streams, handle)) {
        standin_violation(api, "cuda_runtime_api.h:2190", "stream %p is not a live stream (destroyed with "
                          "cudaStreamDestroy, or never created)", handle);
        return NULL;
    }
    return handle;
}

int standin_stream_device(struct CUstream_st *s) { return s->device; }

/* nccl.h:554-556 (ncclGroupStart): "Nothing will be started on the CUDA stream until ncclGroupEnd", and
 * nccl.h:565-566 (ncclGroupEnd): "Operations on the CUDA stream depending on the NCCL operations need to be
 * called after ncclGroupEnd". Anything queued on a stream whose collectives an open group holds (or whose
 * non-blocking ncclGroupEnd has not settled) runs BEFORE them: a kernel or copy reads their inputs unreduced
 * and an event or host function reports them done. Records a violation naming what was queued. */
static void check_not_held(const char *api, struct CUstream_st *s, const char *what)
{
    if (standin_nccl_group_holds_stream(s))
        standin_violation(api, "nccl.h:555,565", "%s queued on a stream whose NCCL collectives are held in an open "
                          "group: \"Nothing will be started on the CUDA stream until ncclGroupEnd\" and \"Operations "
                          "on the CUDA stream depending on the NCCL operations need to be called after "
                          "ncclGroupEnd\", so it runs before them", what);
}

typedef struct task_args { standin_task_fn fn; unsigned char args[256]; } task_args;
static gpucore_status run_task(void *p)
{
    task_args *t = p;
    return t->fn(t->args) ? GPUCORE_ERR_BACKEND : GPUCORE_OK;
}

int standin_stream_enqueue(struct CUstream_st *s, standin_task_fn fn, const void *args, size_t size)
{
    task_args t;
    if (size > sizeof t.args) return 1;
    t.fn = fn;
    memcpy(t.args, args, size);
    return cpu_stream_enqueue(s->q, run_task, &t, sizeof t.fn + size + 16) != GPUCORE_OK;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *out, unsigned int flags, int priority)
{
    standin_api_enter("cudaStreamCreateWithPriority");
    if (!out || (flags & ~(unsigned)cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
    cudaError_t e = check_runtime();
    if (e) return e;
    struct CUstream_st *s = new_stream(current_device, flags, priority < -5 ? -5 : priority > 0 ? 0 : priority);
    if (!s) return fail(cudaErrorMemoryAllocation);
    *out = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithPriority(out, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    standin_api_enter("cudaStreamDestroy");
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        standin_violation("cudaStreamDestroy", "cuda_runtime_api.h:2190", "the default stream cannot be destroyed");
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (!standin_set_remove(&live_streams, h)) {
        standin_violation("cudaStreamDestroy", "cuda_runtime_api.h:2190", "stream %p is not live (destroyed twice?)",
                          (void *)h);
        return fail(cudaErrorInvalidResourceHandle);
    }
    /* CUDA lets queued work finish; the worker drains its queue before it exits. */
    cpu_stream_destroy(h->q);
    simt_forget_stream(h);
    h->magic = 0;
    free(h);
    return cudaSuccess;
}

static cudaError_t stream_status(struct CUstream_st *s, gpucore_status st)
{
    if (st == GPUCORE_OK) return cudaSuccess;
    char msg[1000];
    if (simt_take_stream_error(s, msg, sizeof msg))
        snprintf(launch_failure_text, sizeof launch_failure_text, "unspecified launch failure (%s)", msg);
    return fail(cudaErrorLaunchFailure);
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    standin_api_enter("cudaStreamSynchronize");
    struct CUstream_st *s = standin_stream("cudaStreamSynchronize", h);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    check_not_held("cudaStreamSynchronize", s, "a host synchronization (it returns before they start)");
    return stream_status(s, cpu_stream_synchronize(s->q));
}

cudaError_t cudaStreamQuery(cudaStream_t h)
{
    standin_api_enter("cudaStreamQuery");
    struct CUstream_st *s = standin_stream("cudaStreamQuery", h);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    return cpu_stream_query(s->q) == GPUCORE_OK ? cudaSuccess : query_not_ready();
}

cudaError_t cudaDeviceSynchronize(void)
{
    standin_api_enter("cudaDeviceSynchronize");
    sync_device_streams(current_device);
    return cudaSuccess;
}

typedef struct host_fn_args { cudaHostFn_t fn; void *arg; } host_fn_args;
static int host_fn_task(void *p)
{
    host_fn_args *a = p;
    in_host_fn = 1;
    a->fn(a->arg);
    in_host_fn = 0;
    return 0;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *arg)
{
    standin_api_enter("cudaLaunchHostFunc");
    standin_count("cudaLaunchHostFunc");
    struct CUstream_st *s = standin_stream("cudaLaunchHostFunc", h);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (!fn) return fail(cudaErrorInvalidValue);
    check_not_held("cudaLaunchHostFunc", s, "a host function");
    host_fn_args a = {fn, arg};
    if (standin_stream_enqueue(s, host_fn_task, &a, sizeof a)) return fail(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
    standin_api_enter("cudaEventCreateWithFlags");
    if (!out || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)))
        return fail(cudaErrorInvalidValue);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e || cpu_event_create(&e->e) != GPUCORE_OK) { free(e); return fail(cudaErrorMemoryAllocation); }
    e->magic = EVENT_MAGIC;
    e->device = current_device;
    e->flags = flags;
    standin_count(flags & cudaEventDisableTiming ? "event_created_untimed" : "event_created_timed");
    standin_set_add(&live_events, e);
    *out = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, cudaEventDefault); }

static struct CUevent_st *live_event(const char *api, cudaEvent_t h)
{
    if (!standin_set_has(&live_events, h)) {
        standin_violation(api, "cuda_runtime_api.h:2981", "event %p is not a live event (destroyed with "
                          "cudaEventDestroy, or never created)", (void *)h);
        return NULL;
    }
    return h;
}

cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    standin_api_enter("cudaEventDestroy");
    if (!standin_set_remove(&live_events, h)) {
        standin_violation("cudaEventDestroy", "cuda_runtime_api.h:2981", "event %p is not live (destroyed twice?)",
                          (void *)h);
        return fail(cudaErrorInvalidResourceHandle);
    }
    cpu_event_destroy(h->e); /* reference counted: a queued record still completes */
    h->magic = 0;
    free(h);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh)
{
    standin_api_enter("cudaEventRecord");
    struct CUevent_st *e = live_event("cudaEventRecord", h);
    struct CUstream_st *s = standin_stream("cudaEventRecord", sh);
    if (!e || !s) return fail(cudaErrorInvalidResourceHandle);
    if (e->device != s->device) {
        standin_violation("cudaEventRecord", "PG:stream-event", "event of device %d recorded on a stream of device "
                          "%d: \"cudaEventRecord() will fail if the input event and input stream are associated to "
                          "different devices\"", e->device, s->device);
        return fail(cudaErrorInvalidResourceHandle);
    }
    check_not_held("cudaEventRecord", s, "an event record (it completes before them)");
    e->recorded = 1;
    if (cpu_event_record(e->e, s->q) != GPUCORE_OK) return fail(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t sh, cudaEvent_t h, unsigned int flags)
{
    standin_api_enter("cudaStreamWaitEvent");
    struct CUevent_st *e = live_event("cudaStreamWaitEvent", h);
    struct CUstream_st *s = standin_stream("cudaStreamWaitEvent", sh);
    if (!e || !s) return fail(cudaErrorInvalidResourceHandle);
    if (flags & ~(unsigned)cudaEventWaitExternal) return fail(cudaErrorInvalidValue);
    if (cpu_stream_wait_event(s->q, e->e) != GPUCORE_OK) return fail(cudaErrorMemoryAllocation);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t h)
{
    standin_api_enter("cudaEventSynchronize");
    struct CUevent_st *e = live_event("cudaEventSynchronize", h);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    cpu_event_synchronize(e->e);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t h)
{
    standin_api_enter("cudaEventQuery");
    struct CUevent_st *e = live_event("cudaEventQuery", h);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    return cpu_event_query(e->e) == GPUCORE_OK ? cudaSuccess : query_not_ready();
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    standin_api_enter("cudaEventElapsedTime");
    struct CUevent_st *ea = live_event("cudaEventElapsedTime", a), *eb = live_event("cudaEventElapsedTime", b);
    if (!ea || !eb || !ms) return fail(cudaErrorInvalidResourceHandle);
    if ((ea->flags | eb->flags) & cudaEventDisableTiming) {
        standin_violation("cudaEventElapsedTime", "cuda_runtime_api.h:3005", "an event created with "
                          "cudaEventDisableTiming was timed");
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (!ea->recorded || !eb->recorded) return fail(cudaErrorInvalidResourceHandle);
    if (cpu_event_query(ea->e) || cpu_event_query(eb->e)) return fail(cudaErrorNotReady);
    if (cpu_event_elapsed_ms(ea->e, eb->e, ms) != GPUCORE_OK) return fail(cudaErrorNotReady);
    return cudaSuccess;
}

/* ---- copies ---- */

typedef struct copy_args { void *dst; const void *src; size_t bytes; } copy_args;
static int copy_task(void *p)
{
    copy_args *a = p;
    memcpy(a->dst, a->src, a->bytes);
    return 0;
}

/* Device or pinned ranges must fit their allocation; freed memory is an error; anything else is pageable host memory. */
static int check_copy_side(const char *what, const void *p, size_t bytes, int *pageable)
{
    standin_mem_info m = standin_mem_find(p);
    *pageable = m.kind == STANDIN_MEM_NONE;
    if (m.kind == STANDIN_MEM_NONE) return 1;
    if (m.kind == STANDIN_MEM_DEVICE) return standin_check_device_range("cudaMemcpyAsync", "cuda_runtime_api.h "
                                                                        "cudaMemcpyAsync", what, p, bytes);
    if (m.kind == STANDIN_MEM_PINNED && (const char *)p + bytes <= m.base + m.size) return 1;
    standin_violation("cudaMemcpyAsync", "cuda_runtime_api.h cudaMemcpyAsync", "%s %p (+%zu bytes) is %s", what, p, bytes,
                      m.kind == STANDIN_MEM_FREED ? "freed device memory" : "past the end of its pinned allocation");
    return 0;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t sh)
{
    standin_api_enter("cudaMemcpyAsync");
    struct CUstream_st *s = standin_stream("cudaMemcpyAsync", sh);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (kind != cudaMemcpyDefault) {
        standin_violation("cudaMemcpyAsync", "stand-in", "only cudaMemcpyDefault is modelled (got kind %d)", (int)kind);
        return fail(cudaErrorInvalidValue);
    }
    if (bytes == 0) return cudaSuccess;
    check_not_held("cudaMemcpyAsync", s, "a copy");
    int pd = 0, ps = 0;
    if (!check_copy_side("destination", dst, bytes, &pd) || !check_copy_side("source", src, bytes, &ps))
        return fail(cudaErrorInvalidValue);
    count_peer_copy(s->device, standin_mem_find(dst), standin_mem_find(src));
    copy_args a = {dst, src, bytes};
    if (standin_stream_enqueue(s, copy_task, &a, sizeof a)) return fail(cudaErrorMemoryAllocation);
    /* Pageable host memory: the call returns only once the host buffer has been read (H2D) or
     * written (D2H), as CUDA's staged copies do; pinned memory stays truly asynchronous. */
    if (pd || ps) cpu_stream_synchronize(s->q);
    return cudaSuccess;
}

/* ---- the SIMT layer's hooks: kernels are queued on our streams ---- */

SIMT_API int simt_stream_enqueue(void *stream, void *closure);
SIMT_API int simt_run_queued(void *closure);

static int grid_task(void *p) { return simt_run_queued(*(void **)p); }

int simt_stream_enqueue(void *stream, void *closure)
{
    standin_api_enter("<<<kernel launch>>>");
    struct CUstream_st *s = standin_stream("<<<kernel launch>>>", stream);
    if (!s) return 1;
    if (s->device != current_device)
        standin_violation("<<<kernel launch>>>", "PG:stream-event", "kernel launched on a stream of device %d while "
                          "device %d is current: \"A kernel launch will fail if it is issued to a stream that is not "
                          "associated to the current device\"", s->device, current_device);
    check_not_held("<<<kernel launch>>>", s, "a kernel launch");
    standin_count("kernel_launch");
    return standin_stream_enqueue(s, grid_task, &closure, sizeof closure);
}

/* cpu_stream.c (compiled into the module) reports through gpucore_set_error: forward it to libgpucore. */
#include <stdarg.h>
#include "backend/cuda/cuda_internal.h"
gpucore_status gpucore_set_error(gpucore_status status, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return cuda_host ? cuda_host->set_error(status, "%s", buf) : status;
}
