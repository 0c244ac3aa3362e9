/*
 * cpu_matmul_dnnl.c — bf16 GEMM on the CPU through oneDNN's matmul primitive, which
 * uses the CPU's AMX or AVX512-BF16 units where it has them (PyTorch's CPU bf16 path
 * does the same); OpenBLAS 0.3.21's sbgemm has no such kernels and ran 7x behind
 * torch on an AMX machine. bf16 operands, f32 accumulation, the output written in
 * its own dtype (bf16 or f32) by the kernel, with alpha, bias and ReLU / GELU (tanh)
 * applied while the tile is in registers (alpha as an eltwise-linear post-op, the
 * matmul's bias, eltwise relu / gelu_tanh post-ops: the order of kernels/gemm_desc.h's
 * epilogue; alpha with a bias is declined, as oneDNN adds its bias before post-ops).
 * Operands are described by strides (a transpose is a stride swap), so nothing is
 * copied. Prepared primitives live in the context's plan cache (cpu_plan_cache.c),
 * keyed by shape, strides, dtypes and post-ops, so a repeated GEMM costs a lookup.
 */
#include <stdlib.h>
#include <string.h>
#include "gpucore_config.h"
#include "cpu_internal.h"

#if GPUCORE_HAVE_DNNL
#include <dnnl.h>

#define MM_EPI_FUSED (GPUCORE_GEMM_EPI_BIAS | GPUCORE_GEMM_EPI_RELU | GPUCORE_GEMM_EPI_GELU)

/* The key: every field that shapes the primitive (zeroed first, so padding compares equal). */
typedef struct mm_key {
    int64_t m, n, k, a_i, a_p, b_p, b_j, ldd;
    int32_t d_dt, epi;
    float alpha;
    int32_t tag; /* 'M': this file's plans */
} mm_key;

typedef struct mm_plan {
    dnnl_primitive_t prim;
    dnnl_memory_desc_t src, wei, dst, bias, scratch;
} mm_plan;

static void mm_plan_destroy(void *p)
{
    mm_plan *pl = p;
    dnnl_primitive_destroy(pl->prim);
    free(pl);
}

static dnnl_data_type_t dnnl_dt(int dt) { return dt == GPUCORE_KDT_BF16 ? dnnl_bf16 : dnnl_f32; }

/* Builds the plan of key, or NULL when oneDNN has only its reference loop for it (a CPU without
 * bf16 units: seen 1000x slower than sbgemm; the caller's sbgemm/widening paths run instead). */
static void *mm_build(const void *kp, void *arg)
{
    const mm_key *key = kp;
    dnnl_engine_t eng = arg;
    /* oneDNN's fast matmul wants a row-major destination, and D column-major (m x n, ld ldd) is Dᵀ
     * row-major (n x m): compute Dᵀ = op(B)ᵀ·op(A)ᵀ. Column-major op(A)(i, p) is A[i*a_i + p*a_p];
     * op(B)(p, j) is B[p*b_p + j*b_j]. The bias (one per i) is a row broadcast over Dᵀ's rows. */
    dnnl_dims_t sd = {key->n, key->k}, ss = {key->b_j, key->b_p}; /* src = op(B)ᵀ */
    dnnl_dims_t wd = {key->k, key->m}, ws = {key->a_p, key->a_i}; /* weights = op(A)ᵀ */
    dnnl_dims_t td = {key->n, key->m}, ts = {key->ldd, 1};
    dnnl_dims_t bd = {1, key->m}, bs = {key->m, 1};
    mm_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return NULL;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&pl->src, 2, sd, dnnl_bf16, ss) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->wei, 2, wd, dnnl_bf16, ws) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->dst, 2, td, dnnl_dt(key->d_dt), ts) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->bias, 2, bd, dnnl_dt(key->d_dt), bs) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &pl->src, &pl->wei, (key->epi & GPUCORE_GEMM_EPI_BIAS) ? &pl->bias : NULL,
                                   &pl->dst) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    /* the epilogue's order: alpha·acc (never with a bias: the caller declines that), + bias (the matmul's
     * own bias: a binary-add post-op sent a padded destination to the reference loop), the activation */
    if (ok && key->alpha != 1.0f)
        ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, key->alpha, 0.0f) == dnnl_success;
    if (ok && (key->epi & GPUCORE_GEMM_EPI_RELU))
        ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success;
    else if (ok && (key->epi & GPUCORE_GEMM_EPI_GELU))
        ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.0f, 0.0f) == dnnl_success;
    ok = ok && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
         dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) == dnnl_success &&
         dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         !strstr(impl, "ref") && dnnl_primitive_create(&pl->prim, pd) == dnnl_success;
    if (ok) pl->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        if (pl->prim) dnnl_primitive_destroy(pl->prim);
        free(pl);
        return NULL;
    }
    return pl;
}

static int mm_run(cpu_context *ctx, const mm_key *key, int64_t batch, const char *A, int64_t bsa, const char *B,
                  int64_t bsb, char *D, int64_t bsd, const void *bias)
{
    dnnl_engine_t eng = (dnnl_engine_t)cpu_dnnl_engine();
    if (!eng || !ctx) return 0;
    void *handle = NULL;
    mm_plan *pl = cpu_plan_cache_get(ctx->plans, key, sizeof *key, mm_build, eng, mm_plan_destroy, &handle);
    if (!pl) {
        cpu_plan_cache_release(ctx->plans, handle);
        return 0;
    }
    const int dsz = key->d_dt == GPUCORE_KDT_BF16 ? 2 : 4;
    dnnl_stream_t stream = NULL;
    dnnl_memory_t am = NULL, bm = NULL, dm = NULL, biasm = NULL, sm = NULL;
    const size_t sbytes = dnnl_memory_desc_get_size(&pl->scratch);
    void *sp = sbytes ? cpu_plan_scratch(sbytes) : NULL;
    int ok = (!sbytes || sp) && dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_create(&sm, &pl->scratch, eng, sp) == dnnl_success &&
             dnnl_memory_create(&am, &pl->wei, eng, (void *)A) == dnnl_success &&
             dnnl_memory_create(&bm, &pl->src, eng, (void *)B) == dnnl_success &&
             dnnl_memory_create(&dm, &pl->dst, eng, D) == dnnl_success &&
             (!bias || dnnl_memory_create(&biasm, &pl->bias, eng, (void *)bias) == dnnl_success);
    for (int64_t bi = 0; ok && bi < batch; bi++) {
        if (bi)
            ok = dnnl_memory_set_data_handle(am, (void *)(A + bi * bsa * 2)) == dnnl_success &&
                 dnnl_memory_set_data_handle(bm, (void *)(B + bi * bsb * 2)) == dnnl_success &&
                 dnnl_memory_set_data_handle(dm, D + bi * bsd * dsz) == dnnl_success;
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, bm}, {DNNL_ARG_WEIGHTS, am}, {DNNL_ARG_DST, dm}, {DNNL_ARG_SCRATCHPAD, sm},
                                   {DNNL_ARG_BIAS, biasm}};
        ok = ok && dnnl_primitive_execute(pl->prim, stream, bias ? 5 : 4, args) == dnnl_success;
    }
    ok = ok && dnnl_stream_wait(stream) == dnnl_success;
    if (sm) dnnl_memory_destroy(sm);
    if (biasm) dnnl_memory_destroy(biasm);
    if (dm) dnnl_memory_destroy(dm);
    if (bm) dnnl_memory_destroy(bm);
    if (am) dnnl_memory_destroy(am);
    if (stream) dnnl_stream_destroy(stream);
    cpu_plan_cache_release(ctx->plans, handle);
    return ok;
}

static void key_operands(mm_key *key, int64_t lda, int ta, int64_t ldb, int tb)
{
    key->a_i = ta ? lda : 1;
    key->a_p = ta ? 1 : lda;
    key->b_p = tb ? ldb : 1;
    key->b_j = tb ? 1 : ldb;
    key->tag = 'M';
}

int cpu_matmul_dnnl_bf16(cpu_context *ctx, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, int ta,
                         const void *B, int64_t ldb, int tb, float *T)
{
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    mm_key key;
    memset(&key, 0, sizeof key);
    key.m = m; key.n = n; key.k = k; key.ldd = m;
    key.d_dt = GPUCORE_KDT_F32;
    key.alpha = 1.0f;
    key_operands(&key, lda, ta, ldb, tb);
    return mm_run(ctx, &key, 1, A, 0, B, 0, (char *)T, 0, NULL);
}

int cpu_matmul_dnnl_fused(cpu_context *ctx, const gpucore_gemm_desc *g)
{
    if (g->a.dtype != GPUCORE_KDT_BF16 || g->b.dtype != GPUCORE_KDT_BF16 ||
        (g->d_dtype != GPUCORE_KDT_BF16 && g->d_dtype != GPUCORE_KDT_F32) || (g->epilogue & ~(uint32_t)MM_EPI_FUSED) ||
        (g->c && g->beta != 0.0f) ||
        ((g->epilogue & GPUCORE_GEMM_EPI_BIAS) && g->alpha != 1.0f) || g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0)
        return 0;
    mm_key key;
    memset(&key, 0, sizeof key);
    key.m = g->m; key.n = g->n; key.k = g->k; key.ldd = g->ldd;
    key.d_dt = g->d_dtype;
    key.epi = (int32_t)g->epilogue;
    key.alpha = g->alpha;
    key_operands(&key, g->a.ld, g->a.trans, g->b.ld, g->b.trans);
    return mm_run(ctx, &key, g->batch, g->a.data, g->a.batch_stride, g->b.data, g->b.batch_stride, g->d,
                  g->batch_stride_d, (g->epilogue & GPUCORE_GEMM_EPI_BIAS) ? g->bias : NULL);
}

#else

int cpu_matmul_dnnl_bf16(cpu_context *ctx, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, int ta,
                         const void *B, int64_t ldb, int tb, float *T)
{
    (void)ctx; (void)m; (void)n; (void)k; (void)A; (void)lda; (void)ta; (void)B; (void)ldb; (void)tb; (void)T;
    return 0;
}

int cpu_matmul_dnnl_fused(cpu_context *ctx, const gpucore_gemm_desc *g)
{
    (void)ctx; (void)g;
    return 0;
}

#endif
