/*
 * test_optim.c — fused optimizers (AdamW, SGD variants) against a float64
 * reference over many steps for f32/f16/bf16 parameters (the f16/bf16 ones
 * through the f32 master-weight path), the dynamic loss scaler (overflow skips
 * the step, halves the scale, resets the tracker; N clean steps double it),
 * gradient clipping against a reference (and its determinism), and bad input.
 * Runs on every backend present.
 */
#include <stdint.h>
#include "check.h"
#include "numeric.h"

#define NT 3
static const int64_t sizes[NT] = {1, 1000, 40000}; /* 40000 spans three 16384-element chunks */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) /* [-1, 1) */
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static double round_to(gpucore_dtype dt, double x)
{
    if (dt == GPUCORE_F16) return gpucore_f16_to_f32(gpucore_f32_to_f16((float)x));
    if (dt == GPUCORE_BF16) return gpucore_bf16_to_f32(gpucore_f32_to_bf16((float)x));
    return (float)x;
}

/* host doubles -> tensor of dtype (values already representable) */
static void upload(gpucore_tensor *t, const double *v, int64_t n)
{
    gpucore_dtype dt = gpucore_tensor_dtype(t);
    void *buf = malloc((size_t)n * 4 + 4);
    for (int64_t i = 0; i < n; i++) {
        if (dt == GPUCORE_F32) ((float *)buf)[i] = (float)v[i];
        else if (dt == GPUCORE_F16) ((uint16_t *)buf)[i] = gpucore_f32_to_f16((float)v[i]);
        else ((uint16_t *)buf)[i] = gpucore_f32_to_bf16((float)v[i]);
    }
    CHECK_OK(gpucore_copy_from_host(t, buf, n * gpucore_dtype_size(dt)));
    free(buf);
}

static void download(gpucore_tensor *t, double *v, int64_t n)
{
    gpucore_dtype dt = gpucore_tensor_dtype(t);
    void *buf = malloc((size_t)n * 4 + 4);
    CHECK_OK(gpucore_copy_to_host(buf, n * gpucore_dtype_size(dt), t));
    for (int64_t i = 0; i < n; i++) {
        if (dt == GPUCORE_F32) v[i] = ((float *)buf)[i];
        else if (dt == GPUCORE_F16) v[i] = gpucore_f16_to_f32(((uint16_t *)buf)[i]);
        else if (dt == GPUCORE_BF16) v[i] = gpucore_bf16_to_f32(((uint16_t *)buf)[i]);
        else if (dt == GPUCORE_I32) v[i] = ((int32_t *)buf)[i];
    }
    free(buf);
}

static double scalar(gpucore_tensor *t)
{
    double v = 0;
    download(t, &v, 1);
    return v;
}

typedef struct ref_state { double *p, *m, *v; } ref_state;

static void ref_step(const gpucore_optimizer_config *c, ref_state *r, const double *g, int64_t n, int step)
{
    double lr = (float)c->lr;
    double b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps, wd = (float)c->weight_decay;
    double mom = (float)c->momentum, damp = (float)c->dampening;
    for (int64_t i = 0; i < n; i++) {
        double p = r->p[i];
        if (c->kind == GPUCORE_OPTIMIZER_ADAMW) {
            p -= lr * wd * p;
            r->m[i] = b1 * r->m[i] + (1 - b1) * g[i];
            r->v[i] = b2 * r->v[i] + (1 - b2) * g[i] * g[i];
            double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
            p -= lr / bc1 * r->m[i] / (sqrt(r->v[i]) / sqrt(bc2) + eps);
        } else {
            double d = g[i] + wd * p;
            if (mom > 0) {
                r->m[i] = step == 1 ? d : mom * r->m[i] + (1 - damp) * d;
                d = c->nesterov ? d + mom * r->m[i] : r->m[i];
            }
            p -= lr * d;
        }
        r->p[i] = p;
    }
}

static void test_optimizer(gpucore_context *ctx, const char *dev, const gpucore_optimizer_config *cfg,
                           gpucore_dtype dt, const char *label)
{
    gpucore_tensor *params[NT], *grads[NT];
    ref_state ref[NT];
    double *g[NT], *out = malloc(40000 * sizeof(double));
    for (int k = 0; k < NT; k++) {
        CHECK_OK(gpucore_tensor_create(ctx, dt, 1, &sizes[k], &params[k]));
        CHECK_OK(gpucore_tensor_create(ctx, dt, 1, &sizes[k], &grads[k]));
        ref[k].p = malloc((size_t)sizes[k] * sizeof(double));
        ref[k].m = calloc((size_t)sizes[k], sizeof(double));
        ref[k].v = calloc((size_t)sizes[k], sizeof(double));
        g[k] = malloc((size_t)sizes[k] * sizeof(double));
        for (int64_t i = 0; i < sizes[k]; i++) ref[k].p[i] = round_to(dt, urand());
        upload(params[k], ref[k].p, sizes[k]);
    }
    gpucore_optimizer *opt = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, cfg, params, NT, &opt));
    const int steps = 25;
    for (int s = 1; s <= steps; s++) {
        for (int k = 0; k < NT; k++) {
            for (int64_t i = 0; i < sizes[k]; i++) g[k][i] = round_to(dt, urand() * 0.1);
            upload(grads[k], g[k], sizes[k]);
            ref_step(cfg, &ref[k], g[k], sizes[k], s);
        }
        CHECK_OK(gpucore_optimizer_step(opt, grads, NT, NULL, NULL));
    }
    double worst_master = 0, worst_param = 0;
    for (int k = 0; k < NT; k++) {
        gpucore_tensor *master = NULL;
        if (dt != GPUCORE_F32) {
            CHECK_OK(gpucore_optimizer_state(opt, k, "master", &master));
            download(master, out, sizes[k]);
            double e = rel_error(out, ref[k].p, (size_t)sizes[k]);
            if (e > worst_master || isnan(e)) worst_master = e;
            for (int64_t i = 0; i < sizes[k]; i++) ref[k].p[i] = round_to(dt, out[i]); /* what the param must hold */
        }
        download(params[k], out, sizes[k]);
        double e = rel_error(out, ref[k].p, (size_t)sizes[k]);
        if (e > worst_param || isnan(e)) worst_param = e;
    }
    gpucore_tensor *step = NULL;
    CHECK_OK(gpucore_optimizer_step_count(opt, &step));
    CHECK(scalar(step) == steps);
    /* f32 updates over 25 steps vs float64: within the reduction contract */
    int ok = worst_param <= (dt == GPUCORE_F32 ? 1e-5 : 1e-6) && worst_master <= 1e-5;
    CHECK(ok);
    printf("%-14s %-22s %-5s %d steps: rel err param %.2e master %.2e %s\n", dev, label, gpucore_dtype_name(dt),
           steps, worst_param, worst_master, ok ? "ok" : "FAIL");
    CHECK_OK(gpucore_optimizer_destroy(opt));
    for (int k = 0; k < NT; k++) {
        gpucore_tensor_destroy(params[k]);
        gpucore_tensor_destroy(grads[k]);
        free(ref[k].p); free(ref[k].m); free(ref[k].v); free(g[k]);
    }
    free(out);
}

static void test_loss_scaler(gpucore_context *ctx, const char *dev)
{
    int64_t n = 20000;
    gpucore_tensor *p[2], *g[2];
    double *h = malloc((size_t)n * sizeof(double)), *o = malloc((size_t)n * sizeof(double));
    double *p0 = malloc((size_t)n * sizeof(double));
    for (int k = 0; k < 2; k++) {
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 1, &n, &p[k]));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 1, &n, &g[k]));
        for (int64_t i = 0; i < n; i++) h[i] = round_to(GPUCORE_F16, urand());
        upload(p[k], h, n);
    }
    memcpy(p0, h, (size_t)n * sizeof(double)); /* p[1]'s initial values */
    gpucore_loss_scaler_config sc;
    CHECK_OK(gpucore_loss_scaler_config_default(&sc));
    CHECK(sc.init_scale == 65536.0 && sc.growth_factor == 2.0 && sc.backoff_factor == 0.5 && sc.growth_interval == 2000);
    sc.growth_interval = 3;
    gpucore_loss_scaler *ls = NULL;
    CHECK_OK(gpucore_loss_scaler_create(ctx, &sc, &ls));
    gpucore_optimizer_config oc;
    gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &oc);
    gpucore_optimizer *opt = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, &oc, p, 2, &opt));
    gpucore_tensor *scale, *found, *tracker, *step;
    CHECK_OK(gpucore_loss_scaler_scale(ls, &scale));
    CHECK_OK(gpucore_loss_scaler_found_inf(ls, &found));
    CHECK_OK(gpucore_loss_scaler_growth_tracker(ls, &tracker));
    CHECK_OK(gpucore_optimizer_step_count(opt, &step));

    /* step 1: grads scaled by 65536, one Inf in g[0] -> skipped, scale halved, tracker reset */
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < n; i++) h[i] = round_to(GPUCORE_F16, urand() * 1000.0);
        if (k == 0) h[12345] = INFINITY;
        upload(g[k], h, n);
    }
    CHECK_OK(gpucore_loss_scaler_unscale(ls, g, 2, NULL));
    CHECK_OK(gpucore_optimizer_step(opt, g, 2, found, NULL));
    CHECK_OK(gpucore_loss_scaler_update(ls, NULL));
    /* all of it was queued without waiting; now look */
    CHECK(scalar(found) == 1.0);
    CHECK(scalar(scale) == 32768.0);
    CHECK(scalar(tracker) == 0.0);
    CHECK(scalar(step) == 0.0);
    download(p[1], o, n);
    CHECK(memcmp(o, p0, (size_t)n * sizeof(double)) == 0); /* parameters untouched */
    /* unscale multiplied by 1/65536 (h holds g[1]'s scaled values) */
    download(g[1], o, n);
    int unscaled_ok = 1;
    for (int64_t i = 0; i < n; i++) unscaled_ok &= o[i] == round_to(GPUCORE_F16, (float)h[i] * (1.0f / 65536.0f));
    CHECK(unscaled_ok);

    /* three clean steps -> the scale doubles back, tracker resets, the steps count */
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < 2; k++) {
            for (int64_t i = 0; i < n; i++) h[i] = round_to(GPUCORE_F16, urand() * 100.0);
            upload(g[k], h, n);
        }
        CHECK_OK(gpucore_loss_scaler_unscale(ls, g, 2, NULL));
        CHECK_OK(gpucore_optimizer_step(opt, g, 2, found, NULL));
        CHECK_OK(gpucore_loss_scaler_update(ls, NULL));
        if (s == 1) CHECK(scalar(tracker) == 2.0 && scalar(scale) == 32768.0);
    }
    CHECK(scalar(found) == 0.0);
    CHECK(scalar(scale) == 65536.0);
    CHECK(scalar(tracker) == 0.0);
    CHECK(scalar(step) == 3.0);
    download(p[1], o, n);
    CHECK(memcmp(o, p0, (size_t)n * sizeof(double)) != 0);
    /* NaN is caught too */
    for (int64_t i = 0; i < n; i++) h[i] = 1.0;
    h[7] = NAN;
    upload(g[1], h, n);
    CHECK_OK(gpucore_loss_scaler_unscale(ls, g, 2, NULL));
    CHECK(scalar(found) == 1.0);
    printf("%-14s loss scaler: overflow skip/halve/reset, growth after 3 clean steps, NaN detection done\n", dev);

    /* bad input */
    CHECK_STATUS(gpucore_loss_scaler_unscale(NULL, g, 2, NULL), GPUCORE_ERR_NULL_POINTER);
    sc.backoff_factor = 1.5;
    gpucore_loss_scaler *bad = NULL;
    CHECK_STATUS(gpucore_loss_scaler_create(ctx, &sc, &bad), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_optimizer_destroy(opt));
    CHECK_OK(gpucore_loss_scaler_destroy(ls));
    for (int k = 0; k < 2; k++) { gpucore_tensor_destroy(p[k]); gpucore_tensor_destroy(g[k]); }
    free(h); free(o); free(p0);
}

static void test_clip(gpucore_context *ctx, const char *dev)
{
    const gpucore_dtype dts[NT] = {GPUCORE_F32, GPUCORE_BF16, GPUCORE_F32};
    gpucore_tensor *g[NT];
    double *h[NT], sumsq = 0;
    for (int k = 0; k < NT; k++) {
        CHECK_OK(gpucore_tensor_create(ctx, dts[k], 1, &sizes[k], &g[k]));
        h[k] = malloc((size_t)sizes[k] * sizeof(double));
        for (int64_t i = 0; i < sizes[k]; i++) {
            h[k][i] = round_to(dts[k], urand());
            sumsq += h[k][i] * h[k][i];
        }
        upload(g[k], h[k], sizes[k]);
    }
    double ref_norm = sqrt(sumsq), max_norm = 10.0, ref_coef = fmin(1.0, max_norm / (ref_norm + 1e-6));
    gpucore_tensor *norm, *coef;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &norm));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &coef));
    CHECK_OK(gpucore_clip_grad_norm(g, NT, max_norm, norm, coef, NULL));
    double got_norm = scalar(norm), got_coef = scalar(coef);
    CHECK(fabs(got_norm - ref_norm) <= 1e-5 * ref_norm);
    CHECK(fabs(got_coef - ref_coef) <= 1e-5 * ref_coef);
    double worst = 0;
    double *o = malloc(40000 * sizeof(double));
    for (int k = 0; k < NT; k++) {
        download(g[k], o, sizes[k]);
        for (int64_t i = 0; i < sizes[k]; i++) h[k][i] *= ref_coef;
        double e = rel_error(o, h[k], (size_t)sizes[k]);
        if (e > worst || isnan(e)) worst = e;
    }
    CHECK(worst <= (1e-2)); /* the bf16 tensor rounds on store */
    /* deterministic: the same input gives the same bits */
    float n1, n2;
    CHECK_OK(gpucore_clip_grad_norm(g, NT, 1e9, norm, NULL, NULL));
    CHECK_OK(gpucore_copy_to_host(&n1, 4, norm));
    CHECK_OK(gpucore_clip_grad_norm(g, NT, 1e9, norm, NULL, NULL));
    CHECK_OK(gpucore_copy_to_host(&n2, 4, norm));
    CHECK(memcmp(&n1, &n2, 4) == 0);
    printf("%-14s clip_grad_norm: norm %.6f (ref %.6f) coef %.6f, grads rel err %.2e, deterministic %s\n", dev,
           got_norm, ref_norm, got_coef, worst, memcmp(&n1, &n2, 4) == 0 ? "yes" : "NO");
    CHECK_STATUS(gpucore_clip_grad_norm(g, NT, -1.0, norm, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_clip_grad_norm(g, NT, 1.0, NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_clip_grad_norm(g, NT, 1.0, g[1], NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    gpucore_tensor_destroy(norm);
    gpucore_tensor_destroy(coef);
    for (int k = 0; k < NT; k++) { gpucore_tensor_destroy(g[k]); free(h[k]); }
    free(o);
}

static void test_bad_input(gpucore_context *ctx)
{
    int64_t n = 8, m = 9, shape2[2] = {2, 4};
    gpucore_tensor *p, *g, *gwrong, *pi, *p2d, *pt;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &p));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &g));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &m, &gwrong));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 1, &n, &pi));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape2, &p2d));
    CHECK_OK(gpucore_tensor_transpose(p2d, 0, 1, &pt));
    gpucore_optimizer_config c;
    CHECK_OK(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_SGD, &c));
    gpucore_optimizer *opt = NULL;
    CHECK_STATUS(gpucore_optimizer_create(ctx, NULL, &p, 1, &opt), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_optimizer_create(ctx, &c, &pi, 1, &opt), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_optimizer_create(ctx, &c, &pt, 1, &opt), GPUCORE_ERR_NOT_CONTIGUOUS);
    CHECK_STATUS(gpucore_optimizer_create(ctx, &c, NULL, 1, &opt), GPUCORE_ERR_NULL_POINTER);
    c.nesterov = 1;
    CHECK_STATUS(gpucore_optimizer_create(ctx, &c, &p, 1, &opt), GPUCORE_ERR_INVALID_ARGUMENT);
    c.nesterov = 0;
    c.lr = NAN;
    CHECK_STATUS(gpucore_optimizer_create(ctx, &c, &p, 1, &opt), GPUCORE_ERR_INVALID_ARGUMENT);
    c.lr = 0.1;
    c.struct_size = 8;
    CHECK_STATUS(gpucore_optimizer_create(ctx, &c, &p, 1, &opt), GPUCORE_ERR_INVALID_ARGUMENT);
    c.struct_size = sizeof c;
    CHECK_OK(gpucore_optimizer_create(ctx, &c, &p, 1, &opt));
    CHECK_STATUS(gpucore_optimizer_step(opt, &gwrong, 1, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_optimizer_step(opt, &g, 2, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_optimizer_step(opt, &p, 1, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_optimizer_step(opt, &g, 1, g, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_optimizer_step(NULL, &g, 1, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    gpucore_tensor *st = NULL;
    CHECK_STATUS(gpucore_optimizer_state(opt, 0, "exp_avg", &st), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_optimizer_state(opt, 5, "master", &st), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(gpucore_optimizer_param_count(opt) == 1);
    CHECK_OK(gpucore_optimizer_destroy(opt));
    CHECK_OK(gpucore_optimizer_destroy(NULL));
    gpucore_tensor *all[] = {p, g, gwrong, pi, pt, p2d};
    for (int i = 0; i < 6; i++) gpucore_tensor_destroy(all[i]);
}

int main(void)
{
    const char *devs[4];
    int nd = test_devices(devs, 4);
    for (int d = 0; d < nd; d++) {
        gpucore_context *ctx = NULL;
        if (gpucore_context_create(devs[d], &ctx) != GPUCORE_OK) {
            printf("SKIP %s: %s\n", devs[d], gpucore_last_error());
            continue;
        }
        const gpucore_dtype dts[3] = {GPUCORE_F32, GPUCORE_F16, GPUCORE_BF16};
        for (int i = 0; i < 3; i++) {
            gpucore_optimizer_config c;
            gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &c);
            c.lr = 1e-2;
            c.weight_decay = 0.05;
            test_optimizer(ctx, devs[d], &c, dts[i], "adamw");
            gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_SGD, &c);
            c.lr = 0.05;
            test_optimizer(ctx, devs[d], &c, dts[i], "sgd");
            c.momentum = 0.9;
            c.dampening = 0.1;
            c.weight_decay = 1e-3;
            test_optimizer(ctx, devs[d], &c, dts[i], "sgd+momentum");
            c.dampening = 0;
            c.nesterov = 1;
            test_optimizer(ctx, devs[d], &c, dts[i], "sgd+nesterov");
        }
        test_loss_scaler(ctx, devs[d]);
        test_clip(ctx, devs[d]);
        test_bad_input(ctx);
        CHECK_OK(gpucore_context_destroy(ctx));
    }
    return check_finish("test_optim");
}
