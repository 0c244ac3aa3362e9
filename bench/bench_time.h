/*
 * bench_time.h — the wall clock and the median ordering the benches share
 * (bench_zero, bench_pipeline): now_ms() on CLOCK_MONOTONIC, cmp_double for qsort.
 */
#ifndef GPUCORE_BENCH_TIME_H
#define GPUCORE_BENCH_TIME_H

#include <time.h>

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
