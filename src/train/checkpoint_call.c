/*
 * checkpoint_call.c — the segment side of the checkpoint executor: what a forward
 * or backward callback may call (save, saved, rng, grad_ready, call_segment) and
 * running one segment (or residual block) forward, as a recompute, or backward,
 * with the checks that a recompute repeats its forward exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"

static gpucore_status check_call(const gpucore_ckpt_call *c, const char *op)
{
    if (!c) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: call is NULL", op);
    if (c->magic != GPUCORE_MAGIC_CKPT_CALL)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: call is not a live checkpoint call (it is valid "
                                 "only during the callback it was passed to)", op);
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
                                 call->s->name, call->seg->name, gpucore_ckpt_phase_name[call->phase],
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
    if (s->resolver && (st = s->resolver->ready(s->resolver_user, grad, call->stream))) return st;
    if (!s->grad_ready) return GPUCORE_OK;
    gpucore_clear_error();
    st = s->grad_ready(s->grad_ready_user, call->index, call->seg->name, param, grad, call->stream);
    if (st && !gpucore_last_error()[0])
        gpucore_set_error(st, "the grad-ready callback returned %s for param %d", gpucore_status_string(st), param);
    return st;
}

gpucore_status gpucore_ckpt_bound_now(gpucore_ckpt_call *call, const gpucore_tensor *bound, int is_grad,
                                     gpucore_tensor **now)
{
    ckpt_state *s = call->s;
    *now = (gpucore_tensor *)bound;
    if (!bound || !s->resolver) return GPUCORE_OK;
    return s->resolver->resolve(s->resolver_user, bound, is_grad, call->stream, now);
}

gpucore_status gpucore_ckpt_set_resolver(gpucore_ckpt *c, const ckpt_resolver *r, void *user)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_resolver");
    if (st) return st;
    c->s->resolver = r;
    c->s->resolver_user = user;
    return GPUCORE_OK;
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

static gpucore_status residual_forward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *x,
                                       gpucore_tensor **y)
{
    gpucore_tensor *cur = NULL, *next = NULL;
    gpucore_status st = gpucore_ckpt_alias(x, &cur);
    for (int64_t i = 0; !st && i < g->nchildren; i++) {
        st = gpucore_ckpt_run_forward(call, g->children[i], cur, &next);
        gpucore_tensor_destroy(cur);
        cur = next;
        next = NULL;
    }
    call->seg = g;
    if (!st && !ckpt_same_shape(cur, x->dtype, x->ndim, x->shape)) {
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

gpucore_status gpucore_ckpt_run_forward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *x, gpucore_tensor **y)
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
        if (!ckpt_same_shape(x, r->in_dtype, r->in_ndim, r->in_shape))
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "checkpoint '%s': segment '%s' recompute input is %s "
                                     "%s but the forward's was %s %s", s->name, g->name,
                                     gpucore_dtype_name((gpucore_dtype)x->dtype), gpucore_shape_str(x->ndim, x->shape, a, sizeof a),
                                     gpucore_dtype_name((gpucore_dtype)r->in_dtype), gpucore_shape_str(r->in_ndim, r->in_shape, b, sizeof b));
        call->rng_cursor = r->rng_start;
    } else {
        ckpt_record_shape(x, &r->in_dtype, &r->in_ndim, r->in_shape);
        r->save_base = base;
        r->rng_start = rng0;
    }
    call->seg = g;
    if (g->is_residual) {
        st = residual_forward(call, g, x, y);
    } else {
        gpucore_clear_error();
        st = g->forward(call, x, y, call->stream, g->user);
        if (st) st = gpucore_ckpt_wrap_error(st, s, call->index, g, call->phase);
        else if (!*y || gpucore_check_tensor(*y, "ckpt", "y"))
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "checkpoint '%s': segment '%s' %s returned "
                                   "GPUCORE_OK without a valid output tensor in *y", s->name, g->name,
                                   gpucore_ckpt_phase_name[call->phase]);
    }
    call->seg = g;
    if (!st && recompute) {
        char a[200], b[200];
        if (!ckpt_same_shape(*y, r->out_dtype, r->out_ndim, r->out_shape))
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
        ckpt_record_shape(*y, &r->out_dtype, &r->out_ndim, r->out_shape);
        r->save_count = call->top->nsaved - base;
        r->rng_count = call->rng_cursor - rng0;
    }
    if (st && *y) { gpucore_tensor_destroy(*y); *y = NULL; }
    call->seg = outer ? outer : g;
    return st;
}

gpucore_status gpucore_ckpt_run_backward(gpucore_ckpt_call *call, ckpt_segment *g, const gpucore_tensor *dy, gpucore_tensor *dx)
{
    ckpt_state *s = call->s;
    gpucore_status st = GPUCORE_OK;
    call->seg = g;
    call->rng_cursor = g->rec.rng_start;
    if (!g->is_residual) {
        gpucore_clear_error();
        st = g->backward(call, dy, dx, call->stream, g->user);
        return st ? gpucore_ckpt_wrap_error(st, s, call->index, g, PH_BACKWARD) : GPUCORE_OK;
    }
    gpucore_tensor *gcur = NULL;
    st = gpucore_ckpt_alias(dy, &gcur);
    for (int64_t i = g->nchildren - 1; !st && i >= 0; i--) {
        ckpt_segment *ch = g->children[i];
        gpucore_tensor *gin = NULL;
        if (i > 0 || dx)
            st = gpucore_tensor_create(s->ctx, (gpucore_dtype)ch->rec.in_dtype, ch->rec.in_ndim, ch->rec.in_shape, &gin);
        if (!st) st = gpucore_ckpt_run_backward(call, ch, gcur, gin);
        gpucore_tensor_destroy(gcur);
        gcur = gin;
    }
    call->seg = g;
    if (!st && dx) st = gpucore_binary(GPUCORE_ADD, dx, gcur, dy, call->stream); /* d(x + f(x)) */
    gpucore_tensor_destroy(gcur);
    return st;
}
