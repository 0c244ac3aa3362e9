/*
 * hd.h — one macro so per-element math compiles for the host and the device.
 *
 * GPUCORE_HD marks inline functions that both the C compiler (CPU backend, tests)
 * and nvcc (kernels) compile from the same source, so both backends compute the
 * same formula. Under nvcc it expands to __host__ __device__; under the SIMT
 * emulation layer and plain C it is a static inline function.
 */
#ifndef GPUCORE_KERNELS_HD_H
#define GPUCORE_KERNELS_HD_H

#if defined(__CUDACC__)
#define GPUCORE_HD static __host__ __device__ __forceinline__
#else
#define GPUCORE_HD static inline
#endif

#endif
