/*
 * reduce.cu — sum, mean, max, min, argmax and sum of squares over one axis of
 * a contiguous [outer, len, inner] tensor, deterministically.
 *
 * Rows (inner == 1) up to RED_WARP_MAX_LEN elements: one warp per row, 16-byte
 * vector loads where the rows are aligned. Longer
 * rows (inner == 1): each row is cut into fixed chunks of GPUCORE_RED_ROW_CHUNK
 * elements; a block reduces one chunk — threads stride the chunk with 16-byte
 * vector loads where the row is aligned, then a fixed warp-shuffle tree and a
 * shared-memory tree across warps. With one chunk per row the block writes the
 * result; otherwise it writes a partial and a second launch folds each row's
 * partials with the same block tree. Columns (inner > 1): one thread per output
 * column walks a chunk of GPUCORE_RED_COL_CHUNK rows (coalesced across the warp),
 * partials folded in chunk order by a second pass. No atomics: every sum is in
 * an order fixed by the shape, so reruns give identical bits. 64-bit indices;
 * grids from the SM count.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "reduce_math.h"

#define RED_THREADS 256

__device__ __forceinline__ gpucore_red_acc red_shfl_down(gpucore_red_acc a, int delta)
{
    gpucore_red_acc b;
    b.val = __shfl_down_sync(0xffffffffu, a.val, delta);
    int lo = __shfl_down_sync(0xffffffffu, (int)(uint32_t)a.idx, delta);
    int hi = __shfl_down_sync(0xffffffffu, (int)(uint32_t)((uint64_t)a.idx >> 32), delta);
    b.idx = (int64_t)(((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo);
    b.pad = 0;
    return b;
}

/* The block's fold of each thread's acc, in a fixed tree; valid in thread 0. */
__device__ gpucore_red_acc red_block(int op, gpucore_red_acc a)
{
    __shared__ gpucore_red_acc warp_acc[RED_THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int d = 16; d > 0; d /= 2) a = gpucore_red_combine(op, a, red_shfl_down(a, d));
    if (lane == 0) warp_acc[warp] = a;
    __syncthreads();
    if (warp == 0) {
        a = lane < (int)(blockDim.x / 32) ? warp_acc[lane] : gpucore_red_empty();
        for (int d = 16; d > 0; d /= 2) a = gpucore_red_combine(op, a, red_shfl_down(a, d));
    }
    __syncthreads(); /* warp_acc is reused by the next item of a grid-stride loop */
    return a;
}

__device__ __forceinline__ void red_store(const gpucore_reduce_args &p, int64_t o, gpucore_red_acc a)
{
    if (p.op == GPUCORE_RED_ARGMAX) ((int64_t *)p.out.data)[o] = a.idx;
    else {
        float v = p.op == GPUCORE_RED_MEAN ? a.val / (float)p.len : a.val;
        gpucore_store_from_f32((char *)p.out.data + o * p.out.elem_size, p.out.dtype, v);
    }
}

/* This thread's share of elements [l0, l1) of a row (t of n threads): with vec_ok (row start 16-byte
 * aligned and l0 a multiple of V) 16-byte vector loads over the whole vectors, then elements. */
template <int DT>
__device__ __forceinline__ gpucore_red_acc red_row_span(const gpucore_reduce_args &p, const char *rowp, int64_t l0,
                                                        int64_t l1, int vec_ok, int t, int n)
{
    const int V = gpucore_dt_size<DT>::vec;
    gpucore_red_acc a = gpucore_red_empty();
    int64_t l = l0;
    if (vec_ok) {
        const int64_t nvec = (l1 - l0) / V;
        for (int64_t v = t; v < nvec; v += n) {
            float x[V];
            gpucore_ldv<DT>(rowp, l0 + v * V, x);
#pragma unroll
            for (int k = 0; k < V; k++) a = gpucore_red_combine(p.op, a, gpucore_red_element(p.op, x[k], l0 + v * V + k));
        }
        l = l0 + nvec * V;
    }
    for (int64_t i = l + t; i < l1; i += n)
        a = gpucore_red_combine(p.op, a, gpucore_red_element(p.op, gpucore_ld<DT>(rowp, i), i));
    return a;
}

/* One block per (row, chunk) work item. */
template <int DT>
__global__ void red_rows_kernel(gpucore_reduce_args p, int64_t chunks, int vec_ok)
{
    const int es = gpucore_dt_size<DT>::es;
    for (int64_t w = blockIdx.x; w < p.outer * chunks; w += gridDim.x) {
        const int64_t row = w / chunks, c = w % chunks;
        const int64_t l0 = c * GPUCORE_RED_ROW_CHUNK;
        const int64_t l1 = l0 + GPUCORE_RED_ROW_CHUNK < p.len ? l0 + GPUCORE_RED_ROW_CHUNK : p.len;
        const char *rowp = (const char *)p.in.data + row * p.len * es;
        gpucore_red_acc a = red_row_span<DT>(p, rowp, l0, l1, vec_ok, (int)threadIdx.x, (int)blockDim.x);
        a = red_block(p.op, a);
        if (threadIdx.x == 0) {
            if (chunks == 1) red_store(p, row, a);
            else ((gpucore_red_acc *)p.workspace)[w] = a;
        }
    }
}

/* Short rows (len <= RED_WARP_MAX_LEN): one warp per row, lanes striding it (16-byte vector loads
 * when the rows are 16-byte aligned, as the block path), a shuffle fold, no shared memory and no
 * block barrier, so a [1M, 8] argmax does not park 224 idle threads and two __syncthreads per row. */
#define RED_WARP_MAX_LEN 1024
template <int DT>
__global__ void red_rows_warp_kernel(gpucore_reduce_args p, int vec_ok)
{
    const int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (int64_t row = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; row < p.outer; row += (int64_t)gridDim.x * wpb) {
        const char *rowp = (const char *)p.in.data + row * p.len * gpucore_dt_size<DT>::es;
        gpucore_red_acc a = red_row_span<DT>(p, rowp, 0, p.len, vec_ok, lane, 32);
        for (int d = 16; d > 0; d /= 2) a = gpucore_red_combine(p.op, a, red_shfl_down(a, d));
        if (lane == 0) red_store(p, row, a);
    }
}

/* Second pass for rows: one block folds a row's partials. */
__global__ void red_rows_finish_kernel(gpucore_reduce_args p, int64_t chunks)
{
    const gpucore_red_acc *part = (const gpucore_red_acc *)p.workspace;
    for (int64_t row = blockIdx.x; row < p.outer; row += gridDim.x) {
        gpucore_red_acc a = gpucore_red_empty();
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) a = gpucore_red_combine(p.op, a, part[row * chunks + c]);
        a = red_block(p.op, a);
        if (threadIdx.x == 0) red_store(p, row, a);
    }
}

/* Columns: one thread per (outer, chunk, column). */
template <int DT>
__global__ void red_cols_kernel(gpucore_reduce_args p, int64_t chunks)
{
    const int64_t total = p.outer * chunks * p.inner;
    for (int64_t w = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; w < total; w += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = w % p.inner, rest = w / p.inner, c = rest % chunks, o = rest / chunks;
        const int64_t l0 = c * GPUCORE_RED_COL_CHUNK;
        const int64_t l1 = l0 + GPUCORE_RED_COL_CHUNK < p.len ? l0 + GPUCORE_RED_COL_CHUNK : p.len;
        gpucore_red_acc a = gpucore_red_empty();
        for (int64_t l = l0; l < l1; l++)
            a = gpucore_red_combine(p.op, a, gpucore_red_element(p.op, gpucore_ld<DT>(p.in.data, (o * p.len + l) * p.inner + j), l));
        if (chunks == 1) red_store(p, o * p.inner + j, a);
        else ((gpucore_red_acc *)p.workspace)[w] = a;
    }
}

__global__ void red_cols_finish_kernel(gpucore_reduce_args p, int64_t chunks)
{
    const gpucore_red_acc *part = (const gpucore_red_acc *)p.workspace;
    for (int64_t w = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; w < p.outer * p.inner;
         w += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = w % p.inner, o = w / p.inner;
        gpucore_red_acc a = gpucore_red_empty();
        for (int64_t c = 0; c < chunks; c++) a = gpucore_red_combine(p.op, a, part[(o * chunks + c) * p.inner + j]);
        red_store(p, w, a);
    }
}

template <int DT>
static int red_launch(const gpucore_launch *l, const gpucore_reduce_args *p)
{
    const int64_t chunks = gpucore_reduce_chunks(p->len, p->inner);
    const int es = gpucore_dt_size<DT>::es;
    const int vec_ok = ((uintptr_t)p->in.data % 16) == 0 && (p->len * es) % 16 == 0;
    if (p->inner == 1 && p->len <= RED_WARP_MAX_LEN) {
        unsigned grid = gpucore_grid_for(p->outer * 32, RED_THREADS, l->sm_count);
        GPUCORE_LAUNCH(red_rows_warp_kernel<DT>, grid, RED_THREADS, 0, l->stream, *p, vec_ok);
        return GPUCORE_LAUNCH_STATUS();
    }
    if (p->inner == 1) {
        unsigned grid = gpucore_grid_for(p->outer * chunks * RED_THREADS, RED_THREADS, l->sm_count);
        GPUCORE_LAUNCH(red_rows_kernel<DT>, grid, RED_THREADS, 0, l->stream, *p, chunks, vec_ok);
        int err = GPUCORE_LAUNCH_STATUS();
        if (err || chunks == 1) return err;
        grid = gpucore_grid_for(p->outer * RED_THREADS, RED_THREADS, l->sm_count);
        GPUCORE_LAUNCH(red_rows_finish_kernel, grid, RED_THREADS, 0, l->stream, *p, chunks);
        return GPUCORE_LAUNCH_STATUS();
    }
    unsigned grid = gpucore_grid_for(p->outer * chunks * p->inner, RED_THREADS, l->sm_count);
    GPUCORE_LAUNCH(red_cols_kernel<DT>, grid, RED_THREADS, 0, l->stream, *p, chunks);
    int err = GPUCORE_LAUNCH_STATUS();
    if (err || chunks == 1) return err;
    grid = gpucore_grid_for(p->outer * p->inner, RED_THREADS, l->sm_count);
    GPUCORE_LAUNCH(red_cols_finish_kernel, grid, RED_THREADS, 0, l->stream, *p, chunks);
    return GPUCORE_LAUNCH_STATUS();
}

extern "C" int gpucore_kernel_reduce(const gpucore_launch *launch, const gpucore_reduce_args *args)
{
    if (args->outer * args->inner == 0 || args->len == 0) return 0;
    switch (args->in.dtype) {
    case GPUCORE_KDT_F32: return red_launch<GPUCORE_KDT_F32>(launch, args);
    case GPUCORE_KDT_F16: return red_launch<GPUCORE_KDT_F16>(launch, args);
    default: return red_launch<GPUCORE_KDT_BF16>(launch, args);
    }
}
