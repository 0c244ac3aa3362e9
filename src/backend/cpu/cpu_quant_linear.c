/*
 * cpu_quant_linear.c — the CPU backend's GEMM with a quantized weight (kernels/quant_matmul.h):
 * y = act(x·Wᵀ + bias) and dx = dy·W + beta·dx for W [N, K] in one of the quantized formats.
 * Every weight value is dequantized in f32 with kernels/quant_formats.h's arithmetic and rounded
 * to the activations' dtype; products accumulate in f32; each output is rounded once.
 *
 * Two paths, W never dequantized whole:
 *  - 1 to QMM_FUSED_ROWS rows (a decode step): W is read block by block; each row of W (forward)
 *    or each row's slice of a column chunk (backward) is decoded into an L1-resident f32 buffer
 *    and at once multiplied with the few activation rows (16 f32 lanes, no reassociation, so the
 *    AVX-512, AVX2 and portable bodies give the same bits); on AVX-512 the forward decodes NF4/FP4
 *    (rows starting at a block), Q4_0, Q4_1 and Q8_0 rows in registers instead, with the same products
 *    and sums. The thread team (cpu_team.c) over W's rows (forward), OpenMP over column chunks
 *    (backward, each output summed in row order whatever the thread count).
 *  - more rows: W dequantized a tile of rows at a time (all K columns; QMM_TILE_VALUES values)
 *    into a scratch of the GEMM's compute dtype (bf16 for bf16 activations where oneDNN's bf16
 *    product runs, else f32, exact for f16) and multiplied by the backend's GEMM (cpu_sgemm /
 *    cpu_matmul_dnnl_product; the tile's rows decoded in registers on AVX-512 for the formats the
 *    decode path takes there); the forward's epilogue is applied per tile, the backward's tiles
 *    accumulate in f32 and are rounded once at the end.
 */
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_vec.h"
#include "gpucore_config.h"
#include "activation_math.h"
#include "quant_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QMM_X86 1
#define QMM_AVX2 __attribute__((target("avx2,fma")))
#define QMM_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
#endif

#define QMM_FUSED_ROWS 4          /* activation rows up to which the fused path runs */
#define QMM_FUSED_CHUNK 32        /* forward: rows of W per parallel chunk */
#define QMM_COL_CHUNK 512         /* backward: columns of W per parallel chunk */
#define QMM_TILE_VALUES (1 << 19) /* values of W per dequantized tile (2 MiB of f32) */
#define QMM_PARALLEL_VALUES 32768 /* values of W from which the fused path is threaded */
#define QMM_LANES 16

typedef struct qmm_task_args {
    gpucore_qmm_args a;
    cpu_context *ctx;
} qmm_task_args;

static inline __attribute__((always_inline)) float round_to(float v, int dt)
{
    if (dt == GPUCORE_KDT_BF16) return gpucore_bf16_to_f32(gpucore_f32_to_bf16(v));
    if (dt == GPUCORE_KDT_F16) return gpucore_f16_to_f32(gpucore_f32_to_f16(v));
    return v;
}

/* One GGUF block's values (f32, quant_formats.h's arithmetic) with its scales read once. */
static inline __attribute__((always_inline)) void gguf_block(int fmt, const uint8_t *b, float *v)
{
    switch (fmt) {
    case GPUCORE_QF_Q4_0: {
        const float d = gpucore_q_f16_at(b);
        for (int j = 0; j < 16; j++) {
            v[j] = GPUCORE_QMUL(d, (float)((b[2 + j] & 0x0f) - 8));
            v[j + 16] = GPUCORE_QMUL(d, (float)((b[2 + j] >> 4) - 8));
        }
        return;
    }
    case GPUCORE_QF_Q4_1: {
        const float d = gpucore_q_f16_at(b), mn = gpucore_q_f16_at(b + 2);
        for (int j = 0; j < 16; j++) {
            v[j] = GPUCORE_QADD(GPUCORE_QMUL(d, (float)(b[4 + j] & 0x0f)), mn);
            v[j + 16] = GPUCORE_QADD(GPUCORE_QMUL(d, (float)(b[4 + j] >> 4)), mn);
        }
        return;
    }
    case GPUCORE_QF_Q8_0: {
        const float d = gpucore_q_f16_at(b);
        for (int j = 0; j < 32; j++) v[j] = GPUCORE_QMUL(d, (float)(int8_t)b[2 + j]);
        return;
    }
    default: {
        const int n = gpucore_gguf_block_elems(fmt);
        for (int j = 0; j < n; j++) v[j] = gpucore_gguf_dequant_one(fmt, b, j);
        return;
    }
    }
}

/* Values [lo, hi) of W (flat, row-major), each dequantized and rounded to dt, into out. */
static inline __attribute__((always_inline)) void decode_range(const gpucore_quant_layout *L, const uint8_t *w,
                                                               int64_t lo, int64_t hi, int dt, float *out)
{
    if (L->fmt == GPUCORE_QF_NF4 || L->fmt == GPUCORE_QF_FP4) {
        for (int64_t i = lo; i < hi;) {
            const int64_t blk = i / L->block, bend = (blk + 1) * L->block < hi ? (blk + 1) * L->block : hi;
            const float absmax = gpucore_q_f32_at(w + L->scale_off + 4 * blk);
            float lut[16];
            for (int k = 0; k < 16; k++) lut[k] = round_to(GPUCORE_QMUL(gpucore_q4_code(L->fmt, k), absmax), dt);
            if (i & 1) { out[i - lo] = lut[w[i / 2] & 0x0f]; i++; }
            for (; i + 1 < bend; i += 2) { /* the earlier value in the high nibble */
                const uint8_t byte = w[i / 2];
                out[i - lo] = lut[byte >> 4];
                out[i + 1 - lo] = lut[byte & 0x0f];
            }
            if (i < bend) { out[i - lo] = lut[w[i / 2] >> 4]; i++; }
        }
        return;
    }
    if (L->fmt == GPUCORE_QF_INT8_ROW) {
        for (int64_t i = lo; i < hi;) {
            const int64_t row = i / L->cols, rend = (row + 1) * L->cols < hi ? (row + 1) * L->cols : hi;
            const float scb = gpucore_q_f32_at(w + L->scale_off + 4 * row);
            for (; i < rend; i++) out[i - lo] = round_to(gpucore_q_int8_row_value((int8_t)w[i], scb), dt);
        }
        return;
    }
    const int be = (int)L->block, bb = gpucore_gguf_block_bytes(L->fmt);
    float v[256];
    for (int64_t i = lo; i < hi;) {
        const int64_t blk = i / be, off = i - blk * be;
        const int64_t take = (be - off) < (hi - i) ? (be - off) : (hi - i);
        gguf_block(L->fmt, w + blk * bb, v);
        for (int64_t j = 0; j < take; j++) out[i - lo + j] = round_to(v[off + j], dt);
        i += take;
    }
}

/* Σ_k w[k]·x[k] in 16 f32 lanes (lane l takes k % 16 == l), folded in a fixed tree, the tail in order. */
static inline __attribute__((always_inline)) float dot16(const float *w, const float *x, int64_t n)
{
    float acc[QMM_LANES] = {0};
    int64_t k = 0;
    for (; k + QMM_LANES <= n; k += QMM_LANES)
        for (int l = 0; l < QMM_LANES; l++) acc[l] += w[k + l] * x[k + l];
    for (int h = QMM_LANES / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) acc[l] += acc[l + h];
    float s = acc[0];
    for (; k < n; k++) s += w[k] * x[k];
    return s;
}

/* pre (n values of one output row, f32) + bias, the pre-activation into aux, act, rounded into y:
 * the epilogue formula of kernels/gemm_desc.h, GELU through the vector tanh as the GEMM's f32 path. */
static void epilogue_row(float *pre, int64_t n, int dt, const void *bias, int act, void *aux, void *y)
{
    const int es = gpucore_kdt_size(dt);
    if (bias)
        for (int64_t i = 0; i < n; i++) pre[i] += gpucore_load_as_f32((const char *)bias + i * es, dt);
    if (aux) cpu_vec_store(aux, dt, pre, n);
    if (act == GPUCORE_ACT_RELU)
        for (int64_t i = 0; i < n; i++) pre[i] = gpucore_relu(pre[i]);
    else if (act == GPUCORE_ACT_GELU_TANH)
        cpu_vec_gelu_tanh(pre, pre, n);
    cpu_vec_store(y, dt, pre, n);
}

/* ---- the fused path (1-4 rows) ---- */

/* Forward, rows [n0, n1) of W (at most QMM_FUSED_CHUNK): dots[j][r] = x_j · W[n0 + r]. */
#define QMM_FWD_BODY(NAME, ATTR)                                                                                    \
    ATTR static void NAME(const gpucore_qmm_args *a, const float *xf, int64_t n0, int64_t n1, float *wrow,       \
                          float (*dots)[QMM_FUSED_CHUNK])                                                          \
    {                                                                                                               \
        const int64_t K = a->L.cols;                                                                                \
        for (int64_t r = n0; r < n1; r++) {                                                                         \
            decode_range(&a->L, a->w, r * K, (r + 1) * K, a->dt, wrow);                                             \
            for (int j = 0; j < (int)a->m; j++) dots[j][r - n0] = dot16(wrow, xf + j * K, K);                       \
        }                                                                                                           \
    }
/* Backward, columns [k0, k1) of W: acc[j][c] = Σ_n dy[j][n] · W[n][k0 + c], n in order. */
#define QMM_BWD_BODY(NAME, ATTR)                                                                                    \
    ATTR static void NAME(const gpucore_qmm_args *a, const float *dyf, int64_t k0, int64_t k1, float *wseg,      \
                          float *acc)                                                                               \
    {                                                                                                               \
        const int64_t K = a->L.cols, N = a->L.rows, w = k1 - k0;                                                    \
        memset(acc, 0, sizeof(float) * (size_t)(a->m * w));                                                        \
        for (int64_t n = 0; n < N; n++) {                                                                           \
            decode_range(&a->L, a->w, n * K + k0, n * K + k1, a->dt, wseg);                                         \
            for (int j = 0; j < (int)a->m; j++) {                                                                   \
                const float s = dyf[j * N + n];                                                                     \
                float *o = acc + j * w;                                                                             \
                for (int64_t c = 0; c < w; c++) o[c] += s * wseg[c];                                                \
            }                                                                                                       \
        }                                                                                                           \
    }

QMM_FWD_BODY(fused_fwd_portable, )
QMM_BWD_BODY(fused_bwd_portable, )
#if QMM_X86
QMM_FWD_BODY(fused_fwd_avx2, QMM_AVX2)
QMM_BWD_BODY(fused_bwd_avx2, QMM_AVX2)
QMM_FWD_BODY(fused_fwd_avx512, QMM_AVX512)
QMM_BWD_BODY(fused_bwd_avx512, QMM_AVX512)
#endif

#if QMM_X86
/* The forward rows of NF4/FP4 (rows starting at a block boundary), Q4_0, Q4_1 and Q8_0 with AVX-512
 * intrinsics: 32 values of W decoded in registers (NF4/FP4 by a 16-entry permute of the block's
 * code book times absmax; Q4_0/Q4_1/Q8_0 widened, scaled and (Q4_1) offset), rounded to dt, multiplied and added into
 * 16 lanes in dot16's order (a product, then a sum: the same bits as the portable body). */
QMM_AVX512 static inline __m512 round_vec(__m512 v, int dt)
{
    if (dt == GPUCORE_KDT_F16) return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (dt != GPUCORE_KDT_BF16) return v;
    __m512i b = _mm512_castps_si512(v); /* round half to even to the top 16 bits (finite values) */
    b = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1))));
    return _mm512_castsi512_ps(_mm512_and_si512(b, _mm512_set1_epi32((int)0xffff0000u)));
}

static int vec_takes(const gpucore_qmm_args *a)
{
    const int f = a->L.fmt;
    return cpu_vec_have_avx512() && (f == GPUCORE_QF_Q4_0 || f == GPUCORE_QF_Q4_1 || f == GPUCORE_QF_Q8_0 ||
                                     ((f == GPUCORE_QF_NF4 || f == GPUCORE_QF_FP4) && a->L.cols % a->L.block == 0));
}

/* The AVX-512 register decode (vec_takes: NF4/FP4 rows starting at a block, Q4_0, Q4_1, Q8_0). */
/* Values k .. k + 31 of row r of W (vec_takes' formats, the format kind FK constant: 0 NF4/FP4, else
 * the GGUF format) as two vectors rounded to dt. lut: the row's 4-bit code book times its current
 * block's absmax, made where a block starts (NF4/FP4: byte i of a block holds values 2i in its high
 * nibble and 2i + 1 in its low one; Q4_0/Q4_1: value j the low nibble of byte j, j + 16 its high). */
#define QMM_FK_LUT (-1)
/* A block's f16 scale at p by the F16C conversion (one instruction; exact, as gpucore_q_f16_at), the
 * portable one for NaN and infinity, whose payload it keeps as the reference does. */
QMM_AVX512 static inline __attribute__((always_inline)) float vec_f16_at(const uint8_t *p)
{
    const uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    return (h & 0x7c00u) == 0x7c00u ? gpucore_f16_to_f32(h) : _cvtsh_ss(h);
}
QMM_AVX512 static inline __attribute__((always_inline)) void vec_dec32(const gpucore_qmm_args *a, int FK, int dt,
                                                                        int64_t K, int64_t r, int64_t k, __m512 *lut,
                                                                        __m512 *w0, __m512 *w1, __m128i nib,
                                                                        __m512 codes)
{
    const gpucore_quant_layout *L = &a->L;
    if (FK == QMM_FK_LUT) {
        const int64_t v = r * K + k; /* rows start at a block: v / block is the block */
        if (k % L->block == 0)
            *lut = round_vec(_mm512_mul_ps(codes, _mm512_set1_ps(gpucore_q_f32_at(a->w + L->scale_off + 4 * (v / L->block)))),
                             dt);
        const __m128i b = _mm_loadu_si128((const __m128i *)(a->w + v / 2));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib), lo = _mm_and_si128(b, nib);
        *w0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo)), *lut);
        *w1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(hi, lo)), *lut);
        return;
    }
    const uint8_t *b = a->w + (r * K + k) / 32 * gpucore_gguf_block_bytes(FK);
    const __m512 d = _mm512_set1_ps(vec_f16_at(b));
    __m512i q0, q1;
    if (FK == GPUCORE_QF_Q4_0) {
        const __m128i qs = _mm_loadu_si128((const __m128i *)(b + 2)), eight = _mm_set1_epi8(8);
        q0 = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(qs, nib), eight));
        q1 = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), nib), eight));
    } else if (FK == GPUCORE_QF_Q4_1) {
        const __m128i qs = _mm_loadu_si128((const __m128i *)(b + 4));
        q0 = _mm512_cvtepu8_epi32(_mm_and_si128(qs, nib));
        q1 = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(qs, 4), nib));
    } else {
        q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)));
        q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)));
    }
    __m512 v0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(q0)), v1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(q1));
    if (FK == GPUCORE_QF_Q4_1) {
        const __m512 mn = _mm512_set1_ps(vec_f16_at(b + 2));
        v0 = _mm512_add_ps(v0, mn);
        v1 = _mm512_add_ps(v1, mn);
    }
    *w0 = round_vec(v0, dt);
    *w1 = round_vec(v1, dt);
}

/* The 4-bit code book of NF4/FP4 in a vector (FK QMM_FK_LUT; zeros for the GGUF formats). */
QMM_AVX512 static inline __attribute__((always_inline)) __m512 q4_codes(const gpucore_qmm_args *a, int FK)
{
    float code[16];
    for (int q = 0; q < 16; q++) code[q] = FK == QMM_FK_LUT ? gpucore_q4_code(a->L.fmt, q) : 0.0f;
    return _mm512_loadu_ps(code);
}

/* Rows r .. r + RR - 1 of W side by side against the M activation rows (RR, M and FK constants): each
 * row's own sums in the order of one row alone (so the bits do not depend on RR), RR·M independent
 * add chains instead of M, which the f32 adds' latency bounded. */
QMM_AVX512 static inline __attribute__((always_inline)) void fused_rows_vec(const gpucore_qmm_args *a, int FK, int RR,
                                                                             int M, const float *xf, int64_t r,
                                                                             float *dots0, __m128i nib, __m512 codes)
{
    const int64_t K = a->L.cols;
    const int dt = a->dt;
    __m512 acc[4][QMM_FUSED_ROWS], lut[4];
    for (int i = 0; i < RR; i++) {
        lut[i] = _mm512_setzero_ps();
        for (int j = 0; j < M; j++) acc[i][j] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < K; k += 32)
        for (int i = 0; i < RR; i++) {
            __m512 w0, w1;
            vec_dec32(a, FK, dt, K, r + i, k, &lut[i], &w0, &w1, nib, codes);
            for (int j = 0; j < M; j++) {
                acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_mul_ps(w0, _mm512_loadu_ps(xf + j * K + k)));
                acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_mul_ps(w1, _mm512_loadu_ps(xf + j * K + k + 16)));
            }
        }
    for (int i = 0; i < RR; i++)
        for (int j = 0; j < M; j++) { /* dot16's fold */
            float t[QMM_LANES];
            _mm512_storeu_ps(t, acc[i][j]);
            for (int h = QMM_LANES / 2; h >= 1; h /= 2)
                for (int l = 0; l < h; l++) t[l] += t[l + h];
            dots0[j * QMM_FUSED_CHUNK + i] = t[0];
        }
}

/* Rows [n0, n1) of W, 4 side by side for 1 or 2 activation rows, 2 for 3 or 4 (the accumulators stay
 * in registers), for one format kind FK. */
QMM_AVX512 static inline __attribute__((always_inline)) void fused_fwd_vec_fk(const gpucore_qmm_args *a, int FK,
                                                                               const float *xf, int64_t n0,
                                                                               int64_t n1,
                                                                               float (*dots)[QMM_FUSED_CHUNK])
{
    const int m = (int)a->m;
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m512 codes = q4_codes(a, FK);
    const int group = m <= 2 ? 4 : 2;
    for (int64_t r = n0; r < n1;) {
        const int rr = r + group <= n1 ? group : 1;
        float *d = &dots[0][r - n0];
#define QMM_ROWS_CASE(RR)                                                                                   \
    switch (m) {                                                                                            \
    case 1: fused_rows_vec(a, FK, RR, 1, xf, r, d, nib, codes); break;                                     \
    case 2: fused_rows_vec(a, FK, RR, 2, xf, r, d, nib, codes); break;                                     \
    case 3: fused_rows_vec(a, FK, RR > 2 ? 2 : RR, 3, xf, r, d, nib, codes); break;                        \
    default: fused_rows_vec(a, FK, RR > 2 ? 2 : RR, 4, xf, r, d, nib, codes); break;                       \
    }
        if (rr == 1) { QMM_ROWS_CASE(1) }
        else if (group == 4) { QMM_ROWS_CASE(4) }
        else { QMM_ROWS_CASE(2) }
#undef QMM_ROWS_CASE
        r += rr;
    }
}

QMM_AVX512 static void fused_fwd_vec(const gpucore_qmm_args *a, const float *xf, int64_t n0, int64_t n1, float *wrow,
                                     float (*dots)[QMM_FUSED_CHUNK])
{
    (void)wrow;
    switch (a->L.fmt) {
    case GPUCORE_QF_Q4_0: fused_fwd_vec_fk(a, GPUCORE_QF_Q4_0, xf, n0, n1, dots); break;
    case GPUCORE_QF_Q4_1: fused_fwd_vec_fk(a, GPUCORE_QF_Q4_1, xf, n0, n1, dots); break;
    case GPUCORE_QF_Q8_0: fused_fwd_vec_fk(a, GPUCORE_QF_Q8_0, xf, n0, n1, dots); break;
    default: fused_fwd_vec_fk(a, QMM_FK_LUT, xf, n0, n1, dots); break; /* NF4, FP4 */
    }
}

/* Rows [r0, r1) of W (vec_takes' formats, kind FK) dequantized and rounded to dt into out [r1 - r0][K]. */
QMM_AVX512 static inline __attribute__((always_inline)) void vec_decode_rows_fk(const gpucore_qmm_args *a, int FK,
                                                                                 int64_t r0, int64_t r1, float *out)
{
    const int64_t K = a->L.cols;
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m512 codes = q4_codes(a, FK);
    for (int64_t r = r0; r < r1; r++) {
        float *o = out + (r - r0) * K;
        __m512 lut = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k += 32) {
            __m512 w0, w1;
            vec_dec32(a, FK, a->dt, K, r, k, &lut, &w0, &w1, nib, codes);
            _mm512_storeu_ps(o + k, w0);
            _mm512_storeu_ps(o + k + 16, w1);
        }
    }
}

QMM_AVX512 static void vec_decode_rows(const gpucore_qmm_args *a, int64_t r0, int64_t r1, float *out)
{
    switch (a->L.fmt) {
    case GPUCORE_QF_Q4_0: vec_decode_rows_fk(a, GPUCORE_QF_Q4_0, r0, r1, out); break;
    case GPUCORE_QF_Q4_1: vec_decode_rows_fk(a, GPUCORE_QF_Q4_1, r0, r1, out); break;
    case GPUCORE_QF_Q8_0: vec_decode_rows_fk(a, GPUCORE_QF_Q8_0, r0, r1, out); break;
    default: vec_decode_rows_fk(a, QMM_FK_LUT, r0, r1, out); break; /* NF4, FP4 */
    }
}
#endif

typedef void (*fused_fwd_fn)(const gpucore_qmm_args *, const float *, int64_t, int64_t, float *,
                             float (*)[QMM_FUSED_CHUNK]);
typedef void (*fused_bwd_fn)(const gpucore_qmm_args *, const float *, int64_t, int64_t, float *, float *);

static void pick_fused(fused_fwd_fn *fwd, fused_bwd_fn *bwd)
{
    *fwd = fused_fwd_portable;
    *bwd = fused_bwd_portable;
#if QMM_X86
    if (cpu_vec_have_avx512()) { *fwd = fused_fwd_avx512; *bwd = fused_bwd_avx512; }
    else if (cpu_vec_have_avx2()) { *fwd = fused_fwd_avx2; *bwd = fused_bwd_avx2; }
#endif
}

/* rows x cols of dtype dt (row stride ld) widened to a dense f32 [rows][cols]; NULL when out of memory. */
static float *widen_rows(const void *src, int dt, int64_t rows, int64_t cols, int64_t ld)
{
    float *f = malloc(sizeof(float) * (size_t)(rows * cols > 0 ? rows * cols : 1));
    if (!f) return NULL;
    const int es = gpucore_kdt_size(dt);
    for (int64_t r = 0; r < rows; r++) cpu_vec_load(f + r * cols, (const char *)src + r * ld * es, dt, cols);
    return f;
}

/* One fused forward's shared state, for the thread team's parts (whole chunks of QMM_FUSED_CHUNK rows). */
typedef struct {
    const gpucore_qmm_args *a;
    const float *xf;
    fused_fwd_fn fwd;
    int row_buffer; /* fwd decodes a row into an f32 buffer (the register decode needs none) */
    int failed;     /* atomic */
} qfwd_job;

static void qfwd_part(void *arg, int64_t c0, int64_t c1)
{
    qfwd_job *j = arg;
    const gpucore_qmm_args *a = j->a;
    const int64_t N = a->L.rows, K = a->L.cols;
    const int es = gpucore_kdt_size(a->dt);
    float *wrow = j->row_buffer ? malloc(sizeof(float) * (size_t)(K > 0 ? K : 1)) : NULL;
    if (j->row_buffer && !wrow) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float dots[QMM_FUSED_ROWS][QMM_FUSED_CHUNK];
    for (int64_t c = c0; c < c1; c++) {
        const int64_t n0 = c * QMM_FUSED_CHUNK, n1 = n0 + QMM_FUSED_CHUNK < N ? n0 + QMM_FUSED_CHUNK : N;
        j->fwd(a, j->xf, n0, n1, wrow, dots);
        for (int r = 0; r < (int)a->m; r++)
            epilogue_row(dots[r], n1 - n0, a->dt, a->bias ? (const char *)a->bias + n0 * es : NULL, a->act,
                         a->aux ? (char *)a->aux + (r * a->ldaux + n0) * es : NULL, (char *)a->y + (r * a->ldy + n0) * es);
    }
    free(wrow);
}

static gpucore_status fused_forward(const gpucore_qmm_args *a)
{
    const int64_t N = a->L.rows, K = a->L.cols, chunks = (N + QMM_FUSED_CHUNK - 1) / QMM_FUSED_CHUNK;
    float *xf = widen_rows(a->x, a->dt, a->m, K, a->ldx);
    if (!xf) return GPUCORE_ERR_OUT_OF_MEMORY;
    fused_bwd_fn bwd;
    qfwd_job j = {.a = a, .xf = xf, .row_buffer = 1};
    pick_fused(&j.fwd, &bwd);
#if QMM_X86
    if (vec_takes(a)) j.fwd = fused_fwd_vec, j.row_buffer = 0;
#endif
    /* the rows over the thread team (cpu_team.c: a decode step's products come back to back) */
    cpu_team_run(qfwd_part, &j, chunks, N * K > QMM_PARALLEL_VALUES);
    free(xf);
    return j.failed ? GPUCORE_ERR_OUT_OF_MEMORY : GPUCORE_OK;
}

static void finish_grad_row(float *acc, int64_t n, int dt, float beta, void *out)
{
    if (beta != 0.0f) {
        const int es = gpucore_kdt_size(dt);
        for (int64_t i = 0; i < n; i++) acc[i] += beta * gpucore_load_as_f32((const char *)out + i * es, dt);
    }
    cpu_vec_store(out, dt, acc, n);
}

static gpucore_status fused_backward(const gpucore_qmm_args *a)
{
    const int64_t N = a->L.rows, K = a->L.cols, chunks = (K + QMM_COL_CHUNK - 1) / QMM_COL_CHUNK;
    const int es = gpucore_kdt_size(a->dt);
    float *dyf = widen_rows(a->x, a->dt, a->m, N, a->ldx);
    if (!dyf) return GPUCORE_ERR_OUT_OF_MEMORY;
    fused_fwd_fn fwd;
    fused_bwd_fn bwd;
    pick_fused(&fwd, &bwd);
    int failed = 0;
#pragma omp parallel if (N * K > QMM_PARALLEL_VALUES && chunks > 1) reduction(| : failed)
    {
        float *buf = malloc(sizeof(float) * (size_t)(QMM_COL_CHUNK * (1 + QMM_FUSED_ROWS)));
        failed |= !buf;
#pragma omp for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            if (!buf) continue;
            const int64_t k0 = c * QMM_COL_CHUNK, k1 = k0 + QMM_COL_CHUNK < K ? k0 + QMM_COL_CHUNK : K;
            float *acc = buf + QMM_COL_CHUNK;
            bwd(a, dyf, k0, k1, buf, acc);
            for (int j = 0; j < (int)a->m; j++)
                finish_grad_row(acc + j * (k1 - k0), k1 - k0, a->dt, a->beta, (char *)a->y + (j * a->ldy + k0) * es);
        }
        free(buf);
    }
    free(dyf);
    return failed ? GPUCORE_ERR_OUT_OF_MEMORY : GPUCORE_OK;
}

/* ---- the tiled path (5 rows and more) ---- */

/* Rows [n0, n0 + nt) of W, all K columns, dequantized (rounded to dt) into tile [nt][K] f32, and
 * into tile16 as bf16 when not NULL. Threaded over rows where oneDNN (not OpenBLAS's own threads)
 * runs the GEMMs. */
static void decode_tile(const gpucore_qmm_args *a, int64_t n0, int64_t nt, float *tile, uint16_t *tile16, int threaded)
{
    const int64_t K = a->L.cols;
#if QMM_X86
    const int vec = vec_takes(a);
#else
    const int vec = 0;
#endif
    CPU_PARALLEL_FOR(threaded && nt * K > QMM_PARALLEL_VALUES, r, nt,
        if (vec) vec_decode_rows(a, n0 + r, n0 + r + 1, tile + r * K);
        else decode_range(&a->L, a->w, (n0 + r) * K, (n0 + r + 1) * K, a->dt, tile + r * K);
        if (tile16) cpu_vec_store(tile16 + r * K, GPUCORE_KDT_BF16, tile + r * K, K););
}

static gpucore_status tiled(cpu_context *ctx, const gpucore_qmm_args *a)
{
    const int64_t N = a->L.rows, K = a->L.cols, m = a->m;
    const int es = gpucore_kdt_size(a->dt), bwd = a->transpose;
    int64_t tn = K > 0 ? QMM_TILE_VALUES / K : N;
    tn = tn < 16 ? 16 : tn > 256 ? 256 : tn & ~(int64_t)15;
    if (tn > N) tn = N;
    /* bf16 activations: oneDNN's bf16 product on a bf16 tile (it needs AVX2, see cpu_matmul.c), else f32 */
    int use16 = a->dt == GPUCORE_KDT_BF16 && cpu_vec_have_avx2();
    const int threaded = !GPUCORE_HAVE_OPENBLAS || use16 || cpu_gemm_engine_dnnl(m, tn, K, 1);
    const int64_t in_cols = bwd ? N : K;
    float *tile = malloc(sizeof(float) * (size_t)(tn * K > 0 ? tn * K : 1));
    uint16_t *tile16 = use16 ? malloc(sizeof(uint16_t) * (size_t)(tn * K > 0 ? tn * K : 1)) : NULL;
    /* forward: T [m][tn] per tile; backward: acc [m][K] over every tile, T [m][K] the bf16 product */
    float *T = malloc(sizeof(float) * (size_t)(m * (bwd ? K : tn) > 0 ? m * (bwd ? K : tn) : 1));
    float *acc = bwd ? calloc((size_t)(m * K > 0 ? m * K : 1), sizeof(float)) : NULL;
    float *xf = NULL; /* the activations widened to f32 (f16, or bf16 where oneDNN declined) */
    gpucore_status st = GPUCORE_OK;
    if (!tile || (use16 && !tile16) || !T || (bwd && !acc)) { st = GPUCORE_ERR_OUT_OF_MEMORY; goto out; }
    if (a->dt != GPUCORE_KDT_F32 && !use16 && !(xf = widen_rows(a->x, a->dt, m, in_cols, a->ldx))) {
        st = GPUCORE_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (int64_t n0 = 0; n0 < N; n0 += tn) {
        const int64_t nt = n0 + tn < N ? tn : N - n0;
        decode_tile(a, n0, nt, tile, use16 ? tile16 : NULL, threaded);
        int done = 0;
        if (use16) {
            const uint16_t *x16 = (const uint16_t *)a->x;
            /* column-major T = op(A)·op(B): forward [nt x m] = tileᵀ(stored [K x nt])ᵀ · xᵀ, i.e. T[r][n];
             * backward [K x m] = tile (stored [K x nt] column-major) · dy[:, n0:n0+nt]ᵀ, i.e. T[r][k] */
            done = bwd ? cpu_matmul_dnnl_product(ctx, GPUCORE_KDT_BF16, K, m, nt, tile16, K, 0, x16 + n0, a->ldx, 0, T)
                       : cpu_matmul_dnnl_product(ctx, GPUCORE_KDT_BF16, nt, m, K, tile16, K, 1, x16, a->ldx, 0, T);
            if (done && bwd) cpu_vec_add_into(acc, T, m * K);
            if (!done) { /* oneDNN declined: f32 from here on */
                use16 = 0;
                if (!(xf = widen_rows(a->x, a->dt, m, in_cols, a->ldx))) { st = GPUCORE_ERR_OUT_OF_MEMORY; goto out; }
            }
        }
        if (!done) {
            const float *X = xf ? xf : (const float *)a->x;
            const int64_t ldX = xf ? in_cols : a->ldx;
            st = bwd ? cpu_sgemm(0, 0, m, K, nt, 1.0f, X + n0, ldX, tile, K, 1.0f, acc, K)
                     : cpu_sgemm(0, 1, m, nt, K, 1.0f, X, ldX, tile, K, 0.0f, T, nt);
            if (st) goto out;
        }
        if (!bwd)
            CPU_PARALLEL_FOR(threaded && m * nt > QMM_PARALLEL_VALUES, r, m,
                epilogue_row(T + r * nt, nt, a->dt, a->bias ? (const char *)a->bias + n0 * es : NULL, a->act,
                             a->aux ? (char *)a->aux + (r * a->ldaux + n0) * es : NULL,
                             (char *)a->y + (r * a->ldy + n0) * es););
    }
    if (bwd)
        CPU_PARALLEL_FOR(threaded && m * K > QMM_PARALLEL_VALUES, r, m,
            finish_grad_row(acc + r * K, K, a->dt, a->beta, (char *)a->y + r * a->ldy * es););
out:
    free(tile);
    free(tile16);
    free(T);
    free(acc);
    free(xf);
    return st;
}

static gpucore_status qmm_task(void *p)
{
    qmm_task_args *t = p;
    const gpucore_qmm_args *a = &t->a;
    if (a->L.cols == 0 || a->L.rows == 0) { /* an empty sum: y = act(bias), dx = beta·dx */
        const int64_t n = a->transpose ? a->L.cols : a->L.rows;
        float *z = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
        if (!z) return GPUCORE_ERR_OUT_OF_MEMORY;
        const int es = gpucore_kdt_size(a->dt);
        for (int64_t r = 0; r < a->m && n > 0; r++) {
            memset(z, 0, sizeof(float) * (size_t)n);
            if (a->transpose) finish_grad_row(z, n, a->dt, a->beta, (char *)a->y + r * a->ldy * es);
            else
                epilogue_row(z, n, a->dt, a->bias, a->act, a->aux ? (char *)a->aux + r * a->ldaux * es : NULL,
                             (char *)a->y + r * a->ldy * es);
        }
        free(z);
        return GPUCORE_OK;
    }
    if (a->m <= QMM_FUSED_ROWS) return a->transpose ? fused_backward(a) : fused_forward(a);
    return tiled(t->ctx, a);
}

gpucore_status cpu_quant_matmul(void *bctx, const gpucore_qmm_args *args, void *s)
{
    qmm_task_args t = {*args, bctx};
    return cpu_stream_enqueue(s, qmm_task, &t, sizeof t);
}
