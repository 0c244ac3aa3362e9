/*
 * comm_group.c — gpucore_comm_group_start/end above the backends, the same on every
 * backend: the group's depth on this thread, the library work queued to run when the
 * outermost group ends, and the allocator's frees held until then.
 *
 * NCCL starts a group's collectives only at ncclGroupEnd ("Nothing will be started on
 * the CUDA stream until ncclGroupEnd"; "Operations on the CUDA stream depending on the
 * NCCL operations need to be called after ncclGroupEnd", nccl.h:555, 565). So inside a
 * group:
 *  - comm.c runs each collective on the communicator's group stream (not its own
 *    stream), after everything queued so far on the comm stream and the caller's;
 *  - the CUDA backend holds event records, host callbacks and waits that follow a
 *    grouped collective on its stream (cuda_comm.c) and refuses kernels and copies on
 *    such a stream (they would run before the collective);
 *  - the reducers' work that consumes a grouped collective (DDP's cast back and copy
 *    back, ZeRO's shard accumulation and frees) is queued here with
 *    gpucore_comm_group_after and runs, in the order it was queued, right after the
 *    backend ended the group;
 *  - a free of device or pinned memory is held (caching_allocator_hold_frees) until
 *    then too: the allocator's stream events recorded meanwhile on a held stream would
 *    read as complete before the collective has touched the memory;
 *  - gpucore_comm_wait on a collective of the open group is refused (comm.c).
 * On the CPU backend nothing is held (MPI runs each collective as its stream reaches
 * it), but the rest is the same, so a program behaves alike on both.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm_internal.h"
#include "alloc/caching_allocator.h"

typedef struct group_item {
    gpucore_group_fn fn;
    void *arg;
} group_item;

static _Thread_local int group_depth;
static _Thread_local uint64_t group_gen; /* counts outermost starts on this thread */
static _Thread_local group_item *items;
static _Thread_local int nitems, items_cap;

int gpucore_comm_group_open(void) { return group_depth > 0; }

uint64_t gpucore_comm_group_generation(void) { return group_depth > 0 ? group_gen : 0; }

gpucore_status gpucore_comm_group_after(gpucore_group_fn fn, const void *arg, size_t size)
{
    if (group_depth == 0) return fn((void *)arg);
    if (nitems == items_cap) {
        int cap = items_cap ? items_cap * 2 : 16;
        group_item *grown = realloc(items, sizeof *grown * (size_t)cap);
        if (!grown) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_group: out of host memory");
        items = grown;
        items_cap = cap;
    }
    void *copy = malloc(size ? size : 1);
    if (!copy) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_group: out of host memory");
    memcpy(copy, arg, size);
    items[nitems++] = (group_item){fn, copy};
    return GPUCORE_OK;
}

/* The CUDA backend's ncclGroupStart/End (where the CUDA module is there: a CPU-only program has no NCCL
 * communicator to group). */
static gpucore_status backend_group(int begin)
{
    char why[256];
    if (gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) != GPUCORE_OK) {
        gpucore_clear_error();
        return GPUCORE_OK;
    }
    const gpucore_backend *be = gpucore_backend_get(GPUCORE_DEVICE_CUDA);
    if (!be || !be->comm_group) { gpucore_clear_error(); return GPUCORE_OK; }
    return be->comm_group(begin);
}

gpucore_status gpucore_comm_group_start(void)
{
    gpucore_status st = backend_group(1);
    if (st) return st;
    if (group_depth++ == 0) {
        group_gen++;
        caching_allocator_hold_frees(1);
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_comm_group_end(void)
{
    if (group_depth == 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_group_end without comm_group_start");
    if (group_depth > 1) {
        group_depth--;
        return backend_group(0);
    }
    gpucore_status st = backend_group(0); /* NCCL starts the collectives; held stream work is issued after them */
    char first[1024] = "";
    if (st) snprintf(first, sizeof first, "%s", gpucore_last_error());
    group_depth = 0; /* the queued work issues ordinary stream work now */
    /* Run even after a failure: they release what the group's operations used (a failed
     * communicator reports the failure on its next call). Work queued by these runs now. */
    int n = nitems;
    group_item *run = items;
    items = NULL;
    nitems = items_cap = 0;
    for (int i = 0; i < n; i++) {
        gpucore_status s2 = run[i].fn(run[i].arg);
        free(run[i].arg);
        if (s2 && !st) {
            st = s2;
            snprintf(first, sizeof first, "%s", gpucore_last_error());
        }
    }
    free(run);
    caching_allocator_hold_frees(0); /* the frees, now that every use is queued */
    if (st) return gpucore_set_error(st, "%s", first);
    return GPUCORE_OK;
}
