/*
 * attention_cp_async.h — 16-byte asynchronous global-to-shared copies for the
 * tensor-core attention kernels, one definition for both places a kernel runs:
 *   att_cp16(pipe, dst, src)   cp.async.cg.shared.global [dst], [src], 16: dst in shared memory,
 *                              src in global memory, both 16-byte aligned
 *   att_cp4(pipe, dst, src)    cp.async.ca.shared.global [dst], [src], 4: the same for one 4-byte
 *                              value, both 4-byte aligned (per-row floats such as lse)
 *   att_cp_commit(pipe)        cp.async.commit_group: the copies issued since the last commit
 *                              form one group
 *   att_cp_wait_all(pipe)      cp.async.wait_group 0: every committed group has landed (for this
 *                              thread; a __syncthreads after it makes all threads' copies visible)
 * Under nvcc (device pass) these are the PTX instructions; `pipe` is empty. On the SIMT layer
 * (GPUCORE_SIMT) the copy is deferred as the hardware may defer it: att_cp16 and att_cp4 record it (and fail
 * on an unaligned or non-shared address, as the PTX ISA requires), att_cp_commit closes the
 * group, and only att_cp_wait_all writes the committed groups' bytes to shared memory. A kernel that
 * reads a tile before waiting for it, or that waits without committing, reads what was there
 * before (the SIMT layer fills shared memory with 0xff bytes), so the tests see it.
 */
#ifndef GPUCORE_KERNELS_ATTENTION_CP_ASYNC_H
#define GPUCORE_KERNELS_ATTENTION_CP_ASYNC_H

#include <stdint.h>
#include <string.h>
#if defined(GPUCORE_SIMT)
#include "simt_mma.h" /* simt::mma_detail::in_shared */
#endif

/* Copies one thread may have in flight on the SIMT layer (the kernels issue at most 36). */
#define ATT_CP_MAX_PENDING 64

struct att_cp_pipe {
#if defined(GPUCORE_SIMT)
    struct {
        void *dst;
        const void *src;
        int bytes;
        bool committed;
    } pending[ATT_CP_MAX_PENDING];
    int n = 0;
#endif
};

#if defined(GPUCORE_SIMT)
#define att_cp16(pipe, dst, src) att_cp_at(pipe, dst, src, 16, __FILE__, __LINE__)
#define att_cp4(pipe, dst, src) att_cp_at(pipe, dst, src, 4, __FILE__, __LINE__)
__device__ __forceinline__ void att_cp_at(att_cp_pipe &p, void *dst, const void *src, int bytes, const char *file, int line)
{
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes)
        simt::fail(file, line, "cp.async %d: address %p or %p is not %d-byte aligned (PTX ISA, cp.async)", bytes, dst, src,
                   bytes);
    if (!simt::mma_detail::in_shared(dst, bytes))
        simt::fail(file, line, "cp.async %d: destination %p is not in shared memory (PTX ISA, cp.async .shared)", bytes, dst);
    if (p.n == ATT_CP_MAX_PENDING) simt::fail(file, line, "cp.async: more than %d copies in flight", ATT_CP_MAX_PENDING);
    p.pending[p.n].dst = dst;
    p.pending[p.n].src = src;
    p.pending[p.n].bytes = bytes;
    p.pending[p.n].committed = false;
    p.n++;
}
#else
__device__ __forceinline__ void att_cp16(att_cp_pipe &, void *dst, const void *src)
{
#if defined(__CUDA_ARCH__)
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#else
    (void)dst, (void)src; /* nvcc's host pass: device code only */
#endif
}
__device__ __forceinline__ void att_cp4(att_cp_pipe &, void *dst, const void *src)
{
#if defined(__CUDA_ARCH__)
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
#else
    (void)dst, (void)src;
#endif
}
#endif

__device__ __forceinline__ void att_cp_commit(att_cp_pipe &p)
{
#if defined(__CUDA_ARCH__)
    (void)p;
    asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(GPUCORE_SIMT)
    for (int k = 0; k < p.n; k++) p.pending[k].committed = true;
#else
    (void)p;
#endif
}

__device__ __forceinline__ void att_cp_wait_all(att_cp_pipe &p)
{
#if defined(__CUDA_ARCH__)
    (void)p;
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#elif defined(GPUCORE_SIMT)
    int left = 0;
    for (int k = 0; k < p.n; k++) {
        if (p.pending[k].committed) memcpy(p.pending[k].dst, p.pending[k].src, p.pending[k].bytes);
        else p.pending[left++] = p.pending[k]; /* not in a group: wait_group does not wait for it */
    }
    p.n = left;
#else
    (void)p;
#endif
}

#endif
