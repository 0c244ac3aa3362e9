/*
 * copy.cu — strided copy between two views of the same shape and dtype (the
 * building block of transpose/permute-to-contiguous and strided host copies).
 *
 * One thread per element, grid-stride, 64-bit index unravelled against both
 * views' strides. Contiguous-to-contiguous copies never come here (they are a
 * cudaMemcpyAsync).
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"

template <typename T>
__global__ void copy_strided_kernel(gpucore_view dst, gpucore_view src)
{
    T *d = (T *)dst.data;
    const T *s = (const T *)src.data;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < dst.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t doff = dst.contiguous ? i : gpucore_strided_offset(i, dst.ndim, dst.shape, dst.strides);
        int64_t soff = src.contiguous ? i : gpucore_strided_offset(i, src.ndim, src.shape, src.strides);
        d[doff] = s[soff];
    }
}

extern "C" int gpucore_kernel_copy_strided(const gpucore_launch *launch, const gpucore_view *dst,
                                           const gpucore_view *src)
{
    if (dst->numel == 0) return 0;
    unsigned grid = gpucore_grid_for(dst->numel, GPUCORE_BLOCK_THREADS, launch->sm_count);
    switch (dst->elem_size) {
    case 1: GPUCORE_LAUNCH(copy_strided_kernel<uint8_t>, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *dst, *src); break;
    case 2: GPUCORE_LAUNCH(copy_strided_kernel<uint16_t>, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *dst, *src); break;
    case 4: GPUCORE_LAUNCH(copy_strided_kernel<uint32_t>, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *dst, *src); break;
    default: GPUCORE_LAUNCH(copy_strided_kernel<uint64_t>, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *dst, *src); break;
    }
    return GPUCORE_LAUNCH_STATUS();
}
