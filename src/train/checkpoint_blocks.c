/*
 * checkpoint_blocks.c — the checkpoint executor's transformer-layer segments: a
 * pre-norm attention block (norm → QKV projection → RoPE → attention → output
 * projection → residual) and a pre-norm MLP block (norm → fc1 → GELU or SwiGLU →
 * fc2 → residual), optionally with LoRA adapters on the attention projections.
 * Like the other built-in segments they are forward/backward callback pairs over
 * public ops, so every backend and every recompute policy runs them unchanged;
 * the only state is what they save through gpucore_ckpt_save and the adapters'
 * dropout draws, reserved with gpucore_ckpt_rng so that recompute and backward
 * replay them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"
#include "ops/ops_internal.h"

#define TRY(call)                                  \
    do {                                           \
        if ((st = (call)) != GPUCORE_OK) goto out; \
    } while (0)

/* ------------------------------------------------------------- shared parts */

typedef struct block_norm {
    int layer_norm;
    double eps;
    const gpucore_tensor *w, *b;
    gpucore_tensor *dw, *db;
} block_norm;

/* A projection: plain linear, or the frozen linear plus a LoRA adapter (la, lb). */
typedef struct block_proj {
    const gpucore_tensor *w, *b, *la, *lb;
    gpucore_tensor *dw, *db, *dla, *dlb;
    int32_t param;   /* index announced for dw (db +1); adapters: lora_param, +1 */
    int32_t lora_param;
    double scale, dropout;
} block_proj;

/* Reads a segment's saves in the order they were made. */
typedef struct save_cursor {
    gpucore_ckpt_call *call;
    int64_t next;
} save_cursor;

static gpucore_status next_saved(save_cursor *c, gpucore_tensor **t) { return gpucore_ckpt_saved(c->call, c->next++, t); }

static gpucore_status like(const gpucore_tensor *x, int64_t last, gpucore_tensor **out)
{
    int64_t shape[GPUCORE_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = last;
    return gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, x->ndim, shape, out);
}

/* *xn = norm(x) (the caller destroys it); saves x, rstd, mean (LayerNorm), xn. */
static gpucore_status norm_forward(gpucore_ckpt_call *call, const block_norm *N, const gpucore_tensor *x,
                                   gpucore_tensor **xn, gpucore_stream *stream)
{
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *mean = NULL, *rstd = NULL;
    int64_t cols = x->shape[x->ndim - 1], rows = cols ? gpucore_tensor_numel(x) / cols : 0;
    *xn = NULL;
    TRY(like(x, cols, xn));
    TRY(gpucore_tensor_create(x->ctx, GPUCORE_F32, 1, &rows, &rstd));
    if (N->layer_norm) {
        TRY(gpucore_tensor_create(x->ctx, GPUCORE_F32, 1, &rows, &mean));
        TRY(gpucore_layer_norm(*xn, mean, rstd, x, N->w, N->b, N->eps, stream));
    } else TRY(gpucore_rms_norm(*xn, rstd, x, N->w, N->eps, stream));
    TRY(gpucore_ckpt_save(call, x));
    TRY(gpucore_ckpt_save(call, rstd));
    if (mean) TRY(gpucore_ckpt_save(call, mean));
    TRY(gpucore_ckpt_save(call, *xn));
out:
    gpucore_tensor_destroy(mean);
    gpucore_tensor_destroy(rstd);
    if (st) {
        gpucore_tensor_destroy(*xn);
        *xn = NULL;
    }
    return st;
}

typedef struct norm_saves { gpucore_tensor *x, *rstd, *mean, *xn; } norm_saves;

static gpucore_status norm_saved(save_cursor *c, const block_norm *N, norm_saves *s)
{
    gpucore_status st = next_saved(c, &s->x);
    if (!st) st = next_saved(c, &s->rstd);
    if (!st && N->layer_norm) st = next_saved(c, &s->mean);
    if (!st) st = next_saved(c, &s->xn);
    return st;
}

/* dx = norm'(dxn) + dy (the residual path); norm gradients as params 0 and 1. */
static gpucore_status norm_backward(gpucore_ckpt_call *call, const block_norm *N, const norm_saves *s,
                                    const gpucore_tensor *dxn, const gpucore_tensor *dy, gpucore_tensor *dx,
                                    gpucore_stream *stream)
{
    gpucore_status st = GPUCORE_OK;
    if (dx || N->dw || N->db) {
        if (N->layer_norm) st = gpucore_layer_norm_backward(dx, N->dw, N->db, dxn, s->x, s->mean, s->rstd, N->w, stream);
        else st = gpucore_rms_norm_backward(dx, N->dw, dxn, s->x, s->rstd, N->w, stream);
    }
    if (!st && dx) st = gpucore_axpy(dx, 1.0, dy, stream);
    if (!st && N->dw) st = gpucore_ckpt_grad_ready(call, 0, N->dw);
    if (!st && N->db) st = gpucore_ckpt_grad_ready(call, 1, N->db);
    return st;
}

/* The tensors to use in this call (ZeRO stage 3: gathered parameters, the trainer's
 * gradient buffers); gradients only in backward, so a forward allocates none. */
static gpucore_status bind_norm(gpucore_ckpt_call *call, block_norm *N, int grads)
{
    gpucore_status st = GPUCORE_OK;
    CKPT_BIND(call, N->w, 0);
    CKPT_BIND(call, N->b, 0);
    if (grads) {
        CKPT_BIND(call, N->dw, 1);
        CKPT_BIND(call, N->db, 1);
    }
    return st;
}

static gpucore_status bind_proj(gpucore_ckpt_call *call, block_proj *P, int grads)
{
    gpucore_status st = GPUCORE_OK;
    CKPT_BIND(call, P->w, 0);
    CKPT_BIND(call, P->b, 0);
    CKPT_BIND(call, P->la, 0);
    CKPT_BIND(call, P->lb, 0);
    if (grads) {
        CKPT_BIND(call, P->dw, 1);
        CKPT_BIND(call, P->db, 1);
        CKPT_BIND(call, P->dla, 1);
        CKPT_BIND(call, P->dlb, 1);
    }
    return st;
}

static void proj_options(const block_proj *P, uint64_t seed, uint64_t offset, gpucore_lora_options *o)
{
    gpucore_lora_options_init(o);
    o->scale = P->scale;
    o->dropout_p = P->dropout;
    o->seed = seed;
    o->offset = offset;
}

/* The adapter's dropout counters for an input of n elements (none without adapter or dropout). */
static gpucore_status proj_rng(gpucore_ckpt_call *call, const block_proj *P, int64_t n, uint64_t *seed, uint64_t *offset)
{
    *seed = *offset = 0;
    if (!P->la || P->dropout == 0) return GPUCORE_OK;
    return gpucore_ckpt_rng(call, gpucore_random_offset_advance(n, GPUCORE_UNIFORM), seed, offset);
}

/* y = proj(x); with an adapter saves x·Aᵀ. */
static gpucore_status proj_forward(gpucore_ckpt_call *call, const block_proj *P, const gpucore_tensor *x,
                                   gpucore_tensor *y, uint64_t seed, uint64_t offset, gpucore_stream *stream)
{
    if (!P->la) return gpucore_linear_forward(x, P->w, P->b, GPUCORE_ACT_NONE, y, NULL, stream);
    gpucore_tensor *xa = NULL;
    gpucore_lora_options o;
    proj_options(P, seed, offset, &o);
    gpucore_status st = like(x, P->la->shape[0], &xa);
    if (!st) st = gpucore_lora_forward(y, xa, x, P->w, P->b, P->la, P->lb, &o, stream);
    if (!st) st = gpucore_ckpt_save(call, xa);
    gpucore_tensor_destroy(xa);
    return st;
}

/* dx (may be NULL) and the projection's gradients from dy; xa: the adapter's save. */
static gpucore_status proj_backward(gpucore_ckpt_call *call, const block_proj *P, const gpucore_tensor *dy,
                                    const gpucore_tensor *x, const gpucore_tensor *xa, gpucore_tensor *dx,
                                    uint64_t seed, uint64_t offset, gpucore_stream *stream)
{
    gpucore_status st;
    if (!P->la) {
        if (!dx && !P->dw) return GPUCORE_OK;
        st = gpucore_linear_backward(dy, x, P->w, NULL, dx, P->dw, P->db, stream);
        if (!st && P->dw) st = gpucore_ckpt_grad_ready(call, P->param, P->dw);
        if (!st && P->db) st = gpucore_ckpt_grad_ready(call, P->param + 1, P->db);
        return st;
    }
    if (!dx && !P->dla && !P->dlb) return GPUCORE_OK;
    gpucore_lora_options o;
    proj_options(P, seed, offset, &o);
    st = gpucore_lora_backward(dx, P->dla, P->dlb, dy, x, P->w, P->la, P->lb, xa, &o, stream);
    if (!st && P->dla) st = gpucore_ckpt_grad_ready(call, P->lora_param, P->dla);
    if (!st && P->dlb) st = gpucore_ckpt_grad_ready(call, P->lora_param + 1, P->dlb);
    return st;
}

/* ---------------------------------------------------------- attention block */

typedef struct attn_seg {
    block_norm norm;
    block_proj qkv, out;
    int64_t heads, kv_heads, head_dim, d_model;
    int is_causal, rope_interleaved;
    const gpucore_tensor *cos, *sin;
} attn_seg;

/* q [B,H,S,hd], k and v [B,Hkv,S,hd]: views of a [B, S, (H+2Hkv)·hd] projection. */
static gpucore_status qkv_views(const attn_seg *A, gpucore_tensor *qkv, gpucore_tensor *v[3])
{
    static const int perm[4] = {0, 2, 1, 3};
    int64_t shape[4] = {qkv->shape[0], qkv->shape[1], A->heads + 2 * A->kv_heads, A->head_dim};
    int64_t start[4] = {0, A->heads, A->heads + A->kv_heads, A->heads + 2 * A->kv_heads};
    gpucore_tensor *r = NULL, *part = NULL;
    v[0] = v[1] = v[2] = NULL;
    gpucore_status st = gpucore_tensor_reshape(qkv, 4, shape, &r);
    for (int i = 0; i < 3 && !st; i++) {
        st = gpucore_tensor_slice(r, 2, start[i], start[i + 1], 1, &part);
        if (!st) st = gpucore_tensor_permute(part, perm, &v[i]);
        gpucore_tensor_destroy(part);
        part = NULL;
    }
    gpucore_tensor_destroy(r);
    return st;
}

/* [B, S, H, hd] as [B, H, S, hd] (perm) or [B, S, H·hd] (flat). */
static gpucore_status head_views(gpucore_tensor *t, gpucore_tensor **perm4, gpucore_tensor **flat)
{
    static const int perm[4] = {0, 2, 1, 3};
    int64_t shape[3] = {t->shape[0], t->shape[1], t->shape[2] * t->shape[3]};
    gpucore_status st = gpucore_tensor_permute(t, perm, perm4);
    if (!st) st = gpucore_tensor_reshape(t, 3, shape, flat);
    return st;
}

static void destroy_all(gpucore_tensor **t, int n)
{
    for (int i = 0; i < n; i++) {
        gpucore_tensor_destroy(t[i]);
        t[i] = NULL;
    }
}

/* The rotation tables cut to S rows (views). */
static gpucore_status rope_tables(const attn_seg *A, int64_t S, gpucore_tensor **cs, gpucore_tensor **sn)
{
    *cs = *sn = NULL;
    if (!A->cos) return GPUCORE_OK;
    if (S > A->cos->shape[0])
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "attention block: x has %lld positions but rope_cos has "
                                 "only %lld rows", (long long)S, (long long)A->cos->shape[0]);
    gpucore_status st = gpucore_tensor_slice((gpucore_tensor *)A->cos, 0, 0, S, 1, cs);
    if (!st) st = gpucore_tensor_slice((gpucore_tensor *)A->sin, 0, 0, S, 1, sn);
    return st;
}

static gpucore_status attn_check_x(const attn_seg *A, const gpucore_tensor *x)
{
    if (x->ndim != 3 || x->shape[2] != A->d_model) {
        char b[200];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "attention block: x has shape %s; it must be [B, S, %lld]",
                                 gpucore_shape_str(x->ndim, x->shape, b, sizeof b), (long long)A->d_model);
    }
    return GPUCORE_OK;
}

static void attn_options(const attn_seg *A, gpucore_attention_options *o)
{
    gpucore_attention_options_init(o);
    o->is_causal = A->is_causal;
}

static gpucore_status bind_attn(gpucore_ckpt_call *call, attn_seg *A, int grads)
{
    gpucore_status st = bind_norm(call, &A->norm, grads);
    if (!st) st = bind_proj(call, &A->qkv, grads);
    if (!st) st = bind_proj(call, &A->out, grads);
    if (st) return st;
    CKPT_BIND(call, A->cos, 0);
    CKPT_BIND(call, A->sin, 0);
    return st;
}

static gpucore_status attn_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                               gpucore_stream *stream, void *user)
{
    attn_seg Anow = *(const attn_seg *)user, *A = &Anow;
    gpucore_status st = bind_attn(call, A, 0);
    if (!st) st = attn_check_x(A, x);
    if (st) return st;
    const int64_t B = x->shape[0], S = x->shape[1];
    gpucore_tensor *xn = NULL, *qkv = NULL, *v[3] = {NULL, NULL, NULL}, *att = NULL, *att4 = NULL, *att3 = NULL,
                   *lse = NULL, *out = NULL, *cs = NULL, *sn = NULL;
    uint64_t sq, oq, so, oo;
    TRY(proj_rng(call, &A->qkv, gpucore_tensor_numel(x), &sq, &oq));
    TRY(proj_rng(call, &A->out, B * S * A->heads * A->head_dim, &so, &oo));
    TRY(rope_tables(A, S, &cs, &sn));
    TRY(norm_forward(call, &A->norm, x, &xn, stream));
    TRY(like(x, (A->heads + 2 * A->kv_heads) * A->head_dim, &qkv));
    TRY(proj_forward(call, &A->qkv, xn, qkv, sq, oq, stream));
    TRY(qkv_views(A, qkv, v));
    if (cs) {
        TRY(gpucore_rotary_embedding(v[0], v[0], cs, sn, A->rope_interleaved, stream));
        TRY(gpucore_rotary_embedding(v[1], v[1], cs, sn, A->rope_interleaved, stream));
    }
    TRY(gpucore_ckpt_save(call, qkv));
    int64_t ashape[4] = {B, S, A->heads, A->head_dim}, lshape[3] = {B, A->heads, S};
    TRY(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, 4, ashape, &att));
    TRY(gpucore_tensor_create(x->ctx, GPUCORE_F32, 3, lshape, &lse));
    TRY(head_views(att, &att4, &att3));
    gpucore_attention_options ao;
    attn_options(A, &ao);
    TRY(gpucore_attention_forward(att4, lse, v[0], v[1], v[2], NULL, NULL, &ao, stream));
    TRY(gpucore_ckpt_save(call, att));
    TRY(gpucore_ckpt_save(call, lse));
    TRY(like(x, A->d_model, &out));
    TRY(proj_forward(call, &A->out, att3, out, so, oo, stream));
    TRY(gpucore_axpy(out, 1.0, x, stream)); /* the residual */
out:;
    gpucore_tensor *tmp[9] = {xn, qkv, att, att4, att3, lse, cs, sn, NULL};
    destroy_all(tmp, 8);
    destroy_all(v, 3);
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status attn_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                               gpucore_stream *stream, void *user)
{
    attn_seg Anow = *(const attn_seg *)user, *A = &Anow;
    gpucore_status st = bind_attn(call, A, 1);
    if (st) return st;
    save_cursor c = {call, 0};
    norm_saves ns = {0};
    gpucore_tensor *xa_q = NULL, *qkv = NULL, *att = NULL, *lse = NULL, *xa_o = NULL;
    gpucore_tensor *att4 = NULL, *att3 = NULL, *datt = NULL, *datt4 = NULL, *datt3 = NULL, *dqkv = NULL, *dxn = NULL,
                   *cs = NULL, *sn = NULL, *v[3] = {NULL, NULL, NULL}, *dv[3] = {NULL, NULL, NULL},
                   *g[3] = {NULL, NULL, NULL};
    TRY(norm_saved(&c, &A->norm, &ns));
    if (A->qkv.la) TRY(next_saved(&c, &xa_q));
    TRY(next_saved(&c, &qkv));
    TRY(next_saved(&c, &att));
    TRY(next_saved(&c, &lse));
    if (A->out.la) TRY(next_saved(&c, &xa_o));
    const int64_t B = ns.x->shape[0], S = ns.x->shape[1];
    uint64_t sq, oq, so, oo;
    TRY(proj_rng(call, &A->qkv, gpucore_tensor_numel(ns.x), &sq, &oq));
    TRY(proj_rng(call, &A->out, B * S * A->heads * A->head_dim, &so, &oo));
    TRY(rope_tables(A, S, &cs, &sn));
    /* output projection */
    TRY(head_views(att, &att4, &att3));
    TRY(gpucore_tensor_create(dy->ctx, (gpucore_dtype)dy->dtype, 4, att->shape, &datt));
    TRY(head_views(datt, &datt4, &datt3));
    TRY(proj_backward(call, &A->out, dy, att3, xa_o, datt3, so, oo, stream));
    /* attention, then RoPE's inverse rotation on dq and dk */
    TRY(gpucore_tensor_create(dy->ctx, (gpucore_dtype)dy->dtype, 3, qkv->shape, &dqkv));
    TRY(qkv_views(A, qkv, v));
    TRY(qkv_views(A, dqkv, dv));
    for (int i = 0; i < 3; i++) /* attention wants outputs whose spans do not interleave: separate tensors */
        TRY(gpucore_tensor_create(dy->ctx, (gpucore_dtype)dy->dtype, 4, v[i]->shape, &g[i]));
    gpucore_attention_options ao;
    attn_options(A, &ao);
    TRY(gpucore_attention_backward(g[0], g[1], g[2], datt4, v[0], v[1], v[2], att4, lse, NULL, NULL, &ao, stream));
    if (cs) {
        TRY(gpucore_rotary_embedding_backward(g[0], g[0], cs, sn, A->rope_interleaved, stream));
        TRY(gpucore_rotary_embedding_backward(g[1], g[1], cs, sn, A->rope_interleaved, stream));
    }
    for (int i = 0; i < 3; i++) TRY(gpucore_copy(dv[i], g[i], stream)); /* into the [B, S, (H+2Hkv)·hd] gradient */
    /* QKV projection and the norm */
    TRY(like(ns.x, A->d_model, &dxn));
    TRY(proj_backward(call, &A->qkv, dqkv, ns.xn, xa_q, dxn, sq, oq, stream));
    TRY(norm_backward(call, &A->norm, &ns, dxn, dy, dx, stream));
out:;
    gpucore_tensor *tmp[9] = {att4, att3, datt, datt4, datt3, dqkv, dxn, cs, sn};
    destroy_all(tmp, 9);
    destroy_all(v, 3);
    destroy_all(dv, 3);
    destroy_all(g, 3);
    return st;
}

/* ------------------------------------------------------------------ MLP block */

typedef struct mlp_seg {
    block_norm norm;
    block_proj fc1, fc2;
    int swiglu;
    int64_t hidden, d_model;
} mlp_seg;

/* gate and up: the two halves of fc1's [..., 2F] output (views). */
static gpucore_status glu_halves(const mlp_seg *M, gpucore_tensor *u, gpucore_tensor **gate, gpucore_tensor **up)
{
    gpucore_status st = gpucore_tensor_slice(u, u->ndim - 1, 0, M->hidden, 1, gate);
    if (!st) st = gpucore_tensor_slice(u, u->ndim - 1, M->hidden, 2 * M->hidden, 1, up);
    return st;
}

static gpucore_status bind_mlp(gpucore_ckpt_call *call, mlp_seg *M, int grads)
{
    gpucore_status st = bind_norm(call, &M->norm, grads);
    if (!st) st = bind_proj(call, &M->fc1, grads);
    if (!st) st = bind_proj(call, &M->fc2, grads);
    return st;
}

static gpucore_status mlp_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                              gpucore_stream *stream, void *user)
{
    mlp_seg Mnow = *(const mlp_seg *)user, *M = &Mnow;
    gpucore_status st = bind_mlp(call, M, 0);
    if (st) return st;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != M->d_model)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "mlp block: x's last dim is %lld; it must be %lld",
                                 (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)M->d_model);
    gpucore_tensor *xn = NULL, *u = NULL, *h = NULL, *gate = NULL, *up = NULL, *out = NULL;
    TRY(norm_forward(call, &M->norm, x, &xn, stream));
    TRY(like(x, M->swiglu ? 2 * M->hidden : M->hidden, &u));
    TRY(like(x, M->hidden, &h));
    if (M->swiglu) {
        TRY(gpucore_linear_forward(xn, M->fc1.w, M->fc1.b, GPUCORE_ACT_NONE, u, NULL, stream));
        TRY(glu_halves(M, u, &gate, &up));
        TRY(gpucore_glu(h, gate, up, GPUCORE_GLU_SWIGLU, stream));
    } else TRY(gpucore_linear_forward(xn, M->fc1.w, M->fc1.b, GPUCORE_ACT_GELU_TANH, h, u, stream)); /* u: pre-activation */
    TRY(gpucore_ckpt_save(call, u));
    TRY(gpucore_ckpt_save(call, h));
    TRY(like(x, M->d_model, &out));
    TRY(gpucore_linear_forward(h, M->fc2.w, M->fc2.b, GPUCORE_ACT_NONE, out, NULL, stream));
    TRY(gpucore_axpy(out, 1.0, x, stream));
out:;
    gpucore_tensor *tmp[5] = {xn, u, h, gate, up};
    destroy_all(tmp, 5);
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status mlp_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                              gpucore_stream *stream, void *user)
{
    mlp_seg Mnow = *(const mlp_seg *)user, *M = &Mnow;
    gpucore_status st = bind_mlp(call, M, 1);
    if (st) return st;
    save_cursor c = {call, 0};
    norm_saves ns = {0};
    gpucore_tensor *u = NULL, *h = NULL, *du = NULL, *dh = NULL, *gate = NULL, *up = NULL, *dgate = NULL, *dup = NULL,
                   *dxn = NULL, *dgv = NULL, *duv = NULL;
    TRY(norm_saved(&c, &M->norm, &ns));
    TRY(next_saved(&c, &u));
    TRY(next_saved(&c, &h));
    TRY(like(dy, u->shape[u->ndim - 1], &du));
    if (M->swiglu) {
        TRY(like(dy, M->hidden, &dh));
        TRY(proj_backward(call, &M->fc2, dy, h, NULL, dh, 0, 0, stream));
        TRY(glu_halves(M, u, &gate, &up));
        TRY(like(dy, M->hidden, &dgate)); /* separate tensors: glu_backward's outputs must not interleave */
        TRY(like(dy, M->hidden, &dup));
        TRY(gpucore_glu_backward(dgate, dup, dh, gate, up, GPUCORE_GLU_SWIGLU, stream));
        TRY(glu_halves(M, du, &dgv, &duv));
        TRY(gpucore_copy(dgv, dgate, stream));
        TRY(gpucore_copy(duv, dup, stream));
    } else { /* du = (dy·W2) ⊙ gelu'(u), fused in fc2's input-gradient GEMM */
        TRY(gpucore_linear_backward(dy, h, M->fc2.w, u, du, M->fc2.dw, M->fc2.db, stream));
        if (M->fc2.dw) TRY(gpucore_ckpt_grad_ready(call, M->fc2.param, M->fc2.dw));
        if (M->fc2.db) TRY(gpucore_ckpt_grad_ready(call, M->fc2.param + 1, M->fc2.db));
    }
    TRY(like(dy, M->d_model, &dxn));
    TRY(proj_backward(call, &M->fc1, du, ns.xn, NULL, dxn, 0, 0, stream));
    TRY(norm_backward(call, &M->norm, &ns, dxn, dy, dx, stream));
out:;
    gpucore_tensor *tmp[9] = {du, dh, gate, up, dgate, dup, dxn, dgv, duv};
    destroy_all(tmp, 9);
    return st;
}

/* ------------------------------------------------------------- registration */

void gpucore_ckpt_attention_block_init(gpucore_ckpt_attention_block *b)
{
    if (!b) return;
    memset(b, 0, sizeof *b);
    b->struct_size = (int64_t)sizeof *b;
    b->is_causal = 1;
    b->eps = 1e-5;
    b->lora_scale = 1.0;
}

void gpucore_ckpt_mlp_block_init(gpucore_ckpt_mlp_block *b)
{
    if (!b) return;
    memset(b, 0, sizeof *b);
    b->struct_size = (int64_t)sizeof *b;
    b->eps = 1e-5;
}

static gpucore_status shape_is(const gpucore_tensor *t, int ndim, int64_t d0, int64_t d1, const char *op,
                               const char *seg, const char *arg)
{
    if (!t) return GPUCORE_OK;
    if (t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1)) return GPUCORE_OK;
    char b[200];
    if (ndim == 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': %s has shape %s; it must be [%lld]", op,
                                 seg, arg, gpucore_shape_str(t->ndim, t->shape, b, sizeof b), (long long)d0);
    return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': %s has shape %s; it must be [%lld, %lld]", op,
                             seg, arg, gpucore_shape_str(t->ndim, t->shape, b, sizeof b), (long long)d0, (long long)d1);
}

/* A tensor field: valid, w's dtype (norm weights: any float dtype), its gradient of its shape. */
static gpucore_status check_field(const gpucore_ckpt *c, const gpucore_tensor *t, const gpucore_tensor *g,
                                  const gpucore_tensor *w, int same_dtype, const char *op, const char *seg,
                                  const char *arg, const char *garg)
{
    gpucore_status st = gpucore_ckpt_check_param(c, t, op, seg, arg, 0);
    if (!st) st = gpucore_ckpt_check_grad(t, g, op, seg, arg, garg);
    if (!st && t) st = ops_check_float(t, op, arg);
    if (!st && t && w && t != w) st = ops_check_same(t, arg, w, "the projection weights", op, same_dtype);
    if (!st && g) st = ops_check_same(g, garg, t, arg, op, 1);
    return st;
}

static gpucore_status check_norm(const gpucore_ckpt *c, const block_norm *N, const gpucore_tensor *w, int64_t d,
                                 const char *op, const char *seg)
{
    gpucore_status st = check_field(c, N->w, N->dw, w, 0, op, seg, "norm_weight", "d_norm_weight");
    if (!st) st = check_field(c, N->b, N->db, w, 0, op, seg, "norm_bias", "d_norm_bias");
    if (!st) st = shape_is(N->w, 1, d, 0, op, seg, "norm_weight");
    if (!st) st = shape_is(N->b, 1, d, 0, op, seg, "norm_bias");
    if (!st && N->b && (!N->layer_norm || !N->w))
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': norm_bias needs layer_norm = 1 and "
                               "norm_weight", op, seg);
    if (!st && N->b && N->w) st = ops_check_same(N->b, "norm_bias", N->w, "norm_weight", op, 1);
    if (!st && !(N->eps >= 0))
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': eps must be >= 0", op, seg);
    return st;
}

/* A projection [out, in] (required), its bias [out], and an adapter A [r, in], B [out, r]. */
static gpucore_status check_proj(const gpucore_ckpt *c, const block_proj *P, int64_t out, int64_t in, const char *op,
                                 const char *seg, const char *const names[8])
{
    gpucore_status st = gpucore_ckpt_check_param(c, P->w, op, seg, names[0], 1);
    if (!st) st = check_field(c, P->w, P->dw, P->w, 1, op, seg, names[0], names[4]);
    if (!st) st = check_field(c, P->b, P->db, P->w, 1, op, seg, names[1], names[5]);
    if (!st) st = shape_is(P->w, 2, out, in, op, seg, names[0]);
    if (!st) st = shape_is(P->b, 1, out, 0, op, seg, names[1]);
    if (!st && P->db && !P->dw)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': %s needs %s (one GEMM computes both)",
                               op, seg, names[5], names[4]);
    if (st || (!P->la && !P->lb)) return st;
    if (!P->la || !P->lb)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': give both %s and %s, or neither", op,
                                 seg, names[2], names[3]);
    if (P->dw || P->db)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': with a LoRA adapter the base "
                                 "projection is frozen; %s and %s must be NULL", op, seg, names[4], names[5]);
    if ((st = check_field(c, P->la, P->dla, P->w, 1, op, seg, names[2], names[6])) ||
        (st = check_field(c, P->lb, P->dlb, P->w, 1, op, seg, names[3], names[7])))
        return st;
    if (P->la->ndim != 2 || P->la->shape[1] != in || P->la->shape[0] < 1)
        return shape_is(P->la, 2, 1, in, op, seg, names[2]);
    if ((st = shape_is(P->lb, 2, out, P->la->shape[0], op, seg, names[3]))) return st;
    if (!isfinite(P->scale) || !(P->dropout >= 0 && P->dropout < 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': lora_scale must be finite and "
                                 "lora_dropout in [0, 1)", op, seg);
    return GPUCORE_OK;
}

static gpucore_status check_struct(int64_t got, int64_t want, const char *op, const char *what)
{
    if (got == want) return GPUCORE_OK;
    return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: struct_size is %lld, not sizeof(%s) = %lld (use %s_init)",
                             op, (long long)got, what, (long long)want, what);
}

gpucore_status gpucore_ckpt_add_attention_block(gpucore_ckpt *c, const char *name, const gpucore_ckpt_attention_block *b)
{
    const char *op = "ckpt_add_attention_block", *seg = name ? name : "";
    if (!b) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: segment '%s': blk is NULL", op, seg);
    gpucore_status st = check_struct(b->struct_size, sizeof *b, op, "gpucore_ckpt_attention_block");
    if (!st) st = gpucore_ckpt_check_param(c, b->w_qkv, op, seg, "w_qkv", 1);
    if (!st) st = gpucore_ckpt_check_param(c, b->w_out, op, seg, "w_out", 1);
    if (st) return st;
    const int64_t H = b->heads, Hkv = b->kv_heads ? b->kv_heads : b->heads;
    if (H < 1 || Hkv < 1 || H % Hkv)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': heads %d and kv_heads %d: heads must "
                                 "be >= 1 and a multiple of kv_heads", op, seg, (int)b->heads, (int)b->kv_heads);
    if (b->w_out->ndim != 2 || b->w_qkv->ndim != 2 || b->w_out->shape[1] % H)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': w_qkv and w_out must be 2-d, w_out "
                                 "[D, heads·head_dim]", op, seg);
    const int64_t D = b->w_out->shape[0], hd = b->w_out->shape[1] / H;
    attn_seg A = {{b->layer_norm, b->eps, b->norm_weight, b->norm_bias, b->d_norm_weight, b->d_norm_bias},
                  {b->w_qkv, b->b_qkv, b->lora_qkv_a, b->lora_qkv_b, b->dw_qkv, b->db_qkv, b->d_lora_qkv_a,
                   b->d_lora_qkv_b, 2, 6, b->lora_scale, b->lora_dropout},
                  {b->w_out, b->b_out, b->lora_out_a, b->lora_out_b, b->dw_out, b->db_out, b->d_lora_out_a,
                   b->d_lora_out_b, 4, 8, b->lora_scale, b->lora_dropout},
                  H, Hkv, hd, D, b->is_causal != 0, b->rope_interleaved != 0, b->rope_cos, b->rope_sin};
    static const char *const qn[8] = {"w_qkv", "b_qkv", "lora_qkv_a", "lora_qkv_b", "dw_qkv", "db_qkv", "d_lora_qkv_a",
                                      "d_lora_qkv_b"};
    static const char *const on[8] = {"w_out", "b_out", "lora_out_a", "lora_out_b", "dw_out", "db_out", "d_lora_out_a",
                                      "d_lora_out_b"};
    if ((st = check_norm(c, &A.norm, b->w_qkv, D, op, seg)) || (st = check_proj(c, &A.qkv, (H + 2 * Hkv) * hd, D, op, seg, qn)) ||
        (st = check_proj(c, &A.out, D, H * hd, op, seg, on)) ||
        (st = check_field(c, b->rope_cos, NULL, b->w_qkv, 0, op, seg, "rope_cos", "")) ||
        (st = check_field(c, b->rope_sin, NULL, b->w_qkv, 0, op, seg, "rope_sin", "")))
        return st;
    if (!b->rope_cos != !b->rope_sin)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: segment '%s': give both rope_cos and rope_sin, or "
                                 "neither", op, seg);
    if (b->rope_cos) {
        const gpucore_tensor *cs = b->rope_cos;
        if (cs->ndim != 2 || cs->shape[1] < 1 || cs->shape[1] * 2 > hd)
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': rope_cos must be [S_max, R/2] with "
                                     "2 <= R <= head_dim (%lld)", op, seg, (long long)hd);
        if ((st = shape_is(b->rope_sin, 2, cs->shape[0], cs->shape[1], op, seg, "rope_sin"))) return st;
    }
    attn_seg *p = malloc(sizeof *p);
    if (!p) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    *p = A;
    return gpucore_ckpt_add_segment(c, name, attn_fwd, attn_bwd, p, free, op);
}

gpucore_status gpucore_ckpt_add_mlp_block(gpucore_ckpt *c, const char *name, const gpucore_ckpt_mlp_block *b)
{
    const char *op = "ckpt_add_mlp_block", *seg = name ? name : "";
    if (!b) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: segment '%s': blk is NULL", op, seg);
    gpucore_status st = check_struct(b->struct_size, sizeof *b, op, "gpucore_ckpt_mlp_block");
    if (!st) st = gpucore_ckpt_check_param(c, b->w_fc1, op, seg, "w_fc1", 1);
    if (!st) st = gpucore_ckpt_check_param(c, b->w_fc2, op, seg, "w_fc2", 1);
    if (st) return st;
    if (b->w_fc2->ndim != 2)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: segment '%s': w_fc2 must be 2-d [D, F]", op, seg);
    const int64_t D = b->w_fc2->shape[0], F = b->w_fc2->shape[1];
    mlp_seg M = {{b->layer_norm, b->eps, b->norm_weight, b->norm_bias, b->d_norm_weight, b->d_norm_bias},
                 {b->w_fc1, b->b_fc1, NULL, NULL, b->dw_fc1, b->db_fc1, NULL, NULL, 2, 0, 1, 0},
                 {b->w_fc2, b->b_fc2, NULL, NULL, b->dw_fc2, b->db_fc2, NULL, NULL, 4, 0, 1, 0},
                 b->swiglu != 0, F, D};
    static const char *const n1[8] = {"w_fc1", "b_fc1", "", "", "dw_fc1", "db_fc1", "", ""};
    static const char *const n2[8] = {"w_fc2", "b_fc2", "", "", "dw_fc2", "db_fc2", "", ""};
    if ((st = check_norm(c, &M.norm, b->w_fc1, D, op, seg)) ||
        (st = check_proj(c, &M.fc1, M.swiglu ? 2 * F : F, D, op, seg, n1)) || (st = check_proj(c, &M.fc2, D, F, op, seg, n2)))
        return st;
    mlp_seg *p = malloc(sizeof *p);
    if (!p) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    *p = M;
    return gpucore_ckpt_add_segment(c, name, mlp_fwd, mlp_bwd, p, free, op);
}
