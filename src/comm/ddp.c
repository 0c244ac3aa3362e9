/*
 * ddp.c — the data-parallel gradient reducer, once, above the backends.
 *
 * Gradients are registered in parameter order and packed into buckets in reverse
 * order (backward produces the last parameters' gradients first): bucket 0 closes
 * at >= first_bucket_bytes, later buckets at >= bucket_bytes. mark_ready copies a
 * gradient into its slot of the bucket (a gpucore_copy, or a gpucore_scale that
 * also pre-divides by the world size) on the stream that produced it and records
 * an event there. When every gradient of the next bucket in index order is in, the
 * bucket is launched: the communication stream waits on those events, optionally
 * casts the bucket to the wire dtype, allreduces it in place and casts back — all
 * queued at once, so the reduction overlaps the rest of backward. The last bucket
 * has nothing left to overlap (every gradient is in): it is queued on the stream
 * that marked its last gradient, as a collective its caller waits for (comm.c's
 * wait-back: on the CPU it runs on that stream itself, so a step whose reduction is
 * one bucket costs no thread hand-off; on CUDA it still runs on the comm stream,
 * ordered by events), and finish orders its stream after that one. Launching strictly
 * in index order makes every rank issue the same collectives in the same order
 * even if its gradients become ready in a different order.
 *
 * ZeRO-1 fits at the bucket level: launch would reduce-scatter the bucket (each rank
 * owning 1/size of it), the optimizer would update that shard, and finish would
 * all-gather parameters instead of copying gradients back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "comm_internal.h"
#include "core/mono_clock.h"

typedef struct ddp_bucket {
    int grad_begin, grad_end; /* parameter indices [begin, end) */
    int64_t numel, bytes;
    gpucore_tensor *buf;      /* contiguous, the gradients' dtype */
    gpucore_tensor *wire;     /* the wire dtype (compression) or NULL */
    int pending;              /* gradients not yet marked in this step */
} ddp_bucket;

typedef struct ddp_state ddp_state;
typedef struct trace_point { ddp_state *s; int32_t kind, index; } trace_point;

struct ddp_state {
    gpucore_comm *comm;
    gpucore_context *ctx;
    gpucore_ddp_options opt;
    int32_t dtype;
    int ngrads;
    gpucore_tensor **grads;   /* the caller's */
    gpucore_tensor **slots;   /* each gradient's view into its bucket, with the gradient's shape */
    gpucore_event **ready;    /* per gradient: recorded after its copy into the bucket */
    gpucore_stream **ready_on; /* per gradient: the stream `ready` was recorded on in this step */
    int *bucket_of;
    char *marked;
    char *viewed;             /* per gradient: it lives in its bucket (gpucore_ddp_grad_view) */
    int nbuckets;
    ddp_bucket *buckets;
    trace_point *start_points, *done_points; /* per bucket, for the stream callbacks */
    int next_launch;
    gpucore_stream *last_on;  /* the stream the last bucket's reduction is ordered on in this step */
    uint64_t last_seq;
    int no_sync;
    int64_t step;
    gpucore_event *reduced, *finished;
    int finished_recorded;
    uint64_t group_gen;       /* the comm group (comm_group.c) a bucket of this reducer was last launched in */
    uint64_t finished_in;     /* the comm group the last step was finished in */
    pthread_mutex_t mu;
    pthread_mutex_t trace_mu;
    gpucore_ddp_trace_event *trace;
    int trace_count, trace_cap;
};

struct gpucore_ddp {
    uint32_t magic;
    ddp_state *s;
};

/* Reducer handles come from a handle pool, so a destroyed one is detected on use. */
static gpucore_handle_pool ddp_handle_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_ddp));

static void trace_add(ddp_state *s, int32_t kind, int32_t index)
{
    if (!s->opt.trace) return;
    pthread_mutex_lock(&s->trace_mu);
    if (s->trace_count == s->trace_cap) {
        int cap = s->trace_cap ? s->trace_cap * 2 : 256;
        gpucore_ddp_trace_event *grown = realloc(s->trace, sizeof *grown * (size_t)cap);
        if (!grown) { pthread_mutex_unlock(&s->trace_mu); return; } /* a trace is best effort */
        s->trace = grown;
        s->trace_cap = cap;
    }
    /* s->step is advanced by ddp_finish under s->mu while stream callbacks trace here from the
     * worker threads: read it atomically (found by TSan: a bucket's done callback can still run
     * as the host thread finishes the step). */
    const int64_t step = __atomic_load_n(&s->step, __ATOMIC_RELAXED);
    s->trace[s->trace_count++] = (gpucore_ddp_trace_event){kind, index, step, (int64_t)gpucore_clock_ns()};
    pthread_mutex_unlock(&s->trace_mu);
}

static void trace_cb(void *arg)
{
    trace_point *p = arg;
    trace_add(p->s, p->kind, p->index);
}

static gpucore_status check_ddp(const gpucore_ddp *d, const char *op)
{
    if (!d) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the reducer is NULL", op);
    if (d->magic != GPUCORE_MAGIC_DDP || !d->s)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the reducer was destroyed or never created", op);
    return gpucore_check_comm(d->s->comm, op);
}

void gpucore_ddp_options_default(gpucore_ddp_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->first_bucket_bytes = 1 << 20;
    o->bucket_bytes = 25 << 20;
    o->wire_dtype = -1;
    o->average = 1;
    o->trace = 0;
}

static void state_free(ddp_state *s)
{
    if (!s) return;
    for (int g = 0; g < s->ngrads; g++) {
        if (s->slots) gpucore_tensor_destroy(s->slots[g]);
        if (s->ready) gpucore_event_destroy(s->ready[g]);
    }
    for (int b = 0; b < s->nbuckets && s->buckets; b++) {
        gpucore_tensor_destroy(s->buckets[b].buf);
        gpucore_tensor_destroy(s->buckets[b].wire);
    }
    gpucore_event_destroy(s->reduced);
    gpucore_event_destroy(s->finished);
    free(s->grads);
    free(s->slots);
    free(s->ready);
    free(s->ready_on);
    free(s->bucket_of);
    free(s->marked);
    free(s->viewed);
    free(s->buckets);
    free(s->start_points);
    free(s->done_points);
    free(s->trace);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->trace_mu);
    free(s);
}

/* Options: validate and fill defaults. */
static gpucore_status read_options(const gpucore_ddp_options *in, int32_t grad_dtype, gpucore_ddp_options *o)
{
    const char *op = "ddp_create";
    gpucore_ddp_options_default(o);
    if (!in) return GPUCORE_OK;
    if (in->struct_size < (int64_t)sizeof *o)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: options.struct_size is %lld; set it to "
                                 "sizeof(gpucore_ddp_options) (or fill with gpucore_ddp_options_default)", op,
                                 (long long)in->struct_size);
    if (in->first_bucket_bytes < 0 || in->bucket_bytes < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: bucket sizes must be >= 0 (0: the default)", op);
    if (in->first_bucket_bytes) o->first_bucket_bytes = in->first_bucket_bytes;
    if (in->bucket_bytes) o->bucket_bytes = in->bucket_bytes;
    if (in->wire_dtype != -1 && in->wire_dtype != GPUCORE_BF16 && in->wire_dtype != GPUCORE_F16 &&
        in->wire_dtype != grad_dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: wire_dtype %d; use -1 (the gradients' dtype), "
                                 "GPUCORE_BF16 or GPUCORE_F16", op, (int)in->wire_dtype);
    o->wire_dtype = in->wire_dtype == grad_dtype ? -1 : in->wire_dtype;
    if (in->average != 0 && in->average != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: average is %d; 1 (mean) or 0 (sum)", op,
                                 (int)in->average);
    o->average = in->average;
    o->trace = in->trace ? 1 : 0;
    return GPUCORE_OK;
}

gpucore_status gpucore_ddp_create(gpucore_comm *comm, gpucore_tensor *const *grads, int count,
                                  const gpucore_ddp_options *opts, gpucore_ddp **out)
{
    const char *op = "ddp_create";
    gpucore_status st = gpucore_check_comm(comm, op);
    if (st) return st;
    if (!grads || !out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: %s is NULL", op, grads ? "out" : "grads");
    *out = NULL;
    if (count < 1) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: count is %d; need >= 1", op, count);
    gpucore_context *ctx = comm->s->ctx;
    for (int g = 0; g < count; g++) {
        char arg[32];
        snprintf(arg, sizeof arg, "grads[%d]", g);
        if ((st = gpucore_check_tensor(grads[g], op, arg))) return st;
        const gpucore_tensor *t = grads[g];
        if (t->ctx != ctx)
            return gpucore_context_mismatch(op, arg, t->ctx, "the communicator", ctx);
        if (t->dtype != GPUCORE_F32 && t->dtype != GPUCORE_F16 && t->dtype != GPUCORE_BF16)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s is %s; gradients are f32, f16 or bf16", op,
                                     arg, gpucore_dtype_name((gpucore_dtype)t->dtype));
        if (t->dtype != grads[0]->dtype)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s is %s but grads[0] is %s; use one reducer per "
                                     "dtype", op, arg, gpucore_dtype_name((gpucore_dtype)t->dtype),
                                     gpucore_dtype_name((gpucore_dtype)grads[0]->dtype));
        if (!gpucore_tensor_contiguous_unchecked(t))
            return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s is not contiguous", op, arg);
        for (int h = 0; h < g; h++)
            if (grads[h]->storage == t->storage && grads[h]->offset == t->offset)
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: grads[%d] and grads[%d] are the same "
                                         "tensor", op, h, g);
    }
    ddp_state *s = calloc(1, sizeof *s);
    if (!s) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->trace_mu, NULL);
    s->comm = comm;
    s->ctx = ctx;
    s->dtype = grads[0]->dtype;
    if ((st = read_options(opts, s->dtype, &s->opt))) { state_free(s); return st; }
    s->ngrads = count;
    s->grads = calloc((size_t)count, sizeof *s->grads);
    s->slots = calloc((size_t)count, sizeof *s->slots);
    s->ready = calloc((size_t)count, sizeof *s->ready);
    s->ready_on = calloc((size_t)count, sizeof *s->ready_on);
    s->bucket_of = calloc((size_t)count, sizeof *s->bucket_of);
    s->marked = calloc((size_t)count, 1);
    s->viewed = calloc((size_t)count, 1);
    s->buckets = calloc((size_t)count, sizeof *s->buckets); /* at most one bucket per gradient */
    if (!s->grads || !s->slots || !s->ready || !s->ready_on || !s->bucket_of || !s->marked || !s->viewed || !s->buckets) {
        state_free(s);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    memcpy(s->grads, grads, sizeof *s->grads * (size_t)count);

    /* Buckets in reverse parameter order. */
    int64_t *offset = calloc((size_t)count, sizeof *offset);
    if (!offset) { state_free(s); return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op); }
    int64_t es = gpucore_dtype_size((gpucore_dtype)s->dtype), cap = s->opt.first_bucket_bytes;
    ddp_bucket *cur = NULL;
    for (int g = count - 1; g >= 0; g--) {
        if (!cur) {
            cur = &s->buckets[s->nbuckets++];
            cur->grad_end = g + 1;
        }
        int64_t n = gpucore_tensor_numel_unchecked(grads[g]);
        offset[g] = cur->numel;
        cur->numel += n;
        cur->bytes += n * es;
        cur->grad_begin = g;
        s->bucket_of[g] = s->nbuckets - 1;
        if (cur->bytes >= cap) { cur = NULL; cap = s->opt.bucket_bytes; }
    }
    s->start_points = calloc((size_t)s->nbuckets, sizeof *s->start_points);
    s->done_points = calloc((size_t)s->nbuckets, sizeof *s->done_points);
    st = s->start_points && s->done_points ? GPUCORE_OK
                                           : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int b = 0; !st && b < s->nbuckets; b++) {
        ddp_bucket *k = &s->buckets[b];
        k->pending = k->grad_end - k->grad_begin;
        s->start_points[b] = (trace_point){s, GPUCORE_DDP_TRACE_START, b};
        s->done_points[b] = (trace_point){s, GPUCORE_DDP_TRACE_DONE, b};
        if ((st = gpucore_tensor_create(ctx, (gpucore_dtype)s->dtype, 1, &k->numel, &k->buf))) break;
        if (s->opt.wire_dtype >= 0)
            st = gpucore_tensor_create(ctx, (gpucore_dtype)s->opt.wire_dtype, 1, &k->numel, &k->wire);
    }
    for (int g = 0; !st && g < count; g++) {
        gpucore_tensor *flat = NULL;
        const gpucore_tensor *t = grads[g];
        int64_t n = gpucore_tensor_numel_unchecked(t);
        if (!(st = gpucore_tensor_slice(s->buckets[s->bucket_of[g]].buf, 0, offset[g], offset[g] + n, 1, &flat))) {
            st = gpucore_tensor_reshape(flat, t->ndim, t->shape, &s->slots[g]);
            gpucore_tensor_destroy(flat);
        }
        if (!st) st = gpucore_event_create_untimed(ctx, &s->ready[g]);
    }
    free(offset);
    /* The bucket buffers come from the current stream's pool, where a block's last user may still be queued;
     * the comm stream and any marking stream write them later, so that stream is drained once here (set-up). */
    gpucore_stream *alloc_stream = NULL;
    if (!st) st = gpucore_resolve_stream(ctx, NULL, op, &alloc_stream);
    if (!st) st = gpucore_stream_synchronize(alloc_stream);
    if (!st) st = gpucore_event_create_untimed(ctx, &s->reduced);
    if (!st) st = gpucore_event_create_untimed(ctx, &s->finished);
    gpucore_ddp *d = st ? NULL : gpucore_handle_alloc(&ddp_handle_pool);
    if (!st && !d) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (st) { state_free(s); return st; }
    d->s = s;
    d->magic = GPUCORE_MAGIC_DDP;
    *out = d;
    gpucore_log(GPUCORE_LOG_DEBUG, "ddp: %d gradients in %d buckets (first %lld bytes, then %lld) on rank %d of %d",
                count, s->nbuckets, (long long)s->opt.first_bucket_bytes, (long long)s->opt.bucket_bytes,
                comm->s->rank, comm->s->size);
    return GPUCORE_OK;
}

gpucore_status gpucore_ddp_destroy(gpucore_ddp *ddp)
{
    if (!ddp) return GPUCORE_OK;
    if (!ddp->s || ddp->magic != GPUCORE_MAGIC_DDP)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "ddp_destroy: the reducer was destroyed or never created");
    ddp_state *s = ddp->s;
    if (s->group_gen && s->group_gen == gpucore_comm_group_generation())
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ddp_destroy: the reducer has reductions in the comm "
                                 "group open on this thread; end the group first");
    ddp->magic = GPUCORE_MAGIC_DEAD;
    ddp->s = NULL;
    if (gpucore_check_comm(s->comm, "ddp_destroy") == GPUCORE_OK) gpucore_comm_wait(s->comm, s->last_seq, -1);
    if (s->ctx->magic == GPUCORE_MAGIC_CONTEXT) {
        gpucore_context_synchronize(s->ctx);
        state_free(s);
    }
    gpucore_handle_release(&ddp_handle_pool, ddp); /* recycled only after a quarantine */
    gpucore_clear_error();
    return GPUCORE_OK;
}

gpucore_status gpucore_ddp_bucket_count(const gpucore_ddp *ddp, int *count)
{
    gpucore_status st = check_ddp(ddp, "ddp_bucket_count");
    if (st) return st;
    if (!count) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ddp_bucket_count: count is NULL");
    *count = ddp->s->nbuckets;
    return GPUCORE_OK;
}

gpucore_status gpucore_ddp_bucket_info(const gpucore_ddp *ddp, int bucket, int *grad_begin, int *grad_end,
                                       int64_t *bytes)
{
    gpucore_status st = check_ddp(ddp, "ddp_bucket_info");
    if (st) return st;
    if (bucket < 0 || bucket >= ddp->s->nbuckets)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ddp_bucket_info: bucket %d of %d", bucket,
                                 ddp->s->nbuckets);
    const ddp_bucket *k = &ddp->s->buckets[bucket];
    if (grad_begin) *grad_begin = k->grad_begin;
    if (grad_end) *grad_end = k->grad_end;
    if (bytes) *bytes = k->bytes;
    return GPUCORE_OK;
}

gpucore_status gpucore_ddp_set_no_sync(gpucore_ddp *ddp, int no_sync)
{
    gpucore_status st = check_ddp(ddp, "ddp_set_no_sync");
    if (st) return st;
    ddp_state *s = ddp->s;
    pthread_mutex_lock(&s->mu);
    int mid_step = 0;
    for (int g = 0; g < s->ngrads; g++) mid_step |= s->marked[g];
    if (!mid_step) s->no_sync = no_sync ? 1 : 0;
    pthread_mutex_unlock(&s->mu);
    if (mid_step)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ddp_set_no_sync: gradients were already marked ready "
                                 "in this step; switch before backward starts (or after finish)");
    return GPUCORE_OK;
}

gpucore_status gpucore_ddp_grad_view(gpucore_ddp *ddp, int grad, gpucore_tensor **out)
{
    const char *op = "ddp_grad_view";
    gpucore_status st = check_ddp(ddp, op);
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    ddp_state *s = ddp->s;
    if (grad < 0 || grad >= s->ngrads)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d of %d", op, grad, s->ngrads);
    pthread_mutex_lock(&s->mu);
    int mid_step = 0;
    for (int g = 0; g < s->ngrads; g++) mid_step |= s->marked[g];
    if (mid_step) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradients were already marked ready in this step; "
                               "take views before backward starts (or after finish)", op);
    } else {
        const gpucore_tensor *slot = s->slots[grad];
        st = gpucore_tensor_reshape(s->slots[grad], slot->ndim, slot->shape, out);
        /* the view starts with the gradient's current value, after the last step's copy back
         * (a host wait: a set-up call) */
        if (!st && !s->viewed[grad]) {
            gpucore_stream *cur = NULL;
            if (!(st = gpucore_resolve_stream(s->ctx, NULL, op, &cur)) &&
                (!s->finished_recorded || !(st = gpucore_stream_wait_event(cur, s->finished))))
                st = gpucore_copy(s->slots[grad], s->grads[grad], cur);
            if (!st) st = gpucore_stream_synchronize(cur); /* the view is ready for any stream */
        }
        if (!st) s->viewed[grad] = 1;
        else { gpucore_tensor_destroy(*out); *out = NULL; }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* What follows bucket b's allreduce on stream `on`: the cast back from the wire and the traced end. Inside a
 * comm group it runs when the group ends (gpucore_comm_group_after): NCCL starts the allreduce only then. */
typedef struct bucket_after { ddp_state *s; int b; gpucore_stream *on; } bucket_after;
static gpucore_status after_bucket(void *arg)
{
    const bucket_after *a = arg;
    ddp_state *s = a->s;
    ddp_bucket *k = &s->buckets[a->b];
    gpucore_status st = GPUCORE_OK;
    /* after a group the allreduce ran on the communicator's group stream: the comm stream follows it now */
    if (a->on == s->comm->s->stream) st = gpucore_comm_order_stream(s->comm);
    if (!st && k->wire) st = gpucore_cast(k->buf, k->wire, a->on);
    if (!st && s->opt.trace) st = s->ctx->be->host_callback(s->ctx->bctx, a->on->bstream, trace_cb, &s->done_points[a->b]);
    return st;
}

/* Queue bucket b's reduction (s->mu held): on the communication stream, or, for the
 * last bucket, on ps (the stream that marked its last gradient) as a waited-for
 * collective, so ps follows the reduction without a hand-off to the comm stream.
 * Inside a comm group the cast to the wire still runs now (it feeds the allreduce
 * and touches this bucket only); what reads the result runs when the group ends. */
static gpucore_status launch_bucket(ddp_state *s, int b, gpucore_stream *ps)
{
    ddp_bucket *k = &s->buckets[b];
    const int last = b == s->nbuckets - 1;
    gpucore_stream *on = last ? ps : s->comm->s->stream;
    gpucore_status st = last ? GPUCORE_OK : gpucore_comm_order_stream(s->comm); /* after collectives run on callers' streams */
    for (int g = k->grad_begin; g < k->grad_end && !st; g++)
        if (s->ready_on[g] != on) st = gpucore_stream_wait_event(on, s->ready[g]); /* same stream: already in order */
    if (st) return st;
    trace_add(s, GPUCORE_DDP_TRACE_LAUNCH, b);
    gpucore_tensor *t = k->buf;
    if (k->wire) {
        if ((st = gpucore_cast(k->wire, k->buf, on))) return st;
        t = k->wire;
    }
    /* traced: the last bucket's start is stamped after the earlier buckets' work on the comm stream */
    if (s->opt.trace && last && ((st = gpucore_event_record(s->reduced, s->comm->s->stream)) ||
                                 (st = gpucore_stream_wait_event(on, s->reduced))))
        return st;
    if (s->opt.trace && (st = s->ctx->be->host_callback(s->ctx->bctx, on->bstream, trace_cb, &s->start_points[b])))
        return st;
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    gpucore_comm_call call = {.kind = GPUCORE_COMM_ALLREDUCE, .op = GPUCORE_REDUCE_SUM, .dtype = v.dtype,
                              .count = v.numel, .send = v.data, .recv = v.data};
    if ((st = gpucore_comm_submit(s->comm, &call, last ? ps : NULL, last, &s->last_seq))) return st;
    if (last) s->last_on = ps;
    if (gpucore_comm_group_open()) s->group_gen = gpucore_comm_group_generation();
    bucket_after a = {s, b, on};
    return gpucore_comm_group_after(after_bucket, &a, sizeof a);
}

gpucore_status gpucore_ddp_mark_ready(gpucore_ddp *ddp, int grad, gpucore_stream *stream)
{
    const char *op = "ddp_mark_ready";
    gpucore_status st = check_ddp(ddp, op);
    if (st) return st;
    ddp_state *s = ddp->s;
    if (grad < 0 || grad >= s->ngrads)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d of %d", op, grad, s->ngrads);
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(s->ctx, stream, op, &ps))) return st;
    pthread_mutex_lock(&s->mu);
    if (s->no_sync) goto out;
    if (s->marked[grad]) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d was already marked ready in this step "
                               "(call gpucore_ddp_finish between steps)", op, grad);
        goto out;
    }
    if (s->finished_in && s->finished_in == gpucore_comm_group_generation()) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the last step was finished inside the comm group "
                               "open on this thread and its reductions start only at gpucore_comm_group_end; start "
                               "the next step after ending the group", op);
        goto out;
    }
    if (s->finished_recorded && (st = gpucore_stream_wait_event(ps, s->finished))) goto out;
    int size = s->comm->s->size;
    /* the pre-division is the copy in (one pass); a gradient already in its bucket is
     * divided in place by the same op, so both give the same bits */
    const gpucore_tensor *src = s->viewed[grad] ? s->slots[grad] : s->grads[grad];
    if (s->opt.average && size > 1)
        st = gpucore_scale(s->slots[grad], src, 1.0 / size, 0.0, ps);
    else if (!s->viewed[grad])
        st = gpucore_copy(s->slots[grad], s->grads[grad], ps);
    if (st || (st = gpucore_event_record(s->ready[grad], ps))) goto out;
    s->ready_on[grad] = ps;
    s->marked[grad] = 1;
    trace_add(s, GPUCORE_DDP_TRACE_READY, grad);
    s->buckets[s->bucket_of[grad]].pending--;
    while (s->next_launch < s->nbuckets && s->buckets[s->next_launch].pending == 0) {
        if ((st = launch_bucket(s, s->next_launch, ps))) goto out;
        s->next_launch++;
    }
out:
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* The copy back into the gradients on ps, after the last bucket's reduction (ordered on last_on, after every
 * earlier bucket's); inside a comm group it runs when the group ends. */
typedef struct finish_after { ddp_state *s; gpucore_stream *ps; int grouped; } finish_after;
static gpucore_status after_finish(void *arg)
{
    const finish_after *a = arg;
    ddp_state *s = a->s;
    gpucore_stream *ps = a->ps;
    gpucore_status st = GPUCORE_OK;
    /* after a group the earlier buckets' casts back were queued on the comm stream just now, after the last
     * bucket's collective: ps follows them there */
    gpucore_stream *after = a->grouped ? s->comm->s->stream : s->last_on;
    if (after != ps &&
        ((st = gpucore_event_record(s->reduced, after)) || (st = gpucore_stream_wait_event(ps, s->reduced))))
        return st;
    for (int g = 0; g < s->ngrads && !st; g++)
        if (!s->viewed[g]) st = gpucore_copy(s->grads[g], s->slots[g], ps); /* a view already holds it */
    return st ? st : gpucore_event_record(s->finished, ps);
}

gpucore_status gpucore_ddp_finish(gpucore_ddp *ddp, gpucore_stream *stream)
{
    const char *op = "ddp_finish";
    gpucore_status st = check_ddp(ddp, op);
    if (st) return st;
    ddp_state *s = ddp->s;
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(s->ctx, stream, op, &ps))) return st;
    pthread_mutex_lock(&s->mu);
    if (s->no_sync) goto out;
    for (int g = 0; g < s->ngrads; g++)
        if (!s->marked[g]) {
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d was never marked ready in this step "
                                   "(bucket %d cannot be reduced); every rank must mark every gradient", op, g,
                                   s->bucket_of[g]);
            goto out;
        }
    /* No host wait: the copy back is ordered after the last bucket's
     * reduction by an event. A failure already known is reported now; one still to come
     * is reported by the next reducer or communicator call (and gpucore_comm_wait). */
    if ((st = s->ctx->be->comm_check(s->comm->s->bcomm))) goto out;
    finish_after a = {s, ps, s->group_gen && s->group_gen == gpucore_comm_group_generation()};
    if ((st = gpucore_comm_group_after(after_finish, &a, sizeof a))) goto out;
    s->finished_recorded = 1;
    s->finished_in = gpucore_comm_group_generation();
    memset(s->marked, 0, (size_t)s->ngrads);
    for (int b = 0; b < s->nbuckets; b++)
        s->buckets[b].pending = s->buckets[b].grad_end - s->buckets[b].grad_begin;
    s->next_launch = 0;
    trace_add(s, GPUCORE_DDP_TRACE_FINISH, -1);
    __atomic_fetch_add(&s->step, 1, __ATOMIC_RELAXED);
out:
    pthread_mutex_unlock(&s->mu);
    return st;
}

gpucore_status gpucore_ddp_trace(gpucore_ddp *ddp, gpucore_ddp_trace_event *events, int max, int *count)
{
    gpucore_status st = check_ddp(ddp, "ddp_trace");
    if (st) return st;
    if (!count || (max > 0 && !events))
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ddp_trace: %s is NULL", count ? "events" : "count");
    ddp_state *s = ddp->s;
    pthread_mutex_lock(&s->trace_mu);
    int n = s->trace_count < max ? s->trace_count : (max > 0 ? max : 0);
    if (n) memcpy(events, s->trace, sizeof *events * (size_t)n);
    *count = n;
    s->trace_count = 0;
    pthread_mutex_unlock(&s->trace_mu);
    return GPUCORE_OK;
}
