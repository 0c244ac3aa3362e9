/*
 * test_simt.cpp — the SIMT layer's own tests: indices, barriers, shared-memory
 * reductions (static and dynamic), every warp intrinsic against CUDA's
 * documented semantics (computed here independently), atomics across
 * concurrently running blocks, launch-configuration errors, stream ordering,
 * detected barrier and warp divergence, and proof that the layer catches the
 * bugs it exists for: deliberately wrong kernels (an off-by-one tail, a
 * missing __syncthreads, a warp-synchronous reduction without __syncwarp)
 * fail under it. Under AddressSanitizer the off-by-one tail also runs in a
 * child process that must die with a heap-buffer-overflow report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "simt_check.h"

/* The CPU stream queue compiled into the layer (cpu_stream.c; C, hidden). */
extern "C" {
int cpu_stream_create(void **out);
void cpu_stream_destroy(void *s);
int cpu_stream_synchronize(void *s);
}

static double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}


/* --------------------------------------------------------------- indices */

__global__ void index_kernel(unsigned *out)
{
    unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    out[bid * nthreads + tid] = bid * 100000u + tid;
}

static void test_indices()
{
    dim3 grid(3, 2, 2), block(8, 4, 2);
    std::vector<unsigned> out(12 * 64, 0xffffffffu);
    CHECK(RUN(index_kernel, grid, block, 0, out.data()) == 0);
    int bad = 0;
    for (unsigned b = 0; b < 12; b++)
        for (unsigned t = 0; t < 64; t++) bad += out[b * 64 + t] != b * 100000u + t;
    CHECK(bad == 0);
}

/* ------------------------------------------------- barriers, shared memory */

__global__ void block_sum_kernel(const float *in, float *out, int n)
{
    __shared__ float s[1024];
    unsigned t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

/* The same reduction with the first __syncthreads missing: a deliberate bug. */
__global__ void block_sum_missing_sync_kernel(const float *in, float *out, int n)
{
    __shared__ float s[1024];
    unsigned t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

/* A warp-synchronous tail without __syncwarp (pre-Volta style): a deliberate bug. */
__global__ void warp_tail_missing_syncwarp_kernel(const float *in, float *out)
{
    __shared__ float s[64];
    unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * 64 + t];
    __syncthreads();
    if (t < 32) {
        for (int stride = 32; stride > 0; stride >>= 1) s[t] += s[t + stride]; /* reads lanes not yet written */
        if (t == 0) out[blockIdx.x] = s[0];
    }
}

__global__ void sync_ops_kernel(int *out)
{
    unsigned t = threadIdx.x;
    int c = __syncthreads_count(t % 3 == 0);
    int a = __syncthreads_and(t < 1000);
    int o = __syncthreads_or(t == 77);
    int z = __syncthreads_or(0);
    out[t] = c * 1000 + a * 100 + o * 10 + z;
}

static void test_reductions()
{
    const int n = 5000, block = 256, blocks = (n + block - 1) / block;
    std::vector<float> in(n), out(blocks, -1.0f);
    for (int i = 0; i < n; i++) in[i] = (float)((i * 7919) % 1000) * 0.25f + 1.0f;
    double t0 = now_ms();
    CHECK(RUN(block_sum_kernel, blocks, block, 0, in.data(), out.data(), n) == 0);
    double t1 = now_ms();
    int bad = 0;
    for (int b = 0; b < blocks; b++) {
        double ref = 0;
        for (int i = b * block; i < (b + 1) * block && i < n; i++) ref += in[i];
        bad += out[b] != (float)ref;
    }
    CHECK(bad == 0);
    printf("  block reduction: %d blocks x %d threads in %.1f ms\n", blocks, block, t1 - t0);

    /* 1024-thread blocks (the most CUDA allows) with barriers */
    std::vector<float> in2(4096, 1.0f), out2(4, 0.0f);
    CHECK(RUN(block_sum_kernel, 4, 1024, 0, in2.data(), out2.data(), 4096) == 0);
    CHECK(out2[0] == 1024.0f && out2[3] == 1024.0f);

    std::vector<int> ops(300);
    CHECK(RUN(sync_ops_kernel, 1, 300, 0, ops.data()) == 0);
    CHECK(ops[0] == 100 * 1000 + 100 + 10 + 0 && ops[299] == ops[0]);

    /* deliberate bug 1: missing __syncthreads -> threads read slots not yet written */
    std::vector<float> wrong(blocks, -1.0f);
    CHECK(RUN(block_sum_missing_sync_kernel, blocks, block, 0, in.data(), wrong.data(), n) == 0);
    int differ = 0;
    for (int b = 0; b < blocks; b++) differ += wrong[b] != out[b];
    printf("  missing __syncthreads: %d of %d blocks give a wrong sum (caught)\n", differ, blocks);
    CHECK(differ > 0);

    /* deliberate bug 2: warp-synchronous code without __syncwarp */
    std::vector<float> in3(4 * 64), ok3(4, 0.0f), wrong3(4, -1.0f);
    for (int i = 0; i < 4 * 64; i++) in3[i] = (float)(i % 13 + 1);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 64; i++) ok3[b] += in3[b * 64 + i];
    CHECK(RUN(warp_tail_missing_syncwarp_kernel, 4, 64, 0, in3.data(), wrong3.data()) == 0);
    int differ3 = 0;
    for (int b = 0; b < 4; b++) differ3 += wrong3[b] != ok3[b];
    printf("  warp tail without __syncwarp: %d of 4 blocks wrong (caught)\n", differ3);
    CHECK(differ3 > 0);
}

/* -------------------------------------------------- dynamic shared memory */

__global__ void reverse_dynamic_kernel(const int *in, int *out, int n)
{
    extern __shared__ int dyn[];
    int t = threadIdx.x;
    dyn[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = dyn[n - 1 - t];
}

__global__ void dynamic_poison_kernel(unsigned *out)
{
    extern __shared__ unsigned dyn_u[];
    out[threadIdx.x] = dyn_u[threadIdx.x]; /* never written: must read the layer's 0xff fill */
}

static void test_dynamic_smem()
{
    const int n = 200, blocks = 3;
    std::vector<int> in(n * blocks), out(n * blocks, 0);
    for (int i = 0; i < n * blocks; i++) in[i] = i * 3 + 1;
    CHECK(RUN(reverse_dynamic_kernel, blocks, n, n * sizeof(int), in.data(), out.data(), n) == 0);
    int bad = 0;
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < n; t++) bad += out[b * n + t] != in[b * n + n - 1 - t];
    CHECK(bad == 0);

    std::vector<unsigned> p(64, 0);
    CHECK(RUN(dynamic_poison_kernel, 1, 64, 64 * 4, p.data()) == 0);
    CHECK(p[0] == 0xffffffffu && p[63] == 0xffffffffu);

    /* more than 48 KiB needs the opt-in, as on CUDA; the opt-in limit is 227 KiB */
    const int big = 100 * 1024 / 4;
    std::vector<int> bin(big), bout(big);
    simt_launch(1, 1, big * 4, NULL, reverse_dynamic_kernel, bin.data(), bout.data(), 1);
    CHECK(simt_last_error() == SIMT_ERR_INVALID_VALUE);
    CHECK(strstr(simt_last_error_message(), "cudaFuncSetAttribute") != NULL);
    CHECK(simt_last_error() == 0); /* read and cleared, like cudaGetLastError */
    CHECK(simt_set_max_dynamic_smem(reverse_dynamic_kernel, 100 * 1024) == 0);
    bin[0] = 42;
    CHECK(RUN(reverse_dynamic_kernel, 1, 1, big * 4, bin.data(), bout.data(), 1) == 0);
    CHECK(bout[0] == 42);
    CHECK(simt_set_max_dynamic_smem(reverse_dynamic_kernel, 300 * 1024) == SIMT_ERR_INVALID_VALUE);
    simt_last_error();
}

/* ----------------------------------------------------------- warp intrinsics */

enum { W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL, W_MATCH_ANY, W_MATCH_ALL, W_RED_ADD, W_RED_MIN, W_RED_MAX,
       W_RED_MINU, W_RED_AND, W_RED_OR, W_RED_XOR, W_ACTIVE, W_SYNCWARP, W_SHFL_DOUBLE, W_COUNT };

/* One intrinsic per launch, every lane of a 64-thread block; v = per-lane operand. */
__global__ void warp_op_kernel(int op, int arg, int width, const int *v, long long *out)
{
    int t = threadIdx.x, x = v[t];
    long long r = 0;
    switch (op) {
    case W_SHFL: r = __shfl_sync(0xffffffffu, x, arg, width); break;
    case W_UP: r = __shfl_up_sync(0xffffffffu, x, (unsigned)arg, width); break;
    case W_DOWN: r = __shfl_down_sync(0xffffffffu, x, (unsigned)arg, width); break;
    case W_XOR: r = __shfl_xor_sync(0xffffffffu, x, arg, width); break;
    case W_BALLOT: r = __ballot_sync(0xffffffffu, x & 1); break;
    case W_ANY: r = __any_sync(0xffffffffu, x == arg); break;
    case W_ALL: r = __all_sync(0xffffffffu, x != arg); break;
    case W_MATCH_ANY: r = __match_any_sync(0xffffffffu, x % 5); break;
    case W_MATCH_ALL: {
        int pred = -1;
        unsigned m = __match_all_sync(0xffffffffu, x % arg, &pred);
        r = (long long)m * 2 + pred;
        break;
    }
    case W_RED_ADD: r = __reduce_add_sync(0xffffffffu, (unsigned)x); break;
    case W_RED_MIN: r = __reduce_min_sync(0xffffffffu, x - 50); break;
    case W_RED_MAX: r = __reduce_max_sync(0xffffffffu, x - 50); break;
    case W_RED_MINU: r = __reduce_min_sync(0xffffffffu, (unsigned)(x - 50)); break;
    case W_RED_AND: r = __reduce_and_sync(0xffffffffu, (unsigned)x | 0x100u); break;
    case W_RED_OR: r = __reduce_or_sync(0xffffffffu, (unsigned)x); break;
    case W_RED_XOR: r = __reduce_xor_sync(0xffffffffu, (unsigned)x); break;
    case W_ACTIVE: r = (__activemask() >> (t % 32)) & 1u; break; /* includes the caller (exited lanes drop out) */
    case W_SYNCWARP: __syncwarp(); r = 1; break;
    case W_SHFL_DOUBLE: {
        double d = x * 0.5 + 1e10;
        double s = __shfl_down_sync(0xffffffffu, d, (unsigned)arg, width);
        r = (long long)(s * 2.0);
        break;
    }
    }
    out[t] = r;
}

/* References written from the CUDA Programming Guide's words, not the layer's code. */
static long long warp_reference(int op, int arg, int width, const int *v, int t)
{
    const int warp0 = t / 32 * 32, lane = t % 32, seg0 = lane / width * width;
    long long r = 0;
    switch (op) {
    case W_SHFL: return v[warp0 + seg0 + ((arg % width) + width) % width];      /* srcLane modulo width */
    case W_UP: return lane - arg >= seg0 ? v[warp0 + lane - arg] : v[t];         /* lower delta lanes unchanged */
    case W_DOWN: return lane + arg < seg0 + width ? v[warp0 + lane + arg] : v[t]; /* upper delta lanes unchanged */
    case W_XOR: {
        int src = lane ^ arg;
        return src >= seg0 + width ? v[t] : v[warp0 + src]; /* later groups: own value */
    }
    case W_BALLOT:
        for (int k = 0; k < 32; k++) r |= (long long)(v[warp0 + k] & 1) << k;
        return (unsigned)r;
    case W_ANY:
        for (int k = 0; k < 32; k++) r |= v[warp0 + k] == arg;
        return r;
    case W_ALL:
        r = 1;
        for (int k = 0; k < 32; k++) r &= v[warp0 + k] != arg;
        return r;
    case W_MATCH_ANY:
        for (int k = 0; k < 32; k++) r |= (long long)(v[warp0 + k] % 5 == v[t] % 5) << k;
        return (unsigned)r;
    case W_MATCH_ALL: {
        int same = 1;
        for (int k = 0; k < 32; k++) same &= v[warp0 + k] % arg == v[warp0] % arg;
        return same ? 0xffffffffll * 2 + 1 : 0;
    }
    case W_RED_ADD: {
        unsigned s = 0;
        for (int k = 0; k < 32; k++) s += (unsigned)v[warp0 + k];
        return s;
    }
    case W_RED_MIN: case W_RED_MAX: {
        int m = v[warp0] - 50;
        for (int k = 0; k < 32; k++) m = op == W_RED_MIN ? std::min(m, v[warp0 + k] - 50) : std::max(m, v[warp0 + k] - 50);
        return m;
    }
    case W_RED_MINU: {
        unsigned m = 0xffffffffu;
        for (int k = 0; k < 32; k++) m = std::min(m, (unsigned)(v[warp0 + k] - 50));
        return m;
    }
    case W_RED_AND: case W_RED_OR: case W_RED_XOR: {
        unsigned a = 0xffffffffu, o = 0, x = 0;
        for (int k = 0; k < 32; k++) {
            a &= (unsigned)v[warp0 + k] | 0x100u;
            o |= (unsigned)v[warp0 + k];
            x ^= (unsigned)v[warp0 + k];
        }
        return op == W_RED_AND ? a : op == W_RED_OR ? o : x;
    }
    case W_ACTIVE: return 1;
    case W_SYNCWARP: return 1;
    case W_SHFL_DOUBLE: {
        int src = lane + arg < seg0 + width ? warp0 + lane + arg : t;
        return (long long)((v[src] * 0.5 + 1e10) * 2.0);
    }
    }
    return r;
}

/* Two halves of a warp in divergent branches, each with its own partial-mask shuffle. */
__global__ void split_warp_kernel(const int *v, int *out)
{
    int t = threadIdx.x, x = v[t];
    if (t % 32 < 16) out[t] = __shfl_xor_sync(0x0000ffffu, x, 1);
    else out[t] = __shfl_sync(0xffff0000u, x, 31) + __ballot_sync(0xffff0000u, x > 40);
}

static void test_warp_intrinsics()
{
    int v[64];
    for (int i = 0; i < 64; i++) v[i] = (i * 37 + 11) % 97;
    static const char *names[W_COUNT] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
        "__ballot_sync", "__any_sync", "__all_sync", "__match_any_sync", "__match_all_sync", "__reduce_add_sync",
        "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync(unsigned)", "__reduce_and_sync",
        "__reduce_or_sync", "__reduce_xor_sync", "__activemask", "__syncwarp", "__shfl_down_sync(double)"};
    int cases = 0;
    for (int op = 0; op < W_COUNT; op++) {
        std::vector<int> args, widths = {32};
        if (op == W_SHFL || op == W_UP || op == W_DOWN || op == W_XOR || op == W_SHFL_DOUBLE) widths = {32, 16, 8, 4, 2, 1};
        if (op == W_SHFL) args = {0, 5, 17, 31, 40};
        else if (op == W_UP || op == W_DOWN || op == W_SHFL_DOUBLE) args = {0, 1, 3, 16, 31};
        else if (op == W_XOR) args = {1, 2, 7, 16, 31};
        else if (op == W_ANY || op == W_ALL) args = {v[5], -1};
        else if (op == W_MATCH_ALL) args = {1, 2};
        else args = {0};
        for (int w : widths)
            for (int a : args) {
                long long out[64];
                memset(out, 0x5a, sizeof out);
                int err = RUN(warp_op_kernel, 1, 64, 0, op, a, w, (const int *)v, out);
                int bad = err != 0;
                for (int t = 0; t < 64 && !bad; t++) {
                    long long ref = warp_reference(op, a, w, v, t);
                    if (out[t] != ref) {
                        fprintf(stderr, "  %s arg %d width %d: lane %d got %lld want %lld\n", names[op], a, w, t,
                                out[t], ref);
                        bad = 1;
                    }
                }
                if (err) fprintf(stderr, "  %s: %s\n", names[op], simt_last_error_message());
                CHECK(!bad);
                cases++;
            }
    }
    printf("  warp intrinsics: %d cases against the documented semantics\n", cases);

    int out[64];
    CHECK(RUN(split_warp_kernel, 1, 64, 0, (const int *)v, out) == 0);
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        int w0 = t / 32 * 32, lane = t % 32, want;
        if (lane < 16) want = v[w0 + (lane ^ 1)];
        else {
            unsigned ballot = 0;
            for (int k = 16; k < 32; k++) ballot |= (unsigned)(v[w0 + k] > 40) << k;
            want = v[w0 + 31] + (int)ballot;
        }
        bad += out[t] != want;
    }
    CHECK(bad == 0);
}

/* --------------------------------------------------------------- atomics */

__global__ void atomics_kernel(int *counter, float *fsum, unsigned long long *usum, int *imax, unsigned *ring,
                               int *cas_slot)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(counter, 1);
    atomicAdd(fsum, 0.5f);
    atomicAdd(usum, (unsigned long long)i);
    atomicMax(imax, i);
    atomicInc(ring, 9u);
    if (atomicCAS(cas_slot, -1, i) == -1) atomicAdd(counter, 1000000); /* exactly one winner */
}

static void test_atomics()
{
    int counter = 0, imax = -5, cas_slot = -1;
    float fsum = 0;
    unsigned long long usum = 0;
    unsigned ring = 0;
    const int blocks = 16, threads = 128, n = blocks * threads;
    CHECK(RUN(atomics_kernel, blocks, threads, 0, &counter, &fsum, &usum, &imax, &ring, &cas_slot) == 0);
    CHECK(counter == n + 1000000);
    CHECK(fsum == 0.5f * n);
    CHECK(usum == (unsigned long long)n * (n - 1) / 2);
    CHECK(imax == n - 1);
    CHECK(ring == (unsigned)(n % 10));
    CHECK(cas_slot >= 0 && cas_slot < n);
}

/* ------------------------------------------------ errors the layer reports */

__global__ void empty_kernel(int *p) { (void)p; }

__global__ void barrier_subset_kernel(int *p)
{
    if (threadIdx.x < 100) __syncthreads(); /* threads 100.. never arrive */
    p[threadIdx.x] = 1;
}

__global__ void barrier_two_sites_kernel(int *p)
{
    if (threadIdx.x % 2) __syncthreads();
    else __syncthreads();
    p[threadIdx.x] = 1;
}

__global__ void early_exit_then_barrier_kernel(const int *n, int *p)
{
    if ((int)threadIdx.x >= *n) return;
    __syncthreads();
    p[threadIdx.x] = 1;
}

__global__ void shfl_divergent_kernel(int *p)
{
    int x = threadIdx.x;
    if (threadIdx.x % 32 < 16) x = __shfl_xor_sync(0xffffffffu, x, 1); /* lanes 16-31 never come */
    p[threadIdx.x] = x;
}

__global__ void shfl_absent_lanes_kernel(int *p)
{
    p[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1); /* a 48-thread block: lanes 16-31 of warp 1 absent */
}

__global__ void shfl_vs_barrier_kernel(int *p)
{
    int x = threadIdx.x;
    if (threadIdx.x < 16) x = __shfl_sync(0xffffffffu, x, 0);
    else __syncthreads();
    p[threadIdx.x] = x;
}

__global__ void bad_width_kernel(int *p) { p[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0, 12); }


static void test_detected_errors()
{
    std::vector<int> p(1024);
    int n = 50;
    double t0 = now_ms();
    expect_error("barrier reached by a subset", RUN(barrier_subset_kernel, 2, 128, 0, p.data()), "never reach");
    expect_error("barrier at two sites", RUN(barrier_two_sites_kernel, 1, 64, 0, p.data()), "divergent barrier");
    expect_error("return before a barrier", RUN(early_exit_then_barrier_kernel, 1, 64, 0, (const int *)&n, p.data()),
                 "never reach");
    expect_error("shuffle with divergent lanes", RUN(shfl_divergent_kernel, 1, 64, 0, p.data()), "divergent warp");
    expect_error("shuffle naming absent lanes", RUN(shfl_absent_lanes_kernel, 1, 48, 0, p.data()), "do not exist");
    expect_error("shuffle against a barrier", RUN(shfl_vs_barrier_kernel, 1, 32, 0, p.data()), "never reach");
    expect_error("shuffle width 12", RUN(bad_width_kernel, 1, 32, 0, p.data()), "power of two");
    printf("  7 divergence errors detected in %.1f ms (no hang)\n", now_ms() - t0);
    /* the layer is usable after errors */
    std::vector<float> in(256, 2.0f), out(1);
    CHECK(RUN(block_sum_kernel, 1, 256, 0, in.data(), out.data(), 256) == 0 && out[0] == 512.0f);

    /* launch-configuration errors are synchronous, like cudaGetLastError */
    simt_launch(1, 1025, 0, NULL, empty_kernel, p.data());
    CHECK(simt_last_error() == SIMT_ERR_INVALID_CONFIGURATION);
    CHECK(strstr(simt_last_error_message(), "empty_kernel") != NULL);
    simt_launch(0, 32, 0, NULL, empty_kernel, p.data());
    CHECK(simt_last_error() == SIMT_ERR_INVALID_CONFIGURATION);
    simt_launch(dim3(1, 1, 1), dim3(32, 32, 2), 0, NULL, empty_kernel, p.data());
    CHECK(simt_last_error() == SIMT_ERR_INVALID_CONFIGURATION);
    CHECK(simt_last_error() == 0);
}

/* ------------------------------------------------- off-by-one tail (bug 3) */

__global__ void scale_tail_bug_kernel(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 2.0f * in[i]; /* deliberate bug: <= instead of < */
}

static void test_off_by_one_guard()
{
    const int n = 1000, guard = 64;
    std::vector<float> in(n + guard, 1.0f), out(n + guard, -7.0f);
    CHECK(RUN(scale_tail_bug_kernel, (n + 255) / 256, 256, 0, in.data(), out.data(), n) == 0);
    int touched = 0;
    for (int i = n; i < n + guard; i++) touched += out[i] != -7.0f;
    printf("  off-by-one tail: %d guard element(s) past the end written (caught)\n", touched);
    CHECK(touched == 1);
}

static int child_oob_tail()
{
    const int n = 1000;
    float *in = (float *)malloc(sizeof(float) * n), *out = (float *)malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) in[i] = 1.0f;
    simt_launch((n + 255) / 256, 256, 0, NULL, scale_tail_bug_kernel, (const float *)in, out, n);
    int err = simt_last_error();
    free(in);
    free(out);
    return err == 0 ? 0 : 3; /* reaching here means AddressSanitizer missed it */
}

#if defined(__SANITIZE_ADDRESS__)
static void test_off_by_one_asan(const char *self)
{
    int fds[2];
    if (pipe(fds) != 0) { CHECK(0); return; }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        dup2(fds[1], 1);
        close(fds[0]);
        execl(self, self, "--child-oob-tail", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    std::string text;
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, (size_t)got);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool died = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    bool reported = text.find("heap-buffer-overflow") != std::string::npos &&
                    text.find("scale_tail_bug_kernel") != std::string::npos;
    printf("  off-by-one tail under AddressSanitizer (child process): %s\n",
           died && reported ? "heap-buffer-overflow in scale_tail_bug_kernel reported (caught)" : "NOT caught");
    if (!(died && reported)) fprintf(stderr, "%s\n", text.c_str());
    CHECK(died && reported);
}
#endif

/* ------------------------------------------------------------ stream order */

__global__ void affine_kernel(int *x, int n, int mul, int add)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = x[i] * mul + add;
}

static void test_stream_order()
{
    void *s = NULL;
    CHECK(cpu_stream_create(&s) == 0);
    const int n = 3000;
    std::vector<int> x(n, 1);
    long long want = 1;
    for (int k = 0; k < 20; k++) {
        simt_launch(4, 128, 0, s, affine_kernel, x.data(), n, k % 2 ? 3 : 1, k);
        CHECK(simt_last_error() == 0);
        want = want * (k % 2 ? 3 : 1) + k;
    }
    CHECK(cpu_stream_synchronize(s) == 0);
    CHECK(x[0] == (int)want && x[n - 1] == (int)want);

    /* an execution error is the stream's sticky error, with the layer's message */
    std::vector<int> p(128);
    simt_launch(1, 128, 0, s, barrier_subset_kernel, p.data());
    CHECK(simt_last_error() == 0); /* the launch itself was fine */
    CHECK(cpu_stream_synchronize(s) != 0);
    char msg[1024];
    CHECK(simt_take_stream_error(s, msg, sizeof msg) == 1 && strstr(msg, "barrier_subset_kernel") != NULL);
    CHECK(simt_take_stream_error(s, msg, sizeof msg) == 0);
    CHECK(cpu_stream_synchronize(s) == 0);
    cpu_stream_destroy(s);
}

/* -------------------------------------------------- speed of the emulation */

__global__ void grid_stride_kernel(float *x, long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = x[i] * 0.5f + 1.0f;
}

static void test_speed()
{
    const long long n = 1 << 22;
    std::vector<float> x((size_t)n, 2.0f);
    double t0 = now_ms();
    CHECK(RUN(grid_stride_kernel, 32, 256, 0, x.data(), n) == 0);
    double t1 = now_ms();
    CHECK(x[0] == 2.0f && x[n - 1] == 2.0f);
    printf("  grid-stride kernel, 32 blocks x 256 threads over %lld floats: %.1f ms (%d block threads)\n", n, t1 - t0,
           simt_threads());
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--child-oob-tail")) return child_oob_tail();
    printf("SIMT layer: kernel sources that run under it:");
    for (int i = 0; simt_kernel_files_run[i]; i++) printf(" %s", simt_kernel_files_run[i]);
    printf("\nSIMT layer: kernel sources excluded:");
    if (!simt_kernel_files_excluded[0]) printf(" none");
    printf("\n");
    for (int i = 0; simt_kernel_files_excluded[i]; i++) printf("  EXCLUDED %s\n", simt_kernel_files_excluded[i]);

    test_indices();
    test_reductions();
    test_dynamic_smem();
    test_warp_intrinsics();
    test_atomics();
    test_detected_errors();
    test_off_by_one_guard();
#if defined(__SANITIZE_ADDRESS__)
    test_off_by_one_asan(argv[0]);
#else
    printf("  (the AddressSanitizer child-process check of the off-by-one tail runs in the ASan build)\n");
#endif
    test_stream_order();
    test_speed();
    printf("test_simt: %d passed, %d failed, 0 skipped\n", passed, failed);
    return failed ? 1 : 0;
}
