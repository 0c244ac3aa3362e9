/*
 * lm_fixture.c — writes and reads the GPT-2 124M benchmark folder (lm_fixture.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "lm_fixture.h"

#define FIXTURE_SEED 1234u
#define FIXTURE_STAMP "gpt2-124m seed 1234 tokens 65536 v1"

#define CHECK(x)                                                                   \
    do {                                                                           \
        if ((st = (x)) != GPUCORE_OK) {                                            \
            fprintf(stderr, "lm fixture: %s: %s\n", #x, gpucore_last_error());    \
            goto done;                                                             \
        }                                                                          \
    } while (0)

const char *lm_fixture_default_dir(char *buf, size_t len)
{
    const char *d = getenv("GPUCORE_BENCH_LM_DIR"), *tmp = getenv("TMPDIR");
    if (d && *d) snprintf(buf, len, "%s", d);
    else snprintf(buf, len, "%s/gpucore-bench-lm", tmp && *tmp ? tmp : "/tmp");
    return buf;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int lm_fixture_path(char *out, const char *dir, const char *leaf)
{
    int n = snprintf(out, LM_PATH_LEN, "%s/%s", dir, leaf);
    if (n < 0 || n >= LM_PATH_LEN) { fprintf(stderr, "lm fixture: the path %s/%s is too long\n", dir, leaf); return 1; }
    return 0;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "lm fixture: cannot write %s: %s\n", path, strerror(errno)); return 1; }
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "lm fixture: writing %s failed\n", path);
    return bad;
}

static int read_stamp_matches(const char *dir)
{
    char path[LM_PATH_LEN], buf[128] = {0};
    if (lm_fixture_path(path, dir, "fixture.txt")) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    return !strcmp(buf, FIXTURE_STAMP);
}

/* One tensor of the file: name, shape as the file holds it (Conv1D [in, out]), its init. */
typedef struct fx_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    double std; /* > 0: N(0, std); 0: zeros; < 0: ones */
} fx_tensor;

static int fixture_tensors(fx_tensor *t)
{
    int n = 0;
    const double s = 0.02, sp = 0.02 / sqrt(2.0 * LM_LAYERS);
#define T2(nm, a, b, sd) (t[n] = (fx_tensor){"", 2, {a, b}, sd}, snprintf(t[n].name, sizeof t[n].name, "%s", nm), n++)
#define T1(nm, a, sd) (t[n] = (fx_tensor){"", 1, {a, 0}, sd}, snprintf(t[n].name, sizeof t[n].name, "%s", nm), n++)
    T2("transformer.wte.weight", LM_VOCAB, LM_WIDTH, s);
    T2("transformer.wpe.weight", LM_POSITIONS, LM_WIDTH, s);
    char nm[96];
    for (int l = 0; l < LM_LAYERS; l++) {
        static const struct { const char *leaf; int rows, cols; int proj; } mats[] = {
            {"attn.c_attn", 1, 3, 0}, {"attn.c_proj", 1, 1, 1}, {"mlp.c_fc", 1, 4, 0}, {"mlp.c_proj", 4, 1, 1}};
        snprintf(nm, sizeof nm, "transformer.h.%d.ln_1.weight", l); T1(nm, LM_WIDTH, -1);
        snprintf(nm, sizeof nm, "transformer.h.%d.ln_1.bias", l); T1(nm, LM_WIDTH, 0);
        for (int m = 0; m < 4; m++) {
            if (m == 2) {
                snprintf(nm, sizeof nm, "transformer.h.%d.ln_2.weight", l); T1(nm, LM_WIDTH, -1);
                snprintf(nm, sizeof nm, "transformer.h.%d.ln_2.bias", l); T1(nm, LM_WIDTH, 0);
            }
            snprintf(nm, sizeof nm, "transformer.h.%d.%s.weight", l, mats[m].leaf);
            T2(nm, (int64_t)mats[m].rows * LM_WIDTH, (int64_t)mats[m].cols * LM_WIDTH, mats[m].proj ? sp : s);
            snprintf(nm, sizeof nm, "transformer.h.%d.%s.bias", l, mats[m].leaf);
            T1(nm, (int64_t)mats[m].cols * LM_WIDTH, 0);
        }
    }
    T1("transformer.ln_f.weight", LM_WIDTH, -1);
    T1("transformer.ln_f.bias", LM_WIDTH, 0);
#undef T1
#undef T2
    return n;
}

static int write_fixture(gpucore_context *ctx, const char *dir)
{
    char path[LM_PATH_LEN];
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "lm fixture: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char config[1024];
    snprintf(config, sizeof config,
             "{\n  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"vocab_size\": %d,\n"
             "  \"n_positions\": %d,\n  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n"
             "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
             "  \"attn_pdrop\": 0.0,\n  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
             "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n  \"tie_word_embeddings\": true,\n"
             "  \"torch_dtype\": \"float32\"\n}\n",
             LM_VOCAB, LM_POSITIONS, LM_WIDTH, LM_LAYERS, LM_HEADS);
    if (lm_fixture_path(path, dir, "config.json")) return 1;
    if (write_text(path, config)) return 1;

    int64_t *ids = lm_fixture_path(path, dir, "tokens.i64") ? NULL : malloc(LM_NTOK * sizeof *ids);
    if (!ids) return 1;
    for (int64_t i = 0; i < LM_NTOK; i++) ids[i] = (int64_t)(splitmix64(FIXTURE_SEED ^ ((uint64_t)i << 20)) % LM_VOCAB);
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(ids, sizeof *ids, LM_NTOK, f) != LM_NTOK;
    if (f) bad |= fclose(f) != 0;
    free(ids);
    if (bad) { fprintf(stderr, "lm fixture: writing %s failed\n", path); return 1; }

    static fx_tensor fx[4 + 16 * LM_LAYERS];
    int n = fixture_tensors(fx);
    gpucore_tensor *ts[4 + 16 * LM_LAYERS] = {0};
    const char *names[4 + 16 * LM_LAYERS];
    gpucore_status st = GPUCORE_OK;
    for (int i = 0; i < n; i++) {
        names[i] = fx[i].name;
        CHECK(gpucore_tensor_create(ctx, GPUCORE_F32, fx[i].ndim, fx[i].shape, &ts[i]));
        if (fx[i].std > 0) CHECK(gpucore_random(ts[i], GPUCORE_NORMAL, 0.0, fx[i].std, FIXTURE_SEED + (uint64_t)i, 0, NULL));
        else CHECK(gpucore_fill(ts[i], fx[i].std < 0 ? 1.0 : 0.0, NULL));
    }
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    bad = lm_fixture_path(path, dir, "model.safetensors");
    if (!bad) CHECK(gpucore_safetensors_save(path, names, ts, n, mk, mv, 1));
    bad = bad || lm_fixture_path(path, dir, "fixture.txt") || write_text(path, FIXTURE_STAMP "\n");
done:
    for (int i = 0; i < n; i++) gpucore_tensor_destroy(ts[i]);
    return st != GPUCORE_OK || bad;
}

int64_t *lm_fixture_tokens(const char *dir)
{
    char path[LM_PATH_LEN];
    if (lm_fixture_path(path, dir, "tokens.i64")) return NULL;
    FILE *f = fopen(path, "rb");
    int64_t *ids = malloc(LM_NTOK * sizeof *ids);
    if (!f || !ids || fread(ids, sizeof *ids, LM_NTOK, f) != LM_NTOK) {
        fprintf(stderr, "lm fixture: cannot read %s\n", path);
        free(ids);
        ids = NULL;
    }
    if (f) fclose(f);
    return ids;
}

int lm_fixture_ensure(gpucore_context *ctx, const char *dir)
{
    if (read_stamp_matches(dir)) return 0;
    fprintf(stderr, "lm fixture: writing the GPT-2 124M model and token ids into %s\n", dir);
    return write_fixture(ctx, dir);
}

int lm_split_list(char *s, const char **out, int max)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

void lm_print_profile(gpucore_context *ctx, const char *who, const char *cs, const char *what)
{
    gpucore_profiler_enable(ctx, 0);
    int64_t need = 0;
    gpucore_profiler_summary(ctx, 0, NULL, 0, &need);
    char *text = malloc((size_t)need + 1);
    if (text && !gpucore_profiler_summary(ctx, 0, text, need, NULL)) fprintf(stderr, "%s: %s, %s by op:\n%s\n", who, cs, what, text);
    free(text);
}
