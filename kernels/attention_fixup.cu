/*
 * attention_fixup.cu — the rows cuDNN's SDPA graphs leave undefined
 * (src/backend/cuda/cuda_attention_cudnn.c). cudnn-frontend's graphs have no guard
 * for a query row that admits no key (every score -inf: kv_len 0, a fully masked
 * row), where the softmax gives NaN; our contract (attention_math.h) is out = 0,
 * lse = -inf and zero gradients there, while a NaN score keeps its row NaN.
 *   FWD: after the forward graph, a row whose stats are not finite and that admits
 *     no key (gpucore_attn_key_end, gpucore_attn_bias: every admitted key's bias
 *     -inf) gets stats := -inf and out := 0. Only non-finite rows scan their keys: a warp
 *     per row, lane k reading keys k, k + 32, ... (one vote per 32 keys, so the scan stops
 *     at the first 32-key chunk with an admitted key), and the warp zeroes the row.
 *   BWD_STATS: before the backward graph, a copy of lse with the -inf rows (no key)
 *     +inf, so the graph's exp(S - stats) is 0 across them (no NaN reaches dK, dV).
 *   SEQ: before a graph with the padding mask, its per-batch lengths: seq_q := Sq,
 *     seq_kv := min(Sk, max(0, kv_len)) (Sk without kv_len), the lengths the kernel
 *     uses (gpucore_attn_kv_valid), never past the tensors' extents.
 * BWD_STATS and SEQ: a thread per row (per batch entry for SEQ). All grid-stride.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"

/* Row (b, h, i) of a admits no key: none before its key end, or each one's bias -inf. Called by a
 * whole warp (the same row in every lane); lane k tests keys k, k + 32, ... */
static __device__ bool fixup_no_key(const gpucore_attn_args *a, int64_t b, int64_t h, int64_t i, int lane)
{
    const int64_t end = gpucore_attn_key_end(a, b, i);
    for (int64_t j0 = 0; j0 < end; j0 += 32) {
        const int64_t j = j0 + lane;
        const bool admitted = j < end && !(gpucore_attn_bias(a, b, h, i, j) == -INFINITY);
        if (__any_sync(0xffffffffu, admitted)) return false;
    }
    return true;
}

/* A warp per row (blockDim.x a multiple of 32, so every warp is whole and its row uniform). */
__global__ void attn_fixup_fwd_kernel(gpucore_attn_fixup_args f)
{
    const gpucore_attn_args *a = &f.attn;
    const int64_t rows = a->batch * a->heads * a->seq_q;
    const int lane = threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        const float s = f.stats[r];
        if (s > -INFINITY && s < INFINITY) continue;
        const int64_t i = r % a->seq_q, h = (r / a->seq_q) % a->heads, b = r / (a->seq_q * a->heads);
        if (!fixup_no_key(a, b, h, i, lane)) continue; /* a NaN score: the row stays NaN */
        if (lane == 0) f.stats[r] = -INFINITY;
        for (int64_t d = lane; d < a->head_dim_v; d += 32)
            gpucore_attn_store(&a->out, a->dtype, gpucore_attn_offset(&a->out, b, h, i, d), 0.0f);
    }
}

__global__ void attn_fixup_bwd_stats_kernel(gpucore_attn_fixup_args f)
{
    const int64_t rows = f.attn.batch * f.attn.heads * f.attn.seq_q;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float s = f.attn.lse[r];
        f.stats[r] = s == -INFINITY ? INFINITY : s;
    }
}

__global__ void attn_fixup_seq_kernel(gpucore_attn_fixup_args f)
{
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < f.attn.batch; b += (int64_t)gridDim.x * blockDim.x) {
        f.seq_q[b] = (int32_t)f.attn.seq_q;
        f.seq_kv[b] = (int32_t)gpucore_attn_kv_valid(&f.attn, b);
    }
}

extern "C" int gpucore_kernel_attention_fixup(const gpucore_launch *launch, const gpucore_attn_fixup_args *args)
{
    const int64_t rows = args->op == GPUCORE_ATTN_FIXUP_SEQ ? args->attn.batch
                       : args->attn.batch * args->attn.heads * args->attn.seq_q;
    if (rows <= 0) return 0;
    /* FWD: a warp per row */
    const unsigned grid = gpucore_grid_for(args->op == GPUCORE_ATTN_FIXUP_FWD ? rows * 32 : rows, GPUCORE_BLOCK_THREADS,
                                           launch->sm_count);
    if (args->op == GPUCORE_ATTN_FIXUP_SEQ)
        GPUCORE_LAUNCH(attn_fixup_seq_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *args);
    else if (args->op == GPUCORE_ATTN_FIXUP_FWD)
        GPUCORE_LAUNCH(attn_fixup_fwd_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *args);
    else
        GPUCORE_LAUNCH(attn_fixup_bwd_stats_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *args);
    return GPUCORE_LAUNCH_STATUS();
}
