/*
 * gguf_parse.c — the GGUF header parser over bytes in memory (see gguf.h for the layout).
 * Every count, length and dimension is checked against the bytes the file really has
 * before anything is allocated for it, so a corrupt or hostile file is refused with a
 * message naming the field and its offset, never a crash or an allocation sized by an
 * unchecked number. Also the ggml type table (block sizes) the checks use.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/gguf.h"

/* ---- ggml types: elements per block, bytes per block (ggml's type_traits) ---- */

typedef struct ggml_type_fact { const char *name; int64_t block, bytes; } ggml_type_fact;

static const ggml_type_fact ggml_types[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},      [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},  [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},        [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};
#define N_GGML_TYPES ((int)(sizeof ggml_types / sizeof ggml_types[0]))

int64_t gguf_type_block(int t) { return t >= 0 && t < N_GGML_TYPES ? ggml_types[t].block : 0; }
int64_t gguf_type_block_bytes(int t) { return t >= 0 && t < N_GGML_TYPES ? ggml_types[t].bytes : 0; }
const char *gguf_type_name(int t) { return t >= 0 && t < N_GGML_TYPES ? ggml_types[t].name : NULL; }

/* ---- value types ---- */

enum { V_U8, V_I8, V_U16, V_I16, V_U32, V_I32, V_F32, V_BOOL, V_STRING, V_ARRAY, V_U64, V_I64, V_F64, V_COUNT };
static const int64_t value_size[V_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* ---- the cursor ---- */

typedef struct cursor {
    const uint8_t *b;
    uint64_t avail, size, pos;   /* pos <= size always */
    int *need_more;
    gpucore_status st;
} cursor;

static int fail(cursor *c, gpucore_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cursor *c, gpucore_status st, const char *fmt, ...)
{
    if (c->st) return 0;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = gpucore_set_error(st, "gguf: %s", msg);
    return 0;
}

/* n more bytes are there to read (else the error, or *need_more when only the buffer ends). */
static int need(cursor *c, uint64_t n, const char *what)
{
    if (c->st) return 0;
    if (n <= c->size - c->pos) {
        if (c->pos + n <= c->avail) return 1;
        *c->need_more = 1;
        c->st = GPUCORE_ERR_CORRUPT_FILE;
        return 0;
    }
    return fail(c, GPUCORE_ERR_CORRUPT_FILE, "%s at offset %" PRIu64 " needs %" PRIu64 " bytes but the file has %" PRIu64
                " left (truncated or corrupt file)", what, c->pos, n, c->size - c->pos);
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t rd(cursor *c, int n, const char *what)
{
    if (!need(c, (uint64_t)n, what)) return 0;
    uint64_t v = le(c->b + c->pos, n);
    c->pos += (uint64_t)n;
    return v;
}

/* A string (u64 length, bytes) copied with a NUL into dst (len + 1 bytes), or only measured
 * when dst is NULL. Returns its length; 0 after an error. */
static uint64_t rd_string(cursor *c, char *dst, const char *what)
{
    uint64_t len = rd(c, 8, what);
    if (!need(c, len, what)) return 0;
    if (dst) {
        memcpy(dst, c->b + c->pos, (size_t)len);
        dst[len] = '\0';
    }
    c->pos += len;
    return len;
}

static char *new_string(cursor *c, const char *what)
{
    uint64_t at = c->pos;
    uint64_t len = rd_string(c, NULL, what);
    if (c->st) return NULL;
    char *s = malloc((size_t)len + 1); /* len was checked against the file's bytes */
    if (!s) { fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory for a %" PRIu64 "-byte %s", len, what); return NULL; }
    c->pos = at;
    rd_string(c, s, what);
    return s;
}

/* count strings into kv->strs / kv->lens, one block for the text. */
static void rd_strings(cursor *c, gguf_kv *kv, int64_t count)
{
    uint64_t start = c->pos, total = 0;
    for (int64_t i = 0; i < count && !c->st; i++) total += rd_string(c, NULL, "a string value") + 1;
    if (c->st) return;
    kv->strs = calloc((size_t)(count ? count : 1), sizeof *kv->strs);
    kv->lens = calloc((size_t)(count ? count : 1), sizeof *kv->lens);
    char *block = malloc((size_t)(total ? total : 1));
    if (!kv->strs || !kv->lens || !block) {
        free(block);
        fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory for the %" PRId64 " strings of \"%.100s\"", count, kv->key);
        return;
    }
    c->pos = start;
    char *p = block;
    for (int64_t i = 0; i < count; i++) {
        kv->strs[i] = p;
        kv->lens[i] = (int64_t)rd_string(c, p, "a string value");
        p += kv->lens[i] + 1;
    }
    if (!count) kv->strs[0] = block;
}

static void rd_value(cursor *c, gguf_kv *kv)
{
    uint64_t at = c->pos;
    uint32_t t = (uint32_t)rd(c, 4, "a value type");
    if (c->st) return;
    if (t >= V_COUNT) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "key \"%.100s\" has value type %u at offset %" PRIu64 ", which GGUF does not "
             "define (0-12)", kv->key, t, at);
        return;
    }
    kv->type = kv->elem_type = (int32_t)t;
    kv->count = 1;
    if (t == V_ARRAY) {
        at = c->pos;
        uint32_t et = (uint32_t)rd(c, 4, "an array's element type");
        uint64_t n = rd(c, 8, "an array's length");
        if (c->st) return;
        if (et >= V_COUNT) {
            fail(c, GPUCORE_ERR_CORRUPT_FILE, "array \"%.100s\" has element type %u at offset %" PRIu64 ", which GGUF "
                 "does not define (0-12)", kv->key, et, at);
            return;
        }
        if (et == V_ARRAY) {
            fail(c, GPUCORE_ERR_NOT_SUPPORTED, "array \"%.100s\" holds arrays; nested arrays are not supported", kv->key);
            return;
        }
        /* a string takes at least its 8-byte length */
        uint64_t min = et == V_STRING ? 8 : (uint64_t)value_size[et];
        if (n > (c->size - c->pos) / min) {
            fail(c, GPUCORE_ERR_CORRUPT_FILE, "array \"%.100s\" claims %" PRIu64 " elements but only %" PRIu64 " bytes "
                 "follow (corrupt length)", kv->key, n, c->size - c->pos);
            return;
        }
        kv->elem_type = (int32_t)et;
        kv->count = (int64_t)n;
    }
    if (kv->elem_type == V_STRING) { rd_strings(c, kv, kv->count); return; }
    uint64_t bytes = (uint64_t)kv->count * (uint64_t)value_size[kv->elem_type];
    if (!need(c, bytes, "a value")) return;
    kv->values = malloc((size_t)(bytes ? bytes : 1));
    if (!kv->values) { fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory for \"%.100s\"", kv->key); return; }
    memcpy(kv->values, c->b + c->pos, (size_t)bytes);
    if (kv->elem_type == V_BOOL)
        for (int64_t i = 0; i < kv->count; i++)
            if (((uint8_t *)kv->values)[i] > 1) {
                fail(c, GPUCORE_ERR_CORRUPT_FILE, "bool \"%.100s\" holds %u at offset %" PRIu64 " (0 or 1 expected)",
                     kv->key, ((uint8_t *)kv->values)[i], c->pos + (uint64_t)i);
                return;
            }
    c->pos += bytes;
}

/* ---- duplicates, by sorting pointers to names ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static const char *first_duplicate(char **names, int64_t n)
{
    if (n < 2) return NULL;
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int64_t i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

static int cmp_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(gguf_tensor *const *)a, *y = *(gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* ---- the sections ---- */

static void rd_kvs(cursor *c, gguf_header *h, uint64_t n)
{
    /* a key/value takes at least 8 (key length) + 4 (type) + 1 (smallest value) bytes */
    if (n > (c->size - c->pos) / 13) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "the header claims %" PRIu64 " key/values but the file has only %" PRIu64
             " bytes for them (corrupt count)", n, c->size - c->pos);
        return;
    }
    h->kvs = calloc((size_t)(n ? n : 1), sizeof *h->kvs);
    if (!h->kvs) { fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory for %" PRIu64 " key/values", n); return; }
    for (uint64_t i = 0; i < n && !c->st; i++) {
        gguf_kv *kv = &h->kvs[h->n_kv];
        kv->key = new_string(c, "a key");
        if (c->st) break;
        h->n_kv++;
        rd_value(c, kv);
    }
    if (c->st) return;
    char **keys = malloc((size_t)(h->n_kv ? h->n_kv : 1) * sizeof *keys);
    if (!keys) { fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory"); return; }
    for (int64_t i = 0; i < h->n_kv; i++) keys[i] = h->kvs[i].key;
    const char *dup = first_duplicate(keys, h->n_kv);
    if (dup) fail(c, GPUCORE_ERR_CORRUPT_FILE, "the key \"%.100s\" appears twice", dup);
    free(keys);
}

static void rd_alignment(cursor *c, gguf_header *h)
{
    h->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < h->n_kv; i++) {
        const gguf_kv *kv = &h->kvs[i];
        if (strcmp(kv->key, "general.alignment")) continue;
        uint32_t a = 0;
        if (kv->type == V_U32) a = (uint32_t)le((const uint8_t *)kv->values, 4);
        if (kv->type != V_U32 || a == 0 || (a & (a - 1)))
            fail(c, GPUCORE_ERR_CORRUPT_FILE, "general.alignment must be a uint32 power of two%s",
                 kv->type == V_U32 ? "" : " (it has another type)");
        h->alignment = a;
    }
}

static void rd_tensor(cursor *c, gguf_header *h, gguf_tensor *t)
{
    uint64_t at = c->pos;
    uint32_t nd = (uint32_t)rd(c, 4, "a tensor's dimension count");
    if (c->st) return;
    if (nd < 1 || nd > GGUF_MAX_DIMS) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\" has %u dimensions at offset %" PRIu64 " (1 to 4 expected)",
             t->name, nd, at);
        return;
    }
    t->ndim = (int32_t)nd;
    int64_t numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v = rd(c, 8, "a tensor dimension");
        if (c->st) return;
        if (v > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (int64_t)v, &numel)) {
            fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\": its dimensions overflow 64 bits (dimension %u is %"
                 PRIu64 ")", t->name, d, v);
            return;
        }
        t->dims[d] = (int64_t)v;
    }
    uint32_t type = (uint32_t)rd(c, 4, "a tensor type");
    t->offset = rd(c, 8, "a tensor offset");
    if (c->st) return;
    int64_t block = gguf_type_block((int)type), bb = gguf_type_block_bytes((int)type);
    if (!block) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\" has ggml type %u, which is not a known type", t->name, type);
        return;
    }
    t->type = (int32_t)type;
    if (t->dims[0] % block) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\" is %s but its first dimension %" PRId64 " is not a multiple "
             "of the block size %" PRId64, t->name, gguf_type_name(t->type), t->dims[0], block);
        return;
    }
    int64_t nbytes;
    if (__builtin_mul_overflow(numel / block, bb, &nbytes)) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\": its byte size overflows 64 bits", t->name);
        return;
    }
    t->nbytes = (uint64_t)nbytes;
    if (t->offset % h->alignment)
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\" starts at data offset %" PRIu64 ", not a multiple of the "
             "alignment %" PRIu64, t->name, t->offset, h->alignment);
}

static void rd_tensors(cursor *c, gguf_header *h, uint64_t n)
{
    /* a tensor info takes at least 8 (name length) + 4 + 8 (one dimension) + 4 + 8 bytes */
    if (n > (c->size - c->pos) / 32) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "the header claims %" PRIu64 " tensors but the file has only %" PRIu64
             " bytes for their infos (corrupt count)", n, c->size - c->pos);
        return;
    }
    h->tensors = calloc((size_t)(n ? n : 1), sizeof *h->tensors);
    if (!h->tensors) { fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory for %" PRIu64 " tensor infos", n); return; }
    for (uint64_t i = 0; i < n && !c->st; i++) {
        gguf_tensor *t = &h->tensors[h->n_tensors];
        t->name = new_string(c, "a tensor name");
        if (c->st) break;
        h->n_tensors++;
        rd_tensor(c, h, t);
    }
    if (c->st) return;
    uint64_t pad = (h->alignment - c->pos % h->alignment) % h->alignment;
    h->data_start = c->pos + pad;
    if (h->n_tensors == 0) return;
    if (pad > c->size - c->pos) {
        fail(c, GPUCORE_ERR_CORRUPT_FILE, "the file ends at %" PRIu64 ", before its data section (at %" PRIu64
             "): truncated", c->size, h->data_start);
        return;
    }
    uint64_t data_size = c->size - h->data_start;
    void **order = malloc((size_t)h->n_tensors * sizeof *order);
    if (!order) { fail(c, GPUCORE_ERR_OUT_OF_MEMORY, "out of host memory"); return; }
    for (int64_t i = 0; i < h->n_tensors; i++) {
        const gguf_tensor *t = &h->tensors[i];
        order[i] = &h->tensors[i];
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensor \"%.100s\" (%" PRIu64 " bytes at data offset %" PRIu64 ") ends "
                 "past the end of the file's %" PRIu64 "-byte data section (truncated file?)", t->name, t->nbytes,
                 t->offset, data_size);
            free(order);
            return;
        }
    }
    qsort(order, (size_t)h->n_tensors, sizeof *order, cmp_offset);
    for (int64_t i = 1; i < h->n_tensors; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
            fail(c, GPUCORE_ERR_CORRUPT_FILE, "tensors \"%.100s\" and \"%.100s\" overlap in the data section", a->name,
                 b->name);
            break;
        }
    }
    for (int64_t i = 0; i < h->n_tensors && !c->st; i++) order[i] = h->tensors[i].name;
    const char *dup = c->st ? NULL : first_duplicate((char **)order, h->n_tensors);
    if (dup) fail(c, GPUCORE_ERR_CORRUPT_FILE, "the tensor name \"%.100s\" appears twice", dup);
    free(order);
}

gpucore_status gguf_parse(const uint8_t *buf, size_t avail, uint64_t file_size, int *need_more, gguf_header **out)
{
    *out = NULL;
    *need_more = 0;
    if (avail > file_size) avail = (size_t)file_size;
    cursor c = {buf, avail, file_size, 0, need_more, GPUCORE_OK};
    if (avail < 4 && file_size >= 4) {
        *need_more = 1;
        return GPUCORE_ERR_CORRUPT_FILE;
    }
    if (file_size < 4 || memcmp(buf, "GGUF", 4)) {
        if (file_size < 4)
            return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gguf: the file is %" PRIu64 " bytes, too short for a "
                                     "GGUF header", file_size);
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gguf: the file does not start with the magic \"GGUF\" "
                                 "(not a GGUF file)");
    }
    c.pos = 4;
    uint32_t version = (uint32_t)rd(&c, 4, "the version");
    if (c.st) return c.st;
    if (version != 2 && version != 3) {
        if (version == 1) return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gguf: version 1 files (32-bit counts) "
                                                   "are not supported; convert the model again with a current llama.cpp");
        if ((version & 0xffff) == 0 && version)
            return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gguf: the file is big-endian (version field %#x); only "
                                     "little-endian GGUF files are read", version);
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gguf: version %u (2 and 3 are supported)", version);
    }
    uint64_t n_tensors = rd(&c, 8, "the tensor count");
    uint64_t n_kv = rd(&c, 8, "the key/value count");
    gguf_header *h = calloc(1, sizeof *h);
    if (!h) return c.st ? c.st : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gguf: out of host memory");
    h->version = version;
    if (!c.st) rd_kvs(&c, h, n_kv);
    if (!c.st) rd_alignment(&c, h);
    if (!c.st) rd_tensors(&c, h, n_tensors);
    if (c.st) {
        gguf_header_free(h);
        return c.st;
    }
    *out = h;
    return GPUCORE_OK;
}

void gguf_header_free(gguf_header *h)
{
    if (!h) return;
    for (int64_t i = 0; i < h->n_kv; i++) {
        gguf_kv *kv = &h->kvs[i];
        free(kv->key);
        free(kv->values);
        if (kv->strs) free(kv->strs[0]);
        free(kv->strs);
        free(kv->lens);
    }
    free(h->kvs);
    for (int64_t i = 0; i < h->n_tensors; i++) free(h->tensors[i].name);
    free(h->tensors);
    free(h);
}
