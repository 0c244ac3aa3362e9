/*
 * gguf.c — GGUF files: open (the header read in growing chunks and checked whole by
 * gguf_parse.c before the handle exists), the metadata and tensor-info queries, and
 * tensors read on demand, decoded to f32 (F32, F16, BF16, F64 here; the quantized block
 * formats through the library's host decoders, src/ops/quant_internal.h) and stored as f32,
 * bf16 or f16.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/gguf.h"
#include "io/io_file.h"
#include "numeric.h"
#include "ops/quant_internal.h"

#define GGUF_MAGIC 0x99F0F0F1u
#define OP "gpucore_gguf"

static gpucore_handle_pool gguf_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_gguf));

gpucore_status gguf_check(const gpucore_gguf *f, const char *op)
{
    if (!f) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the GGUF file is NULL", op);
    if (f->magic != GGUF_MAGIC)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the GGUF handle was closed or never opened", op);
    return GPUCORE_OK;
}

/* The header: read 1 MiB, parse, and read four times more while the parser runs past it. */
static gpucore_status read_header(int fd, const char *path, uint64_t size, gguf_header **out)
{
    uint64_t want = size < ((uint64_t)1 << 20) ? size : ((uint64_t)1 << 20), have = 0;
    uint8_t *buf = NULL;
    for (;;) {
        uint8_t *nb = realloc(buf, (size_t)(want ? want : 1));
        if (!nb) {
            free(buf);
            return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, OP "_open: out of host memory reading the header of "
                                     "\"%s\"", path);
        }
        buf = nb;
        int r = gpucore_io_read_at(fd, buf + have, (size_t)(want - have), have);
        if (r) {
            free(buf);
            return gpucore_set_error(r == -2 ? GPUCORE_ERR_CORRUPT_FILE : GPUCORE_ERR_IO, OP "_open: reading \"%s\" "
                                     "failed: %s", path, r == -2 ? "the file shrank while it was read" : strerror(errno));
        }
        have = want;
        int more = 0;
        gpucore_status st = gguf_parse(buf, (size_t)have, size, &more, out);
        if (!st || !more) {
            free(buf);
            if (st) {
                char why[512];
                snprintf(why, sizeof why, "%s", gpucore_last_error()); /* rewritten below */
                return gpucore_set_error(st, "%s (file \"%s\")", why, path);
            }
            return GPUCORE_OK;
        }
        want = have > size / 4 ? size : have * 4;
    }
}

gpucore_status gpucore_gguf_open(const char *path, gpucore_gguf **out)
{
    if (!path || !out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, OP "_open: path or out is NULL");
    *out = NULL;
    int fd;
    uint64_t size;
    gpucore_status st = gpucore_io_open_regular(path, OP "_open", &fd, &size);
    if (st) return st;
    gguf_header *h = NULL;
    if ((st = read_header(fd, path, size, &h))) {
        close(fd);
        return st;
    }
    gpucore_gguf *f = gpucore_handle_alloc(&gguf_pool);
    char *p = strdup(path);
    if (!f || !p) {
        if (f) gpucore_handle_release(&gguf_pool, f);
        free(p);
        gguf_header_free(h);
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, OP "_open: out of host memory");
    }
    f->magic = GGUF_MAGIC;
    f->fd = fd;
    f->path = p;
    f->file_size = size;
    f->h = h;
    *out = f;
    return GPUCORE_OK;
}

gpucore_status gpucore_gguf_close(gpucore_gguf *f)
{
    if (!f) return GPUCORE_OK;
    gpucore_status st = gguf_check(f, OP "_close");
    if (st) return st;
    close(f->fd);
    gguf_header_free(f->h);
    free(f->path);
    f->magic = GPUCORE_MAGIC_DEAD;
    gpucore_handle_release(&gguf_pool, f);
    return GPUCORE_OK;
}

gpucore_status gpucore_gguf_file_info(const gpucore_gguf *f, int64_t *version, int64_t *alignment, int64_t *data_offset)
{
    gpucore_status st = gguf_check(f, OP "_file_info");
    if (st) return st;
    if (version) *version = f->h->version;
    if (alignment) *alignment = (int64_t)f->h->alignment;
    if (data_offset) *data_offset = (int64_t)f->h->data_start;
    return GPUCORE_OK;
}

/* ---- metadata ---- */

int64_t gpucore_gguf_kv_count(const gpucore_gguf *f) { return f && f->magic == GGUF_MAGIC ? f->h->n_kv : -1; }

int64_t gpucore_gguf_kv_find(const gpucore_gguf *f, const char *key)
{
    if (!f || f->magic != GGUF_MAGIC || !key) return -1;
    for (int64_t i = 0; i < f->h->n_kv; i++)
        if (!strcmp(f->h->kvs[i].key, key)) return i;
    return -1;
}

static gpucore_status kv_at(const gpucore_gguf *f, int64_t i, const char *op, const gguf_kv **kv)
{
    gpucore_status st = gguf_check(f, op);
    if (st) return st;
    if (i < 0 || i >= f->h->n_kv)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: key/value index %" PRId64 " is outside [0, %" PRId64
                                 ")", op, i, f->h->n_kv);
    *kv = &f->h->kvs[i];
    return GPUCORE_OK;
}

static const char *const value_type_names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                               "bool", "string", "array", "uint64", "int64", "float64"};

gpucore_status gpucore_gguf_kv_info(const gpucore_gguf *f, int64_t i, const char **key, int *type, int *elem_type,
                                    int64_t *count)
{
    const gguf_kv *kv = NULL;
    gpucore_status st = kv_at(f, i, OP "_kv_info", &kv);
    if (st) return st;
    if (key) *key = kv->key;
    if (type) *type = kv->type;
    if (elem_type) *elem_type = kv->elem_type;
    if (count) *count = kv->count;
    return GPUCORE_OK;
}

/* Element j of kv (scalar: j 0), checked. */
static gpucore_status element(const gpucore_gguf *f, int64_t i, int64_t j, const char *op, const gguf_kv **kv)
{
    gpucore_status st = kv_at(f, i, op, kv);
    if (st) return st;
    if (j < 0 || j >= (*kv)->count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: element %" PRId64 " of \"%.200s\" is outside [0, %"
                                 PRId64 ")", op, j, (*kv)->key, (*kv)->count);
    return GPUCORE_OK;
}

static gpucore_status wrong_type(const gguf_kv *kv, const char *op, const char *want)
{
    return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: \"%.200s\" holds %s%s, not %s", op, kv->key,
                             kv->type == 9 ? "an array of " : "", value_type_names[kv->elem_type], want);
}

gpucore_status gpucore_gguf_kv_int(const gpucore_gguf *f, int64_t i, int64_t j, int64_t *value)
{
    const char *op = OP "_kv_int";
    const gguf_kv *kv = NULL;
    gpucore_status st = element(f, i, j, op, &kv);
    if (st) return st;
    if (!value) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: value is NULL", op);
    const uint8_t *p = kv->values;
    switch (kv->elem_type) {
    case 0: *value = p[j]; break;
    case 1: *value = (int8_t)p[j]; break;
    case 2: { uint16_t v; memcpy(&v, p + 2 * j, 2); *value = v; break; }
    case 3: { int16_t v; memcpy(&v, p + 2 * j, 2); *value = v; break; }
    case 4: { uint32_t v; memcpy(&v, p + 4 * j, 4); *value = v; break; }
    case 5: { int32_t v; memcpy(&v, p + 4 * j, 4); *value = v; break; }
    case 7: *value = p[j]; break;
    case 10: {
        uint64_t v;
        memcpy(&v, p + 8 * j, 8);
        if (v > (uint64_t)INT64_MAX)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: \"%.200s\" is %" PRIu64 ", past int64", op,
                                     kv->key, v);
        *value = (int64_t)v;
        break;
    }
    case 11: memcpy(value, p + 8 * j, 8); break;
    default: return wrong_type(kv, op, "an integer or bool");
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_gguf_kv_float(const gpucore_gguf *f, int64_t i, int64_t j, double *value)
{
    const char *op = OP "_kv_float";
    const gguf_kv *kv = NULL;
    gpucore_status st = element(f, i, j, op, &kv);
    if (st) return st;
    if (!value) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: value is NULL", op);
    if (kv->elem_type == 6) { float v; memcpy(&v, (const uint8_t *)kv->values + 4 * j, 4); *value = v; }
    else if (kv->elem_type == 12) memcpy(value, (const uint8_t *)kv->values + 8 * j, 8);
    else return wrong_type(kv, op, "float32 or float64");
    return GPUCORE_OK;
}

gpucore_status gpucore_gguf_kv_string(const gpucore_gguf *f, int64_t i, int64_t j, const char **s, int64_t *len)
{
    const char *op = OP "_kv_string";
    const gguf_kv *kv = NULL;
    gpucore_status st = element(f, i, j, op, &kv);
    if (st) return st;
    if (!s) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: s is NULL", op);
    if (kv->elem_type != 8) return wrong_type(kv, op, "a string");
    *s = kv->strs[j];
    if (len) *len = kv->lens[j];
    return GPUCORE_OK;
}

gpucore_status gpucore_gguf_kv_data(const gpucore_gguf *f, int64_t i, const void **data, int64_t *nbytes)
{
    const char *op = OP "_kv_data";
    const gguf_kv *kv = NULL;
    gpucore_status st = kv_at(f, i, op, &kv);
    if (st) return st;
    if (!data) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: data is NULL", op);
    if (kv->elem_type == 8) return wrong_type(kv, op, "numbers or bools");
    static const int64_t size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    *data = kv->values;
    if (nbytes) *nbytes = kv->count * size[kv->elem_type];
    return GPUCORE_OK;
}

/* ---- tensors ---- */

int64_t gpucore_gguf_tensor_count(const gpucore_gguf *f) { return f && f->magic == GGUF_MAGIC ? f->h->n_tensors : -1; }

int64_t gpucore_gguf_tensor_find(const gpucore_gguf *f, const char *name)
{
    if (!f || f->magic != GGUF_MAGIC || !name) return -1;
    for (int64_t i = 0; i < f->h->n_tensors; i++)
        if (!strcmp(f->h->tensors[i].name, name)) return i;
    return -1;
}

static gpucore_status tensor_at(const gpucore_gguf *f, int64_t i, const char *op, const gguf_tensor **t)
{
    gpucore_status st = gguf_check(f, op);
    if (st) return st;
    if (i < 0 || i >= f->h->n_tensors)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: tensor index %" PRId64 " is outside [0, %" PRId64 ")",
                                 op, i, f->h->n_tensors);
    *t = &f->h->tensors[i];
    return GPUCORE_OK;
}

gpucore_status gpucore_gguf_tensor_info(const gpucore_gguf *f, int64_t i, const char **name, int *type, int *ndim,
                                        int64_t *dims, int64_t *offset, int64_t *nbytes)
{
    const gguf_tensor *t = NULL;
    gpucore_status st = tensor_at(f, i, OP "_tensor_info", &t);
    if (st) return st;
    if (name) *name = t->name;
    if (type) *type = t->type;
    if (ndim) *ndim = t->ndim;
    if (dims)
        for (int d = 0; d < t->ndim; d++) dims[d] = t->dims[d];
    if (offset) *offset = (int64_t)t->offset;
    if (nbytes) *nbytes = (int64_t)t->nbytes;
    return GPUCORE_OK;
}

const char *gpucore_gguf_type_name(int type) { return gguf_type_name(type); }

/* The library's quantized format of a ggml block type; -1 for one it does not decode. */
int gguf_quant_format(int type)
{
    switch (type) {
    case 2: return GPUCORE_QUANT_Q4_0;
    case 3: return GPUCORE_QUANT_Q4_1;
    case 6: return GPUCORE_QUANT_Q5_0;
    case 7: return GPUCORE_QUANT_Q5_1;
    case 8: return GPUCORE_QUANT_Q8_0;
    case 12: return GPUCORE_QUANT_Q4_K;
    case 13: return GPUCORE_QUANT_Q5_K;
    case 14: return GPUCORE_QUANT_Q6_K;
    default: return -1;
    }
}

gpucore_status gguf_dequantize(int type, const void *raw, int64_t n, float *out, const char *op, const char *name)
{
    switch (type) {
    case 0: memmove(out, raw, (size_t)n * 4); return GPUCORE_OK;
    case 1:
        for (int64_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)raw + 2 * k, 2);
            out[k] = gpucore_f16_to_f32(h);
        }
        return GPUCORE_OK;
    case 30:
        for (int64_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)raw + 2 * k, 2);
            out[k] = gpucore_bf16_to_f32(h);
        }
        return GPUCORE_OK;
    case 28:
        for (int64_t k = 0; k < n; k++) {
            double d;
            memcpy(&d, (const uint8_t *)raw + 8 * k, 8);
            out[k] = (float)d;
        }
        return GPUCORE_OK;
    default: {
        int fmt = gguf_quant_format(type);
        if (fmt >= 0) return quant_dequantize_host(fmt, raw, n, out);
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: tensor \"%.200s\" is %s, a ggml type this library "
                                 "does not decode (F32, F16, BF16, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and "
                                 "Q6_K are read)", op, name, gguf_type_name(type) ? gguf_type_name(type) : "unknown");
    }
    }
}

static int64_t tensor_numel(const gguf_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->dims[d]; /* checked against overflow when parsed */
    return n;
}

/* Tensor t's stored bytes into raw (t->nbytes). */
static gpucore_status read_bytes(gpucore_gguf *f, const gguf_tensor *t, void *raw, const char *op)
{
    int r = gpucore_io_read_at(f->fd, raw, (size_t)t->nbytes, f->h->data_start + t->offset);
    if (!r) return GPUCORE_OK;
    return gpucore_set_error(r == -2 ? GPUCORE_ERR_CORRUPT_FILE : GPUCORE_ERR_IO, "%s: reading \"%.200s\" from \"%s\" "
                             "failed: %s", op, t->name, f->path,
                             r == -2 ? "the file ended early (it shrank after it was opened?)" : strerror(errno));
}

gpucore_status gguf_read_raw(gpucore_gguf *f, int64_t i, void **out, int64_t *nbytes, const char *op)
{
    *out = NULL;
    const gguf_tensor *t = NULL;
    gpucore_status st = tensor_at(f, i, op, &t);
    if (st) return st;
    if (t->nbytes > SIZE_MAX)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: \"%.200s\" does not fit in this address space", op,
                                 t->name);
    void *raw = malloc((size_t)(t->nbytes ? t->nbytes : 1));
    if (!raw)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory for \"%.200s\" (%" PRIu64
                                 " bytes)", op, t->name, (uint64_t)t->nbytes);
    if ((st = read_bytes(f, t, raw, op))) { free(raw); return st; }
    *out = raw;
    *nbytes = (int64_t)t->nbytes;
    return GPUCORE_OK;
}

gpucore_status gguf_read_f32(gpucore_gguf *f, int64_t i, float **out, const char *op)
{
    *out = NULL;
    const gguf_tensor *t = NULL;
    gpucore_status st = tensor_at(f, i, op, &t);
    if (st) return st;
    int64_t n = tensor_numel(t);
    if ((uint64_t)n > SIZE_MAX / 4 || t->nbytes > SIZE_MAX)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: \"%.200s\" does not fit in this address space", op,
                                 t->name);
    float *dst = malloc((size_t)(n ? n : 1) * 4);
    /* F32 is read straight into the result; anything else is staged */
    void *raw = t->type == 0 ? (void *)dst : malloc((size_t)(t->nbytes ? t->nbytes : 1));
    if (!dst || !raw) {
        free(dst);
        if (raw != dst) free(raw);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory for \"%.200s\" (%" PRId64
                                 " elements)", op, t->name, n);
    }
    st = read_bytes(f, t, raw, op);
    if (!st) st = gguf_dequantize(t->type, raw, n, dst, op, t->name);
    if (raw != dst) free(raw);
    if (st) { free(dst); return st; }
    *out = dst;
    return GPUCORE_OK;
}

/* 2-byte results are written behind the reads. */
void gguf_f32_to_dtype(float *v, int64_t n, int dtype)
{
    if (dtype != GPUCORE_BF16 && dtype != GPUCORE_F16) return;
    uint16_t *o = (uint16_t *)v;
    for (int64_t k = 0; k < n; k++) o[k] = dtype == GPUCORE_BF16 ? gpucore_f32_to_bf16(v[k]) : gpucore_f32_to_f16(v[k]);
}

gpucore_status gpucore_gguf_read(gpucore_gguf *f, int64_t i, gpucore_tensor *dst)
{
    const char *op = OP "_read";
    const gguf_tensor *t = NULL;
    gpucore_status st = tensor_at(f, i, op, &t);
    if (!st) st = gpucore_check_tensor(dst, op, "dst");
    if (st) return st;
    if (dst->dtype != GPUCORE_F32 && dst->dtype != GPUCORE_BF16 && dst->dtype != GPUCORE_F16)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: dst is %s; GGUF tensors are read as f32, bf16 or f16",
                                 op, gpucore_dtype_name((gpucore_dtype)dst->dtype));
    int same = dst->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = dst->shape[d] == t->dims[t->ndim - 1 - d];
    if (!same || !gpucore_tensor_is_contiguous(dst)) {
        int64_t want[GGUF_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++) want[d] = t->dims[t->ndim - 1 - d];
        char a[160], b[160];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: \"%.200s\" is %s (row-major, the file's dims "
                                 "reversed) but dst is %s%s", op, t->name, gpucore_shape_str(t->ndim, want, a, sizeof a),
                                 gpucore_shape_str(dst->ndim, dst->shape, b, sizeof b),
                                 same ? " and not contiguous" : "");
    }
    float *v = NULL;
    if ((st = gguf_read_f32(f, i, &v, op))) return st;
    int64_t n = tensor_numel(t);
    gguf_f32_to_dtype(v, n, dst->dtype);
    st = gpucore_copy_from_host(dst, v, n * gpucore_dtype_size((gpucore_dtype)dst->dtype));
    free(v);
    return st;
}

gpucore_status gpucore_gguf_load_tensor(gpucore_gguf *f, gpucore_context *ctx, int64_t i, gpucore_dtype dtype,
                                        gpucore_tensor **out)
{
    const char *op = OP "_load_tensor";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    const gguf_tensor *t = NULL;
    gpucore_status st = tensor_at(f, i, op, &t);
    if (st) return st;
    if (dtype != GPUCORE_F32 && dtype != GPUCORE_BF16 && dtype != GPUCORE_F16)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: dtype %s; GGUF tensors are read as f32, bf16 or f16", op,
                                 gpucore_dtype_name(dtype));
    int64_t shape[GGUF_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) shape[d] = t->dims[t->ndim - 1 - d];
    if ((st = gpucore_tensor_create(ctx, dtype, t->ndim, shape, out))) return st;
    if ((st = gpucore_gguf_read(f, i, *out))) {
        gpucore_tensor_destroy(*out);
        *out = NULL;
    }
    return st;
}
