/*
 * bench_fma_peak.h — the CPU's measured f32 FMA peak that the benches set their
 * GEMM rates and MFU against (bench_matmul --gpt2, bench_lm): an FMA loop on every
 * online CPU, AVX-512 unless the CPU lacks it or GPUCORE_CPU_NO_AVX512 is set, else
 * AVX2, timed per CPU-second of the process (see measure_fma_peak).
 */
#ifndef GPUCORE_BENCH_FMA_PEAK_H
#define GPUCORE_BENCH_FMA_PEAK_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- f32 FMA peak: independent FMA chains per thread (16 in AVX-512's 32 registers, 12 in
 * AVX2's 16: enough to cover 2 pipes x 4+ cycles of latency, none spilled), one thread per core ---- */

enum { PEAK_ITERS = 4 << 20, PEAK_CHAINS = 16, PEAK_CHAINS_AVX2 = 12 };

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float peak_loop512(void)
{
    __m512 acc[PEAK_CHAINS];
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < PEAK_ITERS; i++)
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float peak_loop256(void)
{
    __m256 acc[PEAK_CHAINS_AVX2];
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < PEAK_CHAINS_AVX2; c++) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < PEAK_ITERS; i++)
        for (int c = 0; c < PEAK_CHAINS_AVX2; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS_AVX2; c++) s = _mm256_add_ps(s, acc[c]);
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[7];
}

/* the same chains with VDPBF16PS: acc += a.even*b.even + a.odd*b.odd per f32 lane (64 FLOP) */
__attribute__((target("avx512f,avx512bf16"))) static float peak_loop_bf16(void)
{
    __m512 acc[PEAK_CHAINS];
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < PEAK_ITERS; i++)
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}
#endif

static int peak_width; /* f32 lanes of the loop: 16 (AVX-512), 8 (AVX2), 0 none */
static volatile float peak_sink;

static void *peak_thread(void *arg)
{
#if defined(__x86_64__)
    peak_sink = arg ? peak_loop_bf16() : peak_width == 16 ? peak_loop512() : peak_loop256();
#else
    (void)arg;
#endif
    return NULL;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
static long online_cpus;

/* GFLOP/s of `flops_per_thread` worth of peak_thread(arg) on each of nt threads (best of 5). On a
 * machine other processes load, the wall rate falls with the share of the cores this process gets,
 * so the rate is taken per CPU-second of this process times the core count (the rate it would have
 * with the cores to itself); the GEMM cases are reported the same way beside their wall rate. */
static double measure_peak_loop(void *arg, double flops_per_thread, long nt)
{
    pthread_t th[256];
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cpu_s();
        long started = 0;
        for (long i = 0; i < nt; i++) started += pthread_create(&th[i], NULL, peak_thread, arg) == 0;
        for (long i = 0; i < started; i++) pthread_join(th[i], NULL);
        double dt = (cpu_s() - t0) / (double)nt;
        double flops = flops_per_thread * (double)started;
        if (dt > 0 && flops / dt / 1e9 > best) best = flops / dt / 1e9;
    }
    return best;
}

static long peak_threads(void)
{
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    return nt > 256 ? 256 : nt;
}

/* GFLOP/s of the f32 FMA loop on all online CPUs, 0 where it cannot run. */
static double measure_fma_peak(int *threads_out)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    const char *no512 = getenv("GPUCORE_CPU_NO_AVX512");
    if (__builtin_cpu_supports("avx512f") && !(no512 && *no512 && strcmp(no512, "0"))) peak_width = 16;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) peak_width = 8;
#endif
    const long nt = peak_threads();
    if (!peak_width || nt < 1) return 0;
    *threads_out = (int)nt;
    return measure_peak_loop(NULL, 2.0 * (peak_width == 16 ? PEAK_CHAINS : PEAK_CHAINS_AVX2) * peak_width * (double)PEAK_ITERS, nt);
}

/* GFLOP/s of the AVX512-BF16 dot-product loop on all online CPUs (a bf16 multiply and its add
 * counted as 2 FLOP, as the GEMMs count them), 0 where the CPU lacks AVX512-BF16 or
 * GPUCORE_CPU_NO_AVX512 is set. */
__attribute__((unused)) static double measure_bf16_peak(int *threads_out)
{
    const long nt = peak_threads();
#if defined(__x86_64__)
    __builtin_cpu_init();
    const char *no512 = getenv("GPUCORE_CPU_NO_AVX512");
    if (nt >= 1 && __builtin_cpu_supports("avx512bf16") && !(no512 && *no512 && strcmp(no512, "0"))) {
        *threads_out = (int)nt;
        return measure_peak_loop((void *)1, 2.0 * PEAK_CHAINS * 32 * (double)PEAK_ITERS, nt);
    }
#endif
    (void)threads_out;
    return 0;
}

#endif
