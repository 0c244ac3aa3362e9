/*
 * zero_model.h — the model test_zero trains in every mode: the least squares of
 * lsq_model.h (shared with test_ddp) over 8 parameter tensors of uneven sizes, its gradient computed on the host in
 * double, the per-rank training loop through the ZeRO trainer (train_steps) and the
 * single-process reference (gpucore_optimizer over the full tensors, train_ref).
 * Included once, by tests/test_zero.c.
 */
#ifndef GPUCORE_TEST_ZERO_MODEL_H
#define GPUCORE_TEST_ZERO_MODEL_H

#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "lsq_model.h"
#ifdef TEST_HAVE_MPI
#include <mpi.h>
#endif


#define NP 8
static const int64_t psize[NP] = {301, 1001, 2000, 701, 4001, 1500, 101, 3002};
static int64_t poff[NP + 1];
#define D 12607
#define NSAMPLES 32
#define STEPS 4
static int g_rank, g_size;

typedef struct run_cfg {
    int stage, mixed, clip, scaler, accum, inf_step; /* inf_step: 1-based step with an Inf on the last rank */
} run_cfg;

/* Mean gradient over samples [lo, hi) at w, times mult, rounded to float. */
static void host_grad(const float *w, int lo, int hi, double mult, float *g) { lsq_grad(w, D, lo, hi, mult, g); }

static void init_w(float *w)
{
    for (int64_t j = 0; j < D; j++) w[j] = (float)(((j * 7) % 13) - 6) / 64.0f;
}

static gpucore_dtype param_dtype(const run_cfg *c, int p) { return c->mixed && p >= 4 ? GPUCORE_BF16 : GPUCORE_F32; }

/* t (any float dtype) += host values h (numel floats). */
static void add_host(gpucore_tensor *t, const float *h)
{
    int64_t n = gpucore_tensor_numel(t);
    gpucore_context *ctx = NULL;
    gpucore_tensor_context(t, &ctx);
    gpucore_tensor *tmp = NULL, *cast = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &tmp));
    CHECK_OK(gpucore_copy_from_host(tmp, h, n * 4));
    if (gpucore_tensor_dtype(t) != GPUCORE_F32) {
        CHECK_OK(gpucore_tensor_create(ctx, gpucore_tensor_dtype(t), 1, &n, &cast));
        CHECK_OK(gpucore_cast(cast, tmp, NULL));
    }
    gpucore_tensor *flat = NULL;
    CHECK_OK(gpucore_tensor_reshape(t, 1, &n, &flat));
    CHECK_OK(gpucore_axpy(flat, 1.0, cast ? cast : tmp, NULL));
    gpucore_tensor_destroy(flat);
    gpucore_tensor_destroy(cast);
    gpucore_tensor_destroy(tmp);
}

/* host floats <- t (any float dtype) */
static void read_host(gpucore_tensor *t, float *h)
{
    int64_t n = gpucore_tensor_numel(t);
    gpucore_context *ctx = NULL;
    gpucore_tensor_context(t, &ctx);
    gpucore_tensor *tmp = NULL, *flat = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &tmp));
    CHECK_OK(gpucore_tensor_reshape(t, 1, &n, &flat));
    CHECK_OK(gpucore_dtype_size(gpucore_tensor_dtype(t)) == 4 ? gpucore_copy(tmp, flat, NULL)
                                                               : gpucore_cast(tmp, flat, NULL));
    CHECK_OK(gpucore_copy_to_host(h, n * 4, tmp));
    gpucore_tensor_destroy(flat);
    gpucore_tensor_destroy(tmp);
}

static void make_params(gpucore_context *ctx, const run_cfg *c, const float *w, gpucore_tensor **params)
{
    for (int p = 0; p < NP; p++) {
        int64_t shape[2] = {psize[p] % 2 ? psize[p] : 2, psize[p] % 2 ? 1 : psize[p] / 2};
        CHECK_OK(gpucore_tensor_create(ctx, param_dtype(c, p), 2, shape, &params[p]));
        CHECK_OK(gpucore_fill(params[p], 0.0, NULL));
        add_host(params[p], w + poff[p]);
    }
}

static void opt_config(gpucore_optimizer_config *oc)
{
    gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, oc);
    oc->lr = 1e-2;
    oc->weight_decay = 1e-2;
}

static void scaler_create(gpucore_context *ctx, gpucore_loss_scaler **s)
{
    gpucore_loss_scaler_config sc;
    gpucore_loss_scaler_config_default(&sc);
    sc.init_scale = 1024;
    sc.growth_interval = 2;
    CHECK_OK(gpucore_loss_scaler_create(ctx, &sc, s));
}

/* The parameters' current values on the host. Stage 3: bucket by bucket with the next one
 * prefetched, each parameter copied on the compute stream and its bucket released before
 * the copies are read back, so a gather that reused a released bucket's memory while a
 * copy still read it would show up as wrong values. */
static void read_params(gpucore_zero *z, int stage, float *w)
{
    int nb = 0;
    CHECK_OK(gpucore_zero_bucket_count(z, &nb));
    gpucore_tensor *copies[NP] = {0};
    for (int k = 0; k < nb; k++) {
        int b0 = 0, b1 = 0;
        CHECK_OK(gpucore_zero_bucket_info(z, k, &b0, &b1, NULL, NULL));
        if (stage == 3) {
            CHECK_OK(gpucore_zero_gather(z, k));
            if (k + 1 < nb) CHECK_OK(gpucore_zero_gather(z, k + 1));
        }
        for (int p = b0; p < b1; p++) {
            gpucore_tensor *t = NULL;
            CHECK_OK(gpucore_zero_param(z, p, NULL, &t));
            if (!t) continue;
            gpucore_context *ctx = NULL;
            int64_t shape[2];
            gpucore_tensor_context(t, &ctx);
            gpucore_tensor_shape(t, shape);
            CHECK_OK(gpucore_tensor_create(ctx, gpucore_tensor_dtype(t), 2, shape, &copies[p]));
            CHECK_OK(gpucore_copy(copies[p], t, NULL));
        }
        if (stage == 3) CHECK_OK(gpucore_zero_release(z, k, NULL));
    }
    for (int p = 0; p < NP; p++) {
        if (copies[p]) read_host(copies[p], w + poff[p]);
        gpucore_tensor_destroy(copies[p]);
    }
}

/* This rank's gradient for one step: micro-batch m of `micro` over samples [lo, hi). */
static void rank_grad(const float *w, int rank, int m, int micro, double scale, float *g)
{
    int shard = NSAMPLES / g_size, lo = rank * shard, len = shard / micro;
    host_grad(w, lo + m * len, lo + (m + 1) * len, scale / micro, g);
}

/* Full-batch loss at w: mean over samples of (x.w - y)^2 / 2. */
static double host_loss(const float *w)
{
    double l = 0;
    for (int i = 0; i < NSAMPLES; i++) {
        double r = -target(i);
        for (int64_t j = 0; j < D; j++) r += feature(i, j) * w[j];
        l += 0.5 * r * r;
    }
    return l / NSAMPLES;
}

/* Steps first..last (1-based; inf_step counts in the same numbering); losses[step-first]
 * receives the full-batch loss before each step when not NULL. */
static void train_steps(gpucore_zero *z, gpucore_comm *comm, const run_cfg *c, gpucore_loss_scaler *sc, float *w,
                        int first, int last, double *losses)
{
    float *g = malloc(sizeof(float) * D);
    int micro = c->accum ? 2 : 1, nb = 0;
    CHECK_OK(gpucore_zero_bucket_count(z, &nb));
    for (int step = first; step <= last; step++) {
        read_params(z, c->stage, w);
        if (losses) losses[step - first] = host_loss(w);
        float scale = 1.0f;
        if (sc) {
            gpucore_tensor *st = NULL;
            CHECK_OK(gpucore_loss_scaler_scale(sc, &st));
            CHECK_OK(gpucore_copy_to_host(&scale, 4, st));
        }
        for (int m = 0; m < micro; m++) {
            CHECK_OK(gpucore_zero_set_no_sync(z, m < micro - 1));
            rank_grad(w, g_rank, m, micro, scale, g);
            if (step == c->inf_step && g_rank == g_size - 1 && m == 0) g[D - 5] = INFINITY;
            uint64_t seq0 = gpucore_comm_last_sequence(comm);
            int overlapped = 0;
            for (int p = NP - 1; p >= 0; p--) {
                gpucore_tensor *gt = NULL;
                CHECK_OK(gpucore_zero_grad(z, p, NULL, &gt));
                if (gt) add_host(gt, g + poff[p]);
                CHECK_OK(gpucore_zero_mark_ready(z, p, NULL));
                /* bucket 0's reduction is queued while backward still has gradients to produce */
                if (p > 0 && gpucore_comm_last_sequence(comm) > seq0) overlapped = 1;
            }
            if (nb > 1 && (m == micro - 1 || c->stage >= 2)) CHECK(overlapped);
        }
        CHECK_OK(gpucore_zero_step(z, sc, NULL));
        if (sc) CHECK_OK(gpucore_loss_scaler_update(sc, NULL));
    }
    read_params(z, c->stage, w);
    free(g);
}

/* Single process, whole batch: the ranks' gradients summed in rank order, divided by N,
 * unscaled, clipped, one fused AdamW over the full tensors. */
static void train_ref(gpucore_context *ctx, const run_cfg *c, float *w)
{
    gpucore_tensor *params[NP], *grads[NP];
    make_params(ctx, c, w, params);
    for (int p = 0; p < NP; p++) {
        int64_t shape[2];
        gpucore_tensor_shape(params[p], shape);
        CHECK_OK(gpucore_tensor_create(ctx, param_dtype(c, p), 2, shape, &grads[p]));
    }
    gpucore_optimizer_config oc;
    opt_config(&oc);
    gpucore_optimizer *opt = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, &oc, params, NP, &opt));
    gpucore_loss_scaler *sc = NULL;
    gpucore_tensor *found = NULL, *norm = NULL;
    if (c->scaler) {
        scaler_create(ctx, &sc);
        CHECK_OK(gpucore_loss_scaler_found_inf(sc, &found));
    }
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &norm));
    float *g = malloc(sizeof(float) * D), *sum = malloc(sizeof(float) * D), *acc = malloc(sizeof(float) * D);
    int micro = c->accum ? 2 : 1;
    for (int step = 1; step <= STEPS; step++) {
        for (int p = 0; p < NP; p++) read_host(params[p], w + poff[p]);
        float scale = 1.0f;
        if (sc) {
            gpucore_tensor *st = NULL;
            CHECK_OK(gpucore_loss_scaler_scale(sc, &st));
            CHECK_OK(gpucore_copy_to_host(&scale, 4, st));
        }
        for (int64_t j = 0; j < D; j++) sum[j] = 0.0f;
        for (int r = 0; r < g_size; r++) {
            for (int64_t j = 0; j < D; j++) acc[j] = 0.0f;
            for (int m = 0; m < micro; m++) {
                rank_grad(w, r, m, micro, scale, g);
                if (step == c->inf_step && r == g_size - 1 && m == 0) g[D - 5] = INFINITY;
                for (int64_t j = 0; j < D; j++) acc[j] += g[j];
            }
            for (int64_t j = 0; j < D; j++) sum[j] += acc[j];
        }
        for (int64_t j = 0; j < D; j++) sum[j] *= 1.0f / (float)g_size;
        for (int p = 0; p < NP; p++) {
            CHECK_OK(gpucore_fill(grads[p], 0.0, NULL));
            add_host(grads[p], sum + poff[p]);
        }
        if (sc) CHECK_OK(gpucore_loss_scaler_unscale(sc, grads, NP, NULL));
        if (c->clip) CHECK_OK(gpucore_clip_grad_norm(grads, NP, 0.5, norm, NULL, NULL));
        CHECK_OK(gpucore_optimizer_step(opt, grads, NP, found, NULL));
        if (sc) CHECK_OK(gpucore_loss_scaler_update(sc, NULL));
    }
    for (int p = 0; p < NP; p++) read_host(params[p], w + poff[p]);
    free(g);
    free(sum);
    free(acc);
    gpucore_tensor_destroy(norm);
    gpucore_loss_scaler_destroy(sc);
    gpucore_optimizer_destroy(opt);
    for (int p = 0; p < NP; p++) {
        gpucore_tensor_destroy(params[p]);
        gpucore_tensor_destroy(grads[p]);
    }
}

static double rel_diff(const float *a, const float *b)
{
    double num = 0, den = 0;
    for (int64_t j = 0; j < D; j++) {
        double d = (double)a[j] - b[j];
        num += d * d;
        den += (double)b[j] * b[j];
    }
    return isnan(num) ? INFINITY : sqrt(num / (den > 0 ? den : 1));
}

static int same_on_all_ranks(const float *w)
{
    int identical = 1;
#ifdef TEST_HAVE_MPI
    if (g_size > 1) {
        float *w0 = malloc(sizeof(float) * D);
        memcpy(w0, w, sizeof(float) * D);
        MPI_Bcast(w0, D, MPI_FLOAT, 0, MPI_COMM_WORLD);
        identical = !memcmp(w0, w, sizeof(float) * D);
        free(w0);
    }
#endif
    return identical;
}

#endif
