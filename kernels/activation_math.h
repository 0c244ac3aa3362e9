/*
 * activation_math.h — per-element activation formulas (forward and the
 * derivative used by backward), in f32, shared by the CPU backend, the matmul
 * epilogues and the CUDA kernels so every path computes the same function.
 *
 * GELU: erf form 0.5·x·(1+erf(x/√2)); tanh form 0.5·x·(1+tanh(√(2/π)(x+0.044715x³))).
 * The derivative functions take the forward input x.
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

GPUCORE_HD float gpucore_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * GPUCORE_SQRT_HALF)); }
GPUCORE_HD float gpucore_gelu_erf_grad(float x)
{
    float cdf = 0.5f * (1.0f + erff(x * GPUCORE_SQRT_HALF));
    float pdf = GPUCORE_INV_SQRT_2PI * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

GPUCORE_HD float gpucore_gelu_tanh(float x)
{
    float inner = GPUCORE_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}
GPUCORE_HD float gpucore_gelu_tanh_grad(float x)
{
    float x2 = x * x;
    float inner = GPUCORE_SQRT_2_OVER_PI * (x + 0.044715f * x2 * x);
    float t = tanhf(inner);
    float dinner = GPUCORE_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x2);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
}

GPUCORE_HD float gpucore_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
GPUCORE_HD float gpucore_sigmoid_grad(float x)
{
    float s = gpucore_sigmoid(x);
    return s * (1.0f - s);
}

GPUCORE_HD float gpucore_silu(float x) { return x * gpucore_sigmoid(x); }
GPUCORE_HD float gpucore_silu_grad(float x)
{
    float s = gpucore_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

GPUCORE_HD float gpucore_tanh_act(float x) { return tanhf(x); }
GPUCORE_HD float gpucore_tanh_grad(float x)
{
    float t = tanhf(x);
    return 1.0f - t * t;
}

#endif
