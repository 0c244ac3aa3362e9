/*
 * gemm_fallback.cu — a plain tiled GEMM with the matmul epilogues, for what
 * cuBLASLt will not do (it returns no algorithm for some odd shapes and aux
 * leading dimensions) and for the cuda-emulated test backend, which has no
 * cuBLASLt at all. Computes gemm_desc.h's D = epilogue(alpha·op(A)·op(B) + beta·C).
 *
 * Each 16x16 thread block owns a 16x16 tile of D. It walks K in steps of 16:
 * the block loads a 16x16 tile of op(A) and of op(B) into shared memory
 * (converted to f32 once), synchronises, and each thread accumulates its
 * element's 16 products in fp32 from shared memory. Correct for any shape,
 * transpose and dtype (f32/f16/bf16); not fast — cuBLASLt is the fast path.
 * Column tiles run on grid.y and batches on grid.z, each grid-stride beyond
 * 65535 (so any n and batch can be launched). A second small
 * kernel computes the bias-gradient vectors (one thread per output element).
 * gpucore_kernel_gemm_amax: max |D| of a finished GEMM into an f32 scalar, for
 * fp8 GEMMs (cuBLASLt computes AMAX_D only for fp8 outputs, and ours are
 * f32/f16/bf16): a block per column (grid-stride), threads down the column
 * (coalesced, D is column-major), a block-shared then a global atomicMax on the
 * bits of |x| (non-negative floats order as their bits; NaN wins), so the result
 * does not depend on the order.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "gemm_desc.h"

#define GEMM_TILE 16

__device__ static float gemm_load(const gpucore_gemm_operand *x, int64_t batch, int64_t row, int64_t col)
{
    const char *base = (const char *)x->data;
    int64_t off = batch * x->batch_stride + gpucore_gemm_operand_offset(x, row, col);
    return gpucore_load_as_f32(base + off * gpucore_gemm_dtype_size(x->dtype), x->dtype);
}

__global__ void gemm_fallback_kernel(gpucore_gemm_desc g)
{
    __shared__ float a_tile[GEMM_TILE][GEMM_TILE + 1]; /* [p][i]: +1 avoids bank conflicts */
    __shared__ float b_tile[GEMM_TILE][GEMM_TILE + 1]; /* [j][p] */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t i0 = (int64_t)blockIdx.x * GEMM_TILE, i = i0 + tx; /* tx fastest: consecutive rows of col-major D */
    const int dsz = gpucore_gemm_dtype_size(g.d_dtype);
    /* the loop bounds depend on the block only, so every thread reaches the same __syncthreads */
    for (int64_t j0 = (int64_t)blockIdx.y * GEMM_TILE; j0 < g.n; j0 += (int64_t)gridDim.y * GEMM_TILE) {
        const int64_t j = j0 + ty;
        for (int64_t bz = blockIdx.z; bz < g.batch; bz += gridDim.z) {
            float acc = 0.0f;
            for (int64_t p0 = 0; p0 < g.k; p0 += GEMM_TILE) {
                /* thread (tx, ty) loads op(A)[i0+tx, p0+ty] and op(B)[p0+tx, j0+ty] */
                a_tile[ty][tx] = (i < g.m && p0 + ty < g.k) ? gemm_load(&g.a, bz, i, p0 + ty) : 0.0f;
                b_tile[ty][tx] = (p0 + tx < g.k && j < g.n) ? gemm_load(&g.b, bz, p0 + tx, j) : 0.0f;
                __syncthreads();
                for (int q = 0; q < GEMM_TILE; q++) acc += a_tile[q][tx] * b_tile[ty][q];
                __syncthreads();
            }
            if (i < g.m && j < g.n) {
                float v = g.alpha * acc;
                if (g.c && g.beta != 0.0f)
                    v += g.beta * gpucore_load_as_f32((const char *)g.c + (bz * g.batch_stride_c + i + j * g.ldc) * dsz,
                                                      g.d_dtype);
                float bias = (g.epilogue & GPUCORE_GEMM_EPI_BIAS)
                                 ? gpucore_load_as_f32((const char *)g.bias + i * dsz, g.d_dtype) : 0.0f;
                char *aux = g.aux ? (char *)g.aux + (bz * g.batch_stride_aux + i + j * g.ldaux) * dsz : 0;
                float aux_in = (g.epilogue & GPUCORE_GEMM_EPI_DGELU) ? gpucore_load_as_f32(aux, g.d_dtype) : 0.0f;
                float aux_out = 0.0f;
                float out = gpucore_gemm_epilogue_value(g.epilogue, v, bias, aux_in, &aux_out);
                if (g.epilogue & GPUCORE_GEMM_EPI_AUX_OUT) gpucore_store_from_f32(aux, g.d_dtype, aux_out);
                gpucore_store_from_f32((char *)g.d + (bz * g.batch_stride_d + i + j * g.ldd) * dsz, g.d_dtype, out);
            }
        }
    }
}

/* bias_grad[r]: BGRAD_D Σ_j D[r, j]; BGRAD_A Σ_p op(A)[r, p]; BGRAD_B Σ_p op(B)[p, r] (batch 1). */
__global__ void gemm_bias_grad_kernel(gpucore_gemm_desc g, int64_t len)
{
    const int dsz = gpucore_gemm_dtype_size(g.d_dtype);
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < len; r += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        if (g.epilogue & GPUCORE_GEMM_EPI_BGRAD_D) {
            for (int64_t j = 0; j < g.n; j++)
                s += gpucore_load_as_f32((const char *)g.d + (r + j * g.ldd) * dsz, g.d_dtype);
        } else if (g.epilogue & GPUCORE_GEMM_EPI_BGRAD_A) {
            for (int64_t p = 0; p < g.k; p++) s += gemm_load(&g.a, 0, r, p);
        } else {
            for (int64_t p = 0; p < g.k; p++) s += gemm_load(&g.b, 0, p, r);
        }
        gpucore_store_from_f32((char *)g.bias_grad + r * dsz, g.d_dtype, s);
    }
}

__global__ void gemm_amax_zero_kernel(float *amax) { *amax = 0.0f; }

__global__ void gemm_amax_kernel(gpucore_gemm_desc g)
{
    __shared__ unsigned int block_max;
    if (threadIdx.x == 0) block_max = 0u;
    __syncthreads();
    const int dsz = gpucore_gemm_dtype_size(g.d_dtype);
    unsigned int mx = 0u;
    for (int64_t cb = blockIdx.x; cb < g.batch * g.n; cb += gridDim.x) {
        const int64_t bz = cb / g.n, j = cb % g.n;
        const char *col = (const char *)g.d + (bz * g.batch_stride_d + j * g.ldd) * dsz;
        for (int64_t i = threadIdx.x; i < g.m; i += blockDim.x) {
            const unsigned int bits = gpucore_f32_bits(gpucore_load_as_f32(col + i * dsz, g.d_dtype)) & 0x7fffffffu;
            mx = bits > mx ? bits : mx;
        }
    }
    atomicMax(&block_max, mx);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax((unsigned int *)g.amax_d, block_max);
}

extern "C" int gpucore_kernel_gemm_amax(const gpucore_launch *launch, const gpucore_gemm_desc *desc)
{
    const gpucore_gemm_desc g = *desc;
    GPUCORE_LAUNCH(gemm_amax_zero_kernel, 1, 1, 0, launch->stream, g.amax_d);
    int err = GPUCORE_LAUNCH_STATUS();
    if (err || g.m <= 0 || g.n <= 0 || g.batch <= 0) return err;
    unsigned grid = gpucore_grid_for(g.batch * g.n * GPUCORE_BLOCK_THREADS, GPUCORE_BLOCK_THREADS, launch->sm_count);
    GPUCORE_LAUNCH(gemm_amax_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, g);
    return GPUCORE_LAUNCH_STATUS();
}

extern "C" int gpucore_kernel_gemm_fallback(const gpucore_launch *launch, const gpucore_gemm_desc *desc)
{
    const gpucore_gemm_desc g = *desc;
    if (g.m > 0 && g.n > 0 && g.batch > 0) {
        dim3 block(GEMM_TILE, GEMM_TILE, 1);
        int64_t gx = (g.m + GEMM_TILE - 1) / GEMM_TILE, gy = (g.n + GEMM_TILE - 1) / GEMM_TILE;
        dim3 grid((unsigned)gx, (unsigned)(gy < 65535 ? gy : 65535), (unsigned)(g.batch < 65535 ? g.batch : 65535));
        GPUCORE_LAUNCH(gemm_fallback_kernel, grid, block, 0, launch->stream, g);
        int err = GPUCORE_LAUNCH_STATUS();
        if (err) return err;
    }
    uint32_t bgrad = g.epilogue & (GPUCORE_GEMM_EPI_BGRAD_D | GPUCORE_GEMM_EPI_BGRAD_A | GPUCORE_GEMM_EPI_BGRAD_B);
    if (!bgrad) return 0;
    int64_t len = (g.epilogue & GPUCORE_GEMM_EPI_BGRAD_B) ? g.n : g.m;
    if (len <= 0) return 0;
    unsigned grid = gpucore_grid_for(len, GPUCORE_BLOCK_THREADS, launch->sm_count);
    GPUCORE_LAUNCH(gemm_bias_grad_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, g, len);
    return GPUCORE_LAUNCH_STATUS();
}
