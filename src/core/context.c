/*
 * context.c — contexts: one device, its backend state, its streams.
 *
 * Device strings: "cpu", "cuda", "cuda:N", "auto" (or NULL: GPUCORE_DEVICE, default
 * auto). Auto picks CUDA device 0 when the CUDA backend is usable, else the CPU;
 * an explicit CUDA request that cannot be met fails with the backend's reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static gpucore_status parse_device(const char *spec, gpucore_device_type *type, int *index, int *is_auto)
{
    *is_auto = 0;
    *index = 0;
    if (!strcmp(spec, "auto") || !*spec) { *is_auto = 1; return GPUCORE_OK; }
    if (!strcmp(spec, "cpu")) { *type = GPUCORE_DEVICE_CPU; return GPUCORE_OK; }
    const char *rest = NULL;
    if (!strncmp(spec, "cuda-emulated", 13)) { *type = GPUCORE_DEVICE_CUDA_EMULATED; rest = spec + 13; }
    else if (!strncmp(spec, "cuda", 4)) { *type = GPUCORE_DEVICE_CUDA; rest = spec + 4; }
    if (rest) {
        if (!*rest) return GPUCORE_OK;
        if (*rest == ':' && rest[1]) {
            char *end;
            long v = strtol(rest + 1, &end, 10);
            if (!*end && v >= 0 && v < 1024) { *index = (int)v; return GPUCORE_OK; }
        }
    }
    return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                             "context_create: device '%s' is not one of cpu, cuda, cuda:N, auto", spec);
}

gpucore_status gpucore_context_create(const char *device, gpucore_context **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "context_create: out is NULL");
    *out = NULL;
    const char *spec = device ? device : getenv("GPUCORE_DEVICE");
    if (!spec) spec = "auto";
    gpucore_device_type type = GPUCORE_DEVICE_CPU;
    int index = 0, is_auto = 0;
    gpucore_status st = parse_device(spec, &type, &index, &is_auto);
    if (st) return st;
    const gpucore_backend *be;
    if (is_auto) {
        char why[768];
        int count = 0;
        if (gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) == GPUCORE_OK &&
            gpucore_backend_get(GPUCORE_DEVICE_CUDA)->device_count(&count) == GPUCORE_OK && count > 0) {
            type = GPUCORE_DEVICE_CUDA;
        } else {
            gpucore_log(GPUCORE_LOG_INFO, "device auto: using the CPU backend (CUDA: %s)", why);
            type = GPUCORE_DEVICE_CPU;
        }
        gpucore_clear_error();
    }
    char why[768];
    if ((st = gpucore_backend_available(type, why, sizeof why)) != GPUCORE_OK)
        return gpucore_set_error(st, "context_create: device '%s' cannot be used: %s", spec, why);
    be = gpucore_backend_get(type);
    int count = 0;
    if ((st = be->device_count(&count)) != GPUCORE_OK) return st;
    if (index >= count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "context_create: device '%s' asks for index %d but %d %s device%s visible", spec,
                                 index, count, be->name, count == 1 ? " is" : "s are");

    gpucore_context *ctx = gpucore_handle_alloc(&gpucore_context_pool);
    if (!ctx) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "context_create: out of host memory");
    ctx->be = be;
    ctx->type = type;
    ctx->index = index;
    static _Atomic int64_t next_context_id = 1;
    ctx->id = next_context_id++;
    if (type == GPUCORE_DEVICE_CPU) snprintf(ctx->name, sizeof ctx->name, "cpu");
    else snprintf(ctx->name, sizeof ctx->name, "%s:%d", be->name, index);
    pthread_mutex_init(&ctx->lock, NULL);
    if ((st = be->context_init(index, &ctx->bctx)) != GPUCORE_OK) {
        pthread_mutex_destroy(&ctx->lock);
        gpucore_handle_release(&gpucore_context_pool, ctx);
        return st;
    }
    if ((st = gpucore_memory_init(ctx)) != GPUCORE_OK) {
        be->context_fini(ctx->bctx);
        pthread_mutex_destroy(&ctx->lock);
        gpucore_handle_release(&gpucore_context_pool, ctx);
        return st;
    }
    ctx->magic = GPUCORE_MAGIC_CONTEXT;
    /* The default stream is an ordinary backend stream owned by the context. */
    gpucore_stream *def = NULL;
    if ((st = gpucore_stream_create(ctx, 0, &def)) != GPUCORE_OK) {
        ctx->magic = 0;
        gpucore_memory_fini(ctx);
        be->context_fini(ctx->bctx);
        pthread_mutex_destroy(&ctx->lock);
        gpucore_handle_release(&gpucore_context_pool, ctx);
        return st;
    }
    def->is_default = 1;
    ctx->default_stream = def;
    gpucore_profile_init(ctx);
    gpucore_log(GPUCORE_LOG_INFO, "context created on %s", ctx->name);
    *out = ctx;
    return GPUCORE_OK;
}

gpucore_status gpucore_context_destroy(gpucore_context *ctx)
{
    if (!ctx) return GPUCORE_OK;
    gpucore_status st = gpucore_check_context(ctx, "context_destroy");
    if (st) return st;
    gpucore_status sync = gpucore_context_synchronize(ctx);
    gpucore_tensors_destroy_all(ctx);
    gpucore_profile_fini(ctx);
    gpucore_events_destroy_all(ctx);
    gpucore_memory_fini(ctx); /* the streams are synchronized: every segment can go back */
    gpucore_streams_destroy_all(ctx);
    __atomic_store_n(&ctx->pending, (uint64_t)1 << 63, __ATOMIC_RELEASE); /* a stale reader asks, and is told */
    ctx->magic = GPUCORE_MAGIC_DEAD;
    ctx->be->context_fini(ctx->bctx);
    pthread_mutex_destroy(&ctx->lock);
    gpucore_handle_release(&gpucore_context_pool, ctx);
    return sync;
}

gpucore_status gpucore_context_device(const gpucore_context *ctx, gpucore_device_type *type, int *index)
{
    gpucore_status st = gpucore_check_context(ctx, "context_device");
    if (st) return st;
    if (type) *type = ctx->type;
    if (index) *index = ctx->index;
    return GPUCORE_OK;
}

const char *gpucore_context_device_name(const gpucore_context *ctx)
{
    if (gpucore_check_context(ctx, "context_device_name")) return "invalid";
    return ctx->name;
}

int64_t gpucore_context_id(const gpucore_context *ctx)
{
    if (gpucore_check_context(ctx, "context_id")) return -1;
    return ctx->id;
}

gpucore_status gpucore_context_synchronize(gpucore_context *ctx)
{
    gpucore_status st = gpucore_check_context(ctx, "context_synchronize");
    if (st) return st;
    /* nothing queued on any stream and no error to report: nothing to lock or ask */
    if (ctx->be->stream_count_pending && !__atomic_load_n(&ctx->pending, __ATOMIC_ACQUIRE)) return GPUCORE_OK;
    gpucore_status first = GPUCORE_OK;
    pthread_mutex_lock(&ctx->lock);
    for (gpucore_stream *s = ctx->streams; s; s = s->next) {
        gpucore_status r = ctx->be->stream_synchronize(ctx->bctx, s->bstream);
        if (r && !first) first = r;
    }
    pthread_mutex_unlock(&ctx->lock);
    return first;
}

gpucore_status gpucore_context_pending_word(gpucore_context *ctx, const uint64_t **word)
{
    gpucore_status st = gpucore_check_context(ctx, "context_pending_word");
    if (st) return st;
    if (!word) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "context_pending_word: word is NULL");
    *word = NULL;
    if (!ctx->be->stream_count_pending)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "context_pending_word: on %s the device runs the queued work and the host cannot "
                                 "know when it is done without asking; call gpucore_context_synchronize",
                                 ctx->name);
    *word = &ctx->pending;
    return GPUCORE_OK;
}

/* ---- device queries (no context) ---- */

gpucore_status gpucore_device_count(gpucore_device_type type, int *count)
{
    if (!count) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "device_count: count is NULL");
    *count = 0;
    const gpucore_backend *be = gpucore_backend_get(type);
    if (!be) {
        if (type == GPUCORE_DEVICE_CUDA || type == GPUCORE_DEVICE_CUDA_EMULATED) { gpucore_clear_error(); return GPUCORE_OK; }
        return GPUCORE_ERR_INVALID_ARGUMENT; /* gpucore_backend_get wrote the message */
    }
    char why[256];
    if (be->available(why, sizeof why) != GPUCORE_OK) return GPUCORE_OK;
    return be->device_count(count);
}

gpucore_status gpucore_device_get_properties(gpucore_device_type type, int index, gpucore_device_properties *props)
{
    if (!props) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "device_get_properties: props is NULL");
    if (props->struct_size < (int64_t)sizeof *props)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "device_get_properties: props->struct_size is %lld; set it to sizeof(gpucore_device_properties) = %zu",
                                 (long long)props->struct_size, sizeof *props);
    char why[768];
    gpucore_status st = gpucore_backend_available(type, why, sizeof why);
    if (st) return st;
    const gpucore_backend *be = gpucore_backend_get(type);
    int count = 0;
    if ((st = be->device_count(&count))) return st;
    if (index < 0 || index >= count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "device_get_properties: index %d but %d %s device(s)",
                                 index, count, be->name);
    memset(props, 0, sizeof *props);
    props->struct_size = (int64_t)sizeof *props;
    return be->device_properties(index, props);
}

gpucore_status gpucore_device_get_processes(int cuda_index, int64_t *pids, int64_t *used_bytes, int max, int *count)
{
    if (!count || (max > 0 && (!pids || !used_bytes)))
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "device_get_processes: NULL output with max %d", max);
    *count = 0;
    const gpucore_backend *be = gpucore_backend_get(GPUCORE_DEVICE_CUDA);
    if (!be) return GPUCORE_ERR_NOT_SUPPORTED;
    return be->device_processes(cuda_index, pids, used_bytes, max < 0 ? 0 : max, count);
}

gpucore_status gpucore_device_can_access_peer(int a, int b, int *can)
{
    if (!can) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "device_can_access_peer: can is NULL");
    *can = 0;
    const gpucore_backend *be = gpucore_backend_get(GPUCORE_DEVICE_CUDA);
    if (!be) return GPUCORE_ERR_BACKEND_UNAVAILABLE;
    return be->can_access_peer(a, b, can);
}
