/*
 * copy.c — host<->device and device<->device copies. Host buffers are dense
 * row-major; tensors may be strided (a strided tensor goes through a contiguous
 * staging tensor on the device and the backend's strided copy).
 */
#include <stdio.h>
#include <string.h>
#include "internal.h"
#include "view_span.h"

static gpucore_status check_host_copy(gpucore_tensor *t, const void *host, int64_t nbytes, const char *op)
{
    gpucore_status st = gpucore_check_tensor(t, op, "tensor");
    if (st) return st;
    int64_t expect = gpucore_tensor_numel_unchecked(t) * gpucore_dtype_size((gpucore_dtype)t->dtype);
    if (!host && expect) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: host pointer is NULL", op);
    if (nbytes != expect)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH,
                                 "%s: the host buffer is %lld bytes but the tensor holds %lld bytes", op,
                                 (long long)nbytes, (long long)expect);
    return GPUCORE_OK;
}

/* A contiguous device tensor with t's dtype and shape, for staging strided copies. */
static gpucore_status staging_like(gpucore_tensor *t, gpucore_tensor **out)
{
    return gpucore_tensor_create(t->ctx, (gpucore_dtype)t->dtype, t->ndim, t->shape, out);
}

static gpucore_status copy_from_host_impl(gpucore_tensor *dst, const void *src, int64_t nbytes, gpucore_stream *stream,
                                          int blocking, const char *op)
{
    gpucore_status st = check_host_copy(dst, src, nbytes, op);
    if (st) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(dst->ctx, stream, op, &s))) return st;
    if (nbytes == 0) return GPUCORE_OK;
    gpucore_context *ctx = dst->ctx;
    gpucore_view dv;
    gpucore_tensor_view_of(dst, &dv);
    if (dv.contiguous) {
        st = ctx->be->copy_h2d(ctx->bctx, dv.data, src, (size_t)nbytes, s->bstream);
    } else {
        gpucore_tensor *stage = NULL;
        if ((st = staging_like(dst, &stage))) return st;
        gpucore_view sv;
        gpucore_tensor_view_of(stage, &sv);
        st = ctx->be->copy_h2d(ctx->bctx, sv.data, src, (size_t)nbytes, s->bstream);
        if (!st) st = ctx->be->copy_strided(ctx->bctx, &dv, &sv, s->bstream);
        gpucore_tensor_destroy(stage); /* freed in stream order */
    }
    if (!st && blocking) st = ctx->be->stream_synchronize(ctx->bctx, s->bstream);
    return st;
}

static gpucore_status copy_to_host_impl(void *dst, int64_t nbytes, gpucore_tensor *src, gpucore_stream *stream,
                                        int blocking, const char *op)
{
    gpucore_status st = check_host_copy(src, dst, nbytes, op);
    if (st) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(src->ctx, stream, op, &s))) return st;
    if (nbytes == 0) return GPUCORE_OK;
    gpucore_context *ctx = src->ctx;
    gpucore_view sv;
    gpucore_tensor_view_of(src, &sv);
    if (sv.contiguous) {
        st = ctx->be->copy_d2h(ctx->bctx, dst, sv.data, (size_t)nbytes, s->bstream);
        if (!st && blocking) st = ctx->be->stream_synchronize(ctx->bctx, s->bstream);
    } else {
        gpucore_tensor *stage = NULL;
        if ((st = staging_like(src, &stage))) return st;
        gpucore_view tv;
        gpucore_tensor_view_of(stage, &tv);
        st = ctx->be->copy_strided(ctx->bctx, &tv, &sv, s->bstream);
        if (!st) st = ctx->be->copy_d2h(ctx->bctx, dst, tv.data, (size_t)nbytes, s->bstream);
        if (!st && blocking) st = ctx->be->stream_synchronize(ctx->bctx, s->bstream);
        gpucore_tensor_destroy(stage);
    }
    return st;
}

gpucore_status gpucore_copy_from_host(gpucore_tensor *dst, const void *src, int64_t nbytes)
{
    return copy_from_host_impl(dst, src, nbytes, NULL, 1, "copy_from_host");
}

gpucore_status gpucore_copy_to_host(void *dst, int64_t nbytes, gpucore_tensor *src)
{
    return copy_to_host_impl(dst, nbytes, src, NULL, 1, "copy_to_host");
}

gpucore_status gpucore_copy_from_host_async(gpucore_tensor *dst, const void *src, int64_t nbytes,
                                            gpucore_stream *stream)
{
    return copy_from_host_impl(dst, src, nbytes, stream, 0, "copy_from_host_async");
}

gpucore_status gpucore_copy_to_host_async(void *dst, int64_t nbytes, gpucore_tensor *src, gpucore_stream *stream)
{
    return copy_to_host_impl(dst, nbytes, src, stream, 0, "copy_to_host_async");
}

gpucore_status gpucore_copy(gpucore_tensor *dst, const gpucore_tensor *src, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(dst, "copy", "dst");
    if (st || (st = gpucore_check_tensor(src, "copy", "src"))) return st;
    if (dst->ctx != src->ctx)
        return gpucore_context_mismatch("copy", "dst", dst->ctx, "src", src->ctx);
    if (dst->dtype != src->dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "copy: dst is %s but src is %s; copies do not convert",
                                 gpucore_dtype_name((gpucore_dtype)dst->dtype), gpucore_dtype_name((gpucore_dtype)src->dtype));
    if (dst->ndim != src->ndim || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->ndim)) {
        char a[200], b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "copy: dst has shape %s but src has %s",
                                 gpucore_shape_str(dst->ndim, dst->shape, a, sizeof a),
                                 gpucore_shape_str(src->ndim, src->shape, b, sizeof b));
    }
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(dst->ctx, stream, "copy", &s))) return st;
    gpucore_view dv, sv;
    gpucore_tensor_view_of(dst, &dv);
    gpucore_tensor_view_of(src, &sv);
    if (dv.numel == 0 || dv.data == sv.data) {
        if (dv.numel && memcmp(dv.strides, sv.strides, sizeof(int64_t) * (size_t)dv.ndim))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "copy: dst and src overlap with different strides");
        return GPUCORE_OK;
    }
    if (gpucore_views_overlap(&dv, &sv))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "copy: dst and src overlap in memory; copy through a temporary tensor");
    gpucore_context *ctx = dst->ctx;
    void *prof = gpucore_prof_begin(ctx, s, "copy", 2 * dv.numel * dv.elem_size);
    if (dv.contiguous && sv.contiguous)
        st = ctx->be->copy_d2d(ctx->bctx, dv.data, sv.data, (size_t)(dv.numel * dv.elem_size), s->bstream);
    else
        st = ctx->be->copy_strided(ctx->bctx, &dv, &sv, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

gpucore_status gpucore_concat(gpucore_tensor *out, gpucore_tensor *const *inputs, int count, int dim,
                              gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(out, "concat", "out");
    if (st) return st;
    if (count < 1 || !inputs)
        return gpucore_set_error(count < 1 ? GPUCORE_ERR_INVALID_ARGUMENT : GPUCORE_ERR_NULL_POINTER,
                                 "concat: %d inputs; give an array of at least one tensor", count);
    int d = dim < 0 ? dim + out->ndim : dim;
    if (d < 0 || d >= out->ndim)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "concat: dim %d is out of range for a %d-d output", dim,
                                 out->ndim);
    /* Check everything before queueing anything, so a bad input leaves out untouched. */
    int64_t total = 0;
    for (int i = 0; i < count; i++) {
        const gpucore_tensor *in = inputs[i];
        char name[32];
        snprintf(name, sizeof name, "inputs[%d]", i);
        if ((st = gpucore_check_tensor(in, "concat", name))) return st;
        if (in->ctx != out->ctx)
            return gpucore_context_mismatch("concat", name, in->ctx, "out", out->ctx);
        if (in->dtype != out->dtype)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "concat: %s is %s but out is %s", name,
                                     gpucore_dtype_name((gpucore_dtype)in->dtype),
                                     gpucore_dtype_name((gpucore_dtype)out->dtype));
        int same = in->ndim == out->ndim;
        for (int k = 0; same && k < out->ndim; k++)
            if (k != d && in->shape[k] != out->shape[k]) same = 0;
        if (!same) {
            char a[200], b[200];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH,
                                     "concat: %s has shape %s; every input must match out %s except along dim %d",
                                     name, gpucore_shape_str(in->ndim, in->shape, a, sizeof a),
                                     gpucore_shape_str(out->ndim, out->shape, b, sizeof b), d);
        }
        total += in->shape[d];
    }
    if (total != out->shape[d])
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH,
                                 "concat: the inputs add up to %lld along dim %d but out has %lld", (long long)total, d,
                                 (long long)out->shape[d]);
    int64_t at = 0;
    for (int i = 0; i < count && !st; i++) {
        gpucore_tensor *part = NULL;
        int64_t len = inputs[i]->shape[d];
        if ((st = gpucore_tensor_slice(out, d, at, at + len, 1, &part))) break;
        st = gpucore_copy(part, inputs[i], stream);
        gpucore_tensor_destroy(part);
        at += len;
    }
    return st;
}
