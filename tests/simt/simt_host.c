/*
 * simt_host.c — the C glue between the SIMT layer and the CPU stream queue
 * (src/backend/cpu/cpu_stream.c, compiled into the layer): queueing a grid as a stream
 * task, and the gpucore_set_error that cpu_stream.c calls, forwarded to
 * whoever hosts the layer (the emulated backend forwards it to libgpucore).
 */
#include <stdarg.h>
#include <stdio.h>
#include "backend/cpu/cpu_stream.h"
#include "simt_api.h"

SIMT_API int simt_stream_enqueue(void *stream, void *closure);
SIMT_API int simt_run_queued(void *closure);

static int (*host_set_error)(int status, const char *message);

void simt_host_set(int (*set_error)(int status, const char *message)) { host_set_error = set_error; }

gpucore_status gpucore_set_error(gpucore_status status, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (host_set_error) host_set_error((int)status, buf);
    return status;
}

/* The stream task: run the grid; an execution error becomes the stream's sticky error. */
static gpucore_status run_grid_task(void *args)
{
    void *closure = *(void **)args;
    return simt_run_queued(closure) ? GPUCORE_ERR_BACKEND : GPUCORE_OK;
}

int simt_stream_enqueue(void *stream, void *closure)
{
    return cpu_stream_enqueue((cpu_stream *)stream, run_grid_task, &closure, sizeof closure) != GPUCORE_OK;
}
