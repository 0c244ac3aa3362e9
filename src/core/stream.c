/*
 * stream.c — streams and events above the backend: handle bookkeeping, the
 * per-thread current stream, and validation. The backend supplies the queues
 * (CUDA streams, or worker-thread FIFOs on the CPU).
 */
#include <string.h>
#include "internal.h"

/* Per-thread current stream per context: a tiny map, stale entries are skipped. */
#define CURRENT_SLOTS 8
static _Thread_local struct { gpucore_context *ctx; gpucore_stream *stream; } current_stream[CURRENT_SLOTS];

static gpucore_stream *current_of(gpucore_context *ctx)
{
    /* no thread ever set one: every op of such a context skips the thread-local lookup (a thread
     * that sets one sees its own store, so relaxed order is enough) */
    if (!atomic_load_explicit(&ctx->current_set, memory_order_relaxed)) return ctx->default_stream;
    for (int i = 0; i < CURRENT_SLOTS; i++)
        if (current_stream[i].ctx == ctx) {
            gpucore_stream *s = current_stream[i].stream;
            if (s && s->magic == GPUCORE_MAGIC_STREAM && s->ctx == ctx) return s;
            current_stream[i].ctx = NULL;
        }
    return ctx->default_stream;
}

gpucore_status gpucore_resolve_stream(gpucore_context *ctx, gpucore_stream *s, const char *op, gpucore_stream **out)
{
    if (!s) { *out = current_of(ctx); return GPUCORE_OK; }
    gpucore_status st = gpucore_check_stream(s, op);
    if (st) return st;
    if (s->ctx != ctx)
        return gpucore_context_mismatch(op, "the stream", s->ctx, "the tensors", ctx);
    *out = s;
    return GPUCORE_OK;
}

gpucore_status gpucore_context_default_stream(gpucore_context *ctx, gpucore_stream **out)
{
    gpucore_status st = gpucore_check_context(ctx, "context_default_stream");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "context_default_stream: out is NULL");
    *out = ctx->default_stream;
    return GPUCORE_OK;
}

gpucore_status gpucore_context_current_stream(gpucore_context *ctx, gpucore_stream **out)
{
    gpucore_status st = gpucore_check_context(ctx, "context_current_stream");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "context_current_stream: out is NULL");
    *out = current_of(ctx);
    return GPUCORE_OK;
}

gpucore_status gpucore_context_set_current_stream(gpucore_context *ctx, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_context(ctx, "context_set_current_stream");
    if (st) return st;
    gpucore_stream *s = NULL;
    if (stream && (st = gpucore_resolve_stream(ctx, stream, "context_set_current_stream", &s))) return st;
    if (s) atomic_store_explicit(&ctx->current_set, 1, memory_order_relaxed);
    int free_slot = -1;
    for (int i = 0; i < CURRENT_SLOTS; i++) {
        if (current_stream[i].ctx == ctx) { current_stream[i].stream = s; return GPUCORE_OK; }
        if (free_slot < 0 && (!current_stream[i].ctx || current_stream[i].ctx->magic != GPUCORE_MAGIC_CONTEXT))
            free_slot = i;
    }
    if (free_slot < 0)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "context_set_current_stream: this thread already has current streams for %d live "
                                 "contexts; pass streams explicitly instead", CURRENT_SLOTS);
    current_stream[free_slot].ctx = ctx;
    current_stream[free_slot].stream = s;
    return GPUCORE_OK;
}

gpucore_status gpucore_stream_create(gpucore_context *ctx, int priority, gpucore_stream **out)
{
    gpucore_status st = gpucore_check_context(ctx, "stream_create");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "stream_create: out is NULL");
    *out = NULL;
    gpucore_stream *s = gpucore_handle_alloc(&gpucore_stream_pool);
    if (!s) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "stream_create: out of host memory");
    if ((st = ctx->be->stream_create(ctx->bctx, priority, &s->bstream)) != GPUCORE_OK) {
        gpucore_handle_release(&gpucore_stream_pool, s);
        return st;
    }
    if (ctx->be->stream_count_pending) ctx->be->stream_count_pending(ctx->bctx, s->bstream, &ctx->pending);
    s->ctx = ctx;
    s->magic = GPUCORE_MAGIC_STREAM;
    pthread_mutex_lock(&ctx->lock);
    s->next = ctx->streams;
    ctx->streams = s;
    pthread_mutex_unlock(&ctx->lock);
    *out = s;
    return GPUCORE_OK;
}

static void stream_unlink_and_free(gpucore_stream *s)
{
    gpucore_context *ctx = s->ctx;
    pthread_mutex_lock(&ctx->lock);
    for (gpucore_stream **p = &ctx->streams; *p; p = &(*p)->next)
        if (*p == s) { *p = s->next; break; }
    pthread_mutex_unlock(&ctx->lock);
    s->magic = GPUCORE_MAGIC_DEAD;
    gpucore_memory_stream_destroyed(ctx, s); /* its memory moves to the default stream */
    ctx->be->stream_destroy(ctx->bctx, s->bstream);
    gpucore_handle_release(&gpucore_stream_pool, s);
}

gpucore_status gpucore_stream_destroy(gpucore_stream *stream)
{
    if (!stream) return GPUCORE_OK;
    gpucore_status st = gpucore_check_stream(stream, "stream_destroy");
    if (st) return st;
    if (stream->is_default)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "stream_destroy: this is the context's default stream; it is destroyed with the context");
    if (stream->is_pool)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "stream_destroy: this is one of the context's pool streams; it is destroyed with the context");
    st = stream->ctx->be->stream_synchronize(stream->ctx->bctx, stream->bstream);
    stream_unlink_and_free(stream);
    return st;
}

void gpucore_streams_destroy_all(gpucore_context *ctx)
{
    while (ctx->streams) stream_unlink_and_free(ctx->streams);
    ctx->default_stream = NULL;
    memset(ctx->pool_streams, 0, sizeof ctx->pool_streams);
}

gpucore_status gpucore_stream_priority_range(gpucore_context *ctx, int *least, int *greatest)
{
    gpucore_status st = gpucore_check_context(ctx, "stream_priority_range");
    if (st) return st;
    if (!least || !greatest) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "stream_priority_range: least or greatest is NULL");
    *least = *greatest = 0;
    if (!ctx->be->stream_priority_range) return GPUCORE_OK;
    return ctx->be->stream_priority_range(ctx->bctx, least, greatest);
}

gpucore_status gpucore_context_pool_stream(gpucore_context *ctx, int high_priority, gpucore_stream **out)
{
    gpucore_status st = gpucore_check_context(ctx, "context_pool_stream");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "context_pool_stream: out is NULL");
    *out = NULL;
    if (high_priority != 0 && high_priority != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "context_pool_stream: high_priority is %d; use 0 or 1",
                                 high_priority);
    const int n = (int)(sizeof ctx->pool_streams[0] / sizeof ctx->pool_streams[0][0]);
    unsigned slot = atomic_fetch_add(&ctx->pool_next[high_priority], 1u) % (unsigned)n;
    pthread_mutex_lock(&ctx->lock);
    gpucore_stream *s = ctx->pool_streams[high_priority][slot];
    pthread_mutex_unlock(&ctx->lock);
    if (!s) {
        int least = 0, greatest = 0;
        if (high_priority && (st = gpucore_stream_priority_range(ctx, &least, &greatest))) return st;
        gpucore_stream *made = NULL;
        if ((st = gpucore_stream_create(ctx, high_priority ? greatest : 0, &made))) return st;
        made->is_pool = 1;
        pthread_mutex_lock(&ctx->lock);
        s = ctx->pool_streams[high_priority][slot];
        if (!s) s = ctx->pool_streams[high_priority][slot] = made;
        pthread_mutex_unlock(&ctx->lock);
        if (s != made) { /* another thread filled the slot first */
            made->is_pool = 0;
            gpucore_stream_destroy(made);
        }
    }
    *out = s;
    return GPUCORE_OK;
}

gpucore_status gpucore_stream_synchronize(gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_stream(stream, "stream_synchronize");
    if (st) return st;
    return stream->ctx->be->stream_synchronize(stream->ctx->bctx, stream->bstream);
}

gpucore_status gpucore_debug_fail_async(gpucore_stream *stream, gpucore_status status)
{
    gpucore_status st = gpucore_check_stream(stream, "debug_fail_async");
    if (st) return st;
    if (status <= GPUCORE_OK || status > GPUCORE_ERR_INTERNAL || status == GPUCORE_ERR_NOT_READY)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "debug_fail_async: status %d is not an error code (1..%d, not GPUCORE_ERR_NOT_READY)",
                                 (int)status, (int)GPUCORE_ERR_INTERNAL);
    gpucore_context *ctx = stream->ctx;
    if (!ctx->be->debug_fail_async)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "debug_fail_async: not on %s (a device fault there ends the context)", ctx->name);
    return ctx->be->debug_fail_async(ctx->bctx, stream->bstream, status);
}

gpucore_status gpucore_stream_query(gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_stream(stream, "stream_query");
    if (st) return st;
    return stream->ctx->be->stream_query(stream->ctx->bctx, stream->bstream);
}

gpucore_status gpucore_stream_native_handle(gpucore_stream *stream, void **handle)
{
    gpucore_status st = gpucore_check_stream(stream, "stream_native_handle");
    if (st) return st;
    if (!handle) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "stream_native_handle: handle is NULL");
    *handle = stream->bstream;
    return GPUCORE_OK;
}

static gpucore_status event_create_as(gpucore_context *ctx, gpucore_event **out, int timed)
{
    gpucore_status st = gpucore_check_context(ctx, "event_create");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "event_create: out is NULL");
    *out = NULL;
    gpucore_event *e = gpucore_handle_alloc(&gpucore_event_pool);
    if (!e) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "event_create: out of host memory");
    gpucore_status (*create)(void *, void **) =
        timed || !ctx->be->event_create_untimed ? ctx->be->event_create : ctx->be->event_create_untimed;
    if ((st = create(ctx->bctx, &e->bevent)) != GPUCORE_OK) {
        gpucore_handle_release(&gpucore_event_pool, e);
        return st;
    }
    e->ctx = ctx;
    e->magic = GPUCORE_MAGIC_EVENT;
    pthread_mutex_lock(&ctx->lock);
    e->prev = NULL;
    e->next = ctx->events;
    if (ctx->events) ctx->events->prev = e;
    ctx->events = e;
    pthread_mutex_unlock(&ctx->lock);
    *out = e;
    return GPUCORE_OK;
}

gpucore_status gpucore_event_create(gpucore_context *ctx, gpucore_event **out)
{
    return event_create_as(ctx, out, 1);
}

gpucore_status gpucore_event_create_untimed(gpucore_context *ctx, gpucore_event **out)
{
    return event_create_as(ctx, out, 0);
}

static void event_free(gpucore_event *e)
{
    e->magic = GPUCORE_MAGIC_DEAD;
    e->ctx->be->event_destroy(e->ctx->bctx, e->bevent);
    gpucore_handle_release(&gpucore_event_pool, e);
}

void gpucore_events_destroy_all(gpucore_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    gpucore_event *e = ctx->events;
    ctx->events = NULL;
    pthread_mutex_unlock(&ctx->lock);
    while (e) {
        gpucore_event *next = e->next;
        event_free(e);
        e = next;
    }
}

gpucore_status gpucore_event_destroy(gpucore_event *event)
{
    if (!event) return GPUCORE_OK;
    gpucore_status st = gpucore_check_event(event, "event_destroy");
    if (st) return st;
    gpucore_context *ctx = event->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (event->prev) event->prev->next = event->next;
    else ctx->events = event->next;
    if (event->next) event->next->prev = event->prev;
    pthread_mutex_unlock(&ctx->lock);
    event_free(event);
    return GPUCORE_OK;
}

gpucore_status gpucore_event_record(gpucore_event *event, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_event(event, "event_record");
    if (st) return st;
    gpucore_stream *s = NULL;
    if ((st = gpucore_resolve_stream(event->ctx, stream, "event_record", &s))) return st;
    return event->ctx->be->event_record(event->ctx->bctx, event->bevent, s->bstream);
}

gpucore_status gpucore_stream_wait_event(gpucore_stream *stream, gpucore_event *event)
{
    gpucore_status st = gpucore_check_stream(stream, "stream_wait_event");
    if (st || (st = gpucore_check_event(event, "stream_wait_event"))) return st;
    if (stream->ctx != event->ctx)
        return gpucore_context_mismatch("stream_wait_event", "the stream", stream->ctx, "the event", event->ctx);
    return stream->ctx->be->stream_wait_event(stream->ctx->bctx, stream->bstream, event->bevent);
}

gpucore_status gpucore_event_synchronize(gpucore_event *event)
{
    gpucore_status st = gpucore_check_event(event, "event_synchronize");
    if (st) return st;
    return event->ctx->be->event_synchronize(event->ctx->bctx, event->bevent);
}

gpucore_status gpucore_event_query(gpucore_event *event)
{
    gpucore_status st = gpucore_check_event(event, "event_query");
    if (st) return st;
    return event->ctx->be->event_query(event->ctx->bctx, event->bevent);
}

gpucore_status gpucore_event_elapsed_ms(gpucore_event *start, gpucore_event *end, float *ms)
{
    gpucore_status st = gpucore_check_event(start, "event_elapsed_ms");
    if (st || (st = gpucore_check_event(end, "event_elapsed_ms"))) return st;
    if (!ms) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "event_elapsed_ms: ms is NULL");
    if (start->ctx != end->ctx)
        return gpucore_set_error(GPUCORE_ERR_DEVICE_MISMATCH, "event_elapsed_ms: events from different contexts");
    return start->ctx->be->event_elapsed_ms(start->ctx->bctx, start->bevent, end->bevent, ms);
}
