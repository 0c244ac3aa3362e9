/*
 * cuda_matmul.c — the CUDA backend's GEMM on cuBLASLt.
 *
 * A "plan" holds what cuBLASLt needs for one kind of problem: the matmul
 * descriptor (compute type, transposes, epilogue, aux leading dimension), the
 * four matrix layouts and the algorithm the heuristic chose. Plans are cached by
 * (device, shape, dtypes, transposes, leading dims, batch strides, epilogue,
 * TF32, pointer alignments, workspace size) in a hash table that only grows, so
 * a shape seen before costs a lookup, never a rebuild. Pointers that change
 * per call (bias, aux, fp8 scales) are set on the plan's descriptor under
 * the plan's own lock just before cublasLtMatmul, which reads them when it
 * enqueues. They are also set BEFORE the heuristic runs: it derives the
 * alignment it expects from their values (cublasLt.h:1334, 1364), so their
 * alignments are part of the plan key. The heuristic is asked for several
 * algorithms; when cublasLtMatmul refuses one the next is tried. When none is
 * usable (no algorithm, an aux leading dimension cuBLASLt does not take, every
 * algorithm refused) the tiled fallback kernel (kernels/gemm_fallback.cu) runs
 * instead, with a WARN naming the reason once per plan, and every such call
 * reports its reason to the front-end (gpucore_matmul_stats, the profiler).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include "cuda_internal.h"
#include "backend/kernel_ops.h"

#define MAX_DEVICES 64
#define PLAN_BUCKETS 1024
#define MAX_ALGOS 4

/* ---- per-device cuBLASLt handles (created lazily, never destroyed: the driver
 * tears them down at exit) ---- */
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t handles[MAX_DEVICES];

static gpucore_status lt_status(cublasStatus_t st, const char *what)
{
    return cuda_host->set_error(st == CUBLAS_STATUS_ALLOC_FAILED ? GPUCORE_ERR_OUT_OF_MEMORY
                                : st == CUBLAS_STATUS_NOT_SUPPORTED ? GPUCORE_ERR_NOT_SUPPORTED
                                                                    : GPUCORE_ERR_BACKEND,
                                "matmul: %s failed: cuBLASLt status %d", what, (int)st);
}

static gpucore_status lt_handle(int device, cublasLtHandle_t *out)
{
    if (device < 0 || device >= MAX_DEVICES)
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "matmul: device %d is beyond the %d this build handles",
                                    device, MAX_DEVICES);
    pthread_mutex_lock(&handle_lock);
    gpucore_status st = GPUCORE_OK;
    if (!handles[device]) {
        cublasStatus_t cs = cublasLtCreate(&handles[device]);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            handles[device] = NULL;
            st = lt_status(cs, "cublasLtCreate");
        }
    }
    *out = handles[device];
    pthread_mutex_unlock(&handle_lock);
    return st;
}

/* ---- plan cache ---- */

typedef struct plan_key {
    int32_t device;
    int32_t a_dtype, b_dtype, d_dtype;
    int32_t trans_a, trans_b;
    uint32_t epilogue;
    int32_t tf32;
    int32_t align_a, align_b, align_c, align_d;
    int32_t separate_c;
    int32_t fp8_scales; /* bit 0 scale_a, bit 1 scale_b */
    int32_t align_bias, align_aux, align_scale_a, align_scale_b; /* the heuristic depends on them */
    int64_t m, n, k, batch;
    int64_t lda, ldb, ldc, ldd, ldaux;
    int64_t stride_a, stride_b, stride_c, stride_d, stride_aux;
    int64_t workspace_bytes;
} plan_key;

typedef struct plan {
    plan_key key;
    struct plan *next;
    pthread_mutex_t lock; /* guards the pointer attributes of desc between set and enqueue */
    int use_fallback;
    int fallback_reason; /* gpucore_matmul_fallback_reason, when use_fallback */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algos[MAX_ALGOS]; /* best first; a refused one is dropped (under lock) */
    int nalgos;
} plan;

static pthread_rwlock_t plan_lock = PTHREAD_RWLOCK_INITIALIZER;
static plan *plan_table[PLAN_BUCKETS];

static uint64_t key_hash(const plan_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int alignment_of(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 256 && (u % (uintptr_t)(a * 2)) == 0) a *= 2;
    return u == 0 ? 256 : a;
}

static cudaDataType_t cuda_type(int dt)
{
    switch (dt) {
    case GPUCORE_F32: return CUDA_R_32F;
    case GPUCORE_F16: return CUDA_R_16F;
    case GPUCORE_BF16: return CUDA_R_16BF;
    case GPUCORE_FP8_E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_8F_E5M2;
    }
}

static cublasLtEpilogue_t lt_epilogue(uint32_t e)
{
    const int bias = (e & GPUCORE_GEMM_EPI_BIAS) != 0, aux = (e & GPUCORE_GEMM_EPI_AUX_OUT) != 0;
    if (e & GPUCORE_GEMM_EPI_DGELU) return (e & GPUCORE_GEMM_EPI_BGRAD_D) ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    if (e & GPUCORE_GEMM_EPI_BGRAD_A) return CUBLASLT_EPILOGUE_BGRADA;
    if (e & GPUCORE_GEMM_EPI_BGRAD_B) return CUBLASLT_EPILOGUE_BGRADB;
    if (e & GPUCORE_GEMM_EPI_GELU)
        return bias ? (aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS)
                    : (aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU);
    if (e & GPUCORE_GEMM_EPI_RELU) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

static void plan_destroy(plan *p)
{
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

#define LT_TRY(call, what)                                     \
    do {                                                       \
        cublasStatus_t lt_try_st_ = (call);                    \
        if (lt_try_st_ != CUBLAS_STATUS_SUCCESS) {             \
            st = lt_status(lt_try_st_, what);                  \
            goto fail;                                         \
        }                                                      \
    } while (0)

static gpucore_status layout_create(cublasLtMatrixLayout_t *l, int dt, int64_t rows, int64_t cols, int64_t ld,
                                    int64_t batch, int64_t stride)
{
    gpucore_status st = GPUCORE_OK;
    LT_TRY(cublasLtMatrixLayoutCreate(l, cuda_type(dt), (uint64_t)rows, (uint64_t)cols, ld), "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
               "setting the batch count");
        LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
               "setting the batch stride");
    }
fail:
    return st;
}

/* The per-call pointers on the plan's descriptor (the caller holds p->lock, or owns p alone). */
static cublasStatus_t set_pointers(plan *p, const gpucore_gemm_desc *g)
{
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    const void *bias_ptr = (g->epilogue & GPUCORE_GEMM_EPI_BIAS) ? g->bias : g->bias_grad;
    if (cs == CUBLAS_STATUS_SUCCESS && bias_ptr)
        cs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr);
    if (cs == CUBLAS_STATUS_SUCCESS && g->aux)
        cs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux);
    if (cs == CUBLAS_STATUS_SUCCESS && g->scale_a)
        cs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->scale_a, sizeof g->scale_a);
    if (cs == CUBLAS_STATUS_SUCCESS && g->scale_b)
        cs = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->scale_b, sizeof g->scale_b);
    /* never AMAX_D: cuBLASLt computes it for fp8 outputs only (cublasLt.h:1476-1477, an unsupported combination
     * is CUBLAS_STATUS_INVALID_VALUE) and ours are f32/f16/bf16; gpucore_kernel_gemm_amax reduces D instead */
    return cs;
}

static const char *dtype_word(int dt) { return dt == GPUCORE_F32 ? "f32" : dt == GPUCORE_F16 ? "f16" : "bf16"; }

/* Once per plan: the fallback kernel (about 100x slower than cuBLASLt) serves this key, and why. */
static void warn_fallback(const plan_key *k, const char *why)
{
    cuda_host->log(GPUCORE_LOG_WARN, "matmul: using the fallback GEMM kernel (far slower than cuBLASLt) for m=%lld "
                   "n=%lld k=%lld batch %lld (%s x %s -> %s, epilogue 0x%x, aux ld %lld): %s", (long long)k->m,
                   (long long)k->n, (long long)k->k, (long long)k->batch, dtype_word(k->a_dtype), dtype_word(k->b_dtype),
                   dtype_word(k->d_dtype), (unsigned)k->epilogue, (long long)k->ldaux, why);
}

/* Build the plan for key k; g's pointers are set on the descriptor before the heuristic reads them. */
static gpucore_status plan_build(cublasLtHandle_t h, const plan_key *k, const gpucore_gemm_desc *g, plan **out)
{
    gpucore_status st = GPUCORE_OK;
    cublasLtMatmulPreference_t pref = NULL;
    plan *p = calloc(1, sizeof *p);
    if (!p) return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "matmul: out of host memory for a plan");
    p->key = *k;
    pthread_mutex_init(&p->lock, NULL);
    const int fp8 = k->a_dtype >= GPUCORE_FP8_E4M3;
    cublasComputeType_t compute = (k->a_dtype == GPUCORE_F32 && k->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "setting TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "setting TRANSB");
    cublasLtEpilogue_t epi = lt_epilogue(k->epilogue);
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "setting the epilogue");
    if (k->epilogue & (GPUCORE_GEMM_EPI_BIAS | GPUCORE_GEMM_EPI_BGRAD_A | GPUCORE_GEMM_EPI_BGRAD_B | GPUCORE_GEMM_EPI_BGRAD_D)) {
        int32_t bt = (int32_t)cuda_type(k->d_dtype);
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "setting the bias type");
    }
    if (k->epilogue & (GPUCORE_GEMM_EPI_AUX_OUT | GPUCORE_GEMM_EPI_DGELU)) {
        int64_t ldaux = k->ldaux;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux),
               "setting the aux leading dimension");
    }
    if (fp8) {
        /* accumulation stays fp32 throughout (no FAST_ACCUM) */
        int8_t fast = 0;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
               "setting FAST_ACCUM");
    }
    if ((st = layout_create(&p->la, k->a_dtype, k->trans_a ? k->k : k->m, k->trans_a ? k->m : k->k, k->lda, k->batch,
                            k->stride_a)) ||
        (st = layout_create(&p->lb, k->b_dtype, k->trans_b ? k->n : k->k, k->trans_b ? k->k : k->n, k->ldb, k->batch,
                            k->stride_b)) ||
        (st = layout_create(&p->lc, k->d_dtype, k->m, k->n, k->ldc, k->batch, k->stride_c)) ||
        (st = layout_create(&p->ld, k->d_dtype, k->m, k->n, k->ldd, k->batch, k->stride_d)))
        goto fail;

    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t ws = (uint64_t)k->workspace_bytes;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "setting the workspace size");
    uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_c, (uint32_t)k->align_d};
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4), "alignment A");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4), "alignment B");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4), "alignment C");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4), "alignment D");

    LT_TRY(set_pointers(p, g), "setting the bias/aux/scale pointers");

    char why[160] = "";
    int reason = GPUCORE_MATMUL_FALLBACK_NO_ALGORITHM;
    cublasLtMatmulHeuristicResult_t results[MAX_ALGOS];
    int found = 0;
    cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
    memset(results, 0, sizeof results);
    if ((k->epilogue & (GPUCORE_GEMM_EPI_AUX_OUT | GPUCORE_GEMM_EPI_DGELU)) && (k->ldaux % 8 || k->ldaux < k->m)) {
        /* cublasLt.h:1382: "Must be divisible by 8 and be no less than the number of rows in the output matrix" */
        reason = GPUCORE_MATMUL_FALLBACK_AUX_LD;
        snprintf(why, sizeof why, "cuBLASLt takes an aux leading dimension only when it is a multiple of 8 (%lld)",
                 (long long)k->ldaux);
    } else
        hs = cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->la, p->lb, p->lc, p->ld, pref, MAX_ALGOS, results, &found);
    if (!why[0] && (hs != CUBLAS_STATUS_SUCCESS || found == 0))
        snprintf(why, sizeof why, "cuBLASLt has no algorithm for it (heuristic status %d)", (int)hs);
    for (int i = 0; i < found && i < MAX_ALGOS; i++)
        if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= (size_t)k->workspace_bytes)
            p->algos[p->nalgos++] = results[i].algo;
    if (!why[0] && p->nalgos == 0) {
        reason = GPUCORE_MATMUL_FALLBACK_WORKSPACE;
        snprintf(why, sizeof why, "no algorithm fits the workspace");
    }
    if (why[0]) {
        if (fp8) {
            st = cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "matmul: fp8 m=%lld n=%lld k=%lld: %s; fp8 has no "
                                      "fallback kernel", (long long)k->m, (long long)k->n, (long long)k->k, why);
            goto fail;
        }
        p->use_fallback = 1;
        p->fallback_reason = reason;
        warn_fallback(k, why);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    *out = p;
    return GPUCORE_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_destroy(p);
    return st;
}

static gpucore_status plan_get(cublasLtHandle_t h, const plan_key *k, const gpucore_gemm_desc *g, plan **out)
{
    uint64_t bucket = key_hash(k) % PLAN_BUCKETS;
    pthread_rwlock_rdlock(&plan_lock);
    for (plan *p = plan_table[bucket]; p; p = p->next)
        if (memcmp(&p->key, k, sizeof *k) == 0) {
            pthread_rwlock_unlock(&plan_lock);
            *out = p;
            return GPUCORE_OK;
        }
    pthread_rwlock_unlock(&plan_lock);
    plan *fresh = NULL;
    gpucore_status st = plan_build(h, k, g, &fresh);
    if (st) return st;
    pthread_rwlock_wrlock(&plan_lock);
    for (plan *p = plan_table[bucket]; p; p = p->next)
        if (memcmp(&p->key, k, sizeof *k) == 0) { /* another thread built it meanwhile */
            pthread_rwlock_unlock(&plan_lock);
            plan_destroy(fresh);
            *out = p;
            return GPUCORE_OK;
        }
    fresh->next = plan_table[bucket];
    plan_table[bucket] = fresh;
    pthread_rwlock_unlock(&plan_lock);
    *out = fresh;
    return GPUCORE_OK;
}

static int compute_capability(int device)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

gpucore_status cuda_matmul(void *bctx, const gpucore_gemm_desc *g, void *stream)
{
    cuda_context *c = bctx;
    const int fp8 = g->a.dtype >= GPUCORE_FP8_E4M3;
    if (fp8) {
        int cc = compute_capability(c->device);
        if (cc < 89)
            return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "matmul: fp8 operands need compute capability 8.9 or "
                                        "newer; cuda:%d is %d.%d", c->device, cc / 10, cc % 10);
    }
    /* cublasLt.h:1539-1546: fp8 with an f32 output takes a bf16 bias, not D's type */
    if (fp8 && g->d_dtype == GPUCORE_F32 && (g->epilogue & GPUCORE_GEMM_EPI_BIAS))
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "matmul: fp8 operands with an f32 output take a bf16 "
                                    "bias in cuBLASLt, and the bias here is f32: use a bf16 or f16 output, or add the "
                                    "bias separately");
    /* shapes cuBLASLt does not take at all go to the fallback kernel directly */
    if (g->m == 0 || g->n == 0 || g->k == 0 || g->batch > INT32_MAX) {
        if (fp8) return GPUCORE_OK; /* nothing to compute: fp8 has no bias-gradient epilogues here */
        if (g->batch > INT32_MAX && g->fallback_out) *g->fallback_out = GPUCORE_MATMUL_FALLBACK_BATCH + 1;
        return kops_matmul(bctx, g, stream);
    }
    /* the device first: a cuBLASLt handle belongs to the device current when it is created */
    CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice");
    cublasLtHandle_t h = NULL;
    gpucore_status st = lt_handle(c->device, &h);
    if (st) return st;

    plan_key k;
    memset(&k, 0, sizeof k); /* padding takes part in hashing and comparing */
    k.device = c->device;
    k.a_dtype = g->a.dtype;
    k.b_dtype = g->b.dtype;
    k.d_dtype = g->d_dtype;
    k.trans_a = g->a.trans;
    k.trans_b = g->b.trans;
    k.epilogue = g->epilogue;
    k.tf32 = g->allow_tf32;
    k.align_a = alignment_of(g->a.data);
    k.align_b = alignment_of(g->b.data);
    k.separate_c = g->c && g->c != g->d;
    k.align_c = alignment_of(k.separate_c ? g->c : g->d);
    k.align_d = alignment_of(g->d);
    k.fp8_scales = (g->scale_a ? 1 : 0) | (g->scale_b ? 2 : 0);
    k.align_bias = alignment_of((g->epilogue & GPUCORE_GEMM_EPI_BIAS) ? g->bias : g->bias_grad);
    k.align_aux = alignment_of(g->aux);
    k.align_scale_a = alignment_of(g->scale_a);
    k.align_scale_b = alignment_of(g->scale_b);
    k.m = g->m; k.n = g->n; k.k = g->k; k.batch = g->batch;
    k.lda = g->a.ld; k.ldb = g->b.ld; k.ldd = g->ldd;
    k.ldc = k.separate_c ? g->ldc : g->ldd;
    k.stride_a = g->a.batch_stride; k.stride_b = g->b.batch_stride; k.stride_d = g->batch_stride_d;
    k.stride_c = k.separate_c ? g->batch_stride_c : g->batch_stride_d;
    k.ldaux = g->aux ? g->ldaux : 0;
    k.stride_aux = g->aux ? g->batch_stride_aux : 0;
    k.workspace_bytes = g->workspace ? g->workspace_bytes : 0;

    plan *p;
    if ((st = plan_get(h, &k, g, &p))) return st;

    pthread_mutex_lock(&p->lock);
    cublasStatus_t cs = p->use_fallback ? CUBLAS_STATUS_SUCCESS : set_pointers(p, g);
    const float alpha = g->alpha, beta = g->c ? g->beta : 0.0f;
    const void *cptr = k.separate_c ? g->c : g->d;
    /* best algorithm first; one cublasLtMatmul refuses is dropped for good and the next is tried */
    while (cs == CUBLAS_STATUS_SUCCESS && p->nalgos > 0) {
        cs = cublasLtMatmul(h, p->desc, &alpha, g->a.data, p->la, g->b.data, p->lb, &beta, cptr, p->lc, g->d, p->ld,
                            &p->algos[0], g->workspace, (size_t)k.workspace_bytes, (cudaStream_t)stream);
        if (cs != CUBLAS_STATUS_NOT_SUPPORTED) break;
        memmove(&p->algos[0], &p->algos[1], sizeof p->algos[0] * (size_t)--p->nalgos);
        cs = CUBLAS_STATUS_SUCCESS;
        if (p->nalgos == 0) {
            if (fp8) cs = CUBLAS_STATUS_NOT_SUPPORTED;
            else {
                p->use_fallback = 1;
                p->fallback_reason = GPUCORE_MATMUL_FALLBACK_REFUSED;
                warn_fallback(&k, "cublasLtMatmul refused every algorithm the heuristic offered");
            }
        }
    }
    const int fallback = p->use_fallback, reason = p->fallback_reason;
    pthread_mutex_unlock(&p->lock);
    if (cs != CUBLAS_STATUS_SUCCESS) return lt_status(cs, "cublasLtMatmul");
    if (g->amax_d && !fallback) { /* fp8 only (src/ops/matmul.c), which has no fallback */
        gpucore_launch l;
        if ((st = kops_launch_for(bctx, stream, &l))) return st;
        int err = gpucore_kernel_gemm_amax(&l, g);
        return err ? kops_error(err, "matmul amax_d kernel launch") : GPUCORE_OK;
    }
    if (fallback) {
        if (g->fallback_out) *g->fallback_out = reason + 1; /* counted in gpucore_matmul_stats and the profiler */
        return kops_matmul(bctx, g, stream);
    }
    return GPUCORE_OK;
}
