/*
 * elementwise_math.h — the elementwise op family's argument block and its
 * per-element formulas, shared by the CPU backend, the CUDA kernels
 * (elementwise.cu) and the SIMT emulation, so every backend computes the same
 * function. Math is in f32 for f32/f16/bf16 tensors; casts go through f64
 * (fp8 included: kernels/numeric.h).
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
#include "op_tables.h"

/* Op codes. The binary and unary ops come from op_tables.h (their public
 * enums map onto them in src/ops/ops_elementwise.c: binary op k is code k,
 * unary op k is GPUCORE_EW_UNARY_FIRST + k); the others are internal. */
enum {
#define GPUCORE_EW_ENUM_(N, ...) GPUCORE_EW_##N,
    GPUCORE_BINARY_TABLE(GPUCORE_EW_ENUM_) /* a op b, then act */
    GPUCORE_EW_AXPBY,    /* alpha*a + beta*b, then act */
    GPUCORE_EW_AFFINE,   /* alpha*a + beta */
    GPUCORE_EW_CLAMP,    /* a clamped to [alpha, beta]; NaN stays NaN */
    GPUCORE_EW_ACT,      /* act(a) */
    GPUCORE_EW_ACT_GRAD, /* a * act'(b): a is dy, b the forward input x */
    GPUCORE_EW_CAST,     /* a converted to out's dtype (through f64) */
    GPUCORE_EW_DROPOUT,  /* a * (u_i >= alpha ? beta : 0), u_i = Philox uniform of element i */
    GPUCORE_EW_UNARY_FIRST,
    GPUCORE_EW_UNARY_BEFORE_ = GPUCORE_EW_UNARY_FIRST - 1,
    GPUCORE_UNARY_TABLE(GPUCORE_EW_ENUM_) /* op(a) */
#undef GPUCORE_EW_ENUM_
    GPUCORE_EW_COUNT
};

/* Activation codes (same values as the public gpucore_activation). */
enum {
    GPUCORE_ACT_CODE_NONE = 0,
#define GPUCORE_ACT_ENUM_(N, ...) GPUCORE_ACT_CODE_##N,
    GPUCORE_ACTIVATION_TABLE(GPUCORE_ACT_ENUM_)
#undef GPUCORE_ACT_ENUM_
    GPUCORE_ACT_CODE_COUNT
};

/* The per-element formulas, one inline function per op: gpucore_ew_<name>(a, b)
 * for the binary ops and gpucore_ew_<name>(a) for the unary ones (from the
 * tables), and the parametrised ones below. The CPU loops, the CUDA kernel and
 * gpucore_ew_compute all call these. */
/* Helpers of the binary table's formulas. floor(a / b) as Python's a // b:
 * from the exact remainder fmodf(a, b), so a quotient that rounds up to an
 * integer in f32 does not floor one too high; b == 0 gives a / b (+-Inf, NaN);
 * a zero quotient keeps the sign of a / b. */
GPUCORE_HD float gpucore_floor_divide(float a, float b)
{
    if (b == 0.0f) return a / b;
    float r = fmodf(a, b);
    float q = (a - r) / b;
    if (r != 0.0f && ((b < 0.0f) != (r < 0.0f))) q -= 1.0f;
    if (q == 0.0f) return copysignf(0.0f, a / b);
    float f = floorf(q);
    return q - f > 0.5f ? f + 1.0f : f;
}
/* torch.maximum / torch.minimum: NaN in either operand gives NaN. */
GPUCORE_HD float gpucore_maximum(float a, float b) { return (a > b || a != a) ? a : b; }
GPUCORE_HD float gpucore_minimum(float a, float b) { return (a < b || a != a) ? a : b; }

#define GPUCORE_EW_BINARY_FN_(N, name, expr) \
    GPUCORE_HD float gpucore_ew_##name(float a, float b) { return expr; }
GPUCORE_BINARY_TABLE(GPUCORE_EW_BINARY_FN_)
#undef GPUCORE_EW_BINARY_FN_
#define GPUCORE_EW_UNARY_FN_(N, name, expr, simd) \
    GPUCORE_HD float gpucore_ew_##name(float a) { return expr; }
GPUCORE_UNARY_TABLE(GPUCORE_EW_UNARY_FN_)
#undef GPUCORE_EW_UNARY_FN_

GPUCORE_HD float gpucore_ew_axpby(float alpha, float beta, float a, float b) { return alpha * a + beta * b; }
GPUCORE_HD float gpucore_ew_affine(float alpha, float beta, float a) { return alpha * a + beta; }
GPUCORE_HD float gpucore_ew_clamp(float lo, float hi, float a) { return a < lo ? lo : (a > hi ? hi : a); }
/* Inverted dropout of a, given its uniform u: kept (scaled) when u >= p. */
GPUCORE_HD float gpucore_ew_dropout(float u, float p, float scale, float a) { return u >= p ? a * scale : 0.0f; }

GPUCORE_HD float gpucore_act_apply(int act, float x)
{
    switch (act) {
#define GPUCORE_ACT_CASE_(N, name, fwd, grad, simd) case GPUCORE_ACT_CODE_##N: return fwd(x);
    GPUCORE_ACTIVATION_TABLE(GPUCORE_ACT_CASE_)
#undef GPUCORE_ACT_CASE_
    default: return x;
    }
}

GPUCORE_HD float gpucore_act_grad_apply(int act, float x)
{
    switch (act) {
#define GPUCORE_ACT_CASE_(N, name, fwd, grad, simd) case GPUCORE_ACT_CODE_##N: return grad(x);
    GPUCORE_ACTIVATION_TABLE(GPUCORE_ACT_CASE_)
#undef GPUCORE_ACT_CASE_
    default: return 1.0f;
    }
}

/* Element with row-major index i of out, from input values a and b (f32 math). */
GPUCORE_HD float gpucore_ew_compute(int op, int act, float alpha, float beta, uint64_t seed, uint64_t offset,
                                    float a, float b, uint64_t i)
{
    float r;
    switch (op) {
#define GPUCORE_EW_CASE_(N, name, ...) case GPUCORE_EW_##N: r = gpucore_ew_##name(a, b); break;
    GPUCORE_BINARY_TABLE(GPUCORE_EW_CASE_)
#undef GPUCORE_EW_CASE_
    case GPUCORE_EW_AXPBY: r = gpucore_ew_axpby(alpha, beta, a, b); break;
    case GPUCORE_EW_AFFINE: return gpucore_ew_affine(alpha, beta, a);
    case GPUCORE_EW_CLAMP: return gpucore_ew_clamp(alpha, beta, a);
#define GPUCORE_EW_CASE_(N, name, ...) case GPUCORE_EW_##N: return gpucore_ew_##name(a);
    GPUCORE_UNARY_TABLE(GPUCORE_EW_CASE_)
#undef GPUCORE_EW_CASE_
    case GPUCORE_EW_ACT: return gpucore_act_apply(act, a);
    case GPUCORE_EW_ACT_GRAD: return a * gpucore_act_grad_apply(act, b);
    case GPUCORE_EW_DROPOUT: return gpucore_ew_dropout(gpucore_philox_uniform(seed, offset, i), alpha, beta, a);
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
    if (dt == GPUCORE_KDT_FP8_E4M3) return (double)gpucore_fp8e4m3_to_f32(*(const uint8_t *)p);
    if (dt == GPUCORE_KDT_FP8_E5M2) return (double)gpucore_fp8e5m2_to_f32(*(const uint8_t *)p);
    return (double)gpucore_load_as_f32(p, dt);
}

GPUCORE_HD void gpucore_store_from_f64(void *p, int dt, double v)
{
    switch (dt) {
    case GPUCORE_KDT_F64: *(double *)p = v; break;
    case GPUCORE_KDT_F32: *(float *)p = (float)v; break;
    case GPUCORE_KDT_F16: *(uint16_t *)p = gpucore_f32_to_f16(gpucore_f64_to_f32_round_odd(v)); break;
    case GPUCORE_KDT_BF16: *(uint16_t *)p = gpucore_f32_to_bf16(gpucore_f64_to_f32_round_odd(v)); break;
    case GPUCORE_KDT_FP8_E4M3: *(uint8_t *)p = gpucore_f64_to_fp8(v, 0); break; /* saturating, numeric.h */
    case GPUCORE_KDT_FP8_E5M2: *(uint8_t *)p = gpucore_f64_to_fp8(v, 1); break;
    default: break;
    }
}

/* How an input is laid out relative to a dense out (the fast paths of every backend). */
typedef enum gpucore_ew_layout {
    GPUCORE_EW_LAYOUT_STRIDED = -1, /* anything else: general strided addressing */
    GPUCORE_EW_LAYOUT_DENSE = 0,    /* dense like out: element i */
    GPUCORE_EW_LAYOUT_ROW = 1,      /* a row repeated over the leading dims: element i % inner */
    GPUCORE_EW_LAYOUT_SCALAR = 2    /* a single element */
} gpucore_ew_layout;

/* The layout of input `in` (and *inner, the row length for LAYOUT_ROW). Needs out dense. */
GPUCORE_HD gpucore_ew_layout gpucore_ew_input_mode(const gpucore_view *out, const gpucore_view *in, int64_t *inner)
{
    *inner = 0;
    int dense = 1, zero = 1;
    int64_t expect = 1;
    for (int d = in->ndim - 1; d >= 0; d--) {
        if (in->shape[d] != 1 && in->strides[d] != expect) dense = 0;
        if (in->shape[d] != 1 && in->strides[d] != 0) zero = 0;
        expect *= in->shape[d];
    }
    if (dense) return GPUCORE_EW_LAYOUT_DENSE;
    if (zero) return GPUCORE_EW_LAYOUT_SCALAR;
    /* [outer..., inner]: trailing dims dense from 1, leading dims all stride 0 */
    int d = in->ndim - 1;
    int64_t run = 1;
    while (d >= 0 && (in->shape[d] == 1 || in->strides[d] == run)) { run *= in->shape[d]; d--; }
    for (int e = d; e >= 0; e--)
        if (in->shape[e] != 1 && in->strides[e] != 0) return GPUCORE_EW_LAYOUT_STRIDED;
    (void)out;
    *inner = run;
    return GPUCORE_EW_LAYOUT_ROW;
}

#endif
