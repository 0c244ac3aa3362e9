/*
 * quant_matmul.h — what a backend's quant_matmul entry computes: a GEMM whose weight operand is a
 * quantized matrix (quant_formats.h), read block by block. src/ops/quant_linear.c fills the
 * arguments after its checks; the CPU backend (src/backend/cpu/cpu_quant_linear.c) and the
 * CUDA kernels (kernels/quant_matmul.cu) compute them.
 *
 * Every backend computes the same values: each weight element is dequantized in f32 as
 * gpucore_quant_value does and rounded to dt (x's dtype; f32 leaves it exact), products are
 * accumulated in f32, and the sum (+ bias, activation) is rounded once to dt.
 */
#ifndef GPUCORE_KERNELS_QUANT_MATMUL_H
#define GPUCORE_KERNELS_QUANT_MATMUL_H

#include <stdint.h>
#include "quant_formats.h"

typedef struct gpucore_qmm_args {
    gpucore_quant_layout L; /* W [N = L.rows, K = L.cols] */
    const uint8_t *w;       /* W's bytes (L.total) */
    int dt;                 /* GPUCORE_KDT_F32/F16/BF16: x, y, bias and aux */
    int64_t m;              /* rows of x and y */
    /* 0 (forward):  y[m, N] = act(x[m, K]·Wᵀ + bias), aux (if not NULL) = x·Wᵀ + bias;
     * 1 (backward): y[m, K] = x[m, N]·W + beta·y. */
    int transpose;
    const void *x;
    int64_t ldx;            /* elements between rows of x (unit stride along a row) */
    void *y;
    int64_t ldy;
    const void *bias;       /* [N] or NULL; forward only */
    int act;                /* gpucore_activation; forward only */
    void *aux;              /* [m, N] with leading dimension ldaux, or NULL; forward only */
    int64_t ldaux;
    float beta;             /* backward only: 0 (overwrite) or 1 (accumulate) */
} gpucore_qmm_args;

#endif
