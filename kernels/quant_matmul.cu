/*
 * quant_matmul.cu — a GEMM whose weight W [N, K] is a quantized matrix (quant_formats.h), read
 * block by block and never materialised: quant_matmul.h's forward y = act(x·Wᵀ + bias) (aux the
 * pre-activation) and backward-data y = x·W + beta·y.
 *
 * Every W element is dequantized in f32 as gpucore_quant_value computes it and rounded to the
 * compute dtype (f32 leaves it exact); products accumulate in f32; the sum (+ bias, activation,
 * + beta·y) is rounded once. W is read in runs of 8 consecutive values of one row, each value
 * handed to the caller as it is made (qmm_run: NF4/FP4 a nibble each, the absmax of each value's
 * block reloaded where a block starts inside the run, as blocks run over the flattened matrix;
 * INT8_ROW its row scale; the GGUF formats gpucore_gguf_dequant_one on the run's block, whole
 * blocks to a row).
 *
 *   qmm_tile_kernel   any m, both directions: a CTA of 128 threads owns a 64 x 64 output tile and
 *                     walks the reduction in steps of 32: the x tile [64 x 32] and the W piece
 *                     dequantized straight into shared memory in the compute dtype (forward: the
 *                     tile's 64 W rows x 32 columns, stored [n][k]; backward: 32 W rows of the
 *                     reduction x the tile's 64 columns, stored [k][n]). f16/bf16: tensor cores,
 *                     each warp 16 rows x 64 columns, ldmatrix + mma.sync m16n8k16 (f32
 *                     accumulate, mma_sync.cuh; the W piece read with .trans in the backward); f32:
 *                     FMA, each thread 8 rows x 4 columns. Tiles are grid-strided (W tile index
 *                     slowest, so neighbouring CTAs share a W piece in cache).
 *   qmm_gemv_kernel   forward with m <= 4 (decode): a warp per W row; lane l takes the runs at
 *                     columns 8 l + 256 t, multiplies each with the m rows of x (read from
 *                     global memory) and the lanes' sums meet by __shfl_xor_sync; lane r writes y's
 *                     row r.
 * Row pitches of the 16-bit tiles are multiples of 16 bytes (ldmatrix) and odd multiples of 4 words
 * (the 8 rows of an 8x8 matrix fall in different bank quads). Shared memory is static (< 20 KiB).
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "elementwise_math.h"
#include "quant_formats.h"
#include "quant_matmul.h"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "mma_sync.cuh"
#include <type_traits>

#define QMM_THREADS 128
#define QMM_BM 64   /* output rows (rows of x) per tile */
#define QMM_BN 64   /* output columns per tile */
#define QMM_BK 32   /* reduction step */
#define QMM_RUN 8   /* W values dequantized together */
#define QMM_GEMV_MAX_M 4
/* CTAs of the tile kernel an SM must hold: registers up to 128 a thread (with the bare thread bound, ptxas
 * held it to 72 and spilled) */
#define QMM_MIN_BLOCKS 4

__device__ __forceinline__ int qmm_log2(int64_t b)
{
    int s = 0;
    while (((int64_t)1 << s) < b) s++;
    return s;
}

/* put(j, W[row, c0 + j]) in f32 for j < cnt; nothing past the last row. c0 is a multiple of 8 (so a
 * GGUF run lies in one block). */
template <typename F>
__device__ __forceinline__ void qmm_run(const gpucore_qmm_args &a, const float *codes, int shift, int64_t row,
                                        int64_t c0, int cnt, F put)
{
    const gpucore_quant_layout &L = a.L; /* read from the kernel's parameters where used, not held in registers */
    if (row >= L.rows) return;
    const int64_t i0 = row * L.cols + c0;
    switch (L.fmt) {
    case GPUCORE_QF_NF4:
    case GPUCORE_QF_FP4: {
        const int64_t bmask = ((int64_t)1 << shift) - 1;
        float absmax = 0.0f;
        for (int j = 0; j < cnt; j++) {
            const int64_t i = i0 + j;
            if (j == 0 || (i & bmask) == 0) absmax = gpucore_q_f32_at(a.w + L.scale_off + 4 * (i >> shift));
            const uint8_t byte = a.w[i >> 1];
            put(j, GPUCORE_QMUL(codes[(i & 1) ? (byte & 0x0f) : (byte >> 4)], absmax));
        }
        break;
    }
    case GPUCORE_QF_INT8_ROW: {
        const float scb = gpucore_q_f32_at(a.w + L.scale_off + 4 * row);
        for (int j = 0; j < cnt; j++) put(j, gpucore_q_int8_row_value((int8_t)a.w[i0 + j], scb));
        break;
    }
    default: {
        const uint8_t *b = a.w + (i0 >> shift) * gpucore_gguf_block_bytes(L.fmt);
        const int off = (int)(i0 & (((int64_t)1 << shift) - 1));
        for (int j = 0; j < cnt; j++) put(j, gpucore_gguf_dequant_one(L.fmt, b, off + j));
        break;
    }
    }
}

/* The 4-bit code book into shared memory (the caller synchronises before the first qmm_run); returns log2
 * of W's block (a power of two for every format but INT8_ROW, which does not use it). */
__device__ __forceinline__ int qmm_setup(const gpucore_qmm_args &a, float *codes)
{
    if (threadIdx.x == 0 && (a.L.fmt == GPUCORE_QF_NF4 || a.L.fmt == GPUCORE_QF_FP4))
#pragma unroll
        for (int k = 0; k < 16; k++) codes[k] = gpucore_q4_code(a.L.fmt, k); /* constant indices: no local array */
    return a.L.fmt == GPUCORE_QF_INT8_ROW ? 0 : qmm_log2(a.L.block);
}

/* Output element (i, j) of the finished sum acc: forward y = act(acc + bias[j]) and aux = acc + bias[j];
 * backward y = acc + beta·y. Rounded once to DT. */
template <int DT>
__device__ __forceinline__ void qmm_store(const gpucore_qmm_args &a, int64_t i, int64_t j, int64_t ncols, float acc)
{
    if (i >= a.m || j >= ncols) return;
    if (a.transpose) {
        if (a.beta != 0.0f) acc += a.beta * gpucore_ld<DT>(a.y, i * a.ldy + j);
        gpucore_st<DT>(a.y, i * a.ldy + j, acc);
        return;
    }
    const float pre = a.bias ? acc + gpucore_ld<DT>(a.bias, j) : acc;
    if (a.aux) gpucore_st<DT>(a.aux, i * a.ldaux + j, pre);
    gpucore_st<DT>(a.y, i * a.ldy + j, a.act ? gpucore_act_apply(a.act, pre) : pre);
}

template <int DT> __device__ __forceinline__ typename gpucore_dt<DT>::T qmm_to(float v)
{
    return gpucore_dt<DT>::store(v);
}

/* ------------------------------------------------------------------ tile kernel */
/* S: what shared memory holds (the dtype's storage: raw 16-bit values for the tensor cores). */
template <int DT, bool BWD>
__global__ void __launch_bounds__(QMM_THREADS, QMM_MIN_BLOCKS)
    qmm_tile_kernel(gpucore_qmm_args a, int64_t tiles_m, int64_t tiles)
{
    typedef typename gpucore_dt<DT>::T S;
    constexpr bool TC = DT != GPUCORE_KDT_F32;
    constexpr int LDA = TC ? QMM_BK + 8 : QMM_BK + 1;
    constexpr int BROWS = BWD ? QMM_BK : QMM_BN, BCOLS = BWD ? QMM_BN : QMM_BK;
    constexpr int LDB = TC ? BCOLS + 8 : BCOLS + 1;
    __shared__ __align__(16) S As[QMM_BM * LDA];
    __shared__ __align__(16) S Bs[BROWS * LDB];
    __shared__ float codes[16];
    const int shift = qmm_setup(a, codes);
    const int tid = threadIdx.x;
    const int64_t R = BWD ? a.L.rows : a.L.cols, NO = BWD ? a.L.cols : a.L.rows; /* reduction, output columns */
    const S *x = (const S *)a.x;

    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int64_t i0 = (t % tiles_m) * QMM_BM, j0 = (t / tiles_m) * QMM_BN;
        float acc[8][4]; /* TC: 8 n8 blocks of a warp's 16 rows; FMA: 8 rows x 4 columns */
#pragma unroll
        for (int p = 0; p < 8; p++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[p][q] = 0.0f;

        for (int64_t r0 = 0; r0 < R; r0 += QMM_BK) {
            __syncthreads(); /* the previous step's readers are done (and the code book is written) */
            /* x [64 x 32]: element e = r + 32 i, coalesced along the row */
            for (int e = tid; e < QMM_BM * QMM_BK; e += QMM_THREADS) {
                const int r = e % QMM_BK, i = e / QMM_BK;
                As[i * LDA + r] = (i0 + i < a.m && r0 + r < R) ? x[(i0 + i) * a.ldx + r0 + r] : (S)0;
            }
            /* the W piece: 256 runs of 8 */
            for (int u = tid; u < BROWS * (BCOLS / QMM_RUN); u += QMM_THREADS) {
                const int rr = u / (BCOLS / QMM_RUN), cc = u % (BCOLS / QMM_RUN);
                const int64_t wrow = (BWD ? r0 : j0) + rr, wcol = (BWD ? j0 : r0) + QMM_RUN * cc;
                const int64_t wcols = a.L.cols - wcol;
                S *dst = Bs + rr * LDB + QMM_RUN * cc;
#pragma unroll
                for (int j = 0; j < QMM_RUN; j++) dst[j] = (S)0;
                qmm_run(a, codes, shift, wrow, wcol, (int)(wcols < QMM_RUN ? wcols : QMM_RUN),
                        [&](int j, float v) { dst[j] = qmm_to<DT>(v); });
            }
            __syncthreads();
            if constexpr (TC) {
                typedef typename std::conditional<DT == GPUCORE_KDT_F16, __half, __nv_bfloat16>::type T;
                const int warp = tid / 32, lane = tid % 32;
                const S *a_row = As + (16 * warp + lane % 16) * LDA + 8 * (lane / 16);
                /* B's quarters: matrix q = lane / 8 covers k rows 8 (q & 1) .. + 7 and n columns 8 (q >> 1) .. + 7;
                 * lane passes row lane % 8 of it: a row of Bᵀ (forward, [n][k]) or of B (backward, [k][n], .trans) */
                const int li = lane % 8, kh = 8 * ((lane / 8) & 1), nh = 8 * (lane / 16);
#pragma unroll
                for (int kt = 0; kt < QMM_BK / 16; kt++) {
                    uint32_t af[4];
                    mma_ldsm<4>(af, a_row + 16 * kt);
#pragma unroll
                    for (int f = 0; f < QMM_BN / 16; f++) {
                        uint32_t b[4];
                        if constexpr (BWD) mma_ldsm_trans<4>(b, Bs + (16 * kt + kh + li) * LDB + 16 * f + nh);
                        else mma_ldsm<4>(b, Bs + (16 * f + nh + li) * LDB + 16 * kt + kh);
                        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                        mma_m16n8k16<T>(acc[2 * f], af, b0);
                        mma_m16n8k16<T>(acc[2 * f + 1], af, b1);
                    }
                }
            } else {
                const int ty = tid / 16, tx = tid % 16;
#pragma unroll 4
                for (int k = 0; k < QMM_BK; k++) {
                    float bv[4];
#pragma unroll
                    for (int q = 0; q < 4; q++) bv[q] = BWD ? Bs[k * LDB + tx + 16 * q] : Bs[(tx + 16 * q) * LDB + k];
#pragma unroll
                    for (int p = 0; p < 8; p++) {
                        const float av = As[(ty + 8 * p) * LDA + k];
#pragma unroll
                        for (int q = 0; q < 4; q++) acc[p][q] = fmaf(av, bv[q], acc[p][q]);
                    }
                }
            }
        }
        if constexpr (TC) {
            /* lane l's acc[nb]: rows l / 4 and l / 4 + 8 of the warp's 16, columns 8 nb + 2 (l % 4) and the next */
            const int warp = tid / 32, lane = tid % 32;
            const int64_t ib = i0 + 16 * warp + lane / 4;
#pragma unroll
            for (int nb = 0; nb < 8; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    qmm_store<DT>(a, ib + 8 * (e / 2), j0 + 8 * nb + 2 * (lane % 4) + (e % 2), NO, acc[nb][e]);
        } else {
            const int ty = tid / 16, tx = tid % 16;
#pragma unroll
            for (int p = 0; p < 8; p++)
#pragma unroll
                for (int q = 0; q < 4; q++) qmm_store<DT>(a, i0 + ty + 8 * p, j0 + tx + 16 * q, NO, acc[p][q]);
        }
    }
}

/* ------------------------------------------------------------------ decode GEMV */
template <int DT>
__global__ void __launch_bounds__(QMM_THREADS) qmm_gemv_kernel(gpucore_qmm_args a)
{
    __shared__ float codes[16];
    const int shift = qmm_setup(a, codes);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = QMM_THREADS / 32;
    const int64_t K = a.L.cols;
    for (int64_t n = (int64_t)blockIdx.x * warps + warp; n < a.L.rows; n += (int64_t)gridDim.x * warps) {
        float acc[QMM_GEMV_MAX_M] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t c0 = QMM_RUN * lane; c0 < K; c0 += 32 * QMM_RUN) {
            const int cnt = (int)(K - c0 < QMM_RUN ? K - c0 : QMM_RUN);
            qmm_run(a, codes, shift, n, c0, cnt, [&](int j, float v) {
                const float wv = gpucore_dt<DT>::load(qmm_to<DT>(v)); /* rounded to the compute dtype */
#pragma unroll
                for (int r = 0; r < QMM_GEMV_MAX_M; r++)
                    if (r < a.m) acc[r] = fmaf(gpucore_ld<DT>(a.x, r * a.ldx + c0 + j), wv, acc[r]);
            });
        }
#pragma unroll
        for (int r = 0; r < QMM_GEMV_MAX_M; r++)
#pragma unroll
            for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
#pragma unroll
        for (int r = 0; r < QMM_GEMV_MAX_M; r++)
            if (lane == r) qmm_store<DT>(a, r, n, a.L.rows, acc[r]);
    }
}

template <int DT> static int qmm_launch(const gpucore_launch *launch, const gpucore_qmm_args &a)
{
    if (!a.transpose && a.m <= QMM_GEMV_MAX_M) {
        unsigned grid = gpucore_grid_for(a.L.rows * 32, QMM_THREADS, launch->sm_count);
        GPUCORE_LAUNCH(qmm_gemv_kernel<DT>, grid, QMM_THREADS, 0, launch->stream, a);
        return GPUCORE_LAUNCH_STATUS();
    }
    const int64_t ncols = a.transpose ? a.L.cols : a.L.rows;
    const int64_t tiles_m = (a.m + QMM_BM - 1) / QMM_BM, tiles = tiles_m * ((ncols + QMM_BN - 1) / QMM_BN);
    unsigned grid = gpucore_grid_for(tiles, 1, launch->sm_count);
    void (*const tile)(gpucore_qmm_args, int64_t, int64_t) =
        a.transpose ? qmm_tile_kernel<DT, true> : qmm_tile_kernel<DT, false>;
    GPUCORE_LAUNCH(tile, grid, QMM_THREADS, 0, launch->stream, a, tiles_m, tiles);
    return GPUCORE_LAUNCH_STATUS();
}

extern "C" int gpucore_kernel_quant_matmul(const gpucore_launch *launch, const gpucore_qmm_args *args)
{
    const gpucore_qmm_args a = *args;
    if (a.m <= 0 || (a.transpose ? a.L.cols : a.L.rows) <= 0) return 0;
    switch (a.dt) {
    case GPUCORE_KDT_F16: return qmm_launch<GPUCORE_KDT_F16>(launch, a);
    case GPUCORE_KDT_BF16: return qmm_launch<GPUCORE_KDT_BF16>(launch, a);
    default: return qmm_launch<GPUCORE_KDT_F32>(launch, a);
    }
}
