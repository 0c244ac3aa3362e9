/*
 * view_span.h — the byte span of a strided view and the overlap tests built on
 * it, one copy for every front-end that checks aliasing (ops/ops_common.c,
 * ops/matmul.c, ops/conv.c, core/copy.c, comm/comm.c).
 */
#ifndef GPUCORE_CORE_VIEW_SPAN_H
#define GPUCORE_CORE_VIEW_SPAN_H

#include <stdint.h>
#include "internal.h"

/* [*lo, *hi): the bytes view v's elements can touch (negative strides included);
 * an empty view (or one without data) touches nothing: *lo == *hi. */
GPUCORE_HIDDEN void gpucore_view_byte_span(const gpucore_view *v, uintptr_t *lo, uintptr_t *hi);
/* Whether two byte ranges [a, a+an) and [b, b+bn) intersect (empty ones never do). */
GPUCORE_HIDDEN int gpucore_bytes_overlap(const void *a, int64_t an, const void *b, int64_t bn);
/* Whether the byte spans of two views intersect (a conservative overlap test). */
GPUCORE_HIDDEN int gpucore_views_overlap(const gpucore_view *a, const gpucore_view *b);
/* The same for two tensors (through their views). */
GPUCORE_HIDDEN int gpucore_tensors_overlap(const gpucore_tensor *a, const gpucore_tensor *b);

#endif
