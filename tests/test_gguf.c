/*
 * test_gguf.c — the GGUF reader on files this test writes: every metadata value type
 * (scalars, arrays of numbers and of strings), tensor infos, general.alignment, F32 / F16 /
 * BF16 / F64 tensors read into f32, bf16 and f16 on every backend present; and bad files,
 * each refused with a status and a message and no handle, without a crash or a huge
 * allocation: truncated at every length, bad magic, version 1, big-endian, huge key/value,
 * tensor, array and string counts, unknown value and tensor types, nested arrays, a bool
 * of 2, dims that overflow, a first dim that is not whole blocks, a tensor past the end,
 * misaligned or overlapping tensors, duplicate keys and names, a bad alignment; and bad
 * arguments (wrong index, wrong type, wrong dst shape, a closed handle); and a model refused from a
 * file without its architecture's metadata, leaving nothing allocated.
 */
#include <stdint.h>
#include <unistd.h>
#include "check.h"
#include "numeric.h"

static char dir[256];

typedef struct buf { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void u32(buf *b, uint32_t v) { put(b, &v, 4); } /* the test runs on little-endian hosts */
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }

/* What a variant of the good file breaks. */
enum bad {
    GOOD, BAD_MAGIC, BAD_VERSION1, BAD_BIG_ENDIAN, BAD_VERSION9, HUGE_KV_COUNT, HUGE_TENSOR_COUNT, HUGE_ARRAY,
    HUGE_STRING, BAD_VALUE_TYPE, BAD_ELEM_TYPE, NESTED_ARRAY, BAD_BOOL, BAD_TENSOR_TYPE, DIMS_OVERFLOW, ZERO_DIMS,
    FIVE_DIMS, PARTIAL_BLOCK, PAST_END, MISALIGNED, OVERLAP, DUP_KEY, DUP_TENSOR, BAD_ALIGNMENT, ALIGNMENT_TYPE,
    N_BAD
};

static const float w_vals[6] = {1.5f, -2.25f, 3.0f, 1e-3f, -0.0f, 65504.0f};
static const double d_vals[2] = {0.1, -7.0};

/* The file: 9 key/values, tensors w F32 [2,3] (dims {3, 2}), h F16 {4}, b BF16 {2, 2}, d F64 {2}. */
static buf build(enum bad bad)
{
    buf b = {0};
    u32(&b, 0x46554747u); /* "GGUF" */
    if (bad == BAD_MAGIC) b.p[0] = 'X';
    u32(&b, bad == BAD_VERSION1 ? 1 : bad == BAD_BIG_ENDIAN ? 0x03000000u : bad == BAD_VERSION9 ? 9 : 3);
    int ntens = 4;
    u64(&b, bad == HUGE_TENSOR_COUNT ? (uint64_t)1 << 62 : (uint64_t)ntens);
    u64(&b, bad == HUGE_KV_COUNT ? UINT64_MAX / 2 : 9 + (bad == DUP_KEY));
    str(&b, "general.architecture"); u32(&b, 8); str(&b, "llama");
    str(&b, "general.alignment"); u32(&b, bad == ALIGNMENT_TYPE ? 10 : 4);
    if (bad == ALIGNMENT_TYPE) u64(&b, 64); else u32(&b, bad == BAD_ALIGNMENT ? 48 : 64);
    str(&b, "tokens"); u32(&b, 9); u32(&b, bad == NESTED_ARRAY ? 9 : bad == BAD_ELEM_TYPE ? 13 : 8);
    u64(&b, bad == HUGE_ARRAY ? (uint64_t)1 << 60 : 3);
    if (bad == HUGE_STRING) u64(&b, (uint64_t)1 << 50); else str(&b, "a");
    str(&b, "bb"); str(&b, "");
    str(&b, "ids"); u32(&b, 9); u32(&b, 5); u64(&b, 3); u32(&b, (uint32_t)-5); u32(&b, 7); u32(&b, 1u << 31);
    str(&b, "eps"); u32(&b, bad == BAD_VALUE_TYPE ? 13 : 6); { float e = 1e-5f; put(&b, &e, 4); }
    str(&b, "flag"); u32(&b, 7); u8(&b, bad == BAD_BOOL ? 2 : 1);
    str(&b, "big"); u32(&b, 10); u64(&b, (uint64_t)1 << 40);
    str(&b, "neg"); u32(&b, 1); u8(&b, 0xF6);
    str(&b, "pi"); u32(&b, 12); { double p = 3.141592653589793; put(&b, &p, 8); }
    if (bad == DUP_KEY) { str(&b, "eps"); u32(&b, 4); u32(&b, 1); }
    /* tensor infos */
    str(&b, "w"); u32(&b, bad == ZERO_DIMS ? 0 : bad == FIVE_DIMS ? 5 : 2);
    u64(&b, bad == DIMS_OVERFLOW ? (uint64_t)1 << 40 : 3); u64(&b, bad == DIMS_OVERFLOW ? (uint64_t)1 << 40 : 2);
    u32(&b, bad == BAD_TENSOR_TYPE ? 5 : 0);
    u64(&b, bad == PAST_END ? 4096 : bad == MISALIGNED ? 4 : 0);
    str(&b, bad == DUP_TENSOR ? "w" : "h"); u32(&b, 1); u64(&b, 4); u32(&b, 1); u64(&b, bad == OVERLAP ? 0 : 64);
    str(&b, "b"); u32(&b, 2); u64(&b, 2); u64(&b, 2); u32(&b, 30); u64(&b, 128);
    str(&b, "q"); u32(&b, 1); u64(&b, bad == PARTIAL_BLOCK ? 48 : 64); u32(&b, 8); u64(&b, 192);
    while (b.n % 64) u8(&b, 0);
    /* data: w at 0 (24 bytes), h at 64 (8), b at 128 (8), q (Q8_0, 2 blocks of 34) at 192 */
    size_t base = b.n;
    uint8_t zero[64 * 5] = {0};
    put(&b, zero, sizeof zero - 60);
    memcpy(b.p + base, w_vals, sizeof w_vals);
    uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7bff}; /* 1, -2, the smallest subnormal, 65504 */
    memcpy(b.p + base + 64, h, 8);
    uint16_t bf[4] = {0x3f80, 0x4049, 0xbf00, 0x0000}; /* 1, 3.140625, -0.5, 0 */
    memcpy(b.p + base + 128, bf, 8);
    (void)d_vals;
    return b;
}

static void write_file(const char *name, const void *d, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
}

static gpucore_status open_bytes(const void *d, size_t n, gpucore_gguf **out)
{
    write_file("t.gguf", d, n);
    char p[512];
    snprintf(p, sizeof p, "%s/t.gguf", dir);
    return gpucore_gguf_open(p, out);
}

static void test_metadata(void)
{
    buf b = build(GOOD);
    gpucore_gguf *f = NULL;
    CHECK_OK(open_bytes(b.p, b.n, &f));
    free(b.p);
    if (!f) return;
    int64_t ver, al, off;
    CHECK_OK(gpucore_gguf_file_info(f, &ver, &al, &off));
    CHECK(ver == 3 && al == 64 && off % 64 == 0);
    CHECK(gpucore_gguf_kv_count(f) == 9);
    const char *key, *s;
    int type, et;
    int64_t count, v, len;
    double x;
    CHECK_OK(gpucore_gguf_kv_info(f, 0, &key, &type, &et, &count));
    CHECK(!strcmp(key, "general.architecture") && type == GPUCORE_GGUF_STRING && et == type && count == 1);
    CHECK_OK(gpucore_gguf_kv_string(f, 0, 0, &s, &len));
    CHECK(!strcmp(s, "llama") && len == 5);
    int64_t t = gpucore_gguf_kv_find(f, "tokens");
    CHECK_OK(gpucore_gguf_kv_info(f, t, NULL, &type, &et, &count));
    CHECK(type == GPUCORE_GGUF_ARRAY && et == GPUCORE_GGUF_STRING && count == 3);
    CHECK_OK(gpucore_gguf_kv_string(f, t, 1, &s, &len));
    CHECK(!strcmp(s, "bb") && len == 2);
    CHECK_OK(gpucore_gguf_kv_string(f, t, 2, &s, &len));
    CHECK(!strcmp(s, "") && len == 0);
    int64_t ids = gpucore_gguf_kv_find(f, "ids");
    CHECK_OK(gpucore_gguf_kv_int(f, ids, 0, &v));
    CHECK(v == -5);
    CHECK_OK(gpucore_gguf_kv_int(f, ids, 2, &v));
    CHECK(v == INT32_MIN);
    const void *data;
    CHECK_OK(gpucore_gguf_kv_data(f, ids, &data, &len));
    CHECK(len == 12 && ((const int32_t *)data)[1] == 7);
    CHECK_OK(gpucore_gguf_kv_float(f, gpucore_gguf_kv_find(f, "eps"), 0, &x));
    CHECK(x == (double)1e-5f);
    CHECK_OK(gpucore_gguf_kv_float(f, gpucore_gguf_kv_find(f, "pi"), 0, &x));
    CHECK(x == 3.141592653589793);
    CHECK_OK(gpucore_gguf_kv_int(f, gpucore_gguf_kv_find(f, "flag"), 0, &v));
    CHECK(v == 1);
    CHECK_OK(gpucore_gguf_kv_int(f, gpucore_gguf_kv_find(f, "big"), 0, &v));
    CHECK(v == (int64_t)1 << 40);
    CHECK_OK(gpucore_gguf_kv_int(f, gpucore_gguf_kv_find(f, "neg"), 0, &v));
    CHECK(v == -10);
    CHECK(gpucore_gguf_kv_find(f, "absent") == -1);
    /* wrong type, index, element */
    CHECK_STATUS(gpucore_gguf_kv_int(f, 0, 0, &v), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_gguf_kv_string(f, ids, 0, &s, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_gguf_kv_float(f, ids, 0, &x), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_gguf_kv_data(f, t, &data, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_gguf_kv_int(f, ids, 3, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_gguf_kv_info(f, 9, &key, NULL, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    /* tensor infos */
    CHECK(gpucore_gguf_tensor_count(f) == 4);
    int nd;
    int64_t dims[4], o, nb;
    const char *name;
    CHECK_OK(gpucore_gguf_tensor_info(f, 0, &name, &type, &nd, dims, &o, &nb));
    CHECK(!strcmp(name, "w") && type == 0 && nd == 2 && dims[0] == 3 && dims[1] == 2 && o == 0 && nb == 24);
    CHECK_OK(gpucore_gguf_tensor_info(f, 3, &name, &type, &nd, dims, &o, &nb));
    CHECK(!strcmp(name, "q") && type == 8 && nd == 1 && dims[0] == 64 && o == 192 && nb == 68);
    CHECK(gpucore_gguf_tensor_find(f, "b") == 2 && gpucore_gguf_tensor_find(f, "zz") == -1);
    CHECK(!strcmp(gpucore_gguf_type_name(14), "Q6_K") && gpucore_gguf_type_name(4) == NULL);
    CHECK_STATUS(gpucore_gguf_tensor_info(f, 4, &name, NULL, NULL, NULL, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_gguf_close(f));
    CHECK_STATUS(gpucore_gguf_kv_info(f, 0, &key, NULL, NULL, NULL), GPUCORE_ERR_INVALID_HANDLE);
    CHECK(gpucore_gguf_kv_count(f) == -1 && gpucore_gguf_tensor_count(NULL) == -1);
    CHECK_STATUS(gpucore_gguf_close(f), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_OK(gpucore_gguf_close(NULL));
    /* version 2 has the same layout (64-bit counts) */
    b = build(GOOD);
    b.p[4] = 2;
    CHECK_OK(open_bytes(b.p, b.n, &f));
    free(b.p);
    if (f) {
        CHECK_OK(gpucore_gguf_file_info(f, &ver, NULL, NULL));
        CHECK(ver == 2 && gpucore_gguf_tensor_count(f) == 4);
        gpucore_gguf_close(f);
    }
}

static double host_value(const void *p, gpucore_dtype dt, int64_t k)
{
    if (dt == GPUCORE_F32) return ((const float *)p)[k];
    uint16_t h = ((const uint16_t *)p)[k];
    return dt == GPUCORE_BF16 ? gpucore_bf16_to_f32(h) : gpucore_f16_to_f32(h);
}

static float round_to(float v, gpucore_dtype dt)
{
    if (dt == GPUCORE_BF16) return gpucore_bf16_to_f32(gpucore_f32_to_bf16(v));
    if (dt == GPUCORE_F16) return gpucore_f16_to_f32(gpucore_f32_to_f16(v));
    return v;
}

static void test_read(gpucore_context *ctx)
{
    buf b = build(GOOD);
    gpucore_gguf *f = NULL;
    CHECK_OK(open_bytes(b.p, b.n, &f));
    free(b.p);
    if (!f) return;
    const float want_h[4] = {1.0f, -2.0f, 5.9604644775390625e-08f, 65504.0f};
    const float want_b[4] = {1.0f, 3.140625f, -0.5f, 0.0f};
    const gpucore_dtype dts[3] = {GPUCORE_F32, GPUCORE_BF16, GPUCORE_F16};
    for (int di = 0; di < 3; di++) {
        gpucore_dtype dt = dts[di];
        for (int ti = 0; ti < 3; ti++) {
            gpucore_tensor *t = NULL;
            CHECK_OK(gpucore_gguf_load_tensor(f, ctx, ti, dt, &t));
            if (!t) continue;
            int64_t shape[4];
            gpucore_tensor_shape(t, shape);
            CHECK(ti != 0 || (gpucore_tensor_ndim(t) == 2 && shape[0] == 2 && shape[1] == 3));
            uint8_t host[64];
            CHECK_OK(gpucore_copy_to_host(host, gpucore_tensor_nbytes(t), t));
            const float *want = ti == 0 ? w_vals : ti == 1 ? want_h : want_b;
            int n = ti == 0 ? 6 : 4, same = 1;
            for (int k = 0; k < n; k++) {
                double got = host_value(host, dt, k), exp = round_to(want[k], dt);
                same &= got == exp && signbit(got) == signbit(exp);
            }
            if (!same) fprintf(stderr, "FAIL: tensor %d read as %s differs\n", ti, gpucore_dtype_name(dt));
            CHECK(same);
            gpucore_tensor_destroy(t);
        }
    }
    /* wrong dst shape / dtype; an undecoded type names itself */
    int64_t s23[2] = {3, 2}, s6[1] = {6};
    gpucore_tensor *t = NULL, *ti = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s23, &t));
    CHECK_STATUS(gpucore_gguf_read(f, 0, t), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 1, s6, &ti));
    CHECK_STATUS(gpucore_gguf_read(f, 0, ti), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_gguf_read(f, 0, NULL), GPUCORE_ERR_NULL_POINTER);
    gpucore_tensor_destroy(t);
    gpucore_tensor_destroy(ti);
    /* Q8_0 blocks through the library's decoder: zero scales give zeros (values: python/tests/test_gguf_format.py) */
    gpucore_tensor *q = NULL;
    CHECK_OK(gpucore_gguf_load_tensor(f, ctx, 3, GPUCORE_F32, &q));
    float qv[64];
    for (int k = 0; k < 64; k++) qv[k] = 1.0f;
    if (q) CHECK_OK(gpucore_copy_to_host(qv, sizeof qv, q));
    int zeros = 1;
    for (int k = 0; k < 64; k++) zeros &= qv[k] == 0.0f;
    CHECK(zeros);
    gpucore_tensor_destroy(q);
    CHECK_STATUS(gpucore_gguf_load_tensor(f, ctx, 0, GPUCORE_I32, &q), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK(q == NULL);
    gpucore_gguf_close(f);
}

static void test_bad_files(void)
{
    static const char *const names[N_BAD] = {
        "good", "bad magic", "version 1", "big-endian", "version 9", "huge kv count", "huge tensor count", "huge array",
        "huge string", "bad value type", "bad element type", "nested array", "bool 2", "bad tensor type",
        "dims overflow", "0 dims", "5 dims", "partial block", "past end", "misaligned", "overlap", "duplicate key",
        "duplicate tensor", "alignment 48", "alignment uint64"};
    for (int k = 1; k < N_BAD; k++) {
        buf b = build((enum bad)k);
        gpucore_gguf *f = (gpucore_gguf *)&b; /* must be cleared */
        gpucore_clear_error();
        gpucore_status st = open_bytes(b.p, b.n, &f);
        int ok = (st == GPUCORE_ERR_CORRUPT_FILE || st == GPUCORE_ERR_NOT_SUPPORTED) && f == NULL &&
                 strstr(gpucore_last_error(), "t.gguf");
        if (!ok) fprintf(stderr, "FAIL: bad file \"%s\" -> %s: %s\n", names[k], gpucore_status_string(st),
                         gpucore_last_error());
        CHECK(ok);
        printf("%-18s -> %s\n", names[k], gpucore_last_error());
        if (k == BAD_BIG_ENDIAN) CHECK(strstr(gpucore_last_error(), "big-endian") != NULL);
        if (k == BAD_MAGIC) CHECK(strstr(gpucore_last_error(), "magic") != NULL);
        if (k == DUP_TENSOR) CHECK(strstr(gpucore_last_error(), "twice") != NULL);
        if (st == GPUCORE_OK) gpucore_gguf_close(f);
        free(b.p);
    }
    /* every truncation of the good file is refused */
    buf b = build(GOOD);
    int all = 1;
    for (size_t n = 0; n < b.n; n++) {
        gpucore_gguf *f = NULL;
        gpucore_status st = open_bytes(b.p, n, &f);
        if (st != GPUCORE_ERR_CORRUPT_FILE || f) {
            fprintf(stderr, "FAIL: the file cut to %zu bytes -> %s\n", n, gpucore_status_string(st));
            all = 0;
            gpucore_gguf_close(f);
        }
    }
    CHECK(all);
    /* random byte flips: accepted or refused, never a crash */
    uint64_t seed = 12345;
    int refused = 0;
    for (int it = 0; it < 2000; it++) {
        buf c = {0};
        put(&c, b.p, b.n);
        for (int m = 0; m < 3; m++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            c.p[(seed >> 33) % c.n] ^= (uint8_t)(1u << ((seed >> 20) & 7));
        }
        gpucore_gguf *f = NULL;
        gpucore_status st = open_bytes(c.p, c.n, &f);
        refused += st != GPUCORE_OK;
        CHECK((st == GPUCORE_OK) == (f != NULL));
        gpucore_gguf_close(f);
        free(c.p);
    }
    CHECK(refused > 0);
    free(b.p);
    gpucore_gguf *f = NULL;
    char p[512];
    snprintf(p, sizeof p, "%s/absent.gguf", dir);
    CHECK_STATUS(gpucore_gguf_open(p, &f), GPUCORE_ERR_IO);
    CHECK_STATUS(gpucore_gguf_open(dir, &f), GPUCORE_ERR_IO);
    CHECK_STATUS(gpucore_gguf_open(NULL, &f), GPUCORE_ERR_NULL_POINTER);
}

/* A model from a GGUF file whose metadata lacks what the architecture needs: refused by name, nothing left
 * allocated (the loader's tests against transformers: python/torch_tests/test_gguf_models.py). */
static void test_model_refused(gpucore_context *ctx)
{
    buf b = build(GOOD);
    write_file("m.gguf", b.p, b.n);
    free(b.p);
    char p[512];
    snprintf(p, sizeof p, "%s/m.gguf", dir);
    int64_t before = test_allocated_bytes(ctx);
    gpucore_lm *lm = (gpucore_lm *)&b;
    gpucore_clear_error();
    CHECK(gpucore_lm_create(ctx, p, -1, &lm) == GPUCORE_ERR_CORRUPT_FILE && lm == NULL);
    CHECK(strstr(gpucore_last_error(), "llama.block_count") != NULL);
    CHECK(test_allocated_bytes(ctx) == before);
    unlink(p);
}

static void on_device(gpucore_context *ctx)
{
    test_read(ctx);
    test_model_refused(ctx);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/test_gguf_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_metadata();
    test_bad_files();
    const device_test_fn fns[] = {on_device};
    for_each_device(fns, 1);
    char p[512];
    snprintf(p, sizeof p, "%s/t.gguf", dir);
    unlink(p);
    rmdir(dir);
    return check_finish("test_gguf");
}
