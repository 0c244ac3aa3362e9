/*
 * gemm_desc.h — one matrix multiplication as every backend sees it, after the
 * API front-end (src/ops/matmul.c) has validated it: in column-major BLAS terms,
 *
 *     D[m,n] = epilogue(alpha · op(A)[m,k] · op(B)[k,n] + beta · C[m,n])
 *
 * for `batch` matrices at fixed batch strides. The front-end maps the user's
 * row-major D = op(A)·op(B) onto this by computing Dᵀ = op(B)ᵀ·op(A)ᵀ, so the
 * user's B is this A, the user's N is m, and a bias over the user's columns is a
 * bias over this D's rows (which is what cuBLASLt's epilogues broadcast).
 *
 * Plain C so backend.h, the CPU backend, nvcc and the SIMT layer all share it.
 * The per-element epilogue formula lives here too (GPUCORE_HD), so the CPU
 * backend and the fallback kernel compute the same function.
 */
#ifndef GPUCORE_KERNELS_GEMM_DESC_H
#define GPUCORE_KERNELS_GEMM_DESC_H

#include <stdint.h>
#include "hd.h"
#include "activation_math.h"
#include "dtype_access.h"

/* Epilogue steps, applied in this order to acc = alpha·AB + beta·C:
 *   BIAS      pre = acc + bias[i]             (bias: length m, dtype of D)
 *   AUX_OUT   aux[i,j] = pre                  (the pre-activation backward needs)
 *   RELU      D = max(pre, 0)
 *   GELU      D = gelu_tanh(pre)
 *   DGELU     D = acc · gelu_tanh'(aux[i,j])  (aux is an input here)
 *   BGRAD_D   bias_grad[i] = Σ_j D[i,j]        (length m)
 *   BGRAD_A   bias_grad[i] = Σ_p op(A)[i,p]    (length m)
 *   BGRAD_B   bias_grad[j] = Σ_p op(B)[p,j]    (length n) */
enum {
    GPUCORE_GEMM_EPI_BIAS = 1u << 0,
    GPUCORE_GEMM_EPI_AUX_OUT = 1u << 1,
    GPUCORE_GEMM_EPI_RELU = 1u << 2,
    GPUCORE_GEMM_EPI_GELU = 1u << 3,
    GPUCORE_GEMM_EPI_DGELU = 1u << 4,
    GPUCORE_GEMM_EPI_BGRAD_D = 1u << 5,
    GPUCORE_GEMM_EPI_BGRAD_A = 1u << 6,
    GPUCORE_GEMM_EPI_BGRAD_B = 1u << 7
};

/* dtype codes (GPUCORE_KDT_*, including the fp8 ones): dtype_access.h, from op_tables.h */

typedef struct gpucore_gemm_operand {
    const void *data;     /* element [0,0] of batch 0 */
    int32_t dtype;        /* gpucore_dtype */
    int32_t trans;        /* 0: stored m x k (col-major, ld), 1: stored k x m, op = transpose */
    int64_t ld;           /* leading dimension of the stored matrix, elements */
    int64_t batch_stride; /* elements; 0 broadcasts one matrix to every batch */
} gpucore_gemm_operand;

typedef struct gpucore_gemm_desc {
    int64_t m, n, k, batch;
    gpucore_gemm_operand a, b;
    const void *c;            /* same dtype as d; equals d for in-place accumulation; NULL when beta == 0 */
    int64_t ldc, batch_stride_c;
    void *d;
    int32_t d_dtype;          /* f32, f16 or bf16 */
    int32_t allow_tf32;       /* f32 operands may be rounded to TF32 (CUDA) */
    int64_t ldd, batch_stride_d;
    float alpha, beta;
    uint32_t epilogue;        /* GPUCORE_GEMM_EPI_* */
    const void *bias;         /* length m, dtype d_dtype, same for every batch */
    void *aux;                /* m x n col-major, dtype d_dtype: written (AUX_OUT) or read (DGELU) */
    int64_t ldaux, batch_stride_aux;
    void *bias_grad;          /* BGRAD_*: output vector, dtype d_dtype */
    const float *scale_a, *scale_b; /* fp8: device scalars, dequantisation scales of A and B */
    float *amax_d;            /* fp8: device scalar receiving max |D| (NULL: not computed) */
    void *workspace;          /* device scratch for the library GEMM (CUDA), may be NULL */
    int64_t workspace_bytes;
    int32_t *fallback_out;    /* host, may be NULL: the backend sets it to a gpucore_matmul_fallback_reason + 1
                                 when the fallback kernel ran instead of the vendor GEMM (CUDA), else leaves it */
} gpucore_gemm_desc;

GPUCORE_HD int gpucore_gemm_dtype_size(int dt)
{
    return dt == GPUCORE_KDT_F32 ? 4 : (dt == GPUCORE_KDT_F16 || dt == GPUCORE_KDT_BF16) ? 2 : 1;
}

/* Element offset of op(X)[row, col] in a stored operand (batch 0). */
GPUCORE_HD int64_t gpucore_gemm_operand_offset(const gpucore_gemm_operand *x, int64_t row, int64_t col)
{
    return x->trans ? col + row * x->ld : row + col * x->ld;
}

/* The epilogue for one element: acc is alpha·AB + beta·C in f32. Returns the value
 * to store in D; writes the pre-activation to *aux_out when AUX_OUT is set. */
GPUCORE_HD float gpucore_gemm_epilogue_value(uint32_t epi, float acc, float bias, float aux_in, float *aux_out)
{
    if (epi & GPUCORE_GEMM_EPI_DGELU) return acc * gpucore_gelu_tanh_grad(aux_in);
    float pre = (epi & GPUCORE_GEMM_EPI_BIAS) ? acc + bias : acc;
    if (epi & GPUCORE_GEMM_EPI_AUX_OUT) *aux_out = pre;
    if (epi & GPUCORE_GEMM_EPI_RELU) return gpucore_relu(pre);
    if (epi & GPUCORE_GEMM_EPI_GELU) return gpucore_gelu_tanh(pre);
    return pre;
}

#endif
