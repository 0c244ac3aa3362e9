/*
 * mono_clock.h — the library's one monotonic clock (CLOCK_MONOTONIC), read in
 * nanoseconds for spins, deadlines and traces, or as milliseconds/seconds for
 * timings and timeouts. Header-only, so the backend modules share it too.
 */
#ifndef GPUCORE_MONO_CLOCK_H
#define GPUCORE_MONO_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gpucore_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double gpucore_clock_ms(void) { return (double)gpucore_clock_ns() * 1e-6; }
static inline double gpucore_clock_s(void) { return (double)gpucore_clock_ns() * 1e-9; }

#endif
