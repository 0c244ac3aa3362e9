/*
 * cuda_internal.h — shared by the CUDA backend module's files: its per-context
 * state, the plugin host (for errors and logs), and the cudaError_t mapping.
 */
#ifndef GPUCORE_CUDA_INTERNAL_H
#define GPUCORE_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include "backend/backend.h"

#define CUDA_HIDDEN __attribute__((visibility("hidden")))

typedef struct cuda_context {
    int device;
    int sm_count;
} cuda_context;

CUDA_HIDDEN extern const gpucore_plugin_host *cuda_host;

/* Turn a CUDA error into a status with a message naming the call. */
CUDA_HIDDEN gpucore_status cuda_status(cudaError_t err, const char *what);
#define CUDA_TRY(call, what)                                          \
    do {                                                              \
        cudaError_t cuda_try_err_ = (call);                           \
        if (cuda_try_err_ != cudaSuccess) return cuda_status(cuda_try_err_, what); \
    } while (0)

/* cuda_device.c */
CUDA_HIDDEN gpucore_status cuda_available(char *why, size_t len);
CUDA_HIDDEN gpucore_status cuda_device_count(int *count);
CUDA_HIDDEN gpucore_status cuda_device_properties(int index, gpucore_device_properties *p);
CUDA_HIDDEN gpucore_status cuda_device_processes(int index, int64_t *pids, int64_t *used, int max, int *count);
CUDA_HIDDEN gpucore_status cuda_can_access_peer(int a, int b, int *can);
CUDA_HIDDEN gpucore_status cuda_enable_peer_access(int device, int peer);
CUDA_HIDDEN gpucore_status cuda_component_version(const char *component, char *buf, size_t len);

/* cuda_matmul.c: cuBLASLt GEMM with cached plans; the fallback kernel where cuBLASLt has no algorithm */
CUDA_HIDDEN gpucore_status cuda_matmul(void *bctx, const gpucore_gemm_desc *desc, void *stream);


/* cuda_conv.c: convolution on cuDNN's graph API (builds with cuDNN only) */
CUDA_HIDDEN gpucore_status cuda_conv(void *bctx, const gpucore_conv_desc *desc, void *stream);
CUDA_HIDDEN gpucore_status cuda_conv_stats(void *bctx, gpucore_conv_stats *stats);

/* cuda_attention_cudnn.c: attention on cuDNN's SDPA graphs where cuDNN takes them, else the kernel */
CUDA_HIDDEN gpucore_status cuda_attention(void *bctx, const gpucore_attn_args *args, void *stream);

/* cuda_comm.c: collectives over NCCL with a watchdog (builds with NCCL only) */
CUDA_HIDDEN gpucore_status cuda_comm_unique_id(void *id);
CUDA_HIDDEN gpucore_status cuda_comm_init(void *bctx, const void *id, int rank, int size, double timeout_s,
                                          void **bcomm);
CUDA_HIDDEN gpucore_status cuda_comm_init_local(void *const *bctxs, int n, double timeout_s, void **bcomms);
CUDA_HIDDEN gpucore_status cuda_comm_enqueue(void *bcomm, const gpucore_comm_call *call, void *stream);
CUDA_HIDDEN gpucore_status cuda_comm_check(void *bcomm);
CUDA_HIDDEN void cuda_comm_abort(void *bcomm, const char *reason);
CUDA_HIDDEN void cuda_comm_destroy(void *bcomm);
CUDA_HIDDEN gpucore_status cuda_comm_group(int begin);
/* Inside a comm group on this thread, stream work that must follow the group's collectives (an event record
 * or host callback on a stream the group holds, a wait on an event so held: its stream is held from then on)
 * is held until the group ends.
 * Returns 1 if held (issued later), 0 if the caller issues it now. Defined with or without NCCL. */
enum { CUDA_DEFER_EVENT_RECORD, CUDA_DEFER_HOST_FN, CUDA_DEFER_WAIT_EVENT };
CUDA_HIDDEN int cuda_comm_group_defer(int kind, void *stream, void *event, gpucore_host_fn fn, void *arg);
/* INVALID_ARGUMENT (message naming `what`) when `stream` is held by the comm group open on this thread: a
 * kernel, copy or library call there would run before the group's collectives, a synchronize return before
 * them. OK otherwise. */
CUDA_HIDDEN gpucore_status cuda_comm_group_refuse(void *stream, const char *what);
/* 1 if the event's record is held by the comm group open on this thread. */
CUDA_HIDDEN int cuda_comm_group_event_held(void *event);

/* A query's answer (cudaEventQuery, cudaStreamQuery, cudaEventElapsedTime), passed through. cudaErrorNotReady
 * is "not actually an error" (driver_types.h) but the runtime does not promise that it is not kept as the
 * thread's last error; where it is, it is taken off, so the next launch check (cudaGetLastError) does not
 * report it for a good launch. An error of another kind pending before the query stays for its owner. */
static inline cudaError_t cuda_query_answer(cudaError_t e)
{
    if (e == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    return e;
}

#endif
