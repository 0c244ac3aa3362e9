/*
 * quant.c — the quantized weight formats' front-end: where each part of a format's bytes lies
 * (quant_layout), the public size query, gpucore_quantize / gpucore_dequantize (checks, then
 * the backend's quant entry), and the host-side dequantization the file readers use. The per-block arithmetic is kernels/quant_formats.h's.
 */
#include <math.h>
#include <string.h>
#include "core/internal.h"
#include "ops/ops_internal.h"
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
    for (int64_t item = 0; item < L.nblocks; item++)
        gpucore_quant_item_dequantize(&L, (const uint8_t *)blocks, item, out, GPUCORE_KDT_F32);
    return GPUCORE_OK;
}

/* rows x cols of a values tensor: cols its last dim, rows the product of the others. */
static gpucore_status values_matrix(const gpucore_tensor *t, const char *op, const char *arg, int64_t *rows,
                                    int64_t *cols)
{
    if (t->ndim < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s is a scalar; give a matrix [rows, cols]", op, arg);
    *cols = t->shape[t->ndim - 1];
    *rows = 1;
    for (int d = 0; d < t->ndim - 1; d++) *rows *= t->shape[d];
    return GPUCORE_OK;
}

gpucore_status quant_check_bytes(const gpucore_tensor *q, const quant_layout *L, const char *op, const char *arg)
{
    if (q->dtype != GPUCORE_U8)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s holds the quantized bytes and must be u8, not %s", op,
                                 arg, gpucore_dtype_name((gpucore_dtype)q->dtype));
    gpucore_view v;
    gpucore_tensor_view_of(q, &v);
    if (v.numel != L->total)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH,
                                 "%s: %s has %lld bytes, but a %lld x %lld %s matrix takes %lld (gpucore_quant_size)", op,
                                 arg, (long long)v.numel, (long long)L->rows, (long long)L->cols,
                                 quant_format_name(L->fmt), (long long)L->total);
    if (!v.contiguous)
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s (the quantized bytes) must be contiguous", op, arg);
    return GPUCORE_OK;
}

/* Checks shared by both directions; fills *L and *s. */
static gpucore_status quant_prepare(const char *op, const gpucore_tensor *values, const char *vname,
                                    const gpucore_tensor *bytes, const char *bname, int fmt, int64_t block_size,
                                    int flags, gpucore_stream *stream, quant_layout *L, gpucore_stream **s)
{
    gpucore_status st;
    int64_t rows = 0, cols = 0;
    if ((st = gpucore_check_tensor(values, op, vname)) || (st = gpucore_check_tensor(bytes, op, bname)) ||
        (st = ops_check_float(values, op, vname)) || (st = ops_check_same(values, vname, bytes, bname, op, 0)) ||
        (st = values_matrix(values, op, vname, &rows, &cols)) ||
        (st = quant_layout_make(fmt, rows, cols, block_size, flags, op, L)) || (st = quant_check_bytes(bytes, L, op, bname)) ||
        (st = ops_need_entry(values->ctx, (const void *)values->ctx->be->quant, op)) ||
        (st = gpucore_resolve_stream(values->ctx, stream, op, s)))
        return st;
    return GPUCORE_OK;
}

/* The backend's quant entry on s, profiled as op (values: the f32/f16/bf16 side). */
static gpucore_status quant_run(const gpucore_tensor *values, gpucore_stream *s, const char *op,
                                const gpucore_quant_args *a)
{
    void *prof = gpucore_prof_begin(values->ctx, s, op, gpucore_prof_bytes(values) + a->L.total);
    gpucore_status st = values->ctx->be->quant(values->ctx->bctx, a, s->bstream);
    gpucore_prof_end(values->ctx, prof);
    return st;
}

gpucore_status gpucore_quantize(const gpucore_tensor *x, gpucore_quant_format fmt, int64_t block_size, int flags,
                                gpucore_tensor *out, gpucore_stream *stream)
{
    const char *op = "quantize";
    quant_layout L;
    gpucore_stream *s;
    gpucore_status st = quant_prepare(op, x, "x", out, "out", (int)fmt, block_size, flags, stream, &L, &s);
    if (st) return st;
    if (x->ctx->type != GPUCORE_DEVICE_CPU)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "quantize: runs on the CPU backend (it checks every value on the host); quantize a "
                                 "CPU copy of x and copy the bytes to this context (gpucore_dequantize runs here)");
    if (gpucore_gguf_block_elems(L.fmt) == 256)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "quantize: quantizing to %s is not implemented (its blocks are read and dequantized); "
                                 "use Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0", quant_format_name(L.fmt));
    if (L.n == 0) return GPUCORE_OK;
    gpucore_view xv, ov;
    gpucore_tensor *staged = NULL;
    if ((st = ops_contiguous_input(x, s, &xv, &staged))) return st;
    gpucore_tensor_view_of(out, &ov);
    int64_t first_bad = -1;
    gpucore_quant_args a = {.L = L, .dequantize = 0, .bytes = ov.data, .values = xv.data,
                            .values_dtype = x->dtype, .first_bad = &first_bad};
    st = quant_run(x, s, op, &a);
    /* first_bad lives here: the op is waited for before returning (a load-time call) */
    gpucore_status sync = gpucore_stream_synchronize(s);
    if (staged) gpucore_tensor_destroy(staged);
    if (st) return st;
    if (sync) return sync;
    if (first_bad >= 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "quantize: x[%lld] (row %lld, column %lld) is NaN or infinite; %s cannot hold it "
                                 "(out is left partly written)", (long long)first_bad,
                                 (long long)(first_bad / L.cols), (long long)(first_bad % L.cols),
                                 quant_format_name(L.fmt));
    return GPUCORE_OK;
}

gpucore_status gpucore_dequantize(const gpucore_tensor *q, gpucore_quant_format fmt, int64_t block_size, int flags,
                                  gpucore_tensor *out, gpucore_stream *stream)
{
    const char *op = "dequantize";
    quant_layout L;
    gpucore_stream *s;
    gpucore_status st = quant_prepare(op, out, "out", q, "q", (int)fmt, block_size, flags, stream, &L, &s);
    if (st) return st;
    if (L.n == 0) return GPUCORE_OK;
    gpucore_view qv, ov;
    gpucore_tensor *staged = NULL;
    gpucore_tensor_view_of(q, &qv);
    if ((st = ops_contiguous_output(out, s, &ov, &staged))) return st;
    gpucore_quant_args a = {.L = L, .dequantize = 1, .bytes = qv.data, .values = ov.data,
                            .values_dtype = out->dtype, .first_bad = NULL};
    st = quant_run(out, s, op, &a);
    return ops_finish_output(out, staged, s, st);
}
