/*
 * dtype_access.h — load and store one element of any tensor dtype as f32/f64,
 * shared by the CPU backend, the SIMT emulation and the CUDA kernels so every
 * backend converts (and rounds) the same way.
 *
 * dtype codes are gpucore_dtype's values (repeated here as plain numbers so nvcc
 * does not need the public header).
 */
#ifndef GPUCORE_KERNELS_DTYPE_ACCESS_H
#define GPUCORE_KERNELS_DTYPE_ACCESS_H

#include <stdint.h>
#include "hd.h"
#include "numeric.h"

enum {
    GPUCORE_KDT_F32 = 0, GPUCORE_KDT_F64 = 1, GPUCORE_KDT_F16 = 2, GPUCORE_KDT_BF16 = 3,
    GPUCORE_KDT_I32 = 4, GPUCORE_KDT_I64 = 5, GPUCORE_KDT_U8 = 6
};

/* Store a float-typed value into element p of dtype dt (rounding to nearest even). */
GPUCORE_HD void gpucore_store_from_f32(void *p, int dt, float v)
{
    switch (dt) {
    case GPUCORE_KDT_F32: *(float *)p = v; break;
    case GPUCORE_KDT_F64: *(double *)p = (double)v; break;
    case GPUCORE_KDT_F16: *(uint16_t *)p = gpucore_f32_to_f16(v); break;
    case GPUCORE_KDT_BF16: *(uint16_t *)p = gpucore_f32_to_bf16(v); break;
    default: break;
    }
}

GPUCORE_HD float gpucore_load_as_f32(const void *p, int dt)
{
    switch (dt) {
    case GPUCORE_KDT_F32: return *(const float *)p;
    case GPUCORE_KDT_F64: return (float)*(const double *)p;
    case GPUCORE_KDT_F16: return gpucore_f16_to_f32(*(const uint16_t *)p);
    case GPUCORE_KDT_BF16: return gpucore_bf16_to_f32(*(const uint16_t *)p);
    case GPUCORE_KDT_I32: return (float)*(const int32_t *)p;
    case GPUCORE_KDT_I64: return (float)*(const int64_t *)p;
    case GPUCORE_KDT_U8: return (float)*(const uint8_t *)p;
    default: return 0.0f;
    }
}

/* Offset in elements of the element with row-major linear index `linear` in a strided view. */
GPUCORE_HD int64_t gpucore_strided_offset(int64_t linear, int ndim, const int64_t *shape,
                                          const int64_t *strides)
{
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t extent = shape[d];
        int64_t idx = linear % extent;
        linear /= extent;
        off += idx * strides[d];
    }
    return off;
}

#endif
