/*
 * handle_pool.c — storage for opaque handles that makes use-after-destroy detectable.
 *
 * A released handle has its magic overwritten and joins the tail of a FIFO; it is
 * handed out again only once the FIFO holds more than a quarantine's worth, so a
 * stale handle points at valid memory whose magic says "dead" for a long while.
 * Pool memory is never returned to the system (it stays reachable, so leak
 * checkers do not count it).
 */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define QUARANTINE 1024

gpucore_handle_pool gpucore_context_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_context));
gpucore_handle_pool gpucore_stream_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_stream));
gpucore_handle_pool gpucore_event_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_event));
gpucore_handle_pool gpucore_tensor_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_tensor));

void *gpucore_handle_alloc(gpucore_handle_pool *pool)
{
    void *h = NULL;
    pthread_mutex_lock(&pool->lock);
    if (pool->count > QUARANTINE) {
        h = pool->fifo[pool->head];
        pool->head = (pool->head + 1) % pool->cap;
        pool->count--;
    }
    pthread_mutex_unlock(&pool->lock);
    if (!h) h = malloc(pool->size);
    if (h) memset(h, 0, pool->size);
    return h;
}

void gpucore_handle_release(gpucore_handle_pool *pool, void *handle)
{
    if (!handle) return;
    *(uint32_t *)handle = GPUCORE_MAGIC_DEAD;
    pthread_mutex_lock(&pool->lock);
    if (pool->count == pool->cap) {
        size_t new_cap = pool->cap ? pool->cap * 2 : 2 * QUARANTINE;
        void **grown = malloc(new_cap * sizeof *grown);
        if (!grown) {
            /* Cannot remember it: keep it dead and unreachable rather than fail. */
            pthread_mutex_unlock(&pool->lock);
            return;
        }
        for (size_t i = 0; i < pool->count; i++) grown[i] = pool->fifo[(pool->head + i) % pool->cap];
        free(pool->fifo);
        pool->fifo = grown;
        pool->cap = new_cap;
        pool->head = 0;
    }
    pool->fifo[(pool->head + pool->count) % pool->cap] = handle;
    pool->count++;
    pthread_mutex_unlock(&pool->lock);
}
