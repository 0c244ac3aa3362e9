/*
 * cpu_internal.h — what the CPU backend's files share: the stream queue and
 * the op entry points cpu_backend.c puts in the vtable.
 */
#ifndef GPUCORE_CPU_INTERNAL_H
#define GPUCORE_CPU_INTERNAL_H

#include "cpu_stream.h"

/* for (int64_t i = 0; i < n; i++) { body }: split over the OpenMP threads (schedule static)
 * when `parallel` is true, else a plain loop right here. Use it instead of `omp parallel for
 * if (...)`: entering an OpenMP region whose if() is false still costs libgomp a team set-up
 * (an allocation and futex calls), a large part of a small op. The body (which may contain
 * commas) runs the same for each i either way. */
#define CPU_PARALLEL_FOR(parallel, i, n, ...)                                     \
    do {                                                                          \
        const int64_t cpu_for_n_ = (n);                                           \
        if (parallel) {                                                           \
            _Pragma("omp parallel for schedule(static)")                          \
            for (int64_t i = 0; i < cpu_for_n_; i++) { __VA_ARGS__ }              \
        } else {                                                                  \
            for (int64_t i = 0; i < cpu_for_n_; i++) { __VA_ARGS__ }              \
        }                                                                         \
    } while (0)

/* cpu_plan_cache.c: a bounded (least recently used out), thread-safe cache of prepared plans
 * (oneDNN primitives and what runs them) keyed by the bytes of a key; one per context. get
 * returns the plan of key, building it with build(key, arg) on a miss (a NULL plan is cached
 * too: "declined"), and a handle the caller gives back to release once it no longer runs the
 * plan; destroy frees a plan once it is evicted and released, or with the cache. */
typedef struct cpu_plan_cache cpu_plan_cache;
GPUCORE_HIDDEN cpu_plan_cache *cpu_plan_cache_create(int capacity);
/* The thread policy (cpu_threads.c): applied once, before the first CPU context's ops;
 * ticked by the stream threads before each task (a clock read; a look at the machine every
 * 20 ms under the adaptive policy); described for gpucore_component_version("openmp"). */
GPUCORE_HIDDEN void cpu_thread_policy_apply(void);
GPUCORE_HIDDEN void cpu_thread_policy_tick(void);
/* Whether the policy sees the machine's CPUs shared now (idle threads should sleep at once). */
GPUCORE_HIDDEN int cpu_thread_policy_shared(void);
/* cpu_team.c: fn(arg, begin, end) over units [0, units) in parts of whole units, spread over a
 * persistent team of omp_get_max_threads() threads (the caller one of them) when threaded, else
 * one call on this thread; returns when all have run. */
typedef void (*cpu_team_fn)(void *arg, int64_t begin, int64_t end);
GPUCORE_HIDDEN void cpu_team_run(cpu_team_fn fn, void *arg, int64_t units, int threaded);
GPUCORE_HIDDEN void cpu_thread_policy_describe(char *buf, size_t len);
GPUCORE_HIDDEN void cpu_plan_cache_destroy(cpu_plan_cache *c);
GPUCORE_HIDDEN void *cpu_plan_cache_get(cpu_plan_cache *c, const void *key, size_t key_len,
                                        void *(*build)(const void *key, void *arg), void *arg,
                                        void (*destroy)(void *plan), void **handle);
GPUCORE_HIDDEN void cpu_plan_cache_release(cpu_plan_cache *c, void *handle);
GPUCORE_HIDDEN int cpu_plan_cache_size(cpu_plan_cache *c);
/* A buffer of at least bytes owned by the calling thread (grown, never shrunk; freed when the thread
 * exits), for oneDNN's user scratchpad; NULL when out of memory. Valid until this thread's next call. */
GPUCORE_HIDDEN void *cpu_plan_scratch(size_t bytes);
/* Plans per context (environment variable GPUCORE_CPU_PLAN_CACHE, read at context creation,
 * overrides it): more distinct GEMM/conv shapes than this rebuild on reuse (a rebuild is
 * oneDNN's descriptor work plus its own primitive-cache lookup, not a JIT compile). */
#define CPU_PLAN_CACHE_CAPACITY 64

/* The CPU backend's per-context state (the bctx of the vtable calls). */
typedef struct cpu_context {
    cpu_plan_cache *plans; /* NULL when it could not be allocated: oneDNN paths then decline */
} cpu_context;

GPUCORE_HIDDEN gpucore_status cpu_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s);
GPUCORE_HIDDEN gpucore_status cpu_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s);
/* cpu_quant.c */
GPUCORE_HIDDEN gpucore_status cpu_quant(void *bctx, const struct gpucore_quant_args *args, void *s);
/* cpu_quant_linear.c: a GEMM with a quantized weight (kernels/quant_matmul.h) */
GPUCORE_HIDDEN gpucore_status cpu_quant_matmul(void *bctx, const struct gpucore_qmm_args *args, void *s);
GPUCORE_HIDDEN gpucore_status cpu_random(void *bctx, const gpucore_view *dst, int dist, double a, double b,
                                         uint64_t seed, uint64_t offset, void *s);
/* cpu_matmul.c */
GPUCORE_HIDDEN gpucore_status cpu_matmul(void *bctx, const gpucore_gemm_desc *desc, void *s);
/* cpu_gemv.c: whether a GEMM is a matrix-vector product that path takes (D with at most 4 columns,
 * op(A) rows and op(B) columns contiguous in k, f32 or bf16 throughout, bias/ReLU/GELU at most, one
 * batch, an AVX2 CPU), and running it (on the calling thread, which is the stream's). */
GPUCORE_HIDDEN int cpu_gemv_takes(const gpucore_gemm_desc *g);
GPUCORE_HIDDEN gpucore_status cpu_gemv_run(const gpucore_gemm_desc *g);
/* out[j·ldo + i] = Σ_{p < k} w[i·ldw + p]·x[j·ldx + p] for rows i < m of w and n <= 4 vectors x, f32
 * with f32 accumulation, on the calling thread (a decode step's attention scores). Returns 0 when the
 * CPU lacks AVX2 (the caller computes them otherwise). */
GPUCORE_HIDDEN int cpu_gemv_dots_f32(const float *w, int64_t ldw, int64_t m, const float *x, int64_t ldx, int n,
                                     int64_t k, float *out, int64_t ldo);
/* The CPU backend's one f32 GEMM (cpu_matmul.c), row-major like cblas_sgemm(CblasRowMajor):
 * C[m,n] (ld ldc) = alpha·op(A)·op(B) + beta·C, op(A) [m,k] (ta: A stored [k,m], ld lda),
 * op(B) [k,n] (tb: B stored [n,k], ld ldb). beta == 0 never reads C. OpenBLAS sgemm where the
 * build has it and the sizes fit its int, else a blocked C loop (each element sums its k
 * terms in order). Runs on the calling thread (OpenBLAS / OpenMP thread it). */
/* cpu_attention.c: rows [row0, row0+n) x [0, cols) of an attention operand at (b, h) as f32
 * [n][cols], and back (both attention paths pack and unpack through these). */
GPUCORE_HIDDEN void cpu_attn_load_rows(const gpucore_attn_tensor *t, int dt, int64_t b, int64_t h, int64_t row0,
                                       int64_t n, int64_t cols, float *dst);
GPUCORE_HIDDEN void cpu_attn_store_rows(const gpucore_attn_tensor *t, int dt, int64_t b, int64_t h, int64_t row0,
                                        int64_t n, int64_t cols, const float *src);
/* cpu_attention_gemm.c: whether attention args go through whole-head GEMMs, and that path. */
GPUCORE_HIDDEN int cpu_attention_gemm_takes(const gpucore_attn_args *a);
GPUCORE_HIDDEN gpucore_status cpu_attention_gemm_run(const gpucore_attn_args *a);
GPUCORE_HIDDEN gpucore_status cpu_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                                        int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* tensor ops (cpu_ops_elementwise.c, cpu_ops_reduce.c, cpu_ops_rows.c) */
GPUCORE_HIDDEN gpucore_status cpu_elementwise(void *bctx, const gpucore_ew_args *args, void *s);
GPUCORE_HIDDEN gpucore_status cpu_reduce(void *bctx, const gpucore_reduce_args *args, void *s);
GPUCORE_HIDDEN gpucore_status cpu_rows(void *bctx, const gpucore_rows_args *args, void *s);

/* cpu_optim.c: training primitives */
GPUCORE_HIDDEN gpucore_status cpu_optim_step(void *bctx, const gpucore_optim_hparams *hp,
                                             const gpucore_optim_tensor *tensors, int64_t count, void *s);
GPUCORE_HIDDEN gpucore_status cpu_amp_unscale(void *bctx, const gpucore_mt_tensor *grads, int64_t count,
                                              const float *scale, float *found_inf, void *s);
GPUCORE_HIDDEN gpucore_status cpu_amp_update(void *bctx, float *scale, int32_t *growth_tracker, const float *found_inf,
                                             float growth, float backoff, int32_t interval, void *s);
GPUCORE_HIDDEN gpucore_status cpu_clip_grad_norm(void *bctx, const gpucore_mt_tensor *grads, int64_t count,
                                                 float *partials, float max_norm, float *total_norm, float *clip_coef,
                                                 void *s);

/* cpu_comm.c: collectives over MPI (one task per collective on the comm stream) */
GPUCORE_HIDDEN gpucore_status cpu_comm_init(void *bctx, const void *id, int rank, int size, double timeout_s,
                                            void **bcomm);
GPUCORE_HIDDEN gpucore_status cpu_comm_init_local(void *const *bctxs, int n, double timeout_s, void **bcomms);
GPUCORE_HIDDEN gpucore_status cpu_comm_enqueue(void *bcomm, const gpucore_comm_call *call, void *stream);
GPUCORE_HIDDEN gpucore_status cpu_comm_check(void *bcomm);
GPUCORE_HIDDEN void cpu_comm_abort(void *bcomm, const char *reason);
GPUCORE_HIDDEN void cpu_comm_destroy(void *bcomm);

/* cpu_conv.c: convolution (im2col + GEMM, direct depthwise) */
GPUCORE_HIDDEN gpucore_status cpu_conv(void *bctx, const gpucore_conv_desc *desc, void *s);
/* cpu_conv_dnnl.c: the op of d (forward, backward data or backward filter; f32 or bf16) through
 * oneDNN; 1 when it computed the op's output, 0 when the caller must run the im2col + GEMM path (no
 * oneDNN in the build, f16, only oneDNN's reference loop, GPUCORE_CPU_GEMM=blas). */
GPUCORE_HIDDEN int cpu_conv_dnnl(cpu_context *ctx, const gpucore_conv_desc *d);
/* cpu_conv_dnnl.c: the process's oneDNN CPU engine (a dnnl_engine_t), NULL without oneDNN. */
GPUCORE_HIDDEN void *cpu_dnnl_engine(void);
/* cpu_matmul_dnnl.c: T (m x n, column-major, ld m, f32) = op(A)·op(B) for column-major A and B of
 * dtype (f32 or bf16) through oneDNN's matmul (JIT kernels for the CPU's ISA: AVX2, AVX-512,
 * AVX512-BF16, AMX); 1 when it computed T, 0 when oneDNN declined or is absent (the caller then uses
 * OpenBLAS, or widens to f32). */
GPUCORE_HIDDEN int cpu_matmul_dnnl_product(cpu_context *ctx, int dtype, int64_t m, int64_t n, int64_t k, const void *A,
                                           int64_t lda, int ta, const void *B, int64_t ldb, int tb, float *T);
/* cpu_matmul_dnnl.c: the whole desc (every batch in one primitive, D in bf16 or f32, alpha, beta with
 * D as its addend, bias, ReLU/GELU fused as oneDNN post-ops, AUX_OUT for f32 D) for f32 or bf16 A and
 * B, the bias gradients of A and B left to the caller (as that of D, summed from D after); 1 when it
 * computed D, 0 when it declined (f16, a separate C, DGELU, no fast oneDNN kernel, an f32 GEMM that
 * cpu_gemm_engine_dnnl gives to the BLAS): the caller's paths then run. */
GPUCORE_HIDDEN int cpu_matmul_dnnl_fused(cpu_context *ctx, const gpucore_gemm_desc *g);
/* cpu_matmul_dnnl.c: whether an f32 GEMM of this shape goes to oneDNN (1) or to OpenBLAS / the
 * blocked loop (0): oneDNN where the build has it and the CPU has AVX2 (not under
 * GPUCORE_CPU_PORTABLE); GPUCORE_CPU_GEMM=onednn or =blas forces one engine. */
GPUCORE_HIDDEN int cpu_gemm_engine_dnnl(int64_t m, int64_t n, int64_t k, int64_t batch);
/* cpu_matmul_dnnl.c: cpu_sgemm's contract through oneDNN's dnnl_sgemm (its JIT GEMM, no plan) when
 * cpu_gemm_engine_dnnl picks oneDNN; 1 when it computed C, 0 otherwise. */
GPUCORE_HIDDEN int cpu_sgemm_dnnl(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
