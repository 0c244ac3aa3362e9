/*
 * test_token_data.c — the token-data section: random llm.c and .npy token files
 * (uint16, int32, uint32; several files in one dataset), every batch checked token by
 * token against the files through the windows the dataset names, permutations that are
 * deterministic per seed and differ per epoch, shards of ranks that are disjoint and
 * cover an epoch, resume by seek giving the same batches, and bad files and options
 * refused with a status and a message. Runs on every backend present.
 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "check.h"

static char dir[256];

typedef struct token_file_spec {
    const char *name;
    int kind;          /* 0 llm.c v1 (uint16), 1 llm.c v2 (uint32), 2 npy <u2, 3 npy <i4, 4 npy <u4 2-d */
    int64_t ntok;
    int64_t *tok;      /* the tokens written */
} token_file_spec;

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void write_bytes(const char *name, const void *a, size_t na, const void *b, size_t nb)
{
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    if (na) fwrite(a, 1, na, f);
    if (nb) fwrite(b, 1, nb, f);
    fclose(f);
}

/* An .npy file: magic, version, header dict padded to 64 bytes, data. */
static void write_npy(const char *name, int major, const char *dict, const void *data, size_t nb)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    uint8_t *h = malloc(total);
    memcpy(h, "\x93NUMPY", 6);
    h[6] = (uint8_t)major;
    h[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) h[8 + i] = (uint8_t)(hlen >> (8 * i));
    memcpy(h + pre, dict, dl);
    memset(h + pre + dl, ' ', hlen - dl - 1);
    h[total - 1] = '\n';
    write_bytes(name, h, total, data, nb);
    free(h);
}

static void write_llmc(const char *name, int32_t magic, int32_t version, int32_t count, const void *data, size_t nb)
{
    int32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    write_bytes(name, header, sizeof header, data, nb);
}

static void make_file(token_file_spec *s, int64_t vocab)
{
    s->tok = malloc((size_t)s->ntok * sizeof *s->tok);
    int esz = s->kind == 0 || s->kind == 2 ? 2 : 4;
    uint8_t *raw = malloc((size_t)s->ntok * esz);
    for (int64_t i = 0; i < s->ntok; i++) {
        int64_t v = rand() % vocab;
        if (s->kind == 1 || s->kind == 4) v += (int64_t)70000; /* past uint16 */
        s->tok[i] = v;
        if (esz == 2) ((uint16_t *)raw)[i] = (uint16_t)v;
        else ((uint32_t *)raw)[i] = (uint32_t)v;
    }
    char dict[160];
    switch (s->kind) {
    case 0: write_llmc(s->name, 20240520, 1, (int32_t)s->ntok, raw, (size_t)s->ntok * 2); break;
    case 1: write_llmc(s->name, 20240520, 2, (int32_t)s->ntok, raw, (size_t)s->ntok * 4); break;
    case 2:
        snprintf(dict, sizeof dict, "{'descr': '<u2', 'fortran_order': False, 'shape': (%lld,), }", (long long)s->ntok);
        write_npy(s->name, 1, dict, raw, (size_t)s->ntok * 2);
        break;
    case 3:
        snprintf(dict, sizeof dict, "{'descr': '<i4', 'fortran_order': False, 'shape': (%lld,), }", (long long)s->ntok);
        write_npy(s->name, 2, dict, raw, (size_t)s->ntok * 4);
        break;
    default: /* a 2-d C-order array is one flat stream */
        snprintf(dict, sizeof dict, "{\"descr\":\"<u4\",\"fortran_order\":False,\"shape\":(%lld, 5)}",
                 (long long)s->ntok / 5);
        write_npy(s->name, 1, dict, raw, (size_t)s->ntok * 4);
        break;
    }
    free(raw);
}

static gpucore_token_data *open_set(gpucore_context *ctx, token_file_spec *files, int n,
                                    const gpucore_token_data_options *o)
{
    const char *paths[8];
    char buf[8][512];
    for (int i = 0; i < n; i++) {
        path_of(buf[i], sizeof buf[i], files[i].name);
        paths[i] = buf[i];
    }
    gpucore_token_data *d = NULL;
    CHECK_OK(gpucore_token_data_open(ctx, paths, n, o, &d));
    return d;
}

/* Token `t` of window w (windows numbered file by file). */
static int64_t window_token(token_file_spec *files, int n, int64_t T, int64_t w, int64_t t)
{
    for (int i = 0; i < n; i++) {
        int64_t nw = files[i].ntok > T ? (files[i].ntok - 1) / T : 0;
        if (w < nw) return files[i].tok[w * T + t];
        w -= nw;
    }
    return -1;
}

/* Fetch the next batch and check every token against the files; returns 1 if all match. */
static int check_next_batch(gpucore_token_data *d, token_file_spec *files, int n, const gpucore_token_data_options *o,
                            gpucore_stream *stream, int64_t *wins_out)
{
    int window = o->layout == GPUCORE_TOKEN_LAYOUT_WINDOW;
    int64_t B = o->batch_size, T = o->seq_len + window, k = -1, epoch = -1, step = -1, per_epoch = 0;
    CHECK_OK(gpucore_token_data_position(d, &k));
    CHECK_OK(gpucore_token_data_sizes(d, NULL, NULL, &per_epoch));
    int64_t wins[64];
    CHECK_OK(gpucore_token_data_batch_windows(d, k, wins));
    gpucore_tensor *ids = NULL, *lab = NULL;
    CHECK_OK(gpucore_token_data_next(d, stream, &ids, &lab, &epoch, &step));
    if (!ids || !lab) return 0;
    CHECK(epoch == k / per_epoch && step == k % per_epoch);
    int64_t shape[2];
    CHECK_OK(gpucore_tensor_shape(ids, shape));
    CHECK(gpucore_tensor_ndim(ids) == 2 && shape[0] == B && shape[1] == T && (int32_t)gpucore_tensor_dtype(lab) == o->dtype);
    size_t esz = (size_t)gpucore_dtype_size((gpucore_dtype)o->dtype), nb = (size_t)(B * T) * esz;
    uint8_t *hi = malloc(nb), *hl = malloc(nb);
    memset(hi, 0xA5, nb); /* poison */
    memset(hl, 0xA5, nb);
    if (stream) {
        CHECK_OK(gpucore_copy_to_host_async(hi, (int64_t)nb, ids, stream));
        CHECK_OK(gpucore_copy_to_host_async(hl, (int64_t)nb, lab, stream));
        CHECK_OK(gpucore_stream_synchronize(stream));
    } else {
        CHECK_OK(gpucore_copy_to_host(hi, (int64_t)nb, ids));
        CHECK_OK(gpucore_copy_to_host(hl, (int64_t)nb, lab));
    }
    int ok = 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t i = b * T + t;
            int64_t vi = esz == 4 ? ((int32_t *)hi)[i] : ((int64_t *)hi)[i];
            int64_t vl = esz == 4 ? ((int32_t *)hl)[i] : ((int64_t *)hl)[i];
            if (vi != window_token(files, n, o->seq_len, wins[b], t) ||
                vl != window_token(files, n, o->seq_len, wins[b], t + !window))
                ok = 0;
        }
    free(hi);
    free(hl);
    gpucore_tensor_destroy(ids);
    gpucore_tensor_destroy(lab);
    if (wins_out) memcpy(wins_out, wins, (size_t)B * sizeof *wins);
    return ok;
}

static token_file_spec files[4];
static const int nfiles = 4;

static void test_windows_exact(gpucore_context *ctx)
{
    int64_t base = test_allocated_bytes(ctx);
    gpucore_token_data_options o;
    CHECK_OK(gpucore_token_data_options_default(&o));
    o.batch_size = 3;
    o.seq_len = 7;
    o.seed = 1234;
    int64_t tokens = 0, windows = 0, per_epoch = 0, want_windows = 0;
    for (int i = 0; i < nfiles; i++) want_windows += (files[i].ntok - 1) / o.seq_len;
    for (int dt = 0; dt < 3; dt++) { /* i32, i64, and i64 in the window layout */
        o.dtype = dt ? GPUCORE_I64 : GPUCORE_I32;
        o.layout = dt == 2 ? GPUCORE_TOKEN_LAYOUT_WINDOW : GPUCORE_TOKEN_LAYOUT_SHIFTED;
        gpucore_token_data *d = open_set(ctx, files, nfiles, &o);
        if (!d) return;
        CHECK_OK(gpucore_token_data_sizes(d, &tokens, &windows, &per_epoch));
        CHECK(tokens == files[0].ntok + files[1].ntok + files[2].ntok + files[3].ntok);
        CHECK(windows == want_windows && per_epoch == windows / o.batch_size);
        gpucore_stream *s = NULL;
        CHECK_OK(gpucore_stream_create(ctx, 0, &s));
        int all = 1;
        for (int64_t k = 0; k < 2 * per_epoch + 3; k++) all &= check_next_batch(d, files, nfiles, &o, k % 3 ? NULL : s, NULL);
        CHECK(all);
        CHECK_OK(gpucore_stream_destroy(s));
        CHECK_OK(gpucore_token_data_close(d));
    }
    CHECK(test_allocated_bytes(ctx) == base);
}

/* Windows of every batch of `epochs` epochs for one rank, into w (per_epoch * B per epoch). */
static int64_t epoch_windows(gpucore_context *ctx, gpucore_token_data_options *o, int epochs, int64_t *w)
{
    gpucore_token_data *d = open_set(ctx, files, nfiles, o);
    int64_t per_epoch = 0;
    if (!d) return 0;
    CHECK_OK(gpucore_token_data_sizes(d, NULL, NULL, &per_epoch));
    for (int64_t k = 0; k < epochs * per_epoch; k++) CHECK_OK(gpucore_token_data_batch_windows(d, k, w + k * o->batch_size));
    CHECK_OK(gpucore_token_data_close(d));
    return per_epoch;
}

static void test_order_and_shards(gpucore_context *ctx)
{
    gpucore_token_data_options o;
    gpucore_token_data_options_default(&o);
    o.batch_size = 2;
    o.seq_len = 5;
    o.seed = 99;
    static int64_t a[4096], b[4096], all[4][4096];
    int64_t per = epoch_windows(ctx, &o, 2, a);
    int64_t n = per * o.batch_size, windows = 0;
    for (int i = 0; i < nfiles; i++) windows += (files[i].ntok - 1) / o.seq_len;
    epoch_windows(ctx, &o, 2, b);
    CHECK(n > 0 && !memcmp(a, b, (size_t)(2 * n) * sizeof *a));      /* same seed, same order */
    CHECK(memcmp(a, a + n, (size_t)n * sizeof *a) != 0);             /* epochs differ */
    o.seed = 100;
    epoch_windows(ctx, &o, 1, b);
    CHECK(memcmp(a, b, (size_t)n * sizeof *a) != 0);                 /* seeds differ */
    o.shuffle = 0;
    epoch_windows(ctx, &o, 2, b);
    int ident = 1;
    for (int64_t i = 0; i < 2 * n; i++) ident &= b[i] == i % n;
    CHECK(ident);
    /* 3 ranks: disjoint within an epoch, each window at most once, all ranks the same step count */
    o.shuffle = 1;
    o.seed = 7;
    o.world_size = 3;
    int64_t per3 = 0;
    for (int r = 0; r < 3; r++) {
        o.rank = r;
        int64_t p = epoch_windows(ctx, &o, 1, all[r]);
        if (r == 0) per3 = p;
        CHECK(p == per3 && p == windows / (3 * o.batch_size));
    }
    char *seen = calloc((size_t)windows, 1);
    int distinct = 1;
    for (int r = 0; r < 3; r++)
        for (int64_t i = 0; i < per3 * o.batch_size; i++) {
            int64_t w = all[r][i];
            if (w < 0 || w >= windows || seen[w]) distinct = 0;
            else seen[w] = 1;
        }
    CHECK(distinct);
    /* one rank of one epoch over all windows is a permutation (nothing dropped when it divides) */
    o.world_size = 1;
    o.rank = 0;
    o.batch_size = 1;
    memset(seen, 0, (size_t)windows);
    int64_t p1 = epoch_windows(ctx, &o, 1, a);
    int perm = p1 == windows;
    for (int64_t i = 0; i < p1 && perm; i++) {
        if (a[i] < 0 || a[i] >= windows || seen[a[i]]) perm = 0;
        else seen[a[i]] = 1;
    }
    CHECK(perm);
    free(seen);
}

static void test_resume(gpucore_context *ctx)
{
    gpucore_token_data_options o;
    gpucore_token_data_options_default(&o);
    o.batch_size = 4;
    o.seq_len = 3;
    o.seed = 5;
    gpucore_token_data *d = open_set(ctx, files, nfiles, &o), *e = open_set(ctx, files, nfiles, &o);
    if (!d || !e) return;
    int64_t per = 0, pos = -1;
    CHECK_OK(gpucore_token_data_sizes(d, NULL, NULL, &per));
    int64_t wd[64], we[64];
    for (int64_t k = 0; k < per + 2; k++) check_next_batch(d, files, nfiles, &o, NULL, wd);
    CHECK_OK(gpucore_token_data_position(d, &pos));
    CHECK(pos == per + 2);
    /* e resumes at d's position (crossing an epoch) and gives the same batches, then seeks back */
    CHECK_OK(gpucore_token_data_seek(e, pos));
    int same = 1;
    for (int i = 0; i < 3; i++) {
        same &= check_next_batch(d, files, nfiles, &o, NULL, wd);
        same &= check_next_batch(e, files, nfiles, &o, NULL, we);
        same &= !memcmp(wd, we, sizeof(int64_t) * 4);
    }
    CHECK(same);
    CHECK_OK(gpucore_token_data_seek(e, 1));
    CHECK(check_next_batch(e, files, nfiles, &o, NULL, we));
    CHECK_OK(gpucore_token_data_batch_windows(d, 1, wd));
    CHECK(!memcmp(wd, we, sizeof(int64_t) * 4));
    CHECK_STATUS(gpucore_token_data_seek(e, -1), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_token_data_close(d));
    CHECK_OK(gpucore_token_data_close(e));
}

static gpucore_status open_one(gpucore_context *ctx, const char *name, const gpucore_token_data_options *o)
{
    char p[512];
    path_of(p, sizeof p, name);
    const char *paths[1] = {p};
    gpucore_token_data *d = NULL;
    gpucore_status st = gpucore_token_data_open(ctx, paths, 1, o, &d);
    CHECK(st != GPUCORE_OK || d != NULL);
    gpucore_token_data_close(d);
    return st;
}

static void test_bad_files(gpucore_context *ctx)
{
    int64_t base = test_allocated_bytes(ctx);
    gpucore_token_data_options o;
    gpucore_token_data_options_default(&o);
    o.batch_size = 2;
    o.seq_len = 4;
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(rand() % 50000);
    write_llmc("ok.bin", 20240520, 1, 64, tok, sizeof tok);
    CHECK_OK(open_one(ctx, "ok.bin", &o));
    write_llmc("magic.bin", 20240521, 1, 64, tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "magic.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_llmc("version.bin", 20240520, 3, 64, tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "version.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_llmc("truncated.bin", 20240520, 64, 64, tok, 100);  /* count says 128 bytes, 100 there */
    CHECK_STATUS(open_one(ctx, "truncated.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_llmc("count.bin", 20240520, 1, 60, tok, sizeof tok); /* count disagrees with the size */
    CHECK_STATUS(open_one(ctx, "count.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_llmc("negcount.bin", 20240520, 1, -5, tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "negcount.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_bytes("short.bin", tok, 100, NULL, 0);                /* shorter than the header */
    CHECK_STATUS(open_one(ctx, "short.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_bytes("empty.bin", NULL, 0, NULL, 0);
    CHECK_STATUS(open_one(ctx, "empty.bin", &o), GPUCORE_ERR_CORRUPT_FILE);
    CHECK_STATUS(open_one(ctx, "no-such-file.bin", &o), GPUCORE_ERR_IO);
    CHECK_STATUS(open_one(ctx, ".", &o), GPUCORE_ERR_IO);
    write_npy("ok.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (64,), }", tok, sizeof tok);
    CHECK_OK(open_one(ctx, "ok.npy", &o));
    write_npy("f4.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (32,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "f4.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    CHECK(strstr(gpucore_last_error(), "<f4") != NULL);
    write_npy("i8.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (16,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "i8.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("be.npy", 1, "{'descr': '>u2', 'fortran_order': False, 'shape': (64,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "be.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("short.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (65,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "short.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("long.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (63,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "long.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("fortran.npy", 1, "{'descr': '<u2', 'fortran_order': True, 'shape': (8, 8), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "fortran.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("fortran1.npy", 1, "{'descr': '<u2', 'fortran_order': True, 'shape': (64, 1), }", tok, sizeof tok);
    CHECK_OK(open_one(ctx, "fortran1.npy", &o));
    write_npy("struct.npy", 1, "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (64,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "struct.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("nokey.npy", 1, "{'descr': '<u2', 'shape': (64,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "nokey.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("garbled.npy", 1, "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (64,), }", tok, sizeof tok);
    CHECK_STATUS(open_one(ctx, "garbled.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    write_npy("bigshape.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", tok,
              sizeof tok);
    CHECK_STATUS(open_one(ctx, "bigshape.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    uint8_t hdr[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x7f, 0, 0}; /* header length past the end */
    write_bytes("hlen.npy", hdr, sizeof hdr, NULL, 0);
    CHECK_STATUS(open_one(ctx, "hlen.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    hdr[6] = 9;
    write_bytes("npyver.npy", hdr, sizeof hdr, NULL, 0);
    CHECK_STATUS(open_one(ctx, "npyver.npy", &o), GPUCORE_ERR_CORRUPT_FILE);
    /* too little data for one batch: a message, not an empty dataset */
    o.seq_len = 40;
    CHECK_STATUS(open_one(ctx, "ok.bin", &o), GPUCORE_ERR_INVALID_ARGUMENT);
    o.seq_len = 4;
    /* bad options */
    gpucore_token_data_options bad = o;
    bad.dtype = GPUCORE_F32;
    CHECK_STATUS(open_one(ctx, "ok.bin", &bad), GPUCORE_ERR_DTYPE_MISMATCH);
    bad = o;
    bad.rank = 2;
    bad.world_size = 2;
    CHECK_STATUS(open_one(ctx, "ok.bin", &bad), GPUCORE_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.batch_size = 0;
    CHECK_STATUS(open_one(ctx, "ok.bin", &bad), GPUCORE_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.layout = 2;
    CHECK_STATUS(open_one(ctx, "ok.bin", &bad), GPUCORE_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.struct_size = 8;
    CHECK_STATUS(open_one(ctx, "ok.bin", &bad), GPUCORE_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.batch_size = (int64_t)1 << 40;
    CHECK_STATUS(open_one(ctx, "ok.bin", &bad), GPUCORE_ERR_OVERFLOW);
    char p[512];
    path_of(p, sizeof p, "ok.bin");
    const char *paths[2] = {p, NULL};
    gpucore_token_data *d = (gpucore_token_data *)1;
    CHECK_STATUS(gpucore_token_data_open(ctx, paths, 2, &o, &d), GPUCORE_ERR_NULL_POINTER);
    CHECK(d == NULL);
    CHECK_STATUS(gpucore_token_data_open(ctx, paths, 0, &o, &d), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_token_data_open(NULL, paths, 1, &o, &d), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_token_data_open(ctx, paths, 1, NULL, &d), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_token_data_next(NULL, NULL, NULL, NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_token_data_sizes(NULL, NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_token_data_close(NULL));
    /* a token past vocab_size fails its batch only; the next batch comes */
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)(i % 10);
    tok[2] = 10;
    write_llmc("vocab.bin", 20240520, 1, 64, tok, sizeof tok);
    o.shuffle = 0;
    o.vocab_size = 10;
    path_of(p, sizeof p, "vocab.bin");
    CHECK_OK(gpucore_token_data_open(ctx, paths, 1, &o, &d));
    gpucore_tensor *ids = NULL, *lab = NULL;
    CHECK_STATUS(gpucore_token_data_next(d, NULL, &ids, &lab, NULL, NULL), GPUCORE_ERR_CORRUPT_FILE);
    CHECK(ids == NULL && lab == NULL && strstr(gpucore_last_error(), "vocabulary") != NULL);
    CHECK_OK(gpucore_token_data_next(d, NULL, &ids, &lab, NULL, NULL));
    int32_t got[8];
    CHECK_OK(gpucore_copy_to_host(got, sizeof got, ids));
    CHECK(got[0] == 8 && got[4] == 2); /* batch 1 = windows 2 and 3: tokens 8.. and 12.. */
    gpucore_tensor_destroy(ids);
    gpucore_tensor_destroy(lab);
    CHECK_OK(gpucore_token_data_close(d));
    /* a negative int32 token */
    int32_t neg[16];
    for (int i = 0; i < 16; i++) neg[i] = i == 3 ? -7 : i;
    write_npy("neg.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (16,), }", neg, sizeof neg);
    o.vocab_size = 0;
    o.batch_size = 1;
    path_of(p, sizeof p, "neg.npy");
    CHECK_OK(gpucore_token_data_open(ctx, paths, 1, &o, &d));
    CHECK_STATUS(gpucore_token_data_next(d, NULL, &ids, &lab, NULL, NULL), GPUCORE_ERR_CORRUPT_FILE);
    CHECK(strstr(gpucore_last_error(), "negative") != NULL);
    CHECK_OK(gpucore_token_data_close(d));
    CHECK(test_allocated_bytes(ctx) == base);
}

int main(void)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("seed %u\n", seed);
    srand(seed);
    snprintf(dir, sizeof dir, "/tmp/gpucore_token_data_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    /* four files of every kind, sizes not multiples of seq_len; one too short for any window */
    files[0] = (token_file_spec){"a.bin", 0, 200 + rand() % 50, NULL};
    files[1] = (token_file_spec){"b.npy", 3, 3, NULL};
    files[2] = (token_file_spec){"c.npy", 2, 150 + rand() % 50, NULL};
    files[3] = (token_file_spec){"d.bin", 1, 100 + rand() % 30, NULL};
    for (int i = 0; i < nfiles; i++) make_file(&files[i], 50257);
    token_file_spec two_d = {"e.npy", 4, 60, NULL};
    make_file(&two_d, 1000);
    const device_test_fn fns[] = {test_windows_exact, test_order_and_shards, test_resume, test_bad_files};
    for_each_device(fns, 4);
    /* the 2-d uint32 file on the CPU: flat C order */
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    gpucore_token_data_options o;
    gpucore_token_data_options_default(&o);
    o.batch_size = 2;
    o.seq_len = 6;
    o.dtype = GPUCORE_I64;
    gpucore_token_data *d = open_set(ctx, &two_d, 1, &o);
    if (d) {
        int all = 1;
        for (int k = 0; k < 6; k++) all &= check_next_batch(d, &two_d, 1, &o, NULL, NULL);
        CHECK(all);
        CHECK_OK(gpucore_token_data_close(d));
    }
    CHECK_OK(gpucore_context_destroy(ctx));
    for (int i = 0; i < nfiles; i++) free(files[i].tok);
    free(two_d.tok);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_finish("test_token_data");
}
