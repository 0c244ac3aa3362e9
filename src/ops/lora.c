/*
 * lora.c — the LoRA linear layer (a low-rank adapter on a frozen base weight):
 * y = x·Wᵀ + bias + scale·(drop(x)·Aᵀ)·Bᵀ, its backward (dx, dA, dB; no dW) and
 * merge/unmerge of the adapter into W. Composed above the vtable from the public
 * matmul, linear, dropout, axpy, cast and mul calls, so every backend runs it and
 * computes the same formulas; this file only validates and sequences the GEMMs.
 * An fp8 W (with its per-tensor scale) is dequantised into a scratch copy of the
 * activations' dtype for each call, then used as a float W would be. A quantized W
 * (opts->w_quant: QLoRA) is never materialised: the base GEMM and dx's run through
 * gpucore_qlinear_forward / gpucore_qlinear_backward_data.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ops_internal.h"
#include "ops/quant_layout.h"

void gpucore_lora_options_init(gpucore_lora_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = (int64_t)sizeof *o;
    o->scale = 1.0;
}

/* A 2-d [rows, last] handle on t: t itself when 2-d (*owned NULL), else a reshaped
 * view (t must then be contiguous), which the caller destroys. */
static gpucore_status as_matrix(const gpucore_tensor *t, const char *op, const char *name, gpucore_tensor **m,
                                gpucore_tensor **owned)
{
    *owned = NULL;
    if (t->ndim == 2) {
        *m = (gpucore_tensor *)t;
        return GPUCORE_OK;
    }
    int64_t last = t->shape[t->ndim - 1], n = gpucore_tensor_numel_unchecked(t);
    int64_t shape[2] = {last ? n / last : 0, last};
    if (!gpucore_tensor_contiguous_unchecked(t))
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s is a non-contiguous %d-d view; pass it "
                                 "contiguous (or as a 2-d [rows, features] view)", op, name, (int)t->ndim);
    gpucore_status st = gpucore_tensor_reshape((gpucore_tensor *)t, 2, shape, owned);
    if (!st) *m = *owned;
    return st;
}

/* A scratch tensor used on `stream` (its memory is not reused before that stream's work is done). */
static gpucore_status scratch(gpucore_context *ctx, gpucore_dtype dt, int64_t rows, int64_t cols, gpucore_stream *stream,
                              gpucore_tensor **out)
{
    int64_t shape[2] = {rows, cols};
    gpucore_status st = gpucore_tensor_create(ctx, dt, 2, shape, out);
    if (!st && stream && (st = gpucore_tensor_record_stream(*out, stream))) {
        gpucore_tensor_destroy(*out);
        *out = NULL;
    }
    return st;
}

static gpucore_status shape_error(const char *op, const char *name, const gpucore_tensor *t, const char *want)
{
    char b[200];
    return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has shape %s; %s", op, name,
                             gpucore_shape_str(t->ndim, t->shape, b, sizeof b), want);
}

/* t is [..., last] with the leading dims of like (like's dims but the last). */
static gpucore_status check_rows_like(const gpucore_tensor *t, const char *name, const gpucore_tensor *like,
                                      const char *like_name, int64_t last, const char *op)
{
    char want[160];
    int ok = t->ndim == like->ndim && t->shape[t->ndim - 1] == last &&
             !memcmp(t->shape, like->shape, sizeof(int64_t) * (size_t)(t->ndim - 1));
    if (ok) return GPUCORE_OK;
    snprintf(want, sizeof want, "it must be %s's leading dims by %lld", like_name, (long long)last);
    return shape_error(op, name, t, want);
}


/* A quantized base: no w and no w_scale beside it, its bytes on a's context and valid for its
 * format and shape; dims = its [out, in]. */
static gpucore_status check_quant_base(const gpucore_tensor *w, const gpucore_qweight *wq, const gpucore_tensor *w_scale,
                                       const gpucore_tensor *a, const char *op, int64_t dims[2])
{
    gpucore_status st;
    quant_layout L;
    if (w)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: both 'w' and opts->w_quant are set; a quantized base "
                                 "is read from opts->w_quant alone (pass w NULL)", op);
    if (w_scale)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->w_scale is set with opts->w_quant; the scale "
                                 "dequantises an fp8 'w', a quantized base carries its own (leave w_scale NULL)", op);
    if (!wq->data)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: opts->w_quant->data (the quantized bytes) is NULL", op);
    if ((st = gpucore_check_tensor(wq->data, op, "w_quant->data")) ||
        (st = ops_check_same(wq->data, "w_quant->data", a, "a", op, 0)) ||
        (st = quant_layout_make((int)wq->format, wq->rows, wq->cols, wq->block_size, wq->flags, op, &L)) ||
        (st = quant_check_bytes(wq->data, &L, op, "w_quant->data")))
        return st;
    dims[0] = wq->rows;
    dims[1] = wq->cols;
    return GPUCORE_OK;
}

/* W [out, in] (w, or the quantized wq), A [r, in], B [out, r], one context; A, B (and a float W)
 * of one float dtype; an fp8 W needs its scale (an f32 scalar), a float W has none. dims: W's
 * [out, in]. */
static gpucore_status check_weights(const gpucore_tensor *w, const gpucore_qweight *wq, const gpucore_tensor *a,
                                    const gpucore_tensor *b, const gpucore_tensor *w_scale, const char *op,
                                    int64_t dims[2])
{
    gpucore_status st;
    if (wq) {
        if ((st = gpucore_check_tensor(a, op, "a")) || (st = gpucore_check_tensor(b, op, "b")) ||
            (st = ops_check_float(a, op, "a")) || (st = ops_check_same(b, "b", a, "a", op, 1)) ||
            (st = check_quant_base(w, wq, w_scale, a, op, dims)))
            return st;
        goto shapes;
    }
    if ((st = gpucore_check_tensor(w, op, "w")) || (st = gpucore_check_tensor(a, op, "a")) ||
        (st = gpucore_check_tensor(b, op, "b")) || (st = ops_check_float(a, op, "a")) ||
        (st = ops_check_same(b, "b", a, "a", op, 1)) || (st = ops_check_same(w, "w", a, "a", op, !ops_dtype_is_fp8(w->dtype))))
        return st;
    if (ops_dtype_is_fp8(w->dtype) && !w_scale)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: 'w' is %s and opts->w_scale is NULL; an fp8 base "
                                 "needs its dequantisation scale (an f32 scalar tensor: W = decode(w)·w_scale)", op,
                                 gpucore_dtype_name((gpucore_dtype)w->dtype));
    if (!ops_dtype_is_fp8(w->dtype) && w_scale)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->w_scale is set but 'w' is %s; the scale "
                                 "dequantises an fp8 base only (leave it NULL)", op,
                                 gpucore_dtype_name((gpucore_dtype)w->dtype));
    if (w_scale) {
        if ((st = gpucore_check_tensor(w_scale, op, "w_scale")) || (st = ops_check_same(w_scale, "w_scale", w, "w", op, 0)))
            return st;
        if (w_scale->dtype != GPUCORE_F32)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: opts->w_scale is %s; it must be f32 (as "
                                     "gpucore_matmul's scale_a/scale_b)", op,
                                     gpucore_dtype_name((gpucore_dtype)w_scale->dtype));
        if (w_scale->ndim > 1 || gpucore_tensor_numel_unchecked(w_scale) != 1)
            return shape_error(op, "w_scale", w_scale, "it must hold one element (0-d or [1])");
    }
    if (w->ndim != 2) return shape_error(op, "w", w, "it must be 2-d [out, in]");
    dims[0] = w->shape[0];
    dims[1] = w->shape[1];
shapes:
    if (a->ndim != 2 || a->shape[1] != dims[1] || a->shape[0] < 1)
        return shape_error(op, "a", a, "it must be [r, in] with r >= 1 and in = w's second dim");
    if (b->ndim != 2 || b->shape[0] != dims[0] || b->shape[1] != a->shape[0])
        return shape_error(op, "b", b, "it must be [out, r] (w's first dim by a's first dim)");
    return GPUCORE_OK;
}

static gpucore_status check_options(const gpucore_lora_options *o, const char *op)
{
    if (o->struct_size != (int64_t)sizeof *o)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->struct_size is %lld, not "
                                 "sizeof(gpucore_lora_options) = %lld (use gpucore_lora_options_init)",
                                 op, (long long)o->struct_size, (long long)sizeof *o);
    if (!isfinite(o->scale))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: scale must be finite, got %g", op, o->scale);
    if (!(o->dropout_p >= 0 && o->dropout_p < 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dropout_p must be in [0, 1), got %g", op,
                                 o->dropout_p);
    return GPUCORE_OK;
}

/* x (the activation, [..., in]) and an optional [..., r] adapter activation xa. */
static gpucore_status check_input(const gpucore_tensor *x, const gpucore_tensor *xa, int64_t in,
                                  const gpucore_tensor *a, const char *op)
{
    gpucore_status st;
    if ((st = gpucore_check_tensor(x, op, "x")) || (st = ops_check_same(x, "x", a, "a", op, 1))) return st;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != in)
        return shape_error(op, "x", x, "its last dim must be w's in features");
    if (xa && ((st = gpucore_check_tensor(xa, op, "xa")) || (st = ops_check_same(xa, "xa", a, "a", op, 1)) ||
               (st = check_rows_like(xa, "xa", x, "x", a->shape[0], op))))
        return st;
    return GPUCORE_OK;
}

/* What both directions check: the options (copied to *o, defaults for NULL), the
 * weights (dims: W's [out, in]), x and xa, and yy (y or dy) as [..., out] with x's leading dims. */
static gpucore_status check_call(const gpucore_lora_options *opts, gpucore_lora_options *o, const gpucore_tensor *x,
                                 const gpucore_tensor *xa, const gpucore_tensor *w, const gpucore_tensor *a,
                                 const gpucore_tensor *b, const gpucore_tensor *yy, const char *yname, const char *op,
                                 int64_t dims[2])
{
    gpucore_lora_options_init(o);
    if (opts) *o = *opts;
    gpucore_status st;
    if ((st = check_options(o, op)) || (st = check_weights(w, o->w_quant, a, b, o->w_scale, op, dims)) ||
        (st = check_input(x, xa, dims[1], a, op)) || (st = gpucore_check_tensor(yy, op, yname)) ||
        (st = ops_check_same(yy, yname, a, "a", op, 1)))
        return st;
    return check_rows_like(yy, yname, x, "x", dims[0], op);
}

/* xd = drop(x) as a [rows, in] matrix: x itself without dropout (*owned NULL). */
static gpucore_status dropped_input(const gpucore_tensor *x2, const gpucore_lora_options *o, gpucore_stream *stream,
                                    gpucore_tensor **xd, gpucore_tensor **owned)
{
    *owned = NULL;
    if (o->dropout_p == 0) {
        *xd = (gpucore_tensor *)x2;
        return GPUCORE_OK;
    }
    gpucore_status st = scratch(x2->ctx, (gpucore_dtype)x2->dtype, x2->shape[0], x2->shape[1], stream, owned);
    if (!st) st = gpucore_dropout(*owned, x2, o->dropout_p, o->seed, o->offset, stream);
    *xd = *owned;
    return st;
}

/* h = xd·Aᵀ into h2 [rows, r]. */
static gpucore_status adapter_down(const gpucore_tensor *xd, const gpucore_tensor *a, gpucore_tensor *h2,
                                   gpucore_stream *stream)
{
    gpucore_matmul_options mo;
    gpucore_matmul_options_init(&mo);
    mo.trans_b = 1;
    return gpucore_matmul(xd, a, h2, &mo, stream);
}

/* d (+)= alpha·op(a)·op(b): beta 1 accumulates into d. */
static gpucore_status gemm(const gpucore_tensor *a, int ta, const gpucore_tensor *b, int tb, gpucore_tensor *d,
                           double alpha, double beta, gpucore_stream *stream)
{
    gpucore_matmul_options mo;
    gpucore_matmul_options_init(&mo);
    mo.trans_a = ta;
    mo.trans_b = tb;
    mo.alpha = alpha;
    mo.beta = beta;
    return gpucore_matmul(a, b, d, &mo, stream);
}

/* The base weight in the activations' dtype dt: W itself, or for an fp8 W a scratch
 * dt(f32(decode(W)·w_scale)) (decode exact, one f32 product, one rounding to dt). */
static gpucore_status base_weight(const gpucore_tensor *w, const gpucore_tensor *w_scale, gpucore_dtype dt,
                                  gpucore_stream *stream, const gpucore_tensor **we, gpucore_tensor **owned)
{
    *we = w;
    *owned = NULL;
    if (!ops_dtype_is_fp8(w->dtype)) return GPUCORE_OK;
    gpucore_tensor *f = NULL, *d = NULL;
    gpucore_status st = scratch(w->ctx, GPUCORE_F32, w->shape[0], w->shape[1], stream, &f);
    if (!st) st = gpucore_cast(f, w, stream);
    if (!st) st = gpucore_binary(GPUCORE_MUL, f, f, w_scale, stream);
    if (!st && dt != GPUCORE_F32 && !(st = scratch(w->ctx, dt, w->shape[0], w->shape[1], stream, &d)))
        st = gpucore_cast(d, f, stream);
    if (d || st) gpucore_tensor_destroy(f);
    if (st) {
        gpucore_tensor_destroy(d);
        return st;
    }
    *owned = d ? d : f;
    *we = *owned;
    return GPUCORE_OK;
}

#define TRY(call)                                  \
    do {                                           \
        if ((st = (call)) != GPUCORE_OK) goto out; \
    } while (0)

gpucore_status gpucore_lora_forward(gpucore_tensor *y, gpucore_tensor *xa, const gpucore_tensor *x,
                                    const gpucore_tensor *w, const gpucore_tensor *bias, const gpucore_tensor *a,
                                    const gpucore_tensor *b, const gpucore_lora_options *opts, gpucore_stream *stream)
{
    const char *op = "lora_forward";
    gpucore_lora_options o;
    int64_t dims[2];
    gpucore_status st = check_call(opts, &o, x, xa, w, a, b, y, "y", op, dims);
    if (st) return st;
    const gpucore_tensor *ins[6] = {x, o.w_quant ? o.w_quant->data : w, bias, a, b, xa};
    const char *names[6] = {"x", "w", "bias", "a", "b", "xa"};
    for (int i = 0; i < 6; i++)
        if ((st = ops_check_tensor_alias(y, ins[i], op, names[i], 0))) return st;
    for (int i = 0; xa && i < 5; i++)
        if ((st = ops_check_tensor_alias(xa, ins[i], op, names[i], 0))) return st;
    gpucore_tensor *x2 = NULL, *x2o = NULL, *y2 = NULL, *y2o = NULL, *h2 = NULL, *h2o = NULL, *xdo = NULL, *xd = NULL,
                   *wo = NULL;
    const gpucore_tensor *we = w;
    void *prof = gpucore_prof_begin(x->ctx, stream, op, gpucore_prof_bytes(x) + gpucore_prof_bytes(w) +
                                                            gpucore_prof_bytes(a) + gpucore_prof_bytes(b) +
                                                            gpucore_prof_bytes(y) + gpucore_prof_bytes(xa));
    if (o.w_quant) TRY(gpucore_qlinear_forward(x, o.w_quant, bias, GPUCORE_ACT_NONE, y, NULL, stream));
    else {
        TRY(base_weight(w, o.w_scale, (gpucore_dtype)a->dtype, stream, &we, &wo));
        TRY(gpucore_linear_forward(x, we, bias, GPUCORE_ACT_NONE, y, NULL, stream)); /* y = x·Wᵀ + bias */
    }
    TRY(as_matrix(x, op, "x", &x2, &x2o));
    TRY(as_matrix(y, op, "y", &y2, &y2o));
    if (xa) TRY(as_matrix(xa, op, "xa", &h2, &h2o));
    else {
        TRY(scratch(x->ctx, (gpucore_dtype)x->dtype, x2->shape[0], a->shape[0], stream, &h2o));
        h2 = h2o;
    }
    TRY(dropped_input(x2, &o, stream, &xd, &xdo));
    TRY(adapter_down(xd, a, h2, stream));                      /* h = drop(x)·Aᵀ */
    TRY(gemm(h2, 0, b, 1, y2, o.scale, 1.0, stream));          /* y += scale·h·Bᵀ */
out:
    gpucore_prof_end(x->ctx, prof);
    gpucore_tensor *tmp[5] = {x2o, y2o, h2o, xdo, wo};
    for (int i = 0; i < 5; i++) gpucore_tensor_destroy(tmp[i]);
    return st;
}

gpucore_status gpucore_lora_backward(gpucore_tensor *dx, gpucore_tensor *da, gpucore_tensor *db,
                                     const gpucore_tensor *dy, const gpucore_tensor *x, const gpucore_tensor *w,
                                     const gpucore_tensor *a, const gpucore_tensor *b, const gpucore_tensor *xa,
                                     const gpucore_lora_options *opts, gpucore_stream *stream)
{
    const char *op = "lora_backward";
    gpucore_lora_options o;
    int64_t dims[2];
    gpucore_status st = check_call(opts, &o, x, xa, w, a, b, dy, "dy", op, dims);
    if (st) return st;
    gpucore_tensor *outs[3] = {dx, da, db};
    const char *onames[3] = {"dx", "da", "db"};
    const gpucore_tensor *ins[6] = {dy, x, o.w_quant ? o.w_quant->data : w, a, b, xa};
    const char *inames[6] = {"dy", "x", "w", "a", "b", "xa"};
    for (int i = 0; i < 3; i++) {
        if (!outs[i]) continue;
        if ((st = gpucore_check_tensor(outs[i], op, onames[i])) || (st = ops_check_same(outs[i], onames[i], a, "a", op, 1)))
            return st;
        for (int j = 0; j < 6; j++)
            if ((st = ops_check_tensor_alias(outs[i], ins[j], op, inames[j], 0))) return st;
        for (int j = 0; j < i; j++)
            if ((st = ops_check_tensor_alias(outs[i], outs[j], op, onames[j], 0))) return st;
    }
    if (dx && (st = check_rows_like(dx, "dx", x, "x", dims[1], op))) return st;
    if (da && (da->ndim != a->ndim || memcmp(da->shape, a->shape, sizeof(int64_t) * 2)))
        return shape_error(op, "da", da, "it must have a's shape [r, in]");
    if (db && (db->ndim != b->ndim || memcmp(db->shape, b->shape, sizeof(int64_t) * 2)))
        return shape_error(op, "db", db, "it must have b's shape [out, r]");
    const int64_t r = a->shape[0];
    gpucore_tensor *x2 = NULL, *x2o = NULL, *dy2 = NULL, *dy2o = NULL, *h2 = NULL, *h2o = NULL, *xd = NULL,
                   *xdo = NULL, *dh = NULL, *dx2 = NULL, *dx2o = NULL, *t = NULL, *wo = NULL;
    const gpucore_tensor *we = w;
    void *prof = gpucore_prof_begin(x->ctx, stream, op, gpucore_prof_bytes(dy) + gpucore_prof_bytes(x) +
                                                            gpucore_prof_bytes(w) + gpucore_prof_bytes(a) +
                                                            gpucore_prof_bytes(b) + gpucore_prof_bytes(dx) +
                                                            gpucore_prof_bytes(da) + gpucore_prof_bytes(db));
    TRY(as_matrix(x, op, "x", &x2, &x2o));
    TRY(as_matrix(dy, op, "dy", &dy2, &dy2o));
    const int64_t rows = x2->shape[0];
    if (da || (db && !xa)) TRY(dropped_input(x2, &o, stream, &xd, &xdo));
    if (db) {
        if (xa) TRY(as_matrix(xa, op, "xa", &h2, &h2o));
        else {
            TRY(scratch(x->ctx, (gpucore_dtype)x->dtype, rows, r, stream, &h2o));
            h2 = h2o;
            TRY(adapter_down(xd, a, h2, stream)); /* recompute h = drop(x)·Aᵀ */
        }
        TRY(gemm(dy2, 1, h2, 0, db, o.scale, 0.0, stream)); /* dB = scale·dyᵀ·h */
    }
    if (da || dx) {
        TRY(scratch(x->ctx, (gpucore_dtype)x->dtype, rows, r, stream, &dh));
        TRY(gemm(dy2, 0, b, 0, dh, o.scale, 0.0, stream)); /* dh = scale·dy·B */
    }
    if (da) TRY(gemm(dh, 1, xd, 0, da, 1.0, 0.0, stream)); /* dA = dhᵀ·drop(x) */
    if (dx) {
        if (o.w_quant) TRY(gpucore_qlinear_backward_data(dy, o.w_quant, 0.0, dx, stream)); /* dx = dy·W */
        else {
            TRY(base_weight(w, o.w_scale, (gpucore_dtype)a->dtype, stream, &we, &wo));
            TRY(gpucore_linear_backward(dy, NULL, we, NULL, dx, NULL, NULL, stream)); /* dx = dy·W */
        }
        TRY(as_matrix(dx, op, "dx", &dx2, &dx2o));
        if (o.dropout_p == 0) TRY(gemm(dh, 0, a, 0, dx2, 1.0, 1.0, stream)); /* dx += dh·A */
        else {
            TRY(scratch(x->ctx, (gpucore_dtype)x->dtype, rows, dims[1], stream, &t));
            TRY(gemm(dh, 0, a, 0, t, 1.0, 0.0, stream));
            TRY(gpucore_dropout(t, t, o.dropout_p, o.seed, o.offset, stream)); /* the forward's mask and 1/(1-p) */
            TRY(gpucore_axpy(dx2, 1.0, t, stream));
        }
    }
out:
    gpucore_prof_end(x->ctx, prof);
    gpucore_tensor *tmp[8] = {x2o, dy2o, h2o, xdo, dh, dx2o, t, wo};
    for (int i = 0; i < 8; i++) gpucore_tensor_destroy(tmp[i]);
    return st;
}

/* W += sign·scale·B·A. */
static gpucore_status lora_fold(gpucore_tensor *w, const gpucore_tensor *a, const gpucore_tensor *b, double scale,
                                double sign, gpucore_stream *stream, const char *op)
{
    gpucore_status st;
    if (w && gpucore_check_tensor(w, op, "w") == GPUCORE_OK && ops_dtype_is_fp8(w->dtype))
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: 'w' is %s; an fp8 base is not merged into: W ± scale·B·A "
                                 "would have to be requantised (rounded to the fp8 grid, likely with a new scale), so "
                                 "unmerge could not give W back. Dequantise W (gpucore_cast to f32/bf16, times its "
                                 "scale) and merge into that copy", op, gpucore_dtype_name((gpucore_dtype)w->dtype));
    int64_t dims[2];
    if ((st = check_weights(w, NULL, a, b, NULL, op, dims))) return st;
    if (!isfinite(scale)) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: scale must be finite, got %g", op, scale);
    if ((st = ops_check_tensor_alias(w, a, op, "a", 0)) || (st = ops_check_tensor_alias(w, b, op, "b", 0))) return st;
    void *prof = gpucore_prof_begin(w->ctx, stream, op, gpucore_prof_bytes(w) * 2 + gpucore_prof_bytes(a) +
                                                            gpucore_prof_bytes(b));
    st = gemm(b, 0, a, 0, w, sign * scale, 1.0, stream);
    gpucore_prof_end(w->ctx, prof);
    return st;
}

gpucore_status gpucore_lora_merge(gpucore_tensor *w, const gpucore_tensor *a, const gpucore_tensor *b, double scale,
                                  gpucore_stream *stream)
{
    return lora_fold(w, a, b, scale, 1.0, stream, "lora_merge");
}

gpucore_status gpucore_lora_unmerge(gpucore_tensor *w, const gpucore_tensor *a, const gpucore_tensor *b, double scale,
                                    gpucore_stream *stream)
{
    return lora_fold(w, a, b, scale, -1.0, stream, "lora_unmerge");
}
