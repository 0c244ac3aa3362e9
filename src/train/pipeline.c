/*
 * pipeline.c — layers on several devices: a GPipe pipeline over checkpoint executors.
 *
 * Each stage is an executor on its own context; this file splits the batch into
 * micro-batches, queues every stage's forwards (fill) and then every backward
 * (drain) without host waits, moves activations and gradients between contexts
 * (transfer()), and sums parameter gradients over micro-batches through the
 * executors' grad-ready callbacks. The executor itself is unchanged: a stage's
 * backward of micro-batch m is the executor's forward on the stored input (the
 * saved RNG offset restored) followed by its backward — GPipe's re-materialisation
 * at stage boundaries — so forward, recompute and backward keep one definition.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"
#include "train_internal.h"

#define GPUCORE_MAGIC_PIPELINE 0x919E11E5u

typedef struct pipe_acc {
    gpucore_tensor *grad; /* the segment's gradient tensor (borrowed) */
    gpucore_tensor *acc;  /* the sum of the earlier micro-batches' gradients */
} pipe_acc;

typedef struct pipe_state pipe_state;

typedef struct pipe_stage {
    pipe_state *p;
    int index;
    gpucore_ckpt *ck;
    gpucore_context *ctx;
    gpucore_stream *xfer;     /* inbound copies */
    gpucore_event *out_ev;    /* on the compute stream: an outbound tensor is ready */
    gpucore_event *in_ev;     /* on xfer: an inbound copy is done */
    gpucore_ckpt_grad_ready_fn user_fn; /* the executor's callback before the pipeline's */
    void *user_user;
    pipe_acc *acc;
    int64_t nacc, cap;
} pipe_stage;

struct pipe_state {
    int n;
    pipe_stage *st;
    int64_t mb, nmb;          /* backward: the micro-batch in progress, of nmb */
};

struct gpucore_pipeline {
    uint32_t magic;
    pipe_state *p;
};

_Static_assert(sizeof(struct gpucore_pipeline) <= sizeof(struct gpucore_tensor), "pipeline handle fits a pool slot");

static gpucore_status pipe_check(const gpucore_pipeline *pipe, const char *op)
{
    if (!pipe) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the pipeline is NULL", op);
    if (pipe->magic != GPUCORE_MAGIC_PIPELINE || !pipe->p)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the pipeline was destroyed or never created", op);
    return GPUCORE_OK;
}

/* ------------------------------------------------ gradients over micro-batches */

static gpucore_status pipe_grad_ready(void *user, int64_t segment, const char *name, int32_t param,
                                      gpucore_tensor *grad, gpucore_stream *stream)
{
    pipe_stage *g = user;
    pipe_state *p = g->p;
    gpucore_status st = GPUCORE_OK;
    if (p->nmb > 1) {
        pipe_acc *a = NULL;
        for (int64_t i = 0; i < g->nacc && !a; i++)
            if (g->acc[i].grad == grad) a = &g->acc[i];
        if (!a) {
            if (g->nacc == g->cap) {
                int64_t nc = g->cap ? 2 * g->cap : 16;
                pipe_acc *grown = realloc(g->acc, sizeof *grown * (size_t)nc);
                if (!grown) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "pipeline: out of host memory");
                g->acc = grown;
                g->cap = nc;
            }
            a = &g->acc[g->nacc++];
            a->grad = grad;
            a->acc = NULL;
        }
        if (a->acc && !ckpt_same_shape(grad, a->acc->dtype, a->acc->ndim, a->acc->shape)) {
            gpucore_tensor_destroy(a->acc);
            a->acc = NULL;
        }
        if (!a->acc && (st = gpucore_tensor_create(g->ctx, (gpucore_dtype)grad->dtype, grad->ndim, grad->shape, &a->acc)))
            return st;
        /* acc = g0, then acc + g1, ...; the last micro-batch's gradient receives the sum */
        if (p->mb == 0) st = gpucore_copy(a->acc, grad, stream);
        else if (p->mb < p->nmb - 1) st = gpucore_binary(GPUCORE_ADD, a->acc, a->acc, grad, stream);
        else st = gpucore_binary(GPUCORE_ADD, grad, a->acc, grad, stream);
        if (st || p->mb < p->nmb - 1) return st;
    }
    return g->user_fn ? g->user_fn(g->user_user, segment, name, param, grad, stream) : GPUCORE_OK;
}

/* ---------------------------------------------------------------- lifetime */

static void stage_fini(pipe_stage *g)
{
    if (g->ck && g->ck->magic == GPUCORE_MAGIC_CKPT && g->ck->s) {
        g->ck->s->grad_ready = g->user_fn;
        g->ck->s->grad_ready_user = g->user_user;
    }
    if (g->ctx && g->ctx->magic == GPUCORE_MAGIC_CONTEXT) {
        for (int64_t i = 0; i < g->nacc; i++) gpucore_tensor_destroy(g->acc[i].acc);
        gpucore_event_destroy(g->out_ev);
        gpucore_event_destroy(g->in_ev);
        gpucore_stream_destroy(g->xfer);
    }
    free(g->acc);
}

/* Stages on different devices of one backend exchange activations and gradients by
 * device-to-device copies: where the hardware allows, let each device reach the others'
 * memory directly (NVLink/PCIe peer-to-peer), else the driver stages every copy through host
 * memory. A refusal (the peer limit of a large box) leaves the copies correct, only slower. */
static void enable_stage_peers(pipe_state *p)
{
    for (int i = 0; i < p->n; i++) {
        gpucore_context *a = p->st[i].ctx;
        if (!a->be->enable_peer_access) return;
        for (int j = 0; j < p->n; j++) {
            gpucore_context *b = p->st[j].ctx;
            int can = 0;
            if (a->index == b->index || a->be->can_access_peer(a->index, b->index, &can) || !can) continue;
            if (a->be->enable_peer_access(a->bctx, b->index))
                gpucore_log(GPUCORE_LOG_WARN, "pipeline_create: peer access %s -> %s refused (%s); copies between "
                            "them go through host memory", a->name, b->name, gpucore_last_error());
        }
    }
    gpucore_clear_error();
}

gpucore_status gpucore_pipeline_create(gpucore_ckpt *const *stages, int count, gpucore_pipeline **out)
{
    const char *op = "pipeline_create";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    if (!stages) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: stages is NULL", op);
    if (count < 1) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: count is %d; give at least one stage", op, count);
    for (int i = 0; i < count; i++) {
        gpucore_status st = gpucore_ckpt_check(stages[i], op);
        if (st) return gpucore_set_error(st, "%s: stage %d: %s", op, i, gpucore_last_error());
        if (!stages[i]->s->nsegs)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stage %d ('%s') has no segments", op, i,
                                     stages[i]->s->name);
        for (int j = 0; j < i; j++)
            if (stages[j] == stages[i])
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stages %d and %d are the same executor; "
                                         "give each stage its own", op, j, i);
        if (stages[i]->s->ctx->be != stages[0]->s->ctx->be)
            return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: stage %d is on %s but stage 0 on %s; every stage "
                                     "must be on the same backend", op, i, stages[i]->s->ctx->name,
                                     stages[0]->s->ctx->name);
    }
    for (int i = 0; i < count; i++)
        if (stages[i]->s->resolver)
            return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: stage %d ('%s') is bound to a ZeRO trainer "
                                     "(gpucore_zero_bind_ckpt); pipelines over bound executors are not supported yet",
                                     op, i, stages[i]->s->name);
    for (int i = 0; i < count; i++)
        if (stages[i]->s->grad_ready == pipe_grad_ready)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stage %d ('%s') is already a stage of a "
                                     "pipeline; destroy that pipeline first", op, i, stages[i]->s->name);
    pipe_state *p = calloc(1, sizeof *p);
    pipe_stage *st_arr = calloc((size_t)count, sizeof *st_arr);
    gpucore_pipeline *h = p && st_arr ? gpucore_handle_alloc(&gpucore_tensor_pool) : NULL;
    if (!h) {
        free(p);
        free(st_arr);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    p->n = count;
    p->st = st_arr;
    gpucore_status st = GPUCORE_OK;
    for (int i = 0; i < count && !st; i++) {
        pipe_stage *g = &p->st[i];
        g->p = p;
        g->index = i;
        g->ck = stages[i];
        g->ctx = stages[i]->s->ctx;
        st = gpucore_stream_create(g->ctx, 0, &g->xfer);
        if (!st) st = gpucore_event_create_untimed(g->ctx, &g->out_ev);
        if (!st) st = gpucore_event_create_untimed(g->ctx, &g->in_ev);
    }
    if (st) {
        for (int i = 0; i < count; i++) stage_fini(&p->st[i]);
        free(p->st);
        free(p);
        gpucore_handle_release(&gpucore_tensor_pool, h);
        return st;
    }
    enable_stage_peers(p);
    for (int i = 0; i < count; i++) {
        ckpt_state *cs = stages[i]->s;
        p->st[i].user_fn = cs->grad_ready;
        p->st[i].user_user = cs->grad_ready_user;
        cs->grad_ready = pipe_grad_ready;
        cs->grad_ready_user = &p->st[i];
    }
    h->p = p;
    h->magic = GPUCORE_MAGIC_PIPELINE;
    *out = h;
    return GPUCORE_OK;
}

gpucore_status gpucore_pipeline_destroy(gpucore_pipeline *pipe)
{
    if (!pipe) return GPUCORE_OK;
    gpucore_status st = pipe_check(pipe, "pipeline_destroy");
    if (st) return st;
    pipe_state *p = pipe->p;
    pipe->p = NULL;
    gpucore_handle_release(&gpucore_tensor_pool, pipe);
    for (int i = 0; i < p->n; i++) stage_fini(&p->st[i]);
    free(p->st);
    free(p);
    gpucore_clear_error();
    return GPUCORE_OK;
}

/* ---------------------------------------------------------------- transfer */

/* Move *t (owned; consumed) from stage `from` (ready on from_s) to stage `to`,
 * whose compute stream to_s will read the result (*out, owned by the caller).
 * The copy runs on to's transfer stream after an event on from_s; to_s waits for
 * it, and from_s waits for it before t's memory can be reused there. */
static gpucore_status transfer(pipe_stage *from, gpucore_stream *from_s, gpucore_tensor **t, pipe_stage *to,
                               gpucore_stream *to_s, gpucore_tensor **out)
{
    *out = NULL;
    gpucore_tensor *src = *t;
    *t = NULL;
    if (from->ctx == to->ctx) { /* two stages on one context: the same stream, nothing to move */
        *out = src;
        return GPUCORE_OK;
    }
    gpucore_status st = GPUCORE_OK;
    if (!gpucore_tensor_contiguous_unchecked(src)) {
        gpucore_tensor *dense = NULL;
        st = gpucore_tensor_create(from->ctx, (gpucore_dtype)src->dtype, src->ndim, src->shape, &dense);
        if (!st) st = gpucore_copy(dense, src, from_s);
        gpucore_tensor_destroy(src);
        if (st) {
            gpucore_tensor_destroy(dense);
            return st;
        }
        src = dense;
    }
    const gpucore_backend *be = to->ctx->be;
    gpucore_tensor *dst = NULL;
    st = gpucore_event_record(from->out_ev, from_s);
    if (!st) st = be->stream_wait_event(to->ctx->bctx, to->xfer->bstream, from->out_ev->bevent);
    if (!st) st = gpucore_train_tensor_on(to->ctx, (gpucore_dtype)src->dtype, src->ndim, src->shape, to->xfer, &dst);
    if (!st && gpucore_tensor_nbytes(dst) > 0) {
        gpucore_view dv, sv;
        gpucore_tensor_view_of(dst, &dv);
        gpucore_tensor_view_of(src, &sv);
        st = be->copy_d2d(to->ctx->bctx, dv.data, sv.data, (size_t)(dv.numel * dv.elem_size), to->xfer->bstream);
    }
    if (!st) st = gpucore_event_record(to->in_ev, to->xfer);
    if (!st) st = gpucore_stream_wait_event(to_s, to->in_ev);
    if (!st) st = gpucore_tensor_record_stream(dst, to_s);
    if (!st) st = be->stream_wait_event(from->ctx->bctx, from_s->bstream, to->in_ev->bevent);
    gpucore_tensor_destroy(src); /* reuse on from_s comes after the wait just queued */
    if (st) {
        gpucore_tensor_destroy(dst);
        return st;
    }
    *out = dst;
    return GPUCORE_OK;
}

/* -------------------------------------------------------------------- step */

static gpucore_status stage_error(gpucore_status st, int s, int64_t m, const char *what)
{
    char msg[900];
    snprintf(msg, sizeof msg, "%s", gpucore_last_error());
    return gpucore_set_error(st, "pipeline: stage %d micro-batch %lld %s: %s", s, (long long)m, what,
                             msg[0] ? msg : gpucore_status_string(st));
}

/* Micro-batch m of M over a dim-0 extent B: [*a, *b). */
static void mb_range(int64_t B, int64_t M, int64_t m, int64_t *a, int64_t *b)
{
    int64_t q = B / M, r = B % M;
    *a = m * q + (m < r ? m : r);
    *b = *a + q + (m < r ? 1 : 0);
}

static gpucore_status mb_slice(const gpucore_tensor *t, int64_t B, int64_t M, int64_t m, gpucore_tensor **out)
{
    int64_t a, b;
    mb_range(B, M, m, &a, &b);
    return gpucore_tensor_slice((gpucore_tensor *)t, 0, a, b, 1, out);
}

static gpucore_status step_checks(pipe_state *p, const gpucore_tensor *x, int64_t M, gpucore_pipeline_loss_fn loss,
                                  const gpucore_tensor *dx)
{
    const char *op = "pipeline_step";
    gpucore_status st;
    for (int s = 0; s < p->n; s++)
        if ((st = gpucore_ckpt_check(p->st[s].ck, op)))
            return gpucore_set_error(st, "%s: stage %d: %s", op, s, gpucore_last_error());
    gpucore_context *c0 = p->st[0].ctx;
    if ((st = gpucore_check_tensor(x, op, "x"))) return st;
    if (x->ctx != c0) return gpucore_context_mismatch(op, "x", x->ctx, "stage 0", c0);
    if (!loss) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: loss is NULL", op);
    if (x->ndim < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: x is 0-d; micro-batches split dim 0", op);
    if (M < 1 || M > x->shape[0])
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: micro_batches is %lld; it must be in 1..%lld "
                                 "(x's dim 0)", op, (long long)M, (long long)x->shape[0]);
    if (dx) {
        if ((st = gpucore_check_tensor(dx, op, "dx"))) return st;
        if (dx->ctx != c0) return gpucore_context_mismatch(op, "dx", dx->ctx, "stage 0", c0);
        if (!ckpt_same_shape(dx, x->dtype, x->ndim, x->shape)) {
            char a[200], b[200];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dx is %s %s but x is %s %s", op,
                                     gpucore_dtype_name((gpucore_dtype)dx->dtype), gpucore_shape_str(dx->ndim, dx->shape, a, sizeof a),
                                     gpucore_dtype_name((gpucore_dtype)x->dtype), gpucore_shape_str(x->ndim, x->shape, b, sizeof b));
        }
    }
    return GPUCORE_OK;
}

/* Forward of micro-batch m through every stage (the fill): in[s*M+m] keeps stage s's
 * input, dys[m] the loss's gradient at the last stage. */
static gpucore_status forward_mb(pipe_state *p, gpucore_stream **cs, const gpucore_tensor *x, int64_t M, int64_t m,
                                 gpucore_tensor **in, uint64_t *offs, gpucore_tensor **dys,
                                 gpucore_pipeline_loss_fn loss, void *user)
{
    gpucore_tensor *cur = NULL;
    gpucore_status st = mb_slice(x, x->shape[0], M, m, &cur);
    for (int s = 0; !st && s < p->n; s++) {
        pipe_stage *g = &p->st[s];
        gpucore_tensor *y = NULL, *ya = NULL;
        in[s * M + m] = cur;
        offs[s * M + m] = g->ck->s->offset;
        cur = NULL;
        st = gpucore_ckpt_forward(g->ck, in[s * M + m], &y);
        if (st) return stage_error(st, s, m, "forward");
        if (s == p->n - 1) {
            st = gpucore_tensor_create(g->ctx, (gpucore_dtype)y->dtype, y->ndim, y->shape, &dys[m]);
            if (!st) {
                gpucore_clear_error();
                st = loss(user, m, y, dys[m], cs[s]);
                if (st) st = stage_error(st, s, m, "loss callback");
            }
            gpucore_ckpt_reset(g->ck);
            return st;
        }
        st = gpucore_ckpt_alias(y, &ya);
        gpucore_ckpt_reset(g->ck); /* GPipe: only the stage input is held until the backward */
        if (!st) st = transfer(g, cs[s], &ya, &p->st[s + 1], cs[s + 1], &cur);
        if (st) return stage_error(st, s, m, "send to the next stage");
    }
    gpucore_tensor_destroy(cur);
    return st;
}

/* Backward of micro-batch m through every stage, last first (the drain). */
static gpucore_status backward_mb(pipe_state *p, gpucore_stream **cs, int64_t M, int64_t m, gpucore_tensor **in,
                                  const uint64_t *offs, gpucore_tensor **dys, gpucore_tensor *dx)
{
    gpucore_tensor *g_out = dys[m];
    dys[m] = NULL;
    gpucore_status st = GPUCORE_OK;
    p->mb = m;
    for (int s = p->n - 1; !st && s >= 0; s--) {
        pipe_stage *g = &p->st[s];
        gpucore_tensor *xin = in[s * M + m], *y = NULL, *gin = NULL;
        g->ck->s->offset = offs[s * M + m]; /* the forward's random stream again */
        st = gpucore_ckpt_forward(g->ck, xin, &y);
        if (st) {
            st = stage_error(st, s, m, "recompute");
            break;
        }
        if (s > 0) st = gpucore_tensor_create(g->ctx, (gpucore_dtype)xin->dtype, xin->ndim, xin->shape, &gin);
        else if (dx) st = mb_slice(dx, dx->shape[0], M, m, &gin);
        if (!st) st = gpucore_ckpt_backward(g->ck, g_out, gin);
        if (st) st = stage_error(st, s, m, "backward");
        gpucore_tensor_destroy(g_out);
        g_out = NULL;
        gpucore_tensor_destroy(in[s * M + m]);
        in[s * M + m] = NULL;
        if (!st && s > 0) {
            st = transfer(g, cs[s], &gin, &p->st[s - 1], cs[s - 1], &g_out);
            if (st) st = stage_error(st, s, m, "send to the previous stage");
        }
        gpucore_tensor_destroy(gin);
    }
    gpucore_tensor_destroy(g_out);
    return st;
}

gpucore_status gpucore_pipeline_step(gpucore_pipeline *pipe, const gpucore_tensor *x, int64_t micro_batches,
                                     gpucore_pipeline_loss_fn loss, void *user, gpucore_tensor *dx)
{
    gpucore_status st = pipe_check(pipe, "pipeline_step");
    if (st) return st;
    pipe_state *p = pipe->p;
    if ((st = step_checks(p, x, micro_batches, loss, dx))) return st;
    const int64_t M = micro_batches;
    const int n = p->n;
    gpucore_tensor **in = calloc((size_t)(n * M), sizeof *in), **dys = calloc((size_t)M, sizeof *dys);
    uint64_t *offs = calloc((size_t)(n * M), sizeof *offs), *end_off = calloc((size_t)n, sizeof *end_off);
    gpucore_stream **cs = calloc((size_t)n, sizeof *cs);
    if (!in || !dys || !offs || !end_off || !cs) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "pipeline_step: out of host memory");
    for (int s = 0; !st && s < n; s++) st = gpucore_context_current_stream(p->st[s].ctx, &cs[s]);
    p->nmb = M;
    for (int64_t m = 0; !st && m < M; m++) st = forward_mb(p, cs, x, M, m, in, offs, dys, loss, user);
    for (int s = 0; !st && s < n; s++) end_off[s] = p->st[s].ck->s->offset;
    for (int64_t m = 0; !st && m < M; m++) st = backward_mb(p, cs, M, m, in, offs, dys, dx);
    if (st) {
        for (int s = 0; s < n; s++) gpucore_ckpt_reset(p->st[s].ck);
    } else {
        for (int s = 0; s < n; s++) p->st[s].ck->s->offset = end_off[s];
    }
    for (int64_t i = 0; in && i < n * M; i++) gpucore_tensor_destroy(in[i]);
    for (int64_t m = 0; dys && m < M; m++) gpucore_tensor_destroy(dys[m]);
    free(in);
    free(dys);
    free(offs);
    free(end_off);
    free(cs);
    return st;
}
