/*
 * test_quant.c — gpucore_quantize / gpucore_dequantize on every backend present: fresh random
 * weights quantized, their bytes decoded by the float64 definitions of each format written here
 * (independently of kernels/quant_formats.h), the dequantized tensor (f32 and bf16, into a
 * poisoned output, on every backend: quantizing is the CPU backend's) compared with that decoding, and the quantization error bounded by the
 * format's step; GGUF K blocks (read only) from random bytes; bad input. Bit-exactness against
 * the reference implementations is python/tests/test_quant.py's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "numeric.h"

static double f16_at(const uint8_t *p) { return gpucore_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
static double f32_at(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}
static int64_t pad4(int64_t v) { return (v + 3) / 4 * 4; }

static const double nf4_code[16] = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                                    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                                    0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                                    0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                                    0.7229568362236023, 1.0};
static double fp4_code(int q)
{
    static const double mag[8] = {0, 0.0625, 8, 12, 4, 6, 2, 3};
    return (q & 8 ? -1 : 1) * mag[q & 7] / 12.0;
}

/* Nibble j of a 32-value GGUF block's 16 bytes: low nibbles first, then high. */
static int nib32(const uint8_t *qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

/* The K formats' 6-bit scale and min of sub-block j from the 12 packed bytes. */
static void k_scale(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63, *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Value i of a rows x cols matrix in fmt (block: NF4/FP4's), float64. */
static double decode(gpucore_quant_format fmt, const uint8_t *b, int64_t rows, int64_t cols, int64_t block,
                     int64_t i)
{
    int64_t n = rows * cols;
    switch (fmt) {
    case GPUCORE_QUANT_NF4:
    case GPUCORE_QUANT_FP4: {
        int q = i % 2 ? b[i / 2] & 15 : b[i / 2] >> 4;
        double absmax = f32_at(b + pad4((n + 1) / 2) + 4 * (i / block));
        return (fmt == GPUCORE_QUANT_NF4 ? nf4_code[q] : fp4_code(q)) * absmax;
    }
    case GPUCORE_QUANT_INT8_ROW:
        return (double)(int8_t)b[i] * f32_at(b + pad4(n) + 4 * (i / cols)) / 127.0;
    case GPUCORE_QUANT_Q4_0: { const uint8_t *k = b + (i / 32) * 18; return f16_at(k) * (nib32(k + 2, i % 32) - 8); }
    case GPUCORE_QUANT_Q4_1: { const uint8_t *k = b + (i / 32) * 20; return f16_at(k) * nib32(k + 4, i % 32) + f16_at(k + 2); }
    case GPUCORE_QUANT_Q5_0:
    case GPUCORE_QUANT_Q5_1: {
        int one = fmt == GPUCORE_QUANT_Q5_1, j = (int)(i % 32);
        const uint8_t *k = b + (i / 32) * (one ? 24 : 22), *qh = k + (one ? 4 : 2);
        int q = nib32(qh + 4, j) | (((qh[j / 8] >> (j % 8)) & 1) << 4);
        return one ? f16_at(k) * q + f16_at(k + 2) : f16_at(k) * (q - 16);
    }
    case GPUCORE_QUANT_Q8_0: { const uint8_t *k = b + (i / 32) * 34; return f16_at(k) * (int8_t)k[2 + i % 32]; }
    case GPUCORE_QUANT_Q4_K:
    case GPUCORE_QUANT_Q5_K: {
        int five = fmt == GPUCORE_QUANT_Q5_K, j = (int)(i % 256), sub = j / 32, sc, m;
        const uint8_t *k = b + (i / 256) * (five ? 176 : 144), *qs = k + (five ? 48 : 16) + (sub / 2) * 32;
        k_scale(k + 4, sub, &sc, &m);
        int q = sub % 2 ? qs[j % 32] >> 4 : qs[j % 32] & 15;
        if (five) q += ((k[16 + j % 32] >> sub) & 1) * 16;
        return f16_at(k) * sc * q - f16_at(k + 2) * m;
    }
    case GPUCORE_QUANT_Q6_K: {
        /* per 128-value half: 64 bytes of low nibbles (values l and l+64 share byte l, l+32 and l+96
         * byte l+32), 32 bytes of 2-bit pairs (value 32k+l: bits 2k..2k+1 of byte l) */
        int j = (int)(i % 256), h = j / 128, r = j % 128, kq = r / 32, l = r % 32;
        const uint8_t *k = b + (i / 256) * 210, *ql = k + 64 * h, *qh = k + 128 + 32 * h;
        int lo = ql[l + 32 * (kq % 2)];
        lo = kq < 2 ? lo & 15 : lo >> 4;
        int q = (lo | (((qh[l] >> (2 * kq)) & 3) << 4)) - 32;
        return f16_at(k + 208) * (int8_t)k[192 + j / 16] * q;
    }
    }
    return 0;
}

typedef struct { gpucore_quant_format fmt; const char *name; int64_t rows, cols, block; double max_rel_err; } qcase;

/* Largest relative quantization error ||x - deq|| / ||x|| a format may give on uniform data. */
static const qcase cases[] = {
    {GPUCORE_QUANT_NF4, "NF4", 5, 77, 64, 0.12}, {GPUCORE_QUANT_NF4, "NF4", 3, 256, 32, 0.12},
    {GPUCORE_QUANT_FP4, "FP4", 4, 200, 128, 0.2}, {GPUCORE_QUANT_FP4, "FP4", 1, 33, 4096, 0.2},
    {GPUCORE_QUANT_INT8_ROW, "INT8_ROW", 6, 37, 0, 0.01}, {GPUCORE_QUANT_Q4_0, "Q4_0", 3, 96, 0, 0.12},
    {GPUCORE_QUANT_Q4_1, "Q4_1", 3, 64, 0, 0.08}, {GPUCORE_QUANT_Q5_0, "Q5_0", 2, 128, 0, 0.06},
    {GPUCORE_QUANT_Q5_1, "Q5_1", 4, 32, 0, 0.04}, {GPUCORE_QUANT_Q8_0, "Q8_0", 5, 64, 0, 0.01},
};

static gpucore_tensor *host_tensor(gpucore_context *ctx, gpucore_dtype dt, int ndim, const int64_t *shape,
                                   const void *data, int64_t bytes)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, ndim, shape, &t));
    if (t && data) CHECK_OK(gpucore_copy_from_host(t, data, bytes));
    return t;
}

/* out (a fresh f32 or bf16 tensor, poisoned) = dequantize(q); compared with the float64 decoding. */
static void check_dequantize(gpucore_context *ctx, const qcase *c, gpucore_tensor *q, const uint8_t *bytes,
                             gpucore_dtype dt)
{
    int64_t shape[2] = {c->rows, c->cols}, n = c->rows * c->cols;
    gpucore_tensor *out = host_tensor(ctx, dt, 2, shape, NULL, 0);
    CHECK_OK(gpucore_fill(out, NAN, NULL));
    CHECK_OK(gpucore_dequantize(q, c->fmt, c->block, 0, out, NULL));
    int es = dt == GPUCORE_F32 ? 4 : 2;
    uint8_t *raw = malloc((size_t)(n * es));
    CHECK_OK(gpucore_copy_to_host(raw, n * es, out));
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        double want = decode(c->fmt, bytes, c->rows, c->cols, c->block, i), got;
        if (dt == GPUCORE_F32) got = f32_at(raw + 4 * i);
        else got = gpucore_bf16_to_f32((uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8)));
        double tol = (dt == GPUCORE_F32 ? 0x1p-22 : 0x1p-8) * fabs(want) + 1e-30;
        if (!(fabs(got - want) <= tol)) bad = i;
    }
    if (bad >= 0)
        fprintf(stderr, "FAIL %s: %s %s value %lld: got %.9g, the float64 definition %.9g\n", check_device, c->name,
                dt == GPUCORE_F32 ? "f32" : "bf16", (long long)bad,
                dt == GPUCORE_F32 ? f32_at(raw + 4 * bad)
                                  : gpucore_bf16_to_f32((uint16_t)(raw[2 * bad] | (raw[2 * bad + 1] << 8))),
                decode(c->fmt, bytes, c->rows, c->cols, c->block, bad));
    CHECK(bad < 0);
    free(raw);
    gpucore_tensor_destroy(out);
}

/* Quantizing runs on the CPU backend (a CPU context made by main); every backend dequantizes. */
static gpucore_context *cpu_ctx;
static int is_cpu(void) { return strcmp(check_device, "cpu") == 0; }

static void test_quantize_roundtrip(gpucore_context *ctx)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const qcase *c = &cases[k];
        int64_t shape[2] = {c->rows, c->cols}, n = c->rows * c->cols, bytes = 0;
        CHECK_OK(gpucore_quant_size(c->fmt, c->rows, c->cols, c->block, 0, &bytes));
        float *x = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) /* per-row scales 1e-3 .. 10, one row of zeros when there are 3+ */
            x[i] = (c->rows > 2 && i / c->cols == 1) ? 0.0f
                                                      : (float)((rand() / (double)RAND_MAX - 0.5) * pow(10.0, (double)(i / c->cols % 5) - 3));
        for (int layout = 0; layout < 2; layout++) {
            gpucore_tensor *xt = host_tensor(cpu_ctx, GPUCORE_F32, 2, shape, x, n * 4), *xin = xt;
            if (layout) { /* the same values as bf16 */
                CHECK_OK(gpucore_tensor_create(cpu_ctx, GPUCORE_BF16, 2, shape, &xin));
                CHECK_OK(gpucore_cast(xin, xt, NULL));
            }
            int64_t bshape[1] = {bytes};
            gpucore_tensor *qc = host_tensor(cpu_ctx, GPUCORE_U8, 1, bshape, NULL, 0);
            CHECK_OK(gpucore_fill(qc, 0xA5, NULL)); /* padding must come out zero */
            CHECK_OK(gpucore_quantize(xin, c->fmt, c->block, 0, qc, NULL));
            uint8_t *b = malloc((size_t)bytes);
            CHECK_OK(gpucore_copy_to_host(b, bytes, qc));
            gpucore_tensor *q = host_tensor(ctx, GPUCORE_U8, 1, bshape, b, bytes);
            if (!is_cpu()) { /* quantizing elsewhere is refused, with the way round it */
                gpucore_tensor *xd = host_tensor(ctx, GPUCORE_F32, 2, shape, x, n * 4);
                CHECK_STATUS(gpucore_quantize(xd, c->fmt, c->block, 0, q, NULL), GPUCORE_ERR_NOT_SUPPORTED);
                CHECK(strstr(gpucore_last_error(), "CPU backend") != NULL);
                gpucore_tensor_destroy(xd);
            }
            check_dequantize(ctx, c, q, b, GPUCORE_F32);
            check_dequantize(ctx, c, q, b, GPUCORE_BF16);
            /* the values came back within the format's step */
            double num = 0, den = 0;
            for (int64_t i = 0; i < n; i++) {
                double xi = layout ? gpucore_bf16_to_f32(gpucore_f32_to_bf16_portable(x[i])) : x[i];
                double d = decode(c->fmt, b, c->rows, c->cols, c->block, i) - xi;
                num += d * d, den += xi * xi;
            }
            double rel = sqrt(num / den);
            if (!(rel <= c->max_rel_err))
                fprintf(stderr, "FAIL %s: %s quantization error %.4g > %.4g\n", check_device, c->name, rel, c->max_rel_err);
            CHECK(rel <= c->max_rel_err);
            int64_t used = c->fmt == GPUCORE_QUANT_INT8_ROW ? n : (c->fmt <= GPUCORE_QUANT_FP4 ? (n + 1) / 2 : bytes);
            int pad_zero = 1;
            for (int64_t i = used; i < pad4(used) && i < bytes; i++) pad_zero &= b[i] == 0;
            CHECK(pad_zero);
            free(b);
            gpucore_tensor_destroy(q);
            gpucore_tensor_destroy(qc);
            if (xin != xt) gpucore_tensor_destroy(xin);
            gpucore_tensor_destroy(xt);
        }
        free(x);
    }
}

/* K blocks are read only: random blocks with finite f16 scales, dequantized. */
static void test_k_blocks(gpucore_context *ctx)
{
    static const qcase kcases[] = {{GPUCORE_QUANT_Q4_K, "Q4_K", 3, 512, 0, 0}, {GPUCORE_QUANT_Q5_K, "Q5_K", 2, 256, 0, 0},
                                   {GPUCORE_QUANT_Q6_K, "Q6_K", 2, 768, 0, 0}};
    for (size_t k = 0; k < 3; k++) {
        const qcase *c = &kcases[k];
        int64_t bytes = 0;
        CHECK_OK(gpucore_quant_size(c->fmt, c->rows, c->cols, 0, 0, &bytes));
        int bb = c->fmt == GPUCORE_QUANT_Q4_K ? 144 : c->fmt == GPUCORE_QUANT_Q5_K ? 176 : 210;
        CHECK(bytes == c->rows * c->cols / 256 * bb);
        uint8_t *b = malloc((size_t)bytes);
        for (int64_t i = 0; i < bytes; i++) b[i] = (uint8_t)(rand() & 0xff);
        for (int64_t blk = 0; blk < bytes / bb; blk++) { /* f16 scales with exponents below 15: finite */
            uint8_t *p = b + blk * bb;
            if (c->fmt == GPUCORE_QUANT_Q6_K) p[209] &= 0x3b;
            else p[1] &= 0x3b, p[3] &= 0x3b;
        }
        int64_t bshape[1] = {bytes};
        gpucore_tensor *q = host_tensor(ctx, GPUCORE_U8, 1, bshape, b, bytes);
        check_dequantize(ctx, c, q, b, GPUCORE_F32);
        check_dequantize(ctx, c, q, b, GPUCORE_BF16);
        int64_t shape[2] = {c->rows, c->cols};
        gpucore_tensor *x = host_tensor(ctx, GPUCORE_F32, 2, shape, NULL, 0);
        CHECK_OK(gpucore_fill(x, 0.5, NULL));
        CHECK_STATUS(gpucore_quantize(x, c->fmt, 0, 0, q, NULL), GPUCORE_ERR_NOT_SUPPORTED);
        gpucore_tensor_destroy(x);
        gpucore_tensor_destroy(q);
        free(b);
    }
}

static void test_bad_input(gpucore_context *ctx)
{
    int64_t shape[2] = {2, 64}, bshape[1] = {72}, bytes = 0;
    gpucore_tensor *x = host_tensor(ctx, GPUCORE_F32, 2, shape, NULL, 0), *q = host_tensor(ctx, GPUCORE_U8, 1, bshape, NULL, 0);
    gpucore_tensor *i32 = host_tensor(ctx, GPUCORE_I32, 2, shape, NULL, 0);
    CHECK_OK(gpucore_fill(x, 0.25, NULL));
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_Q4_0, 2, 48, 0, 0, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_NF4, 2, 64, 48, 0, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_NF4, 2, 64, 8192, 0, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_Q8_0, 2, 64, 32, 0, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_Q8_0, 2, 64, 0, GPUCORE_QUANT_DOUBLE, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size((gpucore_quant_format)11, 2, 64, 0, 0, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_Q8_0, -2, 64, 0, 0, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_Q8_0, INT64_MAX / 2, 64, 0, 0, &bytes), GPUCORE_ERR_OVERFLOW);
    CHECK_STATUS(gpucore_quant_size(GPUCORE_QUANT_Q8_0, 2, 64, 0, 0, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_quantize(NULL, GPUCORE_QUANT_Q4_0, 0, 0, q, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_dequantize(q, GPUCORE_QUANT_Q4_0, 0, 0, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_quantize(i32, GPUCORE_QUANT_Q4_0, 0, 0, q, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_quantize(x, GPUCORE_QUANT_Q4_0, 0, 0, x, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_quantize(x, GPUCORE_QUANT_Q8_0, 0, 0, q, NULL), GPUCORE_ERR_SHAPE_MISMATCH); /* 136 bytes */
    if (is_cpu()) {
        float bad[128];
        for (int i = 0; i < 128; i++) bad[i] = 1.0f;
        bad[77] = NAN;
        CHECK_OK(gpucore_copy_from_host(x, bad, sizeof bad));
        CHECK_STATUS(gpucore_quantize(x, GPUCORE_QUANT_Q4_0, 0, 0, q, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK(strstr(gpucore_last_error(), "x[77] (row 1, column 13)") != NULL);
        bad[77] = INFINITY;
        CHECK_OK(gpucore_copy_from_host(x, bad, sizeof bad));
        CHECK_STATUS(gpucore_quantize(x, GPUCORE_QUANT_Q4_0, 0, 0, q, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
        bad[77] = 1.0f; /* the library is usable after the refusals */
        CHECK_OK(gpucore_copy_from_host(x, bad, sizeof bad));
        CHECK_OK(gpucore_quantize(x, GPUCORE_QUANT_Q4_0, 0, 0, q, NULL));
    }
    gpucore_tensor_destroy(i32);
    gpucore_tensor_destroy(q);
    gpucore_tensor_destroy(x);
}

int main(void)
{
    srand(4747);
    CHECK_OK(gpucore_context_create("cpu", &cpu_ctx));
    static const device_test_fn tests[] = {test_quantize_roundtrip, test_k_blocks, test_bad_input};
    for_each_device(tests, (int)(sizeof tests / sizeof tests[0]));
    CHECK_OK(gpucore_context_destroy(cpu_ctx));
    return check_finish("test_quant");
}
