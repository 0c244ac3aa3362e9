/*
 * cpu_stream.h — CPU streams as real asynchronous FIFO queues (one worker thread
 * each) and events on them, so stream ordering, cross-stream waits and
 * stream-ordered reuse behave on the CPU as they do on CUDA.
 */
#ifndef GPUCORE_CPU_STREAM_H
#define GPUCORE_CPU_STREAM_H

#include <stddef.h>
#include "../internal.h"

typedef struct cpu_stream cpu_stream;
typedef struct cpu_event cpu_event;

/* A task gets a pointer to its own copy of the argument bytes given at enqueue. */
typedef gpucore_status (*cpu_task_fn)(void *args);

GPUCORE_HIDDEN gpucore_status cpu_stream_create(cpu_stream **out);
GPUCORE_HIDDEN void cpu_stream_destroy(cpu_stream *s);
/* Copies args_size bytes of args; fn runs on the stream's thread after earlier tasks. */
GPUCORE_HIDDEN gpucore_status cpu_stream_enqueue(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size);
GPUCORE_HIDDEN gpucore_status cpu_stream_synchronize(cpu_stream *s);
GPUCORE_HIDDEN gpucore_status cpu_stream_query(cpu_stream *s);

GPUCORE_HIDDEN gpucore_status cpu_event_create(cpu_event **out);
GPUCORE_HIDDEN void cpu_event_destroy(cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_record(cpu_event *e, cpu_stream *s);
GPUCORE_HIDDEN gpucore_status cpu_stream_wait_event(cpu_stream *s, cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_synchronize(cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_query(cpu_event *e);
GPUCORE_HIDDEN gpucore_status cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, float *ms);

#endif
