/*
 * cpu_philox.c — Philox4x32-10 blocks for the CPU backend, 8 counters at a time
 * in AVX2 registers where the CPU has it (kernels/philox.h's rounds, lane for
 * lane: integer arithmetic, so the same bits as gpucore_philox4x32_10 on every
 * CPU and on the GPU). Dropout draws a block per 4 elements from here.
 */
#include "gpucore_config.h"
#include "cpu_vec.h"
#include "philox.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))

/* hi and lo 32 bits of m * x in each of the 8 lanes (vpmuludq multiplies the even lanes; the
 * odd lanes are shifted down for a second multiply). */
AVX2 static inline void mulhilo8(__m256i m, __m256i x, __m256i *hi, __m256i *lo)
{
    const __m256i even = _mm256_mul_epu32(x, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/* Blocks for counters counter .. counter+7 (64-bit: the high words may differ across lanes). */
AVX2 static void philox8_avx2(uint64_t seed, uint64_t counter, uint32_t *out)
{
    uint32_t lo[8], hi[8];
    for (int b = 0; b < 8; b++) { lo[b] = (uint32_t)(counter + (uint64_t)b); hi[b] = (uint32_t)((counter + (uint64_t)b) >> 32); }
    __m256i c0 = _mm256_loadu_si256((const __m256i *)lo), c1 = _mm256_loadu_si256((const __m256i *)hi);
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    for (int round = 0; round < 10; round++) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo8(m0, c0, &hi0, &lo0);
        mulhilo8(m1, c2, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c1 = lo1;
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* block b's 4 words to out[4b .. 4b+3]: a 4 x 8 transpose through two unpack levels */
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i b0 = _mm256_unpacklo_epi64(t0, t2), b1 = _mm256_unpackhi_epi64(t0, t2); /* blocks 0,4 | 1,5 */
    const __m256i b2 = _mm256_unpacklo_epi64(t1, t3), b3 = _mm256_unpackhi_epi64(t1, t3); /* blocks 2,6 | 3,7 */
    _mm256_storeu_si256((__m256i *)out, _mm256_permute2x128_si256(b0, b1, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(b2, b3, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(b0, b1, 0x31));
    _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(b2, b3, 0x31));
}
#endif

void cpu_vec_philox(uint64_t seed, uint64_t counter, int64_t nblocks, uint32_t *out)
{
    int64_t b = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (cpu_vec_have_avx2())
        for (; b + 8 <= nblocks; b += 8) philox8_avx2(seed, counter + (uint64_t)b, out + 4 * b);
#endif
    for (; b < nblocks; b++) {
        const gpucore_philox_out r = gpucore_philox4x32_10(seed, counter + (uint64_t)b);
        for (int v = 0; v < 4; v++) out[4 * b + v] = r.v[v];
    }
}
