/*
 * ops_rows.c — front-ends of the row family (softmax, log-softmax, LayerNorm,
 * RMSNorm, cross-entropy, embedding; formulas in kernels/rows_math.h):
 * validate shapes, dtypes and aliasing, stage non-contiguous tensors, fill a
 * gpucore_rows_args, allocate the kernel backends' workspace and dispatch to
 * the backend's rows entry.
 */
#include <math.h>
#include <string.h>
#include "ops_internal.h"
#include "rows_math.h"

/* gpucore_loss_reduction values are the GPUCORE_ROWS_RED_* codes (op_names.c asserts it). */

/* Staged inputs and outputs of one call. */
typedef struct rows_io {
    gpucore_stream *s;
    gpucore_tensor *in_staged[8];
    int nin;
    gpucore_tensor *out_t[4], *out_staged[4];
    int nout;
} rows_io;

static gpucore_status io_in(rows_io *io, const gpucore_tensor *t, const void **ptr)
{
    *ptr = NULL;
    if (!t) return GPUCORE_OK;
    gpucore_view v;
    gpucore_tensor *staged = NULL;
    gpucore_status st = ops_contiguous_input(t, io->s, &v, &staged);
    if (st) return st;
    io->in_staged[io->nin++] = staged;
    *ptr = v.data;
    return GPUCORE_OK;
}

static gpucore_status io_out(rows_io *io, gpucore_tensor *t, void **ptr)
{
    *ptr = NULL;
    if (!t) return GPUCORE_OK;
    gpucore_view v;
    gpucore_tensor *staged = NULL;
    gpucore_status st = ops_contiguous_output(t, io->s, &v, &staged);
    if (st) return st;
    io->out_t[io->nout] = t;
    io->out_staged[io->nout++] = staged;
    *ptr = v.data;
    return GPUCORE_OK;
}

static gpucore_status io_finish(rows_io *io, gpucore_status st)
{
    for (int i = 0; i < io->nout; i++) st = ops_finish_output(io->out_t[i], io->out_staged[i], io->s, st);
    for (int i = 0; i < io->nin; i++)
        if (io->in_staged[i]) gpucore_tensor_destroy(io->in_staged[i]);
    return st;
}

static gpucore_status rows_run(gpucore_context *ctx, gpucore_rows_args *a, gpucore_stream *s)
{
    /* profile names and main-operand traffic in rows x cols elements, by GPUCORE_ROWS_* code */
    static const struct { const char *name; int io; } prof_op[GPUCORE_ROWS_COUNT] = {
#define PROF_OP(N, name, io) {#name, io},
        GPUCORE_ROWS_TABLE(PROF_OP)
#undef PROF_OP
    };
    int prof_i = a->op >= 0 && a->op < GPUCORE_ROWS_COUNT ? a->op : 0;
    gpucore_status st = ops_workspace_alloc(ctx, gpucore_rows_workspace_bytes(a), s, &a->workspace);
    void *prof = gpucore_prof_begin(ctx, s, prof_op[prof_i].name,
                                    prof_op[prof_i].io * a->rows * a->cols * gpucore_dtype_size((gpucore_dtype)a->dtype));
    if (!st) st = ctx->be->rows(ctx->bctx, a, s->bstream);
    gpucore_prof_end(ctx, prof);
    ops_workspace_free(ctx, s, a->workspace);
    return st;
}

static int same_shape(const gpucore_tensor *a, const gpucore_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

static gpucore_status shape_error(const char *op, const char *an, const gpucore_tensor *a, const char *bn,
                                  const gpucore_tensor *b, const char *want)
{
    char x[200], y[200];
    return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' has shape %s but '%s' has shape %s; %s", op, an,
                             gpucore_shape_str(a->ndim, a->shape, x, sizeof x), bn,
                             gpucore_shape_str(b->ndim, b->shape, y, sizeof y), want);
}

/* x is a float tensor of at least one dim (f64_ok: f64 too): rows and cols of its last-dim view. */
static gpucore_status rows_of_dt(const gpucore_tensor *x, const char *op, const char *arg, int64_t *rows, int64_t *cols,
                                 int f64_ok)
{
    gpucore_status st = f64_ok && x->dtype == GPUCORE_F64 ? GPUCORE_OK : ops_check_float(x, op, arg);
    if (st) return st;
    if (x->ndim < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' is 0-d; this op works along the last dim, "
                                 "so give it at least one dim", op, arg);
    *cols = x->shape[x->ndim - 1];
    int64_t n = gpucore_tensor_numel_unchecked(x);
    *rows = *cols ? n / *cols : 1;
    for (int d = 0; d < x->ndim - 1 && !*cols; d++) *rows *= x->shape[d];
    return GPUCORE_OK;
}

static gpucore_status rows_of(const gpucore_tensor *x, const char *op, const char *arg, int64_t *rows, int64_t *cols)
{
    return rows_of_dt(x, op, arg, rows, cols, 0);
}

/* A data tensor that must match x in context, dtype and shape. */
static gpucore_status check_like(const gpucore_tensor *t, const char *tn, const gpucore_tensor *x, const char *xn,
                                 const char *op)
{
    gpucore_status st = gpucore_check_tensor(t, op, tn);
    if (st || (st = ops_check_same(t, tn, x, xn, op, 1))) return st;
    if (!same_shape(t, x)) return shape_error(op, tn, t, xn, x, "they must have the same shape");
    return GPUCORE_OK;
}

/* A norm parameter or its gradient: [cols], float, dtype *pdt (set by the first one seen). */
static gpucore_status check_param(const gpucore_tensor *p, const char *pn, const gpucore_tensor *x, int64_t cols,
                                  int *pdt, const char *op)
{
    if (!p) return GPUCORE_OK;
    gpucore_status st = gpucore_check_tensor(p, op, pn);
    if (st || (st = ops_check_float(p, op, pn)) || (st = ops_check_same(p, pn, x, "x", op, 0))) return st;
    if (p->ndim != 1 || p->shape[0] != cols) {
        char b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' must have shape [%lld] (the last dim of x), "
                                 "but it is %s", op, pn, (long long)cols, gpucore_shape_str(p->ndim, p->shape, b, sizeof b));
    }
    if (*pdt >= 0 && p->dtype != *pdt)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s but the other norm parameters are %s; "
                                 "gamma, beta and their gradients share one dtype", op, pn,
                                 gpucore_dtype_name((gpucore_dtype)p->dtype), gpucore_dtype_name((gpucore_dtype)*pdt));
    *pdt = p->dtype;
    return GPUCORE_OK;
}

/* mean / rstd: contiguous f32 with rows elements; its data pointer. */
static gpucore_status check_stat(const gpucore_tensor *t, const char *tn, const gpucore_tensor *x, int64_t rows,
                                 const char *op, float **ptr)
{
    *ptr = NULL;
    if (!t) return GPUCORE_OK;
    gpucore_status st = gpucore_check_tensor(t, op, tn);
    if (st || (st = ops_check_same(t, tn, x, "x", op, 0))) return st;
    if (t->dtype != GPUCORE_F32)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; the saved statistics are f32", op, tn,
                                 gpucore_dtype_name((gpucore_dtype)t->dtype));
    if (gpucore_tensor_numel_unchecked(t) != rows || !gpucore_tensor_contiguous_unchecked(t)) {
        char b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' must be a contiguous f32 tensor of %lld elements "
                                 "(one per row of x), but it has shape %s%s", op, tn, (long long)rows,
                                 gpucore_shape_str(t->ndim, t->shape, b, sizeof b),
                                 gpucore_tensor_contiguous_unchecked(t) ? "" : " and is not contiguous");
    }
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    *ptr = v.data;
    return GPUCORE_OK;
}

/* i32/i64 indices on x's context. */
static gpucore_status check_index(const gpucore_tensor *t, const char *tn, const gpucore_tensor *x, const char *op)
{
    gpucore_status st = gpucore_check_tensor(t, op, tn);
    if (st || (st = ops_check_same(t, tn, x, "x", op, 0))) return st;
    if (t->dtype != GPUCORE_I32 && t->dtype != GPUCORE_I64)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; class indices must be i32 or i64", op, tn,
                                 gpucore_dtype_name((gpucore_dtype)t->dtype));
    return GPUCORE_OK;
}

/* ------------------------------------------------------------------ softmax */

gpucore_status gpucore_softmax(gpucore_tensor *y, const gpucore_tensor *x, int log_softmax, gpucore_stream *stream)
{
    const char *name = log_softmax ? "log_softmax" : "softmax";
    gpucore_status st = gpucore_check_tensor(x, name, "x");
    int64_t rows = 0, cols = 0;
    if (st || (st = rows_of_dt(x, name, "x", &rows, &cols, 1)) || (st = check_like(y, "y", x, "x", name))) return st;
    if ((st = ops_check_tensor_alias(y, x, name, "x", 1))) return st;
    gpucore_context *ctx = x->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    if (rows * cols == 0) return GPUCORE_OK;
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    a.op = log_softmax ? GPUCORE_ROWS_LOG_SOFTMAX : GPUCORE_ROWS_SOFTMAX;
    a.dtype = x->dtype;
    a.rows = rows;
    a.cols = cols;
    if (!(st = io_in(&io, x, &a.x)) && !(st = io_out(&io, y, &a.y))) st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_softmax_backward(gpucore_tensor *dx, const gpucore_tensor *dy, const gpucore_tensor *y,
                                        int log_softmax, gpucore_stream *stream)
{
    const char *name = log_softmax ? "log_softmax_backward" : "softmax_backward";
    gpucore_status st = gpucore_check_tensor(y, name, "y");
    int64_t rows = 0, cols = 0;
    if (st || (st = rows_of_dt(y, name, "y", &rows, &cols, 1)) || (st = check_like(dy, "dy", y, "y", name)) ||
        (st = check_like(dx, "dx", y, "y", name)))
        return st;
    if ((st = ops_check_tensor_alias(dx, dy, name, "dy", 1)) || (st = ops_check_tensor_alias(dx, y, name, "y", 0))) return st;
    gpucore_context *ctx = y->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    if (rows * cols == 0) return GPUCORE_OK;
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    a.op = log_softmax ? GPUCORE_ROWS_LOG_SOFTMAX_BWD : GPUCORE_ROWS_SOFTMAX_BWD;
    a.dtype = y->dtype;
    a.rows = rows;
    a.cols = cols;
    if (!(st = io_in(&io, dy, &a.dy)) && !(st = io_in(&io, y, (const void **)&a.y)) && !(st = io_out(&io, dx, &a.dx)))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

/* -------------------------------------------------------------------- norms */

static gpucore_status norm_forward(const char *name, int layer, gpucore_tensor *y, gpucore_tensor *mean,
                                   gpucore_tensor *rstd, const gpucore_tensor *x, const gpucore_tensor *gamma,
                                   const gpucore_tensor *beta, double eps, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(x, name, "x");
    int64_t rows = 0, cols = 0;
    if (st || (st = rows_of(x, name, "x", &rows, &cols)) || (st = check_like(y, "y", x, "x", name))) return st;
    if (layer && (!gamma) != (!beta))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: give both gamma and beta, or neither (no affine "
                                 "transform)", name);
    if (!(eps >= 0) || !isfinite(eps))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, not %g", name, eps);
    int pdt = -1;
    float *mp = NULL, *rp = NULL;
    if ((st = check_param(gamma, "gamma", x, cols, &pdt, name)) || (st = check_param(beta, "beta", x, cols, &pdt, name)) ||
        (st = check_stat(mean, "mean", x, rows, name, &mp)) || (st = check_stat(rstd, "rstd", x, rows, name, &rp)))
        return st;
    if ((st = ops_check_tensor_alias(y, x, name, "x", 1)) || (st = ops_check_tensor_alias(y, gamma, name, "gamma", 0)) ||
        (st = ops_check_tensor_alias(y, beta, name, "beta", 0)) || (st = ops_check_tensor_alias(mean, x, name, "x", 0)) ||
        (st = ops_check_tensor_alias(rstd, x, name, "x", 0)) || (st = ops_check_tensor_alias(mean, y, name, "y", 0)) ||
        (st = ops_check_tensor_alias(rstd, y, name, "y", 0)) || (st = ops_check_tensor_alias(rstd, mean, name, "mean", 0)))
        return st;
    gpucore_context *ctx = x->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    if (rows == 0) return GPUCORE_OK;
    if (cols == 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: x has %lld rows of 0 elements; there is nothing to "
                                 "normalise over", name, (long long)rows);
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    a.op = layer ? GPUCORE_ROWS_LAYERNORM : GPUCORE_ROWS_RMSNORM;
    a.dtype = x->dtype;
    a.param_dtype = pdt < 0 ? x->dtype : pdt;
    a.rows = rows;
    a.cols = cols;
    a.eps = (float)eps;
    a.mean = layer ? mp : NULL;
    a.rstd = rp;
    if (!(st = io_in(&io, x, &a.x)) && !(st = io_in(&io, gamma, &a.gamma)) && !(st = io_in(&io, layer ? beta : NULL, &a.beta)) &&
        !(st = io_out(&io, y, &a.y)))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_layer_norm(gpucore_tensor *y, gpucore_tensor *mean, gpucore_tensor *rstd, const gpucore_tensor *x,
                                  const gpucore_tensor *gamma, const gpucore_tensor *beta, double eps,
                                  gpucore_stream *stream)
{
    return norm_forward("layer_norm", 1, y, mean, rstd, x, gamma, beta, eps, stream);
}

gpucore_status gpucore_rms_norm(gpucore_tensor *y, gpucore_tensor *rstd, const gpucore_tensor *x,
                                const gpucore_tensor *gamma, double eps, gpucore_stream *stream)
{
    return norm_forward("rms_norm", 0, y, NULL, rstd, x, gamma, NULL, eps, stream);
}

static gpucore_status norm_backward(const char *name, int layer, gpucore_tensor *dx, gpucore_tensor *dgamma,
                                    gpucore_tensor *dbeta, const gpucore_tensor *dy, const gpucore_tensor *x,
                                    const gpucore_tensor *mean, const gpucore_tensor *rstd, const gpucore_tensor *gamma,
                                    gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(x, name, "x");
    int64_t rows = 0, cols = 0;
    if (st || (st = rows_of(x, name, "x", &rows, &cols)) || (st = check_like(dy, "dy", x, "x", name))) return st;
    if (dx && (st = check_like(dx, "dx", x, "x", name))) return st;
    if (!dx && !dgamma && !dbeta) return GPUCORE_OK;
    if (!rstd || (layer && !mean))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the backward needs the forward's saved %s; pass "
                                 "the tensors the forward wrote", name, layer ? "mean and rstd" : "rstd");
    int pdt = -1;
    float *mp = NULL, *rp = NULL;
    if ((st = check_param(gamma, "gamma", x, cols, &pdt, name)) || (st = check_param(dgamma, "dgamma", x, cols, &pdt, name)) ||
        (st = check_param(dbeta, "dbeta", x, cols, &pdt, name)) ||
        (st = check_stat(mean, "mean", x, rows, name, &mp)) || (st = check_stat(rstd, "rstd", x, rows, name, &rp)))
        return st;
    const gpucore_tensor *ins[5] = {dy, x, mean, rstd, gamma};
    const char *inn[5] = {"dy", "x", "mean", "rstd", "gamma"};
    gpucore_tensor *outs[3] = {dx, dgamma, dbeta};
    for (int o = 0; o < 3; o++) {
        for (int i = 0; i < 5; i++)
            if ((st = ops_check_tensor_alias(outs[o], ins[i], name, inn[i], 0))) return st;
        for (int p = o + 1; p < 3; p++)
            if ((st = ops_check_tensor_alias(outs[o], outs[p], name, "another output", 0))) return st;
    }
    gpucore_context *ctx = x->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, name, &s))) return st;
    if (rows * cols == 0) { /* parameter gradients of no rows are 0 */
        if (dgamma && cols && (st = gpucore_fill(dgamma, 0.0, s))) return st;
        if (dbeta && cols && (st = gpucore_fill(dbeta, 0.0, s))) return st;
        return GPUCORE_OK;
    }
    rows_io io = {0};
    io.s = s;
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    a.op = layer ? GPUCORE_ROWS_LAYERNORM_BWD : GPUCORE_ROWS_RMSNORM_BWD;
    a.dtype = x->dtype;
    a.param_dtype = pdt < 0 ? x->dtype : pdt;
    a.rows = rows;
    a.cols = cols;
    a.mean = layer ? mp : NULL;
    a.rstd = rp;
    if (!(st = io_in(&io, x, &a.x)) && !(st = io_in(&io, dy, &a.dy)) && !(st = io_in(&io, gamma, &a.gamma)) &&
        !(st = io_out(&io, dx, &a.dx)) && !(st = io_out(&io, dgamma, &a.dgamma)) &&
        !(st = io_out(&io, layer ? dbeta : NULL, &a.dbeta)))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_layer_norm_backward(gpucore_tensor *dx, gpucore_tensor *dgamma, gpucore_tensor *dbeta,
                                           const gpucore_tensor *dy, const gpucore_tensor *x, const gpucore_tensor *mean,
                                           const gpucore_tensor *rstd, const gpucore_tensor *gamma,
                                           gpucore_stream *stream)
{
    return norm_backward("layer_norm_backward", 1, dx, dgamma, dbeta, dy, x, mean, rstd, gamma, stream);
}

gpucore_status gpucore_rms_norm_backward(gpucore_tensor *dx, gpucore_tensor *dgamma, const gpucore_tensor *dy,
                                         const gpucore_tensor *x, const gpucore_tensor *rstd, const gpucore_tensor *gamma,
                                         gpucore_stream *stream)
{
    return norm_backward("rms_norm_backward", 0, dx, dgamma, NULL, dy, x, NULL, rstd, gamma, stream);
}

/* ------------------------------------------------------------ cross-entropy */

/* The class dim of logits (class_dim: GPUCORE_CE_CLASS_DIM_TORCH, or a dim counted from the
 * end when negative): rows = the product of the other dims, cols = C, inner = the product
 * of the dims after it (1: class dim last). */
static gpucore_status ce_dims(const char *name, const gpucore_tensor *logits, int class_dim, int *k, int64_t *rows,
                              int64_t *cols, int64_t *inner)
{
    gpucore_status st = ops_check_float(logits, name, "logits");
    if (st) return st;
    const int nd = logits->ndim;
    int d = class_dim == GPUCORE_CE_CLASS_DIM_TORCH ? (nd >= 2 ? 1 : 0) : class_dim < 0 ? class_dim + nd : class_dim;
    if (nd < 1 || d < 0 || d >= nd) {
        char b[200];
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: class_dim %d is not a dim of logits %s (give "
                                 "-%d .. %d, or GPUCORE_CE_CLASS_DIM_TORCH; logits need at least one dim)", name,
                                 class_dim, gpucore_shape_str(nd, logits->shape, b, sizeof b), nd, nd - 1);
    }
    *k = d;
    *cols = logits->shape[d];
    *rows = 1;
    *inner = 1;
    for (int i = 0; i < nd; i++)
        if (i != d) *rows *= logits->shape[i];
    for (int i = d + 1; i < nd; i++) *inner *= logits->shape[i];
    return GPUCORE_OK;
}

/* t has logits' shape without dim k? */
static int ce_lead_shape(const gpucore_tensor *t, const gpucore_tensor *logits, int k)
{
    if (t->ndim != logits->ndim - 1) return 0;
    for (int i = 0, j = 0; i < logits->ndim; i++)
        if (i != k && t->shape[j++] != logits->shape[i]) return 0;
    return 1;
}

/* A tensor whose class dim k has stride 1 and whose other dims, in order, are row-major with row
 * stride C (a channels-last tensor seen as [N, C, d1, ...]): contiguous [rows, C] rows in memory. */
static int ce_class_last(const gpucore_tensor *t, int k)
{
    int64_t want = t->shape[k];
    if (t->strides[k] != 1 && t->shape[k] != 1) return 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == k) continue;
        if (t->shape[d] != 1 && t->strides[d] != want) return 0;
        want *= t->shape[d];
    }
    return 1;
}

/* Read the class-dim-k operands in place as class-last rows (inner 1)? Only where logits are not
 * contiguous (then they are read in place as [outer, C, inner]) and every class-dim operand
 * (logits, probability targets, dlogits) is class-last; otherwise they are staged. */
static int ce_rows_in_place(const gpucore_rows_args *a, int k, const gpucore_tensor *logits,
                            const gpucore_tensor *targets, int probs, const gpucore_tensor *dlogits)
{
    return a->inner > 1 && !gpucore_tensor_contiguous_unchecked(logits) && ce_class_last(logits, k) &&
           (!probs || ce_class_last(targets, k)) && (!dlogits || ce_class_last(dlogits, k));
}

/* logits with class dim k (ce_dims) and C > 0 where rows > 0; targets i32/i64 of logits'
 * shape without dim k (or, where probs is not NULL, class probabilities of logits' dtype and
 * shape: *probs set); a loss-like tensor (loss or dloss) of the targets' shape (NONE) or one
 * element; weight NULL or [C]. */
static gpucore_status ce_check(const char *name, const gpucore_tensor *logits, const gpucore_tensor *targets,
                               const gpucore_tensor *l, const char *ln, const gpucore_tensor *weight, int *wdt,
                               gpucore_loss_reduction red, double smoothing, int class_dim, gpucore_rows_args *a,
                               int *probs, int *kout)
{
    gpucore_status st = gpucore_check_tensor(logits, name, "logits");
    int k = 0;
    if (st || (st = ce_dims(name, logits, class_dim, &k, &a->rows, &a->cols, &a->inner))) return st;
    *kout = k;
    if ((st = gpucore_check_tensor(targets, name, "targets"))) return st;
    int p = probs && targets->dtype != GPUCORE_I32 && targets->dtype != GPUCORE_I64;
    if (probs) *probs = p;
    if (p) {
        if ((st = check_like(targets, "targets", logits, "logits", name))) return st;
    } else if ((st = check_index(targets, "targets", logits, name))) {
        return st;
    }
    if ((st = gpucore_check_tensor(l, name, ln)) || (st = ops_check_float(l, name, ln)) ||
        (st = ops_check_same(l, ln, logits, "logits", name, 0)))
        return st;
    if ((st = ops_check_enum(name, "reduction", "gpucore_loss_reduction", (int)red, 0))) return st;
    if (!p && !ce_lead_shape(targets, logits, k))
        return shape_error(name, "targets", targets, "logits", logits,
                           "targets must have the shape of logits without its class dim");
    if (red == GPUCORE_LOSS_NONE ? !ce_lead_shape(l, logits, k) : gpucore_tensor_numel_unchecked(l) != 1)
        return shape_error(name, ln, l, "logits", logits,
                           red == GPUCORE_LOSS_NONE ? "with reduction NONE it must have logits' shape without its class dim"
                                                    : "with reduction MEAN or SUM it must hold one element");
    if (a->cols == 0 && a->rows > 0)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: logits has %lld rows of 0 classes", name,
                                 (long long)a->rows);
    if (weight && !(st = gpucore_check_tensor(weight, name, "weight")) && (weight->ndim != 1 || weight->shape[0] != a->cols)) {
        char b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: 'weight' must have shape [%lld] (one per class: dim %d "
                                 "of logits), but it is %s", name, (long long)a->cols, k,
                                 gpucore_shape_str(weight->ndim, weight->shape, b, sizeof b));
    }
    if (st || (st = check_param(weight, "weight", logits, a->cols, wdt, name))) return st;
    if (!(smoothing >= 0.0 && smoothing <= 1.0))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: label_smoothing is %g; it must lie in [0, 1]", name,
                                 smoothing);
    a->dtype = logits->dtype;
    a->param_dtype = *wdt < 0 ? logits->dtype : *wdt;
    a->target_dtype = targets->dtype;
    a->loss_dtype = l->dtype;
    a->reduction = (int32_t)red;
    a->smoothing = (float)smoothing;
    return GPUCORE_OK;
}

static gpucore_status ce_forward(gpucore_tensor *loss, const gpucore_tensor *logits, const gpucore_tensor *targets,
                                 const gpucore_tensor *weight, int64_t ignore_index, gpucore_loss_reduction reduction,
                                 double label_smoothing, int class_dim, int allow_probs, gpucore_stream *stream)
{
    const char *name = "cross_entropy";
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    int probs = 0, wdt = -1, k = 0;
    gpucore_status st = ce_check(name, logits, targets, loss, "loss", weight, &wdt, reduction, label_smoothing, class_dim,
                                 &a, allow_probs ? &probs : NULL, &k);
    if (st || (st = ops_check_tensor_alias(loss, logits, name, "logits", 0)) ||
        (st = ops_check_tensor_alias(loss, targets, name, "targets", 0)) ||
        (st = ops_check_tensor_alias(loss, weight, name, "weight", 0)))
        return st;
    gpucore_context *ctx = logits->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    if (a.rows == 0)
        return reduction == GPUCORE_LOSS_NONE ? GPUCORE_OK : gpucore_fill(loss, reduction == GPUCORE_LOSS_MEAN ? NAN : 0.0, io.s);
    a.op = GPUCORE_ROWS_CE_FWD;
    a.ignore_index = ignore_index;
    const int in_place = ce_rows_in_place(&a, k, logits, targets, probs, NULL);
    if (in_place) {
        a.inner = 1;
        a.x = ops_tensor_data(logits);
        if (probs) a.targets = ops_tensor_data(targets);
    }
    if ((in_place || !(st = io_in(&io, logits, &a.x))) && ((in_place && probs) || !(st = io_in(&io, targets, &a.targets))) &&
        !(st = io_in(&io, weight, &a.weight)) && !(st = io_out(&io, loss, &a.loss)))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_cross_entropy(gpucore_tensor *loss, const gpucore_tensor *logits, const gpucore_tensor *targets,
                                     int64_t ignore_index, gpucore_loss_reduction reduction, gpucore_stream *stream)
{
    return ce_forward(loss, logits, targets, NULL, ignore_index, reduction, 0.0, -1, 0, stream);
}

gpucore_status gpucore_cross_entropy_forward_ex(gpucore_tensor *loss, const gpucore_tensor *logits,
                                                const gpucore_tensor *targets, const gpucore_tensor *weight,
                                                int64_t ignore_index, gpucore_loss_reduction reduction,
                                                double label_smoothing, int class_dim, gpucore_stream *stream)
{
    return ce_forward(loss, logits, targets, weight, ignore_index, reduction, label_smoothing, class_dim, 1, stream);
}

static gpucore_status ce_backward(gpucore_tensor *dlogits, const gpucore_tensor *dloss, const gpucore_tensor *logits,
                                  const gpucore_tensor *targets, const gpucore_tensor *weight, int64_t ignore_index,
                                  gpucore_loss_reduction reduction, double label_smoothing, int class_dim,
                                  int allow_probs, gpucore_stream *stream)
{
    const char *name = "cross_entropy_backward";
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    int probs = 0, wdt = -1, k = 0;
    gpucore_status st = ce_check(name, logits, targets, dloss, "dloss", weight, &wdt, reduction, label_smoothing,
                                 class_dim, &a, allow_probs ? &probs : NULL, &k);
    if (st || (st = check_like(dlogits, "dlogits", logits, "logits", name))) return st;
    if ((st = ops_check_tensor_alias(dlogits, logits, name, "logits", 1)) || (st = ops_check_tensor_alias(dlogits, dloss, name, "dloss", 0)) ||
        (st = ops_check_tensor_alias(dlogits, targets, name, "targets", 0)) ||
        (st = ops_check_tensor_alias(dlogits, weight, name, "weight", 0)))
        return st;
    gpucore_context *ctx = logits->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    if (a.rows * a.cols == 0) return GPUCORE_OK;
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    a.op = GPUCORE_ROWS_CE_BWD;
    a.ignore_index = ignore_index;
    const int in_place = ce_rows_in_place(&a, k, logits, targets, probs, dlogits);
    if (in_place) {
        a.inner = 1;
        a.x = ops_tensor_data(logits);
        a.dx = ops_tensor_data(dlogits);
        if (probs) a.targets = ops_tensor_data(targets);
    }
    if ((in_place || !(st = io_in(&io, logits, &a.x))) && ((in_place && probs) || !(st = io_in(&io, targets, &a.targets))) &&
        !(st = io_in(&io, dloss, &a.dloss)) && !(st = io_in(&io, weight, &a.weight)) &&
        (in_place || !(st = io_out(&io, dlogits, &a.dx))))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_cross_entropy_backward_ex(gpucore_tensor *dlogits, const gpucore_tensor *dloss,
                                                 const gpucore_tensor *logits, const gpucore_tensor *targets,
                                                 const gpucore_tensor *weight, int64_t ignore_index,
                                                 gpucore_loss_reduction reduction, double label_smoothing,
                                                 int class_dim, gpucore_stream *stream)
{
    return ce_backward(dlogits, dloss, logits, targets, weight, ignore_index, reduction, label_smoothing, class_dim, 1,
                       stream);
}

gpucore_status gpucore_cross_entropy_backward(gpucore_tensor *dlogits, const gpucore_tensor *dloss,
                                              const gpucore_tensor *logits, const gpucore_tensor *targets,
                                              int64_t ignore_index, gpucore_loss_reduction reduction,
                                              gpucore_stream *stream)
{
    return ce_backward(dlogits, dloss, logits, targets, NULL, ignore_index, reduction, 0.0, -1, 0, stream);
}

/* ---------------------------------------------------------------- embedding */

static gpucore_status embed_check(const char *name, const gpucore_tensor *table, const char *tn,
                                  const gpucore_tensor *rowsd, const char *rn, const gpucore_tensor *indices)
{
    gpucore_status st = gpucore_check_tensor(table, name, tn);
    if (st || (st = ops_check_float(table, name, tn)) || (st = check_index(indices, "indices", table, name)) ||
        (st = gpucore_check_tensor(rowsd, name, rn)) || (st = ops_check_same(rowsd, rn, table, tn, name, 1)))
        return st;
    if (table->ndim != 2) {
        char b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' must be 2-d [vocab, dim], but it is %s", name, tn,
                                 gpucore_shape_str(table->ndim, table->shape, b, sizeof b));
    }
    int ok = rowsd->ndim == indices->ndim + 1 && rowsd->shape[rowsd->ndim - 1] == table->shape[1] &&
             !memcmp(rowsd->shape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
    if (!ok) return shape_error(name, rn, rowsd, "indices", indices, "it must be indices' shape followed by the embedding dim");
    return GPUCORE_OK;
}

gpucore_status gpucore_embedding(gpucore_tensor *out, const gpucore_tensor *weight, const gpucore_tensor *indices,
                                 gpucore_stream *stream)
{
    const char *name = "embedding";
    gpucore_status st = embed_check(name, weight, "weight", out, "out", indices);
    if (st || (st = ops_check_tensor_alias(out, weight, name, "weight", 0)) || (st = ops_check_tensor_alias(out, indices, name, "indices", 0)))
        return st;
    gpucore_context *ctx = weight->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    int64_t n = gpucore_tensor_numel_unchecked(indices), dim = weight->shape[1];
    if (n * dim == 0) return GPUCORE_OK;
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    a.op = GPUCORE_ROWS_EMBED;
    a.dtype = weight->dtype;
    a.target_dtype = indices->dtype;
    a.rows = n;
    a.cols = dim;
    a.vocab = weight->shape[0];
    if (!(st = io_in(&io, weight, &a.x)) && !(st = io_in(&io, indices, &a.targets)) && !(st = io_out(&io, out, &a.y)))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_embedding_backward(gpucore_tensor *dweight, const gpucore_tensor *dout,
                                          const gpucore_tensor *indices, gpucore_stream *stream)
{
    const char *name = "embedding_backward";
    gpucore_status st = embed_check(name, dweight, "dweight", dout, "dout", indices);
    if (st || (st = ops_check_tensor_alias(dweight, dout, name, "dout", 0)) || (st = ops_check_tensor_alias(dweight, indices, name, "indices", 0)))
        return st;
    gpucore_context *ctx = dweight->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->rows, name))) return st;
    int64_t n = gpucore_tensor_numel_unchecked(indices), vocab = dweight->shape[0], dim = dweight->shape[1];
    if (vocab * dim == 0) return GPUCORE_OK;
    rows_io io = {0};
    if ((st = gpucore_resolve_stream(ctx, stream, name, &io.s))) return st;
    if (n == 0) return gpucore_fill(dweight, 0.0, io.s);
    gpucore_rows_args a;
    memset(&a, 0, sizeof a);
    a.op = GPUCORE_ROWS_EMBED_BWD;
    a.dtype = dweight->dtype;
    a.target_dtype = indices->dtype;
    a.rows = n;
    a.cols = dim;
    a.vocab = vocab;
    if (!(st = io_in(&io, dout, &a.dy)) && !(st = io_in(&io, indices, &a.targets)) && !(st = io_out(&io, dweight, &a.dx)))
        st = rows_run(ctx, &a, io.s);
    return io_finish(&io, st);
}

gpucore_status gpucore_embedding_backward_padding(gpucore_tensor *dweight, const gpucore_tensor *dout,
                                                  const gpucore_tensor *indices, int64_t padding_idx,
                                                  gpucore_stream *stream)
{
    const char *name = "embedding_backward_padding";
    gpucore_status st = embed_check(name, dweight, "dweight", dout, "dout", indices);
    if (st) return st;
    const int64_t vocab = dweight->shape[0];
    if (padding_idx < -vocab || padding_idx >= vocab)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: padding_idx %lld is out of range for %lld "
                                 "embeddings (use -%lld .. %lld)", name, (long long)padding_idx, (long long)vocab,
                                 (long long)vocab, (long long)(vocab - 1));
    if ((st = gpucore_embedding_backward(dweight, dout, indices, stream))) return st;
    gpucore_tensor *row = NULL;
    const int64_t p = padding_idx < 0 ? padding_idx + vocab : padding_idx;
    if ((st = gpucore_tensor_slice(dweight, 0, p, p + 1, 1, &row))) return st;
    st = gpucore_fill(row, 0.0, stream);
    gpucore_tensor_destroy(row);
    return st;
}
