/*
 * fill.cu — set every element of a tensor to one value.
 *
 * Contiguous and 16-byte aligned: each thread writes a 16-byte vector of the
 * replicated pattern (full-width coalesced stores), then a scalar tail. Strided
 * views unravel a 64-bit linear index per element. Grid-stride loops, grid sized
 * from the SM count.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"

__global__ void fill_vec16_kernel(uint4 *dst, int64_t vectors, uint4 pattern)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = pattern;
}

__global__ void fill_scalar_kernel(gpucore_view dst, int64_t first, uint64_t bits)
{
    const int es = dst.elem_size;
    char *base = (char *)dst.data;
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < dst.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = dst.contiguous ? i : gpucore_strided_offset(i, dst.ndim, dst.shape, dst.strides);
        char *p = base + off * es;
        switch (es) {
        case 1: *(uint8_t *)p = (uint8_t)bits; break;
        case 2: *(uint16_t *)p = (uint16_t)bits; break;
        case 4: *(uint32_t *)p = (uint32_t)bits; break;
        default: *(uint64_t *)p = bits; break;
        }
    }
}

extern "C" int gpucore_kernel_fill(const gpucore_launch *launch, const gpucore_view *dst, uint64_t bits)
{
    int64_t first_scalar = 0;
    if (dst->contiguous && ((uintptr_t)dst->data % 16) == 0) {
        uint64_t rep = bits;
        if (dst->elem_size == 1) rep = (bits & 0xffu) * 0x0101010101010101ull;
        else if (dst->elem_size == 2) rep = (bits & 0xffffu) * 0x0001000100010001ull;
        else if (dst->elem_size == 4) rep = (bits & 0xffffffffull) | ((bits & 0xffffffffull) << 32);
        uint4 pattern;
        pattern.x = pattern.z = (unsigned)rep;
        pattern.y = pattern.w = (unsigned)(rep >> 32);
        int64_t vectors = dst->numel * dst->elem_size / 16;
        if (vectors > 0) {
            unsigned grid = gpucore_grid_for(vectors, GPUCORE_BLOCK_THREADS, launch->sm_count);
            GPUCORE_LAUNCH(fill_vec16_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, (uint4 *)dst->data,
                           vectors, pattern);
            int err = GPUCORE_LAUNCH_STATUS();
            if (err) return err;
        }
        first_scalar = vectors * 16 / dst->elem_size;
    }
    int64_t rest = dst->numel - first_scalar;
    if (rest <= 0) return 0;
    unsigned grid = gpucore_grid_for(rest, GPUCORE_BLOCK_THREADS, launch->sm_count);
    GPUCORE_LAUNCH(fill_scalar_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, *dst, first_scalar, bits);
    return GPUCORE_LAUNCH_STATUS();
}
