/*
 * cpu_vec.c — the vector primitives of cpu_vec.h: a portable body and an
 * AVX2+FMA body of each, chosen per call from the running CPU. The f64 sums
 * use the same 16 lanes and fold in both bodies, so they agree bit for bit; the
 * exponential is SLEEF's 1-ulp vector expf in the AVX2 body (libm's expf
 * otherwise), so softmax values may differ in the last bit between machines of
 * different ISA, never between runs or thread counts on one machine. The
 * elementwise family's activations and libm-calling unary ops get 8-lane bodies
 * here too: activation_math.h's formula text instantiated on __m256 with SLEEF's
 * vector exp/tanh and our own table erf (GPUCORE_ACT_FORMULAS), and bf16 rounding in registers.
 * Where the CPU has AVX-512 (F, BW), bf16 arithmetic and rounding, the blocked
 * sums, the row primitives (max/min, f64-lane sums, exp-sum, scale, normalize),
 * silu/sigmoid and the unary exp/log/sqrt/rsqrt take 16-lane bodies that repeat
 * the AVX2 bodies' operations lane for lane (the same bits: the inline exp is
 * SLEEF's operations on 8 or 16 lanes, SLEEF's avx512f log matches its avx2 one;
 * GPUCORE_CPU_NO_AVX512=1 selects the AVX2 ones, in
 * this file only). Dense f32 arithmetic is AVX2 on both. f16 is widened
 * and rounded with F16C (every AVX2 CPU has it), which gives gpucore_f32_to_f16's
 * bits for all 2^32 inputs; a signalling NaN is widened by the portable formula
 * (F16C would quiet it).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore_config.h"
#include "cpu_vec.h"
#include "dtype_access.h"
#include "elementwise_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_VEC_X86 1
#include <immintrin.h>
#include <cpuid.h>
#ifndef __clang__ /* clang has no target pragma; see below */
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#if GPUCORE_HAVE_SLEEF
#include <sleef.h>
#if !defined(__AVX__)
/* sleef.h declares its AVX2 entry points only under __AVX__, which GCC's target pragma above defines;
 * clang has no such pragma (the fuzzing build is clang). The ones this file uses, as sleef.h has them. */
__attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10avx2(__m256);
__attribute__((target("avx2,fma"))) __m256 Sleef_tanhf8_u10avx2(__m256);
__attribute__((target("avx2,fma"))) __m256 Sleef_logf8_u10avx2(__m256);
#endif
#endif
#ifndef __clang__
#pragma GCC pop_options
#endif
#else
#define CPU_VEC_X86 0
#endif

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

#if CPU_VEC_X86 && GPUCORE_HAVE_SLEEF
/* exp on 8 lanes, inline: the operations of SLEEF 3.5's Sleef_expf8_u10avx2 in its order (so its
 * bits, which its 16-lane avx512f exp gives too; checked against it for every f32 input), written
 * here so that the compiler interleaves it with the caller's loop instead of calling out per 8
 * elements (the call clobbers every vector register). q = round(x/ln2); s = x - q·ln2 in two FMAs
 * (ln2 = L2U + L2L); exp(s) = 1 + s + s²·P(s), P of degree 5 by Horner in FMAs; times 2^q as two
 * factors 2^(q>>1) and 2^(q - (q>>1)) (so q up to 2·127 stays finite); below -104: 0, above 100: inf.
 * CPU_EXP_POLY writes the reduction and the polynomial once for both widths, on intrinsics prefix P
 * (_mm256_ / _mm512_) and vector type V, from x and qf = q as a float; each width forms q and
 * scales by 2^q its own way, with the same result. */
#define CPU_EXP_POLY(Q, name, P, V)                                                                       \
    Q V name(V x, V qf)                                                                                   \
    {                                                                                                     \
        V s = P##fmadd_ps(qf, P##set1_ps(-0x1.62e4p-1f), x);                                              \
        s = P##fmadd_ps(qf, P##set1_ps(-0x1.7f7d1cp-20f), s);                                             \
        V u = P##fmadd_ps(s, P##set1_ps(0x1.a057b4p-13f), P##set1_ps(0x1.6d2d92p-10f));                   \
        u = P##fmadd_ps(s, u, P##set1_ps(0x1.11114cp-7f));                                                \
        u = P##fmadd_ps(s, u, P##set1_ps(0x1.5554f4p-5f));                                                \
        u = P##fmadd_ps(s, u, P##set1_ps(0x1.555556p-3f));                                                \
        u = P##fmadd_ps(s, u, P##set1_ps(0.5f));                                                          \
        return P##add_ps(P##fmadd_ps(u, P##mul_ps(s, s), s), P##set1_ps(1.0f));                           \
    }
CPU_EXP_POLY(AVX2 static inline, cpu_exp8_poly, _mm256_, __m256)
CPU_EXP_POLY(AVX512 static inline, cpu_exp16_poly, _mm512_, __m512)
#undef CPU_EXP_POLY

/* q rounded to nearest even as an integer, the scaling as two exact products by powers of two. */
AVX2 static inline __m256 cpu_exp8_core(__m256 x)
{
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(0x1.715476p+0f)));
    const __m256 u = cpu_exp8_poly(x, _mm256_cvtepi32_ps(q));
    const __m256i one = _mm256_set1_epi32(0x3f800000), q1 = _mm256_srai_epi32(q, 1);
    const __m256 v = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(q1, 23), one)));
    return _mm256_mul_ps(v, _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(_mm256_sub_epi32(q, q1), 23), one)));
}

/* The same q by roundscale (nearest even, as the conversion), and u·2^q in one scalef: both
 * products above are exact where the result is normal, and where it is subnormal the second one
 * rounds once, as scalef does, so the bits are equal (checked for every f32 input). 7 fewer
 * operations per 16 lanes. */
AVX512 static inline __m512 cpu_exp16_core(__m512 x)
{
    const __m512 qf = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(0x1.715476p+0f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_scalef_ps(cpu_exp16_poly(x, qf), qf);
}

AVX2 static inline __m256 cpu_exp8(__m256 x)
{
    const __m256 u = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OS), cpu_exp8_core(x));
    return _mm256_blendv_ps(u, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(_mm256_set1_ps(100.0f), x, _CMP_LT_OS));
}

/* cpu_exp8's operations on 16 lanes, inline (so the same bits, which are SLEEF's 16-lane avx512f exp's
 * too; checked against cpu_exp8 for every f32 input): the out-of-line SLEEF call per 16 lanes cost
 * the softmax's and silu's loops their registers. AVX512F alone: the limits go through masks. */
AVX512 static inline __m512 cpu_exp16(__m512 x)
{
    const __m512 u = _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OS), cpu_exp16_core(x));
    return _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(_mm512_set1_ps(100.0f), x, _CMP_LT_OS), _mm512_set1_ps(INFINITY));
}
#endif
#if CPU_VEC_X86
/* erf on 8 and 16 lanes, inline, with the same operations lane for lane (so the same bits on both
 * widths). For a = min(|x|, 4): a polynomial of degree 7 on each of 8 intervals of width 0.5, in
 * v = 2a - (k + 0.5) in [-0.5, 0.5] (k = the interval), its coefficients picked per lane by a
 * register permute (no gather), evaluated by Horner in FMAs; then x's sign. Past 4 erf is 1 in f32.
 * The table is tools/fit_erf_table.py's (least squares in float64 per interval); largest absolute
 * error 6.4e-8 over [-5, 5], about libm erff's rounding near 1, which is the accuracy
 * 0.5x(1 + erf(x/sqrt2)) can use. NaN stays NaN (min keeps it, and v is NaN). Row j holds the j-th
 * coefficient of the 8 intervals. */
#define CPU_ERF_DEGREE 7
static const float cpu_erf_table[CPU_ERF_DEGREE + 1][8] __attribute__((aligned(32))) = {
    {0x1.1af54ep-2f, 0x1.6c1c98p-1f, 0x1.d8865ep-1f, 0x1.f92d08p-1f, 0x1.ff4048p-1f, 0x1.fff2dp-1f, 0x1.ffff7p-1f, 0x1.fffffcp-1f},
    {0x1.0f5d16p-1f, 0x1.492e42p-2f, 0x1.e4653p-4f, 0x1.b0553p-6f, 0x1.d4143cp-9f, 0x1.3360cep-12f, 0x1.e9b5dap-17f, 0x1.d936a8p-22f},
    {-0x1.0f5cfp-4f, -0x1.edc55ap-4f, -0x1.2ebf54p-4f, -0x1.7a4a8p-6f, -0x1.074b2p-8f, -0x1.a6a57p-12f, -0x1.8de92cp-16f, -0x1.bbbbbcp-21f},
    {-0x1.3c973p-5f, 0x1.b6e67cp-9f, 0x1.571d0ep-6f, 0x1.7148ep-7f, 0x1.63ef36p-9f, 0x1.69cefep-12f, 0x1.9aa61ap-16f, 0x1.0b7098p-20f},
    {0x1.03f644p-7f, 0x1.34956cp-7f, -0x1.91de7ap-12f, -0x1.8a1498p-9f, -0x1.38bdf4p-10f, -0x1.aafeap-13f, -0x1.2c1206p-16f, -0x1.ce8fc4p-21f},
    {0x1.47d41cp-9f, -0x1.b3f454p-10f, -0x1.828d6p-10f, 0x1.b1bf8ep-13f, 0x1.5d4f1p-12f, 0x1.6945c8p-14f, 0x1.48dd1ap-17f, 0x1.3387p-21f},
    {-0x1.4247ap-11f, -0x1.b38878p-12f, 0x1.51792cp-12f, 0x1.2888aap-13f, -0x1.6c52bap-15f, -0x1.b5378ep-16f, -0x1.1f0e78p-18f, -0x1.5b2946p-22f},
    {-0x1.02ec24p-13f, 0x1.250934p-13f, 0x1.eae10ep-16f, -0x1.84d4e4p-15f, -0x1.7a49b6p-18f, 0x1.4d59b4p-18f, 0x1.6c0eecp-20f, 0x1.1fa416p-23f},
};

AVX2 static inline __m256 cpu_erf8(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_andnot_ps(sign, x)); /* NaN: a is NaN */
    const __m256 t = _mm256_mul_ps(a, _mm256_set1_ps(2.0f));
    const __m256i k = _mm256_min_epi32(_mm256_cvttps_epi32(t), _mm256_set1_epi32(7)); /* NaN: INT_MIN, used mod 8 */
    const __m256 v = _mm256_sub_ps(t, _mm256_add_ps(_mm256_cvtepi32_ps(k), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_permutevar8x32_ps(_mm256_load_ps(cpu_erf_table[CPU_ERF_DEGREE]), k);
    for (int j = CPU_ERF_DEGREE - 1; j >= 0; j--)
        r = _mm256_fmadd_ps(r, v, _mm256_permutevar8x32_ps(_mm256_load_ps(cpu_erf_table[j]), k));
    return _mm256_or_ps(r, _mm256_and_ps(sign, x));
}

AVX512 static inline __m512 cpu_erf16(__m512 x)
{
    /* AVX512F alone (no DQ): the sign and the table's halves go through integer and f64 forms */
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 a = _mm512_min_ps(_mm512_set1_ps(4.0f), _mm512_abs_ps(x));
    const __m512 t = _mm512_mul_ps(a, _mm512_set1_ps(2.0f));
    const __m512i k = _mm512_min_epi32(_mm512_cvttps_epi32(t), _mm512_set1_epi32(7)); /* NaN: INT_MIN, used mod 16 */
    const __m512 v = _mm512_sub_ps(t, _mm512_add_ps(_mm512_cvtepi32_ps(k), _mm512_set1_ps(0.5f)));
    /* the 8 intervals in both halves of the 16-entry permute, so k mod 16 picks as k mod 8 does */
#define CPU_ERF16_ROW(j) _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_load_pd((const double *)cpu_erf_table[j])))
    __m512 r = _mm512_permutexvar_ps(k, CPU_ERF16_ROW(CPU_ERF_DEGREE));
    for (int j = CPU_ERF_DEGREE - 1; j >= 0; j--) r = _mm512_fmadd_ps(r, v, _mm512_permutexvar_ps(k, CPU_ERF16_ROW(j)));
#undef CPU_ERF16_ROW
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(sign, _mm512_castps_si512(x))));
}
#endif
#if CPU_VEC_X86 && GPUCORE_HAVE_SLEEF && !defined(__AVX512F__)
/* SLEEF's avx512f entry points (sleef.h declares them only under __AVX512F__). */
AVX512 __m512 Sleef_logf16_u10avx512f(__m512);
#endif

#if CPU_VEC_X86
/* Whether environment variable name is set to anything but "" or "0". */
static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static int probe_avx2(void)
{
    __builtin_cpu_init();
    /* F16C is not asked: every AVX2 CPU has it (Intel from Ivy Bridge, AMD from Piledriver, both before
     * AVX2), and clang's __builtin_cpu_supports does not know the name */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           !env_on("GPUCORE_CPU_PORTABLE"); /* tests: the portable bodies on any CPU */
}

static int probe_avx512(void)
{
    return probe_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           !env_on("GPUCORE_CPU_NO_AVX512"); /* tests: the AVX2 bodies on an AVX-512 CPU */
}

/* probe() once per flag (a benign race: every thread computes the same value). */
static int cached_probe(int *cache, int (*probe)(void))
{
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v < 0) {
        v = probe();
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

int cpu_vec_have_avx2(void)
{
#if CPU_VEC_X86
    static int cached = -1;
    return cached_probe(&cached, probe_avx2);
#else
    return 0;
#endif
}

int cpu_vec_have_avx512(void)
{
#if CPU_VEC_X86
    static int cached = -1;
    return cached_probe(&cached, probe_avx512);
#else
    return 0;
#endif
}

/* The size of one L3 cache (the one this core shares), from CPUID's cache parameters (leaf 4 on
 * Intel, 0x8000001D on AMD: ways x partitions x line size x sets), as lscpu reports it; 0 where it
 * cannot tell. Not sysconf's: glibc may report a whole package's L3 (320 MiB on a 32 MiB VM slice). */
static size_t l3_bytes(void)
{
#if CPU_VEC_X86
    unsigned a, b, c, d, leaf = 4;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x8000001Du && __get_cpuid(0x80000001u, &a, &b, &c, &d) &&
        (c & (1u << 22))) /* AMD's topology extensions: its own cache leaf */
        leaf = 0x8000001Du;
    else if (!__get_cpuid(0, &a, &b, &c, &d) || a < 4)
        return 0;
    for (unsigned i = 0; i < 16; i++) {
        if (!__get_cpuid_count(leaf, i, &a, &b, &c, &d) || (a & 31) == 0) break; /* no more caches */
        if (((a >> 5) & 7) == 3)
            return (size_t)((b >> 22) + 1) * (((b >> 12) & 1023) + 1) * ((b & 4095) + 1) * ((size_t)c + 1);
    }
#endif
    return 0;
}

size_t cpu_vec_stream_min_bytes(void)
{
    static size_t cached; /* 0: not yet asked (a computed 0 is stored as SIZE_MAX: off) */
    size_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v) return v;
    v = SIZE_MAX;
    if (cpu_vec_have_avx2()) {
        const char *e = getenv("GPUCORE_CPU_STREAM_MIN_BYTES");
        if (e && *e) {
            char *end;
            const long long n = strtoll(e, &end, 10);
            if (*end == '\0' && n > 0) v = (size_t)n;
        } else {
            const size_t l3 = l3_bytes();
            v = (l3 ? l3 : (size_t)32 << 20) / 4 * 5;
        }
    }
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    return v;
}

#if CPU_VEC_X86
AVX2 static void stream_copy_avx2(char *d, const char *s, size_t bytes)
{
    size_t i = 0;
    for (; i + 32 <= bytes; i += 32) _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
    memcpy(d + i, s + i, bytes - i);
}

AVX512 static void stream_copy_avx512(char *d, const char *s, size_t bytes)
{
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) _mm512_stream_si512((__m512i *)(d + i), _mm512_loadu_si512(s + i));
    memcpy(d + i, s + i, bytes - i);
}
#endif

void cpu_vec_stream_copy(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
#if CPU_VEC_X86
    if (cpu_vec_have_avx2()) {
        const size_t align = cpu_vec_have_avx512() ? 64 : 32;
        size_t head = (align - (uintptr_t)d % align) % align;
        if (head > bytes) head = bytes;
        memcpy(d, s, head); /* up to the first aligned address: the streaming stores need it */
        if (align == 64) stream_copy_avx512(d + head, s + head, bytes - head);
        else stream_copy_avx2(d + head, s + head, bytes - head);
        return;
    }
#endif
    memcpy(d, s, bytes);
}

void cpu_vec_stream_fence(void)
{
#if CPU_VEC_X86
    _mm_sfence();
#endif
}

/* The fixed fold of the 16 f64 lanes (the tail is then added in order). */
static double fold16(const double l[16])
{
    double h[8];
    for (int k = 0; k < 8; k++) h[k] = l[k] + l[k + 8];
    return ((h[0] + h[1]) + (h[2] + h[3])) + ((h[4] + h[5]) + (h[6] + h[7]));
}

/* ---- portable bodies ---- */

/* The exp sums run in tiles of CPU_EXP_TILE floats: each of 16 lanes adds its exps of a tile in
 * f32 (16 terms, each at most 1 after the max is taken off: a relative error of at most 15 f32
 * roundings), and the tile's 16 partial sums go into f64 lanes. Every body adds the same terms in
 * the same order, so the sums have the same bits on every ISA. Against converting and adding
 * every vector in f64 it saves four operations per 16 exps (the softmax's cost is its exps). */
#define CPU_EXP_TILE 256 /* floats: a multiple of 16 */

/* cpu_vec_exp_sum's elements [i, n) one at a time, added to s in order (the tails); y (if not
 * NULL) receives exp(x - shift), or x - shift itself when keep_shifted. */
static double exp_sum_from(const float *x, int64_t i, int64_t n, float shift, float *y, int keep_shifted, double s)
{
    for (; i < n; i++) {
        const float d = x[i] - shift, e = expf(d);
        if (y) y[i] = keep_shifted ? d : e;
        s += e;
    }
    return s;
}

/* cpu_vec_normalize's elements [i, n), one at a time (the portable body, the AVX2 tail). */
static void normalize_from(float *y, const float *x, int64_t i, int64_t n, float mean, float rstd,
                           const float *gamma, const float *beta)
{
    for (; i < n; i++) {
        float v = (x[i] - mean) * rstd;
        if (gamma) v *= gamma[i];
        if (beta) v += beta[i];
        y[i] = v;
    }
}

/* The norm backward's scalar terms (cpu_vec_norm_bwd_*): g = dy·gamma, xh = (x - mean)·rstd in f64. */
static inline double norm_g(const float *dy, const float *gamma, int64_t i)
{
    return gamma ? (double)dy[i] * gamma[i] : (double)dy[i];
}
static inline double norm_xh(const float *x, int64_t i, double mean, double rstd) { return ((double)x[i] - mean) * rstd; }

/* The 8 lanes of Σ g (lg) and Σ g·xh (lt) folded in a fixed tree, then elements [i, n) added in order. */
static double norm_bwd_fold(const double lg[8], const double lt[8], const float *dy, const float *gamma, const float *x,
                            int64_t i, int64_t n, double mean, double rstd, double *sgx)
{
    double sg = ((lg[0] + lg[4]) + (lg[1] + lg[5])) + ((lg[2] + lg[6]) + (lg[3] + lg[7]));
    double st = ((lt[0] + lt[4]) + (lt[1] + lt[5])) + ((lt[2] + lt[6]) + (lt[3] + lt[7]));
    for (; i < n; i++) {
        const double g = norm_g(dy, gamma, i);
        sg += g;
        st += g * norm_xh(x, i, mean, rstd);
    }
    *sgx = st;
    return sg;
}

static void norm_bwd_dx_from(float *dx, const float *dy, const float *gamma, const float *x, int64_t i, int64_t n,
                             double mean, double rstd, double sg, double sgx)
{
    for (; i < n; i++) dx[i] = (float)(rstd * (norm_g(dy, gamma, i) - sg - norm_xh(x, i, mean, rstd) * sgx));
}

static void norm_bwd_colsum_from(double *dg, double *db, const float *dy, const float *x, int64_t i, int64_t n,
                                 double mean, double rstd)
{
    for (; i < n; i++) {
        dg[i] += (double)dy[i] * norm_xh(x, i, mean, rstd);
        if (db) db[i] += dy[i];
    }
}

typedef double (*lane_term)(const float *x, const float *y, int64_t i, double c);
static double t_sum(const float *x, const float *y, int64_t i, double c) { (void)y; (void)c; return x[i]; }
static double t_sq(const float *x, const float *y, int64_t i, double c) { (void)y; (void)c; return (double)x[i] * x[i]; }
static double t_dev(const float *x, const float *y, int64_t i, double c) { (void)y; double d = x[i] - c; return d * d; }
static double t_dot(const float *x, const float *y, int64_t i, double c) { (void)c; return (double)x[i] * y[i]; }

static inline double lanes_generic(const float *x, const float *y, int64_t n, double c, lane_term term)
{
    double l[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) l[k] += term(x, y, i + k, c);
    double s = fold16(l);
    for (; i < n; i++) s += term(x, y, i, c);
    return s;
}

/* ---- AVX2 bodies ---- */
#if CPU_VEC_X86
/* No software prefetch: the first passes over a row once asked for the bytes 2 KiB ahead (into the
 * next row, for rows of up to 16 KiB), which made row sums and maxima over 4096x1024 and 16384x256
 * f32 (L3-resident and 64 MiB) 1.1-2x slower on an AMD EPYC with the 2 MiB pages memory.c asks for:
 * the hardware prefetcher keeps up, the prefetches only took load slots. */
/* The 16 lanes as four 4-lane f64 accumulators: a[0] lanes 0-3, ..., a[3] lanes 12-15. */
typedef struct lanes16 { __m256d a[4]; } lanes16;

AVX2 static inline lanes16 lanes_zero(void)
{
    lanes16 l = {{_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}};
    return l;
}

/* Widen 8 floats into half h (0: lanes 0-7, 1: lanes 8-15). */
AVX2 static inline void acc8(lanes16 *l, int h, __m256 v)
{
    l->a[2 * h] = _mm256_add_pd(l->a[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    l->a[2 * h + 1] = _mm256_add_pd(l->a[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

AVX2 static inline double fold_avx(lanes16 l)
{
    double d[16];
    for (int k = 0; k < 4; k++) _mm256_storeu_pd(d + 4 * k, l.a[k]);
    return fold16(d);
}

/* Elements [i, n) of Σ x added to the lanes l (16 at a time), folded, then the tail in order. */
AVX2 static double sum_from_avx2(lanes16 l, const float *x, int64_t i, int64_t n)
{
    for (; i + 16 <= n; i += 16) {
        acc8(&l, 0, _mm256_loadu_ps(x + i));
        acc8(&l, 1, _mm256_loadu_ps(x + i + 8));
    }
    double s = fold_avx(l);
    for (; i < n; i++) s += x[i];
    return s;
}

AVX2 static double sum_avx2(const float *x, int64_t n) { return sum_from_avx2(lanes_zero(), x, 0, n); }

/* Products and squares in f64 (exact for f32 inputs), so the terms match the portable body. */
AVX2 static inline void acc8_prod(lanes16 *l, int h, __m256 u, __m256 v)
{
    __m256d u0 = _mm256_cvtps_pd(_mm256_castps256_ps128(u)), u1 = _mm256_cvtps_pd(_mm256_extractf128_ps(u, 1));
    __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    l->a[2 * h] = _mm256_add_pd(l->a[2 * h], _mm256_mul_pd(u0, v0));
    l->a[2 * h + 1] = _mm256_add_pd(l->a[2 * h + 1], _mm256_mul_pd(u1, v1));
}

AVX2 static double dot_avx2(const float *x, const float *y, int64_t n)
{
    lanes16 l = lanes_zero();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc8_prod(&l, 0, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
        acc8_prod(&l, 1, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8));
    }
    double s = fold_avx(l);
    for (; i < n; i++) s += (double)x[i] * y[i];
    return s;
}

AVX2 static inline void acc8_dev(lanes16 *l, int h, __m256 v, __m256d vc)
{
    __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vc);
    __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vc);
    l->a[2 * h] = _mm256_add_pd(l->a[2 * h], _mm256_mul_pd(d0, d0));
    l->a[2 * h + 1] = _mm256_add_pd(l->a[2 * h + 1], _mm256_mul_pd(d1, d1));
}

AVX2 static double sqdev_avx2(const float *x, int64_t n, double c)
{
    lanes16 l = lanes_zero();
    const __m256d vc = _mm256_set1_pd(c);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc8_dev(&l, 0, _mm256_loadu_ps(x + i), vc);
        acc8_dev(&l, 1, _mm256_loadu_ps(x + i + 8), vc);
    }
    double s = fold_avx(l);
    for (; i < n; i++) { double d = x[i] - c; s += d * d; }
    return s;
}

/* max (is_max) or min with NaN tracked apart (vmaxps drops a NaN in its first operand); four
 * independent running extremes over 32 elements at a time, so the compares overlap (a max or min
 * of the same values in any grouping: the same result but for the sign of an equal zero). */
/* The upper 8 lanes of v. */
AVX512 static inline __m256 hi256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

/* extreme_avx2 from element i on, with the running extremes m and NaN flags so far. */
AVX2 static float extreme_from_avx2(const float *x, int64_t i, int64_t n, int is_max, __m256 *m, __m256 nan)
{
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m[0] = is_max ? _mm256_max_ps(m[0], v) : _mm256_min_ps(m[0], v);
    }
    if (_mm256_movemask_ps(nan)) return NAN;
    for (int k = 1; k < 4; k++) m[0] = is_max ? _mm256_max_ps(m[0], m[k]) : _mm256_min_ps(m[0], m[k]);
    float l[8];
    _mm256_storeu_ps(l, m[0]);
    float r = l[0];
    for (int k = 1; k < 8; k++) r = is_max ? (l[k] > r ? l[k] : r) : (l[k] < r ? l[k] : r);
    for (; i < n; i++) {
        if (x[i] != x[i]) return NAN;
        r = is_max ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);
    }
    return r;
}

AVX2 static float extreme_avx2(const float *x, int64_t n, int is_max)
{
    const __m256 init = _mm256_set1_ps(is_max ? -INFINITY : INFINITY);
    __m256 m[4] = {init, init, init, init}, nan = _mm256_setzero_ps(), nan2 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + i + 8 * k);
            m[k] = is_max ? _mm256_max_ps(m[k], v[k]) : _mm256_min_ps(m[k], v[k]);
        }
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[0], v[1], _CMP_UNORD_Q));
        nan2 = _mm256_or_ps(nan2, _mm256_cmp_ps(v[2], v[3], _CMP_UNORD_Q));
    }
    return extreme_from_avx2(x, i, n, is_max, m, _mm256_or_ps(nan, nan2));
}

/* extreme_avx2's 32-element steps on two 16-lane vectors (its m[0..1] and m[2..3]): the same
 * running extremes, then its tail. */
AVX512 static float extreme_avx512(const float *x, int64_t n, int is_max)
{
    const __m512 init = _mm512_set1_ps(is_max ? -INFINITY : INFINITY);
    __m512 m0 = init, m1 = init;
    __mmask16 nan = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        m0 = is_max ? _mm512_max_ps(m0, v0) : _mm512_min_ps(m0, v0);
        m1 = is_max ? _mm512_max_ps(m1, v1) : _mm512_min_ps(m1, v1);
        nan |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q);
    }
    __m256 m[4] = {_mm512_castps512_ps256(m0), hi256(m0), _mm512_castps512_ps256(m1), hi256(m1)};
    return extreme_from_avx2(x, i, n, is_max, m, nan ? _mm256_castsi256_ps(_mm256_set1_epi32(-1)) : _mm256_setzero_ps());
}

AVX2 static double exp_sum_avx2(const float *x, int64_t n, float shift, float *y, int keep_shifted)
{
    lanes16 l = lanes_zero();
    int64_t i = 0;
#if GPUCORE_HAVE_SLEEF
    const __m256 vs = _mm256_set1_ps(shift);
    while (i + 16 <= n) {
        const int64_t t = n - i >= CPU_EXP_TILE ? CPU_EXP_TILE : (n - i) / 16 * 16;
        __m256 p[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t j = 0; j < t; j += 16)
            for (int h = 0; h < 2; h++) {
                const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i + j + 8 * h), vs), e = cpu_exp8(d);
                if (y) _mm256_storeu_ps(y + i + j + 8 * h, keep_shifted ? d : e);
                p[h] = _mm256_add_ps(p[h], e);
            }
        acc8(&l, 0, p[0]);
        acc8(&l, 1, p[1]);
        i += t;
    }
#endif
    double s = fold_avx(l);
    return exp_sum_from(x, i, n, shift, y, keep_shifted, s);
}

AVX2 static void axpb_avx2(float *y, const float *x, int64_t n, float a, float b)
{
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), va), vb));
    for (; i < n; i++) y[i] = x[i] * a + b;
}

AVX2 static void normalize_avx2(float *y, const float *x, int64_t n, float mean, float rstd, const float *gamma,
                                const float *beta)
{
    const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
        if (gamma) v = _mm256_mul_ps(v, _mm256_loadu_ps(gamma + i));
        if (beta) v = _mm256_add_ps(v, _mm256_loadu_ps(beta + i));
        _mm256_storeu_ps(y + i, v);
    }
    normalize_from(y, x, i, n, mean, rstd, gamma, beta);
}

/* ---- AVX-512 bodies of the row primitives: the AVX2 bodies' operations lane for lane ----
 * The 16 f64 lanes as two 8-lane accumulators (z[0]: lanes 0-7, z[1]: lanes 8-15, the AVX2 body's
 * a[0..1] and a[2..3]), 16 elements at a time as there, the tails handed to the AVX2 code: the same
 * additions in the same order, so the same bits. */
AVX512 static inline void acc16(__m512d *z, __m512 v)
{
    z[0] = _mm512_add_pd(z[0], _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    z[1] = _mm512_add_pd(z[1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* z as the AVX2 body's lanes16. */
AVX512 static inline lanes16 lanes_from16(const __m512d *z)
{
    lanes16 l = {{_mm512_castpd512_pd256(z[0]), _mm512_extractf64x4_pd(z[0], 1), _mm512_castpd512_pd256(z[1]),
                  _mm512_extractf64x4_pd(z[1], 1)}};
    return l;
}

AVX512 static double sum_avx512(const float *x, int64_t n)
{
    __m512d z[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc16(z, _mm512_loadu_ps(x + i));
    }
    return sum_from_avx2(lanes_from16(z), x, i, n);
}

/* Σ x·y (products in f64, as acc8_prod), or Σ (x - c)² (dev: as acc8_dev). */
AVX512 static inline void acc16_prod(__m512d *z, __m512 u, __m512 v)
{
    z[0] = _mm512_add_pd(z[0], _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(u)), _mm512_cvtps_pd(_mm512_castps512_ps256(v))));
    z[1] = _mm512_add_pd(z[1], _mm512_mul_pd(_mm512_cvtps_pd(hi256(u)), _mm512_cvtps_pd(hi256(v))));
}

AVX512 static double dot_avx512(const float *x, const float *y, int64_t n)
{
    __m512d z[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc16_prod(z, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i));
    }
    double s = fold_avx(lanes_from16(z));
    for (; i < n; i++) s += (double)x[i] * y[i];
    return s;
}

AVX512 static double sqdev_avx512(const float *x, int64_t n, double c)
{
    __m512d z[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    const __m512d vc = _mm512_set1_pd(c);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vc);
        const __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(hi256(v)), vc);
        z[0] = _mm512_add_pd(z[0], _mm512_mul_pd(d0, d0));
        z[1] = _mm512_add_pd(z[1], _mm512_mul_pd(d1, d1));
    }
    double s = fold_avx(lanes_from16(z));
    for (; i < n; i++) { double d = x[i] - c; s += d * d; }
    return s;
}

#if GPUCORE_HAVE_SLEEF
/* exp_sum_avx2 with cpu_exp16 (its bits) and the sums of acc16. */
AVX512 static double exp_sum_avx512(const float *x, int64_t n, float shift, float *y, int keep_shifted)
{
    __m512d z[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    int64_t i = 0;
    const __m512 vs = _mm512_set1_ps(shift);
    while (i + 16 <= n) {
        const int64_t t = n - i >= CPU_EXP_TILE ? CPU_EXP_TILE : (n - i) / 16 * 16;
        __m512 p = _mm512_setzero_ps();
        for (int64_t j = 0; j < t; j += 16) {
            const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i + j), vs), e = cpu_exp16(d);
            if (y) _mm512_storeu_ps(y + i + j, keep_shifted ? d : e);
            p = _mm512_add_ps(p, e);
        }
        acc16(z, p);
        i += t;
    }
    return exp_sum_from(x, i, n, shift, y, keep_shifted, fold_avx(lanes_from16(z)));
}
#endif

AVX512 static void axpb_avx512(float *y, const float *x, int64_t n, float a, float b)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), va), vb));
    axpb_avx2(y + i, x + i, n - i, a, b);
}

AVX512 static void normalize_avx512(float *y, const float *x, int64_t n, float mean, float rstd, const float *gamma,
                                    const float *beta)
{
    const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), vr);
        if (gamma) v = _mm512_mul_ps(v, _mm512_loadu_ps(gamma + i));
        if (beta) v = _mm512_add_ps(v, _mm512_loadu_ps(beta + i));
        _mm512_storeu_ps(y + i, v);
    }
    normalize_avx2(y + i, x + i, n - i, mean, rstd, gamma ? gamma + i : NULL, beta ? beta + i : NULL);
}

/* activation_math.h's formulas instantiated on 8 lanes with SLEEF's 1-ulp vector exp and tanh
 * (libmvec's tanh where the build has it) and cpu_erf8 above:
 * cpu_v8_gelu_erf, cpu_v8_silu_grad, ... (the same text as the scalar gpucore_gelu_erf, ...). */
#if GPUCORE_HAVE_SLEEF
#define CPU_VEC_MATH 1
#define cpu_v8m_exp cpu_exp8
#define cpu_v8m_erf cpu_erf8
#if GPUCORE_HAVE_MVEC
/* glibc libmvec's AVX2 tanhf (the vector ABI's name); see meson.build for why not SLEEF's */
AVX2 __m256 _ZGVdN8v_tanhf(__m256);
#define cpu_v8m_tanh _ZGVdN8v_tanhf
#else
#define cpu_v8m_tanh Sleef_tanhf8_u10avx2
#endif
GPUCORE_ACT_FORMULAS(AVX2 static inline, __m256, cpu_v8_, cpu_v8m_)
AVX2 static inline __m256 cpu_v8_exp(__m256 a) { return cpu_v8m_exp(a); }
AVX2 static inline __m256 cpu_v8_log(__m256 a) { return Sleef_logf8_u10avx2(a); }
AVX2 static inline __m256 cpu_v8_sqrt(__m256 a) { return _mm256_sqrt_ps(a); }         /* correctly rounded, as sqrtf */
AVX2 static inline __m256 cpu_v8_rsqrt(__m256 a) { return 1.0f / _mm256_sqrt_ps(a); } /* the table's 1/sqrtf(a) */

/* Unrolling: the bodies below take U vectors per step (CPU_V8_UNROLL, or per activation
 * CPU_V8_ACT_UNROLL). F is a long chain of dependent operations (exp's Horner FMAs), and with one
 * chain per step a core with a small FP scheduler (AMD Zen 1) waits on latency rather than issue.
 * erf's body holds its 8 intervals' coefficients in registers: unrolled, it spills, and measured
 * slower, so it stays at one vector. The functions that run these bodies are compiled with GCC's
 * pre-allocation scheduler (off by default on x86), register-pressure aware, so the unrolled chains
 * are interleaved in the code rather than left for the core to overlap. Both together, f32 on 4M
 * elements, 2 threads, AMD EPYC Zen 1: exp 3.90 -> 3.16 ms, silu 4.64 -> 3.73, sigmoid 4.50 -> 3.71,
 * gelu tanh 5.71 -> 4.07. The bits do not change: the scheduler only reorders independent
 * operations. Clang has no such per-function switch. */
#define CPU_V8_UNROLL 4
#define CPU_V8_ACT_UNROLL(N) (GPUCORE_ACT_CODE_##N == GPUCORE_ACT_CODE_GELU_ERF ? 1 : CPU_V8_UNROLL)
#if defined(__GNUC__) && !defined(__clang__)
#define CPU_V8_SCHEDULE __attribute__((optimize("schedule-insns", "sched-pressure")))
#else
#define CPU_V8_SCHEDULE
#endif

/* y[i] = F(x[i]) over n elements, U vectors per step; the tail goes through the same vector
 * function on a padded copy, so an element's value does not depend on its position. */
#define CPU_V8_MAP(F, y, x, n, U)                                                                                    \
    do {                                                                                                             \
        int64_t i_ = 0;                                                                                              \
        for (; i_ + 8 * (U) <= (n); i_ += 8 * (U)) {                                                                 \
            __m256 v_[U];                                                                                            \
            for (int k_ = 0; k_ < (U); k_++) v_[k_] = F(_mm256_loadu_ps((x) + i_ + 8 * k_));                         \
            for (int k_ = 0; k_ < (U); k_++) _mm256_storeu_ps((y) + i_ + 8 * k_, v_[k_]);                            \
        }                                                                                                            \
        for (; i_ + 8 <= (n); i_ += 8) _mm256_storeu_ps((y) + i_, F(_mm256_loadu_ps((x) + i_)));                     \
        if (i_ < (n)) {                                                                                              \
            float t_[8] = {0};                                                                                       \
            memcpy(t_, (x) + i_, sizeof(float) * (size_t)((n) - i_));                                                \
            _mm256_storeu_ps(t_, F(_mm256_loadu_ps(t_)));                                                            \
            memcpy((y) + i_, t_, sizeof(float) * (size_t)((n) - i_));                                                \
        }                                                                                                            \
    } while (0)
/* r[i] = dy[i] * G(x[i]) (the activation backward), U vectors per step, tail as above. */
#define CPU_V8_MAP_GRAD(G, r, dy, x, n, U)                                                                           \
    do {                                                                                                             \
        int64_t i_ = 0;                                                                                              \
        for (; i_ + 8 * (U) <= (n); i_ += 8 * (U)) {                                                                 \
            __m256 v_[U];                                                                                            \
            for (int k_ = 0; k_ < (U); k_++)                                                                         \
                v_[k_] = _mm256_loadu_ps((dy) + i_ + 8 * k_) * G(_mm256_loadu_ps((x) + i_ + 8 * k_));                \
            for (int k_ = 0; k_ < (U); k_++) _mm256_storeu_ps((r) + i_ + 8 * k_, v_[k_]);                            \
        }                                                                                                            \
        for (; i_ + 8 <= (n); i_ += 8)                                                                               \
            _mm256_storeu_ps((r) + i_, _mm256_loadu_ps((dy) + i_) * G(_mm256_loadu_ps((x) + i_)));                   \
        if (i_ < (n)) {                                                                                              \
            float t_[8] = {0}, d_[8] = {0};                                                                          \
            memcpy(t_, (x) + i_, sizeof(float) * (size_t)((n) - i_));                                                \
            memcpy(d_, (dy) + i_, sizeof(float) * (size_t)((n) - i_));                                               \
            _mm256_storeu_ps(t_, _mm256_loadu_ps(d_) * G(_mm256_loadu_ps(t_)));                                      \
            memcpy((r) + i_, t_, sizeof(float) * (size_t)((n) - i_));                                                \
        }                                                                                                            \
    } while (0)

/* The activations with a vector body: X(activation code suffix, forward, derivative), the names
 * after the width's prefix (cpu_v8_, cpu_v16_). */
#define CPU_VEC_ACTS(X)                                                                                              \
    X(GELU_ERF, gelu_erf, gelu_erf_grad)                                                                             \
    X(GELU_TANH, gelu_tanh, gelu_tanh_grad)                                                                          \
    X(SILU, silu, silu_grad)                                                                                         \
    X(SIGMOID, sigmoid, sigmoid_grad)                                                                                \
    X(TANH, tanh_act, tanh_grad)
/* The unary ops (libm calls in op_tables.h) with a vector body: X(op code suffix, function). */
#define CPU_VEC_UNARY(X) X(EXP, exp) X(LOG, log) X(SQRT, sqrt) X(RSQRT, rsqrt)

AVX2 CPU_V8_SCHEDULE static int act_avx2(int act, float *y, const float *x, int64_t n)
{
    switch (act) {
#define CPU_V8_CASE_(N, fwd, grad) case GPUCORE_ACT_CODE_##N: CPU_V8_MAP(cpu_v8_##fwd, y, x, n, CPU_V8_ACT_UNROLL(N)); return 1;
    CPU_VEC_ACTS(CPU_V8_CASE_)
#undef CPU_V8_CASE_
    default: return 0;
    }
}

AVX2 CPU_V8_SCHEDULE static int act_grad_avx2(int act, float *r, const float *dy, const float *x, int64_t n)
{
    switch (act) {
#define CPU_V8_CASE_(N, fwd, grad) case GPUCORE_ACT_CODE_##N: CPU_V8_MAP_GRAD(cpu_v8_##grad, r, dy, x, n, CPU_V8_ACT_UNROLL(N)); return 1;
    CPU_VEC_ACTS(CPU_V8_CASE_)
#undef CPU_V8_CASE_
    default: return 0;
    }
}

AVX2 CPU_V8_SCHEDULE static int unary_avx2(int op, float *y, const float *x, int64_t n)
{
    switch (op) {
#define CPU_V8_CASE_(N, fn) case GPUCORE_EW_##N: CPU_V8_MAP(cpu_v8_##fn, y, x, n, CPU_V8_UNROLL); return 1;
    CPU_VEC_UNARY(CPU_V8_CASE_)
#undef CPU_V8_CASE_
    default: return 0;
    }
}

/* The same formulas on 16 lanes where the CPU has AVX-512 (cpu_vec_have_avx512): cpu_exp16 and
 * SLEEF's avx512f log (the same algorithms as the 8-lane ones: the same bits lane for lane) and cpu_erf16
 * (cpu_erf8's operations). tanh is the 8-lane function above on each half (libmvec's 16-lane one
 * rounds differently from its 8-lane one), so the formula set is complete and every body gives the
 * AVX2 body's bits; the activations built on tanh run the AVX2 body (CPU_V16_ACTS). */
#define cpu_v16m_exp cpu_exp16
AVX512 static inline __m512 cpu_v16_halves(__m256 (*f)(__m256), __m512 a)
{
    const __m256 lo = f(_mm512_castps512_ps256(a));
    const __m256 hi = f(hi256(a));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}
#define cpu_v16m_erf cpu_erf16
AVX512 static inline __m512 cpu_v16m_tanh(__m512 a) { return cpu_v16_halves(cpu_v8m_tanh, a); }
GPUCORE_ACT_FORMULAS(AVX512 static inline, __m512, cpu_v16_, cpu_v16m_)
AVX512 static inline __m512 cpu_v16_exp(__m512 a) { return cpu_v16m_exp(a); }
AVX512 static inline __m512 cpu_v16_log(__m512 a) { return Sleef_logf16_u10avx512f(a); }
AVX512 static inline __m512 cpu_v16_sqrt(__m512 a) { return _mm512_sqrt_ps(a); }
AVX512 static inline __m512 cpu_v16_rsqrt(__m512 a) { return 1.0f / _mm512_sqrt_ps(a); }

/* CPU_V8_MAP and CPU_V8_MAP_GRAD on 16 lanes: a masked load and store take the tail (the
 * lanes past n compute on zeros and are not stored), so no element depends on its position. */
#define CPU_V16_MAP(F, y, x, n)                                                                                      \
    do {                                                                                                             \
        int64_t i_ = 0;                                                                                              \
        for (; i_ + 16 <= (n); i_ += 16) _mm512_storeu_ps((y) + i_, F(_mm512_loadu_ps((x) + i_)));                   \
        if (i_ < (n)) {                                                                                              \
            const __mmask16 m_ = (__mmask16)((1u << ((n) - i_)) - 1);                                                \
            _mm512_mask_storeu_ps((y) + i_, m_, F(_mm512_maskz_loadu_ps(m_, (x) + i_)));                             \
        }                                                                                                            \
    } while (0)
#define CPU_V16_MAP_GRAD(G, r, dy, x, n)                                                                             \
    do {                                                                                                             \
        int64_t i_ = 0;                                                                                              \
        for (; i_ + 16 <= (n); i_ += 16)                                                                             \
            _mm512_storeu_ps((r) + i_, _mm512_loadu_ps((dy) + i_) * G(_mm512_loadu_ps((x) + i_)));                   \
        if (i_ < (n)) {                                                                                              \
            const __mmask16 m_ = (__mmask16)((1u << ((n) - i_)) - 1);                                                \
            _mm512_mask_storeu_ps((r) + i_, m_, _mm512_maskz_loadu_ps(m_, (dy) + i_) * G(_mm512_maskz_loadu_ps(m_, (x) + i_))); \
        }                                                                                                            \
    } while (0)

/* 16 lanes for the activations whose math is exp and erf (the 16-lane exp: 2.7x less CPU time for
 * silu; the tanh GELU is written with exp); the tanh activation keeps the AVX2 body, which the
 * per-half calls only slowed (30 % more CPU time on 16 lanes, measured for the libmvec erf this
 * replaced). The same bits either way. */
#define CPU_V16_ACTS(X)                                                                                              \
    X(GELU_ERF, gelu_erf, gelu_erf_grad) X(GELU_TANH, gelu_tanh, gelu_tanh_grad) X(SILU, silu, silu_grad)            \
    X(SIGMOID, sigmoid, sigmoid_grad)

AVX512 static int act_avx512(int act, float *y, const float *x, int64_t n)
{
    switch (act) {
#define CPU_V16_CASE_(N, fwd, grad) case GPUCORE_ACT_CODE_##N: CPU_V16_MAP(cpu_v16_##fwd, y, x, n); return 1;
    CPU_V16_ACTS(CPU_V16_CASE_)
#undef CPU_V16_CASE_
    default: return act_avx2(act, y, x, n);
    }
}

AVX512 static int act_grad_avx512(int act, float *r, const float *dy, const float *x, int64_t n)
{
    switch (act) {
#define CPU_V16_CASE_(N, fwd, grad) case GPUCORE_ACT_CODE_##N: CPU_V16_MAP_GRAD(cpu_v16_##grad, r, dy, x, n); return 1;
    CPU_V16_ACTS(CPU_V16_CASE_)
#undef CPU_V16_CASE_
    default: return act_grad_avx2(act, r, dy, x, n);
    }
}

AVX512 static int unary_avx512(int op, float *y, const float *x, int64_t n)
{
    switch (op) {
#define CPU_V16_CASE_(N, fn) case GPUCORE_EW_##N: CPU_V16_MAP(cpu_v16_##fn, y, x, n); return 1;
    CPU_VEC_UNARY(CPU_V16_CASE_)
#undef CPU_V16_CASE_
    default: return 0;
    }
}
#else
#define CPU_VEC_MATH 0
#endif

/* 8 floats to bf16 with gpucore_f32_to_bf16's rounding (nearest even; NaN quieted). */
AVX2 static inline __m128i bf16x8_round(__m256 v)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08)); /* lanes 0, 2 */
}

AVX2 static inline __m256 bf16x8_widen(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* cpu_vec_sum_blocked's AVX2 body: per block, 16 f32 lanes add the block's 8 elements of each lane
 * in order; the lane sums then go into the f64 lanes, block after block; the rest 16 at a time into
 * the f64 lanes, then the tail in order (sum_from_avx2's steps). CPU_SUM_STREAMS blocks are summed
 * side by side (independent f32 chains, so the adds overlap) and go into the f64 lanes in block
 * order: the same additions in the same order as one block at a time.
 * LOAD16(p, a, b) loads 16 elements as two f32 vectors in some fixed arrangement of the 16 lanes,
 * LANES(a, b) puts two such vectors (or sums of them) in lane order (lanes 0-7 in a, 8-15 in b):
 * f32 loads them in order; bf16 takes 16 values in one load and widens the even ones with a shift
 * and the odd ones with a mask (a holds lanes 0, 2, .., 14, b lanes 1, 3, .., 15), so each lane adds
 * the same elements in the same order as in lane order, and LANES interleaves them once per block
 * (a third fewer operations per element than widening 8 at a time: on a CPU that runs 256-bit
 * operations as two halves, as Zen 1 does, the widening was the row sum's bound). */
#define CPU_SUM_STREAMS 4
#define CPU_SUM_BLOCKED_AVX2(name, T, LOAD16, LANES, TO_F32)                                                  \
    AVX2 static double name(const T *x, int64_t n)                                                           \
    {                                                                                                         \
        lanes16 l = lanes_zero();                                                                             \
        int64_t i = 0;                                                                                        \
        for (; i + CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK <= n; i += CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK) {      \
            __m256 s0[CPU_SUM_STREAMS], s1[CPU_SUM_STREAMS];                                                  \
            for (int b = 0; b < CPU_SUM_STREAMS; b++) LOAD16(x + i + b * CPU_VEC_SUM_BLOCK, s0[b], s1[b]);    \
            for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16)                                                  \
                for (int b = 0; b < CPU_SUM_STREAMS; b++) {                                                   \
                    __m256 v0, v1;                                                                            \
                    LOAD16(x + i + b * CPU_VEC_SUM_BLOCK + k, v0, v1);                                        \
                    s0[b] = _mm256_add_ps(s0[b], v0);                                                         \
                    s1[b] = _mm256_add_ps(s1[b], v1);                                                         \
                }                                                                                             \
            for (int b = 0; b < CPU_SUM_STREAMS; b++) {                                                       \
                LANES(s0[b], s1[b]);                                                                          \
                acc8(&l, 0, s0[b]);                                                                           \
                acc8(&l, 1, s1[b]);                                                                           \
            }                                                                                                 \
        }                                                                                                     \
        for (; i + CPU_VEC_SUM_BLOCK <= n; i += CPU_VEC_SUM_BLOCK) {                                          \
            __m256 s0, s1;                                                                                    \
            LOAD16(x + i, s0, s1);                                                                            \
            for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16) {                                                \
                __m256 v0, v1;                                                                                \
                LOAD16(x + i + k, v0, v1);                                                                    \
                s0 = _mm256_add_ps(s0, v0);                                                                   \
                s1 = _mm256_add_ps(s1, v1);                                                                   \
            }                                                                                                 \
            LANES(s0, s1);                                                                                    \
            acc8(&l, 0, s0);                                                                                  \
            acc8(&l, 1, s1);                                                                                  \
        }                                                                                                     \
        for (; i + 16 <= n; i += 16) {                                                                        \
            __m256 v0, v1;                                                                                    \
            LOAD16(x + i, v0, v1);                                                                            \
            LANES(v0, v1);                                                                                    \
            acc8(&l, 0, v0);                                                                                  \
            acc8(&l, 1, v1);                                                                                  \
        }                                                                                                     \
        double s = fold_avx(l);                                                                               \
        for (; i < n; i++) s += TO_F32(x[i]);                                                                 \
        return s;                                                                                             \
    }
#define CPU_F32_LOAD16(p, a, b) ((a) = _mm256_loadu_ps(p), (b) = _mm256_loadu_ps((p) + 8))
#define CPU_F32_LANES(a, b) ((void)0)
#define CPU_F32_ID(v) (v)
CPU_SUM_BLOCKED_AVX2(sum_blocked_avx2, float, CPU_F32_LOAD16, CPU_F32_LANES, CPU_F32_ID)
#define CPU_BF16_LOAD16(p, a, b)                                                                    \
    do {                                                                                            \
        const __m256i u_ = _mm256_loadu_si256((const __m256i *)(p));                               \
        (a) = _mm256_castsi256_ps(_mm256_slli_epi32(u_, 16));                                        \
        (b) = _mm256_castsi256_ps(_mm256_and_si256(u_, _mm256_set1_epi32((int)0xffff0000u)));       \
    } while (0)
#define CPU_BF16_LANES(a, b)                                                                        \
    do {                                                                                            \
        const __m256 lo_ = _mm256_unpacklo_ps(a, b), hi_ = _mm256_unpackhi_ps(a, b);                 \
        (a) = _mm256_permute2f128_ps(lo_, hi_, 0x20);                                                \
        (b) = _mm256_permute2f128_ps(lo_, hi_, 0x31);                                                \
    } while (0)
CPU_SUM_BLOCKED_AVX2(sum_blocked_bf16_avx2, uint16_t, CPU_BF16_LOAD16, CPU_BF16_LANES, gpucore_bf16_to_f32)

AVX2 static void store_bf16_avx2(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(dst + i), bf16x8_round(_mm256_loadu_ps(src + i)));
    for (; i < n; i++) dst[i] = gpucore_f32_to_bf16(src[i]);
}

AVX2 static void load_bf16_avx2(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8_widen(src + i));
    for (; i < n; i++) dst[i] = gpucore_bf16_to_f32(src[i]);
}

/* f16 <-> f32 with F16C: rounding to nearest even, as gpucore_f32_to_f16 (checked for every f32);
 * widening is exact, but F16C quiets a signalling NaN, so 8 values holding an f16 NaN take
 * gpucore_f16_to_f32 (which keeps the payload as it is). */
AVX2 static void load_f16_avx2(float *dst, const uint16_t *src, int64_t n)
{
    const __m128i expm = _mm_set1_epi16(0x7c00), mantm = _mm_set1_epi16(0x3ff), zero = _mm_setzero_si128();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        const __m128i nan = _mm_and_si128(_mm_cmpeq_epi16(_mm_and_si128(h, expm), expm),
                                          _mm_cmpgt_epi16(_mm_and_si128(h, mantm), zero));
        if (_mm_movemask_epi8(nan))
            for (int k = 0; k < 8; k++) dst[i + k] = gpucore_f16_to_f32(src[i + k]);
        else
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = gpucore_f16_to_f32(src[i]);
}

AVX2 static void store_f16_avx2(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = gpucore_f32_to_f16(src[i]);
}

/* The AVX-512 pair of the two above, 16 at a time (the same integer rounding: the same bits). */
AVX512 static inline __m256i bf16x16_round(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)))), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(hi, _mm512_set1_epi32(0x40))));
}

AVX512 static inline __m512 bf16x16_widen(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* cpu_vec_sum_blocked's AVX-512 body: one 16-lane f32 vector is the AVX2 body's two, lane for lane,
 * and the two 8-lane f64 accumulators its four, so every lane sees the same additions in the same
 * order: the same bits (CPU_SUM_STREAMS blocks side by side, as there). */
#define CPU_SUM_BLOCKED_AVX512(name, T, LOAD16, TO_F32)                                                      \
    AVX512 static inline void name##_acc(__m512d *a, __m512 v)                                               \
    {                                                                                                         \
        a[0] = _mm512_add_pd(a[0], _mm512_cvtps_pd(_mm512_castps512_ps256(v)));                               \
        a[1] = _mm512_add_pd(a[1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))); \
    }                                                                                                         \
    AVX512 static double name(const T *x, int64_t n)                                                         \
    {                                                                                                         \
        __m512d a[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};                                            \
        int64_t i = 0;                                                                                        \
        for (; i + CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK <= n; i += CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK) {      \
            __m512 s[CPU_SUM_STREAMS];                                                                        \
            for (int b = 0; b < CPU_SUM_STREAMS; b++) s[b] = LOAD16(x + i + b * CPU_VEC_SUM_BLOCK);           \
            for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16)                                                  \
                for (int b = 0; b < CPU_SUM_STREAMS; b++)                                                     \
                    s[b] = _mm512_add_ps(s[b], LOAD16(x + i + b * CPU_VEC_SUM_BLOCK + k));                    \
            for (int b = 0; b < CPU_SUM_STREAMS; b++) name##_acc(a, s[b]);                                    \
        }                                                                                                     \
        for (; i + CPU_VEC_SUM_BLOCK <= n; i += CPU_VEC_SUM_BLOCK) {                                          \
            __m512 s = LOAD16(x + i);                                                                         \
            for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16) s = _mm512_add_ps(s, LOAD16(x + i + k));          \
            name##_acc(a, s);                                                                                 \
        }                                                                                                     \
        for (; i + 16 <= n; i += 16) name##_acc(a, LOAD16(x + i));                                            \
        double d[16];                                                                                         \
        _mm512_storeu_pd(d, a[0]);                                                                            \
        _mm512_storeu_pd(d + 8, a[1]);                                                                        \
        double r = fold16(d);                                                                                 \
        for (; i < n; i++) r += TO_F32(x[i]);                                                                 \
        return r;                                                                                             \
    }
CPU_SUM_BLOCKED_AVX512(sum_blocked_avx512, float, _mm512_loadu_ps, CPU_F32_ID)
CPU_SUM_BLOCKED_AVX512(sum_blocked_bf16_avx512, uint16_t, bf16x16_widen, gpucore_bf16_to_f32)

/* The blocked products' bodies (cpu_vec_dot_blocked, cpu_vec_sum_sqdev_blocked): term i is x[i]·y[i],
 * or with sq (x[i] - c)² (y unused), each operation rounded to f32 (a multiply and an add, never fused,
 * as the portable body). Per block of CPU_VEC_SUM_BLOCK, lane k adds its 8 terms in f32 in order, then
 * the block goes into the f64 lanes; CPU_SUM_STREAMS blocks side by side for the adds' latency; the
 * AVX-512 body's 16 lanes are the AVX2 body's two halves, lane for lane. What is left after the last
 * block goes through blocked_rest in every body (the same bits). */
AVX2 static inline __m256 blocked_term8(const float *x, const float *y, int64_t j, __m256 c, int sq)
{
    const __m256 u = sq ? _mm256_sub_ps(_mm256_loadu_ps(x + j), c) : _mm256_loadu_ps(x + j);
    return _mm256_mul_ps(u, sq ? u : _mm256_loadu_ps(y + j));
}

AVX2 static inline int64_t blocked_avx2(const float *x, const float *y, int64_t n, float c, int sq, double l[16])
{
    const __m256 vc = _mm256_set1_ps(c);
    lanes16 a = lanes_zero();
    int64_t i = 0;
    for (; i + CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK <= n; i += CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK) {
        __m256 s0[CPU_SUM_STREAMS], s1[CPU_SUM_STREAMS];
        for (int b = 0; b < CPU_SUM_STREAMS; b++) {
            s0[b] = blocked_term8(x, y, i + b * CPU_VEC_SUM_BLOCK, vc, sq);
            s1[b] = blocked_term8(x, y, i + b * CPU_VEC_SUM_BLOCK + 8, vc, sq);
        }
        for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16)
            for (int b = 0; b < CPU_SUM_STREAMS; b++) {
                s0[b] = _mm256_add_ps(s0[b], blocked_term8(x, y, i + b * CPU_VEC_SUM_BLOCK + k, vc, sq));
                s1[b] = _mm256_add_ps(s1[b], blocked_term8(x, y, i + b * CPU_VEC_SUM_BLOCK + k + 8, vc, sq));
            }
        for (int b = 0; b < CPU_SUM_STREAMS; b++) {
            acc8(&a, 0, s0[b]);
            acc8(&a, 1, s1[b]);
        }
    }
    for (; i + CPU_VEC_SUM_BLOCK <= n; i += CPU_VEC_SUM_BLOCK) {
        __m256 s0 = blocked_term8(x, y, i, vc, sq), s1 = blocked_term8(x, y, i + 8, vc, sq);
        for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16) {
            s0 = _mm256_add_ps(s0, blocked_term8(x, y, i + k, vc, sq));
            s1 = _mm256_add_ps(s1, blocked_term8(x, y, i + k + 8, vc, sq));
        }
        acc8(&a, 0, s0);
        acc8(&a, 1, s1);
    }
    for (int k = 0; k < 4; k++) _mm256_storeu_pd(l + 4 * k, a.a[k]);
    return i;
}

AVX512 static inline __m512 blocked_term16(const float *x, const float *y, int64_t j, __m512 c, int sq)
{
    const __m512 u = sq ? _mm512_sub_ps(_mm512_loadu_ps(x + j), c) : _mm512_loadu_ps(x + j);
    return _mm512_mul_ps(u, sq ? u : _mm512_loadu_ps(y + j));
}

AVX512 static inline int64_t blocked_avx512(const float *x, const float *y, int64_t n, float c, int sq, double l[16])
{
    const __m512 vc = _mm512_set1_ps(c);
    __m512d a[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    int64_t i = 0;
    for (; i + CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK <= n; i += CPU_SUM_STREAMS * CPU_VEC_SUM_BLOCK) {
        __m512 s[CPU_SUM_STREAMS];
        for (int b = 0; b < CPU_SUM_STREAMS; b++) s[b] = blocked_term16(x, y, i + b * CPU_VEC_SUM_BLOCK, vc, sq);
        for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16)
            for (int b = 0; b < CPU_SUM_STREAMS; b++)
                s[b] = _mm512_add_ps(s[b], blocked_term16(x, y, i + b * CPU_VEC_SUM_BLOCK + k, vc, sq));
        for (int b = 0; b < CPU_SUM_STREAMS; b++) sum_blocked_avx512_acc(a, s[b]);
    }
    for (; i + CPU_VEC_SUM_BLOCK <= n; i += CPU_VEC_SUM_BLOCK) {
        __m512 s = blocked_term16(x, y, i, vc, sq);
        for (int k = 16; k < CPU_VEC_SUM_BLOCK; k += 16) s = _mm512_add_ps(s, blocked_term16(x, y, i + k, vc, sq));
        sum_blocked_avx512_acc(a, s);
    }
    _mm512_storeu_pd(l, a[0]);
    _mm512_storeu_pd(l + 8, a[1]);
    return i;
}

/* The two terms' bodies, each compiled with its term fixed. */
AVX2 static int64_t blocked_dot_avx2(const float *x, const float *y, int64_t n, double l[16]) { return blocked_avx2(x, y, n, 0, 0, l); }
AVX2 static int64_t blocked_sq_avx2(const float *x, int64_t n, float c, double l[16]) { return blocked_avx2(x, x, n, c, 1, l); }
AVX512 static int64_t blocked_dot_avx512(const float *x, const float *y, int64_t n, double l[16]) { return blocked_avx512(x, y, n, 0, 0, l); }
AVX512 static int64_t blocked_sq_avx512(const float *x, int64_t n, float c, double l[16]) { return blocked_avx512(x, x, n, c, 1, l); }

/* Where the CPU has AVX512-BF16: vcvtneps2bf16 rounds to nearest even and quiets a NaN exactly as
 * bf16x16_round (checked for all 2^32 inputs), but flushes subnormal inputs to zero, so 16 values
 * holding a subnormal take bf16x16_round instead. */
#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c")))
AVX512BF16 static void store_bf16_avx512bf16(uint16_t *dst, const float *src, int64_t n)
{
    const __m512i expm = _mm512_set1_epi32(0x7f800000), mantm = _mm512_set1_epi32(0x007fffff);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(src + i);
        const __m512i u = _mm512_castps_si512(v);
        const __mmask16 sub = _mm512_testn_epi32_mask(u, expm) & _mm512_test_epi32_mask(u, mantm);
        const __m256i r = sub ? bf16x16_round(v) : (__m256i)_mm512_cvtneps_pbh(v);
        _mm256_storeu_si256((__m256i *)(dst + i), r);
    }
    store_bf16_avx2(dst + i, src + i, n - i);
}

/* Whether the CPU has AVX512-BF16 (CPUID leaf 7, sub-leaf 1, EAX bit 5; asked directly: not every
 * compiler's __builtin_cpu_supports knows the name), with the AVX-512 bodies in use. */
static int probe_avx512bf16(void)
{
    unsigned a, b, c, d;
    return cpu_vec_have_avx512() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1u);
}

AVX512 static void store_bf16_avx512(uint16_t *dst, const float *src, int64_t n)
{
    static int has_bf16 = -1;
    if (cached_probe(&has_bf16, probe_avx512bf16)) {
        store_bf16_avx512bf16(dst, src, n);
        return;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(dst + i), bf16x16_round(_mm512_loadu_ps(src + i)));
    store_bf16_avx2(dst + i, src + i, n - i);
}

/* bf16 o = a op b, straight between the tensors: widened, one f32 operation, rounded once
 * (gpucore_ew_<op>'s formula; the tail calls it); 8 (AVX2) or 16 (AVX-512) at a time. */
#define CPU_BF16_BINARY(X) X(ADD, add, _mm256_add_ps, _mm512_add_ps) X(SUB, sub, _mm256_sub_ps, _mm512_sub_ps) \
    X(MUL, mul, _mm256_mul_ps, _mm512_mul_ps) X(DIV, div, _mm256_div_ps, _mm512_div_ps)
#define CPU_BF16_BINARY_BODY(N, name, vop8, vop16)                                                                 \
    AVX2 static void bf16_##name##_avx2(uint16_t *o, const uint16_t *a, const uint16_t *b, int64_t n)              \
    {                                                                                                              \
        int64_t i = 0;                                                                                             \
        for (; i + 8 <= n; i += 8)                                                                                 \
            _mm_storeu_si128((__m128i *)(o + i), bf16x8_round(vop8(bf16x8_widen(a + i), bf16x8_widen(b + i))));     \
        for (; i < n; i++) o[i] = gpucore_f32_to_bf16(gpucore_ew_##name(gpucore_bf16_to_f32(a[i]), gpucore_bf16_to_f32(b[i]))); \
    }                                                                                                              \
    AVX512 static void bf16_##name##_avx512(uint16_t *o, const uint16_t *a, const uint16_t *b, int64_t n)          \
    {                                                                                                              \
        int64_t i = 0;                                                                                             \
        for (; i + 16 <= n; i += 16)                                                                               \
            _mm256_storeu_si256((__m256i *)(o + i), bf16x16_round(vop16(bf16x16_widen(a + i), bf16x16_widen(b + i)))); \
        bf16_##name##_avx2(o + i, a + i, b + i, n - i);                                                            \
    }
CPU_BF16_BINARY(CPU_BF16_BINARY_BODY)
#undef CPU_BF16_BINARY_BODY

/* f32 o = a op b between dense tensors, 16 per step in AVX2 (also where the CPU has AVX-512: 16-lane
 * bodies of these memory-bound loops measured 0-15 % slower on an AMD EPYC at 2 threads): one IEEE
 * operation per element, so the bits of the scalar formula. The library is built for baseline
 * x86-64, where the compiler's own loop takes 4 lanes. */
#define CPU_F32_BINARY_BODY(N, name, vop8, vop16)                                                                  \
    AVX2 static void f32_##name##_avx2(float *o, const float *a, const float *b, int64_t n)                        \
    {                                                                                                              \
        int64_t i = 0;                                                                                             \
        for (; i + 16 <= n; i += 16) {                                                                             \
            _mm256_storeu_ps(o + i, vop8(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));                         \
            _mm256_storeu_ps(o + i + 8, vop8(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));             \
        }                                                                                                          \
        for (; i < n; i++) o[i] = gpucore_ew_##name(a[i], b[i]);                                                   \
    }
CPU_BF16_BINARY(CPU_F32_BINARY_BODY)
#undef CPU_F32_BINARY_BODY

/* acc += x (f32, elementwise: the same bits at any width). */
AVX2 static void add_into_avx2(float *acc, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_loadu_ps(x + i)));
        _mm256_storeu_ps(acc + i + 8, _mm256_add_ps(_mm256_loadu_ps(acc + i + 8), _mm256_loadu_ps(x + i + 8)));
    }
    for (; i < n; i++) acc[i] += x[i];
}

/* acc += (double)x, elementwise. */
AVX2 static void add_into_f64_avx2(double *acc, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_pd(acc + i, _mm256_add_pd(_mm256_loadu_pd(acc + i), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
        _mm256_storeu_pd(acc + i + 4, _mm256_add_pd(_mm256_loadu_pd(acc + i + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
    }
    for (; i < n; i++) acc[i] += x[i];
}

/* out = y · (g - d), 8 at a time (the same two roundings as the scalar loop). */
AVX2 static void mul_diff_avx2(float *out, const float *y, const float *g, int64_t n, float d)
{
    const __m256 vd = _mm256_set1_ps(d);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_sub_ps(_mm256_loadu_ps(g + i), vd));
        __m256 r1 = _mm256_mul_ps(_mm256_loadu_ps(y + i + 8), _mm256_sub_ps(_mm256_loadu_ps(g + i + 8), vd));
        _mm256_storeu_ps(out + i, r0);
        _mm256_storeu_ps(out + i + 8, r1);
    }
    for (; i < n; i++) out[i] = y[i] * (g[i] - d);
}

AVX512 static void mul_diff_avx512(float *out, const float *y, const float *g, int64_t n, float d)
{
    const __m512 vd = _mm512_set1_ps(d);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), _mm512_sub_ps(_mm512_loadu_ps(g + i), vd)));
    for (; i < n; i++) out[i] = y[i] * (g[i] - d);
}

/* The norm backward's per-element terms in f64, 4 lanes of x at i: g = dy·gamma (gamma NULL: dy)
 * and xh = (x - mean)·rstd, the scalar formulas' operations in their order (no FMA). */
AVX2 static inline __m256d norm_g4(const float *dy, const float *gamma, int64_t i)
{
    const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(dy + i));
    return gamma ? _mm256_mul_pd(d, _mm256_cvtps_pd(_mm_loadu_ps(gamma + i))) : d;
}
AVX2 static inline __m256d norm_xh4(const float *x, int64_t i, __m256d mean, __m256d rstd)
{
    return _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), mean), rstd);
}

/* cpu_vec_norm_bwd_sums: element i in lane i % 8 (two 4-lane accumulators), folded as the
 * portable body folds its 8 lanes, the tail added in order. */
AVX2 static double norm_bwd_sums_avx2(const float *dy, const float *gamma, const float *x, int64_t n, double mean,
                                      double rstd, double *sgx)
{
    const __m256d vm = _mm256_set1_pd(mean), vr = _mm256_set1_pd(rstd);
    __m256d g0 = _mm256_setzero_pd(), g1 = g0, t0 = g0, t1 = g0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256d a = norm_g4(dy, gamma, i), b = norm_g4(dy, gamma, i + 4);
        g0 = _mm256_add_pd(g0, a);
        g1 = _mm256_add_pd(g1, b);
        t0 = _mm256_add_pd(t0, _mm256_mul_pd(a, norm_xh4(x, i, vm, vr)));
        t1 = _mm256_add_pd(t1, _mm256_mul_pd(b, norm_xh4(x, i + 4, vm, vr)));
    }
    double lg[8], lt[8];
    _mm256_storeu_pd(lg, g0);
    _mm256_storeu_pd(lg + 4, g1);
    _mm256_storeu_pd(lt, t0);
    _mm256_storeu_pd(lt + 4, t1);
    return norm_bwd_fold(lg, lt, dy, gamma, x, i, n, mean, rstd, sgx);
}

/* cpu_vec_norm_bwd_dx, 4 at a time (dx may be dy: each group is read before it is written). */
AVX2 static void norm_bwd_dx_avx2(float *dx, const float *dy, const float *gamma, const float *x, int64_t n, double mean,
                                  double rstd, double sg, double sgx)
{
    const __m256d vm = _mm256_set1_pd(mean), vr = _mm256_set1_pd(rstd), vg = _mm256_set1_pd(sg), vt = _mm256_set1_pd(sgx);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d v = _mm256_sub_pd(_mm256_sub_pd(norm_g4(dy, gamma, i), vg), _mm256_mul_pd(norm_xh4(x, i, vm, vr), vt));
        _mm_storeu_ps(dx + i, _mm256_cvtpd_ps(_mm256_mul_pd(vr, v)));
    }
    norm_bwd_dx_from(dx, dy, gamma, x, i, n, mean, rstd, sg, sgx);
}

/* cpu_vec_norm_bwd_colsum, 4 columns at a time (each column's own f64 sum: the scalar bits). */
AVX2 static void norm_bwd_colsum_avx2(double *dg, double *db, const float *dy, const float *x, int64_t n, double mean,
                                      double rstd)
{
    const __m256d vm = _mm256_set1_pd(mean), vr = _mm256_set1_pd(rstd);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d g = norm_g4(dy, NULL, i);
        _mm256_storeu_pd(dg + i, _mm256_add_pd(_mm256_loadu_pd(dg + i), _mm256_mul_pd(g, norm_xh4(x, i, vm, vr))));
        if (db) _mm256_storeu_pd(db + i, _mm256_add_pd(_mm256_loadu_pd(db + i), g));
    }
    norm_bwd_colsum_from(dg, db, dy, x, i, n, mean, rstd);
}
#endif

cpu_vec_bf16_binary_fn cpu_vec_bf16_binary(int op)
{
#if CPU_VEC_X86
    if (!cpu_vec_have_avx2()) return NULL;
    const int wide = cpu_vec_have_avx512();
    switch (op) {
#define CPU_BF16_BINARY_CASE(N, name, vop8, vop16) case GPUCORE_EW_##N: return wide ? bf16_##name##_avx512 : bf16_##name##_avx2;
    CPU_BF16_BINARY(CPU_BF16_BINARY_CASE)
#undef CPU_BF16_BINARY_CASE
    default: return NULL;
    }
#else
    (void)op;
    return NULL;
#endif
}

cpu_vec_f32_binary_fn cpu_vec_f32_binary(int op)
{
#if CPU_VEC_X86
    if (!cpu_vec_have_avx2()) return NULL;
    switch (op) {
#define CPU_F32_BINARY_CASE(N, name, vop8, vop16) case GPUCORE_EW_##N: return f32_##name##_avx2;
    CPU_BF16_BINARY(CPU_F32_BINARY_CASE)
#undef CPU_F32_BINARY_CASE
    default: return NULL;
    }
#else
    (void)op;
    return NULL;
#endif
}

/* ---- the entry points ---- */

float cpu_vec_max(const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return extreme_avx512(x, n, 1);
    if (cpu_vec_have_avx2()) return extreme_avx2(x, n, 1);
#endif
    float r = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return NAN;
        r = x[i] > r ? x[i] : r;
    }
    return r;
}

float cpu_vec_min(const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return extreme_avx512(x, n, 0);
    if (cpu_vec_have_avx2()) return extreme_avx2(x, n, 0);
#endif
    float r = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return NAN;
        r = x[i] < r ? x[i] : r;
    }
    return r;
}

double cpu_vec_sum(const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return sum_avx512(x, n);
    if (cpu_vec_have_avx2()) return sum_avx2(x, n);
#endif
    return lanes_generic(x, NULL, n, 0, t_sum);
}

double cpu_vec_sum_blocked_bf16(const uint16_t *x, int64_t n, float *scratch)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return sum_blocked_bf16_avx512(x, n);
    if (cpu_vec_have_avx2()) return sum_blocked_bf16_avx2(x, n);
#endif
    cpu_vec_load(scratch, x, GPUCORE_KDT_BF16, n);
    return cpu_vec_sum_blocked(scratch, n);
}

double cpu_vec_sum_blocked(const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return sum_blocked_avx512(x, n);
    if (cpu_vec_have_avx2()) return sum_blocked_avx2(x, n);
#endif
    double l[16] = {0};
    int64_t i = 0;
    for (; i + CPU_VEC_SUM_BLOCK <= n; i += CPU_VEC_SUM_BLOCK)
        for (int k = 0; k < 16; k++) {
            float f = x[i + k];
            for (int j = 16; j < CPU_VEC_SUM_BLOCK; j += 16) f += x[i + j + k];
            l[k] += f;
        }
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) l[k] += x[i + k];
    double s = fold16(l);
    for (; i < n; i++) s += x[i];
    return s;
}

/* The blocked products from element i on (the whole of the portable body, the rest after the vector
 * bodies' blocks): blocks of CPU_VEC_SUM_BLOCK in f32 per lane, the 16-element groups after them in
 * f64 lanes (exact products), the fold, the tail in order. */
static double blocked_rest(const float *x, const float *y, int64_t i, int64_t n, float c, int sq, double l[16])
{
    for (; i + CPU_VEC_SUM_BLOCK <= n; i += CPU_VEC_SUM_BLOCK)
        for (int k = 0; k < 16; k++) {
            float f = 0;
            for (int j = 0; j < CPU_VEC_SUM_BLOCK; j += 16) {
                const float u = sq ? x[i + j + k] - c : x[i + j + k];
                const float p = u * (sq ? u : y[i + j + k]); /* rounded on its own: no contraction */
                f = j ? f + p : p;
            }
            l[k] += f;
        }
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) {
            const double u = sq ? (double)x[i + k] - c : x[i + k];
            l[k] += u * (sq ? u : (double)y[i + k]);
        }
    double s = fold16(l);
    for (; i < n; i++) {
        const double u = sq ? (double)x[i] - c : x[i];
        s += u * (sq ? u : (double)y[i]);
    }
    return s;
}

static double blocked(const float *x, const float *y, int64_t n, float c, int sq)
{
    double l[16] = {0};
    int64_t i = 0;
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) i = sq ? blocked_sq_avx512(x, n, c, l) : blocked_dot_avx512(x, y, n, l);
    else if (cpu_vec_have_avx2()) i = sq ? blocked_sq_avx2(x, n, c, l) : blocked_dot_avx2(x, y, n, l);
#endif
    return blocked_rest(x, y, i, n, c, sq, l);
}

double cpu_vec_dot_blocked(const float *x, const float *y, int64_t n) { return blocked(x, y, n, 0.0f, 0); }

double cpu_vec_sum_sqdev_blocked(const float *x, int64_t n, float center) { return blocked(x, NULL, n, center, 1); }

double cpu_vec_sumsq(const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return dot_avx512(x, x, n);
    if (cpu_vec_have_avx2()) return dot_avx2(x, x, n);
#endif
    return lanes_generic(x, NULL, n, 0, t_sq);
}

double cpu_vec_sum_sqdev(const float *x, int64_t n, double center)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return sqdev_avx512(x, n, center);
    if (cpu_vec_have_avx2()) return sqdev_avx2(x, n, center);
#endif
    return lanes_generic(x, NULL, n, center, t_dev);
}

double cpu_vec_dot(const float *x, const float *y, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) return dot_avx512(x, y, n);
    if (cpu_vec_have_avx2()) return dot_avx2(x, y, n);
#endif
    return lanes_generic(x, y, n, 0, t_dot);
}

static double exp_sum(const float *x, int64_t n, float shift, float *y, int keep_shifted)
{
#if CPU_VEC_X86
#if GPUCORE_HAVE_SLEEF
    if (cpu_vec_have_avx512()) return exp_sum_avx512(x, n, shift, y, keep_shifted);
#endif
    if (cpu_vec_have_avx2()) return exp_sum_avx2(x, n, shift, y, keep_shifted);
#endif
    double l[16] = {0};
    int64_t i = 0;
    while (i + 16 <= n) { /* the tiles of the SIMD bodies (see CPU_EXP_TILE), libm's exps */
        const int64_t t = n - i >= CPU_EXP_TILE ? CPU_EXP_TILE : (n - i) / 16 * 16;
        float p[16] = {0};
        for (int64_t j = 0; j < t; j += 16)
            for (int k = 0; k < 16; k++) {
                const float d = x[i + j + k] - shift, e = expf(d);
                if (y) y[i + j + k] = keep_shifted ? d : e;
                p[k] += e;
            }
        for (int k = 0; k < 16; k++) l[k] += p[k];
        i += t;
    }
    double s = fold16(l);
    return exp_sum_from(x, i, n, shift, y, keep_shifted, s);
}

double cpu_vec_exp_sum(const float *x, int64_t n, float shift, float *y)
{
    return exp_sum(x, n, shift, y, 0);
}

double cpu_vec_exp_sum_shifted(const float *x, int64_t n, float shift, float *d)
{
    return exp_sum(x, n, shift, d, 1);
}

void cpu_vec_axpb(float *y, const float *x, int64_t n, float a, float b)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) { axpb_avx512(y, x, n, a, b); return; }
    if (cpu_vec_have_avx2()) { axpb_avx2(y, x, n, a, b); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}

void cpu_vec_gelu_tanh(float *y, const float *x, int64_t n)
{
    if (!cpu_vec_act(GPUCORE_ACT_CODE_GELU_TANH, y, x, n))
        for (int64_t i = 0; i < n; i++) y[i] = gpucore_gelu_tanh(x[i]);
}

int cpu_vec_act(int act, float *y, const float *x, int64_t n)
{
#if CPU_VEC_X86 && CPU_VEC_MATH
    if (cpu_vec_have_avx512()) return act_avx512(act, y, x, n);
    if (cpu_vec_have_avx2()) return act_avx2(act, y, x, n);
#endif
    (void)act, (void)y, (void)x, (void)n;
    return 0;
}

int cpu_vec_act_grad(int act, float *r, const float *dy, const float *x, int64_t n)
{
#if CPU_VEC_X86 && CPU_VEC_MATH
    if (cpu_vec_have_avx512()) return act_grad_avx512(act, r, dy, x, n);
    if (cpu_vec_have_avx2()) return act_grad_avx2(act, r, dy, x, n);
#endif
    (void)act, (void)r, (void)dy, (void)x, (void)n;
    return 0;
}

int cpu_vec_unary(int op, float *y, const float *x, int64_t n)
{
#if CPU_VEC_X86 && CPU_VEC_MATH
    if (cpu_vec_have_avx512()) return unary_avx512(op, y, x, n);
    if (cpu_vec_have_avx2()) return unary_avx2(op, y, x, n);
#endif
    (void)op, (void)y, (void)x, (void)n;
    return 0;
}

/* Plain loops: the compiler vectorises them (no reassociation needed). */
void cpu_vec_mul_diff(float *out, const float *y, const float *g, int64_t n, float d)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) { mul_diff_avx512(out, y, g, n, d); return; }
    if (cpu_vec_have_avx2()) { mul_diff_avx2(out, y, g, n, d); return; }
#endif
    for (int64_t i = 0; i < n; i++) out[i] = y[i] * (g[i] - d);
}

void cpu_vec_add_into(float *acc, const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx2()) { add_into_avx2(acc, x, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

void cpu_vec_add_into_f64(double *acc, const float *x, int64_t n)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx2()) { add_into_f64_avx2(acc, x, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

void cpu_vec_axpy(float *out, const float *x, const float *g, int64_t n, float a)
{
    for (int64_t i = 0; i < n; i++) out[i] = g[i] + a * x[i];
}

void cpu_vec_normalize(float *y, const float *x, int64_t n, float mean, float rstd, const float *gamma,
                       const float *beta)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx512()) { normalize_avx512(y, x, n, mean, rstd, gamma, beta); return; }
    if (cpu_vec_have_avx2()) { normalize_avx2(y, x, n, mean, rstd, gamma, beta); return; }
#endif
    normalize_from(y, x, 0, n, mean, rstd, gamma, beta);
}

void cpu_vec_load(float *dst, const void *src, int dt, int64_t n)
{
    if (dt == GPUCORE_KDT_F32) { memcpy(dst, src, sizeof(float) * (size_t)n); return; }
#if CPU_VEC_X86
    if (dt == GPUCORE_KDT_BF16 && cpu_vec_have_avx2()) { load_bf16_avx2(dst, src, n); return; }
    if (dt == GPUCORE_KDT_F16 && cpu_vec_have_avx2()) { load_f16_avx2(dst, src, n); return; }
#endif
    const int es = gpucore_kdt_size(dt);
    for (int64_t i = 0; i < n; i++) dst[i] = gpucore_load_as_f32((const char *)src + i * es, dt);
}

void cpu_vec_store(void *dst, int dt, const float *src, int64_t n)
{
    if (dt == GPUCORE_KDT_F32) { memcpy(dst, src, sizeof(float) * (size_t)n); return; }
#if CPU_VEC_X86
    if (dt == GPUCORE_KDT_BF16 && cpu_vec_have_avx512()) { store_bf16_avx512(dst, src, n); return; }
    if (dt == GPUCORE_KDT_BF16 && cpu_vec_have_avx2()) { store_bf16_avx2(dst, src, n); return; }
    if (dt == GPUCORE_KDT_F16 && cpu_vec_have_avx2()) { store_f16_avx2(dst, src, n); return; }
#endif
    const int es = gpucore_kdt_size(dt);
    for (int64_t i = 0; i < n; i++) gpucore_store_from_f32((char *)dst + i * es, dt, src[i]);
}

double cpu_vec_norm_bwd_sums(const float *dy, const float *gamma, const float *x, int64_t n, double mean, double rstd,
                             double *sgx)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx2()) return norm_bwd_sums_avx2(dy, gamma, x, n, mean, rstd, sgx);
#endif
    double lg[8] = {0}, lt[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            const double g = norm_g(dy, gamma, i + k);
            lg[k] += g;
            lt[k] += g * norm_xh(x, i + k, mean, rstd);
        }
    return norm_bwd_fold(lg, lt, dy, gamma, x, i, n, mean, rstd, sgx);
}

void cpu_vec_norm_bwd_dx(float *dx, const float *dy, const float *gamma, const float *x, int64_t n, double mean,
                         double rstd, double sg, double sgx)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx2()) { norm_bwd_dx_avx2(dx, dy, gamma, x, n, mean, rstd, sg, sgx); return; }
#endif
    norm_bwd_dx_from(dx, dy, gamma, x, 0, n, mean, rstd, sg, sgx);
}

void cpu_vec_norm_bwd_colsum(double *dg, double *db, const float *dy, const float *x, int64_t n, double mean, double rstd)
{
#if CPU_VEC_X86
    if (cpu_vec_have_avx2()) { norm_bwd_colsum_avx2(dg, db, dy, x, n, mean, rstd); return; }
#endif
    norm_bwd_colsum_from(dg, db, dy, x, 0, n, mean, rstd);
}
