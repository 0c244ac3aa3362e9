/*
 * quant_formats.h — the quantized weight formats, one block at a time: their byte layouts,
 * code books and the quantize / dequantize arithmetic, shared by the CPU backend, the
 * host-side helpers of src/ops/quant.c, the CUDA kernels and the tests, so every place
 * computes the same bits.
 *
 * GGUF blocks (llama.cpp's ggml), every multi-byte field little-endian:
 *   Q4_0  32 values, 18 bytes: f16 d, 16 bytes of nibbles; value j is the low nibble of
 *         byte j (j < 16) or the high nibble of byte j-16; x = d * (q - 8).
 *   Q4_1  32 values, 20 bytes: f16 d, f16 m, 16 bytes of nibbles as Q4_0; x = d * q + m.
 *   Q5_0  32 values, 22 bytes: f16 d, u32 qh (bit j = fifth bit of value j), nibbles as
 *         Q4_0; x = d * (q - 16).
 *   Q5_1  32 values, 24 bytes: f16 d, f16 m, u32 qh, nibbles; x = d * q + m.
 *   Q8_0  32 values, 34 bytes: f16 d, 32 int8; x = d * q.
 *   Q4_K  256 values, 144 bytes: f16 d, f16 dmin, 12 bytes of eight 6-bit scales and mins,
 *         128 bytes of nibbles: 64 values per 32 bytes (low nibbles the first 32, high the
 *         next 32); x = (d * sc) * q - (dmin * m) per sub-block of 32.
 *   Q5_K  256 values, 176 bytes: as Q4_K with 32 bytes of fifth bits (bit i of byte l is
 *         the fifth bit of value l of sub-block i) between the scales and the nibbles.
 *   Q6_K  256 values, 210 bytes: 128 bytes of low nibbles, 64 bytes of high bit pairs,
 *         16 int8 scales (one per 16 values), f16 d; x = (d * sc) * (q - 32).
 * Quantizing follows ggml's reference C functions (quantize_row_*_ref), which the gguf
 * package's numpy code mirrors: f32 arithmetic, scales rounded to f16 after use.
 *
 * bitsandbytes 4-bit (NF4, FP4): the tensor flattened, blocks of a power of two from 32 to
 * 4096 values (the last may be partial), an f32 absmax per block; each value is scaled by
 * (1 / absmax) in f32, clamped to [-1, 1] and given the index of the nearest code book entry
 * (the lowest index on a tie); two indices per byte, the earlier value in the high nibble.
 * x = code[q] * absmax.
 * bitsandbytes 8-bit rows (Int8Params): SCB = the row's absmax (f32), q = round half even
 * of x * (127 / SCB) in f32 (0 in a row of zeros); x = (q * SCB) * (1/127 as f32).
 *
 * Every function is arithmetic on one block with no state; none checks its arguments
 * (src/ops/quant.c does). Products whose rounding the references take separately are
 * written so no compiler fuses them into one fused multiply-add (GPUCORE_QMUL/QADD).
 */
#ifndef GPUCORE_KERNELS_QUANT_FORMATS_H
#define GPUCORE_KERNELS_QUANT_FORMATS_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "numeric.h"

/* Format codes: gpucore_quant_format's values (src/ops/quant.c asserts they agree). */
enum {
    GPUCORE_QF_NF4 = 0, GPUCORE_QF_FP4 = 1, GPUCORE_QF_INT8_ROW = 2,
    GPUCORE_QF_Q4_0 = 3, GPUCORE_QF_Q4_1 = 4, GPUCORE_QF_Q5_0 = 5, GPUCORE_QF_Q5_1 = 6,
    GPUCORE_QF_Q8_0 = 7, GPUCORE_QF_Q4_K = 8, GPUCORE_QF_Q5_K = 9, GPUCORE_QF_Q6_K = 10,
    GPUCORE_QF_COUNT = 11
};

#if defined(__CUDA_ARCH__)
#define GPUCORE_QMUL(a, b) __fmul_rn((a), (b))
#define GPUCORE_QADD(a, b) __fadd_rn((a), (b))
#else
/* Host C is compiled in ISO mode (no contraction across a separately rounded product); the
 * volatile-free form below keeps clang from contracting too. */
GPUCORE_HD float gpucore_qmul_host(float a, float b) { float p = a * b; return p; }
#define GPUCORE_QMUL(a, b) gpucore_qmul_host((a), (b))
#define GPUCORE_QADD(a, b) ((a) + (b))
#endif

/* bitsandbytes' 4-bit code books (functional.get_4bit_type): NF4's sixteen normal-quantile
 * values, as f32; FP4's {0, 0.0625, 8, 12, 4, 6, 2, 3} and their negatives divided by 12 in
 * f32 (index bit 3 is the sign). */
GPUCORE_HD float gpucore_q4_code(int fmt, int idx)
{
    const float nf4[16] = {
        -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
        -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
        0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
        0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
    const float fp4_mag[8] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f};
    if (fmt == GPUCORE_QF_NF4) return nf4[idx & 15];
    float v = fp4_mag[idx & 7] / 12.0f;
    return (idx & 8) ? -v : v;
}

/* The index of the code book entry nearest to s (|s - code| in f32; the lowest index on a
 * tie, as argmin). */
GPUCORE_HD int gpucore_q4_nearest(int fmt, float s)
{
    int best = 0;
    float best_d = fabsf(s - gpucore_q4_code(fmt, 0));
    for (int k = 1; k < 16; k++) {
        float d = fabsf(s - gpucore_q4_code(fmt, k));
        if (d < best_d) { best_d = d; best = k; }
    }
    return best;
}

/* An int8 row value: (q * SCB) * (1/127 rounded to f32), bitsandbytes' int8_vectorwise_dequant. */
GPUCORE_HD float gpucore_q_int8_row_value(int8_t q, float scb)
{
    return GPUCORE_QMUL(GPUCORE_QMUL((float)q, scb), 7.874015718698502e-3f);
}

/* Values per block and bytes per block of the GGUF formats (0 for the others). */
GPUCORE_HD int gpucore_gguf_block_elems(int fmt)
{
    switch (fmt) {
    case GPUCORE_QF_Q4_0: case GPUCORE_QF_Q4_1: case GPUCORE_QF_Q5_0: case GPUCORE_QF_Q5_1:
    case GPUCORE_QF_Q8_0: return 32;
    case GPUCORE_QF_Q4_K: case GPUCORE_QF_Q5_K: case GPUCORE_QF_Q6_K: return 256;
    default: return 0;
    }
}

GPUCORE_HD int gpucore_gguf_block_bytes(int fmt)
{
    switch (fmt) {
    case GPUCORE_QF_Q4_0: return 18;
    case GPUCORE_QF_Q4_1: return 20;
    case GPUCORE_QF_Q5_0: return 22;
    case GPUCORE_QF_Q5_1: return 24;
    case GPUCORE_QF_Q8_0: return 34;
    case GPUCORE_QF_Q4_K: return 144;
    case GPUCORE_QF_Q5_K: return 176;
    case GPUCORE_QF_Q6_K: return 210;
    default: return 0;
    }
}

GPUCORE_HD float gpucore_q_f16_at(const uint8_t *p) { return gpucore_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
GPUCORE_HD void gpucore_q_put_f16(uint8_t *p, float v)
{
    uint16_t h = gpucore_f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}
GPUCORE_HD uint32_t gpucore_q_u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 scale bytes: the first
 * four sub-blocks hold 6 bits in bytes j and j+4; the last four take their low 4 bits from
 * byte j+4 (scale low nibble, min high nibble) and their top 2 bits from the top bits of
 * bytes j-4 (scale) and j (min). */
GPUCORE_HD void gpucore_q_k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Value i (0..block-1) of one GGUF block. Every format's value needs only its own block. */
GPUCORE_HD float gpucore_gguf_dequant_one(int fmt, const uint8_t *b, int i)
{
    switch (fmt) {
    case GPUCORE_QF_Q4_0: {
        int q = i < 16 ? (b[2 + i] & 0x0f) : (b[2 + i - 16] >> 4);
        return GPUCORE_QMUL(gpucore_q_f16_at(b), (float)(q - 8));
    }
    case GPUCORE_QF_Q4_1: {
        int q = i < 16 ? (b[4 + i] & 0x0f) : (b[4 + i - 16] >> 4);
        return GPUCORE_QADD(GPUCORE_QMUL(gpucore_q_f16_at(b), (float)q), gpucore_q_f16_at(b + 2));
    }
    case GPUCORE_QF_Q5_0: {
        uint32_t qh = gpucore_q_u32_at(b + 2);
        int q = (i < 16 ? (b[6 + i] & 0x0f) : (b[6 + i - 16] >> 4)) | (int)(((qh >> i) & 1u) << 4);
        return GPUCORE_QMUL(gpucore_q_f16_at(b), (float)(q - 16));
    }
    case GPUCORE_QF_Q5_1: {
        uint32_t qh = gpucore_q_u32_at(b + 4);
        int q = (i < 16 ? (b[8 + i] & 0x0f) : (b[8 + i - 16] >> 4)) | (int)(((qh >> i) & 1u) << 4);
        return GPUCORE_QADD(GPUCORE_QMUL(gpucore_q_f16_at(b), (float)q), gpucore_q_f16_at(b + 2));
    }
    case GPUCORE_QF_Q8_0:
        return GPUCORE_QMUL(gpucore_q_f16_at(b), (float)(int8_t)b[2 + i]);
    case GPUCORE_QF_Q4_K:
    case GPUCORE_QF_Q5_K: {
        int sub = i / 32, l = i % 32, sc, m;
        gpucore_q_k_scale_min(b + 4, sub, &sc, &m);
        const uint8_t *qs = b + (fmt == GPUCORE_QF_Q4_K ? 16 : 48) + (sub / 2) * 32;
        int q = (sub & 1) ? (qs[l] >> 4) : (qs[l] & 0x0f);
        if (fmt == GPUCORE_QF_Q5_K) q |= ((b[16 + l] >> sub) & 1) << 4;
        float d = GPUCORE_QMUL(gpucore_q_f16_at(b), (float)sc);
        float dm = GPUCORE_QMUL(gpucore_q_f16_at(b + 2), (float)m);
        return GPUCORE_QADD(GPUCORE_QMUL(d, (float)q), -dm);
    }
    case GPUCORE_QF_Q6_K: {
        /* 128-value halves; in a half, value 32*k + l (k 0..3) takes the low (k < 2) or high
         * nibble of ql[l + 32*(k&1)] and bits 2k..2k+1 of qh[l]. */
        int half = i / 128, r = i % 128, k = r / 32, l = r % 32;
        const uint8_t *ql = b + half * 64, *qh = b + 128 + half * 32;
        int lo = (k < 2) ? (ql[l + 32 * (k & 1)] & 0x0f) : (ql[l + 32 * (k & 1)] >> 4);
        int q = (lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        float d = GPUCORE_QMUL(gpucore_q_f16_at(b + 208), (float)(int8_t)b[192 + i / 16]);
        return GPUCORE_QMUL(d, (float)q);
    }
    default:
        return 0.0f;
    }
}

#endif
