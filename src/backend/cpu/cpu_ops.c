/*
 * cpu_ops.c — the CPU backend's ops: strided copy, fill, random fill. Each op
 * validates nothing (the API layer did), copies its view into a task and runs
 * it on the stream's worker, parallel over elements with OpenMP when large. A
 * strided copy goes by rows of memcpy when both sides have a dense last dim, by
 * tiles when it transposes, else element by element.
 */
#include <string.h>
#include "cpu_internal.h"
#include "philox.h"

#define CPU_PARALLEL_THRESHOLD 32768

typedef struct strided_copy_args { gpucore_view dst, src; } strided_copy_args;

#define COPY_TILE 32 /* a tile of the transposing copy: 32 x 32 elements, 4 KiB of f32 */

/* One tile's loop with the element size fixed (plain loads and stores), in copy_transposed. */
#define COPY_TILE_LOOP(T)                                                                                    \
    for (int64_t i = i0; i < i1; i++)                                                                        \
        for (int64_t j = j0; j < j1; j++) ((T *)d)[db + i * dst_t + j] = ((const T *)s)[sb + i + j * src_l];

/* A copy that transposes: dst runs along its last dim l (stride 1) where src runs along another dim t
 * (stride 1), as x.t().contiguous() or a permute that moves the innermost dim. Element by element
 * either side is read or written a cache line per element (and, across a large tensor, a page per
 * element); in COPY_TILE x COPY_TILE tiles of the (t, l) plane both sides stay in L1. Returns 0 when
 * the views are not of that shape (the caller takes the general path). */
static int copy_transposed(const gpucore_view *dv, const gpucore_view *sv)
{
    const int nd = dv->ndim, l = nd - 1;
    if (nd < 2 || dv->strides[l] != 1 || sv->strides[l] == 1) return 0;
    int t = -1;
    for (int d = 0; d < l; d++)
        if (sv->strides[d] == 1 && sv->shape[d] > 1) t = d;
    if (t < 0) return 0;
    int64_t oshape[GPUCORE_VIEW_MAX_DIMS], ods[GPUCORE_VIEW_MAX_DIMS], oss[GPUCORE_VIEW_MAX_DIMS];
    int no = 0;
    for (int d = 0; d < l; d++)
        if (d != t) { oshape[no] = dv->shape[d]; ods[no] = dv->strides[d]; oss[no] = sv->strides[d]; no++; }
    int64_t outer = 1;
    for (int d = 0; d < no; d++) outer *= oshape[d];
    const int64_t nt = dv->shape[t], nl = dv->shape[l], dst_t = dv->strides[t], src_l = sv->strides[l];
    const int64_t tt = (nt + COPY_TILE - 1) / COPY_TILE, tl = (nl + COPY_TILE - 1) / COPY_TILE, es = dv->elem_size;
    char *d = dv->data;
    const char *s = sv->data;
    CPU_PARALLEL_FOR(dv->numel > CPU_PARALLEL_THRESHOLD, w, outer * tt * tl,
        const int64_t o = w / (tt * tl), i0 = (w / tl) % tt * COPY_TILE, j0 = w % tl * COPY_TILE;
        const int64_t i1 = i0 + COPY_TILE < nt ? i0 + COPY_TILE : nt, j1 = j0 + COPY_TILE < nl ? j0 + COPY_TILE : nl;
        const int64_t db = no ? gpucore_strided_offset(o, no, oshape, ods) : 0;
        const int64_t sb = no ? gpucore_strided_offset(o, no, oshape, oss) : 0;
        switch (es) { /* the element size fixed per loop, so each loop is plain loads and stores */
        case 4: COPY_TILE_LOOP(uint32_t) break;
        case 2: COPY_TILE_LOOP(uint16_t) break;
        case 8: COPY_TILE_LOOP(uint64_t) break;
        case 1: COPY_TILE_LOOP(uint8_t) break;
        default:
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++)
                    memcpy(d + (db + i * dst_t + j) * es, s + (sb + i + j * src_l) * es, (size_t)es);
        });
    return 1;
}
#undef COPY_TILE_LOOP

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
        CPU_PARALLEL_FOR(n > CPU_PARALLEL_THRESHOLD, r, rows,
            int64_t doff = gpucore_strided_offset(r * inner, nd, a->dst.shape, a->dst.strides);
            int64_t soff = gpucore_strided_offset(r * inner, nd, a->src.shape, a->src.strides);
            memcpy(d + doff * es, s + soff * es, (size_t)(inner * es)););
        return GPUCORE_OK;
    }
    if (n > 0 && copy_transposed(&a->dst, &a->src)) return GPUCORE_OK;
    CPU_PARALLEL_FOR(n > CPU_PARALLEL_THRESHOLD, i, n,
        int64_t doff = gpucore_strided_offset(i, a->dst.ndim, a->dst.shape, a->dst.strides);
        int64_t soff = gpucore_strided_offset(i, a->src.ndim, a->src.shape, a->src.strides);
        memcpy(d + doff * es, s + soff * es, (size_t)es););
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
    CPU_PARALLEL_FOR(n > CPU_PARALLEL_THRESHOLD, i, n,
        int64_t off = a->dst.contiguous ? i : gpucore_strided_offset(i, a->dst.ndim, a->dst.shape, a->dst.strides);
        memcpy(d + off * es, &a->bits, (size_t)es);); /* little-endian: the low bytes hold the value */
    return GPUCORE_OK;
}

gpucore_status cpu_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s)
{
    (void)bctx;
    fill_args a = {*dst, bits};
    return dst->numel <= 4096 ? cpu_stream_enqueue_small(s, fill_task, &a, sizeof a)
                                                : cpu_stream_enqueue(s, fill_task, &a, sizeof a);
}

typedef struct random_args { gpucore_view dst; gpucore_random_params rp; } random_args;

static gpucore_status random_task(void *p)
{
    random_args *a = p;
    const int64_t n = a->dst.numel, es = a->dst.elem_size;
    char *d = a->dst.data;
    CPU_PARALLEL_FOR(n > CPU_PARALLEL_THRESHOLD / 4, i, n,
        int64_t off = a->dst.contiguous ? i : gpucore_strided_offset(i, a->dst.ndim, a->dst.shape, a->dst.strides);
        gpucore_random_element(d + off * es, &a->rp, (uint64_t)i););
    return GPUCORE_OK;
}

gpucore_status cpu_random(void *bctx, const gpucore_view *dst, int dist, double a, double b, uint64_t seed,
                          uint64_t offset, void *s)
{
    (void)bctx;
    random_args args = {*dst, gpucore_random_params_make(dist, dst->dtype, a, b, seed, offset)};
    return cpu_stream_enqueue(s, random_task, &args, sizeof args);
}
