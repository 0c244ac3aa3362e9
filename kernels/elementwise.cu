/*
 * elementwise.cu — the elementwise family: binary ops with broadcasting and a
 * fused activation (bias add + GELU is one pass), unary math, scale/axpy/clamp,
 * activation forward/backward, dropout from Philox, and dtype casts.
 *
 * Why it is fast: the work is memory-bound, so the main kernel moves 16 bytes
 * per thread per access (4 f32 or 8 f16/bf16 elements as one uint4 load/store),
 * coalesced across the warp, for every input that is dense, a row repeated over
 * rows (bias: the row index is one multiply-high divide per vector) or a scalar.
 * The op is a kernel parameter, so its switch is a uniform branch. A scalar
 * grid-stride kernel takes the tail and any general strided layout: the views'
 * dims are merged on the host and offsets come from a gpucore_index_map
 * (strided_index.h: multiply-high divides, 32-bit math when the sizes allow).
 * Grids come from the SM count (grid.h). Per-element math is in
 * elementwise_math.h, shared with the CPU.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "elementwise_math.h"
#include "strided_index.h"

/* The V input values of vector starting at element i0 (i0 a multiple of V); inner: ROW's row length. */
template <int DT>
__device__ __forceinline__ void ew_load_vec(const gpucore_view &v, int mode, const gpucore_fastdiv &inner, int64_t i0,
                                            float *x)
{
    const int V = gpucore_dt_size<DT>::vec;
    if (mode == GPUCORE_EW_LAYOUT_SCALAR) {
        float s = gpucore_ld<DT>(v.data, 0);
#pragma unroll
        for (int k = 0; k < V; k++) x[k] = s;
        return;
    }
    int64_t at = i0;
    if (mode == GPUCORE_EW_LAYOUT_ROW) at = i0 - (int64_t)(gpucore_fastdiv64((uint64_t)i0, &inner) * inner.d);
    gpucore_ldv<DT>(v.data, at, x);
}

template <int DT>
__global__ void ew_vec_kernel(gpucore_ew_args p, int mode_a, gpucore_fastdiv inner_a, int mode_b,
                              gpucore_fastdiv inner_b, int64_t nvec)
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
        if (V % 4 == 0 && p.op == GPUCORE_EW_DROPOUT) {
            /* i0 is a multiple of 4: one generator call serves four elements (philox.h's mapping) */
#pragma unroll
            for (int q = 0; q < V / 4; q++) {
                float u[4];
                gpucore_philox_uniform4(p.seed, p.offset, (uint64_t)i0 / 4 + q, u);
#pragma unroll
                for (int k = 0; k < 4; k++) o[4 * q + k] = gpucore_ew_dropout(u[k], p.alpha, p.beta, a[4 * q + k]);
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; k++)
                o[k] = gpucore_ew_compute(p.op, p.act, p.alpha, p.beta, p.seed, p.offset, a[k], b[k], (uint64_t)(i0 + k));
        }
        gpucore_stv<DT>(p.out.data, i0, o);
    }
}

/* Offsets of element i in the views of map (out, in[0], in[1]). */
template <int NARROW, int NV>
__device__ __forceinline__ void ew_offsets(const gpucore_index_map &map, int64_t i, int64_t *off)
{
    if (NARROW) gpucore_index_offsets32(&map, NV, i, off);
    else gpucore_index_offsets64(&map, NV, i, off);
}

/* Elements [first, numel) of any layout; map holds out, in[0] and in[1]. */
template <int DT, int NARROW>
__global__ void ew_scalar_kernel(gpucore_ew_args p, gpucore_index_map map, int64_t first)
{
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.out.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        ew_offsets<NARROW, 3>(map, i, off);
        float a = gpucore_ld<DT>(p.in[0].data, off[1]);
        float b = p.nin == 2 ? gpucore_ld<DT>(p.in[1].data, off[2]) : 0.0f;
        gpucore_st<DT>(p.out.data, off[0], gpucore_ew_compute(p.op, p.act, p.alpha, p.beta, p.seed, p.offset, a, b, (uint64_t)i));
    }
}

/* Casts: one element per thread through f64 (exact for every source dtype), coalesced. */
template <int NARROW>
__global__ void ew_cast_kernel(gpucore_view out, gpucore_view in, gpucore_index_map map)
{
    char *o = (char *)out.data;
    const char *x = (const char *)in.data;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < out.numel; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        ew_offsets<NARROW, 2>(map, i, off);
        gpucore_store_from_f64(o + off[0] * out.elem_size, out.dtype, gpucore_load_as_f64(x + off[1] * in.elem_size, in.dtype));
    }
}

/* The index map of out and the nin inputs. */
static void ew_map(const gpucore_ew_args *p, gpucore_index_map *map)
{
    const gpucore_view *views[3] = {&p->out, &p->in[0], &p->in[1]};
    gpucore_index_map_init(map, views, p->nin >= 2 ? 3 : 2);
}

static int ew_aligned(const void *p) { return ((uintptr_t)p % 16) == 0; }

template <int DT>
static int ew_launch(const gpucore_launch *l, const gpucore_ew_args *p)
{
    const int V = gpucore_dt_size<DT>::vec;
    int mode[2] = {GPUCORE_EW_LAYOUT_STRIDED, GPUCORE_EW_LAYOUT_STRIDED};
    int64_t inner[2] = {0, 0};
    gpucore_fastdiv div[2];
    memset(div, 0, sizeof div);
    int vec_ok = p->out.contiguous && ew_aligned(p->out.data);
    for (int i = 0; i < p->nin; i++) {
        if (p->out.contiguous) mode[i] = gpucore_ew_input_mode(&p->out, &p->in[i], &inner[i]);
        if (mode[i] == GPUCORE_EW_LAYOUT_STRIDED || (mode[i] != GPUCORE_EW_LAYOUT_SCALAR && !ew_aligned(p->in[i].data)) ||
            (mode[i] == GPUCORE_EW_LAYOUT_ROW && (inner[i] % V || inner[i] < 2)))
            vec_ok = 0;
        if (mode[i] == GPUCORE_EW_LAYOUT_ROW && inner[i] >= 2) div[i] = gpucore_fastdiv_make((uint64_t)inner[i]);
    }
    int64_t nvec = vec_ok ? p->out.numel / V : 0;
    if (nvec > 0) {
        unsigned grid = gpucore_grid_for(nvec, GPUCORE_BLOCK_THREADS, l->sm_count);
        GPUCORE_LAUNCH(ew_vec_kernel<DT>, grid, GPUCORE_BLOCK_THREADS, 0, l->stream, *p, mode[0], div[0], mode[1],
                       div[1], nvec);
        int err = GPUCORE_LAUNCH_STATUS();
        if (err) return err;
    }
    int64_t first = nvec * V, rest = p->out.numel - first;
    if (rest <= 0) return 0;
    gpucore_index_map map;
    ew_map(p, &map);
    unsigned grid = gpucore_grid_for(rest, GPUCORE_BLOCK_THREADS, l->sm_count);
    if (map.narrow) GPUCORE_LAUNCH((ew_scalar_kernel<DT, 1>), grid, GPUCORE_BLOCK_THREADS, 0, l->stream, *p, map, first);
    else GPUCORE_LAUNCH((ew_scalar_kernel<DT, 0>), grid, GPUCORE_BLOCK_THREADS, 0, l->stream, *p, map, first);
    return GPUCORE_LAUNCH_STATUS();
}

extern "C" int gpucore_kernel_elementwise(const gpucore_launch *launch, const gpucore_ew_args *args)
{
    if (args->out.numel == 0) return 0;
    if (args->op == GPUCORE_EW_CAST) {
        unsigned grid = gpucore_grid_for(args->out.numel, GPUCORE_BLOCK_THREADS, launch->sm_count);
        gpucore_index_map map;
        ew_map(args, &map);
        if (map.narrow)
            GPUCORE_LAUNCH(ew_cast_kernel<1>, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, args->out, args->in[0], map);
        else
            GPUCORE_LAUNCH(ew_cast_kernel<0>, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, args->out, args->in[0], map);
        return GPUCORE_LAUNCH_STATUS();
    }
    switch (args->out.dtype) {
    case GPUCORE_KDT_F32: return ew_launch<GPUCORE_KDT_F32>(launch, args);
    case GPUCORE_KDT_F16: return ew_launch<GPUCORE_KDT_F16>(launch, args);
    default: return ew_launch<GPUCORE_KDT_BF16>(launch, args);
    }
}
