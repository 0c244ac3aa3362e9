/*
 * attention.cu — scaled dot-product attention, forward and backward
 * (attention_math.h defines the masks, dropout and layout), f32 math for
 * f32/f16/bf16 operands given with any strides.
 *
 * Flash-attention style, so memory stays O(seq): no score matrix is stored.
 *   forward:  the blocks stride over (batch, head, query-row tile) units (16
 *             rows on the FMA path, 64 on the tensor-core path); key tiles
 *             stream through shared memory with an online softmax (running max
 *             and normaliser, accumulator rescaled), tiles past the causal
 *             diagonal or the key length skipped; saves out and lse.
 *   backward: D_i = dout_i · out_i once per row into the caller's scratch
 *             a.delta (attention_delta_kernel, the first launch); then
 *             P = exp(S - lse) recomputed; dq by (batch, head, query-row tile)
 *             over the key tiles, dk and dv by (batch, kv head, key tile) over
 *             the group's query heads and query tiles, so every gradient
 *             element has one owner: deterministic, no atomics.
 * Threads: 128 per block = 16 rows x 8 lanes; a lane owns columns lane + 8n of
 * its row (accumulators in registers, NC per thread by the head dim class) and
 * score entries lane + 8m. Rows stored with one float of padding against bank
 * conflicts. The FMA kernels' shared memory stays under 48 KiB (no opt-in).
 * Tensor cores: for f16/bf16 with head dims (D and Dv) multiples of 16 up to
 * 128, forward, dq and dk/dv run their products on ldmatrix + mma.sync
 * m16n8k16 (f32 accumulate, mma_sync.cuh; the *_tc_kernel functions, 64-key or
 * 64-query tiles): the forward and dq with 64 query rows a block (16 a warp),
 * dk/dv with 64 keys a block (16 a warp, dk and dv in the mma accumulators
 * across the query tiles), their element-wise steps in registers; f32, and other
 * head dims (up to 256), use the FMA loops. The tensor-core forward's and dk/dv's
 * softmax runs in base 2 with masks only on the tiles that need them; for
 * unit-stride operands with 16-byte rows (decided on the host) the tiles of all
 * three move by cp.async, double-buffered (the forward's and dq's K/V, dk/dv's
 * Q/dout/lse/D tiles), and the forward's O leaves by 16-byte stores.
 */
#include "kernels.h"
#include "launch.h"
#include <cuda_runtime.h> /* cudaFuncSetAttribute (the SIMT layer's shim under GPUCORE_SIMT) */
#include "grid.h"
#include "attention_math.h"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "mma_sync.cuh"
#include "attention_cp_async.h"
#include <type_traits>

#define ATT_THREADS 128
#define ATT_ROWS 16 /* rows (query rows, or keys for dk/dv) per block */
#define ATT_LANES 8

/* Key (or query) tile length for a head-dim class NC = ceil(max(D, Dv) / 8) in {8, 16, 32}. */
static inline int att_tile(int nc, int bwd) { return nc <= 8 ? 64 : nc <= 16 ? 32 : bwd ? 8 : 16; }

__device__ __forceinline__ int64_t att_min(int64_t x, int64_t y) { return x < y ? x : y; }

/* rows [row0, row0 + n) of operand t at (b, h) into s[ATT_ROWS or more][ld], zero past n. */
__device__ __forceinline__ void att_load_tile(float *s, int ld, const gpucore_attn_tensor &t, int dt, int64_t b,
                                              int64_t h, int64_t row0, int64_t n, int rows, int64_t cols)
{
    for (int64_t e = threadIdx.x; e < (int64_t)rows * cols; e += blockDim.x) {
        int64_t r = e / cols, c = e % cols;
        s[r * ld + c] = r < n ? gpucore_attn_load(&t, dt, gpucore_attn_offset(&t, b, h, row0 + r, c)) : 0.0f;
    }
}

__device__ __forceinline__ float att_dot(const float *x, const float *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t d = 0; d < n; d++) s = fmaf(x[d], y[d], s);
    return s;
}

template <int NC> __device__ __forceinline__ void att_zero(float *acc)
{
#pragma unroll
    for (int n = 0; n < NC; n++) acc[n] = 0.0f;
}

/* acc[n] += coef · row[lane + 8n] for this lane's columns below ncols. */
template <int NC> __device__ __forceinline__ void att_axpy_cols(float *acc, float coef, const float *row, int lane,
                                                               int64_t ncols)
{
#pragma unroll
    for (int n = 0; n < NC; n++)
        if (lane + ATT_LANES * n < ncols) acc[n] = fmaf(coef, row[lane + ATT_LANES * n], acc[n]);
}

/* Block blk of a query-row grid of `rows` rows a block: batch b, head h (kv head hk = h / G), query rows
 * [i0, i0 + nq), this thread's row i. */
struct att_qblock {
    int64_t b, h, hk, i0, nq, i;
};
__device__ __forceinline__ att_qblock att_qblock_of(const gpucore_attn_args &a, int64_t blk, int64_t nqt, int r,
                                                    int rows = ATT_ROWS)
{
    att_qblock q;
    const int64_t bh = blk / nqt;
    q.b = bh / a.heads;
    q.h = bh % a.heads;
    q.hk = q.h / (a.heads / a.kv_heads);
    q.i0 = (blk % nqt) * rows;
    q.nq = att_min(rows, a.seq_q - q.i0);
    q.i = q.i0 + r;
    return q;
}

/* out[b, h, i, lane + 8n] = acc[n] / l and lse = m + log l (a row with nothing admitted: 0 and -inf; a NaN score: NaN). */
template <int NC>
__device__ __forceinline__ void att_store_out_row(const gpucore_attn_args &a, int64_t b, int64_t h, int64_t i, int lane,
                                                  const float *acc, float m, float l)
{
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int n = 0; n < NC; n++)
        if (lane + ATT_LANES * n < a.head_dim_v)
            gpucore_attn_store(&a.out, a.dtype, gpucore_attn_offset(&a.out, b, h, i, lane + ATT_LANES * n), acc[n] * inv);
    if (lane == 0 && a.lse) a.lse[(b * a.heads + h) * a.seq_q + i] = gpucore_attn_lse(m, l);
}

template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) attention_forward_kernel(gpucore_attn_args a, int BK, int64_t nqt)
{
    extern __shared__ __align__(128) float attn_smem[]; /* the tiles' offsets are multiples of 32 bytes from here */
    const int64_t D = a.head_dim, Dv = a.head_dim_v;
    const int ldq = (int)D + 1, ldkv = (int)(D > Dv ? D : Dv) + 1, lds = BK + 1;
    float *Qs = attn_smem, *KVs = Qs + ATT_ROWS * ldq, *Ss = KVs + BK * ldkv, *Keep = Ss + ATT_ROWS * lds;
    const int r = threadIdx.x / ATT_LANES, lane = threadIdx.x % ATT_LANES;
    const bool dropout = a.dropout_p > 0.0f;
    const int64_t total = a.batch * a.heads * nqt;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const att_qblock qb = att_qblock_of(a, blk, nqt, r);
        const int64_t b = qb.b, h = qb.h, hk = qb.hk, i0 = qb.i0, nq = qb.nq, i = qb.i;
        const bool row_ok = r < nq;
        __syncthreads(); /* the previous tile's readers are done */
        att_load_tile(Qs, ldq, a.q, a.dtype, b, h, i0, nq, ATT_ROWS, D);
        float m = -INFINITY, l = 0.0f, acc[NC];
        att_zero<NC>(acc);
        const int64_t kend = gpucore_attn_key_end(&a, b, i0 + nq - 1);
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int64_t nk = att_min(BK, kend - j0);
            __syncthreads();
            att_load_tile(KVs, ldkv, a.k, a.dtype, b, hk, j0, nk, (int)nk, D);
            __syncthreads();
            for (int jj = lane; jj < BK; jj += ATT_LANES) {
                float s = -INFINITY;
                if (row_ok && jj < nk) {
                    const float bias = gpucore_attn_bias(&a, b, h, i, j0 + jj);
                    s = gpucore_attn_score(&a, bias == -INFINITY ? 0.0f : att_dot(Qs + r * ldq, KVs + jj * ldkv, D), bias);
                }
                Ss[r * lds + jj] = s;
                /* the dropout factor once per score (by its lane), not by all 8 lanes of the row below */
                if (dropout) Keep[r * lds + jj] = s == -INFINITY ? 0.0f : gpucore_attn_keep(&a, b, h, i, j0 + jj);
            }
            __syncthreads();
            att_load_tile(KVs, ldkv, a.v, a.dtype, b, hk, j0, nk, (int)nk, Dv);
            float mt = -INFINITY;
            for (int jj = 0; jj < nk; jj++) mt = fmaxf(mt, Ss[r * lds + jj]);
            const float mn = fmaxf(m, mt);
            __syncthreads();
            if (mn != -INFINITY) {
                const float alpha = gpucore_attn_exp(m, mn);
                l *= alpha;
#pragma unroll
                for (int n = 0; n < NC; n++) acc[n] *= alpha;
                for (int jj = 0; jj < nk; jj++) {
                    const float p = gpucore_attn_exp(Ss[r * lds + jj], mn);
                    l += p;
                    if (p == 0.0f) continue;
                    att_axpy_cols<NC>(acc, dropout ? p * Keep[r * lds + jj] : p, KVs + jj * ldkv, lane, Dv);
                }
                m = mn;
            }
        }
        if (row_ok) att_store_out_row<NC>(a, b, h, i, lane, acc, m, l);
    }
}

/* Every D_i once, into a.delta, before the gradient kernels: the dk/dv kernels visit each query
 * tile once per key block, and recomputing D there costs Sk/16 passes over dout and out. A warp per
 * row: lane k sums columns k, k+32, ... (coalesced), then a fixed shuffle tree. */
__global__ void __launch_bounds__(ATT_THREADS) attention_delta_kernel(gpucore_attn_args a)
{
    const int lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    const int64_t rows = a.batch * a.heads * a.seq_q;
    for (int64_t w = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; w < rows; w += (int64_t)gridDim.x * wpb) {
        const int64_t i = w % a.seq_q, bh = w / a.seq_q, h = bh % a.heads, b = bh / a.heads;
        float s = 0.0f;
        for (int64_t c = lane; c < a.head_dim_v; c += 32)
            s = fmaf(gpucore_attn_load(&a.dout, a.dtype, gpucore_attn_offset(&a.dout, b, h, i, c)),
                     gpucore_attn_load(&a.out, a.dtype, gpucore_attn_offset(&a.out, b, h, i, c)), s);
        for (int d = 16; d > 0; d /= 2) s += __shfl_down_sync(0xffffffffu, s, d);
        if (lane == 0) a.delta[w] = s;
    }
}

/* D_i and lse_i for rows [i0, i0 + nq) into Di[0..nq), lse[0..nq) (0 and -inf past nq), from
 * a.delta (attention_delta_kernel) and a.lse. */
__device__ __forceinline__ void att_row_dots(const gpucore_attn_args &a, int64_t b, int64_t h, int64_t i0, int64_t nq,
                                             int rows, float *Di, float *lse)
{
    for (int t = threadIdx.x; t < rows; t += blockDim.x) {
        float s = 0.0f, ls = -INFINITY;
        if (t < nq) {
            const int64_t row = (b * a.heads + h) * a.seq_q + i0 + t;
            s = a.delta[row];
            ls = a.lse[row];
        }
        Di[t] = s;
        lse[t] = ls;
    }
}

/* The backward's first launch: D for every row into the caller's scratch (required: 1, the
 * value of cudaErrorInvalidValue, without it). */
static int attention_delta_launch(const gpucore_launch *l, const gpucore_attn_args *a)
{
    if (!a->delta) return 1;
    if (a->batch * a->heads * a->seq_q == 0) return 0;
    unsigned grid = gpucore_grid_for(a->batch * a->heads * a->seq_q * 32, ATT_THREADS, l->sm_count);
    GPUCORE_LAUNCH(attention_delta_kernel, grid, ATT_THREADS, 0, l->stream, *a);
    return GPUCORE_LAUNCH_STATUS();
}

/* Five blocks per SM asked for explicitly: left to itself, ptxas targets the same five blocks
 * (96 registers) on sm_90 for NC = 8 and spills 8 bytes in the key loop; told the target,
 * it fits in 88 registers without spilling (scripts/ptxas_spills.sh). */
#define ATT_DQ_MIN_BLOCKS 5
template <int NC>
__global__ void __launch_bounds__(ATT_THREADS, ATT_DQ_MIN_BLOCKS) attention_dq_kernel(gpucore_attn_args a, int BK, int64_t nqt)
{
    extern __shared__ __align__(128) float attn_smem[]; /* the tiles' offsets are multiples of 32 bytes from here */
    const int64_t D = a.head_dim, Dv = a.head_dim_v;
    const int ldq = (int)D + 1, ldo = (int)Dv + 1, ldkv = (int)(D > Dv ? D : Dv) + 1, lds = BK + 1;
    float *Qs = attn_smem, *dOs = Qs + ATT_ROWS * ldq, *KVs = dOs + ATT_ROWS * ldo, *Ss = KVs + BK * ldkv;
    float *Di = Ss + ATT_ROWS * lds, *lse = Di + ATT_ROWS;
    const int r = threadIdx.x / ATT_LANES, lane = threadIdx.x % ATT_LANES;
    const int64_t total = a.batch * a.heads * nqt;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const att_qblock qb = att_qblock_of(a, blk, nqt, r);
        const int64_t b = qb.b, h = qb.h, hk = qb.hk, i0 = qb.i0, nq = qb.nq, i = qb.i;
        const bool row_ok = r < nq;
        __syncthreads();
        att_load_tile(Qs, ldq, a.q, a.dtype, b, h, i0, nq, ATT_ROWS, D);
        att_load_tile(dOs, ldo, a.dout, a.dtype, b, h, i0, nq, ATT_ROWS, Dv);
        att_row_dots(a, b, h, i0, nq, ATT_ROWS, Di, lse);
        float acc[NC];
        att_zero<NC>(acc);
        const int64_t kend = gpucore_attn_key_end(&a, b, i0 + nq - 1);
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int64_t nk = att_min(BK, kend - j0);
            __syncthreads();
            att_load_tile(KVs, ldkv, a.k, a.dtype, b, hk, j0, nk, (int)nk, D);
            __syncthreads();
            for (int jj = lane; jj < BK; jj += ATT_LANES) { /* P */
                float p = 0.0f;
                if (row_ok && jj < nk) {
                    const float bias = gpucore_attn_bias(&a, b, h, i, j0 + jj);
                    if (bias != -INFINITY)
                        p = gpucore_attn_exp(gpucore_attn_score(&a, att_dot(Qs + r * ldq, KVs + jj * ldkv, D), bias), lse[r]);
                }
                Ss[r * lds + jj] = p;
            }
            __syncthreads();
            att_load_tile(KVs, ldkv, a.v, a.dtype, b, hk, j0, nk, (int)nk, Dv);
            __syncthreads();
            for (int jj = lane; jj < BK; jj += ATT_LANES) { /* dS = P (dP - D_i) */
                const float p = Ss[r * lds + jj];
                if (p == 0.0f) continue;
                const float dp = att_dot(dOs + r * ldo, KVs + jj * ldkv, Dv) * gpucore_attn_keep(&a, b, h, i, j0 + jj);
                Ss[r * lds + jj] = p * (dp - Di[r]);
            }
            __syncthreads();
            att_load_tile(KVs, ldkv, a.k, a.dtype, b, hk, j0, nk, (int)nk, D);
            __syncthreads();
            for (int jj = 0; jj < nk; jj++) {
                const float ds = Ss[r * lds + jj] * a.scale;
                if (ds != 0.0f) att_axpy_cols<NC>(acc, ds, KVs + jj * ldkv, lane, D);
            }
        }
        if (row_ok)
#pragma unroll
            for (int n = 0; n < NC; n++)
                if (lane + ATT_LANES * n < D)
                    gpucore_attn_store(&a.dq, a.dtype, gpucore_attn_offset(&a.dq, b, h, i, lane + ATT_LANES * n), acc[n]);
    }
}

/* Block blk of a key-row grid: batch b, kv head hk, keys [j0, j0 + nk), of which the first nkv are below
 * kv_len (keys past it get no gradient). */
struct att_kblock {
    int64_t b, hk, j0, nk, nkv;
};
__device__ __forceinline__ att_kblock att_kblock_of(const gpucore_attn_args &a, int64_t blk, int64_t nkt)
{
    att_kblock k;
    const int64_t bh = blk / nkt, valid = gpucore_attn_kv_valid(&a, bh / a.kv_heads);
    k.b = bh / a.kv_heads;
    k.hk = bh % a.kv_heads;
    k.j0 = (blk % nkt) * ATT_ROWS;
    k.nk = att_min(ATT_ROWS, a.seq_k - k.j0);
    k.nkv = valid > k.j0 ? att_min(k.nk, valid - k.j0) : 0;
    return k;
}

/* dk[b, hk, j, lane + 8n] and dv[...] from the row's accumulators (each output when asked for). */
template <int NC>
__device__ __forceinline__ void att_store_dkv_row(const gpucore_attn_args &a, int64_t b, int64_t hk, int64_t j, int lane,
                                                  const float *dk, const float *dv)
{
#pragma unroll
    for (int n = 0; n < NC; n++) {
        const int64_t c = lane + ATT_LANES * n;
        if (a.dk.data && c < a.head_dim) gpucore_attn_store(&a.dk, a.dtype, gpucore_attn_offset(&a.dk, b, hk, j, c), dk[n]);
        if (a.dv.data && c < a.head_dim_v)
            gpucore_attn_store(&a.dv, a.dtype, gpucore_attn_offset(&a.dv, b, hk, j, c), dv[n]);
    }
}

template <int NC>
__global__ void __launch_bounds__(ATT_THREADS) attention_dkv_kernel(gpucore_attn_args a, int BQ, int64_t nkt)
{
    extern __shared__ __align__(128) float attn_smem[]; /* the tiles' offsets are multiples of 32 bytes from here */
    const int64_t D = a.head_dim, Dv = a.head_dim_v, G = a.heads / a.kv_heads;
    const int ldk = (int)D + 1, ldv = (int)Dv + 1, ldb = (int)(D > Dv ? D : Dv) + 1, lds = BQ + 1;
    float *Ks = attn_smem, *Vs = Ks + ATT_ROWS * ldk, *Bs = Vs + ATT_ROWS * ldv, *Ps = Bs + BQ * ldb;
    float *dSs = Ps + ATT_ROWS * lds, *Di = dSs + ATT_ROWS * lds, *lse = Di + BQ;
    const int r = threadIdx.x / ATT_LANES, lane = threadIdx.x % ATT_LANES;
    const int64_t total = a.batch * a.kv_heads * nkt;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const att_kblock kb = att_kblock_of(a, blk, nkt);
        const int64_t b = kb.b, hk = kb.hk, j0 = kb.j0, nk = kb.nk, nkv = kb.nkv, j = j0 + r;
        __syncthreads();
        att_load_tile(Ks, ldk, a.k, a.dtype, b, hk, j0, nk, ATT_ROWS, D);
        att_load_tile(Vs, ldv, a.v, a.dtype, b, hk, j0, nk, ATT_ROWS, Dv);
        float dk[NC], dv[NC];
        att_zero<NC>(dk);
        att_zero<NC>(dv);
        for (int64_t h = hk * G; nkv > 0 && h < (hk + 1) * G; h++)
            for (int64_t i0 = gpucore_attn_query_begin(&a, j0); i0 < a.seq_q; i0 += BQ) {
                const int64_t nq = att_min(BQ, a.seq_q - i0);
                __syncthreads();
                att_load_tile(Bs, ldb, a.q, a.dtype, b, h, i0, nq, BQ, D);
                att_row_dots(a, b, h, i0, nq, BQ, Di, lse);
                __syncthreads();
                for (int ii = lane; ii < BQ; ii += ATT_LANES) { /* P, transposed: [key][query] */
                    float p = 0.0f;
                    if (r < nkv && ii < nq) {
                        const float bias = gpucore_attn_bias(&a, b, h, i0 + ii, j);
                        if (bias != -INFINITY)
                            p = gpucore_attn_exp(gpucore_attn_score(&a, att_dot(Bs + ii * ldb, Ks + r * ldk, D), bias),
                                                 lse[ii]);
                    }
                    Ps[r * lds + ii] = p;
                }
                __syncthreads();
                att_load_tile(Bs, ldb, a.dout, a.dtype, b, h, i0, nq, BQ, Dv);
                __syncthreads();
                for (int ii = lane; ii < BQ; ii += ATT_LANES) {
                    const float p = Ps[r * lds + ii];
                    float pk = 0.0f, ds = 0.0f;
                    if (p != 0.0f) {
                        const float keep = gpucore_attn_keep(&a, b, h, i0 + ii, j);
                        ds = p * (att_dot(Bs + ii * ldb, Vs + r * ldv, Dv) * keep - Di[ii]);
                        pk = p * keep;
                    }
                    Ps[r * lds + ii] = pk;
                    dSs[r * lds + ii] = ds * a.scale;
                }
                __syncthreads();
                for (int ii = 0; ii < nq; ii++) { /* dv += P̃ᵀ dout */
                    const float pk = Ps[r * lds + ii];
                    if (pk != 0.0f) att_axpy_cols<NC>(dv, pk, Bs + ii * ldb, lane, Dv);
                }
                __syncthreads();
                att_load_tile(Bs, ldb, a.q, a.dtype, b, h, i0, nq, BQ, D);
                __syncthreads();
                for (int ii = 0; ii < nq; ii++) { /* dk += scale · dSᵀ q */
                    const float ds = dSs[r * lds + ii];
                    if (ds != 0.0f) att_axpy_cols<NC>(dk, ds, Bs + ii * ldb, lane, D);
                }
            }
        if (r < nk) att_store_dkv_row<NC>(a, b, hk, j, lane, dk, dv);
    }
}

/* ---------------------------------------------------- tensor cores (ldmatrix + mma.sync) */
/* f16/bf16 with head dims that are multiples of 16 up to 128: the same masks, dropout and online
 * softmax as the FMA kernels, the products on tensor cores (ldmatrix + mma.sync m16n8k16, f32
 * accumulate, mma_sync.cuh): the forward and dq (64 query rows a block) and dk/dv (64 keys a block)
 * in registers. P (and dS) is rounded to the operand type before its product (as
 * in every flash-attention kernel); l sums the unrounded probabilities. Operands are copied to shared
 * memory as their raw 16-bit values, rows past the tile zero-filled; every tile starts a multiple of
 * 32 bytes from the dynamic shared memory base and every 16-bit row pitch is a multiple of 16 bytes
 * (ldmatrix's aligned row addresses) and an odd multiple of 4 words (the 8 rows of one 8x8 matrix
 * fall in 8 different bank quads).
 * One difference from the FMA kernels, shared with other tensor-core flash kernels: a product
 * multiplies whole tiles, so a NaN/Inf in V (forward), or in K (dq), of a key that is masked for
 * some rows reaches those rows as 0·NaN, as does one in Q or dout (dk/dv) of a query that is masked for
 * some keys; the FMA loops skip masked keys. Keys past the key length
 * are never loaded (zero-filled), so padding by kv_len stays clean on both paths. */
#define ATT_TC_BK 64
#define ATT_TC_WARPS (ATT_THREADS / 32)

static inline int att_tc_ok(const gpucore_attn_args *a)
{
    return (a->dtype == GPUCORE_KDT_F16 || a->dtype == GPUCORE_KDT_BF16) &&
           a->head_dim % 16 == 0 && a->head_dim_v % 16 == 0 && a->head_dim <= 128 && a->head_dim_v <= 128;
}

__device__ __forceinline__ uint16_t att_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint16_t att_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

/* Row r (0: l / 4, 1: l / 4 + 8) of a warp's accumulator blocks acc[n] (columns 8 n + 2 (l % 4) and the next),
 * times scale, into t[b, h, i, column] for columns below ncols. */
template <int NC>
__device__ __forceinline__ void att_store_acc_row(const gpucore_attn_tensor *t, int dt, int64_t b, int64_t h, int64_t i,
                                                  const float (&acc)[NC][4], int r, float scale, int ncols)
{
    const int c0 = 2 * (threadIdx.x % 4);
#pragma unroll
    for (int n = 0; n < NC; n++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (8 * n + c0 + e < ncols)
                gpucore_attn_store(t, dt, gpucore_attn_offset(t, b, h, i, 8 * n + c0 + e), acc[n][2 * r + e] * scale);
}

/* rows [row0, row0 + n) of t at (b, h) as raw 16-bit values into s[rows][ld], zero past n. */
__device__ __forceinline__ void att_load_raw(uint16_t *s, int ld, const gpucore_attn_tensor &t, int64_t b, int64_t h,
                                             int64_t row0, int64_t n, int rows, int cols)
{
    const uint16_t *src = (const uint16_t *)t.data;
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        const int r = e / cols, c = e % cols;
        s[r * ld + c] = r < n ? src[gpucore_attn_offset(&t, b, h, row0 + r, c)] : (uint16_t)0;
    }
}

/* Four blocks per SM for the forward up to head dim 64 (128 registers); unbounded, ptxas aims at 6
 * blocks (80 registers) on sm_80 for f16 and spills 52 bytes. */
#define ATT_TC_MIN_BLOCKS 4

/* The row kernels (forward and dq): a block owns ATT_TC_QROWS query rows of one (batch, head), warp w
 * rows 16w..16w+15, and keeps its products in registers in mma.sync's documented accumulator layout
 * (lane l: rows l / 4 and l / 4 + 8 of the warp's 16, columns 8 n + 2 (l % 4) and the next), so each
 * K and V tile in shared memory serves 64 query rows. Shared memory: Q [ATT_TC_QROWS][ldq], dout
 * [ATT_TC_QROWS][ldo] (dq only) and nkv K-or-V tiles [bk][ldkv] (two: the forward's cp.async path), 16-bit. */
#define ATT_TC_QROWS (16 * ATT_TC_WARPS)
struct att_tc_rows_layout {
    int ldq, ldo, ldkv;
    size_t o, kv, bytes; /* byte offsets of dout and the K/V tile (Q at 0) */
};
static __host__ __device__ inline att_tc_rows_layout att_tc_rows_plan(int64_t D, int64_t Dv, int dq, int bk, int nkv = 1)
{
    att_tc_rows_layout L;
    L.ldq = (int)D + 8; /* halves: +16 bytes, an odd multiple of 4 words (see above) */
    L.ldo = (int)Dv + 8;
    L.ldkv = (int)(D > Dv ? D : Dv) + 8;
    L.o = 2 * (size_t)ATT_TC_QROWS * L.ldq;
    L.kv = L.o + (dq ? 2 * (size_t)ATT_TC_QROWS * L.ldo : 0);
    L.bytes = L.kv + nkv * 2 * (size_t)bk * L.ldkv;
    return L;
}
/* The key tile of dq and of the forward's cp.async path: 64 keys up to head dim 64, 32 above (Q, dout and
 * one tile, or Q and two tiles, stay under 48 KiB at 128). */
template <int NC> __host__ __device__ constexpr int att_tc_rows_bk() { return NC <= 8 ? 64 : 32; }

/* c[2f + h] = the warp's 16 rows (a_row: this lane's ldmatrix row address in a row-major A) times
 * columns 16 f + 8 h .. + 7 of Bᵀ's rows bt (row n = column n of B), over nk16 steps of 16, for
 * f < nf (the blocks past nf are zero). */
template <typename T, int NF>
__device__ __forceinline__ void att_warp_abt(float (&c)[2 * NF][4], const T *a_row, const T *bt, int ldb, int nf, int nk16)
{
    const int lane = threadIdx.x % 32, bi = lane % 8, kh = 8 * ((lane / 8) & 1), nh = 8 * (lane / 16);
#pragma unroll
    for (int f = 0; f < NF; f++) {
#pragma unroll
        for (int e = 0; e < 4; e++) c[2 * f][e] = c[2 * f + 1][e] = 0.0f;
        if (f >= nf) continue;
        const T *b_row = bt + (16 * f + nh + bi) * ldb + kh;
        for (int kt = 0; kt < nk16; kt++) {
            uint32_t fa[4], fb[4];
            mma_ldsm<4>(fa, a_row + 16 * kt);
            mma_ldsm<4>(fb, b_row + 16 * kt);
            const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
            mma_m16n8k16<T>(c[2 * f], fa, b0);
            mma_m16n8k16<T>(c[2 * f + 1], fa, b1);
        }
    }
}

/* o[2 fo + h] += P B for 16-column blocks fo < ncols16: P the warp's 16 x (16 nk16) A fragments pa (from
 * att_pack_a), B's rows (row k = key) at B, transposed by ldmatrix .trans. */
template <typename T, int NO, int NK>
__device__ __forceinline__ void att_warp_pb(float (&o)[NO][4], const uint32_t (&pa)[NK][4], const T *B, int ldb, int ncols16,
                                            int nk16)
{
    const int lane = threadIdx.x % 32, bi = lane % 8, kh = 8 * ((lane / 8) & 1), nh = 8 * (lane / 16);
#pragma unroll
    for (int fo = 0; fo < NO / 2; fo++) {
        if (fo >= ncols16) break;
        const T *b_row = B + (kh + bi) * ldb + 16 * fo + nh;
#pragma unroll
        for (int f = 0; f < NK; f++) {
            if (f >= nk16) break;
            uint32_t fb[4];
            mma_ldsm_trans<4>(fb, b_row + 16 * f * ldb);
            const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
            mma_m16n8k16<T>(o[2 * fo], pa[f], b0);
            mma_m16n8k16<T>(o[2 * fo + 1], pa[f], b1);
        }
    }
}

/* pa = the A fragments (of a following product) of the values f(n, e, r, jj), raw 16-bit, over this lane's
 * accumulator elements: block n, element e, row r = e / 2 (0: l / 4, 1: l / 4 + 8), column jj =
 * 8 n + 2 (l % 4) + e % 2. Accumulator blocks 2f and 2f + 1 are one 16-column A block f. */
template <int NS, typename F> __device__ __forceinline__ void att_pack_a(uint32_t (&pa)[NS][4], F f)
{
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < 2 * NS; n++) {
        uint16_t v[4];
#pragma unroll
        for (int e = 0; e < 4; e++) v[e] = f(n, e, e / 2, 8 * n + 2 * t + e % 2);
        pa[n / 2][2 * (n % 2)] = (uint32_t)v[0] | (uint32_t)v[1] << 16;
        pa[n / 2][2 * (n % 2) + 1] = (uint32_t)v[2] | (uint32_t)v[3] << 16;
    }
}

/* A row kernel's block (att_qblock_of with ATT_TC_QROWS rows) and the lane's two rows. */
struct att_rows_block : att_qblock {
    int64_t row[2];
    bool ok[2];
};
__device__ __forceinline__ att_rows_block att_rows_block_of(const gpucore_attn_args &a, int64_t blk, int64_t nqt)
{
    att_rows_block q;
    static_cast<att_qblock &>(q) = att_qblock_of(a, blk, nqt, 0, ATT_TC_QROWS);
    for (int r = 0; r < 2; r++) {
        q.row[r] = q.i0 + 16 * (threadIdx.x / 32) + (threadIdx.x % 32) / 4 + 8 * r;
        q.ok[r] = q.row[r] < q.i0 + q.nq;
    }
    return q;
}

/* The unit-stride path of the row kernels, chosen on the host per operand: one with unit stride along
 * the head dim, a 16-byte aligned base and 16-byte multiple batch, head and row strides, so each row of a
 * tile is D / 8 (or Dv / 8) 16-byte chunks. */
static inline int att_tc_rows16(const gpucore_attn_tensor *t)
{
    return (uintptr_t)t->data % 16 == 0 && t->stride[3] == 1 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 &&
           t->stride[2] % 8 == 0;
}
static inline int att_tc_fwd_async_ok(const gpucore_attn_args *a)
{
    return att_tc_rows16(&a->q) && att_tc_rows16(&a->k) && att_tc_rows16(&a->v);
}

/* rows [0, n) of a unit-stride operand (src: its row 0 of the tile, rs: its row stride in elements) as
 * 16-byte cp.async chunks into s[rows][ld], rows [n, rows) zeroed by 16-byte shared stores. Thread tid
 * copies chunk tid % (cols / 8) of rows tid / (cols / 8) + k (ATT_THREADS / (cols / 8)): one division per
 * tile, a row's address one multiply-add. */
__device__ __forceinline__ void att_cp_tile(att_cp_pipe &p, uint16_t *s, int ld, const uint16_t *src, int64_t rs, int n,
                                            int rows, int cols)
{
    const int cpr = cols / 8, step = ATT_THREADS / cpr, c = threadIdx.x % cpr, r0 = threadIdx.x / cpr;
    if (r0 >= step) return; /* cols / 8 does not divide the block (D = 48, 80, ...): the rest idle */
    for (int r = r0; r < rows; r += step) {
        uint16_t *d = s + r * ld + 8 * c;
        if (r < n) att_cp16(p, d, src + r * rs + 8 * c);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* Row (b, h, row0) of a [B, H, S, D] operand: the tile's base, one 4-term offset per tile. */
__device__ __forceinline__ const uint16_t *att_row_ptr(const gpucore_attn_tensor &t, int64_t b, int64_t h, int64_t row0)
{
    return (const uint16_t *)t.data + gpucore_attn_offset(&t, b, h, row0, 0);
}

/* Rows [row0, row0 + n) of t at (b, h) into s[rows][ld] (zero past n): 16-byte cp.async (ASYNC; the caller
 * commits and waits) or element loads. */
template <bool ASYNC>
__device__ __forceinline__ void att_tile_in(att_cp_pipe &p, uint16_t *s, int ld, const gpucore_attn_tensor &t, int64_t b,
                                            int64_t h, int64_t row0, int n, int rows, int cols)
{
    if constexpr (ASYNC) att_cp_tile(p, s, ld, att_row_ptr(t, b, h, row0), t.stride[2], n, rows, cols);
    else att_load_raw(s, ld, t, b, h, row0, n, rows, cols);
}

/* The forward: per key tile S = Q Kᵀ (the warp's 16 x BK block), masks, bias and the online softmax per
 * element (the row max and sum over the 4 lanes of a row), P̃ = P keep rounded to the operand type as the
 * A fragments of P̃ V, then O = alpha O + P̃ V. NC bounds Dv (8: Dv <= 64, 16: Dv <= 128). A row with
 * nothing admitted yet (max -inf) changes nothing, as in attention_forward_kernel.
 * The softmax runs in base 2: s2 = dot · (scale log2 e) + bias log2 e (one FMA), P = exp2(s2 - m2), and
 * lse = m2 ln 2 + log l. Masks are evaluated only on tiles that need them: a tile is interior when there
 * is no u8/additive mask, it is full (BK keys below the key end, so the key length is past it) and, causal,
 * its last key is at or before the block's first query row; there every score is dot · scale log2 e.
 * ASYNC (att_tc_fwd_async_ok, decided on the host): Q, K and V tiles move by 16-byte cp.async
 * (attention_cp_async.h) into two tile buffers, V_j loading while S_j = Q K_jᵀ and its softmax run, K_{j+1}
 * while O += P̃ V_j, as FlashAttention-2's forward does; BK is att_tc_rows_bk (64 keys up to head dim 64,
 * 32 above, under 48 KiB); and when out16 (out has such rows too, also decided on the host) O is staged
 * through the tile buffers as 16-bit values and written 16 bytes a lane. Otherwise (any strides): one tile
 * buffer, BK = 64, element loads (att_load_raw); O by element stores unless out16.
 * Dv up to 128 (NC 16): 64 output and 32 score accumulators a thread; at four blocks per SM (128
 * registers) ptxas spills 60 bytes, at three (168) none. */
#define ATT_TC_ROWS_MIN_BLOCKS_WIDE 3
template <int NC, typename T, bool ASYNC>
__global__ void __launch_bounds__(ATT_THREADS, NC <= 8 ? ATT_TC_MIN_BLOCKS : ATT_TC_ROWS_MIN_BLOCKS_WIDE)
    attention_forward_tc_kernel(gpucore_attn_args a, int64_t nqt, int out16)
{
    extern __shared__ __align__(128) float attn_smem[]; /* the tiles' offsets are multiples of 32 bytes from here */
    enum { BK = ASYNC ? att_tc_rows_bk<NC>() : ATT_TC_BK, NS = BK / 16 };
    const int D = (int)a.head_dim, Dv = (int)a.head_dim_v;
    const att_tc_rows_layout L = att_tc_rows_plan(D, Dv, 0, BK, ASYNC ? 2 : 1);
    uint16_t *Qh = (uint16_t *)attn_smem, *Kh = (uint16_t *)((char *)attn_smem + L.kv);
    uint16_t *Vh = ASYNC ? Kh + BK * L.ldkv : Kh; /* the second tile buffer, or the one */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    const T *q_row = (const T *)Qh + (16 * warp + lane % 16) * L.ldq + 8 * (lane / 16);
    const float sl2 = a.scale * 1.4426950408889634f; /* scale · log2 e */
    const bool dropout = a.dropout_p > 0.0f, masked = a.mask_dtype != GPUCORE_ATTN_NO_MASK;
    att_cp_pipe pipe;
    const int64_t total = a.batch * a.heads * nqt;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const att_rows_block q = att_rows_block_of(a, blk, nqt);
        const int64_t b = q.b, h = q.h;
        const int64_t kend = gpucore_attn_key_end(&a, b, q.i0 + q.nq - 1);
        __syncthreads(); /* the previous block's readers are done */
        att_tile_in<ASYNC>(pipe, Qh, L.ldq, a.q, b, h, q.i0, (int)q.nq, ATT_TC_QROWS, D);
        if constexpr (ASYNC) {
            const int nk = (int)att_min(BK, kend);
            if (kend > 0) att_tile_in<ASYNC>(pipe, Kh, L.ldkv, a.k, b, q.hk, 0, nk, (nk + 15) / 16 * 16, D);
            att_cp_commit(pipe);
        }
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NC][4];
#pragma unroll
        for (int n = 0; n < NC; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int nk = (int)att_min(BK, kend - j0), nk16 = (nk + 15) / 16;
            if constexpr (ASYNC) {
                att_cp_wait_all(pipe);
                __syncthreads(); /* K_j (and Q) in; the previous tile's V readers are done */
                att_cp_tile(pipe, Vh, L.ldkv, att_row_ptr(a.v, b, q.hk, j0), a.v.stride[2], nk, nk16 * 16, Dv);
                att_cp_commit(pipe);
            } else {
                __syncthreads();
                att_load_raw(Kh, L.ldkv, a.k, b, q.hk, j0, nk, nk16 * 16, D);
                __syncthreads();
            }
            float sc[2 * NS][4];
            att_warp_abt<T, NS>(sc, q_row, (const T *)Kh, L.ldkv, nk16, D / 16);
            const bool interior = !masked && nk == BK && (!a.causal || j0 + BK - 1 <= q.i0);
            float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < 2 * NS; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e / 2, jj = 8 * n + 2 * t + e % 2;
                    float sv = sc[n][e] * sl2;
                    if (!interior) {
                        const float bias = q.ok[r] && jj < nk ? gpucore_attn_bias(&a, b, h, q.row[r], j0 + jj) : -INFINITY;
                        sv = bias == -INFINITY ? -INFINITY : fmaf(sc[n][e], sl2, bias * 1.4426950408889634f);
                    }
                    sc[n][e] = sv;
                    mt[r] = fmaxf(mt[r], sv);
                }
            float mn[2], alpha[2], lt[2] = {0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                for (int w = 1; w < 4; w *= 2) mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], w));
                mn[r] = fmaxf(m[r], mt[r]);
                alpha[r] = mn[r] == -INFINITY ? 1.0f : exp2f(m[r] - mn[r]);
            }
            uint32_t pa[NS][4];
            att_pack_a<NS>(pa, [&](int n, int e, int r, int jj) {
                const float p = mn[r] == -INFINITY ? 0.0f : exp2f(sc[n][e] - mn[r]);
                lt[r] += p;
                return att_bits((T)(dropout && p != 0.0f ? p * gpucore_attn_keep(&a, b, h, q.row[r], j0 + jj) : p));
            });
#pragma unroll
            for (int r = 0; r < 2; r++) {
                for (int w = 1; w < 4; w *= 2) lt[r] += __shfl_xor_sync(0xffffffffu, lt[r], w);
                if (mn[r] != -INFINITY) {
                    l[r] = l[r] * alpha[r] + lt[r];
                    m[r] = mn[r];
                }
            }
#pragma unroll
            for (int n = 0; n < NC; n++) {
                o[n][0] *= alpha[0], o[n][1] *= alpha[0];
                o[n][2] *= alpha[1], o[n][3] *= alpha[1];
            }
            if constexpr (ASYNC) {
                att_cp_wait_all(pipe);
                __syncthreads(); /* V_j in; K_j's readers are done */
                if (j0 + BK < kend) {
                    const int nn = (int)att_min(BK, kend - j0 - BK);
                    att_cp_tile(pipe, Kh, L.ldkv, att_row_ptr(a.k, b, q.hk, j0 + BK), a.k.stride[2], nn,
                                (nn + 15) / 16 * 16, D);
                    att_cp_commit(pipe);
                }
            } else {
                __syncthreads(); /* K's readers are done */
                att_load_raw(Vh, L.ldkv, a.v, b, q.hk, j0, nk, nk16 * 16, Dv);
                __syncthreads(); /* V is in */
            }
            att_warp_pb<T, NC, NS>(o, pa, (const T *)Vh, L.ldkv, Dv / 16, nk16);
        }
        if constexpr (ASYNC) att_cp_wait_all(pipe); /* no key tile (kend 0): Q's copies */
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            if (q.ok[r] && t == 0 && a.lse)
                a.lse[(b * a.heads + h) * a.seq_q + q.row[r]] = gpucore_attn_lse(m[r] * 0.6931471805599453f, l[r]);
        }
        if (ASYNC && out16) {
            /* The warp's 16 rows as 16-bit values into rows 16 warp.. of the tile buffers (2 BK >= 64 rows of
             * ldkv >= Dv + 8), then each lane writes 16-byte chunks of them. */
            __syncthreads(); /* every warp's V readers are done */
            uint16_t *os = Kh + 16 * warp * L.ldkv;
#pragma unroll
            for (int n = 0; n < NC; n++)
#pragma unroll
                for (int r = 0; r < 2; r++)
                    if (8 * n < Dv)
                        *(uint32_t *)(os + (lane / 4 + 8 * r) * L.ldkv + 8 * n + 2 * t) =
                            (uint32_t)att_bits((T)(o[n][2 * r] * inv[r])) |
                            (uint32_t)att_bits((T)(o[n][2 * r + 1] * inv[r])) << 16;
            __syncwarp();
            const int cpr = Dv / 8, step = 32 / cpr, c = lane % cpr;
            const int64_t rs = a.out.stride[2];
            uint16_t *dst = (uint16_t *)a.out.data + gpucore_attn_offset(&a.out, b, h, q.i0 + 16 * warp, 0);
            const int nrows = (int)att_min(16, q.nq - 16 * warp);
            if (lane / cpr < step)
                for (int r = lane / cpr; r < nrows; r += step)
                    *(uint4 *)(dst + r * rs + 8 * c) = *(const uint4 *)(os + r * L.ldkv + 8 * c);
        } else {
#pragma unroll
            for (int r = 0; r < 2; r++)
                if (q.ok[r]) att_store_acc_row<NC>(&a.out, a.dtype, b, h, q.row[r], o, r, inv[r], Dv);
        }
    }
}

/* dq: per key tile (att_tc_rows_bk keys) dP = dout Vᵀ and then S = Q Kᵀ (in that order, so the K tile
 * stays for dS K: each of K and V is read once per tile), dS = P (dP keep - D_i) scale per element,
 * rounded to the operand type (as P is in the forward) as the A fragments of dS K, added to the warp's
 * dq accumulators. NC bounds D. Three blocks per SM at both head-dim classes: at four (128 registers)
 * ptxas spills for NC 8 (8 bytes stored, 128 loaded: dP and S over 64 keys are 64 accumulators).
 * ASYNC (att_tc_bwd_async_ok, decided on the host): Q, dout, K and V move by 16-byte cp.async into a K and
 * a V buffer, K_j loading while dP_j = dout V_jᵀ runs and V_{j+1} while S_j, dS_j and dq += dS_j K_j run (as
 * the forward's pipeline); at head dim 128 Q, dout and the two 32-key tiles take 51 KiB, over the default
 * 48 KiB limit, which the launcher raises. Otherwise one tile buffer filled by element loads. */
template <int NC, typename T, bool ASYNC>
__global__ void __launch_bounds__(ATT_THREADS, ATT_TC_ROWS_MIN_BLOCKS_WIDE) attention_dq_tc_kernel(gpucore_attn_args a, int64_t nqt)
{
    extern __shared__ __align__(128) float attn_smem[]; /* the tiles' offsets are multiples of 32 bytes from here */
    enum { BK = att_tc_rows_bk<NC>(), NS = BK / 16 };
    const int D = (int)a.head_dim, Dv = (int)a.head_dim_v;
    const att_tc_rows_layout L = att_tc_rows_plan(D, Dv, 1, BK, ASYNC ? 2 : 1);
    uint16_t *Qh = (uint16_t *)attn_smem, *dOh = (uint16_t *)((char *)attn_smem + L.o);
    uint16_t *Kh = (uint16_t *)((char *)attn_smem + L.kv);
    uint16_t *Vh = ASYNC ? Kh + BK * L.ldkv : Kh; /* the second tile buffer, or the one */
    att_cp_pipe pipe;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int a_off = (16 * warp + lane % 16), a_col = 8 * (lane / 16);
    const T *q_row = (const T *)Qh + a_off * L.ldq + a_col, *do_row = (const T *)dOh + a_off * L.ldo + a_col;
    const int64_t total = a.batch * a.heads * nqt;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const att_rows_block q = att_rows_block_of(a, blk, nqt);
        const int64_t b = q.b, h = q.h;
        float Di[2], lse[2], acc[NC][4];
        for (int r = 0; r < 2; r++) {
            const int64_t at = (b * a.heads + h) * a.seq_q + q.row[r];
            Di[r] = q.ok[r] ? a.delta[at] : 0.0f;
            lse[r] = q.ok[r] ? a.lse[at] : -INFINITY;
        }
#pragma unroll
        for (int n = 0; n < NC; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        const int64_t kend = gpucore_attn_key_end(&a, b, q.i0 + q.nq - 1);
        __syncthreads(); /* the previous block's readers are done */
        att_tile_in<ASYNC>(pipe, Qh, L.ldq, a.q, b, h, q.i0, (int)q.nq, ATT_TC_QROWS, D);
        att_tile_in<ASYNC>(pipe, dOh, L.ldo, a.dout, b, h, q.i0, (int)q.nq, ATT_TC_QROWS, Dv);
        if constexpr (ASYNC) {
            const int nk = (int)att_min(BK, kend);
            if (kend > 0) att_tile_in<ASYNC>(pipe, Vh, L.ldkv, a.v, b, q.hk, 0, nk, (nk + 15) / 16 * 16, Dv);
            att_cp_commit(pipe);
        }
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            const int nk = (int)att_min(BK, kend - j0), nk16 = (nk + 15) / 16;
            if constexpr (ASYNC) {
                att_cp_wait_all(pipe);
                __syncthreads(); /* V_j (and Q, dout) in; the previous tile's K readers are done */
                att_tile_in<ASYNC>(pipe, Kh, L.ldkv, a.k, b, q.hk, j0, nk, nk16 * 16, D);
                att_cp_commit(pipe);
            } else {
                __syncthreads();
                att_tile_in<ASYNC>(pipe, Vh, L.ldkv, a.v, b, q.hk, j0, nk, nk16 * 16, Dv);
                __syncthreads();
            }
            float dp[2 * NS][4], sc[2 * NS][4];
            att_warp_abt<T, NS>(dp, do_row, (const T *)Vh, L.ldkv, nk16, Dv / 16);
            if constexpr (ASYNC) {
                att_cp_wait_all(pipe);
                __syncthreads(); /* K_j in; V_j's readers are done */
                if (j0 + BK < kend) {
                    const int nn = (int)att_min(BK, kend - j0 - BK);
                    att_tile_in<ASYNC>(pipe, Vh, L.ldkv, a.v, b, q.hk, j0 + BK, nn, (nn + 15) / 16 * 16, Dv);
                    att_cp_commit(pipe);
                }
            } else {
                __syncthreads(); /* V's readers are done */
                att_tile_in<ASYNC>(pipe, Kh, L.ldkv, a.k, b, q.hk, j0, nk, nk16 * 16, D);
                __syncthreads();
            }
            att_warp_abt<T, NS>(sc, q_row, (const T *)Kh, L.ldkv, nk16, D / 16);
            uint32_t dsa[NS][4];
            att_pack_a<NS>(dsa, [&](int n, int e, int r, int jj) {
                float ds = 0.0f;
                if (q.ok[r] && jj < nk) {
                    const float bias = gpucore_attn_bias(&a, b, h, q.row[r], j0 + jj);
                    const float p = bias == -INFINITY ? 0.0f : gpucore_attn_exp(gpucore_attn_score(&a, sc[n][e], bias), lse[r]);
                    if (p != 0.0f) ds = p * (dp[n][e] * gpucore_attn_keep(&a, b, h, q.row[r], j0 + jj) - Di[r]);
                }
                return att_bits((T)(ds * a.scale));
            });
            att_warp_pb<T, NC, NS>(acc, dsa, (const T *)Kh, L.ldkv, D / 16, nk16);
        }
        if constexpr (ASYNC) att_cp_wait_all(pipe); /* no key tile (kend 0): Q's and dout's copies */
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (q.ok[r]) att_store_acc_row<NC>(&a.dq, a.dtype, b, h, q.row[r], acc, r, 1.0f, D);
    }
}

/* dk and dv on tensor cores, FlashAttention-2's backward for one key block: a block owns ATT_TC_KROWS = 64
 * keys of one kv head, warp w keys 16w..16w+15 (K and V in shared memory for the whole block), and walks the
 * group's query heads and BQ-row query tiles (att_tc_rows_bk: 64 up to head dim 64, 32 above). Per tile,
 * each warp computes Sᵀ = K Qᵀ (its 16 keys x BQ queries) in registers, Pᵀ = exp2(Sᵀ scale log2 e + bias
 * log2 e - lse_i log2 e) per element, P̃ᵀ = Pᵀ keep rounded to the operand type as the A fragments of
 * dv += P̃ᵀ dout; then dPᵀ = V doutᵀ in registers, dSᵀ = Pᵀ (dPᵀ keep - D_i) scale rounded as the A fragments
 * of dk += dSᵀ Q. dk and dv stay in the mma accumulators across every tile (no shared-memory round trip);
 * masks, bias and the key/query ends are evaluated only on tiles that need them (as in the forward).
 * ASYNC (att_tc_bwd_async_ok, decided on the host): K, V and each tile's Q, dout, lse and D move by cp.async
 * (16-byte rows, 4-byte lse/D) into two tile stages, tile t + 1 loading while tile t is computed; otherwise
 * one stage filled by element loads. Shared memory (att_tc_dkv_plan), 16-bit rows of pitch dim + 8 (see
 * above): K [64][D + 8], V [64][Dv + 8], then per stage Q [BQ][D + 8], dout [BQ][Dv + 8], lse [BQ], D [BQ]
 * (f32). ASYNC at head dim 64 (BQ 64): 18 KiB + 2 x 18.5 KiB = 55 KiB; at 128 (BQ 32): 34 KiB + 2 x 17.25
 * KiB = 68.5 KiB: over 48 KiB, so the launcher raises the kernel's dynamic shared memory limit. */
#define ATT_TC_KROWS (16 * ATT_TC_WARPS)
struct att_tc_dkv_layout {
    int ldk, ldv;
    size_t v, stage0, o, stats, stage, bytes; /* V, stage 0, and within a stage dout and lse/D (Q at 0) */
};
static __host__ __device__ inline att_tc_dkv_layout att_tc_dkv_plan(int64_t D, int64_t Dv, int bq, int nstages)
{
    att_tc_dkv_layout L;
    L.ldk = (int)D + 8;
    L.ldv = (int)Dv + 8;
    L.v = 2 * (size_t)ATT_TC_KROWS * L.ldk;
    L.stage0 = L.v + 2 * (size_t)ATT_TC_KROWS * L.ldv;
    L.o = 2 * (size_t)bq * L.ldk;
    L.stats = L.o + 2 * (size_t)bq * L.ldv;
    L.stage = L.stats + sizeof(float) * 2 * bq;
    L.bytes = L.stage0 + nstages * L.stage;
    return L;
}
/* The backward's cp.async paths (dq and dk/dv): q, k, v and dout with 16-byte rows. */
static inline int att_tc_bwd_async_ok(const gpucore_attn_args *a)
{
    return att_tc_fwd_async_ok(a) && att_tc_rows16(&a->dout);
}

/* One query tile of the dk/dv kernel: head h, rows [i0, i0 + nq) into stage s (Q, dout, lse and D). */
template <bool ASYNC>
__device__ __forceinline__ void att_dkv_load_tile(att_cp_pipe &pipe, char *s, const att_tc_dkv_layout &L,
                                                  const gpucore_attn_args &a, int64_t b, int64_t h, int64_t i0, int nq,
                                                  int bq)
{
    const int D = (int)a.head_dim, Dv = (int)a.head_dim_v, rows = (nq + 15) / 16 * 16;
    uint16_t *Qh = (uint16_t *)s, *dOh = (uint16_t *)(s + L.o);
    float *lse = (float *)(s + L.stats), *Di = lse + bq;
    att_tile_in<ASYNC>(pipe, Qh, L.ldk, a.q, b, h, i0, nq, rows, D);
    att_tile_in<ASYNC>(pipe, dOh, L.ldv, a.dout, b, h, i0, nq, rows, Dv);
    if constexpr (ASYNC) {
        const int64_t row = (b * a.heads + h) * a.seq_q + i0;
        for (int t = threadIdx.x; t < 2 * bq; t += ATT_THREADS)
            if (t % bq < nq) att_cp4(pipe, lse + t, (t < bq ? a.lse : a.delta) + row + t % bq);
        att_cp_commit(pipe);
    } else {
        att_row_dots(a, b, h, i0, nq, bq, Di, lse);
    }
}

/* NC bounds D and Dv. Two blocks per SM (255 registers): dk and dv are 2 NC x 4 accumulators a thread. */
#define ATT_TC_DKV_MIN_BLOCKS 2
template <int NC, typename T, bool ASYNC>
__global__ void __launch_bounds__(ATT_THREADS, ATT_TC_DKV_MIN_BLOCKS) attention_dkv_tc_kernel(gpucore_attn_args a, int64_t nkt)
{
    extern __shared__ __align__(128) float attn_smem[]; /* the tiles' offsets are multiples of 32 bytes from here */
    enum { BQ = att_tc_rows_bk<NC>(), NS = BQ / 16 };
    const int D = (int)a.head_dim, Dv = (int)a.head_dim_v;
    const int64_t G = a.heads / a.kv_heads;
    const att_tc_dkv_layout L = att_tc_dkv_plan(D, Dv, BQ, ASYNC ? 2 : 1);
    char *base = (char *)attn_smem;
    uint16_t *Kh = (uint16_t *)base, *Vh = (uint16_t *)(base + L.v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int a_off = 16 * warp + lane % 16, a_col = 8 * (lane / 16);
    const T *k_row = (const T *)Kh + a_off * L.ldk + a_col, *v_row = (const T *)Vh + a_off * L.ldv + a_col;
    const float sl2 = a.scale * 1.4426950408889634f; /* scale · log2 e */
    const bool dropout = a.dropout_p > 0.0f, masked = a.mask_dtype != GPUCORE_ATTN_NO_MASK;
    att_cp_pipe pipe;
    const int64_t total = a.batch * a.kv_heads * nkt;
    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const int64_t bh = blk / nkt, b = bh / a.kv_heads, hk = bh % a.kv_heads, j0 = (blk % nkt) * ATT_TC_KROWS;
        const int nk = (int)att_min(ATT_TC_KROWS, a.seq_k - j0);
        const int64_t valid = gpucore_attn_kv_valid(&a, b);
        const int nkv = valid > j0 ? (int)att_min(nk, valid - j0) : 0; /* keys below kv_len get gradients */
        const int64_t qbeg = gpucore_attn_query_begin(&a, j0);
        /* the lane's two keys (accumulator rows l / 4 and l / 4 + 8 of the warp's 16) */
        int kr[2];
        for (int r = 0; r < 2; r++) kr[r] = 16 * warp + lane / 4 + 8 * r;
        float dk[NC][4], dv[NC][4];
#pragma unroll
        for (int n = 0; n < NC; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
        __syncthreads(); /* the previous block's readers are done */
        att_tile_in<ASYNC>(pipe, Kh, L.ldk, a.k, b, hk, j0, nk, ATT_TC_KROWS, D);
        att_tile_in<ASYNC>(pipe, Vh, L.ldv, a.v, b, hk, j0, nk, ATT_TC_KROWS, Dv);
        /* the tiles (h, i0), flattened: tile it is head hk G + it / nqt, rows qbeg + (it % nqt) BQ */
        const int64_t nqt = nkv > 0 && qbeg < a.seq_q ? (a.seq_q - qbeg + BQ - 1) / BQ : 0, ntiles = G * nqt;
        if (ASYNC && ntiles > 0)
            att_dkv_load_tile<ASYNC>(pipe, base + L.stage0, L, a, b, hk * G, qbeg, (int)att_min(BQ, a.seq_q - qbeg), BQ);
        else if (ASYNC) att_cp_commit(pipe);
        for (int64_t it = 0; it < ntiles; it++) {
            const int64_t h = hk * G + it / nqt, i0 = qbeg + (it % nqt) * BQ;
            const int nq = (int)att_min(BQ, a.seq_q - i0), nq16 = (nq + 15) / 16;
            char *stage = base + L.stage0 + (ASYNC ? (it % 2) * L.stage : 0);
            if constexpr (ASYNC) {
                att_cp_wait_all(pipe);
                __syncthreads(); /* tile it (and K, V) in; tile it - 1's readers are done with the other stage */
                if (it + 1 < ntiles) {
                    const int64_t h1 = hk * G + (it + 1) / nqt, i1 = qbeg + ((it + 1) % nqt) * BQ;
                    att_dkv_load_tile<ASYNC>(pipe, base + L.stage0 + ((it + 1) % 2) * L.stage, L, a, b, h1, i1,
                                             (int)att_min(BQ, a.seq_q - i1), BQ);
                }
            } else {
                __syncthreads(); /* the previous tile's readers are done */
                att_dkv_load_tile<ASYNC>(pipe, stage, L, a, b, h, i0, nq, BQ);
                __syncthreads();
            }
            const uint16_t *Qh = (const uint16_t *)stage, *dOh = (const uint16_t *)(stage + L.o);
            const float *lse = (const float *)(stage + L.stats), *Di = lse + BQ;
            /* a tile without masks: no mask, every key of the block below kv_len, a full query tile and,
             * causal, the block's last key at or before the tile's first row */
            const bool interior = !masked && nkv == ATT_TC_KROWS && nq == BQ && (!a.causal || j0 + ATT_TC_KROWS - 1 <= i0);
            float st[2 * NS][4];
            att_warp_abt<T, NS>(st, k_row, (const T *)Qh, L.ldk, nq16, D / 16);
            uint32_t pa[NS][4];
            att_pack_a<NS>(pa, [&](int n, int e, int r, int ii) {
                const float l2 = lse[ii] * 1.4426950408889634f;
                float p;
                if (interior) {
                    p = exp2f(fmaf(st[n][e], sl2, -l2));
                } else {
                    const float bias = kr[r] < nkv && ii < nq ? gpucore_attn_bias(&a, b, h, i0 + ii, j0 + kr[r]) : -INFINITY;
                    p = bias == -INFINITY ? 0.0f : exp2f(fmaf(st[n][e], sl2, fmaf(bias, 1.4426950408889634f, -l2)));
                }
                st[n][e] = p; /* P, kept for dS */
                return att_bits((T)(dropout && p != 0.0f ? p * gpucore_attn_keep(&a, b, h, i0 + ii, j0 + kr[r]) : p));
            });
            att_warp_pb<T, NC, NS>(dv, pa, (const T *)dOh, L.ldv, Dv / 16, nq16); /* dv += P̃ᵀ dout */
            float dp[2 * NS][4];
            att_warp_abt<T, NS>(dp, v_row, (const T *)dOh, L.ldv, nq16, Dv / 16);
            att_pack_a<NS>(pa, [&](int n, int e, int r, int ii) {
                const float p = st[n][e];
                float ds = 0.0f;
                if (p != 0.0f)
                    ds = p * ((dropout ? dp[n][e] * gpucore_attn_keep(&a, b, h, i0 + ii, j0 + kr[r]) : dp[n][e]) - Di[ii]);
                return att_bits((T)(ds * a.scale));
            });
            att_warp_pb<T, NC, NS>(dk, pa, (const T *)Qh, L.ldk, D / 16, nq16); /* dk += dSᵀ Q */
        }
        if constexpr (ASYNC) att_cp_wait_all(pipe); /* no tile: K's and V's copies */
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (kr[r] < nk) {
                if (a.dk.data) att_store_acc_row<NC>(&a.dk, a.dtype, b, hk, j0 + kr[r], dk, r, 1.0f, D);
                if (a.dv.data) att_store_acc_row<NC>(&a.dv, a.dtype, b, hk, j0 + kr[r], dv, r, 1.0f, Dv);
            }
    }
}

/* A kernel's dynamic shared memory limit raised to bytes where they pass the default 48 KiB (the backward's
 * cp.async paths take at most 70 KiB: sm_80 allows 163, sm_90 227). */
static int att_tc_smem_limit(void (*kernel)(gpucore_attn_args, int64_t), size_t bytes)
{
    if (bytes <= 48 * 1024) return 0;
    return (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* The tensor-core forward, or the tensor-core dq and dk, dv. */
template <int NC, typename T> static int attention_launch_tc(const gpucore_launch *l, const gpucore_attn_args *a)
{
    const int64_t nqt = (a->seq_q + ATT_TC_QROWS - 1) / ATT_TC_QROWS;
    unsigned grid = gpucore_grid_for(a->batch * a->heads * nqt * ATT_THREADS, ATT_THREADS, l->sm_count);
    if (a->op == GPUCORE_ATTN_FWD) {
        const int out16 = att_tc_rows16(&a->out);
        if (att_tc_fwd_async_ok(a)) {
            const size_t bytes = att_tc_rows_plan(a->head_dim, a->head_dim_v, 0, att_tc_rows_bk<NC>(), 2).bytes;
            void (*const attention_forward_tc)(gpucore_attn_args, int64_t, int) = attention_forward_tc_kernel<NC, T, true>;
            GPUCORE_LAUNCH(attention_forward_tc, grid, ATT_THREADS, bytes, l->stream, *a, nqt, out16);
            return GPUCORE_LAUNCH_STATUS();
        }
        const size_t bytes = att_tc_rows_plan(a->head_dim, a->head_dim_v, 0, ATT_TC_BK).bytes;
        void (*const attention_forward_tc)(gpucore_attn_args, int64_t, int) = attention_forward_tc_kernel<NC, T, false>;
        GPUCORE_LAUNCH(attention_forward_tc, grid, ATT_THREADS, bytes, l->stream, *a, nqt, 0);
        return GPUCORE_LAUNCH_STATUS();
    }
    int derr = attention_delta_launch(l, a);
    if (derr) return derr;
    if (a->dq.data) {
        const int async = att_tc_bwd_async_ok(a);
        const size_t bytes = att_tc_rows_plan(a->head_dim, a->head_dim_v, 1, att_tc_rows_bk<NC>(), async ? 2 : 1).bytes;
        void (*const attention_dq_tc)(gpucore_attn_args, int64_t) =
            async ? attention_dq_tc_kernel<NC, T, true> : attention_dq_tc_kernel<NC, T, false>;
        int serr = att_tc_smem_limit(attention_dq_tc, bytes);
        if (serr) return serr;
        GPUCORE_LAUNCH(attention_dq_tc, grid, ATT_THREADS, bytes, l->stream, *a, nqt);
        int err = GPUCORE_LAUNCH_STATUS();
        if (err) return err;
    }
    if ((a->dk.data || a->dv.data) && a->seq_k > 0) {
        const int64_t nkt = (a->seq_k + ATT_TC_KROWS - 1) / ATT_TC_KROWS;
        const int async = att_tc_bwd_async_ok(a);
        const size_t bytes = att_tc_dkv_plan(a->head_dim, a->head_dim_v, att_tc_rows_bk<NC>(), async ? 2 : 1).bytes;
        unsigned kgrid = gpucore_grid_for(a->batch * a->kv_heads * nkt * ATT_THREADS, ATT_THREADS, l->sm_count);
        void (*const attention_dkv_tc)(gpucore_attn_args, int64_t) =
            async ? attention_dkv_tc_kernel<NC, T, true> : attention_dkv_tc_kernel<NC, T, false>;
        int serr = att_tc_smem_limit(attention_dkv_tc, bytes);
        if (serr) return serr;
        GPUCORE_LAUNCH(attention_dkv_tc, kgrid, ATT_THREADS, bytes, l->stream, *a, nkt);
        return GPUCORE_LAUNCH_STATUS();
    }
    return 0;
}

template <int NC> static int attention_launch(const gpucore_launch *l, const gpucore_attn_args *a)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v, dmax = D > Dv ? D : Dv;
    const int64_t nqt = (a->seq_q + ATT_ROWS - 1) / ATT_ROWS;
    if (a->op == GPUCORE_ATTN_FWD) {
        const int BK = att_tile(NC, 0);
        size_t smem = sizeof(float) * (size_t)(ATT_ROWS * (D + 1) + BK * (dmax + 1) + 2 * ATT_ROWS * (BK + 1));
        unsigned grid = gpucore_grid_for(a->batch * a->heads * nqt * ATT_THREADS, ATT_THREADS, l->sm_count);
        GPUCORE_LAUNCH(attention_forward_kernel<NC>, grid, ATT_THREADS, smem, l->stream, *a, BK, nqt);
        return GPUCORE_LAUNCH_STATUS();
    }
    int derr = attention_delta_launch(l, a);
    if (derr) return derr;
    const int T = att_tile(NC, 1);
    if (a->dq.data) {
        size_t smem = sizeof(float) * (size_t)(ATT_ROWS * (D + 1) + ATT_ROWS * (Dv + 1) + T * (dmax + 1) +
                                               ATT_ROWS * (T + 1) + 2 * ATT_ROWS);
        unsigned grid = gpucore_grid_for(a->batch * a->heads * nqt * ATT_THREADS, ATT_THREADS, l->sm_count);
        GPUCORE_LAUNCH(attention_dq_kernel<NC>, grid, ATT_THREADS, smem, l->stream, *a, T, nqt);
        int err = GPUCORE_LAUNCH_STATUS();
        if (err) return err;
    }
    if ((a->dk.data || a->dv.data) && a->seq_k > 0) {
        size_t smem = sizeof(float) * (size_t)(ATT_ROWS * (D + 1) + ATT_ROWS * (Dv + 1) + T * (dmax + 1) +
                                               2 * ATT_ROWS * (T + 1) + 2 * T);
        const int64_t nkt = (a->seq_k + ATT_ROWS - 1) / ATT_ROWS;
        unsigned grid = gpucore_grid_for(a->batch * a->kv_heads * nkt * ATT_THREADS, ATT_THREADS, l->sm_count);
        GPUCORE_LAUNCH(attention_dkv_kernel<NC>, grid, ATT_THREADS, smem, l->stream, *a, T, nkt);
        return GPUCORE_LAUNCH_STATUS();
    }
    return 0;
}

extern "C" int gpucore_kernel_attention(const gpucore_launch *launch, const gpucore_attn_args *args)
{
    const int64_t dmax = args->head_dim > args->head_dim_v ? args->head_dim : args->head_dim_v;
    if (att_tc_ok(args)) {
        if (args->dtype == GPUCORE_KDT_F16)
            return dmax <= 64 ? attention_launch_tc<8, __half>(launch, args) : attention_launch_tc<16, __half>(launch, args);
        return dmax <= 64 ? attention_launch_tc<8, __nv_bfloat16>(launch, args)
                          : attention_launch_tc<16, __nv_bfloat16>(launch, args);
    }
    if (dmax <= 8 * ATT_LANES) return attention_launch<8>(launch, args);
    if (dmax <= 16 * ATT_LANES) return attention_launch<16>(launch, args);
    return attention_launch<32>(launch, args);
}
