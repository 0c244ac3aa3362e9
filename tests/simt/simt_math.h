/*
 * simt_math.h — CUDA device math and bit intrinsics for the SIMT layer (included
 * by simt.h): min/max overloads, __expf and friends, float<->int bit casts and
 * rounding conversions, popc/clz/ffs/brev, and the fp16/bf16 types with their
 * conversion intrinsics. Conversions round as the hardware does (numeric.h is
 * the bit-exact reference); fast-math intrinsics (__expf, ...) use the precise
 * libm functions: this layer proves index math, not last-bit accuracy.
 */
#ifndef GPUCORE_SIMT_MATH_H
#define GPUCORE_SIMT_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "numeric.h"

/* min/max as CUDA overloads them for device code. */
#define SIMT_MINMAX(T)                                          \
    static inline T min(T a, T b) { return a < b ? a : b; }     \
    static inline T max(T a, T b) { return a > b ? a : b; }
SIMT_MINMAX(int)
SIMT_MINMAX(unsigned int)
SIMT_MINMAX(long)
SIMT_MINMAX(unsigned long)
SIMT_MINMAX(long long)
SIMT_MINMAX(unsigned long long)
#undef SIMT_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
static inline unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
static inline unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
static inline unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }

/* fast-math intrinsics */
/* glibc declares these names itself, so they are macros here. */
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __sincosf sincosf
#define __powf powf
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

/* bit casts */
static inline int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
static inline unsigned int __float_as_uint(float x) { unsigned int r; memcpy(&r, &x, 4); return r; }
static inline float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
static inline float __uint_as_float(unsigned int x) { float r; memcpy(&r, &x, 4); return r; }
static inline long long __double_as_longlong(double x) { long long r; memcpy(&r, &x, 8); return r; }
static inline double __longlong_as_double(long long x) { double r; memcpy(&r, &x, 8); return r; }

/* conversions with explicit rounding (_rn: nearest even, _rz: toward zero, _rd/_ru: down/up) */
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned int __float2uint_rn(float x) { return (unsigned int)nearbyintf(x); }
static inline unsigned int __float2uint_rz(float x) { return (unsigned int)x; }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline long long __float2ll_rz(float x) { return (long long)x; }
static inline long long __double2ll_rn(double x) { return (long long)nearbyint(x); }
static inline int __double2int_rn(double x) { return (int)nearbyint(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned int x) { return (float)x; }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline float __double2float_rn(double x) { return (float)x; }

/* integer intrinsics */
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned int __brev(unsigned int x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x)
{
    return ((unsigned long long)__brev((unsigned int)x) << 32) | __brev((unsigned int)(x >> 32));
}
static inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((uint64_t)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline int __mul24(int a, int b) { return (int)((int64_t)((a << 8) >> 8) * ((b << 8) >> 8)); }
static inline unsigned int __umul24(unsigned int a, unsigned int b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s)
{
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned int)((v >> (((s >> (4 * i)) & 7u) * 8)) & 0xffu) << (8 * i);
    return r;
}
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s)
{
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned int)((v << (s & 31u)) >> 32);
}
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s)
{
    uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned int)(v >> (s & 31u));
}

/* ------------------------------------------------------------ fp16 / bf16 */
/* Storage types with the conversion intrinsics of cuda_fp16.h / cuda_bf16.h
 * (round to nearest even through numeric.h). Arithmetic goes through float. */
struct __attribute__((aligned(2))) __half {
    uint16_t x;
    __half() = default;
    __half(float f) : x(gpucore_f32_to_f16(f)) {}
    operator float() const { return gpucore_f16_to_f32(x); }
};
struct __attribute__((aligned(4))) __half2 { __half x, y; };
struct __attribute__((aligned(2))) __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(gpucore_f32_to_bf16(f)) {}
    operator float() const { return gpucore_bf16_to_f32(x); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half half;
typedef __half2 half2;

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.x = u; return h; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline __half2 __floats2half2_rn(float a, float b) { __half2 r; r.x = __half(a); r.y = __half(b); return r; }
static inline __half2 __float2half2_rn(float a) { return __floats2half2_rn(a, a); }
static inline __half2 __halves2half2(__half a, __half b) { __half2 r; r.x = a; r.y = b; return r; }
static inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
static inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.x = u; return h; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    __nv_bfloat162 r; r.x = __nv_bfloat16(a); r.y = __nv_bfloat16(b); return r;
}
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b)
{
    __nv_bfloat162 r; r.x = a; r.y = b; return r;
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2((float)h.x, (float)h.y); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
static inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }

#endif
