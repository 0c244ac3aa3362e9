/*
 * lsq_model.h — the least-squares problem test_ddp and test_zero train: sample i has
 * features feature(i, j) and target target(i); lsq_grad is the mean gradient of
 * (x·w - y)²/2 over samples [lo, hi), computed on the host in double and rounded to
 * float (the exact reference both tests compare the library against).
 */
#ifndef GPUCORE_TEST_LSQ_MODEL_H
#define GPUCORE_TEST_LSQ_MODEL_H

#include <stdint.h>
#include <stdlib.h>

static double feature(int i, int64_t j) { return (double)((i * 31 + j * 17) % 23 - 11) / 8.0; }
static double target(int i) { return (double)(i % 5) - 2.0; }

/* g[0..n) = mean gradient over samples [lo, hi) at w[0..n), times mult, rounded to float. */
static void lsq_grad(const float *w, int64_t n, int lo, int hi, double mult, float *g)
{
    double *acc = calloc((size_t)n, sizeof *acc);
    for (int i = lo; i < hi; i++) {
        double r = -target(i);
        for (int64_t j = 0; j < n; j++) r += feature(i, j) * w[j];
        for (int64_t j = 0; j < n; j++) acc[j] += r * feature(i, j);
    }
    for (int64_t j = 0; j < n; j++) g[j] = (float)(acc[j] / (hi - lo) * mult);
    free(acc);
}

#endif
