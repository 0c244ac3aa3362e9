/*
 * caching_allocator.c — the caching allocator (see caching_allocator.h for the
 * design): block and event bookkeeping, segments, allocation, free, the
 * out-of-memory ladder and the settings. The lookup structures are in
 * caching_allocator_index.c, the statistics and snapshot in
 * caching_allocator_stats.c, the shared types in caching_allocator_internal.h.
 *
 * Why these structures: a small-pool cache hit is one bitmap best-fit search in
 * its stream's exact-size bins and one hash insertion; a free is one hash
 * removal, at most two unlinks (coalescing) and one push. All O(1) however many
 * blocks are live (the large pool uses a tree: O(log n)), and no memory is
 * allocated on the hit path (block records come from a slab, the hash table
 * grows by doubling ahead of need).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "caching_allocator_internal.h"

int64_t caching_allocator_round_size(int64_t bytes)
{
    if (bytes < MIN_BLOCK_SIZE) return MIN_BLOCK_SIZE;
    return (bytes + MIN_BLOCK_SIZE - 1) / MIN_BLOCK_SIZE * MIN_BLOCK_SIZE;
}

static int64_t segment_size_for(int64_t rounded)
{
    if (rounded <= SMALL_SIZE) return SMALL_SEGMENT;
    if (rounded < MIN_OWN_SEGMENT) return LARGE_SEGMENT;
    return (rounded + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

/* ------------------------------------------------------------ block records and events */

/* Make sure n block records can be had without allocating. */
static int blocks_reserve(caching_allocator *a, int n)
{
    int have = 0;
    for (block *b = a->spare_blocks; b && have < n; b = b->next) have++;
    if (have >= n) return 0;
    if (a->nchunks == a->chunks_cap) {
        size_t cap = a->chunks_cap ? a->chunks_cap * 2 : 16;
        void **c = realloc(a->chunks, cap * sizeof *c);
        if (!c) return -1;
        a->chunks = c;
        a->chunks_cap = cap;
    }
    block *chunk = calloc(BLOCKS_PER_CHUNK, sizeof *chunk);
    if (!chunk) return -1;
    a->chunks[a->nchunks++] = chunk;
    for (int i = 0; i < BLOCKS_PER_CHUNK; i++) {
        chunk[i].next = a->spare_blocks;
        a->spare_blocks = &chunk[i];
    }
    return 0;
}

static block *block_take(caching_allocator *a)
{
    block *b = a->spare_blocks;
    a->spare_blocks = b->next;
    memset(b, 0, sizeof *b);
    return b;
}

static void block_put(caching_allocator *a, block *b)
{
    free(b->uses);
    memset(b, 0, sizeof *b);
    b->next = a->spare_blocks;
    a->spare_blocks = b;
}

static void *event_take(caching_allocator *a)
{
    if (a->nidle) return a->idle_events[--a->nidle];
    void *e = NULL;
    /* ordering only, never timed */
    gpucore_status (*create)(void *, void **) = a->p.be->event_create_untimed ? a->p.be->event_create_untimed
                                                                              : a->p.be->event_create;
    if (create(a->p.bctx, &e) != GPUCORE_OK) return NULL;
    return e;
}

static void event_put(caching_allocator *a, void *e)
{
    if (a->nidle == a->idle_cap) {
        size_t cap = a->idle_cap ? a->idle_cap * 2 : 16;
        void **v = realloc(a->idle_events, cap * sizeof *v);
        if (!v) {
            a->p.be->event_destroy(a->p.bctx, e);
            return;
        }
        a->idle_events = v;
        a->idle_cap = cap;
    }
    a->idle_events[a->nidle++] = e;
}

/* Wait on the host until `stream` has passed the work queued so far. An event,
 * not stream_synchronize: that would also consume the stream's sticky error. */
static void wait_stream(caching_allocator *a, void *stream)
{
    void *e = event_take(a);
    if (e && a->p.be->event_record(a->p.bctx, e, stream) == GPUCORE_OK) {
        a->p.be->event_synchronize(a->p.bctx, e);
        event_put(a, e);
        return;
    }
    if (e) event_put(a, e);
    gpucore_log(GPUCORE_LOG_WARN, "allocator: no event could be recorded; synchronizing the stream instead");
    a->p.be->stream_synchronize(a->p.bctx, stream);
}

static event_queue *queue_for(caching_allocator *a, void *stream)
{
    for (int i = 0; i < a->nqueues; i++)
        if (a->queues[i].stream == stream) return &a->queues[i];
    if (a->nqueues == a->queues_cap) {
        int cap = a->queues_cap ? a->queues_cap * 2 : 8;
        event_queue *q = realloc(a->queues, (size_t)cap * sizeof *q);
        if (!q) return NULL;
        a->queues = q;
        a->queues_cap = cap;
    }
    event_queue *q = &a->queues[a->nqueues++];
    q->stream = stream;
    q->head = q->tail = NULL;
    return q;
}

/* ------------------------------------------------------------ segments */

static void release_segment(caching_allocator *a, segment *s)
{
    block *b = s->first;
    if (b->in_tree) free_index_remove(a, b);
    a->p.raw_free(a->p.bctx, (void *)s->base);
    stat_add(&a->reserved_bytes, -s->size);
    stat_add(&a->reserved_segments, -1);
    a->num_raw_frees++;
    if (s->prev) s->prev->next = s->next;
    else a->segments = s->next;
    if (s->next) s->next->prev = s->prev;
    block_put(a, b);
    free(s);
}

static int segment_whole_free(const segment *s)
{
    return s->first->in_tree && s->first->size == s->size;
}

/* Return cached whole segments to the backend, first waiting (once per stream)
 * for each one's stream to pass the work that may still touch it. */
static int release_cached(caching_allocator *a)
{
    void *synced[16];
    int nsynced = 0, released = 0;
    for (segment *s = a->segments, *next; s; s = next) {
        next = s->next;
        if (!segment_whole_free(s)) continue;
        if (!a->p.host_visible) { /* pinned blocks reached the tree only after their events */
            int done = 0;
            for (int i = 0; i < nsynced; i++) done |= synced[i] == s->stream;
            if (!done) {
                wait_stream(a, s->stream);
                if (nsynced < 16) synced[nsynced++] = s->stream;
            }
        }
        release_segment(a, s);
        released++;
    }
    return released;
}

static int block_is_free(const block *b) { return b && b->in_tree; }

/* The block's uses are all over: coalesce it with free neighbours and cache it
 * (or, with caching off, hand a whole segment back). */
static void finish_free(caching_allocator *a, block *b)
{
    stat_add(&a->active_bytes, -b->size);
    stat_add(&a->active_blocks, -1);
    block *prev = b->prev, *next = b->next;
    if (block_is_free(prev)) {
        free_index_remove(a, prev);
        prev->size += b->size;
        prev->next = next;
        if (next) next->prev = prev;
        block_put(a, b);
        b = prev;
    }
    if (block_is_free(next)) {
        free_index_remove(a, next);
        b->size += next->size;
        b->next = next->next;
        if (next->next) next->next->prev = b;
        block_put(a, next);
    }
    free_index_insert(a, b);
    if (!a->caching && b->size == b->seg->size) release_segment(a, b->seg);
}

/* Move blocks whose events have all completed back into the cache. */
void caching_allocator_process_events(caching_allocator *a)
{
    if (!a->npending) return;
    for (int i = 0; i < a->nqueues; i++) {
        event_queue *q = &a->queues[i];
        while (q->head && a->p.be->event_query(a->p.bctx, q->head->event) == GPUCORE_OK) {
            pending *p = q->head;
            q->head = p->next;
            if (!q->head) q->tail = NULL;
            a->npending--;
            event_put(a, p->event);
            block *b = p->blk;
            p->next = a->spare_pending;
            a->spare_pending = p;
            if (--b->pending_events == 0) finish_free(a, b);
        }
    }
}

/* Wait for every pending event, then process them. */
static void wait_pending(caching_allocator *a)
{
    for (int i = 0; i < a->nqueues; i++)
        for (pending *p = a->queues[i].head; p; p = p->next) a->p.be->event_synchronize(a->p.bctx, p->event);
    caching_allocator_process_events(a);
}

static gpucore_status try_raw_segment(caching_allocator *a, int64_t size, int small, void *stream, block **out,
                                      int *limit_hit)
{
    if (a->limit > 0 && a->reserved_bytes.cur + size > a->limit) {
        *limit_hit = 1;
        return GPUCORE_ERR_OUT_OF_MEMORY;
    }
    caching_allocator_faults *f = a->p.faults;
    if (f && atomic_load(&f->nth) > 0) {
        long long n = atomic_fetch_add(&f->attempts, 1) + 1, nth = atomic_load(&f->nth), cnt = atomic_load(&f->count);
        if (n >= nth && (cnt < 0 || n < nth + cnt)) return GPUCORE_ERR_OUT_OF_MEMORY;
    }
    segment *s = malloc(sizeof *s);
    if (!s) return GPUCORE_ERR_OUT_OF_MEMORY;
    void *ptr = NULL;
    gpucore_status st = a->p.raw_alloc(a->p.bctx, (size_t)size, &ptr);
    if (st != GPUCORE_OK) {
        free(s);
        return st;
    }
    block *b = block_take(a);
    s->base = (uintptr_t)ptr;
    s->size = size;
    s->stream = stream;
    s->small = small;
    s->first = b;
    s->prev = NULL;
    s->next = a->segments;
    if (a->segments) a->segments->prev = s;
    a->segments = s;
    b->addr = s->base;
    b->size = size;
    b->stream = stream;
    b->seg = s;
    stat_add(&a->reserved_bytes, size);
    stat_add(&a->reserved_segments, 1);
    a->num_raw_allocs++;
    *out = b;
    return GPUCORE_OK;
}

/* A new segment for `rounded` bytes: the pool's segment size, or just enough. */
static gpucore_status new_segment(caching_allocator *a, int64_t rounded, int small, void *stream, block **out,
                                  int *limit_hit)
{
    int64_t size = a->caching ? segment_size_for(rounded) : rounded;
    gpucore_status st = try_raw_segment(a, size, small, stream, out, limit_hit);
    if (st == GPUCORE_ERR_OUT_OF_MEMORY && !small && size > rounded) {
        int64_t exact = (rounded + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
        st = try_raw_segment(a, exact < size ? exact : rounded, small, stream, out, limit_hit);
    }
    return st;
}

/* Best fit from the cache: the smallest free block of this stream that is big enough. */
static block *find_free(caching_allocator *a, int small, void *stream, int64_t rounded)
{
    block *b = free_index_best_fit(a, small, stream, rounded);
    if (!b) return NULL;
    if (a->max_split < INT64_MAX) {
        /* Do not carve small requests out of big unsplittable blocks, nor hand out a big block
         * far larger than asked. */
        if (rounded < a->max_split && b->size >= a->max_split) return NULL;
        if (rounded >= a->max_split && b->size >= rounded + LARGE_SEGMENT) return NULL;
    }
    return b;
}

/* ---- memory categories ---- */
static _Thread_local int current_tag = -1;

int caching_allocator_tag_set(int tag)
{
    const int prev = current_tag;
    current_tag = tag;
    return prev;
}

void caching_allocator_retag(caching_allocator *a, void *ptr, int tag)
{
    const uint8_t t = (uint8_t)(tag >= 0 && tag < GPUCORE_MEM_CATEGORIES ? tag : GPUCORE_MEM_CATEGORIES);
    pthread_mutex_lock(&a->mu);
    size_t slot = ptr ? live_table_find_slot(a, (uintptr_t)ptr) : SIZE_MAX;
    if (slot != SIZE_MAX) {
        block *b = a->table[slot];
        a->tag_live[b->tag] -= b->size;
        a->tag_live[t] += b->size;
        b->tag = t;
    }
    pthread_mutex_unlock(&a->mu);
}

void caching_allocator_tag_bytes(caching_allocator *a, int64_t *live, int64_t *at_oom)
{
    pthread_mutex_lock(&a->mu);
    if (live) memcpy(live, a->tag_live, sizeof a->tag_live);
    if (at_oom) memcpy(at_oom, a->tag_at_oom, sizeof a->tag_at_oom);
    pthread_mutex_unlock(&a->mu);
}

/* A request is refused: count it and keep what each category held at that moment. */
static void note_oom(caching_allocator *a)
{
    a->num_ooms++;
    memcpy(a->tag_at_oom, a->tag_live, sizeof a->tag_live);
}

static gpucore_status oom_error(caching_allocator *a, int64_t bytes, int limit_hit)
{
    char asked[32], total_s[32], free_s[32], alloc_s[32], cached_s[32], limit_s[32], other_s[64] = "";
    int64_t free_b = -1, total_b = -1;
    if (!a->p.host_visible && a->p.be->mem_info) a->p.be->mem_info(a->p.bctx, &free_b, &total_b);
    if (!a->p.host_visible && a->p.be->type == GPUCORE_DEVICE_CUDA && a->p.be->device_processes) {
        int64_t pids[64], used[64];
        int count = 0, index = 0;
        sscanf(a->name, "%*[^:]:%d", &index);
        if (a->p.be->device_processes(index, pids, used, 64, &count) == GPUCORE_OK) {
            int64_t others = 0;
            for (int i = 0; i < count && i < 64; i++)
                if (pids[i] != (int64_t)getpid() && used[i] > 0) others += used[i];
            char o[32];
            snprintf(other_s, sizeof other_s, "; other processes hold %s", caching_allocator_human(others, o, sizeof o));
        }
    }
    int64_t cached = a->reserved_bytes.cur - a->allocated_bytes.cur;
    char limit_part[96] = "";
    if (a->limit > 0)
        snprintf(limit_part, sizeof limit_part, "; this context's memory limit is %s%s", caching_allocator_human(a->limit, limit_s, sizeof limit_s),
                 limit_hit ? " and the request would pass it" : "");
    return gpucore_set_error(
        GPUCORE_ERR_OUT_OF_MEMORY,
        "out of %s on %s: asked for %s (%lld bytes); the device has %s in total and %s free%s; this library has %s "
        "allocated and holds %s cached but unused%s. Try a smaller batch, activation checkpointing, a memory limit "
        "(GPUCORE_ALLOC_CONF=limit:...), or gpucore_memory_empty_cache(); if much is cached but unused, "
        "fragmentation may be the cause: try GPUCORE_ALLOC_CONF=max_split_size_mb:128",
        a->what, a->name, caching_allocator_human(bytes, asked, sizeof asked), (long long)bytes, caching_allocator_human(total_b, total_s, sizeof total_s),
        caching_allocator_human(free_b, free_s, sizeof free_s), other_s, caching_allocator_human(a->allocated_bytes.cur, alloc_s, sizeof alloc_s),
        caching_allocator_human(cached, cached_s, sizeof cached_s), limit_part);
}

/* ------------------------------------------------------------ public entries */

gpucore_status caching_allocator_create(const caching_allocator_params *params, caching_allocator **out)
{
    *out = NULL;
    caching_allocator *a = calloc(1, sizeof *a);
    if (!a) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "allocator: out of host memory");
    a->p = *params;
    snprintf(a->name, sizeof a->name, "%s", params->name ? params->name : "?");
    snprintf(a->what, sizeof a->what, "%s", params->what ? params->what : "memory");
    a->p.name = a->name;
    a->p.what = a->what;
    a->caching = 1;
    a->max_split = INT64_MAX;
    if (live_table_init(a)) {
        free(a);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "allocator: out of host memory");
    }
    pthread_mutex_init(&a->mu, NULL);
    int64_t free_b = -1;
    a->device_total = -1;
    if (!a->p.host_visible && a->p.be->mem_info && a->p.be->mem_info(a->p.bctx, &free_b, &a->device_total))
        a->device_total = -1;
    gpucore_clear_error();
    *out = a;
    return GPUCORE_OK;
}

static void drop_held_frees(caching_allocator *a); /* below, with the frees a comm group holds */

void caching_allocator_destroy(caching_allocator *a)
{
    if (!a) return;
    drop_held_frees(a);
    for (int i = 0; i < a->nqueues; i++) {
        pending *p = a->queues[i].head;
        while (p) {
            pending *next = p->next;
            a->p.be->event_synchronize(a->p.bctx, p->event);
            a->p.be->event_destroy(a->p.bctx, p->event);
            free(p);
            p = next;
        }
    }
    while (a->spare_pending) {
        pending *next = a->spare_pending->next;
        free(a->spare_pending);
        a->spare_pending = next;
    }
    for (segment *s = a->segments, *next; s; s = next) {
        next = s->next;
        for (block *b = s->first; b; b = b->next) free(b->uses);
        a->p.raw_free(a->p.bctx, (void *)s->base);
        free(s);
    }
    for (size_t i = 0; i < a->nidle; i++) a->p.be->event_destroy(a->p.bctx, a->idle_events[i]);
    for (size_t i = 0; i < a->nchunks; i++) free(a->chunks[i]);
    free(a->chunks);
    free(a->idle_events);
    free(a->queues);
    free(a->table);
    free_index_destroy(a);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

gpucore_status caching_allocator_alloc(caching_allocator *a, int64_t bytes, void *stream, void **ptr)
{
    *ptr = NULL;
    if (bytes <= 0 || bytes > MAX_REQUEST) {
        if (bytes <= 0) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "allocator: asked for %lld bytes", (long long)bytes);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY,
                                 "out of %s on %s: asked for %lld bytes, more than any device can hold; check the "
                                 "size computation", a->what, a->name, (long long)bytes);
    }
    int64_t rounded = caching_allocator_round_size(bytes);
    int small = rounded <= SMALL_SIZE;
    pthread_mutex_lock(&a->mu);
    if (live_table_reserve(a) || blocks_reserve(a, 2) || (small && free_index_reserve_stream(a, stream))) {
        pthread_mutex_unlock(&a->mu);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "allocator: out of host memory for its bookkeeping");
    }
    if (a->device_total > 0 && rounded > a->device_total) { /* no amount of freeing can help */
        note_oom(a);
        gpucore_status st = oom_error(a, bytes, 0);
        pthread_mutex_unlock(&a->mu);
        return st;
    }
    caching_allocator_process_events(a);
    block *b = a->caching ? find_free(a, small, stream, rounded) : NULL;
    gpucore_status st = GPUCORE_OK;
    int limit_hit = 0;
    if (!b) st = new_segment(a, rounded, small, stream, &b, &limit_hit);
    if (st == GPUCORE_ERR_OUT_OF_MEMORY) {
        /* The ladder: release cached whole segments and retry; then wait for blocks still in
         * flight on other streams, search again, release again and retry. */
        a->num_retries++;
        if (release_cached(a)) st = new_segment(a, rounded, small, stream, &b, &limit_hit);
        if (st == GPUCORE_ERR_OUT_OF_MEMORY && a->npending) {
            wait_pending(a);
            b = a->caching ? find_free(a, small, stream, rounded) : NULL;
            if (b) st = GPUCORE_OK;
            else {
                release_cached(a);
                st = new_segment(a, rounded, small, stream, &b, &limit_hit);
            }
        }
        if (st == GPUCORE_ERR_OUT_OF_MEMORY) {
            note_oom(a);
            st = oom_error(a, bytes, limit_hit);
        }
    }
    if (st != GPUCORE_OK) {
        pthread_mutex_unlock(&a->mu);
        return st;
    }
    if (b->in_tree) free_index_remove(a, b);
    int64_t remaining = b->size - rounded;
    int split = small ? remaining >= MIN_BLOCK_SIZE : (remaining > SMALL_SIZE && rounded < a->max_split);
    if (split) {
        block *r = block_take(a);
        r->addr = b->addr + (uintptr_t)rounded;
        r->size = remaining;
        r->stream = b->stream;
        r->seg = b->seg;
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        b->next = r;
        b->size = rounded;
        free_index_insert(a, r);
    }
    b->allocated = 1;
    b->requested = bytes;
    b->tag = (uint8_t)(current_tag >= 0 && current_tag < GPUCORE_MEM_CATEGORIES ? current_tag : GPUCORE_MEM_CATEGORIES);
    a->tag_live[b->tag] += b->size;
    live_table_insert(a, b);
    stat_add(&a->allocated_bytes, b->size);
    for (gpucore_memory_watermark *w = a->watermarks; w; w = w->next)
        if (a->allocated_bytes.cur > w->peak) w->peak = a->allocated_bytes.cur;
    stat_add(&a->allocated_blocks, 1);
    stat_add(&a->active_bytes, b->size);
    stat_add(&a->active_blocks, 1);
    stat_add(&a->requested_bytes, bytes);
    *ptr = (void *)b->addr;
    pthread_mutex_unlock(&a->mu);
    return GPUCORE_OK;
}

/* ---- frees held while a comm group is open on this thread ---- */
typedef struct held_free { caching_allocator *a; void *ptr; } held_free;
static _Thread_local int hold_depth;
static _Thread_local held_free *held;
static _Thread_local size_t nheld, held_cap;

static int free_is_held(caching_allocator *a, void *ptr)
{
    for (size_t i = 0; i < nheld; i++)
        if (held[i].a == a && held[i].ptr == ptr) return 1;
    return 0;
}

void caching_allocator_hold_frees(int begin)
{
    if (begin) { hold_depth++; return; }
    if (hold_depth == 0 || --hold_depth > 0) return;
    held_free *list = held;
    size_t n = nheld;
    held = NULL;
    nheld = held_cap = 0;
    for (size_t i = 0; i < n; i++)
        if (caching_allocator_free(list[i].a, list[i].ptr) != GPUCORE_OK)
            gpucore_log(GPUCORE_LOG_ERROR, "internal: freeing %p after a comm group: %s", list[i].ptr,
                        gpucore_last_error());
    free(list);
}

static void drop_held_frees(caching_allocator *a)
{
    size_t k = 0;
    for (size_t i = 0; i < nheld; i++)
        if (held[i].a != a) held[k++] = held[i];
    nheld = k;
}

gpucore_status caching_allocator_free(caching_allocator *a, void *ptr)
{
    if (!ptr) return GPUCORE_OK;
    pthread_mutex_lock(&a->mu);
    size_t slot = live_table_find_slot(a, (uintptr_t)ptr);
    if (slot == SIZE_MAX || (hold_depth > 0 && free_is_held(a, ptr))) {
        pthread_mutex_unlock(&a->mu);
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "free: %p is not %s allocated by this context (freed already, or from elsewhere)",
                                 ptr, a->what);
    }
    if (hold_depth > 0) { /* freed when the comm group ends */
        pthread_mutex_unlock(&a->mu);
        if (nheld == held_cap) {
            size_t cap = held_cap ? held_cap * 2 : 64;
            held_free *grown = realloc(held, cap * sizeof *grown);
            if (!grown) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "free inside a comm group: out of host "
                                                 "memory to hold it until the group ends");
            held = grown;
            held_cap = cap;
        }
        held[nheld++] = (held_free){a, ptr};
        return GPUCORE_OK;
    }
    block *b = a->table[slot];
    live_table_remove_slot(a, slot);
    b->allocated = 0;
    a->tag_live[b->tag] -= b->size;
    stat_add(&a->allocated_bytes, -b->size);
    stat_add(&a->allocated_blocks, -1);
    stat_add(&a->requested_bytes, -b->requested);
    b->requested = 0;
    /* The streams whose queued work must pass before the block is reused. Its own
     * stream orders reuse by itself, except when the host may touch the block at
     * once (pinned memory) or the memory goes back to the backend (caching off). */
    int own = a->p.host_visible || !a->caching;
    for (int i = -1; i < b->nuses; i++) {
        void *s = i < 0 ? (own ? b->stream : NULL) : b->uses[i];
        if (i < 0 && !own) continue;
        void *e = event_take(a);
        event_queue *q = e ? queue_for(a, s) : NULL;
        pending *p = a->spare_pending;
        if (!p && q) p = malloc(sizeof *p);
        else if (p) a->spare_pending = p->next;
        if (!e || !q || !p || a->p.be->event_record(a->p.bctx, e, s) != GPUCORE_OK) {
            if (p) { p->next = a->spare_pending; a->spare_pending = p; }
            if (e) event_put(a, e);
            gpucore_log(GPUCORE_LOG_WARN, "allocator: could not record an event; waiting for the stream instead");
            a->p.be->stream_synchronize(a->p.bctx, s);
            continue;
        }
        p->event = e;
        p->blk = b;
        p->next = NULL;
        if (q->tail) q->tail->next = p;
        else q->head = p;
        q->tail = p;
        a->npending++;
        b->pending_events++;
    }
    free(b->uses);
    b->uses = NULL;
    b->nuses = b->uses_cap = 0;
    if (b->pending_events == 0) finish_free(a, b);
    pthread_mutex_unlock(&a->mu);
    return GPUCORE_OK;
}

gpucore_status caching_allocator_record_stream(caching_allocator *a, void *ptr, void *stream)
{
    pthread_mutex_lock(&a->mu);
    size_t slot = live_table_find_slot(a, (uintptr_t)ptr);
    if (slot == SIZE_MAX) {
        pthread_mutex_unlock(&a->mu);
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "record_stream: %p is not live %s allocated by this context", ptr, a->what);
    }
    block *b = a->table[slot];
    gpucore_status st = GPUCORE_OK;
    int known = b->stream == stream;
    for (int i = 0; i < b->nuses && !known; i++) known = b->uses[i] == stream;
    if (!known) {
        if (b->nuses == b->uses_cap) {
            int cap = b->uses_cap ? b->uses_cap * 2 : 4;
            void **u = realloc(b->uses, (size_t)cap * sizeof *u);
            if (!u) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "record_stream: out of host memory");
            else { b->uses = u; b->uses_cap = cap; }
        }
        if (!st) b->uses[b->nuses++] = stream;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

void caching_allocator_stream_destroyed(caching_allocator *a, void *stream, void *replacement)
{
    pthread_mutex_lock(&a->mu);
    event_queue *q = NULL;
    for (int i = 0; i < a->nqueues; i++)
        if (a->queues[i].stream == stream) q = &a->queues[i];
    if (q) {
        for (pending *p = q->head; p; p = p->next) a->p.be->event_synchronize(a->p.bctx, p->event);
        caching_allocator_process_events(a);
        if (!q->head) *q = a->queues[--a->nqueues]; /* completed: drop the queue */
    }
    for (segment *s = a->segments; s; s = s->next)
        for (block *b = s->first; b; b = b->next)
            for (int i = 0; i < b->nuses; i++)
                if (b->uses[i] == stream) b->uses[i--] = b->uses[--b->nuses];
    free_index_retag_stream(a, stream, replacement);
    pthread_mutex_unlock(&a->mu);
}

gpucore_status caching_allocator_empty_cache(caching_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    caching_allocator_process_events(a);
    release_cached(a);
    pthread_mutex_unlock(&a->mu);
    return GPUCORE_OK;
}

void caching_allocator_set_caching(caching_allocator *a, int enabled)
{
    pthread_mutex_lock(&a->mu);
    a->caching = enabled ? 1 : 0;
    if (!enabled) {
        caching_allocator_process_events(a);
        release_cached(a);
    }
    pthread_mutex_unlock(&a->mu);
}

void caching_allocator_set_max_split_size(caching_allocator *a, int64_t bytes)
{
    pthread_mutex_lock(&a->mu);
    a->max_split = bytes > 0 ? bytes : INT64_MAX;
    pthread_mutex_unlock(&a->mu);
}

void caching_allocator_set_limit(caching_allocator *a, int64_t bytes)
{
    pthread_mutex_lock(&a->mu);
    a->limit = bytes > 0 ? bytes : 0;
    pthread_mutex_unlock(&a->mu);
}

int64_t caching_allocator_limit(caching_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    int64_t v = a->limit;
    pthread_mutex_unlock(&a->mu);
    return v;
}

int caching_allocator_caching(caching_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    int v = a->caching;
    pthread_mutex_unlock(&a->mu);
    return v;
}

int64_t caching_allocator_max_split_size(caching_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    int64_t v = a->max_split == INT64_MAX ? 0 : a->max_split;
    pthread_mutex_unlock(&a->mu);
    return v;
}
