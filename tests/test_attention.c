/*
 * test_attention.c — scaled dot-product attention (gpucore_attention_forward /
 * _backward) against a float64 reference on every backend: plain, causal,
 * key-padding lengths, additive and boolean masks (broadcast), GQA, dropout,
 * odd sequence lengths and head dims up to 256, q/k/v/out as permuted
 * [B,S,H,D] views, strided slices and unit-stride views whose rows are not 16-byte
 * aligned, f32/f16/bf16 (f16/bf16 head dims 16..128 in steps of 16 on the CUDA
 * kernel's tensor-core forward: its cp.async path for unit-stride 16-byte rows, its
 * element path otherwise); outputs poisoned and
 * guarded. The reference backward is itself checked by finite differences.
 * MHA f16/bf16 cases that cuDNN's SDPA takes on the cuda backend (causal, key
 * lengths with a 0, additive [Sq, Sk] and [B, 1, 1, Sk] masks, rows that admit no
 * key, Sk not a multiple of 128), and a GQA decode case: with GPUCORE_EXPECT_CUDNN=1 (the contract
 * stand-ins' run and the GPU run set it) a forward or backward graph of theirs that
 * cuDNN declines fails the test, naming the graph and the reason.
 * Memory: the allocator's peak during forward + backward stays far below one
 * seq×seq score matrix. Bad arguments get their documented status.
 */
#include "ops_harness.h"
#include "philox.h"

typedef struct att_case {
    const char *name;
    int64_t B, H, Hkv, Sq, Sk, D, Dv;
    int causal;
    int mask;      /* 0 none, 1 additive f32 [Sq, Sk], 2 boolean u8 [B, 1, 1, Sk], 3 additive (q dtype) [B, H, Sq, Sk],
                    * 4 additive f32 [B, 1, 1, Sk] (batch entry 1 all -inf, key 0 of entry 0 -inf) */
    int lens;      /* 1: kv_lengths (i32) < Sk for some batch entries, one of them 0 */
    double dropout;
    int layout;    /* 0 contiguous; 1 [B,S,H,D] projections permuted (inputs and outputs); 2 strided last dim;
                    * 3 q, k, v with unit stride but rows not 16-byte aligned (a view one element into rows of D + 1) */
    int cudnn;     /* 1: f16/bf16 on the cuda backend must run on cuDNN's SDPA under GPUCORE_EXPECT_CUDNN=1 */
} att_case;

/* Everything the reference needs, as float64 in logical [B, H, S, D] order. */
typedef struct att_ref {
    const att_case *c;
    double scale;
    double *q, *k, *v, *bias, *keep; /* bias, keep: [B, H, Sq, Sk] */
} att_ref;

#define IDX4(d1, d2, d3, a, b, c, e) ((((a) * (d1) + (b)) * (d2) + (c)) * (d3) + (e))

static void ref_forward(const att_ref *r, double *out, double *lse)
{
    const att_case *c = r->c;
    const int64_t G = c->H / c->Hkv;
    double *s = malloc(sizeof(double) * (size_t)(c->Sk + 1));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Sq; i++) {
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < c->Sk; j++) {
                    double d = 0;
                    for (int64_t x = 0; x < c->D; x++)
                        d += r->q[IDX4(c->H, c->Sq, c->D, b, h, i, x)] * r->k[IDX4(c->Hkv, c->Sk, c->D, b, h / G, j, x)];
                    s[j] = r->scale * d + r->bias[IDX4(c->H, c->Sq, c->Sk, b, h, i, j)];
                    if (s[j] > m) m = s[j];
                }
                for (int64_t j = 0; j < c->Sk && m > -INFINITY; j++) l += exp(s[j] - m);
                double *o = out + IDX4(c->H, c->Sq, c->Dv, b, h, i, 0);
                for (int64_t y = 0; y < c->Dv; y++) o[y] = 0;
                if (lse) lse[(b * c->H + h) * c->Sq + i] = m > -INFINITY ? m + log(l) : -INFINITY;
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < c->Sk; j++) {
                    double p = exp(s[j] - m) / l * r->keep[IDX4(c->H, c->Sq, c->Sk, b, h, i, j)];
                    for (int64_t y = 0; y < c->Dv; y++) o[y] += p * r->v[IDX4(c->Hkv, c->Sk, c->Dv, b, h / G, j, y)];
                }
            }
    free(s);
}

/* Gradients from dout and the out the backward is given (D_i = dout_i · out_i). */
static void ref_backward(const att_ref *r, const double *dout, const double *out, double *dq, double *dk, double *dv)
{
    const att_case *c = r->c;
    const int64_t G = c->H / c->Hkv;
    memset(dq, 0, sizeof(double) * (size_t)(c->B * c->H * c->Sq * c->D));
    memset(dk, 0, sizeof(double) * (size_t)(c->B * c->Hkv * c->Sk * c->D));
    memset(dv, 0, sizeof(double) * (size_t)(c->B * c->Hkv * c->Sk * c->Dv));
    double *s = malloc(sizeof(double) * (size_t)(c->Sk + 1));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Sq; i++) {
                const double *qi = r->q + IDX4(c->H, c->Sq, c->D, b, h, i, 0);
                const double *gi = dout + IDX4(c->H, c->Sq, c->Dv, b, h, i, 0);
                const double *oi = out + IDX4(c->H, c->Sq, c->Dv, b, h, i, 0);
                double m = -INFINITY, l = 0, Di = 0;
                for (int64_t j = 0; j < c->Sk; j++) {
                    double d = 0;
                    for (int64_t x = 0; x < c->D; x++) d += qi[x] * r->k[IDX4(c->Hkv, c->Sk, c->D, b, h / G, j, x)];
                    s[j] = r->scale * d + r->bias[IDX4(c->H, c->Sq, c->Sk, b, h, i, j)];
                    if (s[j] > m) m = s[j];
                }
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < c->Sk; j++) l += exp(s[j] - m);
                for (int64_t y = 0; y < c->Dv; y++) Di += gi[y] * oi[y];
                for (int64_t j = 0; j < c->Sk; j++) {
                    const double p = exp(s[j] - m) / l, keep = r->keep[IDX4(c->H, c->Sq, c->Sk, b, h, i, j)];
                    const double *kj = r->k + IDX4(c->Hkv, c->Sk, c->D, b, h / G, j, 0);
                    const double *vj = r->v + IDX4(c->Hkv, c->Sk, c->Dv, b, h / G, j, 0);
                    double dp = 0;
                    for (int64_t y = 0; y < c->Dv; y++) dp += gi[y] * vj[y];
                    const double ds = p * (dp * keep - Di);
                    for (int64_t x = 0; x < c->D; x++) {
                        dq[IDX4(c->H, c->Sq, c->D, b, h, i, x)] += r->scale * ds * kj[x];
                        dk[IDX4(c->Hkv, c->Sk, c->D, b, h / G, j, x)] += r->scale * ds * qi[x];
                    }
                    for (int64_t y = 0; y < c->Dv; y++) dv[IDX4(c->Hkv, c->Sk, c->Dv, b, h / G, j, y)] += p * keep * gi[y];
                }
            }
    free(s);
}

static double *rnd(int64_t n, double lo, double hi)
{
    double *p = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rand() / (double)RAND_MAX;
    return p;
}

/* bias and keep of case c from its mask values (additive or boolean), lengths and dropout. */
static void ref_masks(att_ref *r, const double *mask, const int32_t *lens, uint64_t seed, uint64_t offset)
{
    const att_case *c = r->c;
    const int64_t n = c->B * c->H * c->Sq * c->Sk;
    r->bias = malloc(sizeof(double) * (size_t)(n + 1));
    r->keep = malloc(sizeof(double) * (size_t)(n + 1));
    const float pf = (float)c->dropout;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Sq; i++)
                for (int64_t j = 0; j < c->Sk; j++) {
                    int64_t e = IDX4(c->H, c->Sq, c->Sk, b, h, i, j);
                    double bias = 0;
                    if (c->mask == 1) bias = mask[i * c->Sk + j];
                    if (c->mask == 2) bias = mask[b * c->Sk + j] != 0 ? 0 : -INFINITY;
                    if (c->mask == 3) bias = mask[e];
                    if (c->mask == 4) bias = mask[b * c->Sk + j];
                    if ((lens && j >= lens[b]) || (c->causal && j > i)) bias = -INFINITY;
                    r->bias[e] = bias;
                    r->keep[e] = pf > 0 ? (gpucore_philox_uniform(seed, offset, (uint64_t)e) >= pf ? (double)(1.0f / (1.0f - pf)) : 0) : 1;
                }
}

/* ---------------------------------------------------------------- FD check of the reference */

static void test_reference_gradients(void)
{
    const att_case c = {"fd", 1, 2, 1, 5, 6, 3, 4, 0, 1, 0, 0.3, 0, 0};
    att_ref r = {&c, 0.7, rnd(2 * 5 * 3, -1, 1), rnd(6 * 3, -1, 1), rnd(6 * 4, -1, 1), NULL, NULL};
    double *mask = rnd(5 * 6, -1, 1);
    mask[7] = -INFINITY;
    int32_t lens[1] = {5};
    ref_masks(&r, mask, lens, 99, 3);
    const int64_t no = 2 * 5 * 4;
    double *w = rnd(no, -1, 1), *out = malloc(sizeof(double) * no), *o2 = malloc(sizeof(double) * no);
    double dq[30], dk[18], dv[24], fd[30];
    ref_forward(&r, out, NULL);
    ref_backward(&r, w, out, dq, dk, dv);
    double *params[3] = {r.q, r.k, r.v}, *grads[3] = {dq, dk, dv};
    const int64_t counts[3] = {30, 18, 24};
    const char *names[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++) {
        for (int64_t i = 0; i < counts[t]; i++) {
            double keep = params[t][i], f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                params[t][i] = keep + (sgn ? -1e-6 : 1e-6);
                ref_forward(&r, o2, NULL);
                f[sgn] = 0;
                for (int64_t e = 0; e < no; e++) f[sgn] += w[e] * o2[e];
            }
            params[t][i] = keep;
            fd[i] = (f[0] - f[1]) / 2e-6;
        }
        char what[64];
        snprintf(what, sizeof what, "reference %s vs finite differences", names[t]);
        check_close(fd, grads[t], counts[t], 1e-6, what);
    }
    free(r.q); free(r.k); free(r.v); free(r.bias); free(r.keep); free(mask); free(w); free(out); free(o2);
}

/* ---------------------------------------------------------------- one case on one backend */

/* A [B, H, S, D] tensor: contiguous, a [B, S, H, D] tensor permuted, or a strided last dim. */
static gpucore_tensor *make_operand(gpucore_context *ctx, gpucore_dtype dt, int layout, int64_t B, int64_t H, int64_t S,
                                    int64_t D, double **host)
{
    const int64_t shape[4] = {B, H, S, D};
    if (layout == 3) {
        const int64_t wide[4] = {B, H, S, D + 1};
        gpucore_tensor *base = make_input(ctx, dt, 4, wide, 0, -1.5, 1.5, NULL), *view = NULL;
        CHECK_OK(gpucore_tensor_slice(base, 3, 1, D + 1, 1, &view));
        gpucore_tensor_destroy(base);
        if (host) *host = read_back(view);
        return view;
    }
    if (layout != 1) return make_input(ctx, dt, 4, shape, layout == 2 ? 1 : 0, -1.5, 1.5, host);
    const int64_t bshape[4] = {B, S, H, D};
    gpucore_tensor *base = make_input(ctx, dt, 4, bshape, 0, -1.5, 1.5, NULL), *view = NULL;
    const int perm[4] = {0, 2, 1, 3};
    CHECK_OK(gpucore_tensor_permute(base, perm, &view));
    gpucore_tensor_destroy(base);
    *host = read_back(view);
    return view;
}

/* A poisoned, guarded output; with permuted, *view is a [B,S,H,D] buffer seen as [B,H,S,D]; else
 * contiguous, starting OUT_ALIGN_PAD elements past the guard (a 16-byte boundary: GUARD + OUT_ALIGN_PAD = 72),
 * so a head dim that is a multiple of 8 gives 16-byte aligned rows (the CUDA forward's 16-byte stores). */
#define OUT_ALIGN_PAD 5
static guarded make_out(gpucore_context *ctx, gpucore_dtype dt, int permuted, const int64_t *shape,
                        gpucore_tensor **view)
{
    if (!permuted) {
        const int64_t n = shape[0] * shape[1] * shape[2] * shape[3] + OUT_ALIGN_PAD;
        const int64_t strides[4] = {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
        guarded g = make_output(ctx, dt, 1, &n, 0);
        CHECK_OK(gpucore_tensor_as_strided(g.view, 4, shape, strides, GUARD + OUT_ALIGN_PAD, view));
        return g;
    }
    const int64_t bshape[4] = {shape[0], shape[2], shape[1], shape[3]};
    guarded g = make_output(ctx, dt, 4, bshape, 0);
    const int perm[4] = {0, 2, 1, 3};
    CHECK_OK(gpucore_tensor_permute(g.view, perm, view));
    return g;
}

/* The values of an output made by make_out (logical order), guards checked. */
static double *take_out(guarded *g, gpucore_tensor *view, const char *what)
{
    double *vals = read_back(view);
    if (view != g->view) gpucore_tensor_destroy(view);
    free(finish_output(g, what));
    return vals;
}

/* lse values that are -inf in both agree; any other -inf fails the comparison. */
static void check_lse(double *got, double *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (got[i] == -INFINITY && want[i] == -INFINITY) got[i] = want[i] = 0;
    check_close(got, want, n, 1e-5, what);
}

/* Whether case c in dt must run on cuDNN's SDPA here: a cudnn case in f16/bf16 on the cuda backend, when
 * GPUCORE_EXPECT_CUDNN=1. */
static int expect_cudnn(const att_case *c, gpucore_dtype dt)
{
    const char *e = getenv("GPUCORE_EXPECT_CUDNN");
    return c->cudnn && dt != GPUCORE_F32 && !strcmp(check_device, "cuda") && e && !strcmp(e, "1");
}

/* The one call since the stats were reset ran on cuDNN; else fail, naming the graph and why cuDNN declined it. */
static void check_on_cudnn(gpucore_context *ctx, const att_case *c, gpucore_dtype dt, const char *which)
{
    gpucore_attention_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_OK(gpucore_attention_get_stats(ctx, &st));
    CHECK(st.cudnn_calls == 1);
    if (st.cudnn_calls == 1) return;
    int reason = -1;
    for (int i = 0; i < GPUCORE_ATTN_FALLBACK_REASONS; i++)
        if (st.fallback_by_reason[i]) reason = i;
    const char *why = reason >= 0 ? gpucore_attention_fallback_reason_text(reason) : NULL;
    fprintf(stderr, "  cuDNN declined the %s %s %s graph (B %lld H %lld Sq %lld Sk %lld D %lld%s%s%s): %s\n", c->name,
            gpucore_dtype_name(dt), which, (long long)c->B, (long long)c->H, (long long)c->Sq, (long long)c->Sk,
            (long long)c->D, c->causal ? ", causal" : "", c->lens ? ", kv_lengths" : "",
            c->mask == 1 ? ", mask [Sq, Sk]" : c->mask == 4 ? ", mask [B, 1, 1, Sk]" : "", why ? why : "not counted");
}

static void run_case(gpucore_context *ctx, const att_case *c, gpucore_dtype dt)
{
    char what[160];
    const double tol = tolerance_for(dt, 1); /* attention sums like a reduction */
    att_ref r = {c, 0, NULL, NULL, NULL, NULL, NULL};
    gpucore_tensor *q = make_operand(ctx, dt, c->layout, c->B, c->H, c->Sq, c->D, &r.q);
    gpucore_tensor *k = make_operand(ctx, dt, c->layout, c->B, c->Hkv, c->Sk, c->D, &r.k);
    gpucore_tensor *v = make_operand(ctx, dt, c->layout, c->B, c->Hkv, c->Sk, c->Dv, &r.v);
    gpucore_tensor *dout = make_operand(ctx, dt, c->layout == 1 || c->layout == 3 ? 0 : c->layout, c->B, c->H, c->Sq, c->Dv, NULL);
    double *hdout = read_back(dout);
    gpucore_tensor *mask = NULL, *lens = NULL;
    double *hmask = NULL;
    int32_t hlens[8];
    if (c->mask == 1) {
        const int64_t ms[2] = {c->Sq, c->Sk};
        mask = make_input(ctx, GPUCORE_F32, 2, ms, 0, -2, 1, &hmask);
    } else if (c->mask == 2) {
        const int64_t ms[4] = {c->B, 1, 1, c->Sk};
        const int64_t n = c->B * c->Sk;
        uint8_t *bits = malloc((size_t)n);
        hmask = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) hmask[i] = bits[i] = (uint8_t)(rand() % 4 != 0); /* a quarter masked */
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_U8, 4, ms, &mask));
        CHECK_OK(gpucore_copy_from_host(mask, bits, n));
        free(bits);
    } else if (c->mask == 3) {
        const int64_t ms[4] = {c->B, c->H, c->Sq, c->Sk};
        mask = make_input(ctx, dt, 4, ms, 0, -3, 1, &hmask);
    } else if (c->mask == 4) { /* rows that admit no key: all of batch entry 1, and row 0 of entry 0 when causal */
        const int64_t ms[4] = {c->B, 1, 1, c->Sk}, n = c->B * c->Sk;
        mask = make_input(ctx, GPUCORE_F32, 4, ms, 0, -2, 1, &hmask);
        float *fm = malloc(sizeof(float) * (size_t)n);
        for (int64_t e = 0; e < n; e++) {
            if (e == 0 || e / c->Sk == 1) hmask[e] = -INFINITY;
            fm[e] = (float)hmask[e];
        }
        CHECK_OK(gpucore_copy_from_host(mask, fm, (int64_t)sizeof(float) * n));
        free(fm);
    }
    if (c->lens) {
        for (int64_t b = 0; b < c->B; b++) hlens[b] = b == 0 ? (int32_t)c->Sk : b == 1 ? 0 : (int32_t)(c->Sk * 2 / 3);
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 1, &c->B, &lens));
        CHECK_OK(gpucore_copy_from_host(lens, hlens, (int64_t)sizeof(int32_t) * c->B));
    }
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = c->causal;
    o.dropout_p = c->dropout;
    o.seed = 1234 + (uint64_t)c->Sq;
    o.offset = 8;
    o.scale = c->D == 40 ? 0.3 : 0; /* an explicit scale once, else 1/sqrt(D) */
    r.scale = (double)(float)(o.scale > 0 ? o.scale : 1.0 / sqrt((double)c->D));
    ref_masks(&r, hmask, c->lens ? hlens : NULL, o.seed, o.offset);

    const int64_t oshape[4] = {c->B, c->H, c->Sq, c->Dv}, lshape[1] = {c->B * c->H * c->Sq};
    const int64_t no = c->B * c->H * c->Sq * c->Dv, nq = c->B * c->H * c->Sq * c->D;
    const int64_t nk = c->B * c->Hkv * c->Sk * c->D, nv = c->B * c->Hkv * c->Sk * c->Dv;
    gpucore_tensor *out_t, *dq_t, *dk_t, *dv_t;
    guarded go = make_out(ctx, dt, c->layout == 1, oshape, &out_t);
    guarded gl = make_output(ctx, GPUCORE_F32, 1, lshape, 0);
    const int want_cudnn = expect_cudnn(c, dt);
    if (want_cudnn) CHECK_OK(gpucore_attention_reset_stats(ctx));
    CHECK_OK(gpucore_attention_forward(out_t, gl.view, q, k, v, mask, lens, &o, NULL));
    if (want_cudnn) check_on_cudnn(ctx, c, dt, "forward");
    double *ref_out = malloc(sizeof(double) * (size_t)no), *ref_lse = malloc(sizeof(double) * (size_t)lshape[0]);
    ref_forward(&r, ref_out, ref_lse);

    /* backward reads the forward's out and lse: keep them (a fresh out tensor of the same values) */
    gpucore_tensor *lse_keep = NULL, *out_keep = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, lshape, &lse_keep));
    CHECK_OK(gpucore_tensor_create(ctx, dt, 4, oshape, &out_keep));
    CHECK_OK(gpucore_copy(lse_keep, gl.view, NULL));
    CHECK_OK(gpucore_copy(out_keep, out_t, NULL));
    double *got_out = take_out(&go, out_t, "out guard"), *got_lse = take_out(&gl, gl.view, "lse guard");
    snprintf(what, sizeof what, "%s %s forward out", c->name, gpucore_dtype_name(dt));
    check_close(got_out, ref_out, no, tol, what);
    snprintf(what, sizeof what, "%s %s forward lse", c->name, gpucore_dtype_name(dt));
    check_lse(got_lse, ref_lse, lshape[0], what);

    const int64_t qs[4] = {c->B, c->H, c->Sq, c->D}, ks[4] = {c->B, c->Hkv, c->Sk, c->D},
                  vs[4] = {c->B, c->Hkv, c->Sk, c->Dv};
    guarded gq = make_out(ctx, dt, c->layout == 1, qs, &dq_t), gk = make_out(ctx, dt, c->layout == 1, ks, &dk_t),
            gv = make_out(ctx, dt, c->layout == 1, vs, &dv_t);
    if (want_cudnn) CHECK_OK(gpucore_attention_reset_stats(ctx));
    CHECK_OK(gpucore_attention_backward(dq_t, dk_t, dv_t, dout, q, k, v, out_keep, lse_keep, mask, lens, &o, NULL));
    if (want_cudnn) check_on_cudnn(ctx, c, dt, "backward");
    double *passed_out = read_back(out_keep);
    double *rdq = malloc(sizeof(double) * (size_t)nq), *rdk = malloc(sizeof(double) * (size_t)nk),
           *rdv = malloc(sizeof(double) * (size_t)nv);
    ref_backward(&r, hdout, passed_out, rdq, rdk, rdv);
    double *gdq = take_out(&gq, dq_t, "dq guard"), *gdk = take_out(&gk, dk_t, "dk guard"),
           *gdv = take_out(&gv, dv_t, "dv guard");
    const char *gn[3] = {"dq", "dk", "dv"};
    double *gg[3] = {gdq, gdk, gdv}, *rg[3] = {rdq, rdk, rdv};
    const int64_t gc[3] = {nq, nk, nv};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s %s backward %s", c->name, gpucore_dtype_name(dt), gn[i]);
        check_close(gg[i], rg[i], gc[i], tol, what);
        free(gg[i]);
        free(rg[i]);
    }
    free(got_out); free(got_lse); free(ref_out); free(ref_lse); free(passed_out); free(hdout);
    free(r.q); free(r.k); free(r.v); free(r.bias); free(r.keep); free(hmask);
    gpucore_tensor *ts[7] = {q, k, v, dout, mask, lens, lse_keep};
    for (int i = 0; i < 7; i++) gpucore_tensor_destroy(ts[i]);
    gpucore_tensor_destroy(out_keep);
}

static const att_case cases[] = {
    /* name          B  H Hkv  Sq  Sk   D   Dv causal mask lens drop layout cudnn */
    {"plain",        2, 3, 3,  37, 45, 40,  40, 0, 0, 0, 0.0, 0, 1},
    {"causal-bshd",  1, 2, 2,  70, 70, 64,  64, 1, 0, 0, 0.0, 1, 0},
    {"gqa-mask-len", 3, 4, 2,  33, 41, 24,  16, 0, 1, 1, 0.0, 0, 0},
    {"bool-drop",    2, 2, 1,  29, 29, 16,  24, 1, 2, 0, 0.2, 2, 0},
    {"causal-sq<sk", 1, 2, 1,  17, 50, 8,   8,  1, 3, 1, 0.0, 0, 0},
    {"hd256",        1, 1, 1,  19, 23, 256, 256, 0, 0, 0, 0.0, 0, 0},
    {"hd200",        1, 2, 2,  21, 18, 200, 136, 1, 0, 0, 0.1, 1, 0},
    /* f16/bf16 with head dims that are multiples of 16 up to 128 take the CUDA kernel's
     * tensor-core (ldmatrix + mma.sync) path: tails of a 16- or 64-row query block and a 64-key tile, causal, GQA,
     * masks, lengths, dropout and non-contiguous operands */
    {"tc-hd64",      2, 4, 2,  81, 83, 64,  64, 1, 0, 0, 0.0, 1, 0},
    {"tc-hd128",     3, 2, 1,  37, 71, 128, 128, 0, 1, 1, 0.1, 2, 0},
    {"tc-hd32-96",   2, 2, 2,  18, 65, 32,  96, 0, 2, 0, 0.0, 0, 0},
    /* the forward's cp.async path (unit stride, 16-byte rows) with tiles that need no mask (non-causal and
     * unmasked; causal below the diagonal) beside diagonal and key-end tiles, and its element path for rows
     * that are not 16-byte aligned */
    {"tc-open",      1, 2, 2, 150, 200, 64, 64, 0, 0, 0, 0.0, 0, 0},
    {"tc-causal-128", 1, 2, 1, 140, 140, 128, 128, 1, 0, 0, 0.0, 0, 0},
    {"tc-unaligned", 2, 2, 2,  70, 66, 64,  32, 1, 0, 1, 0.0, 3, 0},
    /* B·Hkv of 16: the CPU's backward runs fused over (b, kv head) with up to 4 threads */
    {"fused-gqa-len", 8, 4, 2, 45, 45, 16,  16, 1, 1, 1, 0.0, 1, 0},
    {"fused-drop",    4, 4, 4, 70, 70, 16,  24, 0, 2, 0, 0.2, 2, 0},
    /* MHA f16/bf16 graphs cuDNN's SDPA takes (Sk not a multiple of 128): causal; causal with key lengths {Sk, 0,
     * 2Sk/3}; an additive f32 [Sq, Sk] mask with key lengths; an additive f32 [B, 1, 1, Sk] mask that leaves rows
     * with no key (the fix-up), causal */
    {"mha-causal",     2, 3, 3, 45, 45, 64,  64, 1, 0, 0, 0.0, 0, 1},
    {"mha-causal-len", 3, 2, 2, 30, 70, 32,  32, 1, 0, 1, 0.0, 0, 1},
    {"mha-mask-len",   3, 2, 2, 33, 50, 48,  48, 0, 1, 1, 0.0, 0, 1},
    {"mha-mask-b11sk", 2, 2, 2, 40, 61, 64,  64, 1, 4, 0, 0.0, 1, 1},
    /* decode steps (one to four query rows against a longer cache, every cached key visible; key lengths),
     * which the CPU forms with vector dot products instead of GEMM calls: SmolLM2's GQA 9/3 (a grouped-head graph
     * cuDNN's SDPA takes), and 4 rows */
    {"decode-gqa",     2, 9, 3,  1, 97, 64,  64, 0, 0, 1, 0.0, 0, 1},
    {"decode-4rows",   1, 4, 2,  4, 130, 32, 48, 0, 0, 0, 0.0, 1, 0},
};
#define FIRST_TC_CASE 7
#define FIRST_FUSED_CASE 13
#define FIRST_MHA_CASE 15

static void test_cases(gpucore_context *ctx)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++)
            if (d == 0 || i == 0 || i == 3 || i == 6 || (i >= FIRST_TC_CASE && i < FIRST_FUSED_CASE) ||
                i >= FIRST_MHA_CASE)
                run_case(ctx, &cases[i], float_dtypes[d]);
}

/* The backward's bits do not depend on how it is split: a batch of 8 at once (the CPU's fused
 * pass over (b, kv head) when 16 >= 4 threads) against each batch entry alone (two passes). */
static void test_split_bits(gpucore_context *ctx)
{
    const int64_t B = 8, H = 4, Hkv = 2, S = 100, D = 16, qs[4] = {B, H, S, D}, ks[4] = {B, Hkv, S, D},
                  ls[3] = {B, H, S}, n = B * H * S * D, nk = B * Hkv * S * D;
    gpucore_tensor *q = make_input(ctx, GPUCORE_F32, 4, qs, 0, -2, 2, NULL), *k = make_input(ctx, GPUCORE_F32, 4, ks, 0, -2, 2, NULL);
    gpucore_tensor *v = make_input(ctx, GPUCORE_F32, 4, ks, 0, -1, 1, NULL), *g = make_input(ctx, GPUCORE_F32, 4, qs, 0, -1, 1, NULL);
    gpucore_tensor *out = NULL, *lse = NULL, *d1[3] = {NULL, NULL, NULL}, *d2[3] = {NULL, NULL, NULL};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, qs, &out));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, ls, &lse));
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, i ? ks : qs, &d1[i]));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, i ? ks : qs, &d2[i]));
    }
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = 1;
    CHECK_OK(gpucore_attention_forward(out, lse, q, k, v, NULL, NULL, &o, NULL));
    CHECK_OK(gpucore_attention_backward(d1[0], d1[1], d1[2], g, q, k, v, out, lse, NULL, NULL, &o, NULL));
    for (int64_t b = 0; b < B; b++) {
        gpucore_tensor *all[10] = {d2[0], d2[1], d2[2], g, q, k, v, out, lse, NULL}, *one[10];
        for (int i = 0; i < 9; i++) CHECK_OK(gpucore_tensor_slice(all[i], 0, b, b + 1, 1, &one[i]));
        CHECK_OK(gpucore_attention_backward(one[0], one[1], one[2], one[3], one[4], one[5], one[6], one[7], one[8],
                                            NULL, NULL, &o, NULL));
        for (int i = 0; i < 9; i++) gpucore_tensor_destroy(one[i]);
    }
    for (int i = 0; i < 3; i++) {
        const int64_t m = i ? nk : n;
        float *x = malloc(sizeof(float) * (size_t)m), *y = malloc(sizeof(float) * (size_t)m);
        CHECK_OK(gpucore_copy_to_host(x, m * 4, d1[i]));
        CHECK_OK(gpucore_copy_to_host(y, m * 4, d2[i]));
        int64_t diff = 0;
        for (int64_t e = 0; e < m; e++) diff += memcmp(&x[e], &y[e], 4) != 0;
        CHECK(diff == 0);
        if (diff) fprintf(stderr, "  attention backward %s: %lld elements differ between batch 8 and 8 x batch 1\n",
                          i == 0 ? "dq" : i == 1 ? "dk" : "dv", (long long)diff);
        free(x); free(y);
        gpucore_tensor_destroy(d1[i]); gpucore_tensor_destroy(d2[i]);
    }
    gpucore_tensor *ts[6] = {q, k, v, g, out, lse};
    for (int i = 0; i < 6; i++) gpucore_tensor_destroy(ts[i]);
}

/* Forward + backward at seq 384 (256 emulated) never hold a seq×seq buffer. */
static void test_memory(gpucore_context *ctx, int emulated)
{
    const int64_t S = emulated ? 256 : 384, shape[4] = {1, 2, S, 32}, ln = 2 * S;
    gpucore_tensor *q = make_input(ctx, GPUCORE_F32, 4, shape, 0, -1, 1, NULL);
    gpucore_tensor *k = make_input(ctx, GPUCORE_F32, 4, shape, 0, -1, 1, NULL);
    gpucore_tensor *v = make_input(ctx, GPUCORE_F32, 4, shape, 0, -1, 1, NULL);
    gpucore_tensor *g = make_input(ctx, GPUCORE_F32, 4, shape, 0, -1, 1, NULL);
    gpucore_tensor *out = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, shape, &out));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &ln, &lse));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, shape, &dq));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, shape, &dk));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, shape, &dv));
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_memory_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
    CHECK_OK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &before));
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    o.is_causal = 1;
    CHECK_OK(gpucore_attention_forward(out, lse, q, k, v, NULL, NULL, &o, NULL));
    CHECK_OK(gpucore_attention_backward(dq, dk, dv, g, q, k, v, out, lse, NULL, NULL, &o, NULL));
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &after));
    int64_t extra = after.allocated_bytes_peak - before.allocated_bytes;
    CHECK(extra < S * S * 4 / 4); /* well under one head's score matrix */
    if (extra >= S * S)
        fprintf(stderr, "  attention at seq %lld allocated %lld bytes beyond its inputs\n", (long long)S, (long long)extra);
    gpucore_tensor *ts[9] = {q, k, v, g, out, lse, dq, dk, dv};
    for (int i = 0; i < 9; i++) gpucore_tensor_destroy(ts[i]);
}

/* A NaN score gives that row a NaN lse and a NaN output (as PyTorch's softmax / logsumexp), not lse -inf
 * (which would hide it: l is NaN, so "l > 0" is false); the other rows match the reference. One NaN in an
 * additive f32 mask, f32 (the FMA kernel) and f16 at head dim 16 (the tensor-core kernel). */
static void test_nan_score(gpucore_context *ctx)
{
    const att_case c = {"nan-score", 1, 2, 2, 19, 70, 16, 16, 0, 1, 0, 0.0, 0, 0};
    const int64_t ms[2] = {c.Sq, c.Sk}, nanrow = 5, oshape[4] = {c.B, c.H, c.Sq, c.Dv}, nl = c.B * c.H * c.Sq;
    for (int d = 0; d < 2; d++) {
        const gpucore_dtype dt = d ? GPUCORE_F16 : GPUCORE_F32;
        char what[96];
        att_ref r = {&c, (double)(float)(1.0 / sqrt((double)c.D)), NULL, NULL, NULL, NULL, NULL};
        gpucore_tensor *q = make_operand(ctx, dt, 0, c.B, c.H, c.Sq, c.D, &r.q);
        gpucore_tensor *k = make_operand(ctx, dt, 0, c.B, c.Hkv, c.Sk, c.D, &r.k);
        gpucore_tensor *v = make_operand(ctx, dt, 0, c.B, c.Hkv, c.Sk, c.Dv, &r.v);
        double *hmask = NULL;
        gpucore_tensor *mask = make_input(ctx, GPUCORE_F32, 2, ms, 0, -2, 1, &hmask);
        float *fm = malloc(sizeof(float) * (size_t)(c.Sq * c.Sk));
        for (int64_t e = 0; e < c.Sq * c.Sk; e++) fm[e] = (float)hmask[e];
        fm[nanrow * c.Sk + 41] = NAN;
        /* and every third key of that row masked out: the row still admits keys in every 32-key chunk, but not
         * all of them (cuDNN's fix-up must keep it NaN, not take it for a row with no key) */
        for (int64_t j = 0; j < c.Sk; j += 3) fm[nanrow * c.Sk + j] = -INFINITY;
        CHECK_OK(gpucore_copy_from_host(mask, fm, (int64_t)sizeof(float) * c.Sq * c.Sk));
        hmask[nanrow * c.Sk + 41] = 0; /* the reference sees a finite mask; row nanrow is checked apart */
        gpucore_attention_options o;
        gpucore_attention_options_init(&o);
        ref_masks(&r, hmask, NULL, 0, 0);
        guarded go = make_output(ctx, dt, 4, oshape, 0), gl = make_output(ctx, GPUCORE_F32, 1, &nl, 0);
        CHECK_OK(gpucore_attention_forward(go.view, gl.view, q, k, v, mask, NULL, &o, NULL));
        double *got = take_out(&go, go.view, "nan out guard"), *lse = take_out(&gl, gl.view, "nan lse guard");
        double *rout = malloc(sizeof(double) * (size_t)(nl * c.Dv)), *rlse = malloc(sizeof(double) * (size_t)nl);
        ref_forward(&r, rout, rlse);
        int64_t bad_nan = 0;
        const double seen = lse[nanrow];
        for (int64_t h = 0; h < c.H; h++) {
            const int64_t row = h * c.Sq + nanrow;
            bad_nan += lse[row] == lse[row]; /* must be NaN */
            for (int64_t y = 0; y < c.Dv; y++) {
                bad_nan += got[row * c.Dv + y] == got[row * c.Dv + y];
                got[row * c.Dv + y] = rout[row * c.Dv + y] = 0;
            }
            lse[row] = rlse[row] = 0;
        }
        CHECK(bad_nan == 0);
        if (bad_nan)
            fprintf(stderr, "  attention %s: %lld lse/out values of the rows with a NaN score are not NaN (lse %g)\n",
                    gpucore_dtype_name(dt), (long long)bad_nan, seen);
        snprintf(what, sizeof what, "nan-score %s other rows out", gpucore_dtype_name(dt));
        check_close(got, rout, nl * c.Dv, tolerance_for(dt, 1), what);
        snprintf(what, sizeof what, "nan-score %s other rows lse", gpucore_dtype_name(dt));
        check_lse(lse, rlse, nl, what);
        free(got); free(lse); free(rout); free(rlse); free(fm); free(hmask);
        free(r.q); free(r.k); free(r.v); free(r.bias); free(r.keep);
        gpucore_tensor *ts[4] = {q, k, v, mask};
        for (int i = 0; i < 4; i++) gpucore_tensor_destroy(ts[i]);
    }
}

/* The engine statistics: NULL handles and a wrong struct_size are refused; on the CPU nothing is counted. */
static void test_stats_calls(gpucore_context *ctx, int is_cpu)
{
    gpucore_attention_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(gpucore_attention_get_stats(NULL, &st), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_attention_get_stats(ctx, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_attention_reset_stats(NULL), GPUCORE_ERR_NULL_POINTER);
    st.struct_size = 8;
    CHECK_STATUS(gpucore_attention_get_stats(ctx, &st), GPUCORE_ERR_INVALID_ARGUMENT);
    st.struct_size = sizeof st;
    CHECK_OK(gpucore_attention_get_stats(ctx, &st));
    if (is_cpu) CHECK(st.cudnn_calls == 0 && st.fallback_calls == 0); /* the CPU counts nothing */
    CHECK_OK(gpucore_attention_reset_stats(ctx));
}

static void test_bad_input(gpucore_context *ctx)
{
    const int64_t s4[4] = {1, 4, 8, 16}, kv3[4] = {1, 3, 8, 16}, big[4] = {1, 1, 4, 260}, s3[3] = {4, 8, 16}, ln = 4;
    gpucore_tensor *q = NULL, *k3 = NULL, *qb = NULL, *t3 = NULL, *qh = NULL, *out = NULL, *lse = NULL, *lse_bad = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, s4, &q));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, kv3, &k3));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, big, &qb));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s3, &t3));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 4, s4, &qh));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, s4, &out));
    const int64_t nl = 32;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &nl, &lse));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &ln, &lse_bad));
    gpucore_attention_options o;
    gpucore_attention_options_init(&o);
    CHECK_STATUS(gpucore_attention_forward(out, lse, NULL, q, q, NULL, NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_attention_forward(out, lse, t3, q, q, NULL, NULL, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_attention_forward(out, lse, q, k3, k3, NULL, NULL, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_attention_forward(out, NULL, qb, qb, qb, NULL, NULL, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_attention_forward(out, lse, q, qh, q, NULL, NULL, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_attention_forward(out, lse_bad, q, q, q, NULL, NULL, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_attention_forward(q, lse, q, q, q, NULL, NULL, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_attention_forward(out, lse, q, q, q, t3, NULL, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    o.dropout_p = 1.0;
    CHECK_STATUS(gpucore_attention_forward(out, lse, q, q, q, NULL, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.dropout_p = 0;
    o.scale = -1;
    CHECK_STATUS(gpucore_attention_forward(out, lse, q, q, q, NULL, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.scale = 0;
    o.struct_size = 8;
    CHECK_STATUS(gpucore_attention_forward(out, lse, q, q, q, NULL, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *bcast = NULL; /* a stride-0 output */
    const int64_t st0[4] = {0, 0, 16, 1};
    CHECK_OK(gpucore_tensor_as_strided(out, 4, s4, st0, 0, &bcast));
    CHECK_STATUS(gpucore_attention_forward(bcast, lse, q, q, q, NULL, NULL, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_attention_backward(q, NULL, NULL, out, q, q, q, out, NULL, NULL, NULL, NULL, NULL),
                 GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_attention_backward(out, NULL, NULL, out, q, q, q, out, lse, NULL, NULL, NULL, NULL),
                 GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_attention_forward(out, lse, q, q, q, NULL, NULL, NULL, NULL)); /* still usable */
    gpucore_tensor *ts[9] = {q, k3, qb, t3, qh, out, lse, lse_bad, bcast};
    for (int i = 0; i < 9; i++) gpucore_tensor_destroy(ts[i]);
}

/* The per-backend cases that depend on which backend runs them (check_device). */
static void test_memory_here(gpucore_context *ctx) { test_memory(ctx, !strcmp(check_device, "cuda-emulated")); }
static void test_stats_here(gpucore_context *ctx) { test_stats_calls(ctx, !strcmp(check_device, "cpu")); }

int main(void)
{
    srand(2020);
    test_reference_gradients();
    const device_test_fn tests[] = {test_cases, test_nan_score, test_split_bits, test_memory_here, test_bad_input, test_stats_here};
    return run_on_devices("test_attention", tests, (int)(sizeof tests / sizeof tests[0]));
}
