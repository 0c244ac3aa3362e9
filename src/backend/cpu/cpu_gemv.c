/*
 * cpu_gemv.c — the CPU backend's matrix-vector products: GEMMs whose D has at most
 * CPU_GEMV_MAX_N columns (the user's rows: a language model's decode step, x·Wᵀ for one
 * to four tokens) with the rows of op(A) (W, row-major [out, in]) and the columns of op(B)
 * (the tokens) contiguous along k. A GEMM library packs and blocks for reuse that such a
 * product does not have, and reads W at a fraction of the memory's speed; here every row of
 * W is streamed once, widened to f32 in registers (bf16: exact), multiplied with the n token
 * vectors (held in f32) with FMA in 16 (AVX-512) or 8 (AVX2) lanes, and the dot products
 * reduced and finished with the GEMM epilogue's formula (alpha, beta·C, bias, ReLU/GELU;
 * kernels/gemm_desc.h). Rows of W are split over the OpenMP threads in blocks. f32
 * accumulation, as the other paths; without AVX2 the regular GEMM path runs.
 */
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_vec.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMV_X86 1
#define GEMV_AVX2 __attribute__((target("avx2,fma")))
#define GEMV_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))
#endif

#define CPU_GEMV_MAX_N 4
#define GEMV_ROWS_PER_BLOCK 32        /* rows of W per parallel chunk */
#define GEMV_PARALLEL_ELEMENTS 32768  /* m·k from which the rows are split over threads */

int cpu_gemv_takes(const gpucore_gemm_desc *g)
{
#if GEMV_X86
    const int dt = g->a.dtype;
    return g->n >= 1 && g->n <= CPU_GEMV_MAX_N && g->m >= 1 && g->k >= 1 && g->batch == 1 && g->a.trans == 1 &&
           g->b.trans == 0 && (dt == GPUCORE_KDT_F32 || dt == GPUCORE_KDT_BF16) && g->b.dtype == dt &&
           g->d_dtype == dt && !(g->epilogue & ~(uint32_t)(GPUCORE_GEMM_EPI_BIAS | GPUCORE_GEMM_EPI_RELU |
                                                        GPUCORE_GEMM_EPI_GELU)) &&
           cpu_vec_have_avx2();
#else
    (void)g;
    return 0;
#endif
}

#if GEMV_X86
/* dots[j] = Σ_p w[p]·x[j·k + p] for j < n, one row w of k elements (f32 or bf16), x f32. */
#define GEMV_ROW_BODY(NAME, ATTR, VEC, ZERO, FMA, LOADF, LOADW, HSUM, LANES)                                         \
    ATTR static void NAME(const void *w, int dt, const float *x, int64_t k, int n, float *dots)                       \
    {                                                                                                                \
        VEC acc[CPU_GEMV_MAX_N][2];                                                                                  \
        for (int j = 0; j < n; j++) acc[j][0] = acc[j][1] = ZERO;                                                    \
        int64_t p = 0;                                                                                               \
        for (; p + 2 * LANES <= k; p += 2 * LANES) {                                                                 \
            const VEC w0 = LOADW(w, dt, p), w1 = LOADW(w, dt, p + LANES);                                            \
            for (int j = 0; j < n; j++) {                                                                            \
                acc[j][0] = FMA(w0, LOADF(x + j * k + p), acc[j][0]);                                                \
                acc[j][1] = FMA(w1, LOADF(x + j * k + p + LANES), acc[j][1]);                                        \
            }                                                                                                        \
        }                                                                                                            \
        for (int j = 0; j < n; j++) {                                                                                \
            float s = HSUM(acc[j][0]) + HSUM(acc[j][1]);                                                             \
            for (int64_t q = p; q < k; q++)                                                                          \
                s += (dt == GPUCORE_KDT_F32 ? ((const float *)w)[q] : gpucore_bf16_to_f32(((const uint16_t *)w)[q])) * \
                     x[j * k + q];                                                                                   \
            dots[j] = s;                                                                                             \
        }                                                                                                            \
    }

GEMV_AVX2 static inline __m256 w8(const void *w, int dt, int64_t p)
{
    if (dt == GPUCORE_KDT_F32) return _mm256_loadu_ps((const float *)w + p);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
GEMV_AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
GEMV_AVX512 static inline __m512 w16(const void *w, int dt, int64_t p)
{
    if (dt == GPUCORE_KDT_F32) return _mm512_loadu_ps((const float *)w + p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
GEMV_AVX512 static inline float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

GEMV_ROW_BODY(row_dots_avx2, GEMV_AVX2, __m256, _mm256_setzero_ps(), _mm256_fmadd_ps, _mm256_loadu_ps, w8, hsum8, 8)
GEMV_ROW_BODY(row_dots_avx512, GEMV_AVX512, __m512, _mm512_setzero_ps(), _mm512_fmadd_ps, _mm512_loadu_ps, w16, hsum16,
              16)
#endif

gpucore_status cpu_gemv_run(const gpucore_gemm_desc *g)
{
#if GEMV_X86
    const int64_t m = g->m, k = g->k;
    const int n = (int)g->n, dt = g->a.dtype, es = gpucore_gemm_dtype_size(dt);
    /* the token vectors in f32, packed [n][k] (bf16 widened exactly) */
    float *x = malloc(sizeof(float) * (size_t)(n * k));
    if (!x) return GPUCORE_ERR_OUT_OF_MEMORY;
    for (int j = 0; j < n; j++) cpu_vec_load(x + j * k, (const char *)g->b.data + j * g->b.ld * es, dt, k);
    const int wide = cpu_vec_have_avx512();
    const int beta = g->c && g->beta != 0.0f;
    const int64_t blocks = (m + GEMV_ROWS_PER_BLOCK - 1) / GEMV_ROWS_PER_BLOCK;
    CPU_PARALLEL_FOR(m * k >= GEMV_PARALLEL_ELEMENTS && blocks > 1, blk, blocks, {
        const int64_t i1 = (blk + 1) * GEMV_ROWS_PER_BLOCK < m ? (blk + 1) * GEMV_ROWS_PER_BLOCK : m;
        for (int64_t i = blk * GEMV_ROWS_PER_BLOCK; i < i1; i++) {
            float dots[CPU_GEMV_MAX_N];
            const void *w = (const char *)g->a.data + i * g->a.ld * es;
            if (wide) row_dots_avx512(w, dt, x, k, n, dots);
            else row_dots_avx2(w, dt, x, k, n, dots);
            const float bias = (g->epilogue & GPUCORE_GEMM_EPI_BIAS)
                                   ? gpucore_load_as_f32((const char *)g->bias + i * es, g->d_dtype) : 0.0f;
            for (int j = 0; j < n; j++) {
                float acc = g->alpha * dots[j];
                if (beta) acc += g->beta * gpucore_load_as_f32((const char *)g->c + (i + j * g->ldc) * es, g->d_dtype);
                gpucore_store_from_f32((char *)g->d + (i + j * g->ldd) * es, g->d_dtype,
                                       gpucore_gemm_epilogue_value(g->epilogue, acc, bias, 0.0f, NULL));
            }
        }
    });
    free(x);
    return GPUCORE_OK;
#else
    (void)g;
    return GPUCORE_ERR_INTERNAL;
#endif
}
