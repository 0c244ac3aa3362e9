/*
 * tensor.c — tensor handles: creation, wrapping caller memory, views (slice,
 * reshape, transpose, permute) and the getters. A tensor is (storage, offset,
 * shape, strides); views share the refcounted storage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* An empty tensor may carry dims whose product overflows; a non-empty one cannot (its byte
 * size was checked when it was made, and views never add elements). */
static int tensor_is_empty(const gpucore_tensor *t)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 1;
    return 0;
}

int64_t gpucore_tensor_numel_unchecked(const gpucore_tensor *t)
{
    if (tensor_is_empty(t)) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int gpucore_tensor_contiguous_unchecked(const gpucore_tensor *t)
{
    if (tensor_is_empty(t)) return 1;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect) return 0;
        expect *= t->shape[i];
    }
    return 1;
}

void gpucore_tensor_view_of(const gpucore_tensor *t, gpucore_view *v)
{
    /* every field written once (no memset first: on some x86 cores a small memset is a
     * `rep stos` that costs more than the whole per-op bookkeeping around it) */
    v->elem_size = (int32_t)gpucore_dtype_size((gpucore_dtype)t->dtype);
    v->data = t->storage->base ? (char *)t->storage->base + t->offset * v->elem_size : NULL;
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    v->numel = gpucore_tensor_numel_unchecked(t);
    for (int i = 0; i < GPUCORE_VIEW_MAX_DIMS; i++) {
        v->shape[i] = i < t->ndim ? t->shape[i] : 0;
        v->strides[i] = i < t->ndim ? t->strides[i] : 0;
    }
    v->contiguous = gpucore_tensor_contiguous_unchecked(t);
}

/* Row-major strides. Only an empty tensor can have dims whose product overflows (its
 * strides address nothing), so the running product saturates instead of overflowing. */
static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        if (__builtin_mul_overflow(s, shape[i] ? shape[i] : 1, &s)) s = INT64_MAX;
    }
}

static void tensor_link(gpucore_tensor *t)
{
    gpucore_context *ctx = t->ctx;
    pthread_mutex_lock(&ctx->lock);
    t->prev = NULL;
    t->next = ctx->tensors;
    if (ctx->tensors) ctx->tensors->prev = t;
    ctx->tensors = t;
    pthread_mutex_unlock(&ctx->lock);
}

static void tensor_unlink(gpucore_tensor *t)
{
    gpucore_context *ctx = t->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (t->prev) t->prev->next = t->next;
    else ctx->tensors = t->next;
    if (t->next) t->next->prev = t->prev;
    pthread_mutex_unlock(&ctx->lock);
}

static void storage_release(gpucore_storage *st)
{
    if (atomic_fetch_sub(&st->refcount, 1) != 1) return;
    if (st->owned) {
        gpucore_memory_free(st->ctx, st->base, st->alloc_bstream);
    } else if (st->deleter) {
        /* The owner may free the memory in its deleter: first let every queued op that may
         * touch it finish (any stream of the context could have used it). */
        gpucore_context_synchronize(st->ctx);
        st->deleter(st->deleter_ctx);
    }
    free(st);
}

/* A new handle on `storage` (whose reference the caller passes in). */
static gpucore_status tensor_new(gpucore_context *ctx, gpucore_storage *storage, gpucore_dtype dtype, int ndim,
                                 const int64_t *shape, const int64_t *strides, int64_t offset, gpucore_tensor **out)
{
    gpucore_tensor *t = gpucore_handle_alloc(&gpucore_tensor_pool);
    if (!t) {
        storage_release(storage);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "tensor: out of host memory for the handle");
    }
    t->ctx = ctx;
    t->storage = storage;
    t->dtype = (int32_t)dtype;
    t->ndim = ndim;
    t->offset = offset;
    for (int i = 0; i < ndim; i++) { t->shape[i] = shape[i]; t->strides[i] = strides[i]; }
    t->magic = GPUCORE_MAGIC_TENSOR;
    tensor_link(t);
    *out = t;
    return GPUCORE_OK;
}

gpucore_status gpucore_tensor_create(gpucore_context *ctx, gpucore_dtype dtype, int ndim, const int64_t *shape,
                                     gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_context(ctx, "tensor_create");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_create: out is NULL");
    *out = NULL;
    int64_t numel, nbytes;
    if ((st = gpucore_check_shape(ndim, shape, dtype, "tensor_create", &numel, &nbytes))) return st;
    gpucore_storage *storage = calloc(1, sizeof *storage);
    if (!storage) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "tensor_create: out of host memory");
    gpucore_stream *stream = NULL;
    gpucore_resolve_stream(ctx, NULL, "tensor_create", &stream);
    if ((st = gpucore_memory_alloc(ctx, nbytes, stream, &storage->base))) { free(storage); return st; }
    atomic_init(&storage->refcount, 1);
    storage->ctx = ctx;
    storage->bytes = nbytes;
    storage->owned = 1;
    storage->alloc_bstream = stream->bstream;
    int64_t strides[GPUCORE_MAX_DIMS];
    contiguous_strides(ndim, shape, strides);
    return tensor_new(ctx, storage, dtype, ndim, shape, strides, 0, out);
}

gpucore_status gpucore_tensor_wrap(gpucore_context *ctx, gpucore_dtype dtype, int ndim, const int64_t *shape,
                                   const int64_t *strides, void *data, void (*deleter)(void *), void *deleter_ctx,
                                   gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_context(ctx, "tensor_wrap");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_wrap: out is NULL");
    *out = NULL;
    int64_t numel, nbytes;
    if ((st = gpucore_check_shape(ndim, shape, dtype, "tensor_wrap", &numel, &nbytes))) return st;
    if (!data && numel > 0) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_wrap: data is NULL for %lld elements", (long long)numel);
    int64_t esize = gpucore_dtype_size(dtype);
    int64_t cstrides[GPUCORE_MAX_DIMS];
    if (!strides) {
        contiguous_strides(ndim, shape, cstrides);
        strides = cstrides;
    } else if (numel > 0) {
        /* The highest element address must not overflow. Negative strides are not supported. */
        int64_t span = 0;
        for (int i = 0; i < ndim; i++) {
            int64_t term;
            if (strides[i] < 0)
                return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                         "tensor_wrap: strides[%d] is %lld; negative strides are not supported", i,
                                         (long long)strides[i]);
            if (__builtin_mul_overflow(strides[i], shape[i] - 1, &term) || __builtin_add_overflow(span, term, &span) ||
                __builtin_mul_overflow(span + 1, esize, &term))
                return gpucore_set_error(GPUCORE_ERR_OVERFLOW, "tensor_wrap: the strides reach past a 64-bit byte offset");
        }
        nbytes = (span + 1) * esize; /* the bytes the view can reach: bounds for as_strided */
    }
    gpucore_storage *storage = calloc(1, sizeof *storage);
    if (!storage) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "tensor_wrap: out of host memory");
    atomic_init(&storage->refcount, 1);
    storage->ctx = ctx;
    storage->base = data;
    storage->bytes = nbytes;
    storage->deleter = deleter;
    storage->deleter_ctx = deleter_ctx;
    return tensor_new(ctx, storage, dtype, ndim, shape, strides, 0, out);
}

static void tensor_free_handle(gpucore_tensor *t)
{
    gpucore_storage *st = t->storage;
    t->magic = GPUCORE_MAGIC_DEAD;
    storage_release(st);
    gpucore_handle_release(&gpucore_tensor_pool, t);
}

gpucore_status gpucore_tensor_destroy(gpucore_tensor *t)
{
    if (!t) return GPUCORE_OK;
    gpucore_status st = gpucore_check_tensor(t, "tensor_destroy", "t");
    if (st) return st;
    tensor_unlink(t);
    tensor_free_handle(t);
    return GPUCORE_OK;
}

gpucore_status gpucore_tensor_destroy_many(gpucore_tensor *const *tensors, int64_t count)
{
    if (count < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "tensor_destroy_many: count is %lld; it must be >= 0",
                                 (long long)count);
    if (!tensors && count > 0) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_destroy_many: tensors is NULL");
    /* every valid handle goes, also after a bad one: the first bad one is reported */
    gpucore_status first = GPUCORE_OK;
    for (int64_t i = 0; i < count; i++) {
        gpucore_tensor *t = tensors[i];
        if (!t) continue;
        if (gpucore_tensor_live(t)) {
            tensor_unlink(t);
            tensor_free_handle(t);
        } else if (!first) { /* the message names the first bad handle */
            char what[48];
            snprintf(what, sizeof what, "tensors[%lld]", (long long)i);
            first = gpucore_check_tensor(t, "tensor_destroy_many", what);
        }
    }
    return first;
}

void gpucore_tensors_destroy_all(gpucore_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    gpucore_tensor *t = ctx->tensors;
    ctx->tensors = NULL;
    pthread_mutex_unlock(&ctx->lock);
    while (t) {
        gpucore_tensor *next = t->next;
        tensor_free_handle(t);
        t = next;
    }
}

/* ---- getters ---- */

int gpucore_tensor_ndim(const gpucore_tensor *t)
{
    return gpucore_check_tensor(t, "tensor_ndim", "t") ? -1 : t->ndim;
}

gpucore_dtype gpucore_tensor_dtype(const gpucore_tensor *t)
{
    return gpucore_check_tensor(t, "tensor_dtype", "t") ? (gpucore_dtype)-1 : (gpucore_dtype)t->dtype;
}

gpucore_status gpucore_tensor_shape(const gpucore_tensor *t, int64_t *shape)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_shape", "t");
    if (st) return st;
    if (!shape && t->ndim) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_shape: shape is NULL");
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    return GPUCORE_OK;
}

gpucore_status gpucore_tensor_strides(const gpucore_tensor *t, int64_t *strides)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_strides", "t");
    if (st) return st;
    if (!strides && t->ndim) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_strides: strides is NULL");
    for (int i = 0; i < t->ndim; i++) strides[i] = t->strides[i];
    return GPUCORE_OK;
}

int64_t gpucore_tensor_numel(const gpucore_tensor *t)
{
    return gpucore_check_tensor(t, "tensor_numel", "t") ? -1 : gpucore_tensor_numel_unchecked(t);
}

int64_t gpucore_tensor_nbytes(const gpucore_tensor *t)
{
    if (gpucore_check_tensor(t, "tensor_nbytes", "t")) return -1;
    return gpucore_tensor_numel_unchecked(t) * gpucore_dtype_size((gpucore_dtype)t->dtype);
}

int gpucore_tensor_is_contiguous(const gpucore_tensor *t)
{
    return gpucore_check_tensor(t, "tensor_is_contiguous", "t") ? -1 : gpucore_tensor_contiguous_unchecked(t);
}

gpucore_status gpucore_tensor_data(const gpucore_tensor *t, void **data)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_data", "t");
    if (st) return st;
    if (!data) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_data: data is NULL");
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    *data = v.data;
    return GPUCORE_OK;
}

gpucore_status gpucore_tensor_context(const gpucore_tensor *t, gpucore_context **ctx)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_context", "t");
    if (st) return st;
    if (!ctx) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_context: ctx is NULL");
    *ctx = t->ctx;
    return GPUCORE_OK;
}

/* ---- views ---- */

static gpucore_status make_view(gpucore_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                                int64_t offset, gpucore_tensor **out)
{
    atomic_fetch_add(&t->storage->refcount, 1);
    return tensor_new(t->ctx, t->storage, (gpucore_dtype)t->dtype, ndim, shape, strides, offset, out);
}

static gpucore_status normalize_dim(const gpucore_tensor *t, int *dim, const char *op)
{
    int d = *dim;
    if (d < 0) d += t->ndim;
    if (d < 0 || d >= t->ndim)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dim %d is out of range for a %d-d tensor", op,
                                 *dim, t->ndim);
    *dim = d;
    return GPUCORE_OK;
}

gpucore_status gpucore_tensor_slice(gpucore_tensor *t, int dim, int64_t start, int64_t stop, int64_t step,
                                    gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_slice", "t");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_slice: out is NULL");
    *out = NULL;
    if ((st = normalize_dim(t, &dim, "tensor_slice"))) return st;
    if (step < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "tensor_slice: step is %lld; it must be >= 1",
                                 (long long)step);
    int64_t n = t->shape[dim];
    if (start < 0) start = start < -n ? 0 : start + n;
    if (stop < 0) stop = stop < -n ? 0 : stop + n;
    if (start > n) start = n;
    if (stop > n) stop = n;
    int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
    int64_t shape[GPUCORE_MAX_DIMS], strides[GPUCORE_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) { shape[i] = t->shape[i]; strides[i] = t->strides[i]; }
    shape[dim] = len;
    /* With len <= 1 the stride is never multiplied by a non-zero index, and an empty tensor's
     * saturated strides address nothing, so an overflowing product may saturate too. */
    if (__builtin_mul_overflow(t->strides[dim], step, &strides[dim])) strides[dim] = INT64_MAX;
    int64_t offset = t->offset, delta;
    if (len && (__builtin_mul_overflow(start, t->strides[dim], &delta) ||
                __builtin_add_overflow(t->offset, delta, &offset))) {
        /* Only an empty tensor's saturated strides get here (fuzz regression): it addresses
         * nothing, so its view keeps the offset; anything else is a corrupt view. */
        int empty = 0;
        for (int i = 0; i < t->ndim; i++) empty |= t->shape[i] == 0;
        if (!empty)
            return gpucore_set_error(GPUCORE_ERR_OVERFLOW, "tensor_slice: the start offset %lld x stride %lld "
                                     "does not fit in int64", (long long)start, (long long)t->strides[dim]);
        offset = t->offset;
    }
    return make_view(t, t->ndim, shape, strides, offset, out);
}

gpucore_status gpucore_tensor_reshape(gpucore_tensor *t, int ndim, const int64_t *shape, gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_reshape", "t");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_reshape: out is NULL");
    *out = NULL;
    if (ndim < 0 || ndim > GPUCORE_MAX_DIMS)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "tensor_reshape: ndim is %d; it must be 0..%d", ndim,
                                 GPUCORE_MAX_DIMS);
    if (ndim && !shape) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_reshape: shape is NULL");
    if (!gpucore_tensor_contiguous_unchecked(t))
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS,
                                 "tensor_reshape: the tensor is not contiguous; copy it into a contiguous tensor "
                                 "first (gpucore_copy)");
    int64_t numel = gpucore_tensor_numel_unchecked(t);
    int64_t newshape[GPUCORE_MAX_DIMS];
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        newshape[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0)
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "tensor_reshape: only one dim may be -1");
            infer = i;
        } else if (shape[i] < 0) {
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "tensor_reshape: shape[%d] is %lld", i,
                                     (long long)shape[i]);
        } else if (__builtin_mul_overflow(known, shape[i], &known)) {
            return gpucore_set_error(GPUCORE_ERR_OVERFLOW, "tensor_reshape: the new shape's element count overflows");
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known)
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH,
                                     "tensor_reshape: cannot infer dim %d: %lld elements do not divide into %lld",
                                     infer, (long long)numel, (long long)known);
        newshape[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        char a[200], b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "tensor_reshape: %s has %lld elements but %s has %lld",
                                 gpucore_shape_str(t->ndim, t->shape, a, sizeof a), (long long)numel,
                                 gpucore_shape_str(ndim, newshape, b, sizeof b), (long long)known);
    }
    int64_t strides[GPUCORE_MAX_DIMS];
    contiguous_strides(ndim, newshape, strides);
    return make_view(t, ndim, newshape, strides, t->offset, out);
}

gpucore_status gpucore_tensor_permute(gpucore_tensor *t, const int *perm, gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_permute", "t");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_permute: out is NULL");
    *out = NULL;
    if (!perm && t->ndim) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_permute: perm is NULL");
    int seen[GPUCORE_MAX_DIMS] = {0};
    int64_t shape[GPUCORE_MAX_DIMS], strides[GPUCORE_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        int d = perm[i];
        if (d < 0) d += t->ndim;
        if (d < 0 || d >= t->ndim || seen[d])
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "tensor_permute: perm is not a permutation of 0..%d (entry %d is %d)",
                                     t->ndim - 1, i, perm[i]);
        seen[d] = 1;
        shape[i] = t->shape[d];
        strides[i] = t->strides[d];
    }
    return make_view(t, t->ndim, shape, strides, t->offset, out);
}

gpucore_status gpucore_tensor_transpose(gpucore_tensor *t, int dim0, int dim1, gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_transpose", "t");
    if (st) return st;
    if ((st = normalize_dim(t, &dim0, "tensor_transpose")) || (st = normalize_dim(t, &dim1, "tensor_transpose")))
        return st;
    int perm[GPUCORE_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[dim0] = dim1;
    perm[dim1] = dim0;
    return gpucore_tensor_permute(t, perm, out);
}

gpucore_status gpucore_tensor_as_strided(gpucore_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                                         int64_t storage_offset, gpucore_tensor **out)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_as_strided", "t");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_as_strided: out is NULL");
    *out = NULL;
    int64_t numel, nbytes;
    if ((st = gpucore_check_shape(ndim, shape, (gpucore_dtype)t->dtype, "tensor_as_strided", &numel, &nbytes))) return st;
    if (ndim && !strides) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_as_strided: strides is NULL");
    if (storage_offset < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "tensor_as_strided: storage_offset is %lld; it must be >= 0",
                                 (long long)storage_offset);
    int64_t esize = gpucore_dtype_size((gpucore_dtype)t->dtype);
    if (numel > 0) {
        int64_t last = storage_offset, term, end_bytes;
        for (int i = 0; i < ndim; i++) {
            if (strides[i] < 0)
                return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                         "tensor_as_strided: strides[%d] is %lld; negative strides are not supported", i,
                                         (long long)strides[i]);
            if (__builtin_mul_overflow(strides[i], shape[i] - 1, &term) || __builtin_add_overflow(last, term, &last))
                return gpucore_set_error(GPUCORE_ERR_OVERFLOW, "tensor_as_strided: the view reaches past a 64-bit offset");
        }
        if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, esize, &end_bytes) ||
            end_bytes > t->storage->bytes)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "tensor_as_strided: the view reaches element %lld of a storage that holds %lld "
                                     "elements", (long long)(last - 1), (long long)(t->storage->bytes / esize));
    }
    return make_view(t, ndim, shape, strides, storage_offset, out);
}

gpucore_status gpucore_tensor_storage_offset(const gpucore_tensor *t, int64_t *offset)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_storage_offset", "t");
    if (st) return st;
    if (!offset) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "tensor_storage_offset: offset is NULL");
    *offset = t->offset;
    return GPUCORE_OK;
}
