/*
 * internal.h — what the API front-end files share: the error and log helpers
 * (base.h), the handle pool, and the layouts of the opaque handles (context, stream,
 * event, tensor). Never included by backends' device code or by users.
 */
#ifndef GPUCORE_INTERNAL_H
#define GPUCORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "gpucore.h"
#include "base.h"
#include "backend/backend.h"
#include "alloc/caching_allocator.h"

/* The error setter and logger handed to backend modules (backend_registry.c). */
GPUCORE_HIDDEN extern const gpucore_plugin_host gpucore_plugin_host_table;

/* ---- backends (backend_registry.c) ---- */
/* The backend for a device type, loading its plugin on first use. NULL with the
 * reason in the thread's error message when it cannot be had. */
GPUCORE_HIDDEN const gpucore_backend *gpucore_backend_get(gpucore_device_type type);
GPUCORE_HIDDEN const gpucore_backend *gpucore_cpu_backend(void);

/* ---- host memory (memory.c) ----
 * Aligned host memory, huge pages for blocks of 2 MiB or more: the CPU backend's "device" and
 * "pinned" memory, and pinned memory where a backend has none (the raw_alloc signature). */
GPUCORE_HIDDEN gpucore_status gpucore_host_memory_alloc(void *bctx, size_t bytes, void **ptr);
GPUCORE_HIDDEN void gpucore_host_memory_free(void *bctx, void *ptr);
/* Bytes this process can still get from the machine: MemAvailable + SwapFree, and no more than
 * what a cgroup (v2 or v1) memory limit leaves; -1 where nothing can be read. */
GPUCORE_HIDDEN int64_t gpucore_host_available_bytes(void);
/* gpucore_host_available_bytes less what the large blocks this library holds may still take (their
 * pages come when first written, often later, by a queued op); -1 where unknown. The CPU backend's
 * free memory; a large host block that would not fit in it is refused with OUT_OF_MEMORY. */
GPUCORE_HIDDEN int64_t gpucore_host_free_bytes(void);

/* ---- handle pool (handle_pool.c) ----
 * Handles are allocated from pools that never give memory back to the system and
 * recycle oldest-first after a quarantine, so checking a destroyed handle's magic
 * reads valid memory and reports GPUCORE_ERR_INVALID_HANDLE. */
#define GPUCORE_MAGIC_DEAD 0xDEADDEADu
typedef struct gpucore_handle_pool {
    size_t size;
    pthread_mutex_t lock;
    void **fifo;         /* ring buffer of released handles */
    size_t cap, head, count;
} gpucore_handle_pool;
/* A pool for handles of `sz` bytes (whose first field is the uint32_t magic), e.g.
 * static gpucore_handle_pool comm_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_comm)); */
#define GPUCORE_HANDLE_POOL_INIT(sz) {(sz), PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0}
GPUCORE_HIDDEN void *gpucore_handle_alloc(gpucore_handle_pool *pool);
GPUCORE_HIDDEN void gpucore_handle_release(gpucore_handle_pool *pool, void *handle);
GPUCORE_HIDDEN extern gpucore_handle_pool gpucore_context_pool, gpucore_stream_pool, gpucore_event_pool,
    gpucore_tensor_pool;

/* ---- handle layouts ---- */
#define GPUCORE_MAGIC_CONTEXT 0xC0C0C0C1u
#define GPUCORE_MAGIC_STREAM 0x57E457E4u
#define GPUCORE_MAGIC_EVENT 0xE7E7E7E7u
#define GPUCORE_MAGIC_TENSOR 0x7E7507E5u

struct gpucore_stream {
    uint32_t magic;               /* first field of every handle */
    gpucore_context *ctx;
    void *bstream;                /* backend's stream */
    int is_default;
    struct gpucore_stream *next;  /* context's list of streams */
    int is_pool;                  /* one of the context's pool streams: destroyed with the context */
};

struct gpucore_event {
    uint32_t magic;
    gpucore_context *ctx;
    void *bevent;
    struct gpucore_event *prev, *next; /* context's list of live events (freed with the context) */
};

/* The cuBLASLt workspace a CUDA matmul takes from the allocator for its duration, unless
 * gpucore_matmul_set_workspace_size says otherwise (matmul.c; the memory planner counts it). */
#define MATMUL_DEFAULT_WORKSPACE (32ll << 20)

struct gpucore_context {
    uint32_t magic;
    const gpucore_backend *be;
    void *bctx;
    gpucore_device_type type;
    int index;
    char name[32];
    int64_t id;                   /* 1, 2, ... in creation order (gpucore_context_id) */
    gpucore_stream *default_stream;
    pthread_mutex_t lock;         /* guards the stream list */
    gpucore_stream *streams;      /* all live streams incl. the default */
    struct gpucore_event *events; /* all live events */
    struct gpucore_tensor *tensors; /* all live tensor handles (freed with the context) */
    struct gpucore_memory_state *memory; /* caching allocators (memory.c) */
    gpucore_stream *pool_streams[2][4];  /* [high priority][i], created on first use (stream.c) */
    atomic_uint pool_next[2];
    atomic_int matmul_allow_tf32;        /* matmul.c: context default for f32 operands (0 off) */
    atomic_llong matmul_workspace_bytes; /* matmul.c: cuBLASLt workspace; 0 = MATMUL_DEFAULT_WORKSPACE */
    atomic_llong matmul_gemms;           /* matmul.c: gpucore_matmul_stats */
    atomic_llong matmul_fallbacks[GPUCORE_MATMUL_FALLBACK_REASONS];
    atomic_llong attn_cudnn_calls;    /* attention.c: gpucore_attention_stats */
    atomic_llong attn_fallbacks[GPUCORE_ATTN_FALLBACK_REASONS];
    atomic_int current_set;              /* stream.c: 1 once any thread set a current stream for it */
    atomic_int profile_flags;            /* profile.c: GPUCORE_PROFILE_* bits; 0 = profiling off */
    struct gpucore_profiler *profiler;   /* profile.c: per-op records, created on first enable */
    /* Where the backend counts every stream's queued work and unreported errors
     * (backend.h: stream_count_pending): 0 = a synchronize has nothing to do. Nonzero
     * once the context is destroyed. Only kept where be->stream_count_pending is set. */
    uint64_t pending;
};

/* Memory a tensor and its views share. Freed (in stream order) when the last view goes. */
typedef struct gpucore_storage {
    atomic_int refcount;
    gpucore_context *ctx;
    void *base;
    int64_t bytes;
    void *alloc_bstream;          /* stream the memory was allocated on (owned memory) */
    void (*deleter)(void *);      /* wrapped memory: the owner's release, or NULL */
    void *deleter_ctx;
    int owned;                    /* 1 if the library allocated base */
} gpucore_storage;

struct gpucore_tensor {
    uint32_t magic;
    gpucore_context *ctx;
    gpucore_storage *storage;
    int32_t dtype;
    int32_t ndim;
    int64_t offset;               /* elements from storage->base */
    int64_t shape[GPUCORE_MAX_DIMS];
    int64_t strides[GPUCORE_MAX_DIMS];
    struct gpucore_tensor *prev, *next; /* context's list of live tensors */
};

/* ---- validation helpers (validate.c) ---- */
/* DEVICE_MISMATCH for two handles of one call that belong to different contexts: names both
 * contexts by id and device and says how to fix it. a_what/b_what describe the handles
 * ("'out'", "the communicator"). */
GPUCORE_HIDDEN gpucore_status gpucore_context_mismatch(const char *op, const char *a_what, const gpucore_context *a,
                                                       const char *b_what, const gpucore_context *b);
GPUCORE_HIDDEN gpucore_status gpucore_check_context(const gpucore_context *ctx, const char *op);
GPUCORE_HIDDEN gpucore_status gpucore_check_tensor(const gpucore_tensor *t, const char *op, const char *arg);
/* Whether t is a live tensor of a live context: gpucore_check_tensor without the message. */
GPUCORE_HIDDEN int gpucore_tensor_live(const gpucore_tensor *t);
GPUCORE_HIDDEN gpucore_status gpucore_check_event(const gpucore_event *e, const char *op);
GPUCORE_HIDDEN gpucore_status gpucore_check_stream(const gpucore_stream *s, const char *op);
/* Resolve a stream argument (NULL -> current stream) and check it belongs to ctx. */
GPUCORE_HIDDEN gpucore_status gpucore_resolve_stream(gpucore_context *ctx, gpucore_stream *s, const char *op,
                                                     gpucore_stream **out);
/* Check a shape (0..8 dims, entries >= 0) and compute its element count and byte
 * size without overflow. */
GPUCORE_HIDDEN gpucore_status gpucore_check_shape(int ndim, const int64_t *shape, gpucore_dtype dtype,
                                                  const char *op, int64_t *numel, int64_t *nbytes);
GPUCORE_HIDDEN int gpucore_dtype_valid(int dtype);
/* "[2, 3, 4]" into buf. */
GPUCORE_HIDDEN const char *gpucore_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* ---- tensors (tensor.c) ---- */
GPUCORE_HIDDEN int64_t gpucore_tensor_numel_unchecked(const gpucore_tensor *t);
GPUCORE_HIDDEN int gpucore_tensor_contiguous_unchecked(const gpucore_tensor *t);
GPUCORE_HIDDEN void gpucore_tensor_view_of(const gpucore_tensor *t, gpucore_view *v);

/* ---- memory (memory.c): every device allocation of the library goes through here ---- */
GPUCORE_HIDDEN gpucore_status gpucore_memory_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream,
                                                   void **ptr);
GPUCORE_HIDDEN void gpucore_memory_free(gpucore_context *ctx, void *ptr, void *alloc_bstream);
/* The memory at ptr (from gpucore_memory_alloc) is also used on stream. */
GPUCORE_HIDDEN gpucore_status gpucore_memory_record_stream(gpucore_context *ctx, void *ptr, gpucore_stream *stream);
/* Context create/destroy: set up the allocators (reads GPUCORE_ALLOC_CONF), and
 * release everything once the context's streams are synchronized. */
GPUCORE_HIDDEN gpucore_status gpucore_memory_init(gpucore_context *ctx);
GPUCORE_HIDDEN void gpucore_memory_fini(gpucore_context *ctx);
/* A stream is about to be destroyed (its work is done): retag its memory. */
GPUCORE_HIDDEN void gpucore_memory_stream_destroyed(gpucore_context *ctx, gpucore_stream *stream);
/* A watermark on the context's device allocator: the peak of its allocated bytes since
 * the watermark was added or last restarted. It is kept apart from the statistics' peaks,
 * which belong to the caller (gpucore_memory_reset_peak_stats): the library's executors
 * measure their phases with watermarks and never reset the statistics. Remove it before
 * freeing it (nothing to remove once the context is gone). The type is the allocator's
 * (alloc/caching_allocator.h). */
GPUCORE_HIDDEN void gpucore_memory_watermark_add(gpucore_context *ctx, gpucore_memory_watermark *w);
GPUCORE_HIDDEN void gpucore_memory_watermark_remove(gpucore_context *ctx, gpucore_memory_watermark *w);
/* Set the peak to the allocated bytes now; returns them. */
GPUCORE_HIDDEN int64_t gpucore_memory_watermark_restart(gpucore_context *ctx, gpucore_memory_watermark *w);
/* The allocated bytes now, and the peak since the last restart in *peak (may be NULL). */
GPUCORE_HIDDEN int64_t gpucore_memory_watermark_read(gpucore_context *ctx, gpucore_memory_watermark *w, int64_t *peak);
/* t's memory (a block of its context's device allocator) is held as `category` (a gpucore_mem_category)
 * from now on; wrapped memory is left alone. Allocations take their thread's category: caching_allocator_tag_set. */
GPUCORE_HIDDEN void gpucore_memory_tag_tensor(const gpucore_tensor *t, int category);

/* ---- tensors, continued ---- */
/* Release every tensor handle still alive in ctx (context destroy). */
GPUCORE_HIDDEN void gpucore_tensors_destroy_all(gpucore_context *ctx);

/* ---- profiling (profile.c) ----
 * Front-ends bracket each backend dispatch with
 *     void *prof = gpucore_prof_begin(ctx, stream, "name", bytes);
 *     st = ctx->be->...;
 *     gpucore_prof_end(ctx, prof);
 * Off (the default) this is one branch each. On, begin records a backend event on
 * the stream (device time, no host sync), end another; the summary resolves them
 * lazily. Only the outermost bracket on a thread is counted (an op built from
 * other ops counts once); NVTX ranges (GPUCORE_NVTX=1) nest. name: a string that
 * lives forever (a literal). stream may be NULL (the current stream). */
#define GPUCORE_PROFILE_SUMMARY 1 /* per-op counters (gpucore_profiler_enable) */
#define GPUCORE_PROFILE_NVTX 2    /* backend ranges (GPUCORE_NVTX=1, CUDA) */
GPUCORE_HIDDEN void *gpucore_profile_begin(gpucore_context *ctx, gpucore_stream *stream, const char *name, int64_t bytes);
GPUCORE_HIDDEN void gpucore_profile_end(gpucore_context *ctx, void *token);
GPUCORE_HIDDEN void gpucore_profile_init(gpucore_context *ctx); /* reads GPUCORE_PROFILE, GPUCORE_NVTX */
/* Count one call under name (a literal) without timing it: a detail of the op being profiled (matmul_fallback). */
GPUCORE_HIDDEN void gpucore_profile_count(gpucore_context *ctx, const char *name);
GPUCORE_HIDDEN void gpucore_profile_fini(gpucore_context *ctx); /* streams already synchronized */
static inline void *gpucore_prof_begin(gpucore_context *ctx, gpucore_stream *stream, const char *name, int64_t bytes)
{
    if (__builtin_expect(!atomic_load_explicit(&ctx->profile_flags, memory_order_relaxed), 1)) return NULL;
    return gpucore_profile_begin(ctx, stream, name, bytes);
}
static inline void gpucore_prof_end(gpucore_context *ctx, void *token)
{
    if (__builtin_expect(token != NULL, 0)) gpucore_profile_end(ctx, token);
}
/* Bytes of a tensor's logical contents (0 for NULL), for the bytes argument. */
static inline int64_t gpucore_prof_bytes(const gpucore_tensor *t)
{
    return t ? gpucore_tensor_numel_unchecked(t) * gpucore_dtype_size((gpucore_dtype)t->dtype) : 0;
}

/* ---- streams (stream.c) ---- */
GPUCORE_HIDDEN void gpucore_streams_destroy_all(gpucore_context *ctx);
/* Release every event handle still alive in ctx (context destroy). */
GPUCORE_HIDDEN void gpucore_events_destroy_all(gpucore_context *ctx);
/* gpucore_event_create for an event the library only orders work with and never times (DDP, comm):
 * cudaEventDisableTiming on CUDA, cheaper to record and wait on. */
GPUCORE_HIDDEN gpucore_status gpucore_event_create_untimed(gpucore_context *ctx, gpucore_event **out);

#endif
