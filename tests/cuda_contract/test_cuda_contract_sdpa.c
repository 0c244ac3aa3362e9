/*
 * test_cuda_contract_sdpa.c — the attention forward through cuDNN's SDPA graph
 * (src/backend/cuda/cuda_attention_cudnn.c) on the contract module, whose cuDNN
 * stand-in checks every node and executes the graph (standin_cudnn_sdpa.c):
 * results against a float64 reference (causal, key lengths with an empty batch
 * entry, an additive mask with a fully masked row, odd lengths, head_dim 64/128,
 * bf16/f16, a [B, S, H, D] layout, the three engine modes), and the fallback to
 * the kernel, counted by reason, where cuDNN declines (f32, head_dim, boolean mask,
 * dropout, a graph the stand-in's engines refuse); grouped K/V heads (GQA, MQA) on cuDNN. The stand-in gives
 * engines only to cudnn-frontend's SDPA pattern, so every engine case also checks the graphs are that pattern; backward calls
 * wanting some gradients; more shapes than the plan cache holds; the stand-in refusing our graphs with any two
 * neighbouring nodes out of cudnn-frontend's order; threads sharing a plan, and a cached shape running while
 * another thread's long plan build is under way. Suite cuda-contract.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "contract_test.h"
#include "numeric.h"

#define counter standin_counter_

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) /* in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

typedef struct acase {
    gpucore_dtype dt;
    int64_t B, H, Hkv, Sq, Sk, D;
    int causal, lens, mask, bool_mask, bshd; /* bshd: q/k/v/out are [B, S, H, D] buffers seen as [B, H, S, D] */
    int algo;
    double dropout;
} acase;

static double rounded(gpucore_dtype dt, double v)
{
    float f = (float)v;
    if (dt == GPUCORE_BF16) return gpucore_bf16_to_f32(gpucore_f32_to_bf16(f));
    if (dt == GPUCORE_F16) return gpucore_f16_to_f32(gpucore_f32_to_f16(f));
    return f;
}

/* A [B, Hn, S, D] operand: random values rounded to dt (host copy in double, logical order), on the device as a
 * packed [B, Hn, S, D] tensor or a [B, S, Hn, D] one permuted. */
static gpucore_tensor *operand(gpucore_context *ctx, const acase *c, int64_t Hn, int64_t S, double *host, int random,
                               gpucore_tensor **base)
{
    const int64_t B = c->B, D = c->D, n = B * Hn * S * D;
    const int64_t shape[4] = {B, c->bshd ? S : Hn, c->bshd ? Hn : S, D};
    CHECK_OK(gpucore_tensor_create(ctx, c->dt, 4, shape, base));
    size_t es = c->dt == GPUCORE_F32 ? 4 : 2;
    unsigned char *raw = calloc((size_t)n, es);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hn; h++)
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++) {
                    double v = random ? rounded(c->dt, urand()) : 0.0;
                    host[((b * Hn + h) * S + s) * D + d] = v;
                    int64_t off = c->bshd ? ((b * S + s) * Hn + h) * D + d : ((b * Hn + h) * S + s) * D + d;
                    float f = (float)v;
                    if (c->dt == GPUCORE_F32) memcpy(raw + off * 4, &f, 4);
                    else {
                        uint16_t u = c->dt == GPUCORE_BF16 ? gpucore_f32_to_bf16(f) : gpucore_f32_to_f16(f);
                        memcpy(raw + off * 2, &u, 2);
                    }
                }
    CHECK_OK(gpucore_copy_from_host(*base, raw, n * (int64_t)es));
    free(raw);
    if (!c->bshd) return *base;
    gpucore_tensor *view = NULL;
    const int perm[4] = {0, 2, 1, 3};
    CHECK_OK(gpucore_tensor_permute(*base, perm, &view));
    return view;
}

/* A device operand (operand()'s layout) back in logical [B, Hn, S, D] order, in double. */
static void fetch(const acase *c, gpucore_tensor *base, int64_t Hn, int64_t S, double *out)
{
    const int64_t B = c->B, D = c->D, n = B * Hn * S * D;
    size_t es = c->dt == GPUCORE_F32 ? 4 : 2;
    unsigned char *raw = malloc((size_t)n * es);
    CHECK_OK(gpucore_copy_to_host(raw, n * (int64_t)es, base));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hn; h++)
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t off = c->bshd ? ((b * S + s) * Hn + h) * D + d : ((b * Hn + h) * S + s) * D + d;
                    double v;
                    if (c->dt == GPUCORE_F32) { float f; memcpy(&f, raw + off * 4, 4); v = f; }
                    else {
                        uint16_t u;
                        memcpy(&u, raw + off * 2, 2);
                        v = c->dt == GPUCORE_BF16 ? gpucore_bf16_to_f32(u) : gpucore_f16_to_f32(u);
                    }
                    out[((b * Hn + h) * S + s) * D + d] = v;
                }
    free(raw);
}

/* Row (b, h, i) of the f64 probabilities into p[Sk] (all 0 for a row that admits no key); returns its lse. */
static double probs(const acase *c, const double *q, const double *k, const float *mh, const int32_t *lh, int64_t b,
                    int64_t h, int64_t i, double *p)
{
    const int64_t H = c->H, Hkv = c->Hkv, Sq = c->Sq, Sk = c->Sk, D = c->D, hk = h / (H / Hkv);
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j < Sk; j++) {
        double dot = 0;
        for (int64_t d = 0; d < D; d++) dot += q[((b * H + h) * Sq + i) * D + d] * k[((b * Hkv + hk) * Sk + j) * D + d];
        double bias = mh ? mh[i * Sk + j] : 0.0;
        if ((c->causal && j > i) || (c->lens && j >= lh[b])) bias = -INFINITY;
        p[j] = isinf(bias) ? -INFINITY : 0.3 * dot + bias;
        if (p[j] > m) m = p[j];
    }
    for (int64_t j = 0; j < Sk; j++) l += isinf(m) ? 0 : exp(p[j] - m);
    for (int64_t j = 0; j < Sk; j++) p[j] = l > 0 ? exp(p[j] - m) / l : 0.0;
    return l > 0 ? m + log(l) : -INFINITY;
}

/* Runs one forward and one backward; checks out, lse, dq, dk, dv against f64. */
static void run_case(gpucore_context *ctx, const acase *c, const char *name)
{
    const int64_t B = c->B, H = c->H, Hkv = c->Hkv, Sq = c->Sq, Sk = c->Sk, D = c->D;
    double *q = malloc(sizeof(double) * B * H * Sq * D), *k = malloc(sizeof(double) * B * Hkv * Sk * D);
    double *v = malloc(sizeof(double) * B * Hkv * Sk * D), *o0 = malloc(sizeof(double) * B * H * Sq * D);
    gpucore_tensor *bq, *bk, *bv, *bo, *tq, *tk, *tv, *to, *lse = NULL, *mask = NULL, *lens = NULL;
    tq = operand(ctx, c, H, Sq, q, 1, &bq);
    tk = operand(ctx, c, Hkv, Sk, k, 1, &bk);
    tv = operand(ctx, c, Hkv, Sk, v, 1, &bv);
    to = operand(ctx, c, H, Sq, o0, 0, &bo);
    const int64_t ls[1] = {B * H * Sq};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, ls, &lse));
    float *mh = NULL;
    if (c->mask || c->bool_mask) { /* [1, 1, Sq, Sk]: some -inf, and query row 1 fully masked */
        mh = malloc(sizeof(float) * Sq * Sk);
        uint8_t *mb = malloc((size_t)(Sq * Sk));
        for (int64_t i = 0; i < Sq * Sk; i++) {
            mh[i] = (i / Sk == 1 || i % 7 == 3) ? -INFINITY : (float)urand();
            if (c->bool_mask) mh[i] = isinf(mh[i]) ? -INFINITY : 0.0f;
            mb[i] = !isinf(mh[i]);
        }
        const int64_t ms[4] = {1, 1, Sq, Sk};
        CHECK_OK(gpucore_tensor_create(ctx, c->bool_mask ? GPUCORE_U8 : GPUCORE_F32, 4, ms, &mask));
        if (c->bool_mask) CHECK_OK(gpucore_copy_from_host(mask, mb, Sq * Sk));
        else CHECK_OK(gpucore_copy_from_host(mask, mh, Sq * Sk * 4));
        free(mb);
    }
    int32_t lh[8];
    if (c->lens) {
        for (int64_t b = 0; b < B; b++) lh[b] = b == 1 ? 0 : b == 2 ? (int32_t)(Sk + 7) : (int32_t)(Sk - 3 * b);
        const int64_t n1[1] = {B};
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 1, n1, &lens));
        CHECK_OK(gpucore_copy_from_host(lens, lh, B * 4));
    }
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = c->causal;
    o.algo = c->algo;
    o.scale = 0.3;
    o.dropout_p = c->dropout;
    o.seed = 7;
    CHECK_OK(gpucore_attention_forward(to, lse, tq, tk, tv, mask, lens, &o, NULL));
    float *lg = malloc(sizeof(float) * B * H * Sq);
    double *og = malloc(sizeof(double) * B * H * Sq * D), *dO = malloc(sizeof(double) * B * H * Sq * D);
    double *g[3] = {malloc(sizeof(double) * B * H * Sq * D), malloc(sizeof(double) * B * Hkv * Sk * D),
                    malloc(sizeof(double) * B * Hkv * Sk * D)};
    double *r[3] = {calloc((size_t)(B * H * Sq * D), sizeof(double)), calloc((size_t)(B * Hkv * Sk * D), sizeof(double)),
                    calloc((size_t)(B * Hkv * Sk * D), sizeof(double))};
    fetch(c, bo, H, Sq, og);
    CHECK_OK(gpucore_copy_to_host(lg, B * H * Sq * 4, lse));
    /* the backward from the forward's out and lse, with a random dout */
    gpucore_tensor *bdo, *bg[3], *tg[3];
    gpucore_tensor *tdo = operand(ctx, c, H, Sq, dO, 1, &bdo);
    tg[0] = operand(ctx, c, H, Sq, g[0], 0, &bg[0]);
    tg[1] = operand(ctx, c, Hkv, Sk, g[1], 0, &bg[1]);
    tg[2] = operand(ctx, c, Hkv, Sk, g[2], 0, &bg[2]);
    CHECK_OK(gpucore_attention_backward(tg[0], tg[1], tg[2], tdo, tq, tk, tv, to, lse, mask, lens, &o, NULL));
    fetch(c, bg[0], H, Sq, g[0]);
    fetch(c, bg[1], Hkv, Sk, g[1]);
    fetch(c, bg[2], Hkv, Sk, g[2]);
    if (c->dropout > 0) goto out; /* the kernel's own tests check dropout; here only the routing counts */
    double worst = 0, worst_lse = 0, worst_g = 0;
    int bad = 0, bad_g = 0;
    const double tol = c->dt == GPUCORE_BF16 ? 1.6e-2 : c->dt == GPUCORE_F16 ? 2e-3 : 1e-5;
    double *p = malloc(sizeof(double) * Sk), *dp = malloc(sizeof(double) * Sk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Sq; i++) {
                const int64_t hk = h / (H / Hkv), qi = ((b * H + h) * Sq + i) * D;
                double ref_lse = probs(c, q, k, mh, lh, b, h, i, p), got_lse = lg[(b * H + h) * Sq + i];
                if (isinf(ref_lse) ? !(isinf(got_lse) && got_lse < 0) : !(fabs(got_lse - ref_lse) <= 2e-5 * (1 + fabs(ref_lse))))
                    bad++;
                if (!isinf(ref_lse) && fabs(got_lse - ref_lse) > worst_lse) worst_lse = fabs(got_lse - ref_lse);
                double delta = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    const int64_t kj = ((b * Hkv + hk) * Sk + j) * D;
                    dp[j] = 0;
                    for (int64_t d = 0; d < D; d++) dp[j] += dO[qi + d] * v[kj + d];
                    delta += p[j] * dp[j];
                }
                for (int64_t j = 0; j < Sk; j++) {
                    const int64_t kj = ((b * Hkv + hk) * Sk + j) * D;
                    const double ds = 0.3 * p[j] * (dp[j] - delta);
                    for (int64_t d = 0; d < D; d++) {
                        r[0][qi + d] += ds * k[kj + d];
                        r[1][kj + d] += ds * q[qi + d];
                        r[2][kj + d] += p[j] * dO[qi + d];
                    }
                }
                for (int64_t d = 0; d < D; d++) {
                    double ref = 0;
                    for (int64_t j = 0; j < Sk; j++) ref += p[j] * v[((b * Hkv + hk) * Sk + j) * D + d];
                    double got = og[qi + d], err = fabs(got - ref);
                    if (!(err <= tol * (1 + fabs(ref)))) bad++;
                    if (err > worst || isnan(got)) worst = isnan(got) ? INFINITY : err;
                }
            }
    const int64_t gn[3] = {B * H * Sq * D, B * Hkv * Sk * D, B * Hkv * Sk * D};
    for (int t = 0; t < 3; t++)
        for (int64_t e = 0; e < gn[t]; e++) {
            double err = fabs(g[t][e] - r[t][e]);
            if (!(err <= 2 * tol * (1 + fabs(r[t][e])))) bad_g++;
            if (err > worst_g || isnan(g[t][e])) worst_g = isnan(g[t][e]) ? INFINITY : err;
        }
    CHECK(bad == 0);
    CHECK(bad_g == 0);
    if (getenv("SDPA_VERBOSE"))
        printf("  %s: worst out error %.3g, lse %.3g, gradients %.3g\n", name, worst, worst_lse, worst_g);
    if (bad || bad_g)
        fprintf(stderr, "  %s: %d forward, %d gradient elements off (worst out error %.3g, lse %.3g, gradients %.3g)\n",
                name, bad, bad_g, worst, worst_lse, worst_g);
    free(p);
    free(dp);
out:
    free(lg); free(og); free(mh); free(dO);
    for (int t = 0; t < 3; t++) { free(g[t]); free(r[t]); }
    free(q); free(k); free(v); free(o0);
    gpucore_tensor *more[] = {tdo, bdo, tg[0], tg[1], tg[2], bg[0], bg[1], bg[2]};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++) dup |= more[j] == more[i];
        if (!dup) gpucore_tensor_destroy(more[i]);
    }
    gpucore_tensor *all[] = {tq, tk, tv, to, bq, bk, bv, bo, lse, mask, lens};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        int dup = 0;
        for (size_t p = 0; p < i; p++) dup |= all[p] == all[i];
        if (all[i] && !dup) gpucore_tensor_destroy(all[i]);
    }
}

static gpucore_attention_stats stats_of(gpucore_context *ctx)
{
    gpucore_attention_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(gpucore_attention_get_stats(ctx, &st));
    return st;
}

/* The stand-in's reason for the last SDPA graph it gave no engine. */
static const char *refusal(void)
{
    return ((const char *(*)(void))sym("standin_sdpa_refusal"))();
}

/* Cases cuDNN's SDPA takes: every one runs on the stand-in's graph interpreter and matches f64. */
static void test_sdpa_engine(gpucore_context *ctx)
{
    static const acase cases[] = {
        {GPUCORE_BF16, 2, 3, 3, 37, 45, 64, 0, 0, 0, 0, 0, 0, 0},
        {GPUCORE_F16, 1, 2, 2, 33, 33, 128, 1, 0, 0, 0, 0, 0, 0},
        {GPUCORE_BF16, 3, 2, 2, 19, 29, 64, 1, 1, 0, 0, 1, 0, 0}, /* key lengths {29, 0, 36 (past Sk)}, [B, S, H, D] */
        {GPUCORE_F16, 2, 2, 2, 21, 17, 64, 0, 0, 1, 0, 0, 0, 0},  /* additive mask, query row 1 fully masked */
        {GPUCORE_F16, 1, 2, 2, 16, 24, 64, 1, 1, 1, 0, 0, 0, 0},  /* all of them at once */
        {GPUCORE_BF16, 1, 2, 2, 9, 11, 64, 0, 0, 0, 0, 0, GPUCORE_ATTN_ALGO_AUTOTUNE, 0},
        {GPUCORE_F16, 1, 1, 1, 7, 13, 128, 1, 0, 0, 0, 0, GPUCORE_ATTN_ALGO_DETERMINISTIC, 0},
        /* grouped K/V heads: dK, dV through the frontend's fullhead tensors and head reductions */
        {GPUCORE_BF16, 3, 4, 2, 19, 29, 64, 1, 1, 0, 0, 1, 0, 0}, /* GQA 4/2, key lengths, [B, S, H, D] */
        {GPUCORE_F16, 2, 3, 1, 21, 17, 64, 0, 0, 1, 0, 0, 0, 0},  /* MQA 3/1, additive mask with a dead row */
        {GPUCORE_BF16, 1, 6, 2, 9, 11, 64, 1, 0, 0, 0, 0, GPUCORE_ATTN_ALGO_DETERMINISTIC, 0},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    long before = counter("cudnn_sdpa_executed"), refused = counter("cudnn_sdpa_pattern_refused");
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "engine case %d", i);
        run_case(ctx, &cases[i], name);
        expect_clean(name);
    }
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 2 * n && st.fallback_calls == 0); /* each case: a forward and a backward */
    /* every graph is cudnn-frontend's SDPA pattern: the stand-in's heuristics refused none */
    CHECK(counter("cudnn_sdpa_pattern_refused") == refused);
    if (counter("cudnn_sdpa_pattern_refused") != refused) fprintf(stderr, "  last refusal: %s\n", refusal());
    CHECK(st.fallback_by_reason[GPUCORE_ATTN_FALLBACK_NO_ENGINE] == 0);
    /* autotune times its candidates: more executions than forwards */
    CHECK(counter("cudnn_sdpa_executed") - before > n);
    if (st.cudnn_calls != 2 * n)
        fprintf(stderr, "  %lld of %d calls on cuDNN, %lld fallbacks\n", (long long)st.cudnn_calls, 2 * n,
                (long long)st.fallback_calls);
}

/* Backward calls that want some of the gradients: cuDNN still runs the full graph (the frontend's outputs are
 * always dQ, dK, dV), the others in scratch; what is asked for is bit for bit the full backward's. */
static void test_sdpa_partial_grads(gpucore_context *ctx)
{
    const int64_t B = 2, H = 2, Sq = 13, Sk = 17, D = 64, qs[4] = {B, H, Sq, D}, ks[4] = {B, H, Sk, D};
    const int64_t ls[1] = {B * H * Sq};
    gpucore_tensor *q, *k, *v, *o, *lse, *dout, *g[3], *p[3];
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, qs, &q));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, ks, &k));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, ks, &v));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, qs, &o));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, qs, &dout));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, ls, &lse));
    gpucore_tensor *rnd[4] = {q, k, v, dout};
    for (int i = 0; i < 4; i++) CHECK_OK(gpucore_random(rnd[i], GPUCORE_UNIFORM, -1, 1, 21 + i, 0, NULL));
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, i ? ks : qs, &g[i]));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, i ? ks : qs, &p[i]));
    }
    gpucore_attention_options opt;
    gpucore_attention_options_init(&opt);
    opt.is_causal = 1;
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    CHECK_OK(gpucore_attention_forward(o, lse, q, k, v, NULL, NULL, &opt, NULL));
    CHECK_OK(gpucore_attention_backward(g[0], g[1], g[2], dout, q, k, v, o, lse, NULL, NULL, &opt, NULL));
    CHECK_OK(gpucore_attention_backward(NULL, NULL, p[2], dout, q, k, v, o, lse, NULL, NULL, &opt, NULL));
    CHECK_OK(gpucore_attention_backward(p[0], p[1], NULL, dout, q, k, v, o, lse, NULL, NULL, &opt, NULL));
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 4 && st.fallback_calls == 0);
    uint16_t *x = malloc(2 * B * H * Sk * D), *y = malloc(2 * B * H * Sk * D);
    for (int i = 0; i < 3; i++) {
        const int64_t bytes = 2 * B * H * (i ? Sk : Sq) * D;
        CHECK_OK(gpucore_copy_to_host(x, bytes, g[i]));
        CHECK_OK(gpucore_copy_to_host(y, bytes, p[i]));
        CHECK(memcmp(x, y, (size_t)bytes) == 0);
        if (memcmp(x, y, (size_t)bytes)) fprintf(stderr, "  gradient %d alone differs from the full backward's\n", i);
    }
    free(x);
    free(y);
    gpucore_tensor *all[] = {q, k, v, o, lse, dout, g[0], g[1], g[2], p[0], p[1], p[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    expect_clean("partial gradients");
}

/* More shapes than the plan cache holds (variable sequence lengths): the least recently used entries are
 * evicted, every call stays on cuDNN (none CACHE_FULL), and an evicted shape is built again when it returns. */
static void test_sdpa_cache_eviction(gpucore_context *ctx)
{
    enum { SHAPES = 270 };
    const int64_t D = 64, Sk = 8;
    gpucore_attention_options opt;
    gpucore_attention_options_init(&opt);
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    gpucore_tensor *k, *v;
    const int64_t ks[4] = {1, 1, Sk, D};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, ks, &k));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, ks, &v));
    CHECK_OK(gpucore_random(k, GPUCORE_UNIFORM, -1, 1, 3, 0, NULL));
    CHECK_OK(gpucore_random(v, GPUCORE_UNIFORM, -1, 1, 4, 0, NULL));
    long built = 0;
    for (int round = 0; round < 2; round++)
        for (int64_t sq = 1; sq <= (round ? 1 : SHAPES); sq++) { /* round 1: the first shape, evicted by now */
            const int64_t qs[4] = {1, 1, sq, D};
            gpucore_tensor *q, *o;
            CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, qs, &q));
            CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, qs, &o));
            CHECK_OK(gpucore_random(q, GPUCORE_UNIFORM, -1, 1, 5, 0, NULL));
            if (round) built = counter("cudnn_plan_finalized");
            CHECK_OK(gpucore_attention_forward(o, NULL, q, k, v, NULL, NULL, &opt, NULL));
            if (round) CHECK(counter("cudnn_plan_finalized") > built);
            gpucore_tensor_destroy(q);
            gpucore_tensor_destroy(o);
        }
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == SHAPES + 1 && st.fallback_calls == 0);
    if (st.cudnn_calls != SHAPES + 1)
        fprintf(stderr, "  %lld of %d calls on cuDNN, %lld cache-full fallbacks\n", (long long)st.cudnn_calls,
                SHAPES + 1, (long long)st.fallback_by_reason[GPUCORE_ATTN_FALLBACK_CACHE_FULL]);
    gpucore_tensor_destroy(k);
    gpucore_tensor_destroy(v);
    expect_clean("cache eviction");
}

/* cuDNN <= 9.15.0 (the stand-in reporting 9.15.0): a backward with Sk % 128 != 0 and no kv_lengths gets the
 * frontend's workaround padding mask (seq_len_q = Sq, seq_len_kv = Sk), and still matches f64; the stand-in
 * refuses that backward without it. */
static void test_sdpa_old_cudnn(gpucore_context *ctx)
{
    setenv("STANDIN_DNN_VERSION", "91500", 1);
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    long refused = counter("cudnn_sdpa_pattern_refused");
    const acase c = {GPUCORE_F16, 2, 2, 2, 23, 41, 64, 1, 0, 0, 0, 0, 0, 0}; /* a shape of its own: new plans */
    run_case(ctx, &c, "cuDNN 9.15.0");
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 2 && st.fallback_calls == 0 && counter("cudnn_sdpa_pattern_refused") == refused);
    if (st.cudnn_calls != 2) fprintf(stderr, "  cuDNN 9.15.0: %lld calls on cuDNN; %s\n", (long long)st.cudnn_calls,
                                     refusal());
    unsetenv("STANDIN_DNN_VERSION");
    expect_clean("cuDNN 9.15.0");
}

/* The stand-in gives engines only to graphs whose nodes are in cudnn-frontend's order: our forward and backward
 * with every part (bias, padding, causal; at cuDNN 9.9.0 the backward's second padding mask too, and MQA's head
 * reductions of dK and dV) run on cuDNN,
 * and the same graphs with any two neighbouring nodes exchanged (STANDIN_SDPA_SWAP=i, i = 0, 1, ...) get no
 * engine, the refusal naming the frontend's node, until i passes the longer graph (the backward); the backward
 * seen with its causal mask before sub_s_m (STANDIN_SDPA_CAUSAL_FIRST) gets none either. */
static void test_sdpa_frontend_order(gpucore_context *ctx)
{
    gpucore_log_level saved = gpucore_get_log_level();
    gpucore_set_log_level(GPUCORE_LOG_ERROR); /* the fallbacks are the point here */
    static const char *const versions[2] = {NULL, "90900"};
    int64_t sq = 2; /* every run a shape of its own: new plans, no cached refusal */
    for (int ver = 0; ver < 2; ver++) {
        if (versions[ver]) setenv("STANDIN_DNN_VERSION", versions[ver], 1);
        int swap = -1, last = 2, both = 0, one = 0;
        for (; swap < 64; swap++) {
            char val[16], name[64];
            snprintf(val, sizeof val, "%d", swap);
            if (swap >= 0) setenv("STANDIN_SDPA_SWAP", val, 1);
            const acase c = {GPUCORE_BF16, 3, ver ? 2 : 1, 1, sq++, 9, 16, 1, 1, 1, 0, 0, 0, 0}; /* 9.9.0: MQA */
            snprintf(name, sizeof name, "frontend order, swap %d%s", swap, versions[ver] ? " (cuDNN 9.9.0)" : "");
            CHECK_OK(gpucore_attention_reset_stats(ctx));
            run_case(ctx, &c, name);
            unsetenv("STANDIN_SDPA_SWAP");
            const gpucore_attention_stats st = stats_of(ctx);
            const int refused = (int)st.fallback_by_reason[GPUCORE_ATTN_FALLBACK_NO_ENGINE];
            CHECK(st.cudnn_calls + refused == 2 && st.fallback_calls == refused);
            if (swap < 0) { /* in the frontend's order: both on cuDNN */
                CHECK(refused == 0);
                if (refused) fprintf(stderr, "  %s: refused: %s\n", name, refusal());
                continue;
            }
            /* the forward is the shorter graph: both refused, then the backward alone, then neither */
            CHECK(refused <= last);
            if (refused) CHECK(strstr(refusal(), "cudnn-frontend emits") != NULL);
            if (refused > last || (refused && !strstr(refusal(), "cudnn-frontend emits")))
                fprintf(stderr, "  %s: %d graphs refused (%d before): %s\n", name, refused, last, refusal());
            both += refused == 2;
            one += refused == 1;
            last = refused;
            if (!refused) break;
        }
        CHECK(last == 0 && both >= 20 && one >= 5); /* every neighbouring pair of both graphs was tried */
        if (last || both < 20 || one < 5)
            fprintf(stderr, "  frontend order%s: %d swaps refused both graphs, %d the backward only, last %d\n",
                    versions[ver] ? " at 9.9.0" : "", both, one, last);
        if (versions[ver]) unsetenv("STANDIN_DNN_VERSION");
        expect_clean("frontend order");
    }
    /* our backward with its causal mask before sub_s_m (the order the module built before; the frontend's is
     * after): refused, the forward still on cuDNN */
    setenv("STANDIN_SDPA_CAUSAL_FIRST", "1", 1);
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    const acase c = {GPUCORE_BF16, 3, 1, 1, sq++, 9, 16, 1, 1, 1, 0, 0, 0, 0};
    run_case(ctx, &c, "causal mask before sub_s_m");
    unsetenv("STANDIN_SDPA_CAUSAL_FIRST");
    const gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 1 && st.fallback_by_reason[GPUCORE_ATTN_FALLBACK_NO_ENGINE] == 1);
    CHECK(strstr(refusal(), "the causal mask on the scores before sub_s_m") != NULL);
    if (st.cudnn_calls != 1 || !strstr(refusal(), "before sub_s_m"))
        fprintf(stderr, "  causal mask before sub_s_m: %lld calls on cuDNN; last refusal: %s\n",
                (long long)st.cudnn_calls, refusal());
    expect_clean("causal mask before sub_s_m");
    gpucore_set_log_level(saved);
}

static int sdpa_warnings;
static void count_warnings(int level, const char *message, void *user)
{
    (void)user;
    if (level == GPUCORE_LOG_WARN && strstr(message, "cuDNN's SDPA does not run")) sdpa_warnings++;
}

/* Cases cuDNN's SDPA declines: the kernel runs them (still matching f64), each counted under its reason. */
static void test_sdpa_fallback(gpucore_context *ctx)
{
    static const struct { acase c; int reason; } cases[] = {
        {{GPUCORE_F32, 1, 2, 2, 9, 11, 64, 0, 0, 0, 0, 0, 0, 0}, GPUCORE_ATTN_FALLBACK_DTYPE},
        {{GPUCORE_F16, 1, 2, 2, 9, 11, 36, 0, 0, 0, 0, 0, 0, 0}, GPUCORE_ATTN_FALLBACK_HEAD_DIM},
        {{GPUCORE_F16, 1, 2, 2, 9, 11, 64, 0, 0, 0, 1, 0, 0, 0}, GPUCORE_ATTN_FALLBACK_MASK},
        {{GPUCORE_BF16, 1, 2, 2, 9, 11, 64, 0, 0, 0, 0, 0, 0, 0.25}, GPUCORE_ATTN_FALLBACK_DROPOUT},
        {{GPUCORE_F16, 1, 1, 1, 5, 7, 256, 0, 0, 0, 0, 0, 0, 0}, GPUCORE_ATTN_FALLBACK_NO_ENGINE}, /* stand-in: D <= 128 */
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    gpucore_log_level saved = gpucore_get_log_level();
    gpucore_set_log_level(GPUCORE_LOG_WARN); /* the fallback WARNs are expected: counted, once per key */
    gpucore_set_log_callback(count_warnings, NULL);
    for (int i = 0; i < n; i++) {
        CHECK_OK(gpucore_attention_reset_stats(ctx));
        char name[32];
        snprintf(name, sizeof name, "fallback case %d", i);
        for (int rep = 0; rep < 2; rep++) run_case(ctx, &cases[i].c, name); /* the second from the cached refusal */
        gpucore_attention_stats st = stats_of(ctx);
        CHECK(st.cudnn_calls == 0 && st.fallback_calls == 4 && st.fallback_by_reason[cases[i].reason] == 4);
        if (st.fallback_by_reason[cases[i].reason] != 4)
            fprintf(stderr, "  %s: reason %d counted %lld times (%lld fallbacks, %lld on cuDNN)\n", name,
                    cases[i].reason, (long long)st.fallback_by_reason[cases[i].reason], (long long)st.fallback_calls,
                    (long long)st.cudnn_calls);
        expect_clean(name);
    }
    CHECK(sdpa_warnings == 2 * n); /* a forward key and a backward key per case */
    if (sdpa_warnings != 2 * n) fprintf(stderr, "  %d fallback warnings for %d keys\n", sdpa_warnings, 2 * n);
    /* the kernel on request: not a fallback */
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    acase kc = {GPUCORE_BF16, 1, 2, 2, 9, 11, 64, 0, 0, 0, 0, 0, GPUCORE_ATTN_ALGO_KERNEL, 0};
    run_case(ctx, &kc, "kernel on request");
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 0 && st.fallback_calls == 0);
    CHECK(sdpa_warnings == 2 * n);
    gpucore_set_log_callback(NULL, NULL);
    gpucore_set_log_level(saved);
    CHECK(gpucore_attention_fallback_reason_text(GPUCORE_ATTN_FALLBACK_GQA) != NULL);
    CHECK(gpucore_attention_fallback_reason_text(GPUCORE_ATTN_FALLBACK_REASONS) == NULL);
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.algo = 7;
    int64_t s4[4] = {1, 1, 2, 8};
    gpucore_tensor *t = NULL, *out = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, s4, &t));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, s4, &out));
    CHECK_STATUS(gpucore_attention_forward(out, NULL, t, t, t, NULL, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "algo") != NULL);
    gpucore_tensor_destroy(t);
    gpucore_tensor_destroy(out);
}

/* Threads on their own streams share one plan and one cuDNN handle (the module's lock): each thread's out
 * must be the single-thread result, bit for bit, after it synchronizes only its own stream, and the stand-in
 * must see no two threads inside calls on the handle at once. */
typedef struct sdpa_thread {
    gpucore_context *ctx;
    gpucore_tensor *q, *out, *lse;
    gpucore_status st;
    int rounds, mismatches;
    const uint16_t *want;
} sdpa_thread;

enum { TH_B = 2, TH_H = 2, TH_S = 24, TH_D = 64, TH_N = TH_B * TH_H * TH_S * TH_D };

static void *sdpa_worker(void *arg)
{
    sdpa_thread *t = arg;
    gpucore_stream *s = NULL;
    uint16_t got[TH_N];
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = 1;
    if ((t->st = gpucore_stream_create(t->ctx, 0, &s))) return NULL;
    for (int r = 0; r < t->rounds && !t->st; r++) {
        if ((t->st = gpucore_fill(t->out, 0.0, s)) ||
            (t->st = gpucore_attention_forward(t->out, t->lse, t->q, t->q, t->q, NULL, NULL, &o, s)) ||
            (t->st = gpucore_stream_synchronize(s)) || (t->st = gpucore_copy_to_host(got, sizeof got, t->out)))
            break;
        t->mismatches += memcmp(got, t->want, sizeof got) != 0;
    }
    gpucore_stream_destroy(s);
    return NULL;
}

static void test_sdpa_threads(gpucore_context *ctx)
{
    const int64_t shape[4] = {TH_B, TH_H, TH_S, TH_D}, ls[1] = {TH_B * TH_H * TH_S};
    enum { NT = 4 };
    sdpa_thread th[NT];
    pthread_t tid[NT];
    static uint16_t want[TH_N];
    gpucore_tensor *q = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, shape, &q));
    CHECK_OK(gpucore_random(q, GPUCORE_UNIFORM, -1, 1, 11, 0, NULL));
    for (int i = 0; i < NT; i++) {
        memset(&th[i], 0, sizeof th[i]);
        th[i].ctx = ctx;
        th[i].q = q;
        th[i].rounds = 6;
        th[i].want = want;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, shape, &th[i].out));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, ls, &th[i].lse));
    }
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = 1;
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    CHECK_OK(gpucore_attention_forward(th[0].out, th[0].lse, q, q, q, NULL, NULL, &o, NULL));
    CHECK_OK(gpucore_copy_to_host(want, sizeof want, th[0].out));
    { /* without lse: the graph has no stats output, the same out */
        static uint16_t got[TH_N];
        CHECK_OK(gpucore_attention_forward(th[1].out, NULL, q, q, q, NULL, NULL, &o, NULL));
        CHECK_OK(gpucore_copy_to_host(got, sizeof got, th[1].out));
        CHECK(memcmp(got, want, sizeof got) == 0);
    }
    setenv("STANDIN_DNN_CALL_MS", "2", 1); /* each cuDNN call on a handle lasts 2 ms: overlaps show */
    for (int i = 0; i < NT; i++) pthread_create(&tid[i], NULL, sdpa_worker, &th[i]);
    for (int i = 0; i < NT; i++) pthread_join(tid[i], NULL);
    unsetenv("STANDIN_DNN_CALL_MS");
    for (int i = 0; i < NT; i++) {
        CHECK(th[i].st == GPUCORE_OK && th[i].mismatches == 0);
        if (th[i].st || th[i].mismatches)
            fprintf(stderr, "  thread %d: status %d, %d of %d rounds differ\n", i, (int)th[i].st, th[i].mismatches,
                    th[i].rounds);
        gpucore_tensor_destroy(th[i].out);
        gpucore_tensor_destroy(th[i].lse);
    }
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 2 + NT * 6 && st.fallback_calls == 0);
    gpucore_tensor_destroy(q);
    expect_clean("threads");
}

/* A long plan build holds up no cached shape: while a thread builds a new shape's plan (STANDIN_DNN_PLAN_MS: the
 * stand-in's plan finalize lasts 3 s, as runtime-compiled engines can), this thread runs a cached shape three
 * times to the end, on cuDNN, within 2 s of that finalize starting (a build under the cache's lock would hold
 * them for the whole 3 s). Two threads missing on one shape at once build it once. */
typedef struct slow_build {
    gpucore_context *ctx;
    gpucore_tensor *q, *out;
    gpucore_status st;
    atomic_int done;
} slow_build;

static void *slow_builder(void *arg)
{
    slow_build *b = arg;
    gpucore_stream *s = NULL;
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    if (!(b->st = gpucore_stream_create(b->ctx, 0, &s))) {
        b->st = gpucore_attention_forward(b->out, NULL, b->q, b->q, b->q, NULL, NULL, &o, s);
        if (!b->st) b->st = gpucore_stream_synchronize(s);
        gpucore_stream_destroy(s);
    }
    atomic_store(&b->done, 1);
    return NULL;
}

static void test_sdpa_build_outside_lock(gpucore_context *ctx)
{
    const int64_t shape[4] = {TH_B, TH_H, TH_S, TH_D}, other[4] = {TH_B, TH_H, TH_S + 5, TH_D};
    gpucore_tensor *q = NULL, *out = NULL;
    slow_build b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, shape, &q));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, shape, &out));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, other, &b.q));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, other, &b.out));
    CHECK_OK(gpucore_random(q, GPUCORE_UNIFORM, -1, 1, 5, 0, NULL));
    CHECK_OK(gpucore_random(b.q, GPUCORE_UNIFORM, -1, 1, 6, 0, NULL));
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = 1;
    CHECK_OK(gpucore_attention_reset_stats(ctx));
    CHECK_OK(gpucore_attention_forward(out, NULL, q, q, q, NULL, NULL, &o, NULL)); /* cached from here */
    CHECK_OK(gpucore_context_synchronize(ctx)); /* b.q filled before the builder's stream reads it */
    setenv("STANDIN_DNN_PLAN_MS", "3000", 1);
    const long finalized = counter("cudnn_plan_finalized");
    pthread_t tid;
    pthread_create(&tid, NULL, slow_builder, &b);
    for (int i = 0; i < 10000 && counter("cudnn_plan_finalized") == finalized && !atomic_load(&b.done); i++) {
        struct timespec d = {0, 1000000L};
        nanosleep(&d, NULL);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0); /* the build's finalize (3 s) has begun */
    const int building = !atomic_load(&b.done);
    for (int r = 0; r < 3; r++) {
        CHECK_OK(gpucore_attention_forward(out, NULL, q, q, q, NULL, NULL, &o, NULL));
        CHECK_OK(gpucore_context_synchronize(ctx));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    pthread_join(tid, NULL);
    unsetenv("STANDIN_DNN_PLAN_MS");
    CHECK(b.st == GPUCORE_OK);
    CHECK(building && ms < 2000.0);
    if (!building || ms >= 2000.0)
        fprintf(stderr, "  build outside the lock: 3 cached runs took %.0f ms during a 3 s build (building %d)\n", ms,
                building);
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 5 && st.fallback_calls == 0);
    /* two threads missing on one new shape at once: one builds (a 0.5 s finalize), the other waits for it and
     * takes its entry: one plan finalized, both on cuDNN */
    const int64_t third[4] = {TH_B, TH_H, TH_S + 9, TH_D};
    slow_build two[2];
    pthread_t t2[2];
    memset(two, 0, sizeof two);
    for (int i = 0; i < 2; i++) {
        two[i].ctx = ctx;
        two[i].q = i ? two[0].q : NULL;
        if (!i) CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, third, &two[0].q));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 4, third, &two[i].out));
    }
    CHECK_OK(gpucore_random(two[0].q, GPUCORE_UNIFORM, -1, 1, 7, 0, NULL));
    CHECK_OK(gpucore_context_synchronize(ctx));
    setenv("STANDIN_DNN_PLAN_MS", "500", 1);
    const long before = counter("cudnn_plan_finalized");
    for (int i = 0; i < 2; i++) pthread_create(&t2[i], NULL, slow_builder, &two[i]);
    for (int i = 0; i < 2; i++) pthread_join(t2[i], NULL);
    unsetenv("STANDIN_DNN_PLAN_MS");
    CHECK(two[0].st == GPUCORE_OK && two[1].st == GPUCORE_OK);
    CHECK(counter("cudnn_plan_finalized") - before == 1);
    st = stats_of(ctx);
    CHECK(st.cudnn_calls == 7 && st.fallback_calls == 0);
    gpucore_tensor *ts[7] = {q, out, b.q, b.out, two[0].q, two[0].out, two[1].out};
    for (int i = 0; i < 7; i++) gpucore_tensor_destroy(ts[i]);
    expect_clean("build outside the lock");
}

/* A machine without cuDNN (GPUCORE_CUDNN_LIBRARY points nowhere): the kernel, counted as NO_CUDNN. */
static void test_sdpa_no_cudnn(gpucore_context *ctx)
{
    gpucore_log_level saved = gpucore_get_log_level();
    gpucore_set_log_level(GPUCORE_LOG_ERROR);
    acase c = {GPUCORE_BF16, 2, 2, 2, 13, 17, 64, 1, 0, 0, 0, 0, 0, 0};
    run_case(ctx, &c, "no cuDNN");
    gpucore_set_log_level(saved);
    gpucore_attention_stats st = stats_of(ctx);
    CHECK(st.cudnn_calls == 0 && st.fallback_by_reason[GPUCORE_ATTN_FALLBACK_NO_CUDNN] == 2);
    expect_clean("no cuDNN");
}

int main(int argc, char **argv)
{
    if (!contract_open()) return 1;
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (ctx && argc > 1 && strcmp(argv[1], "no-cudnn") == 0) {
        test_sdpa_no_cudnn(ctx);
    } else if (ctx) {
        test_sdpa_engine(ctx);
        test_sdpa_partial_grads(ctx);
        test_sdpa_old_cudnn(ctx);
        test_sdpa_frontend_order(ctx);
        test_sdpa_fallback(ctx);
        test_sdpa_threads(ctx);
        test_sdpa_build_outside_lock(ctx);
        test_sdpa_cache_eviction(ctx);
    }
    if (ctx) gpucore_context_destroy(ctx);
    expect_clean("end");
    return check_finish("test_cuda_contract_sdpa");
}
