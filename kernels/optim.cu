/*
 * optim.cu — multi-tensor training kernels: fused optimizer step (AdamW, SGD),
 * loss-scale unscale with Inf/NaN detection, the loss-scale update, and
 * gradient clipping by global L2 norm.
 *
 * Multi-tensor launches: up to MT_MAX_TENSORS tensors' pointers travel in the
 * kernel's parameter block (no device-side table to upload, so nothing waits for
 * the host); every block owns one fixed GPUCORE_MT_CHUNK-element chunk of one
 * tensor and finds it from a prefix table of block starts. One launch updates
 * every parameter of a small model; big models take a few launches.
 * The work is memory-bound (AdamW streams 16 bytes in and 12 out per f32
 * parameter), so threads walk their chunk with coalesced stride-blockDim accesses
 * and the per-element math (optim_math.h) is the same source the CPU runs.
 *
 * Device scalars: lr, step, found_inf and the loss scale are read on the device;
 * a step with found_inf != 0 returns at once in every block.
 */
#include "kernels.h"
#include "launch.h"
#include "optim_math.h"

#define MT_THREADS 256
#define MT_MAX_TENSORS 32
#define MT_MAX_BLOCKS (1 << 30)

/* Kernels take the address of their (large) parameter block: __grid_constant__
 * lets them read it in place instead of copying it to local memory. */
#if defined(__CUDACC__)
#define MT_PARAM const __grid_constant__
#else
#define MT_PARAM const
#endif

struct optim_group {
    gpucore_optim_tensor t[MT_MAX_TENSORS];
    int32_t block_start[MT_MAX_TENSORS + 1];
    int32_t count;
};

struct mt_group {
    gpucore_mt_tensor t[MT_MAX_TENSORS];
    int32_t block_start[MT_MAX_TENSORS + 1];
    int32_t count;
    int64_t partial_base; /* clipping: global chunk index of this launch's block 0 */
};

/* Which tensor block b works on (linear search: at most MT_MAX_TENSORS entries). */
__device__ __forceinline__ int mt_tensor_of(const int32_t *block_start, int count, int b)
{
    int k = 0;
    while (k + 1 < count && block_start[k + 1] <= b) k++;
    return k;
}

/* ---- optimizer ---- */

__global__ void optim_step_count_kernel(float *step, const float *found_inf)
{
    if (found_inf && *found_inf != 0.0f) return;
    *step += 1.0f;
}

__global__ void optim_update_kernel(MT_PARAM optim_group g, MT_PARAM gpucore_optim_hparams hp)
{
    if (hp.found_inf && *hp.found_inf != 0.0f) return;
    __shared__ gpucore_optim_scalars s;
    if (threadIdx.x == 0) s = gpucore_optim_scalars_make(&hp, *hp.lr, *hp.step);
    __syncthreads();
    const int b = (int)blockIdx.x;
    const int k = mt_tensor_of(g.block_start, g.count, b);
    const gpucore_optim_tensor *t = &g.t[k];
    const int64_t lo = (int64_t)(b - g.block_start[k]) * GPUCORE_MT_CHUNK;
    int64_t hi = lo + GPUCORE_MT_CHUNK;
    if (hi > t->numel) hi = t->numel;
    const gpucore_optim_scalars sc = s;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) gpucore_optim_element(t, i, &hp, &sc);
}

extern "C" int gpucore_kernel_optim_step(const gpucore_launch *launch, const gpucore_optim_hparams *hp,
                                         const gpucore_optim_tensor *tensors, int64_t count)
{
    GPUCORE_LAUNCH(optim_step_count_kernel, 1, 1, 0, launch->stream, hp->step, hp->found_inf);
    int err = GPUCORE_LAUNCH_STATUS();
    if (err) return err;
    optim_group g;
    g.count = 0;
    g.block_start[0] = 0;
    for (int64_t i = 0; i <= count; i++) {
        int64_t chunks = i < count ? gpucore_mt_chunks(tensors[i].numel) : 0;
        int full = g.count == MT_MAX_TENSORS || (int64_t)g.block_start[g.count] + chunks > MT_MAX_BLOCKS;
        if (g.count > 0 && (i == count || full)) {
            GPUCORE_LAUNCH(optim_update_kernel, (unsigned)g.block_start[g.count], MT_THREADS, 0, launch->stream, g,
                           *hp);
            if ((err = GPUCORE_LAUNCH_STATUS())) return err;
            g.count = 0;
        }
        if (i == count || chunks == 0) continue;
        g.t[g.count] = tensors[i];
        g.block_start[g.count + 1] = g.block_start[g.count] + (int32_t)chunks;
        g.count++;
    }
    return 0;
}

/* ---- loss scaling ---- */

__global__ void amp_unscale_kernel(MT_PARAM mt_group g, const float *scale, float *found_inf)
{
    const float inv_scale = 1.0f / *scale;
    const int b = (int)blockIdx.x;
    const int k = mt_tensor_of(g.block_start, g.count, b);
    const gpucore_mt_tensor *t = &g.t[k];
    const int64_t lo = (int64_t)(b - g.block_start[k]) * GPUCORE_MT_CHUNK;
    int64_t hi = lo + GPUCORE_MT_CHUNK;
    if (hi > t->numel) hi = t->numel;
    int bad = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) bad |= gpucore_unscale_element(t->data, t->dtype, i, inv_scale);
    if (bad) *found_inf = 1.0f; /* every writer writes the same value */
}

__global__ void amp_update_kernel(float *scale, int32_t *tracker, const float *found_inf, float growth, float backoff,
                                  int32_t interval)
{
    gpucore_loss_scale_update(scale, tracker, found_inf, growth, backoff, interval);
}

/* Walk tensors in MT_MAX_TENSORS groups, calling launch_group(g) for each. */
template <typename F> static int for_each_mt_group(const gpucore_mt_tensor *tensors, int64_t count, F launch_group)
{
    mt_group g;
    g.count = 0;
    g.block_start[0] = 0;
    g.partial_base = 0;
    for (int64_t i = 0; i <= count; i++) {
        int64_t chunks = i < count ? gpucore_mt_chunks(tensors[i].numel) : 0;
        int full = g.count == MT_MAX_TENSORS || (int64_t)g.block_start[g.count] + chunks > MT_MAX_BLOCKS;
        if (g.count > 0 && (i == count || full)) {
            int err = launch_group(g);
            if (err) return err;
            g.partial_base += g.block_start[g.count];
            g.count = 0;
        }
        if (i == count || chunks == 0) continue;
        g.t[g.count] = tensors[i];
        g.block_start[g.count + 1] = g.block_start[g.count] + (int32_t)chunks;
        g.count++;
    }
    return 0;
}

extern "C" int gpucore_kernel_amp_unscale(const gpucore_launch *launch, const gpucore_mt_tensor *grads, int64_t count,
                                          const float *scale, float *found_inf)
{
    return for_each_mt_group(grads, count, [&](const mt_group &g) {
        GPUCORE_LAUNCH(amp_unscale_kernel, (unsigned)g.block_start[g.count], MT_THREADS, 0, launch->stream, g, scale,
                       found_inf);
        return GPUCORE_LAUNCH_STATUS();
    });
}

extern "C" int gpucore_kernel_amp_update(const gpucore_launch *launch, float *scale, int32_t *growth_tracker,
                                         const float *found_inf, float growth, float backoff, int32_t interval)
{
    GPUCORE_LAUNCH(amp_update_kernel, 1, 1, 0, launch->stream, scale, growth_tracker, found_inf, growth, backoff,
                   interval);
    return GPUCORE_LAUNCH_STATUS();
}

/* ---- gradient clipping ---- */

__device__ __forceinline__ float mt_load(const gpucore_mt_tensor *t, int64_t i)
{
    return t->dtype == GPUCORE_KDT_F32 ? ((const float *)t->data)[i]
                                       : gpucore_load_as_f32((const uint16_t *)t->data + i, t->dtype);
}

/* Phase 1: one sum of squares per chunk, in a fixed order (thread strides, then a tree). */
__global__ void clip_partials_kernel(MT_PARAM mt_group g, float *partials)
{
    __shared__ float red[MT_THREADS];
    const int b = (int)blockIdx.x;
    const int k = mt_tensor_of(g.block_start, g.count, b);
    const gpucore_mt_tensor *t = &g.t[k];
    const int64_t lo = (int64_t)(b - g.block_start[k]) * GPUCORE_MT_CHUNK;
    int64_t hi = lo + GPUCORE_MT_CHUNK;
    if (hi > t->numel) hi = t->numel;
    float acc = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float x = mt_load(t, i);
        acc += x * x;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = MT_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[g.partial_base + b] = red[0];
}

/* Phase 2: one block sums the partials in a fixed order, in double. */
__global__ void clip_total_kernel(const float *partials, int64_t n, float max_norm, float *total_norm, float *clip_coef)
{
    __shared__ double red[MT_THREADS];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)partials[i];
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = MT_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float norm = (float)sqrt(red[0]);
        *total_norm = norm;
        *clip_coef = gpucore_clip_coef(norm, max_norm);
    }
}

/* Phase 3: every gradient *= clip_coef. */
__global__ void clip_scale_kernel(MT_PARAM mt_group g, const float *clip_coef)
{
    const float c = *clip_coef;
    const int b = (int)blockIdx.x;
    const int k = mt_tensor_of(g.block_start, g.count, b);
    const gpucore_mt_tensor *t = &g.t[k];
    const int64_t lo = (int64_t)(b - g.block_start[k]) * GPUCORE_MT_CHUNK;
    int64_t hi = lo + GPUCORE_MT_CHUNK;
    if (hi > t->numel) hi = t->numel;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        if (t->dtype == GPUCORE_KDT_F32) ((float *)t->data)[i] *= c;
        else {
            uint16_t *p = (uint16_t *)t->data + i;
            gpucore_store_from_f32(p, t->dtype, gpucore_load_as_f32(p, t->dtype) * c);
        }
    }
}

extern "C" int gpucore_kernel_clip_grad_norm(const gpucore_launch *launch, const gpucore_mt_tensor *grads,
                                             int64_t count, float *partials, float max_norm, float *total_norm,
                                             float *clip_coef)
{
    int64_t chunks = 0;
    int err = for_each_mt_group(grads, count, [&](const mt_group &g) {
        GPUCORE_LAUNCH(clip_partials_kernel, (unsigned)g.block_start[g.count], MT_THREADS, 0, launch->stream, g,
                       partials);
        chunks = g.partial_base + g.block_start[g.count];
        return GPUCORE_LAUNCH_STATUS();
    });
    if (err) return err;
    GPUCORE_LAUNCH(clip_total_kernel, 1, MT_THREADS, 0, launch->stream, (const float *)partials, chunks, max_norm,
                   total_norm, clip_coef);
    if ((err = GPUCORE_LAUNCH_STATUS())) return err;
    return for_each_mt_group(grads, count, [&](const mt_group &g) {
        GPUCORE_LAUNCH(clip_scale_kernel, (unsigned)g.block_start[g.count], MT_THREADS, 0, launch->stream, g,
                       (const float *)clip_coef);
        return GPUCORE_LAUNCH_STATUS();
    });
}
