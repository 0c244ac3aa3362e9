/*
 * generate.c — token generation with a KV cache: one prefill over the prompt,
 * then one forward of one token per step (the prefix is never recomputed).
 * Choosing the next token happens on the host from the last position's f32
 * logits: greedy argmax (the first maximum, as torch.argmax), or transformers'
 * temperature / top-k / top-p warpers followed by an inverse-CDF draw from the
 * Philox uniform of (seed, step·batch + row), so every backend draws the same.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"
#include "philox.h"

typedef struct sampler {
    int do_sample;
    double temperature, top_p;
    int64_t top_k, vocab;
    uint64_t seed;
    double *work, *sorted;
} sampler;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int64_t argmax(const float *l, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[best] || (isnan(l[i]) && !isnan(l[best]))) best = i;
    return best;
}

/* One draw from row l (V f32 logits) with uniform u in [0, 1). */
static int64_t sample_row(sampler *sp, const float *l, double u)
{
    int64_t V = sp->vocab;
    double *w = sp->work, *srt = sp->sorted;
    for (int64_t i = 0; i < V; i++) w[i] = (double)l[i] / sp->temperature;
    if (sp->top_k > 0 && sp->top_k < V) {
        memcpy(srt, w, (size_t)V * sizeof *srt);
        qsort(srt, (size_t)V, sizeof *srt, cmp_double);
        double kth = srt[V - sp->top_k];
        for (int64_t i = 0; i < V; i++)
            if (w[i] < kth) w[i] = -INFINITY;
    }
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) mx = w[i] > mx ? w[i] : mx;
    if (sp->top_p < 1.0) {
        /* ascending; drop the tokens whose cumulative probability stays <= 1 - top_p, the largest always kept */
        memcpy(srt, w, (size_t)V * sizeof *srt);
        qsort(srt, (size_t)V, sizeof *srt, cmp_double);
        double z = 0, cum = 0, cut = -INFINITY;
        for (int64_t i = 0; i < V; i++) z += exp(srt[i] - mx);
        for (int64_t i = 0; i < V - 1; i++) {
            cum += exp(srt[i] - mx) / z;
            if (cum <= 1.0 - sp->top_p) cut = srt[i];
            else break;
        }
        /* every value <= cut goes (ties with a kept value at the boundary are removed as in the sorted order) */
        if (cut > -INFINITY)
            for (int64_t i = 0; i < V; i++)
                if (w[i] <= cut) w[i] = -INFINITY;
    }
    double z = 0;
    for (int64_t i = 0; i < V; i++) z += w[i] > -INFINITY ? exp(w[i] - mx) : 0;
    double target = u * z, cum = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < V; i++) {
        if (!(w[i] > -INFINITY)) continue;
        cum += exp(w[i] - mx);
        last = i;
        if (cum > target) return i;
    }
    return last >= 0 ? last : argmax(l, V);
}

/* generate's and sample_token's checks of the sampling parameters. */
static gpucore_status check_sampling(const char *op, int do_sample, double temperature, int64_t top_k, double top_p)
{
    if (do_sample && (!(temperature > 0) || !isfinite(temperature) || top_k < 0 || !(top_p > 0) || top_p > 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: sampling needs temperature > 0, top_k >= 0 and "
                                 "top_p in (0, 1] (got %g, %lld, %g)", op, temperature, (long long)top_k, top_p);
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_sample_token(const float *logits, int64_t vocab, int do_sample, double temperature,
                                       int64_t top_k, double top_p, uint64_t seed, uint64_t counter, int64_t *token)
{
    const char *op = "gpucore_lm_sample_token";
    if (!logits || !token) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: logits or token is NULL", op);
    if (vocab < 1 || vocab > ((int64_t)1 << 40))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: vocab (%lld) must be >= 1", op, (long long)vocab);
    gpucore_status st = check_sampling(op, do_sample, temperature, top_k, top_p);
    if (st) return st;
    if (!do_sample) {
        *token = argmax(logits, vocab);
        return GPUCORE_OK;
    }
    sampler sp = {1, temperature, top_p, top_k, vocab, seed, malloc((size_t)vocab * sizeof(double)),
                  malloc((size_t)vocab * sizeof(double))};
    if (!sp.work || !sp.sorted) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    else *token = sample_row(&sp, logits, gpucore_philox_uniform(seed, 0, counter));
    free(sp.work);
    free(sp.sorted);
    return st;
}

/* The last position's logits [B, 1, V] to host f32 rows. */
static gpucore_status logits_to_host(gpucore_lm *lm, gpucore_tensor *logits, float *host)
{
    gpucore_tensor *f = NULL;
    gpucore_status st = GPUCORE_OK;
    if (logits->dtype != GPUCORE_F32) {
        st = gpucore_tensor_create(lm->ctx, GPUCORE_F32, logits->ndim, logits->shape, &f);
        if (!st) st = gpucore_cast(f, logits, NULL);
    }
    if (!st) st = gpucore_copy_to_host(host, gpucore_tensor_numel(logits) * 4, f ? f : logits);
    gpucore_tensor_destroy(f);
    return st;
}

gpucore_status gpucore_lm_generate(gpucore_lm *lm, const int64_t *input_ids, int64_t batch, int64_t prompt_len,
                                   int64_t max_new_tokens, int do_sample, double temperature, int64_t top_k,
                                   double top_p, uint64_t seed, int64_t eos_token_id, int64_t pad_token_id,
                                   int64_t *output_ids, int64_t *out_len)
{
    const char *op = "gpucore_lm_generate";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!input_ids || !output_ids || !out_len)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: input_ids, output_ids or out_len is NULL", op);
    if (batch < 1 || prompt_len < 1 || max_new_tokens < 0 || max_new_tokens > lm->cfg.max_pos ||
        batch > ((int64_t)1 << 24))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and prompt_len (%lld) must be >= 1 and "
                                 "max_new_tokens (%lld) >= 0", op, (long long)batch, (long long)prompt_len,
                                 (long long)max_new_tokens);
    if ((st = check_sampling(op, do_sample, temperature, top_k, top_p))) return st;
    if (eos_token_id >= lm->cfg.vocab || pad_token_id >= lm->cfg.vocab)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: eos_token_id / pad_token_id outside the vocabulary", op);
    int64_t total = prompt_len + max_new_tokens;
    if ((st = lm_check_length(lm, total, op))) return st;
    gpucore_tensor *ids = NULL, *logits = NULL;
    gpucore_lm_cache *cache = NULL;
    int64_t V = lm->cfg.vocab, cur = prompt_len;
    int64_t *seq = malloc((size_t)(batch * total) * sizeof *seq), *step_ids = malloc((size_t)batch * sizeof *step_ids);
    float *host = malloc((size_t)(batch * V) * sizeof *host);
    char *done = calloc((size_t)batch, 1);
    sampler sp = {do_sample, temperature, top_p, top_k, V, seed, NULL, NULL};
    if (do_sample) {
        sp.work = malloc((size_t)V * sizeof *sp.work);
        sp.sorted = malloc((size_t)V * sizeof *sp.sorted);
    }
    if (!seq || !step_ids || !host || !done || (do_sample && (!sp.work || !sp.sorted))) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        goto out;
    }
    for (int64_t b = 0; b < batch; b++) memcpy(seq + b * total, input_ids + b * prompt_len, (size_t)prompt_len * 8);
    if (max_new_tokens == 0) goto finish;
    if ((st = gpucore_lm_cache_create(lm, batch, total, &cache))) goto out;
    if ((st = lm_ids_from_host(lm, input_ids, batch, prompt_len, op, &ids))) goto out;
    int64_t fill = pad_token_id >= 0 ? pad_token_id : eos_token_id;
    for (int64_t step = 0; step < max_new_tokens; step++) {
        st = gpucore_lm_forward_cached(lm, cache, ids, 1, &logits);
        lm_destroy_tensor(&ids);
        if (!st) st = logits_to_host(lm, logits, host);
        lm_destroy_tensor(&logits);
        if (st) goto out;
        int all_done = 1;
        for (int64_t b = 0; b < batch; b++) {
            int64_t tok;
            if (done[b]) tok = fill;
            else if (!do_sample) tok = argmax(host + b * V, V);
            else tok = sample_row(&sp, host + b * V, gpucore_philox_uniform(seed, 0, (uint64_t)(step * batch + b)));
            if (eos_token_id >= 0 && tok == eos_token_id) done[b] = 1;
            all_done &= done[b];
            seq[b * total + cur] = tok;
            step_ids[b] = tok;
        }
        cur++;
        if (all_done && eos_token_id >= 0) break;
        if (step + 1 < max_new_tokens && (st = lm_ids_from_host(lm, step_ids, batch, 1, op, &ids))) goto out;
    }
finish:
    for (int64_t b = 0; b < batch; b++) memcpy(output_ids + b * cur, seq + b * total, (size_t)cur * 8);
    *out_len = cur;
out:
    gpucore_tensor_destroy(ids);
    gpucore_tensor_destroy(logits);
    gpucore_lm_cache_destroy(cache);
    free(seq); free(step_ids); free(host); free(done); free(sp.work); free(sp.sorted);
    return st;
}
