/*
 * test_conv.c — convolution forward, backward-data and backward-filter on every
 * backend present, against a float64 reference computed here with direct nested
 * loops, for a grid of kernels (1x1, 3x3, 5x5, 7x7), strides 1/2, padding
 * 0/1/same, dilation 2, groups 1/2/depthwise, batch 1 and odd sizes, both
 * layouts, a strided (permuted) input, 1-D, and f32/f16/bf16. Outputs live in
 * poisoned buffers with guard bands. On the CPU the backward results are also
 * checked by finite differences of the library's own forward (the map is
 * linear, so a central difference with a step of 1 is exact up to rounding).
 * Then determinism (identical bits on reruns) and bad input.
 *
 * Tolerances (DESIGN.md): fp16/bf16 1e-2; fp32 1e-5, the "reduction" bound,
 * because each output sums up to C·R·S (backward filter: N·P·Q) products in
 * fp32, whose rounding grows with the length of the sum.
 */
#include "ops_harness.h"

typedef struct conv_case {
    const char *name;
    int spatial;           /* 2 or 1 (1-D: H = R = 1) */
    int64_t n, c, h, w, k, r, s;
    int64_t stride, pad, dil, groups;
    int same, relu, permuted_x;
} conv_case;

static const conv_case cases[] = {
    {"1x1", 2, 2, 8, 7, 7, 6, 1, 1, 1, 0, 1, 1, 0, 0, 0},
    {"3x3 pad1 batch1", 2, 1, 4, 9, 8, 5, 3, 3, 1, 1, 1, 1, 0, 1, 0},
    {"3x3 stride2 pad1 odd", 2, 3, 3, 11, 10, 4, 3, 3, 2, 1, 1, 1, 0, 0, 0},
    {"5x5 same", 2, 2, 2, 8, 8, 3, 5, 5, 1, 0, 1, 1, 1, 0, 0},
    {"7x7 stride2 pad3", 2, 1, 3, 13, 13, 4, 7, 7, 2, 3, 1, 1, 0, 1, 0},
    {"3x3 dilation2 pad2", 2, 2, 4, 10, 9, 4, 3, 3, 1, 2, 2, 1, 0, 0, 0},
    {"3x3 groups2", 2, 3, 4, 7, 7, 6, 3, 3, 1, 1, 1, 2, 0, 0, 0},
    {"depthwise x2 stride2", 2, 2, 6, 9, 9, 12, 3, 3, 2, 1, 1, 6, 0, 1, 0},
    {"depthwise 5x5 same", 2, 1, 5, 8, 8, 5, 5, 5, 1, 0, 1, 5, 1, 0, 0},
    {"3x3 strided input", 2, 2, 3, 6, 7, 4, 3, 3, 1, 1, 1, 1, 0, 0, 1},
    {"1-D k3 pad1", 1, 2, 3, 1, 16, 4, 1, 3, 1, 1, 1, 1, 0, 0, 0},
};

/* Physical shape of a logical [a, b, h, w] tensor (x, y: a = n, b = c; filter:
 * a = k, b = c/g) under the layout; 1-D drops h. Returns ndim. */
static int phys_shape(int layout, int spatial, int64_t a, int64_t b, int64_t h, int64_t w, int64_t *shape)
{
    int nd = 0;
    shape[nd++] = a;
    if (layout == GPUCORE_CONV_NCHW) {
        shape[nd++] = b;
        if (spatial == 2) shape[nd++] = h;
        shape[nd++] = w;
    } else {
        if (spatial == 2) shape[nd++] = h;
        shape[nd++] = w;
        shape[nd++] = b;
    }
    return nd;
}

/* Row-major index in the physical tensor of logical element (a, b, h, w). */
static int64_t phys_index(int layout, int64_t A, int64_t B, int64_t H, int64_t W, int64_t a, int64_t b, int64_t h,
                          int64_t w)
{
    (void)A;
    if (layout == GPUCORE_CONV_NCHW) return ((a * B + b) * H + h) * W + w;
    return ((a * H + h) * W + w) * B + b;
}

static double round_to(double v, gpucore_dtype dt)
{
    float f = (float)v;
    if (dt == GPUCORE_F16) return gpucore_f16_to_f32(gpucore_f32_to_f16(f));
    if (dt == GPUCORE_BF16) return gpucore_bf16_to_f32(gpucore_f32_to_bf16(f));
    return f;
}

static uint32_t lcg_state = 2463534242u;
static double urand(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return ((lcg_state >> 8) / 16777216.0) * 2.0 - 1.0;
}

/* Random logical [A, B, H, W] values rounded to dt. */
static double *random_logical(int64_t count, gpucore_dtype dt)
{
    double *v = malloc(sizeof(double) * (size_t)count);
    for (int64_t i = 0; i < count; i++) v[i] = round_to(urand(), dt);
    return v;
}

/* A tensor holding logical values (NCHW order in `vals`) in the layout. */
static gpucore_tensor *upload(gpucore_context *ctx, gpucore_dtype dt, int layout, int spatial, int64_t A, int64_t B,
                              int64_t H, int64_t W, const double *vals)
{
    int64_t shape[4];
    int nd = phys_shape(layout, spatial, A, B, H, W, shape);
    int64_t count = A * B * H * W, es = gpucore_dtype_size(dt);
    unsigned char *raw = malloc((size_t)(count * es));
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    float f = (float)vals[((a * B + b) * H + h) * W + w];
                    int64_t pi = phys_index(layout, A, B, H, W, a, b, h, w);
                    if (dt == GPUCORE_F32) memcpy(raw + pi * 4, &f, 4);
                    else {
                        uint16_t u = dt == GPUCORE_F16 ? gpucore_f32_to_f16(f) : gpucore_f32_to_bf16(f);
                        memcpy(raw + pi * 2, &u, 2);
                    }
                }
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, nd, shape, &t));
    CHECK_OK(gpucore_copy_from_host(t, raw, count * es));
    free(raw);
    return t;
}

/* The same logical NCHW tensor stored as NHWC and viewed (permuted) as NCHW: a strided input. */
static gpucore_tensor *upload_permuted_nchw(gpucore_context *ctx, gpucore_dtype dt, int64_t N, int64_t C, int64_t H,
                                            int64_t W, const double *vals)
{
    gpucore_tensor *nhwc = upload(ctx, dt, GPUCORE_CONV_NHWC, 2, N, C, H, W, vals), *v = NULL;
    const int perm[4] = {0, 3, 1, 2};
    CHECK_OK(gpucore_tensor_permute(nhwc, perm, &v));
    gpucore_tensor_destroy(nhwc);
    return v;
}

/* Physical (row-major) values -> logical NCHW order. */
static double *to_logical(const double *phys, int layout, int64_t A, int64_t B, int64_t H, int64_t W)
{
    double *out = malloc(sizeof(double) * (size_t)(A * B * H * W));
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    out[((a * B + b) * H + h) * W + w] = phys[phys_index(layout, A, B, H, W, a, b, h, w)];
    return out;
}

typedef struct geom {
    int64_t n, c, h, w, k, r, s, p, q, cg, kg, sh, sw, ph, pw, dh, dw, g;
} geom;

static geom geom_of(const conv_case *cc)
{
    geom g = {cc->n, cc->c, cc->h, cc->w, cc->k, cc->r, cc->s, 0, 0, cc->c / cc->groups, cc->k / cc->groups,
              cc->spatial == 2 ? cc->stride : 1, cc->stride, cc->spatial == 2 ? cc->pad : 0, cc->pad,
              cc->spatial == 2 ? cc->dil : 1, cc->dil, cc->groups};
    if (cc->same) { g.ph = g.dh * (g.r - 1) / 2; g.pw = g.dw * (g.s - 1) / 2; }
    g.p = (g.h + 2 * g.ph - g.dh * (g.r - 1) - 1) / g.sh + 1;
    g.q = (g.w + 2 * g.pw - g.dw * (g.s - 1) - 1) / g.sw + 1;
    return g;
}

#define XI(n_, c_, h_, w_) ((((n_) * G.c + (c_)) * G.h + (h_)) * G.w + (w_))
#define WI(k_, c_, r_, s_) ((((k_) * G.cg + (c_)) * G.r + (r_)) * G.s + (s_))
#define YI(n_, k_, p_, q_) ((((n_) * G.k + (k_)) * G.p + (p_)) * G.q + (q_))

/* float64 references, logical NCHW order: y = conv(x, w) + b (ReLU), dx, dw. */
static void reference(const geom *gp, const double *x, const double *w, const double *b, const double *dy, int relu,
                      double *y, double *dx, double *dw)
{
    const geom G = *gp;
    memset(dx, 0, sizeof(double) * (size_t)(G.n * G.c * G.h * G.w));
    memset(dw, 0, sizeof(double) * (size_t)(G.k * G.cg * G.r * G.s));
    for (int64_t n = 0; n < G.n; n++)
        for (int64_t k = 0; k < G.k; k++)
            for (int64_t p = 0; p < G.p; p++)
                for (int64_t q = 0; q < G.q; q++) {
                    double acc = b ? b[k] : 0;
                    const int64_t grp = k / G.kg;
                    for (int64_t c = 0; c < G.cg; c++)
                        for (int64_t r = 0; r < G.r; r++)
                            for (int64_t s = 0; s < G.s; s++) {
                                int64_t h = p * G.sh - G.ph + r * G.dh, ww = q * G.sw - G.pw + s * G.dw;
                                if (h < 0 || h >= G.h || ww < 0 || ww >= G.w) continue;
                                int64_t ci = grp * G.cg + c;
                                acc += x[XI(n, ci, h, ww)] * w[WI(k, c, r, s)];
                                dx[XI(n, ci, h, ww)] += dy[YI(n, k, p, q)] * w[WI(k, c, r, s)];
                                dw[WI(k, c, r, s)] += dy[YI(n, k, p, q)] * x[XI(n, ci, h, ww)];
                            }
                    y[YI(n, k, p, q)] = relu && acc < 0 ? 0 : acc;
                }
}

static double tol_of(gpucore_dtype dt) { return tolerance_for(dt, 1); }

static int not_supported_reported;

/* Run one case on one context; returns 0 if the backend has no convolution. */
static int run_case(gpucore_context *ctx, const char *dev, const conv_case *cc, gpucore_dtype dt, int layout)
{
    const geom G = geom_of(cc);
    const int sp = cc->spatial;
    char what[256];
    snprintf(what, sizeof what, "%s %s %s %s", dev, cc->name, gpucore_dtype_name(dt),
             layout == GPUCORE_CONV_NCHW ? "NCHW" : "NHWC");
    const int64_t nx = G.n * G.c * G.h * G.w, nw = G.k * G.cg * G.r * G.s, ny = G.n * G.k * G.p * G.q;
    double *x = random_logical(nx, dt), *w = random_logical(nw, dt), *b = random_logical(G.k, dt);
    double *dy = random_logical(ny, dt);
    double *yr = malloc(sizeof(double) * (size_t)ny), *dxr = malloc(sizeof(double) * (size_t)nx),
           *dwr = malloc(sizeof(double) * (size_t)nw);
    reference(&G, x, w, b, dy, cc->relu, yr, dxr, dwr);

    gpucore_tensor *tx = cc->permuted_x && layout == GPUCORE_CONV_NCHW ? upload_permuted_nchw(ctx, dt, G.n, G.c, G.h, G.w, x)
                                                                        : upload(ctx, dt, layout, sp, G.n, G.c, G.h, G.w, x);
    gpucore_tensor *tw = upload(ctx, dt, layout, sp, G.k, G.cg, G.r, G.s, w);
    gpucore_tensor *tdy = upload(ctx, dt, layout, sp, G.n, G.k, G.p, G.q, dy);
    gpucore_tensor *tb = NULL;
    int64_t kdim = G.k;
    CHECK_OK(gpucore_tensor_create(ctx, dt, 1, &kdim, &tb));
    {
        unsigned char raw[4 * 64];
        for (int64_t k = 0; k < G.k; k++) {
            float f = (float)b[k];
            if (dt == GPUCORE_F32) memcpy(raw + k * 4, &f, 4);
            else {
                uint16_t u = dt == GPUCORE_F16 ? gpucore_f32_to_f16(f) : gpucore_f32_to_bf16(f);
                memcpy(raw + k * 2, &u, 2);
            }
        }
        CHECK_OK(gpucore_copy_from_host(tb, raw, G.k * gpucore_dtype_size(dt)));
    }
    gpucore_conv_options o;
    gpucore_conv_options_init(&o);
    o.layout = layout;
    o.stride_h = cc->stride; o.stride_w = cc->stride;
    o.pad_h = cc->pad; o.pad_w = cc->pad;
    o.dil_h = cc->dil; o.dil_w = cc->dil;
    o.groups = cc->groups;
    o.padding_same = cc->same;
    o.activation = cc->relu ? GPUCORE_ACT_RELU : GPUCORE_ACT_NONE;
    o.allow_tf32 = 0;

    int64_t yshape[4], xshape[4], wshape[4];
    int nd = phys_shape(layout, sp, G.n, G.k, G.p, G.q, yshape);
    phys_shape(layout, sp, G.n, G.c, G.h, G.w, xshape);
    phys_shape(layout, sp, G.k, G.cg, G.r, G.s, wshape);
    int ond = 0;
    int64_t oshape[4];
    CHECK_OK(gpucore_conv_output_shape(tx, tw, &o, &ond, oshape));
    CHECK(ond == nd && memcmp(oshape, yshape, sizeof(int64_t) * (size_t)nd) == 0);

    int supported = 1;
    guarded gy = make_output(ctx, dt, nd, yshape, 0);
    gpucore_status st = gpucore_conv_forward(tx, tw, tb, gy.view, &o, NULL);
    if (st == GPUCORE_ERR_NOT_SUPPORTED) {
        if (!not_supported_reported++) {
            printf("SKIP %s convolution: %s\n", dev, gpucore_last_error());
            check_skipped++;
        }
        supported = 0;
        gpucore_tensor_destroy(gy.view);
        gpucore_tensor_destroy(gy.buf);
    } else {
        CHECK(st == GPUCORE_OK);
        if (st) fprintf(stderr, "  %s forward: %s\n", what, gpucore_last_error());
        double *yo = finish_output(&gy, what), *yl = to_logical(yo, layout, G.n, G.k, sp == 2 ? G.p : 1, G.q);
        char w2[300];
        snprintf(w2, sizeof w2, "%s forward", what);
        check_close(yl, yr, ny, tol_of(dt), w2);
        free(yo); free(yl);

        o.activation = GPUCORE_ACT_NONE;
        guarded gdx = make_output(ctx, dt, nd, xshape, 0);
        CHECK_OK(gpucore_conv_backward_data(tdy, tw, gdx.view, &o, NULL));
        double *dxo = finish_output(&gdx, what), *dxl = to_logical(dxo, layout, G.n, G.c, sp == 2 ? G.h : 1, G.w);
        snprintf(w2, sizeof w2, "%s backward data", what);
        check_close(dxl, dxr, nx, tol_of(dt), w2);

        guarded gdw = make_output(ctx, dt, nd, wshape, 0);
        CHECK_OK(gpucore_conv_backward_filter(tdy, tx, gdw.view, &o, NULL));
        double *dwo = finish_output(&gdw, what), *dwl = to_logical(dwo, layout, G.k, G.cg, sp == 2 ? G.r : 1, G.s);
        snprintf(w2, sizeof w2, "%s backward filter", what);
        check_close(dwl, dwr, nw, tol_of(dt), w2);

        /* Finite differences of the library's forward (f32, CPU): L = Σ y·dy is linear in x
         * and w, so (L(v + e) − L(v − e)) / 2 is the exact derivative up to rounding. */
        if (dt == GPUCORE_F32 && strcmp(dev, "cpu") == 0 && !cc->relu) {
            gpucore_tensor *ty = NULL;
            CHECK_OK(gpucore_tensor_create(ctx, dt, nd, yshape, &ty));
            double dxn = 0, dwn = 0;
            for (int64_t i = 0; i < nx; i++) dxn += dxl[i] * dxl[i];
            for (int64_t i = 0; i < nw; i++) dwn += dwl[i] * dwl[i];
            dxn = sqrt(dxn / (double)nx); dwn = sqrt(dwn / (double)nw);
            for (int which = 0; which < 2; which++)
                for (int t = 0; t < 3; t++) {
                    double *vals = which ? w : x;
                    const int64_t cnt = which ? nw : nx, i = (int64_t)((urand() + 1) * 0.5 * (double)(cnt - 1));
                    double L[2];
                    for (int sgn = 0; sgn < 2; sgn++) {
                        double saved = vals[i];
                        vals[i] += sgn ? -1.0 : 1.0;
                        gpucore_tensor *tv = which ? upload(ctx, dt, layout, sp, G.k, G.cg, G.r, G.s, w)
                                                   : upload(ctx, dt, layout, sp, G.n, G.c, G.h, G.w, x);
                        vals[i] = saved;
                        CHECK_OK(gpucore_conv_forward(which ? tx : tv, which ? tv : tw, NULL, ty, &o, NULL));
                        double *yv = read_back(ty), *yvl = to_logical(yv, layout, G.n, G.k, sp == 2 ? G.p : 1, G.q);
                        L[sgn] = 0;
                        for (int64_t j = 0; j < ny; j++) L[sgn] += yvl[j] * dy[j];
                        free(yv); free(yvl);
                        gpucore_tensor_destroy(tv);
                    }
                    double fd = (L[0] - L[1]) / 2.0, got = which ? dwl[i] : dxl[i];
                    double scale = which ? dwn : dxn;
                    int ok = fabs(fd - got) <= 1e-4 * (scale + fabs(got)) + 1e-6;
                    CHECK(ok);
                    if (!ok)
                        fprintf(stderr, "  %s: finite difference of d%s[%lld] is %.8g but backward gave %.8g\n", what,
                                which ? "w" : "x", (long long)i, fd, got);
                }
            gpucore_tensor_destroy(ty);
        }
        free(dxo); free(dxl); free(dwo); free(dwl);
    }
    gpucore_tensor_destroy(tx); gpucore_tensor_destroy(tw); gpucore_tensor_destroy(tdy); gpucore_tensor_destroy(tb);
    free(x); free(w); free(b); free(dy); free(yr); free(dxr); free(dwr);
    return supported;
}

/* Deterministic mode: the same call twice gives identical bits (forward and both backwards). */
static void test_determinism(gpucore_context *ctx, gpucore_dtype dt)
{
    const conv_case cc = {"det", 2, 3, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 0, 0, 0};
    const geom G = geom_of(&cc);
    double *x = random_logical(G.n * G.c * G.h * G.w, dt), *w = random_logical(G.k * G.cg * G.r * G.s, dt),
           *dy = random_logical(G.n * G.k * G.p * G.q, dt);
    gpucore_tensor *tx = upload(ctx, dt, GPUCORE_CONV_NHWC, 2, G.n, G.c, G.h, G.w, x);
    gpucore_tensor *tw = upload(ctx, dt, GPUCORE_CONV_NHWC, 2, G.k, G.cg, G.r, G.s, w);
    gpucore_tensor *tdy = upload(ctx, dt, GPUCORE_CONV_NHWC, 2, G.n, G.k, G.p, G.q, dy);
    gpucore_conv_options o;
    gpucore_conv_options_init(&o);
    o.layout = GPUCORE_CONV_NHWC;
    o.pad_h = o.pad_w = 1;
    o.algo = GPUCORE_CONV_ALGO_DETERMINISTIC;
    int64_t ys[4] = {G.n, G.p, G.q, G.k}, xs[4] = {G.n, G.h, G.w, G.c}, wsh[4] = {G.k, G.r, G.s, G.cg};
    for (int op = 0; op < 3; op++) {
        const int64_t *shape = op == 0 ? ys : op == 1 ? xs : wsh;
        gpucore_tensor *out[2] = {NULL, NULL};
        unsigned char *bits[2];
        int64_t nbytes = 0;
        for (int rep = 0; rep < 2; rep++) {
            CHECK_OK(gpucore_tensor_create(ctx, dt, 4, shape, &out[rep]));
            CHECK_OK(gpucore_fill(out[rep], rep ? -7.0 : 3.0, NULL)); /* poison differently */
            if (op == 0) CHECK_OK(gpucore_conv_forward(tx, tw, NULL, out[rep], &o, NULL));
            else if (op == 1) CHECK_OK(gpucore_conv_backward_data(tdy, tw, out[rep], &o, NULL));
            else CHECK_OK(gpucore_conv_backward_filter(tdy, tx, out[rep], &o, NULL));
            nbytes = gpucore_tensor_nbytes(out[rep]);
            bits[rep] = malloc((size_t)nbytes);
            CHECK_OK(gpucore_copy_to_host(bits[rep], nbytes, out[rep]));
        }
        CHECK(memcmp(bits[0], bits[1], (size_t)nbytes) == 0);
        for (int rep = 0; rep < 2; rep++) { free(bits[rep]); gpucore_tensor_destroy(out[rep]); }
    }
    gpucore_tensor_destroy(tx); gpucore_tensor_destroy(tw); gpucore_tensor_destroy(tdy);
    free(x); free(w); free(dy);
}

static gpucore_tensor *mk(gpucore_context *ctx, gpucore_dtype dt, int nd, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t s[4] = {a, b, c, d};
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, dt, nd, s, &t));
    return t;
}

static void test_bad_input(gpucore_context *ctx, int supported)
{
    gpucore_conv_options o;
    gpucore_conv_options_init(&o);
    gpucore_tensor *x = mk(ctx, GPUCORE_F32, 4, 2, 3, 8, 8), *w = mk(ctx, GPUCORE_F32, 4, 5, 4, 3, 3);
    gpucore_tensor *y = mk(ctx, GPUCORE_F32, 4, 2, 5, 6, 6), *w3 = mk(ctx, GPUCORE_F32, 4, 5, 3, 3, 3);
    /* channel mismatch: x has 3 channels, w expects 4 */
    CHECK_STATUS(gpucore_conv_forward(x, w, NULL, y, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "3 channels") != NULL);
    /* group mismatch: 3 channels in 2 groups */
    o.groups = 2;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    o.groups = 1;
    /* kernel bigger than the padded input */
    gpucore_tensor *wbig = mk(ctx, GPUCORE_F32, 4, 5, 3, 11, 11);
    CHECK_STATUS(gpucore_conv_forward(x, wbig, NULL, y, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "padded input") != NULL);
    /* zero and negative stride, negative padding, zero dilation */
    o.stride_h = 0;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.stride_h = -2;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.stride_h = 1; o.pad_w = -1;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.pad_w = 0; o.dil_h = 0;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.dil_h = 1;
    /* wrong output shape */
    gpucore_tensor *ybad = mk(ctx, GPUCORE_F32, 4, 2, 5, 7, 6);
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, ybad, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    /* layout mismatch: NCHW tensors read as NHWC (C would be 8, not 3) */
    o.layout = GPUCORE_CONV_NHWC;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    o.layout = 7;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.layout = GPUCORE_CONV_NCHW;
    /* dtype mismatch, and a dtype convolution does not take */
    gpucore_tensor *wh = mk(ctx, GPUCORE_F16, 4, 5, 3, 3, 3), *xi = mk(ctx, GPUCORE_I32, 4, 2, 3, 8, 8);
    CHECK_STATUS(gpucore_conv_forward(x, wh, NULL, y, &o, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_conv_forward(xi, w3, NULL, y, &o, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    /* bias of the wrong length; ReLU on a backward call; unknown activation/algo */
    gpucore_tensor *b4 = mk(ctx, GPUCORE_F32, 1, 4, 0, 0, 0);
    CHECK_STATUS(gpucore_conv_forward(x, w3, b4, y, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    o.activation = GPUCORE_ACT_RELU;
    CHECK_STATUS(gpucore_conv_backward_data(y, w3, x, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.activation = GPUCORE_ACT_GELU_TANH;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.activation = GPUCORE_ACT_NONE; o.algo = 9;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.algo = 0;
    /* padding 'same' with an even kernel */
    gpucore_tensor *w2 = mk(ctx, GPUCORE_F32, 4, 5, 3, 2, 2);
    o.padding_same = 1;
    CHECK_STATUS(gpucore_conv_forward(x, w2, NULL, y, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    o.padding_same = 0;
    /* NULLs, a bad struct_size, an output overlapping its input, dims */
    CHECK_STATUS(gpucore_conv_forward(NULL, w3, NULL, y, &o, NULL), GPUCORE_ERR_NULL_POINTER);
    gpucore_conv_options small = o;
    small.struct_size = 8;
    CHECK_STATUS(gpucore_conv_forward(x, w3, NULL, y, &small, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *sq = mk(ctx, GPUCORE_F32, 4, 1, 3, 8, 8), *sqw = mk(ctx, GPUCORE_F32, 4, 3, 3, 1, 1);
    CHECK_STATUS(gpucore_conv_forward(sq, sqw, NULL, sq, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *x2 = mk(ctx, GPUCORE_F32, 2, 3, 8, 0, 0);
    CHECK_STATUS(gpucore_conv_forward(x2, w3, NULL, y, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    gpucore_conv_stats stats = {0};
    CHECK_STATUS(gpucore_conv_get_stats(ctx, &stats), GPUCORE_ERR_INVALID_ARGUMENT);
    stats.struct_size = sizeof stats;
    CHECK_OK(gpucore_conv_get_stats(ctx, &stats));
    /* the library is still usable */
    if (supported) CHECK_OK(gpucore_conv_forward(x, w3, NULL, y, &o, NULL));
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_tensor *all[] = {x, w, y, w3, wbig, ybad, wh, xi, b4, w2, sq, sqw, x2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) gpucore_tensor_destroy(all[i]);
}

int main(void)
{
    (void)make_input; /* ops_harness.h's, unused here */
    const char *devs[4];
    int nd = test_devices(devs, 4);
    for (int di = 0; di < nd; di++) {
        gpucore_context *ctx = NULL;
        CHECK_OK(gpucore_context_create(devs[di], &ctx));
        if (!ctx) continue;
        not_supported_reported = 0;
        int supported = 1;
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases && supported; ci++)
            for (int li = 0; li < 2 && supported; li++)
                for (int ti = 0; ti < 3 && supported; ti++) {
                    if (cases[ci].permuted_x && li == GPUCORE_CONV_NHWC) continue;
                    supported = run_case(ctx, devs[di], &cases[ci], float_dtypes[ti], li);
                }
        if (supported) {
            for (int ti = 0; ti < 3; ti++) test_determinism(ctx, float_dtypes[ti]);
            if (strcmp(devs[di], "cpu") != 0) {
                gpucore_conv_stats st = {.struct_size = sizeof st};
                CHECK_OK(gpucore_conv_get_stats(ctx, &st));
                printf("%s conv plan cache: %lld plans, %lld hits, %lld misses\n", devs[di],
                       (long long)st.plans_cached, (long long)st.cache_hits, (long long)st.cache_misses);
            }
        }
        test_bad_input(ctx, supported);
        gpucore_context_destroy(ctx);
    }
    return check_finish("test_conv");
}
