/*
 * amp.c — dynamic loss scaling for mixed precision: the scaler owns a
 * device-resident scale, growth tracker and found-inf flag; unscale is one
 * multi-tensor backend op (check every gradient for Inf/NaN and multiply by
 * 1/scale), update one tiny op. Neither waits for the host: the optimizer step
 * reads found_inf on the device and skips itself.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "train_internal.h"

gpucore_status gpucore_check_loss_scaler(const gpucore_loss_scaler *s, const char *op)
{
    if (!s) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: loss scaler is NULL", op);
    if (s->magic != GPUCORE_MAGIC_LOSS_SCALER)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: not a live loss scaler (destroyed already?)", op);
    if (gpucore_check_context(s->ctx, op))
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the loss scaler's context was destroyed", op);
    return GPUCORE_OK;
}

gpucore_status gpucore_loss_scaler_config_default(gpucore_loss_scaler_config *cfg)
{
    if (!cfg) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "loss_scaler_config_default: cfg is NULL");
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->init_scale = 65536.0;
    cfg->growth_factor = 2.0;
    cfg->backoff_factor = 0.5;
    cfg->growth_interval = 2000;
    return GPUCORE_OK;
}

static void scaler_free(gpucore_loss_scaler *s)
{
    if (s->scale) gpucore_tensor_destroy(s->scale);
    if (s->found_inf) gpucore_tensor_destroy(s->found_inf);
    if (s->growth_tracker) gpucore_tensor_destroy(s->growth_tracker);
    s->magic = GPUCORE_MAGIC_DEAD;
    free(s);
}

gpucore_status gpucore_loss_scaler_create(gpucore_context *ctx, const gpucore_loss_scaler_config *cfg,
                                          gpucore_loss_scaler **out)
{
    const char *op = "loss_scaler_create";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    gpucore_loss_scaler_config c;
    gpucore_loss_scaler_config_default(&c);
    if (cfg) {
        if (cfg->struct_size < (int64_t)sizeof c)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "%s: cfg->struct_size is %lld; set it to sizeof(gpucore_loss_scaler_config) (%zu) "
                                     "or fill cfg with gpucore_loss_scaler_config_default",
                                     op, (long long)cfg->struct_size, sizeof c);
        c = *cfg;
        c.struct_size = sizeof c;
    }
    if (!(c.init_scale > 0) || !isfinite(c.init_scale) || (float)c.init_scale == INFINITY)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: init_scale is %g; it must be > 0 and finite in f32",
                                 op, c.init_scale);
    if (!(c.growth_factor > 1) || !isfinite(c.growth_factor))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: growth_factor is %g; it must be > 1", op,
                                 c.growth_factor);
    if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: backoff_factor is %g; it must be in (0, 1)", op,
                                 c.backoff_factor);
    if (c.growth_interval < 1 || c.growth_interval > INT32_MAX)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: growth_interval is %lld; it must be 1..%d", op,
                                 (long long)c.growth_interval, INT32_MAX);
    if (!ctx->be->amp_unscale || !ctx->be->amp_update)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend has no loss scaling", op, ctx->be->name);
    gpucore_loss_scaler *s = calloc(1, sizeof *s);
    if (!s) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    s->magic = GPUCORE_MAGIC_LOSS_SCALER;
    s->ctx = ctx;
    s->cfg = c;
    st = gpucore_scalar_tensor_new(ctx, GPUCORE_F32, c.init_scale, &s->scale);
    if (!st) st = gpucore_scalar_tensor_new(ctx, GPUCORE_F32, 0.0, &s->found_inf);
    if (!st) st = gpucore_scalar_tensor_new(ctx, GPUCORE_I32, 0.0, &s->growth_tracker);
    if (!st) st = gpucore_context_synchronize(ctx); /* ready for use on any stream */
    if (st) {
        scaler_free(s);
        return st;
    }
    *out = s;
    return GPUCORE_OK;
}

gpucore_status gpucore_loss_scaler_destroy(gpucore_loss_scaler *scaler)
{
    if (!scaler) return GPUCORE_OK;
    gpucore_status st = gpucore_check_loss_scaler(scaler, "loss_scaler_destroy");
    if (st) return st;
    scaler_free(scaler);
    return GPUCORE_OK;
}

static void *data_of(const gpucore_tensor *t)
{
    void *d = NULL;
    gpucore_tensor_data(t, &d);
    return d;
}

gpucore_status gpucore_loss_scaler_unscale(gpucore_loss_scaler *scaler, gpucore_tensor *const *grads, int64_t count,
                                           gpucore_stream *stream)
{
    const char *op = "loss_scaler_unscale";
    gpucore_status st = gpucore_check_loss_scaler(scaler, op);
    if (st) return st;
    gpucore_context *ctx = scaler->ctx;
    if ((st = gpucore_check_float_list(grads, count, &ctx, op, "grads"))) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;
    gpucore_mt_tensor *list = calloc((size_t)(count ? count : 1), sizeof *list);
    if (!list) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    int64_t used = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t n = gpucore_tensor_numel_unchecked(grads[i]);
        if (n == 0) continue;
        list[used].data = data_of(grads[i]);
        list[used].numel = n;
        list[used].dtype = grads[i]->dtype;
        used++;
    }
    /* found_inf starts clear for this step, in stream order before the check */
    int64_t prof_bytes = 0;
    for (int64_t i = 0; i < used; i++) prof_bytes += 2 * list[i].numel * gpucore_dtype_size((gpucore_dtype)list[i].dtype);
    void *prof = gpucore_prof_begin(ctx, s, "loss_scaler_unscale", prof_bytes);
    st = gpucore_fill(scaler->found_inf, 0.0, s);
    if (!st)
        st = ctx->be->amp_unscale(ctx->bctx, list, used, data_of(scaler->scale), data_of(scaler->found_inf),
                                  s->bstream);
    gpucore_prof_end(ctx, prof);
    free(list);
    return st;
}

gpucore_status gpucore_loss_scaler_update(gpucore_loss_scaler *scaler, gpucore_stream *stream)
{
    const char *op = "loss_scaler_update";
    gpucore_status st = gpucore_check_loss_scaler(scaler, op);
    if (st) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(scaler->ctx, stream, op, &s))) return st;
    gpucore_context *ctx = scaler->ctx;
    void *prof = gpucore_prof_begin(ctx, s, "loss_scaler_update", 12);
    st = ctx->be->amp_update(ctx->bctx, data_of(scaler->scale), data_of(scaler->growth_tracker),
                             data_of(scaler->found_inf), (float)scaler->cfg.growth_factor,
                             (float)scaler->cfg.backoff_factor, (int32_t)scaler->cfg.growth_interval, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

static gpucore_status scaler_tensor(gpucore_loss_scaler *s, gpucore_tensor *t, gpucore_tensor **out, const char *op)
{
    gpucore_status st = gpucore_check_loss_scaler(s, op);
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = t;
    return GPUCORE_OK;
}

gpucore_status gpucore_loss_scaler_scale(gpucore_loss_scaler *s, gpucore_tensor **out)
{
    return scaler_tensor(s, s && s->magic == GPUCORE_MAGIC_LOSS_SCALER ? s->scale : NULL, out, "loss_scaler_scale");
}

gpucore_status gpucore_loss_scaler_found_inf(gpucore_loss_scaler *s, gpucore_tensor **out)
{
    return scaler_tensor(s, s && s->magic == GPUCORE_MAGIC_LOSS_SCALER ? s->found_inf : NULL, out,
                         "loss_scaler_found_inf");
}

gpucore_status gpucore_loss_scaler_growth_tracker(gpucore_loss_scaler *s, gpucore_tensor **out)
{
    return scaler_tensor(s, s && s->magic == GPUCORE_MAGIC_LOSS_SCALER ? s->growth_tracker : NULL, out,
                         "loss_scaler_growth_tracker");
}
