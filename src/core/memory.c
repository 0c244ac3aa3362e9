/*
 * memory.c — the single path by which the library obtains and returns device
 * memory (tensors, workspaces, temporaries) and pinned host memory: each context
 * has two caching allocators (src/alloc/caching_allocator.c), one over the
 * backend's raw device memory and one over its pinned host memory. This file is
 * the API front-end: argument checks, GPUCORE_ALLOC_CONF, stats and snapshots,
 * record_stream, and the fault-injection hook for tests.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "internal.h"
#include "alloc/caching_allocator.h"

typedef struct gpucore_memory_state gpucore_memory_state;

struct gpucore_memory_state {
    caching_allocator *device;
    caching_allocator *host;
    caching_allocator_faults faults;
};

/* Host memory for the CPU backend's "device" memory and for pinned memory where the backend has
 * none: 256-byte aligned like cudaMalloc, so vector paths behave alike. A block of 2 MiB or more is
 * 2 MiB aligned and sized, and asked for transparent huge pages (MADV_HUGEPAGE, what PyTorch's CPU
 * allocator does for large blocks; where the system's THP setting is "madvise" only asked-for
 * regions get them): a 16 MiB tensor then spans 8 TLB entries instead of 4096. The caching
 * allocator keeps blocks, so a huge page's first-touch cost is paid once. */
#define HOST_HUGE_PAGE ((size_t)2 << 20)
/* Blocks from this size on are checked against what the machine can still give (below). */
#define HOST_CHECKED_BYTES ((size_t)256 << 20)

/* The number in the first line of `path` that starts with `key` (a /proc/meminfo line, in kB,
 * times `unit`; with key "" the file's first number), or -1. "max" reads as INT64_MAX. */
static int64_t read_number(const char *path, const char *key, int64_t unit)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    const size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0) continue;
        const char *p = line + klen;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "max", 3) == 0) v = INT64_MAX;
        else {
            char *end;
            long long x = strtoll(p, &end, 10);
            if (end != p && x >= 0) v = x > INT64_MAX / unit ? INT64_MAX : (int64_t)x * unit;
        }
        break;
    }
    fclose(f);
    return v;
}

int64_t gpucore_host_available_bytes(void)
{
    int64_t avail = read_number("/proc/meminfo", "MemAvailable:", 1024);
    const int64_t swap = read_number("/proc/meminfo", "SwapFree:", 1024);
    if (avail >= 0 && swap > 0) avail = swap > INT64_MAX - avail ? INT64_MAX : avail + swap;
    static const char *const limits[2][2] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                                             {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                              "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
    for (int i = 0; i < 2; i++) {
        const int64_t max = read_number(limits[i][0], "", 1), used = read_number(limits[i][1], "", 1);
        if (max < 0 || max == INT64_MAX || used < 0) continue;
        const int64_t left = max > used ? max - used : 0;
        if (avail < 0 || left < avail) avail = left;
        break;
    }
    return avail;
}

/* Bytes of the checked blocks this process holds now (all contexts). Such a block's pages are
 * taken only when first written, often later, by a queued op: what the machine reports as
 * available does not yet count them. */
static int64_t checked_held;

int64_t gpucore_host_free_bytes(void)
{
    const int64_t avail = gpucore_host_available_bytes();
    if (avail < 0) return -1;
    int64_t res_bytes = -1; /* /proc/self/statm: size, then resident, in pages */
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        long long sz, res;
        if (fscanf(f, "%lld %lld", &sz, &res) == 2 && res >= 0) res_bytes = (int64_t)res * sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    const int64_t held = __atomic_load_n(&checked_held, __ATOMIC_RELAXED);
    const int64_t pending = res_bytes >= 0 && held > res_bytes ? held - res_bytes : 0;
    return avail > pending ? avail - pending : 0;
}

/* Whether a checked block of `bytes` fits: gpucore_host_free_bytes, less a margin of 1/32 of the
 * machine's memory for everything else, must cover it. An unknown figure lets it through. */
static int host_block_fits(size_t bytes)
{
    const int64_t free_b = gpucore_host_free_bytes();
    if (free_b < 0) return 1;
    const long page = sysconf(_SC_PAGESIZE), phys = sysconf(_SC_PHYS_PAGES);
    const int64_t margin = page > 0 && phys > 0 ? (int64_t)phys * page / 32 : 0;
    return (double)bytes <= (double)free_b - (double)margin;
}

gpucore_status gpucore_host_memory_alloc(void *bctx, size_t bytes, void **ptr)
{
    (void)bctx;
    const size_t align = bytes >= HOST_HUGE_PAGE ? HOST_HUGE_PAGE : 256;
    const size_t rounded = (bytes + align - 1) & ~(align - 1);
    if (rounded < bytes) return GPUCORE_ERR_OUT_OF_MEMORY;
    /* Linux hands out memory it does not have (overcommit) and kills the process when it is
     * touched: a block larger than what is still available is refused here instead, as a GPU
     * refuses one (the caching allocator then releases what it caches and asks again) */
    if (rounded >= HOST_CHECKED_BYTES && !host_block_fits(rounded)) return GPUCORE_ERR_OUT_OF_MEMORY;
    *ptr = aligned_alloc(align, rounded);
    if (!*ptr) return GPUCORE_ERR_OUT_OF_MEMORY;
    const size_t usable = malloc_usable_size(*ptr); /* free() tests and subtracts the same figure */
    if (usable >= HOST_CHECKED_BYTES) __atomic_add_fetch(&checked_held, (int64_t)usable, __ATOMIC_RELAXED);
#ifdef MADV_HUGEPAGE
    if (align == HOST_HUGE_PAGE) (void)madvise(*ptr, rounded, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
    return GPUCORE_OK;
}

void gpucore_host_memory_free(void *bctx, void *ptr)
{
    (void)bctx;
    if (ptr) {
        const size_t n = malloc_usable_size(ptr);
        if (n >= HOST_CHECKED_BYTES) __atomic_sub_fetch(&checked_held, (int64_t)n, __ATOMIC_RELAXED);
    }
    free(ptr);
}

static gpucore_status apply_conf(gpucore_context *ctx, const caching_allocator_conf *c)
{
    gpucore_memory_state *m = ctx->memory;
    if (c->has_limit) {
        int64_t limit = c->limit_bytes;
        if (c->limit_fraction > 0) {
            int64_t free_b = 0, total_b = 0;
            gpucore_status st = ctx->be->mem_info(ctx->bctx, &free_b, &total_b);
            if (st) return st;
            limit = (int64_t)((double)total_b * c->limit_fraction);
            if (limit <= 0) limit = 1;
        }
        caching_allocator_set_limit(m->device, limit);
    }
    if (c->has_max_split) caching_allocator_set_max_split_size(m->device, c->max_split_size == INT64_MAX ? 0 : c->max_split_size);
    if (c->has_caching) caching_allocator_set_caching(m->device, c->caching);
    if (c->has_pinned_caching) caching_allocator_set_caching(m->host, c->pinned_caching);
    return GPUCORE_OK;
}

gpucore_status gpucore_memory_init(gpucore_context *ctx)
{
    caching_allocator_conf conf;
    caching_allocator_conf_default(&conf);
    gpucore_status st = caching_allocator_parse_conf(getenv("GPUCORE_ALLOC_CONF"), &conf);
    if (st) return st;
    gpucore_memory_state *m = calloc(1, sizeof *m);
    if (!m) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "context_create: out of host memory");
    caching_allocator_params dp = {
        .be = ctx->be, .bctx = ctx->bctx, .raw_alloc = ctx->be->raw_alloc, .raw_free = ctx->be->raw_free,
        .name = ctx->name, .what = "device memory", .host_visible = 0, .faults = &m->faults};
    caching_allocator_params hp = dp;
    hp.raw_alloc = ctx->be->host_alloc ? ctx->be->host_alloc : gpucore_host_memory_alloc;
    hp.raw_free = ctx->be->host_free ? ctx->be->host_free : gpucore_host_memory_free;
    hp.what = "pinned host memory";
    hp.host_visible = 1;
    if ((st = caching_allocator_create(&dp, &m->device)) || (st = caching_allocator_create(&hp, &m->host))) {
        caching_allocator_destroy(m->device);
        free(m);
        return st;
    }
    ctx->memory = m;
    if ((st = apply_conf(ctx, &conf))) {
        gpucore_memory_fini(ctx);
        return st;
    }
    return GPUCORE_OK;
}

void gpucore_memory_fini(gpucore_context *ctx)
{
    gpucore_memory_state *m = ctx->memory;
    if (!m) return;
    ctx->memory = NULL;
    caching_allocator_destroy(m->device);
    caching_allocator_destroy(m->host);
    free(m);
}

void gpucore_memory_stream_destroyed(gpucore_context *ctx, gpucore_stream *stream)
{
    gpucore_memory_state *m = ctx->memory;
    if (!m) return;
    void *replacement = ctx->default_stream && ctx->default_stream != stream ? ctx->default_stream->bstream : NULL;
    caching_allocator_stream_destroyed(m->device, stream->bstream, replacement);
    caching_allocator_stream_destroyed(m->host, stream->bstream, replacement);
}

gpucore_status gpucore_memory_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream, void **ptr)
{
    *ptr = NULL;
    if (bytes == 0) return GPUCORE_OK;
    if (!stream) stream = ctx->default_stream;
    return caching_allocator_alloc(ctx->memory->device, bytes, stream->bstream, ptr);
}

void gpucore_memory_free(gpucore_context *ctx, void *ptr, void *alloc_bstream)
{
    (void)alloc_bstream; /* the allocator knows each block's stream */
    if (!ptr || !ctx->memory) return;
    if (caching_allocator_free(ctx->memory->device, ptr) != GPUCORE_OK)
        gpucore_log(GPUCORE_LOG_ERROR, "internal: freeing %p: %s", ptr, gpucore_last_error());
}

gpucore_status gpucore_memory_record_stream(gpucore_context *ctx, void *ptr, gpucore_stream *stream)
{
    if (!ptr) return GPUCORE_OK;
    return caching_allocator_record_stream(ctx->memory->device, ptr, stream->bstream);
}

void gpucore_memory_watermark_add(gpucore_context *ctx, gpucore_memory_watermark *w)
{
    caching_allocator_watermark_add(ctx->memory->device, w);
}

void gpucore_memory_watermark_remove(gpucore_context *ctx, gpucore_memory_watermark *w)
{
    if (ctx->memory) caching_allocator_watermark_remove(ctx->memory->device, w);
}

int64_t gpucore_memory_watermark_restart(gpucore_context *ctx, gpucore_memory_watermark *w)
{
    return caching_allocator_watermark_restart(ctx->memory->device, w);
}

int64_t gpucore_memory_watermark_read(gpucore_context *ctx, gpucore_memory_watermark *w, int64_t *peak)
{
    return caching_allocator_watermark_read(ctx->memory->device, w, peak);
}

/* ---- public API ---- */

static gpucore_status pick(gpucore_context *ctx, gpucore_memory_kind kind, const char *op, caching_allocator **a)
{
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (kind == GPUCORE_MEMORY_DEVICE) *a = ctx->memory->device;
    else if (kind == GPUCORE_MEMORY_PINNED_HOST) *a = ctx->memory->host;
    else
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: kind %d is neither GPUCORE_MEMORY_DEVICE (0) nor GPUCORE_MEMORY_PINNED_HOST (1)",
                                 op, (int)kind);
    return GPUCORE_OK;
}

gpucore_status gpucore_memory_get_stats(gpucore_context *ctx, gpucore_memory_kind kind, gpucore_memory_stats *stats)
{
    caching_allocator *a = NULL;
    gpucore_status st = pick(ctx, kind, "memory_get_stats", &a);
    if (st) return st;
    if (!stats) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "memory_get_stats: stats is NULL");
    if (stats->struct_size < (int64_t)sizeof *stats)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "memory_get_stats: stats->struct_size is %lld; set it to sizeof(gpucore_memory_stats) = %zu",
                                 (long long)stats->struct_size, sizeof *stats);
    caching_allocator_get_stats(a, stats);
    return GPUCORE_OK;
}

gpucore_status gpucore_memory_get_categories(gpucore_context *ctx, gpucore_memory_categories *out)
{
    caching_allocator *a = NULL;
    gpucore_status st = pick(ctx, GPUCORE_MEMORY_DEVICE, "memory_get_categories", &a);
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "memory_get_categories: out is NULL");
    if (out->struct_size != (int64_t)sizeof *out)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "memory_get_categories: out->struct_size is %lld; set it "
                                 "to sizeof(gpucore_memory_categories) = %zu", (long long)out->struct_size, sizeof *out);
    caching_allocator_tag_bytes(a, out->live, out->at_oom);
    return GPUCORE_OK;
}

void gpucore_memory_tag_tensor(const gpucore_tensor *t, int category)
{
    if (t && t->storage && t->storage->owned && t->storage->ctx && t->storage->ctx->memory)
        caching_allocator_retag(t->storage->ctx->memory->device, t->storage->base, category);
}

gpucore_status gpucore_memory_reset_peak_stats(gpucore_context *ctx, gpucore_memory_kind kind)
{
    caching_allocator *a = NULL;
    gpucore_status st = pick(ctx, kind, "memory_reset_peak_stats", &a);
    if (st) return st;
    caching_allocator_reset_peak_stats(a);
    return GPUCORE_OK;
}

gpucore_status gpucore_memory_snapshot(gpucore_context *ctx, gpucore_memory_kind kind, gpucore_snapshot_format format,
                                       char *buf, int64_t buf_len, int64_t *needed)
{
    caching_allocator *a = NULL;
    gpucore_status st = pick(ctx, kind, "memory_snapshot", &a);
    if (st) return st;
    if (format != GPUCORE_SNAPSHOT_TEXT && format != GPUCORE_SNAPSHOT_JSON)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "memory_snapshot: format %d is neither TEXT (0) nor JSON (1)",
                                 (int)format);
    if (buf_len < 0 || (!buf && buf_len > 0))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "memory_snapshot: buf is %s with buf_len %lld",
                                 buf ? "set" : "NULL", (long long)buf_len);
    int64_t n = caching_allocator_snapshot(a, format == GPUCORE_SNAPSHOT_JSON, buf, buf_len);
    if (needed) *needed = n;
    if (!buf) return GPUCORE_OK;
    if (n > buf_len)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "memory_snapshot: the buffer holds %lld bytes but the snapshot needs %lld; call again "
                                 "with a buffer of at least *needed bytes",
                                 (long long)buf_len, (long long)n);
    return GPUCORE_OK;
}

gpucore_status gpucore_memory_empty_cache(gpucore_context *ctx, gpucore_memory_kind kind)
{
    caching_allocator *a = NULL;
    gpucore_status st = pick(ctx, kind, "memory_empty_cache", &a);
    if (st) return st;
    return caching_allocator_empty_cache(a);
}

gpucore_status gpucore_memory_set_limit(gpucore_context *ctx, int64_t bytes)
{
    gpucore_status st = gpucore_check_context(ctx, "memory_set_limit");
    if (st) return st;
    if (bytes < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "memory_set_limit: %lld bytes; use 0 for no limit",
                                 (long long)bytes);
    caching_allocator_set_limit(ctx->memory->device, bytes);
    return GPUCORE_OK;
}

gpucore_status gpucore_memory_set_limit_fraction(gpucore_context *ctx, double fraction)
{
    gpucore_status st = gpucore_check_context(ctx, "memory_set_limit_fraction");
    if (st) return st;
    if (!(fraction >= 0.0 && fraction <= 1.0))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "memory_set_limit_fraction: %g is not in [0, 1] (0 removes the limit)", fraction);
    caching_allocator_conf c;
    caching_allocator_conf_default(&c);
    c.has_limit = 1;
    c.limit_fraction = fraction;
    return apply_conf(ctx, &c);
}

gpucore_status gpucore_memory_set_caching(gpucore_context *ctx, gpucore_memory_kind kind, int enabled)
{
    caching_allocator *a = NULL;
    gpucore_status st = pick(ctx, kind, "memory_set_caching", &a);
    if (st) return st;
    if (enabled != 0 && enabled != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "memory_set_caching: enabled is %d; use 0 or 1", enabled);
    caching_allocator_set_caching(a, enabled);
    return GPUCORE_OK;
}

gpucore_status gpucore_alloc_conf_validate(const char *conf)
{
    caching_allocator_conf c;
    caching_allocator_conf_default(&c);
    return caching_allocator_parse_conf(conf, &c);
}

gpucore_status gpucore_memory_configure(gpucore_context *ctx, const char *conf)
{
    gpucore_status st = gpucore_check_context(ctx, "memory_configure");
    if (st) return st;
    caching_allocator_conf c;
    caching_allocator_conf_default(&c);
    if ((st = caching_allocator_parse_conf(conf, &c))) return st;
    return apply_conf(ctx, &c);
}

gpucore_status gpucore_memory_get_conf(gpucore_context *ctx, char *buf, size_t buf_len)
{
    gpucore_status st = gpucore_check_context(ctx, "memory_get_conf");
    if (st) return st;
    if (!buf || !buf_len) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "memory_get_conf: buf is NULL or empty");
    gpucore_memory_state *m = ctx->memory;
    int n = snprintf(buf, buf_len, "max_split_size_mb:%lld,caching:%d,pinned_caching:%d,limit:%lld",
                     (long long)(caching_allocator_max_split_size(m->device) >> 20), caching_allocator_caching(m->device),
                     caching_allocator_caching(m->host), (long long)caching_allocator_limit(m->device));
    if (n < 0 || (size_t)n >= buf_len)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "memory_get_conf: the buffer of %zu bytes is too small (%d needed)",
                                 buf_len, n + 1);
    return GPUCORE_OK;
}

gpucore_status gpucore_tensor_record_stream(gpucore_tensor *t, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(t, "tensor_record_stream", "t");
    if (st) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(t->ctx, stream, "tensor_record_stream", &s))) return st;
    if (!t->storage->owned || !t->storage->base) return GPUCORE_OK;
    return gpucore_memory_record_stream(t->ctx, t->storage->base, s);
}

gpucore_status gpucore_device_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream, void **ptr)
{
    gpucore_status st = gpucore_check_context(ctx, "device_alloc");
    if (st) return st;
    if (!ptr) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "device_alloc: ptr is NULL");
    *ptr = NULL;
    if (bytes < 0) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "device_alloc: bytes is %lld", (long long)bytes);
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, "device_alloc", &s))) return st;
    if (bytes == 0) return GPUCORE_OK;
    return caching_allocator_alloc(ctx->memory->device, bytes, s->bstream, ptr);
}

gpucore_status gpucore_device_free(gpucore_context *ctx, void *ptr)
{
    gpucore_status st = gpucore_check_context(ctx, "device_free");
    if (st) return st;
    return caching_allocator_free(ctx->memory->device, ptr);
}

gpucore_status gpucore_device_record_stream(gpucore_context *ctx, void *ptr, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_context(ctx, "device_record_stream");
    if (st) return st;
    if (!ptr) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "device_record_stream: ptr is NULL");
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, "device_record_stream", &s))) return st;
    return caching_allocator_record_stream(ctx->memory->device, ptr, s->bstream);
}

gpucore_status gpucore_host_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream, void **ptr)
{
    gpucore_status st = gpucore_check_context(ctx, "host_alloc");
    if (st) return st;
    if (!ptr) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "host_alloc: ptr is NULL");
    *ptr = NULL;
    if (bytes < 0) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "host_alloc: bytes is %lld", (long long)bytes);
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, "host_alloc", &s))) return st;
    if (bytes == 0) return GPUCORE_OK;
    return caching_allocator_alloc(ctx->memory->host, bytes, s->bstream, ptr);
}

gpucore_status gpucore_host_free(gpucore_context *ctx, void *ptr)
{
    gpucore_status st = gpucore_check_context(ctx, "host_free");
    if (st) return st;
    return caching_allocator_free(ctx->memory->host, ptr);
}

gpucore_status gpucore_host_record_stream(gpucore_context *ctx, void *ptr, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_context(ctx, "host_record_stream");
    if (st) return st;
    if (!ptr) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "host_record_stream: ptr is NULL");
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, "host_record_stream", &s))) return st;
    return caching_allocator_record_stream(ctx->memory->host, ptr, s->bstream);
}

gpucore_status gpucore_debug_fail_raw_alloc(gpucore_context *ctx, int64_t nth, int64_t count)
{
    gpucore_status st = gpucore_check_context(ctx, "debug_fail_raw_alloc");
    if (st) return st;
    if (nth < 0) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "debug_fail_raw_alloc: nth is %lld", (long long)nth);
    caching_allocator_faults *f = &ctx->memory->faults;
    atomic_store(&f->nth, 0);
    atomic_store(&f->attempts, 0);
    atomic_store(&f->count, count);
    atomic_store(&f->nth, nth);
    return GPUCORE_OK;
}
