/*
 * test_ops_reduce.c — reductions (sum, mean, max, min, argmax, sum of squares)
 * over one axis, several axes at once (gpucore_reduce_dims) and all, and the bias gradient, on every backend present,
 * against float64 references: shapes with 1s, odd sizes, rows long enough for
 * the multi-chunk (two-pass) path, columns, non-contiguous inputs, empty axes;
 * determinism (two runs, identical bits); bf16 row sums that add as f32 ones do; NaN
 * propagation; bad input.
 */
#include "ops_harness.h"

static void reference(int op, const double *x, int64_t outer, int64_t len, int64_t inner, double *ref)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = op == GPUCORE_REDUCTION_MAX ? -INFINITY : op == GPUCORE_REDUCTION_MIN ? INFINITY : 0;
            int64_t best = 0;
            double bestv = -INFINITY;
            for (int64_t l = 0; l < len; l++) {
                double v = x[(o * len + l) * inner + j];
                switch (op) {
                case GPUCORE_REDUCTION_SUM: case GPUCORE_REDUCTION_MEAN: acc += v; break;
                case GPUCORE_REDUCTION_SUMSQ: acc += v * v; break;
                case GPUCORE_REDUCTION_MAX: acc = v > acc ? v : acc; break;
                case GPUCORE_REDUCTION_MIN: acc = v < acc ? v : acc; break;
                default: if (v > bestv) { bestv = v; best = l; } break;
                }
            }
            if (op == GPUCORE_REDUCTION_MEAN) acc /= (double)len;
            ref[o * inner + j] = op == GPUCORE_REDUCTION_ARGMAX ? (double)best : acc;
        }
}

typedef struct rcase { int ndim; int64_t shape[3]; int axis; int layout; } rcase;
static const rcase cases[] = {
    {1, {1}, 0, 0},
    {1, {1027}, 0, 0},
    {2, {5, 33}, 1, 0},
    {3, {64, 9, 8}, 2, 0},          /* many short rows: a warp per row on kernel backends */
    {2, {40, 1000}, 1, 0},          /* the longest rows a warp takes */
    {2, {5, 33}, 0, 2},             /* transposed input, reduce rows */
    {3, {3, 7, 9}, 1, 1},           /* middle axis, strided input */
    {2, {3, 20001}, -1, 0},         /* rows of several chunks (two passes) */
    {2, {700, 5}, 0, 0},            /* columns of several chunks */
    {3, {2, 3, 50000}, GPUCORE_ALL_AXES, 0},
};

static void test_reduce(gpucore_context *ctx)
{
    const int ncase = (int)(sizeof cases / sizeof cases[0]);
    for (int ci = 0; ci < ncase; ci++)
        for (int di = 0; di < 3; di++)
            for (int op = 0; op <= GPUCORE_REDUCTION_SUMSQ; op++) {
                const rcase *c = &cases[ci];
                gpucore_dtype dt = float_dtypes[di];
                double *hx;
                gpucore_tensor *x = make_input(ctx, dt, c->ndim, c->shape, c->layout, -0.5, 0.5, &hx); /* sums of squares stay within f16 */
                int64_t outer = 1, len = 1, inner = 1, oshape[3];
                int on = 0, ax = c->axis == GPUCORE_ALL_AXES ? -1 : (c->axis + c->ndim) % c->ndim;
                for (int d = 0; d < c->ndim; d++) {
                    if (ax < 0) { len *= c->shape[d]; continue; }
                    if (d < ax) outer *= c->shape[d];
                    else if (d == ax) len = c->shape[d];
                    else inner *= c->shape[d];
                    if (d != ax) oshape[on++] = c->shape[d];
                }
                if (ax < 0) { on = 1; oshape[0] = 1; }
                gpucore_dtype odt = op == GPUCORE_REDUCTION_ARGMAX ? GPUCORE_I64 : dt;
                guarded o = make_output(ctx, odt, on, oshape, 0);
                CHECK_OK(gpucore_reduce((gpucore_reduction)op, o.view, x, c->axis, NULL));
                /* determinism: a second run into a second buffer gives the same bits */
                gpucore_tensor *o2 = NULL;
                CHECK_OK(gpucore_tensor_create(ctx, odt, on, oshape, &o2));
                CHECK_OK(gpucore_reduce((gpucore_reduction)op, o2, x, c->axis, NULL));
                double *out = finish_output(&o, "reduce");
                double *out2 = read_back(o2);
                CHECK(memcmp(out, out2, sizeof(double) * (size_t)o.numel) == 0);
                double *ref = malloc(sizeof(double) * (size_t)o.numel);
                reference(op, hx, outer, len, inner, ref);
                char what[128];
                snprintf(what, sizeof what, "reduce op %d case %d %s", op, ci, gpucore_dtype_name(dt));
                if (op == GPUCORE_REDUCTION_ARGMAX) {
                    int64_t bad = 0;
                    for (int64_t i = 0; i < o.numel; i++) bad += out[i] != ref[i];
                    CHECK(bad == 0);
                    if (bad) fprintf(stderr, "  %s: %lld wrong indices\n", what, (long long)bad);
                } else check_close(out, ref, o.numel, tolerance_for(dt, 1), what);
                free(hx); free(out); free(out2); free(ref);
                gpucore_tensor_destroy(o2);
                gpucore_tensor_destroy(x);
            }
}

/* Several dims at once (gpucore_reduce_dims): the float64 reference walks every
 * input element and folds it into its output element, independent of the
 * front-end's [outer, len, inner] / permuted-view plan. */
typedef struct mcase { int ndim; int64_t shape[4]; int nd; int dims[4]; int layout; int keep; } mcase;
static const mcase mcases[] = {
    {3, {4, 5, 6}, 2, {0, 2}, 0, 0},         /* non-adjacent: permuted view */
    {3, {4, 5, 6}, 2, {2, 0}, 1, 1},         /* any order, strided input, keepdim */
    {4, {3, 4, 5, 7}, 2, {1, 2}, 0, 0},      /* adjacent: [outer, len, inner] */
    {4, {2, 3, 4, 5}, 3, {-1, 0, 2}, 2, 1},  /* negative dims, transposed input */
    {4, {3, 1, 4, 9000}, 2, {1, 3}, 0, 0},   /* merged rows of several chunks */
    {3, {6, 5, 4}, 3, {0, 1, 2}, 0, 0},      /* every dim listed */
    {3, {6, 5, 4}, 0, {0}, 1, 1},            /* dims=(): every dim, keepdim */
    {3, {2, 0, 3}, 2, {0, 2}, 0, 0},         /* an empty kept dim: empty output */
};

static void reference_dims(int op, const double *x, const mcase *c, const int *red, double *ref, int64_t *count,
                           int64_t onumel)
{
    for (int64_t i = 0; i < onumel; i++) {
        ref[i] = op == GPUCORE_REDUCTION_MAX ? -INFINITY : op == GPUCORE_REDUCTION_MIN ? INFINITY : 0;
        count[i] = 0;
    }
    int64_t numel = 1;
    for (int d = 0; d < c->ndim; d++) numel *= c->shape[d];
    for (int64_t i = 0; i < numel; i++) {
        int64_t rem = i, oi = 0, mul = 1;
        for (int d = c->ndim - 1; d >= 0; d--) {
            int64_t id = rem % c->shape[d];
            rem /= c->shape[d];
            if (!red[d]) { oi += id * mul; mul *= c->shape[d]; }
        }
        double v = x[i];
        switch (op) {
        case GPUCORE_REDUCTION_SUM: case GPUCORE_REDUCTION_MEAN: ref[oi] += v; break;
        case GPUCORE_REDUCTION_SUMSQ: ref[oi] += v * v; break;
        case GPUCORE_REDUCTION_MAX: ref[oi] = v > ref[oi] ? v : ref[oi]; break;
        default: ref[oi] = v < ref[oi] ? v : ref[oi]; break;
        }
        count[oi]++;
    }
    if (op == GPUCORE_REDUCTION_MEAN)
        for (int64_t i = 0; i < onumel; i++) ref[i] /= (double)count[i];
}

static void test_reduce_dims(gpucore_context *ctx)
{
    static const int ops[] = {GPUCORE_REDUCTION_SUM, GPUCORE_REDUCTION_MEAN, GPUCORE_REDUCTION_MAX,
                              GPUCORE_REDUCTION_MIN, GPUCORE_REDUCTION_SUMSQ};
    const int ncase = (int)(sizeof mcases / sizeof mcases[0]);
    for (int ci = 0; ci < ncase; ci++)
        for (int di = 0; di < 3; di++)
            for (int oi = 0; oi < 5; oi++) {
                const mcase *c = &mcases[ci];
                int op = ops[oi], red[4] = {0}, on = 0;
                gpucore_dtype dt = float_dtypes[di];
                for (int k = 0; k < c->nd; k++) red[(c->dims[k] + c->ndim) % c->ndim] = 1;
                if (c->nd == 0) for (int d = 0; d < c->ndim; d++) red[d] = 1;
                int64_t oshape[4];
                for (int d = 0; d < c->ndim; d++)
                    if (!red[d] || c->keep) oshape[on++] = red[d] ? 1 : c->shape[d];
                double *hx;
                gpucore_tensor *x = make_input(ctx, dt, c->ndim, c->shape, c->layout, -0.5, 0.5, &hx);
                guarded o = make_output(ctx, dt, on, oshape, 0);
                CHECK_OK(gpucore_reduce_dims((gpucore_reduction)op, o.view, x, c->dims, c->nd, NULL));
                gpucore_tensor *o2 = NULL;
                CHECK_OK(gpucore_tensor_create(ctx, dt, on, oshape, &o2));
                CHECK_OK(gpucore_reduce_dims((gpucore_reduction)op, o2, x, c->dims, c->nd, NULL));
                double *out = finish_output(&o, "reduce_dims");
                double *out2 = read_back(o2);
                CHECK(memcmp(out, out2, sizeof(double) * (size_t)o.numel) == 0);
                double *ref = malloc(sizeof(double) * (size_t)(o.numel + 1));
                int64_t *cnt = malloc(sizeof(int64_t) * (size_t)(o.numel + 1));
                reference_dims(op, hx, c, red, ref, cnt, o.numel);
                char what[128];
                snprintf(what, sizeof what, "reduce_dims op %d case %d %s", op, ci, gpucore_dtype_name(dt));
                check_close(out, ref, o.numel, tolerance_for(dt, 1), what);
                free(hx); free(out); free(out2); free(ref); free(cnt);
                gpucore_tensor_destroy(o2);
                gpucore_tensor_destroy(x);
            }
    /* bad input: a dim twice, out of range, argmax over two dims, wrong out shape, NULL dims */
    int64_t s3[3] = {2, 3, 4}, s1[1] = {3}, s2[2] = {2, 4};
    gpucore_tensor *x = NULL, *o = NULL, *oi = NULL, *o24 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s3, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s1, &o));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 1, s1, &oi));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s2, &o24));
    const int twice[2] = {0, -3}, range[2] = {0, 3}, ok[2] = {0, 2};
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o, x, twice, 2, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o, x, range, 2, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_ARGMAX, oi, x, ok, 2, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o24, x, ok, 2, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o, x, NULL, 2, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o, x, ok, -1, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, oi, x, ok, 2, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o, NULL, ok, 2, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_reduce_dims(GPUCORE_REDUCTION_SUM, o, x, ok, 2, NULL)); /* still usable */
    gpucore_tensor *ts[] = {x, o, oi, o24};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) gpucore_tensor_destroy(ts[k]);
}

static void test_bias_grad(gpucore_context *ctx)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {4, 9, 65}, {1, 1000, 3}, {2, 300, 64}};
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 3; di++) {
            gpucore_dtype dt = float_dtypes[di];
            double *hy;
            gpucore_tensor *dy = make_input(ctx, dt, 3, shapes[si], si % 2, -1, 1, &hy);
            int64_t cols = shapes[si][2], rows = shapes[si][0] * shapes[si][1];
            guarded o = make_output(ctx, dt, 1, &cols, 0);
            CHECK_OK(gpucore_bias_grad(o.view, dy, NULL));
            double *out = finish_output(&o, "bias_grad");
            double *ref = malloc(sizeof(double) * (size_t)cols);
            reference(GPUCORE_REDUCTION_SUM, hy, 1, rows, cols, ref);
            check_close(out, ref, cols, tolerance_for(dt, 1), "bias_grad");
            free(hy); free(out); free(ref);
            gpucore_tensor_destroy(dy);
        }
}

/* CPU: bf16 row sums add the same values in the same order as f32 row sums (the vector bodies widen
 * bf16 in registers in another arrangement of the lanes): rows whose second half cancels the
 * first exactly (x, then -x permuted, exponents 2^-14..2^14), so the result is nothing but the f32
 * lane sums' rounding, which depends on which element each lane adds when; the bf16 sums must equal
 * the f32 sums of the same values rounded to bf16, bit for bit. */
static void test_bf16_sum_order(gpucore_context *ctx)
{
    /* a property of the CPU backend's vector bodies; the kernels add bf16 rows in their own order */
    if (strcmp(gpucore_context_device_name(ctx), "cpu") != 0) return;
    static const int64_t lens[] = {1024, 1000, 3000, 16, 40};
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)harness_seed++;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t rows = 48, n = lens[li], shape[2] = {rows, n};
        uint16_t *hb = malloc(sizeof(uint16_t) * (size_t)(rows * n));
        float *hf = malloc(sizeof(float) * (size_t)(rows * n));
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)(n / 2));
        for (int64_t r = 0; r < rows; r++) {
            const int64_t h = n / 2;
            for (int64_t i = 0; i < h; i++) perm[i] = i;
            for (int64_t i = h - 1; i > 0; i--) { /* Fisher-Yates */
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const int64_t j = (int64_t)((rng >> 33) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int64_t i = 0; i < n; i++) {
                float v;
                if (i < h) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    v = ldexpf(1.0f + (float)((rng >> 40) & 127) / 128.0f, (int)((rng >> 50) % 29) - 14);
                    if ((rng >> 63) & 1) v = -v;
                } else if (i < 2 * h) {
                    v = -hf[r * n + perm[i - h]];
                } else {
                    v = 0.5f; /* an odd length's last element */
                }
                hf[r * n + i] = v;
                hb[r * n + i] = gpucore_f32_to_bf16(v);
            }
        }
        gpucore_tensor *xb = NULL, *xf = NULL, *ob = NULL, *of = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, shape, &xb));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &xf));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 1, &rows, &ob));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &rows, &of));
        CHECK_OK(gpucore_copy_from_host(xb, hb, (int64_t)sizeof(uint16_t) * rows * n));
        CHECK_OK(gpucore_copy_from_host(xf, hf, (int64_t)sizeof(float) * rows * n));
        CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_SUM, ob, xb, 1, NULL));
        CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_SUM, of, xf, 1, NULL));
        uint16_t sb[48];
        float sf[48];
        CHECK_OK(gpucore_copy_to_host(sb, sizeof sb, ob));
        CHECK_OK(gpucore_copy_to_host(sf, sizeof sf, of));
        int same = 1, nonzero = 0;
        for (int64_t r = 0; r < rows; r++) {
            same &= sb[r] == gpucore_f32_to_bf16(sf[r]);
            nonzero += sf[r] != (n & 1 ? 0.5f : 0.0f); /* the lanes' rounding shows */
        }
        if (!same) fprintf(stderr, "bf16 row sums of length %lld differ from the f32 ones\n", (long long)n);
        CHECK(same);
        if (n >= 1000) CHECK(nonzero > rows / 2); /* the check can see an order change */
        gpucore_tensor *ts[] = {xb, xf, ob, of};
        for (size_t k = 0; k < 4; k++) gpucore_tensor_destroy(ts[k]);
        free(hb); free(hf); free(perm);
    }
}

static void test_special(gpucore_context *ctx)
{
    /* NaN propagates through max/min/argmax; ties pick the first index */
    float v[8] = {1, 3, 3, NAN, -2, 3, NAN, 0};
    int64_t n = 8, one = 1;
    gpucore_tensor *x = NULL, *m = NULL, *i = NULL, *e = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &m));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I64, 1, &one, &i));
    CHECK_OK(gpucore_copy_from_host(x, v, sizeof v));
    float fm = 0;
    int64_t im = -5;
    CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_MAX, m, x, 0, NULL));
    CHECK_OK(gpucore_copy_to_host(&fm, 4, m));
    CHECK(isnan(fm));
    CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_ARGMAX, i, x, 0, NULL));
    CHECK_OK(gpucore_copy_to_host(&im, 8, i));
    CHECK(im == 3);
    v[3] = v[6] = 0;
    CHECK_OK(gpucore_copy_from_host(x, v, sizeof v));
    CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_ARGMAX, i, x, GPUCORE_ALL_AXES, NULL));
    CHECK_OK(gpucore_copy_to_host(&im, 8, i));
    CHECK(im == 1);
    /* empty axis: sum 0, mean NaN, max an error */
    int64_t s05[2] = {0, 5}, s5[1] = {5};
    gpucore_tensor *o5 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s05, &e));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s5, &o5));
    float h5[5];
    CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_SUM, o5, e, 0, NULL));
    CHECK_OK(gpucore_copy_to_host(h5, sizeof h5, o5));
    CHECK(h5[0] == 0 && h5[4] == 0);
    CHECK_OK(gpucore_reduce(GPUCORE_REDUCTION_MEAN, o5, e, 0, NULL));
    CHECK_OK(gpucore_copy_to_host(h5, sizeof h5, o5));
    CHECK(isnan(h5[2]));
    CHECK_STATUS(gpucore_reduce(GPUCORE_REDUCTION_MAX, o5, e, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    /* bad input */
    CHECK_STATUS(gpucore_reduce(GPUCORE_REDUCTION_SUM, o5, x, 0, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_reduce(GPUCORE_REDUCTION_SUM, m, x, 1, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_reduce(GPUCORE_REDUCTION_ARGMAX, m, x, 0, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_reduce(GPUCORE_REDUCTION_SUM, i, x, 0, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_reduce((gpucore_reduction)17, m, x, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *first = NULL;
    CHECK_OK(gpucore_tensor_slice(x, 0, 0, 1, 1, &first));
    CHECK_STATUS(gpucore_reduce(GPUCORE_REDUCTION_SUM, first, x, GPUCORE_ALL_AXES, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_bias_grad(o5, x, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    gpucore_tensor *ts[] = {x, m, i, e, o5, first};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) gpucore_tensor_destroy(ts[k]);
}

int main(void)
{
    static const device_test_fn tests[] = {test_reduce, test_reduce_dims, test_bias_grad, test_bf16_sum_order, test_special};
    return run_on_devices("test_ops_reduce", tests, (int)(sizeof tests / sizeof tests[0]));
}
