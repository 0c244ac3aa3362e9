/*
 * train_cnn.c — an end-to-end training run with libgpucore: a small CNN learns
 * to read handwritten digits (the UCI optical digits: 1797 8x8 images, pixel
 * values 0..16, ten classes; Debian's python3-sklearn ships them as
 * sklearn/datasets/data/digits.csv.gz). Everything a real training loop needs
 * is here, on the GPU or the CPU with the same code:
 *
 *   - data: --data FILE.csv, one image per line (its pixels, then its label, comma
 *     separated; square images of one channel), decompressed beforehand (zcat).
 *     A fixed shuffle holds out --holdout of the rows (default 0.2); each step's
 *     batch picks training rows by a counter-based hash of (seed, step, sample)
 *     (splitmix64), so a resumed run draws exactly the batches the uninterrupted
 *     run would have drawn. Held-out accuracy and loss are printed every
 *     --eval-every steps and at the end. --synthetic instead trains on a toy task
 *     made in the program (which quadrant of a noisy 16x16 image holds a blob);
 *     only when asked for: without --data or --synthetic the program stops;
 *   - model: L conv3x3(+bias+ReLU, fused) layers in NHWC, flatten, linear, and
 *     cross-entropy, registered as segments of the library's checkpoint executor
 *     (gpucore_ckpt: built-in conv2d segments, a custom flatten + linear head),
 *     which runs forward and backward;
 *   - bf16 mixed precision: bf16 parameters, activations and gradients; fused
 *     AdamW with f32 master weights; dynamic loss scaling; global-norm clipping;
 *   - memory: every tensor from the context's caching allocator; activation
 *     checkpointing by the executor's policy (--checkpoint-policy
 *     none|all|sqrt|every:K|budget:BYTES): only the inputs of checkpoint segments
 *     are held through the step and the others are recomputed in backward, group
 *     by group (bitwise the same result);
 *   - checkpoints: --save PATH every --save-every K steps (safetensors, with the
 *     optimizer and loss-scaler state, the step and the checkpoint policy),
 *     --resume PATH (the saved policy, unless --checkpoint-policy is given);
 *   - data parallelism: --ddp under mpirun: each rank takes its shard of the
 *     global batch, gradients are averaged by the bucketed DDP reducer as
 *     backward produces them (the executor's grad-ready callback feeds it);
 *   - at the end: loss, samples/s, peak memory, the executor's memory figures
 *     (activation bytes held vs keep-all) and the per-op profile.
 *
 *   train_cnn (--data DIGITS.csv [--holdout F] | --synthetic) --steps 200 --batch 32
 *             [--eval-every K] [--device cpu|cuda|auto] [--seed S] [--lr LR]
 *             [--checkpoint-policy P] [--save PATH [--save-every K]] [--resume PATH]
 *             [--layers L] [--channels C] [--ddp] [--log-json] [--quiet] [--no-profile]
 *
 * Each step prints "step N loss X" (X with 9 significant digits: the exact f32),
 * each evaluation "eval step N held-out accuracy A (k/n) loss L", or JSON lines
 * with --log-json. Exit status 0 on success.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"
#include "train_common.h"

#define TRY(call)                                                                                          \
    do {                                                                                                   \
        gpucore_status st_ = (call);                                                                       \
        if (st_ != GPUCORE_OK) {                                                                           \
            fprintf(stderr, "train_cnn: %s failed: %s: %s\n", #call, gpucore_status_string(st_),           \
                    gpucore_last_error());                                                                 \
            return 1;                                                                                      \
        }                                                                                                  \
    } while (0)

#define SYN_IMG 16     /* the synthetic task: 16x16 images, 4 classes, 256 held-out samples */
#define SYN_CLASSES 4
#define SYN_HELD_OUT 256
#define MAX_LAYERS 16
#define MAX_CLASSES 64

/* ------------------------------------------------------------------ options */

typedef struct options {
    int64_t steps, batch, save_every, eval_every;
    int layers, channels;
    uint64_t seed;
    double lr, clip, holdout;
    const char *device, *save, *resume, *policy, *data;
    int policy_given; /* --checkpoint-policy on the command line (else a resumed run keeps the saved one) */
    int synthetic, ddp, log_json, quiet, profile;
} options;

static int usage(const char *msg)
{
    if (msg) fprintf(stderr, "train_cnn: %s\n", msg);
    fprintf(stderr, "usage: train_cnn (--data DIGITS.csv [--holdout F] | --synthetic) [--steps N] [--batch B]\n"
                    "                 [--eval-every K] [--device D] [--seed S] [--lr LR] [--clip C]\n"
                    "                 [--checkpoint-policy none|all|sqrt|every:K|budget:BYTES] [--layers L]\n"
                    "                 [--channels C] [--save PATH] [--save-every K] [--resume PATH] [--ddp]\n"
                    "                 [--log-json] [--quiet] [--no-profile]\n"
                    "  --data: one image per line, its pixels then its label, comma separated; e.g. the UCI\n"
                    "  digits of Debian's python3-sklearn, decompressed: zcat .../sklearn/datasets/data/digits.csv.gz\n"
                    "  --synthetic: the built-in toy task (a blob's quadrant in a noisy 16x16 image) instead\n");
    return 2;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.steps = 200, .batch = 32, .save_every = 0, .eval_every = 50, .layers = 3, .channels = 8,
                   .seed = 1234, .lr = 3e-3, .clip = 1.0, .holdout = 0.2, .device = "auto", .policy = "none",
                   .profile = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) return usage("an option is missing its value"); i++; } while (0)
        if (!strcmp(a, "--steps")) { VAL(); o->steps = atoll(v); }
        else if (!strcmp(a, "--batch")) { VAL(); o->batch = atoll(v); }
        else if (!strcmp(a, "--device")) { VAL(); o->device = v; }
        else if (!strcmp(a, "--seed")) { VAL(); o->seed = strtoull(v, NULL, 0); }
        else if (!strcmp(a, "--lr")) { VAL(); o->lr = atof(v); }
        else if (!strcmp(a, "--clip")) { VAL(); o->clip = atof(v); }
        else if (!strcmp(a, "--checkpoint-policy")) { VAL(); o->policy = v; o->policy_given = 1; }
        else if (!strcmp(a, "--data")) { VAL(); o->data = v; }
        else if (!strcmp(a, "--holdout")) { VAL(); o->holdout = atof(v); }
        else if (!strcmp(a, "--eval-every")) { VAL(); o->eval_every = atoll(v); }
        else if (!strcmp(a, "--synthetic")) o->synthetic = 1;
        else if (!strcmp(a, "--layers")) { VAL(); o->layers = atoi(v); }
        else if (!strcmp(a, "--channels")) { VAL(); o->channels = atoi(v); }
        else if (!strcmp(a, "--save")) { VAL(); o->save = v; }
        else if (!strcmp(a, "--save-every")) { VAL(); o->save_every = atoll(v); }
        else if (!strcmp(a, "--resume")) { VAL(); o->resume = v; }
        else if (!strcmp(a, "--ddp")) o->ddp = 1;
        else if (!strcmp(a, "--log-json")) o->log_json = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--no-profile")) o->profile = 0;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(NULL); exit(0); }
        else return usage("unknown option");
#undef VAL
    }
    if (o->steps < 0 || o->batch < 1 || o->layers < 1 || o->layers > MAX_LAYERS || o->channels < 1 || o->lr <= 0 ||
        o->clip <= 0 || o->save_every < 0 || o->eval_every < 0 || !(o->holdout > 0 && o->holdout < 1))
        return usage("a value is out of range");
    if (!o->data == !o->synthetic)
        return usage(o->data ? "--data and --synthetic exclude each other"
                             : "no training data: give --data FILE.csv (the UCI digits, see below) or --synthetic");
    return 0;
}

/* ------------------------------------------------------------------- data */

/* The images: the rows of a file, or the synthetic task (pixels NULL). Rows
 * order[0 .. n_train) train, order[n_train .. n) are held out. */
typedef struct dataset {
    int img, classes;       /* image side (one channel), number of classes */
    int64_t n, n_train, n_test;
    float *pixels;          /* n * img * img, scaled to [0, 1] by the file's largest value */
    int32_t *labels;
    int64_t *order;
} dataset;

/* Read a CSV of images: each non-empty line has img*img pixel values and then an
 * integer label >= 0. Returns 0, or prints why (with the line) and returns 1. */
static int load_csv(const char *path, double holdout, dataset *d)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "train_cnn: cannot open --data %s: %s\n", path, strerror(errno));
        return 1;
    }
    memset(d, 0, sizeof *d);
    int64_t cap = 0, line_no = 0, fields = -1;
    double top = 0;
    char line[1 << 14];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        line_no++;
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(stderr, "train_cnn: %s line %lld is longer than %zu bytes\n", path, (long long)line_no, sizeof line - 1);
            rc = 1;
            break;
        }
        double v[4097];
        int64_t k = 0;
        char *p = line, *end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || !*p) continue;
        for (;;) {
            double x = strtod(p, &end);
            if (end == p || k == 4097 || !isfinite(x)) break;
            v[k++] = x;
            p = end;
            while (*p == ' ' || *p == '\t') p++;
            if (*p != ',') break;
            p++;
        }
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (*p || k < 2) {
            int shown = (int)strcspn(p, "\r\n");
            fprintf(stderr, "train_cnn: %s line %lld: not a comma-separated list of numbers (at \"%.*s\")\n", path,
                    (long long)line_no, shown < 20 ? shown : 20, p);
            rc = 1;
            break;
        }
        if (fields < 0) {
            fields = k;
            int side = (int)lround(sqrt((double)(k - 1)));
            if ((int64_t)side * side != k - 1) {
                fprintf(stderr, "train_cnn: %s: %lld pixel values per line are not a square image\n", path, (long long)(k - 1));
                rc = 1;
                break;
            }
            d->img = side;
        } else if (k != fields) {
            fprintf(stderr, "train_cnn: %s line %lld has %lld values, the first line %lld\n", path, (long long)line_no,
                    (long long)k, (long long)fields);
            rc = 1;
            break;
        }
        double lab = v[k - 1];
        if (lab < 0 || lab >= MAX_CLASSES || lab != floor(lab)) {
            fprintf(stderr, "train_cnn: %s line %lld: the label %g is not a whole number in 0..%d\n", path,
                    (long long)line_no, lab, MAX_CLASSES - 1);
            rc = 1;
            break;
        }
        if (d->n == cap) {
            cap = cap ? 2 * cap : 1024;
            float *np = realloc(d->pixels, sizeof(float) * (size_t)(cap * (k - 1)));
            int32_t *nl = np ? realloc(d->labels, sizeof(int32_t) * (size_t)cap) : NULL;
            if (np) d->pixels = np;
            if (!nl) { fprintf(stderr, "train_cnn: out of host memory reading %s\n", path); rc = 1; break; }
            d->labels = nl;
        }
        for (int64_t j = 0; j + 1 < k; j++) {
            d->pixels[d->n * (k - 1) + j] = (float)v[j];
            if (fabs(v[j]) > top) top = fabs(v[j]);
        }
        d->labels[d->n] = (int32_t)lab;
        if ((int)lab + 1 > d->classes) d->classes = (int)lab + 1;
        d->n++;
    }
    fclose(f);
    if (!rc && d->n < 2) {
        fprintf(stderr, "train_cnn: %s holds %lld images: too few to hold some out\n", path, (long long)d->n);
        rc = 1;
    }
    if (rc) return 1;
    for (int64_t i = 0; top > 0 && i < d->n * d->img * d->img; i++) d->pixels[i] /= (float)top;
    /* a fixed shuffle (the same for every seed and every run), then the split */
    d->order = malloc(sizeof(int64_t) * (size_t)d->n);
    if (!d->order) return 1;
    for (int64_t i = 0; i < d->n; i++) d->order[i] = i;
    for (int64_t i = d->n - 1; i > 0; i--) {
        int64_t j = (int64_t)(train_splitmix64(0xD1617500ull + (uint64_t)i) % (uint64_t)(i + 1));
        int64_t tmp = d->order[i];
        d->order[i] = d->order[j];
        d->order[j] = tmp;
    }
    d->n_test = (int64_t)llround(holdout * (double)d->n);
    if (d->n_test < 1) d->n_test = 1;
    if (d->n_test >= d->n) d->n_test = d->n - 1;
    d->n_train = d->n - d->n_test;
    return 0;
}

/* Sample `g` of the synthetic task's `step`: Gaussian noise (sd 0.5) plus a 3x3
 * blob of +2 somewhere inside one quadrant; the label is that quadrant. */
static int synthetic_sample(uint64_t seed, int64_t step, int64_t g, float *img)
{
    uint64_t h = train_draw(seed, step, g, 0);
    int q = (int)(h & 3);
    int cx = (q & 1) * 8 + 1 + (int)((h >> 8) % 6), cy = (q >> 1) * 8 + 1 + (int)((h >> 16) % 6);
    for (int p = 0; p < SYN_IMG * SYN_IMG; p += 2) {
        uint64_t r = train_draw(seed, step, g, 1 + (uint64_t)p);
        double u1 = ((double)(r >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(r & 0xFFFFFFFF) / 4294967296.0;
        double rad = sqrt(-2 * log(u1)) * 0.5;
        img[p] = (float)(rad * cos(2 * M_PI * u2));
        img[p + 1] = (float)(rad * sin(2 * M_PI * u2));
    }
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) img[(cy + dy) * SYN_IMG + cx + dx] += 2.0f;
    return q;
}

/* Training sample `g` of the global batch of `step` (a pure function of seed, step, g). NHWC with C = 1. */
static int train_sample(const dataset *d, uint64_t seed, int64_t step, int64_t g, float *img)
{
    if (!d->pixels) return synthetic_sample(seed, step, g, img);
    int64_t row = d->order[train_draw(seed, step, g, 0) % (uint64_t)d->n_train];
    memcpy(img, d->pixels + row * d->img * d->img, sizeof(float) * (size_t)(d->img * d->img));
    return d->labels[row];
}

/* Held-out sample i: the file's held-out rows, or the synthetic task's "step -1" (never trained on). */
static int held_out_sample(const dataset *d, uint64_t seed, int64_t i, float *img)
{
    if (!d->pixels) return synthetic_sample(seed, -1, i, img);
    int64_t row = d->order[d->n_train + i];
    memcpy(img, d->pixels + row * d->img * d->img, sizeof(float) * (size_t)(d->img * d->img));
    return d->labels[row];
}

/* ------------------------------------------------------------------ model */

typedef struct model {
    int L, C;
    int img, classes;   /* input image side (one channel) and output classes */
    gpucore_tensor *w[MAX_LAYERS + 1], *b[MAX_LAYERS + 1];   /* conv layers, then the head (index L) */
    gpucore_tensor *dw[MAX_LAYERS + 1], *db[MAX_LAYERS + 1];
    gpucore_tensor *params[2 * MAX_LAYERS + 2], *grads[2 * MAX_LAYERS + 2];
    char names[2 * MAX_LAYERS + 2][32];
    const char *name_ptrs[2 * MAX_LAYERS + 3];
    int nparams;
    gpucore_conv_options conv;
} model;

static int new_tensor(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape, gpucore_tensor **t)
{
    TRY(gpucore_tensor_create(ctx, dt, nd, shape, t));
    return 0;
}

static int model_init(gpucore_context *ctx, model *m, const options *o, const dataset *d)
{
    memset(m, 0, sizeof *m);
    m->L = o->layers;
    m->C = o->channels;
    m->img = d->img;
    m->classes = d->classes;
    gpucore_conv_options_init(&m->conv);
    m->conv.layout = GPUCORE_CONV_NHWC;
    m->conv.pad_h = m->conv.pad_w = 1;
    m->conv.algo = GPUCORE_CONV_ALGO_DETERMINISTIC; /* bitwise-repeatable steps: exact resume */
    uint64_t off = 0;
    for (int i = 0; i <= m->L; i++) {
        int head = i == m->L;
        int64_t cin = i == 0 ? 1 : m->C;
        int64_t ws[4] = {m->C, 3, 3, cin}, hs[2] = {m->classes, (int64_t)m->img * m->img * m->C};
        int64_t bs[1] = {head ? m->classes : m->C};
        if (new_tensor(ctx, GPUCORE_BF16, head ? 2 : 4, head ? hs : ws, &m->w[i]) ||
            new_tensor(ctx, GPUCORE_BF16, 1, bs, &m->b[i]) ||
            new_tensor(ctx, GPUCORE_BF16, head ? 2 : 4, head ? hs : ws, &m->dw[i]) ||
            new_tensor(ctx, GPUCORE_BF16, 1, bs, &m->db[i]))
            return 1;
        double fan_in = head ? (double)hs[1] : 9.0 * (double)cin;
        TRY(gpucore_random(m->w[i], GPUCORE_NORMAL, 0.0, sqrt((head ? 1.0 : 2.0) / fan_in), o->seed ^ 0xC0FFEEull, off, NULL));
        off += gpucore_random_offset_advance(gpucore_tensor_numel(m->w[i]), GPUCORE_NORMAL);
        TRY(gpucore_fill(m->b[i], 0.0, NULL));
        m->params[m->nparams] = m->w[i];
        m->grads[m->nparams] = m->dw[i];
        snprintf(m->names[m->nparams++], 32, head ? "head.weight" : "conv%d.weight", i);
        m->params[m->nparams] = m->b[i];
        m->grads[m->nparams] = m->db[i];
        snprintf(m->names[m->nparams++], 32, head ? "head.bias" : "conv%d.bias", i);
    }
    for (int i = 0; i < m->nparams; i++) m->name_ptrs[i] = m->names[i];
    return 0;
}

/* ------------------------------------------------- checkpointing policy
 * The model runs through the library's checkpoint executor (gpucore_ckpt): one
 * segment per conv layer (conv3x3 + bias + ReLU, fused, the built-in conv2d
 * segment) and a head segment of our own (flatten + linear). The executor keeps,
 * drops and recomputes activations as the policy says; every policy gives
 * bitwise the gradients of keep-all, since every op is deterministic.
 *   none         keep everything (the reference)
 *   all          hold only each segment's input, recompute each in backward
 *   sqrt         a checkpoint every ceil(sqrt(n)) segments (Chen et al. 2016)
 *   every:K      a checkpoint every K segments, the rest recomputed
 *   budget:BYTES the least recompute whose estimated activation memory (on top of
 *                what is allocated when the step starts: parameters, gradients,
 *                optimizer state, the batch) stays within BYTES */

/* The head, a custom segment: flatten [B, H, W, C] to [B, H*W*C] (a view) and
 * logits = flat · Wᵀ + b. Flatten and linear are one segment because the
 * executor's keep-all accounting sees a separate view-only flatten segment as
 * one more activation (its output shares the last conv's storage); as one
 * segment, its saved input is recognised as the conv's saved output. Backward
 * writes the input gradient straight into a [B, H*W*C] view of dx. */
static gpucore_status head_forward(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                   gpucore_stream *stream, void *user)
{
    model *m = user;
    int64_t b = gpucore_tensor_numel(x) / ((int64_t)m->img * m->img * m->C);
    int64_t flat_shape[2] = {b, (int64_t)m->img * m->img * m->C}, out_shape[2] = {b, m->classes};
    gpucore_tensor *flat = NULL, *out = NULL;
    gpucore_context *ctx = NULL;
    gpucore_status st = gpucore_tensor_context(x, &ctx);
    if (!st) st = gpucore_tensor_reshape((gpucore_tensor *)x, 2, flat_shape, &flat);
    if (!st) st = gpucore_tensor_create(ctx, GPUCORE_BF16, 2, out_shape, &out);
    if (!st) st = gpucore_linear_forward(flat, m->w[m->L], m->b[m->L], GPUCORE_ACT_NONE, out, NULL, stream);
    if (!st) st = gpucore_ckpt_save(call, flat);
    gpucore_tensor_destroy(flat);
    if (st) gpucore_tensor_destroy(out);
    else *y = out;
    return st;
}

static gpucore_status head_backward(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                    gpucore_stream *stream, void *user)
{
    model *m = user;
    gpucore_tensor *flat = NULL, *dflat = NULL;
    gpucore_status st = gpucore_ckpt_saved(call, 0, &flat);
    int64_t flat_shape[2];
    if (!st) st = gpucore_tensor_shape(flat, flat_shape);
    if (!st && dx) st = gpucore_tensor_reshape(dx, 2, flat_shape, &dflat);
    if (!st) st = gpucore_linear_backward(dy, flat, m->w[m->L], NULL, dflat, m->dw[m->L], m->db[m->L], stream);
    if (!st) st = gpucore_ckpt_grad_ready(call, 0, m->dw[m->L]);
    if (!st) st = gpucore_ckpt_grad_ready(call, 1, m->db[m->L]);
    gpucore_tensor_destroy(dflat);
    return st;
}

/* conv0..conv{L-1}, head: L + 1 segments. */
static int build_executor(gpucore_context *ctx, model *m, gpucore_ckpt **out)
{
    gpucore_ckpt *ck = NULL;
    TRY(gpucore_ckpt_create(ctx, "train_cnn", &ck));
    *out = ck;
    for (int i = 0; i < m->L; i++) {
        char name[32];
        snprintf(name, sizeof name, "conv%d", i);
        TRY(gpucore_ckpt_add_conv2d(ck, name, m->w[i], m->b[i], &m->conv, GPUCORE_ACT_RELU, m->dw[i], m->db[i]));
    }
    TRY(gpucore_ckpt_add_custom(ck, "head", head_forward, head_backward, m));
    return 0;
}

/* ------------------------------------------------------------------ main */

typedef struct trainer {
    options o;
    gpucore_context *ctx;
    gpucore_comm *comm;
    gpucore_ddp *ddp;
    int rank, size;
    model m;
    train_policy pol;
    gpucore_ckpt *ck;
    train_grad_router router;
    gpucore_optimizer *opt;
    gpucore_loss_scaler *scaler;
    gpucore_tensor *x32, *x, *labels, *loss, *norm, *step_t, *policy_t, *dlogits, *logits32;
    int64_t local_batch;
    int64_t peak_allocated, peak_reserved; /* the largest step's, over the run */
    float *host_img, *host_logits;
    int32_t *host_lab;
    dataset data;
    char policy_name[48]; /* the policy in --checkpoint-policy's spelling */
} trainer;

/* One training step; *loss_out gets the loss (averaged over ranks). */
static int train_step(trainer *t, int64_t step, float *loss_out)
{
    model *m = &t->m;
    /* the batch: this rank's shard of the global batch of `step` */
    for (int64_t s = 0; s < t->local_batch; s++) {
        int64_t g = (int64_t)t->rank * t->local_batch + s;
        t->host_lab[s] = train_sample(&t->data, t->o.seed, step, g, t->host_img + s * m->img * m->img);
    }
    TRY(gpucore_copy_from_host(t->x32, t->host_img, gpucore_tensor_nbytes(t->x32)));
    TRY(gpucore_copy_from_host(t->labels, t->host_lab, gpucore_tensor_nbytes(t->labels)));
    TRY(gpucore_cast(t->x, t->x32, NULL));

    /* forward through the executor (it holds what the policy keeps), then the loss */
    TRY(train_update_budget(t->ctx, t->ck, &t->pol));
    gpucore_tensor *logits = NULL; /* the executor's, valid until its backward */
    gpucore_status fst = gpucore_ckpt_forward(t->ck, t->x, &logits);
    if (fst != GPUCORE_OK) {
        fprintf(stderr, "train_cnn: the forward failed: %s: %s\n", gpucore_status_string(fst), gpucore_last_error());
        if (fst == GPUCORE_ERR_OUT_OF_MEMORY && t->pol.kind == GPUCORE_CKPT_BUDGET)
            fprintf(stderr, "train_cnn: (budget:%lld is for activations: the executor's budget above adds the bytes "
                    "allocated when the step starts)\n", (long long)t->pol.param);
        return 1;
    }
    TRY(gpucore_cross_entropy(t->loss, logits, t->labels, -1, GPUCORE_LOSS_MEAN, NULL));

    /* backward of loss * scale: dloss is the scale itself (device-resident, no sync);
     * the executor recomputes as planned, writes every parameter gradient and
     * announces each to the DDP reducer (on_grad_ready) as soon as it is queued */
    gpucore_tensor *scale = NULL;
    TRY(gpucore_loss_scaler_scale(t->scaler, &scale));
    TRY(gpucore_cross_entropy_backward(t->dlogits, scale, logits, t->labels, -1, GPUCORE_LOSS_MEAN, NULL));
    TRY(gpucore_ckpt_backward(t->ck, t->dlogits, NULL));

    /* data parallel: the averaged gradients; then unscale, clip, step, update */
    if (t->ddp) TRY(gpucore_ddp_finish(t->ddp, NULL));
    gpucore_tensor *found_inf = NULL;
    TRY(gpucore_loss_scaler_unscale(t->scaler, m->grads, m->nparams, NULL));
    TRY(gpucore_loss_scaler_found_inf(t->scaler, &found_inf));
    TRY(gpucore_clip_grad_norm(m->grads, m->nparams, t->o.clip, t->norm, NULL, NULL));
    TRY(gpucore_optimizer_step(t->opt, m->grads, m->nparams, found_inf, NULL));
    TRY(gpucore_loss_scaler_update(t->scaler, NULL));
    if (t->comm) TRY(gpucore_comm_allreduce(t->comm, t->loss, t->loss, GPUCORE_REDUCE_AVG, NULL));
    TRY(gpucore_copy_to_host(loss_out, sizeof(float), t->loss)); /* the step's one host sync */

    /* the step's peak (the executor's forward and the allocator's rest) */
    TRY(train_track_peak(t->ctx, t->ck, &t->peak_allocated, &t->peak_reserved));
    return 0;
}

/* Accuracy and mean cross-entropy over the held-out images, in forward-only passes of the
 * training batch's shape (the last one padded; the executor's step is dropped after each). */
static int evaluate(trainer *t, int64_t *correct, int64_t *total, double *loss)
{
    model *m = &t->m;
    int64_t n = t->data.pixels ? t->data.n_test : SYN_HELD_OUT, px = (int64_t)m->img * m->img;
    double sum = 0;
    *correct = 0;
    for (int64_t off = 0; off < n; off += t->local_batch) {
        for (int64_t s = 0; s < t->local_batch; s++)
            t->host_lab[s] = held_out_sample(&t->data, t->o.seed, off + s < n ? off + s : 0, t->host_img + s * px);
        TRY(gpucore_copy_from_host(t->x32, t->host_img, gpucore_tensor_nbytes(t->x32)));
        TRY(gpucore_cast(t->x, t->x32, NULL));
        TRY(train_update_budget(t->ctx, t->ck, &t->pol));
        gpucore_tensor *logits = NULL;
        TRY(gpucore_ckpt_forward(t->ck, t->x, &logits));
        TRY(gpucore_cast(t->logits32, logits, NULL));
        TRY(gpucore_copy_to_host(t->host_logits, gpucore_tensor_nbytes(t->logits32), t->logits32));
        TRY(gpucore_ckpt_reset(t->ck));
        for (int64_t s = 0; s < t->local_batch && off + s < n; s++) {
            const float *z = t->host_logits + s * m->classes;
            int best = 0;
            double top = z[0], e = 0;
            for (int c = 1; c < m->classes; c++)
                if (z[c] > top) top = z[c], best = c;
            for (int c = 0; c < m->classes; c++) e += exp((double)z[c] - top);
            sum += log(e) + top - (double)z[t->host_lab[s]];
            *correct += best == t->host_lab[s];
        }
    }
    *total = n;
    *loss = sum / (double)n;
    return 0;
}

static int print_eval(trainer *t, int64_t step, double *accuracy)
{
    int64_t correct, total;
    double loss;
    if (evaluate(t, &correct, &total, &loss)) return 1;
    *accuracy = (double)correct / (double)total;
    if (t->o.log_json)
        printf("{\"eval_step\":%lld,\"held_out_accuracy\":%.6f,\"correct\":%lld,\"held_out\":%lld,\"held_out_loss\":%.6g}\n",
               (long long)step, *accuracy, (long long)correct, (long long)total, loss);
    else if (!t->o.quiet)
        printf("eval step %lld held-out accuracy %.4f (%lld/%lld) loss %.4f\n", (long long)step, *accuracy,
               (long long)correct, (long long)total, loss);
    return 0;
}

/* The checkpoint's tensors: the parameters, "train.step" (the next step) and, from files this
 * program writes, "train.policy" (the checkpoint policy's kind and parameter). */
static int checkpoint_tensors(trainer *t, int with_policy, gpucore_tensor **ts, const char **names)
{
    int n = t->m.nparams;
    for (int i = 0; i < n; i++) { ts[i] = t->m.params[i]; names[i] = t->m.name_ptrs[i]; }
    ts[n] = t->step_t;
    names[n++] = "train.step";
    if (with_policy) { ts[n] = t->policy_t; names[n++] = "train.policy"; }
    return n;
}

static int save_checkpoint(trainer *t, const char *path, int64_t next_step)
{
    int64_t s = next_step, pol[2] = {(int64_t)t->pol.kind, t->pol.param};
    TRY(gpucore_copy_from_host(t->step_t, &s, sizeof s));
    TRY(gpucore_copy_from_host(t->policy_t, pol, sizeof pol));
    gpucore_tensor *ts[2 * MAX_LAYERS + 4];
    const char *names[2 * MAX_LAYERS + 4];
    int n = checkpoint_tensors(t, 1, ts, names);
    TRY(gpucore_checkpoint_save(path, names, ts, n, t->opt, t->scaler));
    return 0;
}

/* Reads the state back; the saved policy replaces t->pol unless --checkpoint-policy was given
 * (*policy_from: "the checkpoint", "the command line", or "the default" for an older file). */
static int load_checkpoint(trainer *t, const char *path, int64_t *next_step, const char **policy_from)
{
    gpucore_safetensors *f = NULL;
    gpucore_dtype dt;
    int nd;
    int64_t shape[GPUCORE_MAX_DIMS];
    TRY(gpucore_safetensors_open(path, &f));
    int with_policy = gpucore_safetensors_info(f, "train.policy", &dt, &nd, shape) == GPUCORE_OK;
    gpucore_clear_error();
    TRY(gpucore_safetensors_close(f));
    gpucore_tensor *ts[2 * MAX_LAYERS + 4];
    const char *names[2 * MAX_LAYERS + 4];
    int n = checkpoint_tensors(t, with_policy, ts, names);
    TRY(gpucore_checkpoint_load(path, names, ts, n, t->opt, t->scaler));
    TRY(gpucore_copy_to_host(next_step, sizeof *next_step, t->step_t));
    *policy_from = t->o.policy_given ? "the command line" : "the default (the checkpoint has none)";
    if (with_policy && !t->o.policy_given) {
        int64_t pol[2];
        TRY(gpucore_copy_to_host(pol, sizeof pol, t->policy_t));
        if (train_format_policy((gpucore_ckpt_policy)pol[0], pol[1], t->policy_name, sizeof t->policy_name)) {
            fprintf(stderr, "train_cnn: %s holds an unknown checkpoint policy (%lld, %lld)\n", path, (long long)pol[0],
                    (long long)pol[1]);
            return 1;
        }
        t->pol.kind = (gpucore_ckpt_policy)pol[0];
        t->pol.param = pol[1];
        *policy_from = "the checkpoint";
    }
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
    snprintf(t->policy_name, sizeof t->policy_name, "%s", t->o.policy);
    if (t->o.synthetic) t->data = (dataset){.img = SYN_IMG, .classes = SYN_CLASSES};
    else if (load_csv(t->o.data, t->o.holdout, &t->data)) return 1;

    /* device: under mpirun each rank takes its local rank's GPU */
    train_world w;
    if ((rc = train_open_world("train_cnn", t->o.device, t->o.ddp, t->o.profile, t->o.batch, &w))) return rc;
    t->ctx = w.ctx, t->comm = w.comm, t->rank = w.rank, t->size = w.size;
    t->local_batch = t->o.batch / t->size;
    int quiet = t->o.quiet || t->rank != 0;

    if (model_init(t->ctx, &t->m, &t->o, &t->data)) return 1;
    if (build_executor(t->ctx, &t->m, &t->ck)) return 1;
    if (t->comm) { /* every rank starts from rank 0's parameters */
        for (int i = 0; i < t->m.nparams; i++)
            TRY(gpucore_comm_broadcast(t->comm, t->m.params[i], t->m.params[i], 0, NULL));
        TRY(gpucore_context_synchronize(t->ctx));
    }
    gpucore_optimizer_config oc;
    TRY(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &oc));
    oc.lr = t->o.lr;
    oc.weight_decay = 1e-4;
    TRY(gpucore_optimizer_create(t->ctx, &oc, t->m.params, t->m.nparams, &t->opt));
    gpucore_loss_scaler_config sc;
    TRY(gpucore_loss_scaler_config_default(&sc));
    sc.growth_interval = 50;
    TRY(gpucore_loss_scaler_create(t->ctx, &sc, &t->scaler));
    if (t->comm) {
        gpucore_ddp_options dopt;
        gpucore_ddp_options_default(&dopt);
        dopt.first_bucket_bytes = 16 << 10; /* small model: several buckets, so reduction overlaps backward */
        dopt.bucket_bytes = 64 << 10;
        TRY(gpucore_ddp_create(t->comm, t->m.grads, t->m.nparams, &dopt, &t->ddp));
        t->router = (train_grad_router){t->ddp, t->m.grads, t->m.nparams};
        TRY(gpucore_ckpt_set_grad_ready_callback(t->ck, train_on_grad_ready, &t->router));
    }
    const int64_t img = t->m.img, classes = t->m.classes;
    int64_t xs[4] = {t->local_batch, img, img, 1}, one[1] = {1}, two[1] = {2};
    if (new_tensor(t->ctx, GPUCORE_F32, 4, xs, &t->x32) || new_tensor(t->ctx, GPUCORE_BF16, 4, xs, &t->x) ||
        new_tensor(t->ctx, GPUCORE_I32, 1, (int64_t[1]){t->local_batch}, &t->labels) ||
        new_tensor(t->ctx, GPUCORE_F32, 1, one, &t->loss) || new_tensor(t->ctx, GPUCORE_F32, 0, NULL, &t->norm) ||
        new_tensor(t->ctx, GPUCORE_I64, 1, one, &t->step_t) || new_tensor(t->ctx, GPUCORE_I64, 1, two, &t->policy_t) ||
        new_tensor(t->ctx, GPUCORE_BF16, 2, (int64_t[2]){t->local_batch, classes}, &t->dlogits) ||
        new_tensor(t->ctx, GPUCORE_F32, 2, (int64_t[2]){t->local_batch, classes}, &t->logits32))
        return 1;
    t->host_img = malloc(sizeof(float) * (size_t)(t->local_batch * img * img));
    t->host_logits = malloc(sizeof(float) * (size_t)(t->local_batch * classes));
    t->host_lab = malloc(sizeof(int32_t) * (size_t)t->local_batch);
    if (!t->host_img || !t->host_logits || !t->host_lab) return 1;

    int64_t start = 0;
    if (t->o.resume) {
        const char *policy_from = NULL;
        if (load_checkpoint(t, t->o.resume, &start, &policy_from)) return 1;
        if (!quiet)
            printf("resumed from %s at step %lld (checkpoint policy %s, from %s)\n", t->o.resume, (long long)start,
                   t->policy_name, policy_from);
    }
    if (t->pol.kind != GPUCORE_CKPT_BUDGET) TRY(gpucore_ckpt_set_policy(t->ck, t->pol.kind, t->pol.param));
    if (!quiet && !t->o.log_json) {
        if (t->data.pixels)
            printf("data: %s, %lld images of %dx%d, %d classes: %lld for training, %lld held out (%.0f%%)\n", t->o.data,
                   (long long)t->data.n, t->data.img, t->data.img, t->data.classes, (long long)t->data.n_train,
                   (long long)t->data.n_test, 100.0 * (double)t->data.n_test / (double)t->data.n);
        else
            printf("data: --synthetic (a blob's quadrant in a noisy %dx%d image; %d held-out samples)\n", SYN_IMG,
                   SYN_IMG, SYN_HELD_OUT);
        printf("train_cnn on %s: %d conv layers x %d channels, batch %lld (%d rank%s), %lld steps, bf16 + AdamW, "
               "checkpoint policy %s over %lld segments\n", gpucore_context_device_name(t->ctx), t->m.L, t->m.C,
               (long long)t->o.batch, t->size, t->size > 1 ? "s" : "", (long long)t->o.steps, t->policy_name,
               (long long)gpucore_ckpt_segment_count(t->ck));
    }

    TRY(gpucore_memory_reset_peak_stats(t->ctx, GPUCORE_MEMORY_DEVICE));
    double t0 = train_now_s();
    double first_sum = 0, last_sum = 0;
    int64_t first_n = 0, last_n = 0, done = 0;
    double accuracy = NAN;
    for (int64_t step = start; step < t->o.steps; step++) {
        float loss = 0;
        if (train_step(t, step, &loss)) return 1;
        done++;
        if (step - start < 10) { first_sum += loss; first_n++; }
        if (step >= t->o.steps - 10) { last_sum += loss; last_n++; }
        if (t->rank == 0) {
            if (t->o.log_json) printf("{\"step\":%lld,\"loss\":%.9g}\n", (long long)step, loss);
            else if (!t->o.quiet) printf("step %lld loss %.9g\n", (long long)step, loss);
        }
        if (!isfinite(loss)) { fprintf(stderr, "train_cnn: the loss is %g at step %lld\n", loss, (long long)step); return 1; }
        if (t->rank == 0 && t->o.eval_every && (step + 1) % t->o.eval_every == 0 && step + 1 < t->o.steps) {
            double te = train_now_s();
            if (print_eval(t, step + 1, &accuracy)) return 1;
            t0 += train_now_s() - te; /* samples/s counts training steps only */
        }
        if (t->o.save && t->rank == 0 &&
            ((t->o.save_every && (step + 1) % t->o.save_every == 0) || step + 1 == t->o.steps)) {
            if (save_checkpoint(t, t->o.save, step + 1)) return 1;
        }
    }
    TRY(gpucore_context_synchronize(t->ctx));
    double secs = train_now_s() - t0;
    if (t->rank == 0 && print_eval(t, t->o.steps > start ? t->o.steps : start, &accuracy)) return 1;

    /* final parameter checksum: ranks must agree bit for bit */
    double checksum = 0;
    for (int i = 0; i < t->m.nparams; i++) {
        int64_t n = gpucore_tensor_numel(t->m.params[i]);
        gpucore_tensor *f = NULL;
        TRY(gpucore_tensor_create(t->ctx, GPUCORE_F32, 1, &n, &f));
        gpucore_tensor *flat = NULL;
        TRY(gpucore_tensor_reshape(t->m.params[i], 1, &n, &flat));
        TRY(gpucore_cast(f, flat, NULL));
        float *h = malloc(sizeof(float) * (size_t)n);
        if (!h) return 1;
        TRY(gpucore_copy_to_host(h, n * 4, f));
        for (int64_t j = 0; j < n; j++) checksum += h[j] * (double)((j % 7) + 1);
        free(h);
        gpucore_tensor_destroy(flat);
        gpucore_tensor_destroy(f);
    }
    gpucore_memory_stats ms;
    ms.struct_size = sizeof ms;
    TRY(gpucore_memory_get_stats(t->ctx, GPUCORE_MEMORY_DEVICE, &ms));
    if (!done) t->peak_allocated = ms.allocated_bytes_peak, t->peak_reserved = ms.reserved_bytes_peak;
    gpucore_ckpt_stats cs; /* the last step's plan and the activation bytes it held vs keep-all */
    cs.struct_size = sizeof cs;
    TRY(gpucore_ckpt_get_stats(t->ck, &cs));
    double sps = secs > 0 ? (double)(done * t->o.batch) / secs : 0;
    double first = first_n ? first_sum / (double)first_n : NAN, last = last_n ? last_sum / (double)last_n : NAN;
    if (t->o.ddp) printf("rank %d checksum %.17g\n", t->rank, checksum);
    if (t->rank == 0) {
        if (t->o.log_json)
            printf("{\"summary\":true,\"device\":\"%s\",\"ranks\":%d,\"steps\":%lld,\"batch\":%lld,\"policy\":\"%s\","
                   "\"first10_loss\":%.6g,\"last10_loss\":%.6g,\"held_out_accuracy\":%.6f,\"samples_per_s\":%.1f,\"seconds\":%.3f,"
                   "\"peak_allocated_bytes\":%lld,\"peak_reserved_bytes\":%lld,\"checksum\":%.17g,"
                   "\"ckpt\":{\"segments\":%lld,\"kept\":%lld,\"checkpoints\":%lld,\"recomputed\":%lld,"
                   "\"recompute_runs\":%lld,\"held_bytes\":%lld,\"keep_all_bytes\":%lld,\"bytes_saved\":%lld,"
                   "\"step_peak_allocated_bytes\":%lld}}\n",
                   gpucore_context_device_name(t->ctx), t->size, (long long)done, (long long)t->o.batch, t->policy_name,
                   first, last, accuracy, sps, secs, (long long)t->peak_allocated, (long long)t->peak_reserved, checksum,
                   (long long)cs.segments, (long long)cs.kept, (long long)cs.checkpoints, (long long)cs.recomputed,
                   (long long)cs.recompute_runs, (long long)cs.held_bytes, (long long)cs.keep_all_bytes,
                   (long long)cs.bytes_saved, (long long)cs.peak_allocated_bytes);
        else
            printf("done: %lld steps in %.2f s, %.0f samples/s; loss %.4f (first 10) -> %.4f (last 10); "
                   "held-out accuracy %.4f; peak memory %.2f MiB allocated, %.2f MiB reserved; checksum %.17g\n",
                   (long long)done, secs, sps, first, last, accuracy, t->peak_allocated / 1048576.0,
                   t->peak_reserved / 1048576.0, checksum);
        if (!t->o.log_json)
            printf("checkpoint executor (policy %s, last step): %lld segments: %lld kept, %lld checkpoints, %lld "
                   "recomputed (%lld recompute runs); activations held %.1f KiB vs %.1f KiB keep-all: %.1f KiB "
                   "saved (%.0f%%); step peak %.2f MiB allocated\n",
                   t->policy_name, (long long)cs.segments, (long long)cs.kept, (long long)cs.checkpoints,
                   (long long)cs.recomputed, (long long)cs.recompute_runs, cs.held_bytes / 1024.0,
                   cs.keep_all_bytes / 1024.0, cs.bytes_saved / 1024.0,
                   cs.keep_all_bytes > 0 ? 100.0 * (double)cs.bytes_saved / (double)cs.keep_all_bytes : 0.0,
                   cs.peak_allocated_bytes / 1048576.0);
        if (t->o.profile) train_print_profile(t->ctx, t->o.log_json);
    }
    fflush(stdout);

    free(t->host_img);
    free(t->host_logits);
    free(t->host_lab);
    free(t->data.pixels);
    free(t->data.labels);
    free(t->data.order);
    TRY(gpucore_ckpt_destroy(t->ck));
    if (t->ddp) TRY(gpucore_ddp_destroy(t->ddp));
    TRY(gpucore_loss_scaler_destroy(t->scaler));
    TRY(gpucore_optimizer_destroy(t->opt));
    if (t->comm) TRY(gpucore_comm_destroy(t->comm));
    TRY(gpucore_context_destroy(t->ctx));
    return 0;
}
