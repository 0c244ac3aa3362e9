/*
 * caching_allocator.h — the one caching allocator of libgpucore, above the
 * backend vtable, used for device memory (raw segments from be->raw_alloc) and
 * for the pinned host pool (segments from be->host_alloc) on every backend.
 *
 * Shape of the thing:
 *   - Requests are rounded up to 512 bytes. Requests up to 1 MiB come from the
 *     small pool (2 MiB segments); bigger ones from the large pool (20 MiB
 *     segments, or a segment of their own, rounded to 2 MiB, from 10 MiB up).
 *   - Free small-pool blocks sit in per-stream exact-size bins (512-byte steps)
 *     with a bitmap of the non-empty ones, so best fit (the smallest cached block
 *     that fits; among equal sizes the most recently freed) is O(1); free
 *     large-pool blocks sit in a balanced tree keyed by (stream, size, address),
 *     best fit by one O(log n) lower-bound search. Live blocks are found by
 *     address in a hash table (caching_allocator_index.c). Blocks are split when the remainder is
 *     worth keeping and coalesced with free neighbours when freed.
 *   - Stream-ordered reuse: a block belongs to the stream it was allocated on and
 *     is reusable on that stream as soon as it is freed (later work on the stream
 *     runs after earlier work). Uses on other streams are recorded
 *     (record_stream); freeing such a block records a backend event on each of
 *     those streams and the block becomes reusable only when the events have
 *     completed (checked with event_query, never a device-wide sync).
 *   - Out of memory: search, then release cached whole segments and retry, then
 *     wait for pending events and retry, then GPUCORE_ERR_OUT_OF_MEMORY with a
 *     message giving the numbers and what to try. Nothing is left half-done.
 *
 * Thread safety: every entry takes the allocator's mutex. Backend tasks (stream
 * workers, host callbacks) must never call into the allocator: it may wait on
 * events while holding the mutex.
 */
#ifndef GPUCORE_CACHING_ALLOCATOR_H
#define GPUCORE_CACHING_ALLOCATOR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "core/base.h"
#include "backend/backend.h"

typedef struct caching_allocator caching_allocator;

/* Raw segment source: be->raw_alloc/raw_free, or be->host_alloc/host_free. */
typedef gpucore_status (*caching_allocator_raw_alloc_fn)(void *bctx, size_t bytes, void **ptr);
typedef void (*caching_allocator_raw_free_fn)(void *bctx, void *ptr);

/* Fault injection shared by a context's allocators: raw allocation attempts
 * number 1, 2, ... from the last arming; attempts nth .. nth+count-1 fail as if
 * out of memory (count < 0: every attempt from nth on). nth 0: disarmed. */
typedef struct caching_allocator_faults {
    atomic_llong attempts;
    atomic_llong nth;
    atomic_llong count;
} caching_allocator_faults;

/* Settings, as GPUCORE_ALLOC_CONF gives them. */
typedef struct caching_allocator_conf {
    int64_t max_split_size;   /* bytes; blocks at least this big are never split. INT64_MAX: no limit */
    int caching;              /* 0: every free returns the segment to the backend (in stream order) */
    int pinned_caching;       /* the same for the pinned host pool */
    int64_t limit_bytes;      /* 0: no limit */
    double limit_fraction;    /* 0: none; else a fraction of the device's total memory (wins over bytes) */
    int has_max_split, has_caching, has_pinned_caching, has_limit; /* which keys the string set */
} caching_allocator_conf;

/* Defaults (no limit, caching on, no max split size). */
GPUCORE_HIDDEN void caching_allocator_conf_default(caching_allocator_conf *conf);
/* Parse "key:value,key:value" (keys: max_split_size_mb, caching, pinned_caching,
 * limit) into conf, updating only the keys present. Any malformed input returns
 * GPUCORE_ERR_INVALID_ARGUMENT with a message naming the offending part and leaves
 * conf untouched. NULL or "" is valid (changes nothing). Never reads past the
 * string's terminator. */
GPUCORE_HIDDEN gpucore_status caching_allocator_parse_conf(const char *text, caching_allocator_conf *conf);

typedef struct caching_allocator_params {
    const gpucore_backend *be;
    void *bctx;
    caching_allocator_raw_alloc_fn raw_alloc;
    caching_allocator_raw_free_fn raw_free;
    const char *name;          /* "cpu", "cuda:0": for messages */
    const char *what;          /* "device memory" / "pinned host memory" */
    int host_visible;          /* pinned pool: the host may touch a block as soon as it is handed out, so
                                  every free waits for an event on the block's own stream as well */
    caching_allocator_faults *faults; /* may be NULL */
} caching_allocator_params;

GPUCORE_HIDDEN gpucore_status caching_allocator_create(const caching_allocator_params *params,
                                                       caching_allocator **out);
/* Returns every segment to the backend. The caller has synchronized the streams;
 * blocks still allocated are released too (their owners are gone). */
GPUCORE_HIDDEN void caching_allocator_destroy(caching_allocator *a);

/* bytes > 0. stream: the backend stream the block will be used on. */
GPUCORE_HIDDEN gpucore_status caching_allocator_alloc(caching_allocator *a, int64_t bytes, void *stream, void **ptr);
/* ptr from caching_allocator_alloc (NULL: no-op). Unknown pointers: INVALID_ARGUMENT. */
GPUCORE_HIDDEN gpucore_status caching_allocator_free(caching_allocator *a, void *ptr);
/* Inside a comm group (src/comm/comm_group.c) frees on this thread are held: the block
 * stays allocated until the outermost group ends (begin 0 at depth 1 frees them, in
 * order), because work that uses it may be held until then and an event recorded
 * meanwhile would read as complete. Destroying an allocator drops this thread's held
 * frees of it. */
GPUCORE_HIDDEN void caching_allocator_hold_frees(int begin);
/* The block at ptr is (also) used on `stream`: its reuse will wait for work queued
 * on stream before the block is freed. */
GPUCORE_HIDDEN gpucore_status caching_allocator_record_stream(caching_allocator *a, void *ptr, void *stream);
/* A backend stream is about to be destroyed (its work is finished): blocks tagged
 * with it move to `replacement` (the context's default stream). */
GPUCORE_HIDDEN void caching_allocator_stream_destroyed(caching_allocator *a, void *stream, void *replacement);

/* Release cached whole segments to the backend (waiting only on their streams). */
GPUCORE_HIDDEN gpucore_status caching_allocator_empty_cache(caching_allocator *a);
GPUCORE_HIDDEN void caching_allocator_set_caching(caching_allocator *a, int enabled);
GPUCORE_HIDDEN void caching_allocator_set_max_split_size(caching_allocator *a, int64_t bytes);
/* 0: no limit. */
GPUCORE_HIDDEN void caching_allocator_set_limit(caching_allocator *a, int64_t bytes);
GPUCORE_HIDDEN int64_t caching_allocator_limit(caching_allocator *a);
GPUCORE_HIDDEN int caching_allocator_caching(caching_allocator *a);
GPUCORE_HIDDEN int64_t caching_allocator_max_split_size(caching_allocator *a);

GPUCORE_HIDDEN void caching_allocator_get_stats(caching_allocator *a, gpucore_memory_stats *stats);
GPUCORE_HIDDEN void caching_allocator_reset_peak_stats(caching_allocator *a);
/* A watermark: the peak of the allocator's allocated bytes since it was added or last
 * restarted (core/internal.h's gpucore_memory_watermark_* calls take them on a context's
 * device allocator). Every allocation raises the peak of each one added. */
typedef struct gpucore_memory_watermark {
    int64_t peak;
    struct gpucore_memory_watermark *next;
} gpucore_memory_watermark;
GPUCORE_HIDDEN void caching_allocator_watermark_add(caching_allocator *a, gpucore_memory_watermark *w);
GPUCORE_HIDDEN void caching_allocator_watermark_remove(caching_allocator *a, gpucore_memory_watermark *w);
GPUCORE_HIDDEN int64_t caching_allocator_watermark_restart(caching_allocator *a, gpucore_memory_watermark *w);
GPUCORE_HIDDEN int64_t caching_allocator_watermark_read(caching_allocator *a, gpucore_memory_watermark *w, int64_t *peak);
/* Text (json 0) or JSON (json 1) listing of segments and blocks into buf (always
 * NUL-terminated when len > 0); returns the bytes needed including the NUL. */
GPUCORE_HIDDEN int64_t caching_allocator_snapshot(caching_allocator *a, int json, char *buf, int64_t len);

/* Memory categories. Every allocation is tagged with its thread's current category
 * (a gpucore_mem_category; set around the allocation sites of the model layer, the
 * optimizer and the executors) and the allocator keeps the allocated bytes per tag,
 * and a copy of them taken when it refuses a request (out of memory). Untagged
 * allocations (the caller's own tensors) count as tag GPUCORE_MEM_CATEGORIES. */
/* Make `tag` this thread's category (-1: untagged); returns the previous one, to restore. */
GPUCORE_HIDDEN int caching_allocator_tag_set(int tag);
/* The block at ptr (an allocation's start) is held as `tag` from now on (a tensor the
 * checkpoint executor keeps); unknown pointers are ignored. */
GPUCORE_HIDDEN void caching_allocator_retag(caching_allocator *a, void *ptr, int tag);
/* live / at_oom (either may be NULL): GPUCORE_MEM_CATEGORIES + 1 entries each. */
GPUCORE_HIDDEN void caching_allocator_tag_bytes(caching_allocator *a, int64_t *live, int64_t *at_oom);

/* Rounding and segment sizing, exposed for the tests' model. */
GPUCORE_HIDDEN int64_t caching_allocator_round_size(int64_t bytes);

#endif
