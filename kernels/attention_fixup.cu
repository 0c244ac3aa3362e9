/*
 * attention_fixup.cu — the rows cuDNN's SDPA graphs leave undefined
 * (src/backend/cuda/cuda_attention_cudnn.c). cudnn-frontend's graphs have no guard
 * for a query row that admits no key (every score -inf: kv_len 0, a fully masked
 * row), where the softmax gives NaN; our contract (attention_math.h) is out = 0,
 * lse = -inf and zero gradients there. A row is dead when its stats (lse) are not
 * finite; a live row's lse is finite (its max is, and its sum is >= 1).
 *   FWD: after the forward graph, a dead row's stats := -inf and its out row := 0.
 *   BWD_STATS: before the backward graph, a copy of the stats with dead rows +inf,
 *     so the graph's exp(S - stats) is 0 across them (no NaN reaches dK, dV, dQ).
 * Grid-stride over rows x head_dim_v elements (FWD) or rows (BWD_STATS).
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"

static __device__ __forceinline__ bool fixup_dead(float s) { return !(s > -INFINITY && s < INFINITY); }

__global__ void attn_fixup_fwd_kernel(gpucore_attn_fixup_args a)
{
    const int64_t rows = a.batch * a.heads * a.seq_q, n = rows * a.head_dim_v;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / a.head_dim_v, d = e % a.head_dim_v;
        if (!fixup_dead(a.stats[r])) continue;
        const int64_t i = r % a.seq_q, h = (r / a.seq_q) % a.heads, b = r / (a.seq_q * a.heads);
        gpucore_attn_store(&a.out, a.dtype, gpucore_attn_offset(&a.out, b, h, i, d), 0.0f);
        if (d == 0) a.stats[r] = -INFINITY; /* still dead for the other threads of the row */
    }
}

__global__ void attn_fixup_bwd_stats_kernel(gpucore_attn_fixup_args a)
{
    const int64_t rows = a.batch * a.heads * a.seq_q;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float s = a.stats_in[r];
        a.stats[r] = fixup_dead(s) ? INFINITY : s;
    }
}

extern "C" int gpucore_kernel_attention_fixup(const gpucore_launch *launch, const gpucore_attn_fixup_args *args)
{
    const int64_t rows = args->batch * args->heads * args->seq_q;
    if (rows <= 0) return 0;
    const int64_t work = args->op == GPUCORE_ATTN_FIXUP_FWD ? rows * args->head_dim_v : rows;
    const unsigned grid = gpucore_grid_for(work, GPUCORE_BLOCK_THREADS, launch->sm_count);
    if (args->op == GPUCORE_ATTN_FIXUP_FWD)
        GPUCORE_LAUNCH(attn_fixup_fwd_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *args);
    else
        GPUCORE_LAUNCH(attn_fixup_bwd_stats_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *args);
    return GPUCORE_LAUNCH_STATUS();
}
