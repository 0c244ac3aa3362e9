/*
 * ops_harness.h — shared by the tensor-op tests (tests/test_ops_*.c): make
 * tensors with fresh random contents (Philox, a new seed each call) read back
 * as float64, non-contiguous input views, outputs that live inside a poisoned
 * buffer with guard bands on both sides (checked untouched afterwards), and
 * comparison against a float64 reference with DESIGN.md's tolerances.
 */
#ifndef GPUCORE_TEST_OPS_HARNESS_H
#define GPUCORE_TEST_OPS_HARNESS_H

#include <stdint.h>
#include "check.h"
#include "numeric.h"

#define GUARD 67                      /* guard elements before and after an output */
static uint64_t harness_seed = 12345; /* advanced on every draw: fresh data each time */

static double bits_to_double(const void *p, gpucore_dtype dt)
{
    switch (dt) {
    case GPUCORE_F32: return *(const float *)p;
    case GPUCORE_F64: return *(const double *)p;
    case GPUCORE_F16: return gpucore_f16_to_f32(*(const uint16_t *)p);
    case GPUCORE_BF16: return gpucore_bf16_to_f32(*(const uint16_t *)p);
    case GPUCORE_I32: return *(const int32_t *)p;
    case GPUCORE_I64: return (double)*(const int64_t *)p;
    default: return 0;
    }
}

/* Tensor contents as float64 (row-major), malloc'ed. */
static double *read_back(gpucore_tensor *t)
{
    int64_t n = gpucore_tensor_numel(t), es = gpucore_dtype_size(gpucore_tensor_dtype(t));
    unsigned char *raw = malloc((size_t)(n * es) + 1);
    double *out = malloc(sizeof(double) * (size_t)(n + 1));
    CHECK_OK(gpucore_copy_to_host(raw, n * es, t));
    for (int64_t i = 0; i < n; i++) out[i] = bits_to_double(raw + i * es, gpucore_tensor_dtype(t));
    free(raw);
    return out;
}

/* A tensor of `shape` with uniform [lo, hi) contents. layout 0: contiguous;
 * 1: a view with a stride gap (last dim sliced from a wider tensor); 2: a
 * transposed view (the last two dims of a transposed contiguous tensor).
 * *host gets the contents as float64 (malloc'ed) when host is not NULL. */
static gpucore_tensor *make_input(gpucore_context *ctx, gpucore_dtype dt, int ndim, const int64_t *shape, int layout,
                                  double lo, double hi, double **host)
{
    gpucore_tensor *base = NULL, *view = NULL;
    int64_t bshape[GPUCORE_MAX_DIMS];
    memcpy(bshape, shape, sizeof(int64_t) * (size_t)ndim);
    if (ndim < 2 && layout == 2) layout = 1;
    if (ndim == 0) layout = 0;
    if (layout == 1) bshape[ndim - 1] = shape[ndim - 1] * 2 + 1;
    if (layout == 2) { bshape[ndim - 1] = shape[ndim - 2]; bshape[ndim - 2] = shape[ndim - 1]; }
    CHECK_OK(gpucore_tensor_create(ctx, dt, ndim, bshape, &base));
    if (gpucore_tensor_numel(base) > 0)
        CHECK_OK(gpucore_random(base, GPUCORE_UNIFORM, lo, hi, harness_seed++, 0, NULL));
    if (layout == 0) view = base;
    else {
        if (layout == 1) CHECK_OK(gpucore_tensor_slice(base, ndim - 1, 1, 1 + 2 * shape[ndim - 1], 2, &view));
        else CHECK_OK(gpucore_tensor_transpose(base, ndim - 2, ndim - 1, &view));
        gpucore_tensor_destroy(base);
    }
    if (host) *host = read_back(view);
    return view;
}

/* An output of `shape` inside a buffer of numel + 2*GUARD elements poisoned with 0xFF bytes
 * (NaN for every float dtype). transposed: the view is the transpose of a contiguous block. */
typedef struct guarded {
    gpucore_tensor *buf, *view;
    int64_t numel, es;
    gpucore_dtype dt;
} guarded;

static guarded make_output(gpucore_context *ctx, gpucore_dtype dt, int ndim, const int64_t *shape, int transposed)
{
    guarded g = {0};
    g.dt = dt;
    g.es = gpucore_dtype_size(dt);
    g.numel = 1;
    for (int i = 0; i < ndim; i++) g.numel *= shape[i];
    int64_t total = g.numel + 2 * GUARD;
    CHECK_OK(gpucore_tensor_create(ctx, dt, 1, &total, &g.buf));
    unsigned char *poison = malloc((size_t)(total * g.es));
    memset(poison, 0xFF, (size_t)(total * g.es));
    CHECK_OK(gpucore_copy_from_host(g.buf, poison, total * g.es));
    free(poison);
    gpucore_tensor *mid = NULL;
    CHECK_OK(gpucore_tensor_slice(g.buf, 0, GUARD, GUARD + g.numel, 1, &mid));
    int64_t vshape[GPUCORE_MAX_DIMS];
    memcpy(vshape, shape, sizeof(int64_t) * (size_t)ndim);
    if (transposed && ndim >= 2) { vshape[ndim - 1] = shape[ndim - 2]; vshape[ndim - 2] = shape[ndim - 1]; }
    gpucore_tensor *r = NULL;
    CHECK_OK(gpucore_tensor_reshape(mid, ndim, vshape, &r));
    gpucore_tensor_destroy(mid);
    if (transposed && ndim >= 2) {
        CHECK_OK(gpucore_tensor_transpose(r, ndim - 2, ndim - 1, &g.view));
        gpucore_tensor_destroy(r);
    } else g.view = r;
    return g;
}

/* The output's values (float64) after checking that the guards are still 0xFF. */
static double *finish_output(guarded *g, const char *what)
{
    int64_t total = g->numel + 2 * GUARD;
    unsigned char *raw = malloc((size_t)(total * g->es));
    CHECK_OK(gpucore_copy_to_host(raw, total * g->es, g->buf));
    int64_t bad = 0;
    for (int64_t i = 0; i < GUARD * g->es; i++) bad += raw[i] != 0xFF;
    for (int64_t i = (GUARD + g->numel) * g->es; i < total * g->es; i++) bad += raw[i] != 0xFF;
    CHECK(bad == 0);
    if (bad) fprintf(stderr, "  %s: %lld guard bytes overwritten\n", what, (long long)bad);
    free(raw);
    double *out = read_back(g->view);
    gpucore_tensor_destroy(g->view);
    gpucore_tensor_destroy(g->buf);
    return out;
}

static double tolerance_for(gpucore_dtype dt, int reduction)
{
    if (dt == GPUCORE_F16 || dt == GPUCORE_BF16) return 1e-2;
    return reduction ? 1e-5 : 1e-6;
}

/* The normalised error within tol, NaN failing; prints what failed. */
static void check_close(const double *out, const double *ref, int64_t n, double tol, const char *what)
{
    double err = rel_error(out, ref, (size_t)n);
    int ok = err <= tol; /* false for NaN */
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "  %s: normalised error %.3g > %.1g\n", what, err, tol);
        for (int64_t i = 0, shown = 0; i < n && shown < 4; i++)
            if (!(fabs(out[i] - ref[i]) <= tol * (fabs(ref[i]) + 1e-3))) {
                fprintf(stderr, "    [%lld] got %.8g want %.8g\n", (long long)i, out[i], ref[i]);
                shown++;
            }
    }
}

static const gpucore_dtype float_dtypes[3] = {GPUCORE_F32, GPUCORE_F16, GPUCORE_BF16};

/* Row-major index of out element i mapped to a broadcast input of ndim_in dims. */
__attribute__((unused)) static int64_t broadcast_index(int64_t i, int ndim_out, const int64_t *oshape, int ndim_in, const int64_t *ishape)
{
    int64_t idx = 0, mul = 1;
    for (int d = ndim_out - 1; d >= 0; d--) {
        int64_t c = i % oshape[d];
        i /= oshape[d];
        int id = d - (ndim_out - ndim_in);
        if (id >= 0) {
            if (ishape[id] != 1) idx += c * mul;
            mul *= ishape[id];
        }
    }
    return idx;
}

#endif
