/*
 * conv_epilogue.cu — a convolution's bias-add and ReLU when no cuDNN engine
 * fuses them (src/backend/cuda/cuda_conv.c), over the packed output seen as a
 * rows x cols matrix (conv_desc.h: NCHW rows n*k with the channel row % k, NHWC
 * rows n*p*q with the channel the column). A 2-D grid: blockIdx.y strides over
 * rows, so the NCHW channel and its bias are found once per row, never by an
 * index unravel per element; threads stride over the row's columns (coalesced).
 * Math in f32, one rounding to the dtype; ReLU keeps NaN (NaN < 0 is false).
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"

template <int DT, int RELU, int CHANNEL_IS_ROW>
__global__ void conv_bias_act_kernel(void *y, const void *bias, int64_t rows, int64_t cols, int64_t k)
{
    typedef typename gpucore_dt<DT>::T T;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        T *row = (T *)y + r * cols;
        const float row_bias = CHANNEL_IS_ROW && bias ? gpucore_ld<DT>(bias, r % k) : 0.0f;
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
            float v = gpucore_dt<DT>::load(row[c]);
            if (bias) v += CHANNEL_IS_ROW ? row_bias : gpucore_ld<DT>(bias, c);
            if (RELU && v < 0.0f) v = 0.0f;
            row[c] = gpucore_dt<DT>::store(v);
        }
    }
}

template <int DT, int RELU, int CHANNEL_IS_ROW>
static int launch_bias_act(const gpucore_launch *l, const gpucore_conv_bias_args *a)
{
    /* a block as wide as the row needs (a warp at least), columns split over blocks only when one block is
     * far short of them; rows over grid.y (at most 65535, grid-stride beyond) */
    int threads = a->cols >= GPUCORE_BLOCK_THREADS ? GPUCORE_BLOCK_THREADS : (int)((a->cols + 31) / 32 * 32);
    int64_t xblocks = (a->cols + threads - 1) / threads;
    int64_t cap = (int64_t)(l->sm_count > 0 ? l->sm_count : 1) * GPUCORE_BLOCKS_PER_SM;
    if (xblocks > cap) xblocks = cap;
    dim3 grid((unsigned)xblocks, (unsigned)(a->rows < 65535 ? a->rows : 65535), 1);
    GPUCORE_LAUNCH((conv_bias_act_kernel<DT, RELU, CHANNEL_IS_ROW>), grid, threads, 0, l->stream, a->y, a->bias,
                   a->rows, a->cols, a->k);
    return GPUCORE_LAUNCH_STATUS();
}

template <int DT>
static int launch_for_dtype(const gpucore_launch *l, const gpucore_conv_bias_args *a)
{
    if (a->relu) return a->channel_is_row ? launch_bias_act<DT, 1, 1>(l, a) : launch_bias_act<DT, 1, 0>(l, a);
    return a->channel_is_row ? launch_bias_act<DT, 0, 1>(l, a) : launch_bias_act<DT, 0, 0>(l, a);
}

extern "C" int gpucore_kernel_conv_bias_act(const gpucore_launch *launch, const gpucore_conv_bias_args *args)
{
    if (args->rows <= 0 || args->cols <= 0) return 0;
    switch (args->dtype) {
    case GPUCORE_KDT_F16: return launch_for_dtype<GPUCORE_KDT_F16>(launch, args);
    case GPUCORE_KDT_BF16: return launch_for_dtype<GPUCORE_KDT_BF16>(launch, args);
    default: return launch_for_dtype<GPUCORE_KDT_F32>(launch, args);
    }
}
