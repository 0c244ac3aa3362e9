/*
 * test_lm_plan.c — the memory plan of a training step (gpucore_lm_plan) against the caching
 * allocator's measured peak, on the CPU backend, for models of real widths (GPT-2 124M,
 * SmolLM2-135M, Qwen2-0.5B: their vocabularies, hidden and MLP sizes, heads; two or one
 * layers) whose folders this test writes (config.json + safetensors, random weights):
 *   - for LoRA, LoRA on an NF4 base (gpucore_lm_create_ex) and full fine-tuning, f32 and bf16, every checkpoint policy (none, every
 *     layer, sqrt, a byte budget) and batch sizes 1 and 2, one step (forward_backward with
 *     AdamW's state allocated beforehand): the plan's peak is within 3% (or 32 MiB) of the
 *     allocator's allocated peak of the step, and the step's own rise (the peak above what
 *     the model, the gradients, the optimizer and the batch hold before it) within 3% + 1
 *     MiB of the plan's rise — the part the weights do not swamp; what is held before the
 *     step equals the plan's persistent bytes plus the batch (to the byte when the weights
 *     load in the file's dtype, within 1% when loading converts or quantizes them);
 *   - the plan from the folder alone (no weights read) equals the plan from the loaded model;
 *   - the plan's categories sum to its peak; the table it prints names the phase and layer;
 *   - a quantized base shrinks the weights by the format's size rule (gpucore_quant_size);
 *   - bad options are refused with a message, ZeRO stages above 0 are NOT_SUPPORTED;
 *   - `gpucore-lm plan --device-memory` (its path is the argument): its first setting under a limit below
 *     the whole batch's planned peak, run as finetune runs it (AdamW, micro-batches accumulated) with that
 *     limit on the context, succeeds within it; the whole batch then runs out of memory on the same model,
 *     its message gives the bytes each category held when the allocator refused (weights, gradients and the
 *     optimizer's state equal to their sizes measured apart from the tags, the activations to the plan's),
 *     the plan's bytes by category and a micro-batch and policy that fit, and that runs (argument "oom": this
 *     part alone).
 * The same comparisons on the CUDA backend for GPT-2's and SmolLM2's architectures at narrower widths (the cuda
 * lane; in CI over the stand-ins of tests/cuda_contract, as test_lm_plan_contract), the workspace counted.
 * The table of every case is printed (the figures of the test command).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"

static char root[256];
static int plan_device = GPUCORE_DEVICE_CPU; /* the lane's backend: the plan's device_type */

typedef struct model_shape {
    const char *name, *arch;
    int64_t vocab, hidden, inter, heads, kv_heads, layers, max_pos;
    int tie, qkv_bias;
    int bf16_file;      /* 1: the folder's weights in bf16 (torch_dtype bfloat16) */
} model_shape;

static const model_shape GPT2 = {"gpt2-124m", "gpt2", 50257, 768, 3072, 12, 12, 2, 1024, 1, 0, 0};
static const model_shape SMOL = {"smollm2-135m", "llama", 49152, 576, 1536, 9, 3, 2, 8192, 1, 0, 0};
static const model_shape QWEN = {"qwen2-0.5b", "qwen2", 151936, 896, 4864, 14, 2, 1, 32768, 1, 1, 0};
/* its widths, vocabulary and heads, two of its 16 layers (as the other shapes): 383 million parameters, 0.77 GB
 * in bf16 (all 16 layers took this test from 2 to 11 minutes on a 2-core machine; a layer's plan is the same) */
static const model_shape LLAMA1B = {"llama-3.2-1b", "llama", 128256, 2048, 8192, 32, 8, 2, 131072, 1, 0, 1};

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(!"cannot write a test file"); return; }
    fputs(text, f);
    fclose(f);
}

#define MAXW 160
typedef struct wlist { char names[MAXW][96]; int64_t shape[MAXW][2]; int n; } wlist;

static void w_add(wlist *w, int64_t s0, int64_t s1, const char *fmt, int64_t l)
{
    snprintf(w->names[w->n], sizeof w->names[w->n], fmt, (long long)l);
    w->shape[w->n][0] = s0;
    w->shape[w->n][1] = s1;
    w->n++;
}

/* The model's folder: config.json and model.safetensors with random f32 (or bf16) weights. */
static const char *make_model(gpucore_context *ctx, const model_shape *m)
{
    static char dir[512];
    char path[600], cfg[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, m->name);
    mkdir(dir, 0777);
    const int gpt2 = !strcmp(m->arch, "gpt2");
    const int64_t D = m->hidden, F = m->inter, hd = D / m->heads, kv = m->kv_heads * hd;
    if (gpt2)
        snprintf(cfg, sizeof cfg, "{\"model_type\": \"gpt2\", \"vocab_size\": %lld, \"n_embd\": %lld, \"n_layer\": %lld,"
                 " \"n_head\": %lld, \"n_positions\": %lld, \"n_inner\": %lld, \"layer_norm_epsilon\": 1e-5,"
                 " \"activation_function\": \"gelu_new\", \"torch_dtype\": \"float32\"}\n",
                 (long long)m->vocab, (long long)D, (long long)m->layers, (long long)m->heads, (long long)m->max_pos,
                 (long long)F);
    else
        snprintf(cfg, sizeof cfg, "{\"model_type\": \"%s\", \"vocab_size\": %lld, \"hidden_size\": %lld,"
                 " \"intermediate_size\": %lld, \"num_hidden_layers\": %lld, \"num_attention_heads\": %lld,"
                 " \"num_key_value_heads\": %lld, \"max_position_embeddings\": %lld, \"rms_norm_eps\": 1e-6,"
                 " \"rope_theta\": 100000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s,"
                 " \"torch_dtype\": \"%s\"}\n",
                 m->arch, (long long)m->vocab, (long long)D, (long long)F, (long long)m->layers, (long long)m->heads,
                 (long long)m->kv_heads, (long long)m->max_pos, m->tie ? "true" : "false",
                 m->bf16_file ? "bfloat16" : "float32");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    wlist w = {.n = 0};
    if (gpt2) {
        w_add(&w, m->vocab, D, "transformer.wte.weight", 0);
        w_add(&w, m->max_pos, D, "transformer.wpe.weight", 0);
        for (int64_t l = 0; l < m->layers; l++) {
            w_add(&w, D, 0, "transformer.h.%lld.ln_1.weight", l);
            w_add(&w, D, 0, "transformer.h.%lld.ln_1.bias", l);
            w_add(&w, D, 3 * D, "transformer.h.%lld.attn.c_attn.weight", l);
            w_add(&w, 3 * D, 0, "transformer.h.%lld.attn.c_attn.bias", l);
            w_add(&w, D, D, "transformer.h.%lld.attn.c_proj.weight", l);
            w_add(&w, D, 0, "transformer.h.%lld.attn.c_proj.bias", l);
            w_add(&w, D, 0, "transformer.h.%lld.ln_2.weight", l);
            w_add(&w, D, 0, "transformer.h.%lld.ln_2.bias", l);
            w_add(&w, D, F, "transformer.h.%lld.mlp.c_fc.weight", l);
            w_add(&w, F, 0, "transformer.h.%lld.mlp.c_fc.bias", l);
            w_add(&w, F, D, "transformer.h.%lld.mlp.c_proj.weight", l);
            w_add(&w, D, 0, "transformer.h.%lld.mlp.c_proj.bias", l);
        }
        w_add(&w, D, 0, "transformer.ln_f.weight", 0);
        w_add(&w, D, 0, "transformer.ln_f.bias", 0);
    } else {
        w_add(&w, m->vocab, D, "model.embed_tokens.weight", 0);
        for (int64_t l = 0; l < m->layers; l++) {
            w_add(&w, D, 0, "model.layers.%lld.input_layernorm.weight", l);
            w_add(&w, D, D, "model.layers.%lld.self_attn.q_proj.weight", l);
            w_add(&w, kv, D, "model.layers.%lld.self_attn.k_proj.weight", l);
            w_add(&w, kv, D, "model.layers.%lld.self_attn.v_proj.weight", l);
            if (m->qkv_bias) {
                w_add(&w, D, 0, "model.layers.%lld.self_attn.q_proj.bias", l);
                w_add(&w, kv, 0, "model.layers.%lld.self_attn.k_proj.bias", l);
                w_add(&w, kv, 0, "model.layers.%lld.self_attn.v_proj.bias", l);
            }
            w_add(&w, D, D, "model.layers.%lld.self_attn.o_proj.weight", l);
            w_add(&w, D, 0, "model.layers.%lld.post_attention_layernorm.weight", l);
            w_add(&w, F, D, "model.layers.%lld.mlp.gate_proj.weight", l);
            w_add(&w, F, D, "model.layers.%lld.mlp.up_proj.weight", l);
            w_add(&w, D, F, "model.layers.%lld.mlp.down_proj.weight", l);
        }
        w_add(&w, D, 0, "model.norm.weight", 0);
        if (!m->tie) w_add(&w, m->vocab, D, "lm_head.weight", 0);
    }
    gpucore_tensor *ts[MAXW];
    const char *np[MAXW];
    for (int i = 0; i < w.n; i++) {
        int nd = w.shape[i][1] ? 2 : 1;
        ts[i] = NULL;
        np[i] = w.names[i];
        CHECK_OK(gpucore_tensor_create(ctx, m->bf16_file ? GPUCORE_BF16 : GPUCORE_F32, nd, w.shape[i], &ts[i]));
        if (nd == 1) CHECK_OK(gpucore_random(ts[i], GPUCORE_UNIFORM, 0.8, 1.2, 7, (uint64_t)i << 32, NULL));
        else CHECK_OK(gpucore_random(ts[i], GPUCORE_NORMAL, 0.0, 0.02, 7, (uint64_t)i << 32, NULL));
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(gpucore_safetensors_save(path, np, ts, w.n, NULL, NULL, 0));
    for (int i = 0; i < w.n; i++) gpucore_tensor_destroy(ts[i]);
    return dir;
}

static void print_plan(const char *label, const gpucore_lm_memory_plan *p, int64_t measured)
{
    printf("  %-44s plan %9.2f MiB  measured %9.2f MiB (%+.2f%%)  at %s\n", label, p->peak_bytes / 1048576.0,
           measured / 1048576.0, 100.0 * (double)(p->peak_bytes - measured) / (double)measured, p->where);
    printf("  %-44s", "");
    for (int c = 0; c < GPUCORE_MEM_CATEGORIES; c++)
        printf(" %s %.2f", gpucore_mem_category_name(c), p->bytes[c] / 1048576.0);
    printf("  (MiB; %lld of %lld segments recomputed)\n", (long long)p->recomputed_segments, (long long)p->segments);
}

typedef struct run_case {
    int dtype;          /* GPUCORE_F32 / GPUCORE_BF16 */
    int lora;           /* 1: LoRA r 8 on the attention's query and value and the MLP's down projection */
    int policy;
    int64_t batch, seq;
    int nf4;            /* 1: the decoder's linears loaded as NF4 (gpucore_lm_create_ex), LoRA on them */
} run_case;

static const char *policy_name(int p)
{
    static const char *const n[] = {"keep all", "every layer", "every k", "sqrt", "budget"};
    return n[p];
}

static void set_options(gpucore_lm_plan_options *o, const model_shape *m, const run_case *c, const char *const *targets,
                        int64_t budget)
{
    gpucore_lm_plan_options_init(o);
    o->batch = c->batch;
    o->seq = c->seq;
    o->dtype = c->dtype;
    o->device_type = plan_device;
    o->full_finetune = !c->lora;
    o->lora_r = c->lora ? 8 : 0;
    o->lora_targets = targets;
    o->n_lora_targets = c->lora ? 3 : 0;
    o->ckpt_policy = c->policy;
    o->ckpt_param = c->policy == GPUCORE_CKPT_BUDGET ? budget : 0;
    /* the budget's cases: small head chunks, so the layers' activations, not the logits, make the peak */
    o->head_chunk_rows = c->policy == GPUCORE_CKPT_BUDGET ? 16 : 0;
    o->quant_format = c->nf4 ? GPUCORE_QUANT_NF4 : -1;
    (void)m;
}

/* AdamW over lm's trainable parameters (its state allocated now, as gpucore-lm finetune allocates it). */
static gpucore_optimizer *adamw_of(gpucore_context *ctx, gpucore_lm *lm)
{
    const int64_t n = gpucore_lm_trainable_count(lm);
    gpucore_tensor **params = calloc((size_t)n, sizeof *params);
    for (int64_t i = 0; i < n; i++) CHECK_OK(gpucore_lm_trainable(lm, i, NULL, &params[i], NULL));
    gpucore_optimizer_config oc;
    CHECK_OK(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &oc));
    gpucore_optimizer *opt = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, &oc, params, n, &opt));
    free(params);
    return opt;
}

/* One case: plan it (from the folder and from the model), run one step, compare. */
static void run_one(gpucore_context *ctx, const char *dir, const model_shape *m, run_case c)
{
    const int gpt2 = !strcmp(m->arch, "gpt2");
    const char *t_llama[3] = {"q_proj", "v_proj", "down_proj"}, *t_gpt2[3] = {"c_attn", "c_proj", "c_fc"};
    const char *const *targets = gpt2 ? t_gpt2 : t_llama;
    char label[160];
    snprintf(label, sizeof label, "%s %s %s B%lld T%lld %s", m->name, c.dtype == GPUCORE_BF16 ? "bf16" : "f32",
             c.nf4 ? "NF4+LoRA" : c.lora ? "LoRA" : "full", (long long)c.batch, (long long)c.seq, policy_name(c.policy));
    /* a budget between the leanest and the keep-all plan: the planner has to choose */
    int64_t budget = 0;
    gpucore_lm_plan_options o;
    gpucore_lm_memory_plan lean = {.struct_size = sizeof lean}, keep = {.struct_size = sizeof keep};
    if (c.policy == GPUCORE_CKPT_BUDGET) {
        run_case r = c;
        r.policy = GPUCORE_CKPT_RECOMPUTE_ALL;
        set_options(&o, m, &r, targets, 0);
        CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &lean));
        r.policy = GPUCORE_CKPT_KEEP_ALL;
        set_options(&o, m, &r, targets, 0);
        CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &keep));
        budget = (lean.peak_bytes + keep.peak_bytes) / 2;
    }
    set_options(&o, m, &c, targets, budget);
    gpucore_lm_memory_plan from_folder = {.struct_size = sizeof from_folder}, from_model = {.struct_size = sizeof from_model};
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &from_folder));
    int64_t sum = 0;
    for (int k = 0; k < GPUCORE_MEM_CATEGORIES; k++) sum += from_folder.bytes[k];
    CHECK(sum == from_folder.peak_bytes);
    if (c.policy == GPUCORE_CKPT_BUDGET) /* the budget's plan recomputes some segments, not all */
        CHECK(from_folder.recomputed_segments > 0 || from_folder.peak_bytes < keep.peak_bytes);

    /* the step, on a fresh model (the budget policy's first step is what the planner plans) */
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_memory_empty_cache(ctx, GPUCORE_MEMORY_DEVICE)); /* as in a fresh process */
    gpucore_lm_load_options lo;
    gpucore_lm_load_options_init(&lo);
    lo.dtype = c.dtype;
    lo.quantize = c.nf4 ? GPUCORE_QUANT_NF4 : -1;
    CHECK_OK(gpucore_lm_create_ex(ctx, dir, &lo, &lm));
    if (!lm) return;
    CHECK_OK(gpucore_lm_set_head_chunk_rows(lm, o.head_chunk_rows));
    if (c.lora) CHECK_OK(gpucore_lm_add_lora(lm, 8, 16.0, 0.0, targets, 3, 3));
    else CHECK_OK(gpucore_lm_set_full_finetune(lm, 1));
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, (gpucore_ckpt_policy)c.policy, o.ckpt_param));
    o.dtype = -1;
    o.device_type = -1;
    o.quant_format = -1; /* a model loaded quantized: its own format */
    CHECK_OK(gpucore_lm_plan(lm, NULL, &o, &from_model));
    CHECK(from_model.peak_bytes == from_folder.peak_bytes);
    CHECK(!memcmp(from_model.bytes, from_folder.bytes, sizeof from_model.bytes));
    gpucore_optimizer *opt = adamw_of(ctx, lm);
    const int64_t N = c.batch * c.seq;
    int64_t *ids = malloc((size_t)N * sizeof *ids);
    for (int64_t i = 0; i < N; i++) ids[i] = (i * 7919 + 13) % m->vocab;
    int64_t shape[2] = {c.batch, c.seq};
    gpucore_tensor *x = NULL, *y = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &y));
    CHECK_OK(gpucore_copy_from_host(x, ids, N * 8));
    CHECK_OK(gpucore_copy_from_host(y, ids, N * 8));
    CHECK_OK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    const int64_t before = check_allocated_bytes(ctx, 0);
    double loss = 0;
    CHECK_OK(gpucore_lm_forward_backward(lm, x, y, &loss));
    const int64_t peak = check_allocated_bytes(ctx, 1);
    print_plan(label, &from_folder, peak);
    /* held before the step: the plan's persistent bytes and the batch (two i64 [B, T], rounded to 512);
     * to the byte where the weights load as the file holds them, within 1% where loading converted
     * them (the blocks the f32 originals leave cached are taken whole by later requests) */
    const int64_t batch_bytes = 2 * ((N * 8 + 511) / 512 * 512), planned = from_folder.persistent_bytes + batch_bytes;
    if (before != planned) printf("    held before the step %lld, planned %lld\n", (long long)before, (long long)planned);
    if (c.dtype == GPUCORE_F32 && !c.nf4) CHECK(before == planned);
    else CHECK(llabs(before - planned) <= before / 100);
    const int64_t diff = from_folder.peak_bytes > peak ? from_folder.peak_bytes - peak : peak - from_folder.peak_bytes;
    const int64_t bound = peak * 3 / 100 > (32ll << 20) ? peak * 3 / 100 : 32ll << 20;
    CHECK(diff <= bound);
    const int64_t rise = peak - before, plan_rise = from_folder.peak_bytes - from_folder.persistent_bytes - batch_bytes;
    const int64_t rdiff = rise > plan_rise ? rise - plan_rise : plan_rise - rise;
    if (rdiff > rise * 3 / 100 + (1 << 20))
        printf("    the step's rise: measured %lld, planned %lld\n", (long long)rise, (long long)plan_rise);
    CHECK(rdiff <= rise * 3 / 100 + (1 << 20));
    gpucore_optimizer_destroy(opt);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(y);
    free(ids);
    gpucore_lm_destroy(lm);
}

/* B1 T16, LoRA r 8 on one target. */
static void small_lora(gpucore_lm_plan_options *o, const char *const *target)
{
    gpucore_lm_plan_options_init(o);
    o->batch = 1;
    o->seq = 16;
    o->lora_r = 8;
    o->lora_targets = target;
    o->n_lora_targets = 1;
}

static void test_bad_options(const char *dir)
{
    const char *targets[1] = {"q_proj"}, *wrong[1] = {"c_fc"};
    gpucore_lm_plan_options o;
    gpucore_lm_memory_plan p = {.struct_size = sizeof p};
    small_lora(&o, targets);
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &p));
    o.lora_targets = wrong;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "c_fc") != NULL);
    o.lora_targets = targets;
    o.full_finetune = 1;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    o.full_finetune = 0;
    o.seq = 1;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    o.seq = 16;
    o.zero_stage = 3;
    o.world_size = 2;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_NOT_SUPPORTED);
    o.zero_stage = 0;
    o.world_size = 1;
    o.ckpt_policy = GPUCORE_CKPT_BUDGET;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    o.ckpt_param = 1 << 20; /* below the weights: no plan meets it */
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_OUT_OF_MEMORY);
    CHECK(strstr(gpucore_last_error(), "budget") != NULL);
    o.ckpt_policy = GPUCORE_CKPT_KEEP_ALL;
    o.quant_format = 99;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    o.quant_format = -1;
    CHECK_STATUS(gpucore_lm_plan(NULL, "/nonexistent/model", &o, &p), GPUCORE_ERR_IO);
    p.struct_size = 8;
    CHECK_STATUS(gpucore_lm_plan(NULL, dir, &o, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(gpucore_mem_category_name(GPUCORE_MEM_CATEGORIES) == NULL);
    CHECK(!strcmp(gpucore_mem_category_name(GPUCORE_MEM_HEAD_LOSS), "head_loss"));
}

/* A quantized base: the decoder's linears at gpucore_quant_size's bytes, the rest unchanged. */
static void test_quantized_base(const char *dir, const model_shape *m)
{
    const char *targets[1] = {"q_proj"};
    gpucore_lm_plan_options o;
    gpucore_lm_memory_plan dense = {.struct_size = sizeof dense}, q = {.struct_size = sizeof q};
    small_lora(&o, targets);
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &dense));
    o.quant_format = GPUCORE_QUANT_NF4;
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &q));
    const int64_t D = m->hidden, F = m->inter, kv = m->kv_heads * (D / m->heads);
    const int64_t shapes[7][2] = {{D, D}, {kv, D}, {kv, D}, {D, D}, {F, D}, {F, D}, {D, F}};
    int64_t saved = 0;
    for (int i = 0; i < 7; i++) {
        int64_t b = 0;
        CHECK_OK(gpucore_quant_size(GPUCORE_QUANT_NF4, shapes[i][0], shapes[i][1], 0, 0, &b));
        saved += (shapes[i][0] * shapes[i][1] * 4 + 511) / 512 * 512 - (b + 511) / 512 * 512;
    }
    saved *= m->layers;
    printf("  %s NF4 base: weights %.2f -> %.2f MiB\n", m->name, dense.bytes[GPUCORE_MEM_WEIGHTS] / 1048576.0,
           q.bytes[GPUCORE_MEM_WEIGHTS] / 1048576.0);
    CHECK(dense.bytes[GPUCORE_MEM_WEIGHTS] - q.bytes[GPUCORE_MEM_WEIGHTS] == saved);
}

/* A training step as gpucore-lm finetune runs it: AdamW's state allocated with the optimizer, the batch of
 * `batch` rows run as micro-batches of `micro` rows whose gradients accumulate (the loss over the whole
 * batch's label tokens), then one optimizer step. Returns its status; *peak: the allocator's allocated peak. */
static gpucore_status accumulated_step(gpucore_context *ctx, gpucore_lm *lm, gpucore_optimizer *opt,
                                       const int64_t *ids, int64_t batch, int64_t micro, int64_t T, int64_t *peak)
{
    gpucore_status st = GPUCORE_OK;
    int64_t shape[2] = {micro, T}, total = 0;
    gpucore_tensor *x = NULL;
    CHECK_OK(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
    if ((st = gpucore_tensor_create(ctx, GPUCORE_I64, 2, shape, &x))) return st;
    for (int64_t r = 0; r < batch && !st; r += micro) { /* the whole batch's label tokens first */
        int64_t c = 0;
        st = gpucore_copy_from_host(x, ids + r * T, micro * T * 8);
        if (!st) st = gpucore_lm_count_label_tokens(lm, x, NULL, &c);
        total += c;
    }
    gpucore_lm_backward_options bo;
    gpucore_lm_backward_options_init(&bo);
    bo.total_label_tokens = total;
    double loss = 0, sum = 0;
    for (int64_t r = 0; r < batch && !st; r += micro) {
        bo.accumulate = r > 0;
        st = gpucore_copy_from_host(x, ids + r * T, micro * T * 8);
        if (!st) st = gpucore_lm_forward_backward_ex(lm, x, x, &bo, &loss);
        sum += loss;
    }
    const int64_t n = gpucore_lm_trainable_count(lm);
    gpucore_tensor **grads = calloc((size_t)n, sizeof *grads);
    for (int64_t i = 0; i < n && !st; i++) st = gpucore_lm_trainable(lm, i, NULL, NULL, &grads[i]);
    if (!st) st = gpucore_optimizer_step(opt, grads, n, NULL, NULL);
    free(grads);
    gpucore_tensor_destroy(x);
    *peak = check_allocated_bytes(ctx, 1);
    if (!st) CHECK(sum > 0);
    return st;
}

/* gpucore-lm plan --device-memory: under a limit below the unconstrained step's planned peak, the CLI's
 * first (cheapest) setting is run as finetune runs it (LoRA, AdamW, its micro-batch and accumulation,
 * its checkpoint policy) with that limit on the context: it succeeds and the allocator's peak is within
 * the limit. On the same model under the same limit the unconstrained setting then runs out of memory,
 * its message says what the plan expected by category and which micro-batch and policy fit, and that
 * setting runs (the model stays usable; no restart). */
static void test_recommendation_runs(gpucore_context *ctx, const char *cli, const char *dir, const model_shape *m)
{
    const char *targets[2] = {"q_proj", "v_proj"};
    const int64_t B = 8, T = 128;
    if (!cli) {
        CHECK(!"test_lm_plan needs the path of gpucore-lm as its argument (tests/meson.build passes it)");
        return;
    }
    gpucore_lm_plan_options o;
    gpucore_lm_plan_options_init(&o);
    o.batch = B;
    o.seq = T;
    o.dtype = GPUCORE_F32;
    o.device_type = GPUCORE_DEVICE_CPU;
    o.lora_r = 8;
    o.lora_targets = targets;
    o.n_lora_targets = 2;
    gpucore_lm_memory_plan full = {.struct_size = sizeof full}, half = {.struct_size = sizeof half};
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &full));
    o.batch = B / 4;
    o.grad_accum = 4;
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &half));
    /* the limit: between a quarter batch's peak (with accumulation) and the whole batch's */
    const int64_t limit = (half.peak_bytes + full.peak_bytes) / 2;
    char cmd[1200], line[512];
    snprintf(cmd, sizeof cmd, "'%s' plan '%s' --device cpu --dtype f32 --lora 8 --targets q_proj,v_proj --batch %lld "
             "--seq %lld --device-memory %lld 2>&1", cli, dir, (long long)B, (long long)T, (long long)limit);
    FILE *f = popen(cmd, "r");
    char pol[32] = "";
    long long micro = 0, accum = 0;
    double peak_mib = 0, cost = -1;
    int state = 0; /* 1: the header of the settings that fit is next, 2: the first setting is next */
    while (f && fgets(line, sizeof line, f)) {
        printf("    | %s", line);
        if (state == 2 && sscanf(line, " %31s %lld %lld %lf %lf%%", pol, &micro, &accum, &peak_mib, &cost) == 5)
            state = 3;
        else if (state == 1) state = 2;
        else if (!state && strstr(line, "settings that fit in")) state = 1;
    }
    CHECK(f && pclose(f) == 0);
    printf("  gpucore-lm plan --device-memory %.2f MiB (the step alone %.2f MiB): first --checkpoint-policy %s "
           "--batch %lld --grad-accum %lld, planned %.2f MiB, recompute %.0f%%\n", limit / 1048576.0,
           full.peak_bytes / 1048576.0, pol, micro, accum, peak_mib, cost);
    CHECK(state == 3 && micro >= 1 && micro < B && micro * accum == B && peak_mib * 1048576.0 <= (double)limit);
    const gpucore_ckpt_policy p = !strcmp(pol, "sqrt") ? GPUCORE_CKPT_SQRT_N
                                  : !strcmp(pol, "all") ? GPUCORE_CKPT_RECOMPUTE_ALL : GPUCORE_CKPT_KEEP_ALL;
    CHECK(!strcmp(pol, "none") || p != GPUCORE_CKPT_KEEP_ALL);
    if (state != 3 || micro < 1 || B % micro) return;

    /* the recommendation, run under the limit on a fresh model (as a fresh process would) */
    gpucore_lm *lm = NULL;
    CHECK_OK(gpucore_memory_set_limit(ctx, 0));
    CHECK_OK(gpucore_memory_empty_cache(ctx, GPUCORE_MEMORY_DEVICE));
    /* the bytes each category will hold, known apart from the tags: the load's and the optimizer's
     * allocated bytes, and the adapters and their gradients (each below 1 MiB: the allocator's
     * small pool, 512-byte blocks) */
    int64_t known[GPUCORE_MEM_CATEGORIES + 1] = {0};
    int64_t before = check_allocated_bytes(ctx, 0);
    CHECK_OK(gpucore_lm_create(ctx, dir, GPUCORE_F32, &lm));
    if (!lm) return;
    known[GPUCORE_MEM_WEIGHTS] = check_allocated_bytes(ctx, 0) - before;
    CHECK_OK(gpucore_lm_add_lora(lm, 8, 16.0, 0.0, targets, 2, 3));
    for (int64_t i = 0; i < gpucore_lm_trainable_count(lm); i++) {
        gpucore_tensor *pa = NULL, *gr = NULL;
        CHECK_OK(gpucore_lm_trainable(lm, i, NULL, &pa, &gr));
        const int64_t np = gpucore_tensor_nbytes(pa), ng = gpucore_tensor_nbytes(gr);
        CHECK(np < (1 << 20) && ng < (1 << 20));
        known[GPUCORE_MEM_WEIGHTS] += (np + 511) / 512 * 512;
        known[GPUCORE_MEM_GRADIENTS] += (ng + 511) / 512 * 512;
    }
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, p, 0));
    before = check_allocated_bytes(ctx, 0);
    gpucore_optimizer *opt = adamw_of(ctx, lm);
    known[GPUCORE_MEM_OPTIMIZER] = check_allocated_bytes(ctx, 0) - before;
    gpucore_memory_categories mc = {.struct_size = sizeof mc};
    CHECK_OK(gpucore_memory_get_categories(ctx, &mc));
    int64_t need = 0; /* the JSON snapshot gives the same bytes by category */
    CHECK_OK(gpucore_memory_snapshot(ctx, GPUCORE_MEMORY_DEVICE, GPUCORE_SNAPSHOT_JSON, NULL, 0, &need));
    char *snap = malloc((size_t)need + 4096), want_snap[64];
    CHECK_OK(gpucore_memory_snapshot(ctx, GPUCORE_MEMORY_DEVICE, GPUCORE_SNAPSHOT_JSON, snap, need + 4096, NULL));
    snprintf(want_snap, sizeof want_snap, "\"categories\":{\"weights\":%lld,\"gradients\":%lld,",
             (long long)known[0], (long long)known[1]);
    CHECK(strstr(snap, want_snap) != NULL && strstr(snap, "\"category\":\"optimizer\"") != NULL);
    free(snap);
    for (int c = 0; c < 3; c++) {
        if (mc.live[c] != known[c])
            printf("    live %s: %lld bytes, known %lld\n", gpucore_mem_category_name(c), (long long)mc.live[c],
                   (long long)known[c]);
        CHECK(mc.live[c] == known[c]);
    }
    int64_t *ids = malloc((size_t)(B * T) * sizeof *ids);
    for (int64_t i = 0; i < B * T; i++) ids[i] = (i * 7919 + 13) % m->vocab;
    CHECK_OK(gpucore_memory_set_limit(ctx, limit));
    int64_t peak = 0;
    CHECK_OK(accumulated_step(ctx, lm, opt, ids, B, micro, T, &peak));
    printf("  the recommendation run under the limit: allocated peak %.2f MiB (planned %.2f MiB, limit %.2f MiB)\n",
           peak / 1048576.0, peak_mib, limit / 1048576.0);
    CHECK(peak > 0 && peak <= limit);

    /* the whole batch at once, on the same model under the same limit: out of memory, explained */
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, GPUCORE_CKPT_KEEP_ALL, 0));
    CHECK_STATUS(accumulated_step(ctx, lm, opt, ids, B, B, T, &peak), GPUCORE_ERR_OUT_OF_MEMORY);
    const char *msg = gpucore_last_error();
    printf("  the whole batch under the limit: %s\n", msg);
    CHECK(strstr(msg, "gpucore_lm_plan") != NULL && strstr(msg, "fits under it: micro-batch") != NULL);
    /* the live bytes by category when the allocator refused: the persistent ones as known, the step's
     * own (activations, transient, head and loss) some, the caller's ids ("other") at least its tensor,
     * and together no more than the limit */
    long long live[GPUCORE_MEM_CATEGORIES + 1] = {0};
    const char *lv = strstr(msg, "when the allocator refused, in bytes: ");
    CHECK(lv != NULL);
    if (lv) {
        lv += strlen("when the allocator refused, in bytes: ");
        char fmt[400] = "";
        for (int c = 0; c <= GPUCORE_MEM_CATEGORIES; c++)
            snprintf(fmt + strlen(fmt), sizeof fmt - strlen(fmt), "%s%s %%lld", c ? ", " : "",
                     c < GPUCORE_MEM_CATEGORIES ? gpucore_mem_category_name(c) : "other");
        CHECK(sscanf(lv, fmt, &live[0], &live[1], &live[2], &live[3], &live[4], &live[5], &live[6], &live[7]) == 8);
    }
    long long sum = 0;
    for (int c = 0; c <= GPUCORE_MEM_CATEGORIES; c++) {
        sum += live[c];
        if (c < 3 && live[c] != known[c]) {
            printf("    live %s at the refusal: %lld bytes, known %lld\n", gpucore_mem_category_name(c), live[c],
                   (long long)known[c]);
            CHECK(!"the out-of-memory message gives each category's live bytes");
        }
    }
    printf("  live at the refusal: weights, gradients, optimizer as known; activations %.2f MiB, transient %.2f MiB, "
           "head_loss %.2f MiB, other %.2f MiB (of the limit %.2f MiB)\n", live[GPUCORE_MEM_ACTIVATIONS] / 1048576.0,
           live[GPUCORE_MEM_TRANSIENT] / 1048576.0, live[GPUCORE_MEM_HEAD_LOSS] / 1048576.0,
           live[GPUCORE_MEM_CATEGORIES] / 1048576.0, limit / 1048576.0);
    CHECK(live[GPUCORE_MEM_ACTIVATIONS] > 0 && live[GPUCORE_MEM_CATEGORIES] >= B * T * 8 && sum <= limit);
    /* refused in the head and loss, where the plan puts the peak: what the executor keeps for the
     * backward is there as planned (the plan counts the caller's ids and labels in it too) */
    if (strstr(msg, "more planned at its peak (head and loss)") && strstr(msg, "asked for") &&
        fabs((double)(live[GPUCORE_MEM_ACTIVATIONS] + live[GPUCORE_MEM_CATEGORIES]) -
             (double)full.bytes[GPUCORE_MEM_ACTIVATIONS]) > 0.03 * (double)full.bytes[GPUCORE_MEM_ACTIVATIONS]) {
        printf("    live activations %lld bytes (+ other %lld), planned %lld\n", live[GPUCORE_MEM_ACTIVATIONS],
               live[GPUCORE_MEM_CATEGORIES], (long long)full.bytes[GPUCORE_MEM_ACTIVATIONS]);
        CHECK(!"the activations live at the refusal are the planned ones");
    }
    for (int c = 0; c < GPUCORE_MEM_CATEGORIES; c++) {
        char want[40];
        snprintf(want, sizeof want, "%s %.1f MiB", gpucore_mem_category_name(c), full.bytes[c] / 1048576.0);
        /* the step's planned categories (the optimizer's state was allocated before it: measured, not planned) */
        if (c != GPUCORE_MEM_OPTIMIZER && !strstr(msg, want)) {
            printf("    the message lacks \"%s\"\n", want);
            CHECK(!"the out-of-memory message gives the plan's bytes of every category");
        }
    }
    long long smicro = 0, saccum = 0;
    char spol[32] = "";
    const char *s = strstr(msg, "fits under it: micro-batch");
    if (s)
        CHECK(sscanf(s, "fits under it: micro-batch %lld (gradient accumulation over %lld) with checkpoint policy %31s",
                     &smicro, &saccum, spol) == 3);
    CHECK(smicro >= 1 && smicro <= B && smicro * saccum == B);
    /* the suggested setting, on the same model under the same limit */
    const gpucore_ckpt_policy sp = !strcmp(spol, "sqrt_n") ? GPUCORE_CKPT_SQRT_N
                                   : !strcmp(spol, "recompute_all") ? GPUCORE_CKPT_RECOMPUTE_ALL : GPUCORE_CKPT_KEEP_ALL;
    CHECK_OK(gpucore_lm_set_checkpoint_policy(lm, sp, 0));
    if (smicro >= 1 && B % smicro == 0) {
        CHECK_OK(accumulated_step(ctx, lm, opt, ids, B, smicro, T, &peak));
        printf("  the suggested micro-batch %lld x %lld (%s) under the limit: allocated peak %.2f MiB\n", smicro, saccum,
               spol, peak / 1048576.0);
        CHECK(peak <= limit);
    }
    CHECK_OK(gpucore_memory_set_limit(ctx, 0));
    gpucore_optimizer_destroy(opt);
    free(ids);
    gpucore_lm_destroy(lm);
}

/* Llama-3.2-1B's shape (two layers), bf16 weights, B1 T64: LoRA, and LoRA on an NF4 base. Full fine-tuning
 * in f32 with AdamW is planned but not run where its peak passes half the memory the machine has free:
 * a SKIP line says so with the figures. Not in the sanitizer builds (shadow memory and 5-15x the time for
 * the widest model here; the narrower ones run there): a SKIP line says so. */
static void llama_1b(gpucore_context *ctx)
{
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    check_skipped++;
    printf("SKIP llama-3.2-1b: not in a sanitizer build (the normal build runs it)\n");
    return;
#endif
    const char *dir = make_model(ctx, &LLAMA1B);
    const run_case cases[] = {{GPUCORE_BF16, 1, GPUCORE_CKPT_KEEP_ALL, 1, 64, 0}, {GPUCORE_BF16, 1, GPUCORE_CKPT_KEEP_ALL, 1, 64, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_one(ctx, dir, &LLAMA1B, cases[i]);
    const run_case full = {GPUCORE_F32, 0, GPUCORE_CKPT_KEEP_ALL, 1, 64, 0};
    gpucore_lm_plan_options o;
    gpucore_lm_memory_plan p = {.struct_size = sizeof p};
    set_options(&o, &LLAMA1B, &full, NULL, 0);
    CHECK_OK(gpucore_lm_plan(NULL, dir, &o, &p));
    const int64_t avail = (int64_t)sysconf(_SC_AVPHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
    if (p.peak_bytes > avail / 2) {
        check_skipped++;
        printf("SKIP llama-3.2-1b f32 full B1 T64 keep all: planned peak %.2f GiB, more than half the %.2f GiB this "
               "machine has free\n", p.peak_bytes / 1073741824.0, avail / 1073741824.0);
    } else {
        run_one(ctx, dir, &LLAMA1B, full);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir); /* 0.77 GB */
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* The cuda lane: GPT-2's and SmolLM2's architectures at narrower widths (the stand-ins run the kernels on the
 * CPU's SIMT layer: the real widths take many minutes there) on the CUDA backend (in CI the real module over
 * the stand-ins of tests/cuda_contract): the same allocator, the cuBLASLt workspace counted. */
static const model_shape GPT2_NARROW = {"gpt2-narrow", "gpt2", 8192, 256, 1024, 4, 4, 2, 1024, 1, 0, 0};
static const model_shape SMOL_NARROW = {"smollm2-narrow", "llama", 8192, 192, 512, 3, 1, 2, 8192, 1, 0, 0};

static void cuda_lane(void)
{
    char why[768];
    if (gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) != GPUCORE_OK) {
        check_skipped++;
        printf("SKIP cuda backend: %s\n", why);
        gpucore_clear_error();
        return;
    }
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda", &ctx));
    if (!ctx) return;
    check_device = "cuda";
    plan_device = GPUCORE_DEVICE_CUDA;
    printf("-- cuda\n");
    const char *gdir = make_model(ctx, &GPT2_NARROW);
    const run_case gcases[] = {
        {GPUCORE_F32, 1, GPUCORE_CKPT_KEEP_ALL, 2, 64, 0}, {GPUCORE_F32, 1, GPUCORE_CKPT_SQRT_N, 2, 64, 0},
        {GPUCORE_F32, 0, GPUCORE_CKPT_KEEP_ALL, 1, 64, 0},
    };
    for (size_t i = 0; i < sizeof gcases / sizeof gcases[0]; i++) run_one(ctx, gdir, &GPT2_NARROW, gcases[i]);
    const char *sdir = make_model(ctx, &SMOL_NARROW);
    const run_case scases[] = {
        {GPUCORE_F32, 1, GPUCORE_CKPT_KEEP_ALL, 2, 64, 0}, {GPUCORE_F32, 1, GPUCORE_CKPT_RECOMPUTE_ALL, 1, 64, 0},
        {GPUCORE_BF16, 1, GPUCORE_CKPT_KEEP_ALL, 1, 64, 0}, {GPUCORE_F32, 1, GPUCORE_CKPT_KEEP_ALL, 2, 64, 1},
    };
    for (size_t i = 0; i < sizeof scases / sizeof scases[0]; i++) run_one(ctx, sdir, &SMOL_NARROW, scases[i]);
    gpucore_context_destroy(ctx);
    check_device = "";
    plan_device = GPUCORE_DEVICE_CPU;
}

/* test_lm_plan GPUCORE_LM [cuda]: the path of gpucore-lm; "cuda": the cuda lane alone (the contract run). */
int main(int argc, char **argv)
{
    snprintf(root, sizeof root, "/tmp/gpucore_test_lm_plan_%d", (int)getpid());
    mkdir(root, 0777);
    gpucore_context *ctx = NULL;
    const int cuda_only = argc > 2 && !strcmp(argv[2], "cuda");
    const int oom_only = argc > 2 && !strcmp(argv[2], "oom"); /* the limit and out-of-memory part alone */
    if (cuda_only) printf("the cpu lane: test_lm_plan without the \"cuda\" argument\n");
    else CHECK_OK(gpucore_context_create("cpu", &ctx));
    if (ctx && oom_only) {
        check_device = "cpu";
        test_recommendation_runs(ctx, argv[1], make_model(ctx, &SMOL), &SMOL);
        gpucore_context_destroy(ctx);
        ctx = NULL;
    }
    if (ctx) {
        check_device = "cpu";
        const char *gdir = make_model(ctx, &GPT2);
        const run_case gcases[] = {
            {GPUCORE_F32, 1, GPUCORE_CKPT_KEEP_ALL, 2, 128, 0},     {GPUCORE_F32, 1, GPUCORE_CKPT_RECOMPUTE_ALL, 2, 128, 0},
            {GPUCORE_F32, 1, GPUCORE_CKPT_SQRT_N, 2, 128, 0},       {GPUCORE_F32, 1, GPUCORE_CKPT_BUDGET, 2, 128, 0},
            {GPUCORE_F32, 0, GPUCORE_CKPT_KEEP_ALL, 1, 128, 0},     {GPUCORE_F32, 0, GPUCORE_CKPT_RECOMPUTE_ALL, 1, 64, 0},
            {GPUCORE_BF16, 0, GPUCORE_CKPT_KEEP_ALL, 1, 64, 0},     {GPUCORE_BF16, 1, GPUCORE_CKPT_SQRT_N, 1, 128, 0},
        };
        for (size_t i = 0; i < sizeof gcases / sizeof gcases[0]; i++) run_one(ctx, gdir, &GPT2, gcases[i]);
        const char *sdir = make_model(ctx, &SMOL);
        const run_case scases[] = {
            {GPUCORE_F32, 1, GPUCORE_CKPT_KEEP_ALL, 2, 128, 0},     {GPUCORE_F32, 1, GPUCORE_CKPT_RECOMPUTE_ALL, 1, 128, 0},
            {GPUCORE_F32, 1, GPUCORE_CKPT_BUDGET, 2, 128, 0},       {GPUCORE_F32, 0, GPUCORE_CKPT_SQRT_N, 1, 64, 0},
            {GPUCORE_BF16, 1, GPUCORE_CKPT_KEEP_ALL, 1, 128, 0},   {GPUCORE_F32, 1, GPUCORE_CKPT_KEEP_ALL, 2, 128, 1},
        };
        for (size_t i = 0; i < sizeof scases / sizeof scases[0]; i++) run_one(ctx, sdir, &SMOL, scases[i]);
        test_bad_options(sdir);
        test_quantized_base(sdir, &SMOL);
        test_recommendation_runs(ctx, argc > 1 ? argv[1] : NULL, sdir, &SMOL);
        const char *qdir = make_model(ctx, &QWEN);
        const run_case qcases[] = {
            {GPUCORE_BF16, 1, GPUCORE_CKPT_KEEP_ALL, 1, 128, 0},    {GPUCORE_F32, 1, GPUCORE_CKPT_BUDGET, 2, 64, 0},
        };
        for (size_t i = 0; i < sizeof qcases / sizeof qcases[0]; i++) run_one(ctx, qdir, &QWEN, qcases[i]);
        llama_1b(ctx);
        gpucore_context_destroy(ctx);
        check_device = "";
    }
    if (!oom_only) cuda_lane();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_finish("test_lm_plan");
}
