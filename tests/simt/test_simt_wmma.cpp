/*
 * test_simt_wmma.cpp — the SIMT layer's nvcuda::wmma (simt_wmma.h) against a
 * float64 product: C = A·B + C0 for M x N x K = 48 x 64 x 80 with f16 and bf16
 * operands and f32 accumulators, B given row-major or column-major, C0 loaded
 * row- or column-major, four warps each owning output tiles, the operands
 * staged through aligned __shared__ tiles as a kernel would. The bound is
 * exact-product f32 accumulation: |err| <= 2^-22 · K · Σ|a||b| per element.
 * Also: uniform element-wise use of x[] (documented), and the documented
 * rules enforced as execution errors (a diverged warp, a misaligned pointer,
 * an ldm that is not a multiple of 16 bytes).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <new>
#include <vector>
#include "simt_check.h"
#include "simt_wmma.h"

using namespace nvcuda;

enum { M = 48, N = 64, K = 80 };

/* C[M][N] = A[M][K] · B + C (row-major A, C; B row-major [K][N] or column-major, i.e. Bt[N][K]).
 * Warp w computes output tiles t = w, w + 4, ... of the (M/16) x (N/16) grid; C0 is read row- or
 * column-major (c_colmajor: C0t[N][M]). Every fragment also gets scaled by `twice` then halved:
 * a uniform element-wise use of x[] that must not change anything. */
template <typename T, typename BL>
__global__ void gemm_kernel(const T *A, const T *B, const float *C0, float *C, int c_colmajor)
{
    __shared__ __align__(32) float Cs[4][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int t = warp; t < (M / 16) * (N / 16); t += 4) {
        const int tm = t / (N / 16), tn = t % (N / 16);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        const float *c0 = c_colmajor ? C0 + tn * 16 * M + tm * 16 : C0 + tm * 16 * N + tn * 16;
        for (int e = lane; e < 256; e += 32) /* stage C0's tile: ldm 16 */
            Cs[warp][e] = c_colmajor ? c0[(e / 16) * M + e % 16] : c0[(e / 16) * N + e % 16];
        __syncwarp();
        wmma::load_matrix_sync(c, Cs[warp], 16, c_colmajor ? wmma::mem_col_major : wmma::mem_row_major);
        for (int i = 0; i < c.num_elements; i++) c.x[i] *= 2.0f;
        for (int i = 0; i < c.num_elements; i++) c.x[i] *= 0.5f;
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BL> b;
            /* each warp stages its own 16x16 A and B tiles (ldm 16) */
            __shared__ __align__(32) T at[4][256], bt[4][256];
            for (int e = lane; e < 256; e += 32) {
                at[warp][e] = A[(tm * 16 + e / 16) * K + k0 + e % 16];
                if (std::is_same<BL, wmma::row_major>::value) bt[warp][e] = B[(k0 + e / 16) * N + tn * 16 + e % 16];
                else bt[warp][e] = B[(tn * 16 + e / 16) * K + k0 + e % 16]; /* column-major: Bt[n][k], ldm 16 */
            }
            __syncwarp();
            wmma::load_matrix_sync(a, at[warp], 16);
            wmma::load_matrix_sync(b, bt[warp], 16);
            wmma::mma_sync(c, a, b, c);
            __syncwarp();
        }
        wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, c, N, wmma::mem_row_major);
    }
}

/* Misuse the layer must report. */
__global__ void diverged_kernel(const __half *p)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    if (threadIdx.x < 16) wmma::load_matrix_sync(a, p, 16);
}
__global__ void misaligned_kernel(const __half *p)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::load_matrix_sync(a, p + 8, 16); /* 16 bytes past an aligned base */
}
__global__ void bad_ldm_kernel(float *p)
{
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 1.0f);
    wmma::store_matrix_sync(p, c, 18, wmma::mem_row_major); /* 72 bytes */
}

/* WMMA fragment pointers must be 256-bit aligned (CUDA C++ Programming Guide, warp matrix
 * functions) and the SIMT layer checks it: the host arrays the kernel reads as global memory are
 * allocated on a 32-byte boundary (cudaMalloc's are at least 256-byte aligned), never left to
 * malloc's 16. */
template <typename T> struct aligned32 {
    typedef T value_type;
    aligned32() = default;
    template <typename U> aligned32(const aligned32<U> &) {}
    T *allocate(size_t n)
    {
        void *p = aligned_alloc(32, (n * sizeof(T) + 31) / 32 * 32);
        if (!p) throw std::bad_alloc();
        return (T *)p;
    }
    void deallocate(T *p, size_t) { free(p); }
    template <typename U> bool operator==(const aligned32<U> &) const { return true; }
    template <typename U> bool operator!=(const aligned32<U> &) const { return false; }
};
template <typename T> using dev_vector = std::vector<T, aligned32<T>>;

static float rnd() { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

template <typename T, typename BL> static void check_gemm(const char *name, int c_colmajor)
{
    const bool bcol = std::is_same<BL, wmma::col_major>::value;
    dev_vector<T> A(M * K), B(K * N);
    dev_vector<float> C0(M * N), C(M * N, NAN);
    for (auto &x : A) x = T(rnd());
    for (auto &x : B) x = T(rnd());
    for (auto &x : C0) x = rnd();
    CHECK(RUN((gemm_kernel<T, BL>), 1, 128, 0, A.data(), B.data(), C0.data(), C.data(), c_colmajor) == 0);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = c_colmajor ? C0[j * M + i] : C0[i * N + j], mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                const double a = (float)A[i * K + k], b = (float)(bcol ? B[j * K + k] : B[k * N + j]);
                ref += a * b;
                mag += fabs(a * b);
            }
            const double err = fabs(C[i * N + j] - ref), bound = ldexp(1.0, -22) * (K + 1) * mag;
            if (!(err <= bound)) bad++;
            if (err / (mag > 0 ? mag : 1) > worst) worst = err / (mag > 0 ? mag : 1);
        }
    printf("  %s: %dx%dx%d, worst error %.2e of sum|a*b|, %d over the bound\n", name, M, N, K, worst, bad);
    CHECK(bad == 0);
}

int main()
{
    srand(7);
    check_gemm<__half, wmma::row_major>("f16, B row-major, C0 row-major", 0);
    check_gemm<__half, wmma::col_major>("f16, B col-major, C0 col-major", 1);
    check_gemm<__nv_bfloat16, wmma::row_major>("bf16, B row-major, C0 col-major", 1);
    check_gemm<__nv_bfloat16, wmma::col_major>("bf16, B col-major, C0 row-major", 0);

    static __align__(32) __half h[512];
    static __align__(32) float f[512];
    expect_error("load by half a warp", RUN(diverged_kernel, 1, 32, 0, (const __half *)h), "divergent warp");
    expect_error("misaligned pointer", RUN(misaligned_kernel, 1, 32, 0, (const __half *)h), "256-bit aligned");
    expect_error("ldm of 72 bytes", RUN(bad_ldm_kernel, 1, 32, 0, f), "multiple of 16 bytes");
    printf("test_simt_wmma: %d passed, %d failed, 0 skipped\n", passed, failed);
    return failed ? 1 : 0;
}
