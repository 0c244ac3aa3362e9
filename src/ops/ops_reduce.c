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

/* The checks every reduction entry shares: handles, op code, dtypes, one context. */
static gpucore_status reduce_check_common(const char *name, gpucore_reduction op, const gpucore_tensor *out,
                                          const gpucore_tensor *a)
{
    gpucore_status st = gpucore_check_tensor(out, name, "out");
    if (st || (st = gpucore_check_tensor(a, name, "a"))) return st;
    if ((st = ops_check_enum(name, "op", "gpucore_reduction", (int)op, 0))) return st;
    if ((st = ops_check_float(a, name, "a"))) return st;
    if ((st = ops_check_same(out, "out", a, "a", name, 0))) return st;
    if (op == GPUCORE_REDUCTION_ARGMAX ? out->dtype != GPUCORE_I64 : out->dtype != a->dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: out is %s but must be %s (%s)", name,
                                 gpucore_dtype_name((gpucore_dtype)out->dtype),
                                 op == GPUCORE_REDUCTION_ARGMAX ? "i64" : gpucore_dtype_name((gpucore_dtype)a->dtype),
                                 op == GPUCORE_REDUCTION_ARGMAX ? "argmax returns indices" : "the input's dtype");
    return GPUCORE_OK;
}

/* Reduce a over the dims listed (each once, negative from the end) in one pass.
 * When the reduced dims are adjacent the input is viewed as [outer, len, inner]
 * directly; otherwise the kept dims are moved in front of the reduced ones (a
 * permuted view, staged contiguous by reduce_run) and the merged reduced dims
 * become one row of len elements: [outer = kept, len = reduced, inner = 1]. The
 * element order inside the merged row is a's order of the reduced dims, so the
 * result's bits depend only on the shape and the dims. */
static gpucore_status reduce_dims_impl(gpucore_reduction op, gpucore_tensor *out, const gpucore_tensor *a,
                                       const int *dims, int ndims, int single, gpucore_stream *stream)
{
    const char *name = single ? "reduce" : "reduce_dims";
    int red[GPUCORE_MAX_DIMS] = {0};
    for (int k = 0; k < ndims; k++) {
        int ax = dims[k] < 0 ? dims[k] + a->ndim : dims[k];
        if (ax < 0 || ax >= a->ndim)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s %d is out of range for a %d-dim tensor",
                                     name, single ? "axis" : "dim", dims[k], a->ndim);
        if (red[ax])
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dim %d appears twice in dims; list each "
                                     "dim once", name, ax);
        red[ax] = 1;
    }
    if (op == GPUCORE_REDUCTION_ARGMAX && ndims > 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: argmax reduces one dim or all of them "
                                 "(GPUCORE_ALL_AXES, a flat index), not %d dims", name, ndims);
    int64_t removed[GPUCORE_MAX_DIMS], kept[GPUCORE_MAX_DIMS], outer = 1, len = 1, inner = 1;
    int nr = 0, first = -1, last = -1, perm[GPUCORE_MAX_DIMS], np = 0;
    for (int d = 0; d < a->ndim; d++) {
        kept[d] = red[d] ? 1 : a->shape[d];
        if (!red[d]) { removed[nr++] = a->shape[d]; perm[np++] = d; continue; }
        if (first < 0) first = d;
        last = d;
        len *= a->shape[d];
    }
    int adjacent = 1;
    for (int d = first; d >= 0 && d <= last; d++) adjacent &= red[d];
    for (int d = 0; d < a->ndim; d++) {
        if (red[d]) { perm[np++] = d; continue; }
        if (adjacent && d > last) inner *= a->shape[d];
        else outer *= a->shape[d];
    }
    int match_removed = out->ndim == nr && !memcmp(out->shape, removed, sizeof(int64_t) * (size_t)nr);
    int match_kept = out->ndim == a->ndim && !memcmp(out->shape, kept, sizeof(int64_t) * (size_t)a->ndim);
    if (!match_removed && !match_kept) {
        char x[200], y[200], z[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: reducing %s over %d dim(s) gives %s (or the "
                                 "same with a 1 kept in place of each reduced dim), but out has shape %s", name,
                                 gpucore_shape_str(a->ndim, a->shape, x, sizeof x), ndims,
                                 gpucore_shape_str(nr, removed, y, sizeof y),
                                 gpucore_shape_str(out->ndim, out->shape, z, sizeof z));
    }
    gpucore_stream *s;
    gpucore_status st;
    if ((st = gpucore_resolve_stream(a->ctx, stream, name, &s))) return st;
    if (adjacent || ndims == 0) return reduce_run((int)op, out, a, outer, len, inner, name, s);
    gpucore_tensor *moved = NULL; /* a view: the handle is not changed, only shared */
    if ((st = gpucore_tensor_permute((gpucore_tensor *)a, perm, &moved))) return st;
    st = reduce_run((int)op, out, moved, outer, len, 1, name, s);
    gpucore_tensor_destroy(moved);
    return st;
}


gpucore_status gpucore_reduce(gpucore_reduction op, gpucore_tensor *out, const gpucore_tensor *a, int axis,
                              gpucore_stream *stream)
{
    const char *name = "reduce";
    gpucore_status st = reduce_check_common(name, op, out, a);
    if (st) return st;
    if (axis != GPUCORE_ALL_AXES) return reduce_dims_impl(op, out, a, &axis, 1, 1, stream);
    int64_t numel = gpucore_tensor_numel_unchecked(a);
    if (gpucore_tensor_numel_unchecked(out) != 1) {
        char y[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "reduce: over all axes the output holds one element, "
                                 "but out has shape %s", gpucore_shape_str(out->ndim, out->shape, y, sizeof y));
    }
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(a->ctx, stream, name, &s))) return st;
    return reduce_run((int)op, out, a, 1, numel, 1, name, s);
}

gpucore_status gpucore_reduce_dims(gpucore_reduction op, gpucore_tensor *out, const gpucore_tensor *a,
                                   const int *dims, int ndims, gpucore_stream *stream)
{
    gpucore_status st = reduce_check_common("reduce_dims", op, out, a);
    if (st) return st;
    if (ndims < 0 || ndims > GPUCORE_MAX_DIMS || (ndims > 0 && !dims))
        return gpucore_set_error(ndims > 0 && !dims ? GPUCORE_ERR_NULL_POINTER : GPUCORE_ERR_INVALID_ARGUMENT,
                                 "reduce_dims: dims must point to ndims (0..%d) dim indices, got ndims %d%s",
                                 GPUCORE_MAX_DIMS, ndims, ndims > 0 && !dims ? " and dims NULL" : "");
    if (ndims == 0) { /* PyTorch's dim=(): every dim */
        int all[GPUCORE_MAX_DIMS];
        for (int d = 0; d < a->ndim; d++) all[d] = d;
        return reduce_dims_impl(op, out, a, all, a->ndim, 0, stream);
    }
    return reduce_dims_impl(op, out, a, dims, ndims, 0, stream);
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
