/*
 * test_simt_mma.cpp — the SIMT layer's ldmatrix and mma.sync m16n8k16 (simt_mma.h,
 * reached through kernels/mma_sync.cuh as the attention kernels reach it):
 *   - C = A·B + C0 (M x N x K = 32 x 48 x 64, f16 and bf16, f32 accumulators) through
 *     ldmatrix fragments (.x4, or .x2/.x1; B as Bᵀ rows, or as B rows with .trans) from
 *     dynamic or static shared memory, four warps, against a float64 product with the
 *     bound of exact-product f32 accumulation, |err| <= 2^-22 (K + 1) Σ|a||b|;
 *   - the layouts themselves, which a product alone cannot see (ldmatrix and mma could
 *     agree on a wrong mapping): every lane's ldmatrix registers hold the elements the
 *     PTX ISA names for it, with the row addresses supplied in a permuted order, and
 *     mma.sync's d[i] of lane l is the product element (l / 4 + 8 (i / 2), 2 (l % 4) + i % 2)
 *     for registers packed by hand from the documented a/b layouts;
 *   - the rules as execution errors: a diverged warp, a misaligned row address, a row
 *     address outside shared memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "simt_check.h"
#include "mma_sync.cuh"

enum { M = 32, N = 48, K = 64, LDA = K + 8, LDB = K + 8, LDBR = N + 8 };

template <typename T> static uint16_t bits(float f) { return T(f).x; }
static uint32_t pack(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* The operands staged in shared memory as raw 16-bit values: A [M][LDA], B as Bᵀ [N][LDB] (bcol) or B [K][LDBR]. */
struct staged {
    uint16_t a[M * LDA], b[N * LDB > K * LDBR ? N * LDB : K * LDBR];
};

/* mode 0: ldmatrix .x4 for A and for both 8-column halves of B; mode 1: A by two .x2, B by one .x1 per register. */
template <typename T, bool BCOL>
__device__ void product(const staged *s, const float *C0, float *C, int mode)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int tile = warp; tile < (M / 16) * (N / 16); tile += 4) {
        const int tm = tile / (N / 16), tn = tile % (N / 16);
        float c[2][4];
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++)
                c[h][i] = C0[(tm * 16 + g + 8 * (i / 2)) * N + tn * 16 + 8 * h + 2 * t + i % 2];
        for (int k0 = 0; k0 < K; k0 += 16) {
            uint32_t a[4], b[4];
            const uint16_t *A = s->a + tm * 16 * LDA + k0;
            if (mode == 0) mma_ldsm<4>(a, A + (lane % 16) * LDA + 8 * (lane / 16));
            else {
                uint32_t lo[2], hi[2]; /* quarters 0, 1 (column 0) then 2, 3 (column 8); lanes 0-15 supply */
                mma_ldsm<2>(lo, A + (lane % 16) * LDA);
                mma_ldsm<2>(hi, A + (lane % 16) * LDA + 8);
                a[0] = lo[0], a[1] = lo[1], a[2] = hi[0], a[3] = hi[1];
            }
            const int i = lane % 8, kh = 8 * ((lane / 8) & 1), nh = 8 * (lane / 16);
            if (mode == 0) {
                if (BCOL) mma_ldsm<4>(b, s->b + (tn * 16 + nh + i) * LDB + k0 + kh);
                else mma_ldsm_trans<4>(b, s->b + (k0 + kh + i) * LDBR + tn * 16 + nh);
            } else
                for (int q = 0; q < 4; q++) { /* register q: k half q & 1, n half q >> 1; lanes 0-7 supply */
                    uint32_t r[1];
                    const int qk = 8 * (q & 1), qn = 8 * (q >> 1);
                    if (BCOL) mma_ldsm<1>(r, s->b + (tn * 16 + qn + i) * LDB + k0 + qk);
                    else mma_ldsm_trans<1>(r, s->b + (k0 + qk + i) * LDBR + tn * 16 + qn);
                    b[q] = r[0];
                }
            const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma_m16n8k16<T>(c[0], a, b0);
            mma_m16n8k16<T>(c[1], a, b1);
        }
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) C[(tm * 16 + g + 8 * (i / 2)) * N + tn * 16 + 8 * h + 2 * t + i % 2] = c[h][i];
    }
}

template <typename T, bool BCOL> static __device__ void stage(staged *s, const uint16_t *A, const uint16_t *B)
{
    for (int e = threadIdx.x; e < M * K; e += blockDim.x) s->a[e / K * LDA + e % K] = A[e];
    for (int e = threadIdx.x; e < K * N; e += blockDim.x) {
        const int k = e / N, n = e % N; /* B is [K][N] row-major in global memory */
        if (BCOL) s->b[n * LDB + k] = B[e];
        else s->b[k * LDBR + n] = B[e];
    }
    __syncthreads();
}

template <typename T, bool BCOL>
__global__ void gemm_dynamic_kernel(const uint16_t *A, const uint16_t *B, const float *C0, float *C, int mode)
{
    extern __shared__ __align__(16) unsigned char mma_test_smem[];
    staged *s = (staged *)mma_test_smem;
    stage<T, BCOL>(s, A, B);
    product<T, BCOL>(s, C0, C, mode);
}
template <typename T, bool BCOL>
__global__ void gemm_static_kernel(const uint16_t *A, const uint16_t *B, const float *C0, float *C, int mode)
{
    __shared__ __align__(16) staged s;
    stage<T, BCOL>(&s, A, B);
    product<T, BCOL>(&s, C0, C, mode);
}

static float rnd() { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

template <typename T> static float as_float(uint16_t b)
{
    T v;
    v.x = b;
    return (float)v;
}

template <typename T, bool BCOL> static void check_gemm(const char *name, int dynamic, int mode)
{
    std::vector<uint16_t> A(M * K), B(K * N);
    std::vector<float> C0(M * N), C(M * N, NAN);
    for (auto &x : A) x = bits<T>(rnd());
    for (auto &x : B) x = bits<T>(rnd());
    for (auto &x : C0) x = rnd();
    const int err = dynamic ? RUN((gemm_dynamic_kernel<T, BCOL>), 1, 128, sizeof(staged), A.data(), B.data(), C0.data(),
                                  C.data(), mode)
                            : RUN((gemm_static_kernel<T, BCOL>), 1, 128, 0, A.data(), B.data(), C0.data(), C.data(), mode);
    CHECK(err == 0);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = C0[i * N + j], mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                const double p = (double)as_float<T>(A[i * K + k]) * as_float<T>(B[k * N + j]);
                ref += p;
                mag += fabs(p);
            }
            const double e = fabs(C[i * N + j] - ref), bound = ldexp(1.0, -22) * (K + 1) * mag;
            if (!(e <= bound)) bad++;
            if (e / mag > worst) worst = e / mag;
        }
    printf("  %s (%s shared memory, %s): %dx%dx%d, worst error %.2e of sum|a*b|, %d over the bound\n", name,
           dynamic ? "dynamic" : "static", mode ? ".x1/.x2" : ".x4", M, N, K, worst, bad);
    CHECK(bad == 0);
}

/* ldmatrix layout: four 8x8 matrices, element (q, r, c) holding 256 q + 16 r + c (as raw bits); lane 8q + i
 * supplies row (3 i + 5) % 8 of matrix q, so register q of lane l must hold the rows the addresses name. */
__global__ void ldsm_layout_kernel(uint32_t *out)
{
    __shared__ __align__(16) uint16_t m[4][8][8];
    const int lane = threadIdx.x;
    for (int e = lane; e < 256; e += 32) m[e / 64][e / 8 % 8][e % 8] = (uint16_t)(256 * (e / 64) + 16 * (e / 8 % 8) + e % 8);
    __syncwarp();
    const void *row = &m[lane / 8][(3 * (lane % 8) + 5) % 8][0];
    uint32_t r1[1], r2[2], r4[4], t1[1], t2[2], t4[4];
    mma_ldsm<1>(r1, row);
    mma_ldsm<2>(r2, row);
    mma_ldsm<4>(r4, row);
    mma_ldsm_trans<1>(t1, row);
    mma_ldsm_trans<2>(t2, row);
    mma_ldsm_trans<4>(t4, row);
    uint32_t *o = out + lane * 14;
    o[0] = r1[0], o[1] = r2[0], o[2] = r2[1], o[3] = t1[0], o[4] = t2[0], o[5] = t2[1];
    for (int q = 0; q < 4; q++) o[6 + q] = r4[q], o[10 + q] = t4[q];
}

static void check_ldsm_layout()
{
    std::vector<uint32_t> out(32 * 14, 0);
    CHECK(RUN(ldsm_layout_kernel, 1, 32, 0, out.data()) == 0);
    /* matrix q's stored row i is row (3 i + 5) % 8 of m[q]; the documented share of lane l: */
    auto elem = [](int q, int i, int c) { return (uint16_t)(256 * q + 16 * ((3 * i + 5) % 8) + c); };
    auto plain = [&](int q, int l) { return pack(elem(q, l / 4, 2 * (l % 4)), elem(q, l / 4, 2 * (l % 4) + 1)); };
    auto trans = [&](int q, int l) { return pack(elem(q, 2 * (l % 4), l / 4), elem(q, 2 * (l % 4) + 1, l / 4)); };
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        const uint32_t *o = &out[l * 14];
        const uint32_t want[14] = {plain(0, l), plain(0, l), plain(1, l), trans(0, l), trans(0, l), trans(1, l),
                                   plain(0, l), plain(1, l), plain(2, l), plain(3, l),
                                   trans(0, l), trans(1, l), trans(2, l), trans(3, l)};
        for (int k = 0; k < 14; k++) bad += o[k] != want[k];
    }
    printf("  ldmatrix .x1/.x2/.x4 (.trans): %d of %d lane registers differ from the PTX ISA layout\n", bad, 32 * 14);
    CHECK(bad == 0);
}

/* mma layout: A(r, k) = r + 1 at k = 0, 1 at k = 1, else 0; B(0, n) = 1, B(1, n) = 32 (n + 1), else 0, so
 * D(r, n) = r + 1 + 32 (n + 1) + c names its position. a and b are packed by hand from the documented layout. */
template <typename T> __global__ void mma_layout_kernel(float *out)
{
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    auto A = [](int r, int k) { return bits<T>(k == 0 ? r + 1.0f : k == 1 ? 1.0f : 0.0f); };
    auto B = [](int k, int n) { return bits<T>(k == 0 ? 1.0f : k == 1 ? 32.0f * (n + 1) : 0.0f); };
    const uint32_t a[4] = {pack(A(g, 2 * t), A(g, 2 * t + 1)), pack(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
                           pack(A(g, 2 * t + 8), A(g, 2 * t + 9)), pack(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
    const uint32_t b[2] = {pack(B(2 * t, g), B(2 * t + 1, g)), pack(B(2 * t + 8, g), B(2 * t + 9, g))};
    float d[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    mma_m16n8k16<T>(d, a, b);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = d[i];
}

template <typename T> static void check_mma_layout(const char *name)
{
    std::vector<float> out(128, NAN);
    CHECK(RUN(mma_layout_kernel<T>, 1, 32, 0, out.data()) == 0);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const int r = l / 4 + 8 * (i / 2), n = 2 * (l % 4) + i % 2;
            bad += out[l * 4 + i] != (float)(r + 1 + 32 * (n + 1)) + 0.25f;
        }
    printf("  mma.sync m16n8k16 %s: %d of 128 d elements not at the PTX ISA position\n", name, bad);
    CHECK(bad == 0);
}

/* Misuse the layer must report. */
__global__ void diverged_ldsm_kernel(int)
{
    __shared__ __align__(16) uint16_t m[8][8];
    uint32_t r[1];
    if (threadIdx.x < 16) mma_ldsm<1>(r, &m[threadIdx.x % 8][0]);
}
__global__ void diverged_mma_kernel(int)
{
    const uint32_t a[4] = {}, b[2] = {};
    float d[4] = {};
    if (threadIdx.x % 2) mma_m16n8k16<__half>(d, a, b);
}
__global__ void misaligned_kernel(int)
{
    __shared__ __align__(16) uint16_t m[8][16];
    uint32_t r[4];
    mma_ldsm<4>(r, &m[threadIdx.x % 8][threadIdx.x == 5 ? 4 : 0]); /* lane 5: 8 bytes into its row */
}
__global__ void global_address_kernel(const uint16_t *p)
{
    uint32_t r[2];
    mma_ldsm_trans<2>(r, p + 8 * (threadIdx.x % 16));
}

int main()
{
    srand(11);
    check_gemm<__half, true>("f16, B as rows of B^T", 1, 0);
    check_gemm<__half, false>("f16, B rows, .trans", 0, 0);
    check_gemm<__nv_bfloat16, true>("bf16, B as rows of B^T", 0, 1);
    check_gemm<__nv_bfloat16, false>("bf16, B rows, .trans", 1, 1);
    check_gemm<__half, false>("f16, B rows, .trans", 1, 1);
    check_gemm<__nv_bfloat16, true>("bf16, B as rows of B^T", 1, 0);
    check_ldsm_layout();
    check_mma_layout<__half>("f16");
    check_mma_layout<__nv_bfloat16>("bf16");

    static __align__(16) uint16_t g[256];
    expect_error("ldmatrix by half a warp", RUN(diverged_ldsm_kernel, 1, 32, 0, 0), "divergent warp");
    expect_error("mma.sync by odd lanes", RUN(diverged_mma_kernel, 1, 32, 0, 0), "divergent warp");
    expect_error("row address 8 bytes off", RUN(misaligned_kernel, 1, 32, 0, 0), "16-byte aligned");
    expect_error("global row address", RUN(global_address_kernel, 1, 32, 0, (const uint16_t *)g), "not in shared memory");
    printf("test_simt_mma: %d passed, %d failed, 0 skipped\n", passed, failed);
    return failed ? 1 : 0;
}
