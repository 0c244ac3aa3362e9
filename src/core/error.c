/*
 * error.c — status names and the thread-local "last error" message.
 *
 * Every failing path calls gpucore_set_error(status, "...") and returns its
 * result, so the message a user reads always matches the status they got.
 */
#include <stdarg.h>
#include <stdio.h>
#include "internal.h"

static _Thread_local char last_error_message[2048];

const char *gpucore_status_string(gpucore_status status)
{
    switch (status) {
    case GPUCORE_OK: return "GPUCORE_OK";
    case GPUCORE_ERR_INVALID_ARGUMENT: return "GPUCORE_ERR_INVALID_ARGUMENT";
    case GPUCORE_ERR_NULL_POINTER: return "GPUCORE_ERR_NULL_POINTER";
    case GPUCORE_ERR_INVALID_HANDLE: return "GPUCORE_ERR_INVALID_HANDLE";
    case GPUCORE_ERR_SHAPE_MISMATCH: return "GPUCORE_ERR_SHAPE_MISMATCH";
    case GPUCORE_ERR_DTYPE_MISMATCH: return "GPUCORE_ERR_DTYPE_MISMATCH";
    case GPUCORE_ERR_DEVICE_MISMATCH: return "GPUCORE_ERR_DEVICE_MISMATCH";
    case GPUCORE_ERR_OVERFLOW: return "GPUCORE_ERR_OVERFLOW";
    case GPUCORE_ERR_OUT_OF_MEMORY: return "GPUCORE_ERR_OUT_OF_MEMORY";
    case GPUCORE_ERR_NOT_SUPPORTED: return "GPUCORE_ERR_NOT_SUPPORTED";
    case GPUCORE_ERR_BACKEND_UNAVAILABLE: return "GPUCORE_ERR_BACKEND_UNAVAILABLE";
    case GPUCORE_ERR_BACKEND: return "GPUCORE_ERR_BACKEND";
    case GPUCORE_ERR_NOT_CONTIGUOUS: return "GPUCORE_ERR_NOT_CONTIGUOUS";
    case GPUCORE_ERR_NOT_READY: return "GPUCORE_ERR_NOT_READY";
    case GPUCORE_ERR_COMM: return "GPUCORE_ERR_COMM";
    case GPUCORE_ERR_IO: return "GPUCORE_ERR_IO";
    case GPUCORE_ERR_CORRUPT_FILE: return "GPUCORE_ERR_CORRUPT_FILE";
    case GPUCORE_ERR_TIMEOUT: return "GPUCORE_ERR_TIMEOUT";
    case GPUCORE_ERR_INTERNAL: return "GPUCORE_ERR_INTERNAL";
    }
    return "GPUCORE_ERR_UNKNOWN_STATUS";
}

const char *gpucore_last_error(void) { return last_error_message; }

void gpucore_clear_error(void) { last_error_message[0] = '\0'; }

gpucore_status gpucore_set_error(gpucore_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error_message, sizeof last_error_message, fmt, ap);
    va_end(ap);
    if (status != GPUCORE_OK && status != GPUCORE_ERR_NOT_READY)
        gpucore_log(GPUCORE_LOG_DEBUG, "%s: %s", gpucore_status_string(status), last_error_message);
    return status;
}

int gpucore_version(void) { return GPUCORE_VERSION; }

const char *gpucore_version_string(void)
{
#define GPUCORE_STR2(x) #x
#define GPUCORE_STR(x) GPUCORE_STR2(x)
    return GPUCORE_STR(GPUCORE_VERSION_MAJOR) "." GPUCORE_STR(GPUCORE_VERSION_MINOR) "." GPUCORE_STR(
        GPUCORE_VERSION_PATCH);
}
