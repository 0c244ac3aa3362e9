/*
 * test_models.c — the language-model layer (gpucore_lm_*) on folders this test
 * writes itself (a tiny llama-family model: config.json + safetensors with random
 * weights), so it needs nothing outside the library:
 *   - bad folders and files: missing config/weights, garbled JSON, truncated
 *     safetensors, a shape that disagrees with the config, a tensor missing or
 *     left over, an index naming a missing shard, each math-changing config field
 *     that is not implemented (refused by name), lengths past max_position_embeddings
 *     or an active sliding_window; each returns its status and a message naming the
 *     problem, leaves no device memory behind and the library usable;
 *   - the KV cache: a prefix and then chunks of several tokens (the masked path
 *     generation never takes) give the logits of one full forward;
 *   - save_pretrained / create and save_adapter / load_adapter round trips give
 *     bitwise equal logits; merged adapters equal the unmerged forward;
 *   - bad PEFT adapters (misnamed key, missing B, wrong rank, use_dora) are refused
 *     and leave the adapters the model had;
 *   - every backend present (cpu, cuda, cuda-emulated: check.h's list) runs all of the
 *     above on folders it writes itself, then loads one model the CPU wrote and is
 *     held to the CPU's results: logits (f32, bf16, through the KV cache, after a
 *     merge), the loss, gradients and AdamW steps within the accuracy contract;
 *     greedy and sampled generation token for token; save_pretrained folders and
 *     adapters file for file, bit for bit.
 * The comparisons against transformers and PEFT themselves are in
 * python/torch_tests (they need torch).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "numeric.h"

#define V_ 16
#define D_ 8
#define F_ 12
#define HKV_ 1
#define HD_ 4

static char root[256]; /* the test's folder; each backend writes its own folders in root/<backend> */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(!"cannot write a test file"); return; }
    fputs(text, f);
    fclose(f);
}

static char *folder_path(const char *name)
{
    static char buf[8][512];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "%s/%s/%s", root, check_device, name);
    return buf[i];
}

/* The folder `name` that backend `device` wrote. */
static char *device_path(const char *device, const char *name)
{
    static char buf[2][512];
    static int i;
    i = (i + 1) % 2;
    snprintf(buf[i], sizeof buf[i], "%s/%s/%s", root, device, name);
    return buf[i];
}

static const char *config_json(const char *extra)
{
    static char buf[2048];
    const char *rope = extra && strstr(extra, "rope_scaling") ? "" :
        " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,\n"
        "                  \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 4},\n";
    snprintf(buf, sizeof buf,
             "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d,\n"
             " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": %d,\n"
             " \"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-5, \"rope_theta\": 500000.0,\n"
             "%s \"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"%s}\n",
             V_, D_, F_, HKV_, rope, extra ? extra : "");
    return buf;
}

typedef struct wt { const char *name; int64_t s0, s1; } wt;
static const wt weights[] = {
    {"model.embed_tokens.weight", V_, D_}, {"model.layers.0.input_layernorm.weight", D_, 0},
    {"model.layers.0.self_attn.q_proj.weight", D_, D_}, {"model.layers.0.self_attn.k_proj.weight", HKV_ * HD_, D_},
    {"model.layers.0.self_attn.v_proj.weight", HKV_ * HD_, D_}, {"model.layers.0.self_attn.o_proj.weight", D_, D_},
    {"model.layers.0.post_attention_layernorm.weight", D_, 0}, {"model.layers.0.mlp.gate_proj.weight", F_, D_},
    {"model.layers.0.mlp.up_proj.weight", F_, D_}, {"model.layers.0.mlp.down_proj.weight", D_, F_},
    {"model.norm.weight", D_, 0}, {"lm_head.weight", V_, D_},
};
#define NW ((int)(sizeof weights / sizeof weights[0]))

/* Write weights [first, last) to path; `skip` (or NULL) left out, `extra` (or NULL) added,
 * `reshape` (or NULL) given shape [s0 + 1, s1]. */
static void write_weights(gpucore_context *ctx, const char *path, int first, int last, const char *skip,
                          const char *extra, const char *reshape)
{
    gpucore_tensor *ts[NW + 1];
    const char *names[NW + 1];
    int n = 0;
    for (int i = first; i < last; i++) {
        if (skip && !strcmp(skip, weights[i].name)) continue;
        int64_t shape[2] = {weights[i].s0 + (reshape && !strcmp(reshape, weights[i].name)), weights[i].s1};
        int nd = weights[i].s1 ? 2 : 1;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, nd, shape, &ts[n]));
        if (nd == 1) CHECK_OK(gpucore_random(ts[n], GPUCORE_UNIFORM, 0.8, 1.2, 7, (uint64_t)i * 1000, NULL));
        else CHECK_OK(gpucore_random(ts[n], GPUCORE_NORMAL, 0.0, 0.5, 7, (uint64_t)i * 1000, NULL));
        names[n++] = weights[i].name;
    }
    if (extra) {
        int64_t shape[1] = {D_};
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &ts[n]));
        CHECK_OK(gpucore_fill(ts[n], 0.5, NULL));
        names[n++] = extra;
    }
    CHECK_OK(gpucore_safetensors_save(path, names, ts, n, NULL, NULL, 0));
    for (int i = 0; i < n; i++) gpucore_tensor_destroy(ts[i]);
}

static void make_folder(gpucore_context *ctx, const char *name, const char *extra_cfg)
{
    char *dir = folder_path(name), path[600];
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, config_json(extra_cfg));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_weights(ctx, path, 0, NW, NULL, NULL, NULL);
}

static void copy_config(const char *from, const char *to)
{
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/config.json", folder_path(from));
    snprintf(b, sizeof b, "%s/config.json", folder_path(to));
    FILE *f = fopen(a, "rb");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    write_file(b, buf);
}

/* create must fail with `want` and a message containing `needle`; no device memory stays allocated. */
static void expect_refused(gpucore_context *ctx, const char *folder, gpucore_status want, const char *needle)
{
    int64_t before = test_allocated_bytes(ctx);
    gpucore_lm *lm = (gpucore_lm *)0x1;
    CHECK_STATUS(gpucore_lm_create(ctx, folder_path(folder), -1, &lm), want);
    int named = strstr(gpucore_last_error(), needle) != NULL;
    if (!named) fprintf(stderr, "  message for %s lacks '%s': %s\n", folder, needle, gpucore_last_error());
    CHECK(named);
    CHECK(lm == NULL);
    CHECK(test_allocated_bytes(ctx) == before);
}

static void logits_host(gpucore_lm *lm, const int64_t *ids, int64_t b, int64_t t, float *out)
{
    gpucore_tensor *lg = NULL;
    CHECK_OK(gpucore_lm_forward_host(lm, ids, b, t, &lg));
    if (lg) CHECK_OK(gpucore_copy_to_host(out, b * t * V_ * 4, lg));
    gpucore_tensor_destroy(lg);
}

static void test_bad_folders(gpucore_context *ctx)
{
    char path[600];
    make_folder(ctx, "good", NULL);
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, folder_path("good"), -1, &lm));
    int64_t v = 0;
    CHECK_OK(gpucore_lm_config_int(lm, "num_key_value_heads", &v));
    CHECK(v == HKV_);
    CHECK_OK(gpucore_lm_config_int(lm, "head_dim", &v));
    CHECK(v == HD_);
    CHECK_STATUS(gpucore_lm_config_int(lm, "no_such_key", &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(gpucore_lm_parameter_count(lm) == NW);
    CHECK(strcmp(gpucore_lm_arch_name(lm), "llama") == 0);
    const char *json = NULL; /* the config.json text as written, byte for byte */
    CHECK_OK(gpucore_lm_config_json(lm, &json));
    CHECK(json && strcmp(json, config_json(NULL)) == 0);
    CHECK_STATUS(gpucore_lm_config_json(lm, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_lm_config_json(NULL, &json), GPUCORE_ERR_NULL_POINTER);
    /* lengths */
    int64_t ids[17] = {0};
    gpucore_tensor *lg = NULL;
    CHECK_STATUS(gpucore_lm_forward_host(lm, ids, 1, 17, &lg), GPUCORE_ERR_INVALID_ARGUMENT);
    ids[3] = V_;
    CHECK_STATUS(gpucore_lm_forward_host(lm, ids, 1, 4, &lg), GPUCORE_ERR_INVALID_ARGUMENT);
    int64_t out[32], out_len = 0;
    ids[3] = 1;
    CHECK_STATUS(gpucore_lm_generate(lm, ids, 1, 4, 13, 0, 1.0, 0, 1.0, 0, -1, -1, out, &out_len),
                 GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_lm_generate(lm, ids, 1, 4, 2, 1, 0.0, 0, 1.0, 0, -1, -1, out, &out_len),
                 GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_lm_forward_backward_host(lm, ids, NULL, 1, 4, (double *)out), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_lm *refused = NULL;
    CHECK_STATUS(gpucore_lm_create(ctx, folder_path("good"), GPUCORE_I32, &refused), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_lm_forward_host(NULL, ids, 1, 4, &lg), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_lm_destroy(lm));
    CHECK_STATUS(gpucore_lm_forward_host(lm, ids, 1, 4, &lg), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_lm_config_json(lm, &json), GPUCORE_ERR_INVALID_HANDLE);

    /* files */
    expect_refused(ctx, "absent", GPUCORE_ERR_IO, "config.json");
    mkdir(folder_path("noweights"), 0777);
    copy_config("good", "noweights");
    expect_refused(ctx, "noweights", GPUCORE_ERR_IO, "model.safetensors");
    mkdir(folder_path("garbled"), 0777);
    snprintf(path, sizeof path, "%s/config.json", folder_path("garbled"));
    write_file(path, "{\"model_type\": \"llama\", \"vocab_size\": 16,");
    expect_refused(ctx, "garbled", GPUCORE_ERR_CORRUPT_FILE, "config.json");
    /* truncated weights */
    make_folder(ctx, "truncated", NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", folder_path("truncated"));
    struct stat sb;
    stat(path, &sb);
    CHECK(truncate(path, sb.st_size - 10) == 0);
    expect_refused(ctx, "truncated", GPUCORE_ERR_CORRUPT_FILE, "model.safetensors");
    /* wrong shape, missing tensor, leftover tensor */
    make_folder(ctx, "shape", NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", folder_path("shape"));
    write_weights(ctx, path, 0, NW, NULL, NULL, "model.layers.0.self_attn.k_proj.weight");
    expect_refused(ctx, "shape", GPUCORE_ERR_SHAPE_MISMATCH, "k_proj.weight");
    make_folder(ctx, "missing", NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", folder_path("missing"));
    write_weights(ctx, path, 0, NW, "model.layers.0.mlp.up_proj.weight", NULL, NULL);
    expect_refused(ctx, "missing", GPUCORE_ERR_CORRUPT_FILE, "up_proj.weight");
    make_folder(ctx, "leftover", NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", folder_path("leftover"));
    write_weights(ctx, path, 0, NW, NULL, "model.layers.0.self_attn.o_proj.bias", NULL);
    expect_refused(ctx, "leftover", GPUCORE_ERR_CORRUPT_FILE, "o_proj.bias");
    /* sharded: a good index loads like the single file; one naming a missing shard is refused */
    mkdir(folder_path("sharded"), 0777);
    copy_config("good", "sharded");
    snprintf(path, sizeof path, "%s/a.safetensors", folder_path("sharded"));
    write_weights(ctx, path, 0, 5, NULL, NULL, NULL);
    snprintf(path, sizeof path, "%s/b.safetensors", folder_path("sharded"));
    write_weights(ctx, path, 5, NW, NULL, NULL, NULL);
    char index[4096];
    int k = snprintf(index, sizeof index, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < NW; i++)
        k += snprintf(index + k, sizeof index - (size_t)k, "%s\"%s\": \"%s\"", i ? ", " : "", weights[i].name,
                      i < 5 ? "a.safetensors" : "b.safetensors");
    snprintf(index + k, sizeof index - (size_t)k, "}}");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", folder_path("sharded"));
    write_file(path, index);
    CHECK_OK(gpucore_lm_create(ctx, folder_path("sharded"), -1, &lm));
    gpucore_lm *single = NULL;
    CHECK_OK(gpucore_lm_create(ctx, folder_path("good"), -1, &single));
    int64_t tok[5] = {1, 5, 9, 3, 15};
    float a[5 * V_], b[5 * V_];
    logits_host(lm, tok, 1, 5, a);
    logits_host(single, tok, 1, 5, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    gpucore_lm_destroy(lm);
    gpucore_lm_destroy(single);
    snprintf(path, sizeof path, "%s/b.safetensors", folder_path("sharded"));
    remove(path);
    expect_refused(ctx, "sharded", GPUCORE_ERR_IO, "b.safetensors");

    /* config fields that change the math */
    struct { const char *name, *extra, *needle; } bad[] = {
        {"rope_linear", ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}", "rope_scaling"},
        {"act_gelu", ", \"hidden_act\": \"gelu\"", "hidden_act"},
        {"partial", ", \"partial_rotary_factor\": 0.5", "partial_rotary_factor"},
        {"attn_bias", ", \"attention_bias\": true", "q_proj.bias"}, /* llama: biases then expected, absent */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        make_folder(ctx, bad[i].name, bad[i].extra);
        expect_refused(ctx, bad[i].name, i == 3 ? GPUCORE_ERR_CORRUPT_FILE : GPUCORE_ERR_NOT_SUPPORTED, bad[i].needle);
    }
    /* whole configs of other model types */
    struct { const char *name, *json, *needle; } other[] = {
        {"gptj", "{\"model_type\": \"gptj\"}", "model_type"},
        {"mistral_bias", NULL, "attention_bias"},
        {"gpt2_layeridx", "{\"model_type\": \"gpt2\", \"vocab_size\": 16, \"n_embd\": 8, \"n_layer\": 1, \"n_head\": 2, "
                          "\"n_positions\": 16, \"scale_attn_by_inverse_layer_idx\": true}", "scale_attn_by_inverse_layer_idx"},
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        mkdir(folder_path(other[i].name), 0777);
        snprintf(path, sizeof path, "%s/config.json", folder_path(other[i].name));
        char buf[4096];
        if (!other[i].json) {
            snprintf(buf, sizeof buf, "{\"model_type\": \"mistral\", \"attention_bias\": true, %s", config_json(NULL) + 24);
            write_file(path, buf);
        } else {
            write_file(path, other[i].json);
        }
        expect_refused(ctx, other[i].name, GPUCORE_ERR_NOT_SUPPORTED, other[i].needle);
    }
    /* a sliding window: accepted, but longer sequences are refused at run time */
    mkdir(folder_path("window"), 0777);
    {
        char buf[4096];
        snprintf(buf, sizeof buf, "{\"model_type\": \"mistral\", \"sliding_window\": 4, %s", config_json(NULL) + 24);
        snprintf(path, sizeof path, "%s/config.json", folder_path("window"));
        write_file(path, buf);
        snprintf(path, sizeof path, "%s/model.safetensors", folder_path("window"));
        write_weights(ctx, path, 0, NW, NULL, NULL, NULL);
        CHECK_OK(gpucore_lm_create(ctx, folder_path("window"), -1, &lm));
        int64_t t5[5] = {1, 2, 3, 4, 5};
        CHECK_OK(gpucore_lm_forward_host(lm, t5, 1, 4, &lg));
        gpucore_tensor_destroy(lg);
        CHECK_STATUS(gpucore_lm_forward_host(lm, t5, 1, 5, &lg), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK(strstr(gpucore_last_error(), "sliding_window") != NULL);
        gpucore_lm_destroy(lm);
    }
}

enum { RB = 2, RT = 9 }; /* the batch and length of the cache tests and of the comparisons with the CPU */

/* logits [RB, RT, V] of ids through the empty cache c (batch RB): chunks[0] tokens, then the next
 * chunks, each attending to the cached ones (the masked path generation never takes). */
static void chunked_logits(gpucore_context *ctx, gpucore_lm *lm, gpucore_lm_cache *c, const int64_t *ids,
                           const int *chunks, int n, float *out)
{
    for (int k = 0, pos = 0; k < n && c; pos += chunks[k], k++) {
        int64_t sub[RB * RT], shape[2] = {RB, chunks[k]};
        for (int b = 0; b < RB; b++)
            for (int t = 0; t < chunks[k]; t++) sub[b * chunks[k] + t] = ids[b * RT + pos + t];
        gpucore_tensor *ti = NULL, *lg = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &ti));
        CHECK_OK(gpucore_copy_from_host(ti, sub, RB * chunks[k] * 8));
        CHECK_OK(gpucore_lm_forward_cached(lm, c, ti, 0, &lg));
        float tmp[RB * RT * V_];
        if (lg) CHECK_OK(gpucore_copy_to_host(tmp, RB * chunks[k] * V_ * 4, lg));
        for (int b = 0; b < RB; b++)
            memcpy(out + ((size_t)b * RT + pos) * V_, tmp + (size_t)b * chunks[k] * V_, (size_t)chunks[k] * V_ * 4);
        gpucore_tensor_destroy(ti);
        gpucore_tensor_destroy(lg);
        CHECK(gpucore_lm_cache_length(c) == pos + chunks[k]);
    }
}

/* A prefix, then chunks of 3 and 1 and 2 tokens through the cache: the logits of one forward. */
static void test_cache_chunks(gpucore_context *ctx)
{
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, folder_path("good"), -1, &lm));
    if (!lm) return;
    enum { B = RB, T = RT };
    int64_t ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 7 + 3) % V_;
    float full[B * T * V_], part[B * T * V_];
    logits_host(lm, ids, B, T, full);
    gpucore_lm_cache *c = NULL;
    CHECK_OK(gpucore_lm_cache_create(lm, B, T, &c));
    const int chunks[4] = {3, 3, 1, 2};
    chunked_logits(ctx, lm, c, ids, chunks, 4, part);
    double a[B * T * V_], r[B * T * V_];
    for (int i = 0; i < B * T * V_; i++) { a[i] = part[i]; r[i] = full[i]; }
    double e = rel_error(a, r, B * T * V_);
    printf("  cache chunks vs full forward: rel %.2e\n", e);
    CHECK(e < 1e-6);
    /* past the cache */
    gpucore_tensor *ti = NULL, *lg = NULL;
    int64_t shape[2] = {B, 1};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &ti));
    CHECK_OK(gpucore_fill(ti, 1, NULL));
    CHECK_STATUS(gpucore_lm_forward_cached(lm, c, ti, 0, &lg), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor_destroy(ti);
    gpucore_lm_cache_destroy(c);
    /* greedy generate equals argmax of repeated full forwards (no cache) */
    int64_t out[B * 14], out_len = 0, prompt[B * 4];
    for (int b = 0; b < B; b++) memcpy(prompt + b * 4, ids + b * T, 4 * 8);
    CHECK_OK(gpucore_lm_generate(lm, prompt, B, 4, 6, 0, 1.0, 0, 1.0, 0, -1, -1, out, &out_len));
    CHECK(out_len == 10);
    int same = 1;
    for (int b = 0; b < B; b++) {
        int64_t seq[10];
        memcpy(seq, ids + b * T, 4 * 8);
        for (int t = 4; t < 10; t++) {
            float lgt[10 * V_];
            logits_host(lm, seq, 1, t, lgt);
            int best = 0;
            for (int v = 1; v < V_; v++) if (lgt[(t - 1) * V_ + v] > lgt[(t - 1) * V_ + best]) best = v;
            seq[t] = best;
        }
        if (memcmp(seq, out + b * 10, sizeof seq)) {
            same = 0;
            for (int t = 0; t < 10; t++) fprintf(stderr, " %lld/%lld", (long long)seq[t], (long long)out[b * 10 + t]);
            fprintf(stderr, "\n");
        }
    }
    CHECK(same);
    gpucore_lm_destroy(lm);
}

static void set_lora_b(gpucore_lm *lm)
{
    for (int64_t i = 0; i < gpucore_lm_trainable_count(lm); i++) {
        const char *name;
        gpucore_tensor *p, *g;
        CHECK_OK(gpucore_lm_trainable(lm, i, &name, &p, &g));
        if (strstr(name, "lora_B")) CHECK_OK(gpucore_random(p, GPUCORE_NORMAL, 0.0, 0.3, 3, (uint64_t)i * 100, NULL));
    }
}

/* The adapters' gradients in one host array. */
static int64_t grads_host(gpucore_lm *lm, float *out, int64_t cap)
{
    int64_t n = 0;
    for (int64_t i = 0; i < gpucore_lm_trainable_count(lm); i++) {
        gpucore_tensor *p, *g;
        CHECK_OK(gpucore_lm_trainable(lm, i, NULL, &p, &g));
        int64_t k = gpucore_tensor_numel(g);
        if (n + k > cap) break;
        CHECK_OK(gpucore_copy_to_host(out + n, k * 4, g));
        n += k;
    }
    return n;
}

/* `steps` times: forward_backward on ids [b, t] (its loss into losses[k]), then an AdamW step (lr, no
 * weight decay) on the trainable tensors. */
static void adamw_steps(gpucore_context *ctx, gpucore_lm *lm, const int64_t *ids, int64_t b, int64_t t, double lr,
                        int steps, double *losses)
{
    gpucore_optimizer_config cfg;
    CHECK_OK(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &cfg));
    cfg.lr = lr;
    cfg.weight_decay = 0;
    int64_t nt = gpucore_lm_trainable_count(lm);
    gpucore_tensor *params[64], *grads[64];
    for (int64_t i = 0; i < nt && i < 64; i++) CHECK_OK(gpucore_lm_trainable(lm, i, NULL, &params[i], &grads[i]));
    gpucore_optimizer *opt = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, &cfg, params, nt, &opt));
    for (int step = 0; step < steps && opt; step++) {
        CHECK_OK(gpucore_lm_forward_backward_host(lm, ids, NULL, b, t, &losses[step]));
        CHECK_OK(gpucore_optimizer_step(opt, grads, nt, NULL, NULL));
    }
    gpucore_optimizer_destroy(opt);
}

/* LoRA dropout: replayed bitwise under a recompute policy, and it changes the gradients; AdamW
 * over the trainable tensors lowers the loss. */
static void test_dropout_and_optimizer(gpucore_context *ctx, gpucore_lm *lm, const int64_t *ids)
{
    enum { CAP = 4096 };
    static float g0[CAP], g1[CAP], g2[CAP];
    double l0, l1, l2;
    const char *targets[3] = {"v_proj", "o_proj", "up_proj"};
    CHECK_OK(gpucore_lm_add_lora(lm, 2, 4.0, 0.0, targets, 3, 9));
    set_lora_b(lm);
    CHECK_OK(gpucore_lm_forward_backward_host(lm, ids, NULL, 1, 6, &l0));
    int64_t n = grads_host(lm, g0, CAP);
    /* the same adapters with dropout 0.3: saved and reloaded to keep A and B */
    CHECK_OK(gpucore_lm_save_adapter(lm, folder_path("adapter_dropout")));
    char path[600], text[1024];
    snprintf(path, sizeof path, "%s/adapter_config.json", folder_path("adapter_dropout"));
    snprintf(text, sizeof text, "{\"peft_type\": \"LORA\", \"r\": 2, \"lora_alpha\": 4, \"lora_dropout\": 0.3, "
             "\"target_modules\": [\"v_proj\", \"o_proj\", \"up_proj\"], \"bias\": \"none\"}");
    write_file(path, text);
    CHECK_OK(gpucore_lm_load_adapter(lm, folder_path("adapter_dropout")));
    CHECK_OK(gpucore_lm_set_seed(lm, 4));
    CHECK_OK(gpucore_lm_forward_backward_host(lm, ids, NULL, 1, 6, &l1));
    CHECK(grads_host(lm, g1, CAP) == n);
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, GPUCORE_CKPT_RECOMPUTE_ALL, 0));
    CHECK_OK(gpucore_lm_set_seed(lm, 4));
    CHECK_OK(gpucore_lm_forward_backward_host(lm, ids, NULL, 1, 6, &l2));
    CHECK(grads_host(lm, g2, CAP) == n);
    CHECK(l1 == l2 && memcmp(g1, g2, (size_t)n * 4) == 0);
    CHECK(l1 != l0 && memcmp(g0, g1, (size_t)n * 4) != 0);
    /* AdamW on the trainable tensors */
    double losses[8];
    adamw_steps(ctx, lm, ids, 1, 6, 0.05, 8, losses);
    double first = losses[0], last = losses[7];
    printf("  LoRA + AdamW, 8 steps on one batch (dropout 0.3): loss %.4f -> %.4f\n", first, last);
    CHECK(last < first);
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, GPUCORE_CKPT_KEEP_ALL, 0));
    CHECK_OK(gpucore_lm_load_adapter(lm, folder_path("adapter")));
}

static void test_roundtrips(gpucore_context *ctx)
{
    gpucore_lm *lm = NULL, *back = NULL;
    CHECK_OK(gpucore_lm_create(ctx, folder_path("good"), -1, &lm));
    if (!lm) return;
    int64_t ids[6] = {1, 4, 7, 2, 9, 11};
    float a[6 * V_], b[6 * V_], c[6 * V_];
    /* save_pretrained -> create */
    CHECK_OK(gpucore_lm_save_pretrained(lm, folder_path("saved")));
    CHECK_OK(gpucore_lm_create(ctx, folder_path("saved"), -1, &back));
    logits_host(lm, ids, 1, 6, a);
    if (back) logits_host(back, ids, 1, 6, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    gpucore_lm_destroy(back);
    back = NULL;
    /* LoRA: names, save -> load, merge */
    const char *targets[2] = {"q_proj", "down_proj"};
    CHECK_OK(gpucore_lm_add_lora(lm, 2, 4.0, 0.0, targets, 2, 5));
    CHECK(gpucore_lm_lora_count(lm) == 2);
    CHECK(gpucore_lm_trainable_count(lm) == 4);
    const char *name = NULL;
    CHECK_OK(gpucore_lm_trainable(lm, 0, &name, NULL, NULL));
    CHECK(name && !strcmp(name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
    CHECK_OK(gpucore_lm_trainable(lm, 3, &name, NULL, NULL));
    CHECK(name && !strcmp(name, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"));
    const char *bad_target[1] = {"c_attn"};
    CHECK_STATUS(gpucore_lm_add_lora(lm, 2, 4.0, 0.0, bad_target, 1, 5), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(gpucore_lm_lora_count(lm) == 2);
    set_lora_b(lm);
    logits_host(lm, ids, 1, 6, b);
    CHECK(memcmp(a, b, sizeof a) != 0); /* the adapter changes the logits */
    CHECK_STATUS(gpucore_lm_save_pretrained(lm, folder_path("saved2")), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_lm_save_adapter(lm, folder_path("adapter")));
    CHECK_OK(gpucore_lm_create(ctx, folder_path("good"), -1, &back));
    if (back) {
        CHECK_OK(gpucore_lm_load_adapter(back, folder_path("adapter")));
        logits_host(back, ids, 1, 6, c);
        CHECK(memcmp(b, c, sizeof b) == 0);
    }
    double loss = 0;
    CHECK_OK(gpucore_lm_forward_backward_host(lm, ids, NULL, 1, 6, &loss));
    CHECK(loss > 0 && loss < 100);
    if (back) test_dropout_and_optimizer(ctx, back, ids);
    CHECK_OK(gpucore_lm_merge_adapter(lm));
    CHECK(gpucore_lm_lora_count(lm) == 0 && gpucore_lm_trainable_count(lm) == 0);
    logits_host(lm, ids, 1, 6, c);
    double x[6 * V_], r[6 * V_];
    for (int i = 0; i < 6 * V_; i++) { x[i] = c[i]; r[i] = b[i]; }
    CHECK(rel_error(x, r, 6 * V_) < 1e-6);

    /* bad adapters leave the model's adapters as they were */
    char path[600], text[1024];
    gpucore_tensor *ta = NULL, *tb = NULL;
    int64_t sa[2] = {2, D_}, sbh[2] = {D_, 2};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sa, &ta));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sbh, &tb));
    CHECK_OK(gpucore_fill(ta, 0.25, NULL));
    CHECK_OK(gpucore_fill(tb, 0.5, NULL));
    struct { const char *name, *cfg_extra, *a_key, *b_key; int64_t r; gpucore_status want; const char *needle; } bad[] = {
        {"ad_misnamed", "", "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
         "base_model.model.model.layers.0.self_attn.q_prj.lora_B.weight", 2, GPUCORE_ERR_CORRUPT_FILE, "q_prj"},
        {"ad_missing_b", "", "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", NULL, 2,
         GPUCORE_ERR_CORRUPT_FILE, "lora_B"},
        {"ad_rank", "", "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", 3, GPUCORE_ERR_SHAPE_MISMATCH, "lora_A"},
        {"ad_dora", ", \"use_dora\": true", "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", 2, GPUCORE_ERR_NOT_SUPPORTED, "use_dora"},
    };
    for (size_t i = 0; back && i < sizeof bad / sizeof bad[0]; i++) {
        mkdir(folder_path(bad[i].name), 0777);
        snprintf(path, sizeof path, "%s/adapter_config.json", folder_path(bad[i].name));
        snprintf(text, sizeof text, "{\"peft_type\": \"LORA\", \"r\": %lld, \"lora_alpha\": 4, \"lora_dropout\": 0.0, "
                 "\"target_modules\": [\"q_proj\"], \"bias\": \"none\"%s}", (long long)bad[i].r, bad[i].cfg_extra);
        write_file(path, text);
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", folder_path(bad[i].name));
        const char *names[2] = {bad[i].a_key, bad[i].b_key};
        gpucore_tensor *ts[2] = {ta, tb};
        CHECK_OK(gpucore_safetensors_save(path, names, ts, bad[i].b_key ? 2 : 1, NULL, NULL, 0));
        int64_t before = test_allocated_bytes(ctx);
        CHECK_STATUS(gpucore_lm_load_adapter(back, folder_path(bad[i].name)), bad[i].want);
        int named = strstr(gpucore_last_error(), bad[i].needle) != NULL;
        if (!named) fprintf(stderr, "  message for %s lacks '%s': %s\n", bad[i].name, bad[i].needle, gpucore_last_error());
        CHECK(named);
        CHECK(gpucore_lm_lora_count(back) == 2);
        CHECK(test_allocated_bytes(ctx) == before);
    }
    if (back) {
        float d[6 * V_];
        logits_host(back, ids, 1, 6, d);
        CHECK(memcmp(b, d, sizeof b) == 0);
    }
    gpucore_tensor_destroy(ta);
    gpucore_tensor_destroy(tb);
    gpucore_lm_destroy(back);
    gpucore_lm_destroy(lm);
}

/* ---------------------------------------------------------------- every backend against the CPU */

enum { RP = 4, RNEW = 6, RCAP = 4096 };

/* What one backend computed from the model the CPU wrote (cpu/good). */
typedef struct backend_result {
    float logits[RB * RT * V_], bf16_logits[RB * RT * V_], cached[RB * RT * V_], merged[RB * RT * V_];
    int64_t greedy[RB * (RP + RNEW)], sampled[RB * (RP + RNEW)];
    double lora_loss, full_loss, adamw_loss[3];
    float lora_grads[RCAP], full_grads[RCAP];
    int64_t n_lora_grads, n_full_grads;
} backend_result;
static backend_result cpu_result;
static int have_cpu_result;

static int64_t ref_ids(int i) { return (i * 7 + 3) % V_; }

/* logits [RB, RT, V] of lm as f32 (a bf16 model's widened). */
static void logits_f32(gpucore_lm *lm, const int64_t *ids, float *out)
{
    gpucore_tensor *lg = NULL;
    CHECK_OK(gpucore_lm_forward_host(lm, ids, RB, RT, &lg));
    if (!lg) return;
    int64_t n = RB * RT * V_;
    if (gpucore_tensor_dtype(lg) == GPUCORE_BF16) {
        uint16_t raw[RB * RT * V_];
        CHECK_OK(gpucore_copy_to_host(raw, n * 2, lg));
        for (int64_t i = 0; i < n; i++) out[i] = gpucore_bf16_to_f32(raw[i]);
    } else {
        CHECK_OK(gpucore_copy_to_host(out, n * 4, lg));
    }
    gpucore_tensor_destroy(lg);
}

/* The same logits through the KV cache: a prefix of 4, then chunks of 1, 3 and 1. */
static void cached_logits(gpucore_lm *lm, const int64_t *ids, float *out)
{
    gpucore_lm_cache *c = NULL;
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_lm_context(lm, &ctx));
    CHECK_OK(gpucore_lm_cache_create(lm, RB, RT, &c));
    const int chunks[4] = {4, 1, 3, 1};
    chunked_logits(ctx, lm, c, ids, chunks, 4, out);
    gpucore_lm_cache_destroy(c);
}

/* this backend's n floats against the CPU's, normalised error within tol; prints the figure. */
static void against_cpu(const char *what, const float *got, const float *cpu, int64_t n, double tol)
{
    double *a = malloc(sizeof(double) * (size_t)n), *r = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) { a[i] = got[i]; r[i] = cpu[i]; }
    double e = rel_error(a, r, (size_t)n);
    int ok = e <= tol; /* NaN fails */
    printf("  %-34s vs cpu: rel %.2e (tol %.0e)\n", what, e, tol);
    CHECK(ok);
    free(a);
    free(r);
}

static void scalar_against_cpu(const char *what, double got, double cpu, double tol)
{
    double e = fabs(got - cpu) / fabs(cpu);
    printf("  %-34s vs cpu: %.7f / %.7f (tol %.0e)\n", what, got, cpu, tol);
    CHECK(e <= tol);
}

static void ids_against_cpu(const char *what, const int64_t *got, const int64_t *cpu, int64_t n)
{
    int same = memcmp(got, cpu, (size_t)n * sizeof *got) == 0;
    printf("  %-34s vs cpu: %s\n", what, same ? "token for token" : "DIFFERENT");
    if (!same)
        for (int64_t i = 0; i < n; i++) fprintf(stderr, " %lld/%lld", (long long)got[i], (long long)cpu[i]);
    if (!same) fprintf(stderr, "\n");
    CHECK(same);
}

/* A whole file into memory (malloc'ed), its size in *n; NULL if unreadable. */
static unsigned char *read_all(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    *n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)*n + 1);
        if (buf && fread(buf, 1, (size_t)*n, f) != (size_t)*n) { free(buf); buf = NULL; }
    }
    if (f) fclose(f);
    return buf;
}

/* The files of folder `name` written here equal the CPU's, byte for byte. */
static void files_against_cpu(const char *name, const char *const *files, int nfiles)
{
    int same = 1;
    for (int i = 0; i < nfiles; i++) {
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", folder_path(name), files[i]);
        snprintf(b, sizeof b, "%s/%s", device_path("cpu", name), files[i]);
        long na, nb;
        unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
        int eq = x && y && na == nb && memcmp(x, y, (size_t)na) == 0;
        if (!eq) fprintf(stderr, "  %s/%s: %ld bytes here, %ld from the CPU, %s\n", name, files[i], na, nb,
                         x && y ? "contents differ" : "missing");
        same &= eq;
        free(x);
        free(y);
    }
    printf("  %-34s vs cpu: %s\n", name, same ? "bitwise equal" : "DIFFERENT");
    CHECK(same);
}

/* The trainable tensors' gradients after one forward_backward (loss in *loss). */
static int64_t step_grads(gpucore_lm *lm, const int64_t *ids, double *loss, float *grads)
{
    CHECK_OK(gpucore_lm_forward_backward_host(lm, ids, NULL, RB, RT, loss));
    return grads_host(lm, grads, RCAP);
}

/* Run everything on this backend from the CPU's model, then hold it to the CPU's numbers (the CPU's
 * own pass keeps them). Tolerances: the forward composes matmuls, norms and softmax rows, so the
 * reductions' 1e-5 for f32 and 1e-2 for bf16 operands; generation, saved folders and adapters exact. */
static void test_against_cpu(gpucore_context *ctx)
{
    static backend_result r;
    memset(&r, 0, sizeof r);
    int is_cpu = !strcmp(check_device, "cpu");
    if (!is_cpu && !have_cpu_result) { CHECK(!"the CPU pass left no results to compare with"); return; }
    const char *model = device_path("cpu", "good");
    int64_t ids[RB * RT], prompt[RB * RP], out_len = 0;
    for (int i = 0; i < RB * RT; i++) ids[i] = ref_ids(i);
    for (int b = 0; b < RB; b++) memcpy(prompt + b * RP, ids + b * RT, RP * 8);

    /* bf16 weights and activations, and the folder they save (converted on load: rounding shared) */
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, model, GPUCORE_BF16, &lm));
    if (!lm) return;
    logits_f32(lm, ids, r.bf16_logits);
    CHECK_OK(gpucore_lm_save_pretrained(lm, folder_path("cmp_saved_bf16")));
    gpucore_lm_destroy(lm);

    /* f32: logits, the cache, generation, save_pretrained */
    lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, model, -1, &lm));
    if (!lm) return;
    logits_f32(lm, ids, r.logits);
    cached_logits(lm, ids, r.cached);
    CHECK_OK(gpucore_lm_generate(lm, prompt, RB, RP, RNEW, 0, 1.0, 0, 1.0, 0, -1, -1, r.greedy, &out_len));
    CHECK(out_len == RP + RNEW);
    CHECK_OK(gpucore_lm_generate(lm, prompt, RB, RP, RNEW, 1, 0.8, 0, 0.9, 77, -1, -1, r.sampled, &out_len));
    CHECK(out_len == RP + RNEW);
    CHECK_OK(gpucore_lm_save_pretrained(lm, folder_path("cmp_saved")));

    /* LoRA: the adapter as made (Philox: same bits everywhere), its gradients, AdamW steps, the merge */
    const char *targets[3] = {"q_proj", "v_proj", "down_proj"};
    CHECK_OK(gpucore_lm_add_lora(lm, 2, 4.0, 0.0, targets, 3, 5));
    set_lora_b(lm);
    CHECK_OK(gpucore_lm_save_adapter(lm, folder_path("cmp_adapter")));
    r.n_lora_grads = step_grads(lm, ids, &r.lora_loss, r.lora_grads);
    double losses[4];
    adamw_steps(ctx, lm, ids, RB, RT, 0.01, 4, losses);
    memcpy(r.adamw_loss, losses + 1, sizeof r.adamw_loss);
    CHECK_OK(gpucore_lm_merge_adapter(lm));
    logits_f32(lm, ids, r.merged);
    gpucore_lm_destroy(lm);

    /* full fine-tuning: every weight's gradient, under the executor's recompute policy */
    lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, model, -1, &lm));
    if (!lm) return;
    CHECK_OK(gpucore_lm_set_full_finetune(lm, 1));
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, GPUCORE_CKPT_RECOMPUTE_ALL, 0));
    r.n_full_grads = step_grads(lm, ids, &r.full_loss, r.full_grads);
    gpucore_lm_destroy(lm);

    if (is_cpu) {
        cpu_result = r;
        have_cpu_result = 1;
        printf("  (the CPU's results kept: the other backends are held to them)\n");
        return;
    }
    const backend_result *c = &cpu_result;
    int64_t n = RB * RT * V_;
    against_cpu("f32 logits", r.logits, c->logits, n, 1e-5);
    against_cpu("f32 logits through the KV cache", r.cached, c->cached, n, 1e-5);
    against_cpu("bf16 logits", r.bf16_logits, c->bf16_logits, n, 1e-2);
    ids_against_cpu("greedy generation", r.greedy, c->greedy, RB * (RP + RNEW));
    ids_against_cpu("sampled generation (seed 77)", r.sampled, c->sampled, RB * (RP + RNEW));
    scalar_against_cpu("LoRA loss", r.lora_loss, c->lora_loss, 1e-5);
    CHECK(r.n_lora_grads == c->n_lora_grads && r.n_lora_grads > 0);
    against_cpu("LoRA gradients", r.lora_grads, c->lora_grads, c->n_lora_grads, 1e-5);
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "loss after AdamW step %d", k + 1);
        scalar_against_cpu(what, r.adamw_loss[k], c->adamw_loss[k], 1e-5);
    }
    against_cpu("f32 logits after the merge", r.merged, c->merged, n, 1e-5);
    scalar_against_cpu("full fine-tuning loss (recompute)", r.full_loss, c->full_loss, 1e-5);
    CHECK(r.n_full_grads == c->n_full_grads && r.n_full_grads > 0);
    against_cpu("full fine-tuning gradients", r.full_grads, c->full_grads, c->n_full_grads, 1e-5);
    const char *model_files[2] = {"config.json", "model.safetensors"};
    const char *adapter_files[2] = {"adapter_config.json", "adapter_model.safetensors"};
    files_against_cpu("cmp_saved", model_files, 2);
    files_against_cpu("cmp_saved_bf16", model_files, 2);
    files_against_cpu("cmp_adapter", adapter_files, 2);
}

/* Each backend writes its folders in root/<backend>. */
static void enter_backend(gpucore_context *ctx)
{
    (void)ctx;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, check_device);
    mkdir(dir, 0777);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/gpucore_test_models_%d", (int)getpid());
    mkdir(root, 0777);
    /* cpu first (check.h's order): its pass writes the model the others load and keeps its results */
    const device_test_fn tests[] = {enter_backend, test_bad_folders, test_cache_chunks, test_roundtrips, test_against_cpu};
    for_each_device(tests, (int)(sizeof tests / sizeof tests[0]));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_finish("test_models");
}
