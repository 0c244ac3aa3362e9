/*
 * simt_mma.h — the two warp-level matrix instructions kernels/mma_sync.cuh issues
 * as inline PTX, emulated on the SIMT layer with the per-lane layouts the PTX ISA
 * documents, so the same kernel source runs on the CPU:
 *
 *   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16  (simt_ldmatrix)
 *     N = 1, 2 or 4 matrices of 8x8 16-bit elements. Lane 8q + i supplies the
 *     address of row i of matrix q (q < N; the other lanes' addresses are unused).
 *     Register q of lane l receives matrix q's elements (l / 4, 2 (l % 4)) and
 *     (l / 4, 2 (l % 4) + 1), the first in the low half; with .trans, (2 (l % 4), l / 4)
 *     and (2 (l % 4) + 1, l / 4).
 *   mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32  (simt_mma_m16n8k16)
 *     d = A (16x16) B (16x8) + c; with g = lane / 4, t = lane % 4 and the low half first:
 *     a[0] = A(g, 2t..2t+1), a[1] = A(g+8, 2t..), a[2] = A(g, 2t+8..), a[3] = A(g+8, 2t+8..);
 *     b[0] = B(2t..2t+1, g), b[1] = B(2t+8..2t+9, g);
 *     c/d[0..1] = (g, 2t..2t+1), c/d[2..3] = (g+8, 2t..2t+1).
 *
 * The documented rules are execution errors: all 32 lanes of the warp together
 * (.sync.aligned: a partial or diverged warp fails), ldmatrix row addresses in
 * shared memory (the block's dynamic region or a static __shared__ array) and
 * 16-byte aligned. The lanes publish their operands in
 * per-warp slots between two warp barriers; each lane then forms its own results.
 * The products of f16 or bf16 values are exact in f32; each d element is a float
 * sum over k of them (in k order) plus c.
 */
#ifndef GPUCORE_SIMT_MMA_H
#define GPUCORE_SIMT_MMA_H

#include <link.h>
#include "simt.h"

extern "C" __thread unsigned char simt_dynamic_smem_storage[SIMT_MAX_DYNAMIC_SMEM];

namespace simt {
namespace mma_detail {

static inline int lane_of(int *warp)
{
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    *warp = (int)(tid / 32);
    return (int)(tid % 32);
}

/* Static __shared__ arrays are thread_local (simt.h): the calling OS thread's TLS blocks. */
struct tls_probe {
    uintptr_t p, end;
    bool found;
};
static inline int tls_block_holds(struct dl_phdr_info *info, size_t, void *arg)
{
    tls_probe *t = (tls_probe *)arg;
    if (!info->dlpi_tls_data) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            const uintptr_t lo = (uintptr_t)info->dlpi_tls_data, hi = lo + info->dlpi_phdr[i].p_memsz;
            if (t->p >= lo && t->end <= hi) t->found = true;
        }
    return t->found;
}
static inline bool in_shared(const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p, lo = (uintptr_t)simt_dynamic_smem_storage;
    if (a >= lo && a + n <= lo + SIMT_MAX_DYNAMIC_SMEM) return true;
    tls_probe t{a, a + n, false};
    dl_iterate_phdr(tls_block_holds, &t);
    return t.found;
}

/* Per-warp slots through which a lane reads the other lanes' addresses or registers. */
static thread_local const void *slot_p[32][32];
static thread_local const uint32_t *slot_a[32][32], *slot_b[32][32];

static inline void warp_wide(const char *what, const char *file, int line)
{
    (void)warp_collective(SYNCWARP, 0xffffffffu, 0, 0, 0, what, file, line);
}

static inline uint16_t lo16(uint32_t r) { return (uint16_t)(r & 0xffffu); }
static inline uint16_t hi16(uint32_t r) { return (uint16_t)(r >> 16); }
template <typename T> static inline float value(uint16_t bits)
{
    T v;
    v.x = bits;
    return (float)v;
}

} // namespace mma_detail

/* ldmatrix .x N (N = 1, 2, 4), .trans when trans; row is this lane's row address. */
template <int N>
static inline void simt_ldmatrix(uint32_t (&r)[N], const void *row, bool trans, const char *file, int line)
{
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
    using namespace mma_detail;
    const char *what = trans ? "ldmatrix .trans" : "ldmatrix";
    int warp;
    const int lane = lane_of(&warp);
    slot_p[warp][lane] = row;
    warp_wide(what, file, line); /* every lane's address is published */
    if (lane < 8 * N) {
        if ((uintptr_t)row % 16)
            fail(file, line, "%s: lane %d's row address %p is not 16-byte aligned (PTX ISA, ldmatrix)", what, lane, row);
        if (!in_shared(row, 16))
            fail(file, line, "%s: lane %d's row address %p is not in shared memory (PTX ISA, ldmatrix .shared)", what,
                 lane, row);
    }
    for (int q = 0; q < N; q++) {
        uint16_t e[2];
        for (int h = 0; h < 2; h++) {
            const int mrow = trans ? 2 * (lane % 4) + h : lane / 4, mcol = trans ? lane / 4 : 2 * (lane % 4) + h;
            memcpy(&e[h], (const char *)slot_p[warp][8 * q + mrow] + 2 * mcol, 2);
        }
        r[q] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
    warp_wide(what, file, line); /* no lane reuses its slot before every lane has read it */
}

/* d = A B + c, m16n8k16, row.col, f32 accumulators, T = __half or __nv_bfloat16 operands (d may be c). */
template <typename T>
static inline void simt_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                                     const char *file, int line)
{
    static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
                  "mma.sync m16n8k16 here takes f16 or bf16 operands");
    using namespace mma_detail;
    int warp;
    const int lane = lane_of(&warp);
    slot_a[warp][lane] = a;
    slot_b[warp][lane] = b;
    warp_wide("mma.sync m16n8k16", file, line);
    float A[16][16], B[16][8];
    for (int t = 0; t < 32; t++) {
        const int g = t / 4, k = 2 * (t % 4);
        const uint32_t *ra = slot_a[warp][t], *rb = slot_b[warp][t];
        for (int reg = 0; reg < 4; reg++) {
            const int row = g + 8 * (reg & 1), col = k + 8 * (reg >> 1);
            A[row][col] = value<T>(lo16(ra[reg]));
            A[row][col + 1] = value<T>(hi16(ra[reg]));
        }
        for (int reg = 0; reg < 2; reg++) {
            B[k + 8 * reg][g] = value<T>(lo16(rb[reg]));
            B[k + 8 * reg + 1][g] = value<T>(hi16(rb[reg]));
        }
    }
    warp_wide("mma.sync m16n8k16", file, line);
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s = fmaf(A[row][k], B[k][col], s);
        d[i] = s + c[i];
    }
}

} // namespace simt

#endif
