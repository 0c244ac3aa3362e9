/*
 * base.h — the error setter (error.c) and the logger (log.c) with the mark that
 * keeps internal symbols out of libgpucore.so's exports: what every internal
 * file may use, the layers below core (src/alloc) included. It includes nothing
 * of src/, so including it ties no folder to core's internals.
 */
#ifndef GPUCORE_CORE_BASE_H
#define GPUCORE_CORE_BASE_H

#include "gpucore.h"

#define GPUCORE_HIDDEN __attribute__((visibility("hidden")))

/* The thread's error: status and a printf-style message naming the call and what to do;
 * returns status. */
GPUCORE_HIDDEN gpucore_status gpucore_set_error(gpucore_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A line to the log sink at level (GPUCORE_LOG_*), when the log level lets it through. */
GPUCORE_HIDDEN void gpucore_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
