/*
 * ops_common.c — checks and view plumbing shared by the tensor-op front-ends
 * (see ops_internal.h): numpy broadcasting into stride-0 views, the aliasing
 * rule (exactly in place, or no overlap at all), dim collapsing so backends
 * see the fewest dims, and contiguous staging for the row/reduction families.
 */
#include <stddef.h>
#include <string.h>
#include <stdio.h>
#include "ops_internal.h"

gpucore_status ops_check_float(const gpucore_tensor *t, const char *op, const char *arg)
{
    if (t->dtype != GPUCORE_F32 && t->dtype != GPUCORE_F16 && t->dtype != GPUCORE_BF16)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; this op takes f32, f16 or bf16 tensors",
                                 op, arg, gpucore_dtype_name((gpucore_dtype)t->dtype));
    return GPUCORE_OK;
}

gpucore_status ops_check_same(const gpucore_tensor *a, const char *an, const gpucore_tensor *b, const char *bn,
                              const char *op, int same_dtype)
{
    if (a->ctx != b->ctx) {
        char aw[48], bw[48];
        snprintf(aw, sizeof aw, "'%s'", an);
        snprintf(bw, sizeof bw, "'%s'", bn);
        return gpucore_context_mismatch(op, aw, a->ctx, bw, b->ctx);
    }
    if (same_dtype && a->dtype != b->dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s but '%s' is %s; convert one with "
                                 "gpucore_cast first", op, an, gpucore_dtype_name((gpucore_dtype)a->dtype), bn,
                                 gpucore_dtype_name((gpucore_dtype)b->dtype));
    return GPUCORE_OK;
}

gpucore_status ops_broadcast_view(const gpucore_tensor *in, const char *arg, const gpucore_tensor *out,
                                  const char *op, gpucore_view *v)
{
    gpucore_view src;
    gpucore_tensor_view_of(in, &src);
    *v = src;
    const int n = out->ndim, lead = out->ndim - in->ndim;
    int ok = lead >= 0;
    for (int d = 0; ok && d < n; d++) {
        int id = d - lead;
        v->shape[d] = out->shape[d];
        if (id < 0) v->strides[d] = 0;
        else if (in->shape[id] == out->shape[d]) v->strides[d] = in->strides[id];
        else if (in->shape[id] == 1) v->strides[d] = 0;
        else ok = 0;
    }
    if (!ok) {
        char a[200], b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' has shape %s, which does not broadcast to the "
                                 "output shape %s (dims align from the right; each must be equal or 1)", op, arg,
                                 gpucore_shape_str(in->ndim, in->shape, a, sizeof a),
                                 gpucore_shape_str(out->ndim, out->shape, b, sizeof b));
    }
    v->ndim = n;
    v->numel = gpucore_tensor_numel_unchecked(out);
    v->contiguous = src.contiguous && lead == 0 && src.numel == v->numel;
    return GPUCORE_OK;
}

int ops_views_identical(const gpucore_view *a, const gpucore_view *b)
{
    if (a->data != b->data || a->ndim != b->ndim || a->elem_size != b->elem_size) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->strides[i] != b->strides[i])) return 0;
    return 1;
}

gpucore_status ops_check_alias(const gpucore_view *out, const gpucore_view *in, const char *op, const char *arg,
                               int allow_in_place)
{
    if (allow_in_place && ops_views_identical(out, in)) return GPUCORE_OK;
    if (gpucore_views_overlap(out, in))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: the output overlaps input '%s' in memory without being the same view; %s "
                                 "write the result to a separate tensor", op, arg,
                                 allow_in_place ? "only exact in-place use (out is the same view as the input) is "
                                                  "allowed;" : "this op cannot run in place;");
    return GPUCORE_OK;
}

gpucore_status ops_contiguous_input(const gpucore_tensor *t, gpucore_stream *s, gpucore_view *v,
                                    gpucore_tensor **staged)
{
    *staged = NULL;
    gpucore_tensor_view_of(t, v);
    if (v->contiguous || v->numel == 0) return GPUCORE_OK;
    gpucore_tensor *tmp = NULL;
    gpucore_status st = gpucore_tensor_create(t->ctx, (gpucore_dtype)t->dtype, t->ndim, t->shape, &tmp);
    if (st) return st;
    gpucore_view tv;
    gpucore_tensor_view_of(tmp, &tv);
    st = t->ctx->be->copy_strided(t->ctx->bctx, &tv, v, s->bstream);
    if (st) { gpucore_tensor_destroy(tmp); return st; }
    *v = tv;
    *staged = tmp;
    return GPUCORE_OK;
}

gpucore_status ops_contiguous_output(gpucore_tensor *t, gpucore_stream *s, gpucore_view *v, gpucore_tensor **staged)
{
    (void)s;
    *staged = NULL;
    gpucore_tensor_view_of(t, v);
    if (v->contiguous || v->numel == 0) return GPUCORE_OK;
    gpucore_tensor *tmp = NULL;
    gpucore_status st = gpucore_tensor_create(t->ctx, (gpucore_dtype)t->dtype, t->ndim, t->shape, &tmp);
    if (st) return st;
    gpucore_tensor_view_of(tmp, v);
    *staged = tmp;
    return GPUCORE_OK;
}

gpucore_status ops_finish_output(gpucore_tensor *t, gpucore_tensor *staged, gpucore_stream *s, gpucore_status st)
{
    if (!staged) return st;
    if (!st) {
        gpucore_view dv, sv;
        gpucore_tensor_view_of(t, &dv);
        gpucore_tensor_view_of(staged, &sv);
        st = t->ctx->be->copy_strided(t->ctx->bctx, &dv, &sv, s->bstream);
    }
    gpucore_tensor_destroy(staged);
    return st;
}

gpucore_status ops_workspace_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *s, void **p)
{
    *p = NULL;
    if (ctx->type == GPUCORE_DEVICE_CPU || bytes <= 0) return GPUCORE_OK;
    return gpucore_memory_alloc(ctx, bytes, s, p);
}

void ops_workspace_free(gpucore_context *ctx, gpucore_stream *s, void *p)
{
    if (p) gpucore_memory_free(ctx, p, s->bstream);
}

gpucore_status ops_need_entry(const gpucore_context *ctx, const void *entry, const char *op)
{
    if (!entry)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend does not implement this op", op,
                                 ctx->be->name);
    return GPUCORE_OK;
}

gpucore_status ops_check_tensor_alias(const gpucore_tensor *out, const gpucore_tensor *in, const char *op,
                                      const char *arg, int allow_in_place)
{
    if (!out || !in) return GPUCORE_OK;
    gpucore_view ov, iv;
    gpucore_tensor_view_of(out, &ov);
    gpucore_tensor_view_of(in, &iv);
    return ops_check_alias(&ov, &iv, op, arg, allow_in_place);
}

/* ---- the engines' fallback statistics (matmul: cuBLASLt, attention: cuDNN SDPA) ----
 * Both stats structs are int64 fields {struct_size, calls, fallbacks, by_reason[n]} (asserted below),
 * and both contexts' counters are a total and one counter per reason: one reader and one reset. */
_Static_assert(offsetof(gpucore_matmul_stats, gemms) == 1 * sizeof(int64_t) &&
                   offsetof(gpucore_matmul_stats, fallback_gemms) == 2 * sizeof(int64_t) &&
                   offsetof(gpucore_matmul_stats, fallback_by_reason) == 3 * sizeof(int64_t),
               "gpucore_matmul_stats: struct_size, calls, fallbacks, by_reason");
_Static_assert(offsetof(gpucore_attention_stats, cudnn_calls) == 1 * sizeof(int64_t) &&
                   offsetof(gpucore_attention_stats, fallback_calls) == 2 * sizeof(int64_t) &&
                   offsetof(gpucore_attention_stats, fallback_by_reason) == 3 * sizeof(int64_t),
               "gpucore_attention_stats: struct_size, calls, fallbacks, by_reason");

static const struct {
    const char *get, *reset, *type;
    size_t size;
    int reasons;
} engine_stats[] = {
    [OPS_STATS_MATMUL] = {"matmul_get_stats", "matmul_reset_stats", "gpucore_matmul_stats",
                          sizeof(gpucore_matmul_stats), GPUCORE_MATMUL_FALLBACK_REASONS},
    [OPS_STATS_ATTENTION] = {"attention_get_stats", "attention_reset_stats", "gpucore_attention_stats",
                             sizeof(gpucore_attention_stats), GPUCORE_ATTN_FALLBACK_REASONS},
};

/* The engine's counters in a checked context. */
static atomic_llong *engine_counters(gpucore_context *ctx, ops_stats_engine e, atomic_llong **by_reason)
{
    *by_reason = e == OPS_STATS_MATMUL ? ctx->matmul_fallbacks : ctx->attn_fallbacks;
    return e == OPS_STATS_MATMUL ? &ctx->matmul_gemms : &ctx->attn_cudnn_calls;
}

gpucore_status ops_engine_stats_get(gpucore_context *ctx, ops_stats_engine e, void *stats)
{
    const char *op = engine_stats[e].get;
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (!stats) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: stats is NULL", op);
    int64_t *f = stats;
    if (f[0] != (int64_t)engine_stats[e].size)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: struct_size is %lld, expected sizeof(%s) (%zu)", op,
                                 (long long)f[0], engine_stats[e].type, engine_stats[e].size);
    atomic_llong *by;
    f[1] = atomic_load(engine_counters(ctx, e, &by));
    f[2] = 0;
    for (int i = 0; i < engine_stats[e].reasons; i++) {
        f[3 + i] = atomic_load(&by[i]);
        f[2] += f[3 + i];
    }
    return GPUCORE_OK;
}

gpucore_status ops_engine_stats_reset(gpucore_context *ctx, ops_stats_engine e)
{
    gpucore_status st = gpucore_check_context(ctx, engine_stats[e].reset);
    if (st) return st;
    atomic_llong *by;
    atomic_store(engine_counters(ctx, e, &by), 0);
    for (int i = 0; i < engine_stats[e].reasons; i++) atomic_store(&by[i], 0);
    return GPUCORE_OK;
}
