/*
 * launch.h — one launch macro for every launcher in kernels/, so the same
 * launcher source drives <<<grid, block, smem, stream>>> under nvcc and the SIMT
 * emulation layer (tests/simt) when the kernels are compiled as C++ for CI.
 *
 *   GPUCORE_LAUNCH(kernel, grid, block, smem_bytes, stream, args...);
 *   int err = GPUCORE_LAUNCH_STATUS();   0 on success, else a cudaError_t value
 */
#ifndef GPUCORE_KERNELS_LAUNCH_H
#define GPUCORE_KERNELS_LAUNCH_H

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define GPUCORE_LAUNCH(kernel, grid, block, smem, stream, ...) \
    kernel<<<(grid), (block), (smem), (cudaStream_t)(stream)>>>(__VA_ARGS__)
#define GPUCORE_LAUNCH_STATUS() ((int)cudaGetLastError())
#elif defined(GPUCORE_SIMT)
#include "simt.h"
#define GPUCORE_LAUNCH(kernel, grid, block, smem, stream, ...) \
    simt_launch((grid), (block), (smem), (stream), kernel, __VA_ARGS__)
#define GPUCORE_LAUNCH_STATUS() simt_last_error()
#else
#error "kernels/*.cu are compiled by nvcc, or as C++ with -DGPUCORE_SIMT for the emulation layer"
#endif

#endif
