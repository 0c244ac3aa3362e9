/*
 * train_gpt.c — a byte-level GPT trained with libgpucore, then LoRA-fine-tuned:
 *
 *   - data: the bytes of a text file (default the GPL-3 licence text Debian's
 *     base-files installs); each sample of step s is the window at offset
 *     draw(seed, s, sample) mod (n - seq - 1) (train_common's counter hash), so a
 *     resumed run and the PyTorch twin (bench/peers/torch_gpt.py) see the same batches;
 *   - model: token embedding [256, D]; L pre-norm layers, each two built-in
 *     segments of the checkpoint executor (gpucore_ckpt_add_attention_block: RMSNorm,
 *     QKV projection, RoPE, causal attention, output projection, residual;
 *     gpucore_ckpt_add_mlp_block: RMSNorm, SwiGLU MLP, residual); final RMSNorm,
 *     an untied head [256, D] and cross-entropy; no biases;
 *   - precision: bf16 parameters, activations and gradients with f32 master weights
 *     in the fused AdamW (or --f32 throughout); dynamic loss scaling; global-norm
 *     clipping; activation checkpointing by --checkpoint-policy;
 *   - fine-tuning: after --steps base steps, --finetune-steps steps on a second text
 *     (default Apache-2.0) train only LoRA adapters (rank --lora-rank, scale
 *     alpha/rank) on every attention projection; the base is frozen;
 *   - files: --save-init PATH (the initial weights, safetensors, what the twin
 *     loads), --save PATH (base model + optimizer + scaler), --save-adapter PATH;
 *   - --ddp under mpirun: each rank takes its shard of the global batch; the DDP
 *     reducer averages gradients as the executor announces them;
 *   - --zero N (0-3) under mpirun instead: the ZeRO trainer (gpucore_zero_*) shards the
 *     optimizer state (1), the gradients (2) and the parameters (3), one bucket per
 *     executor segment plus the embedding and the tail; the blocks are bound with
 *     gpucore_zero_bind_ckpt, the embedding and tail gather their buckets around use;
 *     the base phase only (no LoRA phase, --save or --sample with it);
 *   - at the end: text sampled from the model, tokens/s and peak memory.
 *
 *   train_gpt [--layers 2] [--width 64] [--heads 4] [--seq 64] [--batch 8] [--steps 30]
 *             [--finetune-steps 10] [--data PATH] [--finetune-data PATH] [--f32] [--lr LR]
 *             [--clip C] [--checkpoint-policy P] [--lora-rank R] [--lora-alpha A]
 *             [--lora-dropout P] [--save-init PATH] [--save PATH] [--save-adapter PATH]
 *             [--sample N] [--device D] [--seed S] [--ddp | --zero N] [--log-json] [--quiet]
 *             [--no-profile]
 *
 * Each step prints "step N loss X" (or a JSON line with --log-json; fine-tuning
 * steps carry "phase":"lora"). Exit status 0 on success.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"
#include "train_common.h"

#define TRY(call)                                                                                          \
    do {                                                                                                   \
        gpucore_status st_ = (call);                                                                       \
        if (st_ != GPUCORE_OK) {                                                                           \
            fprintf(stderr, "train_gpt: %s failed: %s: %s\n", #call, gpucore_status_string(st_),           \
                    gpucore_last_error());                                                                 \
            return 1;                                                                                      \
        }                                                                                                  \
    } while (0)

#define VOCAB 256
#define MAX_LAYERS 16
#define MAX_PARAMS (8 * MAX_LAYERS + 4)

typedef struct options {
    int layers, width, heads, seq, lora_rank;
    int64_t batch, steps, finetune_steps, sample;
    uint64_t seed;
    double lr, clip, lora_alpha, lora_dropout;
    const char *device, *data, *finetune_data, *policy, *save_init, *save, *save_adapter;
    int f32, ddp, zero, log_json, quiet, profile;
} options;

static int usage(const char *msg)
{
    if (msg) fprintf(stderr, "train_gpt: %s\n", msg);
    fprintf(stderr, "usage: train_gpt [--layers L] [--width D] [--heads H] [--seq S] [--batch B] [--steps N]\n"
                    "                 [--finetune-steps N] [--data PATH] [--finetune-data PATH] [--f32] [--lr LR]\n"
                    "                 [--clip C] [--checkpoint-policy none|all|sqrt|every:K|budget:BYTES]\n"
                    "                 [--lora-rank R] [--lora-alpha A] [--lora-dropout P] [--save-init PATH]\n"
                    "                 [--save PATH] [--save-adapter PATH] [--sample N] [--device D] [--seed S]\n"
                    "                 [--ddp | --zero N] [--log-json] [--quiet] [--no-profile]\n");
    return 2;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.layers = 2, .width = 64, .heads = 4, .seq = 64, .lora_rank = 4, .batch = 8, .steps = 30,
                   .finetune_steps = 10, .sample = 200, .seed = 1234, .lr = 3e-3, .clip = 1.0, .lora_alpha = 8,
                   .device = "auto", .data = "/usr/share/common-licenses/GPL-3",
                   .finetune_data = "/usr/share/common-licenses/Apache-2.0", .policy = "none", .profile = 1, .zero = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) return usage("an option is missing its value"); i++; } while (0)
        if (!strcmp(a, "--layers")) { VAL(); o->layers = atoi(v); }
        else if (!strcmp(a, "--width")) { VAL(); o->width = atoi(v); }
        else if (!strcmp(a, "--heads")) { VAL(); o->heads = atoi(v); }
        else if (!strcmp(a, "--seq")) { VAL(); o->seq = atoi(v); }
        else if (!strcmp(a, "--batch")) { VAL(); o->batch = atoll(v); }
        else if (!strcmp(a, "--steps")) { VAL(); o->steps = atoll(v); }
        else if (!strcmp(a, "--finetune-steps")) { VAL(); o->finetune_steps = atoll(v); }
        else if (!strcmp(a, "--data")) { VAL(); o->data = v; }
        else if (!strcmp(a, "--finetune-data")) { VAL(); o->finetune_data = v; }
        else if (!strcmp(a, "--lr")) { VAL(); o->lr = atof(v); }
        else if (!strcmp(a, "--clip")) { VAL(); o->clip = atof(v); }
        else if (!strcmp(a, "--checkpoint-policy")) { VAL(); o->policy = v; }
        else if (!strcmp(a, "--lora-rank")) { VAL(); o->lora_rank = atoi(v); }
        else if (!strcmp(a, "--lora-alpha")) { VAL(); o->lora_alpha = atof(v); }
        else if (!strcmp(a, "--lora-dropout")) { VAL(); o->lora_dropout = atof(v); }
        else if (!strcmp(a, "--save-init")) { VAL(); o->save_init = v; }
        else if (!strcmp(a, "--save")) { VAL(); o->save = v; }
        else if (!strcmp(a, "--save-adapter")) { VAL(); o->save_adapter = v; }
        else if (!strcmp(a, "--sample")) { VAL(); o->sample = atoll(v); }
        else if (!strcmp(a, "--device")) { VAL(); o->device = v; }
        else if (!strcmp(a, "--seed")) { VAL(); o->seed = strtoull(v, NULL, 0); }
        else if (!strcmp(a, "--f32")) o->f32 = 1;
        else if (!strcmp(a, "--ddp")) o->ddp = 1;
        else if (!strcmp(a, "--zero")) { VAL(); o->zero = atoi(v); }
        else if (!strcmp(a, "--log-json")) o->log_json = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--no-profile")) o->profile = 0;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(NULL); exit(0); }
        else return usage("unknown option");
#undef VAL
    }
    if (o->layers < 1 || o->layers > MAX_LAYERS || o->width < 2 || o->heads < 1 || o->width % o->heads ||
        (o->width / o->heads) % 2 || o->seq < 2 || o->batch < 1 || o->steps < 0 || o->finetune_steps < 0 ||
        o->lr <= 0 || o->clip <= 0 || o->lora_rank < 1 || !(o->lora_dropout >= 0 && o->lora_dropout < 1) || o->sample < 0)
        return usage("a value is out of range (width must split into heads of an even size)");
    if (o->zero >= 0 && (o->zero > 3 || o->ddp || o->finetune_steps || o->sample || o->save || o->save_adapter))
        return usage("--zero takes 0-3 and trains the base phase only: not with --ddp, and pass --finetune-steps 0 "
                     "--sample 0, no --save");
    return 0;
}

/* ------------------------------------------------------------------- data */

typedef struct text { unsigned char *bytes; int64_t n; } text;

static int read_text(const char *path, int64_t seq, text *t)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "train_gpt: cannot open %s\n", path); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    t->bytes = malloc((size_t)n + 1);
    t->n = t->bytes ? (int64_t)fread(t->bytes, 1, (size_t)n, f) : 0;
    fclose(f);
    if (t->n < seq + 2) { fprintf(stderr, "train_gpt: %s has %lld bytes, fewer than --seq + 2\n", path, (long long)t->n); return 1; }
    return 0;
}

/* Sample g of step s: tokens text[off .. off+seq), targets one byte later. */
static void make_sample(const text *t, uint64_t seed, int64_t step, int64_t g, int64_t seq, int32_t *tok, int32_t *tgt)
{
    int64_t off = (int64_t)(train_draw(seed, step, g, 0) % (uint64_t)(t->n - seq - 1));
    for (int64_t i = 0; i < seq; i++) {
        tok[i] = t->bytes[off + i];
        tgt[i] = t->bytes[off + i + 1];
    }
}

/* ------------------------------------------------------------------ model */

typedef struct model {
    int L, D, H, F, S;
    gpucore_dtype dt;
    gpucore_tensor *params[MAX_PARAMS], *grads[MAX_PARAMS];
    char names[MAX_PARAMS][48];
    const char *name_ptrs[MAX_PARAMS];
    int n;
    /* indices into params */
    int emb, norm_f, head, attn_norm[MAX_LAYERS], w_qkv[MAX_LAYERS], w_out[MAX_LAYERS], mlp_norm[MAX_LAYERS],
        w_fc1[MAX_LAYERS], w_fc2[MAX_LAYERS];
    gpucore_tensor *cos, *sin; /* RoPE tables [S, hd/2], f32 */
    /* LoRA adapters: A and B of qkv and out per layer, with their gradients */
    gpucore_tensor *lora[MAX_LAYERS * 4], *dlora[MAX_LAYERS * 4];
    char lora_names[MAX_LAYERS * 4][48];
    const char *lora_name_ptrs[MAX_LAYERS * 4];
} model;

static int add_param(gpucore_context *ctx, model *m, const char *name, int nd, const int64_t *shape, double sd,
                     uint64_t seed, uint64_t *off)
{
    int i = m->n++;
    TRY(gpucore_tensor_create(ctx, m->dt, nd, shape, &m->params[i]));
    TRY(gpucore_tensor_create(ctx, m->dt, nd, shape, &m->grads[i]));
    if (sd > 0) {
        TRY(gpucore_random(m->params[i], GPUCORE_NORMAL, 0.0, sd, seed, *off, NULL));
        *off += gpucore_random_offset_advance(gpucore_tensor_numel(m->params[i]), GPUCORE_NORMAL);
    } else TRY(gpucore_fill(m->params[i], 1.0, NULL)); /* norm weights */
    snprintf(m->names[i], sizeof m->names[i], "%s", name);
    m->name_ptrs[i] = m->names[i];
    return 0;
}

static int model_init(gpucore_context *ctx, model *m, const options *o)
{
    memset(m, 0, sizeof *m);
    m->L = o->layers, m->D = o->width, m->H = o->heads, m->F = 2 * o->width, m->S = o->seq;
    m->dt = o->f32 ? GPUCORE_F32 : GPUCORE_BF16;
    const int64_t D = m->D, F = m->F, V = VOCAB;
    const double sd = 0.02, sd_res = 0.02 / sqrt(2.0 * m->L); /* residual projections: scaled (GPT-2) */
    uint64_t off = 0, seed = o->seed ^ 0x6E7A11ull;
    char nm[48];
    m->emb = m->n;
    if (add_param(ctx, m, "tok_emb.weight", 2, (int64_t[2]){V, D}, sd, seed, &off)) return 1;
    for (int l = 0; l < m->L; l++) {
        m->attn_norm[l] = m->n;
        snprintf(nm, sizeof nm, "layers.%d.attn_norm.weight", l);
        if (add_param(ctx, m, nm, 1, &D, 0, seed, &off)) return 1;
        m->w_qkv[l] = m->n;
        snprintf(nm, sizeof nm, "layers.%d.attn.w_qkv", l);
        if (add_param(ctx, m, nm, 2, (int64_t[2]){3 * D, D}, sd, seed, &off)) return 1;
        m->w_out[l] = m->n;
        snprintf(nm, sizeof nm, "layers.%d.attn.w_out", l);
        if (add_param(ctx, m, nm, 2, (int64_t[2]){D, D}, sd_res, seed, &off)) return 1;
        m->mlp_norm[l] = m->n;
        snprintf(nm, sizeof nm, "layers.%d.mlp_norm.weight", l);
        if (add_param(ctx, m, nm, 1, &D, 0, seed, &off)) return 1;
        m->w_fc1[l] = m->n;
        snprintf(nm, sizeof nm, "layers.%d.mlp.w_fc1", l);
        if (add_param(ctx, m, nm, 2, (int64_t[2]){2 * F, D}, sd, seed, &off)) return 1;
        m->w_fc2[l] = m->n;
        snprintf(nm, sizeof nm, "layers.%d.mlp.w_fc2", l);
        if (add_param(ctx, m, nm, 2, (int64_t[2]){D, F}, sd_res, seed, &off)) return 1;
    }
    m->norm_f = m->n;
    if (add_param(ctx, m, "norm_f.weight", 1, &D, 0, seed, &off)) return 1;
    m->head = m->n;
    if (add_param(ctx, m, "head.weight", 2, (int64_t[2]){V, D}, sd, seed, &off)) return 1;
    /* RoPE: angle of position s, pair p = s · 10000^(-p / (hd/2)), half-split pairs */
    const int64_t R2 = D / m->H / 2, shape[2] = {m->S, R2};
    float *c = malloc(sizeof(float) * (size_t)(m->S * R2)), *s = malloc(sizeof(float) * (size_t)(m->S * R2));
    if (!c || !s) return 1;
    for (int64_t p = 0; p < m->S; p++)
        for (int64_t k = 0; k < R2; k++) {
            double th = (double)p * pow(10000.0, -(double)k / (double)R2);
            c[p * R2 + k] = (float)cos(th);
            s[p * R2 + k] = (float)sin(th);
        }
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &m->cos));
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &m->sin));
    TRY(gpucore_copy_from_host(m->cos, c, m->S * R2 * 4));
    TRY(gpucore_copy_from_host(m->sin, s, m->S * R2 * 4));
    free(c);
    free(s);
    return 0;
}

/* LoRA adapters on every attention projection: A ~ N(0, 1/sqrt(in)), B = 0 (the
 * adapted model starts equal to the base). */
static int lora_init(gpucore_context *ctx, model *m, const options *o)
{
    const int64_t r = o->lora_rank, D = m->D;
    uint64_t off = 0;
    for (int l = 0; l < m->L; l++)
        for (int j = 0; j < 4; j++) {
            int i = 4 * l + j;
            int64_t shape[2] = {j == 0 || j == 2 ? r : (j == 1 ? 3 * D : D), j == 0 || j == 2 ? D : r};
            TRY(gpucore_tensor_create(ctx, m->dt, 2, shape, &m->lora[i]));
            TRY(gpucore_tensor_create(ctx, m->dt, 2, shape, &m->dlora[i]));
            if (j == 0 || j == 2) {
                TRY(gpucore_random(m->lora[i], GPUCORE_NORMAL, 0.0, 1.0 / sqrt((double)D), o->seed ^ 0x10BAull, off, NULL));
                off += gpucore_random_offset_advance(r * D, GPUCORE_NORMAL);
            } else TRY(gpucore_fill(m->lora[i], 0.0, NULL));
            static const char *const part[4] = {"qkv.lora_a", "qkv.lora_b", "out.lora_a", "out.lora_b"};
            snprintf(m->lora_names[i], sizeof m->lora_names[i], "layers.%d.attn.%s", l, part[j]);
            m->lora_name_ptrs[i] = m->lora_names[i];
        }
    return 0;
}

/* The layers as executor segments: with_lora 0 trains everything, 1 only the adapters. */
static int build_executor(gpucore_context *ctx, model *m, const options *o, int with_lora, gpucore_ckpt **out)
{
    TRY(gpucore_ckpt_create(ctx, with_lora ? "gpt_lora" : "gpt", out));
    for (int l = 0; l < m->L; l++) {
        gpucore_ckpt_attention_block a;
        gpucore_ckpt_attention_block_init(&a);
        a.heads = m->H;
        a.norm_weight = m->params[m->attn_norm[l]];
        a.w_qkv = m->params[m->w_qkv[l]];
        a.w_out = m->params[m->w_out[l]];
        a.rope_cos = m->cos;
        a.rope_sin = m->sin;
        if (with_lora) {
            a.lora_qkv_a = m->lora[4 * l], a.lora_qkv_b = m->lora[4 * l + 1];
            a.lora_out_a = m->lora[4 * l + 2], a.lora_out_b = m->lora[4 * l + 3];
            a.d_lora_qkv_a = m->dlora[4 * l], a.d_lora_qkv_b = m->dlora[4 * l + 1];
            a.d_lora_out_a = m->dlora[4 * l + 2], a.d_lora_out_b = m->dlora[4 * l + 3];
            a.lora_scale = o->lora_alpha / o->lora_rank;
            a.lora_dropout = o->lora_dropout;
        } else {
            a.d_norm_weight = m->grads[m->attn_norm[l]];
            a.dw_qkv = m->grads[m->w_qkv[l]];
            a.dw_out = m->grads[m->w_out[l]];
        }
        char name[32];
        snprintf(name, sizeof name, "layer%d.attn", l);
        TRY(gpucore_ckpt_add_attention_block(*out, name, &a));
        gpucore_ckpt_mlp_block b;
        gpucore_ckpt_mlp_block_init(&b);
        b.swiglu = 1;
        b.norm_weight = m->params[m->mlp_norm[l]];
        b.w_fc1 = m->params[m->w_fc1[l]];
        b.w_fc2 = m->params[m->w_fc2[l]];
        if (!with_lora) {
            b.d_norm_weight = m->grads[m->mlp_norm[l]];
            b.dw_fc1 = m->grads[m->w_fc1[l]];
            b.dw_fc2 = m->grads[m->w_fc2[l]];
        }
        snprintf(name, sizeof name, "layer%d.mlp", l);
        TRY(gpucore_ckpt_add_mlp_block(*out, name, &b));
    }
    return 0;
}

/* ---------------------------------------------------------------- training */

typedef struct phase {
    const char *name;
    const text *data;
    gpucore_ckpt *ck;
    gpucore_tensor **params, **grads;
    int n, train_tail; /* train_tail: embedding, final norm and head have gradients */
    gpucore_optimizer *opt;
    gpucore_loss_scaler *scaler;
    gpucore_ddp *ddp;
    train_grad_router router;
    gpucore_zero *zero;
    int zb_emb, zb_tail; /* the buckets of the embedding and of the final norm + head */
} phase;

typedef struct trainer {
    options o;
    gpucore_context *ctx;
    gpucore_comm *comm;
    int rank, size;
    int64_t local_batch;
    model m;
    train_policy pol;
    gpucore_tensor *tok, *tgt, *emb, *demb, *hn, *rstd, *dhn, *dh, *logits, *dlogits, *loss, *norm;
    int32_t *host_tok, *host_tgt;
    int64_t peak_allocated, peak_reserved;
} trainer;

static int make_tensor(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape, gpucore_tensor **t)
{
    TRY(gpucore_tensor_create(ctx, dt, nd, shape, t));
    return 0;
}

static int trainer_buffers(trainer *t, int64_t B, int64_t S)
{
    gpucore_tensor **ts[12] = {&t->tok, &t->tgt, &t->emb, &t->demb, &t->hn, &t->rstd, &t->dhn, &t->dh, &t->logits,
                               &t->dlogits, &t->loss, &t->norm};
    for (int i = 0; i < 12; i++) gpucore_tensor_destroy(*ts[i]), *ts[i] = NULL;
    const int64_t D = t->m.D, bsd[3] = {B, S, D}, bs[2] = {B, S}, rows = B * S, lv[2] = {B * S, VOCAB}, one = 1;
    gpucore_dtype dt = t->m.dt;
    if (make_tensor(t->ctx, GPUCORE_I32, 2, bs, &t->tok) || make_tensor(t->ctx, GPUCORE_I32, 1, &rows, &t->tgt) ||
        make_tensor(t->ctx, dt, 3, bsd, &t->emb) || make_tensor(t->ctx, dt, 3, bsd, &t->demb) ||
        make_tensor(t->ctx, dt, 3, bsd, &t->hn) || make_tensor(t->ctx, GPUCORE_F32, 1, &rows, &t->rstd) ||
        make_tensor(t->ctx, dt, 3, bsd, &t->dhn) || make_tensor(t->ctx, dt, 3, bsd, &t->dh) ||
        make_tensor(t->ctx, dt, 2, lv, &t->logits) || make_tensor(t->ctx, dt, 2, lv, &t->dlogits) ||
        make_tensor(t->ctx, GPUCORE_F32, 1, &one, &t->loss) || make_tensor(t->ctx, GPUCORE_F32, 0, NULL, &t->norm))
        return 1;
    return 0;
}

/* Parameter i as phase p reads it now (ZeRO stage 3: from its gathered bucket). */
static gpucore_tensor *param_now(trainer *t, phase *p, int i)
{
    gpucore_tensor *w = t->m.params[i];
    if (p && p->zero && gpucore_zero_param(p->zero, i, NULL, &w)) return NULL;
    return w;
}

/* logits = head(norm_f(h)) for h [B, S, D] (t's buffers must have h's shape). */
static int tail_forward(trainer *t, phase *p, const gpucore_tensor *h)
{
    model *m = &t->m;
    gpucore_tensor *hn2 = NULL;
    const int64_t rows = gpucore_tensor_numel(h) / m->D, shape[2] = {rows, m->D};
    TRY(gpucore_rms_norm(t->hn, t->rstd, h, param_now(t, p, m->norm_f), 1e-5, NULL));
    TRY(gpucore_tensor_reshape(t->hn, 2, shape, &hn2));
    TRY(gpucore_linear_forward(hn2, param_now(t, p, m->head), NULL, GPUCORE_ACT_NONE, t->logits, NULL, NULL));
    gpucore_tensor_destroy(hn2);
    return 0;
}

/* Gradient i of phase p: the trainer's buffer under ZeRO, else the model's. */
static gpucore_tensor *grad_now(phase *p, int i)
{
    gpucore_tensor *g = p->grads[i];
    if (p->zero && gpucore_zero_grad(p->zero, i, NULL, &g)) return NULL;
    return g;
}

static int mark(phase *p, int i, gpucore_tensor *grad)
{
    if (p->ddp) TRY(train_on_grad_ready(&p->router, -1, "tail", 0, grad, NULL));
    if (p->zero) TRY(gpucore_zero_mark_ready(p->zero, i, NULL));
    return 0;
}

/* The loss averaged over ranks into *loss_out (the step's one host sync), the peak. */
static int train_step_end(trainer *t, phase *p, float *loss_out)
{
    if (t->comm) TRY(gpucore_comm_allreduce(t->comm, t->loss, t->loss, GPUCORE_REDUCE_AVG, NULL));
    TRY(gpucore_copy_to_host(loss_out, sizeof(float), t->loss));
    TRY(train_track_peak(t->ctx, p->ck, &t->peak_allocated, &t->peak_reserved));
    return 0;
}

/* One step of phase p; *loss_out: the loss averaged over ranks. */
static int train_step(trainer *t, phase *p, int64_t step, float *loss_out)
{
    model *m = &t->m;
    const int64_t S = m->S;
    for (int64_t s = 0; s < t->local_batch; s++)
        make_sample(p->data, t->o.seed, step, (int64_t)t->rank * t->local_batch + s, S, t->host_tok + s * S,
                    t->host_tgt + s * S);
    TRY(gpucore_copy_from_host(t->tok, t->host_tok, gpucore_tensor_nbytes(t->tok)));
    TRY(gpucore_copy_from_host(t->tgt, t->host_tgt, gpucore_tensor_nbytes(t->tgt)));
    if (p->zero) TRY(gpucore_zero_gather(p->zero, p->zb_emb));
    TRY(gpucore_embedding(t->emb, param_now(t, p, m->emb), t->tok, NULL));
    if (p->zero) TRY(gpucore_zero_release(p->zero, p->zb_emb, NULL));
    TRY(train_update_budget(t->ctx, p->ck, &t->pol));
    gpucore_tensor *h = NULL; /* the executor's, valid until its backward */
    TRY(gpucore_ckpt_forward(p->ck, t->emb, &h));
    if (p->zero) TRY(gpucore_zero_gather(p->zero, p->zb_tail));
    if (tail_forward(t, p, h)) return 1;
    TRY(gpucore_cross_entropy(t->loss, t->logits, t->tgt, -1, GPUCORE_LOSS_MEAN, NULL));

    gpucore_tensor *scale = NULL, *hn2 = NULL, *dhn2 = NULL, *found_inf = NULL;
    const int64_t shape[2] = {t->local_batch * S, m->D};
    TRY(gpucore_loss_scaler_scale(p->scaler, &scale));
    TRY(gpucore_cross_entropy_backward(t->dlogits, scale, t->logits, t->tgt, -1, GPUCORE_LOSS_MEAN, NULL));
    TRY(gpucore_tensor_reshape(t->hn, 2, shape, &hn2));
    TRY(gpucore_tensor_reshape(t->dhn, 2, shape, &dhn2));
    gpucore_tensor *dhead = p->train_tail ? grad_now(p, m->head) : NULL;
    TRY(gpucore_linear_backward(t->dlogits, hn2, param_now(t, p, m->head), NULL, dhn2, dhead, NULL, NULL));
    gpucore_tensor_destroy(hn2);
    gpucore_tensor_destroy(dhn2);
    if (dhead && mark(p, m->head, dhead)) return 1;
    gpucore_tensor *dnorm = p->train_tail ? grad_now(p, m->norm_f) : NULL;
    TRY(gpucore_rms_norm_backward(t->dh, dnorm, t->dhn, h, t->rstd, param_now(t, p, m->norm_f), NULL));
    if (dnorm && mark(p, m->norm_f, dnorm)) return 1;
    if (p->zero) TRY(gpucore_zero_release(p->zero, p->zb_tail, NULL));
    TRY(gpucore_ckpt_backward(p->ck, t->dh, p->train_tail ? t->demb : NULL));
    if (p->train_tail) {
        gpucore_tensor *demb = grad_now(p, m->emb);
        TRY(gpucore_embedding_backward(demb, t->demb, t->tok, NULL));
        if (mark(p, m->emb, demb)) return 1;
    }
    if (p->zero) { /* unscale, found-inf and the global norm across shards, AdamW, all-gather */
        TRY(gpucore_zero_step(p->zero, p->scaler, NULL));
        TRY(gpucore_loss_scaler_update(p->scaler, NULL));
        return train_step_end(t, p, loss_out);
    }
    if (p->ddp) TRY(gpucore_ddp_finish(p->ddp, NULL));
    TRY(gpucore_loss_scaler_unscale(p->scaler, p->grads, p->n, NULL));
    TRY(gpucore_loss_scaler_found_inf(p->scaler, &found_inf));
    TRY(gpucore_clip_grad_norm(p->grads, p->n, t->o.clip, t->norm, NULL, NULL));
    TRY(gpucore_optimizer_step(p->opt, p->grads, p->n, found_inf, NULL));
    TRY(gpucore_loss_scaler_update(p->scaler, NULL));
    return train_step_end(t, p, loss_out);
}

static int scaler_init(trainer *t, phase *p)
{
    gpucore_loss_scaler_config sc;
    TRY(gpucore_loss_scaler_config_default(&sc));
    sc.growth_interval = 50;
    TRY(gpucore_loss_scaler_create(t->ctx, &sc, &p->scaler));
    if (t->pol.kind != GPUCORE_CKPT_BUDGET) TRY(gpucore_ckpt_set_policy(p->ck, t->pol.kind, t->pol.param));
    return 0;
}

/* --zero N: the trainer over every parameter, one bucket per segment (the embedding
 * and the tail their own); the executor's blocks bound to it. The model's gradient
 * tensors (and at stage 3 its full parameters) are freed: from here on only the
 * trainer holds them. */
static int zero_init(trainer *t, phase *p, const gpucore_optimizer_config *oc)
{
    model *m = &t->m;
    int32_t units[MAX_PARAMS], seg_bucket[2 * MAX_LAYERS];
    units[m->emb] = 0;
    for (int l = 0; l < m->L; l++) {
        units[m->attn_norm[l]] = units[m->w_qkv[l]] = units[m->w_out[l]] = 1 + 2 * l;
        units[m->mlp_norm[l]] = units[m->w_fc1[l]] = units[m->w_fc2[l]] = 2 + 2 * l;
    }
    units[m->norm_f] = units[m->head] = 2 * m->L + 1;
    gpucore_zero_options zo;
    gpucore_zero_options_default(&zo);
    zo.stage = t->o.zero;
    zo.units = units;
    zo.max_grad_norm = t->o.clip;
    TRY(gpucore_zero_create(t->comm, p->params, p->n, oc, &zo, &p->zero));
    TRY(gpucore_zero_bind_ckpt(p->zero, p->ck, p->params, p->grads));
    for (int l = 0; l < m->L; l++) {
        TRY(gpucore_zero_bucket_of(p->zero, m->attn_norm[l], &seg_bucket[2 * l]));
        TRY(gpucore_zero_bucket_of(p->zero, m->mlp_norm[l], &seg_bucket[2 * l + 1]));
    }
    TRY(gpucore_zero_attach_ckpt(p->zero, p->ck, seg_bucket, 2 * m->L));
    TRY(gpucore_zero_bucket_of(p->zero, m->emb, &p->zb_emb));
    TRY(gpucore_zero_bucket_of(p->zero, m->head, &p->zb_tail));
    for (int i = 0; i < p->n; i++) { /* the trainer holds the gradients (and at stage 3 the parameters) */
        gpucore_tensor_destroy(p->grads[i]);
        p->grads[i] = NULL;
        if (t->o.zero == 3) {
            gpucore_tensor_destroy(p->params[i]);
            p->params[i] = NULL;
        }
    }
    return scaler_init(t, p);
}

static int phase_init(trainer *t, phase *p, double lr)
{
    gpucore_optimizer_config oc;
    TRY(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &oc));
    oc.lr = lr;
    oc.weight_decay = 0.0; /* the twin uses the same */
    if (t->o.zero >= 0) return zero_init(t, p, &oc);
    TRY(gpucore_optimizer_create(t->ctx, &oc, p->params, p->n, &p->opt));
    if (scaler_init(t, p)) return 1;
    if (t->comm) {
        gpucore_ddp_options dopt;
        gpucore_ddp_options_default(&dopt);
        TRY(gpucore_ddp_create(t->comm, p->grads, p->n, &dopt, &p->ddp));
        p->router = (train_grad_router){p->ddp, p->grads, p->n};
        TRY(gpucore_ckpt_set_grad_ready_callback(p->ck, train_on_grad_ready, &p->router));
    }
    return 0;
}

static int phase_free(phase *p)
{
    if (p->zero) TRY(gpucore_zero_destroy(p->zero));
    TRY(gpucore_ckpt_destroy(p->ck));
    if (p->ddp) TRY(gpucore_ddp_destroy(p->ddp));
    TRY(gpucore_loss_scaler_destroy(p->scaler));
    TRY(gpucore_optimizer_destroy(p->opt));
    return 0;
}

/* Train phase p for `steps` steps; prints the losses; *tokens_per_s: of the steps after the first. */
static int run_phase(trainer *t, phase *p, int64_t steps, double *tokens_per_s)
{
    double t0 = train_now_s();
    for (int64_t step = 0; step < steps; step++) {
        float loss = 0;
        if (step == 1) { /* the first step warms up (allocator, plans): timed from the second */
            TRY(gpucore_context_synchronize(t->ctx));
            t0 = train_now_s();
        }
        if (train_step(t, p, step, &loss)) return 1;
        if (t->rank == 0) {
            if (t->o.log_json) printf("{\"phase\":\"%s\",\"step\":%lld,\"loss\":%.9g}\n", p->name, (long long)step, loss);
            else if (!t->o.quiet) printf("%s step %lld loss %.9g\n", p->name, (long long)step, loss);
        }
        if (!isfinite(loss)) { fprintf(stderr, "train_gpt: the loss is %g at step %lld\n", loss, (long long)step); return 1; }
    }
    TRY(gpucore_context_synchronize(t->ctx));
    double secs = train_now_s() - t0;
    int64_t timed = steps > 1 ? steps - 1 : steps;
    *tokens_per_s = secs > 0 ? (double)(timed * t->o.batch * t->m.S) / secs : 0;
    return 0;
}

/* Sample n bytes after a prompt with temperature 0.8 (host-side draws from train_draw). */
static int sample_text(trainer *t, gpucore_ckpt *ck, int64_t n)
{
    model *m = &t->m;
    const char *prompt = "The ";
    int64_t len = (int64_t)strlen(prompt), cap = len + n;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)cap);
    float *row = malloc(sizeof(float) * VOCAB);
    if (!seq || !row) return 1;
    for (int64_t i = 0; i < len; i++) seq[i] = (unsigned char)prompt[i];
    gpucore_tensor *lg32 = NULL, *last = NULL;
    TRY(gpucore_ckpt_set_policy(ck, GPUCORE_CKPT_KEEP_ALL, 0));
    for (int64_t k = 0; k < n; k++) {
        int64_t T = len < m->S ? len : m->S;
        if (trainer_buffers(t, 1, T)) return 1;
        TRY(gpucore_copy_from_host(t->tok, seq + len - T, T * 4));
        TRY(gpucore_embedding(t->emb, m->params[m->emb], t->tok, NULL));
        gpucore_tensor *h = NULL;
        TRY(gpucore_ckpt_forward(ck, t->emb, &h));
        if (tail_forward(t, NULL, h)) return 1;
        TRY(gpucore_tensor_slice(t->logits, 0, T - 1, T, 1, &last));
        TRY(gpucore_tensor_create(t->ctx, GPUCORE_F32, 2, (int64_t[2]){1, VOCAB}, &lg32));
        TRY(gpucore_cast(lg32, last, NULL));
        TRY(gpucore_copy_to_host(row, VOCAB * 4, lg32));
        TRY(gpucore_ckpt_reset(ck));
        gpucore_tensor_destroy(last);
        gpucore_tensor_destroy(lg32);
        double mx = row[0], z = 0, u = (double)(train_draw(t->o.seed, -1, 0, (uint64_t)k) >> 11) / 9007199254740992.0;
        for (int v = 1; v < VOCAB; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < VOCAB; v++) z += exp((row[v] - mx) / 0.8);
        int pick = VOCAB - 1;
        for (int v = 0; v < VOCAB; v++) {
            u -= exp((row[v] - mx) / 0.8) / z;
            if (u < 0) { pick = v; break; }
        }
        seq[len++] = pick;
    }
    if (t->rank == 0 && !t->o.log_json) {
        printf("sample: \"");
        for (int64_t i = 0; i < len; i++) {
            int c = seq[i];
            putchar(c == '\n' ? ' ' : (c >= 32 && c < 127 ? c : '?'));
        }
        printf("\"\n");
    }
    free(seq);
    free(row);
    return 0;
}

int main(int argc, char **argv)
{
    trainer tr;
    memset(&tr, 0, sizeof tr);
    trainer *t = &tr;
    int rc = parse_args(argc, argv, &t->o);
    if (rc) return rc;
    if (train_parse_policy(t->o.policy, &t->pol)) return usage("bad --checkpoint-policy");
    train_world w;
    if ((rc = train_open_world("train_gpt", t->o.device, t->o.ddp || t->o.zero >= 0, t->o.profile, t->o.batch, &w))) return rc;
    t->ctx = w.ctx, t->comm = w.comm, t->rank = w.rank, t->size = w.size;
    t->local_batch = t->o.batch / t->size;
    text base = {0}, tune = {0};
    if (read_text(t->o.data, t->o.seq, &base)) return 1;
    if (t->o.finetune_steps && read_text(t->o.finetune_data, t->o.seq, &tune)) return 1;
    model *m = &t->m;
    if (model_init(t->ctx, m, &t->o)) return 1;
    if (t->comm) {
        for (int i = 0; i < m->n; i++) TRY(gpucore_comm_broadcast(t->comm, m->params[i], m->params[i], 0, NULL));
        TRY(gpucore_context_synchronize(t->ctx));
    }
    if (t->o.save_init && t->rank == 0)
        TRY(gpucore_safetensors_save(t->o.save_init, m->name_ptrs, m->params, m->n, NULL, NULL, 0));
    t->host_tok = malloc(sizeof(int32_t) * (size_t)(t->local_batch * m->S));
    t->host_tgt = malloc(sizeof(int32_t) * (size_t)(t->local_batch * m->S));
    if (!t->host_tok || !t->host_tgt || trainer_buffers(t, t->local_batch, m->S)) return 1;
    int quiet = t->o.quiet || t->rank != 0;
    if (!quiet && !t->o.log_json)
        printf("train_gpt on %s: %d layers, width %d, %d heads, seq %d, batch %lld (%d rank%s), %s, policy %s; "
               "%lld steps on %s, then %lld LoRA steps (rank %d) on %s\n", gpucore_context_device_name(t->ctx), m->L,
               m->D, m->H, m->S, (long long)t->o.batch, t->size, t->size > 1 ? "s" : "", t->o.f32 ? "f32" : "bf16",
               t->o.policy, (long long)t->o.steps, t->o.data, (long long)t->o.finetune_steps, t->o.lora_rank,
               t->o.finetune_data);

    /* phase 1: the base model, every parameter trained */
    phase p1 = {.name = "base", .data = &base, .params = m->params, .grads = m->grads, .n = m->n, .train_tail = 1};
    double tps1 = 0, tps2 = 0;
    if (build_executor(t->ctx, m, &t->o, 0, &p1.ck) || phase_init(t, &p1, t->o.lr)) return 1;
    TRY(gpucore_memory_reset_peak_stats(t->ctx, GPUCORE_MEMORY_DEVICE));
    if (run_phase(t, &p1, t->o.steps, &tps1)) return 1;
    int64_t peak1 = t->peak_allocated;
    if (t->o.save && t->rank == 0) TRY(gpucore_checkpoint_save(t->o.save, m->name_ptrs, m->params, m->n, p1.opt, p1.scaler));

    /* phase 2: LoRA adapters on the attention projections, the base frozen */
    phase p2 = {.name = "lora", .data = &tune, .params = m->lora, .grads = m->dlora, .n = 4 * m->L};
    gpucore_ckpt *sampler = p1.ck;
    if (t->o.finetune_steps) {
        if (lora_init(t->ctx, m, &t->o) || build_executor(t->ctx, m, &t->o, 1, &p2.ck) || phase_init(t, &p2, t->o.lr))
            return 1;
        t->peak_allocated = 0;
        TRY(gpucore_memory_reset_peak_stats(t->ctx, GPUCORE_MEMORY_DEVICE));
        if (run_phase(t, &p2, t->o.finetune_steps, &tps2)) return 1;
        if (t->o.save_adapter && t->rank == 0)
            TRY(gpucore_safetensors_save(t->o.save_adapter, m->lora_name_ptrs, m->lora, 4 * m->L, NULL, NULL, 0));
        sampler = p2.ck;
    }
    int64_t peak2 = t->peak_allocated;
    if (t->o.sample && sample_text(t, sampler, t->o.sample)) return 1;
    if (t->rank == 0) {
        if (t->o.log_json)
            printf("{\"summary\":true,\"device\":\"%s\",\"ranks\":%d,\"dtype\":\"%s\",\"policy\":\"%s\","
                   "\"base_tokens_per_s\":%.1f,\"base_peak_allocated_bytes\":%lld,\"lora_tokens_per_s\":%.1f,"
                   "\"lora_peak_allocated_bytes\":%lld}\n", gpucore_context_device_name(t->ctx), t->size,
                   t->o.f32 ? "f32" : "bf16", t->o.policy, tps1, (long long)peak1, tps2, (long long)peak2);
        else
            printf("done: base %.0f tokens/s, peak %.2f MiB; LoRA %.0f tokens/s, peak %.2f MiB\n", tps1,
                   peak1 / 1048576.0, tps2, peak2 / 1048576.0);
        if (t->o.profile && !t->o.log_json) train_print_profile(t->ctx, 0);
    }
    fflush(stdout);
    if (phase_free(&p1) || (t->o.finetune_steps && phase_free(&p2))) return 1;
    free(base.bytes);
    free(tune.bytes);
    free(t->host_tok);
    free(t->host_tgt);
    if (t->comm) TRY(gpucore_comm_destroy(t->comm));
    TRY(gpucore_context_destroy(t->ctx)); /* releases every tensor still alive */
    return 0;
}
