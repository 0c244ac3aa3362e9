/*
 * profile.c — the per-op profiler and the NVTX hook, once, above the backend
 * vtable. Front-ends bracket each backend dispatch with gpucore_prof_begin/end
 * (internal.h). Begin counts the call and its bytes at once and records a
 * backend event on the op's stream; end records a second one. Nothing waits:
 * the event pairs queue up as pending records and are turned into milliseconds
 * only when someone asks for the numbers (or when too many pile up), so the
 * profiler never adds a host synchronisation per op. Events are recycled
 * through a free list so a long run creates only as many as are in flight.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define PROFILE_MAX_PENDING 8192 /* resolve the oldest half once this many pairs wait */

typedef struct prof_stat {
    const char *name;
    int64_t calls, bytes, timed;
    double total_ms, min_ms, max_ms;
} prof_stat;

typedef struct prof_record {
    struct prof_record *next;
    int stat;            /* index into stats */
    int closed;          /* the end event was recorded */
    void *ev_begin, *ev_end;
    void *bstream;       /* the op's stream: the end event goes on it too */
} prof_record;

typedef struct gpucore_profiler {
    pthread_mutex_t mu;
    prof_stat *stats;
    int nstats, cap;
    prof_record *head, *tail; /* pending records, oldest first */
    int npending;
    void **free_events;
    int nfree, capfree;
} gpucore_profiler;

/* A bracket that records nothing itself but must still be closed (nesting, NVTX). */
static char nested_token;
static _Thread_local int profile_depth;

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0 && strcmp(v, "off") != 0 && strcmp(v, "false") != 0;
}

static gpucore_profiler *profiler_get(gpucore_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->profiler) {
        gpucore_profiler *p = calloc(1, sizeof *p);
        if (p) {
            pthread_mutex_init(&p->mu, NULL);
            ctx->profiler = p;
        }
    }
    gpucore_profiler *p = ctx->profiler;
    pthread_mutex_unlock(&ctx->lock);
    return p;
}

void gpucore_profile_init(gpucore_context *ctx)
{
    int flags = 0;
    if (env_on("GPUCORE_NVTX") && ctx->be->range_push && ctx->be->range_pop) flags |= GPUCORE_PROFILE_NVTX;
    if (env_on("GPUCORE_PROFILE") && profiler_get(ctx)) flags |= GPUCORE_PROFILE_SUMMARY;
    atomic_store(&ctx->profile_flags, flags);
}

/* Caller holds p->mu. */
static void *event_get(gpucore_context *ctx, gpucore_profiler *p)
{
    if (p->nfree) return p->free_events[--p->nfree];
    void *e = NULL;
    if (ctx->be->event_create(ctx->bctx, &e) != GPUCORE_OK) {
        gpucore_clear_error(); /* profiling must never leave an error behind */
        return NULL;
    }
    return e;
}

static void event_put(gpucore_context *ctx, gpucore_profiler *p, void *e)
{
    if (!e) return;
    if (p->nfree == p->capfree) {
        int cap = p->capfree ? p->capfree * 2 : 64;
        void **n = realloc(p->free_events, sizeof *n * (size_t)cap);
        if (!n) { ctx->be->event_destroy(ctx->bctx, e); return; }
        p->free_events = n;
        p->capfree = cap;
    }
    p->free_events[p->nfree++] = e;
}

static int stat_index(gpucore_profiler *p, const char *name)
{
    for (int i = 0; i < p->nstats; i++)
        if (p->stats[i].name == name || strcmp(p->stats[i].name, name) == 0) return i;
    if (p->nstats == p->cap) {
        int cap = p->cap ? p->cap * 2 : 32;
        prof_stat *n = realloc(p->stats, sizeof *n * (size_t)cap);
        if (!n) return -1;
        p->stats = n;
        p->cap = cap;
    }
    prof_stat *s = &p->stats[p->nstats];
    memset(s, 0, sizeof *s);
    s->name = name;
    return p->nstats++;
}

/* Turn the oldest closed records into times, waiting for their events; stops at
 * the first record still open (its end is not queued yet) or after `limit`.
 * Caller holds p->mu. */
static void resolve(gpucore_context *ctx, gpucore_profiler *p, int limit)
{
    while (p->head && p->head->closed && limit-- > 0) {
        prof_record *r = p->head;
        float ms = 0;
        int ok = r->ev_begin && r->ev_end && ctx->be->event_synchronize(ctx->bctx, r->ev_end) == GPUCORE_OK &&
                 ctx->be->event_elapsed_ms(ctx->bctx, r->ev_begin, r->ev_end, &ms) == GPUCORE_OK;
        if (!ok) gpucore_clear_error();
        if (ok && r->stat >= 0) {
            prof_stat *s = &p->stats[r->stat];
            if (ms < 0) ms = 0;
            if (s->timed == 0 || ms < s->min_ms) s->min_ms = ms;
            if (ms > s->max_ms) s->max_ms = ms;
            s->total_ms += ms;
            s->timed++;
        }
        event_put(ctx, p, r->ev_begin);
        event_put(ctx, p, r->ev_end);
        p->head = r->next;
        if (!p->head) p->tail = NULL;
        p->npending--;
        free(r);
    }
}

void *gpucore_profile_begin(gpucore_context *ctx, gpucore_stream *stream, const char *name, int64_t bytes)
{
    int flags = atomic_load(&ctx->profile_flags);
    if (flags & GPUCORE_PROFILE_NVTX) ctx->be->range_push(name);
    void *token = &nested_token;
    gpucore_profiler *p = ctx->profiler;
    gpucore_stream *s = NULL;
    if ((flags & GPUCORE_PROFILE_SUMMARY) && profile_depth == 0 && p) {
        if (gpucore_resolve_stream(ctx, stream, name, &s) != GPUCORE_OK) {
            gpucore_clear_error(); /* the op itself reports a bad stream */
            s = NULL;
        }
    }
    if (s) {
        prof_record *r = calloc(1, sizeof *r);
        pthread_mutex_lock(&p->mu);
        if (p->npending >= PROFILE_MAX_PENDING) resolve(ctx, p, PROFILE_MAX_PENDING / 2);
        int si = stat_index(p, name);
        if (si >= 0) {
            p->stats[si].calls++;
            p->stats[si].bytes += bytes;
        }
        if (r) {
            r->stat = si;
            r->bstream = s->bstream;
            r->ev_begin = event_get(ctx, p);
            r->ev_end = event_get(ctx, p);
            if (r->ev_begin && ctx->be->event_record(ctx->bctx, r->ev_begin, s->bstream) != GPUCORE_OK) {
                gpucore_clear_error();
                event_put(ctx, p, r->ev_begin);
                r->ev_begin = NULL;
            }
            if (p->tail) p->tail->next = r;
            else p->head = r;
            p->tail = r;
            p->npending++;
            token = r;
        }
        pthread_mutex_unlock(&p->mu);
    }
    profile_depth++;
    return token;
}

void gpucore_profile_count(gpucore_context *ctx, const char *name)
{
    gpucore_profiler *p = ctx->profiler;
    if (!(atomic_load(&ctx->profile_flags) & GPUCORE_PROFILE_SUMMARY) || !p) return;
    pthread_mutex_lock(&p->mu);
    int si = stat_index(p, name);
    if (si >= 0) p->stats[si].calls++;
    pthread_mutex_unlock(&p->mu);
}

void gpucore_profile_end(gpucore_context *ctx, void *token)
{
    profile_depth--;
    if (token != &nested_token) {
        prof_record *r = token;
        gpucore_profiler *p = ctx->profiler;
        pthread_mutex_lock(&p->mu);
        if (r->ev_end && ctx->be->event_record(ctx->bctx, r->ev_end, r->bstream) != GPUCORE_OK) {
            gpucore_clear_error();
            event_put(ctx, p, r->ev_end);
            r->ev_end = NULL;
        }
        r->closed = 1;
        pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&ctx->profile_flags) & GPUCORE_PROFILE_NVTX) ctx->be->range_pop();
}

void gpucore_profile_fini(gpucore_context *ctx)
{
    gpucore_profiler *p = ctx->profiler;
    if (!p) return;
    atomic_store(&ctx->profile_flags, 0);
    pthread_mutex_lock(&p->mu);
    for (prof_record *r = p->head; r; r = r->next) r->closed = 1;
    resolve(ctx, p, INT32_MAX);
    for (int i = 0; i < p->nfree; i++) ctx->be->event_destroy(ctx->bctx, p->free_events[i]);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p->free_events);
    free(p->stats);
    free(p);
    ctx->profiler = NULL;
}

/* ------------------------------------------------------------------ API */

gpucore_status gpucore_profiler_enable(gpucore_context *ctx, int enabled)
{
    gpucore_status st = gpucore_check_context(ctx, "profiler_enable");
    if (st) return st;
    if (enabled != 0 && enabled != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "profiler_enable: enabled is %d; use 0 or 1", enabled);
    if (enabled && !profiler_get(ctx))
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "profiler_enable: out of host memory");
    if (enabled) atomic_fetch_or(&ctx->profile_flags, GPUCORE_PROFILE_SUMMARY);
    else atomic_fetch_and(&ctx->profile_flags, ~GPUCORE_PROFILE_SUMMARY);
    return GPUCORE_OK;
}

int gpucore_profiler_enabled(const gpucore_context *ctx)
{
    if (gpucore_check_context(ctx, "profiler_enabled")) return -1;
    return (atomic_load(&((gpucore_context *)ctx)->profile_flags) & GPUCORE_PROFILE_SUMMARY) ? 1 : 0;
}

gpucore_status gpucore_profiler_reset(gpucore_context *ctx)
{
    gpucore_status st = gpucore_check_context(ctx, "profiler_reset");
    if (st) return st;
    gpucore_profiler *p = ctx->profiler;
    if (!p) return GPUCORE_OK;
    pthread_mutex_lock(&p->mu);
    resolve(ctx, p, INT32_MAX);
    /* records still open (an op being enqueued on another thread) keep their slot */
    for (int i = 0; i < p->nstats; i++) {
        const char *name = p->stats[i].name;
        memset(&p->stats[i], 0, sizeof p->stats[i]);
        p->stats[i].name = name;
    }
    pthread_mutex_unlock(&p->mu);
    return GPUCORE_OK;
}

static int by_time_desc(const void *a, const void *b)
{
    const gpucore_profile_entry *x = a, *y = b;
    if (x->total_ms != y->total_ms) return x->total_ms < y->total_ms ? 1 : -1;
    if (x->calls != y->calls) return x->calls < y->calls ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* A sorted copy of the non-empty stats after resolving everything closed. */
static gpucore_status snapshot(gpucore_context *ctx, const char *op, gpucore_profile_entry **out, int *n)
{
    *out = NULL;
    *n = 0;
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    gpucore_profiler *p = ctx->profiler;
    if (!p) return GPUCORE_OK;
    pthread_mutex_lock(&p->mu);
    resolve(ctx, p, INT32_MAX);
    gpucore_profile_entry *e = calloc((size_t)(p->nstats ? p->nstats : 1), sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&p->mu);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    int k = 0;
    for (int i = 0; i < p->nstats; i++) {
        const prof_stat *s = &p->stats[i];
        if (!s->calls) continue;
        e[k].struct_size = sizeof e[k];
        snprintf(e[k].name, sizeof e[k].name, "%s", s->name);
        e[k].calls = s->calls;
        e[k].bytes = s->bytes;
        e[k].total_ms = s->total_ms;
        e[k].min_ms = s->min_ms;
        e[k].max_ms = s->max_ms;
        e[k].timed_calls = s->timed;
        k++;
    }
    pthread_mutex_unlock(&p->mu);
    qsort(e, (size_t)k, sizeof *e, by_time_desc);
    *out = e;
    *n = k;
    return GPUCORE_OK;
}

gpucore_status gpucore_profiler_entries(gpucore_context *ctx, gpucore_profile_entry *entries, int max, int *count)
{
    if (!count) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "profiler_entries: count is NULL");
    if (max < 0 || (max > 0 && !entries))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "profiler_entries: entries is NULL or max (%d) < 0", max);
    gpucore_profile_entry *e;
    int n;
    gpucore_status st = snapshot(ctx, "profiler_entries", &e, &n);
    if (st) return st;
    for (int i = 0; i < n && i < max; i++) {
        int64_t size = entries[i].struct_size;
        if (size <= 0 || size > (int64_t)sizeof *e) size = sizeof *e; /* older callers get what they know */
        memcpy(&entries[i], &e[i], (size_t)size);
        entries[i].struct_size = size;
    }
    *count = n;
    free(e);
    return GPUCORE_OK;
}

/* Append to a growing text buffer. */
typedef struct text { char *s; size_t len, cap; int oom; } text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { t->oom = 1; return; }
        if (t->s && t->len + (size_t)n < t->cap) { t->len += (size_t)n; return; }
        size_t cap = (t->cap ? t->cap * 2 : 1024) + (size_t)n;
        char *ns = realloc(t->s, cap);
        if (!ns) { t->oom = 1; return; }
        t->s = ns;
        t->cap = cap;
    }
}

static void add_json_string(text *t, const char *s)
{
    add(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') add(t, "\\%c", c);
        else if (c < 0x20) add(t, "\\u%04x", c);
        else add(t, "%c", c);
    }
    add(t, "\"");
}

gpucore_status gpucore_profiler_summary(gpucore_context *ctx, int json, char *buf, int64_t buf_len, int64_t *needed)
{
    const char *op = "profiler_summary";
    if (json != 0 && json != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: json is %d; use 0 (table) or 1 (JSON)", op, json);
    if (buf_len < 0 || (buf_len > 0 && !buf))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: buf is NULL or buf_len (%lld) < 0", op,
                                 (long long)buf_len);
    gpucore_profile_entry *e;
    int n;
    gpucore_status st = snapshot(ctx, op, &e, &n);
    if (st) return st;
    text t = {0};
    if (json) {
        add(&t, "{\"device\":");
        add_json_string(&t, ctx->name);
        add(&t, ",\"ops\":[");
        for (int i = 0; i < n; i++) {
            double mean = e[i].timed_calls ? e[i].total_ms / (double)e[i].timed_calls : 0;
            add(&t, "%s{\"name\":", i ? "," : "");
            add_json_string(&t, e[i].name);
            add(&t, ",\"calls\":%" PRId64 ",\"timed_calls\":%" PRId64 ",\"total_ms\":%.6f,\"mean_ms\":%.6f,"
                    "\"min_ms\":%.6f,\"max_ms\":%.6f,\"bytes\":%" PRId64 "}",
                e[i].calls, e[i].timed_calls, e[i].total_ms, mean, e[i].min_ms, e[i].max_ms, e[i].bytes);
        }
        add(&t, "]}\n");
    } else {
        int64_t calls = 0, bytes = 0;
        double total = 0;
        add(&t, "%-28s %10s %12s %10s %14s %9s\n", "op", "calls", "total ms", "mean ms", "bytes", "GB/s");
        for (int i = 0; i < n; i++) {
            double mean = e[i].timed_calls ? e[i].total_ms / (double)e[i].timed_calls : 0;
            double gbs = e[i].total_ms > 0 ? (double)e[i].bytes / (e[i].total_ms * 1e6) : 0;
            add(&t, "%-28s %10" PRId64 " %12.3f %10.4f %14" PRId64 " %9.2f\n", e[i].name, e[i].calls, e[i].total_ms,
                mean, e[i].bytes, gbs);
            calls += e[i].calls;
            bytes += e[i].bytes;
            total += e[i].total_ms;
        }
        add(&t, "%-28s %10" PRId64 " %12.3f %10s %14" PRId64 "\n", "total", calls, total, "", bytes);
    }
    free(e);
    if (t.oom) {
        free(t.s);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    size_t need = t.len + 1;
    if (needed) *needed = (int64_t)need;
    if (buf_len > 0) {
        size_t k = (size_t)buf_len < need ? (size_t)buf_len - 1 : t.len;
        memcpy(buf, t.s, k);
        buf[k] = 0;
    }
    free(t.s);
    if (buf && (size_t)buf_len < need)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the buffer holds %lld bytes but the summary needs %zu",
                                 op, (long long)buf_len, need);
    return GPUCORE_OK;
}
