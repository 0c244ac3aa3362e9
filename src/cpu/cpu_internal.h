/*
 * cpu_internal.h — what the CPU backend's files share: the stream queue and
 * the op entry points cpu_backend.c puts in the vtable.
 */
#ifndef GPUCORE_CPU_INTERNAL_H
#define GPUCORE_CPU_INTERNAL_H

#include "cpu_stream.h"

GPUCORE_HIDDEN gpucore_status cpu_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s);
GPUCORE_HIDDEN gpucore_status cpu_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s);
GPUCORE_HIDDEN gpucore_status cpu_random(void *bctx, const gpucore_view *dst, int dist, double a, double b,
                                         uint64_t seed, uint64_t offset, void *s);

#endif
