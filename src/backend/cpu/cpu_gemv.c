/*
 * cpu_gemv.c — the CPU backend's matrix-vector products: GEMMs whose D has at most
 * CPU_GEMV_MAX_N columns (the user's rows: a language model's decode step, x·Wᵀ for one
 * to four tokens) with the rows of op(A) (W, row-major [out, in]) and the columns of op(B)
 * (the tokens) contiguous along k. A GEMM library packs and blocks for reuse that such a
 * product does not have, and reads W at a fraction of the memory's speed; here every row of
 * W is streamed once, widened to f32 in registers (bf16: exact), multiplied with the n token
 * vectors (held in f32) with FMA in 16 (AVX-512) or 8 (AVX2) lanes, and the dot products
 * reduced and finished with the GEMM epilogue's formula (alpha, beta·C, bias, ReLU/GELU;
 * kernels/gemm_desc.h). Rows of W are split over the thread team (cpu_team.c) in blocks, and k in
 * chunks whose slice of the token vectors stays in L1 while a block's rows pass. f32
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
#define GEMV_PREFETCH_BYTES 4096      /* how far ahead each row stream is prefetched */
#define GEMV_GROUP 4                  /* rows of W streamed side by side (one or two tokens) */
#define GEMV_PARALLEL_ELEMENTS 32768  /* m·k from which the rows are split over the team */
#define GEMV_CHUNK_FLOATS 3072        /* floats of the token vectors per k chunk: 12 KiB */

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
/* dots[j] += Σ_{p0 <= p < p1} w[p]·x[j·k + p] for j < n: one row w (f32 or bf16) against the
 * f32 token vectors x [n][k] (k: the row stride of x here). LOADW2 gives the 2·LANES weights from p as two vectors: f32 in
 * order; bf16 from one load, the even-indexed ones widened by a shift and the odd ones by a mask
 * (no shuffle), so x holds each full block of 2·LANES bf16 positions as its even elements, then
 * its odd ones (pack_tokens). */
/* The lines GEMV_PREFETCH_BYTES ahead of a row's position p (one or two: what one iteration reads).
 * Rows stream side by side, so the hardware prefetchers alone leave too few misses in flight: the
 * SmolLM2-135M bf16 decode step went 24 -> 19 ms with it on a 2-core Xeon VM. */
#define GEMV_PREFETCH(wi, dt, p, LANES)                                                                              \
    do {                                                                                                             \
        const char *pf_ = (wi) + (p) * (dt == GPUCORE_KDT_F32 ? 4 : 2) + GEMV_PREFETCH_BYTES;                        \
        _mm_prefetch(pf_, _MM_HINT_T0);                                                                              \
        if (dt == GPUCORE_KDT_F32 && LANES == 16) _mm_prefetch(pf_ + 64, _MM_HINT_T0);                               \
    } while (0)

#define GEMV_ROW_BODY(NAME, ATTR, VEC, ZERO, FMA, LOADF, LOADW2, HSUM, LANES)                                         \
    ATTR static inline __attribute__((always_inline)) void NAME##_rn(const char *w, int64_t ldw, int dt,            \
                                                                     const float *x, int64_t k, int64_t p0,          \
                                                                     int64_t p1, int r, int n,                       \
                                                                     float (*dots)[CPU_GEMV_MAX_N])                  \
    {                                                                                                                \
        VEC acc[GEMV_GROUP][CPU_GEMV_MAX_N][2];                                                                      \
        for (int i = 0; i < r; i++)                                                                                  \
            for (int j = 0; j < n; j++) acc[i][j][0] = acc[i][j][1] = ZERO;                                          \
        int64_t p = p0;                                                                                              \
        for (; p + 2 * LANES <= p1; p += 2 * LANES) {                                                                \
            for (int i = 0; i < r; i++) {                                                                            \
                const char *wi = w + i * ldw;                                                                        \
                GEMV_PREFETCH(wi, dt, p, LANES);                                                                     \
                VEC w0, w1;                                                                                          \
                LOADW2(wi, dt, p, &w0, &w1);                                                                         \
                for (int j = 0; j < n; j++) {                                                                        \
                    acc[i][j][0] = FMA(w0, LOADF(x + j * k + p), acc[i][j][0]);                                      \
                    acc[i][j][1] = FMA(w1, LOADF(x + j * k + p + LANES), acc[i][j][1]);                              \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
        for (int i = 0; i < r; i++)                                                                                  \
            for (int j = 0; j < n; j++) {                                                                            \
                float s = HSUM(acc[i][j][0]) + HSUM(acc[i][j][1]);                                                   \
                for (int64_t q = p; q < p1; q++)                                                                     \
                    s += (dt == GPUCORE_KDT_F32 ? ((const float *)(w + i * ldw))[q]                                  \
                                                : gpucore_bf16_to_f32(((const uint16_t *)(w + i * ldw))[q])) *       \
                         x[j * k + q];                                                                               \
                dots[i][j] += s;                                                                                     \
            }                                                                                                        \
    }                                                                                                                \
    /* rows r and tokens n as constants in each case, so the accumulators stay in registers:                        \
     * GEMV_GROUP rows at once for one or two tokens, half as many for three or four */                              \
    ATTR static void NAME(const char *w, int64_t ldw, int dt, const float *x, int64_t k, int64_t p0, int64_t p1,     \
                          int r, int n, float (*dots)[CPU_GEMV_MAX_N])                                            \
    {                                                                                                                \
        if (r == 1) {                                                                                                \
            switch (n) {                                                                                             \
            case 1: NAME##_rn(w, ldw, dt, x, k, p0, p1, 1, 1, dots); break;                                      \
            case 2: NAME##_rn(w, ldw, dt, x, k, p0, p1, 1, 2, dots); break;                                      \
            case 3: NAME##_rn(w, ldw, dt, x, k, p0, p1, 1, 3, dots); break;                                      \
            default: NAME##_rn(w, ldw, dt, x, k, p0, p1, 1, 4, dots); break;                                     \
            }                                                                                                        \
            return;                                                                                                  \
        }                                                                                                            \
        switch (n) {                                                                                                 \
        case 1: NAME##_rn(w, ldw, dt, x, k, p0, p1, GEMV_GROUP, 1, dots); break;                                 \
        case 2: NAME##_rn(w, ldw, dt, x, k, p0, p1, GEMV_GROUP, 2, dots); break;                                 \
        case 3: NAME##_rn(w, ldw, dt, x, k, p0, p1, GEMV_GROUP / 2, 3, dots); break;                             \
        default: NAME##_rn(w, ldw, dt, x, k, p0, p1, GEMV_GROUP / 2, 4, dots); break;                            \
        }                                                                                                            \
    }

GEMV_AVX2 static inline void w8x2(const void *w, int dt, int64_t p, __m256 *w0, __m256 *w1)
{
    if (dt == GPUCORE_KDT_F32) {
        *w0 = _mm256_loadu_ps((const float *)w + p);
        *w1 = _mm256_loadu_ps((const float *)w + p + 8);
        return;
    }
    const __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + p));
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}
GEMV_AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
GEMV_AVX512 static inline void w16x2(const void *w, int dt, int64_t p, __m512 *w0, __m512 *w1)
{
    if (dt == GPUCORE_KDT_F32) {
        *w0 = _mm512_loadu_ps((const float *)w + p);
        *w1 = _mm512_loadu_ps((const float *)w + p + 16);
        return;
    }
    const __m512i v = _mm512_loadu_si512((const void *)((const uint16_t *)w + p));
    *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}
GEMV_AVX512 static inline float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

GEMV_ROW_BODY(row_dots_avx2, GEMV_AVX2, __m256, _mm256_setzero_ps(), _mm256_fmadd_ps, _mm256_loadu_ps, w8x2, hsum8, 8)
GEMV_ROW_BODY(row_dots_avx512, GEMV_AVX512, __m512, _mm512_setzero_ps(), _mm512_fmadd_ps, _mm512_loadu_ps, w16x2,
              hsum16, 16)

/* Token vector j of B (dtype dt, n of them) into x[j·k ..] in f32: bf16 with each full block of
 * `block` positions as its even elements, then its odd ones (the order LOADW2 widens bf16 in). */
static void pack_tokens(const gpucore_gemm_desc *g, int dt, int es, int64_t k, int64_t ldx, int n, int64_t block,
                        float *x)
{
    for (int j = 0; j < n; j++) {
        float *xj = x + j * ldx;
        cpu_vec_load(xj, (const char *)g->b.data + j * g->b.ld * es, dt, k);
        if (dt != GPUCORE_KDT_BF16) continue;
        float t[32];
        for (int64_t p = 0; p + block <= k; p += block) {
            for (int64_t q = 0; q < block / 2; q++) {
                t[q] = xj[p + 2 * q];
                t[block / 2 + q] = xj[p + 2 * q + 1];
            }
            memcpy(xj + p, t, sizeof(float) * (size_t)block);
        }
    }
}
#endif

#if GEMV_X86
/* One product's shared state, for the team's parts (blocks of GEMV_ROWS_PER_BLOCK rows each). */
typedef struct {
    const gpucore_gemm_desc *g;
    const float *x;
    int64_t ldx, chunk;
    int dt, es, n, wide, group, beta;
} gemv_job;

static void gemv_part(void *arg, int64_t b0, int64_t b1)
{
    const gemv_job *j = arg;
    const gpucore_gemm_desc *g = j->g;
    const int64_t m = g->m, k = g->k, es = j->es;
    const int n = j->n;
    for (int64_t blk = b0; blk < b1; blk++) {
        const int64_t i0 = blk * GEMV_ROWS_PER_BLOCK;
        const int64_t i1 = i0 + GEMV_ROWS_PER_BLOCK < m ? i0 + GEMV_ROWS_PER_BLOCK : m;
        float dots[GEMV_ROWS_PER_BLOCK][CPU_GEMV_MAX_N] = {{0}};
        /* k in chunks whose slice of the token vectors stays in L1 while the block's rows pass */
        for (int64_t p0 = 0; p0 < k; p0 += j->chunk) {
            const int64_t p1 = p0 + j->chunk < k ? p0 + j->chunk : k;
            for (int64_t i = i0; i < i1;) {
                const int r = i + j->group <= i1 ? j->group : 1;
                const char *w = (const char *)g->a.data + i * g->a.ld * es;
                if (j->wide) row_dots_avx512(w, g->a.ld * es, j->dt, j->x, j->ldx, p0, p1, r, n, dots + (i - i0));
                else row_dots_avx2(w, g->a.ld * es, j->dt, j->x, j->ldx, p0, p1, r, n, dots + (i - i0));
                i += r;
            }
        }
        for (int64_t i = i0; i < i1; i++) {
            const float bias = (g->epilogue & GPUCORE_GEMM_EPI_BIAS)
                                   ? gpucore_load_as_f32((const char *)g->bias + i * es, g->d_dtype) : 0.0f;
            for (int c = 0; c < n; c++) {
                float acc = g->alpha * dots[i - i0][c];
                if (j->beta) acc += g->beta * gpucore_load_as_f32((const char *)g->c + (i + c * g->ldc) * es, g->d_dtype);
                gpucore_store_from_f32((char *)g->d + (i + c * g->ldd) * es, g->d_dtype,
                                       gpucore_gemm_epilogue_value(g->epilogue, acc, bias, 0.0f, NULL));
            }
        }
    }
}
#endif

int cpu_gemv_dots_f32(const float *w, int64_t ldw, int64_t m, const float *x, int64_t ldx, int n, int64_t k,
                      float *out, int64_t ldo)
{
#if GEMV_X86
    if (!cpu_vec_have_avx2() || n < 1 || n > CPU_GEMV_MAX_N) return 0;
    const int wide = cpu_vec_have_avx512(), group = n <= 2 ? GEMV_GROUP : GEMV_GROUP / 2;
    for (int64_t i = 0; i < m;) {
        const int r = i + group <= m ? group : 1;
        float dots[GEMV_GROUP][CPU_GEMV_MAX_N] = {{0}};
        const char *wi = (const char *)(w + i * ldw);
        if (wide) row_dots_avx512(wi, ldw * 4, GPUCORE_KDT_F32, x, ldx, 0, k, r, n, dots);
        else row_dots_avx2(wi, ldw * 4, GPUCORE_KDT_F32, x, ldx, 0, k, r, n, dots);
        for (int q = 0; q < r; q++)
            for (int j = 0; j < n; j++) out[j * ldo + i + q] = dots[q][j];
        i += r;
    }
    return 1;
#else
    (void)w, (void)ldw, (void)m, (void)x, (void)ldx, (void)n, (void)k, (void)out, (void)ldo;
    return 0;
#endif
}

gpucore_status cpu_gemv_run(const gpucore_gemm_desc *g)
{
#if GEMV_X86
    const int64_t m = g->m, k = g->k;
    const int n = (int)g->n, dt = g->a.dtype, es = gpucore_gemm_dtype_size(dt);
    const int wide = cpu_vec_have_avx512();
    /* the token vectors in f32, [n][k] (bf16 widened exactly, in LOADW2's order) */
    const int64_t ldx = (k + 15) & ~(int64_t)15; /* rows on 64-byte lines: no vector load splits a line */
    float *x = NULL;
    if (posix_memalign((void **)&x, 64, sizeof(float) * (size_t)(n * ldx))) return GPUCORE_ERR_OUT_OF_MEMORY;
    pack_tokens(g, dt, es, k, ldx, n, wide ? 32 : 16, x);
    gemv_job j = {.g = g, .x = x, .ldx = ldx, .chunk = GEMV_CHUNK_FLOATS / n, /* a multiple of 32 for every n <= 4 */
                  .dt = dt, .es = es, .n = n,
                  .wide = wide, .group = n <= 2 ? GEMV_GROUP : GEMV_GROUP / 2, .beta = g->c && g->beta != 0.0f};
    /* blocks of rows over the thread team, each member streaming whole blocks */
    cpu_team_run(gemv_part, &j, (m + GEMV_ROWS_PER_BLOCK - 1) / GEMV_ROWS_PER_BLOCK, m * k >= GEMV_PARALLEL_ELEMENTS);
    free(x);
    return GPUCORE_OK;
#else
    (void)g;
    return GPUCORE_ERR_INTERNAL;
#endif
}
