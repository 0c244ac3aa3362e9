/*
 * elementwise_math.h — the elementwise op family's argument block and its
 * per-element formulas, shared by the CPU backend, the CUDA kernels
 * (elementwise.cu) and the SIMT emulation, so every backend computes the same
 * function. Math is in f32 for f32/f16/bf16 tensors; casts go through f64.
 *
 * The API layer hands over `out` and up to two inputs already broadcast to
 * out's shape (stride 0 on broadcast dims) with adjacent dims collapsed where
 * every view allows it, so a bias add arrives as [rows, cols] with the bias
 * strides {0, 1}, and a plain contiguous op as one dense dim.
 */
#ifndef GPUCORE_KERNELS_ELEMENTWISE_MATH_H
#define GPUCORE_KERNELS_ELEMENTWISE_MATH_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "view.h"
#include "numeric.h"
#include "philox.h"
#include "activation_math.h"
#include "op_args.h"

/* Op codes (the public enums map onto these in src/ops_elementwise.c). */
enum {
    GPUCORE_EW_ADD = 0, GPUCORE_EW_SUB = 1, GPUCORE_EW_MUL = 2, GPUCORE_EW_DIV = 3, /* a op b, then act */
    GPUCORE_EW_AXPBY = 4,    /* alpha*a + beta*b, then act */
    GPUCORE_EW_AFFINE = 5,   /* alpha*a + beta */
    GPUCORE_EW_CLAMP = 6,    /* a clamped to [alpha, beta]; NaN stays NaN */
    GPUCORE_EW_EXP = 7, GPUCORE_EW_LOG = 8, GPUCORE_EW_SQRT = 9, GPUCORE_EW_RSQRT = 10,
    GPUCORE_EW_ABS = 11, GPUCORE_EW_NEG = 12,
    GPUCORE_EW_ACT = 13,     /* act(a) */
    GPUCORE_EW_ACT_GRAD = 14,/* a * act'(b): a is dy, b the forward input x */
    GPUCORE_EW_CAST = 15,    /* a converted to out's dtype (through f64) */
    GPUCORE_EW_DROPOUT = 16  /* a * (u_i >= alpha ? beta : 0), u_i = Philox uniform of element i */
};

/* Activation codes (same values as the public gpucore_activation). */
enum {
    GPUCORE_ACT_CODE_NONE = 0, GPUCORE_ACT_CODE_RELU = 1, GPUCORE_ACT_CODE_GELU_ERF = 2,
    GPUCORE_ACT_CODE_GELU_TANH = 3, GPUCORE_ACT_CODE_SILU = 4, GPUCORE_ACT_CODE_SIGMOID = 5,
    GPUCORE_ACT_CODE_TANH = 6
};


GPUCORE_HD float gpucore_act_apply(int act, float x)
{
    switch (act) {
    case GPUCORE_ACT_CODE_RELU: return gpucore_relu(x);
    case GPUCORE_ACT_CODE_GELU_ERF: return gpucore_gelu_erf(x);
    case GPUCORE_ACT_CODE_GELU_TANH: return gpucore_gelu_tanh(x);
    case GPUCORE_ACT_CODE_SILU: return gpucore_silu(x);
    case GPUCORE_ACT_CODE_SIGMOID: return gpucore_sigmoid(x);
    case GPUCORE_ACT_CODE_TANH: return gpucore_tanh_act(x);
    default: return x;
    }
}

GPUCORE_HD float gpucore_act_grad_apply(int act, float x)
{
    switch (act) {
    case GPUCORE_ACT_CODE_RELU: return gpucore_relu_grad(x);
    case GPUCORE_ACT_CODE_GELU_ERF: return gpucore_gelu_erf_grad(x);
    case GPUCORE_ACT_CODE_GELU_TANH: return gpucore_gelu_tanh_grad(x);
    case GPUCORE_ACT_CODE_SILU: return gpucore_silu_grad(x);
    case GPUCORE_ACT_CODE_SIGMOID: return gpucore_sigmoid_grad(x);
    case GPUCORE_ACT_CODE_TANH: return gpucore_tanh_grad(x);
    default: return 1.0f;
    }
}

/* Element with row-major index i of out, from input values a and b (f32 math). */
GPUCORE_HD float gpucore_ew_compute(int op, int act, float alpha, float beta, uint64_t seed, uint64_t offset,
                                    float a, float b, uint64_t i)
{
    float r;
    switch (op) {
    case GPUCORE_EW_ADD: r = a + b; break;
    case GPUCORE_EW_SUB: r = a - b; break;
    case GPUCORE_EW_MUL: r = a * b; break;
    case GPUCORE_EW_DIV: r = a / b; break;
    case GPUCORE_EW_AXPBY: r = alpha * a + beta * b; break;
    case GPUCORE_EW_AFFINE: return alpha * a + beta;
    case GPUCORE_EW_CLAMP: return a < alpha ? alpha : (a > beta ? beta : a);
    case GPUCORE_EW_EXP: return expf(a);
    case GPUCORE_EW_LOG: return logf(a);
    case GPUCORE_EW_SQRT: return sqrtf(a);
    case GPUCORE_EW_RSQRT: return 1.0f / sqrtf(a);
    case GPUCORE_EW_ABS: return fabsf(a);
    case GPUCORE_EW_NEG: return -a;
    case GPUCORE_EW_ACT: return gpucore_act_apply(act, a);
    case GPUCORE_EW_ACT_GRAD: return a * gpucore_act_grad_apply(act, b);
    case GPUCORE_EW_DROPOUT: return gpucore_philox_uniform(seed, offset, i) >= alpha ? a * beta : 0.0f;
    default: return a;
    }
    return act ? gpucore_act_apply(act, r) : r;
}

/* f64 -> f32 rounded to odd (truncate, then set the last bit if inexact), so that
 * a second rounding to f16/bf16 (<= 11 significant bits) gives the correctly
 * rounded result instead of a double-rounding error. NaN and Inf pass through. */
GPUCORE_HD float gpucore_f64_to_f32_round_odd(double d)
{
    float f = (float)d;
    if (d != d || (double)f == d) return f;
    uint32_t u = gpucore_f32_bits(f);
    if (fabs((double)f) > fabs(d)) u -= 1u; /* rounded away from zero: step back toward zero */
    return gpucore_bits_f32(u | 1u);
}

GPUCORE_HD double gpucore_load_as_f64(const void *p, int dt)
{
    if (dt == GPUCORE_KDT_F64) return *(const double *)p;
    return (double)gpucore_load_as_f32(p, dt);
}

GPUCORE_HD void gpucore_store_from_f64(void *p, int dt, double v)
{
    switch (dt) {
    case GPUCORE_KDT_F64: *(double *)p = v; break;
    case GPUCORE_KDT_F32: *(float *)p = (float)v; break;
    case GPUCORE_KDT_F16: *(uint16_t *)p = gpucore_f32_to_f16(gpucore_f64_to_f32_round_odd(v)); break;
    case GPUCORE_KDT_BF16: *(uint16_t *)p = gpucore_f32_to_bf16(gpucore_f64_to_f32_round_odd(v)); break;
    default: break;
    }
}

/* How input `in` is laid out relative to out (the fast paths of every backend):
 * 0 dense like out; 1 a row repeated over the leading dims (index i % *inner);
 * 2 a single element; -1 anything else (general strided). Needs out dense. */
GPUCORE_HD int gpucore_ew_input_mode(const gpucore_view *out, const gpucore_view *in, int64_t *inner)
{
    *inner = 0;
    int dense = 1, zero = 1;
    int64_t expect = 1;
    for (int d = in->ndim - 1; d >= 0; d--) {
        if (in->shape[d] != 1 && in->strides[d] != expect) dense = 0;
        if (in->shape[d] != 1 && in->strides[d] != 0) zero = 0;
        expect *= in->shape[d];
    }
    if (dense) return 0;
    if (zero) return 2;
    /* [outer..., inner]: trailing dims dense from 1, leading dims all stride 0 */
    int d = in->ndim - 1;
    int64_t run = 1;
    while (d >= 0 && (in->shape[d] == 1 || in->strides[d] == run)) { run *= in->shape[d]; d--; }
    for (int e = d; e >= 0; e--)
        if (in->shape[e] != 1 && in->strides[e] != 0) return -1;
    (void)out;
    *inner = run;
    return 1;
}

#endif
