/*
 * ops_elementwise.c — front-ends of the elementwise family (binary with
 * broadcasting and an optional fused activation, unary, scale, axpy, clamp,
 * activations forward/backward, cast, dropout; binary, unary and activation
 * also into a new result, the *_new calls): validate dtypes, shapes and
 * aliasing, broadcast inputs to out's shape as stride-0 views, visit dims in
 * out's memory order and merge them (view.h), and dispatch one gpucore_ew_args
 * to the backend's elementwise entry.
 */
#include <math.h>
#include <string.h>
#include "ops_internal.h"
#include "elementwise_math.h"

/* The public binary, unary and activation codes equal the internal ones entry by
 * entry (op_names.c asserts it): binary op k is GPUCORE_EW_ADD + k, unary op k is
 * GPUCORE_EW_UNARY_FIRST + k, activation k is GPUCORE_ACT_CODE k. */

typedef struct ew_call {
    const char *op;
    int code, act;
    float alpha, beta;
    uint64_t seed, offset;
    int any_float;   /* cast: dtypes may differ, f64 and fp8 allowed */
    int broadcast;   /* inputs may broadcast to out */
} ew_call;

static gpucore_status ew_run(const ew_call *c, gpucore_tensor *out, const gpucore_tensor *a, const gpucore_tensor *b,
                             gpucore_stream *stream)
{
    const char *op = c->op;
    gpucore_status st = gpucore_check_tensor(out, op, "out");
    if (st || (st = gpucore_check_tensor(a, op, "a"))) return st;
    if (b && (st = gpucore_check_tensor(b, op, "b"))) return st;
    if (c->any_float) {
        static const char *ok = "f32, f64, f16, bf16, fp8_e4m3 or fp8_e5m2";
        const gpucore_tensor *ts[2] = {out, a};
        for (int i = 0; i < 2; i++)
            if (ts[i]->dtype != GPUCORE_F32 && ts[i]->dtype != GPUCORE_F64 && ts[i]->dtype != GPUCORE_F16 &&
                ts[i]->dtype != GPUCORE_BF16 && !ops_dtype_is_fp8(ts[i]->dtype))
                return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; casts take %s", op,
                                         i ? "a" : "out", gpucore_dtype_name((gpucore_dtype)ts[i]->dtype), ok);
        if ((st = ops_check_same(out, "out", a, "a", op, 0))) return st;
    } else {
        if ((st = ops_check_float(out, op, "out"))) return st;
        if ((st = ops_check_same(out, "out", a, "a", op, 1))) return st;
        if (b && (st = ops_check_same(out, "out", b, "b", op, 1))) return st;
    }
    gpucore_context *ctx = out->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->elementwise, op))) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;

    gpucore_ew_args args; /* every field is written below (no memset: see gpucore_tensor_view_of) */
    gpucore_tensor_view_of(out, &args.out);
    const gpucore_tensor *ins[2] = {a, b};
    const char *names[2] = {"a", "b"};
    args.nin = b ? 2 : 1;
    for (int i = 0; i < args.nin; i++) {
        if (!c->broadcast && (ins[i]->ndim != out->ndim ||
                              memcmp(ins[i]->shape, out->shape, sizeof(int64_t) * (size_t)out->ndim))) {
            char x[200], y[200];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' has shape %s but out has %s; they must "
                                     "be equal", op, names[i], gpucore_shape_str(ins[i]->ndim, ins[i]->shape, x, sizeof x),
                                     gpucore_shape_str(out->ndim, out->shape, y, sizeof y));
        }
        if ((st = ops_broadcast_view(ins[i], names[i], out, op, &args.in[i]))) return st;
        gpucore_view plain;
        gpucore_tensor_view_of(ins[i], &plain);
        if ((st = ops_check_alias(&args.out, &plain, op, names[i], 1))) return st;
    }
    /* out must be the broadcast shape of the inputs, not larger */
    for (int d = 0; d < out->ndim; d++) {
        if (out->shape[d] == 1) continue;
        int covered = 0;
        for (int i = 0; i < args.nin; i++) {
            int id = d - (out->ndim - ins[i]->ndim);
            if (id >= 0 && ins[i]->shape[id] == out->shape[d]) covered = 1;
        }
        if (!covered) {
            char y[200];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: out has shape %s, but no input has dim %d of "
                                     "size %lld; out must have the broadcast shape of the inputs", op,
                                     gpucore_shape_str(out->ndim, out->shape, y, sizeof y), d,
                                     (long long)out->shape[d]);
        }
    }
    if (args.out.numel == 0) return GPUCORE_OK;
    gpucore_view *vs[3] = {&args.out, &args.in[0], &args.in[1]};
    if (c->code != GPUCORE_EW_DROPOUT) gpucore_views_sort_dims(vs, 1 + args.nin); /* dropout's draws follow the index */
    gpucore_views_coalesce(vs, 1 + args.nin);
    if (args.nin == 1) args.in[1] = args.in[0];
    args.op = c->code;
    args.act = c->act;
    args.reserved = 0;
    args.alpha = c->alpha;
    args.beta = c->beta;
    args.seed = c->seed;
    args.offset = c->offset;
    void *prof = gpucore_prof_begin(ctx, s, op, gpucore_prof_bytes(out) + gpucore_prof_bytes(a) + gpucore_prof_bytes(b));
    st = ctx->be->elementwise(ctx->bctx, &args, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

/* ew_run into a new contiguous tensor (a's context and dtype, the given shape) that goes again
 * on failure; *out is set only on success. The caller checked a (and b). */
static gpucore_status ew_run_new(const ew_call *c, const gpucore_tensor *a, const gpucore_tensor *b, int ndim,
                                 const int64_t *shape, gpucore_stream *stream, gpucore_tensor **out)
{
    gpucore_tensor *t = NULL;
    gpucore_status st = gpucore_tensor_create(a->ctx, (gpucore_dtype)a->dtype, ndim, shape, &t);
    if (st) return st;
    if ((st = ew_run(c, t, a, b, stream))) {
        gpucore_tensor_destroy(t); /* sets no message on success: the op's message stands */
        return st;
    }
    *out = t;
    return GPUCORE_OK;
}

/* The checks every *_new entry makes before its result exists: out given, a a live float tensor. */
static gpucore_status check_new(const char *op, const gpucore_tensor *a, gpucore_tensor **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    gpucore_status st = gpucore_check_tensor(a, op, "a");
    return st ? st : ops_check_float(a, op, "a");
}

gpucore_status gpucore_binary_act(gpucore_binary_op op, gpucore_activation act, gpucore_tensor *out,
                                  const gpucore_tensor *a, const gpucore_tensor *b, gpucore_stream *stream)
{
    gpucore_status st = ops_check_enum("binary", "op", "gpucore_binary_op", (int)op, 0);
    if (st || (st = ops_check_enum("binary", "activation", "gpucore_activation", (int)act, 0))) return st;
    ew_call c = {.op = gpucore_enum_name("gpucore_binary_op", (int)op), .code = GPUCORE_EW_ADD + (int)op,
                 .act = (int)act, .broadcast = 1};
    if (!b) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: tensor 'b' is NULL", c.op);
    return ew_run(&c, out, a, b, stream);
}

gpucore_status gpucore_binary(gpucore_binary_op op, gpucore_tensor *out, const gpucore_tensor *a,
                              const gpucore_tensor *b, gpucore_stream *stream)
{
    return gpucore_binary_act(op, GPUCORE_ACT_NONE, out, a, b, stream);
}

gpucore_status gpucore_binary_new(gpucore_binary_op op, const gpucore_tensor *a, const gpucore_tensor *b,
                                  gpucore_stream *stream, gpucore_tensor **out)
{
    gpucore_status st = ops_check_enum("binary_new", "op", "gpucore_binary_op", (int)op, 0);
    if (st) return st;
    const char *name = gpucore_enum_name("gpucore_binary_op", (int)op);
    if ((st = check_new(name, a, out)) || (st = gpucore_check_tensor(b, name, "b"))) return st;
    if ((st = ops_check_same(a, "a", b, "b", name, 1))) return st;
    /* the broadcast shape (numpy rules: dims align from the right, each equal or 1) */
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shape[GPUCORE_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        const int ia = d - (nd - a->ndim), ib = d - (nd - b->ndim);
        const int64_t x = ia >= 0 ? a->shape[ia] : 1, y = ib >= 0 ? b->shape[ib] : 1;
        if (x != y && x != 1 && y != 1) {
            char sa[200], sb[200];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: a has shape %s and b has %s, which do not "
                                     "broadcast (dims align from the right; each must be equal or 1)", name,
                                     gpucore_shape_str(a->ndim, a->shape, sa, sizeof sa),
                                     gpucore_shape_str(b->ndim, b->shape, sb, sizeof sb));
        }
        shape[d] = x == 1 ? y : x;
    }
    ew_call c = {.op = name, .code = GPUCORE_EW_ADD + (int)op, .broadcast = 1};
    return ew_run_new(&c, a, b, nd, shape, stream, out);
}

gpucore_status gpucore_unary(gpucore_unary_op op, gpucore_tensor *out, const gpucore_tensor *a, gpucore_stream *stream)
{
    gpucore_status st = ops_check_enum("unary", "op", "gpucore_unary_op", (int)op, 0);
    if (st) return st;
    ew_call c = {.op = gpucore_enum_name("gpucore_unary_op", (int)op), .code = GPUCORE_EW_UNARY_FIRST + (int)op};
    return ew_run(&c, out, a, NULL, stream);
}

gpucore_status gpucore_unary_new(gpucore_unary_op op, const gpucore_tensor *a, gpucore_stream *stream,
                                 gpucore_tensor **out)
{
    gpucore_status st = ops_check_enum("unary_new", "op", "gpucore_unary_op", (int)op, 0);
    if (st) return st;
    ew_call c = {.op = gpucore_enum_name("gpucore_unary_op", (int)op), .code = GPUCORE_EW_UNARY_FIRST + (int)op};
    if ((st = check_new(c.op, a, out))) return st;
    return ew_run_new(&c, a, NULL, a->ndim, a->shape, stream, out);
}

static gpucore_status check_finite(const char *op, const char *name, double v)
{
    if (!isfinite(v))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s is %g; it must be finite", op, name, v);
    return GPUCORE_OK;
}

gpucore_status gpucore_scale(gpucore_tensor *out, const gpucore_tensor *a, double alpha, double beta,
                             gpucore_stream *stream)
{
    gpucore_status st = check_finite("scale", "alpha", alpha);
    if (st || (st = check_finite("scale", "beta", beta))) return st;
    ew_call c = {.op = "scale", .code = GPUCORE_EW_AFFINE, .alpha = (float)alpha, .beta = (float)beta};
    return ew_run(&c, out, a, NULL, stream);
}

gpucore_status gpucore_scale_new(const gpucore_tensor *a, double alpha, double beta, gpucore_stream *stream,
                                 gpucore_tensor **out)
{
    gpucore_status st = check_new("scale", a, out);
    if (st || (st = check_finite("scale", "alpha", alpha)) || (st = check_finite("scale", "beta", beta)))
        return st;
    ew_call c = {.op = "scale", .code = GPUCORE_EW_AFFINE, .alpha = (float)alpha, .beta = (float)beta};
    return ew_run_new(&c, a, NULL, a->ndim, a->shape, stream, out);
}

gpucore_status gpucore_axpy(gpucore_tensor *y, double alpha, const gpucore_tensor *x, gpucore_stream *stream)
{
    gpucore_status st = check_finite("axpy", "alpha", alpha);
    if (st) return st;
    if (!x) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "axpy: tensor 'x' is NULL");
    ew_call c = {.op = "axpy", .code = GPUCORE_EW_AXPBY, .alpha = (float)alpha, .beta = 1.0f, .broadcast = 1};
    return ew_run(&c, y, x, y, stream);
}

gpucore_status gpucore_clamp(gpucore_tensor *out, const gpucore_tensor *a, double lo, double hi,
                             gpucore_stream *stream)
{
    if (isnan(lo) || isnan(hi) || lo > hi)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "clamp: bounds [%g, %g] must be ordered and not NaN", lo, hi);
    ew_call c = {.op = "clamp", .code = GPUCORE_EW_CLAMP, .alpha = (float)lo, .beta = (float)hi};
    return ew_run(&c, out, a, NULL, stream);
}

gpucore_status gpucore_activation_forward(gpucore_activation act, gpucore_tensor *out, const gpucore_tensor *x,
                                          gpucore_stream *stream)
{
    gpucore_status st = ops_check_enum("activation_forward", "activation", "gpucore_activation", (int)act, 1);
    if (st) return st;
    ew_call c = {.op = "activation_forward", .code = GPUCORE_EW_ACT, .act = (int)act};
    return ew_run(&c, out, x, NULL, stream);
}

gpucore_status gpucore_activation_forward_new(gpucore_activation act, const gpucore_tensor *x, gpucore_stream *stream,
                                              gpucore_tensor **out)
{
    gpucore_status st = ops_check_enum("activation_forward_new", "activation", "gpucore_activation", (int)act, 1);
    if (st || (st = check_new("activation_forward", x, out))) return st;
    ew_call c = {.op = "activation_forward", .code = GPUCORE_EW_ACT, .act = (int)act};
    return ew_run_new(&c, x, NULL, x->ndim, x->shape, stream, out);
}

gpucore_status gpucore_activation_backward(gpucore_activation act, gpucore_tensor *dx, const gpucore_tensor *dy,
                                           const gpucore_tensor *x, gpucore_stream *stream)
{
    gpucore_status st = ops_check_enum("activation_backward", "activation", "gpucore_activation", (int)act, 1);
    if (st) return st;
    if (!x) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "activation_backward: tensor 'x' is NULL");
    ew_call c = {.op = "activation_backward", .code = GPUCORE_EW_ACT_GRAD, .act = (int)act};
    return ew_run(&c, dx, dy, x, stream);
}

gpucore_status gpucore_cast(gpucore_tensor *out, const gpucore_tensor *a, gpucore_stream *stream)
{
    ew_call c = {.op = "cast", .code = GPUCORE_EW_CAST, .any_float = 1};
    gpucore_status st = GPUCORE_OK;
    if (out && a && out != a && gpucore_check_tensor(out, "cast", "out") == GPUCORE_OK &&
        gpucore_check_tensor(a, "cast", "a") == GPUCORE_OK && out->dtype != a->dtype) {
        /* a cast between dtypes of different sizes cannot be in place */
        gpucore_view ov, av;
        gpucore_tensor_view_of(out, &ov);
        gpucore_tensor_view_of(a, &av);
        if (gpucore_views_overlap(&ov, &av))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "cast: out and a overlap in memory; a cast between dtypes cannot run in place");
    }
    if (st) return st;
    return ew_run(&c, out, a, NULL, stream);
}

gpucore_status gpucore_dropout(gpucore_tensor *out, const gpucore_tensor *x, double p, uint64_t seed, uint64_t offset,
                               gpucore_stream *stream)
{
    if (!(p >= 0.0 && p <= 1.0))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "dropout: p is %g; it must be in [0, 1]", p);
    float scale = p >= 1.0 ? 0.0f : (float)(1.0 / (1.0 - p));
    /* u >= p keeps: p = 1 must drop everything, and u < 1 always */
    ew_call c = {.op = "dropout", .code = GPUCORE_EW_DROPOUT, .alpha = p >= 1.0 ? 2.0f : (float)p, .beta = scale,
                 .seed = seed, .offset = offset};
    return ew_run(&c, out, x, NULL, stream);
}
