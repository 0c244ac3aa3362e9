/*
 * test_simt_quant_matmul.cpp — kernels/quant_matmul.cu on the SIMT layer, launched through its
 * C launcher as the CUDA and cuda-emulated backends launch it: forward y = act(x·Wᵀ + bias) (aux
 * the pre-activation) and backward-data y = x·W + beta·y, for every format of quant_formats.h
 * (NF4/FP4 with blocks that run across rows, INT8_ROW, Q4_0..Q8_0, Q4_K/Q5_K/Q6_K), f32, f16 and
 * bf16, m in {1, 4, 5, 67} (the GEMV for forwards of m <= 4, the tile kernel otherwise; tensor cores
 * for f16/bf16) and an odd W row count (67: tails in the output columns and the reduction).
 * Reference: float64 sums of x times W's values, each gpucore_quant_value's f32 value rounded to
 * the dtype (quant_matmul.h), with the bound of f32 accumulation, 2^-22 (R + 2) Σ|x||w|, carried
 * through the activation (|act'| <= 1.2), plus the one rounding to the dtype. Weights: random
 * values quantized by the formats' own quantize functions; the K formats (read only) from random
 * bytes with small scales. The output's padding columns (ldy > width) must stay untouched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "gpucore.h"
#include "simt_check.h"
#include "quant_matmul.cu"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64()
{
    rng += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1.0p-53; }

/* The bytes' layout as src/ops/quant.c makes it (no double quantization); main checks its size against
 * gpucore_quant_size. */
static gpucore_quant_layout layout(int fmt, int64_t rows, int64_t cols, int64_t block)
{
    gpucore_quant_layout L;
    memset(&L, 0, sizeof L);
    L.fmt = fmt, L.rows = rows, L.cols = cols, L.n = rows * cols;
    if (fmt == GPUCORE_QF_NF4 || fmt == GPUCORE_QF_FP4) {
        L.block = block, L.nblocks = (L.n + block - 1) / block;
        L.scale_off = ((L.n + 1) / 2 + 3) & ~(int64_t)3;
        L.total = L.scale_off + 4 * L.nblocks;
    } else if (fmt == GPUCORE_QF_INT8_ROW) {
        L.block = cols, L.nblocks = rows, L.scale_off = (L.n + 3) & ~(int64_t)3;
        L.total = L.scale_off + 4 * rows;
    } else {
        L.block = gpucore_gguf_block_elems(fmt), L.nblocks = L.n / L.block;
        L.total = L.nblocks * gpucore_gguf_block_bytes(fmt);
    }
    return L;
}

static std::vector<uint8_t> make_weight(const gpucore_quant_layout &L)
{
    std::vector<uint8_t> w((size_t)L.total, 0);
    if (L.fmt >= GPUCORE_QF_Q4_K) { /* random blocks with small f16 scales */
        const int bb = gpucore_gguf_block_bytes(L.fmt);
        for (auto &b : w) b = (uint8_t)next_u64();
        for (int64_t k = 0; k < L.nblocks; k++) {
            uint8_t *b = w.data() + k * bb;
            if (L.fmt == GPUCORE_QF_Q6_K) gpucore_q_put_f16(b + 208, (float)uniform(1e-4, 1e-3));
            else {
                gpucore_q_put_f16(b, (float)uniform(1e-3, 1e-2));
                gpucore_q_put_f16(b + 2, (float)uniform(1e-3, 1e-2));
            }
        }
        return w;
    }
    std::vector<float> v((size_t)L.n);
    for (auto &x : v) x = (float)uniform(-1.0, 1.0);
    for (int64_t item = 0; item < L.nblocks; item++)
        if (gpucore_quant_item_quantize(&L, v.data(), GPUCORE_KDT_F32, item, w.data()) != -1) CHECK(!"quantize");
    return w;
}

static float round_dt(float v, int dt)
{
    uint8_t b[8] = {0};
    gpucore_store_from_f32(b, dt, v);
    return gpucore_load_as_f32(b, dt);
}

static double act_ref(int act, double x, double *slope)
{
    *slope = 1.2;
    switch (act) {
    case 1: return x > 0 ? x : 0;
    case 3: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case 4: return x / (1.0 + exp(-x));
    default: *slope = 1.0; return x;
    }
}

static const char *const fmt_names[] = {"NF4", "FP4", "INT8_ROW", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                                        "Q4_K", "Q5_K", "Q6_K"};

/* One launch and its comparison; returns the number of elements out of bounds. */
static int run_case(int fmt, int64_t block, int64_t N, int64_t K, int dt, int64_t m, int bwd, int variant)
{
    const gpucore_quant_layout L = layout(fmt, N, K, block);
    const std::vector<uint8_t> w = make_weight(L);
    const int es = gpucore_kdt_size(dt);
    const int64_t R = bwd ? N : K, NO = bwd ? K : N, ldx = R + 5, ldy = NO + 3, ldaux = NO + 1;
    std::vector<double> wd((size_t)L.n);
    for (int64_t i = 0; i < L.n; i++) wd[(size_t)i] = round_dt(gpucore_quant_value(&L, w.data(), i), dt);

    std::vector<uint8_t> x((size_t)(m * ldx * es)), y((size_t)(m * ldy * es), 0xff),
        aux((size_t)(m * ldaux * es), 0xff), bias((size_t)(NO * es));
    for (int64_t e = 0; e < m * ldx; e++) gpucore_store_from_f32(x.data() + e * es, dt, (float)uniform(-1.0, 1.0));
    for (int64_t j = 0; j < NO; j++) gpucore_store_from_f32(bias.data() + j * es, dt, (float)uniform(-1.0, 1.0));
    const int v = variant / 2; /* forward and backward cases alternate */
    const float beta = bwd ? (float)(v & 1) : 0.0f;
    if (beta != 0.0f)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < NO; j++)
                gpucore_store_from_f32(y.data() + (i * ldy + j) * es, dt, (float)uniform(-1.0, 1.0));
    const std::vector<uint8_t> y0 = y;
    const int acts[4] = {0, 1, 3, 4};

    gpucore_qmm_args a;
    memset(&a, 0, sizeof a);
    a.L = L, a.w = w.data(), a.dt = dt, a.m = m, a.transpose = bwd;
    a.x = x.data(), a.ldx = ldx, a.y = y.data(), a.ldy = ldy, a.beta = beta;
    if (!bwd) {
        a.bias = (v & 1) ? bias.data() : NULL;
        a.act = acts[v % 4];
        a.aux = (v & 2) ? aux.data() : NULL;
        a.ldaux = ldaux;
    }
    const gpucore_launch launch = {NULL, 4};
    const int err = gpucore_kernel_quant_matmul(&launch, &a);
    if (err) {
        printf("  launch error %d: %s\n", err, simt_last_error_message());
        return 1;
    }

    const double eps = dt == GPUCORE_KDT_F32 ? 0x1.0p-24 : dt == GPUCORE_KDT_F16 ? 0x1.0p-11 : 0x1.0p-8;
    int bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < NO; j++) {
            double s = 0.0, mag = 0.0;
            for (int64_t r = 0; r < R; r++) {
                const double xv = gpucore_load_as_f32(x.data() + (i * ldx + r) * es, dt);
                const double wv = bwd ? wd[(size_t)(r * K + j)] : wd[(size_t)(j * K + r)];
                s += xv * wv;
                mag += fabs(xv * wv);
            }
            double add = 0.0;
            if (a.bias) add = gpucore_load_as_f32(bias.data() + j * es, dt);
            if (beta != 0.0f) add = gpucore_load_as_f32(y0.data() + (i * ldy + j) * es, dt);
            const double pre = s + add, acc_err = 0x1.0p-22 * (double)(R + 2) * (mag + fabs(add));
            double slope;
            const double ref = act_ref(a.act, pre, &slope);
            const double got = gpucore_load_as_f32(y.data() + (i * ldy + j) * es, dt);
            const double tol = slope * acc_err + (eps + 1e-6) * fabs(ref) + 1e-30;
            if (!(fabs(got - ref) <= tol)) {
                if (bad++ < 3)
                    printf("  y[%lld, %lld] = %.9g, reference %.9g (tolerance %.3g)\n", (long long)i, (long long)j, got,
                           ref, tol);
            }
            worst = fmax(worst, fabs(got - ref) / tol);
            if (a.aux) {
                const double ga = gpucore_load_as_f32(aux.data() + (i * ldaux + j) * es, dt);
                if (!(fabs(ga - pre) <= acc_err + eps * fabs(pre) + 1e-30) && bad++ < 3)
                    printf("  aux[%lld, %lld] = %.9g, reference %.9g\n", (long long)i, (long long)j, ga, pre);
            }
        }
        for (int64_t j = NO; j < ldy; j++) /* padding untouched */
            if (memcmp(y.data() + (i * ldy + j) * es, y0.data() + (i * ldy + j) * es, (size_t)es) && bad++ < 3)
                printf("  y[%lld, %lld] (padding) written\n", (long long)i, (long long)j);
    }
    if (bad)
        printf("  %s block %lld, %s, dt %d, m %lld, N %lld, K %lld, act %d bias %d aux %d beta %g: %d bad "
               "(worst %.2f x tol)\n",
               fmt_names[fmt], (long long)L.block, bwd ? "backward" : "forward", dt, (long long)m, (long long)N,
               (long long)K, a.act, a.bias != NULL, a.aux != NULL, beta, bad, worst);
    return bad;
}

int main()
{
    /* K per format: NF4/FP4 100 (blocks of 32 or 128 run across rows; runs of 8 straddle blocks), INT8_ROW 70,
     * the 32-value GGUF blocks 96, the K formats 256. */
    struct { int fmt; int64_t block, K; } formats[] = {
        {GPUCORE_QF_NF4, 32, 100}, {GPUCORE_QF_FP4, 128, 100}, {GPUCORE_QF_NF4, 64, 36}, {GPUCORE_QF_INT8_ROW, 0, 70},
        {GPUCORE_QF_Q4_0, 0, 96}, {GPUCORE_QF_Q4_1, 0, 96}, {GPUCORE_QF_Q5_0, 0, 96}, {GPUCORE_QF_Q5_1, 0, 96},
        {GPUCORE_QF_Q8_0, 0, 96}, {GPUCORE_QF_Q4_K, 0, 256}, {GPUCORE_QF_Q5_K, 0, 256}, {GPUCORE_QF_Q6_K, 0, 256}};
    const int dts[3] = {GPUCORE_KDT_F32, GPUCORE_KDT_F16, GPUCORE_KDT_BF16};
    const int64_t ms[4] = {1, 4, 5, 67};
    const int64_t N = 67;
    int variant = 0;
    for (const auto &f : formats) {
        int64_t bytes = -1; /* the layout's size is the library's */
        CHECK(gpucore_quant_size((gpucore_quant_format)f.fmt, N, f.K, f.block, 0, &bytes) == GPUCORE_OK);
        CHECK(layout(f.fmt, N, f.K, f.block).total == bytes);
        for (int dt : dts)
            for (int64_t m : ms)
                for (int bwd = 0; bwd < 2; bwd++) CHECK(run_case(f.fmt, f.block, N, f.K, dt, m, bwd, variant++) == 0);
    }
    printf("test_simt_quant_matmul: %d passed, %d failed, 0 skipped\n", passed, failed);
    return failed ? 1 : 0;
}
