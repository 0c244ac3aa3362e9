/*
 * caching_allocator_internal.h — what the caching allocator's files share: the
 * constants, the block/segment records, the allocator struct, and the entries
 * of the free-block index and the live-block table (caching_allocator_index.c)
 * and of the statistics (caching_allocator_stats.c). Only src/alloc includes it.
 */
#ifndef GPUCORE_CACHING_ALLOCATOR_INTERNAL_H
#define GPUCORE_CACHING_ALLOCATOR_INTERNAL_H

#include <pthread.h>
#include "caching_allocator.h"

#define MIN_BLOCK_SIZE ((int64_t)512)             /* rounding granule and smallest split remainder */
#define SMALL_SIZE ((int64_t)1 << 20)             /* largest request served by the small pool */
#define SMALL_SEGMENT ((int64_t)2 << 20)          /* small pool segment size */
#define LARGE_SEGMENT ((int64_t)20 << 20)         /* large pool segment size for mid-size requests */
#define MIN_OWN_SEGMENT ((int64_t)10 << 20)       /* requests this big get a segment of their own */
#define LARGE_ROUND ((int64_t)2 << 20)            /* own segments are rounded up to this */
#define MAX_REQUEST (INT64_MAX / 4)               /* larger requests cannot be rounded safely */
#define BLOCKS_PER_CHUNK 256

/* Small-pool free blocks are binned by exact size: bin i holds blocks of (i+1)·512
 * bytes, 512 B .. 2 MiB (a whole small segment). */
#define SMALL_BINS ((int)(SMALL_SEGMENT / MIN_BLOCK_SIZE))
#define SMALL_BIN_WORDS (SMALL_BINS / 64)

typedef struct segment segment;

typedef struct block {
    uintptr_t addr;
    int64_t size;
    int64_t requested;         /* bytes the caller asked for (allocated blocks) */
    void *stream;              /* the stream it belongs to (= its segment's stream) */
    segment *seg;
    struct block *prev, *next; /* address neighbours within the segment */
    struct block *left, *right;/* large pool: free tree links; small pool: its bin's list (left = previous);
                                  spare records: unused (the slab list goes through next) */
    int32_t height;
    uint8_t allocated, in_tree;/* in_tree: free and cached (in the tree or a bin) */
    uint8_t tag;               /* allocated blocks: the category (gpucore_mem_category) it was
                                  allocated under, GPUCORE_MEM_CATEGORIES when untagged */
    int32_t pending_events;    /* freed, waiting for this many events on other streams */
    void **uses;               /* other streams it was used on (record_stream) */
    int32_t nuses, uses_cap;
} block;

struct segment {
    uintptr_t base;
    int64_t size;
    void *stream;
    int small;
    block *first;
    segment *prev, *next;
};

/* One stream's small-pool free blocks: an exact-size list per bin and a two-level
 * bitmap of the non-empty bins, so best fit is two find-first-set operations. */
typedef struct small_bins {
    void *stream;
    uint64_t summary;                 /* bit w: words[w] != 0 */
    uint64_t words[SMALL_BIN_WORDS];  /* bit i: heads[i] != NULL */
    block *heads[SMALL_BINS];
} small_bins;

typedef struct pending {
    void *event;
    block *blk;
    struct pending *next;
} pending;

/* Events recorded on one stream complete in order, so each queue is checked from its head only. */
typedef struct event_queue {
    void *stream;
    pending *head, *tail;
} event_queue;

typedef struct stat { int64_t cur, peak; } stat;

struct caching_allocator {
    caching_allocator_params p;
    char name[32], what[32];
    pthread_mutex_t mu;
    block *roots[2];            /* free trees (AVL keyed by stream, size, address): [1] the large pool,
                                   [0] small blocks whose stream's bins could not be allocated */
    small_bins **bins;          /* small pool's free blocks, one set per stream */
    int nbins, bins_cap;
    small_bins *last_bins;      /* the set found last (most calls come from one stream) */
    segment *segments;
    /* live blocks by address: open addressing, linear probing, backward-shift deletion */
    block **table;
    size_t table_cap, table_count;
    int table_shift;
    /* block records */
    block *spare_blocks;
    void **chunks;
    size_t nchunks, chunks_cap;
    /* events */
    void **idle_events;
    size_t nidle, idle_cap;
    pending *spare_pending;
    event_queue *queues;
    int nqueues, queues_cap;
    int64_t npending;
    /* settings */
    int caching;
    int64_t max_split;
    int64_t limit;
    int64_t device_total;       /* bytes the device has (-1 unknown): bigger requests fail at once */
    /* statistics */
    stat allocated_bytes, allocated_blocks, reserved_bytes, reserved_segments, active_bytes, active_blocks,
        inactive_split_bytes, inactive_split_blocks, requested_bytes;
    int64_t num_raw_allocs, num_raw_frees, num_ooms, num_retries;
    int64_t tag_live[GPUCORE_MEM_CATEGORIES + 1];   /* allocated bytes per tag (block sizes) */
    int64_t tag_at_oom[GPUCORE_MEM_CATEGORIES + 1]; /* tag_live when the last request was refused */
    gpucore_memory_watermark *watermarks; /* the library's own peaks (caching_allocator_stats.c) */
};

static inline void stat_add(stat *s, int64_t d)
{
    s->cur += d;
    if (s->cur > s->peak) s->peak = s->cur;
}

/* ---- free-block index (caching_allocator_index.c) ---- */
/* Cache a free block / take it out of the cache (keeps the inactive-split statistics).
 * A small block's stream must have its bins (free_index_reserve_stream). */
GPUCORE_HIDDEN void free_index_insert(caching_allocator *a, block *b);
GPUCORE_HIDDEN void free_index_remove(caching_allocator *a, block *b);
/* Smallest cached block of `stream` in the pool with size >= size (NULL if none).
 * Among equal sizes: the small pool gives the most recently cached, the large pool
 * the lowest address. */
GPUCORE_HIDDEN block *free_index_best_fit(caching_allocator *a, int small, void *stream, int64_t size);
/* Make sure `stream` has small-pool bins (0), or -1 when out of host memory. */
GPUCORE_HIDDEN int free_index_reserve_stream(caching_allocator *a, void *stream);
/* Stream `from` is going away: its cached blocks (and bins) become `to`'s, and every
 * block and segment tagged `from` is retagged `to`. */
GPUCORE_HIDDEN void free_index_retag_stream(caching_allocator *a, void *from, void *to);
GPUCORE_HIDDEN void free_index_destroy(caching_allocator *a);

/* ---- live blocks by address (caching_allocator_index.c) ---- */
GPUCORE_HIDDEN int live_table_init(caching_allocator *a);
/* Make room for one more entry (0), or -1 when out of host memory. */
GPUCORE_HIDDEN int live_table_reserve(caching_allocator *a);
GPUCORE_HIDDEN void live_table_insert(caching_allocator *a, block *b);
/* The slot holding addr, or SIZE_MAX. */
GPUCORE_HIDDEN size_t live_table_find_slot(const caching_allocator *a, uintptr_t addr);
GPUCORE_HIDDEN void live_table_remove_slot(caching_allocator *a, size_t i);

/* ---- caching_allocator.c ---- */
/* Move blocks whose events have all completed back into the cache. */
GPUCORE_HIDDEN void caching_allocator_process_events(caching_allocator *a);

/* ---- statistics and snapshot helpers (caching_allocator_stats.c) ---- */
/* "1.50 MiB" into buf ("unknown" for negative sizes). */
GPUCORE_HIDDEN const char *caching_allocator_human(int64_t bytes, char *buf, size_t len);

#endif
