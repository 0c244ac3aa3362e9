/*
 * bench_read_bw.h — the memory read bandwidth this machine gives a streaming reader: every
 * thread (OMP_NUM_THREADS, else the online CPUs) sums its slice of a buffer several times
 * larger than any last-level cache, best of a few passes. A decode step that streams the
 * weights once per token is held against it (bench_generate).
 */
#ifndef BENCH_READ_BW_H
#define BENCH_READ_BW_H
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench_time.h"

enum { READ_BW_MAX_THREADS = 256, READ_BW_PASSES = 5 };

typedef struct { const uint64_t *p; size_t n; uint64_t sum; } read_bw_slice;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* the widest loads the CPU has: a scalar loop reads a third less on an AVX-512 Xeon */
__attribute__((target("avx512f"))) static uint64_t read_bw_sum512(const uint64_t *p, size_t n)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 8)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 16)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 24)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}
__attribute__((target("avx2"))) static uint64_t read_bw_sum256(const uint64_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    return t[0] + t[1] + t[2] + t[3];
}
#endif

static void *read_bw_worker(void *arg)
{
    read_bw_slice *s = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f")) { s->sum = read_bw_sum512(s->p, s->n); return NULL; }
    if (__builtin_cpu_supports("avx2")) { s->sum = read_bw_sum256(s->p, s->n); return NULL; }
#endif
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i + 8 <= s->n; i += 8) {
        a0 += s->p[i]; a1 += s->p[i + 1]; a2 += s->p[i + 2]; a3 += s->p[i + 3];
        a4 += s->p[i + 4]; a5 += s->p[i + 5]; a6 += s->p[i + 6]; a7 += s->p[i + 7];
    }
    s->sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    return NULL;
}

/* GB/s (1e9 bytes) read from a bytes-long buffer by threads threads (0: as above); < 0 on failure. */
static double read_bandwidth_gbs(size_t bytes, int threads)
{
    if (threads <= 0) {
        const char *e = getenv("OMP_NUM_THREADS");
        threads = e && atoi(e) > 0 ? atoi(e) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (threads < 1) threads = 1;
    if (threads > READ_BW_MAX_THREADS) threads = READ_BW_MAX_THREADS;
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 64, bytes)) return -1.0;
    memset(buf, 1, bytes); /* every page present before the timing */
    const size_t n = bytes / sizeof *buf, per = n / (size_t)threads / 32 * 32; /* 256-byte slices */
    double best = 1e30;
    uint64_t check = 0;
    for (int pass = 0; pass < READ_BW_PASSES; pass++) {
        pthread_t th[READ_BW_MAX_THREADS];
        read_bw_slice sl[READ_BW_MAX_THREADS];
        const double t0 = now_ms();
        int t = 0;
        for (; t < threads; t++) {
            sl[t] = (read_bw_slice){buf + (size_t)t * per, per, 0};
            if (t > 0 && pthread_create(&th[t], NULL, read_bw_worker, &sl[t]) != 0) break;
        }
        const int started = t;
        read_bw_worker(&sl[0]);
        for (t = 1; t < started; t++) pthread_join(th[t], NULL);
        const double ms = now_ms() - t0;
        if (started < threads) { free(buf); return -1.0; }
        for (t = 0; t < threads; t++) check += sl[t].sum;
        if (ms < best) best = ms;
    }
    free(buf);
    if (check == 42) return -1.0; /* keeps the sums alive */
    return (double)(per * (size_t)threads * sizeof *buf) / (best * 1e-3) / 1e9;
}
#endif
