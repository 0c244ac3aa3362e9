/*
 * cpu_matmul.c — the CPU backend's GEMM. f32 and bf16 go whole to oneDNN's matmul
 * (cpu_matmul_dnnl.c) where the build has it: every batch in one primitive, D written
 * in its dtype with alpha, beta (D's own addend), bias, ReLU/GELU and the
 * pre-activation output fused, the bias gradient of D summed after. What it declines
 * (a separate C, DGELU, f16, no oneDNN) runs here: the product op(A)·op(B) from
 * oneDNN or OpenBLAS (sgemm for f32; sbgemm for bf16 where the OpenBLAS build has it;
 * f16 — and bf16 without either — are widened to f32 exactly and go through
 * cpu_sgemm), or from a blocked C GEMM when the build has neither, then alpha/beta and
 * the epilogue per element with the formulas of kernels/gemm_desc.h (the ones the
 * fallback CUDA kernel uses). GPUCORE_CPU_GEMM=blas (or GPUCORE_CPU_PORTABLE) sends
 * f32 to OpenBLAS instead (the tests run both). Runs as a task on the stream's worker
 * thread; batches loop on the OpenBLAS path, whose threads each product.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "gpucore_config.h"
#include "cpu_vec.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#include "elementwise_math.h"
#if GPUCORE_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* OpenMP for the element loops only without OpenBLAS: OpenBLAS threads each GEMM
 * itself, and its spinning threads and OpenMP's starve each other on few cores
 * (measured: 5-25x slower small bf16 GEMMs on 2 cores). */
#define CPU_MM_PARALLEL_THRESHOLD (GPUCORE_HAVE_OPENBLAS ? INT64_MAX : 16384)

typedef struct matmul_args {
    gpucore_gemm_desc g;
    cpu_context *ctx;
} matmul_args;

static float load_el(const void *base, int dt, int64_t off)
{
    return gpucore_load_as_f32((const char *)base + off * gpucore_gemm_dtype_size(dt), dt);
}

/* op(X)[rows, cols] of one batch, widened to a dense f32 buffer: row-major if
 * row_major, else column-major. */
static float *widen(const gpucore_gemm_operand *x, int64_t batch, int64_t rows, int64_t cols, int row_major)
{
    float *out = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof(float));
    if (!out) return NULL;
    const char *base = (const char *)x->data + batch * x->batch_stride * gpucore_gemm_dtype_size(x->dtype);
#pragma omp parallel for if (rows * cols > CPU_MM_PARALLEL_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            out[row_major ? i * cols + j : i + j * rows] = load_el(base, x->dtype, gpucore_gemm_operand_offset(x, i, j));
    return out;
}

/* Blocked C GEMM, the fallback of cpu_sgemm (same contract). The innermost loop
 * runs along a row of op(B) and C, which the compiler vectorises; blocks keep a
 * panel of op(B) in cache while rows of op(A) stream past it. A transposed B is
 * copied panel by panel into a row-major scratch so that loop stays unit-stride.
 * Each element of C sums its k terms in order p = 0, 1, ... whatever the blocking. */
static void blocked_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    enum { BM = 64, BN = 256, BK = 128 };
#pragma omp parallel if (m * n * k > 1 << 18)
    {
        /* per-thread panel for a transposed B; without it, B is read strided */
        float *panel = tb ? malloc((size_t)BK * BN * sizeof(float)) : NULL;
#pragma omp for collapse(2) schedule(static)
        for (int64_t i0 = 0; i0 < m; i0 += BM)
            for (int64_t j0 = 0; j0 < n; j0 += BN) {
                const int64_t i1 = i0 + BM < m ? i0 + BM : m, j1 = j0 + BN < n ? j0 + BN : n, nj = j1 - j0;
                for (int64_t i = i0; i < i1; i++) {
                    float *c = C + i * ldc + j0;
                    if (beta == 0.0f) memset(c, 0, (size_t)nj * sizeof(float)); /* never reads C: NaN poison stays out */
                    else if (beta != 1.0f) for (int64_t j = 0; j < nj; j++) c[j] *= beta;
                }
                for (int64_t p0 = 0; p0 < k; p0 += BK) {
                    const int64_t p1 = p0 + BK < k ? p0 + BK : k;
                    if (panel)
                        for (int64_t p = p0; p < p1; p++)
                            for (int64_t j = 0; j < nj; j++) panel[(p - p0) * BN + j] = B[(j0 + j) * ldb + p];
                    for (int64_t i = i0; i < i1; i++) {
                        float *c = C + i * ldc + j0;
                        for (int64_t p = p0; p < p1; p++) {
                            const float a = alpha * (ta ? A[p * lda + i] : A[i * lda + p]);
                            if (panel) {
                                const float *b = panel + (p - p0) * BN;
                                for (int64_t j = 0; j < nj; j++) c[j] += a * b[j];
                            } else if (!tb) {
                                const float *b = B + p * ldb + j0;
                                for (int64_t j = 0; j < nj; j++) c[j] += a * b[j];
                            } else {
                                for (int64_t j = 0; j < nj; j++) c[j] += a * B[(j0 + j) * ldb + p];
                            }
                        }
                    }
                }
            }
        free(panel);
    }
}

#if GPUCORE_HAVE_OPENBLAS
/* cblas_sbgemm exists only in OpenBLAS builds with BUILD_BFLOAT16 (Debian's 0.3.21
 * lacks it although cblas.h declares it), so it is looked up at run time. */
typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                          float, const bfloat16 *, blasint, const bfloat16 *, blasint, float, float *, blasint);
static sbgemm_fn sbgemm;
static pthread_once_t sbgemm_once = PTHREAD_ONCE_INIT;
static void sbgemm_lookup(void) { *(void **)&sbgemm = dlsym(RTLD_DEFAULT, "cblas_sbgemm"); }
static sbgemm_fn get_sbgemm(void)
{
    pthread_once(&sbgemm_once, sbgemm_lookup);
    return sbgemm;
}

static int fits_int(int64_t v) { return v >= 0 && v <= 0x7fffffff; }
static int blas_ok(const gpucore_gemm_desc *g)
{
    return fits_int(g->m) && fits_int(g->n) && fits_int(g->k) && fits_int(g->a.ld) && fits_int(g->b.ld) &&
           fits_int(g->ldd);
}
#endif

gpucore_status cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (m <= 0 || n <= 0) return GPUCORE_OK;
    if (k > 0 && cpu_sgemm_dnnl(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)) return GPUCORE_OK;
#if GPUCORE_HAVE_OPENBLAS
    if (k > 0 && m <= 0x7fffffff && n <= 0x7fffffff && k <= 0x7fffffff && lda <= 0x7fffffff && ldb <= 0x7fffffff &&
        ldc <= 0x7fffffff) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
        return GPUCORE_OK;
    }
#endif
    blocked_gemm(ta, tb, m, n, k < 0 ? 0 : k, alpha, A, lda, B, ldb, beta, C, ldc);
    return GPUCORE_OK;
}

/* T = op(A)·op(B) for one batch. Layout of T on return: element (i, j) at
 * T[i * *ti + j * *tj]. */
static gpucore_status product(cpu_context *ctx, const gpucore_gemm_desc *g, int64_t bi, float *T, int64_t *ti,
                              int64_t *tj)
{
    const int64_t m = g->m, n = g->n, k = g->k;
    if (k == 0) {
        memset(T, 0, (size_t)(m * n) * sizeof(float));
        *ti = 1; *tj = m;
        return GPUCORE_OK;
    }
    /* oneDNN's bf16 kernels need AVX512-BF16/AMX, which implies AVX2; cpu_vec_have_avx2() is also 0 under
     * GPUCORE_CPU_PORTABLE, which so keeps the sbgemm/widening paths testable on any machine (f32: see
     * cpu_gemm_engine_dnnl) */
    if ((g->a.dtype == GPUCORE_KDT_BF16 && cpu_vec_have_avx2()) ||
        (g->a.dtype == GPUCORE_KDT_F32 && cpu_gemm_engine_dnnl(m, n, k, 1))) {
        const int es = gpucore_gemm_dtype_size(g->a.dtype);
        const char *A = (const char *)g->a.data + bi * g->a.batch_stride * es;
        const char *B = (const char *)g->b.data + bi * g->b.batch_stride * es;
        if (cpu_matmul_dnnl_product(ctx, g->a.dtype, m, n, k, A, g->a.ld, g->a.trans, B, g->b.ld, g->b.trans, T)) {
            *ti = 1; *tj = m;
            return GPUCORE_OK;
        }
    }
#if GPUCORE_HAVE_OPENBLAS
    if (blas_ok(g) && (g->a.dtype == GPUCORE_KDT_F32 || (g->a.dtype == GPUCORE_KDT_BF16 && get_sbgemm()))) {
        const int es = gpucore_gemm_dtype_size(g->a.dtype);
        const char *A = (const char *)g->a.data + bi * g->a.batch_stride * es;
        const char *B = (const char *)g->b.data + bi * g->b.batch_stride * es;
        enum CBLAS_TRANSPOSE ta = g->a.trans ? CblasTrans : CblasNoTrans, tb = g->b.trans ? CblasTrans : CblasNoTrans;
        if (g->a.dtype == GPUCORE_KDT_F32)
            cblas_sgemm(CblasColMajor, ta, tb, (int)m, (int)n, (int)k, 1.0f, (const float *)A, (int)g->a.ld,
                        (const float *)B, (int)g->b.ld, 0.0f, T, (int)m);
        else
            get_sbgemm()(CblasColMajor, ta, tb, (int)m, (int)n, (int)k, 1.0f, (const bfloat16 *)A, (int)g->a.ld,
                         (const bfloat16 *)B, (int)g->b.ld, 0.0f, T, (int)m);
        *ti = 1; *tj = m;
        return GPUCORE_OK;
    }
#endif
    /* f16 (and everything without OpenBLAS): widen to f32 exactly */
    float *Ap = widen(&g->a, bi, m, k, 1), *Bp = widen(&g->b, bi, k, n, 1);
    if (!Ap || !Bp) {
        free(Ap);
        free(Bp);
        return GPUCORE_ERR_OUT_OF_MEMORY; /* sticky on the stream; reported by synchronize */
    }
    cpu_sgemm(0, 0, m, n, k, 1.0f, Ap, k, Bp, n, 0.0f, T, n);
    free(Ap);
    free(Bp);
    *ti = n; *tj = 1;
    return GPUCORE_OK;
}

#if GPUCORE_HAVE_OPENBLAS
/* The whole desc goes straight to sgemm: f32 in and out, no epilogue, and beta's
 * addend is D itself. */
static int direct_sgemm(const gpucore_gemm_desc *g)
{
    return blas_ok(g) && g->a.dtype == GPUCORE_KDT_F32 && g->d_dtype == GPUCORE_KDT_F32 && g->epilogue == 0 &&
           (g->beta == 0.0f || (g->c == g->d && g->ldc == g->ldd && g->batch_stride_c == g->batch_stride_d)) &&
           g->k > 0;
}
#endif

/* Whether an element loop beside an m x n x k GEMM (the DGELU epilogue, the bias gradient) of
 * `work` elements runs on OpenMP's threads: above `bar` elements, and only where oneDNN, not
 * OpenBLAS's own threads, ran the GEMMs (OpenBLAS's spinning threads and OpenMP's starve each
 * other on few cores: CPU_MM_PARALLEL_THRESHOLD). */
static int epilogue_threaded(int64_t work, int64_t bar, int64_t m, int64_t n, int64_t k)
{
    return work > bar && (!GPUCORE_HAVE_OPENBLAS || cpu_gemm_engine_dnnl(m, n, k, 1));
}

static gpucore_status bias_grad_of_operand(const gpucore_gemm_desc *g)
{
    /* BGRAD_A: Σ_p op(A)[i, p] (length m); BGRAD_B: Σ_p op(B)[p, j] (length n) */
    const int of_a = (g->epilogue & GPUCORE_GEMM_EPI_BGRAD_A) != 0;
    const gpucore_gemm_operand *x = of_a ? &g->a : &g->b;
    const int64_t len = of_a ? g->m : g->n;
    const int es = gpucore_gemm_dtype_size(x->dtype);
    if (len > 0 && g->k > 0 && (of_a ? !x->trans : x->trans)) {
        /* the summed index p runs across stored rows (x->ld apart) and the output index along them:
         * stored rows added into f64 sums, p in order (the bits of the loop below), vectorised
         * across the outputs and split over the threads by output range (epilogue_threaded; a
         * higher bar than the DGELU loop's: each thread allocates its own sums) */
        const int threaded = epilogue_threaded(len * g->k, 65536, g->m, g->n, g->k);
        int failed = 0;
#pragma omp parallel if (threaded) reduction(| : failed)
        {
            int nt = 1, t = 0;
#ifdef _OPENMP
            nt = omp_get_num_threads();
            t = omp_get_thread_num();
#endif
            const int64_t r0 = len * t / nt, r1 = len * (t + 1) / nt, w = r1 - r0;
            double *acc = w ? calloc((size_t)w, sizeof(double)) : NULL;
            float *row = w ? malloc(sizeof(float) * (size_t)w) : NULL;
            if (w && (!acc || !row)) failed = 1;
            else if (w) {
                for (int64_t p = 0; p < g->k; p++) {
                    cpu_vec_load(row, (const char *)x->data + (p * x->ld + r0) * es, x->dtype, w);
                    cpu_vec_add_into_f64(acc, row, w);
                }
                for (int64_t r = 0; r < w; r++)
                    gpucore_store_from_f32((char *)g->bias_grad + (r0 + r) * gpucore_gemm_dtype_size(g->d_dtype),
                                           g->d_dtype, (float)acc[r]);
            }
            free(acc);
            free(row);
        }
        return failed ? GPUCORE_ERR_OUT_OF_MEMORY : GPUCORE_OK;
    }
#pragma omp parallel for if (len * g->k > CPU_MM_PARALLEL_THRESHOLD) schedule(static)
    for (int64_t r = 0; r < len; r++) {
        double s = 0;
        for (int64_t p = 0; p < g->k; p++)
            s += load_el(x->data, x->dtype, of_a ? gpucore_gemm_operand_offset(x, r, p) : gpucore_gemm_operand_offset(x, p, r));
        gpucore_store_from_f32((char *)g->bias_grad + r * gpucore_gemm_dtype_size(g->d_dtype), g->d_dtype, (float)s);
    }
    return GPUCORE_OK;
}

/* BGRAD_D: bias_grad[i] = Σ_j D(i, j) of D as stored (batch 1; the fallback kernel sums the same
 * values), with colsum (m doubles) as the accumulator. */
static void bias_grad_of_d(const gpucore_gemm_desc *g, const char *D, double *colsum)
{
    const int64_t m = g->m, n = g->n;
    const int dsz = gpucore_gemm_dtype_size(g->d_dtype);
#pragma omp parallel for if (m * n > CPU_MM_PARALLEL_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < m; i++) {
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += gpucore_load_as_f32(D + (i + j * g->ldd) * dsz, g->d_dtype);
        colsum[i] = s;
    }
    for (int64_t i = 0; i < m; i++) gpucore_store_from_f32((char *)g->bias_grad + i * dsz, g->d_dtype, (float)colsum[i]);
}

static gpucore_status matmul_task(void *p)
{
    const gpucore_gemm_desc *g = &((matmul_args *)p)->g;
    cpu_context *ctx = ((matmul_args *)p)->ctx;
    const int64_t m = g->m, n = g->n;
    const int dsz = gpucore_gemm_dtype_size(g->d_dtype);
    gpucore_status st = GPUCORE_OK;
    if ((g->epilogue & (GPUCORE_GEMM_EPI_BGRAD_A | GPUCORE_GEMM_EPI_BGRAD_B)) && (st = bias_grad_of_operand(g))) return st;
    if (m == 0 || n == 0) return GPUCORE_OK;
    if (cpu_gemv_takes(g)) return cpu_gemv_run(g); /* one to four columns of D: cpu_gemv.c streams A once */
    /* a fusable epilogue: oneDNN writes D itself (see product() for the AVX2 test; f32: cpu_gemm_engine_dnnl) */
    if (cpu_vec_have_avx2() && cpu_matmul_dnnl_fused(ctx, g)) {
        if (g->epilogue & GPUCORE_GEMM_EPI_BGRAD_D) {
            double *colsum = calloc((size_t)m, sizeof(double));
            if (!colsum) return GPUCORE_ERR_OUT_OF_MEMORY;
            bias_grad_of_d(g, g->d, colsum);
            free(colsum);
        }
        return GPUCORE_OK;
    }
#if GPUCORE_HAVE_OPENBLAS
    if (direct_sgemm(g)) {
        for (int64_t bi = 0; bi < g->batch; bi++)
            cblas_sgemm(CblasColMajor, g->a.trans ? CblasTrans : CblasNoTrans, g->b.trans ? CblasTrans : CblasNoTrans,
                        (int)m, (int)n, (int)g->k, g->alpha, (const float *)g->a.data + bi * g->a.batch_stride,
                        (int)g->a.ld, (const float *)g->b.data + bi * g->b.batch_stride, (int)g->b.ld, g->beta,
                        (float *)g->d + bi * g->batch_stride_d, (int)g->ldd);
        return GPUCORE_OK;
    }
#endif
    float *T = malloc((size_t)(m * n) * sizeof(float));
    double *colsum = (g->epilogue & GPUCORE_GEMM_EPI_BGRAD_D) ? calloc((size_t)m, sizeof(double)) : NULL;
    if (!T || ((g->epilogue & GPUCORE_GEMM_EPI_BGRAD_D) && !colsum)) {
        free(T);
        free(colsum);
        return GPUCORE_ERR_OUT_OF_MEMORY;
    }
    for (int64_t bi = 0; bi < g->batch && !st; bi++) {
        int64_t ti, tj;
        if ((st = product(ctx, g, bi, T, &ti, &tj))) break;
        char *D = (char *)g->d + bi * g->batch_stride_d * dsz;
        const char *C = g->c ? (const char *)g->c + bi * g->batch_stride_c * dsz : NULL;
        char *aux = g->aux ? (char *)g->aux + bi * g->batch_stride_aux * dsz : NULL;
        const uint32_t epi = g->epilogue;
        if (ti == 1 && epi == GPUCORE_GEMM_EPI_DGELU && !(C && g->beta != 0.0f)) {
            /* DGELU alone (the input gradient of a GELU layer below): D = alpha·T ⊙ gelu_tanh'(aux) a
             * column at a time through the vector math (cpu_vec_act_grad), aux and D in their dtype.
             * The loop is threaded even with OpenBLAS in the build where oneDNN made T
             * (epilogue_threaded). */
            const int threaded = epilogue_threaded(m * n, 16384, m, n, g->k);
            int failed = 0;
#pragma omp parallel if (threaded) reduction(| : failed)
            {
                float *buf = malloc(sizeof(float) * 2 * (size_t)m);
                failed |= !buf;
#pragma omp for schedule(static)
                for (int64_t j = 0; j < n; j++) {
                    if (!buf) continue;
                    float *acc = buf, *x = buf + m;
                    const float *Tj = T + j * tj;
                    for (int64_t i = 0; i < m; i++) acc[i] = g->alpha * Tj[i];
                    cpu_vec_load(x, aux + j * g->ldaux * dsz, g->d_dtype, m);
                    if (!cpu_vec_act_grad(GPUCORE_ACT_CODE_GELU_TANH, acc, acc, x, m))
                        for (int64_t i = 0; i < m; i++) acc[i] = gpucore_gemm_epilogue_value(epi, acc[i], 0.0f, x[i], NULL);
                    cpu_vec_store(D + j * g->ldd * dsz, g->d_dtype, acc, m);
                }
                free(buf);
            }
            if (failed) st = GPUCORE_ERR_OUT_OF_MEMORY;
        } else if (ti == 1 && g->d_dtype == GPUCORE_KDT_F32 && !(C && g->beta != 0.0f) && !(epi & GPUCORE_GEMM_EPI_DGELU)) {
            /* f32 out, columns of T contiguous: the epilogue a column at a time while it is in
             * cache, GELU through the vector tanh (cpu_vec.h); same steps as the general loop */
            const float *bias = (epi & GPUCORE_GEMM_EPI_BIAS) ? (const float *)g->bias : NULL;
#pragma omp parallel for if (m * n > CPU_MM_PARALLEL_THRESHOLD) schedule(static)
            for (int64_t j = 0; j < n; j++) {
                const float *Tj = T + j * tj;
                float *Dj = (float *)D + j * g->ldd;
                for (int64_t i = 0; i < m; i++) Dj[i] = g->alpha * Tj[i];
                if (bias)
                    for (int64_t i = 0; i < m; i++) Dj[i] += bias[i];
                if (epi & GPUCORE_GEMM_EPI_AUX_OUT) memcpy((float *)aux + j * g->ldaux, Dj, sizeof(float) * (size_t)m);
                if (epi & GPUCORE_GEMM_EPI_RELU)
                    for (int64_t i = 0; i < m; i++) Dj[i] = gpucore_relu(Dj[i]);
                else if (epi & GPUCORE_GEMM_EPI_GELU) cpu_vec_gelu_tanh(Dj, Dj, m);
            }
        } else {
            /* over columns j (the user's rows); each j writes its own column of D */
#pragma omp parallel for if (m * n > CPU_MM_PARALLEL_THRESHOLD) schedule(static)
            for (int64_t j = 0; j < n; j++) {
                for (int64_t i = 0; i < m; i++) {
                    float acc = g->alpha * T[i * ti + j * tj];
                    if (C && g->beta != 0.0f) acc += g->beta * gpucore_load_as_f32(C + (i + j * g->ldc) * dsz, g->d_dtype);
                    float bias = (epi & GPUCORE_GEMM_EPI_BIAS) ? gpucore_load_as_f32((const char *)g->bias + i * dsz, g->d_dtype)
                                                               : 0.0f;
                    float aux_in = (epi & GPUCORE_GEMM_EPI_DGELU) ? gpucore_load_as_f32(aux + (i + j * g->ldaux) * dsz, g->d_dtype)
                                                                  : 0.0f;
                    float aux_out = 0.0f;
                    float v = gpucore_gemm_epilogue_value(epi, acc, bias, aux_in, &aux_out);
                    if (epi & GPUCORE_GEMM_EPI_AUX_OUT) gpucore_store_from_f32(aux + (i + j * g->ldaux) * dsz, g->d_dtype, aux_out);
                    gpucore_store_from_f32(D + (i + j * g->ldd) * dsz, g->d_dtype, v);
                }
            }
        }
        if (colsum) bias_grad_of_d(g, D, colsum);
    }
    free(T);
    free(colsum);
    return st;
}

gpucore_status cpu_matmul(void *bctx, const gpucore_gemm_desc *desc, void *s)
{
    matmul_args a = {*desc, bctx};
    return cpu_stream_enqueue(s, matmul_task, &a, sizeof a);
}
