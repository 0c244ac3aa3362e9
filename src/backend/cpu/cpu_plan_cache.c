/*
 * cpu_plan_cache.c — a bounded, thread-safe cache of prepared oneDNN plans (a
 * primitive plus what the caller needs to run it: memory descriptors, reorders),
 * one per CPU context, keyed by the bytes of a caller-built key (shape, dtypes,
 * strides, post-ops). A hit costs a hash and a compare under a mutex instead of
 * oneDNN's descriptor init, implementation search and primitive creation. A
 * declined key (oneDNN has no fast implementation) is cached too, as a NULL plan,
 * so the fallback costs a lookup. Plans are built outside the lock (two threads
 * racing on one key: the first insert wins, the other's plan is destroyed); a
 * plan in use holds a reference, so eviction (least recently used) of a running
 * plan frees it only when its last user releases it. Freed with the context.
 * Also here: the per-thread scratch buffer the plans run with (oneDNN's user
 * scratchpad mode), so a GEMM does not map and fault in fresh pages every call.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"

typedef struct plan_entry {
    uint64_t hash, last_use;
    size_t key_len;
    void *plan;
    void (*destroy)(void *plan);
    int refs, evicted;
    unsigned char key[];
} plan_entry;

struct cpu_plan_cache {
    pthread_mutex_t lock;
    int capacity, count;
    uint64_t clock;
    plan_entry *slots[];
};

static uint64_t key_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void entry_free(plan_entry *e)
{
    if (e->plan && e->destroy) e->destroy(e->plan);
    free(e);
}

cpu_plan_cache *cpu_plan_cache_create(int capacity)
{
    if (capacity < 1) capacity = 1;
    cpu_plan_cache *c = calloc(1, sizeof *c + (size_t)capacity * sizeof(plan_entry *));
    if (!c) return NULL;
    if (pthread_mutex_init(&c->lock, NULL)) {
        free(c);
        return NULL;
    }
    c->capacity = capacity;
    return c;
}

void cpu_plan_cache_destroy(cpu_plan_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->count; i++) entry_free(c->slots[i]); /* the context's streams are drained: no users */
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int cpu_plan_cache_size(cpu_plan_cache *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->lock);
    int n = c->count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* Under the lock: the entry of key, or NULL. */
static plan_entry *find(cpu_plan_cache *c, uint64_t h, const void *key, size_t len)
{
    for (int i = 0; i < c->count; i++) {
        plan_entry *e = c->slots[i];
        if (e->hash == h && e->key_len == len && !memcmp(e->key, key, len)) return e;
    }
    return NULL;
}

/* Under the lock: room for one more entry, evicting the least recently used. */
static void make_room(cpu_plan_cache *c)
{
    if (c->count < c->capacity) return;
    int lru = 0;
    for (int i = 1; i < c->count; i++)
        if (c->slots[i]->last_use < c->slots[lru]->last_use) lru = i;
    plan_entry *e = c->slots[lru];
    c->slots[lru] = c->slots[--c->count];
    if (e->refs) e->evicted = 1; /* its last user frees it */
    else entry_free(e);
}

void *cpu_plan_cache_get(cpu_plan_cache *c, const void *key, size_t key_len, void *(*build)(const void *key, void *arg),
                         void *arg, void (*destroy)(void *plan), void **handle)
{
    *handle = NULL;
    if (!c) return NULL; /* no cache (out of memory at context creation): the caller declines */
    const uint64_t h = key_hash(key, key_len);
    pthread_mutex_lock(&c->lock);
    plan_entry *e = find(c, h, key, key_len);
    if (e) {
        e->refs++;
        e->last_use = ++c->clock;
        pthread_mutex_unlock(&c->lock);
        *handle = e;
        return e->plan;
    }
    pthread_mutex_unlock(&c->lock);
    plan_entry *fresh = malloc(sizeof *fresh + key_len);
    if (!fresh) return NULL;
    memcpy(fresh->key, key, key_len);
    fresh->hash = h;
    fresh->key_len = key_len;
    fresh->destroy = destroy;
    fresh->refs = 1;
    fresh->evicted = 0;
    fresh->plan = build(key, arg);
    pthread_mutex_lock(&c->lock);
    if ((e = find(c, h, key, key_len))) { /* another thread built it meanwhile: keep theirs */
        e->refs++;
        e->last_use = ++c->clock;
        pthread_mutex_unlock(&c->lock);
        entry_free(fresh);
        *handle = e;
        return e->plan;
    }
    make_room(c);
    fresh->last_use = ++c->clock;
    c->slots[c->count++] = fresh;
    pthread_mutex_unlock(&c->lock);
    *handle = fresh;
    return fresh->plan;
}

void cpu_plan_cache_release(cpu_plan_cache *c, void *handle)
{
    plan_entry *e = handle;
    if (!c || !e) return;
    pthread_mutex_lock(&c->lock);
    const int last = --e->refs == 0 && e->evicted;
    pthread_mutex_unlock(&c->lock);
    if (last) entry_free(e);
}

/* ---- per-thread scratchpad ---- */

typedef struct scratch { void *p; size_t bytes; } scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_free(void *v)
{
    scratch *s = v;
    free(s->p);
    free(s);
}

static void scratch_init(void) { scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

void *cpu_plan_scratch(size_t bytes)
{
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_key_ok) return NULL;
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (s->bytes < bytes || !s->p) {
        size_t want = (bytes + 4095) & ~(size_t)4095;
        void *p = aligned_alloc(4096, want ? want : 4096);
        if (!p) return NULL;
        free(s->p);
        s->p = p;
        s->bytes = want;
    }
    return s->p;
}
