/*
 * quant.cu — dequantize a quantized weight (GGUF blocks, bitsandbytes NF4/FP4 and int8 rows;
 * quant_formats.h) into f32, f16 or bf16.
 *
 * One thread per value, grid-stride: each reads its block's scale and its own bits and runs
 * the shared per-value function, so the result equals the CPU backend's bit for bit. Memory
 * bound on the output (4 bytes written per 0.5-1 byte read); neighbouring threads read the
 * same block, which the cache serves.
 */
#include "kernels.h"
#include "launch.h"
#include "grid.h"
#include "dtype_access.h"
#include "quant_formats.h"

__global__ void quant_dequantize_kernel(gpucore_quant_layout L, const uint8_t *bytes, void *values, int dt)
{
    const int es = gpucore_kdt_size(dt);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < L.n; i += (int64_t)gridDim.x * blockDim.x)
        gpucore_store_from_f32((char *)values + i * es, dt, gpucore_quant_value(&L, bytes, i));
}

extern "C" int gpucore_kernel_quant_dequantize(const gpucore_launch *launch, const gpucore_quant_args *args)
{
    if (args->L.n == 0) return 0;
    unsigned grid = gpucore_grid_for(args->L.n, GPUCORE_BLOCK_THREADS, launch->sm_count);
    GPUCORE_LAUNCH(quant_dequantize_kernel, grid, GPUCORE_BLOCK_THREADS, 0, launch->stream, args->L,
                   (const uint8_t *)args->bytes, args->values, args->values_dtype);
    return GPUCORE_LAUNCH_STATUS();
}
