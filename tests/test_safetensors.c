/*
 * test_safetensors.c — safetensors round trips of every dtype and shape (0-d and
 * empty included), checkpoints with optimizer and loss-scaler state, and bad
 * files: truncated at every length, bad JSON, overlapping / out-of-range /
 * gapped offsets, wrong dtype strings, huge declared sizes, duplicates. Each bad
 * file must be refused with a status and a message, without a crash or a huge
 * allocation. Runs on every backend present.
 */
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>
#include "check.h"

static char dir[256];

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void write_file(const char *name, const void *data, size_t n)
{
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A file from a header string and n data bytes (the header's length is encoded). */
static void write_st(const char *name, const char *header, size_t data_bytes)
{
    size_t hl = strlen(header);
    uint8_t *buf = calloc(1, 8 + hl + data_bytes);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    write_file(name, buf, 8 + hl + data_bytes);
    free(buf);
}

static gpucore_status open_named(const char *name)
{
    char p[512];
    path_of(p, sizeof p, name);
    gpucore_safetensors *f = NULL;
    gpucore_status st = gpucore_safetensors_open(p, &f);
    gpucore_safetensors_close(f);
    return st;
}

static void test_round_trip(gpucore_context *ctx, const char *dev)
{
    static const struct { gpucore_dtype dt; int ndim; int64_t shape[3]; } cases[] = {
        {GPUCORE_F32, 0, {0}},       {GPUCORE_F64, 1, {0}},       {GPUCORE_F16, 2, {3, 5}},
        {GPUCORE_BF16, 3, {2, 0, 4}}, {GPUCORE_I32, 1, {7}},      {GPUCORE_I64, 2, {2, 3}},
        {GPUCORE_U8, 1, {13}},       {GPUCORE_FP8_E4M3, 2, {4, 4}}, {GPUCORE_FP8_E5M2, 0, {0}},
        {GPUCORE_F32, 3, {3, 4, 5}},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    gpucore_tensor *ts[N];
    const char *names[N] = {"scalar", "empty.f64", "h", "bf.empty", "i", "l", "bytes", "e4m3", "e5m2.scalar", "w.3d"};
    uint8_t *host[N];
    for (int i = 0; i < N; i++) {
        CHECK_OK(gpucore_tensor_create(ctx, cases[i].dt, cases[i].ndim, cases[i].shape, &ts[i]));
        int64_t nb = gpucore_tensor_nbytes(ts[i]);
        host[i] = malloc((size_t)nb + 1);
        for (int64_t b = 0; b < nb; b++) host[i][b] = (uint8_t)(rand() & 0xff);
        if (nb) CHECK_OK(gpucore_copy_from_host(ts[i], host[i], nb));
    }
    char p[512];
    path_of(p, sizeof p, "round.safetensors");
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "round trip"};
    CHECK_OK(gpucore_safetensors_save(p, names, ts, N, mk, mv, 2));
    gpucore_safetensors *f = NULL;
    CHECK_OK(gpucore_safetensors_open(p, &f));
    CHECK(gpucore_safetensors_count(f) == N);
    CHECK(f && gpucore_safetensors_metadata(f, "note") && !strcmp(gpucore_safetensors_metadata(f, "note"), "round trip"));
    CHECK(gpucore_safetensors_metadata(f, "absent") == NULL);
    int all_ok = 1;
    for (int i = 0; i < N && f; i++) {
        CHECK(!strcmp(gpucore_safetensors_name(f, i), names[i]));
        gpucore_dtype dt;
        int nd;
        int64_t shape[GPUCORE_MAX_DIMS];
        CHECK_OK(gpucore_safetensors_info(f, names[i], &dt, &nd, shape));
        CHECK(dt == cases[i].dt && nd == cases[i].ndim);
        for (int d = 0; d < nd; d++) CHECK(shape[d] == cases[i].shape[d]);
        gpucore_tensor *back = NULL;
        CHECK_OK(gpucore_safetensors_load_tensor(f, ctx, names[i], &back));
        int64_t nb = gpucore_tensor_nbytes(ts[i]);
        uint8_t *got = malloc((size_t)nb + 1);
        if (nb) CHECK_OK(gpucore_copy_to_host(got, nb, back));
        int same = memcmp(got, host[i], (size_t)nb) == 0;
        CHECK(same);
        all_ok &= same;
        free(got);
        gpucore_tensor_destroy(back);
    }
    /* reading into a tensor of the wrong dtype or shape is refused */
    CHECK_STATUS(gpucore_safetensors_read(f, "h", ts[9]), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_safetensors_read(f, "w.3d", ts[0]), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_safetensors_read(f, "nope", ts[0]), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_safetensors_close(f);
    /* nothing but the file itself is left in the folder (the temp file was renamed) */
    DIR *dd = opendir(dir);
    int leftovers = 0;
    for (struct dirent *e; dd && (e = readdir(dd));)
        if (strstr(e->d_name, ".tmp.")) leftovers++;
    if (dd) closedir(dd);
    CHECK(leftovers == 0);
    /* bad save arguments */
    const char *dup[2] = {"a", "a"};
    CHECK_STATUS(gpucore_safetensors_save(p, dup, ts, 2, NULL, NULL, 0), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_safetensors_save("/nonexistent-dir/x.safetensors", names, ts, 1, NULL, NULL, 0),
                 GPUCORE_ERR_IO);
    printf("%-14s safetensors round trip of %d tensors (every dtype, 0-d, empty): %s\n", dev, N, all_ok ? "ok" : "FAIL");
    for (int i = 0; i < N; i++) { gpucore_tensor_destroy(ts[i]); free(host[i]); }
}

static void test_checkpoint(gpucore_context *ctx, const char *dev)
{
    int64_t n = 300;
    gpucore_tensor *p[2], *g[2];
    float *h = malloc((size_t)n * 4);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(gpucore_tensor_create(ctx, k ? GPUCORE_BF16 : GPUCORE_F32, 1, &n, &p[k]));
        CHECK_OK(gpucore_tensor_create(ctx, k ? GPUCORE_BF16 : GPUCORE_F32, 1, &n, &g[k]));
        CHECK_OK(gpucore_random(p[k], GPUCORE_NORMAL, 0, 1, 1, (uint64_t)k * 1000, NULL));
        CHECK_OK(gpucore_random(g[k], GPUCORE_NORMAL, 0, 1, 2, (uint64_t)k * 1000, NULL));
    }
    gpucore_optimizer_config c;
    gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &c);
    gpucore_optimizer *opt = NULL, *opt2 = NULL;
    gpucore_loss_scaler *ls = NULL, *ls2 = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, &c, p, 2, &opt));
    CHECK_OK(gpucore_loss_scaler_create(ctx, NULL, &ls));
    for (int s = 0; s < 3; s++) {
        CHECK_OK(gpucore_loss_scaler_unscale(ls, g, 2, NULL));
        CHECK_OK(gpucore_optimizer_step(opt, g, 2, NULL, NULL));
        CHECK_OK(gpucore_loss_scaler_update(ls, NULL));
    }
    gpucore_tensor *lr;
    CHECK_OK(gpucore_optimizer_lr(opt, &lr));
    CHECK_OK(gpucore_fill(lr, 0.25, NULL));
    char path[512];
    path_of(path, sizeof path, "ckpt.safetensors");
    const char *names[2] = {"model.w", "model.b"};
    CHECK_OK(gpucore_checkpoint_save(path, names, p, 2, opt, ls));
    /* a fresh optimizer and scaler over fresh tensors, then resume */
    gpucore_tensor *q[2];
    for (int k = 0; k < 2; k++) {
        CHECK_OK(gpucore_tensor_create(ctx, k ? GPUCORE_BF16 : GPUCORE_F32, 1, &n, &q[k]));
        CHECK_OK(gpucore_fill(q[k], 0.0, NULL));
    }
    CHECK_OK(gpucore_optimizer_create(ctx, &c, q, 2, &opt2));
    CHECK_OK(gpucore_loss_scaler_create(ctx, NULL, &ls2));
    CHECK_OK(gpucore_checkpoint_load(path, names, q, 2, opt2, ls2));
    int same = 1;
    const char *states[3] = {"exp_avg", "exp_avg_sq", "master"};
    for (int k = 0; k < 2; k++) {
        float a[300], b[300];
        uint16_t x[300], y[300];
        int64_t pb = gpucore_tensor_nbytes(p[k]);
        CHECK_OK(gpucore_copy_to_host(k ? (void *)x : (void *)a, pb, p[k]));
        CHECK_OK(gpucore_copy_to_host(k ? (void *)y : (void *)b, pb, q[k]));
        same &= memcmp(k ? (void *)x : (void *)a, k ? (void *)y : (void *)b, (size_t)pb) == 0;
        for (int s = 0; s < 3; s++) {
            gpucore_tensor *t1 = NULL, *t2 = NULL;
            if (gpucore_optimizer_state(opt, k, states[s], &t1) != GPUCORE_OK) continue;
            CHECK_OK(gpucore_optimizer_state(opt2, k, states[s], &t2));
            CHECK_OK(gpucore_copy_to_host(a, n * 4, t1));
            CHECK_OK(gpucore_copy_to_host(b, n * 4, t2));
            same &= memcmp(a, b, (size_t)n * 4) == 0;
        }
    }
    gpucore_tensor *t1, *t2;
    float v1, v2;
    gpucore_optimizer_step_count(opt2, &t2);
    CHECK_OK(gpucore_copy_to_host(&v2, 4, t2));
    CHECK(v2 == 3.0f);
    gpucore_optimizer_lr(opt2, &t2);
    CHECK_OK(gpucore_copy_to_host(&v2, 4, t2));
    CHECK(v2 == 0.25f);
    gpucore_loss_scaler_scale(ls, &t1);
    gpucore_loss_scaler_scale(ls2, &t2);
    CHECK_OK(gpucore_copy_to_host(&v1, 4, t1));
    CHECK_OK(gpucore_copy_to_host(&v2, 4, t2));
    CHECK(v1 == v2);
    CHECK(same);
    /* a checkpoint for another optimizer is refused */
    gpucore_optimizer *sgd = NULL;
    gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_SGD, &c);
    CHECK_OK(gpucore_optimizer_create(ctx, &c, q, 2, &sgd));
    CHECK_STATUS(gpucore_checkpoint_load(path, names, q, 2, sgd, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    char plain[512];
    path_of(plain, sizeof plain, "round.safetensors");
    CHECK_STATUS(gpucore_checkpoint_load(plain, names, q, 2, NULL, NULL), GPUCORE_ERR_CORRUPT_FILE);
    printf("%-14s checkpoint (AdamW f32+bf16 master, loss scaler) save/resume: %s\n", dev, same ? "ok" : "FAIL");
    gpucore_optimizer_destroy(sgd);
    gpucore_optimizer_destroy(opt);
    gpucore_optimizer_destroy(opt2);
    gpucore_loss_scaler_destroy(ls);
    gpucore_loss_scaler_destroy(ls2);
    for (int k = 0; k < 2; k++) { gpucore_tensor_destroy(p[k]); gpucore_tensor_destroy(g[k]); gpucore_tensor_destroy(q[k]); }
    free(h);
}

static void test_bad_files(void)
{
    /* every truncation of a valid file is refused */
    char p[512];
    path_of(p, sizeof p, "round.safetensors");
    FILE *f = fopen(p, "rb");
    uint8_t *buf = malloc(1 << 16);
    size_t n = f ? fread(buf, 1, 1 << 16, f) : 0;
    if (f) fclose(f);
    CHECK(n > 8);
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        write_file("trunc.safetensors", buf, len);
        gpucore_status st = open_named("trunc.safetensors");
        refused += st == GPUCORE_ERR_CORRUPT_FILE && gpucore_last_error()[0];
    }
    CHECK(refused == (int)n);
    printf("truncations refused: %d of %zu\n", refused, n);
    free(buf);

    static const struct { const char *header; size_t data; gpucore_status want; const char *what; } bad[] = {
        {"{\"a\": {\"dtype\": \"F32\", ", 0, GPUCORE_ERR_CORRUPT_FILE, "bad JSON"},
        {"[1, 2]", 0, GPUCORE_ERR_CORRUPT_FILE, "not an object"},
        {"{\"a\": 5}", 0, GPUCORE_ERR_CORRUPT_FILE, "entry not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[4,12]}}", 12, GPUCORE_ERR_CORRUPT_FILE, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[0,8]}}", 8, GPUCORE_ERR_CORRUPT_FILE, "same range twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}", 8, GPUCORE_ERR_CORRUPT_FILE,
         "out of range"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[8,12]}}", 12, GPUCORE_ERR_CORRUPT_FILE, "hole"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, GPUCORE_ERR_CORRUPT_FILE, "trailing"},
        {"{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "dtype F31"},
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "dtype f32"},
        {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "dtype number"},
        {"{\"a\":{\"dtype\":\"BOOL\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_NOT_SUPPORTED, "BOOL"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1000000000000000,1000000000000000],\"data_offsets\":[0,4]}}", 4,
         GPUCORE_ERR_CORRUPT_FILE, "numel overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776],\"data_offsets\":[0,4398046511104]}}", 4,
         GPUCORE_ERR_CORRUPT_FILE, "huge declared size"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}", 4,
         GPUCORE_ERR_CORRUPT_FILE, "offset beyond 2^53"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE,
         "size disagrees with shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "negative dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "fractional"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "3 offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "reversed"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, GPUCORE_ERR_CORRUPT_FILE, "no offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, GPUCORE_ERR_CORRUPT_FILE,
         "9 dims"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[4,8]}}", 8, GPUCORE_ERR_CORRUPT_FILE, "duplicate name"},
        {"{\"__metadata__\":{\"k\":1}}", 0, GPUCORE_ERR_CORRUPT_FILE, "metadata value not a string"},
        {"{} x", 0, GPUCORE_ERR_CORRUPT_FILE, "garbage after JSON"},
        {"", 0, GPUCORE_ERR_CORRUPT_FILE, "empty header"},
    };
    int ok = 0, total = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < total; i++) {
        write_st("bad.safetensors", bad[i].header, bad[i].data);
        gpucore_clear_error();
        gpucore_status st = open_named("bad.safetensors");
        int good = st == bad[i].want && gpucore_last_error()[0];
        if (!good)
            fprintf(stderr, "FAIL bad file '%s': %s (want %s): %s\n", bad[i].what, gpucore_status_string(st),
                    gpucore_status_string(bad[i].want), gpucore_last_error());
        CHECK(good);
        ok += good;
    }
    printf("malformed headers refused: %d of %d (e.g. \"%s\")\n", ok, total, gpucore_last_error());
    /* a header length field of 2^63 and one of 200 MiB: refused before any allocation */
    uint8_t huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    write_file("huge.safetensors", huge, 10);
    CHECK_STATUS(open_named("huge.safetensors"), GPUCORE_ERR_CORRUPT_FILE);
    uint8_t big[16] = {0, 0, 0, 0x0c, 0, 0, 0, 0, '{', '}'};
    write_file("big.safetensors", big, 10);
    CHECK_STATUS(open_named("big.safetensors"), GPUCORE_ERR_CORRUPT_FILE);
    /* valid edge cases: no tensors, metadata only, padding spaces */
    write_st("empty.safetensors", "{}      ", 0);
    CHECK_OK(open_named("empty.safetensors"));
    write_st("meta.safetensors", "{\"__metadata__\":{\"a\":\"b\"}}", 0);
    CHECK_OK(open_named("meta.safetensors"));
    CHECK_STATUS(open_named("does-not-exist.safetensors"), GPUCORE_ERR_IO);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/gpucore-st-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char why[512];
    gpucore_safetensors *probe = NULL;
    if (gpucore_safetensors_open("/dev/null", &probe) == GPUCORE_ERR_NOT_SUPPORTED) {
        snprintf(why, sizeof why, "%s", gpucore_last_error());
        printf("SKIP safetensors: %s\n", why);
        return 77;
    }
    const char *devs[4];
    int nd = test_devices(devs, 4);
    for (int d = 0; d < nd; d++) {
        gpucore_context *ctx = NULL;
        if (gpucore_context_create(devs[d], &ctx) != GPUCORE_OK) {
            printf("SKIP %s: %s\n", devs[d], gpucore_last_error());
            continue;
        }
        test_round_trip(ctx, devs[d]);
        test_checkpoint(ctx, devs[d]);
        CHECK_OK(gpucore_context_destroy(ctx));
    }
    test_bad_files();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
    return check_finish("test_safetensors");
}
