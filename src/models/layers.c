/*
 * layers.c — one decoder layer as two residual segments, forward and backward:
 *   attention: y = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = norm1(x)
 *   MLP:       y = x + down(silu(gate(n)) * up(n))  or  c_proj(gelu_tanh(c_fc(n))) (GPT-2), n = norm2(x)
 * and the final norm as a third kind. The same forward code serves inference
 * (call NULL: nothing saved, optionally reading and extending a KV cache) and the
 * checkpoint executor (call given: tensors saved for the backward, which the
 * executor keeps or recomputes as its policy says; LoRA dropout draws its Philox
 * counters through gpucore_ckpt_rng so recompute and backward replay the mask).
 * Every linear may carry a LoRA adapter (gpucore_lora_*), else gpucore_linear_*.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

#define CHK(x) do { st = (x); if (st) goto done; } while (0)

static gpucore_status save(gpucore_ckpt_call *call, const gpucore_tensor *t)
{
    return call ? gpucore_ckpt_save(call, t) : GPUCORE_OK;
}

/* A new tensor of x's shape with the last dim replaced. */
static gpucore_status like_last(const gpucore_tensor *x, int dtype, int64_t last, gpucore_tensor **out)
{
    int64_t shape[GPUCORE_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = last;
    return gpucore_tensor_create(x->ctx, (gpucore_dtype)dtype, x->ndim, shape, out);
}

/* [B, nh, T, hd] view of a [B, T, row] tensor, starting at column col. */
static gpucore_status heads_view(gpucore_tensor *t, int64_t nh, int64_t hd, int64_t col, gpucore_tensor **out)
{
    int64_t B = t->shape[0], T = t->shape[1], row = t->shape[2], off = 0;
    gpucore_status st = gpucore_tensor_storage_offset(t, &off);
    if (st) return st;
    int64_t shape[4] = {B, nh, T, hd}, strides[4] = {T * row, hd, row, 1};
    return gpucore_tensor_as_strided(t, 4, shape, strides, off + col, out);
}

/* LoRA options of l for this call: dropout only while training, its counters from the executor. */
static gpucore_status lora_opts(gpucore_lm *lm, lm_linear *l, gpucore_ckpt_call *call, const gpucore_tensor *x,
                                gpucore_lora_options *o)
{
    gpucore_lora_options_init(o);
    if (l->wq) o->w_quant = &l->q;
    if (!l->la) return GPUCORE_OK;
    o->scale = lm->lora_alpha / (double)lm->lora_r;
    if (call && lm->training && lm->lora_dropout > 0) {
        o->dropout_p = lm->lora_dropout;
        return gpucore_ckpt_rng(call, gpucore_random_offset_advance(gpucore_tensor_numel(x), GPUCORE_UNIFORM),
                                &o->seed, &o->offset);
    }
    return GPUCORE_OK;
}

/* y = l(x); *xa: the adapter's x·Aᵀ (to save) or NULL without an adapter. */
static gpucore_status lin_fwd(gpucore_lm *lm, lm_linear *l, gpucore_ckpt_call *call, const gpucore_tensor *x,
                              gpucore_tensor **y, gpucore_tensor **xa, gpucore_stream *s)
{
    *y = NULL;
    *xa = NULL;
    gpucore_status st = like_last(x, x->dtype, l->out, y);
    if (st) return st;
    if (!l->la && l->wq) {
        st = gpucore_qlinear_forward(x, &l->q, l->b, GPUCORE_ACT_NONE, *y, NULL, s);
    } else if (!l->la) {
        st = gpucore_linear_forward(x, l->w, l->b, GPUCORE_ACT_NONE, *y, NULL, s);
    } else {
        gpucore_lora_options o;
        st = lora_opts(lm, l, call, x, &o);
        if (!st && call) st = like_last(x, x->dtype, lm->lora_r, xa);
        if (!st) st = gpucore_lora_forward(*y, *xa, x, l->w, l->b, l->la, l->lb, &o, s);
    }
    if (st) { lm_destroy_tensor(y); lm_destroy_tensor(xa); }
    return st;
}

/* Backward of y = l(x): *dx (new, or NULL when want_dx is 0) and l's gradients. */
static gpucore_status lin_bwd(lm_linear *l, const gpucore_lora_options *o, const gpucore_tensor *x,
                              const gpucore_tensor *dy, const gpucore_tensor *xa, int want_dx, gpucore_tensor **dx,
                              gpucore_stream *s)
{
    *dx = NULL;
    gpucore_status st = GPUCORE_OK;
    if (want_dx && (st = like_last(x, x->dtype, l->in, dx))) return st;
    if (l->la) st = gpucore_lora_backward(*dx, l->dla, l->dlb, dy, x, l->w, l->la, l->lb, xa, o, s);
    else if (l->wq) st = *dx ? gpucore_qlinear_backward_data(dy, &l->q, 0.0, *dx, s) : GPUCORE_OK;
    else if (*dx || l->dw) st = gpucore_linear_backward(dy, x, l->w, NULL, *dx, l->dw, l->dw ? l->db : NULL, s);
    if (st) lm_destroy_tensor(dx);
    return st;
}

/* acc += t (t destroyed); acc NULL takes t. */
static gpucore_status accumulate(gpucore_tensor **acc, gpucore_tensor **t, gpucore_stream *s)
{
    if (!*t) return GPUCORE_OK;
    if (!*acc) { *acc = *t; *t = NULL; return GPUCORE_OK; }
    gpucore_status st = gpucore_axpy(*acc, 1.0, *t, s);
    lm_destroy_tensor(t);
    return st;
}

/* n = norm(x); with call, saves x, rstd, mean (rstd again for RMSNorm), n as 0..3. */
static gpucore_status norm_fwd(gpucore_lm *lm, gpucore_ckpt_call *call, const gpucore_tensor *x,
                               const gpucore_tensor *w, const gpucore_tensor *b, gpucore_tensor **n, gpucore_stream *s)
{
    gpucore_tensor *mean = NULL, *rstd = NULL;
    gpucore_status st = GPUCORE_OK;
    *n = NULL;
    int64_t rows = gpucore_tensor_numel(x) / x->shape[x->ndim - 1];
    CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, x->ndim, x->shape, n));
    if (call) {
        CHK(gpucore_tensor_create(x->ctx, GPUCORE_F32, 1, &rows, &rstd));
        if (lm->cfg.layer_norm) CHK(gpucore_tensor_create(x->ctx, GPUCORE_F32, 1, &rows, &mean));
    }
    if (lm->cfg.layer_norm) CHK(gpucore_layer_norm(*n, mean, rstd, x, w, b, lm->cfg.eps, s));
    else CHK(gpucore_rms_norm(*n, rstd, x, w, lm->cfg.eps, s));
    CHK(save(call, x));
    CHK(save(call, rstd));
    CHK(save(call, mean ? mean : rstd));
    CHK(save(call, *n));
done:;
    lm_destroy_tensor(&mean);
    lm_destroy_tensor(&rstd);
    if (st) lm_destroy_tensor(n);
    return st;
}

/* dx = norm'(dn) (dx may be NULL: only the weight gradients). */
static gpucore_status norm_bwd(gpucore_lm *lm, gpucore_ckpt_call *call, const gpucore_tensor *dn, gpucore_tensor *dx,
                               const gpucore_tensor *w, gpucore_tensor *dw, gpucore_tensor *db, gpucore_stream *s)
{
    gpucore_tensor *x, *rstd, *mean;
    gpucore_status st;
    if ((st = gpucore_ckpt_saved(call, 0, &x)) || (st = gpucore_ckpt_saved(call, 1, &rstd)) ||
        (st = gpucore_ckpt_saved(call, 2, &mean)))
        return st;
    if (!dx && !dw) return GPUCORE_OK;
    if (lm->cfg.layer_norm) return gpucore_layer_norm_backward(dx, dw, db, dn, x, mean, rstd, w, s);
    return gpucore_rms_norm_backward(dx, dw, dn, x, rstd, w, s);
}

/* ---- attention ---- */

/* Additive mask [T, P+T] letting position P+i see keys 0..P+i (a chunk after a cached prefix). */
static gpucore_status chunk_mask(gpucore_lm *lm, int64_t P, int64_t T, gpucore_tensor **out)
{
    int64_t shape[2] = {T, P + T};
    float *m = malloc((size_t)(T * (P + T)) * sizeof *m);
    if (!m) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory for a mask");
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < P + T; j++) m[i * (P + T) + j] = j <= P + i ? 0.0f : -INFINITY;
    gpucore_status st = gpucore_tensor_create(lm->ctx, GPUCORE_F32, 2, shape, out);
    if (!st) st = gpucore_copy_from_host(*out, m, T * (P + T) * 4);
    free(m);
    if (st) lm_destroy_tensor(out);
    return st;
}

/* Write [B, Hkv, T, hd] into the cache at pos0 and view the first pos0+T positions. */
static gpucore_status cache_append(gpucore_tensor *cache, const gpucore_tensor *src, int64_t pos0, int64_t T,
                                   gpucore_tensor **all, gpucore_stream *s)
{
    int64_t B = cache->shape[0], H = cache->shape[1], M = cache->shape[2], hd = cache->shape[3];
    int64_t strides[4] = {H * M * hd, M * hd, hd, 1};
    int64_t shape[4] = {B, H, T, hd};
    gpucore_tensor *dst = NULL;
    gpucore_status st = gpucore_tensor_as_strided(cache, 4, shape, strides, pos0 * hd, &dst);
    if (!st) st = gpucore_copy(dst, src, s);
    gpucore_tensor_destroy(dst);
    if (st) return st;
    shape[2] = pos0 + T;
    return gpucore_tensor_as_strided(cache, 4, shape, strides, 0, all);
}

gpucore_status lm_attention_forward(lm_layer *L, gpucore_ckpt_call *call, const lm_run *run, const gpucore_tensor *x,
                                    gpucore_tensor **y, gpucore_stream *s)
{
    gpucore_lm *lm = L->lm;
    const lm_config *c = &lm->cfg;
    int fused = c->def->fused_qkv;
    int64_t B = x->shape[0], T = x->shape[1], hd = c->head_dim, H = c->heads, Hk = c->kv_heads;
    int64_t pos0 = run ? run->pos0 : 0;
    gpucore_lm_cache *cache = run ? run->cache : NULL;
    gpucore_tensor *n = NULL, *p[3] = {NULL, NULL, NULL}, *xa[4] = {NULL, NULL, NULL, NULL};
    gpucore_tensor *q4 = NULL, *k4 = NULL, *v4 = NULL, *kall = NULL, *vall = NULL, *ao = NULL, *ao4 = NULL;
    gpucore_tensor *lse = NULL, *mask = NULL, *cs = NULL, *sn = NULL, *o = NULL;
    gpucore_status st = GPUCORE_OK;
    *y = NULL;
    CHK(norm_fwd(lm, call, x, L->n1_w, L->n1_b, &n, s));
    if (fused) {
        CHK(lin_fwd(lm, &L->attn[0], call, n, &p[0], &xa[0], s));
        CHK(heads_view(p[0], H, hd, 0, &q4));
        CHK(heads_view(p[0], Hk, hd, H * hd, &k4));
        CHK(heads_view(p[0], Hk, hd, (H + Hk) * hd, &v4));
    } else {
        for (int k = 0; k < 3; k++) CHK(lin_fwd(lm, &L->attn[k], call, n, &p[k], &xa[k], s));
        CHK(heads_view(p[0], H, hd, 0, &q4));
        CHK(heads_view(p[1], Hk, hd, 0, &k4));
        CHK(heads_view(p[2], Hk, hd, 0, &v4));
    }
    if (lm->rope_cos) {
        CHK(gpucore_tensor_slice(lm->rope_cos, 0, pos0, pos0 + T, 1, &cs));
        CHK(gpucore_tensor_slice(lm->rope_sin, 0, pos0, pos0 + T, 1, &sn));
        CHK(gpucore_rotary_embedding(q4, q4, cs, sn, 0, s));
        CHK(gpucore_rotary_embedding(k4, k4, cs, sn, 0, s));
    }
    gpucore_attention_options ao_opts;
    gpucore_attention_options_init(&ao_opts);
    const gpucore_tensor *K = k4, *V = v4;
    if (cache) {
        CHK(cache_append(cache->k[L->index], k4, pos0, T, &kall, s));
        CHK(cache_append(cache->v[L->index], v4, pos0, T, &vall, s));
        K = kall;
        V = vall;
        if (pos0 == 0) ao_opts.is_causal = T > 1;
        else if (T > 1) CHK(chunk_mask(lm, pos0, T, &mask));
    } else {
        ao_opts.is_causal = 1;
    }
    int64_t ashape[3] = {B, T, H * hd}, lshape[3] = {B, H, T};
    CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, 3, ashape, &ao));
    CHK(heads_view(ao, H, hd, 0, &ao4));
    if (call) CHK(gpucore_tensor_create(x->ctx, GPUCORE_F32, 3, lshape, &lse));
    CHK(gpucore_attention_forward(ao4, lse, q4, K, V, mask, NULL, &ao_opts, s));
    lm_linear *lo = &L->attn[fused ? 1 : 3];
    CHK(lin_fwd(lm, lo, call, ao, &o, &xa[3], s));
    CHK(gpucore_axpy(o, 1.0, x, s));
    if (call) {
        /* 4, 5, 6: q, k, v (rotated); 7: attention output; 8: lse; 9..: the adapters' x·Aᵀ in forward order */
        for (int k = 0; k < 3; k++) CHK(save(call, p[fused ? 0 : k]));
        CHK(save(call, ao));
        CHK(save(call, lse));
        for (int k = 0; k < 4; k++)
            if (xa[k]) CHK(save(call, xa[k]));
    }
    *y = o;
    o = NULL;
done:;
    gpucore_tensor *all[] = {n, p[0], p[1], p[2], xa[0], xa[1], xa[2], xa[3], q4, k4, v4, kall, vall, ao, ao4,
                             lse, mask, cs, sn, o};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    return st;
}

static gpucore_status attention_backward(lm_layer *L, gpucore_ckpt_call *call, const gpucore_tensor *dy,
                                         gpucore_tensor *dx, gpucore_stream *s)
{
    gpucore_lm *lm = L->lm;
    const lm_config *c = &lm->cfg;
    int fused = c->def->fused_qkv;
    int nl = lm_arch_n_attn(c->def);
    gpucore_tensor *x, *n, *p[3], *ao, *lse, *xa[4] = {NULL, NULL, NULL, NULL};
    gpucore_tensor *dao = NULL, *d[3] = {NULL, NULL, NULL}, *dqkv = NULL, *dh = NULL, *tmp = NULL;
    gpucore_tensor *q4 = NULL, *k4 = NULL, *v4 = NULL, *ao4 = NULL, *dq4 = NULL, *dk4 = NULL, *dv4 = NULL;
    gpucore_tensor *cs = NULL, *sn = NULL;
    gpucore_lora_options o[4];
    gpucore_status st = GPUCORE_OK;
    CHK(gpucore_ckpt_saved(call, 0, &x));
    CHK(gpucore_ckpt_saved(call, 3, &n));
    for (int k = 0; k < 3; k++) CHK(gpucore_ckpt_saved(call, 4 + k, &p[k]));
    CHK(gpucore_ckpt_saved(call, 7, &ao));
    CHK(gpucore_ckpt_saved(call, 8, &lse));
    /* the adapters' options in forward order (replays their dropout counters) */
    int64_t next = 9;
    for (int k = 0; k < nl; k++) {
        lm_linear *l = &L->attn[k];
        CHK(lora_opts(lm, l, call, k == nl - 1 ? ao : n, &o[k]));
        if (l->la) CHK(gpucore_ckpt_saved(call, next++, &xa[k]));
    }
    int64_t B = x->shape[0], T = x->shape[1], hd = c->head_dim, H = c->heads, Hk = c->kv_heads;
    CHK(lin_bwd(&L->attn[nl - 1], &o[nl - 1], ao, dy, xa[nl - 1], 1, &dao, s));
    int64_t sh_q[3] = {B, T, H * hd}, sh_kv[3] = {B, T, Hk * hd};
    CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, 3, sh_q, &d[0]));
    CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, 3, sh_kv, &d[1]));
    CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, 3, sh_kv, &d[2]));
    if (fused) {
        CHK(heads_view(p[0], H, hd, 0, &q4));
        CHK(heads_view(p[0], Hk, hd, H * hd, &k4));
        CHK(heads_view(p[0], Hk, hd, (H + Hk) * hd, &v4));
    } else {
        CHK(heads_view(p[0], H, hd, 0, &q4));
        CHK(heads_view(p[1], Hk, hd, 0, &k4));
        CHK(heads_view(p[2], Hk, hd, 0, &v4));
    }
    CHK(heads_view(ao, H, hd, 0, &ao4));
    CHK(heads_view(dao, H, hd, 0, &tmp));
    CHK(heads_view(d[0], H, hd, 0, &dq4));
    CHK(heads_view(d[1], Hk, hd, 0, &dk4));
    CHK(heads_view(d[2], Hk, hd, 0, &dv4));
    gpucore_attention_options ao_opts;
    gpucore_attention_options_init(&ao_opts);
    ao_opts.is_causal = 1;
    CHK(gpucore_attention_backward(dq4, dk4, dv4, tmp, q4, k4, v4, ao4, lse, NULL, NULL, &ao_opts, s));
    lm_destroy_tensor(&tmp);
    if (lm->rope_cos) {
        CHK(gpucore_tensor_slice(lm->rope_cos, 0, 0, T, 1, &cs));
        CHK(gpucore_tensor_slice(lm->rope_sin, 0, 0, T, 1, &sn));
        CHK(gpucore_rotary_embedding_backward(dq4, dq4, cs, sn, 0, s));
        CHK(gpucore_rotary_embedding_backward(dk4, dk4, cs, sn, 0, s));
    }
    int want_dh = dx || L->dn1_w;
    if (fused) {
        int64_t sh[3] = {B, T, (H + 2 * Hk) * hd};
        CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, 3, sh, &dqkv));
        CHK(gpucore_concat(dqkv, d, 3, 2, s));
        CHK(lin_bwd(&L->attn[0], &o[0], n, dqkv, xa[0], want_dh, &dh, s));
    } else {
        for (int k = 0; k < 3; k++) {
            CHK(lin_bwd(&L->attn[k], &o[k], n, d[k], xa[k], want_dh, &tmp, s));
            CHK(accumulate(&dh, &tmp, s));
        }
    }
    if (want_dh) CHK(norm_bwd(lm, call, dh, dx, L->n1_w, L->dn1_w, L->dn1_b, s));
    if (dx) CHK(gpucore_axpy(dx, 1.0, dy, s));
done:;
    gpucore_tensor *all[] = {dao, d[0], d[1], d[2], dqkv, dh, tmp, q4, k4, v4, ao4, dq4, dk4, dv4, cs, sn};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    return st;
}

/* ---- MLP ---- */

gpucore_status lm_mlp_forward(lm_layer *L, gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                              gpucore_stream *s)
{
    gpucore_lm *lm = L->lm;
    int gelu = lm->cfg.def->mlp == LM_MLP_GELU_TANH;
    gpucore_tensor *n = NULL, *a = NULL, *b = NULL, *m = NULL, *o = NULL, *xa[3] = {NULL, NULL, NULL};
    gpucore_status st = GPUCORE_OK;
    *y = NULL;
    CHK(norm_fwd(lm, call, x, L->n2_w, L->n2_b, &n, s));
    CHK(lin_fwd(lm, &L->mlp[0], call, n, &a, &xa[0], s));
    CHK(gpucore_tensor_create(x->ctx, (gpucore_dtype)x->dtype, a->ndim, a->shape, &m));
    if (gelu) {
        CHK(gpucore_activation_forward(GPUCORE_ACT_GELU_TANH, m, a, s));
    } else {
        CHK(lin_fwd(lm, &L->mlp[1], call, n, &b, &xa[1], s));
        CHK(gpucore_glu(m, a, b, GPUCORE_GLU_SWIGLU, s));
    }
    CHK(lin_fwd(lm, &L->mlp[gelu ? 1 : 2], call, m, &o, &xa[2], s));
    CHK(gpucore_axpy(o, 1.0, x, s));
    if (call) {
        /* 4: fc / gate output; 5: up output (GPT-2: the fc output again); 6: the activation; 7..: x·Aᵀ */
        CHK(save(call, a));
        CHK(save(call, b ? b : a));
        CHK(save(call, m));
        for (int k = 0; k < 3; k++)
            if (xa[k]) CHK(save(call, xa[k]));
    }
    *y = o;
    o = NULL;
done:;
    gpucore_tensor *all[] = {n, a, b, m, o, xa[0], xa[1], xa[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    return st;
}

static gpucore_status mlp_backward(lm_layer *L, gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                   gpucore_stream *s)
{
    gpucore_lm *lm = L->lm;
    int gelu = lm->cfg.def->mlp == LM_MLP_GELU_TANH;
    gpucore_tensor *n, *a, *b, *m, *xa[3] = {NULL, NULL, NULL};
    gpucore_tensor *dm = NULL, *da = NULL, *db = NULL, *dh = NULL, *tmp = NULL;
    lm_linear *lin[3] = {&L->mlp[0], gelu ? NULL : &L->mlp[1], &L->mlp[gelu ? 1 : 2]};
    gpucore_lora_options o[3];
    gpucore_status st = GPUCORE_OK;
    CHK(gpucore_ckpt_saved(call, 3, &n));
    CHK(gpucore_ckpt_saved(call, 4, &a));
    CHK(gpucore_ckpt_saved(call, 5, &b));
    CHK(gpucore_ckpt_saved(call, 6, &m));
    int64_t next = 7;
    for (int k = 0; k < 3; k++) {
        gpucore_lora_options_init(&o[k]);
        if (!lin[k]) continue;
        CHK(lora_opts(lm, lin[k], call, k == 2 ? m : n, &o[k]));
        if (lin[k]->la) CHK(gpucore_ckpt_saved(call, next++, &xa[k]));
    }
    CHK(lin_bwd(lin[2], &o[2], m, dy, xa[2], 1, &dm, s));
    int want_dh = dx || L->dn2_w;
    if (gelu) {
        CHK(gpucore_activation_backward(GPUCORE_ACT_GELU_TANH, dm, dm, a, s));
        CHK(lin_bwd(lin[0], &o[0], n, dm, xa[0], want_dh, &dh, s));
    } else {
        CHK(gpucore_tensor_create(a->ctx, (gpucore_dtype)a->dtype, a->ndim, a->shape, &da));
        CHK(gpucore_tensor_create(a->ctx, (gpucore_dtype)a->dtype, a->ndim, a->shape, &db));
        CHK(gpucore_glu_backward(da, db, dm, a, b, GPUCORE_GLU_SWIGLU, s));
        CHK(lin_bwd(lin[0], &o[0], n, da, xa[0], want_dh, &dh, s));
        CHK(lin_bwd(lin[1], &o[1], n, db, xa[1], want_dh, &tmp, s));
        CHK(accumulate(&dh, &tmp, s));
    }
    if (want_dh) CHK(norm_bwd(lm, call, dh, dx, L->n2_w, L->dn2_w, L->dn2_b, s));
    if (dx) CHK(gpucore_axpy(dx, 1.0, dy, s));
done:;
    gpucore_tensor *all[] = {dm, da, db, dh, tmp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    return st;
}

/* ---- final norm ---- */

gpucore_status lm_final_norm_forward(gpucore_lm *lm, gpucore_ckpt_call *call, const gpucore_tensor *x,
                                     gpucore_tensor **y, gpucore_stream *s)
{
    return norm_fwd(lm, call, x, lm->nf_w, lm->nf_b, y, s);
}

/* ---- executor callbacks ---- */

gpucore_status lm_seg_attention_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                    gpucore_stream *s, void *user)
{
    return lm_attention_forward(user, call, NULL, x, y, s);
}

gpucore_status lm_seg_attention_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                    gpucore_stream *s, void *user)
{
    return attention_backward(user, call, dy, dx, s);
}

gpucore_status lm_seg_mlp_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y, gpucore_stream *s,
                              void *user)
{
    return lm_mlp_forward(user, call, x, y, s);
}

gpucore_status lm_seg_mlp_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                              gpucore_stream *s, void *user)
{
    return mlp_backward(user, call, dy, dx, s);
}

gpucore_status lm_seg_norm_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y, gpucore_stream *s,
                               void *user)
{
    return lm_final_norm_forward(user, call, x, y, s);
}

gpucore_status lm_seg_norm_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                               gpucore_stream *s, void *user)
{
    gpucore_lm *lm = user;
    return norm_bwd(lm, call, dy, dx, lm->nf_w, lm->dnf_w, lm->dnf_b, s);
}
