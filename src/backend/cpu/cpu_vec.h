/*
 * cpu_vec.h — the CPU backend's vector primitives on contiguous f32 arrays, used
 * by the reductions and the row ops (softmax, norms, cross-entropy). Each call
 * picks, once per call, an AVX-512 body where the running CPU has AVX-512F/BW,
 * else an AVX2+FMA body (with SLEEF's vector expf where the build has SLEEF) when
 * it has that, else a portable body; the AVX-512 and AVX2 bodies give the same bits.
 *
 * Determinism: every sum is accumulated in f64 in 16 fixed lanes (lane k takes
 * the elements i with i % 16 == k), the lanes are folded in a fixed tree, then
 * the tail is added in order. The result depends only on the data and n, never
 * on the thread count (callers give each row/chunk to one thread).
 */
#ifndef GPUCORE_CPU_VEC_H
#define GPUCORE_CPU_VEC_H

#include <stdint.h>
#include "core/internal.h"

/* Whether the running CPU has AVX2 and FMA (the bodies the calls below choose); 0 when the
 * environment variable GPUCORE_CPU_PORTABLE is set to anything but "" or "0" at the first call
 * (so tests run the portable bodies on an AVX2 machine too). */
GPUCORE_HIDDEN int cpu_vec_have_avx2(void);
/* Whether the bodies that have a 16-lane AVX-512 version (bf16 arithmetic and rounding) take it:
 * AVX-512F/BW present, cpu_vec_have_avx2(), and GPUCORE_CPU_NO_AVX512 unset or "0" (so tests run
 * the AVX2 bodies on an AVX-512 machine). Same bits as the AVX2 bodies. */
GPUCORE_HIDDEN int cpu_vec_have_avx512(void);
/* Largest element; NaN when any element is NaN; -inf when n == 0. */
GPUCORE_HIDDEN float cpu_vec_max(const float *x, int64_t n);
/* Smallest element; NaN when any element is NaN; +inf when n == 0. */
GPUCORE_HIDDEN float cpu_vec_min(const float *x, int64_t n);
/* Σ x (f64 lanes). */
GPUCORE_HIDDEN double cpu_vec_sum(const float *x, int64_t n);
/* Σ x for the reductions: blocks of CPU_VEC_SUM_BLOCK elements, each of the 16 lanes first adds
 * its 8 elements of a block in f32 (in order), then the lane sums accumulate in the f64 lanes as
 * above (a relative error of at most ~8 f32 roundings of Σ|x|, well inside the reductions' 1e-5;
 * four times fewer widenings than cpu_vec_sum). Same bits in both bodies, any thread count. */
#define CPU_VEC_SUM_BLOCK 128
GPUCORE_HIDDEN double cpu_vec_sum_blocked(const float *x, int64_t n);
/* cpu_vec_sum_blocked of n bf16 values (the same bits), widened in registers where the CPU has AVX2;
 * the portable body widens into scratch (n floats) first. */
GPUCORE_HIDDEN double cpu_vec_sum_blocked_bf16(const uint16_t *x, int64_t n, float *scratch);
/* Σ x² (f64 lanes). */
GPUCORE_HIDDEN double cpu_vec_sumsq(const float *x, int64_t n);
/* Σ (x - center)² with x and center in f64 (f64 lanes). */
GPUCORE_HIDDEN double cpu_vec_sum_sqdev(const float *x, int64_t n, double center);
/* Σ x·y (f64 lanes). */
GPUCORE_HIDDEN double cpu_vec_dot(const float *x, const float *y, int64_t n);
/* Σ x·y as cpu_vec_sum_blocked sums: per block each lane adds its 8 products (each rounded to f32)
 * in f32, then the f64 lanes (a relative error of at most ~8 f32 roundings of Σ|x·y|); the same bits
 * in every body. For the softmax backward, whose f64-widened dot product was its bound. */
GPUCORE_HIDDEN double cpu_vec_dot_blocked(const float *x, const float *y, int64_t n);
/* Σ (x - center)² blocked the same way, x - center and its square each rounded to f32 (the LayerNorm
 * and RMSNorm forward's variance about their f32 mean). */
GPUCORE_HIDDEN double cpu_vec_sum_sqdev_blocked(const float *x, int64_t n, float center);
/* y = exp(x - shift) in f32 (y may be NULL: only the sum), returns Σ y (per lane in f32 over
 * tiles of 256, then f64 lanes). Every caller passes a shift at or above max x (the max, or the
 * log-sum-exp), so each term is at most 1 and a tile's f32 sum loses at most 15 roundings. */
GPUCORE_HIDDEN double cpu_vec_exp_sum(const float *x, int64_t n, float shift, float *y);
/* d = x - shift (d may be x), returns Σ exp(d) with the bits of cpu_vec_exp_sum: the shifted
 * values are written in the pass that computes the exps, where the stores cost nothing. */
GPUCORE_HIDDEN double cpu_vec_exp_sum_shifted(const float *x, int64_t n, float shift, float *d);
/* y = x · a + b (y may be x). */
GPUCORE_HIDDEN void cpu_vec_axpb(float *y, const float *x, int64_t n, float a, float b);
/* out = y · (g - d) (the softmax backward). */
GPUCORE_HIDDEN void cpu_vec_mul_diff(float *out, const float *y, const float *g, int64_t n, float d);
/* acc += x elementwise in f32, and acc += x widened to f64 (the column sums' runs). */
GPUCORE_HIDDEN void cpu_vec_add_into(float *acc, const float *x, int64_t n);
GPUCORE_HIDDEN void cpu_vec_add_into_f64(double *acc, const float *x, int64_t n);
/* out = g + a · x (out may be x or g). */
GPUCORE_HIDDEN void cpu_vec_axpy(float *out, const float *x, const float *g, int64_t n, float a);
/* y = GELU(x), the tanh form (activation_math.h's gpucore_gelu_tanh; y may be x). */
GPUCORE_HIDDEN void cpu_vec_gelu_tanh(float *y, const float *x, int64_t n);
/* The elementwise family's transcendental math, 8 lanes at a time where the CPU has AVX2 and the
 * build SLEEF (1-ulp vector exp/tanh/log, a table erf within 6.4e-8; activation_math.h's formulas instantiated on vectors):
 * y = act(x) for activation code act, r = dy · act'(x), y = op(x) for unary op code op (a
 * GPUCORE_EW_* code). Each returns 1 when it computed, 0 when there is no vector body for that
 * code here (the caller then runs the scalar formula). y/r may alias x or dy. */
GPUCORE_HIDDEN int cpu_vec_act(int act, float *y, const float *x, int64_t n);
GPUCORE_HIDDEN int cpu_vec_act_grad(int act, float *r, const float *dy, const float *x, int64_t n);
GPUCORE_HIDDEN int cpu_vec_unary(int op, float *y, const float *x, int64_t n);
/* The LayerNorm/RMSNorm backward (cpu_ops_rows.c), in f64 from f32 operands, with g = dy·gamma (gamma
 * NULL: g = dy) and xh = (x - mean)·rstd: cpu_vec_norm_bwd_sums returns Σ g and sets *sgx = Σ g·xh (8
 * fixed f64 lanes, lane k taking i % 8 == k, a fixed fold, the tail in order: the same bits in both
 * bodies); cpu_vec_norm_bwd_dx sets dx = rstd·(g - sg - xh·sgx) rounded to f32 (dx may be dy);
 * cpu_vec_norm_bwd_colsum adds dy·xh into dg[i] and dy into db[i] (db may be NULL), each element
 * with the scalar formula's roundings. */
GPUCORE_HIDDEN double cpu_vec_norm_bwd_sums(const float *dy, const float *gamma, const float *x, int64_t n, double mean,
                                            double rstd, double *sgx);
GPUCORE_HIDDEN void cpu_vec_norm_bwd_dx(float *dx, const float *dy, const float *gamma, const float *x, int64_t n,
                                        double mean, double rstd, double sg, double sgx);
GPUCORE_HIDDEN void cpu_vec_norm_bwd_colsum(double *dg, double *db, const float *dy, const float *x, int64_t n,
                                            double mean, double rstd);
/* y = (x - mean) · rstd, then · gamma[c] and + beta[c] where given (NULL: skipped). */
GPUCORE_HIDDEN void cpu_vec_normalize(float *y, const float *x, int64_t n, float mean, float rstd,
                                      const float *gamma, const float *beta);
/* The dense bf16 binary body of elementwise op code op (GPUCORE_EW_ADD/SUB/MUL/DIV): o = a op b for
 * n elements, widened in registers and rounded once (the bits of the staged f32 path); NULL when the
 * CPU (or GPUCORE_CPU_PORTABLE) has no vector body or op has none. Chosen once per call. */
typedef void (*cpu_vec_bf16_binary_fn)(uint16_t *o, const uint16_t *a, const uint16_t *b, int64_t n);
GPUCORE_HIDDEN cpu_vec_bf16_binary_fn cpu_vec_bf16_binary(int op);
/* The same for dense f32 operands: o = a op b in AVX2, 16 at a time (the scalar formula's bits);
 * NULL as above. */
typedef void (*cpu_vec_f32_binary_fn)(float *o, const float *a, const float *b, int64_t n);
GPUCORE_HIDDEN cpu_vec_f32_binary_fn cpu_vec_f32_binary(int op);
/* The Philox4x32-10 blocks of counters counter .. counter+nblocks-1 under seed, block b's four words
 * at out[4b .. 4b+3]: gpucore_philox4x32_10's bits, 8 blocks at a time in AVX2 (cpu_philox.c). */
GPUCORE_HIDDEN void cpu_vec_philox(uint64_t seed, uint64_t counter, int64_t nblocks, uint32_t *out);
/* n elements of dtype dt (a GPUCORE_KDT_* code) widened to f32, and f32 rounded back. */
GPUCORE_HIDDEN void cpu_vec_load(float *dst, const void *src, int dt, int64_t n);
GPUCORE_HIDDEN void cpu_vec_store(void *dst, int dt, const float *src, int64_t n);

/* Streaming (non-temporal) stores, for an op whose operands together exceed the last-level cache:
 * its output would be evicted before anyone reads it, and a streaming store skips reading each
 * output line in first (a third less memory traffic for c = a + b). cpu_vec_stream_min_bytes is the
 * footprint from which an op streams: 1.25x the size of this core's L3 (CPUID; 32 MiB where it
 * says nothing; at 1x, a unary op on 4M f32 that a loop repeats on the same tensors measured slower
 * streamed, its operands then partly cached, while c = a + b on 4M f32, 1.5x, runs 1.3x faster), or
 * $GPUCORE_CPU_STREAM_MIN_BYTES (tests: 1 streams every op; 0 turns streaming off); SIZE_MAX where
 * the CPU has no AVX2. cpu_vec_stream_copy copies bytes to dst with streaming stores for its
 * aligned middle (plain copies for the ends); the thread then calls cpu_vec_stream_fence before
 * the data may be read elsewhere (streaming stores are not ordered with other stores). */
GPUCORE_HIDDEN size_t cpu_vec_stream_min_bytes(void);
GPUCORE_HIDDEN void cpu_vec_stream_copy(void *dst, const void *src, size_t bytes);
GPUCORE_HIDDEN void cpu_vec_stream_fence(void);

#endif
