/*
 * standin_core.c — what every contract-checking stand-in shares: the record of
 * contract violations (with the query functions tests call), counters of what
 * ran, a set of live handles, and the table of device and pinned allocations.
 *
 * Device memory is host memory. A host dereference of it cannot be trapped
 * cheaply in C (it would take a page-protection scheme per access), so it is
 * NOT detected; what is checked is every pointer an API call receives: that it
 * lies inside a live allocation of the right kind and size. Freed ranges stay
 * in a quarantine (not returned to malloc) up to a byte budget, so a late use
 * of freed memory is named as such instead of hitting a new allocation.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "standin.h"

/* ---- violations ---- */

#define MAX_VIOLATIONS 256
static pthread_mutex_t viol_lock = PTHREAD_MUTEX_INITIALIZER;
static char *violations[MAX_VIOLATIONS];
static int violation_total;

void standin_violation(const char *api, const char *where, const char *fmt, ...)
{
    char msg[900], line[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s: %s [%s]", api, msg, where);
    pthread_mutex_lock(&viol_lock);
    if (violation_total < MAX_VIOLATIONS) violations[violation_total] = strdup(line);
    violation_total++;
    pthread_mutex_unlock(&viol_lock);
    if (getenv("STANDIN_VERBOSE")) fprintf(stderr, "STANDIN VIOLATION %s\n", line);
}

int standin_violation_count(void)
{
    pthread_mutex_lock(&viol_lock);
    int n = violation_total;
    pthread_mutex_unlock(&viol_lock);
    return n;
}

const char *standin_violation_text(int i)
{
    pthread_mutex_lock(&viol_lock);
    const char *t = (i >= 0 && i < violation_total && i < MAX_VIOLATIONS) ? violations[i] : NULL;
    pthread_mutex_unlock(&viol_lock);
    return t;
}

void standin_violations_clear(void)
{
    pthread_mutex_lock(&viol_lock);
    for (int i = 0; i < violation_total && i < MAX_VIOLATIONS; i++) {
        free(violations[i]);
        violations[i] = NULL;
    }
    violation_total = 0;
    pthread_mutex_unlock(&viol_lock);
}

/* ---- counters ---- */

#define MAX_COUNTERS 32
static struct { const char *name; long value; } counters[MAX_COUNTERS];
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;

void standin_count(const char *name)
{
    pthread_mutex_lock(&counter_lock);
    for (int i = 0; i < MAX_COUNTERS; i++) {
        if (!counters[i].name) counters[i].name = name;
        if (!strcmp(counters[i].name, name)) {
            counters[i].value++;
            break;
        }
    }
    pthread_mutex_unlock(&counter_lock);
}

long standin_counter(const char *name)
{
    long v = 0;
    pthread_mutex_lock(&counter_lock);
    for (int i = 0; i < MAX_COUNTERS && counters[i].name; i++)
        if (!strcmp(counters[i].name, name)) v = counters[i].value;
    pthread_mutex_unlock(&counter_lock);
    return v;
}

long standin_env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

/* ---- handle sets: open addressing on the pointer value, tombstones as (void *)1 ---- */

#define TOMB ((void *)1)
static size_t slot_of(void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

static void set_grow(standin_set *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    void **slots = calloc(cap, sizeof *slots);
    for (size_t i = 0; i < s->cap; i++) {
        void *p = s->slots[i];
        if (!p || p == TOMB) continue;
        size_t j = slot_of(p, cap);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = p;
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
}

void standin_set_add(standin_set *s, void *p)
{
    pthread_mutex_lock(&s->mu);
    if ((s->used + 1) * 2 > s->cap) {
        /* rehash also drops tombstones */
        size_t live = 0;
        for (size_t i = 0; i < s->cap; i++) live += s->slots[i] && s->slots[i] != TOMB;
        s->used = live;
        set_grow(s);
    }
    size_t j = slot_of(p, s->cap);
    while (s->slots[j] && s->slots[j] != TOMB) j = (j + 1) & (s->cap - 1);
    s->slots[j] = p;
    s->used++;
    pthread_mutex_unlock(&s->mu);
}

static size_t set_find(standin_set *s, void *p)
{
    if (!s->cap) return (size_t)-1;
    size_t j = slot_of(p, s->cap);
    for (size_t n = 0; n < s->cap && s->slots[j]; n++, j = (j + 1) & (s->cap - 1))
        if (s->slots[j] == p) return j;
    return (size_t)-1;
}

int standin_set_remove(standin_set *s, void *p)
{
    pthread_mutex_lock(&s->mu);
    size_t j = set_find(s, p);
    if (j != (size_t)-1) s->slots[j] = TOMB;
    pthread_mutex_unlock(&s->mu);
    return j != (size_t)-1;
}

int standin_set_has(standin_set *s, void *p)
{
    if (!p || p == TOMB) return 0;
    pthread_mutex_lock(&s->mu);
    int has = set_find(s, p) != (size_t)-1;
    pthread_mutex_unlock(&s->mu);
    return has;
}

size_t standin_set_list(standin_set *s, void **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->cap && n < max; i++)
        if (s->slots[i] && s->slots[i] != TOMB) out[n++] = s->slots[i];
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- memory table: live ranges sorted by base; freed ranges in a FIFO quarantine ---- */

typedef struct range { char *base; size_t size; int kind, device; } range;
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static range *ranges;
static size_t nranges, cap_ranges;
#define QUARANTINE_SLOTS 512
static range quarantine[QUARANTINE_SLOTS];
static size_t q_next, q_bytes;
#define QUARANTINE_BYTES ((size_t)256 << 20)

static size_t lower_bound(const char *p)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].base <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo; /* first range with base > p */
}

void standin_mem_add(void *p, size_t size, int kind, int device)
{
    pthread_mutex_lock(&mem_lock);
    if (nranges == cap_ranges) {
        cap_ranges = cap_ranges ? cap_ranges * 2 : 256;
        ranges = realloc(ranges, cap_ranges * sizeof *ranges);
    }
    size_t at = lower_bound(p);
    memmove(ranges + at + 1, ranges + at, (nranges - at) * sizeof *ranges);
    ranges[at] = (range){p, size, kind, device};
    nranges++;
    pthread_mutex_unlock(&mem_lock);
}

int standin_mem_remove(void *p, int kind, standin_mem_info *was)
{
    pthread_mutex_lock(&mem_lock);
    size_t at = lower_bound(p);
    int found = 0;
    if (at > 0 && ranges[at - 1].base == (char *)p && ranges[at - 1].kind == kind) {
        range r = ranges[at - 1];
        found = r.kind;
        if (was) *was = (standin_mem_info){r.kind, r.device, r.base, r.size};
        memmove(ranges + at - 1, ranges + at, (nranges - at) * sizeof *ranges);
        nranges--;
        /* keep it (unfreed) in the quarantine; the slot it evicts is returned to malloc */
        range *q = &quarantine[q_next];
        if (q->base) { free(q->base); q_bytes -= q->size; }
        *q = r;
        q->kind = STANDIN_MEM_FREED;
        q_bytes += r.size;
        q_next = (q_next + 1) % QUARANTINE_SLOTS;
        for (size_t i = 0; q_bytes > QUARANTINE_BYTES && i < QUARANTINE_SLOTS; i++) {
            range *o = &quarantine[(q_next + i) % QUARANTINE_SLOTS];
            if (o->base && o != q) { free(o->base); q_bytes -= o->size; o->base = NULL; }
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return found;
}

standin_mem_info standin_mem_find(const void *p)
{
    standin_mem_info info = {STANDIN_MEM_NONE, -1, NULL, 0};
    const char *c = p;
    pthread_mutex_lock(&mem_lock);
    size_t at = lower_bound(c);
    if (at > 0 && c < ranges[at - 1].base + ranges[at - 1].size + (ranges[at - 1].size == 0))
        info = (standin_mem_info){ranges[at - 1].kind, ranges[at - 1].device, ranges[at - 1].base, ranges[at - 1].size};
    else
        for (size_t i = 0; i < QUARANTINE_SLOTS; i++)
            if (quarantine[i].base && c >= quarantine[i].base && c < quarantine[i].base + quarantine[i].size) {
                info = (standin_mem_info){STANDIN_MEM_FREED, quarantine[i].device, quarantine[i].base, quarantine[i].size};
                break;
            }
    pthread_mutex_unlock(&mem_lock);
    return info;
}

size_t standin_mem_device_bytes(int device)
{
    size_t total = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < nranges; i++)
        if (ranges[i].kind == STANDIN_MEM_DEVICE && ranges[i].device == device) total += ranges[i].size;
    pthread_mutex_unlock(&mem_lock);
    return total;
}

int standin_check_device_range(const char *api, const char *where, const char *what, const void *p, size_t bytes)
{
    if (bytes == 0) return 1;
    standin_mem_info m = standin_mem_find(p);
    if (m.kind == STANDIN_MEM_DEVICE && (const char *)p + bytes <= m.base + m.size) return 1;
    if (m.kind == STANDIN_MEM_DEVICE)
        standin_violation(api, where, "%s [%p, +%zu bytes) runs %zu bytes past the end of its device allocation "
                          "(%zu bytes at %p)", what, p, bytes, (size_t)((const char *)p + bytes - (m.base + m.size)),
                          m.size, (void *)m.base);
    else if (m.kind == STANDIN_MEM_FREED)
        standin_violation(api, where, "%s %p points into device memory already released with cudaFree", what, p);
    else
        standin_violation(api, where, "%s %p is not device memory (%s)", what, p,
                          m.kind == STANDIN_MEM_PINNED ? "it is pinned host memory" : "no cudaMalloc range holds it");
    return 0;
}

/* At exit: unread violations fail the process, so a test that never asks still fails. */
__attribute__((destructor)) static void standin_report_at_exit(void)
{
    int n = standin_violation_count();
    if (!n) return;
    fprintf(stderr, "STANDIN: %d CUDA/cuBLASLt/NCCL/cuDNN contract violation(s) were recorded:\n", n);
    for (int i = 0; i < n && i < MAX_VIOLATIONS; i++) fprintf(stderr, "  %s\n", violations[i]);
    fflush(stderr);
    _exit(3);
}
