/*
 * bench_checkpoint.c — activation checkpointing: peak memory, step time and the
 * largest batch under a memory limit, for each policy, against keep-all.
 *
 *   bench_checkpoint [--json] [--quick | --full] [--device cpu|cuda]
 *
 * Models (built-in segments only): a deep MLP of equal linear layers (24 layers
 * --quick, 48 default, 96 --full; ReLU between) and a small ResNet-style CNN (a
 * stem conv, then residual blocks of conv+ReLU, conv). For each policy: the
 * step's peak allocated bytes (absolute, and above the bytes allocated when the
 * step starts: parameters, gradients, inputs), the step time (forward + backward,
 * wall clock around a synchronised step, median of 5 after a warm-up; before the
 * first policy of each model, untimed keep-all steps — at least 3 and 300 ms — so
 * that no policy pays the process's and the model's first-run costs), and the
 * largest batch that fits a memory limit (gpucore_memory_set_limit set to what
 * keep-all needs at the base batch plus a quarter; doubling, then bisection).
 * JSON lines follow DESIGN.md's contract with peer "keep_all": speedup is
 * keep_all/value for time and memory (> 1: better than keep-all), value/keep_all
 * for the batch. bench/peers/torch_checkpoint.py is the PyTorch peer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"

#define TRY(call)                                                                                   \
    do {                                                                                            \
        gpucore_status st_ = (call);                                                                \
        if (st_) {                                                                                  \
            fprintf(stderr, "bench_checkpoint: %s failed: %s\n", #call, gpucore_last_error());      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

#define MAXP 512
typedef struct model {
    gpucore_context *ctx;
    gpucore_ckpt *ck;
    gpucore_tensor *p[MAXP], *g[MAXP];
    int np;
    int kind;            /* 0 MLP, 1 CNN */
    int64_t width;       /* MLP features / CNN channels */
    int64_t hw;          /* CNN image side */
} model;

static int json;
static const char *dev_name;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static gpucore_tensor *param(model *m, int ndim, const int64_t *shape, double scale)
{
    TRY(gpucore_tensor_create(m->ctx, GPUCORE_F32, ndim, shape, &m->p[m->np]));
    TRY(gpucore_random(m->p[m->np], GPUCORE_UNIFORM, -scale, scale, (uint64_t)m->np + 1, 0, NULL));
    TRY(gpucore_tensor_create(m->ctx, GPUCORE_F32, ndim, shape, &m->g[m->np]));
    return m->p[m->np++];
}

static void build_mlp(model *m, gpucore_context *ctx, int layers, int64_t width)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->width = width;
    TRY(gpucore_ckpt_create(ctx, "mlp", &m->ck));
    for (int i = 0; i < layers; i++) {
        int64_t ws[2] = {width, width};
        char name[32];
        snprintf(name, sizeof name, "fc%d", i);
        gpucore_tensor *w = param(m, 2, ws, 1.0 / sqrt((double)width)), *b = param(m, 1, &width, 0.01);
        TRY(gpucore_ckpt_add_linear(m->ck, name, w, b, i + 1 < layers ? GPUCORE_ACT_RELU : GPUCORE_ACT_NONE,
                                    m->g[m->np - 2], m->g[m->np - 1]));
    }
}

static void add_conv(model *m, const char *name, int64_t cin, int64_t cout, gpucore_activation act)
{
    int64_t ws[4] = {cout, cin, 3, 3};
    gpucore_conv_options o;
    gpucore_conv_options_init(&o);
    o.pad_h = o.pad_w = 1;
    gpucore_tensor *w = param(m, 4, ws, 1.0 / sqrt(9.0 * (double)cin)), *b = param(m, 1, &cout, 0.01);
    TRY(gpucore_ckpt_add_conv2d(m->ck, name, w, b, &o, act, m->g[m->np - 2], m->g[m->np - 1]));
}

static void build_cnn(model *m, gpucore_context *ctx, int blocks, int64_t channels, int64_t hw)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->kind = 1;
    m->width = channels;
    m->hw = hw;
    TRY(gpucore_ckpt_create(ctx, "resnet", &m->ck));
    add_conv(m, "stem", 3, channels, GPUCORE_ACT_RELU);
    for (int b = 0; b < blocks; b++) {
        char name[32];
        snprintf(name, sizeof name, "block%d", b);
        TRY(gpucore_ckpt_begin_residual(m->ck, name));
        add_conv(m, "conv_a", channels, channels, GPUCORE_ACT_RELU);
        add_conv(m, "conv_b", channels, channels, GPUCORE_ACT_NONE);
        TRY(gpucore_ckpt_end_residual(m->ck));
    }
}

static void model_free(model *m)
{
    gpucore_ckpt_destroy(m->ck);
    for (int i = 0; i < m->np; i++) {
        gpucore_tensor_destroy(m->p[i]);
        gpucore_tensor_destroy(m->g[i]);
    }
}

/* x and dy for a batch; NULL x on out-of-memory. */
static gpucore_status make_io(model *m, int64_t batch, gpucore_tensor **x, gpucore_tensor **dy)
{
    int64_t xs[4], ys[4];
    int nd = 2;
    if (m->kind == 0) { xs[0] = ys[0] = batch; xs[1] = ys[1] = m->width; }
    else {
        nd = 4;
        int64_t a[4] = {batch, 3, m->hw, m->hw}, b[4] = {batch, m->width, m->hw, m->hw};
        memcpy(xs, a, sizeof a);
        memcpy(ys, b, sizeof b);
    }
    *x = *dy = NULL;
    gpucore_status st = gpucore_tensor_create(m->ctx, GPUCORE_F32, nd, xs, x);
    if (!st) st = gpucore_tensor_create(m->ctx, GPUCORE_F32, nd, ys, dy);
    if (!st) st = gpucore_random(*x, GPUCORE_UNIFORM, -1, 1, 11, 0, NULL);
    if (!st) st = gpucore_random(*dy, GPUCORE_UNIFORM, -1, 1, 12, 0, NULL);
    if (st) {
        gpucore_tensor_destroy(*x);
        gpucore_tensor_destroy(*dy);
        *x = *dy = NULL;
    }
    return st;
}

static gpucore_status one_step(model *m, gpucore_tensor *x, gpucore_tensor *dy)
{
    gpucore_tensor *y = NULL;
    gpucore_status st = gpucore_ckpt_forward(m->ck, x, &y);
    if (!st) st = gpucore_ckpt_backward(m->ck, dy, NULL);
    if (!st) st = gpucore_context_synchronize(m->ctx);
    return st;
}

typedef struct result { double ms; int64_t peak, extra, batch; } result;

static void measure(model *m, int64_t batch, int reps, result *r)
{
    gpucore_tensor *x, *dy;
    TRY(make_io(m, batch, &x, &dy));
    TRY(one_step(m, x, dy)); /* warm-up (and the budget planner's dry run) */
    double ms[9];
    for (int i = 0; i < reps; i++) {
        double t0 = now_ms();
        TRY(one_step(m, x, dy));
        ms[i] = now_ms() - t0;
    }
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    gpucore_ckpt_stats s;
    s.struct_size = sizeof s;
    TRY(gpucore_ckpt_get_stats(m->ck, &s));
    r->ms = ms[reps / 2];
    r->peak = s.peak_allocated_bytes;
    r->extra = s.peak_allocated_bytes - s.baseline_bytes;
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dy);
}

static int fits(model *m, int64_t batch)
{
    gpucore_memory_empty_cache(m->ctx, GPUCORE_MEMORY_DEVICE);
    gpucore_tensor *x, *dy;
    if (make_io(m, batch, &x, &dy)) return 0;
    gpucore_status st = one_step(m, x, dy);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dy);
    gpucore_context_synchronize(m->ctx);
    gpucore_clear_error();
    return st == GPUCORE_OK;
}

/* Largest batch (a multiple of unit) that runs under the context's limit, searched
 * from `start` (doubling, then bisection); capped at cap. */
static int64_t max_batch(model *m, int64_t start, int64_t unit, int64_t cap)
{
    int64_t lo = 0, hi = start;
    while (hi <= cap && fits(m, hi)) { lo = hi; hi *= 2; }
    if (hi > cap) return lo;
    while (hi - lo > unit) {
        int64_t mid = (lo + hi) / 2 / unit * unit;
        if (mid <= lo) break;
        if (fits(m, mid)) lo = mid;
        else hi = mid;
    }
    return lo;
}

static void emit(const char *cas, const char *metric, double value, const char *unit, double peer, double speedup)
{
    if (json)
        printf("{\"bench\":\"checkpoint\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.10g,"
               "\"unit\":\"%s\",\"peer\":\"keep_all\",\"peer_value\":%.10g,\"speedup\":%.4g}\n",
               cas, dev_name, metric, value, unit, peer, speedup);
}

static const struct { const char *name; gpucore_ckpt_policy p; int64_t k; } policies[] = {
    {"keep_all", GPUCORE_CKPT_KEEP_ALL, 0}, {"recompute_all", GPUCORE_CKPT_RECOMPUTE_ALL, 0},
    {"every_4", GPUCORE_CKPT_EVERY_K, 4}, {"sqrt_n", GPUCORE_CKPT_SQRT_N, 0}, {"budget", GPUCORE_CKPT_BUDGET, 0}};
#define NPOL 5

/* Untimed keep-all steps (at least 3 and 300 ms, at most 50) before the first measured policy: the
 * first steps of a process and of a model pay for thread start-up, the allocator's cache filling
 * and first-touch page faults, which the first policy measured (keep-all) would otherwise carry. */
static void warm_up(model *m, int64_t batch)
{
    gpucore_tensor *x, *dy;
    TRY(gpucore_ckpt_set_policy(m->ck, GPUCORE_CKPT_KEEP_ALL, 0));
    TRY(make_io(m, batch, &x, &dy));
    double t0 = now_ms();
    for (int i = 0; i < 50 && (i < 3 || now_ms() - t0 < 300.0); i++) TRY(one_step(m, x, dy));
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dy);
}

static void run_case(model *m, const char *case_name, int64_t batch, int64_t unit, int64_t cap, int reps)
{
    result r[NPOL];
    memset(r, 0, sizeof r);
    warm_up(m, batch);
    for (int i = 0; i < NPOL; i++) {
        int64_t param = policies[i].k;
        if (policies[i].p == GPUCORE_CKPT_BUDGET) /* half-way between sqrt(n) and keep-all */
            param = (r[0].peak + r[3].peak) / 2;
        TRY(gpucore_ckpt_set_policy(m->ck, policies[i].p, param));
        measure(m, batch, reps, &r[i]);
    }
    /* the limit: what keep-all reserved at this batch, plus a quarter */
    int64_t limit = r[0].peak + r[0].peak / 4;
    TRY(gpucore_memory_set_limit(m->ctx, limit));
    for (int i = 0; i < NPOL; i++) {
        int64_t param = policies[i].k;
        if (policies[i].p == GPUCORE_CKPT_BUDGET) param = limit * 9 / 10;
        TRY(gpucore_ckpt_set_policy(m->ck, policies[i].p, param));
        r[i].batch = max_batch(m, batch, unit, cap);
    }
    TRY(gpucore_memory_set_limit(m->ctx, 0));
    gpucore_memory_empty_cache(m->ctx, GPUCORE_MEMORY_DEVICE);
    if (!json) {
        printf("\n%s, batch %lld (%lld segments) on %s; limit for the batch search %.1f MiB\n", case_name,
               (long long)batch, (long long)gpucore_ckpt_segment_count(m->ck), dev_name, limit / 1048576.0);
        printf("  %-14s %10s %10s %12s %10s %10s %12s\n", "policy", "step ms", "vs keep", "peak MiB", "+act MiB",
               "vs keep", "max batch");
    }
    for (int i = 0; i < NPOL; i++) {
        char cas[128];
        snprintf(cas, sizeof cas, "%s_b%lld/%s", case_name, (long long)batch, policies[i].name);
        double tspeed = r[0].ms / r[i].ms, mspeed = (double)r[0].peak / (double)r[i].peak;
        double bspeed = r[0].batch ? (double)r[i].batch / (double)r[0].batch : 0;
        emit(cas, "step_ms", r[i].ms, "ms", r[0].ms, tspeed);
        emit(cas, "peak_allocated", (double)r[i].peak, "bytes", (double)r[0].peak, mspeed);
        emit(cas, "activation_peak", (double)r[i].extra, "bytes", (double)r[0].extra,
             r[i].extra ? (double)r[0].extra / (double)r[i].extra : 0);
        emit(cas, "max_batch", (double)r[i].batch, "samples", (double)r[0].batch, bspeed);
        if (!json)
            printf("  %-14s %10.2f %9.2fx %12.2f %10.2f %9.2fx %8lld (%.1fx)\n", policies[i].name, r[i].ms,
                   r[i].ms / r[0].ms, r[i].peak / 1048576.0, r[i].extra / 1048576.0,
                   (double)r[i].extra / (double)(r[0].extra ? r[0].extra : 1), (long long)r[i].batch, bspeed);
    }
}

int main(int argc, char **argv)
{
    int mode = 1; /* 0 quick, 1 default, 2 full */
    const char *device = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) mode = 0;
        else if (!strcmp(argv[i], "--full")) mode = 2;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--json] [--quick|--full] [--device cpu|cuda]\n", argv[0]);
            return 2;
        }
    }
    gpucore_context *ctx = NULL;
    TRY(gpucore_context_create(device, &ctx));
    dev_name = gpucore_context_device_name(ctx);
    gpucore_device_type type;
    int idx;
    TRY(gpucore_context_device(ctx, &type, &idx));
    int gpu = type == GPUCORE_DEVICE_CUDA;
    int layers = mode == 0 ? 24 : mode == 1 ? 48 : 96;
    int64_t width = gpu ? 1024 : 128, batch = gpu ? 4096 : 1024;
    int reps = mode == 0 ? 3 : 5;
    if (!json)
        printf("bench_checkpoint: step = forward + backward through built-in segments; peak from the allocator; "
               "speed-up > 1 is better than keep-all\n");
    model m;
    char name[64];
    build_mlp(&m, ctx, layers, width);
    snprintf(name, sizeof name, "mlp%d_w%lld", layers, (long long)width);
    run_case(&m, name, batch, batch / 8, batch * 16, reps);
    model_free(&m);

    int blocks = mode == 0 ? 4 : mode == 1 ? 8 : 16;
    int64_t ch = gpu ? 64 : 8, hw = gpu ? 56 : 16, cb = gpu ? 64 : 16;
    build_cnn(&m, ctx, blocks, ch, hw);
    snprintf(name, sizeof name, "resnet%d_c%lld_%lldx%lld", 2 * blocks + 1, (long long)ch, (long long)hw, (long long)hw);
    run_case(&m, name, cb, cb / 8, cb * 16, reps);
    model_free(&m);
    gpucore_context_destroy(ctx);
    return 0;
}
