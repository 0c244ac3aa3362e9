/*
 * embedding.cu — embedding gather (out[i, :] = table[idx[i], :]) and its
 * deterministic backward (dtable[v, :] = Σ_{i: idx[i] == v} dout[i, :]).
 *
 * Forward: a grid-stride copy in 16-byte units when the row length and
 * pointers allow (element units otherwise); an out-of-range index writes NaN.
 *
 * Backward, without float atomics and without a sort: each thread owns one
 * column j of one band [v0, v1) of table rows. A block stages the index list
 * through shared memory tile by tile (coalesced, read once per block) and each
 * thread adds dout[i, j] into its accumulator for row idx[i] whenever idx[i] is
 * in its band — in increasing i, so every (v, j) is summed in the same order
 * whatever the grid (the bits depend on nothing but the data; the CPU backend
 * sums in the same order and agrees bit for bit). Reads of dout are coalesced
 * across the block's columns and happen once per element in total. f16/bf16
 * tables accumulate in an f32 scratch table and round once at the end.
 * Cost: every block scans the whole index list (cheap next to the D-wide rows).
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "rows_math.h"

#define EMB_THREADS 256
#define EMB_TILE 1024

__global__ void embed_fwd_kernel(gpucore_rows_args p, int es, int units_per_row, int unit)
{
    const int64_t total = p.rows * units_per_row;
    for (int64_t w = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; w < total; w += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = w / units_per_row, u = w % units_per_row;
        const int64_t t = gpucore_rows_target(p.targets, p.target_dtype, i);
        char *dst = (char *)p.y + (i * p.cols) * es + u * unit;
        if (t >= 0 && t < p.vocab) {
            const char *src = (const char *)p.x + (t * p.cols) * es + u * unit;
            if (unit == 16) *(uint4 *)dst = *(const uint4 *)src;
            else if (unit == 4) *(uint32_t *)dst = *(const uint32_t *)src;
            else *(uint16_t *)dst = *(const uint16_t *)src;
        } else {
            for (int k = 0; k < unit; k += es) gpucore_store_from_f32(dst + k, p.dtype, NAN);
        }
    }
}

__global__ void __launch_bounds__(EMB_THREADS) embed_bwd_kernel(gpucore_rows_args p, int64_t band, int64_t col_tiles)
{
    __shared__ int64_t tile[EMB_TILE];
    const int64_t cols = p.cols;
    const int es = p.dtype == GPUCORE_KDT_F32 ? 4 : 2;
    float *acc = p.dtype == GPUCORE_KDT_F32 ? (float *)p.dx : (float *)p.workspace;
    const int64_t bands = (p.vocab + band - 1) / band;
    for (int64_t b = blockIdx.x; b < bands * col_tiles; b += gridDim.x) {
        const int64_t v0 = (b / col_tiles) * band, v1 = v0 + band < p.vocab ? v0 + band : p.vocab;
        const int64_t j = (b % col_tiles) * EMB_THREADS + threadIdx.x;
        const int active = j < cols;
        if (active)
            for (int64_t v = v0; v < v1; v++) acc[v * cols + j] = 0.0f;
        for (int64_t i0 = 0; i0 < p.rows; i0 += EMB_TILE) {
            const int64_t n = p.rows - i0 < EMB_TILE ? p.rows - i0 : EMB_TILE;
            __syncthreads(); /* the previous tile is consumed */
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) tile[k] = gpucore_rows_target(p.targets, p.target_dtype, i0 + k);
            __syncthreads();
            if (!active) continue;
            for (int64_t k = 0; k < n; k++) {
                const int64_t t = tile[k];
                if (t >= v0 && t < v1)
                    acc[t * cols + j] += gpucore_load_as_f32((const char *)p.dy + ((i0 + k) * cols + j) * es, p.dtype);
            }
        }
        if (active && p.dtype != GPUCORE_KDT_F32)
            for (int64_t v = v0; v < v1; v++) gpucore_store_from_f32((char *)p.dx + (v * cols + j) * es, p.dtype, acc[v * cols + j]);
    }
}

extern "C" int gpucore_kernel_embedding(const gpucore_launch *l, const gpucore_rows_args *p)
{
    const int es = p->dtype == GPUCORE_KDT_F32 ? 4 : 2;
    if (p->cols == 0) return 0;
    if (p->op == GPUCORE_ROWS_EMBED) {
        if (p->rows == 0) return 0;
        const int64_t row_bytes = p->cols * es;
        int unit = es;
        if (row_bytes % 16 == 0 && (uintptr_t)p->x % 16 == 0 && (uintptr_t)p->y % 16 == 0) unit = 16;
        const int units = (int)(row_bytes / unit);
        unsigned grid = gpucore_grid_for(p->rows * units, EMB_THREADS, l->sm_count);
        GPUCORE_LAUNCH(embed_fwd_kernel, grid, EMB_THREADS, 0, l->stream, *p, es, units, unit);
        return GPUCORE_LAUNCH_STATUS();
    }
    if (p->vocab == 0) return 0;
    /* bands of the table: enough (band, column tile) blocks to fill the device twice over */
    const int64_t col_tiles = (p->cols + EMB_THREADS - 1) / EMB_THREADS;
    int64_t want_bands = (int64_t)(l->sm_count > 0 ? l->sm_count : 1) * 2 / col_tiles;
    if (want_bands < 1) want_bands = 1;
    if (want_bands > p->vocab) want_bands = p->vocab;
    const int64_t band = (p->vocab + want_bands - 1) / want_bands;
    const int64_t blocks = ((p->vocab + band - 1) / band) * col_tiles;
    unsigned grid = (unsigned)(blocks < 65535 ? blocks : 65535);
    GPUCORE_LAUNCH(embed_bwd_kernel, grid, EMB_THREADS, 0, l->stream, *p, band, col_tiles);
    return GPUCORE_LAUNCH_STATUS();
}
