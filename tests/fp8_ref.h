/*
 * fp8_ref.h — an independent float64 reference for the fp8 formats (OCP e4m3fn
 * and e5m2), shared by test_numeric.c, test_ops_elementwise.c and test_lora.c:
 * decoding from the bit layout with ldexp, encoding by searching every finite
 * code for the nearest (ties to the even code, saturating past the largest
 * finite, NaN to 0x7f), and the test values that probe every rounding boundary.
 * Written without kernels/numeric.h, so a bug there cannot hide in both.
 */
#ifndef GPUCORE_TEST_FP8_REF_H
#define GPUCORE_TEST_FP8_REF_H

#include <math.h>
#include <stdint.h>

/* Code c of the format (e5m2 nonzero: e5m2, else e4m3fn) as a double. */
static inline double fp8_ref_decode(unsigned c, int e5m2)
{
    int mbits = e5m2 ? 2 : 3, ebits = e5m2 ? 5 : 4, bias = e5m2 ? 15 : 7;
    int s = (c >> 7) & 1, e = (int)((c >> mbits) & ((1u << ebits) - 1)), m = (int)(c & ((1u << mbits) - 1));
    double v;
    if (e5m2 && e == 31) v = m ? NAN : INFINITY;
    else if (!e5m2 && e == 15 && m == 7) v = NAN;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
    else v = ldexp((double)((1 << mbits) + m), e - bias - mbits);
    return s ? -v : v;
}

static inline unsigned fp8_ref_maxcode(int e5m2) { return e5m2 ? 0x7bu : 0x7eu; }

/* x rounded to the nearest finite code, ties to the even code (the even significand),
 * past the largest finite (and ±Inf): ±max; NaN: 0x7f; a tiny x keeps its sign. */
static inline unsigned fp8_ref_encode(double x, int e5m2)
{
    if (isnan(x)) return 0x7fu;
    unsigned sign = signbit(x) ? 0x80u : 0u, maxc = fp8_ref_maxcode(e5m2), best = 0;
    double ax = fabs(x), bestd = INFINITY;
    if (ax > fp8_ref_decode(maxc, e5m2)) return sign | maxc;
    for (unsigned c = 0; c <= maxc; c++) {
        double d = fabs(ax - fp8_ref_decode(c, e5m2));
        if (d < bestd || (d == bestd && !(c & 1u))) { bestd = d; best = c; }
    }
    return sign | best;
}

/* Test values for f32 -> fp8: each midpoint between neighbouring codes and the f32
 * values either side of it, each code's value, the region past the largest finite,
 * Inf, NaN, ±0, f32 subnormals, then pseudo-random f32 in the format's range; both
 * signs. Fills v (capacity cap), returns the count. */
static inline int fp8_ref_test_values(float *v, int cap, int e5m2, uint32_t seed)
{
    int n = 0;
    unsigned maxc = fp8_ref_maxcode(e5m2);
#define FP8_PUT(x) do { if (n + 2 <= cap) { v[n++] = (float)(x); v[n++] = -(float)(x); } } while (0)
    for (unsigned c = 0; c <= maxc; c++) {
        double lo = fp8_ref_decode(c, e5m2);
        double hi = c < maxc ? fp8_ref_decode(c + 1, e5m2) : lo + (lo - fp8_ref_decode(c - 1, e5m2));
        float mid = (float)((lo + hi) / 2); /* exact in f32 */
        FP8_PUT(lo);
        FP8_PUT(mid);
        FP8_PUT(nextafterf(mid, 0.0f));
        FP8_PUT(nextafterf(mid, INFINITY));
    }
    FP8_PUT(INFINITY);
    FP8_PUT(1e30f);
    FP8_PUT(1e-30f);
    FP8_PUT(1e-40f); /* f32 subnormal */
    FP8_PUT(0.0f);
    if (n < cap) v[n++] = NAN;
    uint32_t s = seed;
    while (n + 2 <= cap) {
        s = s * 1664525u + 1013904223u;
        /* exponents 2^-20 .. 2^17: underflow, subnormals, normals and saturation */
        uint32_t u = (s >> 9) | ((uint32_t)(107 + (s >> 3) % 38) << 23);
        float f;
        memcpy(&f, &u, 4);
        FP8_PUT(f);
    }
#undef FP8_PUT
    return n;
}

#endif
