/*
 * quant_formats.h — the quantized weight formats, one block at a time: their byte layouts,
 * code books and the quantize / dequantize arithmetic, shared by the CPU backend, the
 * host-side helpers of src/ops/quant.c and the CUDA kernel, so every place computes the same
 * bits.
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
 * Quantizing Q4_0..Q8_0 follows ggml's reference C functions (quantize_row_*_ref), which the
 * gguf package's numpy code mirrors: f32 arithmetic, scales rounded to f16 after use. The K
 * formats are read only here.
 *
 * bitsandbytes 4-bit (NF4, FP4): the tensor flattened, blocks of a power of two from 32 to
 * 4096 values (the last may be partial), an f32 absmax per block; each value is scaled by
 * (1 / absmax) in f32, clamped to [-1, 1] and given the index of the nearest code book entry
 * (the lowest index on a tie); two indices per byte, the earlier value in the high nibble.
 * x = code[q] * absmax.
 * bitsandbytes 8-bit rows (Int8Params): SCB = the row's absmax (f32), q = round half even
 * of x * (127 / SCB) in f32 (0 in a row of zeros); x = (q * SCB) * (1/127 as f32).
 *
 * Every function works on one value, block or work item, with no state; none checks its
 * arguments (src/ops/quant.c does). Products whose rounding the references take separately are
 * written so no compiler fuses them into one fused multiply-add (GPUCORE_QMUL/QADD).
 */
#ifndef GPUCORE_KERNELS_QUANT_FORMATS_H
#define GPUCORE_KERNELS_QUANT_FORMATS_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "dtype_access.h"
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
/* Host C is compiled in ISO C mode, where GCC contracts nothing; the product is also rounded in
 * a statement of its own, which clang's default contraction (within one expression) leaves alone. */
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

/* Quantizes one block of a GGUF format with ggml's reference rounding: Q4_0 / Q5_0 scale by
 * the signed value of largest magnitude (the first on a tie) over -8 / -16 and truncate
 * q*1/d + 8.5 / 16.5; Q4_1 / Q5_1 take (max - min) / 15 / 31 and truncate (x - min)/d + 0.5;
 * Q8_0 takes absmax / 127 and rounds half away from zero. x must be finite. Returns 0, or -1
 * for a format this function does not quantize (the K formats). */
/* Q4_0/Q4_1/Q5_0/Q5_1 indices: trunc((x - sub) * id + bias), at most top; nibbles (value j low,
 * j + 16 high) at qs and fifth bits into the u32 at qh (NULL for the 4-bit formats). */
GPUCORE_HD void gpucore_gguf_pack_small(const float *x, float sub, float id, float bias, int top, uint8_t *qs,
                                        uint8_t *qh)
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = (int)GPUCORE_QADD(GPUCORE_QMUL(x[j] - sub, id), bias);
        int q1 = (int)GPUCORE_QADD(GPUCORE_QMUL(x[j + 16] - sub, id), bias);
        q0 = q0 < top ? q0 : top;
        q1 = q1 < top ? q1 : top;
        qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
        h |= (uint32_t)((q0 >> 4) & 1) << j | (uint32_t)((q1 >> 4) & 1) << (j + 16);
    }
    if (qh)
        for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

GPUCORE_HD int gpucore_gguf_quantize_block(int fmt, const float *x, uint8_t *b)
{
    switch (fmt) {
    case GPUCORE_QF_Q4_0:
    case GPUCORE_QF_Q5_0: {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        int five = fmt == GPUCORE_QF_Q5_0;
        float d = max / (five ? -16.0f : -8.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        gpucore_q_put_f16(b, d);
        gpucore_gguf_pack_small(x, 0.0f, id, five ? 16.5f : 8.5f, five ? 31 : 15, b + (five ? 6 : 2),
                                five ? b + 2 : NULL);
        return 0;
    }
    case GPUCORE_QF_Q4_1:
    case GPUCORE_QF_Q5_1: {
        float min = x[0], max = x[0];
        for (int j = 1; j < 32; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        int five = fmt == GPUCORE_QF_Q5_1;
        float d = (max - min) / (five ? 31.0f : 15.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        gpucore_q_put_f16(b, d);
        gpucore_q_put_f16(b + 2, min);
        gpucore_gguf_pack_small(x, min, id, 0.5f, five ? 31 : 15, b + (five ? 8 : 4), five ? b + 4 : NULL);
        return 0;
    }
    case GPUCORE_QF_Q8_0: {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        gpucore_q_put_f16(b, d);
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(GPUCORE_QMUL(x[j], id));
        return 0;
    }
    default:
        return -1;
    }
}

/* One 4-bit index of bitsandbytes' NF4/FP4: x scaled by inv_absmax = 1 / absmax (f32),
 * clamped to [-1, 1], the nearest code (a block of zeros scales 0 * inf = NaN: index 0, as
 * bitsandbytes' argmin gives). */
GPUCORE_HD int gpucore_q4_quantize_value(int fmt, float x, float inv_absmax)
{
    float s = GPUCORE_QMUL(x, inv_absmax);
    s = s < -1.0f ? -1.0f : (s > 1.0f ? 1.0f : s);
    return gpucore_q4_nearest(fmt, s);
}

/* One int8 row value: round half even of x * (127 / scb) (scale given), 0 in a zero row. */
GPUCORE_HD int8_t gpucore_q_int8_row_quantize(float x, float scale127)
{
    float v = GPUCORE_QMUL(x, scale127);
    if (v != v) return 0;
    return (int8_t)rintf(v);
}

/* Blocks of absmax values per nested f32 scale under double quantization (bitsandbytes'). */
#define GPUCORE_QUANT_NESTED_BLOCK 256

/* Where each part of a [rows, cols] matrix's bytes lies (src/ops/quant.c makes it; the layouts
 * are documented with gpucore_quant_format). A work item is a block (a row for INT8_ROW). */
typedef struct gpucore_quant_layout {
    int fmt, flags;
    int64_t rows, cols, n;  /* the matrix and its values */
    int64_t block, nblocks; /* values per block (a row for INT8_ROW) and blocks */
    int64_t scale_off;      /* NF4/FP4: absmax (f32, or u8 codes when double); INT8_ROW: SCB */
    int64_t nested_off, nnested, offset_off; /* double quantization: f32 scales and the f32 offset */
    int64_t total;          /* bytes */
} gpucore_quant_layout;

/* What a backend's quant entry runs: values (dtype values_dtype, contiguous, row-major) into
 * bytes (quantize) or back. Quantizing writes the index of the first NaN or infinite value into
 * *first_bad (host memory) and leaves that item unwritten, or -1 when every value is finite. */
typedef struct gpucore_quant_args {
    gpucore_quant_layout L;
    int dequantize;
    uint8_t *bytes;
    void *values;
    int values_dtype;
    int64_t *first_bad;
} gpucore_quant_args;

GPUCORE_HD float gpucore_q_f32_at(const uint8_t *p)
{
    uint32_t u = gpucore_q_u32_at(p);
    return gpucore_bits_f32(u);
}
GPUCORE_HD void gpucore_q_put_f32(uint8_t *p, float v)
{
    uint32_t u = gpucore_f32_bits(v);
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(u >> (8 * k));
}

/* Value i (flat, row-major) of the matrix. */
GPUCORE_HD float gpucore_quant_value(const gpucore_quant_layout *L, const uint8_t *bytes, int64_t i)
{
    switch (L->fmt) {
    case GPUCORE_QF_NF4:
    case GPUCORE_QF_FP4: {
        int q = (i & 1) ? (bytes[i / 2] & 0x0f) : (bytes[i / 2] >> 4);
        float absmax = gpucore_q_f32_at(bytes + L->scale_off + 4 * (i / L->block));
        return GPUCORE_QMUL(gpucore_q4_code(L->fmt, q), absmax);
    }
    case GPUCORE_QF_INT8_ROW:
        return gpucore_q_int8_row_value((int8_t)bytes[i], gpucore_q_f32_at(bytes + L->scale_off + 4 * (i / L->cols)));
    default:
        return gpucore_gguf_dequant_one(L->fmt, bytes + (i / L->block) * gpucore_gguf_block_bytes(L->fmt),
                                        (int)(i % L->block));
    }
}

/* Dequantizes work item `item` into values (dtype dt). */
GPUCORE_HD void gpucore_quant_item_dequantize(const gpucore_quant_layout *L, const uint8_t *bytes, int64_t item,
                                              void *values, int dt)
{
    int64_t lo = item * L->block, hi = lo + L->block < L->n ? lo + L->block : L->n;
    int es = gpucore_kdt_size(dt);
    if (L->fmt == GPUCORE_QF_NF4 || L->fmt == GPUCORE_QF_FP4) { /* the block's 16 values, once */
        float absmax = gpucore_q_f32_at(bytes + L->scale_off + 4 * item), v[16];
        for (int k = 0; k < 16; k++) v[k] = GPUCORE_QMUL(gpucore_q4_code(L->fmt, k), absmax);
        for (int64_t i = lo; i < hi; i++)
            gpucore_store_from_f32((char *)values + i * es, dt, v[(i & 1) ? (bytes[i / 2] & 0x0f) : (bytes[i / 2] >> 4)]);
        return;
    }
    for (int64_t i = lo; i < hi; i++) gpucore_store_from_f32((char *)values + i * es, dt, gpucore_quant_value(L, bytes, i));
}

/* Quantizes work item `item` of values (dtype dt) into bytes; returns -1, or the index of its
 * first NaN or infinite value (and writes nothing). */
GPUCORE_HD int64_t gpucore_quant_item_quantize(const gpucore_quant_layout *L, const void *values, int dt, int64_t item,
                                               uint8_t *bytes)
{
    int64_t lo = item * L->block, hi = lo + L->block < L->n ? lo + L->block : L->n;
    int es = gpucore_kdt_size(dt);
    const char *v = (const char *)values;
    float amax = 0.0f;
    for (int64_t i = lo; i < hi; i++) {
        float x = gpucore_load_as_f32(v + i * es, dt);
        if (!(fabsf(x) <= 3.402823466e38f)) return i;
        amax = fabsf(x) > amax ? fabsf(x) : amax;
    }
    if (item == L->nblocks - 1 && L->scale_off) { /* the last item zeroes the padding before the scales */
        int64_t used = L->fmt == GPUCORE_QF_INT8_ROW ? L->n : (L->n + 1) / 2;
        for (int64_t k = used; k < L->scale_off; k++) bytes[k] = 0;
    }
    switch (L->fmt) {
    case GPUCORE_QF_NF4:
    case GPUCORE_QF_FP4: {
        float inv = 1.0f / amax;
        gpucore_q_put_f32(bytes + L->scale_off + 4 * item, amax);
        for (int64_t i = lo; i < hi; i += 2) {
            int q0 = gpucore_q4_quantize_value(L->fmt, gpucore_load_as_f32(v + i * es, dt), inv);
            /* an odd count's last byte pairs the value with a quantized 0 (bitsandbytes pads) */
            int q1 = i + 1 < hi ? gpucore_q4_quantize_value(L->fmt, gpucore_load_as_f32(v + (i + 1) * es, dt), inv)
                                : gpucore_q4_nearest(L->fmt, 0.0f);
            bytes[i / 2] = (uint8_t)((q0 << 4) | q1);
        }
        return -1;
    }
    case GPUCORE_QF_INT8_ROW: {
        float scale127 = 127.0f / amax;
        gpucore_q_put_f32(bytes + L->scale_off + 4 * item, amax);
        for (int64_t i = lo; i < hi; i++)
            bytes[i] = (uint8_t)gpucore_q_int8_row_quantize(gpucore_load_as_f32(v + i * es, dt), scale127);
        return -1;
    }
    default: {
        float x[32];
        if (L->block != 32) return -1; /* the K formats are not quantized here (the front-end refuses them) */
        for (int k = 0; k < 32; k++) x[k] = gpucore_load_as_f32(v + (lo + k) * es, dt);
        gpucore_gguf_quantize_block(L->fmt, x, bytes + item * gpucore_gguf_block_bytes(L->fmt));
        return -1;
    }
    }
}

#endif
