/*
 * transformer.cu — rotary position embedding, gated linear units (SwiGLU /
 * GeGLU, forward and backward) and the fused residual add + RMSNorm/LayerNorm
 * forward (formulas in transformer_math.h), f32 math for f32/f16/bf16 data.
 *
 * RoPE and GLU are memory-bound elementwise kernels: grid-stride loops with
 * 64-bit indices over strided views, each thread reading both elements of a
 * RoPE pair before writing them (so in place is safe). The residual norm
 * takes one block per row: it writes h = x + residual while summing, then
 * the variance and y in two more passes over the row (re-read from L2); the
 * block folds use one fixed shared-memory tree, so results are deterministic.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "transformer_math.h"

#define TFM_THREADS 256

__device__ __forceinline__ float tfm_ld(const gpucore_view &v, int64_t off)
{
    return gpucore_load_as_f32((const char *)v.data + off * v.elem_size, v.dtype);
}

__device__ __forceinline__ void tfm_st(const gpucore_view &v, int64_t off, float x)
{
    gpucore_store_from_f32((char *)v.data + off * v.elem_size, v.dtype, x);
}

__device__ __forceinline__ int64_t tfm_offset(const gpucore_view &v, int64_t i)
{
    return v.contiguous ? i : gpucore_strided_offset(i, v.ndim, v.shape, v.strides);
}

__global__ void rope_kernel(gpucore_tfm_args a)
{
    const gpucore_view &x = a.in0, &y = a.out0;
    const int64_t S = x.shape[2], H = x.shape[1], D = x.shape[3], R2 = a.rot_half;
    const int64_t per_row = D - R2; /* R2 pairs, then D - 2·R2 copied dims */
    const int64_t total = x.shape[0] * H * S * per_row;
    const int tes = a.table_dtype == GPUCORE_KDT_F32 ? 4 : 2;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = e % per_row, row = e / per_row;
        const int64_t s = row % S, h = (row / S) % H, b = row / (S * H);
        const int64_t xo = b * x.strides[0] + h * x.strides[1] + s * x.strides[2];
        const int64_t yo = b * y.strides[0] + h * y.strides[1] + s * y.strides[2];
        if (k >= R2) {
            const int64_t d = R2 + k;
            tfm_st(y, yo + d * y.strides[3], tfm_ld(x, xo + d * x.strides[3]));
            continue;
        }
        int64_t d1, d2;
        gpucore_rope_pair(a.interleaved, R2, k, &d1, &d2);
        const float c = gpucore_load_as_f32((const char *)a.in1.data + (s * R2 + k) * tes, a.table_dtype);
        const float sn = (a.inverse ? -1.0f : 1.0f) *
                         gpucore_load_as_f32((const char *)a.in2.data + (s * R2 + k) * tes, a.table_dtype);
        float y1, y2;
        gpucore_rope_rotate(tfm_ld(x, xo + d1 * x.strides[3]), tfm_ld(x, xo + d2 * x.strides[3]), c, sn, &y1, &y2);
        tfm_st(y, yo + d1 * y.strides[3], y1);
        tfm_st(y, yo + d2 * y.strides[3], y2);
    }
}

__global__ void glu_kernel(gpucore_tfm_args a)
{
    const int64_t n = a.in0.numel;
    const bool bwd = a.op == GPUCORE_TFM_GLU_BWD;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = tfm_ld(a.in0, tfm_offset(a.in0, i)), u = tfm_ld(a.in1, tfm_offset(a.in1, i));
        if (!bwd) {
            tfm_st(a.out0, tfm_offset(a.out0, i), gpucore_glu_act(a.kind, g) * u);
            continue;
        }
        const float dy = tfm_ld(a.in2, tfm_offset(a.in2, i));
        const float dg = dy * u * gpucore_glu_act_grad(a.kind, g), du = dy * gpucore_glu_act(a.kind, g);
        if (a.out0.data) tfm_st(a.out0, tfm_offset(a.out0, i), dg);
        if (a.out1.data) tfm_st(a.out1, tfm_offset(a.out1, i), du);
    }
}

/* Sum of v over the block (fixed tree), returned to every thread. */
__device__ float tfm_block_sum(float v)
{
    __shared__ float red[TFM_THREADS];
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = TFM_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float r = red[0];
    __syncthreads(); /* red is reused by the next fold */
    return r;
}

__global__ void __launch_bounds__(TFM_THREADS) residual_norm_kernel(gpucore_tfm_args a)
{
    const int64_t cols = a.cols;
    const int pes = a.table_dtype == GPUCORE_KDT_F32 ? 4 : 2;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const int64_t off = r * cols;
        float sum = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            tfm_st(a.out1, off + c, tfm_ld(a.in0, off + c) + tfm_ld(a.in1, off + c)); /* h, rounded to the dtype */
            sum += tfm_ld(a.out1, off + c);
        }
        const float mean = a.kind ? tfm_block_sum(sum) / (float)cols : 0.0f;
        float var = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float d = tfm_ld(a.out1, off + c) - mean;
            var = fmaf(d, d, var);
        }
        const float rstd = 1.0f / sqrtf(tfm_block_sum(var) / (float)cols + a.eps);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = (tfm_ld(a.out1, off + c) - mean) * rstd;
            if (a.in2.data) v *= gpucore_load_as_f32((const char *)a.in2.data + c * pes, a.table_dtype);
            if (a.in3.data) v += gpucore_load_as_f32((const char *)a.in3.data + c * pes, a.table_dtype);
            tfm_st(a.out0, off + c, v);
        }
        if (threadIdx.x == 0) {
            if (a.mean) a.mean[r] = mean;
            if (a.rstd) a.rstd[r] = rstd;
        }
    }
}

extern "C" int gpucore_kernel_transformer(const gpucore_launch *launch, const gpucore_tfm_args *args)
{
    if (args->op == GPUCORE_TFM_RESNORM) {
        unsigned grid = gpucore_grid_for(args->rows * TFM_THREADS, TFM_THREADS, launch->sm_count);
        GPUCORE_LAUNCH(residual_norm_kernel, grid, TFM_THREADS, 0, launch->stream, *args);
    } else if (args->op == GPUCORE_TFM_ROPE) {
        const int64_t work = args->in0.numel / args->in0.shape[3] * (args->in0.shape[3] - args->rot_half);
        GPUCORE_LAUNCH(rope_kernel, gpucore_grid_for(work, TFM_THREADS, launch->sm_count), TFM_THREADS, 0,
                       launch->stream, *args);
    } else {
        GPUCORE_LAUNCH(glu_kernel, gpucore_grid_for(args->in0.numel, TFM_THREADS, launch->sm_count), TFM_THREADS, 0,
                       launch->stream, *args);
    }
    return GPUCORE_LAUNCH_STATUS();
}
