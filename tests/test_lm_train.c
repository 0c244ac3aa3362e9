/*
 * test_lm_train.c — training a language model (gpucore_lm_*) beyond one plain step, on
 * llama-family folders this test writes itself (config.json + safetensors with random
 * weights), on every backend present:
 *   - the allocator's peak statistics belong to the caller: a step's peak rise is at
 *     least its largest live set (with the head in one chunk, the logits, whose gradient
 *     takes their place; bytes from the shape), a peak the caller made before the step
 *     survives it, and on the CPU with caching off the rise is checked against the
 *     process's high-water mark (VmHWM, reset through /proc/self/clear_refs where the
 *     kernel allows); in chunks of 8 rows the step's peak drops by the logits less a chunk's;
 *   - the fused, chunked head and loss: chunks of 5 rows and of 1 row give the loss and
 *     gradients of one chunk (f32, 1e-6), and the loss equals a float64 cross-entropy of
 *     gpucore_lm_forward's logits;
 *   - gradient accumulation: micro-batches of different sizes and label-token counts
 *     (with -100 labels), each normalised by the whole batch's token count, give the
 *     loss and gradients of one forward_backward over all their rows (f32, 1e-6), for
 *     LoRA, full fine-tuning with a tied and an untied head, and under recompute;
 *     bad options are refused.
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"

#define D_ 16
#define F_ 24
#define HD_ 8
#define MAXPOS_ 32

static char root[256];

typedef struct fixture { int64_t vocab; int tie; int layers; } fixture;

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(!"cannot write a test file"); return; }
    fputs(text, f);
    fclose(f);
}

/* A llama model: 2 query heads of HD_, 1 key/value head, random weights from Philox. */
static const char *make_model(gpucore_context *ctx, const char *name, fixture fx)
{
    static char dir[512];
    char path[600], cfg[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0777);
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"llama\", \"vocab_size\": %lld, \"hidden_size\": %d, \"intermediate_size\": %d,\n"
             " \"num_hidden_layers\": %d, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,\n"
             " \"max_position_embeddings\": %d, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0,\n"
             " \"tie_word_embeddings\": %s, \"torch_dtype\": \"float32\"}\n",
             (long long)fx.vocab, D_, F_, fx.layers, MAXPOS_, fx.tie ? "true" : "false");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    enum { PER_LAYER = 9, MAXW = 3 + 4 * PER_LAYER };
    char names[MAXW][96];
    const char *np[MAXW];
    int64_t shapes[MAXW][2];
    int n = 0;
#define W(s0, s1, ...) (snprintf(names[n], sizeof names[n], __VA_ARGS__), shapes[n][0] = (s0), shapes[n][1] = (s1), n++)
    W(fx.vocab, D_, "model.embed_tokens.weight");
    for (int l = 0; l < fx.layers && l < 4; l++) {
        W(D_, 0, "model.layers.%d.input_layernorm.weight", l);
        W(D_, D_, "model.layers.%d.self_attn.q_proj.weight", l);
        W(HD_, D_, "model.layers.%d.self_attn.k_proj.weight", l);
        W(HD_, D_, "model.layers.%d.self_attn.v_proj.weight", l);
        W(D_, D_, "model.layers.%d.self_attn.o_proj.weight", l);
        W(D_, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        W(F_, D_, "model.layers.%d.mlp.gate_proj.weight", l);
        W(F_, D_, "model.layers.%d.mlp.up_proj.weight", l);
        W(D_, F_, "model.layers.%d.mlp.down_proj.weight", l);
    }
    W(D_, 0, "model.norm.weight");
    if (!fx.tie) W(fx.vocab, D_, "lm_head.weight");
#undef W
    gpucore_tensor *ts[MAXW];
    for (int i = 0; i < n; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        ts[i] = NULL;
        np[i] = names[i];
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, nd, shapes[i], &ts[i]));
        if (nd == 1) CHECK_OK(gpucore_random(ts[i], GPUCORE_UNIFORM, 0.8, 1.2, 11, (uint64_t)i * 1000, NULL));
        else CHECK_OK(gpucore_random(ts[i], GPUCORE_NORMAL, 0.0, 0.4, 11, (uint64_t)i * 1000, NULL));
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(gpucore_safetensors_save(path, np, ts, n, NULL, NULL, 0));
    for (int i = 0; i < n; i++) gpucore_tensor_destroy(ts[i]);
    return dir;
}

static gpucore_tensor *ids_tensor(gpucore_context *ctx, const int64_t *h, int64_t b, int64_t t)
{
    int64_t shape[2] = {b, t};
    gpucore_tensor *x = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &x));
    if (x) CHECK_OK(gpucore_copy_from_host(x, h, b * t * 8));
    return x;
}

/* Every trainable gradient, in order, into one host array of doubles (NULL: the count only). */
static int64_t grads_host(gpucore_lm *lm, double *out)
{
    int64_t n = 0;
    for (int64_t i = 0; i < gpucore_lm_trainable_count(lm); i++) {
        gpucore_tensor *p = NULL, *g = NULL;
        CHECK_OK(gpucore_lm_trainable(lm, i, NULL, &p, &g));
        int64_t k = g ? gpucore_tensor_numel(g) : 0;
        if (out && k) {
            float *f = malloc((size_t)k * 4);
            CHECK_OK(gpucore_copy_to_host(f, k * 4, g));
            for (int64_t j = 0; j < k; j++) out[n + j] = f[j];
            free(f);
        }
        n += k;
    }
    return n;
}

/* kB of a "Key:  N kB" line of /proc/self/status, as bytes; -1 if absent. */
static int64_t proc_status_bytes(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int64_t v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = atoll(line + kl + 1) * 1024;
            break;
        }
    if (f) fclose(f);
    return v;
}

/* Reset VmHWM to the resident size now ("5" into clear_refs); 0 where the kernel refuses. */
static int reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok;
}

/* ------------------------------------------------------------- peak statistics */

static void test_peak_is_the_callers(gpucore_context *ctx)
{
    const int cpu = !strcmp(check_device, "cpu");
    const fixture fx = {cpu ? 16384 : 2048, 0, 2};
    const int64_t B = 4, T = 16;
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, make_model(ctx, "peak", fx), -1, &lm));
    if (!lm) return;
    const char *targets[2] = {"q_proj", "v_proj"};
    CHECK_OK(gpucore_lm_add_lora(lm, 4, 8.0, 0.0, targets, 2, 5));
    int64_t *ids = malloc((size_t)(B * T) * sizeof *ids);
    for (int64_t i = 0; i < B * T; i++) ids[i] = (i * 7919 + 13) % fx.vocab;
    gpucore_tensor *x = ids_tensor(ctx, ids, B, T);
    double loss = 0;
    CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, B * T)); /* one chunk: the whole logits */
    CHECK_OK(gpucore_lm_forward_backward(lm, x, NULL, &loss)); /* warm: the executor, the adapters' gradients */
    /* the largest live set holds the logits (f32; their gradient is written over them) */
    const int64_t logits_bytes = B * T * fx.vocab * 4;
    /* caching off: each block goes back to the system when freed, so the process's high-water mark sees
     * the step's live set; glibc then maps each large block on its own and unmaps it on free */
    if (cpu) {
        mallopt(M_MMAP_THRESHOLD, 256 << 10);
        CHECK_OK(gpucore_memory_set_caching(ctx, GPUCORE_MEMORY_DEVICE, 0));
        CHECK_OK(gpucore_memory_empty_cache(ctx, GPUCORE_MEMORY_DEVICE));
    }
    CHECK_OK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    const int64_t before = check_allocated_bytes(ctx, 0);
    /* under ASan or TSan the process's high-water mark holds the sanitizer's shadow memory and its own
     * allocator's quarantine (mallopt does not reach it): not an independent measure of the step there */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    const int sanitized = 1;
#else
    const int sanitized = 0;
#endif
    const int hwm = cpu && !sanitized && reset_hwm();
    const int64_t hwm0 = proc_status_bytes("VmHWM");
    CHECK_OK(gpucore_lm_forward_backward(lm, x, NULL, &loss));
    const int64_t rise = check_allocated_bytes(ctx, 1) - before, hwm_rise = proc_status_bytes("VmHWM") - hwm0;
    printf("  %s: a step's allocator peak rise %lld bytes; logits %lld", check_device, (long long)rise,
           (long long)logits_bytes);
    if (hwm) printf("; VmHWM rise %lld (caching off)\n", (long long)hwm_rise);
    else printf("%s\n", !cpu ? "" : sanitized ? "; VmHWM not compared in a sanitizer build (it holds shadow memory)"
                                                : "; VmHWM cannot be reset here (clear_refs refused): not compared");
    CHECK(rise >= logits_bytes);
    /* the process's own measure: beyond the allocator's blocks a step touches thread stacks, host arrays and
     * the GEMM library's scratch (a third of the rise here), so the allocator's rise is most of it, not all */
    if (hwm) CHECK(hwm_rise > 0 && rise >= hwm_rise / 2);
    if (cpu) CHECK_OK(gpucore_memory_set_caching(ctx, GPUCORE_MEMORY_DEVICE, 1));
    /* the head and loss in chunks of 8 rows: the peak drops below the logits' size */
    CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, 8));
    CHECK_OK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    CHECK_OK(gpucore_lm_forward_backward(lm, x, NULL, &loss));
    const int64_t chunked = check_allocated_bytes(ctx, 1) - before;
    printf("  %s: in chunks of 8 rows: peak rise %lld bytes (a chunk's logits %lld)\n", check_device,
           (long long)chunked, (long long)(8 * fx.vocab * 4));
    /* what else the step holds (a GEMM library's workspace, 32 MiB on CUDA) is the same in both */
    CHECK(chunked >= 8 * fx.vocab * 4 && rise - chunked >= logits_bytes - 8 * fx.vocab * 4);
    /* a peak the caller made before the step is still the peak after it */
    gpucore_tensor *big = NULL;
    int64_t big_shape[1] = {8 * logits_bytes / 4};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, big_shape, &big));
    const int64_t users_peak = check_allocated_bytes(ctx, 1);
    gpucore_tensor_destroy(big);
    CHECK_OK(gpucore_lm_forward_backward(lm, x, NULL, &loss));
    CHECK(check_allocated_bytes(ctx, 1) == users_peak);
    gpucore_tensor_destroy(x);
    free(ids);
    gpucore_lm_destroy(lm);
}

/* ---------------------------------------------------------- gradient accumulation */

enum { B_ = 4, T_ = 12 };

/* Rows of a batch: random ids, labels = ids with some -100 (more in later rows, so the micro-batches'
 * token counts differ). */
static void batch_host(int64_t vocab, int64_t *ids, int64_t *labels)
{
    for (int64_t r = 0; r < B_; r++)
        for (int64_t t = 0; t < T_; t++) {
            int64_t i = r * T_ + t;
            ids[i] = (i * 2654435761u + 17) % (uint64_t)vocab;
            labels[i] = (t % (r + 2) == 1 || (r == 3 && t > 4)) ? -100 : ids[i];
        }
}

/* One forward_backward over all B_ rows against micro-batches of rows [0, 1) [1, 4) (or [0, 2) [2, 3)
 * [3, 4)) accumulated with the whole batch's token count. */
static void accumulate_case(gpucore_context *ctx, gpucore_lm *lm, int64_t vocab, const char *what)
{
    int64_t ids[B_ * T_], labels[B_ * T_];
    batch_host(vocab, ids, labels);
    gpucore_tensor *xi = ids_tensor(ctx, ids, B_, T_), *xl = ids_tensor(ctx, labels, B_, T_);
    double full_loss = 0;
    CHECK_OK(gpucore_lm_forward_backward(lm, xi, xl, &full_loss));
    const int64_t n = grads_host(lm, NULL);
    double *full = malloc((size_t)n * sizeof *full), *acc = malloc((size_t)n * sizeof *acc);
    grads_host(lm, full);
    int64_t total = 0;
    CHECK_OK(gpucore_lm_count_label_tokens(lm, xi, xl, &total));
    int64_t expect = 0;
    for (int64_t i = 0; i < B_ * T_; i++) expect += i % T_ && labels[i] != -100;
    CHECK(total == expect);
    static const int64_t splits[2][4] = {{0, 1, 4, -1}, {0, 2, 3, 4}};
    for (int s = 0; s < 2; s++) {
        gpucore_lm_backward_options o;
        gpucore_lm_backward_options_init(&o);
        o.total_label_tokens = total;
        double loss = 0;
        int64_t counts[3] = {0, 0, 0}, sum = 0;
        for (int k = 0; k < 3 && splits[s][k + 1] >= 0; k++) {
            const int64_t r0 = splits[s][k], r1 = splits[s][k + 1];
            gpucore_tensor *mi = ids_tensor(ctx, ids + r0 * T_, r1 - r0, T_);
            gpucore_tensor *ml = ids_tensor(ctx, labels + r0 * T_, r1 - r0, T_);
            double l = 0;
            CHECK_OK(gpucore_lm_count_label_tokens(lm, mi, ml, &counts[k]));
            sum += counts[k];
            o.accumulate = k > 0;
            CHECK_OK(gpucore_lm_forward_backward_ex(lm, mi, ml, &o, &l));
            loss += l;
            gpucore_tensor_destroy(mi);
            gpucore_tensor_destroy(ml);
        }
        grads_host(lm, acc);
        const double ge = rel_error(acc, full, (size_t)n), le = fabs(loss - full_loss) / fabs(full_loss);
        printf("  %s %s: micro-batches of %lld + %lld + %lld label tokens: loss rel %.2g, gradients rel %.2g\n",
               check_device, what, (long long)counts[0], (long long)counts[1], (long long)counts[2], le, ge);
        CHECK(sum == total && counts[0] != counts[1]);
        CHECK(le <= 1e-6);
        CHECK(ge <= 1e-6);
    }
    /* accumulate 0 overwrites: the whole batch again with its own count equals the plain call */
    gpucore_lm_backward_options o;
    gpucore_lm_backward_options_init(&o);
    o.total_label_tokens = total;
    double l = 0;
    CHECK_OK(gpucore_lm_forward_backward_ex(lm, xi, xl, &o, &l));
    grads_host(lm, acc);
    CHECK(fabs(l - full_loss) <= 1e-6 * fabs(full_loss) && rel_error(acc, full, (size_t)n) <= 1e-6);
    free(full);
    free(acc);
    gpucore_tensor_destroy(xi);
    gpucore_tensor_destroy(xl);
}

static void test_accumulation(gpucore_context *ctx)
{
    const int64_t V = 64;
    const char *untied = make_model(ctx, "acc_untied", (fixture){V, 0, 2});
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, untied, -1, &lm));
    if (!lm) return;
    const char *targets[4] = {"q_proj", "v_proj", "o_proj", "down_proj"};
    CHECK_OK(gpucore_lm_add_lora(lm, 4, 8.0, 0.0, targets, 4, 3));
    for (int64_t i = 0; i < gpucore_lm_trainable_count(lm); i++) { /* B away from zero: every gradient counts */
        const char *name;
        gpucore_tensor *p, *g;
        CHECK_OK(gpucore_lm_trainable(lm, i, &name, &p, &g));
        if (strstr(name, "lora_B")) CHECK_OK(gpucore_random(p, GPUCORE_NORMAL, 0.0, 0.3, 3, (uint64_t)i * 100, NULL));
    }
    accumulate_case(ctx, lm, V, "LoRA");
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, GPUCORE_CKPT_RECOMPUTE_ALL, 0));
    accumulate_case(ctx, lm, V, "LoRA, recompute all");
    gpucore_lm_destroy(lm);
    lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, untied, -1, &lm));
    if (lm) {
        CHECK_OK(gpucore_lm_set_full_finetune(lm, 1));
        accumulate_case(ctx, lm, V, "full, untied head");
        gpucore_lm_destroy(lm);
    }
    lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, make_model(ctx, "acc_tied", (fixture){V, 1, 1}), -1, &lm));
    if (!lm) return;
    CHECK_OK(gpucore_lm_set_full_finetune(lm, 1));
    accumulate_case(ctx, lm, V, "full, tied head");
    /* bad options, each refused with the library usable after */
    int64_t ids[B_ * T_], labels[B_ * T_];
    batch_host(V, ids, labels);
    gpucore_tensor *xi = ids_tensor(ctx, ids, B_, T_);
    gpucore_lm_backward_options o;
    gpucore_lm_backward_options_init(&o);
    double l = 0;
    int64_t c = 0;
    o.struct_size = 8;
    CHECK_STATUS(gpucore_lm_forward_backward_ex(lm, xi, NULL, &o, &l), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "struct_size") != NULL);
    gpucore_lm_backward_options_init(&o);
    o.accumulate = 2;
    CHECK_STATUS(gpucore_lm_forward_backward_ex(lm, xi, NULL, &o, &l), GPUCORE_ERR_INVALID_ARGUMENT);
    o.accumulate = 0;
    o.total_label_tokens = -1;
    CHECK_STATUS(gpucore_lm_forward_backward_ex(lm, xi, NULL, &o, &l), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "total_label_tokens") != NULL);
    CHECK_STATUS(gpucore_lm_forward_backward_ex(lm, xi, NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_lm_count_label_tokens(lm, xi, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_lm_count_label_tokens(NULL, xi, NULL, &c), GPUCORE_ERR_NULL_POINTER);
    /* NULL options: the plain call */
    double plain = 0;
    CHECK_OK(gpucore_lm_forward_backward(lm, xi, NULL, &plain));
    CHECK_OK(gpucore_lm_forward_backward_ex(lm, xi, NULL, NULL, &l));
    CHECK(l == plain);
    CHECK_OK(gpucore_lm_count_label_tokens(lm, xi, NULL, &c));
    CHECK(c == B_ * (T_ - 1));
    gpucore_tensor_destroy(xi);
    gpucore_lm_destroy(lm);
}

/* ------------------------------------------------------- the fused, chunked head and loss */

/* The loss from gpucore_lm_forward's whole logits, in float64 (Hugging Face's shifted mean). */
static double reference_loss(gpucore_lm *lm, gpucore_tensor *xi, const int64_t *labels, int64_t V)
{
    gpucore_tensor *lg = NULL;
    CHECK_OK(gpucore_lm_forward(lm, xi, &lg));
    float *h = malloc((size_t)(B_ * T_ * V) * 4);
    if (lg) CHECK_OK(gpucore_copy_to_host(h, B_ * T_ * V * 4, lg));
    gpucore_tensor_destroy(lg);
    double sum = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < B_; r++)
        for (int64_t t = 0; t + 1 < T_; t++) {
            const int64_t y = labels[r * T_ + t + 1];
            if (y == -100) continue;
            const float *row = h + (r * T_ + t) * V;
            double m = row[0], e = 0;
            for (int64_t v = 1; v < V; v++) m = row[v] > m ? row[v] : m;
            for (int64_t v = 0; v < V; v++) e += exp((double)row[v] - m);
            sum += m + log(e) - row[y];
            n++;
        }
    free(h);
    return sum / (double)n;
}

static void chunked_case(gpucore_context *ctx, gpucore_lm *lm, int64_t V, const char *what)
{
    int64_t ids[B_ * T_], labels[B_ * T_];
    batch_host(V, ids, labels);
    gpucore_tensor *xi = ids_tensor(ctx, ids, B_, T_), *xl = ids_tensor(ctx, labels, B_, T_);
    const int64_t n = grads_host(lm, NULL);
    double *one = malloc((size_t)n * sizeof *one), *got = malloc((size_t)n * sizeof *got), l1 = 0, l = 0, lo = 0;
    CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, B_ * T_));
    CHECK_OK(gpucore_lm_forward_backward(lm, xi, xl, &l1));
    grads_host(lm, one);
    const double ref = reference_loss(lm, xi, labels, V);
    printf("  %s %s: loss %.9f, float64 from the logits %.9f\n", check_device, what, l1, ref);
    CHECK(fabs(l1 - ref) <= 1e-6 * fabs(ref));
    static const int64_t rows[2] = {5, 1};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, rows[i]));
        CHECK_OK(gpucore_lm_forward_backward(lm, xi, xl, &l));
        CHECK_OK(gpucore_lm_loss(lm, xi, xl, &lo));
        grads_host(lm, got);
        const double ge = rel_error(got, one, (size_t)n);
        printf("  %s %s: chunks of %lld rows: loss rel %.2g (loss() %.2g), gradients rel %.2g\n", check_device, what,
               (long long)rows[i], fabs(l - l1) / fabs(l1), fabs(lo - l1) / fabs(l1), ge);
        CHECK(fabs(l - l1) <= 1e-6 * fabs(l1) && fabs(lo - l1) <= 1e-6 * fabs(l1));
        CHECK(ge <= 1e-6);
    }
    CHECK_STATUS(gpucore_lm_set_head_chunk_rows(lm, -1), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, 0));
    free(one);
    free(got);
    gpucore_tensor_destroy(xi);
    gpucore_tensor_destroy(xl);
}

static void test_chunked_head(gpucore_context *ctx)
{
    const int64_t V = 64;
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, make_model(ctx, "chunk_untied", (fixture){V, 0, 2}), -1, &lm));
    if (lm) {
        const char *targets[2] = {"q_proj", "up_proj"};
        CHECK_OK(gpucore_lm_add_lora(lm, 4, 8.0, 0.0, targets, 2, 3));
        chunked_case(ctx, lm, V, "LoRA");
        gpucore_lm_destroy(lm);
    }
    lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, make_model(ctx, "chunk_untied", (fixture){V, 0, 2}), -1, &lm));
    if (lm) {
        CHECK_OK(gpucore_lm_set_full_finetune(lm, 1));
        chunked_case(ctx, lm, V, "full, untied head");
        /* accumulation over chunked micro-batches */
        CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, 5));
        accumulate_case(ctx, lm, V, "full, untied head, chunks of 5 rows");
        gpucore_lm_destroy(lm);
    }
    lm = NULL;
    CHECK_OK(gpucore_lm_create(ctx, make_model(ctx, "chunk_tied", (fixture){V, 1, 1}), -1, &lm));
    if (lm) {
        CHECK_OK(gpucore_lm_set_full_finetune(lm, 1));
        chunked_case(ctx, lm, V, "full, tied head");
        gpucore_lm_destroy(lm);
    }
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/gpucore_test_lm_train_%d", (int)getpid());
    mkdir(root, 0777);
    const device_test_fn fns[] = {test_peak_is_the_callers, test_accumulation, test_chunked_head};
    for_each_device(fns, 3);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_finish("test_lm_train");
}
