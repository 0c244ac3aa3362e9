/*
 * memory.c — the single path by which the library obtains and returns device
 * memory for tensors, workspaces and temporaries.
 *
 * For now it hands requests straight to the backend's raw allocator. A free
 * waits until every stream of the context has passed the work queued before it,
 * which is always safe (the memory may have been used on any stream) but costs a
 * wait; the caching allocator replaces this with stream-ordered reuse.
 */
#include "internal.h"

gpucore_status gpucore_memory_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream, void **ptr)
{
    (void)stream;
    *ptr = NULL;
    if (bytes == 0) return GPUCORE_OK;
    gpucore_status st = ctx->be->raw_alloc(ctx->bctx, (size_t)bytes, ptr);
    if (st == GPUCORE_ERR_OUT_OF_MEMORY) {
        int64_t free_b = -1, total_b = -1;
        ctx->be->mem_info(ctx->bctx, &free_b, &total_b);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY,
                                 "out of memory on %s: asked for %lld bytes; the device has %lld bytes in total and "
                                 "%lld free. Try a smaller batch, activation checkpointing, or freeing tensors",
                                 ctx->name, (long long)bytes, (long long)total_b, (long long)free_b);
    }
    return st;
}

void gpucore_memory_free(gpucore_context *ctx, void *ptr, void *alloc_bstream)
{
    (void)alloc_bstream;
    if (!ptr) return;
    pthread_mutex_lock(&ctx->lock);
    for (gpucore_stream *s = ctx->streams; s; s = s->next) ctx->be->stream_synchronize(ctx->bctx, s->bstream);
    pthread_mutex_unlock(&ctx->lock);
    ctx->be->raw_free(ctx->bctx, ptr);
}
