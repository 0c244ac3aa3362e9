/* rows_probe.c — row ops on ROWS x 1024 f32 through the C API.
 *   rows_probe soft|log ROWS      softmax / log_softmax, 10 batches back to back, best ns per element
 *   rows_probe maxsync ROWS GAP   a row max, synchronized, then GAP µs of caller work; best µs per
 *                                 op + synchronize, the gap left out
 * build: cc -O2 -Iinclude rows_probe.c -Lbuild-release/src -lgpucore */
#include "gpucore.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv)
{
    if (argc < 3) return 2;
    const int maxsync = !strcmp(argv[1], "maxsync"), lg = !strcmp(argv[1], "log");
    const int64_t rows = atoll(argv[2]);
    const double gap_us = argc > 3 ? atof(argv[3]) : 0;
    gpucore_context *ctx;
    if (gpucore_context_create("cpu", &ctx)) return 1;
    int64_t sh[2] = {rows, 1024};
    gpucore_tensor *x, *y;
    gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &x);
    gpucore_tensor_create(ctx, GPUCORE_F32, maxsync ? 1 : 2, sh, &y);
    gpucore_random(x, GPUCORE_UNIFORM, -1, 1, 1, 0, NULL);
    double best = 1e9;
    for (int rep = 0; rep < (maxsync ? 30 : 10); rep++) {
        const int n = maxsync ? 2000 : (int)(163840 / rows) + 1;
        double t0 = now(), tg = 0;
        for (int i = 0; i < n; i++) {
            if (!maxsync) { gpucore_softmax(y, x, lg, NULL); continue; }
            gpucore_reduce(GPUCORE_REDUCTION_MAX, y, x, 1, NULL);
            gpucore_context_synchronize(ctx);
            double a = now();
            while (now() - a < gap_us * 1e-6) {}
            tg += now() - a;
        }
        gpucore_context_synchronize(ctx);
        double t = (now() - t0 - tg) / n;
        t = maxsync ? t * 1e6 : t / (rows * 1024.0) * 1e9;
        if (t < best) best = t;
    }
    printf("%s rows %lld%s: best %.3f %s\n", argv[1], (long long)rows, maxsync ? " (gap excluded)" : "", best,
           maxsync ? "us per op + synchronize" : "ns per element");
    return 0;
}
