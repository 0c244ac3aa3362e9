/*
 * log.c — the library's only output channel, off unless the user asks.
 *
 * The level comes from GPUCORE_LOG (off|error|warn|info|debug) or
 * gpucore_set_log_level. Lines go to the user's callback; without one, and only
 * at a level the user switched on, they are written to standard error — the one
 * place library code writes anything, by the user's explicit request.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"

static atomic_int log_level = -1; /* -1: not yet read from the environment */
static gpucore_log_fn log_callback;
static void *log_callback_user;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static int parse_log_level(const char *s)
{
    if (!s || !*s || !strcmp(s, "off") || !strcmp(s, "0")) return GPUCORE_LOG_OFF;
    if (!strcmp(s, "error")) return GPUCORE_LOG_ERROR;
    if (!strcmp(s, "warn") || !strcmp(s, "warning")) return GPUCORE_LOG_WARN;
    if (!strcmp(s, "info") || !strcmp(s, "1")) return GPUCORE_LOG_INFO;
    if (!strcmp(s, "debug") || !strcmp(s, "2")) return GPUCORE_LOG_DEBUG;
    return GPUCORE_LOG_WARN; /* an unknown word still means "the user wants logs" */
}

gpucore_log_level gpucore_get_log_level(void)
{
    int level = atomic_load(&log_level);
    if (level < 0) {
        level = parse_log_level(getenv("GPUCORE_LOG"));
        atomic_store(&log_level, level);
    }
    return (gpucore_log_level)level;
}

gpucore_status gpucore_set_log_level(gpucore_log_level level)
{
    if ((int)level < GPUCORE_LOG_OFF || level > GPUCORE_LOG_DEBUG)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "set_log_level: level %d is not one of 0 (off) .. 4 (debug)", (int)level);
    atomic_store(&log_level, (int)level);
    return GPUCORE_OK;
}

void gpucore_set_log_callback(gpucore_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_callback = fn;
    log_callback_user = user;
    pthread_mutex_unlock(&log_lock);
}

void gpucore_log(int level, const char *fmt, ...)
{
    if (level > (int)gpucore_get_log_level() || level <= GPUCORE_LOG_OFF) return;
    char line[1200];
    static const char *names[] = {"off", "error", "warn", "info", "debug"};
    int n = snprintf(line, sizeof line, "[gpucore %s] ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    gpucore_log_fn fn = log_callback;
    void *user = log_callback_user;
    pthread_mutex_unlock(&log_lock);
    if (fn) {
        fn(level, line, user);
    } else {
        size_t len = strlen(line);
        if (len < sizeof line - 1) line[len++] = '\n';
        ssize_t ignored = write(STDERR_FILENO, line, len); /* user-requested log output */
        (void)ignored;
    }
}
