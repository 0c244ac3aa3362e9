/*
 * test_ops_cross_entropy.c — PyTorch's cross-entropy (gpucore_cross_entropy_forward_ex and
 * gpucore_cross_entropy_backward_ex) on every backend present against a float64 reference
 * computed here: class weights, label smoothing, index targets with ignore_index or
 * probability targets, every reduction; class dim last ([rows, C], the kernels' warp / block /
 * multi-block lengths), class dim 1 with spatial dims ([N, C, d1, d2], PyTorch's rule and an
 * explicit class_dim) and unbatched (C,) logits; strided (staged) logits; channels-last logits
 * (read in place); f32 / f16 / bf16;
 * the forward twice (same bits); bad input (weight, target and loss shapes, target dtype,
 * class_dim, label_smoothing) and out-of-range class indices (NaN rows, documented).
 */
#include "ops_harness.h"

/* One case: logits [outer, C, d1, d2] (nd 4), [outer, C] (nd 2, class dim last) or [C] (nd 1). */
typedef struct ce_case { int64_t outer, C, d1, d2; int nd; int layout; } ce_case;

static const ce_case cases[] = {
    {1, 1, 1, 1, 2, 0}, {9, 17, 1, 1, 2, 1}, {6, 300, 1, 1, 2, 2}, {3, 768, 1, 1, 2, 0},
    {3, 4097, 1, 1, 2, 0}, {2, 70000, 1, 1, 2, 0}, /* rows.cu's warp / block / multi-block switches */
    {1, 13, 1, 1, 1, 0},                           /* unbatched (C,) */
    {2, 5, 3, 4, 4, 0}, {3, 33, 7, 1, 4, 0}, {2, 4097, 3, 1, 4, 0}, {1, 21, 8, 8, 4, 1}, {2, 6, 4, 5, 4, 2},
};

/* The row's index r = o * inner + i; element (o, c, i) of the logits at (o * C + c) * inner + i. */
static double ref_ce_nd(const double *x, const int64_t *t, const double *P, const double *w, double eps,
                        const double *dloss, int red, int64_t outer, int64_t C, int64_t inner, int64_t ignore,
                        double *loss, double *dx)
{
    const int64_t rows = outer * inner;
    double denom = 0, total = 0, *q = malloc(sizeof(double) * (size_t)C), *lp = malloc(sizeof(double) * (size_t)C);
    for (int64_t r = 0; r < rows; r++) denom += P ? 1.0 : t[r] == ignore ? 0.0 : w ? w[t[r]] : 1.0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = (r / inner) * C * inner + r % inner;
        const int skip = !P && t[r] == ignore;
        double m = -INFINITY, s = 0, Q = 0, l = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, x[base + c * inner]);
        for (int64_t c = 0; c < C; c++) s += exp(x[base + c * inner] - m);
        for (int64_t c = 0; c < C; c++) {
            const double wc = w ? w[c] : 1.0;
            lp[c] = x[base + c * inner] - m - log(s);
            q[c] = skip ? 0.0 : P ? wc * ((1 - eps) * P[base + c * inner] + eps / (double)C)
                                  : wc * eps / (double)C + (c == t[r] ? (1 - eps) * wc : 0.0);
            Q += q[c];
            l -= q[c] * lp[c];
        }
        loss[r] = l;
        total += l;
        const double g = red == GPUCORE_LOSS_NONE ? dloss[r] : red == GPUCORE_LOSS_SUM ? dloss[0] : dloss[0] / denom;
        for (int64_t c = 0; c < C; c++) dx[base + c * inner] = skip ? 0.0 : g * (Q * exp(lp[c]) - q[c]);
    }
    free(q);
    free(lp);
    return red == GPUCORE_LOSS_MEAN ? total / denom : total;
}

/* The reference backward against finite differences of its forward (f64), class dim last and 1. */
static void test_finite_differences(void)
{
    enum { O = 2, K = 5, I = 3, N = O * K * I, R = O * I };
    double x[N], P[N], w[K] = {0.5, 2, 1, 0.25, 3}, dl[R] = {0.7, -1.2, 0.4, 2.0, -0.3, 1.1}, dx[N], fd[N], l[R], scratch[N];
    int64_t t[R] = {2, -100, 4, 0, 1, 3};
    for (int i = 0; i < N; i++) { x[i] = sin(0.7 * i) * 2; P[i] = 0.1 + fabs(cos(1.3 * i)); }
    for (int inner = 1; inner <= I; inner += I - 1)
        for (int v = 0; v < 4; v++)
            for (int red = 0; red < 3; red++) {
                const double *pp = v & 1 ? P : NULL, *ww = v & 2 ? w : NULL, eps = v == 0 ? 0.2 : 0.1;
                const int64_t outer = N / K / inner;
                ref_ce_nd(x, t, pp, ww, eps, dl, red, outer, K, inner, -100, l, dx);
                for (int i = 0; i < N; i++) {
                    double keep = x[i], f[2];
                    for (int k = 0; k < 2; k++) {
                        x[i] = keep + (k ? -1e-6 : 1e-6);
                        double tot = ref_ce_nd(x, t, pp, ww, eps, dl, red, outer, K, inner, -100, l, scratch);
                        if (red == GPUCORE_LOSS_NONE) {
                            tot = 0;
                            for (int r = 0; r < outer * inner; r++) tot += dl[r] * l[r];
                        }
                        f[k] = red == GPUCORE_LOSS_NONE ? tot : dl[0] * tot;
                    }
                    x[i] = keep;
                    fd[i] = (f[0] - f[1]) / 2e-6;
                }
                check_close(fd, dx, N, 1e-6, "cross_entropy reference backward vs FD");
            }
}

static gpucore_tensor *index_targets(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape, int64_t n,
                                     int64_t C, int64_t *host)
{
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, nd, shape, &t));
    void *raw = malloc((size_t)(n * 8 + 8));
    for (int64_t r = 0; r < n; r++) {
        host[r] = rand() % 5 == 0 ? -100 : rand() % C;
        if (dt == GPUCORE_I32) ((int32_t *)raw)[r] = (int32_t)host[r];
        else ((int64_t *)raw)[r] = host[r];
    }
    if (n) CHECK_OK(gpucore_copy_from_host(t, raw, n * gpucore_dtype_size(dt)));
    free(raw);
    return t;
}

static void test_cross_entropy_ex(gpucore_context *ctx)
{
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++)
            for (int v = 0; v < 6; v++) /* bit 0: weight, v / 2: 0 index, 1 index + smoothing, 2 probabilities */
                for (int red = 0; red < 3; red++) {
                    const ce_case *k = &cases[ci];
                    const int probs = v / 2 == 2, weighted = v & 1, nd = k->nd;
                    const double eps = v / 2 == 1 ? 0.15 : probs && weighted ? 0.05 : 0.0;
                    const int64_t C = k->C, inner = nd == 4 ? k->d1 * k->d2 : 1, outer = nd == 1 ? 1 : k->outer;
                    const int64_t rows = outer * inner, n = rows * C, one = 1;
                    int64_t xs[4], ts[3];
                    if (nd == 4) { xs[0] = outer; xs[1] = C; xs[2] = k->d1; xs[3] = k->d2; ts[0] = outer; ts[1] = k->d1; ts[2] = k->d2; }
                    else if (nd == 2) { xs[0] = outer; xs[1] = C; ts[0] = outer; }
                    else xs[0] = C;
                    /* class dim: PyTorch's rule, or said explicitly (1 for 4-d, -1 for 2-d) */
                    const int class_dim = (v + red) % 2 ? GPUCORE_CE_CLASS_DIM_TORCH : nd == 4 ? 1 : nd == 2 ? -1 : 0;
                    gpucore_dtype dt = float_dtypes[di], wdt = (red + di) % 2 ? GPUCORE_F32 : dt;
                    double *hx, *hdl, *hP = NULL, *hw = NULL;
                    int64_t *ht = malloc(sizeof(int64_t) * (size_t)(rows + 1));
                    gpucore_tensor *x = make_input(ctx, dt, nd, xs, k->layout, -3, 3, &hx);
                    gpucore_tensor *t = probs ? make_input(ctx, dt, nd, xs, 0, 0, 2.0 / (double)C, &hP) /* rows summing to ~1 */
                                              : index_targets(ctx, (red + v) % 2 ? GPUCORE_I32 : GPUCORE_I64, nd - 1, ts,
                                                              rows, C, ht);
                    gpucore_tensor *w = weighted ? make_input(ctx, wdt, 1, &C, 0, 0.2, 3, &hw) : NULL;
                    const int lnd = red == GPUCORE_LOSS_NONE ? nd - 1 : 1;
                    const int64_t *lshape = red == GPUCORE_LOSS_NONE ? ts : &one;
                    gpucore_tensor *dl = make_input(ctx, dt, lnd, lshape, 0, 0.5, 1.5, &hdl);
                    guarded o = make_output(ctx, red == GPUCORE_LOSS_NONE ? dt : GPUCORE_F32, lnd, lshape, 0);
                    guarded g = make_output(ctx, dt, nd, xs, ci % 3 == 1);
                    CHECK_OK(gpucore_cross_entropy_forward_ex(o.view, x, t, w, -100, (gpucore_loss_reduction)red, eps,
                                                              class_dim, NULL));
                    CHECK_OK(gpucore_cross_entropy_backward_ex(g.view, dl, x, t, w, -100, (gpucore_loss_reduction)red,
                                                               eps, class_dim, NULL));
                    double *lout = finish_output(&o, "cross_entropy_forward_ex");
                    double *gout = finish_output(&g, "cross_entropy_backward_ex");
                    double *rl = malloc(sizeof(double) * (size_t)(rows + 1)), *rg = malloc(sizeof(double) * (size_t)(n + 1));
                    double red_ref = ref_ce_nd(hx, probs ? NULL : ht, hP, hw, eps, hdl, red, outer, C, inner, -100, rl, rg);
                    double denom = 0;
                    for (int64_t r = 0; r < rows; r++) denom += probs || ht[r] != -100;
                    char what[200];
                    snprintf(what, sizeof what, "cross_entropy_ex red %d [%lld, %lld, %lld] %s w=%d eps=%g probs=%d dim=%d",
                             red, (long long)outer, (long long)C, (long long)inner, gpucore_dtype_name(dt), weighted, eps,
                             probs, class_dim);
                    if (red == GPUCORE_LOSS_MEAN && denom == 0) CHECK(isnan(lout[0]));
                    else if (red == GPUCORE_LOSS_NONE) check_close(lout, rl, rows, tolerance_for(dt, 1), what);
                    else check_close(lout, &red_ref, 1, 1e-5, what); /* the reduced loss is f32 */
                    strcat(what, " backward");
                    if (!(red == GPUCORE_LOSS_MEAN && denom == 0)) check_close(gout, rg, n, tolerance_for(dt, 1), what);
                    free(ht); free(hx); free(hdl); free(hP); free(hw); free(lout); free(gout); free(rl); free(rg);
                    gpucore_tensor_destroy(x); gpucore_tensor_destroy(t); gpucore_tensor_destroy(dl);
                    if (w) gpucore_tensor_destroy(w);
                }
}

/* [N, d1, d2, C] data seen as [N, C, d1, d2] (a channels-last tensor): read in place as class-last
 * rows; dlogits of the same layout (in place too) or contiguous (then the operands are staged). */
static gpucore_tensor *channels_last(gpucore_context *ctx, gpucore_dtype dt, const int64_t *xs, double lo, double hi,
                                     int fill_nan)
{
    int64_t bs[4] = {xs[0], xs[2], xs[3], xs[1]};
    gpucore_tensor *b = NULL, *v1 = NULL, *v2 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, 4, bs, &b));
    if (fill_nan) CHECK_OK(gpucore_fill(b, NAN, NULL));
    else CHECK_OK(gpucore_random(b, GPUCORE_UNIFORM, lo, hi, harness_seed++, 0, NULL));
    CHECK_OK(gpucore_tensor_transpose(b, 2, 3, &v1));
    CHECK_OK(gpucore_tensor_transpose(v1, 1, 2, &v2));
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(v1);
    return v2;
}

static void test_channels_last(gpucore_context *ctx)
{
    static const int64_t shapes[][4] = {{2, 7, 3, 5}, {1, 300, 2, 3}};
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 3; di++)
            for (int v = 0; v < 4; v++) /* bit 0: probabilities (+ smoothing), bit 1: dlogits channels-last */
                for (int red = 0; red < 3; red++) {
                    const int64_t *xs = shapes[si], C = xs[1], inner = xs[2] * xs[3], rows = xs[0] * inner, n = rows * C;
                    const int64_t ts[3] = {xs[0], xs[2], xs[3]}, one = 1;
                    const int probs = v & 1;
                    const double eps = probs ? 0.1 : 0.0;
                    gpucore_dtype dt = float_dtypes[di];
                    int64_t *ht = malloc(sizeof(int64_t) * (size_t)rows);
                    double *hdl, *hP = NULL, *hw;
                    gpucore_tensor *x = channels_last(ctx, dt, xs, -3, 3, 0), *P = probs ? channels_last(ctx, dt, xs, 0, 2.0 / (double)C, 0) : NULL;
                    gpucore_tensor *t = probs ? P : index_targets(ctx, GPUCORE_I64, 3, ts, rows, C, ht);
                    gpucore_tensor *w = make_input(ctx, GPUCORE_F32, 1, &C, 0, 0.2, 3, &hw), *dx = NULL, *l = NULL;
                    const int lnd = red == GPUCORE_LOSS_NONE ? 3 : 1;
                    const int64_t *lshape = red == GPUCORE_LOSS_NONE ? ts : &one;
                    gpucore_tensor *dl = make_input(ctx, dt, lnd, lshape, 0, 0.5, 1.5, &hdl);
                    if (v & 2) dx = channels_last(ctx, dt, xs, 0, 0, 1);
                    else {
                        CHECK_OK(gpucore_tensor_create(ctx, dt, 4, xs, &dx));
                        CHECK_OK(gpucore_fill(dx, NAN, NULL));
                    }
                    CHECK_OK(gpucore_tensor_create(ctx, red == GPUCORE_LOSS_NONE ? dt : GPUCORE_F32, lnd, lshape, &l));
                    CHECK_OK(gpucore_cross_entropy_forward_ex(l, x, t, w, -100, (gpucore_loss_reduction)red, eps,
                                                              GPUCORE_CE_CLASS_DIM_TORCH, NULL));
                    CHECK_OK(gpucore_cross_entropy_backward_ex(dx, dl, x, t, w, -100, (gpucore_loss_reduction)red, eps,
                                                               GPUCORE_CE_CLASS_DIM_TORCH, NULL));
                    double *hx = read_back(x), *lout = read_back(l), *gout = read_back(dx);
                    if (probs) hP = read_back(P);
                    double *rl = malloc(sizeof(double) * (size_t)rows), *rg = malloc(sizeof(double) * (size_t)n);
                    double red_ref = ref_ce_nd(hx, probs ? NULL : ht, hP, hw, eps, hdl, red, xs[0], C, inner, -100, rl, rg);
                    double denom = 0;
                    for (int64_t r = 0; r < rows; r++) denom += probs || ht[r] != -100;
                    char what[160];
                    snprintf(what, sizeof what, "cross_entropy channels-last red %d C=%lld %s probs=%d dx_cl=%d", red,
                             (long long)C, gpucore_dtype_name(dt), probs, v / 2);
                    if (!(red == GPUCORE_LOSS_MEAN && denom == 0)) {
                        check_close(lout, red == GPUCORE_LOSS_NONE ? rl : &red_ref, red == GPUCORE_LOSS_NONE ? rows : 1,
                                    red == GPUCORE_LOSS_NONE ? tolerance_for(dt, 1) : 1e-5, what);
                        strcat(what, " backward");
                        check_close(gout, rg, n, tolerance_for(dt, 1), what);
                    }
                    free(ht); free(hx); free(hdl); free(hP); free(hw); free(lout); free(gout); free(rl); free(rg);
                    gpucore_tensor *all[] = {x, w, dx, l, dl, probs ? NULL : t, P};
                    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                        if (all[i]) gpucore_tensor_destroy(all[i]);
                }
}

/* The reduced forward twice gives the same bits (fixed reduction order). */
static void test_determinism(gpucore_context *ctx)
{
    int64_t xs[4] = {4, 37, 9, 11}, ts[3] = {4, 9, 11}, one = 1, ht[4 * 9 * 11];
    double *hw;
    gpucore_tensor *x = make_input(ctx, GPUCORE_F32, 4, xs, 0, -4, 4, NULL), *w = make_input(ctx, GPUCORE_F32, 1, &xs[1], 0, 0.1, 2, &hw);
    gpucore_tensor *t = index_targets(ctx, GPUCORE_I64, 3, ts, 4 * 9 * 11, 37, ht), *l = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &l));
    float a = 0, b = 1;
    for (int k = 0; k < 2; k++) {
        CHECK_OK(gpucore_cross_entropy_forward_ex(l, x, t, w, -100, GPUCORE_LOSS_MEAN, 0.1, 1, NULL));
        CHECK_OK(gpucore_copy_to_host(k ? &b : &a, 4, l));
    }
    CHECK(memcmp(&a, &b, 4) == 0 && a == a);
    free(hw);
    gpucore_tensor_destroy(x); gpucore_tensor_destroy(w); gpucore_tensor_destroy(t); gpucore_tensor_destroy(l);
}

static void test_bad_input(gpucore_context *ctx)
{
    int64_t xs[4] = {2, 5, 3, 4}, ts[3] = {2, 3, 4}, bad_ts[3] = {2, 5, 3}, c4 = 4, c5 = 5, one = 1;
    gpucore_tensor *x = make_input(ctx, GPUCORE_F32, 4, xs, 0, -1, 1, NULL), *xb = make_input(ctx, GPUCORE_BF16, 4, xs, 0, 0, 1, NULL);
    gpucore_tensor *w4 = make_input(ctx, GPUCORE_F32, 1, &c4, 0, 0, 1, NULL), *w5 = make_input(ctx, GPUCORE_F32, 1, &c5, 0, 0, 1, NULL);
    gpucore_tensor *tf = make_input(ctx, GPUCORE_F32, 3, ts, 0, 0, 1, NULL), *l1 = NULL, *ln = NULL, *lbad = NULL, *dx = NULL;
    int64_t ht[24], hb[30];
    gpucore_tensor *t = index_targets(ctx, GPUCORE_I32, 3, ts, 24, 5, ht), *tb = index_targets(ctx, GPUCORE_I64, 3, bad_ts, 30, 5, hb);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &l1));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, ts, &ln));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, bad_ts, &lbad));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, xs, &dx));
    const int T = GPUCORE_CE_CLASS_DIM_TORCH;
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, w4, -100, GPUCORE_LOSS_SUM, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_backward_ex(dx, l1, x, t, w4, -100, GPUCORE_LOSS_SUM, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, tb, w5, -100, GPUCORE_LOSS_SUM, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, w5, -100, GPUCORE_LOSS_SUM, 0, -1, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, tf, NULL, -100, GPUCORE_LOSS_SUM, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, xb, NULL, -100, GPUCORE_LOSS_SUM, 0, T, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy(l1, x, tf, -100, GPUCORE_LOSS_SUM, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(lbad, x, t, NULL, -100, GPUCORE_LOSS_NONE, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(ln, x, t, NULL, -100, GPUCORE_LOSS_MEAN, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, NULL, -100, GPUCORE_LOSS_SUM, 0, 4, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, NULL, -100, GPUCORE_LOSS_SUM, 0, -5, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, NULL, -100, GPUCORE_LOSS_SUM, -0.1, T, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_cross_entropy_backward_ex(dx, l1, x, t, NULL, -100, GPUCORE_LOSS_SUM, NAN, 1, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, NULL, -100, (gpucore_loss_reduction)7, 0, T, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_cross_entropy_forward_ex(l1, x, t, l1, -100, GPUCORE_LOSS_SUM, 0, T, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    /* class indices outside [0, C) (not ignore_index): NaN loss for that row only (not checked on the host) */
    int32_t raw[24];
    for (int i = 0; i < 24; i++) raw[i] = i == 5 ? 7 : i == 9 ? -3 : i % 5;
    CHECK_OK(gpucore_copy_from_host(t, raw, sizeof raw));
    CHECK_OK(gpucore_cross_entropy_forward_ex(ln, x, t, w5, -100, GPUCORE_LOSS_NONE, 0.1, T, NULL));
    float hl[24];
    CHECK_OK(gpucore_copy_to_host(hl, sizeof hl, ln));
    for (int i = 0; i < 24; i++) CHECK((i == 5 || i == 9) ? isnan(hl[i]) : isfinite(hl[i]));
    CHECK_OK(gpucore_cross_entropy_forward_ex(l1, x, t, NULL, -100, GPUCORE_LOSS_MEAN, 0, T, NULL));
    CHECK_OK(gpucore_copy_to_host(hl, 4, l1));
    CHECK(isnan(hl[0]));
    gpucore_tensor *all[] = {x, xb, w4, w5, tf, l1, ln, lbad, dx, t, tb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
}

int main(void)
{
    srand(2323);
    test_finite_differences();
    static const device_test_fn tests[] = {test_cross_entropy_ex, test_channels_last, test_determinism, test_bad_input};
    return run_on_devices("test_ops_cross_entropy", tests, (int)(sizeof tests / sizeof tests[0]));
}
