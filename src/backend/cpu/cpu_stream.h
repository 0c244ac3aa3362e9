/*
 * cpu_stream.h — CPU streams as real asynchronous FIFO queues (one worker thread
 * each) and events on them, so stream ordering, cross-stream waits and
 * stream-ordered reuse behave on the CPU as they do on CUDA.
 */
#ifndef GPUCORE_CPU_STREAM_H
#define GPUCORE_CPU_STREAM_H

#include <stddef.h>
#include "core/internal.h"

typedef struct cpu_stream cpu_stream;
typedef struct cpu_event cpu_event;

/* A task gets a pointer to its own copy of the argument bytes given at enqueue. */
typedef gpucore_status (*cpu_task_fn)(void *args);

GPUCORE_HIDDEN gpucore_status cpu_stream_create(cpu_stream **out);
GPUCORE_HIDDEN void cpu_stream_destroy(cpu_stream *s);
/* Copies args_size bytes of args; fn runs after earlier tasks, on the stream's thread or, when
 * a caller synchronizes before the worker has started it, on that caller's thread. */
GPUCORE_HIDDEN gpucore_status cpu_stream_enqueue(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size);
/* The same for a task that must run on the stream's own thread (MPI calls, user callbacks). */
GPUCORE_HIDDEN gpucore_status cpu_stream_enqueue_pinned(cpu_stream *s, cpu_task_fn fn, const void *args,
                                                        size_t args_size);
/* The same for a task its caller is expected to wait for right after (a collective on the
 * caller's stream): the worker leaves it a short while to a synchronizing caller, which
 * then runs it on its own thread; otherwise it runs as any task, a little later. */
GPUCORE_HIDDEN gpucore_status cpu_stream_enqueue_for_caller(cpu_stream *s, cpu_task_fn fn, const void *args,
                                                            size_t args_size);
/* The same for a task of a few microseconds that opens no parallel region (a small
 * elementwise op, fill or copy, an event record): when the stream is idle — nothing queued,
 * nothing running — it runs at once on the caller's thread, as the worker would run it
 * (errors sticky for synchronize), saving the queue's allocation and the hand-off. */
GPUCORE_HIDDEN gpucore_status cpu_stream_enqueue_small(cpu_stream *s, cpu_task_fn fn, const void *args,
                                                       size_t args_size);
GPUCORE_HIDDEN gpucore_status cpu_stream_synchronize(cpu_stream *s);
/* A function every stream thread calls before it runs a task (NULL: none): the CPU
 * backend's thread policy (cpu_threads.c). It must be cheap and must not block. */
GPUCORE_HIDDEN void cpu_stream_set_task_hook(void (*fn)(void));
GPUCORE_HIDDEN gpucore_status cpu_stream_query(cpu_stream *s);
/* From now on keep *word (shared by every stream of a context, written with atomic adds)
 * up to date: +1 for each task queued and not finished, +1 while an error waits for
 * synchronize. It reads 0 exactly when synchronizing every such stream would return OK at
 * once. Tasks run inline (cpu_stream_enqueue_small) finish before their enqueue returns and
 * do not count. Call before the stream is used; word must outlive the stream. */
GPUCORE_HIDDEN void cpu_stream_count_pending(cpu_stream *s, uint64_t *word);

GPUCORE_HIDDEN gpucore_status cpu_event_create(cpu_event **out);
GPUCORE_HIDDEN void cpu_event_destroy(cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_record(cpu_event *e, cpu_stream *s);
GPUCORE_HIDDEN gpucore_status cpu_stream_wait_event(cpu_stream *s, cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_synchronize(cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_query(cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, float *ms);

/* vtable adapters (bctx unused) shared by the CPU backend and the test-only cuda-emulated
 * module, which both run on these queues; stream create/destroy/synchronize stay per backend. */
GPUCORE_HIDDEN gpucore_status cpu_vt_stream_query(void *bctx, void *s);
GPUCORE_HIDDEN gpucore_status cpu_vt_host_callback(void *bctx, void *s, gpucore_host_fn fn, void *arg);
GPUCORE_HIDDEN gpucore_status cpu_vt_event_create(void *bctx, void **e);
GPUCORE_HIDDEN void cpu_vt_event_destroy(void *bctx, void *e);
GPUCORE_HIDDEN gpucore_status cpu_vt_event_record(void *bctx, void *e, void *s);
GPUCORE_HIDDEN gpucore_status cpu_vt_stream_wait_event(void *bctx, void *s, void *e);
GPUCORE_HIDDEN gpucore_status cpu_vt_event_synchronize(void *bctx, void *e);
GPUCORE_HIDDEN gpucore_status cpu_vt_event_query(void *bctx, void *e);
GPUCORE_HIDDEN gpucore_status cpu_vt_event_elapsed_ms(void *bctx, void *a, void *b, float *ms);
GPUCORE_HIDDEN gpucore_status cpu_vt_copy(void *bctx, void *dst, const void *src, size_t bytes, void *s);
GPUCORE_HIDDEN gpucore_status cpu_vt_debug_fail_async(void *bctx, void *s, gpucore_status status);

#define CPU_STREAM_VTABLE_SHARED                      \
    .stream_query = cpu_vt_stream_query,              \
    .host_callback = cpu_vt_host_callback,            \
    .event_create = cpu_vt_event_create,              \
    .event_destroy = cpu_vt_event_destroy,            \
    .event_record = cpu_vt_event_record,              \
    .stream_wait_event = cpu_vt_stream_wait_event,    \
    .event_synchronize = cpu_vt_event_synchronize,    \
    .event_query = cpu_vt_event_query,                \
    .event_elapsed_ms = cpu_vt_event_elapsed_ms,      \
    .copy_h2d = cpu_vt_copy,                          \
    .copy_d2h = cpu_vt_copy,                          \
    .copy_d2d = cpu_vt_copy,                          \
    .debug_fail_async = cpu_vt_debug_fail_async,

#endif
