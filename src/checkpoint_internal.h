/*
 * checkpoint_internal.h — what checkpoint.c (the segment executor) and
 * checkpoint_segments.c (the built-in segments) share. Everything here sits above
 * the backend vtable: segments are made of public ops only.
 */
#ifndef GPUCORE_CHECKPOINT_INTERNAL_H
#define GPUCORE_CHECKPOINT_INTERNAL_H

#include "internal.h"

/* Register a segment with the executor (at the top level, or inside the open
 * residual block). user is released with free_user (may be NULL) when the
 * executor is destroyed, also when this call fails. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_add_segment(gpucore_ckpt *ckpt, const char *name,
                                                       gpucore_ckpt_forward_fn forward,
                                                       gpucore_ckpt_backward_fn backward, void *user,
                                                       void (*free_user)(void *), const char *op);

/* A new handle on t's memory (same view), owned by the caller. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_alias(const gpucore_tensor *t, gpucore_tensor **out);

#endif
