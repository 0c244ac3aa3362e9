/*
 * test_ops_elementwise.c — the elementwise family on every backend present:
 * binary ops with broadcasting (+ fused activation), unary math, scale, axpy,
 * clamp, activations forward and backward (backward against central finite
 * differences of the f64 forward), dropout (mask from Philox on the host),
 * casts between f32/f64/f16/bf16 including NaN/Inf/double rounding, fp8 casts
 * against tests/fp8_ref.h (all 256 codes out, every rounding boundary in), and bad
 * input; the *_new calls against create + the op. Each output sits in a poisoned buffer with guard bands; inputs are
 * fresh random data, some as non-contiguous views.
 */
#include "ops_harness.h"
#include "philox.h"
#include "fp8_ref.h"

static double act_f64(int act, double x)
{
    switch (act) {
    case GPUCORE_ACT_RELU: return x > 0 ? x : 0;
    case GPUCORE_ACT_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case GPUCORE_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case GPUCORE_ACT_SILU: return x / (1 + exp(-x));
    case GPUCORE_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case GPUCORE_ACT_TANH: return tanh(x);
    default: return x;
    }
}

static double binary_f64(int op, double a, double b)
{
    switch (op) {
    case GPUCORE_ADD: return a + b;
    case GPUCORE_SUB: return a - b;
    case GPUCORE_MUL: return a * b;
    case GPUCORE_DIV_TRUNC: return trunc(a / b);
    case GPUCORE_DIV_FLOOR: return floor(a / b);
    case GPUCORE_MAXIMUM: return a > b ? a : b;
    case GPUCORE_MINIMUM: return a < b ? a : b;
    default: return a / b;
    }
}

typedef struct bcase { int na, nb, no; int64_t a[4], b[4], o[4]; int layout_a, layout_b, out_t; } bcase;

static const bcase binary_cases[] = {
    {1, 1, 1, {1}, {1}, {1}, 0, 0, 0},
    {1, 1, 1, {1027}, {1027}, {1027}, 0, 0, 0},
    {2, 1, 2, {37, 65}, {65}, {37, 65}, 0, 0, 0},          /* bias row */
    {2, 1, 2, {9, 64}, {64}, {9, 64}, 0, 0, 0},            /* bias row, vector width multiple */
    {2, 2, 2, {37, 1}, {1, 65}, {37, 65}, 0, 0, 0},        /* outer product broadcast */
    {3, 0, 3, {5, 3, 17}, {0}, {5, 3, 17}, 2, 0, 0},       /* transposed input, 0-dim scalar b */
    {2, 2, 2, {33, 21}, {33, 21}, {33, 21}, 1, 2, 1},      /* strided + transposed inputs, transposed out */
    {2, 2, 2, {0, 7}, {0, 7}, {0, 7}, 0, 0, 0},            /* empty */
    {2, 1, 2, {3, 70001}, {70001}, {3, 70001}, 0, 0, 0},   /* large, odd */
};

#define NBINARY 8 /* gpucore_binary_op values; one more loop step tests a fused activation */

/* Edge cases of the rounding divisions and max/min: signs, exact multiples, zero
 * divisors, signed zero and NaN (PyTorch's results). */
static void test_binary_special(gpucore_context *ctx)
{
    static const struct { int op; float a, b, want; } v[] = {
        {GPUCORE_DIV_FLOOR, -7, 2, -4}, {GPUCORE_DIV_FLOOR, 7, -2, -4}, {GPUCORE_DIV_FLOOR, -7, -2, 3},
        {GPUCORE_DIV_FLOOR, 6, 3, 2}, {GPUCORE_DIV_FLOOR, -6, 3, -2}, {GPUCORE_DIV_FLOOR, 1, -3, -1},
        {GPUCORE_DIV_FLOOR, -0.5f, 0.25f, -2}, {GPUCORE_DIV_FLOOR, 5, 0, INFINITY}, {GPUCORE_DIV_FLOOR, -5, 0, -INFINITY},
        {GPUCORE_DIV_TRUNC, -7, 2, -3}, {GPUCORE_DIV_TRUNC, 7, -2, -3}, {GPUCORE_DIV_TRUNC, 7.9f, 1, 7},
        {GPUCORE_MAXIMUM, 1, NAN, NAN}, {GPUCORE_MAXIMUM, NAN, 1, NAN}, {GPUCORE_MAXIMUM, -1, 2, 2},
        {GPUCORE_MINIMUM, 1, NAN, NAN}, {GPUCORE_MINIMUM, NAN, 1, NAN}, {GPUCORE_MINIMUM, -1, 2, -1},
    };
    const int n = (int)(sizeof v / sizeof v[0]);
    int64_t one = 1;
    gpucore_tensor *a = NULL, *b = NULL, *o = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &o));
    for (int k = 0; k < n; k++) {
        float r = 0;
        CHECK_OK(gpucore_copy_from_host(a, &v[k].a, 4));
        CHECK_OK(gpucore_copy_from_host(b, &v[k].b, 4));
        CHECK_OK(gpucore_binary((gpucore_binary_op)v[k].op, o, a, b, NULL));
        CHECK_OK(gpucore_copy_to_host(&r, 4, o));
        int ok = isnan(v[k].want) ? isnan(r) : r == v[k].want;
        CHECK(ok);
        if (!ok) fprintf(stderr, "  binary op %d (%g, %g) gave %g, want %g\n", v[k].op, v[k].a, v[k].b, r, v[k].want);
    }
    /* 0 // -3 is -0 */
    float z = 0, m3 = -3, r = 1;
    CHECK_OK(gpucore_copy_from_host(a, &z, 4));
    CHECK_OK(gpucore_copy_from_host(b, &m3, 4));
    CHECK_OK(gpucore_binary(GPUCORE_DIV_FLOOR, o, a, b, NULL));
    CHECK_OK(gpucore_copy_to_host(&r, 4, o));
    CHECK(r == 0 && signbit(r));
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(o);
}

/* Binary ops first .. last-1 (NBINARY: ADD with a fused GELU) on every case. */
static void test_binary(gpucore_context *ctx, int first, int last)
{
    const int ncase = (int)(sizeof binary_cases / sizeof binary_cases[0]);
    for (int ci = 0; ci < ncase; ci++)
        for (int di = 0; di < 3; di++)
            for (int op = first; op < last; op++) {
                const bcase *c = &binary_cases[ci];
                gpucore_dtype dt = float_dtypes[di];
                int bop = op < NBINARY ? op : GPUCORE_ADD, act = op < NBINARY ? 0 : GPUCORE_ACT_GELU_TANH;
                int divides = bop == GPUCORE_DIV || bop == GPUCORE_DIV_TRUNC || bop == GPUCORE_DIV_FLOOR;
                double blo = divides ? (ci % 2 ? -2 : 0.5) : -2, bhi = divides ? (ci % 2 ? -0.5 : 2) : 2;
                double *ha, *hb;
                gpucore_tensor *a = make_input(ctx, dt, c->na, c->a, c->layout_a, divides ? -6 : -2, divides ? 6 : 2, &ha);
                gpucore_tensor *b = make_input(ctx, dt, c->nb, c->b, c->layout_b, blo, bhi, &hb);
                guarded o = make_output(ctx, dt, c->no, c->o, c->out_t);
                CHECK_OK(gpucore_binary_act((gpucore_binary_op)bop, (gpucore_activation)act, o.view, a, b, NULL));
                double *out = finish_output(&o, "binary");
                double *ref = malloc(sizeof(double) * (size_t)(o.numel + 1));
                for (int64_t i = 0; i < o.numel; i++) {
                    double x = ha[broadcast_index(i, c->no, c->o, c->na, c->a)];
                    double y = hb[broadcast_index(i, c->no, c->o, c->nb, c->b)];
                    ref[i] = act_f64(act, binary_f64(bop, x, y));
                }
                char what[128];
                snprintf(what, sizeof what, "binary op %d act %d case %d %s", bop, act, ci, gpucore_dtype_name(dt));
                check_close(out, ref, o.numel, tolerance_for(dt, 0), what);
                free(ha); free(hb); free(out); free(ref);
                gpucore_tensor_destroy(a);
                gpucore_tensor_destroy(b);
            }
}

/* unary, scale, clamp, activation forward/backward, axpy, dropout */
enum { K_UNARY = 0, K_SCALE = 6, K_CLAMP, K_ACT, K_ACT_BWD = K_ACT + 6, K_AXPY = K_ACT_BWD + 6, K_DROPOUT, K_END };

static void test_unary_family(gpucore_context *ctx)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 7, 49}, {1, 1, 4099}, {64, 1, 1032}};
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 3; di++)
            for (int k = 0; k < K_END; k++) {
                gpucore_dtype dt = float_dtypes[di];
                const int64_t *shape = shapes[si];
                int layout = (k + si) % 3, in_place = (k % 4 == 1) && layout == 0;
                double lo = -3, hi = 3;
                if (k == GPUCORE_LOG || k == GPUCORE_SQRT || k == GPUCORE_RSQRT) { lo = 0.1; hi = 4; }
                double *hx, *hy = NULL;
                gpucore_tensor *x = make_input(ctx, dt, 3, shape, layout, lo, hi, &hx);
                gpucore_tensor *y = NULL;
                if (k >= K_ACT_BWD && k < K_DROPOUT) y = make_input(ctx, dt, 3, shape, 0, -1, 1, &hy);
                guarded o = make_output(ctx, dt, 3, shape, si == 1);
                gpucore_tensor *dst = o.view;
                if (in_place && k != K_AXPY) { /* write the input first, then run in place */
                    CHECK_OK(gpucore_copy(o.view, x, NULL));
                    gpucore_tensor_destroy(x);
                    x = o.view;
                }
                const double p = 0.3;
                const uint64_t seed = harness_seed++, offset = 77;
                if (k < K_SCALE) CHECK_OK(gpucore_unary((gpucore_unary_op)k, dst, x, NULL));
                else if (k == K_SCALE) CHECK_OK(gpucore_scale(dst, x, -1.5, 0.25, NULL));
                else if (k == K_CLAMP) CHECK_OK(gpucore_clamp(dst, x, -1.0, 0.5, NULL));
                else if (k < K_ACT_BWD) CHECK_OK(gpucore_activation_forward((gpucore_activation)(k - K_ACT + 1), dst, x, NULL));
                else if (k < K_AXPY)
                    CHECK_OK(gpucore_activation_backward((gpucore_activation)(k - K_ACT_BWD + 1), dst, y, x, NULL));
                else if (k == K_AXPY) {
                    CHECK_OK(gpucore_copy(dst, x, NULL)); /* y := x, then y += 0.75 * x2 */
                    free(hx);
                    hx = read_back(dst);
                    double *hx2;
                    gpucore_tensor *x2 = make_input(ctx, dt, 3, shape, 1, -3, 3, &hx2);
                    CHECK_OK(gpucore_axpy(dst, 0.75, x2, NULL));
                    for (int64_t i = 0; i < o.numel; i++) hx[i] = hx[i] + 0.75 * hx2[i];
                    free(hx2);
                    gpucore_tensor_destroy(x2);
                } else CHECK_OK(gpucore_dropout(dst, x, p, seed, offset, NULL));
                if (x == o.view) x = NULL;
                double *out = finish_output(&o, "unary");
                double *ref = malloc(sizeof(double) * (size_t)o.numel);
                for (int64_t i = 0; i < o.numel; i++) {
                    double v = hx[i], r;
                    switch (k) {
                    case GPUCORE_EXP: r = exp(v); break;
                    case GPUCORE_LOG: r = log(v); break;
                    case GPUCORE_SQRT: r = sqrt(v); break;
                    case GPUCORE_RSQRT: r = 1 / sqrt(v); break;
                    case GPUCORE_ABS: r = fabs(v); break;
                    case GPUCORE_NEG: r = -v; break;
                    case K_SCALE: r = -1.5 * v + 0.25; break;
                    case K_CLAMP: r = v < -1 ? -1 : v > 0.5 ? 0.5 : v; break;
                    case K_AXPY: r = v; break;
                    case K_DROPOUT: r = gpucore_philox_uniform(seed, offset, (uint64_t)i) >= (float)p ? v * (double)(float)(1 / (1 - p)) : 0; break;
                    default:
                        if (k < K_ACT_BWD) r = act_f64(k - K_ACT + 1, v);
                        else { /* central finite difference of the f64 forward */
                            const double h = 1e-5;
                            int a = k - K_ACT_BWD + 1;
                            r = hy[i] * (act_f64(a, v + h) - act_f64(a, v - h)) / (2 * h);
                        }
                    }
                    ref[i] = r;
                }
                char what[128];
                snprintf(what, sizeof what, "unary kind %d shape %d %s%s", k, si, gpucore_dtype_name(dt),
                         in_place ? " in place" : "");
                double tol = tolerance_for(dt, 0);
                if (dt == GPUCORE_F32 && (k == K_DROPOUT || k == K_AXPY || k == K_SCALE)) tol = 1e-6;
                check_close(out, ref, o.numel, tol, what);
                free(hx); free(hy); free(out); free(ref);
                if (x) gpucore_tensor_destroy(x);
                if (y) gpucore_tensor_destroy(y);
            }
}

static void test_cast(gpucore_context *ctx)
{
    static const gpucore_dtype dts[4] = {GPUCORE_F32, GPUCORE_F64, GPUCORE_F16, GPUCORE_BF16};
    for (int si = 0; si < 4; si++)
        for (int to = 0; to < 4; to++) {
            gpucore_dtype src = dts[si], dst = dts[to];
            int64_t shape[2] = {19, 131};
            double *hx;
            gpucore_tensor *x = make_input(ctx, src, 2, shape, to % 3, -1000, 1000, &hx);
            guarded o = make_output(ctx, dst, 2, shape, to == 1);
            CHECK_OK(gpucore_cast(o.view, x, NULL));
            double *out = finish_output(&o, "cast");
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", gpucore_dtype_name(src), gpucore_dtype_name(dst));
            double tol = (dst == GPUCORE_F16 || dst == GPUCORE_BF16) ? 1e-2 : (src == GPUCORE_F64 && dst == GPUCORE_F32 ? 1e-6 : 0);
            check_close(out, hx, o.numel, tol, what);
            free(hx); free(out);
            gpucore_tensor_destroy(x);
        }
    /* special values, f64 source: NaN, +-Inf, overflow, and a value where rounding twice would be wrong */
    const double specials[6] = {NAN, INFINITY, -INFINITY, 1e300, 1.0 + 0x1p-11 + 0x1p-40, -0.0};
    int64_t n = 6;
    gpucore_tensor *x = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F64, 1, &n, &x));
    CHECK_OK(gpucore_copy_from_host(x, specials, sizeof specials));
    for (int to = 0; to < 4; to++) {
        gpucore_tensor *y = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, dts[to], 1, &n, &y));
        CHECK_OK(gpucore_cast(y, x, NULL));
        double *out = read_back(y);
        CHECK(isnan(out[0]) && out[1] == INFINITY && out[2] == -INFINITY);
        CHECK(dts[to] == GPUCORE_F64 ? out[3] == 1e300 : out[3] == INFINITY);
        if (dts[to] == GPUCORE_F16) CHECK(out[4] == 1.0 + 0x1p-10);  /* correctly rounded once */
        if (dts[to] == GPUCORE_BF16) CHECK(out[4] == 1.0);
        CHECK(out[5] == 0 && signbit(out[5]));
        free(out);
        /* and back from that dtype to f64: NaN/Inf survive */
        gpucore_tensor *z = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F64, 1, &n, &z));
        CHECK_OK(gpucore_cast(z, y, NULL));
        out = read_back(z);
        CHECK(isnan(out[0]) && out[1] == INFINITY && out[2] == -INFINITY);
        free(out);
        gpucore_tensor_destroy(y);
        gpucore_tensor_destroy(z);
    }
    gpucore_tensor_destroy(x);
}

/* Whether r is x rounded to nearest, ties to even, in a format of `bits` significant bits
 * (x normal there: exponents 2^-14 .. 2^13 here): |x - r| is at most half the spacing on x's side of r, and a tie
 * picks the even significand. An independent check of the vectorised f32 -> bf16/f16
 * rounding (the tolerance tests above cannot see a one-ulp rounding error). */
static int rounds_to_nearest_even(double x, double r, int bits)
{
    if (isnan(x)) return isnan(r);
    int e;
    frexp(r, &e);
    double ulp = ldexp(1.0, e - bits), d = fabs(x - r);
    if (fabs(x) < fabs(r) && fabs(r) == ldexp(1.0, e - 1)) ulp /= 2; /* below a power of two */
    if (d > ulp / 2) return 0;
    if (d == ulp / 2) return fmod(fabs(r) / ldexp(1.0, e - bits), 2.0) == 0.0;
    return 1;
}

/* f16 bits of the f32 with bits u, computed independently in f64: nearest even (nearbyint in the
 * default rounding mode), 2^-24 steps below 2^-14, Inf from 65520 up, NaN quiet with the payload's
 * top bits (the library's NaN rule). */
static uint16_t ref_f32_to_f16_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    const double a = fabs((double)f);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a / 0x1p-24)); /* 1024: the least normal */
    int e = ilogb(a);
    double m = nearbyint(a / ldexp(1.0, e - 10));
    if (m == 2048.0) { e++; m = 1024.0; }
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)(m - 1024.0));
}

/* bf16 bits of the f32 with bits u, independently in f64: 8 significant bits, nearest even, steps of
 * 2^-133 below 2^-126 (subnormal inputs kept, not flushed), Inf past the largest bf16; NaN quiet with
 * its top payload bits (the library's rule). */
static uint16_t ref_f32_to_bf16_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u);
    const double a = fabs((double)f);
    const int e = a < 0x1p-126 ? -126 : ilogb(a);
    const double q = ldexp(1.0, e - 7), r = nearbyint(a / q) * q;
    float g = (float)(signbit(f) ? -r : r); /* exact, or Inf past the largest finite */
    uint32_t w;
    memcpy(&w, &g, 4);
    return (uint16_t)(w >> 16);
}

/* f32 bits of the f16 h: exact; a NaN keeps its payload (quiet or signalling) in the top bits. */
static uint32_t ref_f16_to_f32_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 31) return sign | 0x7f800000u | (m << 13);
    float f = (float)(e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, (int)e - 25));
    uint32_t u;
    memcpy(&u, &f, 4);
    return u | sign;
}

/* Every f16 bit pattern widened by gpucore_cast, and 2^20 f32 patterns spread over every exponent
 * (subnormal results, overflow, ties, NaN payloads) rounded to f16 and to bf16: bit for bit against the f64
 * references above (the vectorised F16C paths on the CPU, the hardware cvt on a GPU); a widened
 * NaN need only stay a NaN of its sign. */
static void test_cast_f16_bits(gpucore_context *ctx)
{
    enum { NH = 65536, NF = 1 << 20 };
    uint16_t *h = malloc(sizeof(uint16_t) * NF);
    uint32_t *w = malloc(sizeof(uint32_t) * NF);
    int64_t nh = NH, nf = NF;
    gpucore_tensor *x16 = NULL, *x32 = NULL, *y16 = NULL, *y32 = NULL;
    for (int i = 0; i < NH; i++) h[i] = (uint16_t)i;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 1, &nh, &x16));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &nh, &y32));
    CHECK_OK(gpucore_copy_from_host(x16, h, sizeof(uint16_t) * NH));
    CHECK_OK(gpucore_cast(y32, x16, NULL));
    CHECK_OK(gpucore_copy_to_host(w, sizeof(uint32_t) * NH, y32));
    int bad = 0;
    for (int i = 0; i < NH; i++) {
        const uint32_t want = ref_f16_to_f32_bits((uint16_t)i);
        if ((want & 0x7fffffffu) > 0x7f800000u) /* a NaN stays a NaN of its sign (casts through f64 quiet it) */
            bad += (w[i] & 0x7fffffffu) <= 0x7f800000u || (w[i] ^ want) >> 31;
        else
            bad += w[i] != want;
    }
    if (bad) fprintf(stderr, "  cast f16 -> f32: %d of %d bit patterns differ from the reference\n", bad, NH);
    CHECK(bad == 0);
    for (uint32_t i = 0; i < NF; i++) {
        w[i] = i * 4093u + (i >> 7); /* every exponent, varied low bits */
        if (i % 5 == 1) w[i] = (w[i] & ~0x1fffu) | 0x1000u; /* a tie in the normal range */
    }
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &nf, &x32));
    CHECK_OK(gpucore_copy_from_host(x32, w, sizeof(uint32_t) * NF));
    /* to f16, and to bf16 (AVX512-BF16's instruction flushes subnormal inputs: the library must not) */
    const gpucore_dtype narrow[2] = {GPUCORE_F16, GPUCORE_BF16};
    uint16_t (*const ref[2])(uint32_t) = {ref_f32_to_f16_bits, ref_f32_to_bf16_bits};
    for (int t = 0; t < 2; t++) {
        CHECK_OK(gpucore_tensor_create(ctx, narrow[t], 1, &nf, &y16));
        CHECK_OK(gpucore_cast(y16, x32, NULL));
        CHECK_OK(gpucore_copy_to_host(h, sizeof(uint16_t) * NF, y16));
        bad = 0;
        for (uint32_t i = 0; i < NF; i++) bad += h[i] != ref[t](w[i]);
        if (bad) fprintf(stderr, "  cast f32 -> %s: %d of %d bit patterns differ from the reference\n",
                         gpucore_dtype_name(narrow[t]), bad, NF);
        CHECK(bad == 0);
        gpucore_tensor_destroy(y16);
        y16 = NULL;
    }
    gpucore_tensor_destroy(x16);
    gpucore_tensor_destroy(y32);
    gpucore_tensor_destroy(x32);
    gpucore_tensor_destroy(y16);
    free(h);
    free(w);
}

static void test_cast_rounding(gpucore_context *ctx)
{
    enum { N = 4099 }; /* not a multiple of the vector width: the tail too */
    float *hx = malloc(sizeof(float) * N);
    uint32_t state = 12345;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;
        uint32_t u = (state >> 9) | ((uint32_t)(113 + (state >> 3) % 28) << 23) | ((state & 1u) << 31);
        if (i % 3 == 1) u = (u & ~0xffffu) | 0x8000u; /* a bf16 tie */
        if (i % 3 == 2) u = (u & ~0x1fffu) | 0x1000u; /* an f16 tie */
        memcpy(&hx[i], &u, 4);
    }
    hx[0] = NAN;
    int64_t n = N;
    gpucore_tensor *x = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &x));
    CHECK_OK(gpucore_copy_from_host(x, hx, sizeof(float) * N));
    const gpucore_dtype to[2] = {GPUCORE_BF16, GPUCORE_F16};
    const int bits[2] = {8, 11};
    for (int t = 0; t < 2; t++) {
        gpucore_tensor *y = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, to[t], 1, &n, &y));
        CHECK_OK(gpucore_cast(y, x, NULL));
        double *out = read_back(y);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += !rounds_to_nearest_even(hx[i], out[i], bits[t]);
        if (bad) fprintf(stderr, "  cast f32 -> %s: %d of %d elements not rounded to nearest even\n",
                         gpucore_dtype_name(to[t]), bad, N);
        CHECK(bad == 0);
        free(out);
        gpucore_tensor_destroy(y);
    }
    gpucore_tensor_destroy(x);
    free(hx);
}

/* fp8 <-> f32/f64/f16/bf16 through gpucore_cast on this backend, bit for bit against
 * the reference: every code decoded (into each wider dtype, and via a strided view),
 * and every rounding boundary, saturation and NaN encoded from f32, from f64 and
 * from bf16 (whose values go through the same reference). */
static void test_cast_fp8(gpucore_context *ctx)
{
    static const gpucore_dtype wide[4] = {GPUCORE_F32, GPUCORE_F64, GPUCORE_F16, GPUCORE_BF16};
    for (int e5 = 0; e5 < 2; e5++) {
        gpucore_dtype f8 = e5 ? GPUCORE_FP8_E5M2 : GPUCORE_FP8_E4M3;
        int64_t n = 256, s2[2] = {16, 16};
        uint8_t codes[256];
        for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
        gpucore_tensor *q = NULL, *q2 = NULL, *qt = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, f8, 1, &n, &q));
        CHECK_OK(gpucore_copy_from_host(q, codes, 256));
        CHECK_OK(gpucore_tensor_reshape(q, 2, s2, &q2));
        CHECK_OK(gpucore_tensor_transpose(q2, 0, 1, &qt));
        for (int w = 0; w < 5; w++) { /* w == 4: f32 out of the transposed view */
            gpucore_tensor *y = NULL;
            CHECK_OK(gpucore_tensor_create(ctx, wide[w & 3], w == 4 ? 2 : 1, w == 4 ? s2 : &n, &y));
            CHECK_OK(gpucore_cast(y, w == 4 ? qt : q, NULL));
            double *out = read_back(y);
            int bad = 0;
            for (int i = 0; i < 256; i++) {
                int c = w == 4 ? (i % 16) * 16 + i / 16 : i;
                double ref = fp8_ref_decode((unsigned)c, e5);
                if (isnan(ref) ? !isnan(out[i]) : (out[i] != ref || !signbit(out[i]) != !(c & 0x80))) bad++;
            }
            if (bad) fprintf(stderr, "  cast %s -> %s: %d of 256 codes wrong\n", gpucore_dtype_name(f8),
                             gpucore_dtype_name(wide[w & 3]), bad);
            CHECK(bad == 0);
            free(out);
            gpucore_tensor_destroy(y);
        }
        gpucore_tensor_destroy(qt);
        gpucore_tensor_destroy(q2);
        gpucore_tensor_destroy(q);
        /* encoding */
        enum { NV = 9001 };
        float *v = malloc(sizeof(float) * NV);
        double *v64 = malloc(sizeof(double) * NV);
        uint16_t *vbf = malloc(sizeof(uint16_t) * NV);
        int nv = fp8_ref_test_values(v, NV, e5, 99u + (uint32_t)e5);
        for (int i = 0; i < nv; i++) {
            v64[i] = (double)v[i] * (i % 3 == 1 ? 1 + 0x1p-40 : i % 3 == 2 ? 1 - 0x1p-40 : 1);
            vbf[i] = gpucore_f32_to_bf16(v[i]);
        }
        const gpucore_dtype src[3] = {GPUCORE_F32, GPUCORE_F64, GPUCORE_BF16};
        const void *host[3] = {v, v64, vbf};
        for (int k = 0; k < 3; k++) {
            int64_t m = nv;
            gpucore_tensor *x = NULL, *y = NULL;
            CHECK_OK(gpucore_tensor_create(ctx, src[k], 1, &m, &x));
            CHECK_OK(gpucore_copy_from_host(x, host[k], m * gpucore_dtype_size(src[k])));
            CHECK_OK(gpucore_tensor_create(ctx, f8, 1, &m, &y));
            uint8_t *got = malloc((size_t)nv);
            memset(got, 0x55, (size_t)nv); /* poison: a code the reference never gives everywhere */
            CHECK_OK(gpucore_copy_from_host(y, got, m));
            CHECK_OK(gpucore_cast(y, x, NULL));
            CHECK_OK(gpucore_copy_to_host(got, m, y));
            int bad = 0;
            for (int i = 0; i < nv; i++) {
                double xv = k == 0 ? (double)v[i] : k == 1 ? v64[i] : (double)gpucore_bf16_to_f32(vbf[i]);
                unsigned want = fp8_ref_encode(xv, e5);
                if (got[i] != want && bad++ < 5)
                    fprintf(stderr, "  cast %s %.17g -> %s: 0x%02x, want 0x%02x\n", gpucore_dtype_name(src[k]), xv,
                            gpucore_dtype_name(f8), got[i], want);
            }
            CHECK(bad == 0);
            free(got);
            gpucore_tensor_destroy(x);
            gpucore_tensor_destroy(y);
        }
        free(v); free(v64); free(vbf);
    }
}

/* got (a *_new result) has want's shape, contiguous strides, dtype and bits; both destroyed. */
static void check_new_result(gpucore_tensor *got, gpucore_tensor *want, const char *what)
{
    int nd = gpucore_tensor_ndim(want);
    int64_t gs[8], ws[8], gst[8], wst[8];
    CHECK(gpucore_tensor_ndim(got) == nd && gpucore_tensor_dtype(got) == gpucore_tensor_dtype(want));
    CHECK_OK(gpucore_tensor_shape(got, gs));
    CHECK_OK(gpucore_tensor_shape(want, ws));
    CHECK_OK(gpucore_tensor_strides(got, gst));
    CHECK_OK(gpucore_tensor_strides(want, wst));
    CHECK(memcmp(gs, ws, sizeof(int64_t) * (size_t)nd) == 0 && memcmp(gst, wst, sizeof(int64_t) * (size_t)nd) == 0);
    int64_t n = gpucore_tensor_nbytes(want);
    char *g = malloc((size_t)n), *w = malloc((size_t)n);
    CHECK_OK(gpucore_copy_to_host(g, n, got));
    CHECK_OK(gpucore_copy_to_host(w, n, want));
    int same = memcmp(g, w, (size_t)n) == 0;
    if (!same) fprintf(stderr, "  %s: the *_new result differs from create + op\n", what);
    CHECK(same);
    free(g); free(w);
    gpucore_tensor_destroy(got);
    gpucore_tensor_destroy(want);
}

/* gpucore_binary_new, gpucore_unary_new, gpucore_activation_forward_new, gpucore_scale_new: the result
 * gpucore_tensor_create + the op would give (shape broadcast or a's, a's dtype, contiguous,
 * same bits); bad input leaves *out NULL and nothing allocated. */
static void test_new_results(gpucore_context *ctx)
{
    int64_t s231[3] = {2, 3, 1}, s4[1] = {4}, s5[1] = {5}, s234[3] = {2, 3, 4};
    gpucore_tensor *a = NULL, *b = NULL, *o = NULL, *want = NULL, *i32 = NULL, *h = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s231, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s4, &b));
    CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0.0, 1.0, 11, 0, NULL));
    CHECK_OK(gpucore_random(b, GPUCORE_NORMAL, 0.0, 1.0, 12, 0, NULL));
    for (int op = GPUCORE_ADD; op < NBINARY; op++) {
        CHECK_OK(gpucore_binary_new((gpucore_binary_op)op, a, b, NULL, &o));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, s234, &want));
        CHECK_OK(gpucore_binary((gpucore_binary_op)op, want, a, b, NULL));
        check_new_result(o, want, "binary_new");
    }
    /* a transposed (strided) input: the result is still contiguous */
    gpucore_tensor *x = NULL, *xt = NULL;
    int64_t s35[2] = {3, 5};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, s35, &x));
    CHECK_OK(gpucore_random(x, GPUCORE_NORMAL, 0.5, 1.0, 13, 0, NULL));
    CHECK_OK(gpucore_tensor_transpose(x, 0, 1, &xt));
    for (int op = GPUCORE_EXP; op <= GPUCORE_SQUARE; op++) {
        CHECK_OK(gpucore_unary_new((gpucore_unary_op)op, xt, NULL, &o));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, (int64_t[]){5, 3}, &want));
        CHECK_OK(gpucore_unary((gpucore_unary_op)op, want, xt, NULL));
        check_new_result(o, want, "unary_new");
    }
    for (int act = GPUCORE_ACT_RELU; act <= GPUCORE_ACT_TANH; act++) {
        CHECK_OK(gpucore_activation_forward_new((gpucore_activation)act, xt, NULL, &o));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, (int64_t[]){5, 3}, &want));
        CHECK_OK(gpucore_activation_forward((gpucore_activation)act, want, xt, NULL));
        check_new_result(o, want, "activation_forward_new");
    }
    CHECK_OK(gpucore_scale_new(xt, -1.75, 0.5, NULL, &o));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, (int64_t[]){5, 3}, &want));
    CHECK_OK(gpucore_scale(want, xt, -1.75, 0.5, NULL));
    check_new_result(o, want, "scale_new");
    gpucore_tensor_destroy(xt);
    gpucore_tensor_destroy(x);
    gpucore_memory_stats before, after;
    before.struct_size = after.struct_size = (int64_t)sizeof before;
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &before));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 1, s4, &i32));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 1, s4, &h));
    o = (gpucore_tensor *)a; /* each failure must set *out to NULL */
    CHECK_STATUS(gpucore_binary_new(GPUCORE_ADD, a, NULL, NULL, &o), GPUCORE_ERR_NULL_POINTER);
    CHECK(o == NULL);
    CHECK_STATUS(gpucore_binary_new(GPUCORE_ADD, a, b, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_binary_new((gpucore_binary_op)9, a, b, NULL, &o), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_binary_new(GPUCORE_ADD, i32, i32, NULL, &o), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "'a' is i32") != NULL);
    CHECK_STATUS(gpucore_binary_new(GPUCORE_MUL, b, h, NULL, &o), GPUCORE_ERR_DTYPE_MISMATCH);
    gpucore_tensor *b5 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s5, &b5));
    CHECK_STATUS(gpucore_binary_new(GPUCORE_SUB, b, b5, NULL, &o), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "sub: a has shape [4] and b has [5], which do not broadcast") != NULL);
    CHECK(o == NULL);
    o = (gpucore_tensor *)a;
    CHECK_STATUS(gpucore_unary_new(GPUCORE_EXP, i32, NULL, &o), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK(o == NULL && strstr(gpucore_last_error(), "exp: 'a' is i32") != NULL);
    CHECK_STATUS(gpucore_unary_new((gpucore_unary_op)7, b, NULL, &o), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_unary_new(GPUCORE_EXP, NULL, NULL, &o), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_unary_new(GPUCORE_EXP, b, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_activation_forward_new(GPUCORE_ACT_NONE, b, NULL, &o), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_activation_forward_new(GPUCORE_ACT_RELU, h, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_activation_forward_new(GPUCORE_ACT_GELU_ERF, i32, NULL, &o), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK(o == NULL);
    o = (gpucore_tensor *)a;
    CHECK_STATUS(gpucore_scale_new(a, INFINITY, 0.0, NULL, &o), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(o == NULL && strstr(gpucore_last_error(), "scale: alpha is inf") != NULL);
    CHECK_STATUS(gpucore_scale_new(i32, 2.0, 0.0, NULL, &o), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_scale_new(NULL, 2.0, 0.0, NULL, &o), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_scale_new(b, 2.0, NAN, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK(o == NULL);
    /* a failure after the result was made (a stream of another context) frees it again */
    gpucore_context *other = NULL;
    gpucore_stream *foreign = NULL;
    CHECK_OK(gpucore_context_create("cpu", &other));
    CHECK_OK(gpucore_context_default_stream(other, &foreign));
    CHECK_STATUS(gpucore_binary_new(GPUCORE_ADD, a, b, foreign, &o), GPUCORE_ERR_DEVICE_MISMATCH);
    CHECK(o == NULL);
    CHECK_STATUS(gpucore_unary_new(GPUCORE_NEG, a, foreign, &o), GPUCORE_ERR_DEVICE_MISMATCH);
    CHECK_STATUS(gpucore_activation_forward_new(GPUCORE_ACT_SILU, a, foreign, &o), GPUCORE_ERR_DEVICE_MISMATCH);
    CHECK_STATUS(gpucore_scale_new(a, 2.0, 1.0, foreign, &o), GPUCORE_ERR_DEVICE_MISMATCH);
    CHECK(o == NULL);
    gpucore_context_destroy(other);
    gpucore_tensor_destroy(i32);
    gpucore_tensor_destroy(h);
    gpucore_tensor_destroy(b5);
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &after));
    CHECK(after.allocated_bytes == before.allocated_bytes);
    CHECK_OK(gpucore_binary_new(GPUCORE_ADD, a, b, NULL, &o)); /* still usable */
    gpucore_tensor_destroy(o);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
}

static void test_bad_input(gpucore_context *ctx)
{
    int64_t s34[2] = {3, 4}, s5[1] = {5}, s24[2] = {2, 4}, s8[1] = {8};
    gpucore_tensor *a = NULL, *b = NULL, *h = NULL, *i32 = NULL, *o = NULL, *big = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s34, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s5, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F16, 2, s34, &h));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 2, s34, &i32));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s34, &o));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, s8, &big));
    CHECK_OK(gpucore_fill(a, 1.0, NULL));
    CHECK_STATUS(gpucore_binary(GPUCORE_ADD, o, a, b, NULL), GPUCORE_ERR_SHAPE_MISMATCH);   /* 4 vs 5 */
    CHECK_STATUS(gpucore_binary(GPUCORE_ADD, o, a, h, NULL), GPUCORE_ERR_DTYPE_MISMATCH);   /* f32 + f16 */
    CHECK_STATUS(gpucore_binary(GPUCORE_ADD, i32, i32, i32, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_binary((gpucore_binary_op)9, o, a, a, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_binary(GPUCORE_ADD, o, a, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_unary(GPUCORE_EXP, o, b, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_cast(o, i32, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_clamp(o, a, 1, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_dropout(o, a, 1.5, 1, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_activation_forward(GPUCORE_ACT_NONE, o, a, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    /* out bigger than the broadcast of the inputs */
    gpucore_tensor *o24 = NULL, *row = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s24, &o24));
    CHECK_OK(gpucore_tensor_slice(a, 0, 0, 1, 1, &row));
    CHECK_STATUS(gpucore_binary(GPUCORE_ADD, o24, row, row, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    /* aliasing: out shifted by one element against the input */
    gpucore_tensor *lo = NULL, *hi = NULL;
    CHECK_OK(gpucore_tensor_slice(big, 0, 0, 7, 1, &lo));
    CHECK_OK(gpucore_tensor_slice(big, 0, 1, 8, 1, &hi));
    CHECK_OK(gpucore_fill(big, 2.0, NULL));
    CHECK_STATUS(gpucore_unary(GPUCORE_NEG, hi, lo, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_unary(GPUCORE_NEG, lo, lo, NULL)); /* exactly in place is allowed */
    /* a cast between dtypes cannot be in place */
    gpucore_tensor *h2 = NULL, *f2 = NULL;
    int64_t s4[1] = {4};
    CHECK_OK(gpucore_tensor_slice(big, 0, 0, 4, 1, &f2));
    void *raw = NULL;
    CHECK_OK(gpucore_tensor_data(big, &raw));
    CHECK_OK(gpucore_tensor_wrap(ctx, GPUCORE_F16, 1, s4, NULL, raw, NULL, NULL, &h2));
    CHECK_STATUS(gpucore_cast(h2, f2, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor_destroy(h2);
    /* the library stays usable */
    CHECK_OK(gpucore_binary(GPUCORE_ADD, o, a, a, NULL));
    float host[12];
    CHECK_OK(gpucore_copy_to_host(host, sizeof host, o));
    CHECK(host[0] == 2.0f && host[11] == 2.0f);
    gpucore_tensor *ts[] = {a, b, h, i32, o, big, o24, row, lo, hi, f2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) gpucore_tensor_destroy(ts[i]);
}

/* Unary ops added after the first six: one line each (op, input range, f64 reference). */
static double square_f64(double v) { return v * v; }
static const struct { gpucore_unary_op op; double lo, hi; double (*ref)(double); } unary_more[] = {
    {GPUCORE_SQUARE, -3, 3, square_f64},
};

static void test_unary_more(gpucore_context *ctx)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 7, 49}, {1, 1, 4099}};
    for (size_t u = 0; u < sizeof unary_more / sizeof unary_more[0]; u++)
        for (int si = 0; si < 3; si++)
            for (int di = 0; di < 3; di++) {
                gpucore_dtype dt = float_dtypes[di];
                int layout = (int)(u + (size_t)si) % 3;
                double *hx;
                gpucore_tensor *x = make_input(ctx, dt, 3, shapes[si], layout, unary_more[u].lo, unary_more[u].hi, &hx);
                guarded o = make_output(ctx, dt, 3, shapes[si], si == 1);
                CHECK_OK(gpucore_unary(unary_more[u].op, o.view, x, NULL));
                double *out = finish_output(&o, "unary");
                double *ref = malloc(sizeof(double) * (size_t)o.numel);
                for (int64_t i = 0; i < o.numel; i++) ref[i] = unary_more[u].ref(hx[i]);
                char what[128];
                snprintf(what, sizeof what, "unary op %d shape %d %s", (int)unary_more[u].op, si, gpucore_dtype_name(dt));
                check_close(out, ref, o.numel, tolerance_for(dt, 0), what);
                free(hx); free(out); free(ref);
                gpucore_tensor_destroy(x);
            }
}

/* Dropout on aligned, contiguous tensors (the 16-byte vector kernel, which draws one Philox block
 * per four elements, plus its scalar tail; the guarded outputs above are never 16-byte aligned)
 * against the host's draws, exactly. */
static void test_dropout_vector(gpucore_context *ctx)
{
    const int64_t n = 4099;
    const double p = 0.4;
    for (int di = 0; di < 3; di++) {
        const gpucore_dtype dt = float_dtypes[di];
        double *hx;
        gpucore_tensor *x = make_input(ctx, dt, 1, &n, 0, -2, 2, &hx), *y = NULL;
        CHECK_OK(gpucore_tensor_create(ctx, dt, 1, &n, &y));
        const uint64_t seed = harness_seed++, offset = 13;
        CHECK_OK(gpucore_dropout(y, x, p, seed, offset, NULL));
        double *out = read_back(y);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const int keep = gpucore_philox_uniform(seed, offset, (uint64_t)i) >= (float)p;
            const float v = keep ? (float)hx[i] * (float)(1.0 / (1.0 - p)) : 0.0f; /* the kernel's f32 math */
            const double want = dt == GPUCORE_F16    ? gpucore_f16_to_f32(gpucore_f32_to_f16(v))
                                : dt == GPUCORE_BF16 ? gpucore_bf16_to_f32(gpucore_f32_to_bf16(v))
                                                     : v;
            bad += out[i] != want;
        }
        CHECK(bad == 0);
        if (bad) fprintf(stderr, "  dropout %s vector path: %lld of %lld elements differ\n", gpucore_dtype_name(dt),
                         (long long)bad, (long long)n);
        free(hx); free(out);
        gpucore_tensor_destroy(x);
        gpucore_tensor_destroy(y);
    }
}

/* act'(x) in float64, from the derivative's formula (the backward check above uses finite differences). */
static double act_grad_f64(int act, double x)
{
    switch (act) {
    case GPUCORE_ACT_GELU_ERF: return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case GPUCORE_ACT_GELU_TANH: {
        const double k = sqrt(2 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case GPUCORE_ACT_SILU: { const double s = 1 / (1 + exp(-x)); return s * (1 + x * (1 - s)); }
    case GPUCORE_ACT_SIGMOID: { const double s = 1 / (1 + exp(-x)); return s * (1 - s); }
    case GPUCORE_ACT_TANH: { const double t = tanh(x); return 1 - t * t; }
    default: return 0;
    }
}

/* The smooth activations in f32, forward and backward (dy = 1), element by element on a dense grid
 * over [-9, 9] (an odd count: the vector bodies' tails too) and at NaN, ±Inf, ±0 and ±1e30: each
 * value within 3e-7·max(1, |x|) of float64 (the normwise contract would let one bad interval of a
 * piecewise approximation through), NaN where float64 gives NaN. */
static void test_act_pointwise(gpucore_context *ctx)
{
    static const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f};
    const int64_t ngrid = 40001, nspecial = (int64_t)(sizeof special / sizeof special[0]), n = ngrid + nspecial;
    float *hx = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < ngrid; i++) hx[i] = (float)(-9.0 + 18.0 * (double)i / (double)(ngrid - 1));
    memcpy(hx + ngrid, special, sizeof special);
    gpucore_tensor *x = NULL, *y = NULL, *ones = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &y));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &ones));
    CHECK_OK(gpucore_copy_from_host(x, hx, n * (int64_t)sizeof(float)));
    CHECK_OK(gpucore_fill(ones, 1.0, NULL));
    static const int acts[] = {GPUCORE_ACT_GELU_ERF, GPUCORE_ACT_GELU_TANH, GPUCORE_ACT_SILU, GPUCORE_ACT_SIGMOID,
                               GPUCORE_ACT_TANH};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
        for (int grad = 0; grad < 2; grad++) {
            if (grad) CHECK_OK(gpucore_activation_backward((gpucore_activation)acts[a], y, ones, x, NULL));
            else CHECK_OK(gpucore_activation_forward((gpucore_activation)acts[a], y, x, NULL));
            double *out = read_back(y);
            int64_t bad = 0, worst = -1;
            double worst_err = 0;
            for (int64_t i = 0; i < n; i++) {
                const double xi = hx[i], ref = grad ? act_grad_f64(acts[a], xi) : act_f64(acts[a], xi);
                const double err = fabs(out[i] - ref), bound = 3e-7 * fmax(1.0, fabs(xi));
                /* the tanh GELU's derivative formula is NaN at ±1e30 (x·x overflows, then inf·0), as in
                 * PyTorch's; not held against it here */
                if (grad && acts[a] == GPUCORE_ACT_GELU_TANH && fabs(xi) == 1e30f) continue;
                const int ok = isnan(ref) ? isnan(out[i]) : (out[i] == ref || err <= bound);
                if (!ok) bad++;
                if (!ok && (worst < 0 || !(err <= worst_err))) { worst = i; worst_err = err; }
            }
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "  activation %d %s: %lld of %lld values off, e.g. x = %.9g: %.9g, float64 %.9g\n",
                        acts[a], grad ? "backward" : "forward", (long long)bad, (long long)n, hx[worst], out[worst],
                        grad ? act_grad_f64(acts[a], hx[worst]) : act_f64(acts[a], hx[worst]));
            free(out);
        }
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(y);
    gpucore_tensor_destroy(ones);
    free(hx);
}

static void test_binary_arith(gpucore_context *ctx) { test_binary(ctx, GPUCORE_ADD, GPUCORE_DIV + 1); }
static void test_binary_last(gpucore_context *ctx) { test_binary(ctx, NBINARY, NBINARY + 1); }
static void test_binary_more(gpucore_context *ctx) { test_binary(ctx, GPUCORE_DIV_TRUNC, NBINARY); }

int main(void)
{
    const device_test_fn first[] = {test_binary_arith, test_binary_last, test_unary_family, test_cast,
                                     test_cast_rounding, test_cast_f16_bits, test_cast_fp8, test_bad_input,
                                     test_new_results};
    for_each_device(first, (int)(sizeof first / sizeof first[0]));
    /* after the others, so their random data stays what it was before these ops existed */
    const device_test_fn later[] = {test_unary_more, test_binary_more, test_binary_special, test_dropout_vector,
                                     test_act_pointwise};
    for_each_device(later, (int)(sizeof later / sizeof later[0]));
    return check_finish("test_ops_elementwise");
}
