/*
 * copy.cu — strided copy between two views of the same shape and dtype (the
 * building block of transpose/permute-to-contiguous and strided host copies).
 *
 * One thread per element, grid-stride. The views' dims are merged on the host
 * and each element's two offsets come from the launch's gpucore_index_map
 * (strided_index.h): multiply-high divides, 32-bit when the sizes allow.
 * Contiguous-to-contiguous copies never come here (they are a cudaMemcpyAsync).
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "strided_index.h"

template <typename T, int NARROW>
__global__ void copy_strided_kernel(T *d, const T *s, gpucore_index_map map, int64_t numel)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        if (NARROW) gpucore_index_offsets32(&map, 2, i, off);
        else gpucore_index_offsets64(&map, 2, i, off);
        d[off[0]] = s[off[1]];
    }
}

template <typename T>
static void copy_launch(const gpucore_launch *launch, unsigned grid, const gpucore_view *dst, const gpucore_view *src,
                        const gpucore_index_map &map)
{
    if (map.narrow)
        GPUCORE_LAUNCH((copy_strided_kernel<T, 1>), grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, (T *)dst->data,
                       (const T *)src->data, map, dst->numel);
    else
        GPUCORE_LAUNCH((copy_strided_kernel<T, 0>), grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, (T *)dst->data,
                       (const T *)src->data, map, dst->numel);
}

extern "C" int gpucore_kernel_copy_strided(const gpucore_launch *launch, const gpucore_view *dst,
                                           const gpucore_view *src)
{
    if (dst->numel == 0) return 0;
    unsigned grid = gpucore_grid_for(dst->numel, GPUCORE_BLOCK_THREADS, launch->sm_count);
    const gpucore_view *views[2] = {dst, src};
    gpucore_index_map map;
    gpucore_index_map_init(&map, views, 2);
    switch (dst->elem_size) {
    case 1: copy_launch<uint8_t>(launch, grid, dst, src, map); break;
    case 2: copy_launch<uint16_t>(launch, grid, dst, src, map); break;
    case 4: copy_launch<uint32_t>(launch, grid, dst, src, map); break;
    default: copy_launch<uint64_t>(launch, grid, dst, src, map); break;
    }
    return GPUCORE_LAUNCH_STATUS();
}
