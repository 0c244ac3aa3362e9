/*
 * mma_sync.cuh — the warp-level tensor-core instructions the attention kernels use,
 * one definition for both places a kernel runs:
 *   mma_ldsm<N>(r, row) / mma_ldsm_trans<N>(r, row)
 *       ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16: N (1, 2, 4) 8x8 matrices of
 *       16-bit elements from shared memory; lane 8q + i passes the address of row i of
 *       matrix q (16-byte aligned), register q gets this lane's share of matrix q.
 *   mma_m16n8k16<T>(d, a, b)
 *       mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32: d += A (16x16) B (16x8), T = __half
 *       or __nv_bfloat16, f32 accumulators.
 * The register layouts are the PTX ISA's (ldmatrix; matrix fragments for mma.m16n8k16
 * with floating point type), written out in tests/simt/simt_mma.h. Under nvcc (device
 * pass) these are inline PTX on __cvta_generic_to_shared addresses, so bf16 gets
 * LDSM as f16 does (the WMMA bf16 loads took generic LD.E); on the SIMT layer
 * (GPUCORE_SIMT) that header's emulation, which enforces the same rules.
 * All 32 lanes of the warp call each of them together.
 */
#ifndef GPUCORE_KERNELS_MMA_SYNC_CUH
#define GPUCORE_KERNELS_MMA_SYNC_CUH

#include <stdint.h>
#include <type_traits>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(GPUCORE_SIMT)
#include "simt_mma.h"
#endif

template <int N, bool Trans> __device__ __forceinline__ void mma_ldsm_n(uint32_t (&r)[N], const void *row)
{
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDA_ARCH__)
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (N == 4 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else if constexpr (N == 4)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else if constexpr (N == 2 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else if constexpr (Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(s));
#elif defined(GPUCORE_SIMT)
    simt::simt_ldmatrix<N>(r, row, Trans, __FILE__, __LINE__);
#else
    (void)r, (void)row; /* nvcc's host pass: device code only */
#endif
}
template <int N> __device__ __forceinline__ void mma_ldsm(uint32_t (&r)[N], const void *row) { mma_ldsm_n<N, false>(r, row); }
template <int N> __device__ __forceinline__ void mma_ldsm_trans(uint32_t (&r)[N], const void *row) { mma_ldsm_n<N, true>(r, row); }

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value, "f16 or bf16 operands");
#if defined(__CUDA_ARCH__)
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(GPUCORE_SIMT)
    simt::simt_mma_m16n8k16<T>(d, a, b, d, __FILE__, __LINE__);
#else
    (void)d, (void)a, (void)b;
#endif
}

#endif
