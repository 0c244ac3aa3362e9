/*
 * test_lora.c — the LoRA linear layer (gpucore_lora_forward/_backward/_merge/
 * _unmerge) on every backend against a float64 reference, on fresh random data
 * with poisoned, guarded outputs: 3-d and strided 2-d inputs, transposed weight
 * views, with and without bias, xa saved or recomputed, adapter dropout replayed
 * in the backward; f32/f16/bf16; an fp8 (e4m3, e5m2) base with its scale against
 * the reference on the base decoded by tests/fp8_ref.h. The reference's gradients
 * are checked by finite differences of the reference forward; bad input returns a
 * status and a message.
 */
#include "ops_harness.h"
#include "fp8_ref.h"

typedef struct lora_ref {
    int64_t rows, in, out, r;
    const double *x, *w, *bias, *a, *b, *keep; /* keep: dropout multiplier per x element (1 without dropout) */
    double scale;
} lora_ref;

/* y = x·Wᵀ + bias + scale·((x⊙keep)·Aᵀ)·Bᵀ; h = (x⊙keep)·Aᵀ. */
static void ref_forward(const lora_ref *R, const double *x, double *y, double *h)
{
    for (int64_t i = 0; i < R->rows; i++) {
        for (int64_t k = 0; k < R->r; k++) {
            double s = 0;
            for (int64_t j = 0; j < R->in; j++) s += x[i * R->in + j] * R->keep[i * R->in + j] * R->a[k * R->in + j];
            h[i * R->r + k] = s;
        }
        for (int64_t o = 0; o < R->out; o++) {
            double s = R->bias ? R->bias[o] : 0, u = 0;
            for (int64_t j = 0; j < R->in; j++) s += x[i * R->in + j] * R->w[o * R->in + j];
            for (int64_t k = 0; k < R->r; k++) u += h[i * R->r + k] * R->b[o * R->r + k];
            y[i * R->out + o] = s + R->scale * u;
        }
    }
}

/* The gradients of L = <dy, y> with respect to x, A and B. */
static void ref_backward(const lora_ref *R, const double *dy, double *dx, double *da, double *db)
{
    double *h = calloc((size_t)(R->rows * R->r + 1), sizeof(double)), *y = calloc((size_t)(R->rows * R->out + 1), sizeof(double));
    double *dh = calloc((size_t)(R->rows * R->r + 1), sizeof(double));
    ref_forward(R, R->x, y, h);
    for (int64_t i = 0; i < R->rows; i++)
        for (int64_t k = 0; k < R->r; k++) {
            double s = 0;
            for (int64_t o = 0; o < R->out; o++) s += dy[i * R->out + o] * R->b[o * R->r + k];
            dh[i * R->r + k] = R->scale * s;
        }
    for (int64_t o = 0; o < R->out; o++)
        for (int64_t k = 0; k < R->r; k++) {
            double s = 0;
            for (int64_t i = 0; i < R->rows; i++) s += dy[i * R->out + o] * h[i * R->r + k];
            db[o * R->r + k] = R->scale * s;
        }
    for (int64_t k = 0; k < R->r; k++)
        for (int64_t j = 0; j < R->in; j++) {
            double s = 0;
            for (int64_t i = 0; i < R->rows; i++) s += dh[i * R->r + k] * R->x[i * R->in + j] * R->keep[i * R->in + j];
            da[k * R->in + j] = s;
        }
    for (int64_t i = 0; i < R->rows; i++)
        for (int64_t j = 0; j < R->in; j++) {
            double s = 0, u = 0;
            for (int64_t o = 0; o < R->out; o++) s += dy[i * R->out + o] * R->w[o * R->in + j];
            for (int64_t k = 0; k < R->r; k++) u += dh[i * R->r + k] * R->a[k * R->in + j];
            dx[i * R->in + j] = s + u * R->keep[i * R->in + j];
        }
    free(h); free(y); free(dh);
}

static double *rnd(int64_t n, double lo, double hi)
{
    double *p = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rand() / (double)RAND_MAX;
    return p;
}

/* <dy, y(v)> where v replaces the tensor `which` (0 x, 1 A, 2 B) of R. */
static double ref_loss(lora_ref R, int which, const double *v, const double *dy)
{
    if (which == 1) R.a = v;
    if (which == 2) R.b = v;
    const double *x = which == 0 ? v : R.x;
    double *y = malloc(sizeof(double) * (size_t)(R.rows * R.out)), *h = malloc(sizeof(double) * (size_t)(R.rows * R.r));
    ref_forward(&R, x, y, h);
    double l = 0;
    for (int64_t i = 0; i < R.rows * R.out; i++) l += dy[i] * y[i];
    free(y); free(h);
    return l;
}

/* The reference backward against central differences of the reference forward. */
static void test_reference_gradients(void)
{
    lora_ref R = {.rows = 4, .in = 5, .out = 3, .r = 2, .scale = 0.7};
    double *x = rnd(20, -1, 1), *w = rnd(15, -1, 1), *bias = rnd(3, -1, 1), *a = rnd(10, -1, 1), *b = rnd(6, -1, 1);
    double *keep = rnd(20, 0, 1), *dy = rnd(12, -1, 1);
    for (int i = 0; i < 20; i++) keep[i] = keep[i] < 0.3 ? 0 : 1 / 0.7;
    R.x = x, R.w = w, R.bias = bias, R.a = a, R.b = b, R.keep = keep;
    double dx[20], da[10], db[6];
    ref_backward(&R, dy, dx, da, db);
    double *grads[3] = {dx, da, db}, *vals[3] = {x, a, b};
    int64_t ns[3] = {20, 10, 6};
    for (int which = 0; which < 3; which++) {
        double fd[20], *v = malloc(sizeof(double) * (size_t)ns[which]);
        for (int64_t i = 0; i < ns[which]; i++) {
            memcpy(v, vals[which], sizeof(double) * (size_t)ns[which]);
            v[i] += 1e-6;
            double lp = ref_loss(R, which, v, dy);
            v[i] -= 2e-6;
            fd[i] = (lp - ref_loss(R, which, v, dy)) / 2e-6;
        }
        check_close(fd, grads[which], ns[which], 1e-6, "lora reference gradient vs finite differences");
        free(v);
    }
    free(x); free(w); free(bias); free(a); free(b); free(keep); free(dy);
}

/* A [rows, cols] view with unit column stride and a row stride past cols (a slice of a wider tensor). */
static gpucore_tensor *row_strided_input(gpucore_context *ctx, gpucore_dtype dt, int64_t rows, int64_t cols, double **host)
{
    int64_t wide[2] = {rows, cols + 5};
    gpucore_tensor *base = make_input(ctx, dt, 2, wide, 0, -1, 1, NULL), *view = NULL;
    CHECK_OK(gpucore_tensor_slice(base, 1, 2, 2 + cols, 1, &view));
    gpucore_tensor_destroy(base);
    *host = read_back(view);
    return view;
}

/* The dropout multiplier of each x element under (seed, offset): dropout of ones. */
static double *keep_mask(gpucore_context *ctx, const int64_t *xshape, int ndim, double p, uint64_t seed, uint64_t offset)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= xshape[i];
    double *k = malloc(sizeof(double) * (size_t)(n + 1));
    if (p == 0) {
        for (int64_t i = 0; i < n; i++) k[i] = 1;
        return k;
    }
    gpucore_tensor *ones = NULL, *m = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, ndim, xshape, &ones));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, ndim, xshape, &m));
    CHECK_OK(gpucore_fill(ones, 1.0, NULL));
    CHECK_OK(gpucore_dropout(m, ones, p, seed, offset, NULL));
    double *got = read_back(m);
    for (int64_t i = 0; i < n; i++) k[i] = got[i] != 0 ? 1 / (1 - p) : 0;
    free(got);
    gpucore_tensor_destroy(ones);
    gpucore_tensor_destroy(m);
    return k;
}

/* The backward into guarded outputs, compared with the reference (rdx, rda, rdb); returns dA read back. */
static double *check_backward(gpucore_context *ctx, gpucore_dtype dt, int ndim, const int64_t *xshape, const lora_ref *R,
                              const gpucore_tensor *dy, const gpucore_tensor *x, const gpucore_tensor *w,
                              const gpucore_tensor *a, const gpucore_tensor *b, const gpucore_tensor *xa,
                              const gpucore_lora_options *o, const double *rdx, const double *rda, const double *rdb,
                              const char *what)
{
    const int64_t ashape[2] = {R->r, R->in}, bshape[2] = {R->out, R->r};
    const double tol = tolerance_for(dt, 1);
    guarded gdx = make_output(ctx, dt, ndim, xshape, 0), gda = make_output(ctx, dt, 2, ashape, 0),
            gdb = make_output(ctx, dt, 2, bshape, 0);
    CHECK_OK(gpucore_lora_backward(gdx.view, gda.view, gdb.view, dy, x, w, a, b, xa, o, NULL));
    double *dx = finish_output(&gdx, what), *da = finish_output(&gda, what), *db = finish_output(&gdb, what);
    check_close(dx, rdx, R->rows * R->in, tol, what);
    check_close(da, rda, R->r * R->in, tol, what);
    check_close(db, rdb, R->out * R->r, tol, what);
    free(dx);
    free(db);
    return da;
}

static void test_lora(gpucore_context *ctx, gpucore_dtype dt)
{
    const int64_t in = 12, out = 9, r = 3;
    for (int variant = 0; variant < 3; variant++) {
        /* 0: 3-d x, bias, xa saved, no dropout; 1: strided 2-d x, transposed W/A/B views, no bias,
         * dropout, xa recomputed; 2: 3-d x, bias, dropout, xa saved */
        const int two_d = variant == 1, with_bias = variant != 1, save_xa = variant != 1;
        const double p = variant ? 0.3 : 0;
        const int ndim = two_d ? 2 : 3;
        const int64_t xshape3[3] = {2, 5, in}, xshape2[2] = {7, in}, *xshape = two_d ? xshape2 : xshape3;
        const int64_t rows = two_d ? 7 : 10;
        int64_t yshape[3], hshape[3];
        memcpy(yshape, xshape, sizeof(int64_t) * (size_t)ndim);
        memcpy(hshape, xshape, sizeof(int64_t) * (size_t)ndim);
        yshape[ndim - 1] = out;
        hshape[ndim - 1] = r;
        const int64_t wshape[2] = {out, in}, ashape[2] = {r, in}, bshape[2] = {out, r};
        double *hx, *hw, *hbias = NULL, *ha, *hb, *hdy;
        const int wl = two_d ? 2 : 0;
        gpucore_tensor *x = two_d ? row_strided_input(ctx, dt, rows, in, &hx) : make_input(ctx, dt, ndim, xshape, 0, -1, 1, &hx);
        gpucore_tensor *w = make_input(ctx, dt, 2, wshape, wl, -1, 1, &hw);
        gpucore_tensor *bias = with_bias ? make_input(ctx, dt, 1, &out, 0, -1, 1, &hbias) : NULL;
        gpucore_tensor *a = make_input(ctx, dt, 2, ashape, wl, -1, 1, &ha);
        gpucore_tensor *b = make_input(ctx, dt, 2, bshape, wl, -1, 1, &hb);
        gpucore_tensor *dy = make_input(ctx, dt, ndim, yshape, 0, -1, 1, &hdy);
        gpucore_lora_options o;
        gpucore_lora_options_init(&o);
        o.scale = 0.75;
        o.dropout_p = p;
        o.seed = 1000 + (uint64_t)variant;
        o.offset = 64;
        lora_ref R = {rows, in, out, r, hx, hw, hbias, ha, hb, NULL, o.scale};
        double *keep = keep_mask(ctx, xshape, ndim, p, o.seed, o.offset);
        R.keep = keep;
        double *ry = malloc(sizeof(double) * (size_t)(rows * out)), *rh = malloc(sizeof(double) * (size_t)(rows * r));
        double *rdx = malloc(sizeof(double) * (size_t)(rows * in)), *rda = malloc(sizeof(double) * (size_t)(r * in));
        double *rdb = malloc(sizeof(double) * (size_t)(out * r));
        ref_forward(&R, hx, ry, rh);
        ref_backward(&R, hdy, rdx, rda, rdb);

        char what[96];
        snprintf(what, sizeof what, "lora %s variant %d", gpucore_dtype_name(dt), variant);
        const double tol = tolerance_for(dt, 1);
        guarded gy = make_output(ctx, dt, ndim, yshape, 0), gh = make_output(ctx, dt, ndim, hshape, 0);
        CHECK_OK(gpucore_lora_forward(gy.view, save_xa ? gh.view : NULL, x, w, bias, a, b, &o, NULL));
        double *y = finish_output(&gy, what);
        check_close(y, ry, rows * out, tol, what);
        gpucore_tensor *xa = NULL;
        if (save_xa) { /* keep xa for the backward: finish a copy of the guarded buffer's view */
            CHECK_OK(gpucore_tensor_create(ctx, dt, ndim, hshape, &xa));
            CHECK_OK(gpucore_copy(xa, gh.view, NULL));
        }
        double *h = finish_output(&gh, what);
        if (save_xa) check_close(h, rh, rows * r, tol, what);

        double *da = check_backward(ctx, dt, ndim, xshape, &R, dy, x, w, a, b, xa, &o, rdx, rda, rdb, what);

        /* each gradient alone gives the same bits as all together */
        gpucore_tensor *da2 = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, dt, 2, ashape, &da2));
        CHECK_OK(gpucore_lora_backward(NULL, da2, NULL, dy, x, w, a, b, NULL, &o, NULL));
        double *da_alone = read_back(da2);
        CHECK(memcmp(da_alone, da, sizeof(double) * (size_t)(r * in)) == 0);
        free(da_alone);
        gpucore_tensor_destroy(da2);

        free(y); free(h); free(da); free(keep);
        free(ry); free(rh); free(rdx); free(rda); free(rdb);
        free(hx); free(hw); free(hbias); free(ha); free(hb); free(hdy);
        gpucore_tensor *ts[7] = {x, w, bias, a, b, dy, xa};
        for (int i = 0; i < 7; i++) gpucore_tensor_destroy(ts[i]);
    }
}

/* An fp8 base: W's bytes (quantised on the device by gpucore_cast, read back raw) decoded
 * by the reference and times the scale, then forward and backward as test_lora's. */
static void test_lora_fp8(gpucore_context *ctx, gpucore_dtype dt, int e5)
{
    const int64_t in = 16, out = 11, r = 4, rows = 6;
    const int64_t xshape[3] = {2, 3, in}, yshape[3] = {2, 3, out}, hshape[3] = {2, 3, r};
    const int64_t wshape[2] = {out, in}, ashape[2] = {r, in}, bshape[2] = {out, r};
    const double wscale = 0.0371; /* not a power of two: the f32 product rounds */
    const float wscale_f = (float)wscale;
    double *hx, *hbias, *ha, *hb, *hdy, hw[11 * 16];
    gpucore_tensor *x = make_input(ctx, dt, 3, xshape, 0, -1, 1, &hx);
    gpucore_tensor *bias = make_input(ctx, dt, 1, &out, 0, -1, 1, &hbias);
    gpucore_tensor *a = make_input(ctx, dt, 2, ashape, 0, -1, 1, &ha);
    gpucore_tensor *b = make_input(ctx, dt, 2, bshape, 0, -1, 1, &hb);
    gpucore_tensor *dy = make_input(ctx, dt, 3, yshape, 0, -1, 1, &hdy);
    /* W in [-1, 1) quantised with 1/scale: codes up to ~27 (e4m3 and e5m2 alike) */
    gpucore_tensor *wf = make_input(ctx, GPUCORE_F32, 2, wshape, 0, -1 / wscale, 1 / wscale, NULL), *w8 = NULL, *sc = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, e5 ? GPUCORE_FP8_E5M2 : GPUCORE_FP8_E4M3, 2, wshape, &w8));
    CHECK_OK(gpucore_cast(w8, wf, NULL));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &sc));
    CHECK_OK(gpucore_copy_from_host(sc, &wscale_f, 4));
    uint8_t codes[11 * 16];
    CHECK_OK(gpucore_copy_to_host(codes, out * in, w8));
    for (int i = 0; i < out * in; i++) hw[i] = fp8_ref_decode(codes[i], e5) * (double)wscale_f;
    gpucore_lora_options o;
    gpucore_lora_options_init(&o);
    o.scale = 1.25;
    o.w_scale = sc;
    lora_ref R = {rows, in, out, r, hx, hw, hbias, ha, hb, NULL, o.scale};
    double *keep = keep_mask(ctx, xshape, 3, 0, 0, 0);
    R.keep = keep;
    double ry[6 * 11], rh[6 * 4], rdx[6 * 16], rda[4 * 16], rdb[11 * 4];
    ref_forward(&R, hx, ry, rh);
    ref_backward(&R, hdy, rdx, rda, rdb);
    char what[96];
    snprintf(what, sizeof what, "lora fp8 %s base, %s", e5 ? "e5m2" : "e4m3", gpucore_dtype_name(dt));
    const double tol = tolerance_for(dt, 1);
    guarded gy = make_output(ctx, dt, 3, yshape, 0), gh = make_output(ctx, dt, 3, hshape, 0);
    CHECK_OK(gpucore_lora_forward(gy.view, gh.view, x, w8, bias, a, b, &o, NULL));
    double *y = finish_output(&gy, what), *h = finish_output(&gh, what);
    check_close(y, ry, rows * out, tol, what);
    check_close(h, rh, rows * r, tol, what);
    free(check_backward(ctx, dt, 3, xshape, &R, dy, x, w8, a, b, NULL, &o, rdx, rda, rdb, what));
    free(y); free(h); free(keep);
    free(hx); free(hbias); free(ha); free(hb); free(hdy);
    gpucore_tensor *ts[8] = {x, bias, a, b, dy, wf, w8, sc};
    for (int i = 0; i < 8; i++) gpucore_tensor_destroy(ts[i]);
}

/* merge: W + scale·B·A against the reference, the merged linear layer equals the
 * adapter's forward, and unmerge gives W back. */
static void test_merge(gpucore_context *ctx, gpucore_dtype dt)
{
    const int64_t in = 10, out = 6, r = 4, rows = 5;
    const int64_t wshape[2] = {out, in}, ashape[2] = {r, in}, bshape[2] = {out, r}, xshape[2] = {rows, in},
                  yshape[2] = {rows, out};
    double *hw, *ha, *hb;
    gpucore_tensor *w = make_input(ctx, dt, 2, wshape, 0, -1, 1, &hw);
    gpucore_tensor *a = make_input(ctx, dt, 2, ashape, 2, -1, 1, &ha);
    gpucore_tensor *b = make_input(ctx, dt, 2, bshape, 0, -1, 1, &hb);
    gpucore_tensor *x = make_input(ctx, dt, 2, xshape, 0, -1, 1, NULL);
    gpucore_tensor *y_lora = NULL, *y_merged = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, 2, yshape, &y_lora));
    CHECK_OK(gpucore_tensor_create(ctx, dt, 2, yshape, &y_merged));
    const double scale = 1.5;
    double ref[60];
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0;
            for (int64_t k = 0; k < r; k++) s += hb[o * r + k] * ha[k * in + j];
            ref[o * in + j] = hw[o * in + j] + scale * s;
        }
    gpucore_lora_options o;
    gpucore_lora_options_init(&o);
    o.scale = scale;
    CHECK_OK(gpucore_lora_forward(y_lora, NULL, x, w, NULL, a, b, &o, NULL));
    CHECK_OK(gpucore_lora_merge(w, a, b, scale, NULL));
    double *merged = read_back(w);
    check_close(merged, ref, out * in, tolerance_for(dt, 1), "lora merge");
    CHECK_OK(gpucore_linear_forward(x, w, NULL, GPUCORE_ACT_NONE, y_merged, NULL, NULL));
    double *yl = read_back(y_lora), *ym = read_back(y_merged);
    check_close(ym, yl, rows * out, tolerance_for(dt, 1) * 2, "merged linear vs lora forward");
    CHECK_OK(gpucore_lora_unmerge(w, a, b, scale, NULL));
    double *back = read_back(w);
    check_close(back, hw, out * in, tolerance_for(dt, 1), "lora unmerge");
    free(hw); free(ha); free(hb); free(merged); free(yl); free(ym); free(back);
    gpucore_tensor *ts[6] = {w, a, b, x, y_lora, y_merged};
    for (int i = 0; i < 6; i++) gpucore_tensor_destroy(ts[i]);
}

static gpucore_tensor *mk(gpucore_context *ctx, gpucore_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t shape[3] = {d0, d1, d2};
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, ndim, shape, &t));
    if (t && dt != GPUCORE_I32) CHECK_OK(gpucore_random(t, GPUCORE_UNIFORM, -1, 1, 5, 0, NULL));
    return t;
}

static void test_bad_input(gpucore_context *ctx)
{
    const gpucore_dtype F = GPUCORE_F32;
    gpucore_tensor *x = mk(ctx, F, 3, 2, 3, 8), *w = mk(ctx, F, 2, 5, 8, 0), *a = mk(ctx, F, 2, 2, 8, 0),
                   *b = mk(ctx, F, 2, 5, 2, 0), *y = mk(ctx, F, 3, 2, 3, 5), *xa = mk(ctx, F, 3, 2, 3, 2);
    gpucore_tensor *a_bad = mk(ctx, F, 2, 2, 7, 0), *b_bad = mk(ctx, F, 2, 5, 3, 0), *wb = mk(ctx, GPUCORE_BF16, 2, 5, 8, 0);
    gpucore_tensor *y_bad = mk(ctx, F, 3, 2, 4, 5), *yt = mk(ctx, F, 3, 3, 2, 5), *xt = NULL, *i32 = mk(ctx, GPUCORE_I32, 2, 5, 8, 0);
    CHECK_OK(gpucore_tensor_transpose(x, 0, 1, &xt));
    gpucore_lora_options o;
    gpucore_lora_options_init(&o);
    CHECK_STATUS(gpucore_lora_forward(y, NULL, NULL, w, NULL, a, b, &o, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w, NULL, NULL, b, &o, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w, NULL, a_bad, b, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w, NULL, a, b_bad, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_forward(y_bad, NULL, x, w, NULL, a, b, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_forward(y, y_bad, x, w, NULL, a, b, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, wb, NULL, a, b, &o, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, i32, NULL, a, b, &o, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_forward(yt, NULL, xt, w, NULL, a, b, &o, NULL), GPUCORE_ERR_NOT_CONTIGUOUS);
    CHECK_STATUS(gpucore_lora_forward(x, NULL, x, w, NULL, a, b, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    o.dropout_p = 1.0;
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w, NULL, a, b, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.dropout_p = 0;
    o.scale = NAN;
    CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w, NULL, a, b, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_lora_merge(w, a, b, INFINITY, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_lora_options_init(&o);
    o.struct_size = 8;
    CHECK_STATUS(gpucore_lora_backward(NULL, a, b, y, x, w, a, b, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_lora_options_init(&o);
    CHECK_STATUS(gpucore_lora_backward(NULL, a, NULL, y, x, w, a, b, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_lora_backward(NULL, b, NULL, y, x, w, a, b_bad, NULL, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_backward(NULL, b_bad, NULL, y, x, w, a, b, NULL, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_backward(xa, NULL, NULL, y, x, w, a, b, NULL, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_backward(NULL, NULL, NULL, x, x, w, a, b, NULL, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_merge(w, a, b_bad, 1.0, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_lora_unmerge(wb, a, b, 1.0, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    /* fp8 bases: the scale is required (f32, one element) and only for them; merge is refused */
    for (int f = 0; f < 2; f++) {
        int64_t ws[2] = {5, 8}, two = 2;
        gpucore_tensor *w8 = NULL, *sc = NULL, *sc16 = NULL, *sc2 = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, f ? GPUCORE_FP8_E5M2 : GPUCORE_FP8_E4M3, 2, ws, &w8));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &sc));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 0, NULL, &sc16));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &two, &sc2));
        if (!w8 || !sc || !sc16 || !sc2) continue;
        gpucore_lora_options_init(&o);
        CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w8, NULL, a, b, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK(strstr(gpucore_last_error(), "w_scale is NULL") != NULL);
        CHECK_STATUS(gpucore_lora_backward(x, NULL, NULL, y, x, w8, a, b, NULL, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
        o.w_scale = sc16;
        CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w8, NULL, a, b, &o, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
        o.w_scale = sc2;
        CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w8, NULL, a, b, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
        o.w_scale = sc;
        CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w, NULL, a, b, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK(strstr(gpucore_last_error(), "fp8 base only") != NULL);
        CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w8, NULL, a, b_bad, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
        CHECK_STATUS(gpucore_lora_forward(y, NULL, x, w8, NULL, a, wb, &o, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
        CHECK_STATUS(gpucore_lora_merge(w8, a, b, 1.0, NULL), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK(strstr(gpucore_last_error(), "requantised") != NULL);
        CHECK_STATUS(gpucore_lora_unmerge(w8, a, b, 1.0, NULL), GPUCORE_ERR_NOT_SUPPORTED);
        gpucore_tensor *fs[4] = {w8, sc, sc16, sc2};
        for (int i = 0; i < 4; i++) gpucore_tensor_destroy(fs[i]);
    }
    CHECK_OK(gpucore_lora_forward(y, xa, x, w, NULL, a, b, NULL, NULL)); /* still usable */
    gpucore_tensor *ts[13] = {x, w, a, b, y, xa, a_bad, b_bad, wb, y_bad, xt, i32, yt};
    for (int i = 0; i < 13; i++) gpucore_tensor_destroy(ts[i]);
}

static void test_every_dtype(gpucore_context *ctx)
{
    for (int t = 0; t < 3; t++) {
        test_lora(ctx, float_dtypes[t]);
        test_merge(ctx, float_dtypes[t]);
        for (int e5 = 0; e5 < 2; e5++) test_lora_fp8(ctx, float_dtypes[t], e5);
    }
}

int main(void)
{
    srand(2020);
    test_reference_gradients();
    static const device_test_fn tests[] = {test_every_dtype, test_bad_input};
    return run_on_devices("test_lora", tests, (int)(sizeof tests / sizeof tests[0]));
}
