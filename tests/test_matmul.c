/*
 * test_matmul.c — matmul and the linear layer on every backend present, against
 * a float64 reference computed on the host from the operands as stored (after
 * rounding to their dtype). Outputs live inside a larger poisoned buffer: the
 * view's elements must all be written, the guard band around them never.
 * Epilogues are checked against the unfused computation (plain product, then
 * the epilogue in f64); the linear layer's backward against central finite
 * differences of an f64 forward on the host. torch.matmul's shapes (gpucore_matmul_nd:
 * 1-d operands, broadcast batch dims, strided a and d) against the same reference.
 * Bad input: each a status and a message.
 */
#include <stdint.h>
#include "check.h"
#include "numeric.h"

#define POISON16 0xFFFFu       /* NaN in f16 and bf16 */
#define POISON32 0xFFFFFFFFu   /* NaN in f32 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) /* [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static double round_to(int dt, double v)
{
    switch (dt) {
    case GPUCORE_F32: return (float)v;
    case GPUCORE_F16: return gpucore_f16_to_f32(gpucore_f32_to_f16((float)v));
    case GPUCORE_BF16: return gpucore_bf16_to_f32(gpucore_f32_to_bf16((float)v));
    default: return v;
    }
}

static void to_bytes(int dt, const double *v, int64_t n, void *out)
{
    for (int64_t i = 0; i < n; i++) {
        if (dt == GPUCORE_F32) ((float *)out)[i] = (float)v[i];
        else if (dt == GPUCORE_F16) ((uint16_t *)out)[i] = gpucore_f32_to_f16((float)v[i]);
        else ((uint16_t *)out)[i] = gpucore_f32_to_bf16((float)v[i]);
    }
}

static double from_bytes(int dt, const void *p, int64_t i)
{
    if (dt == GPUCORE_F32) return ((const float *)p)[i];
    if (dt == GPUCORE_F16) return gpucore_f16_to_f32(((const uint16_t *)p)[i]);
    return gpucore_bf16_to_f32(((const uint16_t *)p)[i]);
}

static int is_poison(int dt, const void *p, int64_t i)
{
    if (dt == GPUCORE_F32) return ((const uint32_t *)p)[i] == POISON32;
    return ((const uint16_t *)p)[i] == POISON16;
}

/* A tensor of `shape` (row-major) holding v (rounded to dt). */
static gpucore_tensor *upload(gpucore_context *ctx, int dt, int ndim, const int64_t *shape, const double *v)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, (gpucore_dtype)dt, ndim, shape, &t));
    if (!t) return NULL;
    void *buf = malloc((size_t)(n ? n : 1) * 4);
    to_bytes(dt, v, n, buf);
    CHECK_OK(gpucore_copy_from_host(t, buf, n * gpucore_dtype_size((gpucore_dtype)dt)));
    free(buf);
    return t;
}

static double *random_values(int dt, int64_t n)
{
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = round_to(dt, urand());
    return v;
}

/* An output [batch?, rows, cols] inside a poisoned [batch, rows+2, cols+3] buffer
 * (one guard row above and below, one guard column left, two right). */
typedef struct guarded {
    gpucore_tensor *big, *view;
    int dt;
    int64_t batch, rows, cols, nbig;
} guarded;

static void guarded_make(gpucore_context *ctx, int dt, int64_t batch, int64_t rows, int64_t cols, int ndim, guarded *g)
{
    memset(g, 0, sizeof *g);
    g->dt = dt; g->batch = batch; g->rows = rows; g->cols = cols;
    int64_t shape[3] = {batch, rows + 2, cols + 3};
    CHECK_OK(gpucore_tensor_create(ctx, (gpucore_dtype)dt, 3, shape, &g->big));
    g->nbig = batch * (rows + 2) * (cols + 3);
    int64_t es = gpucore_dtype_size((gpucore_dtype)dt);
    void *buf = malloc((size_t)(g->nbig * es + 1));
    memset(buf, 0xFF, (size_t)(g->nbig * es));
    CHECK_OK(gpucore_copy_from_host(g->big, buf, g->nbig * es));
    free(buf);
    gpucore_tensor *r = NULL, *rc = NULL;
    CHECK_OK(gpucore_tensor_slice(g->big, 1, 1, rows + 1, 1, &r));
    CHECK_OK(gpucore_tensor_slice(r, 2, 1, cols + 1, 1, &rc));
    gpucore_tensor_destroy(r);
    if (ndim == 2) {
        /* the 2-d output: the same memory wrapped without the batch dim */
        void *data = NULL;
        CHECK_OK(gpucore_tensor_data(rc, &data));
        int64_t st[3];
        gpucore_tensor_strides(rc, st);
        int64_t shape2[2] = {rows, cols}, strides2[2] = {st[1], st[2]};
        CHECK_OK(gpucore_tensor_wrap(ctx, (gpucore_dtype)dt, 2, shape2, strides2, data, NULL, NULL, &g->view));
        gpucore_tensor_destroy(rc);
    } else {
        g->view = rc;
    }
}

/* Read back: out[b][i][j] of the view; counts guard elements that changed. */
static double *guarded_read(guarded *g, int *guard_bad)
{
    int64_t es = gpucore_dtype_size((gpucore_dtype)g->dt);
    void *buf = malloc((size_t)(g->nbig * es + 1));
    CHECK_OK(gpucore_copy_to_host(buf, g->nbig * es, g->big));
    double *out = malloc((size_t)(g->batch * g->rows * g->cols + 1) * sizeof(double));
    *guard_bad = 0;
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t i = 0; i < g->rows + 2; i++)
            for (int64_t j = 0; j < g->cols + 3; j++) {
                int64_t idx = (b * (g->rows + 2) + i) * (g->cols + 3) + j;
                int inside = i >= 1 && i <= g->rows && j >= 1 && j <= g->cols;
                if (inside) out[(b * g->rows + (i - 1)) * g->cols + (j - 1)] = from_bytes(g->dt, buf, idx);
                else if (!is_poison(g->dt, buf, idx)) (*guard_bad)++;
            }
    free(buf);
    return out;
}

static void guarded_free(guarded *g)
{
    gpucore_tensor_destroy(g->view);
    gpucore_tensor_destroy(g->big);
}

static double gelu_tanh_d(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double gelu_tanh_grad_d(double x)
{
    double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(inner);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

static double tolerance(int in_dt, int out_dt, int64_t k, int tf32)
{
    if (in_dt != GPUCORE_F32 || out_dt != GPUCORE_F32) return 1e-2;
    if (tf32) return 1e-3;
    return k > 256 ? 1e-5 : 1e-6; /* fp32 summation error grows ~sqrt(K)·2^-24 per element */
}

/* ---------------------------------------------------------------- plain matmul */

typedef struct mm_case { int64_t batch, m, n, k; int ta, tb, bcast_b, use_tview; } mm_case;

static void run_case(gpucore_context *ctx, const char *dev, int in_dt, int out_dt, const mm_case *c, double alpha,
                     double beta, int tf32)
{
    const int64_t B = c->batch, M = c->m, N = c->n, K = c->k;
    const int batched = B > 1 || c->bcast_b;
    /* stored shapes: a is [B?, M, K] or [B?, K, M] when transposed (by flag or by a transposed view) */
    int64_t ar = c->ta ? K : M, ac = c->ta ? M : K, br = c->tb ? N : K, bc = c->tb ? K : N;
    int64_t bB = c->bcast_b ? 1 : B;
    double *av = random_values(in_dt, B * M * K), *bv = random_values(in_dt, bB * K * N);
    int64_t ashape[3] = {B, ar, ac}, bshape[3] = {bB, br, bc};
    gpucore_tensor *a = batched ? upload(ctx, in_dt, 3, ashape, av) : upload(ctx, in_dt, 2, ashape + 1, av);
    gpucore_tensor *b = (batched && !c->bcast_b) ? upload(ctx, in_dt, 3, bshape, bv) : upload(ctx, in_dt, 2, bshape + 1, bv);
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    gpucore_tensor *a_use = a, *b_use = b;
    if (c->use_tview) { /* express op() as a transposed view instead of the flag */
        if (c->ta) CHECK_OK(gpucore_tensor_transpose(a, -1, -2, &a_use));
        if (c->tb) CHECK_OK(gpucore_tensor_transpose(b, -1, -2, &b_use));
    } else {
        o.trans_a = c->ta;
        o.trans_b = c->tb;
    }
    o.alpha = alpha;
    o.beta = beta;
    o.allow_tf32 = tf32;
    guarded d;
    guarded_make(ctx, out_dt, B, M, N, batched ? 3 : 2, &d);
    double *cv = NULL;
    if (beta != 0.0) { /* accumulate into d: fill it with c first */
        cv = random_values(out_dt, B * M * N);
        void *buf = malloc((size_t)(B * M * N * 4 + 4));
        to_bytes(out_dt, cv, B * M * N, buf);
        CHECK_OK(gpucore_copy_from_host(d.view, buf, B * M * N * gpucore_dtype_size((gpucore_dtype)out_dt)));
        free(buf);
    }
    gpucore_status st = gpucore_matmul(a_use, b_use, d.view, &o, NULL);
    if (st) fprintf(stderr, "FAIL %s matmul %s->%s b%lld %lldx%lldx%lld: %s\n", dev,
                    gpucore_dtype_name((gpucore_dtype)in_dt), gpucore_dtype_name((gpucore_dtype)out_dt), (long long)B,
                    (long long)M, (long long)N, (long long)K, gpucore_last_error());
    CHECK(st == GPUCORE_OK);
    int guard_bad = 0;
    double *out = guarded_read(&d, &guard_bad);
    double *ref = malloc((size_t)(B * M * N + 1) * sizeof(double));
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t p = 0; p < K; p++) {
                    double x = c->ta ? av[(bi * K + p) * M + i] : av[(bi * M + i) * K + p];
                    int64_t bo = c->bcast_b ? 0 : bi;
                    double y = c->tb ? bv[(bo * N + j) * K + p] : bv[(bo * K + p) * N + j];
                    s += x * y;
                }
                double r = alpha * s;
                if (cv) r += beta * cv[(bi * M + i) * N + j];
                ref[(bi * M + i) * N + j] = r;
            }
    double err = rel_error(out, ref, (size_t)(B * M * N));
    double tol = tolerance(in_dt, out_dt, K, tf32 == 1);
    int ok = !(err > tol) && !isnan(err) && guard_bad == 0;
    if (!ok)
        fprintf(stderr, "FAIL %s matmul %s->%s batch %lld %lldx%lldx%lld ta%d tb%d view%d bcast%d alpha %g beta %g: "
                "rel err %.3g (tol %.1g), %d guard elements written\n", dev, gpucore_dtype_name((gpucore_dtype)in_dt),
                gpucore_dtype_name((gpucore_dtype)out_dt), (long long)B, (long long)M, (long long)N, (long long)K, c->ta,
                c->tb, c->use_tview, c->bcast_b, alpha, beta, err, tol, guard_bad);
    CHECK(ok);
    free(out); free(ref); free(av); free(bv); free(cv);
    guarded_free(&d);
    if (a_use != a) gpucore_tensor_destroy(a_use);
    if (b_use != b) gpucore_tensor_destroy(b_use);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
}

static void test_products(gpucore_context *ctx, const char *dev)
{
    static const int pairs[][2] = {{GPUCORE_F32, GPUCORE_F32}, {GPUCORE_F16, GPUCORE_F16}, {GPUCORE_F16, GPUCORE_F32},
                                   {GPUCORE_BF16, GPUCORE_BF16}, {GPUCORE_BF16, GPUCORE_F32}};
    /* the last two: one to four rows of a, the CPU's matrix-vector path where b is transposed (x·Wᵀ),
     * with K past its vector loop and a tail */
    static const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {17, 31, 1}, {33, 16, 64}, {64, 48, 129},
                                        {0, 5, 3},  {5, 0, 3},  {4, 6, 0},   {3, 1, 17},  {1, 19, 23},
                                        {2, 70, 100}, {4, 33, 777}};
    int before = check_failed;
    for (int p = 0; p < 5; p++)
        for (int s = 0; s < 12; s++)
            for (int t = 0; t < 4; t++) {
                mm_case c = {1, shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, 0, s & 1};
                run_case(ctx, dev, pairs[p][0], pairs[p][1], &c, 1.0, 0.0, 0);
            }
    /* large K for f32 (tolerance 1e-5), alpha/beta accumulation into d, TF32 allowed */
    mm_case big = {1, 37, 29, 1031, 0, 1, 0, 0};
    run_case(ctx, dev, GPUCORE_F32, GPUCORE_F32, &big, 1.0, 0.0, 0);
    mm_case ab = {1, 23, 17, 41, 1, 0, 0, 0}, abv = {1, 3, 29, 130, 0, 1, 0, 0}; /* abv: the matrix-vector path */
    for (int p = 0; p < 5; p++) run_case(ctx, dev, pairs[p][0], pairs[p][1], &ab, 0.5, -1.25, 0);
    for (int p = 0; p < 5; p++) run_case(ctx, dev, pairs[p][0], pairs[p][1], &abv, 0.5, -1.25, 0);
    /* the matrix-vector path over the CPU's thread team: 32 blocks of 32 rows of W in parts of one
     * block (the last one short), and 66 blocks in 22 parts of 3 */
    mm_case team1 = {1, 2, 1000, 70, 0, 1, 0, 0}, team3 = {1, 4, 2100, 40, 0, 1, 0, 0};
    for (int p = 0; p < 5; p++) run_case(ctx, dev, pairs[p][0], pairs[p][1], &team1, 1.0, 0.0, 0);
    for (int p = 0; p < 5; p++) run_case(ctx, dev, pairs[p][0], pairs[p][1], &team3, 0.5, -1.25, 0);
    /* b row-major [K, N] with rows of 4 KiB in f32: on an AVX-512 CPU, oneDNN's f32 weights copied in
     * column chunks of 960 (320 with 3 batches) and a narrower last one (cpu_matmul_dnnl.c's
     * mm_chunk_cols); a plain, a as aᵀ (the weight-gradient layout), 3 batches each with its own b, and
     * one b broadcast to 2 */
    for (int p = 0; p < 5; p++) {
        mm_case rows[] = {{1, 5, 1024, 1000, 0, 0, 0, 0}, {1, 4, 1024, 1000, 1, 0, 0, 1}, {3, 4, 1024, 1000, 0, 0, 0, 0},
                          {2, 3, 1024, 1000, 1, 0, 1, 0}};
        for (int r = 0; r < 4; r++) run_case(ctx, dev, pairs[p][0], pairs[p][1], &rows[r], r == 3 ? 0.5 : 1.0, 0.0, 0);
    }
    mm_case tf = {1, 65, 33, 97, 0, 0, 0, 0};
    run_case(ctx, dev, GPUCORE_F32, GPUCORE_F32, &tf, 1.0, 0.0, 1);
    /* strided batches, and one b shared by the batch */
    for (int p = 0; p < 5; p++)
        for (int t = 0; t < 4; t++) {
            mm_case c = {3, 11, 7, 9, t & 1, t >> 1, 0, 0};
            run_case(ctx, dev, pairs[p][0], pairs[p][1], &c, 1.0, 0.0, 0);
            mm_case s = {4, 5, 19, 16, t & 1, t >> 1, 1, t == 3};
            run_case(ctx, dev, pairs[p][0], pairs[p][1], &s, 2.0, 0.5, 0);
        }
    printf("%s: products %s\n", dev, check_failed == before ? "ok" : "FAILED");
}

/* ---------------------------------------------------------------- epilogues */

static void test_epilogues(gpucore_context *ctx, const char *dev)
{
    static const int pairs[][2] = {{GPUCORE_F32, GPUCORE_F32}, {GPUCORE_BF16, GPUCORE_BF16}, {GPUCORE_F16, GPUCORE_F32},
                                   {GPUCORE_F16, GPUCORE_F16}};
    /* {5, 9, 1}, {1, 37, 100}, {4, 21, 515}: one to four rows (the CPU's matrix-vector path for
     * bias/ReLU/GELU); the last, b row-major [K, N] (rowb) with rows of 4 KiB in f32: on an AVX-512 CPU,
     * oneDNN's f32 weights copied in column chunks of 960 and a narrower last one (cpu_matmul_dnnl.c's
     * mm_chunk_cols), each with its columns of bias and d */
    static const int64_t shapes[][3] = {{13, 24, 7}, {32, 40, 64}, {5, 9, 1}, {1, 37, 100}, {4, 21, 515}, {3, 1024, 1000}};
    int before = check_failed;
    for (int p = 0; p < 4; p++)
        for (int s = 0; s < 6; s++)
            for (int epi = GPUCORE_EPILOGUE_BIAS; epi <= GPUCORE_EPILOGUE_BGRAD_B; epi++)
                for (int with_aux = 0; with_aux < 2; with_aux++) {
                    int gelu = epi == GPUCORE_EPILOGUE_GELU || epi == GPUCORE_EPILOGUE_BIAS_GELU;
                    int dgelu = epi == GPUCORE_EPILOGUE_DGELU || epi == GPUCORE_EPILOGUE_DGELU_BGRAD;
                    if (with_aux && !gelu) continue;
                    const int in_dt = pairs[p][0], dt = pairs[p][1];
                    const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                    const int rowb = s == 5;
#define BV(j, q) (rowb ? bv[(q) * N + (j)] : bv[(j) * K + (q)])
                    double *av = random_values(in_dt, M * K), *bv = random_values(in_dt, N * K);
                    double *biasv = random_values(dt, N), *auxv = random_values(dt, M * N);
                    for (int64_t i = 0; i < M * N; i++) auxv[i] = round_to(dt, 2.5 * auxv[i]);
                    int64_t as[2] = {M, K}, bs[2] = {rowb ? K : N, rowb ? N : K}, vs[1] = {N}, xs[2] = {M, N};
                    gpucore_tensor *a = upload(ctx, in_dt, 2, as, av), *b = upload(ctx, in_dt, 2, bs, bv);
                    gpucore_tensor *bias = upload(ctx, dt, 1, vs, biasv), *aux = NULL, *bgrad = NULL;
                    guarded d, auxg;
                    memset(&auxg, 0, sizeof auxg);
                    guarded_make(ctx, dt, 1, M, N, 2, &d);
                    gpucore_matmul_options o;
                    gpucore_matmul_options_init(&o);
                    o.trans_b = !rowb; /* the linear-layer layout x·Wᵀ */
                    o.epilogue = epi;
                    if (epi == GPUCORE_EPILOGUE_BIAS || epi == GPUCORE_EPILOGUE_BIAS_RELU || epi == GPUCORE_EPILOGUE_BIAS_GELU)
                        o.bias = bias;
                    if (dgelu) o.aux = aux = upload(ctx, dt, 2, xs, auxv);
                    if (gelu && with_aux) {
                        guarded_make(ctx, dt, 1, M, N, 2, &auxg);
                        o.aux = auxg.view;
                    }
                    int64_t glen = epi == GPUCORE_EPILOGUE_BGRAD_A ? M : N;
                    if (epi >= GPUCORE_EPILOGUE_DGELU_BGRAD) {
                        int64_t gs[1] = {glen};
                        CHECK_OK(gpucore_tensor_create(ctx, (gpucore_dtype)dt, 1, gs, &bgrad));
                        CHECK_OK(gpucore_fill(bgrad, NAN, NULL));
                        o.bias_grad = bgrad;
                    }
                    gpucore_status st = gpucore_matmul(a, b, d.view, &o, NULL);
                    if (st) fprintf(stderr, "FAIL %s epilogue %d: %s\n", dev, epi, gpucore_last_error());
                    CHECK(st == GPUCORE_OK);
                    /* unfused reference in f64: plain product, then the epilogue */
                    double *ref = malloc((size_t)(M * N) * sizeof(double)), *pre = malloc((size_t)(M * N) * sizeof(double));
                    double *gref = calloc((size_t)glen + 1, sizeof(double));
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < N; j++) {
                            double acc = 0;
                            for (int64_t q = 0; q < K; q++) acc += av[i * K + q] * BV(j, q);
                            double x = o.bias ? acc + biasv[j] : acc, r;
                            pre[i * N + j] = x;
                            if (epi == GPUCORE_EPILOGUE_RELU || epi == GPUCORE_EPILOGUE_BIAS_RELU) r = x > 0 ? x : 0;
                            else if (gelu) r = gelu_tanh_d(x);
                            else if (dgelu) r = acc * gelu_tanh_grad_d(auxv[i * N + j]);
                            else r = x;
                            ref[i * N + j] = r;
                            if (epi == GPUCORE_EPILOGUE_DGELU_BGRAD) gref[j] += r;
                        }
                    if (epi == GPUCORE_EPILOGUE_BGRAD_A)
                        for (int64_t i = 0; i < M; i++)
                            for (int64_t q = 0; q < K; q++) gref[i] += av[i * K + q];
                    if (epi == GPUCORE_EPILOGUE_BGRAD_B)
                        for (int64_t j = 0; j < N; j++)
                            for (int64_t q = 0; q < K; q++) gref[j] += BV(j, q);
#undef BV
                    int guard_bad = 0, aux_guard_bad = 0;
                    double *out = guarded_read(&d, &guard_bad);
                    double tol = tolerance(in_dt, dt, K, 0);
                    if (tol < 1e-5) tol = 1e-5; /* transcendental epilogues in f32 */
                    double err = rel_error(out, ref, (size_t)(M * N));
                    int ok = err <= tol && guard_bad == 0;
                    if (gelu && with_aux) {
                        double *auxo = guarded_read(&auxg, &aux_guard_bad);
                        double aerr = rel_error(auxo, pre, (size_t)(M * N));
                        if (!(aerr <= tol) || aux_guard_bad) {
                            ok = 0;
                            fprintf(stderr, "  aux: rel err %.3g, %d guard elements written\n", aerr, aux_guard_bad);
                        }
                        free(auxo);
                    }
                    if (bgrad) {
                        double *g = malloc((size_t)glen * sizeof(double) + 8);
                        void *buf = malloc((size_t)glen * 4 + 4);
                        CHECK_OK(gpucore_copy_to_host(buf, glen * gpucore_dtype_size((gpucore_dtype)dt), bgrad));
                        for (int64_t i = 0; i < glen; i++) g[i] = from_bytes(dt, buf, i);
                        double gerr = rel_error(g, gref, (size_t)glen);
                        if (!(gerr <= tol)) {
                            ok = 0;
                            fprintf(stderr, "  bias_grad: rel err %.3g\n", gerr);
                        }
                        free(g);
                        free(buf);
                    }
                    if (!ok)
                        fprintf(stderr, "FAIL %s epilogue %d aux %d %s->%s %lldx%lldx%lld%s: rel err %.3g (tol %.1g), %d "
                                "guard elements written\n", dev, epi, with_aux, gpucore_dtype_name((gpucore_dtype)in_dt),
                                gpucore_dtype_name((gpucore_dtype)dt), (long long)M, (long long)N, (long long)K,
                                rowb ? " b [K,N]" : "", err, tol, guard_bad);
                    CHECK(ok);
                    free(out); free(ref); free(pre); free(gref);
                    free(av); free(bv); free(biasv); free(auxv);
                    guarded_free(&d);
                    if (auxg.big) guarded_free(&auxg);
                    gpucore_tensor_destroy(a); gpucore_tensor_destroy(b); gpucore_tensor_destroy(bias);
                    gpucore_tensor_destroy(aux); gpucore_tensor_destroy(bgrad);
                }
    printf("%s: epilogues %s\n", dev, check_failed == before ? "ok" : "FAILED");
}

/* ---------------------------------------------------------------- bf16 fused epilogues */

/* bf16 a [B?, M, K] times bf16 b [N, K] transposed (the linear layout), bias / ReLU / GELU and
 * alpha fused; on a CPU with bf16 units this runs oneDNN's matmul with post-ops writing d in its
 * own dtype, else the f32 product and the per-element epilogue. Returns whether it passed. */
static int fused_case(gpucore_context *ctx, const char *dev, int dt, int64_t B, int64_t M, int64_t N, int64_t K,
                      int epi, double alpha)
{
    const int bias_on = epi == GPUCORE_EPILOGUE_BIAS || epi == GPUCORE_EPILOGUE_BIAS_RELU || epi == GPUCORE_EPILOGUE_BIAS_GELU;
    const int gelu = epi == GPUCORE_EPILOGUE_GELU || epi == GPUCORE_EPILOGUE_BIAS_GELU;
    const int relu = epi == GPUCORE_EPILOGUE_RELU || epi == GPUCORE_EPILOGUE_BIAS_RELU;
    double *av = random_values(GPUCORE_BF16, B * M * K), *bv = random_values(GPUCORE_BF16, N * K);
    double *biasv = random_values(dt, N);
    int64_t as[3] = {B, M, K}, bs[2] = {N, K}, vs[1] = {N};
    gpucore_tensor *a = B > 1 ? upload(ctx, GPUCORE_BF16, 3, as, av) : upload(ctx, GPUCORE_BF16, 2, as + 1, av);
    gpucore_tensor *b = upload(ctx, GPUCORE_BF16, 2, bs, bv), *bias = upload(ctx, dt, 1, vs, biasv);
    guarded d;
    guarded_make(ctx, dt, B, M, N, B > 1 ? 3 : 2, &d);
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    o.epilogue = epi;
    o.alpha = alpha;
    if (bias_on) o.bias = bias;
    gpucore_status st = gpucore_matmul(a, b, d.view, &o, NULL);
    if (st) fprintf(stderr, "FAIL %s fused bf16 epilogue %d: %s\n", dev, epi, gpucore_last_error());
    double *ref = calloc((size_t)(B * M * N) + 1, sizeof(double));
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t q = 0; q < K; q++) acc += av[(bi * M + i) * K + q] * bv[j * K + q];
                double x = alpha * acc + (bias_on ? biasv[j] : 0.0);
                ref[(bi * M + i) * N + j] = relu ? (x > 0 ? x : 0) : gelu ? gelu_tanh_d(x) : x;
            }
    int guard_bad = 0;
    double *out = guarded_read(&d, &guard_bad);
    const double err = rel_error(out, ref, (size_t)(B * M * N)), tol = tolerance(GPUCORE_BF16, dt, K, 0);
    const int ok = st == GPUCORE_OK && err <= tol && guard_bad == 0;
    if (!ok)
        fprintf(stderr, "FAIL %s fused bf16->%s epilogue %d alpha %g batch %lld %lldx%lldx%lld: rel err %.3g (tol %.1g), "
                "%d guard elements written\n", dev, gpucore_dtype_name((gpucore_dtype)dt), epi, alpha, (long long)B,
                (long long)M, (long long)N, (long long)K, err, tol, guard_bad);
    free(out); free(ref); free(av); free(bv); free(biasv);
    guarded_free(&d);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(bias);
    return ok;
}

static void test_fused_bf16(gpucore_context *ctx, const char *dev)
{
    static const int epis[] = {GPUCORE_EPILOGUE_NONE, GPUCORE_EPILOGUE_BIAS, GPUCORE_EPILOGUE_RELU,
                               GPUCORE_EPILOGUE_BIAS_RELU, GPUCORE_EPILOGUE_GELU, GPUCORE_EPILOGUE_BIAS_GELU};
    static const int64_t shapes[][4] = {{1, 37, 130, 72}, {1, 64, 256, 96}, {3, 11, 40, 33}, {1, 1, 19, 300}};
    int before = check_failed;
    for (int dti = 0; dti < 2; dti++)
        for (int s = 0; s < 4; s++)
            for (int e = 0; e < 6; e++) {
                const int dt = dti ? GPUCORE_F32 : GPUCORE_BF16;
                const double alpha = (e == 0 || e == 2 || e == 4) && s == 0 ? -0.75 : 1.0; /* alpha without a bias */
                CHECK(fused_case(ctx, dev, dt, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], epis[e], alpha));
            }
    /* more distinct shapes than the CPU context's plan cache holds (64): evicted plans rebuild */
    for (int round = 0; round < 2; round++)
        for (int64_t m = 1; m <= (round ? 6 : 70); m++)
            CHECK(fused_case(ctx, dev, GPUCORE_BF16, 1, m, 24, 16, GPUCORE_EPILOGUE_BIAS_GELU, 1.0));
    printf("%s: fused bf16 epilogues %s\n", dev, check_failed == before ? "ok" : "FAILED");
}

/* Two streams run the same bf16 GEMMs at once (on the CPU: two worker threads sharing the
 * context's plan cache, racing to build each plan), over more shapes than the cache holds, so
 * plans are evicted while the other stream may still run them: both results must be the
 * reference's, bit for bit the same. */
static void test_fused_bf16_two_streams(gpucore_context *ctx, const char *dev)
{
    enum { SHAPES = 80 };
    int before = check_failed;
    gpucore_stream *st[2] = {NULL, NULL};
    CHECK_OK(gpucore_stream_create(ctx, 0, &st[0]));
    CHECK_OK(gpucore_stream_create(ctx, 0, &st[1]));
    gpucore_tensor *a[SHAPES], *b[SHAPES], *bias[SHAPES], *d[SHAPES][2];
    double *av[SHAPES], *bv[SHAPES], *biasv[SHAPES];
    const int64_t N = 40, K = 24;
    for (int s = 0; s < SHAPES; s++) {
        const int64_t M = 1 + s;
        av[s] = random_values(GPUCORE_BF16, M * K);
        bv[s] = random_values(GPUCORE_BF16, N * K);
        biasv[s] = random_values(GPUCORE_BF16, N);
        int64_t as[2] = {M, K}, bs[2] = {N, K}, vs[1] = {N}, ds[2] = {M, N};
        a[s] = upload(ctx, GPUCORE_BF16, 2, as, av[s]);
        b[s] = upload(ctx, GPUCORE_BF16, 2, bs, bv[s]);
        bias[s] = upload(ctx, GPUCORE_BF16, 1, vs, biasv[s]);
        for (int t = 0; t < 2; t++) {
            CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, ds, &d[s][t]));
            CHECK_OK(gpucore_fill(d[s][t], NAN, NULL));
        }
    }
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    o.epilogue = GPUCORE_EPILOGUE_BIAS_GELU;
    for (int s = 0; s < SHAPES; s++)
        for (int t = 0; t < 2; t++) {
            o.bias = bias[s];
            CHECK_OK(gpucore_matmul(a[s], b[s], d[s][t], &o, st[t]));
        }
    CHECK_OK(gpucore_stream_synchronize(st[0]));
    CHECK_OK(gpucore_stream_synchronize(st[1]));
    for (int s = 0; s < SHAPES; s++) {
        const int64_t M = 1 + s;
        uint16_t *h[2];
        for (int t = 0; t < 2; t++) {
            h[t] = malloc((size_t)(M * N) * 2);
            CHECK_OK(gpucore_copy_to_host(h[t], M * N * 2, d[s][t]));
        }
        CHECK(memcmp(h[0], h[1], (size_t)(M * N) * 2) == 0);
        double *out = malloc((size_t)(M * N) * sizeof(double)), *ref = malloc((size_t)(M * N) * sizeof(double));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = biasv[s][j];
                for (int64_t q = 0; q < K; q++) acc += av[s][i * K + q] * bv[s][j * K + q];
                ref[i * N + j] = gelu_tanh_d(acc);
                out[i * N + j] = from_bytes(GPUCORE_BF16, h[0], i * N + j);
            }
        const double err = rel_error(out, ref, (size_t)(M * N));
        if (!(err <= 1e-2)) fprintf(stderr, "FAIL %s two streams, shape %d: rel err %.3g\n", dev, s, err);
        CHECK(err <= 1e-2);
        free(out); free(ref); free(h[0]); free(h[1]);
        free(av[s]); free(bv[s]); free(biasv[s]);
        gpucore_tensor *all[] = {a[s], b[s], bias[s], d[s][0], d[s][1]};
        for (int i = 0; i < 5; i++) gpucore_tensor_destroy(all[i]);
    }
    gpucore_stream_destroy(st[0]);
    gpucore_stream_destroy(st[1]);
    printf("%s: fused bf16 on two streams %s\n", dev, check_failed == before ? "ok" : "FAILED");
}

/* ---------------------------------------------------------------- linear layer */

/* Two-layer MLP in f64 on the host: h = x·W1ᵀ + b1, a = gelu(h), y = a·W2ᵀ + b2, L = Σ y ⊙ G. */
enum { T_ = 6, I_ = 5, H_ = 7, O_ = 4 };
static double mlp_loss(const double *x, const double *w1, const double *b1, const double *w2, const double *b2,
                       const double *G)
{
    double L = 0, a[H_];
    for (int t = 0; t < T_; t++) {
        for (int h = 0; h < H_; h++) {
            double s = b1[h];
            for (int i = 0; i < I_; i++) s += x[t * I_ + i] * w1[h * I_ + i];
            a[h] = gelu_tanh_d(s);
        }
        for (int o = 0; o < O_; o++) {
            double s = b2[o];
            for (int h = 0; h < H_; h++) s += a[h] * w2[o * H_ + h];
            L += s * G[t * O_ + o];
        }
    }
    return L;
}

static double *download(gpucore_tensor *t, int64_t n)
{
    float *f = malloc((size_t)n * 4 + 4);
    CHECK_OK(gpucore_copy_to_host(f, n * 4, t));
    double *d = malloc((size_t)n * sizeof(double) + 8);
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

static void test_linear(gpucore_context *ctx, const char *dev)
{
    int before = check_failed;
    double *x = random_values(GPUCORE_F32, T_ * I_), *w1 = random_values(GPUCORE_F32, H_ * I_),
           *b1 = random_values(GPUCORE_F32, H_), *w2 = random_values(GPUCORE_F32, O_ * H_),
           *b2 = random_values(GPUCORE_F32, O_), *G = random_values(GPUCORE_F32, T_ * O_);
    /* x as [2, 3, I] (3-d input: leading dims merge into rows) */
    int64_t xs[3] = {2, 3, I_}, w1s[2] = {H_, I_}, b1s[1] = {H_}, w2s[2] = {O_, H_}, b2s[1] = {O_};
    int64_t hs[3] = {2, 3, H_}, ys[3] = {2, 3, O_};
    gpucore_tensor *tx = upload(ctx, GPUCORE_F32, 3, xs, x), *tw1 = upload(ctx, GPUCORE_F32, 2, w1s, w1),
                   *tb1 = upload(ctx, GPUCORE_F32, 1, b1s, b1), *tw2 = upload(ctx, GPUCORE_F32, 2, w2s, w2),
                   *tb2 = upload(ctx, GPUCORE_F32, 1, b2s, b2), *tG = upload(ctx, GPUCORE_F32, 3, ys, G);
    gpucore_tensor *th = NULL, *ta = NULL, *ty = NULL, *tdh = NULL, *tdx = NULL, *tdw1 = NULL, *tdb1 = NULL,
                   *tdw2 = NULL, *tdb2 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, hs, &th));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, hs, &ta));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, ys, &ty));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, hs, &tdh));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, xs, &tdx));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, w1s, &tdw1));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, b1s, &tdb1));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, w2s, &tdw2));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, b2s, &tdb2));
    gpucore_tensor *outs[] = {th, ta, ty, tdh, tdx, tdw1, tdb1, tdw2, tdb2};
    for (int i = 0; i < 9; i++) CHECK_OK(gpucore_fill(outs[i], NAN, NULL));
    /* forward: a = gelu(x·W1ᵀ + b1) with aux h; y = a·W2ᵀ + b2 */
    CHECK_OK(gpucore_linear_forward(tx, tw1, tb1, GPUCORE_ACT_GELU_TANH, ta, th, NULL));
    CHECK_OK(gpucore_linear_forward(ta, tw2, tb2, GPUCORE_ACT_NONE, ty, NULL, NULL));
    /* backward: layer 2 with the GELU of layer 1 fused into its dx; then layer 1 */
    CHECK_OK(gpucore_linear_backward(tG, ta, tw2, th, tdh, tdw2, tdb2, NULL));
    CHECK_OK(gpucore_linear_backward(tdh, tx, tw1, NULL, tdx, tdw1, tdb1, NULL));
    /* forward check */
    double *yv = download(ty, T_ * O_), yref[T_ * O_];
    for (int t = 0; t < T_; t++)
        for (int o = 0; o < O_; o++) {
            double s = b2[o];
            for (int h = 0; h < H_; h++) {
                double pre = b1[h];
                for (int i = 0; i < I_; i++) pre += x[t * I_ + i] * w1[h * I_ + i];
                s += gelu_tanh_d(pre) * w2[o * H_ + h];
            }
            yref[t * O_ + o] = s;
        }
    double fe = rel_error(yv, yref, T_ * O_);
    if (!(fe < 1e-5)) fprintf(stderr, "FAIL %s linear forward: rel err %.3g\n", dev, fe);
    CHECK(fe < 1e-5);
    /* gradients vs central differences of the f64 loss */
    struct { double *p; int64_t n; gpucore_tensor *grad; const char *name; } params[] = {
        {x, T_ * I_, tdx, "dx"}, {w1, H_ * I_, tdw1, "dW1"}, {b1, H_, tdb1, "db1"}, {w2, O_ * H_, tdw2, "dW2"},
        {b2, O_, tdb2, "db2"}};
    for (int q = 0; q < 5; q++) {
        double *got = download(params[q].grad, params[q].n), *fd = malloc((size_t)params[q].n * sizeof(double));
        for (int64_t i = 0; i < params[q].n; i++) {
            double keep = params[q].p[i], h = 1e-6;
            params[q].p[i] = keep + h;
            double lp = mlp_loss(x, w1, b1, w2, b2, G);
            params[q].p[i] = keep - h;
            double lm = mlp_loss(x, w1, b1, w2, b2, G);
            params[q].p[i] = keep;
            fd[i] = (lp - lm) / (2 * h);
        }
        double e = rel_error(got, fd, (size_t)params[q].n);
        if (!(e < 1e-4)) fprintf(stderr, "FAIL %s linear backward %s vs finite differences: rel err %.3g\n", dev,
                                 params[q].name, e);
        CHECK(e < 1e-4);
        free(got);
        free(fd);
    }
    free(yv);
    gpucore_tensor *ins[] = {tx, tw1, tb1, tw2, tb2, tG};
    for (int i = 0; i < 6; i++) gpucore_tensor_destroy(ins[i]);
    for (int i = 0; i < 9; i++) gpucore_tensor_destroy(outs[i]);
    free(x); free(w1); free(b1); free(w2); free(b2); free(G);
    printf("%s: linear forward/backward %s\n", dev, check_failed == before ? "ok" : "FAILED");
}

/* ---------------------------------------------------------------- bad input */

static int msg_has(const char *s) { return strstr(gpucore_last_error(), s) != NULL; }

/* ---------------------------------------------------------------- torch.matmul shapes (gpucore_matmul_nd) */

typedef struct nd_case { int na, nb; int64_t a[4], b[4]; int a_t, d_t; } nd_case;
static const nd_case nd_cases[] = {
    {1, 2, {4}, {4, 3}, 0, 0},               /* vector · matrix */
    {2, 1, {3, 4}, {4}, 0, 0},               /* matrix · vector */
    {1, 1, {5}, {5}, 0, 0},                  /* dot: 0-d d */
    {1, 3, {4}, {2, 4, 3}, 0, 0},            /* vector · batch */
    {3, 1, {2, 3, 4}, {4}, 0, 0},            /* batch · vector */
    {4, 3, {2, 1, 3, 4}, {5, 4, 2}, 0, 0},   /* broadcast batch (2, 5): both expanded copies */
    {3, 3, {3, 2, 4}, {1, 4, 2}, 0, 0},      /* b's batch of 1 reused */
    {4, 2, {2, 3, 5, 4}, {4, 6}, 0, 0},      /* 4-d · 2-d: merged batch, b reused */
    {3, 3, {1, 3, 4}, {1, 4, 2}, 0, 0},      /* batch of one */
    {2, 1, {3, 4}, {4}, 1, 0},               /* transposed a */
    {3, 3, {2, 3, 4}, {2, 4, 5}, 0, 1},      /* d not row-major: dense result copied in */
    {3, 3, {0, 2, 4}, {1, 4, 5}, 0, 0},      /* a batch of 0: d empty */
    {2, 1, {3, 0}, {0}, 0, 0},               /* K = 0: d all 0 */
};

/* Row-major index of the broadcast operand element for output batch index ob. */
static int64_t nd_batch_offset(int nbd, const int64_t *batch, int64_t ob, int n, const int64_t *shape, int64_t mat)
{
    int tb = n > 2 ? n - 2 : 0;
    int64_t off = 0, mul = 1;
    for (int i = nbd - 1; i >= 0; i--) {
        int64_t id = ob % batch[i];
        ob /= batch[i];
        int j = i - (nbd - tb);
        if (j < 0) continue;
        if (shape[j] > 1) off += id * mul;
        mul *= shape[j];
    }
    return off * mat;
}

static void test_matmul_nd(gpucore_context *ctx, const char *dev)
{
    static const int dts[3] = {GPUCORE_F32, GPUCORE_F16, GPUCORE_BF16};
    const int ncase = (int)(sizeof nd_cases / sizeof nd_cases[0]);
    for (int ci = 0; ci < ncase; ci++)
        for (int di = 0; di < 3; di++) {
            const nd_case *c = &nd_cases[ci];
            const int dt = dts[di];
            const int64_t K = c->a[c->na - 1], M = c->na > 1 ? c->a[c->na - 2] : 1;
            const int64_t N = c->nb > 1 ? c->b[c->nb - 1] : 1;
            int ab = c->na > 2 ? c->na - 2 : 0, bb = c->nb > 2 ? c->nb - 2 : 0, nbd = ab > bb ? ab : bb, nd = 0;
            int64_t batch[4], dshape[6], nbt = 1, na = 1, nbn = 1;
            for (int i = 0; i < nbd; i++) {
                int ia = i - (nbd - ab), ib = i - (nbd - bb);
                int64_t ea = ia >= 0 ? c->a[ia] : 1, eb = ib >= 0 ? c->b[ib] : 1;
                batch[i] = ea == 1 ? eb : ea;
                dshape[nd++] = batch[i];
                nbt *= batch[i];
            }
            if (c->na > 1) dshape[nd++] = M;
            if (c->nb > 1) dshape[nd++] = N;
            for (int i = 0; i < c->na; i++) na *= c->a[i];
            for (int i = 0; i < c->nb; i++) nbn *= c->b[i];
            double *va = random_values(dt, na), *vb = random_values(dt, nbn);
            gpucore_tensor *ta = NULL, *tb = upload(ctx, dt, c->nb, c->b, vb), *tmp = NULL;
            if (c->a_t) { /* a [M, K] as the transpose of a dense [K, M] holding va transposed */
                double *vt = malloc(sizeof(double) * (size_t)na);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t k = 0; k < K; k++) vt[k * M + i] = va[i * K + k];
                int64_t tshape[2] = {K, M};
                tmp = upload(ctx, dt, 2, tshape, vt);
                CHECK_OK(gpucore_tensor_transpose(tmp, 0, 1, &ta));
                free(vt);
            } else ta = upload(ctx, dt, c->na, c->a, va);
            /* d inside a poisoned buffer of 2·G extra elements (transposed last two dims when d_t) */
            const int64_t G = 37, dn = nbt * M * N, es = gpucore_dtype_size((gpucore_dtype)dt);
            int64_t total = dn + 2 * G;
            gpucore_tensor *big = NULL, *mid = NULL, *dense = NULL, *d = NULL;
            CHECK_OK(gpucore_tensor_create(ctx, (gpucore_dtype)dt, 1, &total, &big));
            unsigned char *poison = malloc((size_t)(total * es));
            memset(poison, 0xFF, (size_t)(total * es));
            CHECK_OK(gpucore_copy_from_host(big, poison, total * es));
            CHECK_OK(gpucore_tensor_slice(big, 0, G, G + dn, 1, &mid));
            int64_t vshape[6];
            memcpy(vshape, dshape, sizeof vshape);
            if (c->d_t) { vshape[nd - 1] = dshape[nd - 2]; vshape[nd - 2] = dshape[nd - 1]; }
            CHECK_OK(gpucore_tensor_reshape(mid, nd, vshape, &dense));
            if (c->d_t) CHECK_OK(gpucore_tensor_transpose(dense, nd - 2, nd - 1, &d));
            else d = dense, dense = NULL;
            CHECK_OK(gpucore_matmul_nd(ta, tb, d, NULL));
            CHECK_OK(gpucore_copy_to_host(poison, total * es, big));
            int guard_bad = 0, unwritten = 0;
            for (int64_t i = 0; i < total; i++) {
                int inside = i >= G && i < G + dn;
                if (!inside && !is_poison(dt, poison, i)) guard_bad++;
                if (inside && is_poison(dt, poison, i)) unwritten++;
            }
            CHECK(guard_bad == 0 && unwritten == 0);
            double err2 = 0, ref2 = 0;
            for (int64_t ob = 0; ob < nbt; ob++)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        int64_t oa = nd_batch_offset(nbd, batch, ob, c->na, c->a, M * K);
                        int64_t obb = nd_batch_offset(nbd, batch, ob, c->nb, c->b, K * N);
                        double r = 0;
                        for (int64_t k = 0; k < K; k++) r += va[oa + i * K + k] * vb[obb + k * N + j];
                        int64_t pos = c->d_t ? (ob * N + j) * M + i : (ob * M + i) * N + j;
                        double got = from_bytes(dt, poison, G + pos);
                        err2 += (got - r) * (got - r);
                        ref2 += r * r;
                    }
            double err = sqrt(err2) / (sqrt(ref2) > 1e-30 ? sqrt(ref2) : 1e-30);
            int ok = err <= tolerance(dt, dt, K, 0);
            CHECK(ok);
            if (!ok || guard_bad || unwritten)
                fprintf(stderr, "  %s matmul_nd case %d dt %d: normalised error %.3g, %d guard, %d unwritten\n", dev, ci,
                        dt, err, guard_bad, unwritten);
            free(poison); free(va); free(vb);
            gpucore_tensor *ts[] = {ta, tb, tmp, big, mid, dense, d};
            for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
                if (ts[k]) gpucore_tensor_destroy(ts[k]);
        }
    /* bad input: each a status, the library stays usable */
    int64_t s234[3] = {2, 3, 4}, s342[3] = {3, 4, 2}, s3[1] = {3}, s4[1] = {4}, s32[2] = {3, 2}, s23[2] = {2, 3};
    gpucore_tensor *a = NULL, *b = NULL, *v3 = NULL, *v4 = NULL, *d32 = NULL, *d23 = NULL, *s0 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s234, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s342, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s3, &v3));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s4, &v4));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s32, &d32));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s23, &d23));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &s0));
    CHECK_STATUS(gpucore_matmul_nd(a, v3, d23, NULL), GPUCORE_ERR_SHAPE_MISMATCH);  /* K 4 vs 3 */
    CHECK(msg_has("inner dimensions"));
    CHECK_STATUS(gpucore_matmul_nd(a, b, d23, NULL), GPUCORE_ERR_SHAPE_MISMATCH);   /* batch 2 vs 3 */
    CHECK(msg_has("broadcast"));
    CHECK_STATUS(gpucore_matmul_nd(a, v4, d32, NULL), GPUCORE_ERR_SHAPE_MISMATCH);  /* d [2, 3] wanted */
    CHECK(msg_has("d has shape"));
    CHECK_STATUS(gpucore_matmul_nd(s0, v4, d32, NULL), GPUCORE_ERR_SHAPE_MISMATCH); /* 0-d operand */
    CHECK_STATUS(gpucore_matmul_nd(a, v4, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_matmul_nd(a, v4, d23, NULL));
    gpucore_tensor *ts[] = {a, b, v3, v4, d32, d23, s0};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) gpucore_tensor_destroy(ts[k]);
}


static void test_bad_input(gpucore_context *ctx, const char *dev)
{
    int before = check_failed;
    int64_t s64x128[2] = {64, 128}, s256x32[2] = {256, 32}, s64x32[2] = {64, 32}, s30[1] = {30}, s4x4[2] = {4, 4};
    gpucore_tensor *a = NULL, *b = NULL, *d = NULL, *bias = NULL, *h16 = NULL, *b16 = NULL, *sq = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s64x128, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s256x32, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s64x32, &d));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s30, &bias));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 2, s4x4, &h16));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, s4x4, &b16));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s4x4, &sq));
    CHECK_STATUS(gpucore_matmul(a, b, d, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(msg_has("a is 64x128 but b is 256x32: inner dimensions differ"));
    CHECK_STATUS(gpucore_matmul(NULL, b, d, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    /* wrong bias length */
    gpucore_tensor *b2 = NULL;
    int64_t s128x32[2] = {128, 32};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s128x32, &b2));
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.epilogue = GPUCORE_EPILOGUE_BIAS;
    o.bias = bias;
    CHECK_STATUS(gpucore_matmul(a, b2, d, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(msg_has("bias has 30 elements"));
    o.bias = NULL;
    CHECK_STATUS(gpucore_matmul(a, b2, d, &o, NULL), GPUCORE_ERR_NULL_POINTER);
    /* DGELU without aux, aux on a plain epilogue, struct_size, bad enum */
    gpucore_matmul_options_init(&o);
    o.epilogue = GPUCORE_EPILOGUE_DGELU;
    CHECK_STATUS(gpucore_matmul(a, b2, d, &o, NULL), GPUCORE_ERR_NULL_POINTER);
    gpucore_matmul_options_init(&o);
    o.struct_size = 8;
    CHECK_STATUS(gpucore_matmul(a, b2, d, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_matmul_options_init(&o);
    o.epilogue = 42;
    CHECK_STATUS(gpucore_matmul(a, b2, d, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    /* d of the wrong shape */
    CHECK_STATUS(gpucore_matmul(a, b2, sq, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(msg_has("d is 4x4 but op(a)·op(b) is 64x32"));
    /* unsupported dtype mixes */
    CHECK_STATUS(gpucore_matmul(h16, b16, sq, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK(msg_has("a is f16 and b is bf16"));
    CHECK_STATUS(gpucore_matmul(sq, h16, sq, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    gpucore_tensor *o16 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 2, s4x4, &o16));
    CHECK_STATUS(gpucore_matmul(sq, sq, o16, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK(msg_has("a and b are f32 but d is f16"));
    CHECK_STATUS(gpucore_matmul(h16, h16, b16, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    /* d overlapping an operand; a matrix without a unit stride */
    CHECK_STATUS(gpucore_matmul(sq, sq, sq, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(msg_has("overlaps"));
    int64_t s8x8[2] = {8, 8};
    gpucore_tensor *big = NULL, *r = NULL, *rc = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s8x8, &big));
    CHECK_OK(gpucore_tensor_slice(big, 0, 0, 8, 2, &r));
    CHECK_OK(gpucore_tensor_slice(r, 1, 0, 8, 2, &rc)); /* 4x4 with strides [16, 2] */
    gpucore_tensor *d4 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s4x4, &d4));
    CHECK_STATUS(gpucore_matmul(rc, sq, d4, NULL, NULL), GPUCORE_ERR_NOT_CONTIGUOUS);
    CHECK(msg_has("stride 1"));
    /* misaligned pointer: an f32 matrix starting one byte into a buffer */
    void *base = NULL;
    CHECK_OK(gpucore_tensor_data(big, &base));
    gpucore_tensor *mis = NULL;
    CHECK_OK(gpucore_tensor_wrap(ctx, GPUCORE_F32, 2, s4x4, NULL, (char *)base + 1, NULL, NULL, &mis));
    CHECK_STATUS(gpucore_matmul(mis, sq, d4, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(msg_has("not aligned"));
    /* fp8 */
    int64_t s16x16[2] = {16, 16};
    gpucore_tensor *f8a = NULL, *f8b = NULL, *d16 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_FP8_E4M3, 2, s16x16, &f8a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_FP8_E4M3, 2, s16x16, &f8b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, s16x16, &d16));
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    if (strcmp(dev, "cuda") != 0) { /* cpu and cuda-emulated have no fp8 GEMM */
        CHECK_STATUS(gpucore_matmul(f8a, f8b, d16, &o, NULL), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK(msg_has("fp8"));
    }
    CHECK_STATUS(gpucore_matmul(f8a, f8b, d16, NULL, NULL), GPUCORE_ERR_NOT_SUPPORTED); /* not TN */
    CHECK(msg_has("TN layout"));
    /* epilogues with aux on a batch */
    int64_t s2x4x4[3] = {2, 4, 4};
    gpucore_tensor *a3 = NULL, *d3 = NULL, *aux3 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s2x4x4, &a3));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s2x4x4, &d3));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s2x4x4, &aux3));
    gpucore_matmul_options_init(&o);
    o.epilogue = GPUCORE_EPILOGUE_GELU;
    o.aux = aux3;
    CHECK_STATUS(gpucore_matmul(a3, sq, d3, &o, NULL), GPUCORE_ERR_NOT_SUPPORTED);
    /* linear: wrong feature count, an activation that cannot be fused */
    CHECK_STATUS(gpucore_linear_forward(a, b, NULL, GPUCORE_ACT_NONE, d, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_linear_forward(sq, sq, NULL, GPUCORE_ACT_SILU, d4, NULL, NULL), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK_STATUS(gpucore_linear_backward(sq, sq, sq, NULL, NULL, NULL, bias, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    /* still usable: a valid call works */
    CHECK_OK(gpucore_fill(sq, 1.0, NULL));
    CHECK_OK(gpucore_matmul(sq, sq, d4, NULL, NULL));
    float hv[16];
    CHECK_OK(gpucore_copy_to_host(hv, sizeof hv, d4));
    CHECK(hv[0] == 4.0f && hv[15] == 4.0f);
    gpucore_tensor *all[] = {a, b, d, bias, h16, b16, sq, b2, o16, big, r, rc, d4, mis, f8a, f8b, d16, a3, d3, aux3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    printf("%s: bad input %s\n", dev, check_failed == before ? "ok" : "FAILED");
}

int main(void)
{
    const char *devs[4];
    int n = test_devices(devs, 4);
    for (int i = 0; i < n; i++) {
        gpucore_context *ctx = NULL;
        gpucore_status st = gpucore_context_create(devs[i], &ctx);
        CHECK(st == GPUCORE_OK);
        if (st) {
            fprintf(stderr, "context %s: %s\n", devs[i], gpucore_last_error());
            continue;
        }
        test_products(ctx, devs[i]);
        test_epilogues(ctx, devs[i]);
        test_fused_bf16(ctx, devs[i]);
        test_fused_bf16_two_streams(ctx, devs[i]);
        if (!strcmp(devs[i], "cpu")) { /* again with a 2-plan cache: plans evicted while the other stream runs them */
            gpucore_context *small = NULL;
            setenv("GPUCORE_CPU_PLAN_CACHE", "2", 1);
            CHECK_OK(gpucore_context_create("cpu", &small));
            unsetenv("GPUCORE_CPU_PLAN_CACHE");
            if (small) {
                test_fused_bf16_two_streams(small, "cpu (2-plan cache)");
                gpucore_context_destroy(small);
            }
        }
        test_linear(ctx, devs[i]);
        test_bad_input(ctx, devs[i]);
        test_matmul_nd(ctx, devs[i]);
        CHECK_OK(gpucore_context_synchronize(ctx));
        gpucore_context_destroy(ctx);
    }
    return check_finish("test_matmul");
}
