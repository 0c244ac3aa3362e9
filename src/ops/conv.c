/*
 * conv.c — the convolution front-end: validate every argument once (handles,
 * context, dtypes, the layout's reading of each tensor's dims, channels against
 * groups, stride/padding/dilation, the output shape, overlap), resolve padding
 * 'same', the TF32 default and 1-D convolution, and hand the backend one
 * gpucore_conv_desc (kernels/conv_desc.h) with every tensor as a pointer plus
 * strides in logical [n, c, h, w] order. Scratch memory for the backend comes
 * from the context's caching allocator through the desc's workspace callbacks.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "core/internal.h"
#include "core/view_span.h"

void gpucore_conv_options_init(gpucore_conv_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = (int64_t)sizeof *o;
    o->layout = GPUCORE_CONV_NCHW;
    o->algo = GPUCORE_CONV_ALGO_HEURISTIC;
    o->stride_h = o->stride_w = 1;
    o->dil_h = o->dil_w = 1;
    o->groups = 1;
    o->allow_tf32 = -1;
    o->activation = GPUCORE_ACT_NONE;
}

/* The caller's options over the defaults (a smaller struct from an older caller
 * keeps the defaults of the fields it does not have). */
static gpucore_status read_options(const gpucore_conv_options *in, const char *op, gpucore_conv_options *o)
{
    gpucore_conv_options_init(o);
    if (!in) return GPUCORE_OK;
    const int64_t min = (int64_t)offsetof(gpucore_conv_options, padding_same);
    if (in->struct_size < min || in->struct_size > (1 << 16))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: opts->struct_size is %lld; set it with gpucore_conv_options_init (%zu here)", op,
                                 (long long)in->struct_size, sizeof *o);
    size_t n = (size_t)in->struct_size < sizeof *o ? (size_t)in->struct_size : sizeof *o;
    memcpy(o, in, n);
    o->struct_size = (int64_t)sizeof *o;
    if (o->layout != GPUCORE_CONV_NCHW && o->layout != GPUCORE_CONV_NHWC)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: layout is %d; it must be GPUCORE_CONV_NCHW (0) or "
                                 "GPUCORE_CONV_NHWC (1)", op, (int)o->layout);
    if (o->algo < GPUCORE_CONV_ALGO_HEURISTIC || o->algo > GPUCORE_CONV_ALGO_DETERMINISTIC)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: algo is %d; it must be HEURISTIC (0), AUTOTUNE (1) "
                                 "or DETERMINISTIC (2)", op, (int)o->algo);
    if (o->stride_h < 1 || o->stride_w < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stride is (%lld, %lld); strides must be >= 1", op,
                                 (long long)o->stride_h, (long long)o->stride_w);
    if (o->dil_h < 1 || o->dil_w < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dilation is (%lld, %lld); dilations must be >= 1", op,
                                 (long long)o->dil_h, (long long)o->dil_w);
    if (o->pad_h < 0 || o->pad_w < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: padding is (%lld, %lld); padding must be >= 0", op,
                                 (long long)o->pad_h, (long long)o->pad_w);
    if (o->groups < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: groups is %lld; it must be >= 1", op,
                                 (long long)o->groups);
    if (o->padding_same != 0 && o->padding_same != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: padding_same is %d; it must be 0 or 1", op,
                                 (int)o->padding_same);
    if (o->allow_tf32 < -1 || o->allow_tf32 > 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: allow_tf32 is %d; it must be -1, 0 or 1", op,
                                 (int)o->allow_tf32);
    if (o->activation != GPUCORE_ACT_NONE && o->activation != GPUCORE_ACT_RELU)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: activation is %d; convolution fuses only "
                                 "GPUCORE_ACT_NONE (0) or GPUCORE_ACT_RELU (1)", op, (int)o->activation);
    if (o->workspace_limit < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: workspace_limit is %lld; it must be >= 0", op,
                                 (long long)o->workspace_limit);
    return GPUCORE_OK;
}

/* Logical [n, c, h, w] dims and strides of an activation tensor (x, y) or of the
 * filter ([k, c/g, r, s]) under the layout; 1-D tensors get h = 1. */
static gpucore_status logical_dims(const gpucore_tensor *t, int layout, int spatial_dims, const char *op,
                                   const char *name, int64_t dims[4], int64_t strides[4])
{
    const int nd = spatial_dims + 2;
    if (t->ndim != nd) {
        char buf[128];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s is %s (%d dims) but x has %d dims: a %s needs %d-d "
                                 "tensors", op, name, gpucore_shape_str(t->ndim, t->shape, buf, sizeof buf),
                                 (int)t->ndim, nd, spatial_dims == 2 ? "2-D convolution" : "1-D convolution", nd);
    }
    /* positions of n, c, h, w in the tensor (h absent for 1-D) */
    int pos[4];
    if (layout == GPUCORE_CONV_NCHW) {
        pos[0] = 0; pos[1] = 1; pos[2] = spatial_dims == 2 ? 2 : -1; pos[3] = nd - 1;
    } else {
        pos[0] = 0; pos[1] = nd - 1; pos[2] = spatial_dims == 2 ? 1 : -1; pos[3] = nd - 2;
    }
    for (int i = 0; i < 4; i++) {
        dims[i] = pos[i] < 0 ? 1 : t->shape[pos[i]];
        strides[i] = pos[i] < 0 ? 0 : t->strides[pos[i]];
    }
    return GPUCORE_OK;
}

static gpucore_status check_no_overlap(const gpucore_tensor *out, const gpucore_tensor *in, const char *op,
                                       const char *oname, const char *iname)
{
    if (!in || out->storage != in->storage) return GPUCORE_OK;
    if (gpucore_tensors_overlap(out, in))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: output %s overlaps input %s; give the output its "
                                 "own memory", op, oname, iname);
    return GPUCORE_OK;
}

static int64_t out_extent(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride)
{
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

/* Channels against groups, padding 'same', kernel against the padded input;
 * the output extents P, Q. */
static gpucore_status geometry(const char *op, gpucore_conv_options *o, const int64_t xd[4], const int64_t wd[4],
                               const char *xn, const char *wn, int64_t *Pout, int64_t *Qout)
{
    const int64_t C = xd[1], H = xd[2], W = xd[3], K = wd[0], Cg = wd[1], R = wd[2], S = wd[3];
    const int64_t G = o->groups;
    if (C < 1 || H < 1 || W < 1 || K < 1 || Cg < 1 || R < 1 || S < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: channels, spatial sizes and filter sizes must be >= 1 "
                                 "(got C %lld, H %lld, W %lld, K %lld, C/groups %lld, R %lld, S %lld)", op, (long long)C,
                                 (long long)H, (long long)W, (long long)K, (long long)Cg, (long long)R, (long long)S);
    if (C % G != 0)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has %lld channels, which %lld groups do not divide",
                                 op, xn, (long long)C, (long long)G);
    if (K % G != 0)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has %lld output channels, which %lld groups do not "
                                 "divide", op, wn, (long long)K, (long long)G);
    if (Cg * G != C)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has %lld channels but %s expects %lld (%lld input "
                                 "channels per group × groups %lld)", op, xn, (long long)C, wn, (long long)(Cg * G),
                                 (long long)Cg, (long long)G);
    if (o->padding_same) {
        if ((o->dil_h * (R - 1)) % 2 || (o->dil_w * (S - 1)) % 2)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: padding 'same' needs dilation·(kernel−1) even "
                                     "(symmetric padding); the kernel is %lldx%lld with dilation (%lld, %lld): pass "
                                     "explicit padding", op, (long long)R, (long long)S, (long long)o->dil_h,
                                     (long long)o->dil_w);
        o->pad_h = o->dil_h * (R - 1) / 2;
        o->pad_w = o->dil_w * (S - 1) / 2;
    }
    const int64_t eh = o->dil_h * (R - 1) + 1, ew = o->dil_w * (S - 1) + 1;
    if (eh > H + 2 * o->pad_h || ew > W + 2 * o->pad_w)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: the kernel spans %lldx%lld (dilation included) but the "
                                 "padded input is only %lldx%lld: use a smaller kernel or more padding", op, (long long)eh,
                                 (long long)ew, (long long)(H + 2 * o->pad_h), (long long)(W + 2 * o->pad_w));
    *Pout = out_extent(H, o->pad_h, o->dil_h, R, o->stride_h);
    *Qout = out_extent(W, o->pad_w, o->dil_w, S, o->stride_w);
    return GPUCORE_OK;
}

/* Everything the three calls share: x (or dx), w (or dw), y (or dy) validated and
 * described in d. y_role/x_role/w_role name the tensors in messages. */
static gpucore_status prepare(int op_code, const char *op, const gpucore_tensor *x, const char *xn,
                              const gpucore_tensor *w, const char *wn, const gpucore_tensor *y, const char *yn,
                              const gpucore_tensor *bias, const gpucore_conv_options *user, gpucore_conv_desc *d,
                              gpucore_conv_options *o)
{
    gpucore_status st;
    if ((st = gpucore_check_tensor(x, op, xn)) || (st = gpucore_check_tensor(w, op, wn)) ||
        (st = gpucore_check_tensor(y, op, yn)))
        return st;
    if (bias && (st = gpucore_check_tensor(bias, op, "bias"))) return st;
    if ((st = read_options(user, op, o))) return st;
    if (w->ctx != x->ctx) return gpucore_context_mismatch(op, wn, w->ctx, xn, x->ctx);
    if (y->ctx != x->ctx) return gpucore_context_mismatch(op, yn, y->ctx, xn, x->ctx);
    if (bias && bias->ctx != x->ctx) return gpucore_context_mismatch(op, "bias", bias->ctx, xn, x->ctx);
    const int dt = x->dtype;
    if (dt != GPUCORE_F32 && dt != GPUCORE_F16 && dt != GPUCORE_BF16)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s is %s; convolution takes f32, f16 or bf16", op, xn,
                                 gpucore_dtype_name((gpucore_dtype)dt));
    if (w->dtype != dt || y->dtype != dt || (bias && bias->dtype != dt))
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: dtypes differ (%s %s, %s %s, %s %s%s%s); they must "
                                 "all be one dtype (cast with gpucore_cast)", op, xn,
                                 gpucore_dtype_name((gpucore_dtype)dt), wn, gpucore_dtype_name((gpucore_dtype)w->dtype),
                                 yn, gpucore_dtype_name((gpucore_dtype)y->dtype), bias ? ", bias " : "",
                                 bias ? gpucore_dtype_name((gpucore_dtype)bias->dtype) : "");
    if (x->ndim != 3 && x->ndim != 4) {
        char buf[128];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s is %s; it must be 4-d (%s) for 2-D convolution or "
                                 "3-d (%s) for 1-D", op, xn, gpucore_shape_str(x->ndim, x->shape, buf, sizeof buf),
                                 o->layout == GPUCORE_CONV_NCHW ? "N, C, H, W" : "N, H, W, C",
                                 o->layout == GPUCORE_CONV_NCHW ? "N, C, W" : "N, W, C");
    }
    const int sd = x->ndim - 2;
    int64_t xd[4], xs[4], wd[4], ws[4], yd[4], ys[4];
    if ((st = logical_dims(x, o->layout, sd, op, xn, xd, xs)) || (st = logical_dims(w, o->layout, sd, op, wn, wd, ws)) ||
        (st = logical_dims(y, o->layout, sd, op, yn, yd, ys)))
        return st;
    if (sd == 1) { /* 1-D: only the _w parameters apply */
        o->stride_h = 1; o->pad_h = 0; o->dil_h = 1;
    }
    const int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], K = wd[0], R = wd[2], S = wd[3], G = o->groups;
    int64_t P, Q;
    if ((st = geometry(op, o, xd, wd, xn, wn, &P, &Q))) return st;
    if (yd[0] != N || yd[1] != K || yd[2] != P || yd[3] != Q) {
        char got[128];
        int64_t want[4];
        if (o->layout == GPUCORE_CONV_NCHW) { want[0] = N; want[1] = K; want[2] = P; want[3] = Q; }
        else { want[0] = N; want[1] = P; want[2] = Q; want[3] = K; }
        if (sd == 1) { want[2] = want[3]; if (o->layout == GPUCORE_CONV_NHWC) { want[1] = Q; want[2] = K; } }
        char exp[128];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s is %s but must be %s for this input, filter, "
                                 "stride, padding and dilation", op, yn, gpucore_shape_str(y->ndim, y->shape, got, sizeof got),
                                 gpucore_shape_str(y->ndim, want, exp, sizeof exp));
    }
    if (bias) {
        if (bias->ndim != 1 || bias->shape[0] != K || (K > 1 && bias->strides[0] != 1)) {
            char buf[128];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: bias is %s; it must be a contiguous [%lld] (one per "
                                     "output channel)", op, gpucore_shape_str(bias->ndim, bias->shape, buf, sizeof buf),
                                     (long long)K);
        }
    }
    if (op_code != GPUCORE_CONV_OP_FORWARD && o->activation != GPUCORE_ACT_NONE)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->activation must be NONE for a backward call; "
                                 "apply gpucore_activation_backward to dy first", op);
    memset(d, 0, sizeof *d);
    d->op = op_code;
    d->dtype = dt;
    d->layout = o->layout;
    d->algo = o->algo;
    d->allow_tf32 = o->allow_tf32 >= 0 ? o->allow_tf32 : atomic_load(&x->ctx->matmul_allow_tf32);
    d->relu = o->activation == GPUCORE_ACT_RELU;
    d->device = x->ctx->index;
    d->n = N; d->c = C; d->h = H; d->w = W; d->k = K; d->r = R; d->s = S; d->p = P; d->q = Q; d->groups = G;
    d->pad_h = o->pad_h; d->pad_w = o->pad_w;
    d->stride_h = o->stride_h; d->stride_w = o->stride_w;
    d->dil_h = o->dil_h; d->dil_w = o->dil_w;
    gpucore_view v;
    gpucore_tensor_view_of(x, &v); d->x = v.data;
    gpucore_tensor_view_of(w, &v); d->wt = v.data;
    gpucore_tensor_view_of(y, &v); d->y = v.data;
    if (bias) { gpucore_tensor_view_of(bias, &v); d->bias = v.data; }
    memcpy(d->x_strides, xs, sizeof xs);
    memcpy(d->w_strides, ws, sizeof ws);
    memcpy(d->y_strides, ys, sizeof ys);
    d->workspace_limit = o->workspace_limit;
    return GPUCORE_OK;
}

typedef struct conv_ws_ctx { gpucore_context *ctx; gpucore_stream *stream; } conv_ws_ctx;

static int conv_ws_alloc(void *p, int64_t bytes, void **ptr)
{
    conv_ws_ctx *w = p;
    return (int)gpucore_memory_alloc(w->ctx, bytes, w->stream, ptr);
}

static void conv_ws_release(void *p, void *ptr)
{
    conv_ws_ctx *w = p;
    gpucore_memory_free(w->ctx, ptr, w->stream->bstream);
}

static gpucore_status dispatch(gpucore_conv_desc *d, gpucore_context *ctx, gpucore_stream *stream, const char *op)
{
    gpucore_stream *s;
    gpucore_status st = gpucore_resolve_stream(ctx, stream, op, &s);
    if (st) return st;
    if (!ctx->be->conv)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend has no convolution (%s)", op,
                                 ctx->be->name,
                                 ctx->type == GPUCORE_DEVICE_CUDA ? "this build has no cuDNN; rebuild with -Dcudnn=enabled"
                                                                  : "cuDNN runs only on the CUDA backend");
    conv_ws_ctx wctx = {ctx, s};
    d->ws.alloc = conv_ws_alloc;
    d->ws.release = conv_ws_release;
    d->ws.ws_ctx = &wctx;
    int64_t esz = gpucore_dtype_size((gpucore_dtype)d->dtype);
    void *prof = gpucore_prof_begin(ctx, s, op, esz * (d->n * d->c * d->h * d->w + d->k * (d->c / d->groups) * d->r * d->s +
                                                       d->n * d->k * d->p * d->q));
    st = ctx->be->conv(ctx->bctx, d, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

gpucore_status gpucore_conv_output_shape(const gpucore_tensor *x, const gpucore_tensor *w,
                                         const gpucore_conv_options *opts, int *ndim, int64_t *shape)
{
    const char *op = "conv_output_shape";
    gpucore_status st;
    if ((st = gpucore_check_tensor(x, op, "x")) || (st = gpucore_check_tensor(w, op, "w"))) return st;
    if (!ndim || !shape) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: ndim or shape is NULL", op);
    gpucore_conv_options o;
    if ((st = read_options(opts, op, &o))) return st;
    if (x->ndim != 3 && x->ndim != 4)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: x has %d dims; it must be 4-d (2-D convolution) or "
                                 "3-d (1-D)", op, (int)x->ndim);
    /* Validate exactly as the forward call would, against a y of the right shape. */
    int64_t xd[4], xs[4], wd[4], ws[4];
    const int sd = x->ndim - 2;
    if ((st = logical_dims(x, o.layout, sd, op, "x", xd, xs)) || (st = logical_dims(w, o.layout, sd, op, "w", wd, ws)))
        return st;
    if (sd == 1) { o.stride_h = 1; o.pad_h = 0; o.dil_h = 1; }
    int64_t P, Q;
    if ((st = geometry(op, &o, xd, wd, "x", "w", &P, &Q))) return st;
    int64_t ys[GPUCORE_MAX_DIMS];
    const int n = x->ndim;
    if (o.layout == GPUCORE_CONV_NCHW) {
        ys[0] = xd[0]; ys[1] = wd[0];
        if (sd == 2) { ys[2] = P; ys[3] = Q; } else ys[2] = Q;
    } else {
        ys[0] = xd[0];
        if (sd == 2) { ys[1] = P; ys[2] = Q; ys[3] = wd[0]; } else { ys[1] = Q; ys[2] = wd[0]; }
    }
    *ndim = n;
    memcpy(shape, ys, sizeof(int64_t) * (size_t)n);
    return GPUCORE_OK;
}

gpucore_status gpucore_conv_forward(const gpucore_tensor *x, const gpucore_tensor *w, const gpucore_tensor *bias,
                                    gpucore_tensor *y, const gpucore_conv_options *opts, gpucore_stream *stream)
{
    const char *op = "conv_forward";
    gpucore_conv_desc d;
    gpucore_conv_options o;
    gpucore_status st = prepare(GPUCORE_CONV_OP_FORWARD, op, x, "x", w, "w", y, "y", bias, opts, &d, &o);
    if (st) return st;
    if ((st = check_no_overlap(y, x, op, "y", "x")) || (st = check_no_overlap(y, w, op, "y", "w")) ||
        (st = check_no_overlap(y, bias, op, "y", "bias")))
        return st;
    if (d.n == 0) return gpucore_resolve_stream(x->ctx, stream, op, &(gpucore_stream *){NULL});
    return dispatch(&d, x->ctx, stream, op);
}

gpucore_status gpucore_conv_backward_data(const gpucore_tensor *dy, const gpucore_tensor *w, gpucore_tensor *dx,
                                          const gpucore_conv_options *opts, gpucore_stream *stream)
{
    const char *op = "conv_backward_data";
    gpucore_conv_desc d;
    gpucore_conv_options o;
    gpucore_status st = prepare(GPUCORE_CONV_OP_BACKWARD_DATA, op, dx, "dx", w, "w", dy, "dy", NULL, opts, &d, &o);
    if (st) return st;
    if ((st = check_no_overlap(dx, dy, op, "dx", "dy")) || (st = check_no_overlap(dx, w, op, "dx", "w"))) return st;
    if (d.n == 0) return gpucore_resolve_stream(dx->ctx, stream, op, &(gpucore_stream *){NULL});
    return dispatch(&d, dx->ctx, stream, op);
}

gpucore_status gpucore_conv_backward_filter(const gpucore_tensor *dy, const gpucore_tensor *x, gpucore_tensor *dw,
                                            const gpucore_conv_options *opts, gpucore_stream *stream)
{
    const char *op = "conv_backward_filter";
    gpucore_conv_desc d;
    gpucore_conv_options o;
    gpucore_status st = prepare(GPUCORE_CONV_OP_BACKWARD_FILTER, op, x, "x", dw, "dw", dy, "dy", NULL, opts, &d, &o);
    if (st) return st;
    if ((st = check_no_overlap(dw, dy, op, "dw", "dy")) || (st = check_no_overlap(dw, x, op, "dw", "x"))) return st;
    if (d.n == 0) return gpucore_fill(dw, 0.0, stream); /* an empty batch contributes nothing */
    return dispatch(&d, x->ctx, stream, op);
}

gpucore_status gpucore_conv_get_stats(gpucore_context *ctx, gpucore_conv_stats *stats)
{
    gpucore_status st = gpucore_check_context(ctx, "conv_get_stats");
    if (st) return st;
    if (!stats) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "conv_get_stats: stats is NULL");
    if (stats->struct_size < (int64_t)sizeof *stats)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "conv_get_stats: stats->struct_size is %lld; set it to "
                                 "sizeof(gpucore_conv_stats) (%zu)", (long long)stats->struct_size, sizeof *stats);
    memset(stats, 0, sizeof *stats);
    stats->struct_size = (int64_t)sizeof *stats;
    if (!ctx->be->conv_stats) return GPUCORE_OK;
    return ctx->be->conv_stats(ctx->bctx, stats);
}
