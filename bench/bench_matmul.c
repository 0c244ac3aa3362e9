/*
 * bench_matmul.c — matmul throughput: square sizes and transformer shapes per
 * dtype, in the linear-layer layout y = x·Wᵀ (a [M,K] row-major, W [N,K] with
 * trans_b), plus the fused linear+bias+GELU forward. FLOPs = 2·M·N·K·batch.
 * Medians of event-timed runs after warm-up. TFLOP/s on a GPU, GFLOP/s on the
 * CPU. Peers (same case names) come from bench/peers/numpy_matmul.py (CPU) and
 * torch_matmul.py (GPU), joined by gpucore-bench.
 *
 * --gpt2 runs instead the GEMMs of a GPT-2 124M training step (rows B·T = 256 and
 * 1024; in->out 768->768, 768->2304, 768->3072, 3072->768 and the 768->50257 head),
 * each as the forward y = x·Wᵀ, the data gradient dx = dy·W and the weight gradient
 * dW = dyᵀ·x, plus f32 1024³. On the CPU the f32 FMA peak (an FMA loop on every core,
 * AVX-512 unless the CPU lacks it or GPUCORE_CPU_NO_AVX512 is set, else AVX2) is
 * measured first and each case also reports its fraction of that peak.
 *
 *   bench_matmul [--json] [--quick|--full|--gpt2] [--device cpu|cuda]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "gpucore.h"
#include "bench_fma_peak.h"

static int json;
static const char *device_name;
static double peak_gflops; /* measured f32 FMA peak of the CPU; 0 when not measured */

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
    int pass;  /* 0 forward y = x·Wᵀ (a [M,K], W [N,K]); 1 data gradient a[M,K]·W[K,N];
                  2 weight gradient aᵀ·b with a [K,M], b [K,N] */
} mm_case;

static void run_case(gpucore_context *ctx, const mm_case *c, int gpu, int reps)
{
    gpucore_tensor *a = NULL, *w = NULL, *y = NULL, *bias = NULL, *aux = NULL;
    int64_t as[3] = {c->batch, c->m, c->k}, ws[2] = {c->n, c->k}, ys[3] = {c->batch, c->m, c->n}, bs[1] = {c->n};
    if (c->pass == 1) { ws[0] = c->k; ws[1] = c->n; }
    if (c->pass == 2) { as[1] = c->k; as[2] = c->m; ws[0] = c->k; ws[1] = c->n; }
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
    o.trans_b = c->pass == 0;
    o.trans_a = c->pass == 2;
    gpucore_stream *s = NULL;
    gpucore_event *e0 = NULL, *e1 = NULL;
    gpucore_context_current_stream(ctx, &s);
    gpucore_event_create(ctx, &e0);
    gpucore_event_create(ctx, &e1);
    float *ms = calloc((size_t)reps, sizeof(float)), *cms = calloc((size_t)reps, sizeof(float));
    double c0 = 0;
    for (int r = -2; r < reps && !st; r++) {
        if (r >= 0) c0 = cpu_s();
        if (r >= 0) gpucore_event_record(e0, s);
        st = c->fused ? gpucore_linear_forward(a, w, bias, GPUCORE_ACT_GELU_TANH, y, aux, NULL)
                      : gpucore_matmul(a, w, y, &o, NULL);
        if (r >= 0) {
            gpucore_event_record(e1, s);
            gpucore_event_synchronize(e1);
            gpucore_event_elapsed_ms(e0, e1, &ms[r]);
            cms[r] = (float)((cpu_s() - c0) * 1e3 / (double)online_cpus);
        }
    }
    if (!st) st = gpucore_context_synchronize(ctx);
    char name[160];
    static const char *pass_names[3] = {"", " dgrad", " wgrad"};
    if (c->pass)
        snprintf(name, sizeof name, "%s %lldx%lldx%lld%s", c->dtype_name, (long long)c->m, (long long)c->n,
                 (long long)c->k, pass_names[c->pass]);
    else if (c->batch > 1)
        snprintf(name, sizeof name, "%s %lldx%lldx%lldx%lld%s", c->dtype_name, (long long)c->batch, (long long)c->m,
                 (long long)c->n, (long long)c->k, c->fused ? " linear+bias+gelu" : "");
    else
        snprintf(name, sizeof name, "%s %lldx%lldx%lld%s", c->dtype_name, (long long)c->m, (long long)c->n,
                 (long long)c->k, c->fused ? " linear+bias+gelu" : "");
    if (st) {
        fprintf(stderr, "bench_matmul: %s: %s\n", name, gpucore_last_error());
    } else {
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
        qsort(cms, (size_t)reps, sizeof cms[0], cmp_float);
        double flops = 2.0 * (double)c->batch * (double)c->m * (double)c->n * (double)c->k;
        double rate = flops / (ms[reps / 2] * 1e-3) / (gpu ? 1e12 : 1e9);
        /* per CPU-second x cores (CPU only), the best run: on a shared machine the least disturbed */
        double crate = flops / (cms[0] * 1e-3) / 1e9;
        const char *unit = gpu ? "TFLOP/s" : "GFLOP/s";
        if (json) {
            printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n",
                   name, device_name, unit, rate, unit);
            if (peak_gflops > 0 && !gpu) {
                printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"GFLOP/s per cpu-s x cores\",\"value\":%.3f,\"unit\":\"GFLOP/s\"}\n",
                       name, device_name, crate);
                printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"fraction_of_fma_peak\",\"value\":%.3f,\"unit\":\"ratio\"}\n",
                       name, device_name, crate / peak_gflops);
            }
        } else if (peak_gflops > 0 && !gpu) {
            printf("%-34s %8.1f %s wall (%9.3f ms)  %8.1f best per cpu-s x%ld  %3.0f%% of peak\n", name, rate, unit,
                   ms[reps / 2], crate, online_cpus, 100.0 * crate / peak_gflops);
        } else {
            printf("%-40s %10.3f %s  (%.3f ms)\n", name, rate, unit, ms[reps / 2]);
        }
    }
    free(ms);
    free(cms);
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    gpucore_tensor *all[] = {a, w, y, bias, aux};
    for (int i = 0; i < 5; i++) gpucore_tensor_destroy(all[i]);
}

int main(int argc, char **argv)
{
    const char *dev = NULL;
    int full = 0, gpt2 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--gpt2")) gpt2 = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else { fprintf(stderr, "usage: bench_matmul [--json] [--quick|--full|--gpt2] [--device cpu|cuda]\n"); return 2; }
    }
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) {
        fprintf(stderr, "bench_matmul: %s\n", gpucore_last_error());
        return 1;
    }
    device_name = gpucore_context_device_name(ctx);
    online_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (online_cpus < 1) online_cpus = 1;
    gpucore_device_type type;
    int index;
    gpucore_context_device(ctx, &type, &index);
    const int gpu = type == GPUCORE_DEVICE_CUDA;
    static const struct { const char *name; gpucore_dtype dt; } dts[] = {
        {"f32", GPUCORE_F32}, {"bf16", GPUCORE_BF16}, {"f16", GPUCORE_F16}};
    mm_case cases[64];
    int n = 0;
    if (gpt2) {
        /* a linear layer's three GEMMs: forward [M,K]x[N,K]ᵀ, dgrad [M,N]x[N,K], wgrad [M,N]ᵀx[M,K] */
        static const int64_t io[5][2] = {{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}, {768, 50257}};
        cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, 1024, 1024, 1024, 0, 0};
        for (int r = 0; r < 2; r++)
            for (int l = 0; l < 5; l++) {
                const int64_t rows = r ? 1024 : 256, in = io[l][0], out = io[l][1];
                cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, rows, out, in, 0, 0};
                cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, rows, in, out, 0, 1};
                cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, out, in, rows, 0, 2};
            }
    } else if (gpu) {
        int64_t squares[] = {1024, 2048, 4096, 8192, 16384};
        int nsq = full ? 5 : 4;
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < nsq; i++) cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, squares[i], squares[i], squares[i], 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 3072, 768, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 768, 3072, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 32, 1024, 1024, 64, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 3072, 768, 1, 0};
        }
    } else {
        /* small enough for ~20 s on a 2-core machine */
        int64_t squares[] = {256, 512, 1024};
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < 3; i++) cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, squares[i], squares[i], squares[i], 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 512, 3072, 768, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 8, 256, 256, 64, 0, 0};
        }
        cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, 512, 3072, 768, 1, 0};
    }
    if (!gpu && gpt2) {
        int threads = 0;
        peak_gflops = measure_fma_peak(&threads);
        if (json && peak_gflops > 0)
            printf("{\"bench\":\"matmul\",\"case\":\"f32 fma peak %s x%d\",\"device\":\"%s\",\"metric\":\"GFLOP/s\",\"value\":%.3f,\"unit\":\"GFLOP/s\"}\n",
                   peak_width == 16 ? "avx512" : "avx2", threads, device_name, peak_gflops);
        else if (peak_gflops > 0)
            printf("f32 FMA peak (%s, %d threads, per cpu-s x cores): %.1f GFLOP/s\n", peak_width == 16 ? "AVX-512" : "AVX2", threads,
                   peak_gflops);
    }
    if (!json) printf("bench_matmul on %s (%s, median of event-timed runs)\n", device_name, gpu ? "TFLOP/s" : "GFLOP/s");
    for (int i = 0; i < n; i++) run_case(ctx, &cases[i], gpu, gpu ? 20 : 5);
    gpucore_context_destroy(ctx);
    return 0;
}
