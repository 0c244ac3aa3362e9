/*
 * caching_allocator_stats.c — the caching allocator's statistics, the watermarks
 * (the library's own peaks, apart from the caller's), and its snapshot (a listing
 * of segments and blocks as text or JSON).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "caching_allocator_internal.h"

const char *caching_allocator_human(int64_t bytes, char *buf, size_t len)
{
    double v = (double)bytes;
    const char *unit = "B";
    if (bytes >= (1LL << 30)) { v /= (double)(1LL << 30); unit = "GiB"; }
    else if (bytes >= (1LL << 20)) { v /= (double)(1LL << 20); unit = "MiB"; }
    else if (bytes >= (1LL << 10)) { v /= (double)(1LL << 10); unit = "KiB"; }
    if (bytes < 0) snprintf(buf, len, "unknown");
    else if (unit[0] == 'B') snprintf(buf, len, "%lld B", (long long)bytes);
    else snprintf(buf, len, "%.2f %s", v, unit);
    return buf;
}

static const char *const category_names[GPUCORE_MEM_CATEGORIES + 1] = {
    "weights", "gradients", "optimizer", "activations", "transient", "head_loss", "workspace", "other"};

const char *gpucore_mem_category_name(int category)
{
    return category >= 0 && category < GPUCORE_MEM_CATEGORIES ? category_names[category] : NULL;
}

/* A block's category for the snapshot: "other" for untagged ones. */
static const char *tag_name(const block *b)
{
    return category_names[b->tag <= GPUCORE_MEM_CATEGORIES ? b->tag : GPUCORE_MEM_CATEGORIES];
}

static void fill_stats(const caching_allocator *a, gpucore_memory_stats *s)
{
    int64_t size = s->struct_size;
    memset(s, 0, sizeof *s);
    s->struct_size = size;
#define COPY(field) s->field = a->field.cur, s->field##_peak = a->field.peak
    COPY(allocated_bytes);
    COPY(allocated_blocks);
    COPY(reserved_bytes);
    COPY(reserved_segments);
    COPY(active_bytes);
    COPY(active_blocks);
    COPY(inactive_split_bytes);
    COPY(inactive_split_blocks);
    COPY(requested_bytes);
#undef COPY
    s->num_raw_allocs = a->num_raw_allocs;
    s->num_raw_frees = a->num_raw_frees;
    s->num_ooms = a->num_ooms;
    s->num_alloc_retries = a->num_retries;
    s->limit_bytes = a->limit;
}

void caching_allocator_get_stats(caching_allocator *a, gpucore_memory_stats *stats)
{
    pthread_mutex_lock(&a->mu);
    caching_allocator_process_events(a);
    fill_stats(a, stats);
    pthread_mutex_unlock(&a->mu);
}

void caching_allocator_reset_peak_stats(caching_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    stat *all[] = {&a->allocated_bytes, &a->allocated_blocks, &a->reserved_bytes, &a->reserved_segments,
                   &a->active_bytes, &a->active_blocks, &a->inactive_split_bytes, &a->inactive_split_blocks,
                   &a->requested_bytes};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) all[i]->peak = all[i]->cur;
    pthread_mutex_unlock(&a->mu);
}

void caching_allocator_watermark_add(caching_allocator *a, gpucore_memory_watermark *w)
{
    pthread_mutex_lock(&a->mu);
    w->peak = a->allocated_bytes.cur;
    w->next = a->watermarks;
    a->watermarks = w;
    pthread_mutex_unlock(&a->mu);
}

void caching_allocator_watermark_remove(caching_allocator *a, gpucore_memory_watermark *w)
{
    pthread_mutex_lock(&a->mu);
    for (gpucore_memory_watermark **p = &a->watermarks; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->next = NULL;
    pthread_mutex_unlock(&a->mu);
}

int64_t caching_allocator_watermark_restart(caching_allocator *a, gpucore_memory_watermark *w)
{
    pthread_mutex_lock(&a->mu);
    int64_t now = w->peak = a->allocated_bytes.cur;
    pthread_mutex_unlock(&a->mu);
    return now;
}

int64_t caching_allocator_watermark_read(caching_allocator *a, gpucore_memory_watermark *w, int64_t *peak)
{
    pthread_mutex_lock(&a->mu);
    int64_t now = a->allocated_bytes.cur;
    if (peak) *peak = w->peak;
    pthread_mutex_unlock(&a->mu);
    return now;
}

typedef struct writer { char *buf; int64_t len, pos; } writer;

static void __attribute__((format(printf, 2, 3))) wr(writer *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int fits = w->buf && w->pos < w->len;
    int n = vsnprintf(fits ? w->buf + w->pos : NULL, fits ? (size_t)(w->len - w->pos) : 0, fmt, ap);
    va_end(ap);
    if (n > 0) w->pos += n;
}

static const char *block_state(const block *b)
{
    if (b->allocated) return "allocated";
    return b->pending_events ? "pending" : "free";
}

int64_t caching_allocator_snapshot(caching_allocator *a, int json, char *buf, int64_t len)
{
    writer w = {buf, len, 0};
    if (buf && len > 0) buf[0] = '\0';
    pthread_mutex_lock(&a->mu);
    caching_allocator_process_events(a);
    gpucore_memory_stats s = {.struct_size = sizeof s};
    fill_stats(a, &s);
    if (json) {
        wr(&w, "{\"kind\":\"%s\",\"device\":\"%s\",\"stats\":{", a->p.host_visible ? "pinned_host" : "device", a->name);
        wr(&w, "\"allocated_bytes\":%lld,\"allocated_blocks\":%lld,\"reserved_bytes\":%lld,\"reserved_segments\":%lld,"
               "\"active_bytes\":%lld,\"active_blocks\":%lld,\"inactive_split_bytes\":%lld,"
               "\"inactive_split_blocks\":%lld,\"requested_bytes\":%lld,\"num_raw_allocs\":%lld,"
               "\"num_raw_frees\":%lld,\"num_ooms\":%lld,\"num_alloc_retries\":%lld,\"limit_bytes\":%lld},",
           (long long)s.allocated_bytes, (long long)s.allocated_blocks, (long long)s.reserved_bytes,
           (long long)s.reserved_segments, (long long)s.active_bytes, (long long)s.active_blocks,
           (long long)s.inactive_split_bytes, (long long)s.inactive_split_blocks, (long long)s.requested_bytes,
           (long long)s.num_raw_allocs, (long long)s.num_raw_frees, (long long)s.num_ooms,
           (long long)s.num_alloc_retries, (long long)s.limit_bytes);
        wr(&w, "\"categories\":{");
        for (int c = 0; c <= GPUCORE_MEM_CATEGORIES; c++)
            wr(&w, "%s\"%s\":%lld", c ? "," : "", category_names[c], (long long)a->tag_live[c]);
        wr(&w, "},\"segments\":[");
        for (segment *g = a->segments; g; g = g->next) {
            wr(&w, "%s{\"address\":\"0x%" PRIxPTR "\",\"size\":%lld,\"pool\":\"%s\",\"stream\":\"%p\",\"blocks\":[",
               g == a->segments ? "" : ",", g->base, (long long)g->size, g->small ? "small" : "large", g->stream);
            for (block *b = g->first; b; b = b->next)
                wr(&w, "%s{\"address\":\"0x%" PRIxPTR "\",\"size\":%lld,\"requested\":%lld,\"state\":\"%s\",\"stream\":\"%p\""
                       "%s%s%s}", b == g->first ? "" : ",", b->addr, (long long)b->size, (long long)b->requested,
                   block_state(b), b->stream, b->allocated ? ",\"category\":\"" : "", b->allocated ? tag_name(b) : "",
                   b->allocated ? "\"" : "");
            wr(&w, "]}");
        }
        wr(&w, "]}\n");
    } else {
        wr(&w, "%s on %s: %lld bytes reserved in %lld segments; %lld bytes allocated in %lld blocks "
               "(%lld requested); %lld bytes active; %lld bytes free in split segments\n",
           a->what, a->name, (long long)s.reserved_bytes, (long long)s.reserved_segments, (long long)s.allocated_bytes,
           (long long)s.allocated_blocks, (long long)s.requested_bytes, (long long)s.active_bytes,
           (long long)s.inactive_split_bytes);
        wr(&w, "allocated bytes by category:");
        for (int c = 0; c <= GPUCORE_MEM_CATEGORIES; c++)
            wr(&w, "%s %s %lld", c ? "," : "", category_names[c], (long long)a->tag_live[c]);
        wr(&w, "\n");
        for (segment *g = a->segments; g; g = g->next) {
            wr(&w, "segment 0x%" PRIxPTR " size %lld pool %s stream %p\n", g->base, (long long)g->size,
               g->small ? "small" : "large", g->stream);
            for (block *b = g->first; b; b = b->next)
                wr(&w, "  block 0x%" PRIxPTR " size %lld requested %lld %s stream %p%s%s\n", b->addr, (long long)b->size,
                   (long long)b->requested, block_state(b), b->stream, b->allocated ? " category " : "",
                   b->allocated ? tag_name(b) : "");
        }
    }
    pthread_mutex_unlock(&a->mu);
    return w.pos + 1;
}
