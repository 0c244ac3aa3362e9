/*
 * grid.h — grid sizing shared by the launchers: enough blocks to fill every SM a
 * few times over, never more than the work needs; kernels loop grid-stride
 * with 64-bit indices so any size works with any grid.
 */
#ifndef GPUCORE_KERNELS_GRID_H
#define GPUCORE_KERNELS_GRID_H

#include <stdint.h>

#define GPUCORE_BLOCK_THREADS 256
#define GPUCORE_BLOCKS_PER_SM 8

static inline unsigned gpucore_grid_for(int64_t work_items, int threads, int sm_count)
{
    int64_t blocks = (work_items + threads - 1) / threads;
    int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 1) * GPUCORE_BLOCKS_PER_SM;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

#endif
