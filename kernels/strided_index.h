/*
 * strided_index.h — the element offsets of a linear (row-major) index in up to
 * three same-shape strided views, without integer division in the kernels.
 *
 * The launcher builds a gpucore_index_map on the host (gpucore_index_map_init):
 * the views' dims are merged where every view allows it (gpucore_views_coalesce,
 * view.h), and each remaining divisor gets a multiply-high "magic number"
 * (round-up method: with s = ceil(log2 d) and M = ceil(2^(N+s) / d) = 2^N + m,
 * floor(n / d) = floor(n * M / 2^(N+s)) for every N-bit n, computed as
 * (t + ((n - t) >> 1)) >> (s - 1) with t = mulhi(n, m), which never overflows).
 * When the element count and every view's offsets fit in 31 bits the map is
 * "narrow" and kernels use 32-bit math (gpucore_index_offsets32); otherwise
 * 64-bit (gpucore_index_offsets64, one 64x64 multiply-high per dim).
 */
#ifndef GPUCORE_KERNELS_STRIDED_INDEX_H
#define GPUCORE_KERNELS_STRIDED_INDEX_H

#include <stdint.h>
#include <string.h>
#include "hd.h"
#include "view.h"

#define GPUCORE_INDEX_MAX_VIEWS 3

/* Device code unrolls the dim loop over the fixed maximum, so every access to the
 * map (a kernel parameter) has a constant index and stays in parameter space. */
#if defined(__CUDA_ARCH__)
#define GPUCORE_INDEX_UNROLL _Pragma("unroll")
#else
#define GPUCORE_INDEX_UNROLL
#endif

/* floor(n / d) by multiply-high, for a divisor d >= 2 (d = 1 never needs a divide). */
typedef struct gpucore_fastdiv {
    uint64_t d;   /* the divisor */
    uint64_t m64; /* low 64 bits of ceil(2^(64+s) / d) */
    uint32_t m32; /* low 32 bits of ceil(2^(32+s) / d); valid when d < 2^32 */
    uint32_t s;   /* ceil(log2 d), >= 1 */
} gpucore_fastdiv;

typedef struct gpucore_index_map {
    int32_t ndim;   /* merged dims without extent-1 dims; 0 for a single element */
    int32_t narrow; /* 1: element count and all offsets fit int32: use gpucore_index_offsets32 */
    gpucore_fastdiv div[GPUCORE_VIEW_MAX_DIMS];  /* div[d].d = merged extent of dim d (div[0] unused) */
    int64_t strides[GPUCORE_INDEX_MAX_VIEWS][GPUCORE_VIEW_MAX_DIMS]; /* elements; 0 for absent views */
} gpucore_index_map;

/* Host: the magic numbers of divisor d >= 2. */
static inline gpucore_fastdiv gpucore_fastdiv_make(uint64_t d)
{
    gpucore_fastdiv f;
    uint32_t s = 0;
    while (s < 64 && ((uint64_t)1 << s) < d) s++;
    f.d = d;
    f.s = s;
    /* 2^N * (2^s - d) / d < 2^N because 2^(s-1) < d; + 1 rounds up (d not a power of two) or
     * makes the error term 2^N / d <= 2^s (power of two): both within the round-up bound. */
    unsigned __int128 p = (((unsigned __int128)1 << s) - d) << 64;
    f.m64 = (uint64_t)(p / d) + 1u;
    f.m32 = d < ((uint64_t)1 << 32) ? (uint32_t)((((((uint64_t)1 << s) - d)) << 32) / d + 1u) : 0u;
    return f;
}

GPUCORE_HD uint32_t gpucore_mulhi32(uint32_t a, uint32_t b)
{
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

GPUCORE_HD uint64_t gpucore_mulhi64(uint64_t a, uint64_t b)
{
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#endif
}

/* floor(n / f.d) for any 32-bit n (f.d < 2^32). */
GPUCORE_HD uint32_t gpucore_fastdiv32(uint32_t n, const gpucore_fastdiv *f)
{
    uint32_t t = gpucore_mulhi32(n, f->m32);
    return (t + ((n - t) >> 1)) >> (f->s - 1u);
}

/* floor(n / f.d) for any 64-bit n. */
GPUCORE_HD uint64_t gpucore_fastdiv64(uint64_t n, const gpucore_fastdiv *f)
{
    uint64_t t = gpucore_mulhi64(n, f->m64);
    return (t + ((n - t) >> 1)) >> (f->s - 1u);
}

/* Host: the map of views v[0..nv) (same shape; nv <= GPUCORE_INDEX_MAX_VIEWS). */
static inline void gpucore_index_map_init(gpucore_index_map *map, const gpucore_view *const *v, int nv)
{
    gpucore_view c[GPUCORE_INDEX_MAX_VIEWS];
    gpucore_view *cp[GPUCORE_INDEX_MAX_VIEWS];
    for (int k = 0; k < nv; k++) { c[k] = *v[k]; cp[k] = &c[k]; }
    gpucore_views_coalesce(cp, nv);
    memset(map, 0, sizeof *map);
    int nd = 0;
    int64_t span[GPUCORE_INDEX_MAX_VIEWS] = {0, 0, 0}; /* sum over dims of (extent - 1) * |stride| */
    for (int d = 0; d < c[0].ndim; d++) {
        if (c[0].shape[d] == 1) continue;
        map->div[nd] = gpucore_fastdiv_make((uint64_t)c[0].shape[d]);
        for (int k = 0; k < nv; k++) {
            int64_t st = c[k].strides[d];
            map->strides[k][nd] = st;
            span[k] += (c[0].shape[d] - 1) * (st < 0 ? -st : st);
        }
        nd++;
    }
    map->ndim = nd;
    int narrow = c[0].numel <= INT32_MAX;
    for (int k = 0; k < nv; k++) narrow = narrow && span[k] <= INT32_MAX;
    map->narrow = narrow;
}

/* Offsets (elements) in views 0..nv-1 of linear index i; map->narrow must be 1.
 * Kernels pass a constant nv, so after inlining the per-view loops unroll. */
GPUCORE_HD void gpucore_index_offsets32(const gpucore_index_map *map, int nv, int64_t i, int64_t *off)
{
    uint32_t n = (uint32_t)i;
    int32_t o[GPUCORE_INDEX_MAX_VIEWS] = {0, 0, 0};
    GPUCORE_INDEX_UNROLL
    for (int d = GPUCORE_VIEW_MAX_DIMS - 1; d > 0; d--) {
        if (d >= map->ndim) continue;
        uint32_t q = gpucore_fastdiv32(n, &map->div[d]);
        int32_t r = (int32_t)(n - q * (uint32_t)map->div[d].d);
        for (int k = 0; k < nv; k++) o[k] += r * (int32_t)map->strides[k][d];
        n = q;
    }
    for (int k = 0; k < nv; k++) off[k] = map->ndim ? o[k] + (int32_t)n * (int32_t)map->strides[k][0] : 0;
}

/* The same in 64-bit math, for any map. */
GPUCORE_HD void gpucore_index_offsets64(const gpucore_index_map *map, int nv, int64_t i, int64_t *off)
{
    uint64_t n = (uint64_t)i;
    for (int k = 0; k < nv; k++) off[k] = 0;
    GPUCORE_INDEX_UNROLL
    for (int d = GPUCORE_VIEW_MAX_DIMS - 1; d > 0; d--) {
        if (d >= map->ndim) continue;
        uint64_t q = gpucore_fastdiv64(n, &map->div[d]);
        int64_t r = (int64_t)(n - q * map->div[d].d);
        for (int k = 0; k < nv; k++) off[k] += r * map->strides[k][d];
        n = q;
    }
    for (int k = 0; k < nv; k++) off[k] += map->ndim ? (int64_t)n * map->strides[k][0] : 0;
}

#endif
