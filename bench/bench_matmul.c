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
 * --llama those of Llama shapes (rows 256 and 1024; width 2048 with FFN 8192 and
 * grouped-query k/v projections 2048->512, width 4096 with FFN 14336 and 4096->1024),
 * each in every layout the library offers, in f32 and bf16: the linear forward
 * y = x·Wᵀ (linear_forward), its data gradient dx = dy·W and weight gradient
 * dW = dyᵀ·x (linear_backward), and plain matmul a·b with b row-major [K,N]
 * ("matmul"), with b given as [N,K] and transposed ("matmul bT"), batched (4 batches
 * of rows/4, each with its own b: "batched") and broadcast (the same b for the 4:
 * "bcast"); --gpt2 adds f32 1024³. On the CPU the f32 FMA peak (an FMA loop on every
 * core, AVX-512 unless the CPU lacks it or GPUCORE_CPU_NO_AVX512 is set, else AVX2) and
 * the bf16 peak (AVX512-BF16's dot product, where the CPU has it) are measured first and
 * each case reports its percentage of its dtype's peak. --only WORD keeps the cases
 * whose name holds WORD, --only !WORD those without it (repeatable: all must hold); --reps N
 * times N runs.
 *
 *   bench_matmul [--json] [--quick|--full|--gpt2|--llama] [--only WORD]... [--reps N] [--device cpu|cuda]
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
static double peak_gflops;      /* measured f32 FMA peak of the CPU; 0 when not measured */
static double peak_bf16_gflops; /* measured AVX512-BF16 peak of the CPU; 0 when not measured */
static const char *only[8];     /* --only: words every case name must hold (!WORD: must not) */
static int n_only;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* the layouts of --gpt2/--llama (m rows, n outputs, k inputs of the linear layer unless said):
 * FWD/DGRAD/WGRAD: linear_forward and linear_backward's dx and dW; MM: matmul a[m,k]·b[k,n];
 * MMT: matmul a[m,k]·b[n,k]ᵀ; BATCH: a[4,m/4,k]·b[4,k,n]; BCAST: a[4,m/4,k]·b[k,n]. MMT_OPT is
 * the other benches' forward (matmul with trans_b) and DGRAD_MM/WGRAD_MM their gradients
 * (matmul a[m,k]·b[k,n] and aᵀ·b with a [k,m]), named as before. */
enum { FWD_MM, DGRAD_MM, WGRAD_MM, FWD, DGRAD, WGRAD, MM, MMT, BATCH, BCAST };

typedef struct mm_case {
    const char *dtype_name;
    gpucore_dtype dt;
    int64_t batch, m, n, k;
    int fused;  /* linear forward with bias + GELU (aux written) */
    int layout; /* the enum above; the dims of the case's name are m x n x k of the GEMM run */
} mm_case;

static int wanted(const char *name)
{
    for (int i = 0; i < n_only; i++)
        if (only[i][0] == '!' ? strstr(name, only[i] + 1) != NULL : !strstr(name, only[i])) return 0;
    return 1;
}

static void run_case(gpucore_context *ctx, const mm_case *c, int gpu, int reps)
{
    static const char *layout_names[] = {"", " dgrad", " wgrad", " linear", " linear dgrad", " linear wgrad",
                                         " matmul", " matmul bT", " batched", " bcast"};
    char name[160];
    if (c->batch > 1)
        snprintf(name, sizeof name, "%s %lldx%lldx%lldx%lld%s%s", c->dtype_name, (long long)c->batch, (long long)c->m,
                 (long long)c->n, (long long)c->k, c->fused ? " linear+bias+gelu" : "", layout_names[c->layout]);
    else
        snprintf(name, sizeof name, "%s %lldx%lldx%lld%s%s", c->dtype_name, (long long)c->m, (long long)c->n,
                 (long long)c->k, c->fused ? " linear+bias+gelu" : "", layout_names[c->layout]);
    if (!wanted(name)) return;
    gpucore_tensor *a = NULL, *w = NULL, *y = NULL, *bias = NULL, *aux = NULL;
    /* a [batch, m, k] (aᵀ stored [k, m] for WGRAD_MM), w the right operand, y [batch, m, n]; the linear
     * layouts store what linear_forward/backward take: FWD x [m,k], W [n,k], y [m,n]; DGRAD dy [m,k],
     * W [k,n], dx [m,n]; WGRAD dy [k,m], x [k,n], dW [m,n] */
    int64_t as[3] = {c->batch, c->m, c->k}, ws[3] = {c->batch, c->n, c->k}, ys[3] = {c->batch, c->m, c->n}, bs[1] = {c->n};
    if (c->layout == DGRAD_MM || c->layout == MM || c->layout == DGRAD || c->layout == BATCH || c->layout == BCAST) {
        ws[1] = c->k; ws[2] = c->n;
    }
    if (c->layout == WGRAD_MM || c->layout == WGRAD) { as[1] = c->k; as[2] = c->m; ws[1] = c->k; ws[2] = c->n; }
    int nd = c->batch > 1 ? 3 : 2;
    int off = c->batch > 1 ? 0 : 1, woff = c->layout == BATCH ? 0 : 1;
    gpucore_status st = gpucore_tensor_create(ctx, c->dt, nd, as + off, &a);
    if (!st) st = gpucore_tensor_create(ctx, c->dt, 3 - woff, ws + woff, &w);
    if (!st) st = gpucore_tensor_create(ctx, c->dt, nd, ys + off, &y);
    if (!st && c->fused) st = gpucore_tensor_create(ctx, c->dt, 1, bs, &bias);
    if (!st && c->fused) st = gpucore_tensor_create(ctx, c->dt, nd, ys + off, &aux);
    if (!st) st = gpucore_random(a, GPUCORE_NORMAL, 0, 1, 1, 0, NULL);
    if (!st) st = gpucore_random(w, GPUCORE_NORMAL, 0, 0.05, 2, 0, NULL);
    if (!st && bias) st = gpucore_random(bias, GPUCORE_NORMAL, 0, 1, 3, 0, NULL);
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.trans_b = c->layout == FWD_MM || c->layout == MMT;
    o.trans_a = c->layout == WGRAD_MM;
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
        if (c->fused) st = gpucore_linear_forward(a, w, bias, GPUCORE_ACT_GELU_TANH, y, aux, NULL);
        else if (c->layout == FWD) st = gpucore_linear_forward(a, w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL);
        else if (c->layout == DGRAD) st = gpucore_linear_backward(a, NULL, w, NULL, y, NULL, NULL, NULL);
        else if (c->layout == WGRAD) st = gpucore_linear_backward(a, w, y, NULL, NULL, y, NULL, NULL);
        else st = gpucore_matmul(a, w, y, &o, NULL);
        if (r >= 0) {
            gpucore_event_record(e1, s);
            gpucore_event_synchronize(e1);
            gpucore_event_elapsed_ms(e0, e1, &ms[r]);
            cms[r] = (float)((cpu_s() - c0) * 1e3 / (double)online_cpus);
        }
    }
    if (!st) st = gpucore_context_synchronize(ctx);
    if (st) {
        fprintf(stderr, "bench_matmul: %s: %s\n", name, gpucore_last_error());
    } else {
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
        qsort(cms, (size_t)reps, sizeof cms[0], cmp_float);
        double flops = 2.0 * (double)c->batch * (double)c->m * (double)c->n * (double)c->k;
        double rate = flops / (ms[reps / 2] * 1e-3) / (gpu ? 1e12 : 1e9);
        /* per CPU-second x cores (CPU only), the best run: on a shared machine the least disturbed */
        double crate = flops / (cms[0] * 1e-3) / 1e9;
        const double peak = c->dt == GPUCORE_BF16 ? peak_bf16_gflops : c->dt == GPUCORE_F32 ? peak_gflops : 0;
        const char *unit = gpu ? "TFLOP/s" : "GFLOP/s";
        if (json) {
            printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n",
                   name, device_name, unit, rate, unit);
            if (peak > 0 && !gpu) {
                printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"GFLOP/s per cpu-s x cores\",\"value\":%.3f,\"unit\":\"GFLOP/s\"}\n",
                       name, device_name, crate);
                printf("{\"bench\":\"matmul\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"ratio\"}\n",
                       name, device_name, c->dt == GPUCORE_BF16 ? "fraction_of_bf16_peak" : "fraction_of_fma_peak",
                       crate / peak);
            }
        } else if (peak > 0 && !gpu) {
            printf("%-40s %8.1f %s wall (%9.3f ms)  %8.1f best per cpu-s x%ld  %3.0f%% of %s peak\n", name, rate, unit,
                   ms[reps / 2], crate, online_cpus, 100.0 * crate / peak, c->dt == GPUCORE_BF16 ? "bf16" : "f32");
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
    int full = 0, gpt2 = 0, llama = 0, reps_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--gpt2")) gpt2 = 1;
        else if (!strcmp(argv[i], "--llama")) llama = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && n_only < 8) only[n_only++] = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc && atoi(argv[i + 1]) > 0) reps_arg = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else {
            fprintf(stderr, "usage: bench_matmul [--json] [--quick|--full|--gpt2|--llama] [--only WORD]... [--reps N] "
                            "[--device cpu|cuda]\n");
            return 2;
        }
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
    mm_case cases[1024];
    int n = 0;
    if (gpt2 || llama) {
        /* a linear layer's GEMMs in every layout (see the enum), rows B·T = 256 and 1024 */
        static const int64_t gpt2_io[][2] = {{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}, {768, 50257}};
        static const int64_t llama_io[][2] = {{2048, 2048}, {2048, 512},  {2048, 8192},  {8192, 2048},
                                              {4096, 4096}, {4096, 1024}, {4096, 14336}, {14336, 4096}};
        const int64_t(*io)[2] = gpt2 ? gpt2_io : llama_io;
        const int nio = gpt2 ? 5 : 8;
        if (gpt2) cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, 1024, 1024, 1024, 0, FWD_MM};
        for (int d = 0; d < 2; d++)
            for (int r = 0; r < 2; r++)
                for (int l = 0; l < nio; l++) {
                    const int64_t rows = r ? 1024 : 256, in = io[l][0], out = io[l][1];
                    const char *dn = dts[d].name;
                    const gpucore_dtype dt = dts[d].dt;
                    cases[n++] = (mm_case){dn, dt, 1, rows, out, in, 0, FWD_MM};
                    cases[n++] = (mm_case){dn, dt, 1, rows, in, out, 0, DGRAD_MM};
                    cases[n++] = (mm_case){dn, dt, 1, out, in, rows, 0, WGRAD_MM};
                    cases[n++] = (mm_case){dn, dt, 1, rows, out, in, 0, FWD};
                    cases[n++] = (mm_case){dn, dt, 1, rows, in, out, 0, DGRAD};
                    cases[n++] = (mm_case){dn, dt, 1, out, in, rows, 0, WGRAD};
                    cases[n++] = (mm_case){dn, dt, 1, rows, out, in, 0, MM};
                    cases[n++] = (mm_case){dn, dt, 1, rows, out, in, 0, MMT};
                    cases[n++] = (mm_case){dn, dt, 4, rows / 4, out, in, 0, BATCH};
                    cases[n++] = (mm_case){dn, dt, 4, rows / 4, out, in, 0, BCAST};
                }
    } else if (gpu) {
        int64_t squares[] = {1024, 2048, 4096, 8192, 16384};
        int nsq = full ? 5 : 4;
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < nsq; i++) cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, squares[i], squares[i], squares[i], 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 3072, 768, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 768, 3072, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 32, 1024, 1024, 64, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 8192, 3072, 768, 1, FWD_MM};
        }
    } else {
        /* small enough for ~20 s on a 2-core machine */
        int64_t squares[] = {256, 512, 1024};
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < 3; i++) cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, squares[i], squares[i], squares[i], 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 1, 512, 3072, 768, 0, 0};
            cases[n++] = (mm_case){dts[d].name, dts[d].dt, 8, 256, 256, 64, 0, 0};
        }
        cases[n++] = (mm_case){"f32", GPUCORE_F32, 1, 512, 3072, 768, 1, FWD_MM};
    }
    if (!gpu && (gpt2 || llama)) {
        int threads = 0;
        peak_gflops = measure_fma_peak(&threads);
        if (json && peak_gflops > 0)
            printf("{\"bench\":\"matmul\",\"case\":\"f32 fma peak %s x%d\",\"device\":\"%s\",\"metric\":\"GFLOP/s\",\"value\":%.3f,\"unit\":\"GFLOP/s\"}\n",
                   peak_width == 16 ? "avx512" : "avx2", threads, device_name, peak_gflops);
        else if (peak_gflops > 0)
            printf("f32 FMA peak (%s, %d threads, per cpu-s x cores): %.1f GFLOP/s\n", peak_width == 16 ? "AVX-512" : "AVX2", threads,
                   peak_gflops);
        peak_bf16_gflops = measure_bf16_peak(&threads);
        if (json && peak_bf16_gflops > 0)
            printf("{\"bench\":\"matmul\",\"case\":\"bf16 peak avx512bf16 x%d\",\"device\":\"%s\",\"metric\":\"GFLOP/s\",\"value\":%.3f,\"unit\":\"GFLOP/s\"}\n",
                   threads, device_name, peak_bf16_gflops);
        else if (peak_bf16_gflops > 0)
            printf("bf16 peak (AVX512-BF16 VDPBF16PS, %d threads, per cpu-s x cores): %.1f GFLOP/s\n", threads, peak_bf16_gflops);
    }
    if (!json) printf("bench_matmul on %s (%s, median of event-timed runs)\n", device_name, gpu ? "TFLOP/s" : "GFLOP/s");
    for (int i = 0; i < n; i++) run_case(ctx, &cases[i], gpu, reps_arg ? reps_arg : gpu ? 20 : 5);
    gpucore_context_destroy(ctx);
    return 0;
}
