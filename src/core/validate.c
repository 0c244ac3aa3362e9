/*
 * validate.c — the argument checks every API front-end shares: handles, streams,
 * shapes and their overflow-safe sizes, dtypes. Each failure names the call and
 * the argument so the message alone tells the user what to fix.
 */
#include <stdio.h>
#include <string.h>
#include "internal.h"
#include "op_tables.h"

int gpucore_dtype_valid(int dtype) { return dtype >= 0 && dtype < GPUCORE_DTYPE_COUNT; }

gpucore_status gpucore_context_mismatch(const char *op, const char *a_what, const gpucore_context *a,
                                       const char *b_what, const gpucore_context *b)
{
    const char *same = strcmp(a->name, b->name) == 0 ? " (two contexts of one device are still two contexts)" : "";
    return gpucore_set_error(GPUCORE_ERR_DEVICE_MISMATCH,
                             "%s: %s belongs to context #%lld (%s) but %s to context #%lld (%s)%s; all tensors, "
                             "streams and communicators of one call must come from one context: create them with "
                             "that context (Python: device=ctx, or gpucore.default_context() everywhere), or move "
                             "data between contexts through the host (copy_to_host, then copy_from_host)",
                             op, a_what, (long long)a->id, a->name, b_what, (long long)b->id, b->name, same);
}

gpucore_status gpucore_check_context(const gpucore_context *ctx, const char *op)
{
    if (!ctx) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: context is NULL", op);
    if (ctx->magic != GPUCORE_MAGIC_CONTEXT)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE,
                                 "%s: the context handle is not a live context (destroyed already?)", op);
    return GPUCORE_OK;
}

int gpucore_tensor_live(const gpucore_tensor *t)
{
    return t && t->magic == GPUCORE_MAGIC_TENSOR && t->ctx && t->ctx->magic == GPUCORE_MAGIC_CONTEXT;
}

gpucore_status gpucore_check_tensor(const gpucore_tensor *t, const char *op, const char *arg)
{
    if (gpucore_tensor_live(t)) return GPUCORE_OK;
    if (!t) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: tensor '%s' is NULL", op, arg);
    if (t->magic != GPUCORE_MAGIC_TENSOR)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE,
                                 "%s: tensor '%s' is not a live tensor (destroyed already, or its context was)",
                                 op, arg);
    if (!t->ctx || t->ctx->magic != GPUCORE_MAGIC_CONTEXT)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: tensor '%s' belongs to a destroyed context", op, arg);
    return GPUCORE_OK;
}

gpucore_status gpucore_check_stream(const gpucore_stream *s, const char *op)
{
    if (!s) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: stream is NULL", op);
    if (s->magic != GPUCORE_MAGIC_STREAM)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE,
                                 "%s: the stream handle is not a live stream (destroyed already?)", op);
    return GPUCORE_OK;
}

gpucore_status gpucore_check_event(const gpucore_event *e, const char *op)
{
    if (!e) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: event is NULL", op);
    if (e->magic != GPUCORE_MAGIC_EVENT)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE,
                                 "%s: the event handle is not a live event (destroyed already?)", op);
    return GPUCORE_OK;
}

const char *gpucore_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    n += (size_t)snprintf(buf + n, len - n, "[");
    for (int i = 0; i < ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

gpucore_status gpucore_check_shape(int ndim, const int64_t *shape, gpucore_dtype dtype, const char *op,
                                   int64_t *numel, int64_t *nbytes)
{
    if (!gpucore_dtype_valid((int)dtype))
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: dtype %d is not a gpucore_dtype (0..%d)", op,
                                 (int)dtype, GPUCORE_DTYPE_COUNT - 1);
    if (ndim < 0 || ndim > GPUCORE_MAX_DIMS)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: ndim is %d; it must be 0..%d", op, ndim,
                                 GPUCORE_MAX_DIMS);
    if (ndim > 0 && !shape) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: shape is NULL with ndim %d", op, ndim);
    int64_t count = 1;
    int overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: shape[%d] is %lld; sizes must be >= 0", op,
                                     i, (long long)shape[i]);
        if (!overflow && __builtin_mul_overflow(count, shape[i], &count)) overflow = 1;
    }
    int64_t esize = gpucore_dtype_size(dtype);
    int64_t bytes = 0;
    if (!overflow && __builtin_mul_overflow(count, esize, &bytes)) overflow = 1;
    /* A zero dim makes the tensor empty even if the other dims overflowed. */
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) { overflow = 0; count = 0; bytes = 0; }
    if (overflow) {
        char buf[200];
        return gpucore_set_error(GPUCORE_ERR_OVERFLOW,
                                 "%s: shape %s of %s has more bytes than fit in a signed 64-bit size", op,
                                 gpucore_shape_str(ndim, shape, buf, sizeof buf), gpucore_dtype_name(dtype));
    }
    if (numel) *numel = count;
    if (nbytes) *nbytes = bytes;
    return GPUCORE_OK;
}

int64_t gpucore_dtype_size(gpucore_dtype dtype)
{
#define DTYPE_SIZE(N, name, bytes) bytes,
    static const int64_t sizes[GPUCORE_DTYPE_COUNT] = {GPUCORE_DTYPE_TABLE(DTYPE_SIZE)}; /* kernels/op_tables.h */
#undef DTYPE_SIZE
    return gpucore_dtype_valid((int)dtype) ? sizes[dtype] : 0;
}

const char *gpucore_dtype_name(gpucore_dtype dtype)
{
    static const char *names[GPUCORE_DTYPE_COUNT] = {GPUCORE_DTYPE_TABLE(GPUCORE_TABLE_NAME_STR)};
    return gpucore_dtype_valid((int)dtype) ? names[dtype] : "invalid";
}
