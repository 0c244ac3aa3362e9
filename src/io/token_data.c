/*
 * token_data.c — datasets of token files for language-model training (the "token
 * data" section of gpucore.h): llm.c's .bin files and NumPy .npy files, memory-mapped
 * and checked on open, cut into windows of seq_len + 1 tokens, ordered by a seeded
 * Philox Fisher-Yates permutation per epoch, sharded over ranks, and copied to the
 * device one batch ahead: each batch is gathered into pinned host memory and copied on
 * the dataset's own stream, and the consumer's stream waits on an event, so a training
 * step never waits for the host to read its data. gpucore_token_data_write writes llm.c's
 * format from the same definition (magic, header size, versions).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/internal.h"
#include "io/io_file.h"
#include "philox.h"

#define TD "token_data"
#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES 1024

/* ------------------------------------------------------------ the handle */

typedef struct token_file {
    char *path;
    void *map;              /* the whole file, read-only */
    size_t map_len;
    const uint8_t *tokens;  /* first token */
    int elem_bytes;         /* 2 or 4 */
    int is_signed;          /* int32 .npy: negative values are refused per batch */
    int64_t ntok, nwin, first_window;
} token_file;

/* One batch on its way to the device: the host copy in pinned memory, the device
 * tensor (input_ids then labels, or the windows: batch_elements) and the event after its copy. */
typedef struct batch_slot {
    void *pinned;
    gpucore_event *copied;
    int copy_recorded;      /* copied was recorded at least once */
    gpucore_tensor *both;   /* NULL when the staging failed */
    gpucore_status status;
    char message[512];
} batch_slot;

struct gpucore_token_data {
    gpucore_context *ctx;
    gpucore_stream *copy_stream;
    gpucore_token_data_options opt;
    token_file *files;
    int64_t nfiles;
    int64_t tokens, windows, per_epoch;
    int64_t *perm;          /* permutation of epoch perm_epoch (shuffle 1) */
    int64_t perm_epoch;
    batch_slot slot[2];     /* batch k is staged in slot k % 2 */
    int64_t position;       /* the batch the next gpucore_token_data_next returns (staged) */
};

gpucore_status gpucore_token_data_options_default(gpucore_token_data_options *o)
{
    if (!o) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_options_default: opts is NULL");
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->batch_size = 8;
    o->seq_len = 1024;
    o->shuffle = 1;
    o->dtype = GPUCORE_I32;
    o->world_size = 1;
    return GPUCORE_OK;
}

/* ------------------------------------------------------------ .npy headers */

typedef struct npy_cursor { const char *p, *end; } npy_cursor;

static void npy_skip_space(npy_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int npy_take(npy_cursor *c, char ch)
{
    npy_skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A Python string literal ('...' or "...", no escapes) into buf. */
static int npy_string(npy_cursor *c, char *buf, size_t len)
{
    npy_skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= len) return 0;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    buf[n] = 0;
    return 1;
}

static int npy_word(npy_cursor *c, const char *w)
{
    npy_skip_space(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* The header dict's fields, or a message saying what is wrong with it. */
typedef struct npy_header {
    char descr[32];
    int fortran;
    int ndim;
    int64_t shape[32];
    int have_descr, have_order, have_shape;
} npy_header;

static const char *npy_parse_dict(const char *text, size_t len, npy_header *h)
{
    npy_cursor c = {text, text + len};
    memset(h, 0, sizeof *h);
    if (!npy_take(&c, '{')) return "the header is not a Python dict literal";
    for (;;) {
        if (npy_take(&c, '}')) break;
        char key[32];
        if (!npy_string(&c, key, sizeof key) || !npy_take(&c, ':')) return "a key of the header dict is malformed";
        if (!strcmp(key, "descr")) {
            if (!npy_string(&c, h->descr, sizeof h->descr))
                return "'descr' is not a simple dtype string (structured dtypes are not token files)";
            h->have_descr = 1;
        } else if (!strcmp(key, "fortran_order")) {
            if (npy_word(&c, "True")) h->fortran = 1;
            else if (npy_word(&c, "False")) h->fortran = 0;
            else return "'fortran_order' is neither True nor False";
            h->have_order = 1;
        } else if (!strcmp(key, "shape")) {
            if (!npy_take(&c, '(')) return "'shape' is not a tuple";
            while (!npy_take(&c, ')')) {
                npy_skip_space(&c);
                if (c.p >= c.end || *c.p < '0' || *c.p > '9') return "'shape' holds something other than sizes";
                int64_t v = 0;
                while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
                    if (v > (INT64_MAX - 9) / 10) return "a size in 'shape' overflows int64";
                    v = v * 10 + (*c.p++ - '0');
                }
                if (c.p < c.end && *c.p == 'L') c.p++; /* Python 2 long literals */
                if (h->ndim >= 32) return "'shape' has more than 32 dimensions";
                h->shape[h->ndim++] = v;
                if (!npy_take(&c, ',') && !(npy_skip_space(&c), c.p < c.end && *c.p == ')'))
                    return "'shape' is malformed";
            }
            h->have_shape = 1;
        } else {
            return "the header dict has a key other than 'descr', 'fortran_order' and 'shape'";
        }
        if (npy_take(&c, ',')) continue;
        if (npy_take(&c, '}')) break;
        return "the header dict is malformed (expected ',' or '}')";
    }
    if (!h->have_descr || !h->have_order || !h->have_shape)
        return "the header dict lacks one of 'descr', 'fortran_order', 'shape'";
    return NULL;
}

/* Check a mapped .npy file and fill f's token fields. */
static gpucore_status npy_open(token_file *f, const uint8_t *m, size_t size)
{
    if (size < 10) return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" is a truncated .npy file (%zu bytes)",
                                            f->path, size);
    int major = m[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)m[8] | (size_t)m[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" is a truncated .npy file", f->path);
        hlen = (size_t)m[8] | (size_t)m[9] << 8 | (size_t)m[10] << 16 | (size_t)m[11] << 24;
        hstart = 12;
    } else {
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" is .npy format version %d.%d; versions 1, 2 "
                                 "and 3 are known", f->path, major, m[7]);
    }
    if (hlen > size - hstart)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\": the .npy header length says %zu bytes but "
                                 "the file has %zu after it (truncated)", f->path, hlen, size - hstart);
    npy_header h;
    const char *why = npy_parse_dict((const char *)m + hstart, hlen, &h);
    if (why) return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\": bad .npy header: %s", f->path, why);
    if (!strcmp(h.descr, "<u2")) {
        f->elem_bytes = 2;
    } else if (!strcmp(h.descr, "<i4")) {
        f->elem_bytes = 4;
        f->is_signed = 1;
    } else if (!strcmp(h.descr, "<u4")) {
        f->elem_bytes = 4;
    } else {
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" holds dtype '%s'; token files are uint16 "
                                 "('<u2'), int32 ('<i4') or uint32 ('<u4'), little-endian (convert with "
                                 "numpy's astype)", f->path, h.descr);
    }
    int64_t n = 1, big_dims = 0;
    for (int i = 0; i < h.ndim; i++) {
        if (h.shape[i] > 1) big_dims++;
        if (h.shape[i] && n > INT64_MAX / 4 / h.shape[i])
            return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\": the .npy shape's element count overflows",
                                     f->path);
        n *= h.shape[i];
    }
    if (h.fortran && big_dims > 1)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" is a Fortran-order array of %d dimensions; "
                                 "save it in C order (numpy.ascontiguousarray) to read it as one token stream",
                                 f->path, h.ndim);
    size_t data = hstart + hlen;
    if ((uint64_t)(size - data) != (uint64_t)n * (uint64_t)f->elem_bytes)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\": the .npy shape says %" PRId64 " tokens "
                                 "(%" PRId64 " bytes) but the file has %zu bytes of data (%s)", f->path, n,
                                 n * f->elem_bytes, size - data,
                                 (uint64_t)(size - data) < (uint64_t)n * (uint64_t)f->elem_bytes ? "truncated"
                                                                                                 : "trailing bytes");
    f->tokens = m + data;
    f->ntok = n;
    return GPUCORE_OK;
}

static int32_t read_le32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Check a mapped llm.c file and fill f's token fields. */
static gpucore_status llmc_open(token_file *f, const uint8_t *m, size_t size)
{
    if (size < LLMC_HEADER_BYTES)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" is %zu bytes, shorter than llm.c's 1024-byte "
                                 "header (truncated, or not a token file)", f->path, size);
    int32_t magic = read_le32(m), version = read_le32(m + 4), count = read_le32(m + 8);
    if (magic != LLMC_MAGIC)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" starts with %" PRId32 ", not llm.c's magic "
                                 "%d, nor is it a .npy file", f->path, magic, LLMC_MAGIC);
    if (version != 1 && version != 2)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" is llm.c format version %" PRId32 "; version 1 "
                                 "(uint16 tokens) and 2 (uint32 tokens) are known", f->path, version);
    f->elem_bytes = version == 1 ? 2 : 4;
    uint64_t data = size - LLMC_HEADER_BYTES;
    if (count < 0 || (uint64_t)count * (uint64_t)f->elem_bytes != data)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\": the header says %" PRId32 " tokens (%" PRId64
                                 " bytes) but the file holds %" PRIu64 " bytes after the header (%s)", f->path, count,
                                 (int64_t)count * f->elem_bytes, data,
                                 count >= 0 && (uint64_t)count * (uint64_t)f->elem_bytes > data ? "truncated"
                                                                                               : "size disagrees");
    f->tokens = m + LLMC_HEADER_BYTES;
    f->ntok = count;
    return GPUCORE_OK;
}

static void file_close(token_file *f)
{
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

static gpucore_status file_open(token_file *f, const char *path, int64_t seq_len)
{
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, TD "_open: out of host memory");
    int fd;
    uint64_t size64;
    gpucore_status ost = gpucore_io_open_regular(path, TD "_open", &fd, &size64);
    if (ost) return ost;
    size_t size = (size_t)size64;
    if (size == 0) {
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD "_open: \"%s\" is empty", path);
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (m == MAP_FAILED)
        return gpucore_set_error(GPUCORE_ERR_IO, TD "_open: cannot map \"%s\": %s", path, strerror(map_errno));
    f->map = m;
    f->map_len = size;
    const uint8_t *b = m;
    gpucore_status st = size >= 6 && !memcmp(b, "\x93NUMPY", 6) ? npy_open(f, b, size) : llmc_open(f, b, size);
    if (st) return st;
    f->nwin = f->ntok > seq_len ? (f->ntok - 1) / seq_len : 0;
    return GPUCORE_OK;
}

/* ------------------------------------------------------------ order and windows */

/* The permutation of epoch e (shuffle 1), cached. */
static gpucore_status epoch_perm(gpucore_token_data *d, int64_t epoch)
{
    if (d->perm_epoch == epoch) return GPUCORE_OK;
    int64_t n = d->windows;
    for (int64_t i = 0; i < n; i++) d->perm[i] = i;
    uint32_t key[2] = {(uint32_t)d->opt.seed, (uint32_t)(d->opt.seed >> 32)};
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), (uint32_t)epoch,
                           (uint32_t)((uint64_t)epoch >> 32)};
        gpucore_philox_out r = gpucore_philox4x32_10_full(ctr, key);
        uint64_t u = (uint64_t)r.v[0] | (uint64_t)r.v[1] << 32;
        int64_t j = (int64_t)(((unsigned __int128)u * (uint64_t)(i + 1)) >> 64);
        int64_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
    return GPUCORE_OK;
}

static gpucore_status batch_windows(gpucore_token_data *d, int64_t k, int64_t *out)
{
    int64_t epoch = k / d->per_epoch, step = k % d->per_epoch, B = d->opt.batch_size;
    int64_t first = (step * d->opt.world_size + d->opt.rank) * B;
    if (d->opt.shuffle) {
        gpucore_status st = epoch_perm(d, epoch);
        if (st) return st;
    }
    for (int64_t b = 0; b < B; b++) out[b] = d->opt.shuffle ? d->perm[first + b] : first + b;
    return GPUCORE_OK;
}

static const token_file *file_of_window(const gpucore_token_data *d, int64_t w)
{
    int64_t lo = 0, hi = d->nfiles - 1;
    while (lo < hi) { /* the last file whose first window is <= w */
        int64_t mid = (lo + hi + 1) / 2;
        if (d->files[mid].first_window <= w) lo = mid;
        else hi = mid - 1;
    }
    return &d->files[lo];
}

static void store_token(void *host, int32_t dtype, int64_t i, int64_t v)
{
    if (dtype == GPUCORE_I32) ((int32_t *)host)[i] = (int32_t)v;
    else ((int64_t *)host)[i] = v;
}

/* Elements of one staged batch: [2, B, T] (shifted layout) or [B, T + 1] (window layout). */
static int64_t batch_elements(const gpucore_token_data_options *o)
{
    return o->layout == GPUCORE_TOKEN_LAYOUT_WINDOW ? o->batch_size * (o->seq_len + 1)
                                                    : 2 * o->batch_size * o->seq_len;
}

/* Gather batch k into host memory `host` (batch_elements of the dataset's dtype). */
static gpucore_status gather(gpucore_token_data *d, int64_t k, void *host, int64_t *wins)
{
    gpucore_status st = batch_windows(d, k, wins);
    if (st) return st;
    int64_t B = d->opt.batch_size, T = d->opt.seq_len, vocab = d->opt.vocab_size;
    int64_t limit = d->opt.dtype == GPUCORE_I32 ? INT32_MAX : INT64_MAX;
    for (int64_t b = 0; b < B; b++) {
        const token_file *f = file_of_window(d, wins[b]);
        int64_t start = (wins[b] - f->first_window) * T;
        for (int64_t t = 0; t <= T; t++) {
            const uint8_t *p = f->tokens + (start + t) * f->elem_bytes;
            int64_t v;
            if (f->elem_bytes == 2) v = (int64_t)((uint16_t)(p[0] | p[1] << 8));
            else v = f->is_signed ? (int64_t)read_le32(p) : (int64_t)(uint32_t)read_le32(p);
            if (v < 0 || (vocab > 0 && v >= vocab) || v > limit)
                return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, TD ": \"%s\" token %" PRId64 " is %" PRId64 ", %s",
                                         f->path, start + t, v,
                                         v < 0 ? "negative" : v > limit ? "too large for int32 ids (use dtype I64)"
                                                                        : "not below the vocabulary size");
            if (d->opt.layout == GPUCORE_TOKEN_LAYOUT_WINDOW) {
                store_token(host, d->opt.dtype, b * (T + 1) + t, v);
                continue;
            }
            if (t < T) store_token(host, d->opt.dtype, b * T + t, v);             /* input_ids[b, t] */
            if (t > 0) store_token(host, d->opt.dtype, B * T + b * T + t - 1, v); /* labels[b, t - 1] */
        }
    }
    return GPUCORE_OK;
}

/* Stage batch k: gather it into its slot's pinned memory and start its copy. A failure is
 * kept in the slot and reported by the gpucore_token_data_next that hands the batch out. */
static gpucore_status stage(gpucore_token_data *d, int64_t k)
{
    batch_slot *s = &d->slot[k % 2];
    gpucore_status st = GPUCORE_OK;
    if (s->both) {
        gpucore_tensor_destroy(s->both);
        s->both = NULL;
    }
    s->status = GPUCORE_OK;
    s->message[0] = 0;
    /* the pinned buffer may still be read by the copy of batch k - 2 */
    if (s->copy_recorded && (st = gpucore_event_synchronize(s->copied))) goto fail;
    int64_t *wins = malloc((size_t)d->opt.batch_size * sizeof *wins);
    if (!wins) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, TD ": out of host memory");
        goto fail;
    }
    st = gather(d, k, s->pinned, wins);
    free(wins);
    if (st) goto fail;
    int64_t shape[1] = {batch_elements(&d->opt)};
    gpucore_stream *prev = NULL;
    if ((st = gpucore_context_current_stream(d->ctx, &prev))) goto fail;
    /* allocated on the copy stream: the tensor's memory follows that stream's order */
    if ((st = gpucore_context_set_current_stream(d->ctx, d->copy_stream))) goto fail;
    st = gpucore_tensor_create(d->ctx, (gpucore_dtype)d->opt.dtype, 1, shape, &s->both);
    gpucore_context_set_current_stream(d->ctx, prev);
    if (st) goto fail;
    if ((st = gpucore_copy_from_host_async(s->both, s->pinned, gpucore_tensor_nbytes(s->both), d->copy_stream)) ||
        (st = gpucore_event_record(s->copied, d->copy_stream)))
        goto fail;
    s->copy_recorded = 1;
    return GPUCORE_OK;
fail:
    if (s->both) {
        gpucore_tensor_destroy(s->both);
        s->both = NULL;
    }
    s->status = st;
    snprintf(s->message, sizeof s->message, "%s", gpucore_last_error());
    gpucore_clear_error();
    return st;
}

/* ------------------------------------------------------------ the API */

static void dataset_free(gpucore_token_data *d)
{
    if (d->copy_stream) gpucore_stream_synchronize(d->copy_stream);
    for (int i = 0; i < 2; i++) {
        batch_slot *s = &d->slot[i];
        if (s->both) gpucore_tensor_destroy(s->both);
        if (s->pinned) gpucore_host_free(d->ctx, s->pinned);
        if (s->copied) gpucore_event_destroy(s->copied);
    }
    if (d->copy_stream) gpucore_stream_destroy(d->copy_stream);
    for (int64_t i = 0; i < d->nfiles; i++) file_close(&d->files[i]);
    free(d->files);
    free(d->perm);
    free(d);
}

static gpucore_status check_options(const gpucore_token_data_options *o)
{
    if (o->struct_size < (int64_t)sizeof *o)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: opts->struct_size is %" PRId64 "; set it to "
                                 "sizeof(gpucore_token_data_options) (%zu), e.g. with gpucore_token_data_options_default",
                                 o->struct_size, sizeof *o);
    if (o->batch_size < 1 || o->seq_len < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: batch_size %" PRId64 " and seq_len %" PRId64
                                 " must be >= 1", o->batch_size, o->seq_len);
    if (o->batch_size > ((int64_t)1 << 40) / o->seq_len)
        return gpucore_set_error(GPUCORE_ERR_OVERFLOW, TD "_open: batch_size %" PRId64 " x seq_len %" PRId64
                                 " is too large", o->batch_size, o->seq_len);
    if (o->dtype != GPUCORE_I32 && o->dtype != GPUCORE_I64)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, TD "_open: dtype %s; token ids are i32 or i64",
                                 gpucore_dtype_name((gpucore_dtype)o->dtype));
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: rank %d of world_size %d: need 0 <= rank < "
                                 "world_size", (int)o->rank, (int)o->world_size);
    if (o->shuffle != 0 && o->shuffle != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: shuffle is %d; 0 or 1", (int)o->shuffle);
    if ((o->layout != GPUCORE_TOKEN_LAYOUT_SHIFTED && o->layout != GPUCORE_TOKEN_LAYOUT_WINDOW) || o->reserved)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: layout %d (0 shifted, 1 window) or reserved %d "
                                 "(0) is out of range", (int)o->layout, (int)o->reserved);
    if (o->vocab_size < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: vocab_size %" PRId64 " is negative",
                                 o->vocab_size);
    return GPUCORE_OK;
}

gpucore_status gpucore_token_data_open(gpucore_context *ctx, const char *const *paths, int64_t count,
                                       const gpucore_token_data_options *opts, gpucore_token_data **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_open: out is NULL");
    *out = NULL;
    gpucore_status st = gpucore_check_context(ctx, TD "_open");
    if (st) return st;
    if (!paths || !opts) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_open: paths or opts is NULL");
    if (count < 1) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: count is %" PRId64 "; give at "
                                            "least one file", count);
    for (int64_t i = 0; i < count; i++)
        if (!paths[i]) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_open: paths[%" PRId64 "] is NULL", i);
    if ((st = check_options(opts))) return st;
    gpucore_token_data *d = calloc(1, sizeof *d);
    if (!d || !(d->files = calloc((size_t)count, sizeof *d->files))) {
        free(d);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, TD "_open: out of host memory");
    }
    d->ctx = ctx;
    memcpy(&d->opt, opts, sizeof d->opt);
    d->perm_epoch = -1;
    for (int64_t i = 0; i < count; i++) {
        d->nfiles = i + 1;
        if ((st = file_open(&d->files[i], paths[i], opts->seq_len))) goto fail;
        d->files[i].first_window = d->windows;
        d->windows += d->files[i].nwin;
        d->tokens += d->files[i].ntok;
    }
    int64_t per_batch = opts->batch_size * opts->world_size;
    d->per_epoch = d->windows / per_batch;
    if (d->per_epoch == 0) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_open: the files hold %" PRId64 " tokens, %" PRId64
                               " windows of seq_len + 1 = %" PRId64 " tokens; one batch over %d rank(s) needs %" PRId64
                               " windows (lower batch_size or seq_len, or give more data)", d->tokens, d->windows,
                               opts->seq_len + 1, (int)opts->world_size, per_batch);
        goto fail;
    }
    if (opts->shuffle && !(d->perm = malloc((size_t)d->windows * sizeof *d->perm))) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, TD "_open: out of host memory for a permutation of %" PRId64
                               " windows", d->windows);
        goto fail;
    }
    if ((st = gpucore_stream_create(ctx, 0, &d->copy_stream))) goto fail;
    int64_t bytes = batch_elements(opts) * gpucore_dtype_size((gpucore_dtype)opts->dtype);
    for (int i = 0; i < 2; i++)
        if ((st = gpucore_host_alloc(ctx, bytes, d->copy_stream, &d->slot[i].pinned)) ||
            (st = gpucore_event_create(ctx, &d->slot[i].copied)))
            goto fail;
    stage(d, 0); /* a failure is reported by the first gpucore_token_data_next */
    *out = d;
    return GPUCORE_OK;
fail:;
    char why[768];
    snprintf(why, sizeof why, "%s", gpucore_last_error());
    dataset_free(d);
    return gpucore_set_error(st, "%s", why);
}

gpucore_status gpucore_token_data_close(gpucore_token_data *d)
{
    if (d) dataset_free(d);
    return GPUCORE_OK;
}

gpucore_status gpucore_token_data_sizes(const gpucore_token_data *d, int64_t *tokens, int64_t *windows,
                                        int64_t *batches_per_epoch)
{
    if (!d) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_sizes: data is NULL");
    if (tokens) *tokens = d->tokens;
    if (windows) *windows = d->windows;
    if (batches_per_epoch) *batches_per_epoch = d->per_epoch;
    return GPUCORE_OK;
}

/* input_ids (which 0) or labels (1) as a view of the staged batch: half `which` of
 * [2, B, T] in the shifted layout, the whole [B, T + 1] in the window layout. */
static gpucore_status batch_view(gpucore_token_data *d, gpucore_tensor *both, int which, gpucore_tensor **out)
{
    int window = d->opt.layout == GPUCORE_TOKEN_LAYOUT_WINDOW;
    int64_t B = d->opt.batch_size, T = d->opt.seq_len + window;
    int64_t shape[2] = {B, T}, strides[2] = {T, 1};
    return gpucore_tensor_as_strided(both, 2, shape, strides, window ? 0 : which * B * T, out);
}

gpucore_status gpucore_token_data_next(gpucore_token_data *d, gpucore_stream *stream, gpucore_tensor **input_ids,
                                       gpucore_tensor **labels, int64_t *epoch, int64_t *step)
{
    if (input_ids) *input_ids = NULL;
    if (labels) *labels = NULL;
    if (!d || !input_ids || !labels)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_next: data, input_ids or labels is NULL");
    gpucore_stream *s;
    gpucore_status st = gpucore_resolve_stream(d->ctx, stream, TD "_next", &s);
    if (st) return st;
    int64_t k = d->position;
    batch_slot *slot = &d->slot[k % 2];
    if (slot->status) { /* the staging failed: report it and move past the batch */
        gpucore_status failed = slot->status;
        char why[sizeof slot->message + 32];
        snprintf(why, sizeof why, "%s (batch %" PRId64 ")", slot->message, k);
        d->position = k + 1;
        stage(d, k + 1);
        return gpucore_set_error(failed, "%s", why);
    }
    gpucore_tensor *ids = NULL, *lab = NULL;
    if ((st = gpucore_stream_wait_event(s, slot->copied)) || (st = gpucore_tensor_record_stream(slot->both, s)) ||
        (st = batch_view(d, slot->both, 0, &ids)) || (st = batch_view(d, slot->both, 1, &lab))) {
        gpucore_tensor_destroy(ids);
        return st;
    }
    gpucore_tensor_destroy(slot->both); /* the views keep the memory */
    slot->both = NULL;
    if (epoch) *epoch = k / d->per_epoch;
    if (step) *step = k % d->per_epoch;
    *input_ids = ids;
    *labels = lab;
    d->position = k + 1;
    stage(d, k + 1); /* a failure is reported with that batch */
    return GPUCORE_OK;
}

gpucore_status gpucore_token_data_position(const gpucore_token_data *d, int64_t *batch_index)
{
    if (!d || !batch_index) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_position: data or batch_index is NULL");
    *batch_index = d->position;
    return GPUCORE_OK;
}

gpucore_status gpucore_token_data_seek(gpucore_token_data *d, int64_t batch_index)
{
    if (!d) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_seek: data is NULL");
    if (batch_index < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_seek: batch_index %" PRId64 " is negative",
                                 batch_index);
    if (batch_index == d->position) return GPUCORE_OK;
    batch_slot *old = &d->slot[d->position % 2];
    if (old->both) {
        gpucore_tensor_destroy(old->both);
        old->both = NULL;
    }
    old->status = GPUCORE_OK;
    d->position = batch_index;
    stage(d, batch_index);
    return GPUCORE_OK;
}

gpucore_status gpucore_token_data_batch_windows(gpucore_token_data *d, int64_t batch_index, int64_t *windows)
{
    if (!d || !windows) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_batch_windows: data or windows is NULL");
    if (batch_index < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_batch_windows: batch_index %" PRId64 " is negative",
                                 batch_index);
    return batch_windows(d, batch_index, windows);
}

/* ------------------------------------------------------------ writing llm.c's format */

static void put_le(uint8_t *p, uint32_t v, int bytes)
{
    for (int k = 0; k < bytes; k++) p[k] = (uint8_t)(v >> (8 * k));
}

gpucore_status gpucore_token_data_write(const char *path, const int32_t *tokens, int64_t count)
{
    if (!path || (!tokens && count > 0))
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, TD "_write: path or tokens is NULL");
    if (count < 0 || count > INT32_MAX)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_write: count %" PRId64 " is outside llm.c's "
                                 "header range 0..%d", count, INT32_MAX);
    int32_t top = 0;
    for (int64_t k = 0; k < count; k++) {
        if (tokens[k] < 0)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, TD "_write: token %" PRId64 " is %" PRId32
                                     " (negative)", k, tokens[k]);
        if (tokens[k] > top) top = tokens[k];
    }
    int elem = top < 65536 ? 2 : 4; /* version 1: uint16 tokens, version 2: uint32 */
    uint8_t header[LLMC_HEADER_BYTES] = {0};
    put_le(header, LLMC_MAGIC, 4);
    put_le(header + 4, elem == 2 ? 1 : 2, 4);
    put_le(header + 8, (uint32_t)count, 4);
    FILE *f = fopen(path, "wb");
    if (!f) return gpucore_set_error(GPUCORE_ERR_IO, TD "_write: cannot create \"%s\": %s", path, strerror(errno));
    int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    uint8_t buf[4096];
    for (int64_t k = 0; ok && k < count;) {
        int64_t n = 0;
        for (; n < (int64_t)sizeof buf / elem && k < count; n++, k++) put_le(buf + n * elem, (uint32_t)tokens[k], elem);
        ok = fwrite(buf, (size_t)elem, (size_t)n, f) == (size_t)n;
    }
    int err = errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (!ok) {
        unlink(path);
        return gpucore_set_error(GPUCORE_ERR_IO, TD "_write: writing \"%s\" failed: %s", path, strerror(err));
    }
    return GPUCORE_OK;
}
