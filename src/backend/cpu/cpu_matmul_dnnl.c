/*
 * cpu_matmul_dnnl.c — f32 and bf16 GEMM on the CPU through oneDNN's matmul primitive,
 * which JIT-compiles its kernels for the ISA the CPU has (AVX2, AVX-512, AVX512-BF16,
 * AMX), as PyTorch's CPU path does; the distribution's OpenBLAS 0.3.21 runs AVX2
 * kernels at best (older ones on CPUs it does not know) and has no bf16 units. f32 or
 * bf16 operands, f32 accumulation, the output written in its own dtype (bf16 or f32)
 * by the kernel, with alpha, beta (D += ... as oneDNN's sum post-op, when beta's addend
 * is D itself), bias and ReLU / GELU (tanh) applied while the tile is in registers
 * (alpha as the output scale, the sum post-op, the matmul's bias, eltwise relu /
 * gelu_tanh post-ops: the order of kernels/gemm_desc.h's epilogue; alpha with a bias is
 * declined: oneDNN orders its output scale and its bias otherwise). The pre-activation output (AUX_OUT) is
 * written by the primitive into aux and the activation applied from it after. A batch
 * is one 3-d primitive (a batch stride of 0 broadcasts that operand). Operands are
 * described by strides (a transpose is a stride swap), so nothing is copied, except f32 weights whose
 * rows would thrash the L1 sets (mm_chunk_cols: copied in column chunks, a matmul each). Prepared
 * primitives live in the context's plan cache (cpu_plan_cache.c), keyed by shape,
 * strides, dtypes and post-ops, so a repeated GEMM costs a lookup. Also here: which
 * engine takes an f32 GEMM (cpu_gemm_engine) and cpu_sgemm's oneDNN route.
 */
#include <stdlib.h>
#include <string.h>
#include "gpucore_config.h"
#include "cpu_internal.h"
#include "cpu_vec.h"

#if GPUCORE_HAVE_DNNL
#include <dnnl.h>

#define MM_EPI_FUSED (GPUCORE_GEMM_EPI_BIAS | GPUCORE_GEMM_EPI_RELU | GPUCORE_GEMM_EPI_GELU | GPUCORE_GEMM_EPI_AUX_OUT | \
                      GPUCORE_GEMM_EPI_BGRAD_D | GPUCORE_GEMM_EPI_BGRAD_A | GPUCORE_GEMM_EPI_BGRAD_B)

/* The key: every field that shapes the primitive (zeroed first, so padding compares equal). */
typedef struct mm_key {
    int64_t batch, m, n, k, a_i, a_p, b_p, b_j, ldd, bsa, bsb, bsd;
    int32_t ab_dt, d_dt, bias, act; /* act: 0 none, 1 ReLU, 2 GELU (tanh) */
    float alpha, beta;
    int32_t tag, pad; /* tag 'M': this file's plans */
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
     * op(B)(p, j) is B[p*b_p + j*b_j]. The bias (one per i) is a row broadcast over Dᵀ's rows. With
     * a batch, dimension 0 is the batch; an operand with batch stride 0 has a batch dimension of 1
     * (oneDNN broadcasts it; the stride of a size-1 dimension is never stepped). */
    const int nd = key->batch > 1 ? 3 : 2, o = nd - 2;
    dnnl_dims_t sd, ss, wd, ws, td, ts, bd, bs;
    if (nd == 3) {
        sd[0] = key->bsb ? key->batch : 1; ss[0] = key->bsb ? key->bsb : key->n * key->k;
        wd[0] = key->bsa ? key->batch : 1; ws[0] = key->bsa ? key->bsa : key->k * key->m;
        td[0] = key->batch; ts[0] = key->bsd;
        bd[0] = 1; bs[0] = key->m;
    }
    sd[o] = key->n; sd[o + 1] = key->k; ss[o] = key->b_j; ss[o + 1] = key->b_p; /* src = op(B)ᵀ */
    wd[o] = key->k; wd[o + 1] = key->m; ws[o] = key->a_p; ws[o + 1] = key->a_i; /* weights = op(A)ᵀ */
    td[o] = key->n; td[o + 1] = key->m; ts[o] = key->ldd; ts[o + 1] = 1;
    bd[o] = 1; bd[o + 1] = key->m; bs[o] = key->m; bs[o + 1] = 1;
    mm_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return NULL;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&pl->src, nd, sd, dnnl_dt(key->ab_dt), ss) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->wei, nd, wd, dnnl_dt(key->ab_dt), ws) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->dst, nd, td, dnnl_dt(key->d_dt), ts) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&pl->bias, nd, bd, dnnl_dt(key->d_dt), bs) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &pl->src, &pl->wei, key->bias ? &pl->bias : NULL, &pl->dst) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    /* the epilogue's order: alpha·acc (the output scale, never with a bias: the caller declines that; an
     * eltwise-linear post-op before the sum sends oneDNN to no implementation), + beta·D (sum), + bias
     * (the matmul's own bias: a binary-add post-op sent a padded destination to the reference loop; oneDNN
     * adds it before the post-ops, which reorders only the rounding of acc + beta·D + bias), the activation */
    if (ok && key->alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key->alpha) == dnnl_success;
    if (ok && key->beta != 0.0f) ok = dnnl_post_ops_append_sum(po, key->beta) == dnnl_success;
    if (ok && key->act == 1) ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success;
    else if (ok && key->act == 2)
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

/* Where the repacked weights of mm_run's chunks come from: src is the chunk's first column, op(A)ᵀ's
 * rows (p) are ld elements apart, each batch's matrix bs apart (0: one shared matrix); a chunk is
 * key->m columns of them. */
typedef struct mm_pack {
    const char *src;
    int64_t ld, bs;
} mm_pack;

/* Runs key's plan. With pack, the weights are first copied from pack's rows into a dense
 * [batch][k][key->m] block at the end of the scratch buffer (key's a_p is key->m, its bsa k·m). */
static int mm_exec(cpu_context *ctx, const mm_key *key, const void *A, const void *B, void *D, const void *bias,
                   const mm_pack *pack)
{
    dnnl_engine_t eng = (dnnl_engine_t)cpu_dnnl_engine();
    if (!eng || !ctx) return 0;
    void *handle = NULL;
    mm_plan *pl = cpu_plan_cache_get(ctx->plans, key, sizeof *key, mm_build, eng, mm_plan_destroy, &handle);
    if (!pl) {
        cpu_plan_cache_release(ctx->plans, handle);
        return 0;
    }
    dnnl_stream_t stream = NULL;
    dnnl_memory_t am = NULL, bm = NULL, dm = NULL, biasm = NULL, sm = NULL;
    const size_t sbytes = (dnnl_memory_desc_get_size(&pl->scratch) + 63) & ~(size_t)63;
    const int es = key->ab_dt == GPUCORE_KDT_BF16 ? 2 : 4;
    const int64_t nb = pack && pack->bs ? key->batch : 1, row = key->m * es;
    const size_t pbytes = pack ? (size_t)(nb * key->k * row) : 0;
    char *sp = sbytes + pbytes ? cpu_plan_scratch(sbytes + pbytes) : NULL;
    if (pack && sp) {
        char *dst = sp + sbytes;
        const int64_t k = key->k;
        CPU_PARALLEL_FOR(nb * k * key->m > 65536, r, nb * k,
                         memcpy(dst + r * row, pack->src + ((r / k) * pack->bs + (r % k) * pack->ld) * es, (size_t)row););
        A = dst;
    }
    int ok = (!(sbytes + pbytes) || sp) && dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_create(&sm, &pl->scratch, eng, sp) == dnnl_success &&
             dnnl_memory_create(&am, &pl->wei, eng, (void *)A) == dnnl_success &&
             dnnl_memory_create(&bm, &pl->src, eng, (void *)B) == dnnl_success &&
             dnnl_memory_create(&dm, &pl->dst, eng, D) == dnnl_success &&
             (!bias || dnnl_memory_create(&biasm, &pl->bias, eng, (void *)bias) == dnnl_success);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, bm}, {DNNL_ARG_WEIGHTS, am}, {DNNL_ARG_DST, dm}, {DNNL_ARG_SCRATCHPAD, sm},
                               {DNNL_ARG_BIAS, biasm}};
    ok = ok && dnnl_primitive_execute(pl->prim, stream, bias ? 5 : 4, args) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
    if (sm) dnnl_memory_destroy(sm);
    if (biasm) dnnl_memory_destroy(biasm);
    if (dm) dnnl_memory_destroy(dm);
    if (bm) dnnl_memory_destroy(bm);
    if (am) dnnl_memory_destroy(am);
    if (stream) dnnl_stream_destroy(stream);
    cpu_plan_cache_release(ctx->plans, handle);
    return ok;
}

/* Columns of a repacked chunk of f32 weights: at most 4 MiB of them, a multiple of 64 whose row is an
 * odd multiple of 256 bytes (so successive rows fall in different L1 sets), 0 when the weights are
 * read as they are. oneDNN's brgemm (its AVX-512 matmul) reads row-major f32 weights (op(A)ᵀ [k, m]:
 * the user's right operand b [K, N] as given) in place, a row of a 64-column block per step of k;
 * with a short K (768, 1024: GPT-2's rows and widths) and rows a multiple of 2 KiB long (N = 3072)
 * it ran at 40% of the FMA peak against 75-85% with the operand transposed or with N = 2304, whose
 * rows fall in 4 places of a 4 KiB page; copied in chunks, at 70-85%. Measured unaffected: K = 2048
 * with N = 2048 or 8192 (80% either way), and there the chunks' extra pass cost more than it gained
 * at K = 8192 (81% to 63%): so only K <= 1024. Transposed weights (the linear layout) and bf16 ones
 * (packed in pairs for the dot product) are copied into blocks by oneDNN itself. */
static int64_t mm_chunk_cols(const mm_key *key)
{
    /* beta != 0: the chunks add into D, which a fallback after a failed chunk would add again */
    if (key->ab_dt != GPUCORE_KDT_F32 || key->a_i != 1 || (key->a_p * 4) % 2048 || key->k < 64 || key->k > 1024 ||
        key->m < 128 || key->beta != 0.0f || !cpu_vec_have_avx512()) /* oneDNN's AVX2 matmul is gemm:jit, packing */
        return 0;
    const int64_t nb = key->bsa ? key->batch : 1; /* weight matrices */
    int64_t c = ((int64_t)4 << 20) / (nb * key->k * 4) / 64;
    if (c < 1) c = 1;
    if (!(c & 1)) c--;
    return c * 64 < key->m ? c * 64 : 0; /* one chunk of every column has the same row length */
}

static int mm_run(cpu_context *ctx, const mm_key *key, const void *A, const void *B, void *D, const void *bias)
{
    const int64_t cols = mm_chunk_cols(key);
    if (!cols) return mm_exec(ctx, key, A, B, D, bias, NULL);
    const int es = key->ab_dt == GPUCORE_KDT_BF16 ? 2 : 4, ds = key->d_dt == GPUCORE_KDT_BF16 ? 2 : 4;
    for (int64_t i0 = 0; i0 < key->m; i0 += cols) {
        mm_key ck = *key;
        ck.m = key->m - i0 < cols ? key->m - i0 : cols;
        ck.a_p = ck.m;
        ck.bsa = key->bsa ? ck.m * key->k : 0;
        const mm_pack pack = {(const char *)A + i0 * es, key->a_p, key->bsa};
        if (!mm_exec(ctx, &ck, NULL, B, (char *)D + i0 * ds, bias ? (const char *)bias + i0 * ds : NULL, &pack)) return 0;
    }
    return 1;
}

static void key_operands(mm_key *key, int64_t lda, int ta, int64_t ldb, int tb)
{
    key->a_i = ta ? lda : 1;
    key->a_p = ta ? 1 : lda;
    key->b_p = tb ? ldb : 1;
    key->b_j = tb ? 1 : ldb;
    key->tag = 'M';
}

int cpu_matmul_dnnl_product(cpu_context *ctx, int dtype, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                            int ta, const void *B, int64_t ldb, int tb, float *T)
{
    if (m <= 0 || n <= 0 || k <= 0 || (dtype != GPUCORE_KDT_BF16 && dtype != GPUCORE_KDT_F32)) return 0;
    mm_key key;
    memset(&key, 0, sizeof key);
    key.batch = 1; key.m = m; key.n = n; key.k = k; key.ldd = m;
    key.ab_dt = dtype;
    key.d_dt = GPUCORE_KDT_F32;
    key.alpha = 1.0f;
    key_operands(&key, lda, ta, ldb, tb);
    return mm_run(ctx, &key, A, B, T, NULL);
}

int cpu_matmul_dnnl_fused(cpu_context *ctx, const gpucore_gemm_desc *g)
{
    const uint32_t epi = g->epilogue;
    const int aux = (epi & GPUCORE_GEMM_EPI_AUX_OUT) != 0;
    const int beta = g->c && g->beta != 0.0f;
    if ((g->a.dtype != GPUCORE_KDT_BF16 && g->a.dtype != GPUCORE_KDT_F32) || g->b.dtype != g->a.dtype ||
        (g->d_dtype != GPUCORE_KDT_BF16 && g->d_dtype != GPUCORE_KDT_F32) || (epi & ~(uint32_t)MM_EPI_FUSED) ||
        ((epi & GPUCORE_GEMM_EPI_BIAS) && g->alpha != 1.0f) || g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0 ||
        (g->batch > 1 && (g->batch_stride_d <= 0 || aux)) ||
        /* beta's addend must be D itself (oneDNN's sum post-op reads the destination) */
        (beta && (g->c != g->d || g->ldc != g->ldd || (g->batch > 1 && g->batch_stride_c != g->batch_stride_d))) ||
        /* the pre-activation goes to aux, then the activation runs from it: f32 only, never in place */
        (aux && (g->d_dtype != GPUCORE_KDT_F32 || !g->aux || g->aux == g->d || beta)))
        return 0;
    if (g->a.dtype == GPUCORE_KDT_F32 && !cpu_gemm_engine_dnnl(g->m, g->n, g->k, g->batch)) return 0;
    mm_key key;
    memset(&key, 0, sizeof key);
    key.batch = g->batch; key.m = g->m; key.n = g->n; key.k = g->k;
    key.ldd = aux ? g->ldaux : g->ldd;
    if (g->batch > 1) {
        key.bsa = g->a.batch_stride;
        key.bsb = g->b.batch_stride;
        key.bsd = g->batch_stride_d;
    }
    key.ab_dt = g->a.dtype;
    key.d_dt = g->d_dtype;
    key.bias = (epi & GPUCORE_GEMM_EPI_BIAS) != 0;
    const int act = (epi & GPUCORE_GEMM_EPI_RELU) ? 1 : (epi & GPUCORE_GEMM_EPI_GELU) ? 2 : 0;
    key.act = aux ? 0 : act;
    key.alpha = g->alpha;
    key.beta = beta ? g->beta : 0.0f;
    key_operands(&key, g->a.ld, g->a.trans, g->b.ld, g->b.trans);
    if (!mm_run(ctx, &key, g->a.data, g->b.data, aux ? g->aux : g->d, key.bias ? g->bias : NULL)) return 0;
    if (aux) { /* D = act(aux), a column (the user's row) at a time */
        const float *X = g->aux;
        float *D = g->d;
        const int64_t m = g->m, ldx = g->ldaux, ldd = g->ldd;
        CPU_PARALLEL_FOR(m * g->n > 65536, j, g->n, {
            const float *x = X + j * ldx;
            float *d = D + j * ldd;
            if (act == 2) cpu_vec_gelu_tanh(d, x, m);
            else if (act == 1) for (int64_t i = 0; i < m; i++) d[i] = gpucore_relu(x[i]);
            else memcpy(d, x, sizeof(float) * (size_t)m);
        });
    }
    return 1;
}

/* ---- which engine takes an f32 GEMM ---- */

static int engine_choice = -1; /* GPUCORE_CPU_GEMM: 0 auto, 1 oneDNN, 2 the BLAS */

static int engine_setting(void)
{
    int v = __atomic_load_n(&engine_choice, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("GPUCORE_CPU_GEMM");
        v = e && !strcmp(e, "onednn") ? 1 : e && !strcmp(e, "blas") ? 2 : 0;
        __atomic_store_n(&engine_choice, v, __ATOMIC_RELAXED);
    }
    return v;
}

int cpu_gemm_engine_dnnl(int64_t m, int64_t n, int64_t k, int64_t batch)
{
    (void)m; (void)n; (void)k; (void)batch;
    const int v = engine_setting();
    if (v) return v == 2 ? 0 : cpu_dnnl_engine() != NULL;
    /* cpu_vec_have_avx2() is 0 under GPUCORE_CPU_PORTABLE: the tests' way to run the BLAS paths */
    return cpu_vec_have_avx2() && cpu_dnnl_engine() != NULL;
}

int cpu_sgemm_dnnl(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (!cpu_gemm_engine_dnnl(m, n, k, 1)) return 0;
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success;
}

#else

int cpu_matmul_dnnl_product(cpu_context *ctx, int dtype, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                            int ta, const void *B, int64_t ldb, int tb, float *T)
{
    (void)ctx; (void)dtype; (void)m; (void)n; (void)k; (void)A; (void)lda; (void)ta; (void)B; (void)ldb; (void)tb;
    (void)T;
    return 0;
}

int cpu_matmul_dnnl_fused(cpu_context *ctx, const gpucore_gemm_desc *g)
{
    (void)ctx; (void)g;
    return 0;
}

int cpu_gemm_engine_dnnl(int64_t m, int64_t n, int64_t k, int64_t batch)
{
    (void)m; (void)n; (void)k; (void)batch;
    return 0;
}

int cpu_sgemm_dnnl(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)A; (void)lda; (void)B; (void)ldb; (void)beta;
    (void)C; (void)ldc;
    return 0;
}

#endif
