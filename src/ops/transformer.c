/*
 * transformer.c — front-ends of the transformer-block ops (formulas in
 * kernels/transformer_math.h): rotary position embedding, gated linear units
 * (SwiGLU/GeGLU) and the fused residual add + RMSNorm/LayerNorm. They validate
 * and dispatch to the backend's `transformer` entry; the residual-norm
 * backward is composed above the vtable from the norm backward and an axpy.
 */
#include <math.h>
#include <string.h>
#include "transformer_internal.h"
#include "transformer_math.h"

_Static_assert((int)GPUCORE_GLU_SWIGLU == GPUCORE_TFM_SWIGLU && (int)GPUCORE_GLU_GEGLU_TANH == GPUCORE_TFM_GEGLU_TANH &&
               (int)GPUCORE_GLU_GEGLU_ERF == GPUCORE_TFM_GEGLU_ERF, "GLU kind codes");

static int same_shape(const gpucore_tensor *a, const gpucore_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

gpucore_status tfm_shape_error(const char *op, const char *an, const gpucore_tensor *a, const char *want)
{
    char b[200];
    return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' has shape %s; %s", op, an,
                             gpucore_shape_str(a->ndim, a->shape, b, sizeof b), want);
}

/* A float tensor of x's context, dtype and shape. */
static gpucore_status check_like(const gpucore_tensor *t, const char *tn, const gpucore_tensor *x, const char *xn,
                                 const char *op)
{
    gpucore_status st = gpucore_check_tensor(t, op, tn);
    if (st || (st = ops_check_float(t, op, tn)) || (st = ops_check_same(t, tn, x, xn, op, 1))) return st;
    if (!same_shape(t, x)) return tfm_shape_error(op, tn, t, "it must have the same shape as the other operands");
    return GPUCORE_OK;
}

static gpucore_status tfm_run(gpucore_context *ctx, gpucore_tfm_args *a, gpucore_stream *stream, const char *op,
                              int64_t bytes)
{
    gpucore_status st = ops_need_entry(ctx, (const void *)ctx->be->transformer, op);
    gpucore_stream *s;
    if (st || (st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;
    void *prof = gpucore_prof_begin(ctx, s, op, bytes);
    st = ctx->be->transformer(ctx->bctx, a, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

/* ------------------------------------------------------------------- RoPE */

static gpucore_status rope(const char *op, int inverse, gpucore_tensor *out, const gpucore_tensor *x,
                           const gpucore_tensor *cos, const gpucore_tensor *sin, int interleaved, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(x, op, "x");
    if (st || (st = ops_check_float(x, op, "x")) || (st = check_like(out, "out", x, "x", op))) return st;
    if (x->ndim != 4) return tfm_shape_error(op, "x", x, "rotary embedding takes a 4-d [batch, heads, seq, head_dim] tensor");
    const gpucore_tensor *tabs[2] = {cos, sin};
    const char *tn[2] = {"cos", "sin"};
    for (int i = 0; i < 2; i++) {
        if ((st = gpucore_check_tensor(tabs[i], op, tn[i])) || (st = ops_check_float(tabs[i], op, tn[i])) ||
            (st = ops_check_same(tabs[i], tn[i], x, "x", op, 0)))
            return st;
        if (tabs[i]->dtype != GPUCORE_F32 && tabs[i]->dtype != x->dtype)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; it must be f32 or x's dtype", op, tn[i],
                                     gpucore_dtype_name((gpucore_dtype)tabs[i]->dtype));
        if (tabs[i]->ndim != 2 || tabs[i]->shape[0] != x->shape[2] || 2 * tabs[i]->shape[1] > x->shape[3] ||
            !gpucore_tensor_contiguous_unchecked(tabs[i]))
            return tfm_shape_error(op, tn[i], tabs[i], "cos and sin must be contiguous [seq, rotary_dim/2] with x's seq and "
                                                   "rotary_dim <= head_dim");
    }
    if (cos->dtype != sin->dtype || cos->shape[1] != sin->shape[1])
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: cos and sin must have one shape and dtype", op);
    if ((st = ops_check_tensor_alias(out, x, op, "x", 1)) || (st = ops_check_tensor_alias(out, cos, op, "cos", 0)) ||
        (st = ops_check_tensor_alias(out, sin, op, "sin", 0)))
        return st;
    gpucore_tfm_args a;
    memset(&a, 0, sizeof a);
    a.op = GPUCORE_TFM_ROPE;
    a.interleaved = interleaved != 0;
    a.inverse = inverse;
    a.table_dtype = cos->dtype;
    a.rot_half = cos->shape[1];
    gpucore_tensor_view_of(x, &a.in0);
    gpucore_tensor_view_of(out, &a.out0);
    gpucore_tensor_view_of(cos, &a.in1);
    gpucore_tensor_view_of(sin, &a.in2);
    if (a.in0.numel == 0) return GPUCORE_OK;
    return tfm_run(x->ctx, &a, stream, op, 2 * a.in0.numel * a.in0.elem_size);
}

gpucore_status gpucore_rotary_embedding(gpucore_tensor *out, const gpucore_tensor *x, const gpucore_tensor *cos,
                                        const gpucore_tensor *sin, int interleaved, gpucore_stream *stream)
{
    return rope("rotary_embedding", 0, out, x, cos, sin, interleaved, stream);
}

gpucore_status gpucore_rotary_embedding_backward(gpucore_tensor *dx, const gpucore_tensor *dy, const gpucore_tensor *cos,
                                                 const gpucore_tensor *sin, int interleaved, gpucore_stream *stream)
{
    return rope("rotary_embedding_backward", 1, dx, dy, cos, sin, interleaved, stream);
}

/* -------------------------------------------------------------------- GLU */

static gpucore_status check_kind(gpucore_glu_kind kind, const char *op)
{
    if ((int)kind < 0 || (int)kind > GPUCORE_GLU_GEGLU_ERF)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: kind %d is not a gpucore_glu_kind (0 SwiGLU, "
                                 "1 GeGLU tanh, 2 GeGLU erf)", op, (int)kind);
    return GPUCORE_OK;
}

gpucore_status gpucore_glu(gpucore_tensor *out, const gpucore_tensor *gate, const gpucore_tensor *up,
                           gpucore_glu_kind kind, gpucore_stream *stream)
{
    const char *op = "glu";
    gpucore_status st = gpucore_check_tensor(gate, op, "gate");
    if (st || (st = ops_check_float(gate, op, "gate")) || (st = check_like(up, "up", gate, "gate", op)) ||
        (st = check_like(out, "out", gate, "gate", op)) || (st = check_kind(kind, op)))
        return st;
    if ((st = ops_check_tensor_alias(out, gate, op, "gate", 1)) || (st = ops_check_tensor_alias(out, up, op, "up", 1))) return st;
    gpucore_tfm_args a;
    memset(&a, 0, sizeof a);
    a.op = GPUCORE_TFM_GLU;
    a.kind = (int32_t)kind;
    gpucore_tensor_view_of(gate, &a.in0);
    gpucore_tensor_view_of(up, &a.in1);
    gpucore_tensor_view_of(out, &a.out0);
    if (a.in0.numel == 0) return GPUCORE_OK;
    return tfm_run(gate->ctx, &a, stream, op, 3 * a.in0.numel * a.in0.elem_size);
}

gpucore_status gpucore_glu_backward(gpucore_tensor *dgate, gpucore_tensor *dup, const gpucore_tensor *dout,
                                    const gpucore_tensor *gate, const gpucore_tensor *up, gpucore_glu_kind kind,
                                    gpucore_stream *stream)
{
    const char *op = "glu_backward";
    gpucore_status st = gpucore_check_tensor(gate, op, "gate");
    if (st || (st = ops_check_float(gate, op, "gate")) || (st = check_like(up, "up", gate, "gate", op)) ||
        (st = check_like(dout, "dout", gate, "gate", op)) || (st = check_kind(kind, op)))
        return st;
    if ((dgate && (st = check_like(dgate, "dgate", gate, "gate", op))) || (dup && (st = check_like(dup, "dup", gate, "gate", op))))
        return st;
    /* each output element is written after all three inputs of that element are read: exact in-place is safe */
    const gpucore_tensor *ins[3] = {dout, gate, up};
    const char *inn[3] = {"dout", "gate", "up"};
    for (int i = 0; i < 3; i++)
        if ((st = ops_check_tensor_alias(dgate, ins[i], op, inn[i], 1)) || (st = ops_check_tensor_alias(dup, ins[i], op, inn[i], 1))) return st;
    if ((st = ops_check_tensor_alias(dgate, dup, op, "dup", 0))) return st;
    if (!dgate && !dup) return GPUCORE_OK;
    gpucore_tfm_args a;
    memset(&a, 0, sizeof a);
    a.op = GPUCORE_TFM_GLU_BWD;
    a.kind = (int32_t)kind;
    gpucore_tensor_view_of(gate, &a.in0);
    gpucore_tensor_view_of(up, &a.in1);
    gpucore_tensor_view_of(dout, &a.in2);
    if (dgate) gpucore_tensor_view_of(dgate, &a.out0);
    if (dup) gpucore_tensor_view_of(dup, &a.out1);
    if (a.in0.numel == 0) return GPUCORE_OK;
    return tfm_run(gate->ctx, &a, stream, op, 5 * a.in0.numel * a.in0.elem_size);
}

/* ---------------------------------------------------------- residual + norm */

/* A norm parameter [cols] of x's context, float; the first one fixes *pdt. */
static gpucore_status check_param(const gpucore_tensor *p, const char *pn, const gpucore_tensor *x, int64_t cols,
                                  int *pdt, const char *op)
{
    if (!p) return GPUCORE_OK;
    gpucore_status st = gpucore_check_tensor(p, op, pn);
    if (st || (st = ops_check_float(p, op, pn)) || (st = ops_check_same(p, pn, x, "x", op, 0))) return st;
    if (p->ndim != 1 || p->shape[0] != cols) return tfm_shape_error(op, pn, p, "norm parameters are [cols] (x's last dim)");
    if (*pdt >= 0 && p->dtype != *pdt)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: gamma and beta must share one dtype", op);
    *pdt = p->dtype;
    return GPUCORE_OK;
}

/* f32, one element per row, contiguous; its data pointer. */
static gpucore_status check_stat(const gpucore_tensor *t, const char *tn, const gpucore_tensor *x, int64_t rows,
                                 const char *op, float **ptr)
{
    *ptr = NULL;
    if (!t) return GPUCORE_OK;
    gpucore_status st = gpucore_check_tensor(t, op, tn);
    if (st || (st = ops_check_same(t, tn, x, "x", op, 0))) return st;
    if (t->dtype != GPUCORE_F32 || gpucore_tensor_numel_unchecked(t) != rows || !gpucore_tensor_contiguous_unchecked(t))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' must be a contiguous f32 tensor of %lld elements "
                                 "(one per row)", op, tn, (long long)rows);
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    *ptr = v.data;
    return GPUCORE_OK;
}

gpucore_status gpucore_residual_norm(gpucore_tensor *y, gpucore_tensor *h, gpucore_tensor *mean, gpucore_tensor *rstd,
                                     const gpucore_tensor *x, const gpucore_tensor *residual, const gpucore_tensor *gamma,
                                     const gpucore_tensor *beta, int layer_norm, double eps, gpucore_stream *stream)
{
    const char *op = "residual_norm";
    gpucore_status st = gpucore_check_tensor(x, op, "x");
    if (st || (st = ops_check_float(x, op, "x")) || (st = check_like(residual, "residual", x, "x", op)) ||
        (st = check_like(y, "y", x, "x", op)) || (st = check_like(h, "h", x, "x", op)))
        return st;
    if (x->ndim < 1) return tfm_shape_error(op, "x", x, "give it at least one dim (the normalised one)");
    if (layer_norm ? (!gamma) != (!beta) : beta != NULL)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s", op, layer_norm ? "give both gamma and beta or "
                                 "neither" : "RMSNorm has no beta");
    if (!(eps >= 0) || !isfinite(eps))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, not %g", op, eps);
    const int64_t cols = x->shape[x->ndim - 1], n = gpucore_tensor_numel_unchecked(x);
    const int64_t rows = cols ? n / cols : 0;
    int pdt = -1;
    float *mp = NULL, *rp = NULL;
    if ((st = check_param(gamma, "gamma", x, cols, &pdt, op)) || (st = check_param(beta, "beta", x, cols, &pdt, op)) ||
        (st = check_stat(layer_norm ? mean : NULL, "mean", x, rows, op, &mp)) || (st = check_stat(rstd, "rstd", x, rows, op, &rp)))
        return st;
    const gpucore_tensor *ins[4] = {x, residual, gamma, beta};
    const char *inn[4] = {"x", "residual", "gamma", "beta"};
    for (int i = 0; i < 4; i++)
        if ((st = ops_check_tensor_alias(y, ins[i], op, inn[i], 0)) || (st = ops_check_tensor_alias(h, ins[i], op, inn[i], i < 2)) ||
            (st = ops_check_tensor_alias(mean, ins[i], op, inn[i], 0)) || (st = ops_check_tensor_alias(rstd, ins[i], op, inn[i], 0)))
            return st;
    if ((st = ops_check_tensor_alias(y, h, op, "h", 0)) || (st = ops_check_tensor_alias(mean, rstd, op, "rstd", 0))) return st;
    if (n == 0) return GPUCORE_OK;
    gpucore_context *ctx = x->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->transformer, op))) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;
    gpucore_tfm_args a;
    memset(&a, 0, sizeof a);
    a.op = GPUCORE_TFM_RESNORM;
    a.kind = layer_norm != 0;
    a.table_dtype = pdt < 0 ? x->dtype : pdt;
    a.rows = rows;
    a.cols = cols;
    a.eps = (float)eps;
    a.mean = mp;
    a.rstd = rp;
    /* rows run over contiguous memory: stage strided operands */
    gpucore_tensor *staged[6] = {0};
    if (!(st = ops_contiguous_input(x, s, &a.in0, &staged[0])) && !(st = ops_contiguous_input(residual, s, &a.in1, &staged[1])) &&
        !(st = gamma ? ops_contiguous_input(gamma, s, &a.in2, &staged[2]) : GPUCORE_OK) &&
        !(st = beta ? ops_contiguous_input(beta, s, &a.in3, &staged[3]) : GPUCORE_OK) &&
        !(st = ops_contiguous_output(y, s, &a.out0, &staged[4])) && !(st = ops_contiguous_output(h, s, &a.out1, &staged[5])))
        st = tfm_run(ctx, &a, s, op, 4 * n * a.in0.elem_size);
    st = ops_finish_output(y, staged[4], s, st);
    st = ops_finish_output(h, staged[5], s, st);
    for (int i = 0; i < 4; i++)
        if (staged[i]) gpucore_tensor_destroy(staged[i]);
    return st;
}

gpucore_status gpucore_residual_norm_backward(gpucore_tensor *dx, gpucore_tensor *dgamma, gpucore_tensor *dbeta,
                                              const gpucore_tensor *dy, const gpucore_tensor *dh, const gpucore_tensor *h,
                                              const gpucore_tensor *mean, const gpucore_tensor *rstd,
                                              const gpucore_tensor *gamma, int layer_norm, gpucore_stream *stream)
{
    const char *op = "residual_norm_backward";
    gpucore_status st = gpucore_check_tensor(h, op, "h");
    if (st) return st;
    if (dh && ((st = check_like(dh, "dh", h, "h", op)) || (st = ops_check_tensor_alias(dx, dh, op, "dh", 0)))) return st;
    if (!layer_norm && dbeta)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: RMSNorm has no beta; pass dbeta = NULL", op);
    st = layer_norm ? gpucore_layer_norm_backward(dx, dgamma, dbeta, dy, h, mean, rstd, gamma, stream)
                    : gpucore_rms_norm_backward(dx, dgamma, dy, h, rstd, gamma, stream);
    if (st || !dx || !dh) return st;
    return gpucore_axpy(dx, 1.0, dh, stream); /* the gradient reaching the h output passes straight to x and residual */
}
