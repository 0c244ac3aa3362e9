/*
 * test_numeric.c — the shared per-element math (kernels/numeric.h, philox.h):
 * f16 and bf16 conversions exhaustively and against a float64 rounding
 * reference (the portable integer conversions bit for bit: every half decoded
 * exactly, every rounding boundary between neighbouring halves, NaN payloads), Philox-4x32-10 against Random123's known-answer vectors, and the
 * portable log/sincos used by the normal transform against libm; the fp8
 * conversions (e4m3fn, e5m2) against tests/fp8_ref.h: all 256 codes decoded,
 * every rounding boundary, saturation, NaN, and one rounding from f64.
 */
#include <stdint.h>
#include "check.h"
#include "philox.h"
#include "fp8_ref.h"

/* Reference: round a double to a binary format with `mant` fraction bits and
 * exponent range, nearest even, by scaling (exact in double for these ranges). */
static double round_to_format(double x, int mant_bits, int min_exp, double max_finite)
{
    if (isnan(x) || isinf(x)) return x;
    double ax = fabs(x);
    if (ax == 0) return x;
    int e;
    frexp(ax, &e); /* ax = f * 2^e, f in [0.5, 1) */
    int exp = e - 1;
    if (exp < min_exp) exp = min_exp;
    double ulp = ldexp(1.0, exp - mant_bits);
    double q = ax / ulp;
    double r = nearbyint(q); /* default rounding mode: nearest even */
    double v = r * ulp;
    if (v > max_finite) v = INFINITY;
    return x < 0 ? -v : v;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

int main(void)
{
    /* f16: every bit pattern round-trips through f32 (NaN stays NaN) */
    int f16_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gpucore_f16_to_f32((uint16_t)h);
        uint16_t back = gpucore_f32_to_f16(f);
        int is_nan = ((h & 0x7c00) == 0x7c00) && (h & 0x3ff);
        if (is_nan ? !isnan(f) || !(((back & 0x7c00) == 0x7c00) && (back & 0x3ff)) : back != h) f16_bad++;
    }
    CHECK(f16_bad == 0);
    /* bf16 likewise */
    int bf16_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gpucore_bf16_to_f32((uint16_t)h);
        uint16_t back = gpucore_f32_to_bf16(f);
        int is_nan = ((h & 0x7f80) == 0x7f80) && (h & 0x7f);
        if (is_nan ? !isnan(f) : back != h) bf16_bad++;
    }
    CHECK(bf16_bad == 0);

    /* f32 -> f16 / bf16 rounding against the float64 reference on random and edge values */
    int f16_round_bad = 0, bf16_round_bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = next_u32();
        if (i < 4) bits = (uint32_t[]){0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u}[i];
        float f = gpucore_bits_f32(bits);
        if (isnan(f)) continue;
        double ref16 = round_to_format((double)f, 10, -14, 65504.0);
        double got16 = gpucore_f16_to_f32(gpucore_f32_to_f16(f));
        if (!(got16 == ref16 || (isinf(got16) && isinf(ref16) && (got16 > 0) == (ref16 > 0)))) f16_round_bad++;
        double refbf = round_to_format((double)f, 7, -126, 3.3895313892515355e38);
        double gotbf = gpucore_bf16_to_f32(gpucore_f32_to_bf16(f));
        if (!(gotbf == refbf || (isinf(gotbf) && isinf(refbf)))) bf16_round_bad++;
    }
    CHECK(f16_round_bad == 0);
    CHECK(bf16_round_bad == 0);
    CHECK(isnan(gpucore_f16_to_f32(gpucore_f32_to_f16(NAN))));
    CHECK(isinf(gpucore_f16_to_f32(gpucore_f32_to_f16(INFINITY))));
    CHECK(isnan(gpucore_bf16_to_f32(gpucore_f32_to_bf16(NAN))));
    CHECK(gpucore_f32_to_bf16(-INFINITY) == 0xff80u);

    /* The portable f16 conversions are what the CPU backend and the SIMT emulation use, and what
     * the CUDA kernels' hardware cvt must equal (numeric.h): check them bit for bit. */
    int decode_bad = 0, boundary_bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp((double)(m | 0x400), (int)e - 25);
        if (h & 0x8000) v = -v;
        float f = gpucore_f16_to_f32_portable((uint16_t)h);
        uint32_t fb = gpucore_f32_bits(f);
        if (e == 31 && m) { /* NaN: sign and payload kept in the top mantissa bits */
            if (fb != (((h & 0x8000u) << 16) | 0x7f800000u | (m << 13))) decode_bad++;
        } else if ((double)f != v || !signbit(f) != !(h & 0x8000)) decode_bad++;
    }
    for (uint32_t h = 0; h < 0x7c00; h++) /* each pair of neighbouring finite halves (h, h + 1) */
        for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
            double lo = gpucore_f16_to_f32_portable((uint16_t)h);
            double hi = h + 1 == 0x7c00 ? 65536.0 : gpucore_f16_to_f32_portable((uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2); /* 12 significant bits: exact in f32 */
            float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
            uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
            float sg = sign ? -1.0f : 1.0f;
            if (gpucore_f32_to_f16_portable(sg * mid) != (sign | even)) boundary_bad++;
            if (gpucore_f32_to_f16_portable(sg * below) != (sign | h)) boundary_bad++;
            if (gpucore_f32_to_f16_portable(sg * above) != (sign | (h + 1))) boundary_bad++;
            if (gpucore_f32_to_f16_portable(sg * (float)lo) != (sign | h)) boundary_bad++;
        }
    /* beyond the largest finite half, and the tiniest values */
    CHECK(gpucore_f32_to_f16_portable(3.0e38f) == 0x7c00u && gpucore_f32_to_f16_portable(-INFINITY) == 0xfc00u);
    CHECK(gpucore_f32_to_f16_portable(1e-30f) == 0 && gpucore_f32_to_f16_portable(-1e-30f) == 0x8000u);
    CHECK(gpucore_f32_to_f16_portable(gpucore_bits_f32(1)) == 0); /* f32 subnormal */
    for (uint32_t k = 0; k < 4096; k++) { /* f32 NaNs: quiet half NaN, sign and top payload bits kept */
        uint32_t bits = 0x7f800001u + k * 2047u + ((k & 1) << 31);
        uint16_t r = gpucore_f32_to_f16_portable(gpucore_bits_f32(bits));
        if (r != (uint16_t)(((bits >> 16) & 0x8000u) | 0x7e00u | ((bits >> 13) & 0x3ffu))) nan_bad++;
    }
    CHECK(decode_bad == 0);
    CHECK(boundary_bad == 0);
    CHECK(nan_bad == 0);

    /* fp8: every code decodes to the bit-layout value; f32 and f64 encode as the reference */
    for (int e5 = 0; e5 < 2; e5++) {
        int fp8_decode_bad = 0, fp8_encode_bad = 0, fp8_f64_bad = 0;
        for (unsigned c = 0; c < 256; c++) {
            double ref = fp8_ref_decode(c, e5);
            float got = e5 ? gpucore_fp8e5m2_to_f32((uint8_t)c) : gpucore_fp8e4m3_to_f32((uint8_t)c);
            if (isnan(ref) ? !isnan(got) : ((double)got != ref || !signbit(got) != !(c & 0x80))) fp8_decode_bad++;
        }
        enum { NV = 40000 };
        static float vals[NV];
        int nv = fp8_ref_test_values(vals, NV, e5, 777u + (uint32_t)e5);
        for (int i = 0; i < nv; i++) {
            unsigned got = e5 ? gpucore_f32_to_fp8e5m2(vals[i]) : gpucore_f32_to_fp8e4m3(vals[i]);
            if (got != fp8_ref_encode(vals[i], e5)) {
                if (fp8_encode_bad++ < 5)
                    fprintf(stderr, "  f32 %.9g -> %s: 0x%02x, want 0x%02x\n", vals[i], e5 ? "e5m2" : "e4m3", got,
                            fp8_ref_encode(vals[i], e5));
            }
        }
        /* from f64: a value just above a midpoint (by less than an f32 ulp) rounds up, once */
        for (unsigned c = 1; c < fp8_ref_maxcode(e5); c++) {
            double mid = (fp8_ref_decode(c, e5) + fp8_ref_decode(c + 1, e5)) / 2;
            if (gpucore_f64_to_fp8(mid * (1 + 0x1p-40), e5) != c + 1) fp8_f64_bad++;
            if (gpucore_f64_to_fp8(mid * (1 - 0x1p-40), e5) != c) fp8_f64_bad++;
        }
        printf("fp8 %s: 256 codes decoded, %d f32 values and %u f64 midpoints encoded\n", e5 ? "e5m2" : "e4m3", nv,
               2 * (fp8_ref_maxcode(e5) - 1));
        CHECK(fp8_decode_bad == 0);
        CHECK(fp8_encode_bad == 0);
        CHECK(fp8_f64_bad == 0);
    }
    /* the named points of the formats */
    CHECK(gpucore_f32_to_fp8e4m3(448.0f) == 0x7e && gpucore_f32_to_fp8e4m3(-1e9f) == 0xfe);
    CHECK(gpucore_f32_to_fp8e4m3(INFINITY) == 0x7e && gpucore_f32_to_fp8e5m2(-INFINITY) == 0xfb);
    CHECK(gpucore_f32_to_fp8e4m3(NAN) == 0x7f && gpucore_f32_to_fp8e5m2(NAN) == 0x7f);
    CHECK(gpucore_f32_to_fp8e4m3(-0.0f) == 0x80 && gpucore_f32_to_fp8e4m3(0x1p-10f) == 0);  /* tie to 0 */
    CHECK(gpucore_f32_to_fp8e4m3(0x1.8p-10f) == 1 && gpucore_f32_to_fp8e5m2(0x1p-17f) == 0);
    CHECK(gpucore_fp8e4m3_to_f32(0x7e) == 448.0f && isnan(gpucore_fp8e4m3_to_f32(0xff)));
    CHECK(gpucore_fp8e5m2_to_f32(0x7b) == 57344.0f && gpucore_fp8e5m2_to_f32(0xfc) == -INFINITY);

    /* Philox-4x32-10 known-answer tests (Random123 kat_vectors) */
    {
        uint32_t c[4] = {0, 0, 0, 0}, k[2] = {0, 0};
        gpucore_philox_out r = gpucore_philox4x32_10_full(c, k);
        CHECK(r.v[0] == 0x6627e8d5u && r.v[1] == 0xe169c58du && r.v[2] == 0xbc57ac4cu && r.v[3] == 0x9b00dbd8u);
        uint32_t c2[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k2[2] = {0xffffffffu, 0xffffffffu};
        r = gpucore_philox4x32_10_full(c2, k2);
        CHECK(r.v[0] == 0x408f276du && r.v[1] == 0x41c83b0eu && r.v[2] == 0xa20bc7c6u && r.v[3] == 0x6d5451fdu);
        uint32_t c3[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, k3[2] = {0xa4093822u, 0x299f31d0u};
        r = gpucore_philox4x32_10_full(c3, k3);
        CHECK(r.v[0] == 0xd16cfe09u && r.v[1] == 0x94fdccebu && r.v[2] == 0x5001e420u && r.v[3] == 0x24126ea1u);
    }

    /* portable log and sincos: close to libm over their whole use range */
    double worst_log = 0, worst_sin = 0;
    for (int i = 1; i <= (1 << 24); i += 97) {
        float u = (float)i * 5.9604644775390625e-8f;
        double e = fabs((double)gpucore_portable_logf(u) - log((double)u));
        if (e > worst_log) worst_log = e;
        float s, c;
        gpucore_portable_sincos_2pi(u, &s, &c);
        double a = 2 * M_PI * (double)u;
        double es = fmax(fabs(s - sin(a)), fabs(c - cos(a)));
        if (es > worst_sin) worst_sin = es;
    }
    printf("portable logf max abs error %.3g, sincos max abs error %.3g\n", worst_log, worst_sin);
    CHECK(worst_log < 4e-6);
    CHECK(worst_sin < 2e-6);

    /* uniform draws lie in [0, 1); normal draws have mean ~0 and variance ~1 */
    double sum = 0, sq = 0;
    int out_of_range = 0;
    const int n = 1 << 20;
    for (int i = 0; i < n; i++) {
        float u = gpucore_philox_uniform(42, 7, (uint64_t)i);
        if (!(u >= 0 && u < 1)) out_of_range++;
        double z = gpucore_philox_normal(42, 7, (uint64_t)i);
        sum += z;
        sq += z * z;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    printf("normal: mean %.5f variance %.5f over %d draws\n", mean, var, n);
    CHECK(out_of_range == 0);
    CHECK(fabs(mean) < 0.005);
    CHECK(fabs(var - 1) < 0.01);
    return check_finish("test_numeric");
}
