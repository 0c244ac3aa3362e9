/*
 * test_cuda_contract_host.c — host-code cases (the fallback kernel, devices and events, plan caches, conv epilogue)
 * on the contract stand-ins (suite cuda-contract): each case failed
 * before its fix. Run with GPUCORE_CUDA_PLUGIN set to the contract module
 * (tests/cuda_contract/meson.build); the stand-ins' counters are taken from
 * that module with dlsym.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "contract_test.h"

#define counter standin_counter_

/* Item 6: device properties (gpucore-info lists every GPU) read free memory from NVML instead of making each
 * device current, which creates its primary context. Runs first: no context on cuda:1 yet. */
static void test_properties_without_context(void)
{
    CHECK(counter("primary_context_1") == 0);
    gpucore_device_properties p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(gpucore_device_get_properties(GPUCORE_DEVICE_CUDA, 1, &p));
    CHECK(p.free_memory == (4096ll - 64) << 20); /* the NVML stand-in: STANDIN_MEM_MB 4096, 64 MiB used */
    CHECK(counter("primary_context_1") == 0);
    if (counter("primary_context_1") != 0) fprintf(stderr, "  device_get_properties made cuda:1 current\n");
    expect_clean("device properties without a context");
}

/* Item 4: GEMMs on the fallback kernel are counted, by reason, in gpucore_matmul_stats and in the profiler. */
static void test_fallback_counts(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    CHECK_OK(gpucore_profiler_enable(ctx, 1));
    int64_t s8[2] = {8, 8};
    gpucore_tensor *a = NULL, *d = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s8, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s8, &d));
    CHECK_OK(gpucore_fill(a, 0.5, NULL));
    gpucore_log_level saved = gpucore_get_log_level();
    gpucore_set_log_level(GPUCORE_LOG_ERROR); /* the fallback WARNs are expected here */
    CHECK_OK(gpucore_matmul(a, a, d, NULL, NULL)); /* cuBLASLt */
    setenv("STANDIN_LT_NO_ALGO", "1", 1);
    gpucore_matmul_options mo;
    gpucore_matmul_options_init(&mo);
    mo.trans_a = 1; /* a new plan key: the heuristic finds nothing */
    for (int i = 0; i < 3; i++) CHECK_OK(gpucore_matmul(a, a, d, &mo, NULL));
    unsetenv("STANDIN_LT_NO_ALGO");
    setenv("STANDIN_LT_REFUSE", "012", 1);
    mo.trans_b = 1; /* another: every algorithm refused */
    for (int i = 0; i < 2; i++) CHECK_OK(gpucore_matmul(a, a, d, &mo, NULL));
    unsetenv("STANDIN_LT_REFUSE");
    gpucore_set_log_level(saved);
    float h[64];
    CHECK_OK(gpucore_copy_to_host(h, sizeof h, d));
    CHECK(h[0] == 2.0f && h[63] == 2.0f);

    gpucore_matmul_stats ms;
    memset(&ms, 0, sizeof ms);
    ms.struct_size = sizeof ms;
    CHECK_OK(gpucore_matmul_get_stats(ctx, &ms));
    CHECK(ms.gemms == 6 && ms.fallback_gemms == 5);
    CHECK(ms.fallback_by_reason[GPUCORE_MATMUL_FALLBACK_NO_ALGORITHM] == 3);
    CHECK(ms.fallback_by_reason[GPUCORE_MATMUL_FALLBACK_REFUSED] == 2);
    if (ms.fallback_gemms != 5)
        fprintf(stderr, "  %lld GEMMs, %lld on the fallback kernel\n", (long long)ms.gemms, (long long)ms.fallback_gemms);
    CHECK(strstr(gpucore_matmul_fallback_reason_text(GPUCORE_MATMUL_FALLBACK_REFUSED), "refused") != NULL);
    CHECK(strcmp(gpucore_matmul_fallback_reason_text(99), "unknown reason") == 0);

    gpucore_profile_entry e[16];
    int n = 0;
    for (int i = 0; i < 16; i++) e[i].struct_size = sizeof e[i];
    CHECK_OK(gpucore_profiler_entries(ctx, e, 16, &n));
    int64_t fb = -1, mm = -1;
    for (int i = 0; i < n && i < 16; i++) {
        if (!strcmp(e[i].name, "matmul_fallback")) fb = e[i].calls;
        if (!strcmp(e[i].name, "matmul")) mm = e[i].calls;
    }
    CHECK(fb == 5 && mm == 6);
    if (fb != 5) fprintf(stderr, "  profiler: matmul_fallback %lld calls, matmul %lld\n", (long long)fb, (long long)mm);

    CHECK_OK(gpucore_matmul_reset_stats(ctx));
    CHECK_OK(gpucore_matmul_get_stats(ctx, &ms));
    CHECK(ms.gemms == 0 && ms.fallback_gemms == 0);
    /* bad input */
    CHECK_STATUS(gpucore_matmul_get_stats(ctx, NULL), GPUCORE_ERR_NULL_POINTER);
    ms.struct_size = 8;
    CHECK_STATUS(gpucore_matmul_get_stats(ctx, &ms), GPUCORE_ERR_INVALID_ARGUMENT);
    ms.struct_size = sizeof ms;
    CHECK(gpucore_matmul_get_stats(NULL, &ms) != GPUCORE_OK);
    CHECK(gpucore_matmul_reset_stats(NULL) != GPUCORE_OK);
    gpucore_clear_error();
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(d);
    gpucore_context_destroy(ctx);
    expect_clean("fallback counts");
}

/* Item 9: the unfused bias/ReLU epilogue (no cuDNN engine for the fused graph) on packed NCHW and NHWC outputs
 * runs kernels/conv_epilogue.cu on the SIMT layer; f32/f16/bf16 against a float64 reference of conv + bias + ReLU,
 * fresh random data, the output poisoned first. */
static double lcg_uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void test_conv_unfused_epilogue(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    const int64_t N = 2, C = 3, H = 5, W = 6, K = 4, R = 3, S = 3, P = 5, Q = 6; /* pad 1, stride 1 */
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    setenv("STANDIN_DNN_NO_FUSION", "1", 1);
    const gpucore_dtype dts[3] = {GPUCORE_F32, GPUCORE_F16, GPUCORE_BF16};
    for (int di = 0; di < 3; di++)
        for (int layout = 0; layout < 2; layout++)
            for (int variant = 0; variant < 3; variant++) { /* bias+relu, bias, relu */
                const gpucore_dtype dt = dts[di];
                const int has_bias = variant != 2, relu = variant != 1;
                /* the inputs, rounded to the dtype (f32 holds f16/bf16 values exactly), read back for the
                 * reference; in the tensors' memory order (NHWC tensors are [N, H, W, C] in memory) */
                float xs[2 * 3 * 5 * 6], ws[4 * 3 * 3 * 3], b[4], y[2 * 4 * 5 * 6];
                for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) xs[i] = (float)lcg_uniform(&seed);
                for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) ws[i] = (float)(lcg_uniform(&seed) * 0.5);
                for (int i = 0; i < 4; i++) b[i] = (float)lcg_uniform(&seed);
                int64_t sx[4] = {N, C, H, W}, sw[4] = {K, C, R, S}, sy[4] = {N, K, P, Q}, sb[1] = {K};
                int64_t sx_l[4] = {N, H, W, C}, sw_l[4] = {K, R, S, C}, sy_l[4] = {N, P, Q, K};
                gpucore_tensor *t[4] = {NULL}, *f[4] = {NULL}; /* x, w, y, b in dt; their f32 twins */
                const int64_t *shapes[4] = {layout ? sx_l : sx, layout ? sw_l : sw, layout ? sy_l : sy, sb};
                const int ndims[4] = {4, 4, 4, 1};
                float *host[4] = {xs, ws, y, b};
                const int64_t bytes[4] = {sizeof xs, sizeof ws, sizeof y, sizeof b};
                for (int i = 0; i < 4; i++) {
                    CHECK_OK(gpucore_tensor_create(ctx, dt, ndims[i], shapes[i], &t[i]));
                    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, ndims[i], shapes[i], &f[i]));
                    if (!t[i] || !f[i]) return;
                    if (i == 2) continue;
                    CHECK_OK(gpucore_copy_from_host(f[i], host[i], bytes[i]));
                    CHECK_OK(gpucore_cast(t[i], f[i], NULL));
                    CHECK_OK(gpucore_cast(f[i], t[i], NULL));
                    CHECK_OK(gpucore_copy_to_host(host[i], bytes[i], f[i]));
                }
                CHECK_OK(gpucore_fill(t[2], NAN, NULL)); /* poison */
                gpucore_conv_options o;
                gpucore_conv_options_init(&o);
                o.pad_h = o.pad_w = 1;
                o.layout = layout ? GPUCORE_CONV_NHWC : GPUCORE_CONV_NCHW;
                o.activation = relu ? GPUCORE_ACT_RELU : GPUCORE_ACT_NONE;
                o.allow_tf32 = 0;
                CHECK_OK(gpucore_conv_forward(t[0], t[1], has_bias ? t[3] : NULL, t[2], &o, NULL));
                CHECK_OK(gpucore_cast(f[2], t[2], NULL));
                CHECK_OK(gpucore_copy_to_host(y, sizeof y, f[2]));
                double err = 0, scale = 0;
                int nan = 0;
                for (int64_t n = 0; n < N; n++) for (int64_t k = 0; k < K; k++) for (int64_t p = 0; p < P; p++)
                    for (int64_t q = 0; q < Q; q++) {
                        double ref = 0;
                        for (int64_t c = 0; c < C; c++) for (int64_t r = 0; r < R; r++) for (int64_t t = 0; t < S; t++) {
                            int64_t h = p - 1 + r, ww = q - 1 + t;
                            if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                            int64_t xi = layout ? ((n * H + h) * W + ww) * C + c : ((n * C + c) * H + h) * W + ww;
                            int64_t wi = layout ? ((k * R + r) * S + t) * C + c : ((k * C + c) * R + r) * S + t;
                            ref += (double)xs[xi] * ws[wi];
                        }
                        if (has_bias) ref += b[k];
                        if (relu && ref < 0) ref = 0;
                        int64_t yi = layout ? ((n * P + p) * Q + q) * K + k : ((n * K + k) * P + p) * Q + q;
                        nan |= isnan(y[yi]) != 0;
                        err = fmax(err, fabs(y[yi] - ref));
                        scale = fmax(scale, fabs(ref));
                    }
                const double tol = dt == GPUCORE_F32 ? 1e-6 : 1e-2, rel = err / (scale > 0 ? scale : 1);
                CHECK(!nan && rel <= tol);
                if (nan || rel > tol)
                    fprintf(stderr, "  unfused epilogue dtype %d layout %d variant %d: error %.3g (tolerance %g)%s\n",
                            (int)dt, layout, variant, rel, tol, nan ? ", NaN" : "");
                for (int i = 0; i < 4; i++) {
                    gpucore_tensor_destroy(t[i]);
                    gpucore_tensor_destroy(f[i]);
                }
            }
    unsetenv("STANDIN_DNN_NO_FUSION");
    gpucore_context_destroy(ctx);
    expect_clean("unfused conv epilogue");
}

/* Item 12: the allocator's events only order reuse; they are created with cudaEventDisableTiming. */
static void test_untimed_events(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    gpucore_stream *s = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &s));
    long timed = counter("event_created_timed"), untimed = counter("event_created_untimed");
    int64_t shape[1] = {1024};
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &t));
    CHECK_OK(gpucore_fill(t, 1.0, s));
    CHECK_OK(gpucore_tensor_record_stream(t, s));
    gpucore_tensor_destroy(t); /* reuse must wait for s: an allocator event */
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK(counter("event_created_untimed") > untimed);
    CHECK(counter("event_created_timed") == timed);
    if (counter("event_created_timed") != timed)
        fprintf(stderr, "  the allocator created %ld timed events\n", counter("event_created_timed") - timed);
    gpucore_stream_destroy(s);
    gpucore_context_destroy(ctx);
    expect_clean("untimed allocator events");
}

/* A small forward convolution with bias and ReLU: x [1,2,4,4] of ones, w [3,2,3,3] of ones, bias -8.5, pad 1;
 * relu(conv - 8.5) is 9.5 inside (18 taps) and 0 at a corner (8 taps). */
typedef struct conv_case { gpucore_tensor *x, *w, *y, *b; } conv_case;
static void conv_case_make(gpucore_context *ctx, conv_case *c)
{
    int64_t sx[4] = {1, 2, 4, 4}, sw[4] = {3, 2, 3, 3}, sy[4] = {1, 3, 4, 4}, sb[1] = {3};
    memset(c, 0, sizeof *c);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sx, &c->x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sw, &c->w));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sy, &c->y));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb, &c->b));
    CHECK_OK(gpucore_fill(c->x, 1.0, NULL));
    CHECK_OK(gpucore_fill(c->w, 1.0, NULL));
    CHECK_OK(gpucore_fill(c->b, -8.5, NULL));
}
static void conv_case_options(gpucore_conv_options *o)
{
    gpucore_conv_options_init(o);
    o->pad_h = o->pad_w = 1;
    o->activation = GPUCORE_ACT_RELU;
    o->algo = GPUCORE_CONV_ALGO_HEURISTIC;
    o->allow_tf32 = 1; /* the stand-in's engine 0 (tensor-core note, 4096 bytes of workspace) is allowed */
}
static int conv_case_check(conv_case *c)
{
    float out[48];
    CHECK_OK(gpucore_copy_to_host(out, sizeof out, c->y));
    int ok = out[5] == 9.5f && out[0] == 0.0f;
    if (!ok) fprintf(stderr, "  conv: inside %g, corner %g (want 9.5, 0)\n", out[5], out[0]);
    return ok;
}
static void conv_case_free(conv_case *c)
{
    gpucore_tensor_destroy(c->x);
    gpucore_tensor_destroy(c->w);
    gpucore_tensor_destroy(c->y);
    gpucore_tensor_destroy(c->b);
}

/* Item 8: a fresh shape in heuristic mode finalizes one execution plan (the stand-in's engine 0, 4096 bytes of
 * workspace), not also engine 1 in search of a zero-workspace one; the lean plan is built only the first time
 * the workspace cannot be had. */
static void test_conv_first_plan(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    conv_case c;
    conv_case_make(ctx, &c);
    gpucore_conv_options o;
    conv_case_options(&o);
    long before = counter("cudnn_plan_finalized");
    CHECK_OK(gpucore_conv_forward(c.x, c.w, c.b, c.y, &o, NULL));
    CHECK(conv_case_check(&c));
    CHECK(counter("cudnn_plan_finalized") == before + 1);
    if (counter("cudnn_plan_finalized") != before + 1)
        fprintf(stderr, "  a fresh shape finalized %ld plans\n", counter("cudnn_plan_finalized") - before);
    CHECK_OK(gpucore_conv_forward(c.x, c.w, c.b, c.y, &o, NULL)); /* a hit: nothing finalized */
    CHECK(counter("cudnn_plan_finalized") == before + 1);

    /* the workspace cannot be had: the lean plan (engine 1, none) is searched once, then reused */
    o.workspace_limit = 1 << 20; /* a fresh key */
    gpucore_stream *fresh = NULL; /* no cached block of its own: its workspace needs a new segment */
    CHECK_OK(gpucore_stream_create(ctx, 0, &fresh));
    CHECK_OK(gpucore_fill(c.y, -1.0, NULL)); /* poisoned, then ordered before the convolutions on `fresh` */
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK_OK(gpucore_debug_fail_raw_alloc(ctx, 1, -1));
    before = counter("cudnn_plan_finalized");
    gpucore_conv_stats cs0 = {.struct_size = sizeof cs0}, cs1 = {.struct_size = sizeof cs1};
    CHECK_OK(gpucore_conv_get_stats(ctx, &cs0));
    for (int rep = 0; rep < 2; rep++) CHECK_OK(gpucore_conv_forward(c.x, c.w, c.b, c.y, &o, fresh));
    CHECK_OK(gpucore_debug_fail_raw_alloc(ctx, 0, 0));
    CHECK_OK(gpucore_stream_synchronize(fresh));
    gpucore_stream_destroy(fresh);
    CHECK(conv_case_check(&c));
    CHECK_OK(gpucore_conv_get_stats(ctx, &cs1));
    CHECK(cs1.workspace_fallbacks == cs0.workspace_fallbacks + 2);
    /* the chosen plan (engine 0), then once the lean search: engine 0 again (4096 bytes), engine 1 (none) */
    CHECK(counter("cudnn_plan_finalized") == before + 3);
    if (counter("cudnn_plan_finalized") != before + 3 || cs1.workspace_fallbacks != cs0.workspace_fallbacks + 2)
        fprintf(stderr, "  workspace refused: %ld plans finalized, %lld fallbacks\n",
                counter("cudnn_plan_finalized") - before, (long long)(cs1.workspace_fallbacks - cs0.workspace_fallbacks));
    conv_case_free(&c);
    gpucore_context_destroy(ctx);
    expect_clean("first plan per conv shape");
}

/* Item 8: plans are built outside the execution lock, so two threads can build the same fresh key at once; the
 * first insert wins, the other's plan is dropped, and both convolutions are right. */
typedef struct race_arg { conv_case *c; gpucore_stream *s; gpucore_status st; } race_arg;
static void *race_conv(void *p)
{
    race_arg *r = p;
    gpucore_conv_options o;
    conv_case_options(&o);
    o.workspace_limit = 5 << 20; /* a key no other case uses */
    r->st = gpucore_conv_forward(r->c->x, r->c->w, r->c->b, r->c->y, &o, r->s);
    if (!r->st) r->st = gpucore_stream_synchronize(r->s);
    return NULL;
}

static void test_conv_racing_build(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    conv_case c[2];
    race_arg r[2];
    pthread_t t[2];
    gpucore_conv_stats s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    CHECK_OK(gpucore_conv_get_stats(ctx, &s0));
    for (int i = 0; i < 2; i++) {
        conv_case_make(ctx, &c[i]);
        r[i].c = &c[i];
        r[i].st = GPUCORE_ERR_BACKEND;
        CHECK_OK(gpucore_stream_create(ctx, 0, &r[i].s));
    }
    CHECK_OK(gpucore_context_synchronize(ctx));
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, race_conv, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(r[i].st);
        CHECK(conv_case_check(&c[i]));
        conv_case_free(&c[i]);
        gpucore_stream_destroy(r[i].s);
    }
    CHECK_OK(gpucore_conv_get_stats(ctx, &s1));
    CHECK(s1.plans_cached == s0.plans_cached + 1); /* one entry for the key, however many threads built it */
    gpucore_context_destroy(ctx);
    expect_clean("two threads building one plan key");
}

/* Item 6: an execution plan evicted from the cache while its execution still runs is destroyed only after it
 * (the stand-in's conv kernel runs STANDIN_DNN_EXEC_MS on its stream; destroying the plan before was a
 * violation). */
static void test_conv_evict_in_flight(void)
{
    void (*hold)(int) = (void (*)(int))sym("standin_dnn_hold");
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    conv_case c;
    conv_case_make(ctx, &c);
    int64_t sy[4] = {1, 3, 4, 4};
    gpucore_tensor *y2 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sy, &y2));
    gpucore_stream *slow = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &slow));
    gpucore_conv_options o;
    conv_case_options(&o);
    o.workspace_limit = 3 << 20; /* keys no other case uses */
    /* held until released below (at most 60 s), however slow this machine is */
    hold(1);
    setenv("STANDIN_DNN_EXEC_MS", "60000", 1);
    CHECK_OK(gpucore_conv_forward(c.x, c.w, c.b, c.y, &o, slow)); /* the least recently used plan from here on */
    unsetenv("STANDIN_DNN_EXEC_MS");
    gpucore_conv_stats st0 = {.struct_size = sizeof st0}, st1 = {.struct_size = sizeof st1};
    CHECK_OK(gpucore_conv_get_stats(ctx, &st0));
    const int64_t fill = st0.plan_capacity; /* newer keys than every cached one: all evicted, the slow one too */
    for (int64_t i = 1; i <= fill; i++) {
        o.workspace_limit = (3 << 20) + i;
        CHECK_OK(gpucore_conv_forward(c.x, c.w, c.b, y2, &o, NULL));
    }
    CHECK_OK(gpucore_conv_get_stats(ctx, &st1));
    CHECK(st1.evictions == st0.evictions + st0.plans_cached);
    /* the case proves something only if the slow execution was still running when its plan was evicted */
    CHECK(gpucore_stream_query(slow) == GPUCORE_ERR_NOT_READY);
    if (gpucore_stream_query(slow) != GPUCORE_ERR_NOT_READY)
        fprintf(stderr, "  the slow execution had finished before the eviction (a loaded machine?)\n");
    CHECK(v_count() == 0); /* before the fix: the plan was destroyed here, its execution still sleeping */
    hold(0);
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK(conv_case_check(&c));
    CHECK_OK(gpucore_conv_forward(c.x, c.w, c.b, y2, &o, NULL)); /* reaps the released entry */
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_tensor_destroy(y2);
    gpucore_stream_destroy(slow);
    conv_case_free(&c);
    gpucore_context_destroy(ctx);
    expect_clean("a plan evicted while it runs");
}

/* Item 7, run with GPUCORE_CUDNN_LIBRARY / GPUCORE_NCCL_LIBRARY pointing nowhere (a machine without them): the
 * backend loads, GEMM and kernels work, conv and comm are NOT_SUPPORTED naming the library, and the component
 * versions gpucore-info shows say the same. */
static void test_missing_libraries(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    int64_t s8[2] = {8, 8};
    gpucore_tensor *a = NULL, *d = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s8, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s8, &d));
    CHECK_OK(gpucore_fill(a, 0.5, NULL));
    CHECK_OK(gpucore_matmul(a, a, d, NULL, NULL));
    float h[64];
    CHECK_OK(gpucore_copy_to_host(h, sizeof h, d));
    CHECK(h[0] == 2.0f && h[63] == 2.0f);
    conv_case c;
    conv_case_make(ctx, &c);
    gpucore_conv_options o;
    conv_case_options(&o);
    CHECK_STATUS(gpucore_conv_forward(c.x, c.w, c.b, c.y, &o, NULL), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(strstr(gpucore_last_error(), "cuDNN") && strstr(gpucore_last_error(), "libcudnn.so.9"));
    fprintf(stderr, "  conv without cuDNN: %s\n", gpucore_last_error());
    char buf[256];
    CHECK_STATUS(gpucore_component_version("cudnn", buf, sizeof buf), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(strstr(gpucore_last_error(), "libcudnn.so.9") != NULL);
    CHECK_STATUS(gpucore_component_version("nccl", buf, sizeof buf), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(strstr(gpucore_last_error(), "NCCL") && strstr(gpucore_last_error(), "libnccl.so.2"));
    unsigned char id[GPUCORE_COMM_ID_BYTES];
    CHECK_STATUS(gpucore_comm_unique_id(ctx, id, sizeof id), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(strstr(gpucore_last_error(), "libnccl.so.2") != NULL);
    fprintf(stderr, "  comm without NCCL: %s\n", gpucore_last_error());
    CHECK_OK(gpucore_component_version("cublas", buf, sizeof buf));
    conv_case_free(&c);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(d);
    gpucore_context_destroy(ctx);
    expect_clean("without cuDNN and NCCL");
}

int main(int argc, char **argv)
{
    if (!contract_open()) return 1;
    if (argc > 1 && !strcmp(argv[1], "missing-libraries")) {
        test_missing_libraries();
        return check_finish("test_cuda_contract_host missing-libraries");
    }
    test_properties_without_context();
    test_untimed_events();
    test_fallback_counts();
    test_conv_first_plan();
    test_conv_unfused_epilogue();
    test_conv_racing_build();
    test_conv_evict_in_flight();
    return check_finish("test_cuda_contract_host");
}
