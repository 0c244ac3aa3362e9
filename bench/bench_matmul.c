/*
 * bench_matmul.c — matmul throughput: square sizes and transformer shapes per
 * dtype, in the linear-layer layout y = x·Wᵀ (a [M,K] row-major, W [N,K] with
 * trans_b), plus the fused linear+bias+GELU forward. FLOPs = 2·M·N·K·batch.
 * Medians of event-timed runs after warm-up. TFLOP/s on a GPU, GFLOP/s on the
 * CPU. Peers (same case names) come from bench/peers/numpy_matmul.py (CPU) and
 * torch_matmul.py (GPU), joined by gpucore-bench.
 *
 *   bench_matmul [--json] [--quick|--full] [--device cpu|cuda]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

static int json;
static const char *device_name;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef struct mm_case {
    const char *dtype_name;
    gpucore_dtype dt;
    int64_t batch, m, n, k;
    int fused; /* linear forward with bias + GELU (aux written) */
} mm_case;

static void run_case(gpucore_context *ctx, const mm_case *c, int gpu, int reps)
{
    gpucore_tensor *a = NULL, *w = NULL, *y = NULL, *bias = NULL, *aux = NULL;
    int64_t as[3] = {c->batch, c->m, c->k}, ws[2] = {c->n, c->k}, ys[3] = {c->batch, c->m, c->n}, bs[1] = {c->n};
    int nd = c->batch > 1 ? 3 : 2;
    int off = c->batch > 1 ? 0 : 1;
    gpucore_status st = gpucore_tensor_create(ctx, c->dt, nd, as + off, &a);
    if (!st) st = gpucore_tensor_create(ctx, c->dt, 2, ws, &w);
    if (!st) st = gpucore_tensor_create(ctx, c->dt, nd, ys + off, &y);
    if (!st && c->fused) st = gpucore_tensor_create(ctx, c->dt, 1, bs, &bias);
    if (!st && c->fused) st = gpucore_tensor_create(ctx, c->dt, nd, ys + off, &aux);
    if (!st) st = gpucore_random(a, GPUCORE_NORMAL, 0, 1, 1, 0, NULL);
    if (!st) st = gpucore_random(w, GPUCORE_NORMAL, 0, 0.05, 2, 0, NULL);
    if (!st && bias) st = gpucore_random(bias, GPUCORE_NORMAL, 0, 1, 3, 0, NULL);
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    gpucore_stream *s = NULL;
    gpucore_event *e0 = NULL, *e1 = NULL;
    gpucore_context_current_stream(ctx, &s);
    gpucore_event_create(ctx, &e0);
    gpucore_event_create(ctx, &e1);
    float *ms = calloc((size_t)reps, sizeof(float));
    for (int r = -2; r < reps && !st; r++) {
        if (r >= 0) gpucore_event_record(e0, s);
        st = c->fused ? gpucore_linear_forward(a, w, bias, GPUCORE_ACT_GELU_TANH, y, aux, NULL)
                      : gpucore_matmul(a, w, y, &o, NULL);
        if (r >= 0) {
            gpucore_event_record(e1, s);
            gpucore_event_synchronize(e1);
            gpucore_event_elapsed_ms(e0, e1, &ms[r]);
        }
    }
    if (!st) st = gpucore_context_synchronize(ctx);
    char name[128];
    if (c->batch > 1)
        snprintf(name, sizeof name, "%s %lldx%lldx%lldx%lld%s", c->dtype_name, (long long)c->batch, (long long)c->m,
                 (long long)c->n, (long long)c->k, c->fused ? " linear+bias+gelu" : "");
    else
        snprintf(name, sizeof name, "%s %lldx%lldx%lld%s", c->dtype_name, (long long)c->m, (long long)c->n,
                 (long long)c->k, c->fused ? " linear+bias+gelu" : "");
    if (st) {
        fprintf(stderr, "bench_matmul: %s: %s\n", name, gpucore_last_error());
    } else {
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
        double flops = 2.0 * (double)c->batch * (double)c->m * (double)c->n * (double)c->k;
        double rate = flops / (ms[reps / 2] * 1e-3) / (gpu ? 1e12 : 1e9);
        const char *unit = gpu ? "TFLOP/s" : "GFLOP/s";
        if (json)
            printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n",
                   name, device_name, unit, rate, unit);
        else
            printf("%-40s %10.3f %s  (%.3f ms)\n", name, rate, unit, ms[reps / 2]);
    }
    free(ms);
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    gpucore_tensor *all[] = {a, w, y, bias, aux};
    for (int i = 0; i < 5; i++) gpucore_tensor_destroy(all[i]);
}

int main(int argc, char **argv)
{
    const char *dev = NULL;
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else { fprintf(stderr, "usage: bench_matmul [--json] [--quick|--full] [--device cpu|cuda]\n"); return 2; }
    }
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) {
        fprintf(stderr, "bench_matmul: %s\n", gpucore_last_error());
        return 1;
    }
    device_name = gpucore_context_device_name(ctx);
    gpucore_device_type type;
    int index;
    gpucore_context_device(ctx, &type, &index);
    const int gpu = type == GPUCORE_DEVICE_CUDA;
    static const struct { const char *name; gpucore_dtype dt; } dts[] = {
        {"f32", GPUCORE_F32}, {"bf16", GPUCORE_BF16}, {"f16", GPUCORE_F16}};
    mm_case cases[64];
    int n = 0;
    if (gpu) {
        int64_t squares[] = {1024, 2048, 4096, 8192, 16384};
        int nsq = full ? 5 : 4;
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < nsq; i++) cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, squares[i], squares[i], squares[i], 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 3072, 768, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 768, 3072, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 32, 1024, 1024, 64, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 3072, 768, 1};
        }
    } else {
        /* small enough for ~20 s on a 2-core machine */
        int64_t squares[] = {256, 512, 1024};
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < 3; i++) cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, squares[i], squares[i], squares[i], 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 512, 3072, 768, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 8, 256, 256, 64, 0};
        }
        cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, 512, 3072, 768, 1};
    }
    if (!json) printf("bench_matmul on %s (%s, median of event-timed runs)\n", device_name, gpu ? "TFLOP/s" : "GFLOP/s");
    for (int i = 0; i < n; i++) run_case(ctx, &cases[i], gpu, gpu ? 20 : 5);
    gpucore_context_destroy(ctx);
    return 0;
}
