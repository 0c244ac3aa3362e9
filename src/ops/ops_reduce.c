/*
 * ops_reduce.c — front-ends of the reduction family (reduce over one axis or
 * all, bias gradient): validate, stage non-contiguous tensors, view the input
 * as [outer, len, inner], allocate the kernel backends' partials workspace and
 * dispatch to the backend's reduce entry.
 */
#include <math.h>
#include <string.h>
#include "ops_internal.h"
#include "reduce_math.h"

/* gpucore_reduction values are the GPUCORE_RED_* codes (op_names.c asserts it). */

static gpucore_status reduce_run(int op, gpucore_tensor *out, const gpucore_tensor *a, int64_t outer, int64_t len,
                                 int64_t inner, const char *name, gpucore_stream *s)
{
    gpucore_context *ctx = a->ctx;
    gpucore_status st;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->reduce, name))) return st;
    gpucore_view ov, av;
    gpucore_tensor_view_of(out, &ov);
    gpucore_tensor_view_of(a, &av);
    if ((st = ops_check_alias(&ov, &av, name, "a", 0))) return st;
    if (ov.numel == 0) return GPUCORE_OK;
    if (len == 0) {
        if (op == GPUCORE_RED_MAX || op == GPUCORE_RED_MIN || op == GPUCORE_RED_ARGMAX)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the reduced axis is empty; max, min and argmax "
                                     "of no elements are undefined", name);
        return gpucore_fill(out, op == GPUCORE_RED_MEAN ? NAN : 0.0, s);
    }
    gpucore_reduce_args args;
    memset(&args, 0, sizeof args);
    gpucore_tensor *in_stage = NULL, *out_stage = NULL;
    if ((st = ops_contiguous_input(a, s, &args.in, &in_stage))) return st;
    if ((st = ops_contiguous_output(out, s, &args.out, &out_stage))) { gpucore_tensor_destroy(in_stage); return st; }
    args.outer = outer;
    args.len = len;
    args.inner = inner;
    args.op = op;
    st = ops_workspace_alloc(ctx, gpucore_reduce_workspace_bytes(outer, len, inner), s, &args.workspace);
    void *prof = gpucore_prof_begin(ctx, s, name, gpucore_prof_bytes(a) + gpucore_prof_bytes(out));
    if (!st) st = ctx->be->reduce(ctx->bctx, &args, s->bstream);
    gpucore_prof_end(ctx, prof);
    ops_workspace_free(ctx, s, args.workspace);
    if (in_stage) gpucore_tensor_destroy(in_stage);
    return ops_finish_output(out, out_stage, s, st);
}

gpucore_status gpucore_reduce(gpucore_reduction op, gpucore_tensor *out, const gpucore_tensor *a, int axis,
                              gpucore_stream *stream)
{
    const char *name = "reduce";
    gpucore_status st = gpucore_check_tensor(out, name, "out");
    if (st || (st = gpucore_check_tensor(a, name, "a"))) return st;
    if ((st = ops_check_enum(name, "op", "gpucore_reduction", (int)op, 0))) return st;
    if ((st = ops_check_float(a, name, "a"))) return st;
    if ((st = ops_check_same(out, "out", a, "a", name, 0))) return st;
    if (op == GPUCORE_REDUCTION_ARGMAX ? out->dtype != GPUCORE_I64 : out->dtype != a->dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "reduce: out is %s but must be %s (%s)",
                                 gpucore_dtype_name((gpucore_dtype)out->dtype),
                                 op == GPUCORE_REDUCTION_ARGMAX ? "i64" : gpucore_dtype_name((gpucore_dtype)a->dtype),
                                 op == GPUCORE_REDUCTION_ARGMAX ? "argmax returns indices" : "the input's dtype");
    int64_t numel = gpucore_tensor_numel_unchecked(a), outer = 1, len = numel, inner = 1;
    char x[200], y[200];
    if (axis == GPUCORE_ALL_AXES) {
        if (gpucore_tensor_numel_unchecked(out) != 1)
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "reduce: over all axes the output holds one element, "
                                     "but out has shape %s", gpucore_shape_str(out->ndim, out->shape, y, sizeof y));
    } else {
        int ax = axis < 0 ? axis + a->ndim : axis;
        if (ax < 0 || ax >= a->ndim)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "reduce: axis %d is out of range for a %d-dim tensor",
                                     axis, a->ndim);
        int64_t removed[GPUCORE_MAX_DIMS], kept[GPUCORE_MAX_DIMS];
        int nr = 0;
        outer = 1; inner = 1; len = a->shape[ax];
        for (int d = 0; d < a->ndim; d++) {
            kept[d] = d == ax ? 1 : a->shape[d];
            if (d != ax) removed[nr++] = a->shape[d];
            if (d < ax) outer *= a->shape[d];
            if (d > ax) inner *= a->shape[d];
        }
        int match_removed = out->ndim == nr && !memcmp(out->shape, removed, sizeof(int64_t) * (size_t)nr);
        int match_kept = out->ndim == a->ndim && !memcmp(out->shape, kept, sizeof(int64_t) * (size_t)a->ndim);
        if (!match_removed && !match_kept)
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "reduce: reducing %s over axis %d gives %s (or the "
                                     "same with a 1 kept in place of the axis), but out has shape %s",
                                     gpucore_shape_str(a->ndim, a->shape, x, sizeof x), axis,
                                     gpucore_shape_str(nr, removed, y, sizeof y),
                                     gpucore_shape_str(out->ndim, out->shape, x + 100, 100));
    }
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(a->ctx, stream, name, &s))) return st;
    return reduce_run((int)op, out, a, outer, len, inner, name, s);
}

gpucore_status gpucore_bias_grad(gpucore_tensor *db, const gpucore_tensor *dy, gpucore_stream *stream)
{
    const char *name = "bias_grad";
    gpucore_status st = gpucore_check_tensor(db, name, "db");
    if (st || (st = gpucore_check_tensor(dy, name, "dy"))) return st;
    if ((st = ops_check_float(dy, name, "dy"))) return st;
    if ((st = ops_check_same(db, "db", dy, "dy", name, 1))) return st;
    int64_t cols = dy->ndim ? dy->shape[dy->ndim - 1] : 1;
    if (dy->ndim < 1 || db->ndim != 1 || db->shape[0] != cols) {
        char x[200], y[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "bias_grad: dy has shape %s, so db must be [%lld], but it "
                                 "is %s", gpucore_shape_str(dy->ndim, dy->shape, x, sizeof x), (long long)cols,
                                 gpucore_shape_str(db->ndim, db->shape, y, sizeof y));
    }
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(dy->ctx, stream, name, &s))) return st;
    int64_t numel = gpucore_tensor_numel_unchecked(dy);
    return reduce_run(GPUCORE_RED_SUM, db, dy, 1, cols ? numel / cols : 0, cols, name, s);
}
