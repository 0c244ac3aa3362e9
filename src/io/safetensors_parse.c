/*
 * safetensors_parse.c — the safetensors header parser, over memory (see
 * safetensors.h): the 8-byte length, the JSON header (cJSON), each entry's dtype,
 * shape and offsets, the metadata. No file I/O here, so fuzz/fuzz_safetensors.c
 * drives it with arbitrary bytes; safetensors.c reads files through it.
 *
 * The parser trusts nothing in the file: every size is checked against the
 * bytes actually present before anything is allocated from it, integers must be
 * exact (<= 2^53), byte sizes must equal numel * element size without overflow,
 * and the tensors must tile the data section exactly (no overlap, no hole).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "safetensors.h"
#include "gpucore_config.h"
#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

#define ST "safetensors"

static const struct { const char *name; int dtype; } st_dtypes[] = {
    {"F32", GPUCORE_F32},         {"F64", GPUCORE_F64}, {"F16", GPUCORE_F16},
    {"BF16", GPUCORE_BF16},       {"I32", GPUCORE_I32}, {"I64", GPUCORE_I64},
    {"U8", GPUCORE_U8},           {"F8_E4M3", GPUCORE_FP8_E4M3}, {"F8_E5M2", GPUCORE_FP8_E5M2},
};
#define ST_DTYPE_LIST "F32, F64, F16, BF16, I32, I64, U8, F8_E4M3, F8_E5M2"
/* Valid safetensors dtypes that libgpucore has no tensor type for. */
static const char *const st_other_dtypes[] = {"BOOL", "I16", "U16", "U32", "U64", "F8_E8M0", "F4", "F6_E2M3",
                                              "F6_E3M2", "C64"};

const char *gpucore_st_dtype_string(int dtype)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
    return NULL;
}

void gpucore_st_header_free(gpucore_st_header *h)
{
    if (!h) return;
    for (int64_t i = 0; i < h->count; i++) free(h->entries[i].name);
    for (int64_t i = 0; i < h->meta_count; i++) {
        free(h->meta_keys[i]);
        free(h->meta_values[i]);
    }
    free(h->entries);
    free(h->meta_keys);
    free(h->meta_values);
    free(h);
}

gpucore_status gpucore_st_parse_buffer(const uint8_t *buf, size_t size, gpucore_st_header **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, ST ": out is NULL");
    *out = NULL;
    if (!buf && size) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, ST ": buffer is NULL");
    if (size < 8)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                 ST ": the file is %zu bytes; a safetensors file starts with an 8-byte header length "
                                 "(truncated or not a safetensors file)", size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
    if (n > GPUCORE_ST_MAX_HEADER)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                 ST ": the header length field says %" PRIu64 " bytes, over the 100 MiB limit "
                                 "(corrupt, or not a safetensors file)", n);
    if (n > size - 8)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                 ST ": the header length field says %" PRIu64 " bytes but only %zu follow "
                                 "(truncated file)", n, size - 8);
    return gpucore_st_parse_header((const char *)buf + 8, (size_t)n, (uint64_t)(size - 8 - n), out);
}

#if GPUCORE_HAVE_CJSON

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: beyond it a JSON number is not exact in a double */

static gpucore_status corrupt(const char *name, const char *fmt, const char *detail)
{
    return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": tensor \"%.200s\": %s%s", name, fmt, detail ? detail : "");
}

/* A JSON number that is an exact integer in [0, 2^53]. */
static int exact_uint(const cJSON *j, uint64_t *v)
{
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0) || d > MAX_EXACT_INT || d != floor(d)) return 0;
    *v = (uint64_t)d;
    return 1;
}

static gpucore_status parse_entry(const cJSON *obj, uint64_t data_size, gpucore_st_entry *e)
{
    const char *name = obj->string;
    char msg[160];
    if (!cJSON_IsObject(obj)) return corrupt(name, "the entry is not a JSON object", NULL);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(obj, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(obj, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(obj, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring) return corrupt(name, "\"dtype\" is missing or not a string", NULL);
    e->dtype = -1;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(dt->valuestring, st_dtypes[i].name)) e->dtype = st_dtypes[i].dtype;
    if (e->dtype < 0 && !strcmp(dt->valuestring, "I8")) { /* read only as bytes: gpucore_st_read_i8 */
        e->dtype = GPUCORE_U8;
        e->signed8 = 1;
    }
    if (e->dtype < 0) {
        for (size_t i = 0; i < sizeof st_other_dtypes / sizeof st_other_dtypes[0]; i++)
            if (!strcmp(dt->valuestring, st_other_dtypes[i]))
                return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                         ST ": tensor \"%.200s\" has dtype %s, which libgpucore has no tensor type for "
                                         "(supported: " ST_DTYPE_LIST ")", name, st_other_dtypes[i]);
        snprintf(msg, sizeof msg, "\"%.40s\" (expected one of " ST_DTYPE_LIST ")", dt->valuestring);
        return corrupt(name, "unknown dtype ", msg);
    }
    if (!cJSON_IsArray(shape)) return corrupt(name, "\"shape\" is missing or not an array", NULL);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > GPUCORE_MAX_DIMS) {
        snprintf(msg, sizeof msg, "%d dims (libgpucore tensors have at most %d)", ndim, GPUCORE_MAX_DIMS);
        return corrupt(name, "\"shape\" has ", msg);
    }
    e->ndim = ndim;
    uint64_t numel = 1;
    int overflow = 0;
    int d = 0;
    for (const cJSON *it = shape->child; it; it = it->next, d++) {
        uint64_t v;
        if (!exact_uint(it, &v)) return corrupt(name, "a \"shape\" entry is not a non-negative integer below 2^53", NULL);
        e->shape[d] = (int64_t)v;
        if (!overflow && __builtin_mul_overflow(numel, v, &numel)) overflow = 1;
    }
    uint64_t bytes = 0;
    const uint64_t esize = (uint64_t)gpucore_dtype_size((gpucore_dtype)e->dtype);
    /* an empty dim makes every product 0, even one that overflowed on the way */
    int empty = 0;
    for (int i = 0; i < ndim; i++) empty |= e->shape[i] == 0;
    if (empty) numel = 0, overflow = 0;
    if (overflow || __builtin_mul_overflow(numel, esize, &bytes) || bytes > (uint64_t)INT64_MAX)
        return corrupt(name, "the shape's byte size does not fit in 64 bits", NULL);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return corrupt(name, "\"data_offsets\" is missing or not a [begin, end] pair", NULL);
    if (!exact_uint(offs->child, &e->begin) || !exact_uint(offs->child->next, &e->end))
        return corrupt(name, "\"data_offsets\" entries are not non-negative integers below 2^53", NULL);
    if (e->begin > e->end) {
        snprintf(msg, sizeof msg, "[%" PRIu64 ", %" PRIu64 "] begin after end", e->begin, e->end);
        return corrupt(name, "data_offsets ", msg);
    }
    if (e->end > data_size) {
        snprintf(msg, sizeof msg, "[%" PRIu64 ", %" PRIu64 "] end past the %" PRIu64 "-byte data section (truncated file?)",
                 e->begin, e->end, data_size);
        return corrupt(name, "data_offsets ", msg);
    }
    if (e->end - e->begin != bytes) {
        snprintf(msg, sizeof msg, "%" PRIu64 " bytes, but dtype %s and the shape need %" PRIu64, e->end - e->begin,
                 dt->valuestring, bytes);
        return corrupt(name, "data_offsets cover ", msg);
    }
    return GPUCORE_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const gpucore_st_entry *const *)a)->name, (*(const gpucore_st_entry *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const gpucore_st_entry *x = *(const gpucore_st_entry *const *)a, *y = *(const gpucore_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The tensors must tile [0, data_size): sorted by offset, each begins where the last ended. */
static gpucore_status check_layout(gpucore_st_header *h, uint64_t data_size)
{
    if (h->count == 0) {
        if (data_size != 0)
            return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                     ST ": no tensors, but %" PRIu64 " data bytes follow the header", data_size);
        return GPUCORE_OK;
    }
    gpucore_st_entry **order = malloc((size_t)h->count * sizeof *order);
    if (!order) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST ": out of host memory checking the header");
    for (int64_t i = 0; i < h->count; i++) order[i] = &h->entries[i];
    gpucore_status st = GPUCORE_OK;
    qsort(order, (size_t)h->count, sizeof *order, cmp_name);
    for (int64_t i = 1; i < h->count && !st; i++)
        if (!strcmp(order[i]->name, order[i - 1]->name))
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": the name \"%.200s\" appears twice in the header",
                                   order[i]->name);
    if (!st) {
        qsort(order, (size_t)h->count, sizeof *order, cmp_offset);
        uint64_t at = 0;
        for (int64_t i = 0; i < h->count && !st; i++) {
            if (order[i]->begin < at)
                st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                       ST ": tensor \"%.200s\" (bytes %" PRIu64 "..%" PRIu64 ") overlaps the tensor "
                                       "before it (which ends at %" PRIu64 ")",
                                       order[i]->name, order[i]->begin, order[i]->end, at);
            else if (order[i]->begin > at)
                st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                       ST ": bytes %" PRIu64 "..%" PRIu64 " of the data section belong to no tensor",
                                       at, order[i]->begin);
            else at = order[i]->end;
        }
        if (!st && at != data_size)
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                   ST ": the tensors end at byte %" PRIu64 " of the data section but it has %" PRIu64
                                   " bytes (trailing garbage)", at, data_size);
    }
    free(order);
    return st;
}

static gpucore_status parse_metadata(const cJSON *meta, gpucore_st_header *h)
{
    if (!cJSON_IsObject(meta))
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": \"__metadata__\" is not a JSON object");
    int n = cJSON_GetArraySize(meta);
    h->meta_keys = calloc((size_t)n + 1, sizeof(char *));
    h->meta_values = calloc((size_t)n + 1, sizeof(char *));
    if (!h->meta_keys || !h->meta_values)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST ": out of host memory for the metadata");
    for (const cJSON *it = meta->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring || !it->string)
            return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": metadata \"%.200s\" is not a string",
                                     it->string ? it->string : "");
        h->meta_keys[h->meta_count] = strdup(it->string);
        h->meta_values[h->meta_count] = strdup(it->valuestring);
        h->meta_count++;
        if (!h->meta_keys[h->meta_count - 1] || !h->meta_values[h->meta_count - 1])
            return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST ": out of host memory for the metadata");
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_st_parse_header(const char *json, size_t json_len, uint64_t data_size, gpucore_st_header **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, ST ": out is NULL");
    *out = NULL;
    if (!json && json_len) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, ST ": header is NULL");
    if (json_len > GPUCORE_ST_MAX_HEADER)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": the header is %zu bytes, over the 100 MiB limit", json_len);
    if (json_len == 0 || json[0] != '{')
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                 ST ": the header does not start with '{' (not a safetensors file, or corrupt)");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, json_len, &end, 0);
    if (!root) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": the header is not valid JSON (error near byte %zu of %zu)",
                                 at, json_len);
    }
    gpucore_status st = GPUCORE_OK;
    for (const char *p = end; p < json + json_len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                   ST ": byte %zu of the header follows the JSON object and is not white space",
                                   (size_t)(p - json));
            break;
        }
    if (!st && !cJSON_IsObject(root))
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": the header is JSON but not an object");
    gpucore_st_header *h = NULL;
    if (!st) {
        h = calloc(1, sizeof *h);
        int n = cJSON_GetArraySize(root); /* bounded by the header's length, never by a declared size */
        if (h) h->entries = calloc((size_t)n + 1, sizeof *h->entries);
        if (!h || !h->entries) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST ": out of host memory for the header");
    }
    int seen_meta = 0;
    for (const cJSON *it = st ? NULL : root->child; it && !st; it = it->next) {
        if (!it->string) {
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": a header entry has no name");
            break;
        }
        if (!strcmp(it->string, "__metadata__")) {
            if (seen_meta++) st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, ST ": \"__metadata__\" appears twice");
            else st = parse_metadata(it, h);
            continue;
        }
        gpucore_st_entry *e = &h->entries[h->count];
        memset(e, 0, sizeof *e);
        st = parse_entry(it, data_size, e);
        if (st) break;
        e->name = strdup(it->string);
        if (!e->name) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST ": out of host memory for the header");
        else h->count++;
    }
    cJSON_Delete(root);
    if (!st) st = check_layout(h, data_size);
    if (st) {
        gpucore_st_header_free(h);
        return st;
    }
    *out = h;
    return GPUCORE_OK;
}

#else /* no cJSON in this build */

gpucore_status gpucore_st_parse_header(const char *json, size_t json_len, uint64_t data_size, gpucore_st_header **out)
{
    (void)json; (void)json_len; (void)data_size;
    if (out) *out = NULL;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                             ST ": this build has no JSON library (cJSON); install libcjson-dev and rebuild");
}

#endif
