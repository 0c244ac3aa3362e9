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
 * Memory figures come from the caching allocator's statistics: the peak is reset
 * before each segment's forward and folded into the step's peak, which also gives
 * each segment's transient peak (what the budget planner simulates with).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"

#define GPUCORE_MAGIC_CKPT 0xC4EC4B01u
#define GPUCORE_MAGIC_CKPT_CALL 0xCA11C4E1u

enum { PH_FORWARD = 0, PH_RECOMPUTE = 1, PH_BACKWARD = 2, PH_DRY = 3 };
static const char *phase_name[] = {"forward", "recompute", "backward", "dry-run forward"};

typedef struct ckpt_segment ckpt_segment;

/* What one segment object did in the last forward (each object appears once). */
typedef struct ckpt_record {
    int64_t save_base, save_count;
    uint64_t rng_start, rng_count;
    int32_t in_dtype, in_ndim, out_dtype, out_ndim;
    int64_t in_shape[GPUCORE_MAX_DIMS], out_shape[GPUCORE_MAX_DIMS];
} ckpt_record;

struct ckpt_segment {
    char *name;
    gpucore_ckpt_forward_fn forward;
    gpucore_ckpt_backward_fn backward;
    void *user;
    void (*free_user)(void *);
    int is_residual;
    ckpt_segment **children;
    int64_t nchildren, cap;
    ckpt_segment *parent;  /* open residual blocks form a stack through this */
    ckpt_record rec;
};

typedef struct ckpt_saved {
    gpucore_tensor *t;     /* the executor's reference, NULL when dropped or packed */
    void *packed;          /* custom hooks' value */
    void *host;            /* built-in offload: pinned copy */
    int has_packed;
    int32_t dtype, ndim;
    int64_t shape[GPUCORE_MAX_DIMS];
    int64_t nbytes;
    const void *storage;   /* identity for the byte counts */
} ckpt_saved;

/* Per top-level segment: the step's state and the planner's measurements. */
typedef struct ckpt_top {
    ckpt_segment *seg;
    ckpt_saved *saved;
    int64_t nsaved, cap;
    gpucore_tensor *stored_input;  /* CHECKPOINT: the input held for the recompute */
    gpucore_event *ready;          /* offload: host-to-device copies of its tensors done */
    int unpacked;
    int64_t out_bytes, saved_bytes, transient; /* measured */
    int saves_input, saves_output;
} ckpt_top;

typedef struct ckpt_state {
    gpucore_context *ctx;
    char name[64];
    ckpt_segment **segs;   /* top level */
    int64_t nsegs, cap;
    ckpt_segment *open;    /* innermost open residual block */
    ckpt_top *tops;        /* nsegs entries while a step runs */
    int32_t *modes;
    int32_t policy;
    int64_t param;
    uint64_t seed, offset;
    gpucore_ckpt_pack_fn pack;
    gpucore_ckpt_unpack_fn unpack;
    gpucore_ckpt_discard_fn discard;
    void *hook_user;
    int offload;
    int64_t offload_min;
    gpucore_stream *side;
    gpucore_event *ev;
    gpucore_ckpt_segment_hook_fn seg_hook;
    void *seg_hook_user;
    gpucore_ckpt_grad_ready_fn grad_ready;
    void *grad_ready_user;
    int in_step;
    gpucore_tensor *y;
    int measured;          /* tops[].out_bytes ... hold measurements for this input */
    int32_t meas_dtype, meas_ndim;
    int64_t meas_shape[GPUCORE_MAX_DIMS];
    int64_t step_peak;
    gpucore_ckpt_stats stats;
} ckpt_state;

struct gpucore_ckpt {
    uint32_t magic;
    ckpt_state *s;
};

struct gpucore_ckpt_call {
    uint32_t magic;
    ckpt_state *s;
    int64_t index;         /* top-level segment */
    ckpt_top *top;
    ckpt_segment *seg;     /* the (inner) segment being called */
    int phase;
    int keep;              /* forward: hold saved tensors */
    uint64_t rng_cursor;
    gpucore_stream *stream;
};

/* The executor handle lives in the tensor handle pool (it is smaller), so a stale
 * handle reads a dead magic instead of freed memory. */
_Static_assert(sizeof(struct gpucore_ckpt) <= sizeof(struct gpucore_tensor), "ckpt handle fits a pool slot");

/* ------------------------------------------------------------ small helpers */

gpucore_status gpucore_ckpt_alias(const gpucore_tensor *t, gpucore_tensor **out)
{
    static const int perm[GPUCORE_MAX_DIMS] = {0, 1, 2, 3, 4, 5, 6, 7};
    return gpucore_tensor_permute((gpucore_tensor *)t, perm, out);
}

static gpucore_status check_ckpt(const gpucore_ckpt *c, const char *op)
{
    if (!c) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the checkpoint executor is NULL", op);
    if (c->magic != GPUCORE_MAGIC_CKPT || !c->s)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the checkpoint executor was destroyed or never "
                                 "created", op);
    return gpucore_check_context(c->s->ctx, op);
}

static gpucore_status check_call(const gpucore_ckpt_call *c, const char *op)
{
    if (!c) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: call is NULL", op);
    if (c->magic != GPUCORE_MAGIC_CKPT_CALL)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: call is not a live checkpoint call (it is valid "
                                 "only during the callback it was passed to)", op);
    return GPUCORE_OK;
}

static int64_t allocated_now(ckpt_state *s, int64_t *peak)
{
    gpucore_memory_stats m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    if (gpucore_memory_get_stats(s->ctx, GPUCORE_MEMORY_DEVICE, &m)) return 0;
    if (peak) *peak = m.allocated_bytes_peak;
    return m.allocated_bytes;
}

/* The callback's own message, prefixed with where it happened. */
static gpucore_status wrap_error(gpucore_status st, ckpt_state *s, int64_t index, const ckpt_segment *seg, int phase)
{
    char msg[900];
    snprintf(msg, sizeof msg, "%s", gpucore_last_error());
    if (!msg[0]) snprintf(msg, sizeof msg, "the callback returned %s without a message", gpucore_status_string(st));
    return gpucore_set_error(st, "checkpoint '%s': segment '%s' (%lld) %s: %s", s->name, seg->name,
                             (long long)index, phase_name[phase], msg);
}

static gpucore_status run_hook(ckpt_state *s, int64_t index, int phase, int is_post)
{
    if (!s->seg_hook) return GPUCORE_OK;
    gpucore_clear_error();
    gpucore_status st = s->seg_hook(s->seg_hook_user, index, s->segs[index]->name, phase, is_post);
    if (st) return wrap_error(st, s, index, s->segs[index], phase);
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
static void step_release(ckpt_state *s)
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
    step_release(s);
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
        segments_changed(s);
        gpucore_event_destroy(s->ev);
        gpucore_stream_destroy(s->side);
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
    gpucore_status st = check_ckpt(c, op);
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
    gpucore_status st = check_ckpt(c, "ckpt_end_residual");
    if (st) return st;
    ckpt_state *s = c->s;
    if (!s->open) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_end_residual: no residual block is open");
    if (!s->open->nchildren)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_end_residual: residual block '%s' is empty: "
                                 "add its inner segments between begin and end", s->open->name);
    s->open = s->open->parent;
    return GPUCORE_OK;
}

/* ------------------------------------------------------- calls from segments */

gpucore_status gpucore_ckpt_save(gpucore_ckpt_call *call, const gpucore_tensor *t)
{
    gpucore_status st = check_call(call, "ckpt_save");
    if (st) return st;
    ckpt_state *s = call->s;
    ckpt_top *top = call->top;
    if ((st = gpucore_check_tensor(t, "ckpt_save", "t"))) return st;
    if (call->phase == PH_BACKWARD)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' called ckpt_save in its "
                                 "backward; saves belong in the forward", s->name, call->seg->name);
    if (t->ctx != s->ctx)
        return gpucore_set_error(GPUCORE_ERR_DEVICE_MISMATCH, "checkpoint '%s': segment '%s' saved a tensor of "
                                 "another context", s->name, call->seg->name);
    ckpt_saved *e;
    if (call->phase == PH_RECOMPUTE) {
        int64_t limit = call->seg->rec.save_base + call->seg->rec.save_count;
        if (top->nsaved >= limit)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' saved more tensors "
                                     "in its recompute than the %lld of its forward", s->name, call->seg->name,
                                     (long long)call->seg->rec.save_count);
        e = &top->saved[top->nsaved];
        char a[200], b[200];
        if (e->dtype != t->dtype || e->ndim != t->ndim || memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "checkpoint '%s': segment '%s' recompute saved tensor "
                                     "%lld as %s %s but its forward saved %s %s (a recompute must repeat the "
                                     "forward exactly)", s->name, call->seg->name,
                                     (long long)(top->nsaved - call->seg->rec.save_base),
                                     gpucore_dtype_name((gpucore_dtype)t->dtype), gpucore_shape_str(t->ndim, t->shape, a, sizeof a),
                                     gpucore_dtype_name((gpucore_dtype)e->dtype), gpucore_shape_str(e->ndim, e->shape, b, sizeof b));
    } else {
        if (top->nsaved == top->cap) {
            int64_t nc = top->cap ? top->cap * 2 : 8;
            ckpt_saved *grown = realloc(top->saved, sizeof *grown * (size_t)nc);
            if (!grown) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "ckpt_save: out of host memory");
            top->saved = grown;
            top->cap = nc;
        }
        e = &top->saved[top->nsaved];
        memset(e, 0, sizeof *e);
        e->dtype = t->dtype;
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof e->shape);
        e->nbytes = gpucore_tensor_nbytes(t);
        e->storage = t->storage;
    }
    if (call->keep && (st = gpucore_ckpt_alias(t, &e->t))) return st;
    top->nsaved++;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_saved(gpucore_ckpt_call *call, int64_t index, gpucore_tensor **out)
{
    gpucore_status st = check_call(call, "ckpt_saved");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_saved: out is NULL");
    *out = NULL;
    ckpt_state *s = call->s;
    const ckpt_record *r = &call->seg->rec;
    if (call->phase != PH_BACKWARD)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' read a saved tensor "
                                 "outside its backward", s->name, call->seg->name);
    if (index < 0 || index >= r->save_count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' backward read saved "
                                 "tensor %lld, but its forward saved %lld (indices 0..%lld): save it in the forward "
                                 "with gpucore_ckpt_save", s->name, call->seg->name, (long long)index,
                                 (long long)r->save_count, (long long)r->save_count - 1);
    ckpt_saved *e = &call->top->saved[r->save_base + index];
    if (!e->t)
        return gpucore_set_error(GPUCORE_ERR_INTERNAL, "checkpoint '%s': segment '%s' saved tensor %lld is not "
                                 "available in backward", s->name, call->seg->name, (long long)index);
    *out = e->t;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_rng(gpucore_ckpt_call *call, uint64_t counters, uint64_t *seed, uint64_t *offset)
{
    gpucore_status st = check_call(call, "ckpt_rng");
    if (st) return st;
    if (!seed || !offset) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_rng: seed or offset is NULL");
    const ckpt_record *r = &call->seg->rec;
    if ((call->phase == PH_RECOMPUTE || call->phase == PH_BACKWARD) &&
        call->rng_cursor + counters > r->rng_start + r->rng_count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' %s draws more random "
                                 "counters than its forward (%llu): the draws must repeat the forward's",
                                 call->s->name, call->seg->name, phase_name[call->phase],
                                 (unsigned long long)r->rng_count);
    *seed = call->s->seed;
    *offset = call->rng_cursor;
    call->rng_cursor += counters;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_grad_ready(gpucore_ckpt_call *call, int32_t param, gpucore_tensor *grad)
{
    gpucore_status st = check_call(call, "ckpt_grad_ready");
    if (st) return st;
    ckpt_state *s = call->s;
    if (call->phase != PH_BACKWARD)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' announced a gradient "
                                 "outside its backward", s->name, call->seg->name);
    if (!s->grad_ready) return GPUCORE_OK;
    gpucore_clear_error();
    st = s->grad_ready(s->grad_ready_user, call->index, call->seg->name, param, grad, call->stream);
    if (st && !gpucore_last_error()[0])
        gpucore_set_error(st, "the grad-ready callback returned %s for param %d", gpucore_status_string(st), param);
    return st;
}

gpucore_status gpucore_ckpt_call_segment(const gpucore_ckpt_call *call, int64_t *index, const char **name)
{
    gpucore_status st = check_call(call, "ckpt_call_segment");
    if (st) return st;
    if (index) *index = call->index;
    if (name) *name = call->seg->name;
    return GPUCORE_OK;
}

/* ------------------------------------------------------------ running segments */

static void record_shape(const gpucore_tensor *t, int32_t *dtype, int32_t *ndim, int64_t *shape)
{
    *dtype = t->dtype;
    *ndim = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * GPUCORE_MAX_DIMS);
}

static int same_shape(const gpucore_tensor *t, int32_t dtype, int32_t ndim, const int64_t *shape)
{
    return t->dtype == dtype && t->ndim == ndim && !memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
}

static gpucore_status run_forward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *x, gpucore_tensor **y);

static gpucore_status residual_forward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *x,
                                       gpucore_tensor **y)
{
    gpucore_tensor *cur = NULL, *next = NULL;
    gpucore_status st = gpucore_ckpt_alias(x, &cur);
    for (int64_t i = 0; !st && i < g->nchildren; i++) {
        st = run_forward(call, g->children[i], cur, &next);
        gpucore_tensor_destroy(cur);
        cur = next;
        next = NULL;
    }
    call->seg = g;
    if (!st && !same_shape(cur, x->dtype, x->ndim, x->shape)) {
        char a[200], b[200];
        st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "checkpoint '%s': residual block '%s' maps %s %s to %s %s; "
                               "x + f(x) needs f(x) of x's shape and dtype", call->s->name, g->name,
                               gpucore_dtype_name((gpucore_dtype)x->dtype), gpucore_shape_str(x->ndim, x->shape, a, sizeof a),
                               gpucore_dtype_name((gpucore_dtype)cur->dtype), gpucore_shape_str(cur->ndim, cur->shape, b, sizeof b));
    }
    if (!st) st = gpucore_tensor_create(call->s->ctx, (gpucore_dtype)x->dtype, x->ndim, x->shape, y);
    if (!st) st = gpucore_binary(GPUCORE_ADD, *y, x, cur, call->stream);
    gpucore_tensor_destroy(cur);
    if (st && *y) { gpucore_tensor_destroy(*y); *y = NULL; }
    return st;
}

static gpucore_status run_forward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *x, gpucore_tensor **y)
{
    ckpt_state *s = call->s;
    ckpt_record *r = &g->rec;
    ckpt_segment *outer = call->seg;
    int recompute = call->phase == PH_RECOMPUTE;
    int64_t base = call->top->nsaved;
    uint64_t rng0 = call->rng_cursor;
    gpucore_status st = GPUCORE_OK;
    *y = NULL;
    if (recompute) {
        char a[200], b[200];
        if (!same_shape(x, r->in_dtype, r->in_ndim, r->in_shape))
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "checkpoint '%s': segment '%s' recompute input is %s "
                                     "%s but the forward's was %s %s", s->name, g->name,
                                     gpucore_dtype_name((gpucore_dtype)x->dtype), gpucore_shape_str(x->ndim, x->shape, a, sizeof a),
                                     gpucore_dtype_name((gpucore_dtype)r->in_dtype), gpucore_shape_str(r->in_ndim, r->in_shape, b, sizeof b));
        call->rng_cursor = r->rng_start;
    } else {
        record_shape(x, &r->in_dtype, &r->in_ndim, r->in_shape);
        r->save_base = base;
        r->rng_start = rng0;
    }
    call->seg = g;
    if (g->is_residual) {
        st = residual_forward(call, g, x, y);
    } else {
        gpucore_clear_error();
        st = g->forward(call, x, y, call->stream, g->user);
        if (st) st = wrap_error(st, s, call->index, g, call->phase);
        else if (!*y || gpucore_check_tensor(*y, "ckpt", "y"))
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' %s returned "
                                   "GPUCORE_OK without a valid output tensor in *y", s->name, g->name,
                                   phase_name[call->phase]);
    }
    call->seg = g;
    if (!st && recompute) {
        char a[200], b[200];
        if (!same_shape(*y, r->out_dtype, r->out_ndim, r->out_shape))
            st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "checkpoint '%s': segment '%s' recompute produced %s %s "
                                   "but its forward produced %s %s (a recompute must repeat the forward exactly)",
                                   s->name, g->name, gpucore_dtype_name((gpucore_dtype)(*y)->dtype),
                                   gpucore_shape_str((*y)->ndim, (*y)->shape, a, sizeof a),
                                   gpucore_dtype_name((gpucore_dtype)r->out_dtype),
                                   gpucore_shape_str(r->out_ndim, r->out_shape, b, sizeof b));
        else if (call->top->nsaved - base != r->save_count)
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' recompute saved %lld "
                                   "tensors but its forward saved %lld", s->name, g->name,
                                   (long long)(call->top->nsaved - base), (long long)r->save_count);
        else if (call->rng_cursor - r->rng_start != r->rng_count)
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' recompute drew %llu "
                                   "random counters but its forward drew %llu", s->name, g->name,
                                   (unsigned long long)(call->rng_cursor - r->rng_start),
                                   (unsigned long long)r->rng_count);
    } else if (!st) {
        record_shape(*y, &r->out_dtype, &r->out_ndim, r->out_shape);
        r->save_count = call->top->nsaved - base;
        r->rng_count = call->rng_cursor - rng0;
    }
    if (st && *y) { gpucore_tensor_destroy(*y); *y = NULL; }
    call->seg = outer ? outer : g;
    return st;
}

static gpucore_status run_backward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *dy, gpucore_tensor *dx)
{
    ckpt_state *s = call->s;
    gpucore_status st = GPUCORE_OK;
    call->seg = g;
    call->rng_cursor = g->rec.rng_start;
    if (!g->is_residual) {
        gpucore_clear_error();
        st = g->backward(call, dy, dx, call->stream, g->user);
        return st ? wrap_error(st, s, call->index, g, PH_BACKWARD) : GPUCORE_OK;
    }
    gpucore_tensor *gcur = NULL;
    st = gpucore_ckpt_alias(dy, &gcur);
    for (int64_t i = g->nchildren - 1; !st && i >= 0; i--) {
        ckpt_segment *ch = g->children[i];
        gpucore_tensor *gin = NULL;
        if (i > 0 || dx)
            st = gpucore_tensor_create(s->ctx, (gpucore_dtype)ch->rec.in_dtype, ch->rec.in_ndim, ch->rec.in_shape, &gin);
        if (!st) st = run_backward(call, ch, gcur, gin);
        gpucore_tensor_destroy(gcur);
        gcur = gin;
    }
    call->seg = g;
    if (!st && dx) st = gpucore_binary(GPUCORE_ADD, dx, gcur, dy, call->stream); /* d(x + f(x)) */
    gpucore_tensor_destroy(gcur);
    return st;
}

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
static gpucore_status pack_top(ckpt_state *s, int64_t index, gpucore_stream *stream)
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
            if (st) return wrap_error(st, s, index, top->seg, PH_FORWARD);
            e->has_packed = 1;
            s->stats.packed_tensors++;
        }
        if (st) return st;
        gpucore_tensor_destroy(e->t);
        e->t = NULL;
    }
    return GPUCORE_OK;
}

static gpucore_status unpack_top(ckpt_state *s, int64_t index, gpucore_stream *stream)
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
            if (st) return wrap_error(st, s, index, top->seg, PH_BACKWARD);
            if (!e->t || gpucore_check_tensor(e->t, "ckpt", "t") || !same_shape(e->t, e->dtype, e->ndim, e->shape)) {
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

/* -------------------------------------------------------------------- policy */

gpucore_status gpucore_ckpt_set_policy(gpucore_ckpt *c, gpucore_ckpt_policy policy, int64_t param)
{
    gpucore_status st = check_ckpt(c, "ckpt_set_policy");
    if (st) return st;
    if ((int)policy < GPUCORE_CKPT_KEEP_ALL || policy > GPUCORE_CKPT_BUDGET)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_policy: unknown policy %d", (int)policy);
    if (policy == GPUCORE_CKPT_EVERY_K && param < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_policy: EVERY_K needs k >= 1, got %lld",
                                 (long long)param);
    if (policy == GPUCORE_CKPT_BUDGET && param <= 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_policy: BUDGET needs a budget in bytes > 0, "
                                 "got %lld", (long long)param);
    step_release(c->s);
    c->s->policy = policy;
    c->s->param = param;
    return GPUCORE_OK;
}

static void plan_every_k(int32_t *modes, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < n; i++) modes[i] = (i % k == 0) ? GPUCORE_CKPT_CHECKPOINT : GPUCORE_CKPT_RECOMPUTED;
}

static void plan_fixed(ckpt_state *s, int32_t *modes)
{
    int64_t n = s->nsegs;
    switch (s->policy) {
    case GPUCORE_CKPT_KEEP_ALL: for (int64_t i = 0; i < n; i++) modes[i] = GPUCORE_CKPT_KEPT; break;
    case GPUCORE_CKPT_EVERY_K: plan_every_k(modes, n, s->param); break;
    case GPUCORE_CKPT_SQRT_N: plan_every_k(modes, n, (int64_t)ceil(sqrt((double)n))); break;
    default: plan_every_k(modes, n, 1); break;
    }
}

/* The planner's model of a step's peak above the bytes allocated at its start. */
static int64_t hold_of(const ckpt_top *t, const int32_t *m, int64_t i, int kept_as)
{
    int64_t in = i > 0 ? t[i - 1].out_bytes : 0;
    if (kept_as == GPUCORE_CKPT_KEPT) {
        int prev_holds_out = i > 0 && m[i - 1] == GPUCORE_CKPT_KEPT && t[i - 1].saves_output;
        return t[i].saved_bytes + (t[i].saves_input && !prev_holds_out ? in : 0);
    }
    return kept_as == GPUCORE_CKPT_CHECKPOINT ? in : 0;
}

static int64_t simulate(const ckpt_top *t, const int32_t *m, int64_t n)
{
    int64_t held = 0, peak = 0;
    for (int64_t i = 0; i < n; i++) {              /* forward */
        int64_t in = i > 0 ? t[i - 1].out_bytes : 0;
        int64_t p = held + in + t[i].transient;
        if (p > peak) peak = p;
        held += hold_of(t, m, i, m[i]);
    }
    int64_t below = held;                          /* backward, last segment first */
    for (int64_t e = n - 1; e >= 0;) {
        int64_t s0 = e;
        if (m[e] != GPUCORE_CKPT_KEPT)
            while (s0 > 0 && m[s0] != GPUCORE_CKPT_CHECKPOINT) s0--;
        for (int64_t j = s0; j <= e; j++) below -= hold_of(t, m, j, m[j]);
        int64_t grp = 0, base = below + (m[e] != GPUCORE_CKPT_KEPT ? hold_of(t, m, s0, GPUCORE_CKPT_CHECKPOINT) : 0);
        int64_t dy = t[e].out_bytes;
        for (int64_t j = s0; j <= e; j++) {       /* recompute (or what the forward kept) */
            int64_t in = j > 0 ? t[j - 1].out_bytes : 0;
            if (m[e] != GPUCORE_CKPT_KEPT && base + grp + in + t[j].transient + dy > peak)
                peak = base + grp + in + t[j].transient + dy;
            grp += hold_of(t, m, j, GPUCORE_CKPT_KEPT);
        }
        for (int64_t j = e; j >= s0; j--) {       /* backward of each */
            int64_t in = j > 0 ? t[j - 1].out_bytes : 0;
            int64_t p = base + grp + t[j].out_bytes + in + t[j].transient;
            if (p > peak) peak = p;
            grp -= hold_of(t, m, j, GPUCORE_CKPT_KEPT);
        }
        e = s0 - 1;
    }
    return peak;
}

static gpucore_status plan_budget(ckpt_state *s, int64_t baseline, int64_t *estimate)
{
    int64_t n = s->nsegs, avail = s->param - baseline;
    int32_t *m = malloc(sizeof *m * (size_t)n), *best = malloc(sizeof *best * (size_t)n);
    if (!m || !best) {
        free(m);
        free(best);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "ckpt_forward: out of host memory");
    }
    int64_t best_cost = -1, best_est = 0, lean_est = INT64_MAX, lean_k = 1;
    for (int64_t k = 1; k <= n; k++) {
        plan_every_k(m, n, k);
        int64_t est = simulate(s->tops, m, n);
        if (est < lean_est) { lean_est = est; lean_k = k; }
        if (est > avail) continue;
        for (int64_t g = ((n - 1) / k) * k; g >= 0; g -= k) {  /* keep whole groups, last first */
            int64_t e = g + k < n ? g + k : n;
            for (int64_t j = g; j < e; j++) m[j] = GPUCORE_CKPT_KEPT;
            int64_t e2 = simulate(s->tops, m, n);
            if (e2 <= avail) est = e2;
            else plan_every_k(m + g, e - g, k);  /* back to checkpoint + recomputed */
        }
        int64_t cost = 0;
        for (int64_t j = 0; j < n; j++) cost += m[j] != GPUCORE_CKPT_KEPT;
        if (best_cost < 0 || cost < best_cost || (cost == best_cost && est < best_est)) {
            best_cost = cost;
            best_est = est;
            memcpy(best, m, sizeof *m * (size_t)n);
        }
    }
    gpucore_status st = GPUCORE_OK;
    if (best_cost < 0) {
        int64_t big = 0;
        for (int64_t i = 1; i < n; i++)
            if (s->tops[i].transient > s->tops[big].transient) big = i;
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "checkpoint '%s': a budget of %lld bytes cannot be met: %lld "
                               "bytes are allocated when the step starts (parameters, gradients, inputs) and the "
                               "leanest plan (a checkpoint every %lld segments) needs an estimated %lld more (peak "
                               "%lld); the largest segment, '%s' (%lld), alone needs %lld bytes in its forward. Raise "
                               "the budget to at least %lld or shrink the batch", s->name, (long long)s->param,
                               (long long)baseline, (long long)lean_k, (long long)lean_est,
                               (long long)(baseline + lean_est), s->tops[big].seg->name, (long long)big,
                               (long long)s->tops[big].transient, (long long)(baseline + lean_est));
    } else {
        memcpy(s->modes, best, sizeof *best * (size_t)n);
        *estimate = baseline + best_est;
    }
    free(m);
    free(best);
    return st;
}

gpucore_status gpucore_ckpt_get_plan(gpucore_ckpt *c, int32_t *modes, int64_t count)
{
    gpucore_status st = check_ckpt(c, "ckpt_get_plan");
    if (st) return st;
    ckpt_state *s = c->s;
    if (!modes) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_get_plan: modes is NULL");
    if (count < s->nsegs)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_get_plan: count %lld < %lld segments",
                                 (long long)count, (long long)s->nsegs);
    if (s->modes && s->stats.segments == s->nsegs) memcpy(modes, s->modes, sizeof *modes * (size_t)s->nsegs);
    else plan_fixed(s, modes);
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_seed(gpucore_ckpt *c, uint64_t seed, uint64_t offset)
{
    gpucore_status st = check_ckpt(c, "ckpt_set_seed");
    if (st) return st;
    c->s->seed = seed;
    c->s->offset = offset;
    return GPUCORE_OK;
}

/* ------------------------------------------------------------------ forward */

/* Bytes of the unique storages among a segment's saves, without its input's. */
static void measure_saves(ckpt_top *t, const void *in_storage, const void *out_storage)
{
    t->saved_bytes = 0;
    t->saves_input = t->saves_output = 0;
    for (int64_t i = 0; i < t->nsaved; i++) {
        const ckpt_saved *e = &t->saved[i];
        if (e->storage == in_storage) { t->saves_input = 1; continue; }
        if (e->storage == out_storage) t->saves_output = 1;
        int dup = 0;
        for (int64_t j = 0; j < i && !dup; j++) dup = t->saved[j].storage == e->storage;
        if (!dup) t->saved_bytes += e->nbytes;
    }
}

/* Run every segment forward. keep_plan 0: the dry run (nothing held, no hooks). */
static gpucore_status forward_pass(ckpt_state *s, const gpucore_tensor *x, gpucore_stream *stream, int dry,
                                   gpucore_tensor **y)
{
    gpucore_ckpt_call call = {GPUCORE_MAGIC_CKPT_CALL, s, 0, NULL, NULL, dry ? PH_DRY : PH_FORWARD, 0, s->offset,
                              stream};
    gpucore_tensor *cur = NULL;
    gpucore_status st = gpucore_ckpt_alias(x, &cur);
    for (int64_t i = 0; !st && i < s->nsegs; i++) {
        ckpt_top *top = &s->tops[i];
        int32_t mode = dry ? GPUCORE_CKPT_RECOMPUTED : s->modes[i];
        int64_t peak = 0, before = allocated_now(s, NULL);
        gpucore_memory_reset_peak_stats(s->ctx, GPUCORE_MEMORY_DEVICE);
        call.index = i;
        call.top = top;
        call.seg = NULL;
        call.keep = mode == GPUCORE_CKPT_KEPT;
        top->nsaved = 0;
        gpucore_tensor *out = NULL;
        if (!dry && (st = run_hook(s, i, GPUCORE_CKPT_PHASE_FORWARD, 0))) break;
        st = run_forward(&call, top->seg, cur, &out);
        if (!st && !dry) st = run_hook(s, i, GPUCORE_CKPT_PHASE_FORWARD, 1);
        allocated_now(s, &peak);
        if (peak > s->step_peak) s->step_peak = peak;
        if (!st) {
            top->out_bytes = gpucore_tensor_nbytes(out);
            top->transient = peak - before;
            measure_saves(top, cur->storage, out->storage);
            if (call.keep && (s->pack || s->offload)) st = pack_top(s, i, stream);
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
    return st;
}

static void held_bytes(ckpt_state *s, const void *x_storage)
{
    int64_t held = 0, keep_all = 0, cap = 0, n = 0;
    const void **seen = NULL;
    for (int64_t i = 0; i < s->nsegs; i++) {
        ckpt_top *t = &s->tops[i];
        keep_all += t->saved_bytes +
                    (t->saves_input && i > 0 && !s->tops[i - 1].saves_output ? s->tops[i - 1].out_bytes : 0);
        for (int64_t j = -1; j < t->nsaved; j++) {
            gpucore_tensor *h = j < 0 ? t->stored_input : t->saved[j].t;
            if (!h || h->storage == x_storage) continue;
            int dup = 0;
            for (int64_t k = 0; k < n && !dup; k++) dup = seen[k] == h->storage;
            if (dup) continue;
            if (n == cap) {
                int64_t nc = cap ? cap * 2 : 64;
                const void **g = realloc(seen, sizeof *g * (size_t)nc);
                if (!g) { free(seen); return; } /* figures are best effort */
                seen = g;
                cap = nc;
            }
            seen[n++] = h->storage;
            held += h->storage->bytes;
        }
    }
    free(seen);
    s->stats.held_bytes = held;
    s->stats.keep_all_bytes = keep_all;
    s->stats.bytes_saved = keep_all - held;
}

gpucore_status gpucore_ckpt_forward(gpucore_ckpt *c, const gpucore_tensor *x, gpucore_tensor **y)
{
    const char *op = "ckpt_forward";
    gpucore_status st = check_ckpt(c, op);
    if (st) return st;
    ckpt_state *s = c->s;
    if ((st = gpucore_check_tensor(x, op, "x"))) return st;
    if (!y) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: y is NULL", op);
    *y = NULL;
    if (x->ctx != s->ctx)
        return gpucore_set_error(GPUCORE_ERR_DEVICE_MISMATCH, "%s: x is on %s but checkpoint '%s' is on %s", op,
                                 x->ctx->name, s->name, s->ctx->name);
    if (!s->nsegs) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: checkpoint '%s' has no segments", op, s->name);
    if (s->open)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: residual block '%s' was begun but not ended "
                                 "(gpucore_ckpt_end_residual)", op, s->open->name);
    step_release(s);
    if ((st = ensure_tops(s, op))) return st;
    gpucore_stream *stream = NULL;
    if ((st = gpucore_context_current_stream(s->ctx, &stream))) return st;
    int64_t counts[4] = {0, 0, 0, 0};
    memset(&s->stats, 0, sizeof s->stats);
    int64_t baseline = allocated_now(s, NULL);
    s->step_peak = baseline;
    if (s->policy == GPUCORE_CKPT_BUDGET) {
        if (!s->measured || !same_shape(x, s->meas_dtype, s->meas_ndim, s->meas_shape)) {
            gpucore_tensor *out = NULL;
            if ((st = forward_pass(s, x, stream, 1, &out))) { step_release(s); return st; }
            gpucore_tensor_destroy(out);
            for (int64_t i = 0; i < s->nsegs; i++) s->tops[i].nsaved = 0;
            s->measured = 1;
            record_shape(x, &s->meas_dtype, &s->meas_ndim, s->meas_shape);
        }
        if ((st = plan_budget(s, baseline, &s->stats.estimated_peak_bytes))) return st;
    } else {
        plan_fixed(s, s->modes);
    }
    s->step_peak = baseline;
    s->stats.baseline_bytes = baseline;
    st = forward_pass(s, x, stream, 0, &s->y);
    if (st) { step_release(s); return st; }
    s->measured = 1;
    record_shape(x, &s->meas_dtype, &s->meas_ndim, s->meas_shape);
    for (int64_t i = 0; i < s->nsegs; i++) counts[s->modes[i]]++;
    s->stats.segments = s->nsegs;
    s->stats.kept = counts[GPUCORE_CKPT_KEPT];
    s->stats.checkpoints = counts[GPUCORE_CKPT_CHECKPOINT];
    s->stats.recomputed = counts[GPUCORE_CKPT_RECOMPUTED];
    s->stats.peak_allocated_bytes = s->step_peak;
    held_bytes(s, x->storage);
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
    if (i > 0) st = gpucore_tensor_create(s->ctx, (gpucore_dtype)r->in_dtype, r->in_ndim, r->in_shape, &dx);
    else dx = dx_user;
    if (!st && top->ready) st = gpucore_stream_wait_event(call->stream, top->ready);
    if (!st) st = run_hook(s, i, GPUCORE_CKPT_PHASE_BACKWARD, 0);
    call->index = i;
    call->top = top;
    call->phase = PH_BACKWARD;
    if (!st) st = run_backward(call, top->seg, *g, dx);
    if (!st) st = run_hook(s, i, GPUCORE_CKPT_PHASE_BACKWARD, 1);
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
    gpucore_status st = check_ckpt(c, op);
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
    if (!same_shape(dy, last->out_dtype, last->out_ndim, last->out_shape))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dy is %s %s but y is %s %s", op,
                                 gpucore_dtype_name((gpucore_dtype)dy->dtype), gpucore_shape_str(dy->ndim, dy->shape, a, sizeof a),
                                 gpucore_dtype_name((gpucore_dtype)last->out_dtype),
                                 gpucore_shape_str(last->out_ndim, last->out_shape, b, sizeof b));
    if (dx && !same_shape(dx, first->in_dtype, first->in_ndim, first->in_shape))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dx is %s %s but x was %s %s", op,
                                 gpucore_dtype_name((gpucore_dtype)dx->dtype), gpucore_shape_str(dx->ndim, dx->shape, a, sizeof a),
                                 gpucore_dtype_name((gpucore_dtype)first->in_dtype),
                                 gpucore_shape_str(first->in_ndim, first->in_shape, b, sizeof b));
    gpucore_stream *stream = NULL;
    if ((st = gpucore_context_current_stream(s->ctx, &stream))) return st;
    gpucore_tensor_destroy(s->y);
    s->y = NULL;
    gpucore_tensor *g = NULL;
    st = gpucore_ckpt_alias(dy, &g);
    gpucore_ckpt_call call = {GPUCORE_MAGIC_CKPT_CALL, s, 0, NULL, NULL, PH_BACKWARD, 0, 0, stream};
    for (int64_t i = s->nsegs - 1; !st && i >= 0;) {
        if (s->modes[i] == GPUCORE_CKPT_KEPT) {
            st = unpack_top(s, i, stream);
            if (!st && i > 0 && s->modes[i - 1] == GPUCORE_CKPT_KEPT) st = unpack_top(s, i - 1, stream); /* prefetch */
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
            st = run_forward(&call, top->seg, cur, &out);
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
    step_release(s);
    return st;
}

gpucore_status gpucore_ckpt_reset(gpucore_ckpt *c)
{
    gpucore_status st = check_ckpt(c, "ckpt_reset");
    if (st) return st;
    step_release(c->s);
    return GPUCORE_OK;
}

/* -------------------------------------------------------------------- hooks */

gpucore_status gpucore_ckpt_set_saved_tensor_hooks(gpucore_ckpt *c, gpucore_ckpt_pack_fn pack,
                                                   gpucore_ckpt_unpack_fn unpack, gpucore_ckpt_discard_fn discard,
                                                   void *user)
{
    gpucore_status st = check_ckpt(c, "ckpt_set_saved_tensor_hooks");
    if (st) return st;
    if (pack && !unpack)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_set_saved_tensor_hooks: a pack hook needs an unpack hook");
    step_release(c->s);
    c->s->pack = pack;
    c->s->unpack = unpack;
    c->s->discard = discard;
    c->s->hook_user = user;
    if (pack) c->s->offload = 0;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_offload(gpucore_ckpt *c, int enable, int64_t min_bytes)
{
    gpucore_status st = check_ckpt(c, "ckpt_set_offload");
    if (st) return st;
    if (min_bytes < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_offload: min_bytes is negative (%lld)",
                                 (long long)min_bytes);
    step_release(c->s);
    c->s->offload = enable != 0;
    c->s->offload_min = min_bytes;
    if (enable) c->s->pack = NULL, c->s->unpack = NULL, c->s->discard = NULL;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_segment_hook(gpucore_ckpt *c, gpucore_ckpt_segment_hook_fn hook, void *user)
{
    gpucore_status st = check_ckpt(c, "ckpt_set_segment_hook");
    if (st) return st;
    c->s->seg_hook = hook;
    c->s->seg_hook_user = user;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_set_grad_ready_callback(gpucore_ckpt *c, gpucore_ckpt_grad_ready_fn fn, void *user)
{
    gpucore_status st = check_ckpt(c, "ckpt_set_grad_ready_callback");
    if (st) return st;
    c->s->grad_ready = fn;
    c->s->grad_ready_user = user;
    return GPUCORE_OK;
}

gpucore_status gpucore_ckpt_get_stats(gpucore_ckpt *c, gpucore_ckpt_stats *stats)
{
    gpucore_status st = check_ckpt(c, "ckpt_get_stats");
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
