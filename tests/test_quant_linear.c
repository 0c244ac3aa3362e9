/*
 * test_quant_linear.c — gpucore_qlinear_forward / gpucore_qlinear_backward_data and the LoRA layer
 * on a quantized base, on every backend present: each format (NF4 and FP4 at blocks 64 and 128,
 * INT8_ROW, Q4_0..Q8_0 quantized from fresh random weights; Q4_K, Q5_K, Q6_K from random blocks),
 * f32 / bf16 / f16 activations, 1, 3, 4 (the fused decode path), 5 and 67 rows (the tiled path,
 * with a weight of several tiles), odd output counts, bias, ReLU, GELU with its aux output,
 * backward data with beta 0 and 1, against float64 sums over the weight that gpucore_dequantize
 * gives in f32 (bit-exact with the float64 definitions: test_quant.c) rounded to the activations'
 * dtype; outputs poisoned with guard bands. A backend without the entry reports NOT_SUPPORTED and
 * is counted as skipped ("not yet"), never passed; the CPU backend must have it. Bad input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ops_harness.h"

static gpucore_context *cpu_ctx;
static int is_cpu(void) { return strcmp(check_device, "cpu") == 0; }

typedef struct fcase { gpucore_quant_format fmt; const char *name; int64_t block, K; } fcase;
static const fcase formats[] = {
    {GPUCORE_QUANT_NF4, "NF4/64", 64, 77},   {GPUCORE_QUANT_NF4, "NF4/128", 128, 200},
    {GPUCORE_QUANT_FP4, "FP4/64", 64, 77},   {GPUCORE_QUANT_FP4, "FP4/128", 128, 200},
    {GPUCORE_QUANT_INT8_ROW, "INT8_ROW", 0, 77}, {GPUCORE_QUANT_Q4_0, "Q4_0", 0, 96},
    {GPUCORE_QUANT_Q4_1, "Q4_1", 0, 96},     {GPUCORE_QUANT_Q5_0, "Q5_0", 0, 64},
    {GPUCORE_QUANT_Q5_1, "Q5_1", 0, 96},     {GPUCORE_QUANT_Q8_0, "Q8_0", 0, 64},
    {GPUCORE_QUANT_Q4_K, "Q4_K", 0, 256},    {GPUCORE_QUANT_Q5_K, "Q5_K", 0, 256},
    {GPUCORE_QUANT_Q6_K, "Q6_K", 0, 512},
};
#define N_FORMATS ((int)(sizeof formats / sizeof formats[0]))

/* A quantized weight on ctx and its f32 values (host, malloc'ed). */
typedef struct qw {
    gpucore_tensor *bytes;
    gpucore_qweight w;
    float *values;
} qw;

static int is_k(gpucore_quant_format f)
{
    return f == GPUCORE_QUANT_Q4_K || f == GPUCORE_QUANT_Q5_K || f == GPUCORE_QUANT_Q6_K;
}

static qw make_qweight(gpucore_context *ctx, const fcase *c, int64_t N)
{
    qw q = {0};
    const int64_t K = c->K, n = N * K;
    int64_t nbytes = 0, bshape[1], shape[2] = {N, K};
    CHECK_OK(gpucore_quant_size(c->fmt, N, K, c->block, 0, &nbytes));
    bshape[0] = nbytes;
    uint8_t *b = malloc((size_t)nbytes);
    if (is_k(c->fmt)) { /* read-only formats: random blocks with finite f16 scales (as test_quant.c) */
        int bb = c->fmt == GPUCORE_QUANT_Q4_K ? 144 : c->fmt == GPUCORE_QUANT_Q5_K ? 176 : 210;
        for (int64_t i = 0; i < nbytes; i++) b[i] = (uint8_t)(rand() & 0xff);
        for (int64_t blk = 0; blk < nbytes / bb; blk++) {
            uint8_t *p = b + blk * bb;
            if (c->fmt == GPUCORE_QUANT_Q6_K) p[209] = (uint8_t)((p[209] & 0x83) | 0x10); /* |d| in [2^-11, 2^-8) */
            else p[1] = (uint8_t)((p[1] & 0x83) | 0x10), p[3] = (uint8_t)((p[3] & 0x83) | 0x10);
        }
    } else { /* fresh random weights (row scales 0.01 .. 1) quantized on the CPU */
        float *x = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)((rand() / (double)RAND_MAX - 0.5) * pow(10.0, -(double)(i / K % 3)));
        gpucore_tensor *xt = NULL, *qc = NULL;
        CHECK_OK(gpucore_tensor_create(cpu_ctx, GPUCORE_F32, 2, shape, &xt));
        CHECK_OK(gpucore_copy_from_host(xt, x, n * 4));
        CHECK_OK(gpucore_tensor_create(cpu_ctx, GPUCORE_U8, 1, bshape, &qc));
        CHECK_OK(gpucore_quantize(xt, c->fmt, c->block, 0, qc, NULL));
        CHECK_OK(gpucore_copy_to_host(b, nbytes, qc));
        gpucore_tensor_destroy(qc);
        gpucore_tensor_destroy(xt);
        free(x);
    }
    /* the f32 values: gpucore_dequantize on the CPU */
    gpucore_tensor *qc = NULL, *vt = NULL;
    CHECK_OK(gpucore_tensor_create(cpu_ctx, GPUCORE_U8, 1, bshape, &qc));
    CHECK_OK(gpucore_copy_from_host(qc, b, nbytes));
    CHECK_OK(gpucore_tensor_create(cpu_ctx, GPUCORE_F32, 2, shape, &vt));
    CHECK_OK(gpucore_dequantize(qc, c->fmt, c->block, 0, vt, NULL));
    q.values = malloc(sizeof(float) * (size_t)n);
    CHECK_OK(gpucore_copy_to_host(q.values, n * 4, vt));
    gpucore_tensor_destroy(vt);
    gpucore_tensor_destroy(qc);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_U8, 1, bshape, &q.bytes));
    CHECK_OK(gpucore_copy_from_host(q.bytes, b, nbytes));
    free(b);
    q.w = (gpucore_qweight){.data = q.bytes, .format = c->fmt, .block_size = c->block, .flags = 0, .rows = N, .cols = K};
    return q;
}

static void free_qweight(qw *q)
{
    gpucore_tensor_destroy(q->bytes);
    free(q->values);
}

/* W's values rounded to dt, as float64 [N][K]. */
static double *weight_in(const qw *q, gpucore_dtype dt)
{
    const int64_t n = q->w.rows * q->w.cols;
    double *w = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        float v = q->values[i];
        w[i] = dt == GPUCORE_BF16 ? gpucore_bf16_to_f32(gpucore_f32_to_bf16_portable(v))
             : dt == GPUCORE_F16  ? gpucore_f16_to_f32(gpucore_f32_to_f16_portable(v))
                                  : v;
    }
    return w;
}

static double gelu_tanh_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static const char *dt_name(gpucore_dtype dt) { return gpucore_dtype_name(dt); }

/* 1 when the backend has no quant_matmul yet (counted as skipped once per device), else 0. */
static int not_yet(gpucore_status st)
{
    static char reported[64];
    if (st != GPUCORE_ERR_NOT_SUPPORTED || is_cpu()) return 0;
    if (strcmp(reported, check_device) != 0) {
        printf("SKIP %s: qlinear not yet on this backend (%s)\n", check_device, gpucore_last_error());
        check_skipped++;
        snprintf(reported, sizeof reported, "%s", check_device);
    }
    return 1;
}

/* One forward: epi 0 none, 1 bias, 2 bias + ReLU, 3 bias + GELU with aux. Returns 0 when not yet. */
static int run_forward(gpucore_context *ctx, const qw *q, const char *fname, gpucore_dtype dt, int64_t m, int epi)
{
    const int64_t N = q->w.rows, K = q->w.cols;
    int64_t xs[2] = {m, K}, ys[2] = {m, N}, bs[1] = {N};
    double *xh = NULL, *bh = NULL;
    gpucore_tensor *x = make_input(ctx, dt, 2, xs, 0, -1, 1, &xh);
    gpucore_tensor *bias = epi ? make_input(ctx, dt, 1, bs, 0, -1, 1, &bh) : NULL;
    guarded y = make_output(ctx, dt, 2, ys, 0), aux = {0};
    if (epi == 3) aux = make_output(ctx, dt, 2, ys, 0);
    gpucore_activation act = epi == 2 ? GPUCORE_ACT_RELU : epi == 3 ? GPUCORE_ACT_GELU_TANH : GPUCORE_ACT_NONE;
    gpucore_status st = gpucore_qlinear_forward(x, &q->w, bias, act, y.view, epi == 3 ? aux.view : NULL, NULL);
    int ran = !not_yet(st);
    if (ran) CHECK_OK(st);
    CHECK_OK(gpucore_context_synchronize(ctx));
    double *out = finish_output(&y, "y"), *auxo = epi == 3 ? finish_output(&aux, "aux") : NULL;
    if (ran) {
        double *w = weight_in(q, dt), *pre = malloc(sizeof(double) * (size_t)(m * N + 1)),
               *ref = malloc(sizeof(double) * (size_t)(m * N + 1));
        for (int64_t r = 0; r < m; r++)
            for (int64_t n = 0; n < N; n++) {
                double s = bh ? bh[n] : 0.0;
                for (int64_t k = 0; k < K; k++) s += xh[r * K + k] * w[n * K + k];
                pre[r * N + n] = s;
                ref[r * N + n] = epi == 2 ? (s > 0 ? s : 0) : epi == 3 ? gelu_tanh_d(s) : s;
            }
        char what[160];
        snprintf(what, sizeof what, "%s qlinear_forward %s %s m=%lld N=%lld K=%lld epi %d", check_device, fname,
                 dt_name(dt), (long long)m, (long long)N, (long long)K, epi);
        check_close(out, ref, m * N, tolerance_for(dt, 1), what);
        if (auxo) check_close(auxo, pre, m * N, tolerance_for(dt, 1), what);
        free(w);
        free(pre);
        free(ref);
    }
    free(out);
    free(auxo);
    free(xh);
    free(bh);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(bias);
    return ran;
}

static int run_backward(gpucore_context *ctx, const qw *q, const char *fname, gpucore_dtype dt, int64_t m, double beta)
{
    const int64_t N = q->w.rows, K = q->w.cols;
    int64_t ds[2] = {m, N}, xs[2] = {m, K};
    double *dyh = NULL, *d0 = NULL;
    gpucore_tensor *dy = make_input(ctx, dt, 2, ds, 0, -1, 1, &dyh);
    guarded dx = make_output(ctx, dt, 2, xs, 0);
    if (beta != 0) { /* dx's earlier contents, which beta 1 adds to */
        gpucore_tensor *init = make_input(ctx, dt, 2, xs, 0, -1, 1, &d0);
        CHECK_OK(gpucore_copy(dx.view, init, NULL));
        gpucore_tensor_destroy(init);
    }
    gpucore_status st = gpucore_qlinear_backward_data(dy, &q->w, beta, dx.view, NULL);
    int ran = !not_yet(st);
    if (ran) CHECK_OK(st);
    CHECK_OK(gpucore_context_synchronize(ctx));
    double *out = finish_output(&dx, "dx");
    if (ran) {
        double *w = weight_in(q, dt), *ref = malloc(sizeof(double) * (size_t)(m * K + 1));
        for (int64_t r = 0; r < m; r++)
            for (int64_t k = 0; k < K; k++) {
                double s = d0 ? d0[r * K + k] : 0.0;
                for (int64_t n = 0; n < N; n++) s += dyh[r * N + n] * w[n * K + k];
                ref[r * K + k] = s;
            }
        char what[160];
        snprintf(what, sizeof what, "%s qlinear_backward_data %s %s m=%lld N=%lld K=%lld beta %g", check_device, fname,
                 dt_name(dt), (long long)m, (long long)N, (long long)K, beta);
        check_close(out, ref, m * K, tolerance_for(dt, 1), what);
        free(w);
        free(ref);
    }
    free(out);
    free(dyh);
    free(d0);
    gpucore_tensor_destroy(dy);
    return ran;
}

static const int64_t row_counts[] = {1, 3, 4, 5, 67};

static void test_formats(gpucore_context *ctx)
{
    for (int f = 0; f < N_FORMATS; f++) {
        qw q = make_qweight(ctx, &formats[f], 37);
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 5; i++) {
                const int64_t m = row_counts[i];
                if (!run_forward(ctx, &q, formats[f].name, float_dtypes[d], m, (i + d) % 4)) goto next;
                if (!run_backward(ctx, &q, formats[f].name, float_dtypes[d], m, (i + d) % 2)) goto next;
            }
    next:
        free_qweight(&q);
    }
}

/* A weight of several tiles (and a partial one) and several column chunks: K 2048, N 300. */
static void test_large(gpucore_context *ctx)
{
    static const fcase big[] = {{GPUCORE_QUANT_NF4, "NF4/64", 64, 2048}, {GPUCORE_QUANT_Q4_0, "Q4_0", 0, 2048}};
    for (int f = 0; f < 2; f++) {
        qw q = make_qweight(ctx, &big[f], 300);
        for (int d = 0; d < 3; d += 2) {
            if (!run_forward(ctx, &q, big[f].name, float_dtypes[d], 67, 3)) break;
            run_forward(ctx, &q, big[f].name, float_dtypes[d], 2, 1);
            run_backward(ctx, &q, big[f].name, float_dtypes[d], 67, 1);
            run_backward(ctx, &q, big[f].name, float_dtypes[d], 3, 0);
        }
        free_qweight(&q);
    }
}

/* LoRA with the quantized base against LoRA with the dequantized (dense, activations' dtype) base. */
static void test_lora(gpucore_context *ctx)
{
    const fcase c = {GPUCORE_QUANT_NF4, "NF4/64", 64, 96};
    const int64_t N = 40, r = 4;
    qw q = make_qweight(ctx, &c, N);
    for (int d = 0; d < 3; d++) {
        const gpucore_dtype dt = float_dtypes[d];
        for (int ri = 0; ri < 2; ri++) {
            const int64_t m = ri ? 9 : 2;
            int64_t xs[3] = {1, m, c.K}, ys[3] = {1, m, N}, as[2] = {r, c.K}, bsh[2] = {N, r}, ws[2] = {N, c.K},
                    bis[1] = {N};
            gpucore_tensor *x = make_input(ctx, dt, 3, xs, 0, -1, 1, NULL), *a = make_input(ctx, dt, 2, as, 0, -0.5, 0.5, NULL);
            gpucore_tensor *b = make_input(ctx, dt, 2, bsh, 0, -0.5, 0.5, NULL), *bias = make_input(ctx, dt, 1, bis, 0, -1, 1, NULL);
            gpucore_tensor *dy = make_input(ctx, dt, 3, ys, 0, -1, 1, NULL);
            gpucore_tensor *wd = NULL, *y1 = NULL, *y2 = NULL, *dx1 = NULL, *dx2 = NULL, *da1 = NULL, *da2 = NULL,
                           *db1 = NULL, *db2 = NULL;
            CHECK_OK(gpucore_tensor_create(ctx, dt, 2, ws, &wd));
            CHECK_OK(gpucore_dequantize(q.bytes, c.fmt, c.block, 0, wd, NULL)); /* the dense base in dt */
            gpucore_tensor **outs[8] = {&y1, &y2, &dx1, &dx2, &da1, &da2, &db1, &db2};
            const int64_t *oshape[8] = {ys, ys, xs, xs, as, as, bsh, bsh};
            for (int i = 0; i < 8; i++) CHECK_OK(gpucore_tensor_create(ctx, dt, i < 4 ? 3 : 2, oshape[i], outs[i]));
            gpucore_lora_options o;
            gpucore_lora_options_init(&o);
            o.scale = 0.75;
            o.dropout_p = 0.25;
            o.seed = 99;
            CHECK_OK(gpucore_lora_forward(y1, NULL, x, wd, bias, a, b, &o, NULL));
            CHECK_OK(gpucore_lora_backward(dx1, da1, db1, dy, x, wd, a, b, NULL, &o, NULL));
            o.w_quant = &q.w;
            gpucore_status st = gpucore_lora_forward(y2, NULL, x, NULL, bias, a, b, &o, NULL);
            if (!not_yet(st)) {
                CHECK_OK(st);
                CHECK_OK(gpucore_lora_backward(dx2, da2, db2, dy, x, NULL, a, b, NULL, &o, NULL));
                gpucore_tensor *pairs[4][2] = {{y1, y2}, {dx1, dx2}, {da1, da2}, {db1, db2}};
                static const char *pn[4] = {"y", "dx", "da", "db"};
                for (int i = 0; i < 4; i++) {
                    double *u = read_back(pairs[i][0]), *v = read_back(pairs[i][1]);
                    char what[128];
                    snprintf(what, sizeof what, "%s lora on NF4 %s %s m=%lld", check_device, dt_name(dt), pn[i],
                             (long long)m);
                    check_close(v, u, gpucore_tensor_numel(pairs[i][0]), tolerance_for(dt, 1), what);
                    free(u);
                    free(v);
                }
                /* refusals: w with w_quant, w_quant with w_scale, a mismatched adapter */
                CHECK_STATUS(gpucore_lora_forward(y2, NULL, x, wd, bias, a, b, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
                o.w_scale = bias;
                CHECK_STATUS(gpucore_lora_forward(y2, NULL, x, NULL, bias, a, b, &o, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
                o.w_scale = NULL;
                CHECK_STATUS(gpucore_lora_forward(y2, NULL, x, NULL, bias, b, b, &o, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
                CHECK_STATUS(gpucore_lora_forward(y2, NULL, x, NULL, bias, a, b, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
            }
            gpucore_tensor *all[] = {x, a, b, bias, dy, wd, y1, y2, dx1, dx2, da1, da2, db1, db2};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
        }
    }
    free_qweight(&q);
}

static void test_bad_input(gpucore_context *ctx)
{
    const fcase c = {GPUCORE_QUANT_Q4_0, "Q4_0", 0, 64};
    qw q = make_qweight(ctx, &c, 6);
    int64_t xs[2] = {3, 64}, ys[2] = {3, 6}, x2s[2] = {3, 32}, bbs[1] = {q.w.rows * 64 / 32 * 18 + 1};
    gpucore_tensor *x = make_input(ctx, GPUCORE_F32, 2, xs, 0, -1, 1, NULL), *y = NULL, *i32 = NULL, *y16 = NULL,
                   *x2 = NULL, *bad_bytes = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, ys, &y));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 2, xs, &i32));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, ys, &y16));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, x2s, &x2));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_U8, 1, bbs, &bad_bytes));
    CHECK_STATUS(gpucore_qlinear_forward(NULL, &q.w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_qlinear_forward(x, NULL, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK(strstr(gpucore_last_error(), "w (the quantized weight) is NULL") != NULL);
    CHECK_STATUS(gpucore_qlinear_forward(x, &q.w, NULL, GPUCORE_ACT_NONE, NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    gpucore_qweight w = q.w;
    w.data = NULL;
    CHECK_STATUS(gpucore_qlinear_forward(x, &w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_qlinear_forward(i32, &q.w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_qlinear_forward(x, &q.w, NULL, GPUCORE_ACT_NONE, y16, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    w = q.w;
    w.data = x; /* not u8 */
    CHECK_STATUS(gpucore_qlinear_forward(x, &w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    w.data = bad_bytes; /* one byte too many */
    CHECK_STATUS(gpucore_qlinear_forward(x, &w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "gpucore_quant_size") != NULL);
    w = q.w;
    w.cols = 48; /* not whole Q4_0 blocks */
    CHECK_STATUS(gpucore_qlinear_forward(x, &w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    w = q.w;
    w.format = (gpucore_quant_format)42;
    CHECK_STATUS(gpucore_qlinear_forward(x, &w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    w = q.w;
    w.block_size = 64; /* Q4_0 has a fixed block */
    CHECK_STATUS(gpucore_qlinear_forward(x, &w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_qlinear_forward(x2, &q.w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_qlinear_forward(x, &q.w, NULL, GPUCORE_ACT_NONE, x2, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_qlinear_forward(x, &q.w, x, GPUCORE_ACT_NONE, y, NULL, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_qlinear_forward(x, &q.w, NULL, GPUCORE_ACT_SILU, y, NULL, NULL), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK_STATUS(gpucore_qlinear_forward(x, &q.w, NULL, GPUCORE_ACT_RELU, y, y, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_qlinear_backward_data(y, &q.w, 2.0, x, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "beta is 2") != NULL);
    CHECK_STATUS(gpucore_qlinear_backward_data(y, &q.w, 0.0, x2, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_qlinear_backward_data(NULL, &q.w, 0.0, x, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_qlinear_backward_data(y16, &q.w, 0.0, x, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    /* the library is usable after the refusals */
    gpucore_status st = gpucore_qlinear_forward(x, &q.w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL);
    if (!not_yet(st)) CHECK_OK(st);
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_tensor *all[] = {x, y, i32, y16, x2, bad_bytes};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    free_qweight(&q);
}

int main(void)
{
    srand(4748);
    CHECK_OK(gpucore_context_create("cpu", &cpu_ctx));
    static const device_test_fn tests[] = {test_formats, test_large, test_lora, test_bad_input};
    for_each_device(tests, (int)(sizeof tests / sizeof tests[0]));
    CHECK_OK(gpucore_context_destroy(cpu_ctx));
    return check_finish("test_quant_linear");
}
