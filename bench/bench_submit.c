/*
 * bench_submit.c — the fixed cost of one small op on the CPU backend's stream
 * (submit and synchronize overhead): per iteration, the wall time, the
 * submitting thread's CPU time and the whole process's CPU time (worker thread
 * included) of an add on 16 f32 elements, as
 *   new      gpucore_binary_new + gpucore_tensor_destroy (a binding's per-op path)
 *   new+sync the same with gpucore_stream_synchronize before the destroy
 *   into     gpucore_binary into an existing tensor (no allocation)
 *   into+sync the same followed by a synchronize (the round trip)
 *   into+gap  into, then 2 us of the caller's own work (a binding's per-op cost: the
 *             worker keeps up, so each task finds it awake); the 2 us are subtracted
 * Medians of 7 runs of ITERS iterations. Not in the gpucore-bench driver: the
 * peer (PyTorch) side is bench/peers/torch_ops.py --only "add f32 16".
 *
 *   bench_submit [--iters N] [--device cpu] [--case K]   (K: 0..4, one case only)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"

#define RUNS 7
#define GAP_US 2.0

static double clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void check(gpucore_status st)
{
    if (st) { fprintf(stderr, "bench_submit: %s\n", gpucore_last_error()); exit(1); }
}

static gpucore_tensor *a, *b, *out;
static gpucore_stream *stream; /* the context's current stream */

static void one(int kind)
{
    gpucore_tensor *r = NULL;
    switch (kind) {
    case 0: check(gpucore_binary_new(GPUCORE_ADD, a, b, NULL, &r)); gpucore_tensor_destroy(r); break;
    case 1:
        check(gpucore_binary_new(GPUCORE_ADD, a, b, NULL, &r));
        check(gpucore_stream_synchronize(stream));
        gpucore_tensor_destroy(r);
        break;
    case 2: check(gpucore_binary(GPUCORE_ADD, out, a, b, NULL)); break;
    case 3: check(gpucore_binary(GPUCORE_ADD, out, a, b, NULL)); check(gpucore_stream_synchronize(stream)); break;
    case 4: {
        check(gpucore_binary(GPUCORE_ADD, out, a, b, NULL));
        const double until = clock_us(CLOCK_MONOTONIC) + GAP_US;
        while (clock_us(CLOCK_MONOTONIC) < until) {}
        break;
    }
    }
}

int main(int argc, char **argv)
{
    int iters = 20000, only = -1;
    const char *device = "cpu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = atoi(argv[++i]);
    }
    gpucore_context *ctx = NULL;
    check(gpucore_context_create(device, &ctx));
    check(gpucore_context_current_stream(ctx, &stream));
    const int64_t n = 16;
    check(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &a));
    check(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &b));
    check(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &out));
    check(gpucore_random(a, GPUCORE_UNIFORM, -1, 1, 1, 0, NULL));
    check(gpucore_random(b, GPUCORE_UNIFORM, -1, 1, 2, 0, NULL));
    check(gpucore_stream_synchronize(stream));
    static const char *names[] = {"new", "new+sync", "into", "into+sync", "into+gap"};
    printf("%-10s %10s %14s %14s   (us per op, median of %d x %d)\n", "case", "wall", "caller cpu", "process cpu",
           RUNS, iters);
    for (int kind = 0; kind < 5; kind++) {
        if (only >= 0 && kind != only) continue;
        double wall[RUNS], self[RUNS], proc[RUNS];
        for (int i = 0; i < iters / 10; i++) one(kind); /* warm-up */
        check(gpucore_stream_synchronize(stream));
        for (int r = 0; r < RUNS; r++) {
            double w0 = clock_us(CLOCK_MONOTONIC), t0 = clock_us(CLOCK_THREAD_CPUTIME_ID);
            double p0 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
            for (int i = 0; i < iters; i++) one(kind);
            check(gpucore_stream_synchronize(stream));
            const double gap = kind == 4 ? GAP_US : 0;
            wall[r] = (clock_us(CLOCK_MONOTONIC) - w0) / iters - gap;
            self[r] = (clock_us(CLOCK_THREAD_CPUTIME_ID) - t0) / iters - gap;
            proc[r] = (clock_us(CLOCK_PROCESS_CPUTIME_ID) - p0) / iters - gap;
        }
        qsort(wall, RUNS, sizeof wall[0], cmp_double);
        qsort(self, RUNS, sizeof self[0], cmp_double);
        qsort(proc, RUNS, sizeof proc[0], cmp_double);
        printf("%-10s %10.3f %14.3f %14.3f\n", names[kind], wall[RUNS / 2], self[RUNS / 2], proc[RUNS / 2]);
    }
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(out);
    gpucore_context_destroy(ctx);
    return 0;
}
