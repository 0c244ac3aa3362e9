/*
 * checkpoint_segments.c — the built-in segments of the checkpoint executor:
 * linear(+bias+ReLU/GELU), conv2d(+bias+ReLU), layer norm and dropout. Each is an
 * ordinary forward/backward callback pair over public ops, exactly what a user
 * would write, so the executor treats built-in and custom segments alike.
 * Parameter gradients are overwritten (not accumulated) and announced with
 * gpucore_ckpt_grad_ready as soon as they are queued.
 */
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"

#define TRY(call)                                  \
    do {                                           \
        if ((st = (call)) != GPUCORE_OK) goto out; \
    } while (0)

static gpucore_context *ctx_of(const gpucore_tensor *t) { return t->ctx; }

gpucore_status gpucore_ckpt_check_param(const gpucore_ckpt *c, const gpucore_tensor *t, const char *op, const char *seg,
                                  const char *arg, int required)
{
    (void)c;
    if (!t) {
        if (required) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: segment '%s': %s is NULL", op, seg, arg);
        return GPUCORE_OK;
    }
    return gpucore_check_tensor(t, op, arg);
}

gpucore_status gpucore_ckpt_check_grad(const gpucore_tensor *p, const gpucore_tensor *g, const char *op, const char *seg,
                                 const char *pn, const char *gn)
{
    if (!g) return GPUCORE_OK;
    gpucore_status st = gpucore_check_tensor(g, op, gn);
    if (st) return st;
    if (!p) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': %s given without %s", op, seg, gn, pn);
    if (g->ndim != p->ndim || memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim)) {
        char a[200], b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': %s is %s but %s is %s", op, seg, gn,
                                 gpucore_shape_str(g->ndim, g->shape, a, sizeof a), pn,
                                 gpucore_shape_str(p->ndim, p->shape, b, sizeof b));
    }
    return GPUCORE_OK;
}

/* ------------------------------------------------------------------- linear */

typedef struct linear_seg {
    const gpucore_tensor *w, *bias;
    gpucore_tensor *dw, *db;
    gpucore_activation act;
} linear_seg;

static gpucore_status linear_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                 gpucore_stream *stream, void *user)
{
    linear_seg Lnow = *(const linear_seg *)user, *L = &Lnow;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *out = NULL, *aux = NULL;
    CKPT_BIND(call, L->w, 0);
    CKPT_BIND(call, L->bias, 0);
    if (x->ndim < 1) return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "linear: x is 0-d");
    int64_t shape[GPUCORE_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = L->w->shape[0];
    TRY(gpucore_tensor_create(ctx_of(x), (gpucore_dtype)x->dtype, x->ndim, shape, &out));
    if (L->act == GPUCORE_ACT_GELU_TANH) TRY(gpucore_tensor_create(ctx_of(x), (gpucore_dtype)x->dtype, x->ndim, shape, &aux));
    TRY(gpucore_linear_forward(x, L->w, L->bias, L->act, out, aux, stream));
    TRY(gpucore_ckpt_save(call, x));
    if (L->act == GPUCORE_ACT_GELU_TANH) TRY(gpucore_ckpt_save(call, aux));
    else if (L->act == GPUCORE_ACT_RELU) TRY(gpucore_ckpt_save(call, out)); /* relu'(pre) = [y > 0] */
out:
    gpucore_tensor_destroy(aux);
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status linear_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                 gpucore_stream *stream, void *user)
{
    linear_seg Lnow = *(const linear_seg *)user, *L = &Lnow;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *x = NULL, *act_in = NULL, *g = NULL;
    CKPT_BIND(call, L->w, 0);
    CKPT_BIND(call, L->dw, 1);
    CKPT_BIND(call, L->db, 1);
    TRY(gpucore_ckpt_saved(call, 0, &x));
    if (L->act != GPUCORE_ACT_NONE) {
        TRY(gpucore_ckpt_saved(call, 1, &act_in));
        TRY(gpucore_tensor_create(ctx_of(dy), (gpucore_dtype)dy->dtype, dy->ndim, dy->shape, &g));
        TRY(gpucore_activation_backward(L->act, g, dy, act_in, stream));
    }
    TRY(gpucore_linear_backward(g ? g : dy, x, L->w, NULL, dx, L->dw, L->db, stream));
    if (L->dw) TRY(gpucore_ckpt_grad_ready(call, 0, L->dw));
    if (L->db) TRY(gpucore_ckpt_grad_ready(call, 1, L->db));
out:
    gpucore_tensor_destroy(g);
    return st;
}

gpucore_status gpucore_ckpt_add_linear(gpucore_ckpt *c, const char *name, const gpucore_tensor *w,
                                       const gpucore_tensor *bias, gpucore_activation act, gpucore_tensor *dw,
                                       gpucore_tensor *db)
{
    const char *op = "ckpt_add_linear";
    const char *seg = name ? name : "";
    gpucore_status st = gpucore_ckpt_check_param(c, w, op, seg, "w", 1);
    if (!st) st = gpucore_ckpt_check_param(c, bias, op, seg, "bias", 0);
    if (!st) st = gpucore_ckpt_check_grad(w, dw, op, seg, "w", "dw");
    if (!st) st = gpucore_ckpt_check_grad(bias, db, op, seg, "bias", "db");
    if (!st && w->ndim != 2) st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': w must be 2-d [out, in]", op, seg);
    if (!st && db && !dw)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': db needs dw (one GEMM computes both)", op, seg);
    if (!st && act != GPUCORE_ACT_NONE && act != GPUCORE_ACT_RELU && act != GPUCORE_ACT_GELU_TANH)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': act must be NONE, RELU or GELU_TANH, "
                               "got %d", op, seg, (int)act);
    if (st) return st;
    linear_seg *L = calloc(1, sizeof *L);
    if (!L) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    *L = (linear_seg){w, bias, dw, db, act};
    return gpucore_ckpt_add_segment(c, name, linear_fwd, linear_bwd, L, free, op);
}

/* ------------------------------------------------------------------- conv2d */

typedef struct conv_seg {
    const gpucore_tensor *w, *bias;
    gpucore_tensor *dw, *db;
    gpucore_conv_options opts; /* activation NONE; fwd_act applied in the forward */
    gpucore_activation act;
} conv_seg;

static gpucore_status conv_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                               gpucore_stream *stream, void *user)
{
    conv_seg *C = user;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *out = NULL;
    int ndim = 0;
    int64_t shape[GPUCORE_MAX_DIMS];
    gpucore_conv_options o = C->opts;
    o.activation = C->act;
    TRY(gpucore_conv_output_shape(x, C->w, &o, &ndim, shape));
    TRY(gpucore_tensor_create(ctx_of(x), (gpucore_dtype)x->dtype, ndim, shape, &out));
    TRY(gpucore_conv_forward(x, C->w, C->bias, out, &o, stream));
    TRY(gpucore_ckpt_save(call, x));
    if (C->act == GPUCORE_ACT_RELU) TRY(gpucore_ckpt_save(call, out));
out:
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status conv_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                               gpucore_stream *stream, void *user)
{
    conv_seg *C = user;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *x = NULL, *yv = NULL, *g = NULL, *chan_last = NULL;
    TRY(gpucore_ckpt_saved(call, 0, &x));
    if (C->act == GPUCORE_ACT_RELU) {
        TRY(gpucore_ckpt_saved(call, 1, &yv));
        TRY(gpucore_tensor_create(ctx_of(dy), (gpucore_dtype)dy->dtype, dy->ndim, dy->shape, &g));
        TRY(gpucore_activation_backward(GPUCORE_ACT_RELU, g, dy, yv, stream));
    }
    const gpucore_tensor *gd = g ? g : dy;
    if (dx) TRY(gpucore_conv_backward_data(gd, C->w, dx, &C->opts, stream));
    if (C->dw) {
        TRY(gpucore_conv_backward_filter(gd, x, C->dw, &C->opts, stream));
        TRY(gpucore_ckpt_grad_ready(call, 0, C->dw));
    }
    if (C->db) {
        if (C->opts.layout == GPUCORE_CONV_NCHW) { /* channels to the last dim: a view, no copy */
            static const int p4[4] = {0, 2, 3, 1}, p3[3] = {0, 2, 1};
            TRY(gpucore_tensor_permute((gpucore_tensor *)gd, gd->ndim == 4 ? p4 : p3, &chan_last));
        }
        TRY(gpucore_bias_grad(C->db, chan_last ? chan_last : gd, stream));
        TRY(gpucore_ckpt_grad_ready(call, 1, C->db));
    }
out:
    gpucore_tensor_destroy(chan_last);
    gpucore_tensor_destroy(g);
    return st;
}

gpucore_status gpucore_ckpt_add_conv2d(gpucore_ckpt *c, const char *name, const gpucore_tensor *w,
                                       const gpucore_tensor *bias, const gpucore_conv_options *opts,
                                       gpucore_activation act, gpucore_tensor *dw, gpucore_tensor *db)
{
    const char *op = "ckpt_add_conv2d";
    const char *seg = name ? name : "";
    gpucore_status st = gpucore_ckpt_check_param(c, w, op, seg, "w", 1);
    if (!st) st = gpucore_ckpt_check_param(c, bias, op, seg, "bias", 0);
    if (!st) st = gpucore_ckpt_check_grad(w, dw, op, seg, "w", "dw");
    if (!st) st = gpucore_ckpt_check_grad(bias, db, op, seg, "bias", "db");
    if (!st && w->ndim != 4 && w->ndim != 3)
        st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': w must be 4-d (or 3-d for 1-d conv)", op, seg);
    if (!st && act != GPUCORE_ACT_NONE && act != GPUCORE_ACT_RELU)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': act must be NONE or RELU, got %d", op,
                               seg, (int)act);
    if (!st && opts && opts->struct_size != (int64_t)sizeof(gpucore_conv_options))
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': opts->struct_size is not "
                               "sizeof(gpucore_conv_options) (use gpucore_conv_options_init)", op, seg);
    if (st) return st;
    conv_seg *C = calloc(1, sizeof *C);
    if (!C) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    C->w = w;
    C->bias = bias;
    C->dw = dw;
    C->db = db;
    C->act = act;
    if (opts) C->opts = *opts;
    else gpucore_conv_options_init(&C->opts);
    C->opts.activation = GPUCORE_ACT_NONE;
    return gpucore_ckpt_add_segment(c, name, conv_fwd, conv_bwd, C, free, op);
}

/* --------------------------------------------------------------- layer norm */

typedef struct norm_seg {
    const gpucore_tensor *gamma, *beta;
    gpucore_tensor *dgamma, *dbeta;
    double eps;
} norm_seg;

static gpucore_status norm_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                               gpucore_stream *stream, void *user)
{
    norm_seg Nnow = *(const norm_seg *)user, *N = &Nnow;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *out = NULL, *mean = NULL, *rstd = NULL;
    CKPT_BIND(call, N->gamma, 0);
    CKPT_BIND(call, N->beta, 0);
    if (x->ndim < 1) return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "layer_norm: x is 0-d");
    int64_t cols = x->shape[x->ndim - 1], rows = cols ? gpucore_tensor_numel(x) / cols : 0;
    TRY(gpucore_tensor_create(ctx_of(x), (gpucore_dtype)x->dtype, x->ndim, x->shape, &out));
    TRY(gpucore_tensor_create(ctx_of(x), GPUCORE_F32, 1, &rows, &mean));
    TRY(gpucore_tensor_create(ctx_of(x), GPUCORE_F32, 1, &rows, &rstd));
    TRY(gpucore_layer_norm(out, mean, rstd, x, N->gamma, N->beta, N->eps, stream));
    TRY(gpucore_ckpt_save(call, x));
    TRY(gpucore_ckpt_save(call, mean));
    TRY(gpucore_ckpt_save(call, rstd));
out:
    gpucore_tensor_destroy(mean);
    gpucore_tensor_destroy(rstd);
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status norm_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                               gpucore_stream *stream, void *user)
{
    norm_seg Nnow = *(const norm_seg *)user, *N = &Nnow;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *x = NULL, *mean = NULL, *rstd = NULL;
    CKPT_BIND(call, N->gamma, 0);
    CKPT_BIND(call, N->dgamma, 1);
    CKPT_BIND(call, N->dbeta, 1);
    TRY(gpucore_ckpt_saved(call, 0, &x));
    TRY(gpucore_ckpt_saved(call, 1, &mean));
    TRY(gpucore_ckpt_saved(call, 2, &rstd));
    TRY(gpucore_layer_norm_backward(dx, N->dgamma, N->dbeta, dy, x, mean, rstd, N->gamma, stream));
    if (N->dgamma) TRY(gpucore_ckpt_grad_ready(call, 0, N->dgamma));
    if (N->dbeta) TRY(gpucore_ckpt_grad_ready(call, 1, N->dbeta));
out:
    return st;
}

gpucore_status gpucore_ckpt_add_layer_norm(gpucore_ckpt *c, const char *name, const gpucore_tensor *gamma,
                                           const gpucore_tensor *beta, double eps, gpucore_tensor *dgamma,
                                           gpucore_tensor *dbeta)
{
    const char *op = "ckpt_add_layer_norm";
    const char *seg = name ? name : "";
    gpucore_status st = gpucore_ckpt_check_param(c, gamma, op, seg, "gamma", 0);
    if (!st) st = gpucore_ckpt_check_param(c, beta, op, seg, "beta", 0);
    if (!st && !gamma != !beta)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': gamma and beta must be both given or "
                               "both NULL", op, seg);
    if (!st) st = gpucore_ckpt_check_grad(gamma, dgamma, op, seg, "gamma", "dgamma");
    if (!st) st = gpucore_ckpt_check_grad(beta, dbeta, op, seg, "beta", "dbeta");
    if (!st && !(eps >= 0))
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': eps must be >= 0", op, seg);
    if (st) return st;
    norm_seg *N = calloc(1, sizeof *N);
    if (!N) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    *N = (norm_seg){gamma, beta, dgamma, dbeta, eps};
    return gpucore_ckpt_add_segment(c, name, norm_fwd, norm_bwd, N, free, op);
}

/* ------------------------------------------------------------------ dropout */

typedef struct dropout_seg { double p; } dropout_seg;

static gpucore_status dropout_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                  gpucore_stream *stream, void *user)
{
    dropout_seg *D = user;
    uint64_t seed = 0, offset = 0;
    gpucore_tensor *out = NULL;
    gpucore_status st = gpucore_ckpt_rng(call, gpucore_random_offset_advance(gpucore_tensor_numel(x), GPUCORE_UNIFORM),
                                         &seed, &offset);
    if (!st) st = gpucore_tensor_create(ctx_of(x), (gpucore_dtype)x->dtype, x->ndim, x->shape, &out);
    if (!st) st = gpucore_dropout(out, x, D->p, seed, offset, stream);
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status dropout_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                  gpucore_stream *stream, void *user)
{
    dropout_seg *D = user;
    uint64_t seed = 0, offset = 0;
    gpucore_status st = gpucore_ckpt_rng(call, gpucore_random_offset_advance(gpucore_tensor_numel(dy), GPUCORE_UNIFORM),
                                         &seed, &offset); /* replays the forward's draw */
    if (!st && dx) st = gpucore_dropout(dx, dy, D->p, seed, offset, stream);
    return st;
}

gpucore_status gpucore_ckpt_add_dropout(gpucore_ckpt *c, const char *name, double p)
{
    const char *op = "ckpt_add_dropout";
    if (!(p >= 0 && p <= 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': p must be in [0, 1], got %g", op,
                                 name ? name : "", p);
    dropout_seg *D = calloc(1, sizeof *D);
    if (!D) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    D->p = p;
    return gpucore_ckpt_add_segment(c, name, dropout_fwd, dropout_bwd, D, free, op);
}
