/*
 * quant.c — the quantized weight formats' front-end: where each part of a format's bytes lies
 * (quant_layout), the public size query, and the host-side dequantization the file readers
 * use. The per-block arithmetic is kernels/quant_formats.h's.
 */
#include <math.h>
#include <string.h>
#include "core/internal.h"
#include "ops/quant_internal.h"
#include "ops/quant_layout.h"

#define QUANT_SAME(X) ((int)GPUCORE_QUANT_##X == (int)GPUCORE_QF_##X)
_Static_assert(QUANT_SAME(NF4) && QUANT_SAME(FP4) && QUANT_SAME(INT8_ROW) && QUANT_SAME(Q4_0) && QUANT_SAME(Q4_1) &&
               QUANT_SAME(Q5_0) && QUANT_SAME(Q5_1) && QUANT_SAME(Q8_0) && QUANT_SAME(Q4_K) && QUANT_SAME(Q5_K) &&
               QUANT_SAME(Q6_K), "gpucore_quant_format and kernels/quant_formats.h disagree");
#undef QUANT_SAME

static const char *const quant_names[GPUCORE_QF_COUNT] = {
    "NF4", "FP4", "INT8_ROW", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"};

const char *quant_format_name(int fmt)
{
    return fmt >= 0 && fmt < GPUCORE_QF_COUNT ? quant_names[fmt] : "unknown";
}

static int64_t pad4(int64_t v) { return (v + 3) & ~(int64_t)3; }

/* The layout, or a status with the thread's message naming op; quiet (no message) when op is NULL. */
gpucore_status quant_layout_make(int fmt, int64_t rows, int64_t cols, int64_t block_size, int flags,
                                 const char *op, quant_layout *L)
{
#define QFAIL(code, ...) (op ? gpucore_set_error((code), __VA_ARGS__) : (code))
    memset(L, 0, sizeof *L);
    if (fmt < 0 || fmt >= GPUCORE_QF_COUNT)
        return QFAIL(GPUCORE_ERR_INVALID_ARGUMENT, "%s: quant format %d is not a gpucore_quant_format (NF4=0 .. Q6_K=10)",
                     op, fmt);
    const char *name = quant_names[fmt];
    if (rows < 0 || cols < 0)
        return QFAIL(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s matrix of %lld x %lld: sizes must not be negative", op, name,
                     (long long)rows, (long long)cols);
    int64_t n;
    if (__builtin_mul_overflow(rows, cols, &n) || n > (INT64_MAX >> 4))
        return QFAIL(GPUCORE_ERR_OVERFLOW, "%s: %s matrix of %lld x %lld values overflows int64", op, name,
                     (long long)rows, (long long)cols);
    int is_4bit = fmt == GPUCORE_QF_NF4 || fmt == GPUCORE_QF_FP4;
    if (flags & ~GPUCORE_QUANT_DOUBLE || ((flags & GPUCORE_QUANT_DOUBLE) && !is_4bit))
        return QFAIL(GPUCORE_ERR_INVALID_ARGUMENT,
                     "%s: flags 0x%x are not taken by %s (only NF4 and FP4 take GPUCORE_QUANT_DOUBLE)", op, flags,
                     name);
    L->fmt = fmt;
    L->rows = rows;
    L->cols = cols;
    L->n = n;
    L->flags = flags;
    if (is_4bit) {
        int64_t b = block_size ? block_size : 64;
        if (b < 32 || b > 4096 || (b & (b - 1)))
            return QFAIL(GPUCORE_ERR_INVALID_ARGUMENT,
                         "%s: %s block size %lld: give a power of two from 32 to 4096 (or 0 for 64)", op, name,
                         (long long)block_size);
        L->block = b;
        L->nblocks = (n + b - 1) / b;
        L->scale_off = pad4((n + 1) / 2);
        if (flags & GPUCORE_QUANT_DOUBLE)
            return QFAIL(GPUCORE_ERR_NOT_SUPPORTED,
                         "%s: double quantization of the %s absmax is not implemented yet; quantize without "
                         "GPUCORE_QUANT_DOUBLE", op, name);
        if (flags & GPUCORE_QUANT_DOUBLE) {
            L->nested_off = L->scale_off + pad4(L->nblocks);
            L->nnested = (L->nblocks + QUANT_NESTED_BLOCK - 1) / QUANT_NESTED_BLOCK;
            L->offset_off = L->nested_off + 4 * L->nnested;
            L->total = L->offset_off + 4;
        } else {
            L->total = L->scale_off + 4 * L->nblocks;
        }
        return GPUCORE_OK;
    }
    if (block_size != 0)
        return QFAIL(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s has a fixed block; pass block size 0, not %lld", op, name,
                     (long long)block_size);
    if (fmt == GPUCORE_QF_INT8_ROW) {
        L->block = cols;
        L->nblocks = rows;
        L->scale_off = pad4(n);
        L->total = L->scale_off + 4 * rows;
        return GPUCORE_OK;
    }
    int64_t be = gpucore_gguf_block_elems(fmt);
    if (cols % be != 0)
        return QFAIL(GPUCORE_ERR_INVALID_ARGUMENT,
                     "%s: %s rows are whole blocks of %lld values, but a row has %lld (pad or pick another format)",
                     op, name, (long long)be, (long long)cols);
    L->block = be;
    L->nblocks = n / be;
    L->total = L->nblocks * gpucore_gguf_block_bytes(fmt);
    return GPUCORE_OK;
#undef QFAIL
}

gpucore_status gpucore_quant_size(gpucore_quant_format fmt, int64_t rows, int64_t cols, int64_t block_size,
                                  int flags, int64_t *bytes)
{
    if (!bytes) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "quant_size: bytes is NULL");
    quant_layout L;
    gpucore_status st = quant_layout_make((int)fmt, rows, cols, block_size, flags, "quant_size", &L);
    if (st != GPUCORE_OK) return st;
    *bytes = L.total;
    return GPUCORE_OK;
}

/* The f32 absmax of 4-bit block blk (a plain f32, or the double-quantized one rebuilt). */
static float q4_block_absmax(const quant_layout *L, const uint8_t *bytes, int64_t blk)
{
    float a;
    if (!(L->flags & GPUCORE_QUANT_DOUBLE)) {
        memcpy(&a, bytes + L->scale_off + 4 * blk, 4);
        return a;
    }
    return 0.0f; /* refused by quant_layout_make */
}

void quant_dequantize_range(const quant_layout *L, const uint8_t *bytes, int64_t begin, int64_t end, float *out)
{
    switch (L->fmt) {
    case GPUCORE_QF_NF4:
    case GPUCORE_QF_FP4:
        for (int64_t blk = begin / L->block; blk * L->block < end; blk++) {
            float absmax = q4_block_absmax(L, bytes, blk);
            int64_t lo = blk * L->block > begin ? blk * L->block : begin;
            int64_t hi = (blk + 1) * L->block < end ? (blk + 1) * L->block : end;
            for (int64_t i = lo; i < hi; i++) {
                int q = (i & 1) ? (bytes[i / 2] & 0x0f) : (bytes[i / 2] >> 4);
                out[i - begin] = GPUCORE_QMUL(gpucore_q4_code(L->fmt, q), absmax);
            }
        }
        break;
    case GPUCORE_QF_INT8_ROW:
        for (int64_t i = begin; i < end; i++) {
            float scb;
            memcpy(&scb, bytes + L->scale_off + 4 * (i / L->cols), 4);
            out[i - begin] = gpucore_q_int8_row_value((int8_t)bytes[i], scb);
        }
        break;
    default: {
        int64_t be = L->block, bb = gpucore_gguf_block_bytes(L->fmt);
        for (int64_t i = begin; i < end; i++)
            out[i - begin] = gpucore_gguf_dequant_one(L->fmt, bytes + (i / be) * bb, (int)(i % be));
        break;
    }
    }
}

int64_t quant_row_bytes(int format, int64_t n_elems)
{
    quant_layout L;
    if (quant_layout_make(format, 1, n_elems, 0, 0, NULL, &L) != GPUCORE_OK) return -1;
    return L.total;
}

gpucore_status quant_dequantize_host(int format, const void *blocks, int64_t n_elems, float *out)
{
    if (!blocks || !out)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "quant_dequantize_host: %s is NULL", blocks ? "out" : "blocks");
    quant_layout L;
    gpucore_status st = quant_layout_make(format, 1, n_elems, 0, 0, "quant_dequantize_host", &L);
    if (st != GPUCORE_OK) return st;
    quant_dequantize_range(&L, (const uint8_t *)blocks, 0, L.n, out);
    return GPUCORE_OK;
}
