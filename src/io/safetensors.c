/*
 * safetensors.c — safetensors files: open and read on demand into tensors (the
 * header through the parser in safetensors_parse.c), the atomic writer (temp file
 * in the same folder, fsync, rename, fsync the folder). Training-state
 * checkpoints are written through these calls by src/train/state_checkpoint.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "safetensors.h"
#include "io/io_file.h"
#include "gpucore_config.h"
#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

#define ST "safetensors"

/* ------------------------------------------------------------- file handle */

struct gpucore_safetensors {
    int fd;
    uint64_t data_start;
    gpucore_st_header *h;
};

static const gpucore_st_entry *find_entry(const gpucore_safetensors *f, const char *name)
{
    for (int64_t i = 0; i < f->h->count; i++)
        if (!strcmp(f->h->entries[i].name, name)) return &f->h->entries[i];
    return NULL;
}

gpucore_status gpucore_safetensors_open(const char *path, gpucore_safetensors **out)
{
    if (!path || !out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, ST "_open: path or out is NULL");
    *out = NULL;
#if !GPUCORE_HAVE_CJSON
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                             ST "_open: this build has no JSON library (cJSON); install libcjson-dev and rebuild");
#endif
    int fd;
    uint64_t size;
    gpucore_status ost = gpucore_io_open_regular(path, ST "_open", &fd, &size);
    if (ost) return ost;
    uint8_t len8[8];
    if (size < 8 || gpucore_io_read_at(fd, len8, 8, 0) != 0) {
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                 ST "_open: \"%s\" is %" PRIu64 " bytes; a safetensors file starts with an 8-byte "
                                 "header length (truncated or not a safetensors file)", path, size);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
    if (n > GPUCORE_ST_MAX_HEADER || n > size - 8) {
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                                 ST "_open: \"%s\": the header length field says %" PRIu64 " bytes but the file has "
                                 "%" PRIu64 " after it%s", path, n, size - 8,
                                 n > GPUCORE_ST_MAX_HEADER ? " (and the limit is 100 MiB)" : " (truncated file)");
    }
    char *json = malloc(n ? (size_t)n : 1); /* n is checked against the file's real size above */
    if (!json) {
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST "_open: out of host memory for a %" PRIu64 "-byte header", n);
    }
    if (gpucore_io_read_at(fd, json, (size_t)n, 8) != 0) {
        free(json);
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_IO, ST "_open: reading the header of \"%s\" failed: %s", path, strerror(errno));
    }
    gpucore_st_header *h = NULL;
    gpucore_status st = gpucore_st_parse_header(json, (size_t)n, size - 8 - n, &h);
    free(json);
    if (st) {
        close(fd);
        char why[512];
        snprintf(why, sizeof why, "%s", gpucore_last_error()); /* the message buffer is rewritten below */
        return gpucore_set_error(st, "%s (file \"%s\")", why, path);
    }
    gpucore_safetensors *f = calloc(1, sizeof *f);
    if (!f) {
        gpucore_st_header_free(h);
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST "_open: out of host memory");
    }
    f->fd = fd;
    f->data_start = 8 + n;
    f->h = h;
    *out = f;
    return GPUCORE_OK;
}

gpucore_status gpucore_safetensors_close(gpucore_safetensors *f)
{
    if (!f) return GPUCORE_OK;
    close(f->fd);
    gpucore_st_header_free(f->h);
    free(f);
    return GPUCORE_OK;
}

int64_t gpucore_safetensors_count(const gpucore_safetensors *f) { return f ? f->h->count : -1; }

const char *gpucore_safetensors_name(const gpucore_safetensors *f, int64_t i)
{
    if (!f || i < 0 || i >= f->h->count) return NULL;
    return f->h->entries[i].name;
}

const char *gpucore_safetensors_metadata(const gpucore_safetensors *f, const char *key)
{
    if (!f || !key) return NULL;
    for (int64_t i = 0; i < f->h->meta_count; i++)
        if (!strcmp(f->h->meta_keys[i], key)) return f->h->meta_values[i];
    return NULL;
}

static gpucore_status lookup(const gpucore_safetensors *f, const char *name, const char *op, const gpucore_st_entry **e)
{
    if (!f || !name) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: file or name is NULL", op);
    *e = find_entry(f, name);
    if (!*e) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the file has no tensor \"%.200s\"", op, name);
    if ((*e)->signed8)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: tensor \"%.200s\" has dtype I8, which libgpucore has "
                                 "no tensor type for", op, name);
    return GPUCORE_OK;
}

/* The entry's bytes into buf (end - begin bytes). */
static gpucore_status read_entry(const gpucore_safetensors *f, const gpucore_st_entry *e, const char *op, void *buf)
{
    int r = gpucore_io_read_at(f->fd, buf, (size_t)(e->end - e->begin), f->data_start + e->begin);
    if (r != 0)
        return gpucore_set_error(r == -2 ? GPUCORE_ERR_CORRUPT_FILE : GPUCORE_ERR_IO,
                                 "%s: reading \"%.200s\" failed: %s", op, e->name,
                                 r == -2 ? "the file ended early (it shrank after it was opened?)" : strerror(errno));
    return GPUCORE_OK;
}

int gpucore_st_has(const gpucore_safetensors *f, const char *name)
{
    return f && name && find_entry(f, name);
}

gpucore_status gpucore_st_read_i8(gpucore_safetensors *f, const char *name, int *ndim, int64_t *shape, void *dst,
                                  int64_t cap)
{
    const char *op = ST "_read_i8";
    const gpucore_st_entry *e = f && name ? find_entry(f, name) : NULL;
    if (!e) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the file has no tensor \"%.200s\"", op,
                                     name ? name : "(null)");
    if (!e->signed8)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: \"%.200s\" is %s in the file, not I8", op, name,
                                 gpucore_dtype_name((gpucore_dtype)e->dtype));
    *ndim = e->ndim;
    for (int i = 0; i < e->ndim; i++) shape[i] = e->shape[i];
    if (!dst || e->end == e->begin) return GPUCORE_OK;
    if ((uint64_t)cap != e->end - e->begin)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: \"%.200s\" holds %" PRIu64 " bytes, not %lld", op,
                                 name, e->end - e->begin, (long long)cap);
    return read_entry(f, e, op, dst);
}

gpucore_status gpucore_safetensors_info(const gpucore_safetensors *f, const char *name, gpucore_dtype *dtype, int *ndim,
                                        int64_t *shape)
{
    const gpucore_st_entry *e;
    gpucore_status st = lookup(f, name, ST "_info", &e);
    if (st) return st;
    if (dtype) *dtype = (gpucore_dtype)e->dtype;
    if (ndim) *ndim = e->ndim;
    if (shape)
        for (int i = 0; i < e->ndim; i++) shape[i] = e->shape[i];
    return GPUCORE_OK;
}

gpucore_status gpucore_safetensors_read(gpucore_safetensors *f, const char *name, gpucore_tensor *dst)
{
    const char *op = ST "_read";
    const gpucore_st_entry *e;
    gpucore_status st = lookup(f, name, op, &e);
    if (st) return st;
    if ((st = gpucore_check_tensor(dst, op, "dst"))) return st;
    if (dst->dtype != e->dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: \"%.200s\" is %s in the file but dst is %s", op, name,
                                 gpucore_dtype_name((gpucore_dtype)e->dtype), gpucore_dtype_name((gpucore_dtype)dst->dtype));
    int same = dst->ndim == e->ndim;
    for (int i = 0; same && i < e->ndim; i++) same = dst->shape[i] == e->shape[i];
    if (!same) {
        char a[160], b[160];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: \"%.200s\" is %s in the file but dst is %s", op, name,
                                 gpucore_shape_str(e->ndim, e->shape, a, sizeof a),
                                 gpucore_shape_str(dst->ndim, dst->shape, b, sizeof b));
    }
    uint64_t bytes = e->end - e->begin;
    if (bytes == 0) return GPUCORE_OK;
    if (bytes > (uint64_t)SIZE_MAX)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: \"%.200s\" does not fit in this address space", op, name);
    void *buf = malloc((size_t)bytes); /* bytes were checked against the file's real size */
    if (!buf)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory staging %" PRIu64 " bytes of \"%.200s\"",
                                 op, bytes, name);
    if ((st = read_entry(f, e, op, buf))) {
        free(buf);
        return st;
    }
    st = gpucore_copy_from_host(dst, buf, (int64_t)bytes);
    free(buf);
    return st;
}

gpucore_status gpucore_safetensors_load_tensor(gpucore_safetensors *f, gpucore_context *ctx, const char *name,
                                               gpucore_tensor **out)
{
    const char *op = ST "_load_tensor";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    const gpucore_st_entry *e;
    gpucore_status st = lookup(f, name, op, &e);
    if (st) return st;
    if ((st = gpucore_tensor_create(ctx, (gpucore_dtype)e->dtype, e->ndim, e->shape, out))) return st;
    if ((st = gpucore_safetensors_read(f, name, *out))) {
        gpucore_tensor_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* ------------------------------------------------------------------ writer */

#if GPUCORE_HAVE_CJSON
static cJSON *json_uint(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v); /* raw: cJSON would print large doubles with exponents */
    return cJSON_CreateRaw(buf);
}

/* The header JSON, padded with spaces to a multiple of 8 bytes. */
static gpucore_status build_header(const char *const *names, gpucore_tensor *const *ts, const char *const *i8,
                                   int64_t count, const char *const *mk, const char *const *mv, int64_t mcount, char **out,
                                   size_t *out_len)
{
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    if (ok && mcount > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int64_t i = 0; ok && i < mcount; i++) ok = cJSON_AddStringToObject(meta, mk[i], mv[i]) != NULL;
    }
    uint64_t at = 0;
    for (int64_t i = 0; ok && i < count; i++) {
        const gpucore_tensor *t = ts[i];
        cJSON *e = cJSON_AddObjectToObject(root, names[i]);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        ok = e && shape &&
             cJSON_AddStringToObject(e, "dtype", i8 && i8[i] ? "I8" : gpucore_st_dtype_string(t->dtype));
        for (int d = 0; ok && d < t->ndim; d++) ok = cJSON_AddItemToArray(shape, json_uint((uint64_t)t->shape[d]));
        uint64_t bytes = (uint64_t)gpucore_tensor_nbytes(t);
        cJSON *offs = ok ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        ok = offs && cJSON_AddItemToArray(offs, json_uint(at)) && cJSON_AddItemToArray(offs, json_uint(at + bytes));
        at += bytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST "_save: out of host memory building the header");
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    char *buf = malloc(padded + 1);
    if (!buf) {
        cJSON_free(text);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, ST "_save: out of host memory building the header");
    }
    memcpy(buf, text, len);
    memset(buf + len, ' ', padded - len);
    buf[padded] = '\0';
    cJSON_free(text);
    *out = buf;
    *out_len = padded;
    return GPUCORE_OK;
}
#endif

static int write_fully(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static gpucore_status check_save_args(const char *path, const char *const *names, gpucore_tensor *const *ts,
                                      int64_t count, const char *const *mk, const char *const *mv, int64_t mcount)
{
    const char *op = ST "_save";
    if (!path) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: path is NULL", op);
    if (count < 0 || mcount < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: negative count (%lld tensors, %lld metadata)", op,
                                 (long long)count, (long long)mcount);
    if (count > 0 && (!names || !ts)) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: names or tensors is NULL", op);
    if (mcount > 0 && (!mk || !mv)) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: metadata arrays are NULL", op);
    for (int64_t i = 0; i < mcount; i++)
        if (!mk[i] || !mv[i]) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: metadata entry %lld is NULL", op,
                                                      (long long)i);
    for (int64_t i = 0; i < count; i++) {
        char arg[48];
        snprintf(arg, sizeof arg, "tensors[%lld]", (long long)i);
        gpucore_status st = gpucore_check_tensor(ts[i], op, arg);
        if (st) return st;
        if (!gpucore_st_dtype_string(ts[i]->dtype))
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s has a dtype safetensors cannot name", op, arg);
        if (!names[i] || !names[i][0] || !strcmp(names[i], "__metadata__"))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "%s: names[%lld] is NULL, empty or \"__metadata__\"", op, (long long)i);
        for (int64_t j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the name \"%.200s\" is given twice", op,
                                         names[i]);
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_safetensors_save(const char *path, const char *const *names, gpucore_tensor *const *ts,
                                        int64_t count, const char *const *mk, const char *const *mv, int64_t mcount)
{
    return gpucore_st_save_i8(path, names, ts, NULL, count, mk, mv, mcount);
}

gpucore_status gpucore_st_save_i8(const char *path, const char *const *names, gpucore_tensor *const *ts,
                                  const char *const *i8, int64_t count, const char *const *mk, const char *const *mv,
                                  int64_t mcount)
{
    const char *op = ST "_save";
    gpucore_status st = check_save_args(path, names, ts, count, mk, mv, mcount);
    if (st) return st;
    for (int64_t i = 0; i8 && i < count; i++)
        if (i8[i] && ts[i]->dtype != GPUCORE_U8)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: \"%.200s\" is written as I8 but is %s, not u8",
                                     op, names[i], gpucore_dtype_name((gpucore_dtype)ts[i]->dtype));
#if !GPUCORE_HAVE_CJSON
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                             "%s: this build has no JSON library (cJSON); install libcjson-dev and rebuild", op);
#else
    char *header = NULL;
    size_t hlen = 0;
    if ((st = build_header(names, ts, i8, count, mk, mv, mcount, &header, &hlen))) return st;
    /* temp file in the destination's folder, so the rename is atomic */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(header);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = gpucore_set_error(GPUCORE_ERR_IO, "%s: cannot create a temporary file next to \"%s\": %s", op, path,
                               strerror(errno));
        free(header);
        free(tmp);
        return st;
    }
    fchmod(fd, 0644);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (write_fully(fd, len8, 8) || write_fully(fd, header, hlen))
        st = gpucore_set_error(GPUCORE_ERR_IO, "%s: writing \"%s\" failed: %s", op, tmp, strerror(errno));
    free(header);
    for (int64_t i = 0; i < count && !st; i++) {
        int64_t bytes = gpucore_tensor_nbytes(ts[i]);
        if (bytes == 0) continue;
        void *buf = malloc((size_t)bytes);
        if (!buf) {
            st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory staging \"%.200s\" (%lld bytes)",
                                   op, names[i], (long long)bytes);
            break;
        }
        st = gpucore_copy_to_host(buf, bytes, ts[i]);
        if (!st && write_fully(fd, buf, (size_t)bytes))
            st = gpucore_set_error(GPUCORE_ERR_IO, "%s: writing \"%s\" failed: %s", op, tmp, strerror(errno));
        free(buf);
    }
    if (!st && fsync(fd) != 0)
        st = gpucore_set_error(GPUCORE_ERR_IO, "%s: fsync of \"%s\" failed: %s", op, tmp, strerror(errno));
    if (close(fd) != 0 && !st)
        st = gpucore_set_error(GPUCORE_ERR_IO, "%s: closing \"%s\" failed: %s", op, tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = gpucore_set_error(GPUCORE_ERR_IO, "%s: renaming \"%s\" to \"%s\" failed: %s", op, tmp, path,
                               strerror(errno));
    if (st) {
        unlink(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    /* make the rename itself durable */
    char *dir = strdup(path);
    if (dir) {
        char *slash = strrchr(dir, '/');
        const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
        int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    return GPUCORE_OK;
#endif
}
