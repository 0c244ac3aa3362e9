/*
 * standin.h — internal interface shared by the contract-checking stand-ins for
 * the CUDA runtime, cuBLASLt, NCCL and cuDNN (tests/cuda_contract, test-only).
 *
 * The stand-ins are linked into libgpucore_cuda_contract.so together with the
 * REAL CUDA backend sources (src/backend/cuda/ *.c) and the kernels compiled for
 * the CPU by the SIMT layer. Every vendor call checks its documented contract;
 * a broken contract returns the vendor's error AND is recorded as a violation
 * whose text quotes the header (file:line). Tests read them through the exported
 * query functions below; at exit a process with unread violations prints them
 * and exits with status 3, so a test that never asks still fails.
 */
#ifndef GPUCORE_STANDIN_H
#define GPUCORE_STANDIN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define STANDIN_HIDDEN __attribute__((visibility("hidden")))
#define STANDIN_EXPORT __attribute__((visibility("default")))

/* ---- violations (standin_core.c) ---- */
/* Record a broken contract: `where` is the header citation ("cublasLt.h:1334"). */
STANDIN_HIDDEN void standin_violation(const char *api, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Exported to tests (dlsym on the module): */
STANDIN_EXPORT int standin_violation_count(void);
/* The i-th violation's text ("api: message [header:line]"); NULL past the end. */
STANDIN_EXPORT const char *standin_violation_text(int i);
/* Forget recorded violations (a test that provoked them on purpose). */
STANDIN_EXPORT void standin_violations_clear(void);
/* Counters of what the stand-ins executed: "matmul", "fallback_launch", "nccl_coll", "conv", ... */
STANDIN_EXPORT long standin_counter(const char *name);
/* Test control of the cuDNN stand-in's slow kernel: while held (1), a conv execution started with
 * STANDIN_DNN_EXEC_MS waits until released (0) or until that many ms have passed, so a test that needs an
 * execution still running does not depend on how fast the machine is. */
STANDIN_EXPORT void standin_dnn_hold(int held);
STANDIN_HIDDEN void standin_count(const char *name);

/* ---- a set of live handles (streams, events, descriptors, communicators) ---- */
typedef struct standin_set {
    pthread_mutex_t mu;
    void **slots;
    size_t cap, used;
} standin_set;
#define STANDIN_SET_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0}
STANDIN_HIDDEN void standin_set_add(standin_set *s, void *p);
STANDIN_HIDDEN int standin_set_remove(standin_set *s, void *p); /* 1 if it was there */
STANDIN_HIDDEN int standin_set_has(standin_set *s, void *p);
/* Copy up to max members into out; returns how many were copied. */
STANDIN_HIDDEN size_t standin_set_list(standin_set *s, void **out, size_t max);

/* ---- device and pinned memory (standin_core.c) ---- */
enum { STANDIN_MEM_NONE = 0, STANDIN_MEM_DEVICE = 1, STANDIN_MEM_PINNED = 2, STANDIN_MEM_FREED = 3 };
typedef struct standin_mem_info {
    int kind;          /* STANDIN_MEM_* ; NONE: not ours (pageable host memory) */
    int device;
    char *base;
    size_t size;
} standin_mem_info;
STANDIN_HIDDEN void standin_mem_add(void *p, size_t size, int kind, int device);
/* Moves the range to the freed quarantine; returns the kind it had (NONE if unknown). */
STANDIN_HIDDEN int standin_mem_remove(void *p, int kind, standin_mem_info *was);
STANDIN_HIDDEN standin_mem_info standin_mem_find(const void *p);
STANDIN_HIDDEN size_t standin_mem_device_bytes(int device);
/* Check that [p, p+bytes) lies in one live device allocation; records a violation otherwise.
 * Returns 1 if fine. `what` names the argument for the message. */
STANDIN_HIDDEN int standin_check_device_range(const char *api, const char *where, const char *what, const void *p,
                                              size_t bytes);

/* ---- the runtime's pieces other stand-ins use (standin_cudart.c) ---- */
struct CUstream_st;
struct CUevent_st;
STANDIN_HIDDEN int standin_current_device(void);
STANDIN_HIDDEN int standin_device_count(void);
/* Resolve a stream handle (NULL and the default-stream handles included); NULL + violation if dead. */
STANDIN_HIDDEN struct CUstream_st *standin_stream(const char *api, void *handle);
STANDIN_HIDDEN int standin_stream_device(struct CUstream_st *s);
/* Queue fn(args copy) on the stream's worker thread, in stream order. Returns 0 on success. */
typedef int (*standin_task_fn)(void *args);
STANDIN_HIDDEN int standin_stream_enqueue(struct CUstream_st *s, standin_task_fn fn, const void *args, size_t size);
/* 1 while the calling thread runs a cudaLaunchHostFunc callback (CUDA calls are forbidden there). */
STANDIN_HIDDEN int standin_in_host_fn(void);
/* Every API entry: flag calls made from inside a host function. */
STANDIN_HIDDEN void standin_api_enter(const char *api);

/* ---- NCCL's open group, consulted by the runtime (standin_nccl.c) ---- */
/* 1 if the calling thread has an open NCCL group holding collectives for stream s (not yet queued). */
STANDIN_HIDDEN int standin_nccl_group_holds_stream(void *stream);

/* env helpers */
STANDIN_HIDDEN long standin_env_long(const char *name, long dflt);

#endif
