/*
 * kernel_ops.h — vtable op entries shared by every backend that runs the
 * hand-written kernels in kernels/ (the CUDA module, and the test-only
 * cuda-emulated module). Each such module compiles src/kernel_ops.c and
 * provides the two hooks below; adding an op means one entry in kernel_ops.c,
 * used by both.
 */
#ifndef GPUCORE_KERNEL_OPS_H
#define GPUCORE_KERNEL_OPS_H

#include "backend.h"
#include "../kernels/kernels.h"

#define KOPS_HIDDEN __attribute__((visibility("hidden")))

/* Provided by the module: make `launch` for stream s of context bctx (select
 * the device, fill in stream and SM count). */
KOPS_HIDDEN gpucore_status kops_launch_for(void *bctx, void *s, gpucore_launch *launch);
/* Provided by the module: turn a launcher's non-zero return into a status. */
KOPS_HIDDEN gpucore_status kops_error(int err, const char *what);

/* Op entries (kernel_ops.c). */
KOPS_HIDDEN gpucore_status kops_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s);
KOPS_HIDDEN gpucore_status kops_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s);
KOPS_HIDDEN gpucore_status kops_random(void *bctx, const gpucore_view *dst, int dist, double a, double b,
                                       uint64_t seed, uint64_t offset, void *s);

#endif
