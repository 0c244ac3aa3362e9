/*
 * kernels.h — C-callable launchers for the hand-written CUDA kernels.
 *
 * Each returns 0 when the launch was accepted, else the cudaError_t value (the
 * caller turns it into a gpucore_status). Launchers are asynchronous on
 * launch->stream and validate nothing: the API layer already did.
 */
#ifndef GPUCORE_KERNELS_H
#define GPUCORE_KERNELS_H

#include <stdint.h>
#include "view.h"
#include "philox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpucore_launch {
    void *stream;       /* cudaStream_t (or the SIMT layer's stream) */
    int sm_count;       /* sizes persistent grids */
} gpucore_launch;

/* fill.cu: every element of dst := the value whose bit pattern is in the low elem_size bytes of bits. */
int gpucore_kernel_fill(const gpucore_launch *launch, const gpucore_view *dst, uint64_t bits);

/* random.cu: Philox uniform/normal fill (philox.h defines the numbers). */
int gpucore_kernel_random(const gpucore_launch *launch, const gpucore_view *dst, const gpucore_random_params *rp);

/* copy.cu: dst[i] := src[i] for same-shape, same-dtype strided views. */
int gpucore_kernel_copy_strided(const gpucore_launch *launch, const gpucore_view *dst, const gpucore_view *src);

#ifdef __cplusplus
}
#endif
#endif
