/*
 * checkpoint.c — the segment executor: activation checkpointing above the vtable.
 *
 * A model is an ordered chain of top-level segments (a residual block is one, with
 * its inner segments as children). Forward runs them in order. Each top-level
 * segment has a mode from the policy's plan:
 *   KEPT        its saved tensors are held (or packed by the hooks) until its backward;
 *   CHECKPOINT  only its input is held; backward re-runs the forward from it through
 *               the RECOMPUTED segments after it (saving this time), then goes back
 *               through them;
 *   RECOMPUTED  nothing is held.
 * Saves are recorded in every mode — shape, dtype, bytes, storage — so that a
 * recompute is checked against the forward and the planner has measurements.
 * Philox counters are reserved through gpucore_ckpt_rng; each segment records where
 * its reservations started, and recompute and backward replay from there.
 *
 * Memory figures come from the executor's own watermark on the caching allocator
 * (never the allocator's peak statistics, which are the caller's): it is restarted
 * before each segment's forward and backward and folded into the step's peak, which
 * also gives each segment's transient peaks (what the budget planner simulates with;
 * a backward's is kept until the input's shape or dtype changes).
 *
 * This file: the executor's lifetime, segment registration, the step (forward and
 * backward passes) and the small setters. Elsewhere: checkpoint_call.c (what a
 * segment callback calls, and running one segment), checkpoint_plan.c (policies,
 * the budget planner, byte accounting), checkpoint_hooks.c (saved-tensor hooks and
 * the pinned-host offload), checkpoint_segments.c (the built-in segments).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"

const char *const gpucore_ckpt_phase_name[] = {"forward", "recompute", "backward", "dry-run forward"};

/* The executor handle lives in the tensor handle pool (it is smaller), so a stale
 * handle reads a dead magic instead of freed memory. */
_Static_assert(sizeof(struct gpucore_ckpt) <= sizeof(struct gpucore_tensor), "ckpt handle fits a pool slot");

/* ------------------------------------------------------------ small helpers */

gpucore_status gpucore_ckpt_alias(const gpucore_tensor *t, gpucore_tensor **out)
{
    static const int perm[GPUCORE_MAX_DIMS] = {0, 1, 2, 3, 4, 5, 6, 7};
    return gpucore_tensor_permute((gpucore_tensor *)t, perm, out);
}

gpucore_status gpucore_ckpt_check(const gpucore_ckpt *c, const char *op)
{
    if (!c) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the checkpoint executor is NULL", op);
    if (c->magic != GPUCORE_MAGIC_CKPT || !c->s)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the checkpoint executor was destroyed or never "
                                 "created", op);
    return gpucore_check_context(c->s->ctx, op);
}

/* The allocated bytes now, and the executor's watermark since its last restart. */
static int64_t allocated_now(ckpt_state *s, int64_t *peak)
{
    return gpucore_memory_watermark_read(s->ctx, &s->mark, peak);
}

/* The callback's own message, prefixed with where it happened. */
gpucore_status gpucore_ckpt_wrap_error(gpucore_status st, ckpt_state *s, int64_t index, const ckpt_segment *seg, int phase)
{
    char msg[900];
    snprintf(msg, sizeof msg, "%s", gpucore_last_error());
    if (!msg[0]) snprintf(msg, sizeof msg, "the callback returned %s without a message", gpucore_status_string(st));
    return gpucore_set_error(st, "checkpoint '%s': segment '%s' (%lld) %s: %s", s->name, seg->name,
                             (long long)index, gpucore_ckpt_phase_name[phase], msg);
}

static gpucore_status run_hook(ckpt_state *s, int64_t index, int phase, int is_post)
{
    if (!s->seg_hook) return GPUCORE_OK;
    gpucore_clear_error();
    gpucore_status st = s->seg_hook(s->seg_hook_user, index, s->segs[index]->name, phase, is_post);
    if (st) return gpucore_ckpt_wrap_error(st, s, index, s->segs[index], phase);
    return GPUCORE_OK;
}

static void segment_free(ckpt_segment *g)
{
    if (!g) return;
    for (int64_t i = 0; i < g->nchildren; i++) segment_free(g->children[i]);
    free(g->children);
    if (g->free_user) g->free_user(g->user);
    free(g->name);
    free(g);
}

static void saved_release(ckpt_state *s, ckpt_saved *e)
{
    gpucore_tensor_destroy(e->t);
    e->t = NULL;
    if (e->host) gpucore_host_free(s->ctx, e->host);
    e->host = NULL;
    if (e->has_packed && s->discard) s->discard(s->hook_user, e->packed);
    e->has_packed = 0;
    e->packed = NULL;
}

static void top_release(ckpt_state *s, ckpt_top *t)
{
    for (int64_t i = 0; i < t->nsaved; i++) saved_release(s, &t->saved[i]);
    t->nsaved = 0;
    gpucore_tensor_destroy(t->stored_input);
    t->stored_input = NULL;
    gpucore_event_destroy(t->ready);
    t->ready = NULL;
    t->unpacked = 0;
}

/* Drop everything a step holds (error paths, reset, the end of backward). */
void gpucore_ckpt_step_release(ckpt_state *s)
{
    for (int64_t i = 0; s->tops && i < s->nsegs; i++) top_release(s, &s->tops[i]);
    gpucore_tensor_destroy(s->y);
    s->y = NULL;
    s->in_step = 0;
}

/* Size tops[] and modes[] to the segment count (keeping measurements when it did not change). */
static gpucore_status ensure_tops(ckpt_state *s, const char *op)
{
    if (s->tops && s->tops[0].seg == s->segs[0] && s->modes) return GPUCORE_OK;
    ckpt_top *tops = calloc((size_t)s->nsegs, sizeof *tops);
    int32_t *modes = calloc((size_t)s->nsegs, sizeof *modes);
    if (!tops || !modes) {
        free(tops);
        free(modes);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    free(s->tops);
    free(s->modes);
    s->tops = tops;
    s->modes = modes;
    for (int64_t i = 0; i < s->nsegs; i++) s->tops[i].seg = s->segs[i];
    s->measured = 0;
    return GPUCORE_OK;
}

/* Segments changed: forget the step and the per-segment arrays. */
static void segments_changed(ckpt_state *s)
{
    gpucore_ckpt_step_release(s);
    for (int64_t i = 0; s->tops && i < s->nsegs; i++) free(s->tops[i].saved);
    free(s->tops);
    free(s->modes);
    s->tops = NULL;
    s->modes = NULL;
    s->measured = 0;
}

/* ----------------------------------------------------------------- lifetime */

gpucore_status gpucore_ckpt_create(gpucore_context *ctx, const char *name, gpucore_ckpt **out)
{
    gpucore_status st = gpucore_check_context(ctx, "ckpt_create");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_create: out is NULL");
    *out = NULL;
    ckpt_state *s = calloc(1, sizeof *s);
    gpucore_ckpt *c = s ? gpucore_handle_alloc(&gpucore_tensor_pool) : NULL;
    if (!c) {
        free(s);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "ckpt_create: out of host memory");
    }
    s->ctx = ctx;
    snprintf(s->name, sizeof s->name, "%s", name && name[0] ? name : "ckpt");
    s->policy = GPUCORE_CKPT_KEEP_ALL;
    gpucore_memory_watermark_add(ctx, &s->mark);
    c->s = s;
    c->magic = GPUCORE_MAGIC_CKPT;
    *out = c;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_destroy(gpucore_ckpt *c)
{
    if (!c) return GPUCORE_OK;
    if (c->magic != GPUCORE_MAGIC_CKPT || !c->s)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "ckpt_destroy: the checkpoint executor was destroyed "
                                 "or never created");
    ckpt_state *s = c->s;
    c->s = NULL;
    gpucore_handle_release(&gpucore_tensor_pool, c);
    if (s->ctx->magic == GPUCORE_MAGIC_CONTEXT) {
        gpucore_context_synchronize(s->ctx);
        gpucore_memory_watermark_remove(s->ctx, &s->mark);
        segments_changed(s);
        gpucore_event_destroy(s->ev);
        gpucore_stream_destroy(s->side);
    } else { /* the context took the step's tensors with it: free the host arrays only */
        for (int64_t i = 0; s->tops && i < s->nsegs; i++) free(s->tops[i].saved);
        free(s->tops);
        free(s->modes);
    }
    for (int64_t i = 0; i < s->nsegs; i++) segment_free(s->segs[i]);
    free(s->segs);
    free(s);
    gpucore_clear_error();
    return GPUCORE_OK;
}

int64_t gpucore_ckpt_segment_count(const gpucore_ckpt *c)
{
    if (!c || c->magic != GPUCORE_MAGIC_CKPT || !c->s) return -1;
    return c->s->nsegs;
}

static gpucore_status append(ckpt_segment ***arr, int64_t *n, int64_t *cap, ckpt_segment *g)
{
    if (*n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 16;
        ckpt_segment **grown = realloc(*arr, sizeof *grown * (size_t)nc);
        if (!grown) return GPUCORE_ERR_OUT_OF_MEMORY;
        *arr = grown;
        *cap = nc;
    }
    (*arr)[(*n)++] = g;
    return GPUCORE_OK;
}

static gpucore_status add_segment(gpucore_ckpt *c, const char *name, gpucore_ckpt_forward_fn fwd,
                                  gpucore_ckpt_backward_fn bwd, void *user, void (*free_user)(void *),
                                  int is_residual, const char *op)
{
    gpucore_status st = gpucore_ckpt_check(c, op);
    if (!st && (!name || !name[0])) st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: name is empty", op);
    if (!st && !is_residual && (!fwd || !bwd))
        st = gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: segment '%s' needs a forward and a backward callback",
                               op, name);
    ckpt_segment *g = st ? NULL : calloc(1, sizeof *g);
    if (!st && g) g->name = strdup(name);
    if (!st && (!g || !g->name)) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (st) {
        if (g) free(g->name);
        free(g);
        if (free_user) free_user(user);
        return st;
    }
    ckpt_state *s = c->s;
    g->forward = fwd;
    g->backward = bwd;
    g->user = user;
    g->free_user = free_user;
    g->is_residual = is_residual;
    segments_changed(s);
    ckpt_segment *p = s->open;
    if (p ? append(&p->children, &p->nchildren, &p->cap, g) : append(&s->segs, &s->nsegs, &s->cap, g)) {
        segment_free(g);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    g->parent = p;
    if (is_residual) s->open = g;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_add_segment(gpucore_ckpt *c, const char *name, gpucore_ckpt_forward_fn fwd,
                                        gpucore_ckpt_backward_fn bwd, void *user, void (*free_user)(void *),
                                        const char *op)
{
    return add_segment(c, name, fwd, bwd, user, free_user, 0, op);
}

gpucore_status gpucore_ckpt_add_custom(gpucore_ckpt *c, const char *name, gpucore_ckpt_forward_fn forward,
                                       gpucore_ckpt_backward_fn backward, void *user)
{
    return add_segment(c, name, forward, backward, user, NULL, 0, "ckpt_add_custom");
}

gpucore_status gpucore_ckpt_begin_residual(gpucore_ckpt *c, const char *name)
{
    return add_segment(c, name, NULL, NULL, NULL, NULL, 1, "ckpt_begin_residual");
}

gpucore_status gpucore_ckpt_end_residual(gpucore_ckpt *c)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_end_residual");
    if (st) return st;
    ckpt_state *s = c->s;
    if (!s->open) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_end_residual: no residual block is open");
    if (!s->open->nchildren)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_end_residual: residual block '%s' is empty: "
                                 "add its inner segments between begin and end", s->open->name);
    s->open = s->open->parent;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_seed(gpucore_ckpt *c, uint64_t seed, uint64_t offset)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_seed");
    if (st) return st;
    c->s->seed = seed;
    c->s->offset = offset;
    return GPUCORE_OK;
}

/* ------------------------------------------------------------------ forward */

/* What a segment run leaves for its backward counts as activations in the allocator's books (the
 * executor's allocations are transient while they run: forward_pass, gpucore_ckpt_backward). */
static void held_for_backward(const ckpt_top *top)
{
    for (int64_t k = 0; k < top->nsaved; k++)
        if (top->saved[k].t) gpucore_memory_tag_tensor(top->saved[k].t, GPUCORE_MEM_ACTIVATIONS);
}

static gpucore_status forward_pass(ckpt_state *s, const gpucore_tensor *x, gpucore_stream *stream, int dry,
                                   gpucore_tensor **y)
{
    gpucore_ckpt_call call = {GPUCORE_MAGIC_CKPT_CALL, s, 0, NULL, NULL, dry ? PH_DRY : PH_FORWARD, 0, s->offset,
                              stream};
    gpucore_tensor *cur = NULL;
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_TRANSIENT);
    gpucore_status st = gpucore_ckpt_alias(x, &cur);
    for (int64_t i = 0; !st && i < s->nsegs; i++) {
        ckpt_top *top = &s->tops[i];
        int32_t mode = dry ? GPUCORE_CKPT_RECOMPUTED : s->modes[i];
        int64_t peak = 0, before = gpucore_memory_watermark_restart(s->ctx, &s->mark);
        call.index = i;
        call.top = top;
        call.seg = NULL;
        call.keep = mode == GPUCORE_CKPT_KEPT;
        top->nsaved = 0;
        gpucore_tensor *out = NULL;
        if (!dry && (st = run_hook(s, i, GPUCORE_CKPT_PHASE_FORWARD, 0))) break;
        st = gpucore_ckpt_run_forward(&call, top->seg, cur, &out);
        if (!st && !dry) st = run_hook(s, i, GPUCORE_CKPT_PHASE_FORWARD, 1);
        allocated_now(s, &peak);
        if (peak > s->step_peak) s->step_peak = peak;
        if (!st) {
            top->out_bytes = gpucore_tensor_nbytes(out);
            top->transient = peak - before;
            top->out_view = out->storage == cur->storage;
            gpucore_ckpt_measure_saves(top, cur->storage, out->storage);
            if (!dry && call.keep) held_for_backward(top);
            if (!dry) gpucore_memory_tag_tensor(out, GPUCORE_MEM_ACTIVATIONS);
            if (call.keep && (s->pack || s->offload)) st = gpucore_ckpt_pack_top(s, i, stream);
        }
        if (!st && mode == GPUCORE_CKPT_CHECKPOINT) top->stored_input = cur;
        else gpucore_tensor_destroy(cur);
        cur = out;
    }
    if (!st) {
        if (!dry) s->offset = call.rng_cursor;
        *y = cur;
    } else {
        gpucore_tensor_destroy(cur);
    }
    caching_allocator_tag_set(tag);
    return st;
}

gpucore_status gpucore_ckpt_forward(gpucore_ckpt *c, const gpucore_tensor *x, gpucore_tensor **y)
{
    const char *op = "ckpt_forward";
    gpucore_status st = gpucore_ckpt_check(c, op);
    if (st) return st;
    ckpt_state *s = c->s;
    if ((st = gpucore_check_tensor(x, op, "x"))) return st;
    if (!y) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: y is NULL", op);
    *y = NULL;
    if (x->ctx != s->ctx)
        return gpucore_context_mismatch(op, "x", x->ctx, "the checkpoint", s->ctx);
    if (!s->nsegs) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: checkpoint '%s' has no segments", op, s->name);
    if (s->open)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: residual block '%s' was begun but not ended "
                                 "(gpucore_ckpt_end_residual)", op, s->open->name);
    gpucore_ckpt_step_release(s);
    if ((st = ensure_tops(s, op))) return st;
    gpucore_stream *stream = NULL;
    if ((st = gpucore_context_current_stream(s->ctx, &stream))) return st;
    int64_t counts[4] = {0, 0, 0, 0};
    memset(&s->stats, 0, sizeof s->stats);
    int64_t baseline = allocated_now(s, NULL);
    s->step_peak = baseline;
    const int remeasure = !s->measured || !ckpt_same_shape(x, s->meas_dtype, s->meas_ndim, s->meas_shape);
    if (remeasure) /* backward peaks were measured for another input */
        for (int64_t i = 0; i < s->nsegs; i++) s->tops[i].bwd_known = 0;
    if (s->policy == GPUCORE_CKPT_BUDGET) {
        if (remeasure) {
            gpucore_tensor *out = NULL;
            if ((st = forward_pass(s, x, stream, 1, &out))) { gpucore_ckpt_step_release(s); return st; }
            gpucore_tensor_destroy(out);
            for (int64_t i = 0; i < s->nsegs; i++) s->tops[i].nsaved = 0;
            s->measured = 1;
            ckpt_record_shape(x, &s->meas_dtype, &s->meas_ndim, s->meas_shape);
        }
        if ((st = gpucore_ckpt_plan_budget(s, baseline, &s->stats.estimated_peak_bytes))) return st;
    } else {
        gpucore_ckpt_plan_fixed(s, s->modes);
    }
    s->step_peak = baseline;
    s->stats.baseline_bytes = baseline;
    st = forward_pass(s, x, stream, 0, &s->y);
    if (st) { gpucore_ckpt_step_release(s); return st; }
    s->measured = 1;
    ckpt_record_shape(x, &s->meas_dtype, &s->meas_ndim, s->meas_shape);
    for (int64_t i = 0; i < s->nsegs; i++) counts[s->modes[i]]++;
    s->stats.segments = s->nsegs;
    s->stats.kept = counts[GPUCORE_CKPT_KEPT];
    s->stats.checkpoints = counts[GPUCORE_CKPT_CHECKPOINT];
    s->stats.recomputed = counts[GPUCORE_CKPT_RECOMPUTED];
    s->stats.peak_allocated_bytes = s->step_peak;
    gpucore_ckpt_measure_held(s, x->storage);
    s->in_step = 1;
    *y = s->y;
    return GPUCORE_OK;
}

/* ----------------------------------------------------------------- backward */

static gpucore_status backward_one(ckpt_state *s, gpucore_ckpt_call *call, int64_t i, gpucore_tensor **g,
                                   gpucore_tensor *dx_user)
{
    ckpt_top *top = &s->tops[i];
    gpucore_tensor *dx = NULL;
    gpucore_status st = GPUCORE_OK;
    const ckpt_record *r = &top->seg->rec;
    int64_t peak = 0, before = allocated_now(s, &peak); /* the segment's backward peak, for the planner */
    if (peak > s->step_peak) s->step_peak = peak;
    gpucore_memory_watermark_restart(s->ctx, &s->mark);
    if (i > 0) st = gpucore_tensor_create(s->ctx, (gpucore_dtype)r->in_dtype, r->in_ndim, r->in_shape, &dx);
    else dx = dx_user;
    if (!st && top->ready) st = gpucore_stream_wait_event(call->stream, top->ready);
    if (!st) st = run_hook(s, i, GPUCORE_CKPT_PHASE_BACKWARD, 0);
    call->index = i;
    call->top = top;
    call->phase = PH_BACKWARD;
    if (!st) st = gpucore_ckpt_run_backward(call, top->seg, *g, dx);
    if (!st) st = run_hook(s, i, GPUCORE_CKPT_PHASE_BACKWARD, 1);
    allocated_now(s, &peak);
    if (peak > s->step_peak) s->step_peak = peak;
    if (!st) {
        top->bwd_transient = peak - before;
        top->bwd_known = 1;
    }
    top_release(s, top);
    gpucore_tensor_destroy(*g);
    *g = NULL;
    if (st) {
        if (i > 0) gpucore_tensor_destroy(dx);
        return st;
    }
    *g = i > 0 ? dx : NULL;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_backward(gpucore_ckpt *c, const gpucore_tensor *dy, gpucore_tensor *dx)
{
    const char *op = "ckpt_backward";
    gpucore_status st = gpucore_ckpt_check(c, op);
    if (st) return st;
    ckpt_state *s = c->s;
    if (!s->in_step)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: checkpoint '%s' has no forward to go back "
                                 "through (call gpucore_ckpt_forward first; each forward allows one backward)",
                                 op, s->name);
    if ((st = gpucore_check_tensor(dy, op, "dy"))) return st;
    if (dx && (st = gpucore_check_tensor(dx, op, "dx"))) return st;
    const ckpt_record *last = &s->segs[s->nsegs - 1]->rec, *first = &s->segs[0]->rec;
    char a[200], b[200];
    if (!ckpt_same_shape(dy, last->out_dtype, last->out_ndim, last->out_shape))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dy is %s %s but y is %s %s", op,
                                 gpucore_dtype_name((gpucore_dtype)dy->dtype), gpucore_shape_str(dy->ndim, dy->shape, a, sizeof a),
                                 gpucore_dtype_name((gpucore_dtype)last->out_dtype),
                                 gpucore_shape_str(last->out_ndim, last->out_shape, b, sizeof b));
    if (dx && !ckpt_same_shape(dx, first->in_dtype, first->in_ndim, first->in_shape))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dx is %s %s but x was %s %s", op,
                                 gpucore_dtype_name((gpucore_dtype)dx->dtype), gpucore_shape_str(dx->ndim, dx->shape, a, sizeof a),
                                 gpucore_dtype_name((gpucore_dtype)first->in_dtype),
                                 gpucore_shape_str(first->in_ndim, first->in_shape, b, sizeof b));
    gpucore_stream *stream = NULL;
    if ((st = gpucore_context_current_stream(s->ctx, &stream))) return st;
    gpucore_tensor_destroy(s->y);
    s->y = NULL;
    gpucore_tensor *g = NULL;
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_TRANSIENT);
    st = gpucore_ckpt_alias(dy, &g);
    gpucore_ckpt_call call = {GPUCORE_MAGIC_CKPT_CALL, s, 0, NULL, NULL, PH_BACKWARD, 0, 0, stream};
    for (int64_t i = s->nsegs - 1; !st && i >= 0;) {
        if (s->modes[i] == GPUCORE_CKPT_KEPT) {
            st = gpucore_ckpt_unpack_top(s, i, stream);
            if (!st && i > 0 && s->modes[i - 1] == GPUCORE_CKPT_KEPT) st = gpucore_ckpt_unpack_top(s, i - 1, stream); /* prefetch */
            if (!st) st = backward_one(s, &call, i, &g, dx);
            i--;
            continue;
        }
        int64_t e = i, b0 = i;
        while (b0 > 0 && s->modes[b0] != GPUCORE_CKPT_CHECKPOINT) b0--;
        gpucore_tensor *cur = NULL;
        if (!s->tops[b0].stored_input)
            st = gpucore_set_error(GPUCORE_ERR_INTERNAL, "checkpoint '%s': no stored input for segment %lld's "
                                   "recompute", s->name, (long long)b0);
        else st = gpucore_ckpt_alias(s->tops[b0].stored_input, &cur);
        for (int64_t j = b0; !st && j <= e; j++) {
            ckpt_top *top = &s->tops[j];
            gpucore_tensor *out = NULL;
            call.index = j;
            call.top = top;
            call.seg = NULL;
            call.phase = PH_RECOMPUTE;
            call.keep = 1;
            top->nsaved = 0;
            if ((st = run_hook(s, j, GPUCORE_CKPT_PHASE_RECOMPUTE, 0))) break;
            st = gpucore_ckpt_run_forward(&call, top->seg, cur, &out);
            if (!st) held_for_backward(top);
            if (!st) st = run_hook(s, j, GPUCORE_CKPT_PHASE_RECOMPUTE, 1);
            s->stats.recompute_runs++;
            gpucore_tensor_destroy(cur);
            cur = out;
        }
        gpucore_tensor_destroy(cur);
        gpucore_tensor_destroy(s->tops[b0].stored_input);
        s->tops[b0].stored_input = NULL;
        for (int64_t j = e; !st && j >= b0; j--) st = backward_one(s, &call, j, &g, dx);
        i = b0 - 1;
    }
    gpucore_tensor_destroy(g);
    int64_t peak = 0;
    allocated_now(s, &peak);
    if (peak > s->step_peak) s->step_peak = peak;
    s->stats.peak_allocated_bytes = s->step_peak;
    gpucore_ckpt_step_release(s);
    caching_allocator_tag_set(tag);
    return st;
}

gpucore_status gpucore_ckpt_reset(gpucore_ckpt *c)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_reset");
    if (st) return st;
    gpucore_ckpt_step_release(c->s);
    return GPUCORE_OK;
}

/* ------------------------------------------------------------------ setters */

gpucore_status gpucore_ckpt_set_segment_hook(gpucore_ckpt *c, gpucore_ckpt_segment_hook_fn hook, void *user)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_segment_hook");
    if (st) return st;
    c->s->seg_hook = hook;
    c->s->seg_hook_user = user;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_grad_ready_callback(gpucore_ckpt *c, gpucore_ckpt_grad_ready_fn fn, void *user)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_grad_ready_callback");
    if (st) return st;
    c->s->grad_ready = fn;
    c->s->grad_ready_user = user;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_get_stats(gpucore_ckpt *c, gpucore_ckpt_stats *stats)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_get_stats");
    if (st) return st;
    if (!stats) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_get_stats: stats is NULL");
    if (stats->struct_size < (int64_t)sizeof(int64_t))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_get_stats: set stats->struct_size to "
                                 "sizeof(gpucore_ckpt_stats)");
    int64_t n = stats->struct_size < (int64_t)sizeof *stats ? stats->struct_size : (int64_t)sizeof *stats;
    gpucore_ckpt_stats copy = c->s->stats;
    copy.struct_size = n;
    memcpy(stats, &copy, (size_t)n);
    return GPUCORE_OK;
}
