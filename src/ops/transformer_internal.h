/*
 * transformer_internal.h — what the attention and transformer-op front-ends
 * (src/ops/attention.c, src/ops/transformer.c) share.
 */
#ifndef GPUCORE_OPS_TRANSFORMER_INTERNAL_H
#define GPUCORE_OPS_TRANSFORMER_INTERNAL_H

#include "ops_internal.h"

/* SHAPE_MISMATCH: "<op>: '<name>' has shape [..]; <want>". */
GPUCORE_HIDDEN gpucore_status tfm_shape_error(const char *op, const char *name, const gpucore_tensor *t,
                                              const char *want);

#endif
