/*
 * checkpoint_hooks.c — saved-tensor hooks of the checkpoint executor: packing a
 * KEPT segment's saved tensors after its forward and unpacking them one segment
 * ahead of its backward, through the user's pack/unpack/discard or the built-in
 * offload to pinned host memory (copies on a side stream, ordered by events).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"

/* ------------------------------------------------------------- hooks: packing */

static gpucore_status offload_pack(ckpt_state *s, ckpt_saved *e, gpucore_stream *stream)
{
    gpucore_status st = GPUCORE_OK;
    if (!s->side) st = gpucore_stream_create(s->ctx, 0, &s->side);
    if (!st && !s->ev) st = gpucore_event_create(s->ctx, &s->ev);
    if (!st) st = gpucore_event_record(s->ev, stream);          /* the forward wrote it */
    if (!st) st = gpucore_stream_wait_event(s->side, s->ev);
    if (!st) st = gpucore_host_alloc(s->ctx, e->nbytes, s->side, &e->host);
    if (!st) st = gpucore_copy_to_host_async(e->host, e->nbytes, e->t, s->side);
    if (!st) st = gpucore_tensor_record_stream(e->t, s->side);  /* reuse waits for the copy */
    if (!st) s->stats.offloaded_bytes += e->nbytes;
    return st;
}

static gpucore_status offload_unpack(ckpt_state *s, ckpt_top *top, ckpt_saved *e, gpucore_stream *stream)
{
    gpucore_status st = gpucore_tensor_create(s->ctx, (gpucore_dtype)e->dtype, e->ndim, e->shape, &e->t);
    if (!st) st = gpucore_event_record(s->ev, stream);          /* its memory may be reused: wait for past work */
    if (!st) st = gpucore_stream_wait_event(s->side, s->ev);
    if (!st) st = gpucore_copy_from_host_async(e->t, e->host, e->nbytes, s->side);
    if (!st) st = gpucore_tensor_record_stream(e->t, s->side);
    if (!st && !top->ready) st = gpucore_event_create(s->ctx, &top->ready);
    if (!st) st = gpucore_event_record(top->ready, s->side);
    if (!st) {
        gpucore_host_free(s->ctx, e->host);                       /* reused once the side stream passed the copy */
        e->host = NULL;
    }
    return st;
}

/* After a KEPT segment's forward: hand its saved tensors to the hooks. */
gpucore_status gpucore_ckpt_pack_top(ckpt_state *s, int64_t index, gpucore_stream *stream)
{
    ckpt_top *top = &s->tops[index];
    for (int64_t i = 0; i < top->nsaved; i++) {
        ckpt_saved *e = &top->saved[i];
        gpucore_status st = GPUCORE_OK;
        if (!e->t) continue;
        if (s->offload) {
            if (e->nbytes < s->offload_min || e->nbytes == 0) continue;
            st = offload_pack(s, e, stream);
        } else {
            gpucore_clear_error();
            st = s->pack(s->hook_user, e->t, stream, &e->packed);
            if (st) return gpucore_ckpt_wrap_error(st, s, index, top->seg, PH_FORWARD);
            e->has_packed = 1;
            s->stats.packed_tensors++;
        }
        if (st) return st;
        gpucore_tensor_destroy(e->t);
        e->t = NULL;
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_unpack_top(ckpt_state *s, int64_t index, gpucore_stream *stream)
{
    ckpt_top *top = &s->tops[index];
    if (top->unpacked) return GPUCORE_OK;
    top->unpacked = 1;
    for (int64_t i = 0; i < top->nsaved; i++) {
        ckpt_saved *e = &top->saved[i];
        gpucore_status st = GPUCORE_OK;
        if (e->host) {
            st = offload_unpack(s, top, e, stream);
        } else if (e->has_packed) {
            e->has_packed = 0; /* unpack releases it, whatever happens */
            gpucore_clear_error();
            st = s->unpack(s->hook_user, e->packed, stream, &e->t);
            s->stats.unpacked_tensors++;
            if (st) return gpucore_ckpt_wrap_error(st, s, index, top->seg, PH_BACKWARD);
            if (!e->t || gpucore_check_tensor(e->t, "ckpt", "t") || !ckpt_same_shape(e->t, e->dtype, e->ndim, e->shape)) {
                char a[200];
                gpucore_tensor *bad = e->t;
                e->t = NULL;
                if (bad && bad->magic == GPUCORE_MAGIC_TENSOR) gpucore_tensor_destroy(bad);
                return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "checkpoint '%s': segment '%s' (%lld): the unpack "
                                         "hook did not return saved tensor %lld as %s %s", s->name, top->seg->name,
                                         (long long)index, (long long)i, gpucore_dtype_name((gpucore_dtype)e->dtype),
                                         gpucore_shape_str(e->ndim, e->shape, a, sizeof a));
            }
        }
        if (st) return st;
    }
    return GPUCORE_OK;
}

/* -------------------------------------------------------------------- hooks */

gpucore_status gpucore_ckpt_set_saved_tensor_hooks(gpucore_ckpt *c, gpucore_ckpt_pack_fn pack,
                                                   gpucore_ckpt_unpack_fn unpack, gpucore_ckpt_discard_fn discard,
                                                   void *user)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_saved_tensor_hooks");
    if (st) return st;
    if (pack && !unpack)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_set_saved_tensor_hooks: a pack hook needs an unpack hook");
    gpucore_ckpt_step_release(c->s);
    c->s->pack = pack;
    c->s->unpack = unpack;
    c->s->discard = discard;
    c->s->hook_user = user;
    if (pack) c->s->offload = 0;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_offload(gpucore_ckpt *c, int enable, int64_t min_bytes)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_offload");
    if (st) return st;
    if (min_bytes < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_offload: min_bytes is negative (%lld)",
                                 (long long)min_bytes);
    gpucore_ckpt_step_release(c->s);
    c->s->offload = enable != 0;
    c->s->offload_min = min_bytes;
    if (enable) c->s->pack = NULL, c->s->unpack = NULL, c->s->discard = NULL;
    return GPUCORE_OK;
}
