/*
 * dtype_access.h — load and store one element of any tensor dtype as f32/f64,
 * shared by the CPU backend, the SIMT emulation and the CUDA kernels so every
 * backend converts (and rounds) the same way.
 *
 * dtype codes are gpucore_dtype's values, generated from op_tables.h's dtype
 * list (src/ops/op_names.c asserts they equal the public enum), so nvcc does not
 * need the public header.
 *
 * Kernels (C++: CUDA and the SIMT emulation) load and store through the
 * templates at the end, gpucore_dt<DT>: one definition of the f32/f16/bf16
 * element access and of the 16-byte vector access for every kernel file.
 */
#ifndef GPUCORE_KERNELS_DTYPE_ACCESS_H
#define GPUCORE_KERNELS_DTYPE_ACCESS_H

#include <stdint.h>
#include "hd.h"
#include "numeric.h"
#include "op_tables.h"

enum {
#define GPUCORE_KDT_ENUM_(N, name, bytes) GPUCORE_KDT_##N,
    GPUCORE_DTYPE_TABLE(GPUCORE_KDT_ENUM_)
#undef GPUCORE_KDT_ENUM_
    GPUCORE_KDT_COUNT
};

/* Bytes per element of dtype dt (0 for an unknown code). */
GPUCORE_HD int gpucore_kdt_size(int dt)
{
    switch (dt) {
#define GPUCORE_KDT_SIZE_(N, name, bytes) case GPUCORE_KDT_##N: return bytes;
    GPUCORE_DTYPE_TABLE(GPUCORE_KDT_SIZE_)
#undef GPUCORE_KDT_SIZE_
    default: return 0;
    }
}

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

#if defined(__cplusplus) && (defined(__CUDACC__) || defined(GPUCORE_SIMT))
#include "launch.h" /* uint4: CUDA's, or the SIMT layer's */
/* Unroll in device code only (these functions are host-device; the host pass would warn). */
#if defined(__CUDA_ARCH__)
#define GPUCORE_DEVICE_UNROLL _Pragma("unroll")
#else
#define GPUCORE_DEVICE_UNROLL
#endif
/* gpucore_dt<DT>: storage type T, element size es, elements per 16-byte vector
 * vec, and the f32 conversions (round to nearest even on store) of the kernel
 * float dtypes. */
template <int DT> struct gpucore_dt;
template <> struct gpucore_dt<GPUCORE_KDT_F32> {
    typedef float T;
    GPUCORE_HD float load(T x) { return x; }
    GPUCORE_HD T store(float v) { return v; }
};
template <> struct gpucore_dt<GPUCORE_KDT_F16> {
    typedef uint16_t T;
    GPUCORE_HD float load(T x) { return gpucore_f16_to_f32(x); }
    GPUCORE_HD T store(float v) { return gpucore_f32_to_f16(v); }
};
template <> struct gpucore_dt<GPUCORE_KDT_BF16> {
    typedef uint16_t T;
    GPUCORE_HD float load(T x) { return gpucore_bf16_to_f32(x); }
    GPUCORE_HD T store(float v) { return gpucore_f32_to_bf16(v); }
};
template <int DT> struct gpucore_dt_size {
    static const int es = (int)sizeof(typename gpucore_dt<DT>::T);
    static const int vec = 16 / es; /* elements per 16-byte access */
};

/* Element i of a DT array p, as f32 / stored from f32. */
template <int DT> GPUCORE_HD float gpucore_ld(const void *p, int64_t i)
{
    return gpucore_dt<DT>::load(((const typename gpucore_dt<DT>::T *)p)[i]);
}
template <int DT> GPUCORE_HD void gpucore_st(void *p, int64_t i, float v)
{
    ((typename gpucore_dt<DT>::T *)p)[i] = gpucore_dt<DT>::store(v);
}

/* One 16-byte vector of DT elements (vec of them). */
template <int DT> union gpucore_vec16 {
    uint4 u;
    typename gpucore_dt<DT>::T t[gpucore_dt_size<DT>::vec];
};

/* The vec elements starting at element i (p + i elements 16-byte aligned), as f32. */
template <int DT> GPUCORE_HD void gpucore_ldv(const void *p, int64_t i, float *v)
{
    gpucore_vec16<DT> r;
    r.u = *(const uint4 *)((const char *)p + i * gpucore_dt_size<DT>::es);
    GPUCORE_DEVICE_UNROLL
    for (int k = 0; k < gpucore_dt_size<DT>::vec; k++) v[k] = gpucore_dt<DT>::load(r.t[k]);
}
template <int DT> GPUCORE_HD void gpucore_stv(void *p, int64_t i, const float *v)
{
    gpucore_vec16<DT> r;
    GPUCORE_DEVICE_UNROLL
    for (int k = 0; k < gpucore_dt_size<DT>::vec; k++) r.t[k] = gpucore_dt<DT>::store(v[k]);
    *(uint4 *)((char *)p + i * gpucore_dt_size<DT>::es) = r.u;
}
#endif

#endif
