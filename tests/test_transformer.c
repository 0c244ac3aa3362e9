/*
 * test_transformer.c — rotary embedding, SwiGLU/GeGLU and the fused residual
 * add + RMSNorm/LayerNorm (forward and backward) against float64 references on
 * every backend, on fresh random data with poisoned, guarded outputs,
 * non-contiguous views and in-place use; f32/f16/bf16. Gradients: the
 * references' derivatives by finite differences, RoPE's backward as the
 * adjoint of its forward (<rope(x), y> = <x, rope_bwd(y)>).
 */
#include "ops_harness.h"

static double *rnd(int64_t n, double lo, double hi)
{
    double *p = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rand() / (double)RAND_MAX;
    return p;
}

/* ------------------------------------------------------------------ RoPE */

static void ref_rope(const double *x, const double *cs, const double *sn, int64_t B, int64_t H, int64_t S, int64_t D,
                     int64_t R2, int interleaved, int inverse, double *y)
{
    for (int64_t row = 0; row < B * H * S; row++) {
        const int64_t s = row % S;
        const double *xr = x + row * D;
        double *yr = y + row * D;
        for (int64_t d = 2 * R2; d < D; d++) yr[d] = xr[d];
        for (int64_t p = 0; p < R2; p++) {
            int64_t d1 = interleaved ? 2 * p : p, d2 = interleaved ? 2 * p + 1 : p + R2;
            double c = cs[s * R2 + p], si = (inverse ? -1 : 1) * sn[s * R2 + p];
            yr[d1] = xr[d1] * c - xr[d2] * si;
            yr[d2] = xr[d2] * c + xr[d1] * si;
        }
    }
}

static void test_rope(gpucore_context *ctx, gpucore_dtype dt)
{
    const int64_t B = 2, H = 3, S = 11, D = 20;
    /* variants 4 and 5: half-split pairs on contiguous f32-table operands (the CPU's pointer-loop path),
     * in place with a partial rotation and out of place with a full one */
    for (int variant = 0; variant < 6; variant++) {
        const int interleaved = variant < 4 && (variant & 1), partial = variant >= 2 && variant != 5,
                  in_place = variant == 3 || variant == 4, dense = variant >= 4;
        const int64_t R2 = partial ? 6 : D / 2, shape[4] = {B, H, S, D}, tshape[2] = {S, R2}, n = B * H * S * D;
        double *hc, *hs, *hx;
        gpucore_tensor *cs = make_input(ctx, variant == 1 ? dt : GPUCORE_F32, 2, tshape, 0, -1, 1, &hc);
        gpucore_tensor *sn = make_input(ctx, variant == 1 ? dt : GPUCORE_F32, 2, tshape, 0, -1, 1, &hs);
        gpucore_tensor *x = make_input(ctx, dt, 4, shape, in_place || dense ? 0 : 2, -2, 2, &hx);
        double *ref = malloc(sizeof(double) * (size_t)n), *back = NULL, *got = NULL;
        ref_rope(hx, hc, hs, B, H, S, D, R2, interleaved, 0, ref);
        char what[96];
        snprintf(what, sizeof what, "rope %s variant %d", gpucore_dtype_name(dt), variant);
        if (in_place) {
            CHECK_OK(gpucore_rotary_embedding(x, x, cs, sn, interleaved, NULL));
            got = read_back(x);
        } else {
            guarded g = make_output(ctx, dt, 4, shape, !dense);
            CHECK_OK(gpucore_rotary_embedding(g.view, x, cs, sn, interleaved, NULL));
            got = finish_output(&g, what);
        }
        check_close(got, ref, n, tolerance_for(dt, 0) * 4, what);
        /* backward = adjoint: <rope(x), y> == <x, rope_bwd(y)> for a fresh y */
        double *hy;
        gpucore_tensor *y = make_input(ctx, dt, 4, shape, dense ? 0 : 1, -1, 1, &hy);
        guarded gd = make_output(ctx, dt, 4, shape, 0);
        CHECK_OK(gpucore_rotary_embedding_backward(gd.view, y, cs, sn, interleaved, NULL));
        back = finish_output(&gd, what);
        double lhs = 0, rhs = 0, scale = 0;
        for (int64_t i = 0; i < n; i++) {
            lhs += ref[i] * hy[i];
            rhs += hx[i] * back[i];
            scale += fabs(ref[i] * hy[i]);
        }
        CHECK(fabs(lhs - rhs) <= tolerance_for(dt, 1) * 4 * scale);
        if (!(fabs(lhs - rhs) <= tolerance_for(dt, 1) * 4 * scale))
            fprintf(stderr, "  %s: adjoint mismatch %g vs %g\n", what, lhs, rhs);
        free(hc); free(hs); free(hx); free(hy); free(ref); free(back); free(got);
        gpucore_tensor_destroy(cs); gpucore_tensor_destroy(sn); gpucore_tensor_destroy(x); gpucore_tensor_destroy(y);
    }
}

/* ------------------------------------------------------------------- GLU */

static double ref_act(int kind, double x)
{
    if (kind == GPUCORE_GLU_SWIGLU) return x / (1 + exp(-x));
    if (kind == GPUCORE_GLU_GEGLU_TANH) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2)));
}

static double ref_act_grad(int kind, double x)
{
    if (kind == GPUCORE_GLU_SWIGLU) {
        double s = 1 / (1 + exp(-x));
        return s * (1 + x * (1 - s));
    }
    if (kind == GPUCORE_GLU_GEGLU_TANH) {
        double t = tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
    }
    return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

static void test_glu_reference(void)
{
    double xs[7] = {-4, -1.3, -0.2, 0, 0.4, 1.7, 3.9}, fd[7], an[7];
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < 7; i++) {
            fd[i] = (ref_act(kind, xs[i] + 1e-6) - ref_act(kind, xs[i] - 1e-6)) / 2e-6;
            an[i] = ref_act_grad(kind, xs[i]);
        }
        check_close(fd, an, 7, 1e-6, "GLU activation derivative vs finite differences");
    }
}

/* Run glu forward and backward into fresh contiguous outputs (or a transposed one) and check them
 * against the references; frees the references. */
static void run_and_check_glu(gpucore_context *ctx, gpucore_dtype dt, int kind, const int64_t *shape, int tr_out,
                              int tr_du, gpucore_tensor *gate, gpucore_tensor *up, gpucore_tensor *dout, double *ry,
                              double *rg, double *ru, int64_t n, const char *what)
{
    guarded go = make_output(ctx, dt, 3, shape, tr_out), gg = make_output(ctx, dt, 3, shape, 0),
            gu = make_output(ctx, dt, 3, shape, tr_du);
    CHECK_OK(gpucore_glu(go.view, gate, up, (gpucore_glu_kind)kind, NULL));
    CHECK_OK(gpucore_glu_backward(gg.view, gu.view, dout, gate, up, (gpucore_glu_kind)kind, NULL));
    double *o = finish_output(&go, what), *og = finish_output(&gg, what), *ou = finish_output(&gu, what);
    check_close(o, ry, n, tolerance_for(dt, 0) * 4, what);
    check_close(og, rg, n, tolerance_for(dt, 0) * 4, what);
    check_close(ou, ru, n, tolerance_for(dt, 0) * 4, what);
    free(ry); free(rg); free(ru); free(o); free(og); free(ou);
}

static void test_glu(gpucore_context *ctx, gpucore_dtype dt)
{
    const int64_t shape[3] = {3, 7, 33}, n = 3 * 7 * 33;
    for (int kind = 0; kind < 3; kind++) {
        double *hg, *hu, *hd;
        gpucore_tensor *gate = make_input(ctx, dt, 3, shape, kind == 1 ? 2 : 0, -3, 3, &hg);
        gpucore_tensor *up = make_input(ctx, dt, 3, shape, kind == 2 ? 1 : 0, -2, 2, &hu);
        gpucore_tensor *dout = make_input(ctx, dt, 3, shape, 0, -1, 1, &hd);
        double *ry = malloc(sizeof(double) * n), *rg = malloc(sizeof(double) * n), *ru = malloc(sizeof(double) * n);
        for (int64_t i = 0; i < n; i++) {
            ry[i] = ref_act(kind, hg[i]) * hu[i];
            rg[i] = hd[i] * hu[i] * ref_act_grad(kind, hg[i]);
            ru[i] = hd[i] * ref_act(kind, hg[i]);
        }
        char what[96];
        snprintf(what, sizeof what, "glu kind %d %s", kind, gpucore_dtype_name(dt));
        run_and_check_glu(ctx, dt, kind, shape, kind == 0, 1, gate, up, dout, ry, rg, ru, n, what);
        free(hg); free(hu); free(hd);
        gpucore_tensor_destroy(gate); gpucore_tensor_destroy(up); gpucore_tensor_destroy(dout);
    }
}

/* ------------------------------------------------------- residual + norm */

/* y, h, mean, rstd of rows of h = x + r (h given already rounded when hr != NULL). */
/* gate and up as the two halves of one [.., 2F] tensor (how the MLP block calls it: unit inner
 * stride, strided rows), contiguous outputs: the CPU's row path. */
static void test_glu_halves(gpucore_context *ctx, gpucore_dtype dt)
{
    const int64_t F = 37, shape[3] = {2, 5, 2 * F}, hshape[3] = {2, 5, F}, n = 2 * 5 * F;
    for (int kind = 0; kind < 3; kind++) {
        double *hb, *hd;
        gpucore_tensor *both = make_input(ctx, dt, 3, shape, 0, -3, 3, &hb), *gate = NULL, *up = NULL;
        gpucore_tensor *dout = make_input(ctx, dt, 3, hshape, 0, -1, 1, &hd);
        CHECK_OK(gpucore_tensor_slice(both, 2, 0, F, 1, &gate));
        CHECK_OK(gpucore_tensor_slice(both, 2, F, 2 * F, 1, &up));
        double *ry = malloc(sizeof(double) * n), *rg = malloc(sizeof(double) * n), *ru = malloc(sizeof(double) * n);
        for (int64_t i = 0; i < n; i++) {
            const double g = hb[(i / F) * 2 * F + i % F], u = hb[(i / F) * 2 * F + F + i % F];
            ry[i] = ref_act(kind, g) * u;
            rg[i] = hd[i] * u * ref_act_grad(kind, g);
            ru[i] = hd[i] * ref_act(kind, g);
        }
        char what[96];
        snprintf(what, sizeof what, "glu halves kind %d %s", kind, gpucore_dtype_name(dt));
        run_and_check_glu(ctx, dt, kind, hshape, 0, 0, gate, up, dout, ry, rg, ru, n, what);
        free(hb); free(hd);
        gpucore_tensor_destroy(gate); gpucore_tensor_destroy(up); gpucore_tensor_destroy(both);
        gpucore_tensor_destroy(dout);
    }
}

static void ref_resnorm(const double *h, const double *g, const double *b, int64_t rows, int64_t cols, double eps,
                        int layer, double *y, double *mean, double *rstd)
{
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < cols && layer; c++) m += h[r * cols + c];
        m /= layer ? (double)cols : 1;
        if (!layer) m = 0;
        for (int64_t c = 0; c < cols; c++) v += (h[r * cols + c] - m) * (h[r * cols + c] - m);
        double rs = 1 / sqrt(v / (double)cols + eps);
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = (h[r * cols + c] - m) * rs * (g ? g[c] : 1) + (b ? b[c] : 0);
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = rs;
    }
}

/* dx = dnorm(dy) + dh; dgamma. */
static void ref_resnorm_bwd(const double *h, const double *g, const double *dy, const double *dh, int64_t rows,
                            int64_t cols, double eps, int layer, double *dx, double *dg)
{
    for (int64_t c = 0; c < cols; c++) dg[c] = 0;
    for (int64_t r = 0; r < rows; r++) {
        double m, rs, sg = 0, sgx = 0;
        double *tmp = malloc(sizeof(double) * (size_t)cols);
        ref_resnorm(h + r * cols, NULL, NULL, 1, cols, eps, layer, tmp, &m, &rs);
        for (int64_t c = 0; c < cols; c++) {
            double gg = dy[r * cols + c] * g[c];
            sg += gg;
            sgx += gg * tmp[c];
            dg[c] += dy[r * cols + c] * tmp[c];
        }
        for (int64_t c = 0; c < cols; c++)
            dx[r * cols + c] = rs * (dy[r * cols + c] * g[c] - (layer ? sg / cols : 0) - tmp[c] * sgx / cols) + dh[r * cols + c];
        free(tmp);
    }
}

static void test_resnorm_reference(void)
{
    const int64_t rows = 2, cols = 5, n = 10;
    double *h = rnd(n, -2, 2), *g = rnd(cols, 0.5, 1.5), *w = rnd(n, -1, 1), *dh = rnd(n, -1, 1);
    double y[10], dx[10], dg[5], fd[10];
    for (int layer = 0; layer < 2; layer++) {
        ref_resnorm_bwd(h, g, w, dh, rows, cols, 1e-5, layer, dx, dg);
        for (int64_t i = 0; i < n; i++) {
            double keep = h[i], f[2];
            for (int sg = 0; sg < 2; sg++) {
                h[i] = keep + (sg ? -1e-6 : 1e-6);
                ref_resnorm(h, g, NULL, rows, cols, 1e-5, layer, y, NULL, NULL);
                f[sg] = 0;
                for (int64_t e = 0; e < n; e++) f[sg] += w[e] * y[e] + dh[e] * h[e]; /* L(y, h) */
            }
            h[i] = keep;
            fd[i] = (f[0] - f[1]) / 2e-6;
        }
        check_close(fd, dx, n, 1e-6, "residual norm reference dx vs finite differences");
    }
    free(h); free(g); free(w); free(dh);
}

static void test_resnorm(gpucore_context *ctx, gpucore_dtype dt)
{
    const int64_t rows = 13, cols = 300, shape[2] = {rows, cols}, n = rows * cols, cs[1] = {cols}, rs[1] = {rows};
    for (int layer = 0; layer < 2; layer++) {
        double *hx, *hr, *hg, *hb, *hdy, *hdh;
        gpucore_tensor *x = make_input(ctx, dt, 2, shape, layer, -2, 2, &hx);
        gpucore_tensor *res = make_input(ctx, dt, 2, shape, 0, -2, 2, &hr);
        gpucore_tensor *gam = make_input(ctx, GPUCORE_F32, 1, cs, 0, 0.5, 1.5, &hg);
        gpucore_tensor *bet = make_input(ctx, GPUCORE_F32, 1, cs, 0, -1, 1, &hb);
        gpucore_tensor *dy = make_input(ctx, dt, 2, shape, 0, -1, 1, &hdy), *dh = make_input(ctx, dt, 2, shape, 0, -1, 1, &hdh);
        gpucore_tensor *mean = NULL, *rstd = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, rs, &mean));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, rs, &rstd));
        guarded gy = make_output(ctx, dt, 2, shape, 0);
        char what[96];
        snprintf(what, sizeof what, "residual %s %s", layer ? "layer_norm" : "rms_norm", gpucore_dtype_name(dt));
        /* h written in place over the residual stream (the usual use) */
        CHECK_OK(gpucore_residual_norm(gy.view, res, mean, rstd, x, res, gam, layer ? bet : NULL, layer, 1e-5, NULL));
        double *y = finish_output(&gy, what), *h = read_back(res), *m = read_back(mean), *r = read_back(rstd);
        double *rh = malloc(sizeof(double) * n), *ry = malloc(sizeof(double) * n), rm[13], rr[13];
        for (int64_t i = 0; i < n; i++) rh[i] = hx[i] + hr[i];
        check_close(h, rh, n, tolerance_for(dt, 0), what);
        ref_resnorm(h, hg, layer ? hb : NULL, rows, cols, 1e-5, layer, ry, rm, rr); /* from the stored h */
        check_close(y, ry, n, tolerance_for(dt, 1), what);
        check_close(r, rr, rows, 1e-5, what);
        if (layer) check_close(m, rm, rows, 1e-5, what);
        guarded gdx = make_output(ctx, dt, 2, shape, 1);
        gpucore_tensor *dg = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, cs, &dg));
        CHECK_OK(gpucore_residual_norm_backward(gdx.view, dg, NULL, dy, dh, res, layer ? mean : NULL, rstd, gam, layer, NULL));
        double *dx = finish_output(&gdx, what), *gdg = read_back(dg), *rdx = malloc(sizeof(double) * n), rdg[300];
        ref_resnorm_bwd(h, hg, hdy, hdh, rows, cols, 1e-5, layer, rdx, rdg);
        check_close(dx, rdx, n, tolerance_for(dt, 1), what);
        check_close(gdg, rdg, cols, tolerance_for(dt, 1), what);
        free(hx); free(hr); free(hg); free(hb); free(hdy); free(hdh); free(y); free(h); free(m); free(r); free(rh);
        free(ry); free(dx); free(gdg); free(rdx);
        gpucore_tensor *ts[9] = {x, res, gam, bet, dy, dh, mean, rstd, dg};
        for (int i = 0; i < 9; i++) gpucore_tensor_destroy(ts[i]);
    }
}

static void test_bad_input(gpucore_context *ctx)
{
    const int64_t s4[4] = {1, 2, 4, 8}, t2[2] = {4, 4}, t3[2] = {4, 5}, s2[2] = {4, 8};
    gpucore_tensor *x = NULL, *c = NULL, *cbig = NULL, *a = NULL, *b = NULL, *i32 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, s4, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, t2, &c));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, t3, &cbig));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s2, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, s4, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 2, s2, &i32));
    CHECK_STATUS(gpucore_rotary_embedding(x, x, cbig, cbig, 0, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_rotary_embedding(a, a, c, c, 0, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_glu(a, a, b, GPUCORE_GLU_SWIGLU, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_glu(a, a, a, (gpucore_glu_kind)7, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_glu(i32, i32, i32, GPUCORE_GLU_SWIGLU, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_residual_norm(a, a, NULL, NULL, a, a, NULL, NULL, 0, 1e-5, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_residual_norm(a, b, NULL, NULL, a, a, NULL, NULL, 0, 1e-5, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_OK(gpucore_rotary_embedding(x, x, c, c, 1, NULL)); /* still usable */
    gpucore_tensor *ts[6] = {x, c, cbig, a, b, i32};
    for (int i = 0; i < 6; i++) gpucore_tensor_destroy(ts[i]);
}

static void test_every_dtype(gpucore_context *ctx)
{
    for (int t = 0; t < 3; t++) {
        test_rope(ctx, float_dtypes[t]);
        test_glu(ctx, float_dtypes[t]);
        test_glu_halves(ctx, float_dtypes[t]);
        test_resnorm(ctx, float_dtypes[t]);
    }
}

int main(void)
{
    srand(77);
    test_glu_reference();
    test_resnorm_reference();
    static const device_test_fn tests[] = {test_every_dtype, test_bad_input};
    return run_on_devices("test_transformer", tests, (int)(sizeof tests / sizeof tests[0]));
}
