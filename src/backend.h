/*
 * backend.h — the vtable a backend fills in: raw memory, copies, streams and
 * events, and one entry per op. Everything shared (validation, the caching
 * allocator, tensor bookkeeping) lives above it in the src/ front-end files; a backend only
 * supplies primitives. Backends: src/cpu (built in), src/cuda (a plugin module,
 * loaded at run time so libgpucore.so loads where no CUDA is installed), and the
 * test-only cuda-emulated module (tests/simt).
 *
 * Conventions: `bctx` is the backend's per-context state; `stream`/`event` are the
 * backend's own handles. Entries return gpucore_status and set the error message
 * through the plugin host's set_error. Async entries enqueue work on `stream`.
 */
#ifndef GPUCORE_BACKEND_H
#define GPUCORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "gpucore.h"
#include "../kernels/view.h"

#define GPUCORE_BACKEND_ABI 1

typedef void (*gpucore_host_fn)(void *arg);

typedef struct gpucore_backend {
    int abi;                       /* GPUCORE_BACKEND_ABI */
    const char *name;              /* "cpu", "cuda", "cuda-emulated" */
    gpucore_device_type type;

    /* --- devices (no context needed) --- */
    gpucore_status (*available)(char *why, size_t why_len);
    gpucore_status (*device_count)(int *count);
    gpucore_status (*device_properties)(int index, gpucore_device_properties *props);
    gpucore_status (*device_processes)(int index, int64_t *pids, int64_t *used, int max, int *count);
    gpucore_status (*can_access_peer)(int a, int b, int *can);
    gpucore_status (*component_version)(const char *component, char *buf, size_t len);

    /* --- per-context state --- */
    gpucore_status (*context_init)(int device_index, void **bctx);
    void (*context_fini)(void *bctx);

    /* --- raw memory (the caching allocator sits above these) --- */
    gpucore_status (*raw_alloc)(void *bctx, size_t bytes, void **ptr);
    void (*raw_free)(void *bctx, void *ptr);
    gpucore_status (*mem_info)(void *bctx, int64_t *free_bytes, int64_t *total_bytes);

    /* --- streams and events --- */
    gpucore_status (*stream_create)(void *bctx, int priority, void **stream);
    void (*stream_destroy)(void *bctx, void *stream);
    gpucore_status (*stream_synchronize)(void *bctx, void *stream);
    gpucore_status (*stream_query)(void *bctx, void *stream); /* OK or NOT_READY */
    /* Run fn(arg) on the host once all work queued before it on `stream` is done. */
    gpucore_status (*host_callback)(void *bctx, void *stream, gpucore_host_fn fn, void *arg);
    gpucore_status (*event_create)(void *bctx, void **event);
    void (*event_destroy)(void *bctx, void *event);
    gpucore_status (*event_record)(void *bctx, void *event, void *stream);
    gpucore_status (*stream_wait_event)(void *bctx, void *stream, void *event);
    gpucore_status (*event_synchronize)(void *bctx, void *event);
    gpucore_status (*event_query)(void *bctx, void *event);
    gpucore_status (*event_elapsed_ms)(void *bctx, void *start, void *end, float *ms);

    /* --- copies (contiguous byte ranges; strided copies go through copy_strided) --- */
    gpucore_status (*copy_h2d)(void *bctx, void *dst, const void *src, size_t bytes, void *stream);
    gpucore_status (*copy_d2h)(void *bctx, void *dst, const void *src, size_t bytes, void *stream);
    gpucore_status (*copy_d2d)(void *bctx, void *dst, const void *src, size_t bytes, void *stream);
    /* dst and src: same dtype and shape, device memory, any strides. */
    gpucore_status (*copy_strided)(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *stream);

    /* --- ops --- */
    /* bits: the value already converted to dst's dtype, in the low elem_size bytes. */
    gpucore_status (*fill)(void *bctx, const gpucore_view *dst, uint64_t bits, void *stream);
    gpucore_status (*random)(void *bctx, const gpucore_view *dst, int dist, double a, double b,
                             uint64_t seed, uint64_t offset, void *stream);
} gpucore_backend;

/* What libgpucore.so gives a plugin module so it can report errors and log
 * without linking against the library's internals. */
typedef struct gpucore_plugin_host {
    int abi;
    gpucore_status (*set_error)(gpucore_status status, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
} gpucore_plugin_host;

/* Every plugin module exports this symbol. */
#define GPUCORE_PLUGIN_ENTRY_NAME "gpucore_backend_plugin_entry"
typedef gpucore_status (*gpucore_plugin_entry_fn)(const gpucore_plugin_host *host, const gpucore_backend **out);

#endif
