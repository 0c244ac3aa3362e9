/*
 * rows.cu — softmax / log-softmax (forward, backward), fused cross-entropy
 * (forward, backward), LayerNorm / RMSNorm (forward, backward) along the last
 * dim of contiguous [rows, cols] tensors, f32 math for f32/f16/bf16 data; the softmax
 * family also for f64 data in f64 math (a block per row, softmax_f64_kernel). Cross-entropy
 * also takes PyTorch's [N, C, d1, ...] layout as rows of class stride inner (rows_args.inner;
 * the same warp / block per row, scalar strided loads) and, with class weights, label smoothing
 * or probability targets, folds a second per-row sum (gpucore_rows_ce_fwd_term) in its tree.
 *
 * Why it is fast: a row of up to ROWS_WARP_MAX_COLS columns is one warp's work
 * (several rows per block, no idle threads, no block barriers); a longer row is
 * one block's work (a row longer than GPUCORE_ROWS_CHUNK is split over several
 * blocks). Rows are read with 16-byte vector
 * loads when the row length and pointers allow, reduced with a warp-shuffle
 * tree (then one shared-memory step for a block). Softmax and cross-entropy keep the online
 * (max, sum) pair so the statistics take one pass over the row; the write pass
 * re-reads the row from L2 (a row in flight is far smaller than L2). The
 * cross-entropy never materialises the softmax: forward writes one loss per
 * row, backward writes dlogits directly. Norm backward computes dx and folds
 * dgamma/dbeta partials in the same pass (each thread owns fixed columns of
 * its block's row chunk), then a tiny second kernel sums the chunk partials.
 * Deterministic: the path, chunking (rows_math.h) and trees are fixed by the
 * shape, no atomics.
 * 64-bit indices; grids from the SM count.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "rows_math.h"

#define ROWS_THREADS 512
#define ROWS_WARPS (ROWS_THREADS / 32)
#define NORM_THREADS 256 /* norms: more registers per thread for the f16 conversions (no spills) */
/* Rows of at most this many columns take the warp-per-row path (softmax family, cross-entropy,
 * norm forward), WARP_ROWS_THREADS / 32 rows per block. */
#define ROWS_WARP_MAX_COLS 4096
#define WARP_ROWS_THREADS 256
/* Register budgets (__launch_bounds__ minimum blocks): the block-per-row kernels keep 32 registers
 * (4 x 512 or 8 x 256 threads per SM), except the cross-entropy backward's, 64 (2 x 512: its
 * weighted / smoothed / probability-target mass needs them to run without spills); the warp-per-row kernels, whose loops unroll over a fixed
 * 32-lane stride, get up to 128, which they need to run without spills (scripts/ptxas_spills.sh). */

/* WARP == ROWS_SOLO: one thread per row (cross-entropy with the class axis second, [N, C, d...]:
 * row r's classes are `inner` elements apart, so a warp striding one row would touch a sector
 * per lane, while consecutive threads on consecutive rows (pixels) read consecutive addresses
 * for each class). */
#define ROWS_SOLO 2

/* The threads that share one row: a warp (WARP 1), the whole block (WARP 0) or one thread
 * (ROWS_SOLO); lane is this thread's index among them, size their count; rows (work items)
 * first, first+step, ... */
template <int WARP> struct row_group {
    int lane, size;
    int64_t first, step;
    __device__ __forceinline__ row_group()
    {
        if (WARP == ROWS_SOLO) {
            lane = 0;
            size = 1;
            first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
            step = (int64_t)gridDim.x * blockDim.x;
            return;
        }
        lane = WARP ? (int)(threadIdx.x % 32) : (int)threadIdx.x;
        size = WARP ? 32 : (int)blockDim.x;
        first = WARP ? (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32 : (int64_t)blockIdx.x;
        step = WARP ? (int64_t)gridDim.x * (blockDim.x / 32) : (int64_t)gridDim.x;
    }
};

/* Parameters (gamma, beta) of a run-time dtype; NULL means the identity value. */
__device__ __forceinline__ float ldp(const void *p, int dt, int64_t i, float dflt)
{
    return p ? gpucore_load_as_f32((const char *)p + i * gpucore_kdt_size(dt), dt) : dflt;
}

/* ---- block-wide folds, fixed trees; the result is returned to every thread ---- */

struct pair_stat { float a, b; };

template <int KIND> __device__ __forceinline__ pair_stat pair_combine(pair_stat x, pair_stat y)
{
    if (KIND == 0) { /* softmax (max, sum) */
        gpucore_softmax_stat s = {x.a, x.b}, t = {y.a, y.b};
        s = gpucore_softmax_stat_combine(s, t);
        pair_stat r = {s.m, s.s};
        return r;
    }
    pair_stat r = {x.a + y.a, x.b + y.b}; /* two plain sums */
    return r;
}

template <int KIND> __device__ pair_stat block_fold(pair_stat v)
{
    __shared__ pair_stat warp_v[ROWS_WARPS];
    __shared__ pair_stat result;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int d = 16; d > 0; d /= 2) {
        pair_stat o = {__shfl_down_sync(0xffffffffu, v.a, d), __shfl_down_sync(0xffffffffu, v.b, d)};
        v = pair_combine<KIND>(v, o);
    }
    if (lane == 0) warp_v[warp] = v;
    __syncthreads();
    if (warp == 0) {
        pair_stat e = {KIND == 0 ? -INFINITY : 0.0f, 0.0f};
        v = lane < (int)(blockDim.x / 32) ? warp_v[lane] : e;
        for (int d = 16; d > 0; d /= 2) {
            pair_stat o = {__shfl_down_sync(0xffffffffu, v.a, d), __shfl_down_sync(0xffffffffu, v.b, d)};
            v = pair_combine<KIND>(v, o);
        }
        if (lane == 0) result = v;
    }
    __syncthreads();
    v = result;
    __syncthreads(); /* result and warp_v are reused by the next row */
    return v;
}

/* The warp's fold: the same shuffle tree as a block's first step, then lane 0's result to every lane. */
template <int KIND> __device__ __forceinline__ pair_stat warp_fold(pair_stat v)
{
    for (int d = 16; d > 0; d /= 2) {
        pair_stat o = {__shfl_down_sync(0xffffffffu, v.a, d), __shfl_down_sync(0xffffffffu, v.b, d)};
        v = pair_combine<KIND>(v, o);
    }
    pair_stat r = {__shfl_sync(0xffffffffu, v.a, 0), __shfl_sync(0xffffffffu, v.b, 0)};
    return r;
}

template <int KIND, int WARP> __device__ __forceinline__ pair_stat group_fold(pair_stat v)
{
    return WARP == ROWS_SOLO ? v : WARP ? warp_fold<KIND>(v) : block_fold<KIND>(v);
}

/* ------------------------------------------------ softmax, log-softmax, cross-entropy */

template <int OP> struct sm_kind { static const int kind = (OP == GPUCORE_ROWS_SOFTMAX_BWD || OP == GPUCORE_ROWS_LOG_SOFTMAX_BWD) ? 1 : 0; };

/* This thread's statistics over [l0, l1) of a row at element offset off. */
template <int DT, int OP> __device__ __forceinline__ pair_stat sm_partial(const gpucore_rows_args &p, int64_t off,
                                                                          int64_t cs, int64_t l0, int64_t l1, int vec,
                                                                          int lane, int size)
{
    const int V = gpucore_dt_size<DT>::vec;
    gpucore_softmax_stat s = gpucore_softmax_stat_empty();
    float dot = 0.0f;
    if (vec) {
        for (int64_t i = l0 + (int64_t)lane * V; i < l1; i += (int64_t)size * V) {
            float a[gpucore_dt_size<DT>::vec], b[gpucore_dt_size<DT>::vec];
            if (sm_kind<OP>::kind == 0) {
                gpucore_ldv<DT>(p.x, off + i, a);
#pragma unroll
                for (int k = 0; k < V; k++) s = gpucore_softmax_stat_add(s, a[k]);
            } else {
                gpucore_ldv<DT>(p.dy, off + i, a);
                if (OP == GPUCORE_ROWS_SOFTMAX_BWD) gpucore_ldv<DT>(p.y, off + i, b);
#pragma unroll
                for (int k = 0; k < V; k++) dot += OP == GPUCORE_ROWS_SOFTMAX_BWD ? a[k] * b[k] : a[k];
            }
        }
    } else {
        for (int64_t i = l0 + lane; i < l1; i += size) {
            if (sm_kind<OP>::kind == 0) s = gpucore_softmax_stat_add(s, gpucore_ld<DT>(p.x, off + i * cs));
            else dot += OP == GPUCORE_ROWS_SOFTMAX_BWD ? gpucore_ld<DT>(p.dy, off + i) * gpucore_ld<DT>(p.y, off + i)
                                                       : gpucore_ld<DT>(p.dy, off + i);
        }
    }
    pair_stat r;
    if (sm_kind<OP>::kind == 0) { r.a = s.m; r.b = s.s; }
    else { r.a = dot; r.b = 0.0f; }
    return r;
}

/* Per-element output of the write pass; st: the row statistics, g: CE's row scale, q_all: CE's
 * row target mass Q (CE_BWD passes the element's q as y). */
template <int OP> __device__ __forceinline__ float sm_out(float x, float dy, float y, pair_stat st, float lse,
                                                          float g, float q_all)
{
    switch (OP) {
    case GPUCORE_ROWS_SOFTMAX: return expf(x - st.a) / st.b;
    /* Subtract the row max first: x - max is exact for nearby values, while x - (max + log(sum))
     * with large logits (|x| ~ 1e4) would lose the low bits of the result in f32. */
    case GPUCORE_ROWS_LOG_SOFTMAX: return (x - st.a) - lse;
    case GPUCORE_ROWS_SOFTMAX_BWD: return y * (dy - st.a);
    case GPUCORE_ROWS_LOG_SOFTMAX_BWD: return dy - expf(y) * st.a;
    default: return g * (q_all * (expf(x - st.a) / st.b) - y); /* CE_BWD: y is q_i */
    }
}

template <int DT, int OP> __device__ __forceinline__ void sm_write(const gpucore_rows_args &p, int64_t row, int64_t off,
                                                                   int64_t cs, int64_t l0, int64_t l1, int vec,
                                                                   pair_stat st, int lane, int size)
{
    const int V = gpucore_dt_size<DT>::vec;
    const float lse = logf(st.b); /* log-sum-exp minus the row max */
    float g = 0.0f, q_all = 1.0f;
    int64_t t = -1;
    int plain = 1;
    if (OP == GPUCORE_ROWS_CE_BWD) {
        const float *tail = (const float *)((const char *)p.workspace + gpucore_rows_partials_bytes(&p));
        const int probs = gpucore_rows_ce_probs(&p);
        plain = gpucore_rows_ce_plain(&p);
        t = probs ? -1 : gpucore_rows_target(p.targets, p.target_dtype, row);
        if (!probs && t == p.ignore_index) g = 0.0f;
        else {
            g = p.reduction == GPUCORE_ROWS_RED_NONE
                    ? gpucore_load_as_f32((const char *)p.dloss + row * gpucore_kdt_size(p.loss_dtype), p.loss_dtype)
                    : tail[0];
            if (!probs && (t < 0 || t >= p.cols)) g = NAN;
            else if (!plain) q_all = probs ? tail[4 + row] : gpucore_rows_ce_mass_index(&p, t, tail[1]);
        }
    }
    void *out = OP == GPUCORE_ROWS_SOFTMAX || OP == GPUCORE_ROWS_LOG_SOFTMAX ? p.y : p.dx;
    const int needs_x = sm_kind<OP>::kind == 0, needs_dy = sm_kind<OP>::kind == 1;
    if (vec) {
        for (int64_t i = l0 + (int64_t)lane * V; i < l1; i += (int64_t)size * V) {
            float a[gpucore_dt_size<DT>::vec], b[gpucore_dt_size<DT>::vec], o[gpucore_dt_size<DT>::vec];
            if (needs_x) gpucore_ldv<DT>(p.x, off + i, a);
            if (needs_dy) { gpucore_ldv<DT>(p.dy, off + i, a); gpucore_ldv<DT>(p.y, off + i, b); }
            if (OP == GPUCORE_ROWS_CE_BWD)
#pragma unroll /* rolled, b[] would live in local memory (a 32-byte stack frame for f16/bf16) */
                for (int k = 0; k < V; k++) b[k] = plain ? (i + k == t ? 1.0f : 0.0f) : gpucore_rows_ce_q(&p, off + i + k, i + k, t);
#pragma unroll
            for (int k = 0; k < V; k++) o[k] = sm_out<OP>(a[k], a[k], needs_dy || OP == GPUCORE_ROWS_CE_BWD ? b[k] : 0.0f,
                                                          st, lse, g, q_all);
            gpucore_stv<DT>(out, off + i, o);
        }
    } else {
        for (int64_t i = l0 + lane; i < l1; i += size) {
            const int64_t e = off + i * cs;
            float a = needs_x ? gpucore_ld<DT>(p.x, e) : gpucore_ld<DT>(p.dy, e);
            float b = needs_dy ? gpucore_ld<DT>(p.y, e) : 0.0f;
            if (OP == GPUCORE_ROWS_CE_BWD) b = plain ? (i == t ? 1.0f : 0.0f) : gpucore_rows_ce_q(&p, e, i, t);
            gpucore_st<DT>(out, e, sm_out<OP>(a, a, b, st, lse, g, q_all));
        }
    }
}

/* CE forward: one loss per row (f32 to the workspace for MEAN/SUM, loss_dtype for NONE); with
 * weights / smoothing / probabilities the row sum of gpucore_rows_ce_fwd_term over the whole row
 * (all threads of the group take part). */
template <int DT, int WARP> __device__ __forceinline__ void ce_row_loss(const gpucore_rows_args &p, int64_t row,
                                                                       int64_t off, int64_t cs, pair_stat st,
                                                                       int lane, int size)
{
    const float ls = logf(st.b);
    float sum = 0.0f;
    if (gpucore_rows_ce_fwd_needs_sum(&p)) {
        pair_stat v = {0.0f, 0.0f};
        for (int64_t i = lane; i < p.cols; i += size)
            v.a += gpucore_rows_ce_fwd_term(&p, off + i * cs, i, gpucore_ld<DT>(p.x, off + i * cs), st.a, ls);
        sum = group_fold<1, WARP>(v).a;
    }
    if (lane != 0) return;
    const int probs = gpucore_rows_ce_probs(&p);
    const int64_t t = probs ? -1 : gpucore_rows_target(p.targets, p.target_dtype, row);
    float loss = probs ? gpucore_rows_ce_fwd_loss(&p, t, 0.0f, st.a, ls, sum)
               : t == p.ignore_index ? 0.0f
               : (t < 0 || t >= p.cols) ? NAN : gpucore_rows_ce_fwd_loss(&p, t, gpucore_ld<DT>(p.x, off + t * cs), st.a, ls, sum);
    if (p.reduction == GPUCORE_ROWS_RED_NONE)
        gpucore_store_from_f32((char *)p.loss + row * gpucore_kdt_size(p.loss_dtype), p.loss_dtype, loss);
    else ((float *)((char *)p.workspace + gpucore_rows_partials_bytes(&p)))[row] = loss;
}

/* phase 0: statistics of each (row, chunk); with one chunk per row also the write pass.
 * phase 1 (chunks > 1): fold the row's chunk partials in order, then write the chunk.
 * WARP: a warp (1) or a thread (ROWS_SOLO) per row (chunks == 1); else a block per (row, chunk). */
template <int DT, int OP, int WARP>
__global__ void __launch_bounds__(WARP == ROWS_SOLO ? WARP_ROWS_THREADS : ROWS_THREADS, WARP ? 1 : OP == GPUCORE_ROWS_CE_BWD ? 2 : 4) softmax_like_kernel(gpucore_rows_args p, int64_t chunks, int vec, int phase)
{
    pair_stat *part = (pair_stat *)p.workspace;
    const row_group<WARP> g;
    for (int64_t w = g.first; w < p.rows * chunks; w += g.step) {
        const int64_t row = WARP ? w : w / chunks, c = WARP ? 0 : w % chunks;
        const int ce = OP == GPUCORE_ROWS_CE_FWD || OP == GPUCORE_ROWS_CE_BWD;
        const int64_t off = ce ? gpucore_rows_ce_base(&p, row) : row * p.cols, cs = ce ? gpucore_rows_ce_stride(&p) : 1;
        const int64_t l0 = c * GPUCORE_ROWS_CHUNK;
        const int64_t l1 = l0 + GPUCORE_ROWS_CHUNK < p.cols ? l0 + GPUCORE_ROWS_CHUNK : p.cols;
        pair_stat st;
        if (phase == 0) {
            st = group_fold<sm_kind<OP>::kind, WARP>(sm_partial<DT, OP>(p, off, cs, l0, l1, vec, g.lane, g.size));
            if (chunks > 1) {
                if (g.lane == 0) part[w] = st;
                continue;
            }
        } else {
            st = part[row * chunks];
            for (int64_t k = 1; k < chunks; k++) st = pair_combine<sm_kind<OP>::kind>(st, part[row * chunks + k]);
        }
        if (OP == GPUCORE_ROWS_CE_FWD) {
            if (c == 0) ce_row_loss<DT, WARP>(p, row, off, cs, st, g.lane, g.size);
        } else sm_write<DT, OP>(p, row, off, cs, l0, l1, vec, st, g.lane, g.size);
    }
}

/* One block: CE_FWD's reduction (sum of per-row losses, / count for MEAN) or CE_BWD's
 * tail: the row scale (dloss[0], / the counted rows' weight for MEAN) and Σ_c w_c, each
 * thread walking rows (classes) in a fixed stride. */
__global__ void __launch_bounds__(ROWS_THREADS) ce_reduce_kernel(gpucore_rows_args p)
{
    float *tail = (float *)((char *)p.workspace + gpucore_rows_partials_bytes(&p));
    const int fwd = p.op == GPUCORE_ROWS_CE_FWD, probs = gpucore_rows_ce_probs(&p);
    pair_stat v = {0.0f, 0.0f}; /* a: loss sum or Σ_c w_c, b: counted rows' weight (exact in f32 up to 2^24) */
    for (int64_t r = threadIdx.x; r < p.rows && (fwd || !probs); r += blockDim.x) {
        if (fwd) v.a += tail[r];
        if (!probs) v.b += gpucore_rows_ce_count(&p, r);
    }
    for (int64_t c = threadIdx.x; c < p.cols && !fwd; c += blockDim.x) v.a += gpucore_rows_ce_w(&p, c);
    v = block_fold<1>(v);
    if (threadIdx.x == 0) {
        float count = probs ? (float)p.rows : v.b;
        if (fwd) {
            float out = p.reduction == GPUCORE_ROWS_RED_MEAN ? v.a / count : v.a;
            gpucore_store_from_f32(p.loss, p.loss_dtype, out);
        } else {
            float g = p.reduction == GPUCORE_ROWS_RED_NONE ? 0.0f : gpucore_load_as_f32(p.dloss, p.loss_dtype);
            tail[0] = p.reduction == GPUCORE_ROWS_RED_MEAN ? g / count : g;
            tail[1] = v.a;
        }
    }
}

/* CE_BWD with probability targets: Q of each row (Σ_c q_c), one warp per row: lane k sums classes
 * k, k+32, ... and a fixed shuffle tree folds the lanes (the same order on every run). A thread
 * per row would walk 128k classes serially with a grid of rows/256 blocks. */
__global__ void __launch_bounds__(ROWS_THREADS) ce_mass_kernel(gpucore_rows_args p)
{
    float *mass = (float *)((char *)p.workspace + gpucore_rows_partials_bytes(&p)) + 4;
    const int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (int64_t r = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; r < p.rows; r += (int64_t)gridDim.x * wpb) {
        float q = 0.0f;
        const int64_t base = gpucore_rows_ce_base(&p, r), cs = gpucore_rows_ce_stride(&p);
        for (int64_t c = lane; c < p.cols; c += 32) q += gpucore_rows_ce_q(&p, base + c * cs, c, -1);
        for (int d = 16; d > 0; d /= 2) q += __shfl_down_sync(0xffffffffu, q, d);
        if (lane == 0) mass[r] = q;
    }
}

template <int DT, int OP> static int softmax_like_launch(const gpucore_launch *l, const gpucore_rows_args *p, int vec)
{
    const int64_t chunks = gpucore_rows_chunks(p->cols);
    int err;
    if (OP == GPUCORE_ROWS_CE_BWD && (p->reduction != GPUCORE_ROWS_RED_NONE || !gpucore_rows_ce_plain(p))) {
        GPUCORE_LAUNCH(ce_reduce_kernel, 1, ROWS_THREADS, 0, l->stream, *p);
        if ((err = GPUCORE_LAUNCH_STATUS())) return err;
        if (gpucore_rows_ce_probs(p)) {
            GPUCORE_LAUNCH(ce_mass_kernel, gpucore_grid_for(p->rows * 32, ROWS_THREADS, l->sm_count), ROWS_THREADS, 0,
                           l->stream, *p);
            if ((err = GPUCORE_LAUNCH_STATUS())) return err;
        }
    }
    if (p->inner > 1 && p->cols <= ROWS_WARP_MAX_COLS) { /* class axis second: a thread per row */
        unsigned grid = gpucore_grid_for(p->rows, WARP_ROWS_THREADS, l->sm_count);
        GPUCORE_LAUNCH((softmax_like_kernel<DT, OP, ROWS_SOLO>), grid, WARP_ROWS_THREADS, 0, l->stream, *p, chunks, vec, 0);
    } else if (p->cols <= ROWS_WARP_MAX_COLS) { /* chunks == 1 */
        unsigned grid = gpucore_grid_for(p->rows * 32, WARP_ROWS_THREADS, l->sm_count);
        GPUCORE_LAUNCH((softmax_like_kernel<DT, OP, 1>), grid, WARP_ROWS_THREADS, 0, l->stream, *p, chunks, vec, 0);
    } else {
        unsigned grid = gpucore_grid_for(p->rows * chunks * ROWS_THREADS, ROWS_THREADS, l->sm_count);
        GPUCORE_LAUNCH((softmax_like_kernel<DT, OP, 0>), grid, ROWS_THREADS, 0, l->stream, *p, chunks, vec, 0);
        if (chunks > 1) {
            if ((err = GPUCORE_LAUNCH_STATUS())) return err;
            GPUCORE_LAUNCH((softmax_like_kernel<DT, OP, 0>), grid, ROWS_THREADS, 0, l->stream, *p, chunks, vec, 1);
        }
    }
    if ((err = GPUCORE_LAUNCH_STATUS())) return err;
    if (OP == GPUCORE_ROWS_CE_FWD && p->reduction != GPUCORE_ROWS_RED_NONE) {
        GPUCORE_LAUNCH(ce_reduce_kernel, 1, ROWS_THREADS, 0, l->stream, *p);
        return GPUCORE_LAUNCH_STATUS();
    }
    return 0;
}

/* ------------------------------------------------------------------ norms */

/* One warp (WARP) or block per row: mean, centred variance, then the write (the re-reads hit L1/L2). */
template <int DT, int LAYER, int WARP>
__global__ void __launch_bounds__(NORM_THREADS, WARP ? 2 : 8) norm_fwd_kernel(gpucore_rows_args p, int vec)
{
    const int V = gpucore_dt_size<DT>::vec;
    const int64_t cols = p.cols;
    const row_group<WARP> g;
    for (int64_t row = g.first; row < p.rows; row += g.step) {
        const int64_t off = row * cols;
        float mean = 0.0f;
        if (LAYER) {
            pair_stat s = {0.0f, 0.0f};
            if (vec)
                for (int64_t i = (int64_t)g.lane * V; i < cols; i += (int64_t)g.size * V) {
                    float a[gpucore_dt_size<DT>::vec];
                    gpucore_ldv<DT>(p.x, off + i, a);
#pragma unroll
                    for (int k = 0; k < V; k++) s.a += a[k];
                }
            else
                for (int64_t i = g.lane; i < cols; i += g.size) s.a += gpucore_ld<DT>(p.x, off + i);
            mean = group_fold<1, WARP>(s).a / (float)cols;
        }
        pair_stat q = {0.0f, 0.0f};
        if (vec)
            for (int64_t i = (int64_t)g.lane * V; i < cols; i += (int64_t)g.size * V) {
                float a[gpucore_dt_size<DT>::vec];
                gpucore_ldv<DT>(p.x, off + i, a);
#pragma unroll
                for (int k = 0; k < V; k++) q.a += (a[k] - mean) * (a[k] - mean);
            }
        else
            for (int64_t i = g.lane; i < cols; i += g.size) {
                float d = gpucore_ld<DT>(p.x, off + i) - mean;
                q.a += d * d;
            }
        const float rstd = rsqrtf(group_fold<1, WARP>(q).a / (float)cols + p.eps);
        if (vec)
            for (int64_t i = (int64_t)g.lane * V; i < cols; i += (int64_t)g.size * V) {
                float a[gpucore_dt_size<DT>::vec];
                gpucore_ldv<DT>(p.x, off + i, a);
#pragma unroll
                for (int k = 0; k < V; k++)
                    a[k] = (a[k] - mean) * rstd * ldp(p.gamma, p.param_dtype, i + k, 1.0f) +
                           (LAYER ? ldp(p.beta, p.param_dtype, i + k, 0.0f) : 0.0f);
                gpucore_stv<DT>(p.y, off + i, a);
            }
        else
            for (int64_t i = g.lane; i < cols; i += g.size)
                gpucore_st<DT>(p.y, off + i, (gpucore_ld<DT>(p.x, off + i) - mean) * rstd * ldp(p.gamma, p.param_dtype, i, 1.0f) +
                                          (LAYER ? ldp(p.beta, p.param_dtype, i, 0.0f) : 0.0f));
        if (g.lane == 0) {
            if (LAYER && p.mean) p.mean[row] = mean;
            if (p.rstd) p.rstd[row] = rstd;
        }
    }
}

/* One block per chunk of rpc rows: dx row by row, and this chunk's dgamma/dbeta
 * partials (workspace [chunk][2][cols]) accumulated by the thread that owns each
 * column, in row order. Scalar column walk so a thread's columns stay fixed. */
template <int DT, int LAYER>
__global__ void __launch_bounds__(NORM_THREADS) norm_bwd_kernel(gpucore_rows_args p, int64_t rpc, int64_t nchunks)
{
    const int64_t cols = p.cols;
    float *part = (float *)p.workspace;
    const int want_params = p.dgamma || p.dbeta;
    for (int64_t ch = blockIdx.x; ch < nchunks; ch += gridDim.x) {
        const int64_t r0 = ch * rpc, r1 = r0 + rpc < p.rows ? r0 + rpc : p.rows;
        float *pg = part + ch * 2 * cols, *pb = pg + cols;
        for (int64_t row = r0; row < r1; row++) {
            const int64_t off = row * cols;
            const float mean = LAYER ? p.mean[row] : 0.0f, rstd = p.rstd[row];
            pair_stat s = {0.0f, 0.0f};
            if (p.dx) {
                for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
                    float g = gpucore_ld<DT>(p.dy, off + i) * ldp(p.gamma, p.param_dtype, i, 1.0f);
                    float xh = (gpucore_ld<DT>(p.x, off + i) - mean) * rstd;
                    s.a += g;
                    s.b += g * xh;
                }
                s = block_fold<1>(s);
                s.a /= (float)cols;
                s.b /= (float)cols;
            }
            for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
                float dy = gpucore_ld<DT>(p.dy, off + i);
                float xh = (gpucore_ld<DT>(p.x, off + i) - mean) * rstd;
                if (p.dx) {
                    float g = dy * ldp(p.gamma, p.param_dtype, i, 1.0f);
                    gpucore_st<DT>(p.dx, off + i, rstd * (g - (LAYER ? s.a : 0.0f) - xh * s.b));
                }
                if (want_params) {
                    pg[i] = row == r0 ? dy * xh : pg[i] + dy * xh;
                    pb[i] = row == r0 ? dy : pb[i] + dy;
                }
            }
        }
    }
}

/* dgamma[c], dbeta[c]: the chunk partials summed in chunk order. */
__global__ void norm_params_finish_kernel(gpucore_rows_args p, int64_t nchunks)
{
    const float *part = (const float *)p.workspace;
    const int64_t cols = p.cols;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
        float g = 0.0f, b = 0.0f;
        for (int64_t k = 0; k < nchunks; k++) {
            g += part[k * 2 * cols + c];
            b += part[k * 2 * cols + cols + c];
        }
        if (p.dgamma) gpucore_store_from_f32((char *)p.dgamma + c * gpucore_kdt_size(p.param_dtype), p.param_dtype, g);
        if (p.dbeta) gpucore_store_from_f32((char *)p.dbeta + c * gpucore_kdt_size(p.param_dtype), p.param_dtype, b);
    }
}

template <int DT, int LAYER> static int norm_launch(const gpucore_launch *l, const gpucore_rows_args *p, int vec, int bwd)
{
    int err;
    if (!bwd) {
        if (p->cols <= ROWS_WARP_MAX_COLS) {
            unsigned grid = gpucore_grid_for(p->rows * 32, WARP_ROWS_THREADS, l->sm_count);
            GPUCORE_LAUNCH((norm_fwd_kernel<DT, LAYER, 1>), grid, WARP_ROWS_THREADS, 0, l->stream, *p, vec);
        } else {
            unsigned grid = gpucore_grid_for(p->rows * NORM_THREADS, NORM_THREADS, l->sm_count);
            GPUCORE_LAUNCH((norm_fwd_kernel<DT, LAYER, 0>), grid, NORM_THREADS, 0, l->stream, *p, vec);
        }
        return GPUCORE_LAUNCH_STATUS();
    }
    const int64_t rpc = gpucore_rows_norm_rows_per_chunk(p->rows), nchunks = (p->rows + rpc - 1) / rpc;
    unsigned grid = gpucore_grid_for(nchunks * NORM_THREADS, NORM_THREADS, l->sm_count);
    GPUCORE_LAUNCH((norm_bwd_kernel<DT, LAYER>), grid, NORM_THREADS, 0, l->stream, *p, rpc, nchunks);
    if ((err = GPUCORE_LAUNCH_STATUS()) || !(p->dgamma || p->dbeta)) return err;
    grid = gpucore_grid_for(p->cols, 256, l->sm_count);
    GPUCORE_LAUNCH(norm_params_finish_kernel, grid, 256, 0, l->stream, *p, nchunks);
    return GPUCORE_LAUNCH_STATUS();
}

/* ------------------------------------------------ f64 rows: the softmax family (rows_math.h) */

#define F64_THREADS 256

/* Block-wide max (MAX) or sum of v by a fixed shared-memory tree; the result to every thread. */
template <int MAX> __device__ double f64_block_fold(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = F64_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] = MAX ? gpucore_rows_f64_max(sh[threadIdx.x], sh[threadIdx.x + s]) : sh[threadIdx.x] + sh[threadIdx.x + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads(); /* sh is reused by the next fold */
    return r;
}

/* A block per row (grid-stride over rows), f64 math: statistics, then the write pass. */
template <int OP> __global__ void __launch_bounds__(F64_THREADS) softmax_f64_kernel(gpucore_rows_args p)
{
    __shared__ double sh[F64_THREADS];
    const int fwd = OP == GPUCORE_ROWS_SOFTMAX || OP == GPUCORE_ROWS_LOG_SOFTMAX;
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const double *v = (const double *)(fwd ? p.x : p.dy) + r * p.cols;
        const double *y = fwd ? NULL : (const double *)p.y + r * p.cols;
        double *o = (double *)(fwd ? p.y : p.dx) + r * p.cols;
        double a = fwd ? -INFINITY : 0.0, b = 1.0;
        for (int64_t c = threadIdx.x; c < p.cols; c += F64_THREADS)
            a = fwd ? gpucore_rows_f64_max(a, v[c]) : a + gpucore_rows_f64_bwd_term(OP, v[c], y[c]);
        a = f64_block_fold<OP == GPUCORE_ROWS_SOFTMAX || OP == GPUCORE_ROWS_LOG_SOFTMAX>(a, sh);
        if (fwd) {
            double sum = 0.0;
            for (int64_t c = threadIdx.x; c < p.cols; c += F64_THREADS) sum += gpucore_rows_f64_exp_term(v[c], a);
            b = gpucore_rows_f64_sum_fix(a, f64_block_fold<0>(sum, sh));
        }
        const double lb = log(b);
        for (int64_t c = threadIdx.x; c < p.cols; c += F64_THREADS)
            o[c] = gpucore_rows_f64_out(OP, v[c], fwd ? 0.0 : y[c], a, b, lb);
    }
}

template <int OP> static int softmax_f64_launch(const gpucore_launch *l, const gpucore_rows_args *p)
{
    GPUCORE_LAUNCH((softmax_f64_kernel<OP>), gpucore_grid_for(p->rows * F64_THREADS, F64_THREADS, l->sm_count), F64_THREADS, 0,
                   l->stream, *p);
    return GPUCORE_LAUNCH_STATUS();
}

static int rows_f64_launch(const gpucore_launch *l, const gpucore_rows_args *p)
{
    switch (p->op) {
    case GPUCORE_ROWS_SOFTMAX: return softmax_f64_launch<GPUCORE_ROWS_SOFTMAX>(l, p);
    case GPUCORE_ROWS_LOG_SOFTMAX: return softmax_f64_launch<GPUCORE_ROWS_LOG_SOFTMAX>(l, p);
    case GPUCORE_ROWS_SOFTMAX_BWD: return softmax_f64_launch<GPUCORE_ROWS_SOFTMAX_BWD>(l, p);
    case GPUCORE_ROWS_LOG_SOFTMAX_BWD: return softmax_f64_launch<GPUCORE_ROWS_LOG_SOFTMAX_BWD>(l, p);
    default: return 1; /* the API layer passes f64 to the softmax family only */
    }
}

/* ---------------------------------------------------------------- dispatch */

template <int DT> static int rows_launch(const gpucore_launch *l, const gpucore_rows_args *p)
{
    const int V = gpucore_dt_size<DT>::vec;
    const void *ptrs[4] = {p->x, p->y, p->dy, p->dx};
    int vec = p->cols % V == 0 && p->inner <= 1;
    for (int k = 0; k < 4; k++) vec = vec && ((uintptr_t)ptrs[k] % 16) == 0;
    switch (p->op) {
    case GPUCORE_ROWS_SOFTMAX: return softmax_like_launch<DT, GPUCORE_ROWS_SOFTMAX>(l, p, vec);
    case GPUCORE_ROWS_LOG_SOFTMAX: return softmax_like_launch<DT, GPUCORE_ROWS_LOG_SOFTMAX>(l, p, vec);
    case GPUCORE_ROWS_SOFTMAX_BWD: return softmax_like_launch<DT, GPUCORE_ROWS_SOFTMAX_BWD>(l, p, vec);
    case GPUCORE_ROWS_LOG_SOFTMAX_BWD: return softmax_like_launch<DT, GPUCORE_ROWS_LOG_SOFTMAX_BWD>(l, p, vec);
    case GPUCORE_ROWS_CE_FWD: return softmax_like_launch<DT, GPUCORE_ROWS_CE_FWD>(l, p, vec);
    case GPUCORE_ROWS_CE_BWD: return softmax_like_launch<DT, GPUCORE_ROWS_CE_BWD>(l, p, vec);
    case GPUCORE_ROWS_LAYERNORM: return norm_launch<DT, 1>(l, p, vec, 0);
    case GPUCORE_ROWS_RMSNORM: return norm_launch<DT, 0>(l, p, vec, 0);
    case GPUCORE_ROWS_LAYERNORM_BWD: return norm_launch<DT, 1>(l, p, vec, 1);
    case GPUCORE_ROWS_RMSNORM_BWD: return norm_launch<DT, 0>(l, p, vec, 1);
    default: return gpucore_kernel_embedding(l, p);
    }
}

extern "C" int gpucore_kernel_rows(const gpucore_launch *launch, const gpucore_rows_args *args)
{
    if (args->op == GPUCORE_ROWS_EMBED || args->op == GPUCORE_ROWS_EMBED_BWD) return gpucore_kernel_embedding(launch, args);
    if (args->rows == 0 || args->cols == 0) return 0;
    switch (args->dtype) {
    case GPUCORE_KDT_F32: return rows_launch<GPUCORE_KDT_F32>(launch, args);
    case GPUCORE_KDT_F16: return rows_launch<GPUCORE_KDT_F16>(launch, args);
    case GPUCORE_KDT_F64: return rows_f64_launch(launch, args);
    default: return rows_launch<GPUCORE_KDT_BF16>(launch, args);
    }
}
