/*
 * test_pipeline.c — layers on several devices (gpucore_pipeline_*): a GPipe pipeline
 * over checkpoint executors, each stage on its own context.
 *
 * An MLP of linear, layer-norm and dropout segments is placed on 1, 2 and 4
 * contexts (consecutive segments per stage) and stepped with 1..4 micro-batches
 * (uneven splits included): parameter and input gradients must be bitwise equal to
 * the one-context placement with the same micro-batches (the summation order is
 * fixed), and with M = 1 bitwise equal to the plain executor. Without dropout the
 * sum over micro-batches must match the full-batch gradients within 1e-5 relative
 * (float64-free: both sides are ours, only the summation order differs). A second
 * step shows the accumulators restart. Bad input: a stage on a destroyed context,
 * stages whose shapes disagree, a failing loss callback, bad micro-batch counts,
 * mismatched x/dx, the same executor twice — each a status naming the stage, the
 * pipeline usable afterwards, and the allocator back at its baseline.
 * Runs on the CPU backend and on cuda / cuda-emulated when present (several
 * contexts on one device; on CUDA with two devices the stages alternate over
 * cuda:0 and cuda:1, so copies cross devices — the contract lane's stand-ins).
 */
#include <stdint.h>
#include "check.h"

#define NSEG 8
#define B 10
#define DIN 12
#define MAXS 4
#define MAXP 32

/* Host copies of the weights, so every placement starts from the same values. */
typedef struct weights {
    int64_t in[NSEG], out[NSEG];
    int kind[NSEG]; /* 0 linear gelu, 1 linear relu, 2 layer norm, 3 dropout */
    float *w[NSEG], *b[NSEG];
} weights;

typedef struct placed {
    gpucore_context *ctx[MAXS];
    gpucore_ckpt *ck[MAXS];
    gpucore_tensor *p[MAXP], *g[MAXP];
    int pseg[MAXP]; /* the segment of each parameter */
    int np, nstages;
    gpucore_pipeline *pipe;
} placed;

static void weights_make(weights *W, int dropout)
{
    static const int kinds[NSEG] = {0, 2, 3, 1, 0, 3, 2, 0};
    static const int64_t outs[NSEG] = {16, 16, 16, 20, 16, 16, 16, 6};
    uint64_t state = 12345;
    int64_t in = DIN;
    for (int i = 0; i < NSEG; i++) {
        W->kind[i] = kinds[i] == 3 && !dropout ? 2 : kinds[i];
        W->in[i] = in;
        W->out[i] = W->kind[i] >= 2 ? in : outs[i];
        int64_t nw = W->kind[i] == 2 ? in : W->out[i] * in, nb = W->kind[i] == 2 ? in : W->out[i];
        W->w[i] = malloc(sizeof(float) * (size_t)nw);
        W->b[i] = malloc(sizeof(float) * (size_t)nb);
        for (int64_t k = 0; k < nw; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((state >> 40) / 16777216.0) - 0.5f;
            W->w[i][k] = W->kind[i] == 2 ? 1.0f + 0.2f * u : u * 2.0f / sqrtf((float)in);
        }
        for (int64_t k = 0; k < nb; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            W->b[i][k] = (float)((state >> 40) / 16777216.0) * 0.2f - 0.1f;
        }
        in = W->out[i];
    }
}

static void weights_free(weights *W)
{
    for (int i = 0; i < NSEG; i++) {
        free(W->w[i]);
        free(W->b[i]);
    }
}

static gpucore_tensor *upload(gpucore_context *ctx, int ndim, const int64_t *shape, const float *data)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, ndim, shape, &t));
    if (t) CHECK_OK(gpucore_copy_from_host(t, data, gpucore_tensor_nbytes(t)));
    return t;
}

static gpucore_tensor *poisoned(gpucore_context *ctx, int ndim, const int64_t *shape)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, ndim, shape, &t));
    if (t) CHECK_OK(gpucore_fill(t, NAN, NULL)); /* every gradient must be written */
    return t;
}

/* Segment i on stage i * nstages / NSEG, each stage on its own context of `dev`. */
static int place(placed *P, const weights *W, const char *dev, int nstages)
{
    memset(P, 0, sizeof *P);
    P->nstages = nstages;
    int ncuda = 0;
    if (!strcmp(dev, "cuda") && gpucore_device_count(GPUCORE_DEVICE_CUDA, &ncuda) != GPUCORE_OK) ncuda = 0;
    for (int s = 0; s < nstages; s++) {
        char spec[32];
        snprintf(spec, sizeof spec, "%s", dev);
        if (ncuda >= 2) snprintf(spec, sizeof spec, "cuda:%d", s % 2); /* alternate over two devices */
        if (gpucore_context_create(spec, &P->ctx[s]) != GPUCORE_OK) return 0;
        CHECK_OK(gpucore_ckpt_create(P->ctx[s], "stage", &P->ck[s]));
        CHECK_OK(gpucore_ckpt_set_seed(P->ck[s], 99, 1000u * (uint64_t)s)); /* per-stage stream, same for any placement */
    }
    for (int i = 0; i < NSEG; i++) {
        int s = i * nstages / NSEG;
        gpucore_context *c = P->ctx[s];
        char name[16];
        snprintf(name, sizeof name, "seg%d", i);
        if (W->kind[i] == 3) {
            CHECK_OK(gpucore_ckpt_add_dropout(P->ck[s], name, 0.25));
            continue;
        }
        int64_t ws[2] = {W->out[i], W->in[i]}, bs = W->out[i];
        int wn = W->kind[i] == 2 ? 1 : 2;
        if (W->kind[i] == 2) ws[0] = W->in[i];
        int k = P->np;
        P->p[k] = upload(c, wn, ws, W->w[i]);
        P->p[k + 1] = upload(c, 1, &bs, W->b[i]);
        P->g[k] = poisoned(c, wn, ws);
        P->g[k + 1] = poisoned(c, 1, &bs);
        P->pseg[k] = P->pseg[k + 1] = i;
        P->np += 2;
        if (W->kind[i] == 2)
            CHECK_OK(gpucore_ckpt_add_layer_norm(P->ck[s], name, P->p[k], P->p[k + 1], 1e-5, P->g[k], P->g[k + 1]));
        else
            CHECK_OK(gpucore_ckpt_add_linear(P->ck[s], name, P->p[k], P->p[k + 1],
                                             W->kind[i] ? GPUCORE_ACT_RELU : GPUCORE_ACT_GELU_TANH, P->g[k], P->g[k + 1]));
    }
    CHECK_OK(gpucore_pipeline_create(P->ck, nstages, &P->pipe));
    return 1;
}

static void unplace(placed *P)
{
    CHECK_OK(gpucore_pipeline_destroy(P->pipe));
    for (int s = 0; s < P->nstages; s++) CHECK_OK(gpucore_ckpt_destroy(P->ck[s]));
    for (int k = 0; k < P->np; k++) {
        gpucore_tensor_destroy(P->p[k]);
        gpucore_tensor_destroy(P->g[k]);
    }
    for (int s = 0; s < P->nstages; s++) gpucore_context_destroy(P->ctx[s]);
    memset(P, 0, sizeof *P);
}

/* loss = 0.5·Σ(y - target)² over the whole batch: dy = y - target[rows of m]. */
typedef struct loss_ctx {
    gpucore_tensor *target; /* [B, out] on the last stage */
    int64_t M;
    int calls, fail_at;
} loss_ctx;

static gpucore_status mse_loss(void *user, int64_t m, const gpucore_tensor *y, gpucore_tensor *dy, gpucore_stream *s)
{
    loss_ctx *L = user;
    L->calls++;
    if (L->fail_at == m) return GPUCORE_ERR_INVALID_ARGUMENT;
    int64_t q = B / L->M, r = B % L->M, a = m * q + (m < r ? m : r), b = a + q + (m < r ? 1 : 0);
    gpucore_tensor *t = NULL;
    gpucore_status st = gpucore_tensor_slice(L->target, 0, a, b, 1, &t);
    if (!st) st = gpucore_binary(GPUCORE_SUB, dy, y, t, s);
    gpucore_tensor_destroy(t);
    return st;
}

typedef struct result {
    float *g[MAXP];
    int64_t n[MAXP];
    float dx[B * DIN];
    int np;
} result;

static void result_free(result *R)
{
    for (int k = 0; k < R->np; k++) free(R->g[k]);
    memset(R, 0, sizeof *R);
}

static float xdata[B * DIN], tdata[B * 6];

/* One step of placement P with M micro-batches (M = 0: the plain executor, one stage). */
static int run_step(placed *P, int64_t M, result *R)
{
    int64_t xs[2] = {B, DIN}, ts[2] = {B, 6};
    int last = P->nstages - 1;
    gpucore_tensor *x = upload(P->ctx[0], 2, xs, xdata), *dx = poisoned(P->ctx[0], 2, xs);
    loss_ctx L = {upload(P->ctx[last], 2, ts, tdata), M ? M : 1, 0, -1};
    gpucore_status st;
    if (M) {
        st = gpucore_pipeline_step(P->pipe, x, M, mse_loss, &L, dx);
    } else {
        gpucore_tensor *y = NULL, *dy = NULL;
        st = gpucore_ckpt_forward(P->ck[0], x, &y);
        if (!st) st = gpucore_tensor_create(P->ctx[0], GPUCORE_F32, 2, ts, &dy);
        if (!st) st = mse_loss(&L, 0, y, dy, NULL);
        if (!st) st = gpucore_ckpt_backward(P->ck[0], dy, dx);
        gpucore_tensor_destroy(dy);
    }
    CHECK_OK(st);
    CHECK(L.calls == (M ? M : 1));
    memset(R, 0, sizeof *R);
    R->np = P->np;
    for (int k = 0; k < P->np; k++) {
        R->n[k] = gpucore_tensor_numel(P->g[k]);
        R->g[k] = malloc(sizeof(float) * (size_t)R->n[k]);
        CHECK_OK(gpucore_copy_to_host(R->g[k], R->n[k] * 4, P->g[k]));
    }
    CHECK_OK(gpucore_copy_to_host(R->dx, sizeof R->dx, dx));
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dx);
    gpucore_tensor_destroy(L.target);
    return st == GPUCORE_OK;
}

/* The reference for a placement, without the pipeline: micro-batch by micro-batch,
 * each stage's forward, host copies between contexts, the loss, each stage's backward,
 * gradients summed on the host in the pipeline's order (g0 + g1 + ... in f32). */
static void run_chain(placed *P, int64_t M, result *R)
{
    int64_t ts[2] = {B, 6};
    int n = P->nstages;
    loss_ctx L = {upload(P->ctx[n - 1], 2, ts, tdata), M, 0, -1};
    memset(R, 0, sizeof *R);
    R->np = P->np;
    for (int k = 0; k < P->np; k++) {
        R->n[k] = gpucore_tensor_numel(P->g[k]);
        R->g[k] = calloc((size_t)R->n[k], sizeof(float));
    }
    float *tmp = malloc(sizeof(float) * B * 64);
    for (int64_t m = 0; m < M; m++) {
        int64_t q = B / M, r = B % M, a = m * q + (m < r ? m : r), rows = q + (m < r ? 1 : 0);
        int64_t xs[2] = {rows, DIN};
        gpucore_tensor *in[MAXS] = {NULL}, *y = NULL, *g = NULL;
        in[0] = upload(P->ctx[0], 2, xs, xdata + a * DIN);
        for (int s = 0; s < n; s++) {
            CHECK_OK(gpucore_ckpt_forward(P->ck[s], in[s], &y));
            int64_t shape[2];
            gpucore_tensor_shape(y, shape);
            if (s < n - 1) {
                CHECK_OK(gpucore_copy_to_host(tmp, gpucore_tensor_nbytes(y), y));
                in[s + 1] = upload(P->ctx[s + 1], 2, shape, tmp);
            } else {
                CHECK_OK(gpucore_tensor_create(P->ctx[s], GPUCORE_F32, 2, shape, &g));
                CHECK_OK(mse_loss(&L, m, y, g, NULL));
            }
        }
        for (int s = n - 1; s >= 0; s--) {
            int64_t shape[2];
            gpucore_tensor_shape(in[s], shape);
            gpucore_tensor *dx = poisoned(P->ctx[s], 2, shape);
            CHECK_OK(gpucore_ckpt_backward(P->ck[s], g, dx));
            gpucore_tensor_destroy(g);
            CHECK_OK(gpucore_copy_to_host(tmp, gpucore_tensor_nbytes(dx), dx));
            if (s > 0) {
                g = upload(P->ctx[s - 1], 2, shape, tmp);
            } else {
                memcpy(R->dx + a * DIN, tmp, sizeof(float) * (size_t)(rows * DIN));
            }
            gpucore_tensor_destroy(dx);
            gpucore_tensor_destroy(in[s]);
        }
        for (int k = 0; k < P->np; k++) {
            float *h = malloc(sizeof(float) * (size_t)R->n[k]);
            CHECK_OK(gpucore_copy_to_host(h, R->n[k] * 4, P->g[k]));
            for (int64_t i = 0; i < R->n[k]; i++) R->g[k][i] = m ? R->g[k][i] + h[i] : h[i];
            free(h);
        }
    }
    free(tmp);
    gpucore_tensor_destroy(L.target);
}

static int results_bitwise(const result *a, const result *b)
{
    if (a->np != b->np) return 0;
    for (int k = 0; k < a->np; k++) {
        for (int64_t i = 0; i < a->n[k]; i++)
            if (isnan(a->g[k][i])) return 0;
        if (a->n[k] != b->n[k] || memcmp(a->g[k], b->g[k], sizeof(float) * (size_t)a->n[k])) return 0;
    }
    for (int i = 0; i < B * DIN; i++)
        if (isnan(a->dx[i])) return 0;
    return !memcmp(a->dx, b->dx, sizeof a->dx);
}

static double results_rel(const result *a, const result *b)
{
    double worst = 0;
    for (int k = 0; k <= a->np; k++) {
        const float *x = k < a->np ? a->g[k] : a->dx, *y = k < a->np ? b->g[k] : b->dx;
        int64_t n = k < a->np ? a->n[k] : B * DIN;
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            den += (double)y[i] * y[i];
        }
        double r = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(r <= worst)) worst = r; /* NaN sticks */
    }
    return worst;
}

static void test_placements(const char *dev, int dropout)
{
    weights W;
    weights_make(&W, dropout);
    placed P;
    result ref_plain, ref_full;
    if (!place(&P, &W, dev, 1)) {
        printf("SKIP %s: no context\n", dev);
        weights_free(&W);
        return;
    }
    run_step(&P, 0, &ref_plain);
    unplace(&P);
    /* Stages on two CUDA devices copy device to device: with peer access enabled at pipeline
     * create, none of those copies may go through host memory (counted by the stand-in). */
    const long staged0 = check_standin_counter("peer_copy_staged"), direct0 = check_standin_counter("peer_copy_direct");
    int same_stage_counts = 1, same_plain = 1, close_full = 1;
    for (int64_t M = 1; M <= 4; M++) {
        result ref;
        place(&P, &W, dev, 1);
        run_step(&P, M, &ref);
        unplace(&P);
        if (M == 1) {
            same_plain = results_bitwise(&ref, &ref_plain);
            ref_full = ref;
        } else if (!dropout) {
            double r = results_rel(&ref, &ref_full);
            if (!(r < 1e-5)) {
                close_full = 0;
                fprintf(stderr, "FAIL %s: M=%lld vs the full batch: rel %.3g\n", dev, (long long)M, r);
            }
        }
        for (int S = 2; S <= 4; S += 2) {
            result got, again;
            place(&P, &W, dev, S);
            run_step(&P, M, &got);
            if (dropout) { /* the placement's own random streams: against the chain on it */
                unplace(&P);
                place(&P, &W, dev, S);
                run_chain(&P, M, &again);
            } else {
                run_step(&P, M, &again); /* the accumulators start over each step */
            }
            unplace(&P);
            int ok = dropout ? results_bitwise(&got, &again) : results_bitwise(&got, &ref) && results_bitwise(&again, &ref);
            if (!ok) fprintf(stderr, "FAIL %s dropout=%d: %d stages, %lld micro-batches differ from the reference\n", dev,
                             dropout, S, (long long)M);
            same_stage_counts &= ok;
            result_free(&got);
            result_free(&again);
        }
        if (M > 1) result_free(&ref);
    }
    CHECK(same_plain);
    CHECK(same_stage_counts);
    CHECK(close_full);
    int ncuda = 0;
    if (!strcmp(dev, "cuda") && staged0 >= 0 && gpucore_device_count(GPUCORE_DEVICE_CUDA, &ncuda) == GPUCORE_OK &&
        ncuda >= 2) {
        long staged = check_standin_counter("peer_copy_staged") - staged0;
        long direct = check_standin_counter("peer_copy_direct") - direct0;
        printf("%s: copies between cuda:0 and cuda:1: %ld peer-to-peer, %ld through host memory\n", dev, direct, staged);
        CHECK(direct > 0);
        CHECK(staged == 0);
    }
    printf("%s dropout=%d: 2 and 4 stages x 1..4 micro-batches bitwise equal to %s\n", dev, dropout,
           dropout ? "the stage-by-stage chain on the same contexts" : "one context");
    result_free(&ref_full);
    result_free(&ref_plain);
    weights_free(&W);
}

static void test_bad_input(const char *dev)
{
    weights W;
    weights_make(&W, 1);
    placed P;
    if (!place(&P, &W, dev, 2)) {
        weights_free(&W);
        return;
    }
    int64_t xs[2] = {B, DIN}, ts[2] = {B, 6}, bad[2] = {B, DIN + 1};
    gpucore_tensor *x = upload(P.ctx[0], 2, xs, xdata), *x1 = upload(P.ctx[1], 2, xs, xdata);
    gpucore_tensor *dxbad = poisoned(P.ctx[0], 2, bad);
    loss_ctx L = {upload(P.ctx[1], 2, ts, tdata), 2, 0, -1};
    int64_t base0 = test_allocated_bytes(P.ctx[0]), base1 = test_allocated_bytes(P.ctx[1]);
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x, 0, mse_loss, &L, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x, B + 1, mse_loss, &L, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x1, 2, mse_loss, &L, NULL), GPUCORE_ERR_DEVICE_MISMATCH);
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x, 2, NULL, &L, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x, 2, mse_loss, &L, dxbad), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_pipeline_step(NULL, x, 2, mse_loss, &L, NULL), GPUCORE_ERR_NULL_POINTER);
    /* a failing loss callback at micro-batch 1: its status, the stage named, nothing held */
    L.fail_at = 1;
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x, 2, mse_loss, &L, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "stage 1 micro-batch 1 loss callback") != NULL);
    CHECK(test_allocated_bytes(P.ctx[0]) == base0 && test_allocated_bytes(P.ctx[1]) == base1);
    L.fail_at = -1;
    CHECK_OK(gpucore_pipeline_step(P.pipe, x, 2, mse_loss, &L, NULL)); /* usable again */
    /* creation */
    gpucore_pipeline *q = NULL;
    gpucore_ckpt *twice[2] = {P.ck[0], P.ck[0]}, *empty = NULL;
    CHECK_STATUS(gpucore_pipeline_create(twice, 2, &q), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_pipeline_create(P.ck, 0, &q), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_pipeline_create(NULL, 2, &q), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_ckpt_create(P.ctx[1], "empty", &empty));
    gpucore_ckpt *with_empty[2] = {P.ck[0], empty};
    CHECK_STATUS(gpucore_pipeline_create(with_empty, 2, &q), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_ckpt_destroy(empty));
    /* an executor bound to a ZeRO trainer (a 1-rank communicator: the CPU's) */
    if (!strcmp(dev, "cpu")) {
        gpucore_comm *comm = NULL;
        gpucore_zero *z = NULL;
        gpucore_ckpt *bound = NULL, *pair[2] = {NULL, P.ck[1]};
        int64_t ws[2] = {4, DIN};
        gpucore_tensor *w = poisoned(P.ctx[0], 2, ws), *gw = poisoned(P.ctx[0], 2, ws);
        gpucore_optimizer_config oc;
        gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &oc);
        CHECK_OK(gpucore_comm_create_local(&P.ctx[0], 1, &comm));
        CHECK_OK(gpucore_zero_create(comm, &w, 1, &oc, NULL, &z));
        CHECK_OK(gpucore_ckpt_create(P.ctx[0], "bound", &bound));
        CHECK_OK(gpucore_ckpt_add_linear(bound, "fc", w, NULL, GPUCORE_ACT_NONE, gw, NULL));
        CHECK_OK(gpucore_zero_bind_ckpt(z, bound, &w, &gw));
        pair[0] = bound;
        CHECK_STATUS(gpucore_pipeline_create(pair, 2, &q), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK_OK(gpucore_zero_destroy(z));
        CHECK_OK(gpucore_ckpt_destroy(bound));
        CHECK_OK(gpucore_comm_destroy(comm));
        gpucore_tensor_destroy(w);
        gpucore_tensor_destroy(gw);
    }
    /* an executor already in a pipeline */
    CHECK_STATUS(gpucore_pipeline_create(P.ck, 2, &q), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_pipeline_destroy(P.pipe)); /* frees its accumulators */
    P.pipe = NULL;
    /* stages whose shapes disagree: stage 0 ends 20 wide, this stage starts 7 wide */
    {
        gpucore_context *c2 = NULL;
        CHECK_OK(gpucore_context_create(dev, &c2));
        gpucore_ckpt *ck2 = NULL;
        int64_t ws[2] = {6, 7};
        gpucore_tensor *w = poisoned(c2, 2, ws), *gw = poisoned(c2, 2, ws);
        CHECK_OK(gpucore_ckpt_create(c2, "narrow", &ck2));
        CHECK_OK(gpucore_ckpt_add_linear(ck2, "fc", w, NULL, GPUCORE_ACT_NONE, gw, NULL));
        gpucore_ckpt *mixed[2] = {P.ck[0], ck2};
        CHECK_OK(gpucore_pipeline_create(mixed, 2, &q));
        loss_ctx L2 = {NULL, 2, 0, -1};
        CHECK_STATUS(gpucore_pipeline_step(q, x, 2, mse_loss, &L2, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
        CHECK(strstr(gpucore_last_error(), "stage 1 micro-batch 0 forward") != NULL);
        CHECK(L2.calls == 0);
        CHECK(test_allocated_bytes(P.ctx[0]) == base0);
        CHECK_OK(gpucore_pipeline_destroy(q));
        q = NULL;
        /* a stage on a destroyed context */
        mixed[1] = P.ck[1];
        gpucore_pipeline *q2 = NULL;
        CHECK_OK(gpucore_pipeline_create(mixed, 2, &q2));
        gpucore_tensor_destroy(w);
        gpucore_tensor_destroy(gw);
        gpucore_ckpt *dead[2] = {P.ck[0], ck2};
        gpucore_context_destroy(c2);
        CHECK_STATUS(gpucore_pipeline_create(dead, 2, &q), GPUCORE_ERR_INVALID_HANDLE);
        CHECK(strstr(gpucore_last_error(), "stage 1") != NULL);
        CHECK_OK(gpucore_ckpt_destroy(ck2));
        CHECK_OK(gpucore_pipeline_destroy(q2));
        CHECK_STATUS(gpucore_pipeline_destroy(q2), GPUCORE_ERR_INVALID_HANDLE);
    }
    CHECK_OK(gpucore_pipeline_create(P.ck, 2, &P.pipe));
    L.M = 3;
    CHECK_OK(gpucore_pipeline_step(P.pipe, x, 3, mse_loss, &L, NULL));
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(x1);
    gpucore_tensor_destroy(dxbad);
    gpucore_tensor_destroy(L.target);
    unplace(&P);
    /* a pipeline whose stage context is destroyed after create: the step names the stage */
    place(&P, &W, dev, 2);
    x = upload(P.ctx[0], 2, xs, xdata);
    gpucore_context_destroy(P.ctx[1]);
    P.ctx[1] = NULL;
    L.target = NULL;
    CHECK_STATUS(gpucore_pipeline_step(P.pipe, x, 2, mse_loss, &L, NULL), GPUCORE_ERR_INVALID_HANDLE);
    CHECK(strstr(gpucore_last_error(), "stage 1") != NULL);
    gpucore_tensor_destroy(x);
    for (int k = 0; k < P.np; k++)
        if (P.pseg[k] >= NSEG / 2) P.p[k] = P.g[k] = NULL; /* died with their context */
    P.nstages = 1;
    CHECK_OK(gpucore_ckpt_destroy(P.ck[1]));
    unplace(&P);
    weights_free(&W);
}

int main(void)
{
    for (int i = 0; i < B * DIN; i++) xdata[i] = (float)sin(0.37 * i + 0.1);
    for (int i = 0; i < B * 6; i++) tdata[i] = (float)cos(0.21 * i);
    const char *devs[3];
    int nd = test_devices(devs, 3);
    for (int d = 0; d < nd; d++) {
        test_placements(devs[d], 1);
        test_placements(devs[d], 0);
        test_bad_input(devs[d]);
    }
    return check_finish("test_pipeline");
}
