/*
 * cuda_backend.c — the CUDA backend module (libgpucore_cuda.so): its plugin
 * entry point and vtable, per-context state, raw memory, streams, events and
 * copies over the CUDA runtime. Device queries are in cuda_device.c, ops in
 * cuda_ops.c.
 */
#include <stdlib.h>
#include "gpucore_config.h"
#include "cuda_internal.h"
#include "backend/kernel_ops.h"
#include <nvtx3/nvToolsExt.h> /* header-only NVTX v3: no library to link; a no-op unless a tool (nsys) injects one */

const gpucore_plugin_host *cuda_host;

gpucore_status cuda_status(cudaError_t err, const char *what)
{
    cudaGetLastError(); /* clear the non-sticky error so the context stays usable */
    gpucore_status st = err == cudaErrorMemoryAllocation ? GPUCORE_ERR_OUT_OF_MEMORY : GPUCORE_ERR_BACKEND;
    return cuda_host->set_error(st, "%s failed: %s (%s)", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* kernel_ops.c hooks */
gpucore_status kops_error(int err, const char *what) { return cuda_status((cudaError_t)err, what); }

gpucore_status kops_launch_for(void *bctx, void *s, gpucore_launch *launch)
{
    gpucore_status held = cuda_comm_group_refuse(s, "a kernel launch");
    if (held) return held;
    cuda_context *c = bctx;
    launch->stream = s;
    launch->sm_count = c->sm_count;
    CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice");
    return GPUCORE_OK;
}

static gpucore_status use_device(void *bctx)
{
    CUDA_TRY(cudaSetDevice(((cuda_context *)bctx)->device), "cudaSetDevice");
    return GPUCORE_OK;
}
#define USE_DEVICE(bctx)                                \
    do {                                                \
        gpucore_status use_st_ = use_device(bctx);      \
        if (use_st_) return use_st_;                    \
    } while (0)

static gpucore_status cuda_backend_enable_peer_access(void *bctx, int peer)
{
    return cuda_enable_peer_access(((cuda_context *)bctx)->device, peer);
}

static gpucore_status cuda_context_init(int index, void **bctx)
{
    cuda_context *c = calloc(1, sizeof *c);
    if (!c) return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "context_create: out of host memory");
    c->device = index;
    cudaError_t err = cudaSetDevice(index);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, index);
    if (err == cudaSuccess) err = cudaFree(NULL); /* create the primary context now, not inside the first op */
    if (err != cudaSuccess) {
        free(c);
        return cuda_status(err, "context_create on the CUDA device");
    }
    *bctx = c;
    return GPUCORE_OK;
}

static void cuda_context_fini(void *bctx) { free(bctx); }

static gpucore_status cuda_raw_alloc(void *bctx, size_t bytes, void **ptr)
{
    USE_DEVICE(bctx);
    cudaError_t err = cudaMalloc(ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        *ptr = NULL;
        return GPUCORE_ERR_OUT_OF_MEMORY; /* the caller writes the message with the numbers */
    }
    CUDA_TRY(err, "cudaMalloc");
    return GPUCORE_OK;
}

static void cuda_raw_free(void *bctx, void *ptr)
{
    if (use_device(bctx) == GPUCORE_OK) cudaFree(ptr);
    cudaGetLastError();
}

/* Page-locked, portable (usable with every device) host memory for async copies. */
static gpucore_status cuda_host_alloc(void *bctx, size_t bytes, void **ptr)
{
    USE_DEVICE(bctx);
    cudaError_t err = cudaHostAlloc(ptr, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        *ptr = NULL;
        return GPUCORE_ERR_OUT_OF_MEMORY; /* the caller writes the message with the numbers */
    }
    CUDA_TRY(err, "cudaHostAlloc");
    return GPUCORE_OK;
}

static void cuda_host_free(void *bctx, void *ptr)
{
    (void)bctx;
    cudaFreeHost(ptr);
    cudaGetLastError();
}

static gpucore_status cuda_stream_priority_range(void *bctx, int *least, int *greatest)
{
    USE_DEVICE(bctx);
    CUDA_TRY(cudaDeviceGetStreamPriorityRange(least, greatest), "cudaDeviceGetStreamPriorityRange");
    return GPUCORE_OK;
}

static gpucore_status cuda_mem_info(void *bctx, int64_t *free_bytes, int64_t *total_bytes)
{
    USE_DEVICE(bctx);
    size_t f = 0, t = 0;
    CUDA_TRY(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
    return GPUCORE_OK;
}

/* ---- streams and events ---- */

static gpucore_status cuda_stream_create(void *bctx, int priority, void **s)
{
    USE_DEVICE(bctx);
    int least = 0, greatest = 0;
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (priority > least) priority = least;
    if (priority < greatest) priority = greatest;
    CUDA_TRY(cudaStreamCreateWithPriority((cudaStream_t *)s, cudaStreamNonBlocking, priority),
             "cudaStreamCreateWithPriority");
    return GPUCORE_OK;
}

static void cuda_stream_destroy(void *bctx, void *s)
{
    (void)bctx;
    cudaStreamDestroy((cudaStream_t)s);
    cudaGetLastError();
}

static gpucore_status cuda_stream_synchronize(void *bctx, void *s)
{
    (void)bctx;
    gpucore_status held = cuda_comm_group_refuse(s, "stream_synchronize");
    if (held) return held;
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)s), "stream_synchronize (an earlier asynchronous op may have failed)");
    return GPUCORE_OK;
}

static gpucore_status cuda_stream_query(void *bctx, void *s)
{
    (void)bctx;
    gpucore_status held = cuda_comm_group_refuse(s, "stream_query");
    if (held) return held;
    cudaError_t err = cuda_query_answer(cudaStreamQuery((cudaStream_t)s));
    if (err == cudaErrorNotReady) return GPUCORE_ERR_NOT_READY;
    CUDA_TRY(err, "cudaStreamQuery");
    return GPUCORE_OK;
}

static gpucore_status cuda_host_callback(void *bctx, void *s, gpucore_host_fn fn, void *arg)
{
    (void)bctx;
    if (cuda_comm_group_defer(CUDA_DEFER_HOST_FN, s, NULL, fn, arg)) return GPUCORE_OK; /* after the comm group */
    CUDA_TRY(cudaLaunchHostFunc((cudaStream_t)s, fn, arg), "cudaLaunchHostFunc");
    return GPUCORE_OK;
}

static gpucore_status cuda_event_create(void *bctx, void **e)
{
    USE_DEVICE(bctx);
    CUDA_TRY(cudaEventCreate((cudaEvent_t *)e), "cudaEventCreate");
    return GPUCORE_OK;
}

/* Allocator, DDP and comm events order work and are never timed. */
static gpucore_status cuda_event_create_untimed(void *bctx, void **e)
{
    USE_DEVICE(bctx);
    CUDA_TRY(cudaEventCreateWithFlags((cudaEvent_t *)e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return GPUCORE_OK;
}

static void cuda_event_destroy(void *bctx, void *e)
{
    (void)bctx;
    cudaEventDestroy((cudaEvent_t)e);
    cudaGetLastError();
}

static gpucore_status cuda_event_record(void *bctx, void *e, void *s)
{
    USE_DEVICE(bctx);
    if (cuda_comm_group_defer(CUDA_DEFER_EVENT_RECORD, s, e, NULL, NULL)) return GPUCORE_OK; /* after the comm group */
    CUDA_TRY(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
    return GPUCORE_OK;
}

static gpucore_status cuda_stream_wait_event(void *bctx, void *s, void *e)
{
    USE_DEVICE(bctx);
    if (cuda_comm_group_defer(CUDA_DEFER_WAIT_EVENT, s, e, NULL, NULL)) return GPUCORE_OK; /* after the comm group */
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
    return GPUCORE_OK;
}

/* An event whose record a comm group holds would read as complete (or as its previous record). */
static gpucore_status held_event(void *e, const char *what)
{
    if (!cuda_comm_group_event_held(e)) return GPUCORE_OK;
    return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the event was recorded after a collective of the "
                                "comm group open on this thread, and NCCL starts them only at ncclGroupEnd "
                                "(nccl.h:555); ask after gpucore_comm_group_end", what);
}

static gpucore_status cuda_event_synchronize(void *bctx, void *e)
{
    (void)bctx;
    gpucore_status held = held_event(e, "event_synchronize");
    if (held) return held;
    CUDA_TRY(cudaEventSynchronize((cudaEvent_t)e), "cudaEventSynchronize");
    return GPUCORE_OK;
}

static gpucore_status cuda_event_query(void *bctx, void *e)
{
    (void)bctx;
    gpucore_status held = held_event(e, "event_query");
    if (held) return held;
    cudaError_t err = cuda_query_answer(cudaEventQuery((cudaEvent_t)e));
    if (err == cudaErrorNotReady) return GPUCORE_ERR_NOT_READY;
    CUDA_TRY(err, "cudaEventQuery");
    return GPUCORE_OK;
}

static gpucore_status cuda_event_elapsed_ms(void *bctx, void *a, void *b, float *ms)
{
    (void)bctx;
    cudaError_t err = cuda_query_answer(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
    if (err == cudaErrorNotReady)
        return cuda_host->set_error(GPUCORE_ERR_NOT_READY, "event_elapsed_ms: both events must be completed first");
    CUDA_TRY(err, "cudaEventElapsedTime");
    return GPUCORE_OK;
}

/* ---- profiling: NVTX ranges on the calling thread (GPUCORE_NVTX=1, src/core/profile.c) ---- */

static void cuda_range_push(const char *name) { nvtxRangePushA(name); }
static void cuda_range_pop(void) { nvtxRangePop(); }

/* ---- copies ---- */

static gpucore_status cuda_copy(void *bctx, void *dst, const void *src, size_t bytes, void *s)
{
    gpucore_status held = cuda_comm_group_refuse(s, "a copy");
    if (held) return held;
    USE_DEVICE(bctx);
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)s), "cudaMemcpyAsync");
    return GPUCORE_OK;
}

/* cuBLASLt and cuDNN calls on a stream a comm group holds would run before its collectives (the kernel
 * fallbacks are refused in kops_launch_for). */
static gpucore_status cuda_matmul_checked(void *bctx, const gpucore_gemm_desc *desc, void *stream)
{
    gpucore_status held = cuda_comm_group_refuse(stream, "matmul");
    return held ? held : cuda_matmul(bctx, desc, stream);
}

static gpucore_status cuda_attention_checked(void *bctx, const gpucore_attn_args *args, void *stream)
{
    gpucore_status held = cuda_comm_group_refuse(stream, "attention");
    return held ? held : cuda_attention(bctx, args, stream);
}

#if GPUCORE_HAVE_CUDNN
static gpucore_status cuda_conv_checked(void *bctx, const gpucore_conv_desc *desc, void *stream)
{
    gpucore_status held = cuda_comm_group_refuse(stream, "conv");
    return held ? held : cuda_conv(bctx, desc, stream);
}
#endif

static const gpucore_backend cuda_backend_table = {
    .abi = GPUCORE_BACKEND_ABI,
    .name = "cuda",
    .type = GPUCORE_DEVICE_CUDA,
    .available = cuda_available,
    .device_count = cuda_device_count,
    .device_properties = cuda_device_properties,
    .device_processes = cuda_device_processes,
    .can_access_peer = cuda_can_access_peer,
    .enable_peer_access = cuda_backend_enable_peer_access,
    .component_version = cuda_component_version,
    .context_init = cuda_context_init,
    .context_fini = cuda_context_fini,
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .mem_info = cuda_mem_info,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .host_callback = cuda_host_callback,
    .event_create = cuda_event_create,
    .event_create_untimed = cuda_event_create_untimed,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .copy_h2d = cuda_copy,
    .copy_d2h = cuda_copy,
    .copy_d2d = cuda_copy,
    .copy_strided = kops_copy_strided,
    .fill = kops_fill,
    .random = kops_random,
    .matmul = cuda_matmul_checked,
    .elementwise = kops_elementwise,
    .reduce = kops_reduce,
    .rows = kops_rows,
    .attention = cuda_attention_checked,
    .transformer = kops_transformer,
    .quant = kops_quant,
    .quant_matmul = kops_quant_matmul,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream_priority_range = cuda_stream_priority_range,
    .optim_step = kops_optim_step,
    .amp_unscale = kops_amp_unscale,
    .amp_update = kops_amp_update,
    .clip_grad_norm = kops_clip_grad_norm,
#if GPUCORE_HAVE_NCCL
    .comm_unique_id = cuda_comm_unique_id,
    .comm_init = cuda_comm_init,
    .comm_init_local = cuda_comm_init_local,
    .comm_enqueue = cuda_comm_enqueue,
    .comm_check = cuda_comm_check,
    .comm_abort = cuda_comm_abort,
    .comm_destroy = cuda_comm_destroy,
    .comm_group = cuda_comm_group,
#endif
#if GPUCORE_HAVE_CUDNN
    .conv = cuda_conv_checked,
    .conv_stats = cuda_conv_stats,
#endif
    .range_push = cuda_range_push,
    .range_pop = cuda_range_pop,
};

__attribute__((visibility("default"))) gpucore_status gpucore_backend_plugin_entry(const gpucore_plugin_host *host,
                                                                                  const gpucore_backend **out)
{
    if (!host || !out || host->abi != GPUCORE_BACKEND_ABI) return GPUCORE_ERR_INVALID_ARGUMENT;
    cuda_host = host;
    *out = &cuda_backend_table;
    return GPUCORE_OK;
}
