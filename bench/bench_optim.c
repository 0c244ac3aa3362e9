/*
 * bench_optim.c — fused AdamW throughput (parameters/s and GB/s) against the
 * measured device copy bandwidth, for 1M parameters upward (8 tensors per step,
 * f32 parameters and gradients: 28 bytes of traffic per parameter).
 *
 *   bench_optim [--json] [--device cpu|cuda] [--max-params N] [--reps R]
 *
 * Timing: events around R steps after a warm-up, median of 5 such runs. The
 * ceiling is a device-to-device copy of the same traffic (read + write counted).
 * The PyTorch peer (torch.optim.AdamW(fused=True)) is bench/peers/torch_optim.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

#define NTENSORS 8
#define RUNS 5

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define TRY(call)                                                                                   \
    do {                                                                                            \
        gpucore_status st_ = (call);                                                                \
        if (st_) {                                                                                  \
            fprintf(stderr, "bench_optim: %s failed: %s\n", #call, gpucore_last_error());           \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* Median milliseconds of RUNS timings of reps calls of fn. */
typedef void (*work_fn)(void *);
static float time_median(gpucore_context *ctx, work_fn fn, void *arg, int reps)
{
    gpucore_event *a, *b;
    TRY(gpucore_event_create(ctx, &a));
    TRY(gpucore_event_create(ctx, &b));
    fn(arg); /* warm-up */
    float ms[RUNS];
    for (int r = 0; r < RUNS; r++) {
        TRY(gpucore_event_record(a, NULL));
        for (int i = 0; i < reps; i++) fn(arg);
        TRY(gpucore_event_record(b, NULL));
        TRY(gpucore_event_synchronize(b));
        TRY(gpucore_event_elapsed_ms(a, b, &ms[r]));
        ms[r] /= (float)reps;
    }
    gpucore_event_destroy(a);
    gpucore_event_destroy(b);
    qsort(ms, RUNS, sizeof ms[0], cmp_float);
    return ms[RUNS / 2];
}

typedef struct step_arg { gpucore_optimizer *opt; gpucore_tensor **grads; } step_arg;
static void do_step(void *p)
{
    step_arg *a = p;
    TRY(gpucore_optimizer_step(a->opt, a->grads, NTENSORS, NULL, NULL));
}

typedef struct copy_arg { gpucore_tensor *dst, *src; } copy_arg;
static void do_copy(void *p)
{
    copy_arg *a = p;
    TRY(gpucore_copy(a->dst, a->src, NULL));
}

int main(int argc, char **argv)
{
    int json = 0, reps = 0;
    const char *device = NULL;
    int64_t max_params = 0;
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--max-params") && i + 1 < argc) max_params = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--json] [--quick|--full] [--device cpu|cuda] [--max-params N] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    gpucore_context *ctx;
    TRY(gpucore_context_create(device, &ctx));
    gpucore_device_type type;
    int index;
    TRY(gpucore_context_device(ctx, &type, &index));
    const int gpu = type == GPUCORE_DEVICE_CUDA;
    /* --quick: up to 256M parameters on a GPU, 4M on a CPU (seconds on a small box); --full: 1B / 16M. */
    if (!max_params) max_params = gpu ? (int64_t)1 << (full ? 30 : 28) : (int64_t)1 << (full ? 24 : 22);
    if (!reps) reps = gpu ? 20 : 3;
    const char *dev = gpucore_context_device_name(ctx);
    if (!json) {
        printf("fused AdamW, f32 params+grads, %d tensors per step, median of %d runs x %d steps on %s\n", NTENSORS, RUNS,
               reps, dev);
        printf("%12s %12s %12s %12s %12s %8s\n", "params", "ms/step", "Gparams/s", "GB/s", "copy GB/s", "of copy");
    }
    for (int64_t n = 1 << 20; n <= max_params; n *= 4) {
        int64_t per = n / NTENSORS;
        gpucore_tensor *params[NTENSORS], *grads[NTENSORS];
        for (int k = 0; k < NTENSORS; k++) {
            TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &per, &params[k]));
            TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &per, &grads[k]));
            TRY(gpucore_random(params[k], GPUCORE_NORMAL, 0, 1, 1, (uint64_t)k << 32, NULL));
            TRY(gpucore_random(grads[k], GPUCORE_NORMAL, 0, 1, 2, (uint64_t)k << 32, NULL));
        }
        gpucore_optimizer_config cfg;
        TRY(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &cfg));
        gpucore_optimizer *opt;
        TRY(gpucore_optimizer_create(ctx, &cfg, params, NTENSORS, &opt));
        step_arg sa = {opt, grads};
        float ms = time_median(ctx, do_step, &sa, reps);
        const int64_t total = per * NTENSORS;
        const double bytes = 28.0 * (double)total; /* read p g m v, write p m v */
        /* ceiling: copy of the same traffic (bytes/2 read + bytes/2 written) */
        int64_t copy_elems = (int64_t)(bytes / 2 / 4);
        gpucore_tensor *src, *dst;
        TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &copy_elems, &src));
        TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &copy_elems, &dst));
        TRY(gpucore_fill(src, 1.0, NULL));
        copy_arg ca = {dst, src};
        float copy_ms = time_median(ctx, do_copy, &ca, reps);
        double gbs = bytes / (ms * 1e-3) / 1e9, copy_gbs = bytes / (copy_ms * 1e-3) / 1e9;
        double pps = (double)total / (ms * 1e-3);
        if (json) {
            printf("{\"bench\":\"optim\",\"case\":\"adamw_f32_%lld\",\"device\":\"%s\",\"metric\":\"params_per_s\","
                   "\"value\":%.6g,\"unit\":\"params/s\"}\n", (long long)total, dev, pps);
            printf("{\"bench\":\"optim\",\"case\":\"adamw_f32_%lld\",\"device\":\"%s\",\"metric\":\"bandwidth\","
                   "\"value\":%.6g,\"unit\":\"GB/s\",\"peer\":\"copy\",\"peer_value\":%.6g,\"speedup\":%.4f}\n",
                   (long long)total, dev, gbs, copy_gbs, gbs / copy_gbs);
        } else {
            printf("%12lld %12.3f %12.3f %12.2f %12.2f %7.1f%%\n", (long long)total, ms, pps / 1e9, gbs, copy_gbs,
                   100.0 * gbs / copy_gbs);
        }
        fflush(stdout);
        gpucore_tensor_destroy(src);
        gpucore_tensor_destroy(dst);
        gpucore_optimizer_destroy(opt);
        for (int k = 0; k < NTENSORS; k++) {
            gpucore_tensor_destroy(params[k]);
            gpucore_tensor_destroy(grads[k]);
        }
    }
    gpucore_context_destroy(ctx);
    return 0;
}
