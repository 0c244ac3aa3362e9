/*
 * elementwise.cu — the elementwise family: binary ops with broadcasting and a
 * fused activation (bias add + GELU is one pass), unary math, scale/axpy/clamp,
 * activation forward/backward, dropout from Philox, and dtype casts.
 *
 * Why it is fast: the work is memory-bound, so the main kernel moves 16 bytes
 * per thread per access (4 f32 or 8 f16/bf16 elements as one uint4 load/store),
 * coalesced across the warp, for every input that is dense, a row repeated over
 * rows (bias: the row index is one 64-bit modulo per vector) or a scalar. The
 * op is a kernel parameter, so its switch is a uniform branch. A scalar
 * grid-stride kernel takes the tail and any general strided layout (64-bit
 * unravel per element). Grids come from the SM count (grid.h); all indices are
 * 64-bit. Per-element math is in elementwise_math.h, shared with the CPU.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "elementwise_math.h"

/* The V input values of vector starting at element i0 (i0 a multiple of V). */
template <int DT>
__device__ __forceinline__ void ew_load_vec(const gpucore_view &v, int mode, int64_t inner, int64_t i0, float *x)
{
    const int V = gpucore_dt_size<DT>::vec;
    if (mode == GPUCORE_EW_LAYOUT_SCALAR) {
        float s = gpucore_ld<DT>(v.data, 0);
#pragma unroll
        for (int k = 0; k < V; k++) x[k] = s;
        return;
    }
    gpucore_ldv<DT>(v.data, mode == GPUCORE_EW_LAYOUT_ROW ? i0 % inner : i0, x);
}

template <int DT>
__global__ void ew_vec_kernel(gpucore_ew_args p, int mode_a, int64_t inner_a, int mode_b, int64_t inner_b,
                              int64_t nvec)
{
    const int V = gpucore_dt_size<DT>::vec;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i0 = v * V;
        float a[V], b[V];
        ew_load_vec<DT>(p.in[0], mode_a, inner_a, i0, a);
        if (p.nin == 2) ew_load_vec<DT>(p.in[1], mode_b, inner_b, i0, b);
        else {
#pragma unroll
            for (int k = 0; k < V; k++) b[k] = 0.0f;
        }
        float o[V];
#pragma unroll
        for (int k = 0; k < V; k++)
            o[k] = gpucore_ew_compute(p.op, p.act, p.alpha, p.beta, p.seed, p.offset, a[k], b[k], (uint64_t)(i0 + k));
        gpucore_stv<DT>(p.out.data, i0, o);
    }
}

template <int DT>
__device__ __forceinline__ float ew_load_one(const gpucore_view &v, int mode, int64_t inner, int64_t i)
{
    int64_t off = mode == GPUCORE_EW_LAYOUT_DENSE ? i : mode == GPUCORE_EW_LAYOUT_ROW ? i % inner
                : mode == GPUCORE_EW_LAYOUT_SCALAR ? 0 : gpucore_strided_offset(i, v.ndim, v.shape, v.strides);
    return gpucore_ld<DT>(v.data, off);
}

template <int DT>
__global__ void ew_scalar_kernel(gpucore_ew_args p, int mode_a, int64_t inner_a, int mode_b, int64_t inner_b,
                                 int64_t first)
{
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.out.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        float a = ew_load_one<DT>(p.in[0], mode_a, inner_a, i);
        float b = p.nin == 2 ? ew_load_one<DT>(p.in[1], mode_b, inner_b, i) : 0.0f;
        int64_t off = p.out.contiguous ? i : gpucore_strided_offset(i, p.out.ndim, p.out.shape, p.out.strides);
        gpucore_st<DT>(p.out.data, off, gpucore_ew_compute(p.op, p.act, p.alpha, p.beta, p.seed, p.offset, a, b, (uint64_t)i));
    }
}

/* Casts: one element per thread through f64 (exact for every source dtype), coalesced. */
__global__ void ew_cast_kernel(gpucore_view out, gpucore_view in)
{
    char *o = (char *)out.data;
    const char *x = (const char *)in.data;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < out.numel; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t oo = out.contiguous ? i : gpucore_strided_offset(i, out.ndim, out.shape, out.strides);
        int64_t io = in.contiguous ? i : gpucore_strided_offset(i, in.ndim, in.shape, in.strides);
        gpucore_store_from_f64(o + oo * out.elem_size, out.dtype, gpucore_load_as_f64(x + io * in.elem_size, in.dtype));
    }
}

static int ew_aligned(const void *p) { return ((uintptr_t)p % 16) == 0; }

template <int DT>
static int ew_launch(const gpucore_launch *l, const gpucore_ew_args *p)
{
    const int V = gpucore_dt_size<DT>::vec;
    int mode[2] = {GPUCORE_EW_LAYOUT_STRIDED, GPUCORE_EW_LAYOUT_STRIDED};
    int64_t inner[2] = {0, 0};
    int vec_ok = p->out.contiguous && ew_aligned(p->out.data);
    for (int i = 0; i < p->nin; i++) {
        if (p->out.contiguous) mode[i] = gpucore_ew_input_mode(&p->out, &p->in[i], &inner[i]);
        if (mode[i] == GPUCORE_EW_LAYOUT_STRIDED || (mode[i] != GPUCORE_EW_LAYOUT_SCALAR && !ew_aligned(p->in[i].data)) ||
            (mode[i] == GPUCORE_EW_LAYOUT_ROW && inner[i] % V))
            vec_ok = 0;
    }
    int64_t nvec = vec_ok ? p->out.numel / V : 0;
    if (nvec > 0) {
        unsigned grid = gpucore_grid_for(nvec, GPUCORE_BLOCK_THREADS, l->sm_count);
        GPUCORE_LAUNCH(ew_vec_kernel<DT>, grid, GPUCORE_BLOCK_THREADS, 0, l->stream, *p, mode[0], inner[0], mode[1],
                       inner[1], nvec);
        int err = GPUCORE_LAUNCH_STATUS();
        if (err) return err;
    }
    int64_t first = nvec * V, rest = p->out.numel - first;
    if (rest <= 0) return 0;
    unsigned grid = gpucore_grid_for(rest, GPUCORE_BLOCK_THREADS, l->sm_count);
    GPUCORE_LAUNCH(ew_scalar_kernel<DT>, grid, GPUCORE_BLOCK_THREADS, 0, l->stream, *p, mode[0], inner[0], mode[1],
                   inner[1], first);
    return GPUCORE_LAUNCH_STATUS();
}

extern "C" int gpucore_kernel_elementwise(const gpucore_launch *launch, const gpucore_ew_args *args)
{
    if (args->out.numel == 0) return 0;
    if (args->op == GPUCORE_EW_CAST) {
        unsigned grid = gpucore_grid_for(args->out.numel, GPUCORE_BLOCK_THREADS, launch->sm_count);
        GPUCORE_LAUNCH(ew_cast_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, args->out, args->in[0]);
        return GPUCORE_LAUNCH_STATUS();
    }
    switch (args->out.dtype) {
    case GPUCORE_KDT_F32: return ew_launch<GPUCORE_KDT_F32>(launch, args);
    case GPUCORE_KDT_F16: return ew_launch<GPUCORE_KDT_F16>(launch, args);
    default: return ew_launch<GPUCORE_KDT_BF16>(launch, args);
    }
}
