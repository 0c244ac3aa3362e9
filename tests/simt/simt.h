/*
 * simt.h — the CUDA kernel dialect libgpucore's kernels use, mapped onto a CPU
 * execution layer so CI can run the very .cu sources in kernels/ (compiled as
 * C++ with -DGPUCORE_SIMT; kernels/launch.h includes this header).
 *
 * Model (simt.cpp): every CUDA thread is a cooperative fiber (ucontext) on a
 * small mmap'd stack with a guard page. A block runs on one OS thread; several
 * blocks of a grid run at once on a small pool of OS threads. A fiber runs
 * without interruption until it reaches a barrier (__syncthreads*) or a warp
 * collective (__shfl*_sync, __ballot_sync, __any/__all_sync, __syncwarp,
 * __match_*_sync, __reduce_*_sync); there it is suspended until every thread the
 * operation names has arrived, so warps are lock-step exactly at the points
 * where CUDA guarantees it and nowhere else. Threads run in thread order in
 * even blocks and in reverse order in odd blocks, so a missing barrier shows
 * up as a stale read one way or the other. A barrier that some threads never
 * reach, a collective whose lanes diverge, or a mask naming absent lanes is an
 * execution error with a message (never a hang).
 *
 * __shared__ is per-OS-thread storage (thread_local): one block at a time runs
 * on a thread, so it is per-block storage. Dynamic shared memory (extern
 * __shared__ T name[]) is one per-thread region that every such name aliases,
 * as in CUDA (tests/simt/gen_simt_sources.py defines the names); bytes past the
 * launch's dynamic size are poisoned under AddressSanitizer, and the region is
 * filled with 0xff bytes (NaN / -1) at the start of each block.
 *
 * Launches (simt_launch, used through GPUCORE_LAUNCH) are stream-ordered: with a
 * stream (the emulated backend's cpu_stream) the kernel and a copy of its
 * arguments are queued on that stream; with a NULL stream the grid runs before
 * simt_launch returns (the layer's own tests). simt_last_error() returns (and
 * clears) the last launch-configuration error as a cudaError_t value, like
 * cudaGetLastError(); execution errors become the stream's sticky error.
 *
 * It claims nothing about speed, occupancy or nvcc's code generation: it proves
 * index math, tails, reductions and synchronization.
 */
#ifndef GPUCORE_SIMT_H
#define GPUCORE_SIMT_H

#ifndef __cplusplus
#error "simt.h is C++: compile the kernel sources as C++ with -DGPUCORE_SIMT"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include "simt_api.h"

#define SIMT_HIDDEN __attribute__((visibility("hidden")))

/* ------------------------------------------------------------------ qualifiers */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
/* Per-block storage: one block runs at a time on an OS thread (see above). At
 * block scope thread_local implies static, so `__shared__ float s[256];` and
 * `extern __shared__ float dyn[];` both work. */
#define __shared__ thread_local

/* ---------------------------------------------------------------- vector types */
#define SIMT_VEC1(name, T, A) struct __attribute__((aligned(A))) name { T x; };
#define SIMT_VEC2(name, T, A) struct __attribute__((aligned(A))) name { T x, y; };
#define SIMT_VEC3(name, T, A) struct __attribute__((aligned(A))) name { T x, y, z; };
#define SIMT_VEC4(name, T, A) struct __attribute__((aligned(A))) name { T x, y, z, w; };
#define SIMT_VEC_FAMILY(base, T, a1, a2, a3, a4)                                                \
    SIMT_VEC1(base##1, T, a1) SIMT_VEC2(base##2, T, a2) SIMT_VEC3(base##3, T, a3)               \
    SIMT_VEC4(base##4, T, a4)                                                                   \
    static inline base##1 make_##base##1(T x) { base##1 r; r.x = x; return r; }                 \
    static inline base##2 make_##base##2(T x, T y) { base##2 r; r.x = x; r.y = y; return r; }   \
    static inline base##3 make_##base##3(T x, T y, T z) { base##3 r; r.x = x; r.y = y; r.z = z; return r; } \
    static inline base##4 make_##base##4(T x, T y, T z, T w)                                    \
    { base##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
/* Alignments as in CUDA's vector_types.h, so a misaligned vector access is caught (UBSan). */
SIMT_VEC_FAMILY(char, signed char, 1, 2, 1, 4)
SIMT_VEC_FAMILY(uchar, unsigned char, 1, 2, 1, 4)
SIMT_VEC_FAMILY(short, short, 2, 4, 2, 8)
SIMT_VEC_FAMILY(ushort, unsigned short, 2, 4, 2, 8)
SIMT_VEC_FAMILY(int, int, 4, 8, 4, 16)
SIMT_VEC_FAMILY(uint, unsigned int, 4, 8, 4, 16)
SIMT_VEC_FAMILY(float, float, 4, 8, 4, 16)
SIMT_VEC_FAMILY(long, long, 8, 16, 8, 16)
SIMT_VEC_FAMILY(ulong, unsigned long, 8, 16, 8, 16)
SIMT_VEC_FAMILY(longlong, long long, 8, 16, 8, 16)
SIMT_VEC_FAMILY(ulonglong, unsigned long long, 8, 16, 8, 16)
SIMT_VEC_FAMILY(double, double, 8, 16, 8, 16)
#undef SIMT_VEC1
#undef SIMT_VEC2
#undef SIMT_VEC3
#undef SIMT_VEC4
#undef SIMT_VEC_FAMILY

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

/* --------------------------------------------------------- built-in variables */
/* What a running fiber sees; simt.cpp points simt_tls_ids at the running fiber's copy. */
struct simt_ids {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};
extern SIMT_HIDDEN __thread const simt_ids *simt_tls_ids;
#define threadIdx (simt_tls_ids->thread_idx)
#define blockIdx (simt_tls_ids->block_idx)
#define blockDim (simt_tls_ids->block_dim)
#define gridDim (simt_tls_ids->grid_dim)
#define warpSize 32

/* ------------------------------------------------------- barriers and warps */
namespace simt {

enum collective_kind {
    SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_BFLY, BALLOT, ANY, ALL, SYNCWARP, MATCH_ANY, MATCH_ALL,
    REDUCE_ADD, REDUCE_MIN_U, REDUCE_MAX_U, REDUCE_MIN_I, REDUCE_MAX_I, REDUCE_AND, REDUCE_OR, REDUCE_XOR
};
enum barrier_kind { BARRIER_PLAIN, BARRIER_COUNT, BARRIER_AND, BARRIER_OR };

/* Block-wide barrier; returns the count / and / or of pred over the block. */
SIMT_HIDDEN int barrier(int kind, int pred, const char *what, const char *file, int line);
/* One warp collective: value is this lane's operand, b and c the shfl operands
 * (PTX's b and c: lane/delta/lane-mask and the clamp/segment word). */
SIMT_HIDDEN uint64_t warp_collective(int kind, unsigned mask, uint64_t value, int b, int c, const char *what,
                                     const char *file, int line);
/* Lanes of the calling thread's warp that exist and have not exited. */
SIMT_HIDDEN unsigned active_mask();
/* Report a kernel-side error (invalid shuffle width, ...) and end the block. */
SIMT_HIDDEN void fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

template <typename T> static inline uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffles move at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T> static inline T from_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof(T));
    return v;
}

template <typename T>
static inline T shfl(int kind, const char *what, const char *file, int line, unsigned mask, T var, int b,
                     int width = 32)
{
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(file, line, "%s: width %d is not a power of two in [1, 32]", what, width);
    int c = ((32 - width) << 8) | (kind == SHFL_UP ? 0 : 0x1f);
    return from_bits<T>(warp_collective(kind, mask, to_bits(var), b, c, what, file, line));
}

} // namespace simt

#define __syncthreads() ((void)simt::barrier(simt::BARRIER_PLAIN, 0, "__syncthreads", __FILE__, __LINE__))
#define __syncthreads_count(p) simt::barrier(simt::BARRIER_COUNT, (p) != 0, "__syncthreads_count", __FILE__, __LINE__)
#define __syncthreads_and(p) simt::barrier(simt::BARRIER_AND, (p) != 0, "__syncthreads_and", __FILE__, __LINE__)
#define __syncthreads_or(p) simt::barrier(simt::BARRIER_OR, (p) != 0, "__syncthreads_or", __FILE__, __LINE__)

#define __shfl_sync(...) simt::shfl(simt::SHFL_IDX, "__shfl_sync", __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) simt::shfl(simt::SHFL_UP, "__shfl_up_sync", __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) simt::shfl(simt::SHFL_DOWN, "__shfl_down_sync", __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) simt::shfl(simt::SHFL_BFLY, "__shfl_xor_sync", __FILE__, __LINE__, __VA_ARGS__)

#define SIMT_WARP_OP(kind, name, mask, value) \
    simt::warp_collective(simt::kind, (mask), (uint64_t)(value), 0, 0, name, __FILE__, __LINE__)
#define __ballot_sync(mask, pred) ((unsigned)SIMT_WARP_OP(BALLOT, "__ballot_sync", mask, (pred) != 0))
#define __any_sync(mask, pred) ((int)SIMT_WARP_OP(ANY, "__any_sync", mask, (pred) != 0))
#define __all_sync(mask, pred) ((int)SIMT_WARP_OP(ALL, "__all_sync", mask, (pred) != 0))
#define __syncwarp(...) ((void)SIMT_WARP_OP(SYNCWARP, "__syncwarp", simt_syncwarp_mask(__VA_ARGS__), 0))
static inline unsigned simt_syncwarp_mask(unsigned mask = 0xffffffffu) { return mask; }
#define __activemask() (simt::active_mask())
#define __match_any_sync(mask, value) \
    ((unsigned)SIMT_WARP_OP(MATCH_ANY, "__match_any_sync", mask, simt::to_bits(value)))
#define __match_all_sync(mask, value, pred) simt_match_all((unsigned)SIMT_WARP_OP(MATCH_ALL, "__match_all_sync", mask, simt::to_bits(value)), (pred))
static inline unsigned simt_match_all(unsigned r, int *pred) { *pred = r != 0; return r; }
#define __reduce_add_sync(mask, v) ((unsigned)SIMT_WARP_OP(REDUCE_ADD, "__reduce_add_sync", mask, (uint32_t)(v)))
#define __reduce_and_sync(mask, v) ((unsigned)SIMT_WARP_OP(REDUCE_AND, "__reduce_and_sync", mask, (uint32_t)(v)))
#define __reduce_or_sync(mask, v) ((unsigned)SIMT_WARP_OP(REDUCE_OR, "__reduce_or_sync", mask, (uint32_t)(v)))
#define __reduce_xor_sync(mask, v) ((unsigned)SIMT_WARP_OP(REDUCE_XOR, "__reduce_xor_sync", mask, (uint32_t)(v)))
/* min/max: unsigned for unsigned operands, signed for int (as CUDA's overloads). */
template <typename T> static inline T simt_reduce_minmax(int is_max, unsigned mask, T v, const char *f, int l)
{
    const bool sgn = std::is_signed<T>::value;
    int kind = is_max ? (sgn ? simt::REDUCE_MAX_I : simt::REDUCE_MAX_U) : (sgn ? simt::REDUCE_MIN_I : simt::REDUCE_MIN_U);
    return (T)simt::warp_collective(kind, mask, (uint64_t)(uint32_t)v, 0, 0, is_max ? "__reduce_max_sync" : "__reduce_min_sync", f, l);
}
#define __reduce_min_sync(mask, v) simt_reduce_minmax(0, (mask), (v), __FILE__, __LINE__)
#define __reduce_max_sync(mask, v) simt_reduce_minmax(1, (mask), (v), __FILE__, __LINE__)

/* Fences: blocks of a grid do run concurrently on OS threads. */
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ------------------------------------------------------------------- atomics */
/* Real atomics (blocks run in parallel). Relaxed, like CUDA's; fences order them. */
#define SIMT_ATOMIC_INT(T)                                                                             \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }     \
    static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }         \
    static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }       \
    static inline T atomicCAS(T *p, T cmp, T v)                                                        \
    {                                                                                                  \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);             \
        return cmp;                                                                                    \
    }                                                                                                  \
    static inline T atomicMax(T *p, T v)                                                               \
    {                                                                                                  \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                  \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old;                                                                                    \
    }                                                                                                  \
    static inline T atomicMin(T *p, T v)                                                               \
    {                                                                                                  \
        T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                  \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} \
        return old;                                                                                    \
    }
SIMT_ATOMIC_INT(int)
SIMT_ATOMIC_INT(unsigned int)
SIMT_ATOMIC_INT(long long)
SIMT_ATOMIC_INT(unsigned long long)
#undef SIMT_ATOMIC_INT
static inline unsigned short atomicCAS(unsigned short *p, unsigned short cmp, unsigned short v)
{
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
/* Floating point: a compare-and-swap loop on the bits. */
template <typename F, typename U> static inline F simt_atomic_float(F *p, F v, int op)
{
    U *u = reinterpret_cast<U *>(p);
    U old = __atomic_load_n(u, __ATOMIC_RELAXED), next;
    for (;;) {
        F o, n;
        memcpy(&o, &old, sizeof o);
        n = op == 0 ? o + v : op == 1 ? (o > v || o != o ? o : v) : op == 2 ? (o < v || o != o ? o : v) : v;
        memcpy(&next, &n, sizeof n);
        if (__atomic_compare_exchange_n(u, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o;
    }
}
static inline float atomicAdd(float *p, float v) { return simt_atomic_float<float, uint32_t>(p, v, 0); }
static inline double atomicAdd(double *p, double v) { return simt_atomic_float<double, uint64_t>(p, v, 0); }
static inline float atomicMax(float *p, float v) { return simt_atomic_float<float, uint32_t>(p, v, 1); }
static inline float atomicMin(float *p, float v) { return simt_atomic_float<float, uint32_t>(p, v, 2); }
static inline float atomicExch(float *p, float v) { return simt_atomic_float<float, uint32_t>(p, v, 3); }
static inline unsigned atomicInc(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {}
    return old;
}
static inline unsigned atomicDec(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0 || old > limit) ? limit : old - 1u, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicCAS_block atomicCAS
#define atomicExch_block atomicExch

/* ----------------------------------------------------------- loads / stores */
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T __ldca(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline T __ldlu(const T *p) { return *p; }
template <typename T> static inline T __ldcv(const T *p) { return *p; }
template <typename T> static inline void __stwb(T *p, T v) { *p = v; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }
template <typename T> static inline void __stwt(T *p, T v) { *p = v; }

#include "simt_math.h"

/* -------------------------------------------------------------------- launch */
namespace simt {

/* A queued grid: launch geometry and a type-erased kernel call. */
struct launch_base {
    void (*run_thread)(launch_base *self); /* call the kernel with a fresh copy of the arguments */
    void (*destroy)(launch_base *self);
    dim3 grid, block;
    size_t dynamic_smem;
    void *stream;
    const char *kernel_name, *file;
    int line;
};

template <typename... P> struct launch_closure : launch_base {
    void (*kernel)(P...);
    std::tuple<typename std::decay<P>::type...> args;
    template <typename... A>
    launch_closure(void (*k)(P...), A &&...a) : kernel(k), args(std::forward<A>(a)...) {}
    static void run(launch_base *self)
    {
        launch_closure *c = static_cast<launch_closure *>(self);
        std::apply(c->kernel, c->args); /* by-value parameters: each thread gets its own copy */
    }
    static void free_self(launch_base *self) { delete static_cast<launch_closure *>(self); }
};

/* Validate, then run or queue. Returns 0 or a cudaError_t value (also kept for simt_last_error). */
SIMT_HIDDEN int launch(launch_base *closure, const void *kernel_key);
SIMT_HIDDEN int launch_failed(int err, const char *kernel_name, const char *file, int line, const char *why);

} // namespace simt

template <typename... P, typename... A>
static inline int simt_launch_impl(const char *name, const char *file, int line, dim3 grid, dim3 block, size_t smem,
                                   void *stream, void (*kernel)(P...), A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    simt::launch_closure<P...> *c = new (std::nothrow) simt::launch_closure<P...>(kernel, std::forward<A>(args)...);
    if (!c) return simt::launch_failed(SIMT_ERR_MEMORY_ALLOCATION, name, file, line, "out of host memory");
    c->run_thread = &simt::launch_closure<P...>::run;
    c->destroy = &simt::launch_closure<P...>::free_self;
    c->grid = grid;
    c->block = block;
    c->dynamic_smem = smem;
    c->stream = stream;
    c->kernel_name = name;
    c->file = file;
    c->line = line;
    return simt::launch(c, (const void *)kernel);
}

/* kernels/launch.h: simt_launch((grid), (block), (smem), (stream), kernel, args...) */
#define simt_launch(grid, block, smem, stream, kernel, ...) \
    simt_launch_impl(#kernel, __FILE__, __LINE__, grid, block, smem, (void *)(stream), kernel, __VA_ARGS__)

/* cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) under the layer. */
template <typename... P> static inline int simt_set_max_dynamic_smem(void (*kernel)(P...), int bytes)
{
    return simt_set_max_dynamic_smem_key((const void *)kernel, bytes);
}

#endif
