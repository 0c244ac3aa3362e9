/*
 * forward.c — inference: the RoPE tables (rope_theta and Llama-3 scaling, computed
 * in f32 as transformers does), the embeddings (plus GPT-2's learned positions),
 * the layers, the final norm and the head; and the KV cache, through which a
 * forward continues a sequence at its cached length without recomputing the
 * prefix.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

static gpucore_handle_pool cache_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_lm_cache));

/* inv_freq[i] = 1 / theta^(2i/d) in f32, then Llama-3's rescaling of the low
 * frequencies (transformers' _compute_llama3_parameters). */
static void inv_freqs(const lm_config *c, float *inv, int64_t half)
{
    int64_t d = c->head_dim;
    for (int64_t i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)d;
        inv[i] = 1.0f / powf((float)c->rope_theta, e);
    }
    if (!c->rope_llama3) return;
    float factor = (float)c->rs_factor, lo = (float)c->rs_low, hi = (float)c->rs_high, old = (float)c->rs_orig;
    float low_wl = old / lo, high_wl = old / hi;
    for (int64_t i = 0; i < half; i++) {
        float wl = 2.0f * (float)M_PI / inv[i];
        float f = wl > low_wl ? inv[i] / factor : inv[i];
        float smooth = (old / wl - lo) / (hi - lo);
        float smoothed = (1.0f - smooth) * f / factor + smooth * f;
        if (!(wl < high_wl) && !(wl > low_wl)) f = smoothed;
        inv[i] = f;
    }
}

gpucore_status lm_rope_tables(gpucore_lm *lm)
{
    const lm_config *c = &lm->cfg;
    if (!(c->rope_theta > 0)) return GPUCORE_OK;
    int64_t half = c->head_dim / 2, P = c->max_pos;
    float *inv = malloc((size_t)half * sizeof *inv);
    float *cs = malloc((size_t)(P * half) * sizeof *cs), *sn = malloc((size_t)(P * half) * sizeof *sn);
    gpucore_status st = GPUCORE_OK;
    if (!inv || !cs || !sn) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory for RoPE");
    if (!st) {
        inv_freqs(c, inv, half);
        for (int64_t p = 0; p < P; p++)
            for (int64_t i = 0; i < half; i++) {
                float a = inv[i] * (float)p;  /* f32 product, as the reference */
                cs[p * half + i] = (float)cos((double)a);
                sn[p * half + i] = (float)sin((double)a);
            }
        int64_t shape[2] = {P, half};
        st = gpucore_tensor_create(lm->ctx, GPUCORE_F32, 2, shape, &lm->rope_cos);
        if (!st) st = gpucore_tensor_create(lm->ctx, GPUCORE_F32, 2, shape, &lm->rope_sin);
        if (!st) st = gpucore_copy_from_host(lm->rope_cos, cs, P * half * 4);
        if (!st) st = gpucore_copy_from_host(lm->rope_sin, sn, P * half * 4);
    }
    free(inv); free(cs); free(sn);
    if (st) { lm_destroy_tensor(&lm->rope_cos); lm_destroy_tensor(&lm->rope_sin); }
    return st;
}

gpucore_status lm_embed(gpucore_lm *lm, const gpucore_tensor *ids, int64_t pos0, gpucore_tensor **x0,
                        gpucore_tensor **pos_ids, gpucore_stream *s)
{
    int64_t B = ids->shape[0], T = ids->shape[1], D = lm->cfg.hidden;
    int64_t shape[3] = {B, T, D};
    gpucore_tensor *pos = NULL, *pe = NULL;
    *x0 = NULL;
    if (pos_ids) *pos_ids = NULL;
    gpucore_status st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 3, shape, x0);
    if (!st) st = gpucore_embedding(*x0, lm->wte, ids, s);
    if (!st && lm->wpe) {
        int64_t *p = malloc((size_t)T * sizeof *p);
        if (!p) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory");
        for (int64_t t = 0; p && t < T; t++) p[t] = pos0 + t;
        int64_t pshape[2] = {T, D};
        if (!st) st = gpucore_tensor_create(lm->ctx, GPUCORE_I64, 1, &T, &pos);
        if (!st) st = gpucore_copy_from_host(pos, p, T * 8);
        free(p);
        if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, pshape, &pe);
        if (!st) st = gpucore_embedding(pe, lm->wpe, pos, s);
        if (!st) st = gpucore_axpy(*x0, 1.0, pe, s);
    }
    gpucore_tensor_destroy(pe);
    if (!st && pos_ids) { *pos_ids = pos; pos = NULL; }
    gpucore_tensor_destroy(pos);
    if (st) lm_destroy_tensor(x0);
    return st;
}

const gpucore_tensor *lm_head_weight(const gpucore_lm *lm)
{
    return lm->head ? lm->head : lm->wte;
}

gpucore_status lm_head_forward(gpucore_lm *lm, const gpucore_tensor *h, gpucore_tensor **logits, gpucore_stream *s)
{
    int64_t shape[3] = {h->shape[0], h->shape[1], lm->cfg.vocab};
    gpucore_status st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 3, shape, logits);
    if (!st && lm->head_q.wq && shape[0] * shape[1] <= LM_QHEAD_MAX_ROWS) /* a decode step: the file's blocks */
        st = gpucore_qlinear_forward(h, &lm->head_q.q, NULL, GPUCORE_ACT_NONE, *logits, NULL, s);
    else if (!st)
        st = gpucore_linear_forward(h, lm_head_weight(lm), NULL, GPUCORE_ACT_NONE, *logits, NULL, s);
    if (st) lm_destroy_tensor(logits);
    return st;
}

/* Embeddings, layers, final norm: the normed hidden states [B, T, D]. */
gpucore_status lm_run_layers(gpucore_lm *lm, const gpucore_tensor *ids, const lm_run *run, gpucore_tensor **h)
{
    gpucore_stream *s = NULL;
    gpucore_tensor *x = NULL, *y = NULL;
    gpucore_status st = lm_embed(lm, ids, run ? run->pos0 : 0, &x, NULL, s);
    for (int64_t i = 0; i < lm->cfg.layers && !st; i++) {
        st = lm_attention_forward(&lm->layer[i], NULL, run, x, &y, s);
        gpucore_tensor_destroy(x);
        x = y;
        y = NULL;
        if (st) break;
        st = lm_mlp_forward(&lm->layer[i], NULL, x, &y, s);
        gpucore_tensor_destroy(x);
        x = y;
        y = NULL;
    }
    if (!st) st = lm_final_norm_forward(lm, NULL, x, &y, s);
    gpucore_tensor_destroy(x);
    *h = st ? NULL : y;
    if (st) gpucore_tensor_destroy(y);
    return st;
}

gpucore_status gpucore_lm_forward(gpucore_lm *lm, const gpucore_tensor *input_ids, gpucore_tensor **logits)
{
    const char *op = "gpucore_lm_forward";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!logits) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: logits is NULL", op);
    *logits = NULL;
    if ((st = lm_check_ids(lm, input_ids, "input_ids", op))) return st;
    if ((st = lm_check_length(lm, input_ids->shape[1], op))) return st;
    gpucore_tensor *h = NULL;
    st = lm_run_layers(lm, input_ids, NULL, &h);
    if (!st) st = lm_head_forward(lm, h, logits, NULL);
    gpucore_tensor_destroy(h);
    return st;
}

gpucore_status gpucore_lm_forward_host(gpucore_lm *lm, const int64_t *input_ids, int64_t batch, int64_t seq,
                                       gpucore_tensor **logits)
{
    const char *op = "gpucore_lm_forward_host";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    gpucore_tensor *ids = NULL;
    if ((st = lm_ids_from_host(lm, input_ids, batch, seq, op, &ids))) return st;
    st = gpucore_lm_forward(lm, ids, logits);
    gpucore_tensor_destroy(ids);
    return st;
}

/* ---- the KV cache ---- */

static gpucore_status check_cache(const gpucore_lm_cache *c, const char *op)
{
    if (!c) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the cache is NULL", op);
    if (c->magic != LM_CACHE_MAGIC)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the cache handle was destroyed or never created", op);
    return GPUCORE_OK;
}

static void cache_free(gpucore_lm_cache *c)
{
    for (int64_t i = 0; c->k && i < c->lm_layers; i++) { gpucore_tensor_destroy(c->k[i]); gpucore_tensor_destroy(c->v[i]); }
    free(c->k);
    free(c->v);
    c->magic = GPUCORE_MAGIC_DEAD;
    gpucore_handle_release(&cache_pool, c);
}

gpucore_status gpucore_lm_cache_create(gpucore_lm *lm, int64_t batch, int64_t max_len, gpucore_lm_cache **out)
{
    const char *op = "gpucore_lm_cache_create";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    if (batch < 1 || max_len < 1 || batch > ((int64_t)1 << 24))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and max_len (%lld) must be >= 1", op,
                                 (long long)batch, (long long)max_len);
    if (max_len > lm->cfg.max_pos)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: max_len %lld exceeds max_position_embeddings (%lld)",
                                 op, (long long)max_len, (long long)lm->cfg.max_pos);
    gpucore_lm_cache *c = gpucore_handle_alloc(&cache_pool);
    if (!c) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    c->magic = LM_CACHE_MAGIC;
    c->lm = lm;
    c->batch = batch;
    c->max_len = max_len;
    c->lm_layers = lm->cfg.layers;
    c->k = calloc((size_t)c->lm_layers, sizeof *c->k);
    c->v = calloc((size_t)c->lm_layers, sizeof *c->v);
    if (!c->k || !c->v) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    int64_t shape[4] = {batch, lm->cfg.kv_heads, max_len, lm->cfg.head_dim};
    for (int64_t i = 0; i < c->lm_layers && !st; i++) {
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 4, shape, &c->k[i]);
        if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 4, shape, &c->v[i]);
    }
    if (st) { cache_free(c); return st; }
    *out = c;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_cache_destroy(gpucore_lm_cache *cache)
{
    if (!cache) return GPUCORE_OK;
    gpucore_status st = check_cache(cache, "gpucore_lm_cache_destroy");
    if (st) return st;
    cache_free(cache);
    return GPUCORE_OK;
}

int64_t gpucore_lm_cache_length(const gpucore_lm_cache *cache)
{
    if (!cache || cache->magic != LM_CACHE_MAGIC) return -1;
    return cache->len;
}

gpucore_status gpucore_lm_cache_reset(gpucore_lm_cache *cache)
{
    gpucore_status st = check_cache(cache, "gpucore_lm_cache_reset");
    if (st) return st;
    cache->len = 0;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_forward_cached(gpucore_lm *lm, gpucore_lm_cache *cache, const gpucore_tensor *input_ids,
                                         int last_only, gpucore_tensor **logits)
{
    const char *op = "gpucore_lm_forward_cached";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (logits) *logits = NULL;
    if ((st = check_cache(cache, op))) return st;
    if (cache->lm != lm) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the cache was made for another model", op);
    if ((st = lm_check_ids(lm, input_ids, "input_ids", op))) return st;
    int64_t B = input_ids->shape[0], T = input_ids->shape[1];
    if (B != cache->batch)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: input_ids has batch %lld but the cache %lld", op,
                                 (long long)B, (long long)cache->batch);
    if (cache->len + T > cache->max_len)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %lld cached + %lld new positions exceed the cache's "
                                 "max_len %lld", op, (long long)cache->len, (long long)T, (long long)cache->max_len);
    if ((st = lm_check_length(lm, cache->len + T, op))) return st;
    lm_run run = {cache, cache->len};
    gpucore_tensor *h = NULL, *last = NULL, *hv = NULL;
    st = lm_run_layers(lm, input_ids, &run, &h);
    if (!st) cache->len += T;
    if (!st && logits) {
        if (last_only && T > 1) {
            int64_t shape[3] = {B, 1, lm->cfg.hidden};
            st = gpucore_tensor_slice(h, 1, T - 1, T, 1, &hv);
            if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 3, shape, &last);
            if (!st) st = gpucore_copy(last, hv, NULL);
        }
        if (!st) st = lm_head_forward(lm, last ? last : h, logits, NULL);
    }
    gpucore_tensor_destroy(hv);
    gpucore_tensor_destroy(last);
    gpucore_tensor_destroy(h);
    return st;
}
