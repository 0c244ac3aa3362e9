/*
 * test_tensor.c — tensors, views, copies, fill and random on every backend
 * present, checked on the host. Outputs are poisoned before each op, views are
 * surrounded by guard elements that must stay untouched, and random fills are
 * compared bit for bit with the CPU backend (the same Philox numbers everywhere).
 */
#include <stdint.h>
#include <string.h>
#include "check.h"
#include "numeric.h"

#define POISON 0x7fc0dead /* a NaN pattern no op writes */

static gpucore_tensor *make(gpucore_context *ctx, gpucore_dtype dt, int ndim, const int64_t *shape)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, ndim, shape, &t));
    return t;
}

static void test_create_and_getters(gpucore_context *ctx)
{
    int64_t shape[3] = {2, 3, 5};
    for (int dt = 0; dt < GPUCORE_DTYPE_COUNT; dt++) {
        gpucore_tensor *t = make(ctx, (gpucore_dtype)dt, 3, shape);
        if (!t) continue;
        int64_t s[3], st[3];
        CHECK(gpucore_tensor_ndim(t) == 3);
        CHECK(gpucore_tensor_dtype(t) == (gpucore_dtype)dt);
        CHECK_OK(gpucore_tensor_shape(t, s));
        CHECK_OK(gpucore_tensor_strides(t, st));
        CHECK(s[0] == 2 && s[1] == 3 && s[2] == 5);
        CHECK(st[0] == 15 && st[1] == 5 && st[2] == 1);
        CHECK(gpucore_tensor_numel(t) == 30);
        CHECK(gpucore_tensor_nbytes(t) == 30 * gpucore_dtype_size((gpucore_dtype)dt));
        CHECK(gpucore_tensor_is_contiguous(t) == 1);
        void *data = NULL;
        CHECK_OK(gpucore_tensor_data(t, &data));
        CHECK(data != NULL && ((uintptr_t)data % 256) == 0);
        gpucore_context *owner = NULL;
        CHECK_OK(gpucore_tensor_context(t, &owner));
        CHECK(owner == ctx);
        CHECK_OK(gpucore_tensor_destroy(t));
    }
    /* scalars and empty tensors */
    gpucore_tensor *scalar = make(ctx, GPUCORE_F32, 0, NULL);
    CHECK(gpucore_tensor_numel(scalar) == 1);
    float v = 0;
    CHECK_OK(gpucore_fill(scalar, 2.25, NULL));
    CHECK_OK(gpucore_copy_to_host(&v, 4, scalar));
    CHECK(v == 2.25f);
    gpucore_tensor_destroy(scalar);
    int64_t empty_shape[2] = {0, 7};
    gpucore_tensor *empty = make(ctx, GPUCORE_F16, 2, empty_shape);
    CHECK(gpucore_tensor_numel(empty) == 0 && gpucore_tensor_nbytes(empty) == 0);
    CHECK_OK(gpucore_fill(empty, 1.0, NULL));
    CHECK_OK(gpucore_random(empty, GPUCORE_NORMAL, 0, 1, 1, 0, NULL));
    CHECK_OK(gpucore_copy_to_host(NULL, 0, empty));
    gpucore_tensor_destroy(empty);
}

/* fill every dtype; the stored bits are the documented conversion of the value */
static void test_fill(gpucore_context *ctx)
{
    int64_t shape[1] = {1027}; /* not a multiple of any vector width */
    const double value = -3.140625;
    for (int dt = 0; dt <= GPUCORE_U8; dt++) {
        gpucore_tensor *t = make(ctx, (gpucore_dtype)dt, 1, shape);
        int64_t nb = gpucore_tensor_nbytes(t);
        unsigned char *host = malloc((size_t)nb);
        memset(host, 0xAB, (size_t)nb);
        CHECK_OK(gpucore_copy_from_host(t, host, nb)); /* poison */
        double v = (dt == GPUCORE_U8) ? 200.0 : (dt >= GPUCORE_I32 ? -7.9 : value);
        CHECK_OK(gpucore_fill(t, v, NULL));
        CHECK_OK(gpucore_copy_to_host(host, nb, t));
        int bad = 0;
        for (int64_t i = 0; i < shape[0]; i++) {
            switch (dt) {
            case GPUCORE_F32: bad += ((float *)host)[i] != (float)value; break;
            case GPUCORE_F64: bad += ((double *)host)[i] != value; break;
            case GPUCORE_F16: bad += ((uint16_t *)host)[i] != gpucore_f32_to_f16((float)value); break;
            case GPUCORE_BF16: bad += ((uint16_t *)host)[i] != gpucore_f32_to_bf16((float)value); break;
            case GPUCORE_I32: bad += ((int32_t *)host)[i] != -7; break;
            case GPUCORE_I64: bad += ((int64_t *)host)[i] != -7; break;
            case GPUCORE_U8: bad += host[i] != 200; break;
            }
        }
        CHECK(bad == 0);
        if (bad) fprintf(stderr, "  fill %s: %d wrong elements\n", gpucore_dtype_name((gpucore_dtype)dt), bad);
        free(host);
        gpucore_tensor_destroy(t);
    }
}

/* Views: slice/transpose/permute/reshape address the right elements; a fill of a
 * strided view leaves every other element (the guard) untouched. */
static void test_views(gpucore_context *ctx)
{
    const int64_t R = 7, C = 9;
    int64_t shape[2] = {R, C};
    gpucore_tensor *t = make(ctx, GPUCORE_F32, 2, shape);
    float host[63], back[63];
    for (int i = 0; i < R * C; i++) host[i] = (float)i;
    CHECK_OK(gpucore_copy_from_host(t, host, sizeof host));

    /* columns 2, 5, 8 of rows 1..5 */
    gpucore_tensor *rows = NULL, *sub = NULL;
    CHECK_OK(gpucore_tensor_slice(t, 0, 1, 6, 1, &rows));
    CHECK_OK(gpucore_tensor_slice(rows, -1, 2, 100, 3, &sub));
    int64_t s[2];
    CHECK_OK(gpucore_tensor_shape(sub, s));
    CHECK(s[0] == 5 && s[1] == 3);
    CHECK(gpucore_tensor_is_contiguous(sub) == 0);
    float got[15];
    CHECK_OK(gpucore_copy_to_host(got, sizeof got, sub));
    int bad = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) bad += got[i * 3 + j] != (float)((i + 1) * C + 2 + 3 * j);
    CHECK(bad == 0);

    /* fill through the strided view: exactly those 15 elements change */
    CHECK_OK(gpucore_fill(sub, -1.0, NULL));
    CHECK_OK(gpucore_copy_to_host(back, sizeof back, t));
    bad = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int in_view = r >= 1 && r < 6 && c >= 2 && (c - 2) % 3 == 0;
            bad += back[r * C + c] != (in_view ? -1.0f : (float)(r * C + c));
        }
    CHECK(bad == 0);
    /* write a strided view from the host */
    float vals[15];
    for (int i = 0; i < 15; i++) vals[i] = 100.0f + (float)i;
    CHECK_OK(gpucore_copy_from_host(sub, vals, sizeof vals));
    CHECK_OK(gpucore_copy_to_host(back, sizeof back, t));
    CHECK(back[1 * C + 2] == 100.0f && back[1 * C + 5] == 101.0f && back[5 * C + 8] == 114.0f && back[0] == 0.0f);

    /* transpose then copy into a contiguous tensor = matrix transpose */
    CHECK_OK(gpucore_copy_from_host(t, host, sizeof host));
    gpucore_tensor *tt = NULL;
    CHECK_OK(gpucore_tensor_transpose(t, 0, 1, &tt));
    int64_t tshape[2] = {C, R};
    gpucore_tensor *dense = make(ctx, GPUCORE_F32, 2, tshape);
    CHECK_OK(gpucore_copy(dense, tt, NULL));
    CHECK_OK(gpucore_copy_to_host(back, sizeof back, dense));
    bad = 0;
    for (int i = 0; i < C; i++)
        for (int j = 0; j < R; j++) bad += back[i * R + j] != host[j * C + i];
    CHECK(bad == 0);

    /* reshape of contiguous; reshape of a non-contiguous view is refused */
    gpucore_tensor *flat = NULL, *r3 = NULL;
    int64_t minus1[1] = {-1}, three[3] = {3, 3, 7};
    CHECK_OK(gpucore_tensor_reshape(t, 1, minus1, &flat));
    CHECK(gpucore_tensor_numel(flat) == 63);
    CHECK_OK(gpucore_tensor_reshape(dense, 3, three, &r3));
    CHECK_STATUS(gpucore_tensor_reshape(tt, 1, minus1, &r3), GPUCORE_ERR_NOT_CONTIGUOUS);

    /* permute 3-d */
    int64_t shape3[3] = {2, 3, 4};
    gpucore_tensor *a = make(ctx, GPUCORE_F64, 3, shape3), *p = NULL;
    double h3[24], b3[24];
    for (int i = 0; i < 24; i++) h3[i] = i * 0.5;
    CHECK_OK(gpucore_copy_from_host(a, h3, sizeof h3));
    int perm[3] = {2, 0, 1};
    CHECK_OK(gpucore_tensor_permute(a, perm, &p));
    CHECK_OK(gpucore_copy_to_host(b3, sizeof b3, p));
    bad = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) bad += b3[(k * 2 + i) * 3 + j] != h3[(i * 3 + j) * 4 + k];
    CHECK(bad == 0);

    /* the view keeps storage alive after its base is destroyed */
    CHECK_OK(gpucore_tensor_destroy(t));
    CHECK_OK(gpucore_copy_to_host(got, sizeof got, sub));
    CHECK(got[0] == 100.0f || got[0] == (float)(C + 2)); /* still readable: last written content */
    gpucore_tensor_destroy(rows);
    gpucore_tensor_destroy(sub);
    gpucore_tensor_destroy(tt);
    gpucore_tensor_destroy(dense);
    gpucore_tensor_destroy(flat);
    gpucore_tensor_destroy(r3);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(p);
}

/* device-to-device copies, async copies on a created stream, wrapped memory */
static void test_copies(gpucore_context *ctx)
{
    int64_t shape[1] = {100003};
    gpucore_tensor *a = make(ctx, GPUCORE_BF16, 1, shape), *b = make(ctx, GPUCORE_BF16, 1, shape);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)shape[0]), *g = malloc(sizeof(uint16_t) * (size_t)shape[0]);
    for (int64_t i = 0; i < shape[0]; i++) h[i] = (uint16_t)(i * 2654435761u >> 16);
    gpucore_stream *s = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &s));
    CHECK_OK(gpucore_copy_from_host_async(a, h, shape[0] * 2, s));
    CHECK_OK(gpucore_copy(b, a, s));
    memset(g, 0, sizeof(uint16_t) * (size_t)shape[0]);
    CHECK_OK(gpucore_copy_to_host_async(g, shape[0] * 2, b, s));
    CHECK_OK(gpucore_stream_synchronize(s));
    CHECK(memcmp(g, h, sizeof(uint16_t) * (size_t)shape[0]) == 0);
    CHECK_OK(gpucore_stream_destroy(s));
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    free(h);
    free(g);
}

/* as_strided: expand (stride 0), unsqueeze, a diagonal; bounds checked against the memory */
static void test_as_strided(gpucore_context *ctx)
{
    int64_t shape[2] = {3, 4};
    gpucore_tensor *t = make(ctx, GPUCORE_F32, 2, shape), *v = NULL, *row = NULL;
    float host[12], got[12];
    for (int i = 0; i < 12; i++) host[i] = (float)i;
    CHECK_OK(gpucore_copy_from_host(t, host, sizeof host));
    int64_t dshape[1] = {3}, dstride[1] = {5};
    CHECK_OK(gpucore_tensor_as_strided(t, 1, dshape, dstride, 0, &v)); /* diagonal 0, 5, 10 */
    CHECK_OK(gpucore_copy_to_host(got, 3 * 4, v));
    CHECK(got[0] == 0.0f && got[1] == 5.0f && got[2] == 10.0f);
    gpucore_tensor_destroy(v);
    CHECK_OK(gpucore_tensor_slice(t, 0, 1, 2, 1, &row));
    int64_t off = -1;
    CHECK_OK(gpucore_tensor_storage_offset(row, &off));
    CHECK(off == 4);
    int64_t eshape[2] = {3, 4}, estride[2] = {0, 1};
    CHECK_OK(gpucore_tensor_as_strided(row, 2, eshape, estride, off, &v)); /* row 1 broadcast to 3 rows */
    CHECK_OK(gpucore_copy_to_host(got, sizeof got, v));
    CHECK(got[0] == 4.0f && got[4] == 4.0f && got[11] == 7.0f);
    gpucore_tensor_destroy(v);
    int64_t too_far[1] = {13}, one[1] = {1}, neg[1] = {-1};
    CHECK_STATUS(gpucore_tensor_as_strided(t, 1, too_far, one, 0, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_as_strided(t, 1, one, one, 12, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_as_strided(t, 1, one, one, -1, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_as_strided(t, 1, dshape, neg, 4, &v), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK_STATUS(gpucore_tensor_as_strided(t, 1, dshape, NULL, 0, &v), GPUCORE_ERR_NULL_POINTER);
    gpucore_tensor_destroy(row);
    gpucore_tensor_destroy(t);
}

/* concat along dim 1 of [2,1], [2,3] (a transposed view), [2,0]: then bad inputs */
static void test_concat(gpucore_context *ctx)
{
    int64_t s21[2] = {2, 1}, s32[2] = {3, 2}, s20[2] = {2, 0}, s24[2] = {2, 4};
    gpucore_tensor *a = make(ctx, GPUCORE_F32, 2, s21), *b = make(ctx, GPUCORE_F32, 2, s32), *bt = NULL,
                   *e = make(ctx, GPUCORE_F32, 2, s20), *out = make(ctx, GPUCORE_F32, 2, s24);
    float ha[2] = {1, 2}, hb[6] = {10, 20, 11, 21, 12, 22}, got[8];
    CHECK_OK(gpucore_copy_from_host(a, ha, sizeof ha));
    CHECK_OK(gpucore_copy_from_host(b, hb, sizeof hb));
    CHECK_OK(gpucore_tensor_transpose(b, 0, 1, &bt)); /* [[10,11,12],[20,21,22]] */
    CHECK_OK(gpucore_fill(out, -1.0, NULL));
    gpucore_tensor *ins[3] = {a, bt, e};
    CHECK_OK(gpucore_concat(out, ins, 3, -1, NULL));
    CHECK_OK(gpucore_copy_to_host(got, sizeof got, out));
    const float want[8] = {1, 10, 11, 12, 2, 20, 21, 22};
    CHECK(memcmp(got, want, sizeof want) == 0);
    int64_t s23[2] = {2, 3};
    gpucore_tensor *short_out = make(ctx, GPUCORE_F32, 2, s23), *f64 = make(ctx, GPUCORE_F64, 2, s21);
    CHECK_STATUS(gpucore_concat(short_out, ins, 3, 1, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_concat(out, ins, 3, 0, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_concat(out, ins, 3, 2, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_concat(out, ins, 0, 1, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_concat(out, NULL, 2, 1, NULL), GPUCORE_ERR_NULL_POINTER);
    gpucore_tensor *mixed[2] = {f64, bt};
    CHECK_STATUS(gpucore_concat(out, mixed, 2, 1, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    gpucore_tensor *self[2] = {a, out};
    CHECK_STATUS(gpucore_concat(out, self, 2, 1, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    gpucore_tensor *all[] = {a, b, bt, e, out, short_out, f64};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) gpucore_tensor_destroy(all[i]);
}

static int wrapped_released;
static void release_wrapped(void *p) { wrapped_released += p != NULL; }

static void test_wrap_cpu(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    float buf[12];
    for (int i = 0; i < 12; i++) buf[i] = (float)i;
    int64_t shape[2] = {3, 4}, strides[2] = {1, 3}; /* column-major view of the buffer */
    gpucore_tensor *t = NULL, *v = NULL;
    CHECK_OK(gpucore_tensor_wrap(ctx, GPUCORE_F32, 2, shape, strides, buf, release_wrapped, buf, &t));
    float out[12];
    CHECK_OK(gpucore_copy_to_host(out, sizeof out, t));
    CHECK(out[1] == 3.0f && out[4] == 1.0f); /* [0][1] = buf[3], [1][0] = buf[1] */
    CHECK_OK(gpucore_fill(t, 5.0, NULL));
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK(buf[7] == 5.0f); /* written through to the caller's memory */
    CHECK_OK(gpucore_tensor_slice(t, 0, 0, 1, 1, &v));
    CHECK_OK(gpucore_tensor_destroy(t));
    CHECK(wrapped_released == 0); /* the view still holds it */
    CHECK_OK(gpucore_tensor_destroy(v));
    CHECK(wrapped_released == 1);
    CHECK_OK(gpucore_context_destroy(ctx));
}

/* random: statistics, determinism, offset arithmetic, and bitwise agreement with the CPU */
static void test_random(gpucore_context *ctx, gpucore_context *cpu)
{
    const int64_t n = 200001;
    int64_t shape[1] = {n};
    for (int dt = 0; dt < 4; dt++) {
        for (int dist = 0; dist < 2; dist++) {
            gpucore_tensor *t = make(ctx, (gpucore_dtype)dt, 1, shape), *r = make(cpu, (gpucore_dtype)dt, 1, shape);
            int64_t nb = gpucore_tensor_nbytes(t);
            unsigned char *a = malloc((size_t)nb), *b = malloc((size_t)nb);
            memset(a, 0xff, (size_t)nb);
            CHECK_OK(gpucore_copy_from_host(t, a, nb));
            double p0 = dist ? 2.0 : -1.0, p1 = dist ? 0.5 : 3.0;
            CHECK_OK(gpucore_random(t, (gpucore_distribution)dist, p0, p1, 0xC0FFEE, 17, NULL));
            CHECK_OK(gpucore_random(r, (gpucore_distribution)dist, p0, p1, 0xC0FFEE, 17, NULL));
            CHECK_OK(gpucore_copy_to_host(a, nb, t));
            CHECK_OK(gpucore_copy_to_host(b, nb, r));
            CHECK(memcmp(a, b, (size_t)nb) == 0); /* same bits as the CPU backend */
            double sum = 0, sq = 0, lo = 1e9, hi = -1e9;
            int nan = 0;
            for (int64_t i = 0; i < n; i++) {
                double x;
                switch (dt) {
                case GPUCORE_F32: x = ((float *)a)[i]; break;
                case GPUCORE_F64: x = ((double *)a)[i]; break;
                case GPUCORE_F16: x = gpucore_f16_to_f32(((uint16_t *)a)[i]); break;
                default: x = gpucore_bf16_to_f32(((uint16_t *)a)[i]); break;
                }
                nan += isnan(x);
                sum += x; sq += x * x;
                if (x < lo) lo = x;
                if (x > hi) hi = x;
            }
            double mean = sum / n, sd = sqrt(sq / n - mean * mean);
            CHECK(nan == 0);
            if (dist == 0) {
                CHECK(fabs(mean - 1.0) < 0.02 && fabs(sd - 4.0 / sqrt(12.0)) < 0.02);
                CHECK(lo >= -1.0 && hi <= 3.0);
            } else {
                CHECK(fabs(mean - 2.0) < 0.01 && fabs(sd - 0.5) < 0.01);
            }
            free(a);
            free(b);
            gpucore_tensor_destroy(t);
            gpucore_tensor_destroy(r);
        }
    }
    /* offsets: filling [0, 4k) then [4k, n) with the advanced offset equals one fill of n */
    int64_t k = 1000, full_shape[1] = {4 * k + 33};
    gpucore_tensor *whole = make(ctx, GPUCORE_F32, 1, full_shape), *first = NULL, *second = NULL;
    float *x = malloc(sizeof(float) * (size_t)full_shape[0]), *y = malloc(sizeof(float) * (size_t)full_shape[0]);
    CHECK_OK(gpucore_random(whole, GPUCORE_UNIFORM, 0, 1, 99, 5, NULL));
    CHECK_OK(gpucore_copy_to_host(x, full_shape[0] * 4, whole));
    CHECK_OK(gpucore_tensor_slice(whole, 0, 0, 4 * k, 1, &first));
    CHECK_OK(gpucore_tensor_slice(whole, 0, 4 * k, full_shape[0], 1, &second));
    CHECK_OK(gpucore_fill(whole, 0.0, NULL));
    CHECK_OK(gpucore_random(first, GPUCORE_UNIFORM, 0, 1, 99, 5, NULL));
    CHECK_OK(gpucore_random(second, GPUCORE_UNIFORM, 0, 1, 99, 5 + gpucore_random_offset_advance(4 * k, GPUCORE_UNIFORM), NULL));
    CHECK_OK(gpucore_copy_to_host(y, full_shape[0] * 4, whole));
    CHECK(memcmp(x, y, sizeof(float) * (size_t)full_shape[0]) == 0);
    /* a different seed or offset gives different numbers */
    CHECK_OK(gpucore_random(whole, GPUCORE_UNIFORM, 0, 1, 100, 5, NULL));
    CHECK_OK(gpucore_copy_to_host(y, full_shape[0] * 4, whole));
    CHECK(memcmp(x, y, sizeof(float) * (size_t)full_shape[0]) != 0);
    CHECK(gpucore_random_offset_advance(5, GPUCORE_UNIFORM) == 2 && gpucore_random_offset_advance(5, GPUCORE_NORMAL) == 3);
    free(x);
    free(y);
    gpucore_tensor_destroy(first);
    gpucore_tensor_destroy(second);
    gpucore_tensor_destroy(whole);
}

/* gpucore_tensor_destroy_many: every valid handle goes (views and bases, NULL entries skipped),
 * also after a bad one, and the first bad one is named; the allocator sees them all freed. */
static void test_destroy_many(gpucore_context *ctx)
{
    gpucore_memory_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &before));
    int64_t shape[2] = {3, 7};
    gpucore_tensor *ts[6] = {0};
    for (int i = 0; i < 4; i++) ts[i] = make(ctx, GPUCORE_F32, 2, shape);
    CHECK_OK(gpucore_tensor_transpose(ts[0], 0, 1, &ts[5])); /* a view beside its base */
    CHECK_OK(gpucore_tensor_destroy_many(ts, 6));             /* ts[4] is NULL */
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &after));
    CHECK(after.allocated_bytes == before.allocated_bytes);
    CHECK(after.allocated_blocks == before.allocated_blocks);

    /* a destroyed handle at index 1 and a repeat at 3: reported, and the valid ones still go */
    gpucore_tensor *dead = make(ctx, GPUCORE_F32, 2, shape);
    CHECK_OK(gpucore_tensor_destroy(dead));
    gpucore_tensor *a = make(ctx, GPUCORE_F32, 2, shape), *b = make(ctx, GPUCORE_F32, 2, shape);
    gpucore_tensor *mixed[4] = {a, dead, b, a};
    CHECK_STATUS(gpucore_tensor_destroy_many(mixed, 4), GPUCORE_ERR_INVALID_HANDLE);
    CHECK(strstr(gpucore_last_error(), "tensors[1]") != NULL);
    CHECK(gpucore_tensor_ndim(a) == -1 && gpucore_tensor_ndim(b) == -1);
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &after));
    CHECK(after.allocated_bytes == before.allocated_bytes);

    CHECK_STATUS(gpucore_tensor_destroy_many(NULL, 2), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_destroy_many(ts, -1), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_tensor_destroy_many(NULL, 0));
}

int main(void)
{
    const char *devices[4];
    int nd = test_devices(devices, 4);
    gpucore_context *cpu = NULL;
    CHECK_OK(gpucore_context_create("cpu", &cpu));
    for (int d = 0; d < nd; d++) {
        gpucore_context *ctx = NULL;
        CHECK_OK(gpucore_context_create(devices[d], &ctx));
        if (!ctx) continue;
        printf("backend %s\n", devices[d]);
        test_create_and_getters(ctx);
        test_fill(ctx);
        test_views(ctx);
        test_copies(ctx);
        test_as_strided(ctx);
        test_concat(ctx);
        test_random(ctx, cpu);
        test_destroy_many(ctx);
        CHECK_OK(gpucore_context_destroy(ctx));
    }
    test_wrap_cpu();
    CHECK_OK(gpucore_context_destroy(cpu));
    return check_finish("test_tensor");
}
