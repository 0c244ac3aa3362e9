/*
 * cuda_runtime.h for the SIMT test build (tests/simt/cuda_shim is on its include
 * path only): the few runtime calls a launcher in kernels/ may make, mapped onto
 * the layer. Kernel code needs nothing from here: simt.h has the dialect.
 */
#ifndef GPUCORE_SIMT_CUDA_RUNTIME_SHIM_H
#define GPUCORE_SIMT_CUDA_RUNTIME_SHIM_H

#include "simt.h"

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = SIMT_ERR_INVALID_VALUE,
    cudaErrorMemoryAllocation = SIMT_ERR_MEMORY_ALLOCATION,
    cudaErrorInvalidConfiguration = SIMT_ERR_INVALID_CONFIGURATION,
    cudaErrorLaunchFailure = SIMT_ERR_LAUNCH_FAILURE,
    cudaErrorNotSupported = SIMT_ERR_NOT_SUPPORTED
};
typedef struct CUstream_st *cudaStream_t;
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9
};

static inline cudaError_t cudaGetLastError(void) { return simt_last_error(); }
static inline const char *cudaGetErrorString(cudaError_t err)
{
    return err == cudaSuccess ? "no error" : simt_last_error_message();
}
template <typename... P>
static inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), enum cudaFuncAttribute attr, int value)
{
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) return simt_set_max_dynamic_smem(kernel, value);
    return cudaSuccess;
}

#endif
