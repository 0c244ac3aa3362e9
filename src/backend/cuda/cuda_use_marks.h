/*
 * cuda_use_marks.h — where a cached cuDNN plan may still run: the streams it was enqueued on,
 * each with an event recorded after its last run there. The convolution and attention plan
 * caches keep one set per entry and free an entry only when its events have passed.
 * The caller serialises access to a set (its cache's lock).
 */
#ifndef GPUCORE_CUDA_USE_MARKS_H
#define GPUCORE_CUDA_USE_MARKS_H

#include "cuda_internal.h"

#define CUDA_USE_MARKS 8

typedef struct cuda_use_marks {
    int n;
    struct { cudaStream_t stream; cudaEvent_t done; } m[CUDA_USE_MARKS];
} cuda_use_marks;

/* After enqueueing a plan on stream: a stream seen before re-records its event (stream order covers the
 * earlier runs); a new one takes a slot whose event has passed, or a new slot; with every slot busy the
 * oldest is waited for (more than CUDA_USE_MARKS streams running one plan at once). */
CUDA_HIDDEN gpucore_status cuda_use_marks_record(cuda_use_marks *u, cudaStream_t stream);
/* Whether every run marked has finished. A failing query (a device error, which it leaves to the call
 * that reads it) counts as finished: that stream runs nothing more. */
CUDA_HIDDEN int cuda_use_marks_idle(const cuda_use_marks *u);
/* Wait for every run marked, then destroy the events (the set is empty after). */
CUDA_HIDDEN void cuda_use_marks_release(cuda_use_marks *u);

#endif
