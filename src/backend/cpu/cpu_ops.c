/*
 * cpu_ops.c — the CPU backend's ops: strided copy, fill, random fill. Each op
 * validates nothing (the API layer did), copies its view into a task and runs
 * it on the stream's worker, parallel over elements with OpenMP when large.
 */
#include <string.h>
#include "cpu_internal.h"
#include "philox.h"

#define CPU_PARALLEL_THRESHOLD 32768

typedef struct strided_copy_args { gpucore_view dst, src; } strided_copy_args;

static gpucore_status strided_copy_task(void *p)
{
    strided_copy_args *a = p;
    gpucore_view *vs[2] = {&a->dst, &a->src};
    gpucore_views_coalesce(vs, 2); /* dense runs become one inner dim */
    const int64_t n = a->dst.numel, es = a->dst.elem_size;
    char *d = a->dst.data;
    const char *s = a->src.data;
    const int nd = a->dst.ndim;
    if (n > 0 && a->dst.strides[nd - 1] == 1 && a->src.strides[nd - 1] == 1) { /* rows of memcpy */
        const int64_t inner = a->dst.shape[nd - 1], rows = n / inner;
#pragma omp parallel for if (n > CPU_PARALLEL_THRESHOLD) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t doff = gpucore_strided_offset(r * inner, nd, a->dst.shape, a->dst.strides);
            int64_t soff = gpucore_strided_offset(r * inner, nd, a->src.shape, a->src.strides);
            memcpy(d + doff * es, s + soff * es, (size_t)(inner * es));
        }
        return GPUCORE_OK;
    }
#pragma omp parallel for if (n > CPU_PARALLEL_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t doff = gpucore_strided_offset(i, a->dst.ndim, a->dst.shape, a->dst.strides);
        int64_t soff = gpucore_strided_offset(i, a->src.ndim, a->src.shape, a->src.strides);
        memcpy(d + doff * es, s + soff * es, (size_t)es);
    }
    return GPUCORE_OK;
}

gpucore_status cpu_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s)
{
    (void)bctx;
    strided_copy_args a = {*dst, *src};
    return cpu_stream_enqueue(s, strided_copy_task, &a, sizeof a);
}

typedef struct fill_args { gpucore_view dst; uint64_t bits; } fill_args;

static gpucore_status fill_task(void *p)
{
    fill_args *a = p;
    const int64_t n = a->dst.numel, es = a->dst.elem_size;
    char *d = a->dst.data;
    if (a->dst.contiguous && es == 1) {
        memset(d, (int)(a->bits & 0xff), (size_t)n);
        return GPUCORE_OK;
    }
#pragma omp parallel for if (n > CPU_PARALLEL_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t off = a->dst.contiguous ? i : gpucore_strided_offset(i, a->dst.ndim, a->dst.shape, a->dst.strides);
        memcpy(d + off * es, &a->bits, (size_t)es); /* little-endian: the low bytes hold the value */
    }
    return GPUCORE_OK;
}

gpucore_status cpu_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s)
{
    (void)bctx;
    fill_args a = {*dst, bits};
    return cpu_stream_enqueue(s, fill_task, &a, sizeof a);
}

typedef struct random_args { gpucore_view dst; gpucore_random_params rp; } random_args;

static gpucore_status random_task(void *p)
{
    random_args *a = p;
    const int64_t n = a->dst.numel, es = a->dst.elem_size;
    char *d = a->dst.data;
#pragma omp parallel for if (n > CPU_PARALLEL_THRESHOLD / 4) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t off = a->dst.contiguous ? i : gpucore_strided_offset(i, a->dst.ndim, a->dst.shape, a->dst.strides);
        gpucore_random_element(d + off * es, &a->rp, (uint64_t)i);
    }
    return GPUCORE_OK;
}

gpucore_status cpu_random(void *bctx, const gpucore_view *dst, int dist, double a, double b, uint64_t seed,
                          uint64_t offset, void *s)
{
    (void)bctx;
    random_args args = {*dst, gpucore_random_params_make(dist, dst->dtype, a, b, seed, offset)};
    return cpu_stream_enqueue(s, random_task, &args, sizeof args);
}
