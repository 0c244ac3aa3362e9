/*
 * bench_conv.c — convolution throughput: ResNet-50's convolution shapes and a
 * depthwise MobileNetV2 layer, forward, backward-data and backward-filter, in
 * f32 NCHW and bf16 NHWC, on the context's device (GPUCORE_DEVICE, default auto).
 * CUDA runs in autotune mode (the one-off tuning cost is reported separately,
 * from gpucore_conv_get_stats); the CPU runs the default mode and is judged
 * against its own f32 GEMM rate (gpucore_matmul, 1024³), the ceiling an
 * im2col + GEMM convolution can reach.
 *
 *   bench_conv [--json] [--quick | --full]
 * --quick (default): batch 32, a handful of shapes on the CPU (all on a GPU);
 * --full: every shape at batch 256 on a GPU (batch 32 on the CPU).
 * Times are medians of event-timed runs after a warm-up; TFLOP/s counts 2·MACs.
 * On a GPU each shape also reports fwd_first_call_ms: the host wall time of the
 * first heuristic-mode forward of the shape (plan search and build, one run,
 * synchronized), a cost cut to one engine finalize.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"

typedef struct shape { const char *name; int64_t c, h, w, k, r, stride, pad, groups; int cpu_quick; } shape;

static const shape shapes[] = {
    {"conv1_7x7s2", 3, 224, 224, 64, 7, 2, 3, 1, 0},
    {"res2_1x1_64-256", 64, 56, 56, 256, 1, 1, 0, 1, 1},
    {"res2_3x3_64", 64, 56, 56, 64, 3, 1, 1, 1, 0},
    {"res3_3x3s2_128", 128, 56, 56, 128, 3, 2, 1, 1, 0},
    {"res3_3x3_128", 128, 28, 28, 128, 3, 1, 1, 1, 0},
    {"res4_3x3_256", 256, 14, 14, 256, 3, 1, 1, 1, 1},
    {"res4_1x1_1024-256", 1024, 14, 14, 256, 1, 1, 0, 1, 0},
    {"res5_3x3_512", 512, 7, 7, 512, 3, 1, 1, 1, 0},
    {"mbv2_dw3x3_144", 144, 56, 56, 144, 3, 1, 1, 144, 1},
};

static int as_json;
static const char *dev_name;

static double median(float *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { float t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void emit(const char *cse, const char *metric, double value, const char *unit)
{
    if (as_json)
        printf("{\"bench\":\"conv\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\"}\n",
               cse, dev_name, metric, value, unit);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        gpucore_status st_ = (call);                                                               \
        if (st_) {                                                                                 \
            fprintf(stderr, "bench_conv: %s: %s\n", #call, gpucore_last_error());                  \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

/* ms per call (median), or < 0 on failure. */
static double time_op(gpucore_context *ctx, int op, gpucore_tensor *x, gpucore_tensor *w, gpucore_tensor *y,
                      const gpucore_conv_options *o, int reps)
{
    gpucore_stream *s;
    gpucore_event *e0, *e1;
    TRY(gpucore_context_current_stream(ctx, &s));
    TRY(gpucore_event_create(ctx, &e0));
    TRY(gpucore_event_create(ctx, &e1));
    float t[64];
    for (int i = -1; i < reps; i++) {
        TRY(gpucore_event_record(e0, s));
        if (op == 0) TRY(gpucore_conv_forward(x, w, NULL, y, o, s));
        else if (op == 1) TRY(gpucore_conv_backward_data(y, w, x, o, s));
        else TRY(gpucore_conv_backward_filter(y, x, w, o, s));
        TRY(gpucore_event_record(e1, s));
        TRY(gpucore_event_synchronize(e1));
        if (i >= 0) TRY(gpucore_event_elapsed_ms(e0, e1, &t[i]));
    }
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    return median(t, reps);
}

/* Wall ms of the first heuristic-mode forward of a shape (a fresh plan key: the autotuned runs use another), the
 * plan search and build included; < 0 on failure. */
static double first_call_ms(gpucore_context *ctx, gpucore_tensor *x, gpucore_tensor *w, gpucore_tensor *y,
                            const gpucore_conv_options *autotuned)
{
    gpucore_conv_options o = *autotuned;
    o.algo = GPUCORE_CONV_ALGO_HEURISTIC;
    TRY(gpucore_context_synchronize(ctx));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    TRY(gpucore_conv_forward(x, w, NULL, y, &o, NULL));
    TRY(gpucore_context_synchronize(ctx));
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
}

/* The CPU ceiling: f32 GEMM rate of this backend, TFLOP/s. */
static double gemm_ceiling(gpucore_context *ctx)
{
    const int64_t n = 1024, sh[2] = {n, n};
    gpucore_tensor *a, *b, *d;
    gpucore_stream *s;
    gpucore_event *e0, *e1;
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &a));
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &b));
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &d));
    TRY(gpucore_random(a, GPUCORE_UNIFORM, -1, 1, 1, 0, NULL));
    TRY(gpucore_random(b, GPUCORE_UNIFORM, -1, 1, 2, 0, NULL));
    TRY(gpucore_context_current_stream(ctx, &s));
    TRY(gpucore_event_create(ctx, &e0));
    TRY(gpucore_event_create(ctx, &e1));
    float t[5];
    for (int i = -1; i < 5; i++) {
        TRY(gpucore_event_record(e0, s));
        TRY(gpucore_matmul(a, b, d, NULL, s));
        TRY(gpucore_event_record(e1, s));
        TRY(gpucore_event_synchronize(e1));
        if (i >= 0) TRY(gpucore_event_elapsed_ms(e0, e1, &t[i]));
    }
    double ms = median(t, 5);
    gpucore_tensor_destroy(a); gpucore_tensor_destroy(b); gpucore_tensor_destroy(d);
    gpucore_event_destroy(e0); gpucore_event_destroy(e1);
    return 2.0 * n * n * n / (ms * 1e-3) / 1e12;
}

int main(int argc, char **argv)
{
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else { fprintf(stderr, "usage: bench_conv [--json] [--quick | --full]\n"); return 2; }
    }
    gpucore_context *ctx;
    if (gpucore_context_create(NULL, &ctx)) {
        fprintf(stderr, "bench_conv: %s\n", gpucore_last_error());
        return 1;
    }
    dev_name = gpucore_context_device_name(ctx);
    gpucore_device_type type;
    int idx;
    gpucore_context_device(ctx, &type, &idx);
    const int cpu = type == GPUCORE_DEVICE_CPU;
    const int64_t batch = cpu ? 32 : full ? 256 : 32;
    const int reps = cpu ? (full ? 3 : 1) : 20;
    double ceiling = cpu ? gemm_ceiling(ctx) : 0;
    if (cpu && ceiling > 0) {
        emit("gemm f32 1024^3 (ceiling)", "TFLOP/s", ceiling, "TFLOP/s");
        if (!as_json) printf("ceiling: this backend's f32 GEMM runs at %.3f TFLOP/s\n", ceiling);
    }
    if (!as_json)
        printf("%-34s %-11s %10s %10s %s\n", "case", "op", "ms", "TFLOP/s", cpu ? "of GEMM ceiling" : "");
    static const char *op_names[3] = {"fwd", "bwd_data", "bwd_filter"};
    for (int cfg = 0; cfg < 2; cfg++) {
        const gpucore_dtype dt = cfg == 0 ? GPUCORE_F32 : GPUCORE_BF16;
        const int layout = cfg == 0 ? GPUCORE_CONV_NCHW : GPUCORE_CONV_NHWC;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const shape *sp = &shapes[si];
            if (cpu && !full && !sp->cpu_quick) continue;
            /* keep the CPU's --quick short: f32 NCHW dense shapes, bf16 NHWC res4 and the depthwise layer */
            if (cpu && !full && cfg == 0 && sp->groups > 1) continue;
            if (cpu && !full && cfg == 1 && sp->groups == 1 && sp->c != 256) continue;
            const int64_t p = (sp->h + 2 * sp->pad - sp->r) / sp->stride + 1, q = (sp->w + 2 * sp->pad - sp->r) / sp->stride + 1;
            const int64_t cg = sp->c / sp->groups;
            int64_t xs[4], ws[4], ys[4];
            if (layout == GPUCORE_CONV_NCHW) {
                int64_t a[4] = {batch, sp->c, sp->h, sp->w}, b[4] = {sp->k, cg, sp->r, sp->r}, c[4] = {batch, sp->k, p, q};
                memcpy(xs, a, sizeof a); memcpy(ws, b, sizeof b); memcpy(ys, c, sizeof c);
            } else {
                int64_t a[4] = {batch, sp->h, sp->w, sp->c}, b[4] = {sp->k, sp->r, sp->r, cg}, c[4] = {batch, p, q, sp->k};
                memcpy(xs, a, sizeof a); memcpy(ws, b, sizeof b); memcpy(ys, c, sizeof c);
            }
            gpucore_tensor *x = NULL, *w = NULL, *y = NULL;
            if (gpucore_tensor_create(ctx, dt, 4, xs, &x) || gpucore_tensor_create(ctx, dt, 4, ws, &w) ||
                gpucore_tensor_create(ctx, dt, 4, ys, &y)) {
                fprintf(stderr, "bench_conv: %s: %s\n", sp->name, gpucore_last_error());
                gpucore_tensor_destroy(x); gpucore_tensor_destroy(w); gpucore_tensor_destroy(y);
                continue;
            }
            gpucore_random(x, GPUCORE_UNIFORM, -1, 1, 1, 0, NULL);
            gpucore_random(w, GPUCORE_UNIFORM, -0.1, 0.1, 2, 0, NULL);
            gpucore_random(y, GPUCORE_UNIFORM, -1, 1, 3, 0, NULL);
            gpucore_conv_options o;
            gpucore_conv_options_init(&o);
            o.layout = layout;
            o.stride_h = o.stride_w = sp->stride;
            o.pad_h = o.pad_w = sp->pad;
            o.groups = sp->groups;
            o.algo = cpu ? GPUCORE_CONV_ALGO_HEURISTIC : GPUCORE_CONV_ALGO_AUTOTUNE;
            char cse[128];
            snprintf(cse, sizeof cse, "%s b%lld %s %s", sp->name, (long long)batch, gpucore_dtype_name(dt),
                     layout == GPUCORE_CONV_NCHW ? "NCHW" : "NHWC");
            const double flops = 2.0 * batch * sp->k * p * q * cg * sp->r * sp->r;
            if (!cpu) { /* the CPU plans nothing: its first call is any call */
                double first = first_call_ms(ctx, x, w, y, &o);
                if (first >= 0) {
                    emit(cse, "fwd_first_call_ms", first, "ms");
                    if (!as_json) printf("%-34s %-11s %10.3f   (first call, heuristic mode: plan built)\n", cse, "fwd", first);
                }
            }
            for (int op = 0; op < 3; op++) {
                gpucore_conv_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
                gpucore_conv_get_stats(ctx, &before);
                double ms = time_op(ctx, op, x, w, y, &o, reps);
                gpucore_conv_get_stats(ctx, &after);
                if (ms < 0) continue;
                const double tf = flops / (ms * 1e-3) / 1e12;
                char metric[64];
                snprintf(metric, sizeof metric, "%s_ms", op_names[op]);
                emit(cse, metric, ms, "ms");
                snprintf(metric, sizeof metric, "%s_TFLOP/s", op_names[op]);
                emit(cse, metric, tf, "TFLOP/s");
                double tune = after.autotune_ms - before.autotune_ms;
                if (tune > 0) {
                    snprintf(metric, sizeof metric, "%s_autotune_ms", op_names[op]);
                    emit(cse, metric, tune, "ms");
                }
                if (!as_json) {
                    printf("%-34s %-11s %10.3f %10.4f", cse, op_names[op], ms, tf);
                    if (cpu && ceiling > 0) printf("   %5.1f%%", 100.0 * tf / ceiling);
                    if (tune > 0) printf("   (autotune, once: %.1f ms)", tune);
                    printf("\n");
                }
            }
            gpucore_tensor_destroy(x); gpucore_tensor_destroy(w); gpucore_tensor_destroy(y);
        }
    }
    gpucore_context_destroy(ctx);
    return 0;
}
