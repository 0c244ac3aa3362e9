/*
 * numeric.h — bit-exact conversions between f32 and the 16-bit float formats.
 *
 * Round to nearest even, NaN kept a (quiet) NaN, Inf kept Inf, overflow to Inf,
 * subnormals handled. The *_portable functions are integer arithmetic: the CPU
 * backend and the SIMT emulation use them, and tests/test_numeric.c checks them
 * bit for bit against IEEE round-to-nearest-even (every half, every rounding
 * boundary). CUDA device code (__CUDA_ARCH__) uses the hardware conversions
 * instead (cvt.rn.f16.f32 / cvt.f32.f16, and cvt.rn.bf16.f32 on sm_80+), which
 * are the same IEEE RNE; only NaN payloads could differ (the hardware returns a
 * canonical NaN), so NaNs take the portable path there too and every backend
 * gives identical bits.
 */
#ifndef GPUCORE_KERNELS_NUMERIC_H
#define GPUCORE_KERNELS_NUMERIC_H

#include <stdint.h>
#include <string.h>
#include "hd.h"

GPUCORE_HD uint32_t gpucore_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
GPUCORE_HD float gpucore_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* f32 -> bf16, round to nearest even; NaN stays NaN (quiet bit set). */
GPUCORE_HD uint16_t gpucore_f32_to_bf16_portable(float f)
{
    uint32_t u = gpucore_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding_bias) >> 16);
}

GPUCORE_HD float gpucore_bf16_to_f32(uint16_t h) { return gpucore_bits_f32((uint32_t)h << 16); }

/* f32 -> IEEE half, round to nearest even, with subnormals, overflow to Inf. */
GPUCORE_HD uint16_t gpucore_f32_to_f16_portable(float f)
{
    uint32_t u = gpucore_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); /* NaN */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* rounds to >= 65520: Inf */
    if (abs < 0x38800000u) {                                      /* below 2^-14: subnormal or zero */
        if (abs < 0x33000000u) return (uint16_t)sign;            /* below 2^-25: rounds to zero */
        /* value = mant * 2^(exp-150) with a 24-bit mant; the half subnormal unit is 2^-24,
         * so the result mantissa is mant >> (126 - exp), rounded to nearest even. */
        uint32_t exp = abs >> 23;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp;
        uint32_t result = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (result & 1u))) result++;
        return (uint16_t)(sign | result);
    }
    uint32_t exp_adj = abs - 0x38000000u;                         /* rebias 127 -> 15 */
    uint32_t result = exp_adj >> 13;
    uint32_t rem = exp_adj & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) result++;
    return (uint16_t)(sign | result);
}

GPUCORE_HD float gpucore_f16_to_f32_portable(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu) return gpucore_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return gpucore_bits_f32(sign);
        /* subnormal: mant * 2^-24 exactly representable in f32 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return gpucore_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* The conversions every kernel and backend uses (see the top of the file). */
GPUCORE_HD uint16_t gpucore_f32_to_f16(float f)
{
#if defined(__CUDA_ARCH__)
    if ((gpucore_f32_bits(f) & 0x7fffffffu) > 0x7f800000u) return gpucore_f32_to_f16_portable(f);
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return (uint16_t)h;
#else
    return gpucore_f32_to_f16_portable(f);
#endif
}

GPUCORE_HD float gpucore_f16_to_f32(uint16_t h)
{
#if defined(__CUDA_ARCH__)
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) return gpucore_f16_to_f32_portable(h);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#else
    return gpucore_f16_to_f32_portable(h);
#endif
}

GPUCORE_HD uint16_t gpucore_f32_to_bf16(float f)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if ((gpucore_f32_bits(f) & 0x7fffffffu) > 0x7f800000u) return gpucore_f32_to_bf16_portable(f);
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return (uint16_t)h;
#else
    return gpucore_f32_to_bf16_portable(f);
#endif
}

#endif
