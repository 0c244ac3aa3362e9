/*
 * random.cu — Philox random fill (uniform, normal) of any floating tensor.
 *
 * Each element's value is a pure function of (seed, offset, index) defined once
 * in philox.h, so this kernel and the CPU backend give identical numbers. The
 * work is arithmetic-bound (10 Philox rounds per draw), so threads simply take
 * elements grid-stride; stores are coalesced for contiguous tensors.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"

__global__ void random_fill_kernel(gpucore_view dst, gpucore_random_params rp)
{
    char *base = (char *)dst.data;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < dst.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = dst.contiguous ? i : gpucore_strided_offset(i, dst.ndim, dst.shape, dst.strides);
        gpucore_random_element(base + off * dst.elem_size, &rp, (uint64_t)i);
    }
}

extern "C" int gpucore_kernel_random(const gpucore_launch *launch, const gpucore_view *dst,
                                     const gpucore_random_params *rp)
{
    if (dst->numel == 0) return 0;
    unsigned grid = gpucore_grid_for(dst->numel, GPUCORE_BLOCK_THREADS, launch->sm_count);
    GPUCORE_LAUNCH(random_fill_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *dst, *rp);
    return GPUCORE_LAUNCH_STATUS();
}
