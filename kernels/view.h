/*
 * view.h — the strided tensor description that the API layer hands to backends
 * and kernel launchers: a data pointer, dtype, shape and strides (in elements).
 * Plain C so the vtable, the CPU backend, nvcc and the SIMT layer all share it.
 */
#ifndef GPUCORE_KERNELS_VIEW_H
#define GPUCORE_KERNELS_VIEW_H

#include <stdint.h>

#define GPUCORE_VIEW_MAX_DIMS 8

typedef struct gpucore_view {
    void *data;          /* address of element [0,...,0] */
    int32_t dtype;       /* gpucore_dtype */
    int32_t ndim;
    int64_t numel;
    int64_t shape[GPUCORE_VIEW_MAX_DIMS];
    int64_t strides[GPUCORE_VIEW_MAX_DIMS]; /* elements */
    int32_t contiguous;  /* 1 if strides are row-major dense */
    int32_t elem_size;   /* bytes */
} gpucore_view;

#endif
