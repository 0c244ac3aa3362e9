/*
 * zero_gather.c — the ZeRO trainer's stage-3 parameter gathers (all-gather a
 * bucket's shards on the communicator's stream, views per parameter, stream-ordered
 * release), its memory statistics, and the executor bindings: the segment hook that
 * gathers around each segment (attach) and the resolver through which built-in
 * segments read gathered parameters and write the trainer's gradients (bind).
 */
#include <stdlib.h>
#include <string.h>
#include "zero_internal.h"
#include "checkpoint_internal.h"

static gpucore_status check_bucket(const gpucore_zero *z, int bucket, const char *op)
{
    gpucore_status st = zero_check(z, op);
    if (st) return st;
    if (bucket < 0 || bucket >= z->nbuckets)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: bucket %d of %d", op, bucket, z->nbuckets);
    return GPUCORE_OK;
}

int zero_gathered_count(const gpucore_zero *z)
{
    int n = 0;
    for (int k = 0; k < z->nbuckets; k++) n += z->b[k].param_full != NULL;
    return n;
}

gpucore_status gpucore_zero_gather(gpucore_zero *z, int bucket)
{
    const char *op = "zero_gather";
    gpucore_status st = check_bucket(z, bucket, op);
    if (st || z->stage != 3) return st;
    pthread_mutex_lock(&z->mu);
    zero_bucket *b = &z->b[bucket];
    if (b->param_full) goto out;
    gpucore_tensor *mine = NULL;
    /* everything on the comm stream: the shard was last written by the step */
    if (z->stepped_recorded && (st = gpucore_stream_wait_event(z->cs, z->stepped))) goto out;
    /* allocated on the comm stream, which writes it: reuse of its memory is then ordered after
     * the comm stream, and zero_param/release record the compute streams that read it */
    if ((st = zero_vector_on(z->ctx, (gpucore_dtype)b->dtype, zero_padded(z, b), z->cs, &b->param_full))) goto out;
    if (!st) st = gpucore_tensor_slice(b->param_full, 0, z->rank * b->shard, (z->rank + 1) * b->shard, 1, &mine);
    if (!st) st = gpucore_copy(mine, b->param_shard, z->cs);
    if (!st) st = gpucore_comm_all_gather(z->comm, b->param_full, mine, z->cs);
    if (!st) st = gpucore_event_record(b->gathered, z->cs);
    if (!st) st = zero_param_views(z, b, b->param_full, z->param_views);
    gpucore_tensor_destroy(mine);
    if (st) {
        gpucore_tensor_destroy(b->param_full);
        b->param_full = NULL;
    }
out:
    pthread_mutex_unlock(&z->mu);
    return st;
}

gpucore_status gpucore_zero_release(gpucore_zero *z, int bucket, gpucore_stream *stream)
{
    const char *op = "zero_release";
    gpucore_status st = check_bucket(z, bucket, op);
    if (st || z->stage != 3) return st;
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(z->ctx, stream, op, &ps))) return st;
    pthread_mutex_lock(&z->mu);
    zero_bucket *b = &z->b[bucket];
    if (b->param_full) {
        st = gpucore_tensor_record_stream(b->param_full, ps);
        zero_destroy_views(z->param_views, b->begin, b->end);
        gpucore_tensor_destroy(b->param_full); /* freed once ps and the comm stream have passed */
        b->param_full = NULL;
    }
    pthread_mutex_unlock(&z->mu);
    return st;
}

gpucore_status gpucore_zero_param(gpucore_zero *z, int param, gpucore_stream *stream, gpucore_tensor **out)
{
    const char *op = "zero_param";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    gpucore_status st = zero_check_param(z, param, op);
    if (st) return st;
    if (z->stage != 3) {
        *out = z->params[param];
        return GPUCORE_OK;
    }
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(z->ctx, stream, op, &ps))) return st;
    pthread_mutex_lock(&z->mu);
    zero_bucket *b = &z->b[z->bucket_of[param]];
    if (!b->param_full)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: parameter %d's bucket %d is not gathered; call "
                               "gpucore_zero_gather first (stage 3)", op, param, z->bucket_of[param]);
    else if (!(st = gpucore_tensor_record_stream(b->param_full, ps)) &&
             !(st = gpucore_stream_wait_event(ps, b->gathered)))
        *out = z->param_views[param];
    pthread_mutex_unlock(&z->mu);
    return st;
}

static int64_t bytes_of(const gpucore_tensor *t)
{
    return t ? gpucore_tensor_numel_unchecked(t) * gpucore_dtype_size((gpucore_dtype)t->dtype) : 0;
}

/* Bytes of the optimizer's state for parameter `index` (exp_avg, exp_avg_sq, momentum, master). */
static int64_t optimizer_state_bytes(gpucore_optimizer *opt, int64_t index)
{
    static const char *const names[] = {"exp_avg", "exp_avg_sq", "momentum_buffer", "master"};
    int64_t n = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        gpucore_tensor *t = NULL;
        if (gpucore_optimizer_state(opt, index, names[k], &t) == GPUCORE_OK) n += bytes_of(t);
    }
    gpucore_clear_error();
    return n;
}

gpucore_status gpucore_zero_get_stats(const gpucore_zero *zc, gpucore_zero_stats *s)
{
    const char *op = "zero_get_stats";
    gpucore_status st = zero_check(zc, op);
    if (st) return st;
    if (!s) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: stats is NULL", op);
    if (s->struct_size < (int64_t)sizeof *s)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stats.struct_size is %lld; set it to "
                                 "sizeof(gpucore_zero_stats)", op, (long long)s->struct_size);
    gpucore_zero *z = (gpucore_zero *)zc; /* the lock and the optimizer lookups are not const */
    pthread_mutex_lock(&z->mu);
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->stage = z->stage;
    s->rank = z->rank;
    s->size = z->size;
    s->buckets = z->nbuckets;
    s->numel = z->numel;
    s->shard_numel = z->shard_total;
    for (int i = 0; i < z->count && z->stage < 3; i++) s->param_bytes += bytes_of(z->params[i]);
    for (int k = 0; k < z->nbuckets; k++) {
        const zero_bucket *b = &z->b[k];
        s->param_bytes += bytes_of(b->param_shard);
        s->gathered_bytes += bytes_of(b->param_full);
        if (z->stage < 2) s->grad_bytes += bytes_of(b->grad_full);
        else s->live_grad_bytes += bytes_of(b->grad_full);
    }
    s->grad_bytes += bytes_of(z->gshard_flat);
    if (z->stage == 0)
        for (int i = 0; i < z->count; i++) s->state_bytes += optimizer_state_bytes(z->opt, i);
    else
        s->state_bytes = bytes_of(z->master_flat) + optimizer_state_bytes(z->opt, 0);
    pthread_mutex_unlock(&z->mu);
    return GPUCORE_OK;
}

/* The executor's segment hook: gather before a segment's phase (prefetching the segment
 * that runs next in forward or backward), release after it. */
static gpucore_status zero_segment_hook(void *user, int64_t segment, const char *name, int32_t phase,
                                        int32_t is_post)
{
    (void)name;
    gpucore_zero *z = user;
    gpucore_status st = zero_check(z, "zero_attach_ckpt hook");
    if (st || segment < 0 || segment >= z->nseg) return st;
    int b = z->seg_bucket[segment];
    if (b < 0) return GPUCORE_OK;
    if (is_post) return gpucore_zero_release(z, b, NULL);
    if ((st = gpucore_zero_gather(z, b))) return st;
    /* a recompute runs inside backward, where the segment after it already ran: no prefetch */
    if (phase == GPUCORE_CKPT_PHASE_RECOMPUTE) return GPUCORE_OK;
    int64_t next = phase == GPUCORE_CKPT_PHASE_BACKWARD ? segment - 1 : segment + 1;
    if (next >= 0 && next < z->nseg && z->seg_bucket[next] >= 0 && z->seg_bucket[next] != b)
        st = gpucore_zero_gather(z, z->seg_bucket[next]);
    return st;
}

gpucore_status gpucore_zero_attach_ckpt(gpucore_zero *z, gpucore_ckpt *ckpt, const int32_t *bucket_of_segment,
                                        int64_t nsegments)
{
    const char *op = "zero_attach_ckpt";
    gpucore_status st = zero_check(z, op);
    if (st) return st;
    if (!ckpt || !bucket_of_segment)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: %s is NULL", op, ckpt ? "bucket_of_segment" : "ckpt");
    int64_t n = gpucore_ckpt_segment_count(ckpt);
    if (n < 0) return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the executor was destroyed", op);
    if (nsegments != n)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: nsegments is %lld but the executor has %lld "
                                 "segments", op, (long long)nsegments, (long long)n);
    for (int64_t s = 0; s < n; s++)
        if (bucket_of_segment[s] < -1 || bucket_of_segment[s] >= z->nbuckets)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: bucket_of_segment[%lld] is %d; -1 or a bucket "
                                     "below %d", op, (long long)s, (int)bucket_of_segment[s], z->nbuckets);
    int32_t *copy = malloc(sizeof *copy * (size_t)(n ? n : 1));
    if (!copy) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    memcpy(copy, bucket_of_segment, sizeof *copy * (size_t)n);
    if ((st = gpucore_ckpt_set_segment_hook(ckpt, zero_segment_hook, z))) {
        free(copy);
        return st;
    }
    pthread_mutex_lock(&z->mu);
    free(z->seg_bucket);
    z->seg_bucket = copy;
    z->nseg = n;
    pthread_mutex_unlock(&z->mu);
    return GPUCORE_OK;
}

/* ------------------------------------------- built-in segments (bind_ckpt) */

static int key_of(gpucore_tensor *const *keys, int n, const gpucore_tensor *t)
{
    for (int i = 0; keys && i < n; i++)
        if (keys[i] == t) return i;
    return -1;
}

static gpucore_status zero_resolve(void *user, const gpucore_tensor *bound, int is_grad, gpucore_stream *stream,
                                   gpucore_tensor **now)
{
    gpucore_zero *z = user;
    gpucore_status st = zero_check(z, "zero_bind_ckpt resolver");
    if (st) return st;
    int i = key_of(is_grad ? z->bound_grads : z->bound_params, z->count, bound);
    if (i < 0) return GPUCORE_OK; /* not one of the trainer's: the bound tensor itself */
    return is_grad ? gpucore_zero_grad(z, i, stream, now) : gpucore_zero_param(z, i, stream, now);
}

static gpucore_status zero_resolved_ready(void *user, gpucore_tensor *grad, gpucore_stream *stream)
{
    gpucore_zero *z = user;
    gpucore_status st = zero_check(z, "zero_bind_ckpt resolver");
    if (st) return st;
    int i = key_of(z->grad_views, z->count, grad);
    return i < 0 ? GPUCORE_OK : gpucore_zero_mark_ready(z, i, stream);
}

static const ckpt_resolver zero_resolver = {zero_resolve, zero_resolved_ready};

void zero_unbind_ckpt(gpucore_zero *z)
{
    gpucore_ckpt *c = z->bound_ckpt;
    if (c && c->magic == GPUCORE_MAGIC_CKPT && c->s && c->s->resolver_user == z) {
        c->s->resolver = NULL;
        c->s->resolver_user = NULL;
    }
    free(z->bound_params);
    free(z->bound_grads);
    z->bound_params = z->bound_grads = NULL;
    z->bound_ckpt = NULL;
}

gpucore_status gpucore_zero_bind_ckpt(gpucore_zero *z, gpucore_ckpt *ckpt, gpucore_tensor *const *params,
                                      gpucore_tensor *const *grads)
{
    const char *op = "zero_bind_ckpt";
    gpucore_status st = zero_check(z, op);
    if (!st) st = gpucore_ckpt_check(ckpt, op);
    if (st) return st;
    if (!params) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: params is NULL", op);
    gpucore_tensor **p = calloc((size_t)z->count, sizeof *p), **g = calloc((size_t)z->count, sizeof *g);
    if (!p || !g) {
        free(p);
        free(g);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    memcpy(p, params, sizeof *p * (size_t)z->count);
    if (grads) memcpy(g, grads, sizeof *g * (size_t)z->count);
    if (z->bound_ckpt && z->bound_ckpt != ckpt)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the trainer is bound to another executor", op);
    if (!st) st = gpucore_ckpt_set_resolver(ckpt, &zero_resolver, z);
    if (st) {
        free(p);
        free(g);
        return st;
    }
    pthread_mutex_lock(&z->mu);
    free(z->bound_params);
    free(z->bound_grads);
    z->bound_params = p;
    z->bound_grads = g;
    z->bound_ckpt = ckpt;
    pthread_mutex_unlock(&z->mu);
    return GPUCORE_OK;
}
