/*
 * activation_math.h — per-element activation formulas (forward and the
 * derivative used by backward), in f32, shared by the CPU backend, the matmul
 * epilogues and the CUDA kernels so every path computes the same function.
 *
 * GELU: erf form 0.5·x·(1+erf(x/√2)); tanh form 0.5·x·(1+tanh(u)), u = √(2/π)(x+0.044715x³),
 * computed as x·σ(2u) = x / (1 + exp(-2u)) (the same function: 0.5(1+tanh u) = σ(2u)), which
 * needs only exp and keeps full relative accuracy where 1 + tanh(u) would cancel (x < 0); its
 * derivative σ(2u) + 2x·σ(2u)σ(-2u)·u', with σ(-2u) = 1 - σ(2u) from its own exp (1 - σ(2u)
 * in f32 is 0 for x past 4.9, where the term is still 2e-6; e·σ(2u) would be inf·0 for x below
 * -10). The derivative functions take the forward input x.
 */
#ifndef GPUCORE_KERNELS_ACTIVATION_MATH_H
#define GPUCORE_KERNELS_ACTIVATION_MATH_H

#include <math.h>
#include "hd.h"

#define GPUCORE_SQRT_HALF 0.70710678118654752f
#define GPUCORE_SQRT_2_OVER_PI 0.79788456080286536f
#define GPUCORE_INV_SQRT_2PI 0.39894228040143268f

GPUCORE_HD float gpucore_relu(float x) { return x > 0.0f ? x : 0.0f; }
GPUCORE_HD float gpucore_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

/* The smooth activations, written once as a family of functions of type T (named
 * P<name>) over the math functions M<exp|erf|tanh>. The scalar instance below is
 * what every backend calls; the CPU backend instantiates the same text with
 * 8-lane vectors and SLEEF's vector functions (cpu_vec.c), relying on the
 * vector arithmetic of GCC and clang (a scalar operand is broadcast). Only
 * +, -, *, / and the three math calls may appear here. */
#define GPUCORE_ACT_FORMULAS(Q, T, P, M)                                                                             \
    Q T P##gelu_erf(T x) { return 0.5f * x * (1.0f + M##erf(x * GPUCORE_SQRT_HALF)); }                                \
    Q T P##gelu_erf_grad(T x)                                                                                        \
    {                                                                                                                \
        T cdf = 0.5f * (1.0f + M##erf(x * GPUCORE_SQRT_HALF));                                                       \
        T pdf = GPUCORE_INV_SQRT_2PI * M##exp(-0.5f * x * x);                                                        \
        return cdf + x * pdf;                                                                                        \
    }                                                                                                                \
    Q T P##gelu_tanh(T x)                                                                                            \
    {                                                                                                                \
        T inner = GPUCORE_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);                                              \
        return x / (1.0f + M##exp(-2.0f * inner));                                                                   \
    }                                                                                                                \
    Q T P##gelu_tanh_grad(T x)                                                                                       \
    {                                                                                                                \
        T x2 = x * x;                                                                                                \
        T inner = GPUCORE_SQRT_2_OVER_PI * (x + 0.044715f * x2 * x);                                                 \
        T s = 1.0f / (1.0f + M##exp(-2.0f * inner)), sn = 1.0f / (1.0f + M##exp(2.0f * inner));                     \
        T dinner = GPUCORE_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x2);                                          \
        return s + 2.0f * x * (s * sn) * dinner;                                                                     \
    }                                                                                                                \
    Q T P##sigmoid(T x) { return 1.0f / (1.0f + M##exp(-x)); }                                                       \
    Q T P##sigmoid_grad(T x)                                                                                         \
    {                                                                                                                \
        T s = P##sigmoid(x);                                                                                         \
        return s * (1.0f - s);                                                                                       \
    }                                                                                                                \
    Q T P##silu(T x) { return x * P##sigmoid(x); }                                                                   \
    Q T P##silu_grad(T x)                                                                                            \
    {                                                                                                                \
        T s = P##sigmoid(x);                                                                                         \
        return s * (1.0f + x * (1.0f - s));                                                                          \
    }                                                                                                                \
    Q T P##tanh_act(T x) { return M##tanh(x); }                                                                      \
    Q T P##tanh_grad(T x)                                                                                            \
    {                                                                                                                \
        T t = M##tanh(x);                                                                                            \
        return 1.0f - t * t;                                                                                         \
    }

/* The scalar math the formulas call: libm's (CUDA's device versions in kernels). */
#define gpucore_fm_exp expf
#define gpucore_fm_erf erff
#define gpucore_fm_tanh tanhf
GPUCORE_ACT_FORMULAS(GPUCORE_HD, float, gpucore_, gpucore_fm_)

#endif
