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
 *
 * fp8 (OCP FP8, as CUDA's cuda_fp8.h): e4m3fn (bias 7, no Inf, max 448, NaN
 * S.1111.111) and e5m2 (bias 15, IEEE-like with Inf, max 57344). Decoding is
 * exact. Encoding rounds to nearest even once from f64 (an f32 widens exactly),
 * saturating: finite values past the largest finite and ±Inf become ±max (as
 * __nv_cvt_float_to_fp8 with __NV_SATFINITE and the sm_89 cvt.rn.satfinite do,
 * the convention of fp8 training recipes: an outlier clips instead of poisoning
 * the tensor), NaN becomes 0x7f (a NaN in both formats), tiny values keep their
 * sign (±0). Integer arithmetic on every backend, so the bits agree everywhere.
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

/* fp8 bits -> f32, exact. */
GPUCORE_HD float gpucore_fp8e4m3_to_f32(uint8_t c)
{
    uint32_t sign = ((uint32_t)c & 0x80u) << 24, exp = ((uint32_t)c >> 3) & 0xfu, mant = (uint32_t)c & 7u;
    if (exp == 0xfu && mant == 7u) return gpucore_bits_f32(sign | 0x7fc00000u);  /* NaN */
    if (exp == 0) {                                                               /* subnormal: mant·2^-9 */
        float v = (float)mant * 0.001953125f;
        return sign ? -v : v;
    }
    return gpucore_bits_f32(sign | ((exp + 120u) << 23) | (mant << 20));
}

/* e5m2 is the top byte of an IEEE half. */
GPUCORE_HD float gpucore_fp8e5m2_to_f32(uint8_t c) { return gpucore_f16_to_f32_portable((uint16_t)((uint16_t)c << 8)); }

/* f64 -> fp8 (e5m2 nonzero: e5m2, else e4m3fn), round to nearest even with
 * saturation (see the top of the file). The f64 significand is cut to the fp8
 * one; the bits cut off decide the rounding. */
GPUCORE_HD uint8_t gpucore_f64_to_fp8(double d, int e5m2)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    const uint64_t abs = u & 0x7fffffffffffffffull;
    const uint32_t sign = (uint32_t)(u >> 56) & 0x80u;
    const uint32_t mbits = e5m2 ? 2u : 3u, bias = e5m2 ? 15u : 7u;
    const uint32_t maxcode = e5m2 ? 0x7bu : 0x7eu;
    /* the largest finite value plus half its ulp: 464 (e4m3), 61440 (e5m2; a tie that rounds up) */
    const uint64_t overflow = e5m2 ? 0x40ee000000000000ull : 0x407d000000000000ull;
    if (abs > 0x7ff0000000000000ull) return 0x7fu;                         /* NaN */
    if (e5m2 ? abs >= overflow : abs > overflow) return (uint8_t)(sign | maxcode); /* saturate (Inf too) */
    int32_t e = (int32_t)(abs >> 52) - 1023 + (int32_t)bias;               /* fp8 biased exponent */
    uint64_t sig = (abs & 0xfffffffffffffull) | (1ull << 52);              /* 53-bit significand */
    if (abs == 0 || e < -(int32_t)mbits - 1) return (uint8_t)sign;         /* below half the least subnormal */
    /* keep 1 + mbits bits for a normal, fewer for a subnormal (e <= 0) */
    uint32_t shift = 52u - mbits + (uint32_t)(e < 1 ? 1 - e : 0);
    uint64_t q = sig >> shift, rem = sig & ((1ull << shift) - 1ull), half = 1ull << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* normal: q is 1.m (may carry to 2.0, which bumps the exponent field); subnormal: q is the field itself */
    uint32_t code = e < 1 ? (uint32_t)q : (((uint32_t)e << mbits) + (uint32_t)q - (1u << mbits));
    return (uint8_t)(sign | code);
}

GPUCORE_HD uint8_t gpucore_f32_to_fp8e4m3(float f) { return gpucore_f64_to_fp8((double)f, 0); }
GPUCORE_HD uint8_t gpucore_f32_to_fp8e5m2(float f) { return gpucore_f64_to_fp8((double)f, 1); }

#endif
