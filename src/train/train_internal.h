/*
 * train_internal.h — what the training front-ends share (optim.c, amp.c,
 * clip.c, state_checkpoint.c): the optimizer and loss-scaler handle layouts and the
 * checks on lists of tensors.
 */
#ifndef GPUCORE_TRAIN_INTERNAL_H
#define GPUCORE_TRAIN_INTERNAL_H

#include "core/internal.h"

#define GPUCORE_MAGIC_OPTIMIZER 0x0B71A1E5u
#define GPUCORE_MAGIC_LOSS_SCALER 0x5CA1E5CAu

struct gpucore_optimizer {
    uint32_t magic;
    gpucore_context *ctx;
    gpucore_optimizer_config cfg;
    int64_t count;
    gpucore_tensor **params;      /* borrowed */
    gpucore_tensor **state0;      /* AdamW exp_avg / SGD momentum buffer (NULL entries without momentum) */
    gpucore_tensor **state1;      /* AdamW exp_avg_sq */
    gpucore_tensor **master;      /* f32 master copies of f16/bf16 params (NULL entries for f32) */
    gpucore_tensor *lr, *step;    /* 0-d f32 device scalars */
    gpucore_optim_tensor *table;  /* scratch for one step's descriptor list */
};

struct gpucore_loss_scaler {
    uint32_t magic;
    gpucore_context *ctx;
    gpucore_loss_scaler_config cfg;
    gpucore_tensor *scale, *found_inf, *growth_tracker;
};

GPUCORE_HIDDEN gpucore_status gpucore_check_optimizer(const gpucore_optimizer *opt, const char *op);
GPUCORE_HIDDEN gpucore_status gpucore_check_loss_scaler(const gpucore_loss_scaler *s, const char *op);

/* Check a list of tensors: non-NULL array (when count > 0), count in range, each a
 * live contiguous floating tensor (f32/f16/bf16) on ctx (*ctx NULL: the first's). */
GPUCORE_HIDDEN gpucore_status gpucore_check_float_list(gpucore_tensor *const *ts, int64_t count, gpucore_context **ctx,
                                                       const char *op, const char *what);
/* A live 0-d (or one-element) tensor of dtype on ctx. */
GPUCORE_HIDDEN gpucore_status gpucore_check_scalar_tensor(const gpucore_tensor *t, gpucore_context *ctx,
                                                          gpucore_dtype dtype, const char *op, const char *what);
/* 0-d tensor on ctx filled with value (the fill is queued on ctx's current stream). */
GPUCORE_HIDDEN gpucore_status gpucore_scalar_tensor_new(gpucore_context *ctx, gpucore_dtype dtype, double value,
                                                        gpucore_tensor **out);

/* A new tensor whose memory is allocated on `stream` (stream-ordered there) instead
 * of the calling thread's current stream (zero.c; used by ZeRO's gathers and the
 * pipeline's inbound copies, which write on a side stream). */
GPUCORE_HIDDEN gpucore_status gpucore_train_tensor_on(gpucore_context *ctx, gpucore_dtype dtype, int ndim,
                                                      const int64_t *shape, gpucore_stream *stream,
                                                      gpucore_tensor **out);

#endif
