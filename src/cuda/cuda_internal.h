/*
 * cuda_internal.h — shared by the CUDA backend module's files: its per-context
 * state, the plugin host (for errors and logs), and the cudaError_t mapping.
 */
#ifndef GPUCORE_CUDA_INTERNAL_H
#define GPUCORE_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include "../backend.h"

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
CUDA_HIDDEN gpucore_status cuda_component_version(const char *component, char *buf, size_t len);

/* cuda_matmul.c: cuBLASLt GEMM with cached plans; the fallback kernel where cuBLASLt has no algorithm */
CUDA_HIDDEN gpucore_status cuda_matmul(void *bctx, const gpucore_gemm_desc *desc, void *stream);


#endif
