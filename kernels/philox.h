/*
 * philox.h — counter-based random numbers (Philox-4x32-10, Salmon et al. 2011)
 * and the transforms to uniform and normal values, shared by every backend.
 *
 * A draw is a pure function of (seed, counter), so any thread may compute any
 * element, the CPU and CUDA backends produce the same numbers, and a recompute
 * (gradient checkpointing, dropout backward) replays them exactly. The normal
 * transform uses its own log and sin/cos written with explicit fmaf so that host
 * and device round identically (library logf/sinf differ in the last bit
 * between glibc and CUDA).
 *
 * Element i of a fill:  uniform -> lane i%4 of philox(seed, offset + i/4)
 *                       normal  -> lanes 0,1 of philox(seed, offset + i/2),
 *                                  r*cos for even i, r*sin for odd i (Box-Muller)
 */
#ifndef GPUCORE_KERNELS_PHILOX_H
#define GPUCORE_KERNELS_PHILOX_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "numeric.h"
#include "dtype_access.h"

typedef struct gpucore_philox_out { uint32_t v[4]; } gpucore_philox_out;

/* The full generator: 128-bit counter c, 64-bit key k (Random123's philox4x32_10). */
GPUCORE_HD gpucore_philox_out gpucore_philox4x32_10_full(const uint32_t c_in[4], const uint32_t k_in[2])
{
    uint32_t c0 = c_in[0], c1 = c_in[1], c2 = c_in[2], c3 = c_in[3];
    uint32_t k0 = k_in[0], k1 = k_in[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    gpucore_philox_out out;
    out.v[0] = c0; out.v[1] = c1; out.v[2] = c2; out.v[3] = c3;
    return out;
}

/* The library's use: a 64-bit counter in the low words, the 64-bit seed as key. */
GPUCORE_HD gpucore_philox_out gpucore_philox4x32_10(uint64_t seed, uint64_t counter)
{
    uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0u, 0u};
    uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    return gpucore_philox4x32_10_full(c, k);
}

/* 24 random bits -> [0, 1), exact in f32. */
GPUCORE_HD float gpucore_u32_to_unit(uint32_t x) { return (float)(x >> 8) * 5.9604644775390625e-8f; }

/* Natural log for x in (0, 1]... any normal positive float; ~1 ulp, same bits everywhere. */
GPUCORE_HD float gpucore_portable_logf(float x)
{
    uint32_t u = gpucore_f32_bits(x);
    int e = (int)((u >> 23) & 0xffu) - 127;
    float m = gpucore_bits_f32((u & 0x7fffffu) | 0x3f800000u); /* [1, 2) */
    if (m > 1.41421356f) { m = m * 0.5f; e += 1; }
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float p = fmaf(s2, 0.11111111f, 0.14285715f);
    p = fmaf(s2, p, 0.2f);
    p = fmaf(s2, p, 0.33333334f);
    p = p * s2;
    float two_s = 2.0f * s;
    float logm = fmaf(two_s, p, two_s);
    return fmaf((float)e, 0.69314718f, logm);
}

/* sin and cos of 2*pi*u for u in [0, 1): quadrant from u*4 (exact), Taylor on [0, pi/2). */
GPUCORE_HD void gpucore_portable_sincos_2pi(float u, float *sin_out, float *cos_out)
{
    float q = u * 4.0f;
    int k = (int)q;
    float t = (q - (float)k) * 1.57079637f;
    float t2 = t * t;
    float sp = fmaf(t2, -7.6471637e-13f, 1.6059044e-10f);
    sp = fmaf(t2, sp, -2.5052108e-8f);
    sp = fmaf(t2, sp, 2.7557319e-6f);
    sp = fmaf(t2, sp, -1.9841270e-4f);
    sp = fmaf(t2, sp, 8.3333333e-3f);
    sp = fmaf(t2, sp, -0.16666667f);
    float s = fmaf(t * t2, sp, t);
    float cp = fmaf(t2, 4.7794773e-14f, -1.1470746e-11f);
    cp = fmaf(t2, cp, 2.0876757e-9f);
    cp = fmaf(t2, cp, -2.7557319e-7f);
    cp = fmaf(t2, cp, 2.4801587e-5f);
    cp = fmaf(t2, cp, -1.3888889e-3f);
    cp = fmaf(t2, cp, 4.1666667e-2f);
    cp = fmaf(t2, cp, -0.5f);
    float c = fmaf(t2, cp, 1.0f);
    switch (k & 3) {
    case 0: *sin_out = s; *cos_out = c; break;
    case 1: *sin_out = c; *cos_out = -s; break;
    case 2: *sin_out = -s; *cos_out = -c; break;
    default: *sin_out = -c; *cos_out = s; break;
    }
}

/* Word j (0..3) of r. A select chain, not r.v[j]: a run-time index into the struct would put it in
 * local memory on the GPU (a 16-byte stack frame, LDL/STL in every kernel that draws). */
GPUCORE_HD uint32_t gpucore_philox_word(const gpucore_philox_out r, uint32_t j)
{
    return j == 0 ? r.v[0] : j == 1 ? r.v[1] : j == 2 ? r.v[2] : r.v[3];
}

/* Uniform [0,1) value of element i. */
GPUCORE_HD float gpucore_philox_uniform(uint64_t seed, uint64_t offset, uint64_t i)
{
    gpucore_philox_out r = gpucore_philox4x32_10(seed, offset + i / 4);
    return gpucore_u32_to_unit(gpucore_philox_word(r, (uint32_t)(i % 4)));
}

/* Uniform values of elements 4c .. 4c+3 (one generator call for the four). */
GPUCORE_HD void gpucore_philox_uniform4(uint64_t seed, uint64_t offset, uint64_t c, float *u)
{
    gpucore_philox_out r = gpucore_philox4x32_10(seed, offset + c);
    u[0] = gpucore_u32_to_unit(r.v[0]);
    u[1] = gpucore_u32_to_unit(r.v[1]);
    u[2] = gpucore_u32_to_unit(r.v[2]);
    u[3] = gpucore_u32_to_unit(r.v[3]);
}

/* Standard normal value of element i. */
GPUCORE_HD float gpucore_philox_normal(uint64_t seed, uint64_t offset, uint64_t i)
{
    gpucore_philox_out r = gpucore_philox4x32_10(seed, offset + i / 2);
    float u1 = (float)((r.v[0] >> 8) + 1u) * 5.9604644775390625e-8f; /* (0, 1] */
    float u2 = gpucore_u32_to_unit(r.v[1]);
    float radius = sqrtf(-2.0f * gpucore_portable_logf(u1));
    float sn, cs;
    gpucore_portable_sincos_2pi(u2, &sn, &cs);
    return (i & 1) ? radius * sn : radius * cs;
}

/* Parameters of one random fill, computed once on the host. */
typedef struct gpucore_random_params {
    int32_t dist;              /* 0 uniform [a, b), 1 normal (mean a, std b) */
    int32_t dtype;
    float f_shift, f_scale;    /* uniform: a, b-a; normal: mean, std (for f32/f16/bf16) */
    double d_shift, d_scale;   /* the same in f64 (for f64 tensors) */
    uint64_t seed, offset;
} gpucore_random_params;

/* Write element i (row-major index) of a random fill to p. */
GPUCORE_HD void gpucore_random_element(void *p, const gpucore_random_params *rp, uint64_t i)
{
    float x = rp->dist == 0 ? gpucore_philox_uniform(rp->seed, rp->offset, i)
                            : gpucore_philox_normal(rp->seed, rp->offset, i);
    if (rp->dtype == GPUCORE_KDT_F64) *(double *)p = fma((double)x, rp->d_scale, rp->d_shift);
    else gpucore_store_from_f32(p, rp->dtype, fmaf(x, rp->f_scale, rp->f_shift));
}

GPUCORE_HD gpucore_random_params gpucore_random_params_make(int dist, int dtype, double a, double b, uint64_t seed,
                                                            uint64_t offset)
{
    gpucore_random_params rp;
    rp.dist = dist;
    rp.dtype = dtype;
    rp.d_shift = a;
    rp.d_scale = dist == 0 ? b - a : b;
    rp.f_shift = (float)rp.d_shift;
    rp.f_scale = (float)rp.d_scale;
    rp.seed = seed;
    rp.offset = offset;
    return rp;
}

#endif
