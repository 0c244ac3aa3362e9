/*
 * bench_quant_linear.c — the linear layer with a quantized weight (gpucore_qlinear_forward) beside
 * the dense bf16 linear layer of the same shape, in one run: a Llama-3.2-1B MLP projection,
 * x [M, 2048] · W [8192, 2048]ᵀ, at M = 512 (prefill / training: the tiled path) and M = 1 (a decode
 * step: the fused path), W as NF4 (block 64) and Q4_0, activations bf16. Reports the median time,
 * GFLOP/s (2·M·N·K) and W's bytes read per second, and the dense layer as the peer (speedup = dense
 * time / quantized time). Medians of event-timed runs after warm-up.
 *
 *   bench_quant_linear [--json] [--quick|--full] [--device cpu|cuda]
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

/* Median ms of reps runs of one layer: quantized when qw is not NULL, else dense w. */
static gpucore_status time_layer(gpucore_context *ctx, const gpucore_tensor *x, const gpucore_tensor *w,
                                 const gpucore_qweight *qw, gpucore_tensor *y, int reps, float *median_ms)
{
    gpucore_stream *s = NULL;
    gpucore_event *e0 = NULL, *e1 = NULL;
    gpucore_status st = gpucore_context_current_stream(ctx, &s);
    if (!st) st = gpucore_event_create(ctx, &e0);
    if (!st) st = gpucore_event_create(ctx, &e1);
    float *ms = calloc((size_t)reps, sizeof(float));
    for (int r = -2; r < reps && !st; r++) {
        if (r >= 0) gpucore_event_record(e0, s);
        st = qw ? gpucore_qlinear_forward(x, qw, NULL, GPUCORE_ACT_NONE, y, NULL, NULL)
                : gpucore_linear_forward(x, w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL);
        if (!st && r >= 0) {
            gpucore_event_record(e1, s);
            gpucore_event_synchronize(e1);
            gpucore_event_elapsed_ms(e0, e1, &ms[r]);
        }
    }
    if (!st) st = gpucore_context_synchronize(ctx);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    *median_ms = ms[reps / 2];
    free(ms);
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    return st;
}

static void report(const char *name, double flops, double wbytes, float ms, const char *peer, float peer_ms)
{
    const double gflops = flops / (ms * 1e-3) / 1e9, gbs = wbytes / (ms * 1e-3) / 1e9;
    if (json) {
        printf("{\"bench\":\"quant_linear\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"ms\",\"value\":%.4f,\"unit\":\"ms\"",
               name, device_name, ms);
        if (peer) printf(",\"peer\":\"%s\",\"peer_value\":%.4f,\"speedup\":%.3f", peer, peer_ms, peer_ms / ms);
        printf("}\n");
        printf("{\"bench\":\"quant_linear\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"GFLOP/s\",\"value\":%.3f,\"unit\":\"GFLOP/s\"}\n",
               name, device_name, gflops);
        printf("{\"bench\":\"quant_linear\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"weight GB/s\",\"value\":%.3f,\"unit\":\"GB/s\"}\n",
               name, device_name, gbs);
    } else {
        printf("%-36s %10.3f ms %9.1f GFLOP/s %7.1f GB/s of W", name, ms, gflops, gbs);
        if (peer) printf("   %.2fx the dense bf16 layer (%.3f ms)", peer_ms / ms, peer_ms);
        printf("\n");
    }
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
        else { fprintf(stderr, "usage: bench_quant_linear [--json] [--quick|--full] [--device cpu|cuda]\n"); return 2; }
    }
    gpucore_context *ctx = NULL, *cpu = NULL;
    if (gpucore_context_create(dev, &ctx) || gpucore_context_create("cpu", &cpu)) {
        fprintf(stderr, "bench_quant_linear: %s\n", gpucore_last_error());
        return 1;
    }
    device_name = gpucore_context_device_name(ctx);
    const int64_t N = 8192, K = 2048, ms_rows[2] = {512, 1};
    const int reps = full ? 20 : 5;
    static const struct { gpucore_quant_format fmt; const char *name; } fmts[2] = {
        {GPUCORE_QUANT_NF4, "NF4"}, {GPUCORE_QUANT_Q4_0, "Q4_0"}};
    /* W drawn once on the CPU (f32), quantized there (gpucore_quantize runs on the CPU) */
    int64_t ws[2] = {N, K};
    gpucore_tensor *wf = NULL, *w = NULL;
    gpucore_tensor *qb[2] = {NULL, NULL};
    gpucore_qweight qw[2];
    gpucore_status st = gpucore_tensor_create(cpu, GPUCORE_F32, 2, ws, &wf);
    if (!st) st = gpucore_random(wf, GPUCORE_NORMAL, 0, 0.02, 7, 0, NULL);
    if (!st) st = gpucore_tensor_create(ctx, GPUCORE_BF16, 2, ws, &w);
    for (int f = 0; f < 2 && !st; f++) {
        int64_t nbytes = 0;
        gpucore_tensor *qc = NULL;
        st = gpucore_quant_size(fmts[f].fmt, N, K, 0, 0, &nbytes);
        if (!st) st = gpucore_tensor_create(cpu, GPUCORE_U8, 1, &nbytes, &qc);
        if (!st) st = gpucore_quantize(wf, fmts[f].fmt, 0, 0, qc, NULL);
        if (!st) st = gpucore_tensor_create(ctx, GPUCORE_U8, 1, &nbytes, &qb[f]);
        void *host = malloc((size_t)nbytes);
        if (!st) st = gpucore_copy_to_host(host, nbytes, qc);
        if (!st) st = gpucore_copy_from_host(qb[f], host, nbytes);
        free(host);
        gpucore_tensor_destroy(qc);
        qw[f] = (gpucore_qweight){.data = qb[f], .format = fmts[f].fmt, .block_size = 0, .flags = 0, .rows = N, .cols = K};
    }
    if (!st) { /* the dense bf16 W: the NF4 weight's values */
        gpucore_tensor *deq = NULL;
        st = gpucore_tensor_create(ctx, GPUCORE_BF16, 2, ws, &deq);
        if (!st) st = gpucore_dequantize(qb[0], GPUCORE_QUANT_NF4, 0, 0, deq, NULL);
        if (!st) st = gpucore_copy(w, deq, NULL);
        gpucore_tensor_destroy(deq);
    }
    if (!json && !st) printf("bench_quant_linear on %s: bf16 x [M, %lld] · W [%lld, %lld]ᵀ, median of %d runs\n", device_name,
                             (long long)K, (long long)N, (long long)K, reps);
    for (int mi = 0; mi < 2 && !st; mi++) {
        const int64_t M = ms_rows[mi];
        int64_t xs[2] = {M, K}, ys[2] = {M, N};
        gpucore_tensor *x = NULL, *y = NULL;
        st = gpucore_tensor_create(ctx, GPUCORE_BF16, 2, xs, &x);
        if (!st) st = gpucore_random(x, GPUCORE_NORMAL, 0, 1, 11, 0, NULL);
        if (!st) st = gpucore_tensor_create(ctx, GPUCORE_BF16, 2, ys, &y);
        float dense_ms = 0, q_ms = 0;
        char name[96];
        const double flops = 2.0 * (double)M * (double)N * (double)K;
        if (!st) st = time_layer(ctx, x, w, NULL, y, reps, &dense_ms);
        if (!st) {
            snprintf(name, sizeof name, "bf16 %lldx%lldx%lld dense linear", (long long)M, (long long)N, (long long)K);
            report(name, flops, (double)N * (double)K * 2, dense_ms, NULL, 0);
        }
        for (int f = 0; f < 2 && !st; f++) {
            int64_t nbytes = gpucore_tensor_numel(qb[f]);
            if (!(st = time_layer(ctx, x, NULL, &qw[f], y, reps, &q_ms))) {
                snprintf(name, sizeof name, "bf16 %lldx%lldx%lld %s qlinear", (long long)M, (long long)N, (long long)K,
                         fmts[f].name);
                report(name, flops, (double)nbytes, q_ms, "dense bf16 linear", dense_ms);
            }
        }
        gpucore_tensor_destroy(x);
        gpucore_tensor_destroy(y);
    }
    if (st) fprintf(stderr, "bench_quant_linear: %s\n", gpucore_last_error());
    gpucore_tensor_destroy(wf);
    gpucore_tensor_destroy(w);
    for (int f = 0; f < 2; f++) gpucore_tensor_destroy(qb[f]);
    gpucore_context_destroy(ctx);
    gpucore_context_destroy(cpu);
    return st ? 1 : 0;
}
