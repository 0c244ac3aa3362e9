/*
 * test_checkpoint.c — the segment executor on every backend present.
 *
 * An MLP, a small CNN with a residual block, and transformer-style blocks with
 * layer norm and dropout run one training step under every policy (and with the
 * offload and custom saved-tensor hooks); parameter and input gradients must be
 * bitwise identical to keep-all on the CPU (within 1e-5 elsewhere). Peak allocated
 * memory under sqrt(n) and under a budget is measured from the allocator and
 * checked against the policy's bound. A segment whose output is a view of its
 * input (flatten) adds no storage to the held / keep-all figures or the budget
 * estimate. Bad input: a backward reading a tensor it
 * never saved, a budget below one segment, failing callbacks, a recompute that
 * changes shape — each a status naming the segment, with allocator statistics back
 * at their baseline afterwards (nothing leaks).
 */
#include <stdint.h>
#include "check.h"

#define MAXP 64

typedef struct model {
    gpucore_context *ctx;
    gpucore_ckpt *ck;
    gpucore_tensor *params[MAXP], *grads[MAXP];
    int np;
    gpucore_tensor *frozen[MAXP]; /* tensors without a gradient (frozen weights, RoPE tables) */
    int nfrozen;
    gpucore_tensor *x, *dy, *dx;
} model;

static uint64_t seed_next = 1;

static gpucore_tensor *rand_tensor(gpucore_context *ctx, int ndim, const int64_t *shape, double scale)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, ndim, shape, &t));
    if (t) CHECK_OK(gpucore_random(t, GPUCORE_UNIFORM, -scale, scale, seed_next++, 0, NULL));
    return t;
}

static gpucore_tensor *param(model *m, int ndim, const int64_t *shape, double scale)
{
    gpucore_tensor *p = rand_tensor(m->ctx, ndim, shape, scale), *g = NULL;
    CHECK_OK(gpucore_tensor_create(m->ctx, GPUCORE_F32, ndim, shape, &g));
    if (g) CHECK_OK(gpucore_fill(g, NAN, NULL)); /* poison: every gradient must be written */
    m->params[m->np] = p;
    m->grads[m->np] = g;
    m->np++;
    return p;
}

static void model_free(model *m)
{
    CHECK_OK(gpucore_ckpt_destroy(m->ck));
    for (int i = 0; i < m->np; i++) {
        gpucore_tensor_destroy(m->params[i]);
        gpucore_tensor_destroy(m->grads[i]);
    }
    for (int i = 0; i < m->nfrozen; i++) gpucore_tensor_destroy(m->frozen[i]);
    gpucore_tensor_destroy(m->x);
    gpucore_tensor_destroy(m->dy);
    gpucore_tensor_destroy(m->dx);
    memset(m, 0, sizeof *m);
}

static void add_linear(model *m, const char *name, int64_t in, int64_t out, gpucore_activation act)
{
    int64_t ws[2] = {out, in};
    gpucore_tensor *w = param(m, 2, ws, 1.0 / sqrt((double)in));
    gpucore_tensor *b = param(m, 1, &out, 0.1);
    CHECK_OK(gpucore_ckpt_add_linear(m->ck, name, w, b, act, m->grads[m->np - 2], m->grads[m->np - 1]));
}

static void add_conv(model *m, const char *name, int64_t cin, int64_t cout, gpucore_activation act)
{
    int64_t ws[4] = {cout, cin, 3, 3};
    gpucore_tensor *w = param(m, 4, ws, 1.0 / sqrt(9.0 * (double)cin));
    gpucore_tensor *b = param(m, 1, &cout, 0.1);
    gpucore_conv_options o;
    gpucore_conv_options_init(&o);
    o.pad_h = o.pad_w = 1;
    CHECK_OK(gpucore_ckpt_add_conv2d(m->ck, name, w, b, &o, act, m->grads[m->np - 2], m->grads[m->np - 1]));
}

static void add_norm(model *m, const char *name, int64_t d)
{
    gpucore_tensor *g = param(m, 1, &d, 1.0), *b = param(m, 1, &d, 0.1);
    CHECK_OK(gpucore_ckpt_add_layer_norm(m->ck, name, g, b, 1e-5, m->grads[m->np - 2], m->grads[m->np - 1]));
}

static void io(model *m, int ndim, const int64_t *xs, int ndy, const int64_t *ys)
{
    m->x = rand_tensor(m->ctx, ndim, xs, 1.0);
    m->dy = rand_tensor(m->ctx, ndy, ys, 1.0);
    CHECK_OK(gpucore_tensor_create(m->ctx, GPUCORE_F32, ndim, xs, &m->dx));
}

static gpucore_tensor *frozen(model *m, int ndim, const int64_t *shape, double scale)
{
    return m->frozen[m->nfrozen++] = rand_tensor(m->ctx, ndim, shape, scale);
}

/* cos/sin [S, R/2] of the RoPE angles s·10000^(-2p/R). */
static void rope_tables(model *m, int64_t S, int64_t R2, gpucore_tensor **cs, gpucore_tensor **sn)
{
    int64_t shape[2] = {S, R2};
    float *c = malloc(sizeof(float) * (size_t)(S * R2)), *si = malloc(sizeof(float) * (size_t)(S * R2));
    for (int64_t s = 0; s < S; s++)
        for (int64_t p = 0; p < R2; p++) {
            double th = (double)s * pow(10000.0, -(double)p / (double)R2);
            c[s * R2 + p] = (float)cos(th);
            si[s * R2 + p] = (float)sin(th);
        }
    *cs = frozen(m, 2, shape, 1.0);
    *sn = frozen(m, 2, shape, 1.0);
    CHECK_OK(gpucore_copy_from_host(*cs, c, S * R2 * 4));
    CHECK_OK(gpucore_copy_from_host(*sn, si, S * R2 * 4));
    free(c);
    free(si);
}

/* Two transformer layers of built-in blocks. Layer 0: RMSNorm, RoPE, GQA (4 query heads on
 * 2 kv heads), biases, SwiGLU MLP. Layer 1: LayerNorm, no RoPE, 4 heads, frozen projections
 * with LoRA adapters (dropout 0.1) on qkv and out, GELU MLP without biases. */
static void build_transformer(model *m)
{
    const int64_t D = 16, H = 4, hd = 4, S = 6, F = 24;
    gpucore_tensor *cs = NULL, *sn = NULL;
    rope_tables(m, S + 3, hd / 2, &cs, &sn);
    for (int l = 0; l < 2; l++) {
        const int64_t Hkv = l == 0 ? 2 : 4, nqkv = (H + 2 * Hkv) * hd, r = 3;
        const int64_t wq[2] = {nqkv, D}, wo[2] = {D, H * hd}, la_q[2] = {r, D}, lb_q[2] = {nqkv, r}, la_o[2] = {r, H * hd},
                      lb_o[2] = {D, r};
        gpucore_ckpt_attention_block a;
        gpucore_ckpt_attention_block_init(&a);
        a.heads = (int32_t)H;
        a.kv_heads = (int32_t)Hkv;
        a.layer_norm = l;
        a.norm_weight = param(m, 1, &D, 1.0);
        a.d_norm_weight = m->grads[m->np - 1];
        if (l == 1) {
            a.norm_bias = param(m, 1, &D, 0.1);
            a.d_norm_bias = m->grads[m->np - 1];
            a.w_qkv = frozen(m, 2, wq, 0.25);
            a.w_out = frozen(m, 2, wo, 0.25);
            a.b_out = frozen(m, 1, &D, 0.1);
            a.lora_qkv_a = param(m, 2, la_q, 0.25), a.d_lora_qkv_a = m->grads[m->np - 1];
            a.lora_qkv_b = param(m, 2, lb_q, 0.25), a.d_lora_qkv_b = m->grads[m->np - 1];
            a.lora_out_a = param(m, 2, la_o, 0.25), a.d_lora_out_a = m->grads[m->np - 1];
            a.lora_out_b = param(m, 2, lb_o, 0.25), a.d_lora_out_b = m->grads[m->np - 1];
            a.lora_scale = 0.5;
            a.lora_dropout = 0.1;
        } else {
            a.w_qkv = param(m, 2, wq, 0.25), a.dw_qkv = m->grads[m->np - 1];
            a.b_qkv = param(m, 1, &nqkv, 0.1), a.db_qkv = m->grads[m->np - 1];
            a.w_out = param(m, 2, wo, 0.25), a.dw_out = m->grads[m->np - 1];
            a.b_out = param(m, 1, &D, 0.1), a.db_out = m->grads[m->np - 1];
            a.rope_cos = cs;
            a.rope_sin = sn;
        }
        char name[32];
        snprintf(name, sizeof name, "layer%d.attn", l);
        CHECK_OK(gpucore_ckpt_add_attention_block(m->ck, name, &a));
        gpucore_ckpt_mlp_block b;
        gpucore_ckpt_mlp_block_init(&b);
        b.layer_norm = l;
        b.swiglu = l == 0;
        const int64_t w1[2] = {l == 0 ? 2 * F : F, D}, w2[2] = {D, F};
        b.norm_weight = param(m, 1, &D, 1.0), b.d_norm_weight = m->grads[m->np - 1];
        if (l == 1) b.norm_bias = param(m, 1, &D, 0.1), b.d_norm_bias = m->grads[m->np - 1];
        b.w_fc1 = param(m, 2, w1, 0.25), b.dw_fc1 = m->grads[m->np - 1];
        if (l == 0) b.b_fc1 = param(m, 1, &w1[0], 0.1), b.db_fc1 = m->grads[m->np - 1];
        b.w_fc2 = param(m, 2, w2, 0.2), b.dw_fc2 = m->grads[m->np - 1];
        if (l == 0) b.b_fc2 = param(m, 1, &D, 0.1), b.db_fc2 = m->grads[m->np - 1];
        snprintf(name, sizeof name, "layer%d.mlp", l);
        CHECK_OK(gpucore_ckpt_add_mlp_block(m->ck, name, &b));
    }
    int64_t xs[3] = {2, S, D};
    io(m, 3, xs, 3, xs);
}

enum { MLP = 0, CNN = 1, BLOCK = 2, TRANSFORMER = 3 };
static const char *model_name[] = {"mlp", "cnn", "block", "transformer"};

static void build(model *m, gpucore_context *ctx, int kind)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    seed_next = 1000;
    CHECK_OK(gpucore_ckpt_create(ctx, model_name[kind], &m->ck));
    if (kind == MLP) {
        static const gpucore_activation acts[3] = {GPUCORE_ACT_GELU_TANH, GPUCORE_ACT_RELU, GPUCORE_ACT_NONE};
        char name[32];
        for (int i = 0; i < 9; i++) {
            snprintf(name, sizeof name, "fc%d", i);
            add_linear(m, name, 24, 24, acts[i % 3]);
        }
        int64_t xs[2] = {16, 24};
        io(m, 2, xs, 2, xs);
    } else if (kind == CNN) {
        add_conv(m, "conv0", 3, 8, GPUCORE_ACT_RELU);
        add_conv(m, "conv1", 8, 8, GPUCORE_ACT_RELU);
        CHECK_OK(gpucore_ckpt_begin_residual(m->ck, "res2"));
        add_conv(m, "res2.conv_a", 8, 8, GPUCORE_ACT_RELU);
        add_conv(m, "res2.conv_b", 8, 8, GPUCORE_ACT_NONE);
        CHECK_OK(gpucore_ckpt_end_residual(m->ck));
        add_conv(m, "conv3", 8, 8, GPUCORE_ACT_RELU);
        add_conv(m, "conv4", 8, 4, GPUCORE_ACT_NONE);
        int64_t xs[4] = {2, 3, 8, 8}, ys[4] = {2, 4, 8, 8};
        io(m, 4, xs, 4, ys);
    } else if (kind == TRANSFORMER) {
        build_transformer(m);
    } else {
        for (int b = 0; b < 3; b++) {
            char name[32];
            snprintf(name, sizeof name, "block%d", b);
            CHECK_OK(gpucore_ckpt_begin_residual(m->ck, name));
            snprintf(name, sizeof name, "block%d.ln", b);
            add_norm(m, name, 16);
            snprintf(name, sizeof name, "block%d.fc1", b);
            add_linear(m, name, 16, 32, GPUCORE_ACT_GELU_TANH);
            snprintf(name, sizeof name, "block%d.fc2", b);
            add_linear(m, name, 32, 16, GPUCORE_ACT_NONE);
            snprintf(name, sizeof name, "block%d.drop", b);
            CHECK_OK(gpucore_ckpt_add_dropout(m->ck, name, 0.25));
            CHECK_OK(gpucore_ckpt_end_residual(m->ck));
            snprintf(name, sizeof name, "drop%d", b);
            CHECK_OK(gpucore_ckpt_add_dropout(m->ck, name, 0.1));
        }
        add_norm(m, "ln_f", 16);
        int64_t xs[3] = {2, 6, 16};
        io(m, 3, xs, 3, xs);
    }
}

/* One step; returns every gradient (params, then dx) concatenated on the host. */
static float *step(model *m, int64_t *count, gpucore_ckpt_stats *stats)
{
    int64_t n = gpucore_tensor_numel(m->dx);
    for (int i = 0; i < m->np; i++) n += gpucore_tensor_numel(m->grads[i]);
    float *out = calloc((size_t)n, sizeof *out);
    gpucore_tensor *y = NULL;
    CHECK_OK(gpucore_ckpt_set_seed(m->ck, 42, 7));
    CHECK_OK(gpucore_ckpt_forward(m->ck, m->x, &y));
    CHECK_OK(gpucore_ckpt_backward(m->ck, m->dy, m->dx));
    int64_t at = 0;
    for (int i = 0; i < m->np; i++) {
        int64_t k = gpucore_tensor_numel(m->grads[i]);
        CHECK_OK(gpucore_copy_to_host(out + at, k * 4, m->grads[i]));
        at += k;
    }
    CHECK_OK(gpucore_copy_to_host(out + at, gpucore_tensor_numel(m->dx) * 4, m->dx));
    *count = n;
    if (stats) {
        stats->struct_size = sizeof *stats;
        CHECK_OK(gpucore_ckpt_get_stats(m->ck, stats));
    }
    return out;
}

/* ---- custom saved-tensor hooks: a device copy (counted) ---- */
typedef struct hook_counts { int pack, unpack, discard; } hook_counts;

static gpucore_status copy_pack(void *user, gpucore_tensor *t, gpucore_stream *stream, void **packed)
{
    hook_counts *h = user;
    gpucore_context *ctx = NULL;
    gpucore_tensor *c = NULL;
    int64_t shape[GPUCORE_MAX_DIMS];
    gpucore_tensor_context(t, &ctx);
    gpucore_tensor_shape(t, shape);
    gpucore_status st = gpucore_tensor_create(ctx, gpucore_tensor_dtype(t), gpucore_tensor_ndim(t), shape, &c);
    if (!st) st = gpucore_copy(c, t, stream);
    if (st) { gpucore_tensor_destroy(c); return st; }
    h->pack++;
    *packed = c;
    return GPUCORE_OK;
}

static gpucore_status copy_unpack(void *user, void *packed, gpucore_stream *stream, gpucore_tensor **out)
{
    (void)stream;
    ((hook_counts *)user)->unpack++;
    *out = packed;
    return GPUCORE_OK;
}

static void copy_discard(void *user, void *packed)
{
    ((hook_counts *)user)->discard++;
    gpucore_tensor_destroy(packed);
}

typedef struct seg_counts { int calls[3][2]; int grads; } seg_counts;
static gpucore_status count_hook(void *user, int64_t seg, const char *name, int32_t phase, int32_t is_post)
{
    (void)seg; (void)name;
    ((seg_counts *)user)->calls[phase][is_post]++;
    return GPUCORE_OK;
}
static gpucore_status count_grad(void *user, int64_t seg, const char *name, int32_t param, gpucore_tensor *g,
                                 gpucore_stream *s)
{
    (void)seg; (void)name; (void)param; (void)g; (void)s;
    ((seg_counts *)user)->grads++;
    return GPUCORE_OK;
}

static int same(const float *a, const float *b, int64_t n, int bitwise)
{
    if (bitwise) return memcmp(a, b, (size_t)n * sizeof *a) == 0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return 0;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den ? den : 1)) <= 1e-5;
}

static void test_policies(const char *dev, gpucore_context *ctx, int kind)
{
    int bitwise = strcmp(dev, "cpu") == 0;
    model m;
    build(&m, ctx, kind);
    int64_t nseg = gpucore_ckpt_segment_count(m.ck), n = 0, n2 = 0;
    gpucore_ckpt_stats st;
    float *ref = step(&m, &n, &st);
    int finite = 1;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(ref[i]) != 0;
    CHECK(finite);
    CHECK(st.kept == nseg && st.recompute_runs == 0);
    struct { gpucore_ckpt_policy p; int64_t param; int hooks; } cases[] = {
        {GPUCORE_CKPT_RECOMPUTE_ALL, 0, 0}, {GPUCORE_CKPT_EVERY_K, 2, 0}, {GPUCORE_CKPT_EVERY_K, 3, 0},
        {GPUCORE_CKPT_SQRT_N, 0, 0}, {GPUCORE_CKPT_BUDGET, 0, 0}, {GPUCORE_CKPT_KEEP_ALL, 0, 1},
        {GPUCORE_CKPT_KEEP_ALL, 0, 2}, {GPUCORE_CKPT_EVERY_K, 2, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hook_counts h = {0, 0, 0};
        int64_t param_v = cases[c].param;
        if (cases[c].p == GPUCORE_CKPT_BUDGET) /* somewhere between the leanest plan and keep-all */
            param_v = st.peak_allocated_bytes; /* the estimate is conservative: expect some recompute */
        CHECK_OK(gpucore_ckpt_set_policy(m.ck, cases[c].p, param_v));
        if (cases[c].hooks == 1) CHECK_OK(gpucore_ckpt_set_offload(m.ck, 1, 0));
        if (cases[c].hooks == 2) CHECK_OK(gpucore_ckpt_set_saved_tensor_hooks(m.ck, copy_pack, copy_unpack, copy_discard, &h));
        for (int i = 0; i < m.np; i++) CHECK_OK(gpucore_fill(m.grads[i], NAN, NULL));
        gpucore_ckpt_stats s2;
        float *got = step(&m, &n2, &s2);
        int ok = n2 == n && same(got, ref, n, bitwise);
        if (!ok)
            printf("  %s %s policy %d param %lld hooks %d: gradients differ from keep-all\n", dev, model_name[kind],
                   (int)cases[c].p, (long long)param_v, cases[c].hooks);
        CHECK(ok);
        if (cases[c].p != GPUCORE_CKPT_KEEP_ALL && cases[c].p != GPUCORE_CKPT_BUDGET) CHECK(s2.recompute_runs > 0);
        if (cases[c].p == GPUCORE_CKPT_BUDGET) {
            if (s2.peak_allocated_bytes > param_v)
                printf("  %s %s budget %lld: peak %lld, estimate %lld\n", dev, model_name[kind], (long long)param_v,
                       (long long)s2.peak_allocated_bytes, (long long)s2.estimated_peak_bytes);
            CHECK(s2.peak_allocated_bytes <= param_v);
        }
        if (cases[c].hooks == 1) CHECK(s2.offloaded_bytes > 0);
        if (cases[c].hooks == 2) {
            /* once per saved tensor of a kept segment, each unpacked once */
            CHECK(h.pack == h.unpack && h.discard == 0);
            CHECK(cases[c].p == GPUCORE_CKPT_KEEP_ALL ? h.pack > 0 : h.pack == 0); /* recomputes are not packed */
            CHECK(s2.packed_tensors == h.pack && s2.unpacked_tensors == h.unpack);
            /* the MLP's 9 layers save x, plus aux (GELU) or y (ReLU): 3 x (2 + 2 + 1) */
            if (kind == MLP && cases[c].p == GPUCORE_CKPT_KEEP_ALL) CHECK(h.pack == 15);
        }
        CHECK_OK(gpucore_ckpt_set_offload(m.ck, 0, 0));
        CHECK_OK(gpucore_ckpt_set_saved_tensor_hooks(m.ck, NULL, NULL, NULL, NULL));
        free(got);
    }
    /* hooks around each segment, and gradient-ready announcements */
    seg_counts sc;
    memset(&sc, 0, sizeof sc);
    CHECK_OK(gpucore_ckpt_set_policy(m.ck, GPUCORE_CKPT_SQRT_N, 0));
    CHECK_OK(gpucore_ckpt_set_segment_hook(m.ck, count_hook, &sc));
    CHECK_OK(gpucore_ckpt_set_grad_ready_callback(m.ck, count_grad, &sc));
    float *got = step(&m, &n2, &st);
    free(got);
    if (kind == MLP) { /* 9 segments, k = 3 */
        int32_t modes[9];
        CHECK_OK(gpucore_ckpt_get_plan(m.ck, modes, 9));
        int ok = 1;
        for (int i = 0; i < 9; i++) ok &= modes[i] == (i % 3 ? GPUCORE_CKPT_RECOMPUTED : GPUCORE_CKPT_CHECKPOINT);
        CHECK(ok);
        CHECK(st.checkpoints == 3 && st.recomputed == 6 && st.kept == 0);
    }
    CHECK(sc.calls[0][0] == nseg && sc.calls[0][1] == nseg && sc.calls[2][0] == nseg && sc.calls[2][1] == nseg);
    CHECK(sc.calls[1][0] == st.recompute_runs && sc.calls[1][1] == st.recompute_runs && st.recompute_runs > 0);
    CHECK(sc.grads == m.np);
    free(ref);
    int64_t before_free = test_allocated_bytes(ctx);
    (void)before_free;
    model_free(&m);
}

/* <dy, y> of one forward (the executor's seed fixed, so adapter dropout draws the same mask). */
static double forward_loss(model *m, const float *dy, int64_t n)
{
    gpucore_tensor *y = NULL;
    CHECK_OK(gpucore_ckpt_set_seed(m->ck, 42, 7));
    CHECK_OK(gpucore_ckpt_forward(m->ck, m->x, &y));
    float *h = malloc(sizeof(float) * (size_t)n);
    CHECK_OK(gpucore_copy_to_host(h, n * 4, y));
    double l = 0;
    for (int64_t i = 0; i < n; i++) l += (double)dy[i] * h[i];
    CHECK_OK(gpucore_ckpt_reset(m->ck));
    free(h);
    return l;
}

/* The transformer blocks' gradients (every parameter and the input) against central
 * differences of the loss <dy, y> along a random direction per tensor. */
static void test_transformer_gradients(const char *dev, gpucore_context *ctx)
{
    model m;
    build(&m, ctx, TRANSFORMER);
    int64_t count = 0, ny = gpucore_tensor_numel(m.dy);
    float *grads = step(&m, &count, NULL);
    float *dy = malloc(sizeof(float) * (size_t)ny);
    CHECK_OK(gpucore_copy_to_host(dy, ny * 4, m.dy));
    const double eps = 1e-2;
    int64_t at = 0;
    for (int i = 0; i <= m.np; i++) {
        gpucore_tensor *t = i < m.np ? m.params[i] : m.x;
        int64_t k = gpucore_tensor_numel(t), shape[GPUCORE_MAX_DIMS];
        CHECK_OK(gpucore_tensor_shape(t, shape));
        gpucore_tensor *dir = rand_tensor(ctx, gpucore_tensor_ndim(t), shape, 1.0);
        float *hd = malloc(sizeof(float) * (size_t)k);
        CHECK_OK(gpucore_copy_to_host(hd, k * 4, dir));
        double analytic = 0;
        for (int64_t j = 0; j < k; j++) analytic += (double)grads[at + j] * hd[j];
        CHECK_OK(gpucore_axpy(t, eps, dir, NULL));
        double lp = forward_loss(&m, dy, ny);
        CHECK_OK(gpucore_axpy(t, -2 * eps, dir, NULL));
        double lm = forward_loss(&m, dy, ny);
        CHECK_OK(gpucore_axpy(t, eps, dir, NULL));
        double fd = (lp - lm) / (2 * eps), err = fabs(fd - analytic) / fmax(fabs(analytic), 1.0);
        if (!(err < 3e-3))
            printf("  %s transformer tensor %d: gradient along a direction %.6g, finite differences %.6g\n", dev, i,
                   analytic, fd);
        CHECK(err < 3e-3);
        at += k;
        free(hd);
        gpucore_tensor_destroy(dir);
    }
    free(dy);
    free(grads);
    model_free(&m);
}

static void test_block_bad_input(gpucore_context *ctx)
{
    model m;
    memset(&m, 0, sizeof m);
    m.ctx = ctx;
    CHECK_OK(gpucore_ckpt_create(ctx, "bad_blocks", &m.ck));
    const int64_t wq[2] = {48, 16}, wo[2] = {16, 16}, wbad[2] = {40, 16}, la[2] = {2, 16}, lb[2] = {48, 2};
    gpucore_ckpt_attention_block a;
    gpucore_ckpt_attention_block_init(&a);
    a.heads = 4;
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_NULL_POINTER); /* no weights */
    a.w_qkv = frozen(&m, 2, wq, 1);
    a.w_out = frozen(&m, 2, wo, 1);
    a.heads = 3;
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_SHAPE_MISMATCH); /* 16 % 3 */
    a.heads = 4;
    a.kv_heads = 3;
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_INVALID_ARGUMENT);
    a.kv_heads = 0;
    a.w_qkv = frozen(&m, 2, wbad, 1);
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_SHAPE_MISMATCH);
    a.w_qkv = frozen(&m, 2, wq, 1);
    a.lora_qkv_a = frozen(&m, 2, la, 1);
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_INVALID_ARGUMENT); /* A without B */
    a.lora_qkv_b = frozen(&m, 2, lb, 1);
    a.dw_qkv = frozen(&m, 2, wq, 1);
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_INVALID_ARGUMENT); /* frozen base */
    CHECK(strstr(gpucore_last_error(), "frozen") != NULL);
    a.dw_qkv = NULL;
    a.struct_size = 8;
    CHECK_STATUS(gpucore_ckpt_add_attention_block(m.ck, "a", &a), GPUCORE_ERR_INVALID_ARGUMENT);
    a.struct_size = sizeof a;
    CHECK_OK(gpucore_ckpt_add_attention_block(m.ck, "a", &a));
    gpucore_ckpt_mlp_block b;
    gpucore_ckpt_mlp_block_init(&b);
    const int64_t w1[2] = {24, 16}, w2[2] = {16, 24};
    b.w_fc1 = frozen(&m, 2, w1, 1);
    CHECK_STATUS(gpucore_ckpt_add_mlp_block(m.ck, "m", &b), GPUCORE_ERR_NULL_POINTER);
    b.w_fc2 = frozen(&m, 2, w2, 1);
    b.swiglu = 1; /* fc1 must then be [48, 16] */
    CHECK_STATUS(gpucore_ckpt_add_mlp_block(m.ck, "m", &b), GPUCORE_ERR_SHAPE_MISMATCH);
    b.swiglu = 0;
    b.norm_bias = frozen(&m, 1, &w2[0], 1); /* a bias on RMSNorm */
    b.norm_weight = b.norm_bias;
    CHECK_STATUS(gpucore_ckpt_add_mlp_block(m.ck, "m", &b), GPUCORE_ERR_INVALID_ARGUMENT);
    b.norm_bias = NULL;
    CHECK_OK(gpucore_ckpt_add_mlp_block(m.ck, "m", &b));
    /* x of the wrong width fails at the forward, naming the segment */
    int64_t xs[3] = {2, 5, 12};
    io(&m, 3, xs, 3, xs);
    gpucore_tensor *y = NULL;
    CHECK_STATUS(gpucore_ckpt_forward(m.ck, m.x, &y), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "'a'") != NULL);
    model_free(&m);
}

/* The scratch one of m's linear layers (params 0 and 1, [B, D] -> [B, D]) takes while
 * it runs, forward or backward, beyond its preallocated outputs: on CUDA each matmul
 * takes the cuBLASLt workspace for the duration of the call (32 MiB by default); the
 * CPU takes none. It exists once at a time, whatever the policy. */
static int64_t layer_scratch(model *m)
{
    gpucore_context *ctx = m->ctx;
    int64_t shape[GPUCORE_MAX_DIMS];
    gpucore_tensor_shape(m->x, shape);
    gpucore_tensor *y = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &y));
    int64_t before = test_allocated_bytes(ctx);
    CHECK_OK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    CHECK_OK(gpucore_linear_forward(m->x, m->params[0], m->params[1], GPUCORE_ACT_NONE, y, NULL, NULL));
    CHECK_OK(gpucore_linear_backward(m->dy, m->x, m->params[0], NULL, m->dx, m->grads[0], m->grads[1], NULL));
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_memory_stats ms;
    memset(&ms, 0, sizeof ms);
    ms.struct_size = sizeof ms;
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &ms));
    CHECK(ms.allocated_bytes == before); /* scratch only: all of it returned */
    gpucore_tensor_destroy(y);
    return ms.allocated_bytes_peak - before;
}

/* n equal linear segments: held activations s each. */
static void test_memory(const char *dev, gpucore_context *ctx)
{
    const int n = 16;
    int emulated = strcmp(dev, "cuda-emulated") == 0; /* kernels run by the SIMT layer: keep it small */
    const int64_t B = emulated ? 128 : 512, D = emulated ? 64 : 128, s = B * D * 4;
    model m;
    memset(&m, 0, sizeof m);
    m.ctx = ctx;
    CHECK_OK(gpucore_ckpt_create(ctx, "deep", &m.ck));
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        add_linear(&m, name, D, D, GPUCORE_ACT_NONE);
    }
    int64_t xs[2] = {B, D};
    io(&m, 2, xs, 2, xs);
    int64_t cnt = 0;
    gpucore_ckpt_stats keep, root, bud;
    free(step(&m, &cnt, &keep));
    CHECK_OK(gpucore_ckpt_set_policy(m.ck, GPUCORE_CKPT_SQRT_N, 0));
    free(step(&m, &cnt, &root));
    int64_t keep_extra = keep.peak_allocated_bytes - keep.baseline_bytes;
    int64_t root_extra = root.peak_allocated_bytes - root.baseline_bytes;
    int64_t scratch = layer_scratch(&m);
    CHECK(scratch >= 0);
    /* 2√n·s, plus dy, dx and the output, plus one layer's scratch once: a policy that carried the scratch
     * as held, or counted it per segment, goes over */
    double bound = (2 * sqrt((double)n) + 4) * (double)s + (double)scratch;
    printf("  %s: n=%d s=%lld: keep-all peak +%lld (%.1f s), sqrt(n) +%lld (%.1f s, bound %.1f s with a scratch of "
           "%.1f s), held %lld of %lld\n", dev, n, (long long)s, (long long)keep_extra, keep_extra / (double)s,
           (long long)root_extra, root_extra / (double)s, bound / s, scratch / (double)s, (long long)root.held_bytes,
           (long long)root.keep_all_bytes);
    CHECK(keep_extra - scratch >= (int64_t)n * s);
    CHECK(root_extra <= (int64_t)bound);
    CHECK(root_extra < keep_extra);
    CHECK(root.bytes_saved > 0 && root.keep_all_bytes >= (int64_t)(n - 1) * s);
    /* a budget halfway: the measured peak stays under it */
    int64_t budget = keep.baseline_bytes + (keep_extra + root_extra) / 2;
    CHECK_OK(gpucore_ckpt_set_policy(m.ck, GPUCORE_CKPT_BUDGET, budget));
    free(step(&m, &cnt, &bud));
    printf("  %s: budget %lld: peak %lld (estimate %lld), %lld kept, %lld recomputed\n", dev, (long long)budget,
           (long long)bud.peak_allocated_bytes, (long long)bud.estimated_peak_bytes, (long long)bud.kept,
           (long long)(bud.checkpoints + bud.recomputed));
    CHECK(bud.peak_allocated_bytes <= budget);
    CHECK(bud.kept > 0 && bud.kept < n);
    CHECK(bud.estimated_peak_bytes >= bud.peak_allocated_bytes); /* measured segments: not optimistic */
    /* keep-all's own peak as the budget: keep-all fits, so nothing is recomputed (each storage, and the scratch,
     * counted once) */
    CHECK_OK(gpucore_ckpt_set_policy(m.ck, GPUCORE_CKPT_BUDGET, keep.peak_allocated_bytes));
    free(step(&m, &cnt, &bud));
    CHECK(bud.kept == n && bud.recompute_runs == 0);
    CHECK(bud.estimated_peak_bytes <= keep.peak_allocated_bytes && bud.peak_allocated_bytes <= keep.peak_allocated_bytes);
    /* a budget smaller than one segment: an error with the numbers, nothing held */
    int64_t base = test_allocated_bytes(ctx);
    gpucore_tensor *y = NULL;
    CHECK_OK(gpucore_ckpt_set_policy(m.ck, GPUCORE_CKPT_BUDGET, keep.baseline_bytes + s / 2));
    CHECK_STATUS(gpucore_ckpt_forward(m.ck, m.x, &y), GPUCORE_ERR_OUT_OF_MEMORY);
    CHECK(strstr(gpucore_last_error(), "cannot be met") != NULL && strstr(gpucore_last_error(), "fc") != NULL);
    CHECK(test_allocated_bytes(ctx) == base);
    /* largest batch idea: a memory limit that keep-all exceeds but sqrt(n) fits is exercised by the benchmark */
    model_free(&m);
}

/* ---- a segment whose output is a view of its input (flatten) ---- */
static gpucore_status flatten_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                  gpucore_stream *stream, void *user)
{
    (void)call; (void)stream; (void)user;
    int64_t shape[GPUCORE_MAX_DIMS];
    gpucore_tensor_shape(x, shape);
    shape[1] = -1;
    return gpucore_tensor_reshape((gpucore_tensor *)x, 2, shape, y); /* a view: no new storage */
}

static gpucore_status flatten_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                  gpucore_stream *stream, void *user)
{
    (void)call; (void)user;
    if (!dx) return GPUCORE_OK;
    int64_t shape[GPUCORE_MAX_DIMS];
    gpucore_tensor_shape(dy, shape);
    gpucore_tensor *flat = NULL;
    gpucore_status st = gpucore_tensor_reshape(dx, 2, shape, &flat);
    if (!st) st = gpucore_copy(flat, dy, stream);
    gpucore_tensor_destroy(flat);
    return st;
}

/* Bytes are counted by storage: the view adds none, so keep-all saves nothing and
 * the planner's estimate matches the same chain without the view. */
static void test_view(const char *dev, gpucore_context *ctx)
{
    int bitwise = strcmp(dev, "cpu") == 0;
    if (strcmp(dev, "cuda-emulated") != 0) { /* conv -> conv -> flatten -> linear */
        model m;
        memset(&m, 0, sizeof m);
        m.ctx = ctx;
        seed_next = 2000;
        CHECK_OK(gpucore_ckpt_create(ctx, "view", &m.ck));
        add_conv(&m, "conv0", 3, 4, GPUCORE_ACT_RELU);
        add_conv(&m, "conv1", 4, 4, GPUCORE_ACT_RELU);
        CHECK_OK(gpucore_ckpt_add_custom(m.ck, "flatten", flatten_fwd, flatten_bwd, NULL));
        add_linear(&m, "fc", 4 * 8 * 8, 10, GPUCORE_ACT_NONE);
        int64_t xs[4] = {2, 3, 8, 8}, ys[2] = {2, 10};
        io(&m, 4, xs, 2, ys);
        int64_t n = 0, n2 = 0;
        gpucore_ckpt_stats keep, s2;
        float *ref = step(&m, &n, &keep);
        printf("  %s view chain keep-all: held %lld, keep-all %lld, saved %lld\n", dev, (long long)keep.held_bytes,
               (long long)keep.keep_all_bytes, (long long)keep.bytes_saved);
        CHECK(keep.kept == 4 && keep.held_bytes > 0);
        CHECK(keep.held_bytes == keep.keep_all_bytes && keep.bytes_saved == 0);
        gpucore_ckpt_policy ps[3] = {GPUCORE_CKPT_RECOMPUTE_ALL, GPUCORE_CKPT_BUDGET, GPUCORE_CKPT_BUDGET};
        int64_t budgets[3] = {0, keep.peak_allocated_bytes * 4, keep.peak_allocated_bytes};
        for (int c = 0; c < 3; c++) {
            CHECK_OK(gpucore_ckpt_set_policy(m.ck, ps[c], budgets[c]));
            for (int i = 0; i < m.np; i++) CHECK_OK(gpucore_fill(m.grads[i], NAN, NULL));
            float *got = step(&m, &n2, &s2);
            CHECK(n2 == n && same(got, ref, n, bitwise));
            CHECK(s2.keep_all_bytes == keep.keep_all_bytes && s2.held_bytes <= s2.keep_all_bytes);
            if (ps[c] == GPUCORE_CKPT_BUDGET) {
                CHECK(s2.estimated_peak_bytes <= budgets[c] && s2.peak_allocated_bytes <= budgets[c]);
                if (c == 1) CHECK(s2.kept == 4 && s2.bytes_saved == 0); /* room for everything */
            }
            free(got);
        }
        free(ref);
        model_free(&m);
    }
    /* fc0 -> fc1 -> view -> fc2 against fc0 -> fc1 -> fc2 (ReLU: each saves its input and output) */
    gpucore_ckpt_stats st[2][2];
    float *grads[2] = {NULL, NULL};
    int64_t counts[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        model m;
        memset(&m, 0, sizeof m);
        m.ctx = ctx;
        seed_next = 3000;
        CHECK_OK(gpucore_ckpt_create(ctx, v ? "with-view" : "without-view", &m.ck));
        add_linear(&m, "fc0", 32, 32, GPUCORE_ACT_RELU);
        add_linear(&m, "fc1", 32, 32, GPUCORE_ACT_RELU);
        if (v) CHECK_OK(gpucore_ckpt_add_custom(m.ck, "view", flatten_fwd, flatten_bwd, NULL));
        add_linear(&m, "fc2", 32, 32, GPUCORE_ACT_RELU);
        int64_t xs[2] = {16, 32};
        io(&m, 2, xs, 2, xs);
        free(step(&m, &counts[v], &st[v][0]));
        CHECK_OK(gpucore_ckpt_set_policy(m.ck, GPUCORE_CKPT_BUDGET, st[v][0].peak_allocated_bytes * 4));
        grads[v] = step(&m, &counts[v], &st[v][1]);
        model_free(&m);
    }
    printf("  %s view in an mlp: keep-all %lld vs %lld, budget estimate %lld vs %lld (above baseline)\n", dev,
           (long long)st[1][0].keep_all_bytes, (long long)st[0][0].keep_all_bytes,
           (long long)(st[1][1].estimated_peak_bytes - st[1][1].baseline_bytes),
           (long long)(st[0][1].estimated_peak_bytes - st[0][1].baseline_bytes));
    CHECK(st[1][0].keep_all_bytes == st[0][0].keep_all_bytes && st[1][0].held_bytes == st[0][0].held_bytes);
    CHECK(st[1][0].bytes_saved == 0 && st[0][0].bytes_saved == 0);
    CHECK(st[1][1].kept == 4 && st[0][1].kept == 3);
    CHECK(st[1][1].estimated_peak_bytes - st[1][1].baseline_bytes ==
          st[0][1].estimated_peak_bytes - st[0][1].baseline_bytes);
    CHECK(counts[0] == counts[1] && grads[0] && grads[1] && same(grads[1], grads[0], counts[0], bitwise));
    free(grads[0]);
    free(grads[1]);
}

/* ---- bad input ---- */
typedef struct bad_seg { int mode, calls; } bad_seg;
enum { BAD_READ_UNSAVED = 0, BAD_FWD_ERROR = 1, BAD_BWD_ERROR = 2, BAD_SHAPE_CHANGE = 3, BAD_NO_OUTPUT = 4 };

static gpucore_status bad_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                              gpucore_stream *stream, void *user)
{
    bad_seg *b = user;
    gpucore_context *ctx = NULL;
    gpucore_tensor_context(x, &ctx);
    b->calls++;
    if (b->mode == BAD_FWD_ERROR) {
        int64_t neg = -3;
        gpucore_tensor *t = NULL;
        return gpucore_tensor_create(ctx, GPUCORE_F32, 1, &neg, &t); /* fails with a message */
    }
    if (b->mode == BAD_NO_OUTPUT) return GPUCORE_OK;
    int64_t shape[GPUCORE_MAX_DIMS];
    gpucore_tensor_shape(x, shape);
    if (b->mode == BAD_SHAPE_CHANGE && b->calls > 1) shape[0] += 1;
    gpucore_status st = gpucore_tensor_create(ctx, GPUCORE_F32, gpucore_tensor_ndim(x), shape, y);
    if (!st && b->mode != BAD_SHAPE_CHANGE) st = gpucore_scale(*y, x, 2.0, 0.0, stream);
    else if (!st) st = gpucore_fill(*y, 1.0, stream);
    if (!st) st = gpucore_ckpt_save(call, x);
    return st;
}

static gpucore_status bad_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                              gpucore_stream *stream, void *user)
{
    bad_seg *b = user;
    gpucore_tensor *t = NULL;
    if (b->mode == BAD_BWD_ERROR) return GPUCORE_ERR_NOT_SUPPORTED; /* no message: the executor says so */
    gpucore_status st = gpucore_ckpt_saved(call, b->mode == BAD_READ_UNSAVED ? 1 : 0, &t);
    if (!st && dx) st = gpucore_scale(dx, dy, 2.0, 0.0, stream);
    return st;
}

static void test_bad(const char *dev, gpucore_context *ctx)
{
    (void)dev;
    int64_t base = test_allocated_bytes(ctx);
    int64_t xs[2] = {8, 16};
    gpucore_tensor *x = rand_tensor(ctx, 2, xs, 1.0), *dy = rand_tensor(ctx, 2, xs, 1.0), *y = NULL;
    int64_t base_x = test_allocated_bytes(ctx);
    struct { int mode; gpucore_ckpt_policy p; gpucore_status want; int in_forward; const char *text; } cases[] = {
        {BAD_READ_UNSAVED, GPUCORE_CKPT_KEEP_ALL, GPUCORE_ERR_INVALID_ARGUMENT, 0, "read saved tensor 1"},
        {BAD_FWD_ERROR, GPUCORE_CKPT_KEEP_ALL, GPUCORE_ERR_INVALID_ARGUMENT, 1, "forward"},
        {BAD_BWD_ERROR, GPUCORE_CKPT_SQRT_N, GPUCORE_ERR_NOT_SUPPORTED, 0, "backward"},
        {BAD_SHAPE_CHANGE, GPUCORE_CKPT_RECOMPUTE_ALL, GPUCORE_ERR_SHAPE_MISMATCH, 0, "recompute"},
        {BAD_NO_OUTPUT, GPUCORE_CKPT_KEEP_ALL, GPUCORE_ERR_INVALID_ARGUMENT, 1, "without a valid output"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gpucore_ckpt *ck = NULL;
        bad_seg good = {-1, 0}, bad = {cases[c].mode, 0};
        CHECK_OK(gpucore_ckpt_create(ctx, "bad", &ck));
        CHECK_OK(gpucore_ckpt_add_custom(ck, "good0", bad_fwd, bad_bwd, &good));
        CHECK_OK(gpucore_ckpt_add_custom(ck, "culprit", bad_fwd, bad_bwd, &bad));
        CHECK_OK(gpucore_ckpt_add_custom(ck, "good2", bad_fwd, bad_bwd, &good));
        CHECK_OK(gpucore_ckpt_set_policy(ck, cases[c].p, 0));
        if (cases[c].in_forward) {
            CHECK_STATUS(gpucore_ckpt_forward(ck, x, &y), cases[c].want);
        } else {
            CHECK_OK(gpucore_ckpt_forward(ck, x, &y));
            CHECK_STATUS(gpucore_ckpt_backward(ck, dy, NULL), cases[c].want);
        }
        const char *msg = gpucore_last_error();
        int named = strstr(msg, "'culprit'") && strstr(msg, cases[c].text);
        if (!named) printf("  case %zu message: %s\n", c, msg);
        CHECK(named);
        CHECK(test_allocated_bytes(ctx) == base_x); /* nothing of the failed step is held */
        /* the executor is usable again: a backward without forward is refused */
        CHECK_STATUS(gpucore_ckpt_backward(ck, dy, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK_OK(gpucore_ckpt_destroy(ck));
    }
    /* handles and arguments */
    gpucore_ckpt *ck = NULL;
    CHECK_STATUS(gpucore_ckpt_create(NULL, "x", &ck), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_ckpt_create(ctx, "args", &ck));
    CHECK_STATUS(gpucore_ckpt_forward(ck, x, &y), GPUCORE_ERR_INVALID_ARGUMENT); /* no segments */
    CHECK_STATUS(gpucore_ckpt_add_custom(ck, "", bad_fwd, bad_bwd, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ckpt_add_custom(ck, "nofn", NULL, bad_bwd, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_ckpt_set_policy(ck, GPUCORE_CKPT_EVERY_K, 0), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ckpt_set_policy(ck, GPUCORE_CKPT_BUDGET, -5), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ckpt_add_linear(ck, "fc", NULL, NULL, GPUCORE_ACT_NONE, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_ckpt_add_dropout(ck, "drop", 1.5), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ckpt_end_residual(ck), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_ckpt_begin_residual(ck, "open"));
    CHECK_STATUS(gpucore_ckpt_end_residual(ck), GPUCORE_ERR_INVALID_ARGUMENT); /* empty */
    CHECK_OK(gpucore_ckpt_add_dropout(ck, "inner", 0.5));
    CHECK_STATUS(gpucore_ckpt_forward(ck, x, &y), GPUCORE_ERR_INVALID_ARGUMENT); /* not ended */
    CHECK_OK(gpucore_ckpt_end_residual(ck));
    CHECK_OK(gpucore_ckpt_forward(ck, x, &y));
    int64_t bad_shape[2] = {4, 16};
    gpucore_tensor *wrong = rand_tensor(ctx, 2, bad_shape, 1.0);
    CHECK_STATUS(gpucore_ckpt_backward(ck, wrong, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_OK(gpucore_ckpt_reset(ck));
    gpucore_tensor_destroy(wrong);
    CHECK_OK(gpucore_ckpt_destroy(ck));
    CHECK_STATUS(gpucore_ckpt_forward(ck, x, &y), GPUCORE_ERR_INVALID_HANDLE);
    CHECK(gpucore_ckpt_segment_count(ck) == -1);
    CHECK_OK(gpucore_ckpt_destroy(NULL));
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dy);
    CHECK(test_allocated_bytes(ctx) == base);
}

int main(void)
{
    const char *devs[3];
    int nd = test_devices(devs, 3);
    for (int d = 0; d < nd; d++) {
        gpucore_context *ctx = NULL;
        if (gpucore_context_create(devs[d], &ctx) != GPUCORE_OK) {
            printf("SKIP %s: %s\n", devs[d], gpucore_last_error());
            check_skipped++;
            continue;
        }
        int64_t base = test_allocated_bytes(ctx);
        for (int kind = 0; kind < 4; kind++) {
            char why[64];
            if (kind == CNN && strcmp(devs[d], "cuda-emulated") == 0) {
                snprintf(why, sizeof why, "no cuDNN on cuda-emulated");
                printf("SKIP %s cnn: %s\n", devs[d], why);
                check_skipped++;
                continue;
            }
            test_policies(devs[d], ctx, kind);
        }
        test_memory(devs[d], ctx);
        test_transformer_gradients(devs[d], ctx);
        test_block_bad_input(ctx);
        test_view(devs[d], ctx);
        test_bad(devs[d], ctx);
        CHECK(test_allocated_bytes(ctx) == base); /* every model, step and failure released what it took */
        gpucore_context_destroy(ctx);
    }
    return check_finish("test_checkpoint");
}
