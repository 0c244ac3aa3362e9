/*
 * attention.c — front-end of scaled dot-product attention (forward and
 * backward; the formulas and argument block are in kernels/attention_math.h):
 * validate shapes, dtypes, masks, options and aliasing, describe every operand
 * by its strides (no staging copies: the backends read and write strided
 * [B, H, S, D] views directly), and dispatch to the backend's attention entry.
 */
#include <math.h>
#include <string.h>
#include "transformer_internal.h"
#include "attention_math.h"

void gpucore_attention_options_init(gpucore_attention_options *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = (int64_t)sizeof *opts;
}


/* A 4-d float tensor of x's context and dtype (x NULL: t sets them). */
static gpucore_status check_operand(const gpucore_tensor *t, const char *tn, const gpucore_tensor *x, const char *xn,
                                    const char *op)
{
    gpucore_status st = gpucore_check_tensor(t, op, tn);
    if (st || (st = ops_check_float(t, op, tn))) return st;
    if (x && (st = ops_check_same(t, tn, x, xn, op, 1))) return st;
    if (t->ndim != 4) return tfm_shape_error(op, tn, t, "attention operands are 4-d [batch, heads, seq, head_dim]");
    return GPUCORE_OK;
}

static int dims_are(const gpucore_tensor *t, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return t->shape[0] == d0 && t->shape[1] == d1 && t->shape[2] == d2 && t->shape[3] == d3;
}

/* No two elements of an output view share memory (dims sorted by stride, each
 * stride at least the span of the smaller ones). */
static gpucore_status check_writable(const gpucore_tensor *t, const char *tn, const char *op)
{
    int64_t st[4], ext[4];
    int n = 0;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] > 1) { st[n] = t->strides[d] < 0 ? -t->strides[d] : t->strides[d]; ext[n++] = t->shape[d]; }
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            int64_t a = st[j], b = ext[j];
            st[j] = st[j - 1]; ext[j] = ext[j - 1];
            st[j - 1] = a; ext[j - 1] = b;
        }
    int64_t span = 1;
    for (int i = 0; i < n; i++) {
        if (st[i] < span)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: output '%s' has overlapping elements (a stride "
                                     "of 0 or strides that alias); write into a tensor whose elements are distinct", op, tn);
        span = st[i] * ext[i];
    }
    return GPUCORE_OK;
}

static gpucore_status check_no_alias(const gpucore_tensor *out, const char *on, const gpucore_tensor *in,
                                     const char *in_name, const char *op)
{
    if (!out || !in) return GPUCORE_OK;
    gpucore_view ov, iv;
    gpucore_tensor_view_of(out, &ov);
    gpucore_tensor_view_of(in, &iv);
    if (gpucore_views_overlap(&ov, &iv))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: output '%s' overlaps '%s' in memory; attention "
                                 "cannot run in place, give it a separate tensor", op, on, in_name);
    return GPUCORE_OK;
}

static void describe(gpucore_attn_tensor *d, const gpucore_tensor *t)
{
    memset(d, 0, sizeof *d);
    if (!t) return;
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    d->data = v.data;
    for (int i = 0; i < 4; i++) d->stride[i] = t->shape[i] == 1 ? 0 : t->strides[i];
}

/* The parts forward and backward share: q, k, v, mask, lengths, options -> a. */
static gpucore_status check_common(const char *op, const gpucore_tensor *q, const gpucore_tensor *k,
                                   const gpucore_tensor *v, const gpucore_tensor *mask, const gpucore_tensor *lens,
                                   const gpucore_attention_options *opts, gpucore_attn_args *a)
{
    gpucore_status st;
    if ((st = check_operand(q, "q", NULL, NULL, op)) || (st = check_operand(k, "k", q, "q", op)) ||
        (st = check_operand(v, "v", q, "q", op)))
        return st;
    memset(a, 0, sizeof *a);
    a->dtype = q->dtype;
    a->batch = q->shape[0];
    a->heads = q->shape[1];
    a->seq_q = q->shape[2];
    a->head_dim = q->shape[3];
    a->kv_heads = k->shape[1];
    a->seq_k = k->shape[2];
    a->head_dim_v = v->shape[3];
    if (k->shape[0] != a->batch || k->shape[3] != a->head_dim)
        return tfm_shape_error(op, "k", k, "k must be [batch, kv_heads, seq_k, head_dim] with q's batch and head_dim");
    if (!dims_are(v, a->batch, a->kv_heads, a->seq_k, a->head_dim_v))
        return tfm_shape_error(op, "v", v, "v must be [batch, kv_heads, seq_k, head_dim_v] with k's first three dims");
    if (a->head_dim > GPUCORE_ATTN_MAX_HEAD_DIM || a->head_dim_v > GPUCORE_ATTN_MAX_HEAD_DIM)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: head_dim %lld / value head_dim %lld; at most %d is "
                                 "supported", op, (long long)a->head_dim, (long long)a->head_dim_v,
                                 GPUCORE_ATTN_MAX_HEAD_DIM);
    if (a->kv_heads == 0 ? a->heads != 0 : a->heads % a->kv_heads)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: q has %lld heads and k/v %lld; the query heads must "
                                 "be a multiple of the key/value heads (grouped-query attention)", op,
                                 (long long)a->heads, (long long)a->kv_heads);
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    if (opts) {
        if (opts->struct_size != (int64_t)sizeof o)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->struct_size is %lld, expected %zu; fill "
                                     "the options with gpucore_attention_options_init", op,
                                     (long long)opts->struct_size, sizeof o);
        o = *opts;
    }
    if (!isfinite(o.scale) || o.scale < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: scale must be finite and > 0 (0: 1/sqrt(head_dim)), "
                                 "not %g", op, o.scale);
    if (!(o.dropout_p >= 0 && o.dropout_p < 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dropout_p must be in [0, 1), not %g", op, o.dropout_p);
    if (o.algo < GPUCORE_ATTN_ALGO_HEURISTIC || o.algo > GPUCORE_ATTN_ALGO_KERNEL)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: algo %d is not a gpucore_attention_algo (0 "
                                 "heuristic, 1 autotune, 2 deterministic, 3 kernel)", op, (int)o.algo);
    a->algo = o.algo;
    a->scale = (float)(o.scale > 0 ? o.scale : (a->head_dim ? 1.0 / sqrt((double)a->head_dim) : 1.0));
    a->causal = o.is_causal != 0;
    a->dropout_p = (float)o.dropout_p;
    a->seed = o.seed;
    a->offset = o.offset;
    a->mask_dtype = GPUCORE_ATTN_NO_MASK;
    if (mask) {
        if ((st = gpucore_check_tensor(mask, op, "attn_mask")) || (st = ops_check_same(mask, "attn_mask", q, "q", op, 0)))
            return st;
        if (mask->dtype != GPUCORE_F32 && mask->dtype != q->dtype && mask->dtype != GPUCORE_U8)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: attn_mask is %s; it must be f32 or q's dtype %s "
                                     "(additive) or u8 (boolean)", op, gpucore_dtype_name((gpucore_dtype)mask->dtype),
                                     gpucore_dtype_name((gpucore_dtype)q->dtype));
        const int64_t full[4] = {a->batch, a->heads, a->seq_q, a->seq_k};
        if (mask->ndim > 4) return tfm_shape_error(op, "attn_mask", mask, "it must broadcast to [batch, heads, seq_q, seq_k]");
        gpucore_view mv;
        gpucore_tensor_view_of(mask, &mv);
        a->mask.data = mv.data;
        for (int d = 0; d < 4; d++) {
            int md = d - (4 - mask->ndim);
            int64_t ext = md >= 0 ? mask->shape[md] : 1;
            if (ext != 1 && ext != full[d])
                return tfm_shape_error(op, "attn_mask", mask, "it must broadcast to [batch, heads, seq_q, seq_k]");
            a->mask.stride[d] = md >= 0 && ext != 1 ? mask->strides[md] : 0;
        }
        a->mask_dtype = mask->dtype;
    }
    if (lens) {
        if ((st = gpucore_check_tensor(lens, op, "kv_lengths")) || (st = ops_check_same(lens, "kv_lengths", q, "q", op, 0)))
            return st;
        if ((lens->dtype != GPUCORE_I32 && lens->dtype != GPUCORE_I64) || gpucore_tensor_numel_unchecked(lens) != a->batch ||
            !gpucore_tensor_contiguous_unchecked(lens))
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: kv_lengths must be a contiguous i32 or i64 tensor "
                                     "of %lld elements (one per batch entry)", op, (long long)a->batch);
        gpucore_view lv;
        gpucore_tensor_view_of(lens, &lv);
        a->kv_len = lv.data;
        a->len_dtype = lens->dtype;
    }
    describe(&a->q, q);
    describe(&a->k, k);
    describe(&a->v, v);
    return GPUCORE_OK;
}

/* lse: contiguous f32 with B·H·Sq elements on q's context. */
static gpucore_status check_lse(const gpucore_tensor *lse, const gpucore_tensor *q, const gpucore_attn_args *a,
                                const char *op)
{
    gpucore_status st = gpucore_check_tensor(lse, op, "lse");
    if (st || (st = ops_check_same(lse, "lse", q, "q", op, 0))) return st;
    if (lse->dtype != GPUCORE_F32 || !gpucore_tensor_contiguous_unchecked(lse) ||
        gpucore_tensor_numel_unchecked(lse) != a->batch * a->heads * a->seq_q)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: lse must be a contiguous f32 tensor of %lld elements "
                                 "([batch, heads, seq_q])", op, (long long)(a->batch * a->heads * a->seq_q));
    return GPUCORE_OK;
}

typedef struct attn_ws_ctx { gpucore_context *ctx; gpucore_stream *stream; } attn_ws_ctx;

static int attn_ws_alloc(void *p, int64_t bytes, void **ptr)
{
    attn_ws_ctx *w = p;
    return (int)ops_workspace_alloc(w->ctx, bytes, w->stream, ptr);
}

static void attn_ws_release(void *p, void *ptr)
{
    attn_ws_ctx *w = p;
    ops_workspace_free(w->ctx, w->stream, ptr);
}

static gpucore_status attention_run(gpucore_context *ctx, gpucore_attn_args *a, gpucore_stream *stream,
                                    const char *op)
{
    gpucore_stream *s;
    gpucore_status st = gpucore_resolve_stream(ctx, stream, op, &s);
    if (st) return st;
    int64_t es = gpucore_dtype_size((gpucore_dtype)a->dtype);
    int64_t bytes = es * a->batch * (a->heads * a->seq_q * (a->head_dim + a->head_dim_v) +
                                     a->kv_heads * a->seq_k * (a->head_dim + a->head_dim_v));
    void *prof = gpucore_prof_begin(ctx, s, op, a->op == GPUCORE_ATTN_BWD ? 2 * bytes : bytes);
    int32_t engine = 0;
    a->engine_out = &engine;
    attn_ws_ctx wctx = {ctx, s};
    a->ws_alloc = attn_ws_alloc;
    a->ws_release = attn_ws_release;
    a->ws_ctx = &wctx;
    a->delta = NULL; /* the backward's D_i scratch (kernel backends; none on the CPU) */
    if (a->op == GPUCORE_ATTN_BWD)
        st = ops_workspace_alloc(ctx, (int64_t)sizeof(float) * a->batch * a->heads * a->seq_q, s, (void **)&a->delta);
    if (!st) st = ctx->be->attention(ctx->bctx, a, s->bstream);
    ops_workspace_free(ctx, s, a->delta);
    gpucore_prof_end(ctx, prof);
    /* the dispatch's outcome, counted above the vtable (as matmul's fallbacks) */
    if (!st && engine == 1) atomic_fetch_add(&ctx->attn_cudnn_calls, 1);
    if (!st && engine < 0 && -1 - engine < GPUCORE_ATTN_FALLBACK_REASONS) {
        atomic_fetch_add(&ctx->attn_fallbacks[-1 - engine], 1);
        if (atomic_load_explicit(&ctx->profile_flags, memory_order_relaxed)) gpucore_profile_count(ctx, "attention_fallback");
    }
    return st;
}

gpucore_status gpucore_attention_forward(gpucore_tensor *out, gpucore_tensor *lse, const gpucore_tensor *q,
                                         const gpucore_tensor *k, const gpucore_tensor *v,
                                         const gpucore_tensor *attn_mask, const gpucore_tensor *kv_lengths,
                                         const gpucore_attention_options *opts, gpucore_stream *stream)
{
    const char *op = "attention_forward";
    gpucore_attn_args a;
    gpucore_status st = check_common(op, q, k, v, attn_mask, kv_lengths, opts, &a);
    if (st || (st = check_operand(out, "out", q, "q", op))) return st;
    if (!dims_are(out, a.batch, a.heads, a.seq_q, a.head_dim_v))
        return tfm_shape_error(op, "out", out, "out must be [batch, heads, seq_q, head_dim_v]");
    if (lse && (st = check_lse(lse, q, &a, op))) return st;
    const gpucore_tensor *ins[5] = {q, k, v, attn_mask, kv_lengths};
    const char *inn[5] = {"q", "k", "v", "attn_mask", "kv_lengths"};
    if ((st = check_writable(out, "out", op))) return st;
    for (int i = 0; i < 5; i++)
        if ((st = check_no_alias(out, "out", ins[i], inn[i], op)) || (st = check_no_alias(lse, "lse", ins[i], inn[i], op)))
            return st;
    if ((st = check_no_alias(lse, "lse", out, "out", op))) return st;
    gpucore_context *ctx = q->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->attention, op))) return st;
    if (a.batch * a.heads * a.seq_q == 0) return GPUCORE_OK;
    a.op = GPUCORE_ATTN_FWD;
    describe(&a.out, out);
    if (lse) {
        gpucore_view lv;
        gpucore_tensor_view_of(lse, &lv);
        a.lse = lv.data;
    }
    return attention_run(ctx, &a, stream, op);
}

gpucore_status gpucore_attention_backward(gpucore_tensor *dq, gpucore_tensor *dk, gpucore_tensor *dv,
                                          const gpucore_tensor *dout, const gpucore_tensor *q, const gpucore_tensor *k,
                                          const gpucore_tensor *v, const gpucore_tensor *out, const gpucore_tensor *lse,
                                          const gpucore_tensor *attn_mask, const gpucore_tensor *kv_lengths,
                                          const gpucore_attention_options *opts, gpucore_stream *stream)
{
    const char *op = "attention_backward";
    gpucore_attn_args a;
    gpucore_status st = check_common(op, q, k, v, attn_mask, kv_lengths, opts, &a);
    if (st || (st = check_operand(out, "out", q, "q", op)) || (st = check_operand(dout, "dout", q, "q", op))) return st;
    if (!dims_are(out, a.batch, a.heads, a.seq_q, a.head_dim_v))
        return tfm_shape_error(op, "out", out, "out must be the forward's output, [batch, heads, seq_q, head_dim_v]");
    if (!dims_are(dout, a.batch, a.heads, a.seq_q, a.head_dim_v))
        return tfm_shape_error(op, "dout", dout, "dout must have out's shape [batch, heads, seq_q, head_dim_v]");
    if (!lse)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the backward needs the forward's lse (pass a "
                                 "tensor for lse to gpucore_attention_forward)", op);
    if ((st = check_lse(lse, q, &a, op))) return st;
    gpucore_tensor *outs[3] = {dq, dk, dv};
    const char *outn[3] = {"dq", "dk", "dv"};
    const gpucore_tensor *like[3] = {q, k, v};
    const gpucore_tensor *ins[8] = {dout, q, k, v, out, lse, attn_mask, kv_lengths};
    const char *inn[8] = {"dout", "q", "k", "v", "out", "lse", "attn_mask", "kv_lengths"};
    for (int o = 0; o < 3; o++) {
        if (!outs[o]) continue;
        if ((st = check_operand(outs[o], outn[o], q, "q", op))) return st;
        if (memcmp(outs[o]->shape, like[o]->shape, sizeof(int64_t) * 4))
            return tfm_shape_error(op, outn[o], outs[o], o == 0 ? "dq must have q's shape" : o == 1 ? "dk must have k's shape"
                                                                                              : "dv must have v's shape");
        if ((st = check_writable(outs[o], outn[o], op))) return st;
        for (int i = 0; i < 8; i++)
            if ((st = check_no_alias(outs[o], outn[o], ins[i], inn[i], op))) return st;
        for (int p = o + 1; p < 3; p++)
            if ((st = check_no_alias(outs[o], outn[o], outs[p], outn[p], op))) return st;
    }
    gpucore_context *ctx = q->ctx;
    if ((st = ops_need_entry(ctx, (const void *)ctx->be->attention, op))) return st;
    if (!dq && !dk && !dv) return GPUCORE_OK;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;
    if (a.batch * a.heads * a.seq_q == 0) { /* no query rows: every gradient is 0 */
        for (int o = 0; o < 3; o++)
            if (outs[o] && gpucore_tensor_numel_unchecked(outs[o]) && (st = gpucore_fill(outs[o], 0.0, s))) return st;
        return GPUCORE_OK;
    }
    a.op = GPUCORE_ATTN_BWD;
    describe(&a.out, out);
    describe(&a.dout, dout);
    describe(&a.dq, dq);
    describe(&a.dk, dk);
    describe(&a.dv, dv);
    gpucore_view lv;
    gpucore_tensor_view_of(lse, &lv);
    a.lse = lv.data;
    return attention_run(ctx, &a, s, op);
}

/* ---- cuDNN engine statistics (the CUDA backend reports each forward's engine through args.engine_out) ---- */
gpucore_status gpucore_attention_get_stats(gpucore_context *ctx, gpucore_attention_stats *stats)
{
    return ops_engine_stats_get(ctx, OPS_STATS_ATTENTION, stats);
}

gpucore_status gpucore_attention_reset_stats(gpucore_context *ctx)
{
    return ops_engine_stats_reset(ctx, OPS_STATS_ATTENTION);
}

const char *gpucore_attention_fallback_reason_text(int reason)
{
    switch (reason) {
    case GPUCORE_ATTN_FALLBACK_NO_CUDNN: return "cuDNN could not be loaded";
    case GPUCORE_ATTN_FALLBACK_DTYPE: return "f32 operands (cuDNN's SDPA takes f16 and bf16)";
    case GPUCORE_ATTN_FALLBACK_HEAD_DIM: return "a head_dim that is not a multiple of 8";
    case GPUCORE_ATTN_FALLBACK_LAYOUT: return "a head_dim stride other than 1";
    case GPUCORE_ATTN_FALLBACK_MASK: return "a boolean mask or i64 kv_lengths";
    case GPUCORE_ATTN_FALLBACK_DROPOUT: return "dropout (cuDNN's random numbers are not ours)";
    case GPUCORE_ATTN_FALLBACK_GQA: return "grouped-query attention";
    case GPUCORE_ATTN_FALLBACK_NO_ENGINE: return "cuDNN refused the graph or offered no usable engine";
    case GPUCORE_ATTN_FALLBACK_FAILED: return "building or running the cuDNN plan failed";
    case GPUCORE_ATTN_FALLBACK_CACHE_FULL: return "the attention plan cache is full";
    default: return NULL;
    }
}
