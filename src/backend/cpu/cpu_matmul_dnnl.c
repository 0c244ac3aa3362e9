/*
 * cpu_matmul_dnnl.c — bf16 GEMM on the CPU through oneDNN's matmul primitive, which
 * uses the CPU's AMX or AVX512-BF16 units where it has them (PyTorch's CPU bf16 path
 * does the same); OpenBLAS 0.3.21's sbgemm has no such kernels and ran 7x behind
 * torch on an AMX machine. bf16 operands, f32 accumulation and output. Operands are
 * described by strides (a transpose is a stride swap), so nothing is copied.
 * Primitive creation goes through oneDNN's primitive cache: a repeated shape costs a
 * lookup, not a JIT compile.
 */
#include <string.h>
#include "gpucore_config.h"
#include "cpu_internal.h"

#if GPUCORE_HAVE_DNNL
#include <dnnl.h>

int cpu_matmul_dnnl_bf16(int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, int ta, const void *B,
                         int64_t ldb, int tb, float *T)
{
    dnnl_engine_t eng = (dnnl_engine_t)cpu_dnnl_engine();
    if (!eng || m <= 0 || n <= 0 || k <= 0) return 0;
    /* oneDNN's fast matmul wants a row-major destination, and T column-major (m x n, ld m) is Tᵀ
     * row-major (n x m): compute Tᵀ = op(B)ᵀ·op(A)ᵀ. Column-major op(A)(i, p) is A[i + p*lda] (no
     * transpose) or A[p + i*lda]; op(B)(p, j) likewise; the transposes below are stride swaps. */
    const int64_t a_i = ta ? lda : 1, a_p = ta ? 1 : lda, b_p = tb ? ldb : 1, b_j = tb ? 1 : ldb;
    dnnl_dims_t sd = {n, k}, ss = {b_j, b_p}; /* src = op(B)ᵀ */
    dnnl_dims_t wd = {k, m}, ws = {a_p, a_i}; /* weights = op(A)ᵀ */
    dnnl_dims_t td = {n, m}, ts = {m, 1};
    dnnl_memory_desc_t bmd, amd, tmd;
    if (dnnl_memory_desc_init_by_strides(&bmd, 2, sd, dnnl_bf16, ss) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&amd, 2, wd, dnnl_bf16, ws) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&tmd, 2, td, dnnl_f32, ts) != dnnl_success)
        return 0;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &bmd, &amd, NULL, &tmd) != dnnl_success) return 0;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_memory_t am = NULL, bm = NULL, tm = NULL;
    const char *impl = NULL;
    int ok = dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) == dnnl_success &&
             /* a CPU without bf16 units gets oneDNN's reference loop (seen: 1000x slower than sbgemm):
              * decline it, the caller's sbgemm/widening paths are faster there */
             dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
             !strstr(impl, "ref") && dnnl_primitive_create(&prim, pd) == dnnl_success &&
             dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_create(&am, &amd, eng, (void *)A) == dnnl_success &&
             dnnl_memory_create(&bm, &bmd, eng, (void *)B) == dnnl_success &&
             dnnl_memory_create(&tm, &tmd, eng, T) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, bm}, {DNNL_ARG_WEIGHTS, am}, {DNNL_ARG_DST, tm}};
        ok = dnnl_primitive_execute(prim, stream, 3, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success;
    }
    if (tm) dnnl_memory_destroy(tm);
    if (bm) dnnl_memory_destroy(bm);
    if (am) dnnl_memory_destroy(am);
    if (stream) dnnl_stream_destroy(stream);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return ok;
}

#else

int cpu_matmul_dnnl_bf16(int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, int ta, const void *B,
                         int64_t ldb, int tb, float *T)
{
    (void)m; (void)n; (void)k; (void)A; (void)lda; (void)ta; (void)B; (void)ldb; (void)tb; (void)T;
    return 0;
}

#endif
