/*
 * zero.c — the ZeRO trainer (stages 0-3), above the backends: bucket layout and
 * shards, gradient buffers, per-bucket reduce-scatter launched from mark_ready
 * (so it overlaps the rest of backward), and the sharded optimizer step with one
 * small allreduce for found-inf and the global gradient norm.
 *
 * Layout: bucket b (parameters in reverse order, one dtype) is flattened and padded
 * to N * shard_b; rank r owns slice r of it. The equal-count reduce-scatter and
 * all-gather of the public communicator API then fit without a "v" variant: the
 * padding (zeros, at most N-1 elements per bucket) is what makes uneven sizes work.
 * The rank's shards of all buckets are packed in one f32 master buffer and one f32
 * gradient-shard buffer, so the optimizer step, the unscale and the norm are one
 * fused op each over the whole shard.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_internal.h"
#include "comm/comm_internal.h" /* comm groups: gpucore_comm_group_after */

static gpucore_handle_pool zero_handle_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_zero));

gpucore_status zero_check(const gpucore_zero *z, const char *op)
{
    if (!z) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the trainer is NULL", op);
    if (z->magic != GPUCORE_MAGIC_ZERO)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the trainer was destroyed or never created", op);
    if (gpucore_comm_size(z->comm) < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the trainer's communicator was destroyed; destroy "
                                 "the trainer first", op);
    return GPUCORE_OK;
}

gpucore_status zero_check_param(const gpucore_zero *z, int param, const char *op)
{
    gpucore_status st = zero_check(z, op);
    if (st) return st;
    if (param < 0 || param >= z->count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: parameter %d of %d", op, param, z->count);
    return GPUCORE_OK;
}

void gpucore_zero_options_default(gpucore_zero_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->stage = 1;
    o->average = 1;
    o->bucket_bytes = 25 << 20;
}

gpucore_status zero_vector(gpucore_context *ctx, gpucore_dtype dtype, int64_t n, gpucore_tensor **out)
{
    return gpucore_tensor_create(ctx, dtype, 1, &n, out);
}

gpucore_status gpucore_train_tensor_on(gpucore_context *ctx, gpucore_dtype dtype, int ndim, const int64_t *shape,
                                      gpucore_stream *stream, gpucore_tensor **out)
{
    /* the current stream is per thread: switch it for this one allocation */
    gpucore_stream *cur = NULL;
    gpucore_status st = gpucore_context_current_stream(ctx, &cur);
    if (st || (st = gpucore_context_set_current_stream(ctx, stream))) return st;
    st = gpucore_tensor_create(ctx, dtype, ndim, shape, out);
    gpucore_status st2 = gpucore_context_set_current_stream(ctx, cur);
    return st ? st : st2;
}

gpucore_status zero_vector_on(gpucore_context *ctx, gpucore_dtype dtype, int64_t n, gpucore_stream *stream,
                              gpucore_tensor **out)
{
    return gpucore_train_tensor_on(ctx, dtype, 1, &n, stream, out);
}

gpucore_status zero_convert(gpucore_tensor *dst, const gpucore_tensor *src, gpucore_stream *s)
{
    return dst->dtype == src->dtype ? gpucore_copy(dst, src, s) : gpucore_cast(dst, src, s);
}

void zero_destroy_views(gpucore_tensor **views, int begin, int end)
{
    for (int i = begin; i < end; i++) {
        gpucore_tensor_destroy(views[i]);
        views[i] = NULL;
    }
}

gpucore_status zero_param_views(gpucore_zero *z, const zero_bucket *b, gpucore_tensor *full, gpucore_tensor **views)
{
    gpucore_status st = GPUCORE_OK;
    for (int i = b->begin; i < b->end && !st; i++) {
        gpucore_tensor *flat = NULL;
        int64_t n = 1;
        for (int d = 0; d < z->ndims[i]; d++) n *= z->shapes[i][d];
        if (!(st = gpucore_tensor_slice(full, 0, z->param_off[i], z->param_off[i] + n, 1, &flat))) {
            st = gpucore_tensor_reshape(flat, z->ndims[i], z->shapes[i], &views[i]);
            gpucore_tensor_destroy(flat);
        }
    }
    if (st) zero_destroy_views(views, b->begin, b->end);
    return st;
}

static void zero_free(gpucore_zero *z)
{
    for (int k = 0; k < z->nbuckets && z->b; k++) {
        zero_bucket *b = &z->b[k];
        gpucore_tensor_destroy(b->grad_full);
        gpucore_tensor_destroy(b->param_full);
        gpucore_tensor_destroy(b->param_shard);
        gpucore_tensor_destroy(b->master);
        gpucore_tensor_destroy(b->gshard);
        gpucore_event_destroy(b->gathered);
    }
    for (int i = 0; i < z->count; i++) {
        if (z->grad_views) gpucore_tensor_destroy(z->grad_views[i]);
        if (z->param_views) gpucore_tensor_destroy(z->param_views[i]);
        if (z->ready) gpucore_event_destroy(z->ready[i]);
    }
    gpucore_optimizer_destroy(z->opt);
    gpucore_tensor_destroy(z->master_flat);
    gpucore_tensor_destroy(z->gshard_flat);
    gpucore_tensor_destroy(z->combine);
    gpucore_tensor_destroy(z->norm);
    gpucore_tensor_destroy(z->coef);
    gpucore_event_destroy(z->stepped);
    gpucore_event_destroy(z->cs_mark);
    free(z->params);
    free(z->shapes);
    free(z->ndims);
    free(z->dtypes);
    free(z->param_off);
    free(z->bucket_of);
    free(z->marked);
    free(z->grad_views);
    free(z->param_views);
    free(z->ready);
    free(z->b);
    free(z->seg_bucket);
    zero_unbind_ckpt(z);
    pthread_mutex_destroy(&z->mu);
}

static gpucore_status read_options(const gpucore_zero_options *in, gpucore_zero_options *o, int count)
{
    const char *op = "zero_create";
    gpucore_zero_options_default(o);
    if (!in) return GPUCORE_OK;
    if (in->struct_size < (int64_t)sizeof *o)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: options.struct_size is %lld; set it to "
                                 "sizeof(gpucore_zero_options) (or fill with gpucore_zero_options_default)", op,
                                 (long long)in->struct_size);
    if (in->stage < 0 || in->stage > 3)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stage is %d; use 0, 1, 2 or 3", op, (int)in->stage);
    if (in->average != 0 && in->average != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: average is %d; 1 (mean) or 0 (sum)", op,
                                 (int)in->average);
    if (in->bucket_bytes < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: bucket_bytes is %lld; must be >= 0 (0: the "
                                 "default)", op, (long long)in->bucket_bytes);
    if (!(in->max_grad_norm >= 0) || !isfinite(in->max_grad_norm))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: max_grad_norm is %g; > 0 to clip, 0 for none", op,
                                 in->max_grad_norm);
    *o = *in;
    o->struct_size = sizeof *o;
    if (!o->bucket_bytes) o->bucket_bytes = 25 << 20;
    (void)count;
    return GPUCORE_OK;
}

static gpucore_status check_params(gpucore_context *ctx, gpucore_tensor *const *params, int count)
{
    const char *op = "zero_create";
    for (int i = 0; i < count; i++) {
        char arg[32];
        snprintf(arg, sizeof arg, "params[%d]", i);
        gpucore_status st = gpucore_check_tensor(params[i], op, arg);
        if (st) return st;
        const gpucore_tensor *t = params[i];
        if (t->ctx != ctx) return gpucore_context_mismatch(op, arg, t->ctx, "the communicator", ctx);
        if (t->dtype != GPUCORE_F32 && t->dtype != GPUCORE_F16 && t->dtype != GPUCORE_BF16)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s is %s; parameters are f32, f16 or bf16", op,
                                     arg, gpucore_dtype_name((gpucore_dtype)t->dtype));
        if (!gpucore_tensor_contiguous_unchecked(t))
            return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s is not contiguous", op, arg);
        if (gpucore_tensor_numel_unchecked(t) == 0)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s is empty; leave empty tensors out", op, arg);
        for (int h = 0; h < i; h++)
            if (params[h]->storage == t->storage && params[h]->offset == t->offset)
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: params[%d] and params[%d] are the same "
                                         "tensor", op, h, i);
    }
    return GPUCORE_OK;
}

/* Buckets in reverse parameter order; shard offsets in bucket order. */
static void plan_buckets(gpucore_zero *z)
{
    zero_bucket *cur = NULL;
    int64_t off = 0;
    for (int i = z->count - 1; i >= 0; i--) {
        int64_t n = 1;
        for (int d = 0; d < z->ndims[i]; d++) n *= z->shapes[i][d];
        int64_t es = gpucore_dtype_size((gpucore_dtype)z->dtypes[i]);
        if (cur && (cur->dtype != z->dtypes[i] || (z->o.units && z->o.units[i] != z->o.units[i + 1])))
            cur = NULL;
        if (!cur) {
            cur = &z->b[z->nbuckets++];
            cur->end = i + 1;
            cur->dtype = z->dtypes[i];
        }
        cur->begin = i;
        z->param_off[i] = 0; /* fixed below, in forward order inside the bucket */
        cur->numel += n;
        z->bucket_of[i] = z->nbuckets - 1;
        z->numel += n;
        if (cur->numel * es >= z->o.bucket_bytes) cur = NULL;
    }
    for (int k = 0; k < z->nbuckets; k++) {
        zero_bucket *b = &z->b[k];
        int64_t o = 0;
        for (int i = b->begin; i < b->end; i++) {
            z->param_off[i] = o;
            int64_t n = 1;
            for (int d = 0; d < z->ndims[i]; d++) n *= z->shapes[i][d];
            o += n;
        }
        b->shard = z->stage == 0 ? b->numel : (b->numel + z->size - 1) / z->size;
        b->shard_off = off;
        off += b->shard;
        b->pending = b->end - b->begin;
        b->zero_pending = 1;
    }
    z->shard_total = z->stage == 0 ? 0 : off;
}

/* The rank's f32 master shard of bucket b from the parameters (zeros in the padding),
 * and at stage 3 the compute-dtype parameter shard. */
static gpucore_status init_shard(gpucore_zero *z, zero_bucket *b, gpucore_tensor *const *params, gpucore_stream *s)
{
    gpucore_tensor *full = NULL, *mine = NULL;
    gpucore_tensor **views = calloc((size_t)z->count, sizeof *views);
    if (!views) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "zero_create: out of host memory");
    gpucore_status st = zero_vector(z->ctx, GPUCORE_F32, zero_padded(z, b), &full);
    if (!st) st = gpucore_fill(full, 0.0, s);
    if (!st) st = zero_param_views(z, b, full, views);
    for (int i = b->begin; i < b->end && !st; i++) st = zero_convert(views[i], params[i], s);
    zero_destroy_views(views, b->begin, b->end);
    free(views);
    if (!st) st = gpucore_tensor_slice(full, 0, z->rank * b->shard, (z->rank + 1) * b->shard, 1, &mine);
    if (!st) st = gpucore_copy(b->master, mine, s);
    if (!st && z->stage == 3 && !(st = zero_vector(z->ctx, (gpucore_dtype)b->dtype, b->shard, &b->param_shard)))
        st = zero_convert(b->param_shard, mine, s);
    gpucore_tensor_destroy(mine);
    gpucore_tensor_destroy(full);
    return st;
}

static gpucore_status create_state(gpucore_zero *z, gpucore_tensor *const *params)
{
    gpucore_stream *s = NULL;
    gpucore_status st = gpucore_resolve_stream(z->ctx, NULL, "zero_create", &s);
    /* ordering only, never timed (a timed event costs more to record and query) */
    for (int i = 0; !st && i < z->count; i++) st = gpucore_event_create_untimed(z->ctx, &z->ready[i]);
    if (!st) st = gpucore_event_create_untimed(z->ctx, &z->stepped);
    if (!st) st = gpucore_event_create_untimed(z->ctx, &z->cs_mark);
    if (!st) st = zero_vector(z->ctx, GPUCORE_F32, 2, &z->combine);
    if (!st) st = gpucore_scalar_tensor_new(z->ctx, GPUCORE_F32, 0.0, &z->norm);
    if (!st) st = gpucore_scalar_tensor_new(z->ctx, GPUCORE_F32, 1.0, &z->coef);
    if (st) return st;
    if (z->stage == 0) {
        for (int k = 0; k < z->nbuckets && !st; k++)
            st = zero_vector(z->ctx, (gpucore_dtype)z->b[k].dtype, z->b[k].numel, &z->b[k].grad_full);
        for (int k = 0; k < z->nbuckets && !st; k++) st = zero_param_views(z, &z->b[k], z->b[k].grad_full, z->grad_views);
        if (!st) st = gpucore_optimizer_create(z->ctx, &z->cfg, params, z->count, &z->opt);
        return st;
    }
    if ((st = zero_vector(z->ctx, GPUCORE_F32, z->shard_total, &z->master_flat))) return st;
    if ((st = zero_vector(z->ctx, GPUCORE_F32, z->shard_total, &z->gshard_flat))) return st;
    if ((st = gpucore_fill(z->gshard_flat, 0.0, s))) return st;
    for (int k = 0; k < z->nbuckets && !st; k++) {
        zero_bucket *b = &z->b[k];
        st = gpucore_tensor_slice(z->master_flat, 0, b->shard_off, b->shard_off + b->shard, 1, &b->master);
        if (!st) st = gpucore_tensor_slice(z->gshard_flat, 0, b->shard_off, b->shard_off + b->shard, 1, &b->gshard);
        if (!st) st = init_shard(z, b, params, s);
        if (!st && z->stage == 1) st = zero_vector(z->ctx, (gpucore_dtype)b->dtype, zero_padded(z, b), &b->grad_full);
        if (!st && z->stage == 1) st = zero_param_views(z, b, b->grad_full, z->grad_views);
        if (!st && z->stage == 3) st = gpucore_event_create_untimed(z->ctx, &b->gathered);
    }
    if (!st) st = gpucore_stream_synchronize(s); /* the optimizer reads the master shard */
    if (!st) st = gpucore_optimizer_create(z->ctx, &z->cfg, &z->master_flat, 1, &z->opt);
    return st;
}

gpucore_status gpucore_zero_create(gpucore_comm *comm, gpucore_tensor *const *params, int count,
                                   const gpucore_optimizer_config *cfg, const gpucore_zero_options *opts,
                                   gpucore_zero **out)
{
    const char *op = "zero_create";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    if (!comm || !params || !cfg)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: %s is NULL", op,
                                 !comm ? "comm" : !params ? "params" : "cfg");
    gpucore_context *ctx = NULL;
    gpucore_status st = gpucore_comm_context(comm, &ctx);
    if (st) return st;
    if (count < 1) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: count is %d; need >= 1", op, count);
    if ((st = check_params(ctx, params, count))) return st;
    gpucore_zero_options o;
    if ((st = read_options(opts, &o, count))) return st;
    if (cfg->struct_size < (int64_t)sizeof *cfg)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: cfg.struct_size is %lld; fill it with "
                                 "gpucore_optimizer_config_default", op, (long long)cfg->struct_size);
    gpucore_zero *z = gpucore_handle_alloc(&zero_handle_pool);
    if (!z) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    memset(z, 0, sizeof *z);
    pthread_mutex_init(&z->mu, NULL);
    z->comm = comm;
    z->ctx = ctx;
    z->rank = gpucore_comm_rank(comm);
    z->size = gpucore_comm_size(comm);
    z->stage = o.stage;
    z->count = count;
    z->o = o;
    z->o.units = NULL; /* read now, not kept */
    z->cfg = *cfg;
    z->params = calloc((size_t)count, sizeof *z->params);
    z->shapes = calloc((size_t)count, sizeof *z->shapes);
    z->ndims = calloc((size_t)count, sizeof *z->ndims);
    z->dtypes = calloc((size_t)count, sizeof *z->dtypes);
    z->param_off = calloc((size_t)count, sizeof *z->param_off);
    z->bucket_of = calloc((size_t)count, sizeof *z->bucket_of);
    z->marked = calloc((size_t)count, 1);
    z->grad_views = calloc((size_t)count, sizeof *z->grad_views);
    z->param_views = calloc((size_t)count, sizeof *z->param_views);
    z->ready = calloc((size_t)count, sizeof *z->ready);
    z->b = calloc((size_t)count, sizeof *z->b);
    st = gpucore_comm_stream(comm, &z->cs);
    if (!st && (!z->params || !z->shapes || !z->ndims || !z->dtypes || !z->param_off || !z->bucket_of || !z->marked ||
                !z->grad_views || !z->param_views || !z->ready || !z->b))
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (!st) {
        for (int i = 0; i < count; i++) {
            z->params[i] = o.stage == 3 ? NULL : params[i];
            z->ndims[i] = params[i]->ndim;
            z->dtypes[i] = params[i]->dtype;
            memcpy(z->shapes[i], params[i]->shape, sizeof z->shapes[i]);
        }
        z->o.units = o.units;
        plan_buckets(z);
        z->o.units = NULL;
        st = create_state(z, params);
    }
    if (st) {
        gpucore_status keep = st;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", gpucore_last_error());
        gpucore_context_synchronize(ctx);
        zero_free(z);
        gpucore_handle_release(&zero_handle_pool, z);
        return gpucore_set_error(keep, "%s", msg);
    }
    z->magic = GPUCORE_MAGIC_ZERO;
    *out = z;
    gpucore_log(GPUCORE_LOG_DEBUG, "zero: stage %d, %d parameters (%lld elements) in %d buckets, shard %lld elements "
                "on rank %d of %d", z->stage, count, (long long)z->numel, z->nbuckets, (long long)z->shard_total,
                z->rank, z->size);
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_destroy(gpucore_zero *z)
{
    if (!z) return GPUCORE_OK;
    if (z->magic != GPUCORE_MAGIC_ZERO)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "zero_destroy: the trainer was destroyed or never created");
    if (z->group_gen && z->group_gen == gpucore_comm_group_generation())
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "zero_destroy: the trainer has reductions in the comm "
                                 "group open on this thread; end the group first");
    z->magic = GPUCORE_MAGIC_DEAD;
    if (gpucore_comm_size(z->comm) > 0) gpucore_comm_wait(z->comm, 0, -1);
    gpucore_context_synchronize(z->ctx);
    zero_free(z);
    gpucore_handle_release(&zero_handle_pool, z);
    gpucore_clear_error();
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_bucket_count(const gpucore_zero *z, int *count)
{
    gpucore_status st = zero_check(z, "zero_bucket_count");
    if (st) return st;
    if (!count) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "zero_bucket_count: count is NULL");
    *count = z->nbuckets;
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_bucket_info(const gpucore_zero *z, int bucket, int *param_begin, int *param_end,
                                        int64_t *numel, int64_t *shard)
{
    gpucore_status st = zero_check(z, "zero_bucket_info");
    if (st) return st;
    if (bucket < 0 || bucket >= z->nbuckets)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "zero_bucket_info: bucket %d of %d", bucket,
                                 z->nbuckets);
    const zero_bucket *b = &z->b[bucket];
    if (param_begin) *param_begin = b->begin;
    if (param_end) *param_end = b->end;
    if (numel) *numel = b->numel;
    if (shard) *shard = b->shard;
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_bucket_of(const gpucore_zero *z, int param, int *bucket)
{
    gpucore_status st = zero_check_param(z, param, "zero_bucket_of");
    if (st) return st;
    if (!bucket) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "zero_bucket_of: bucket is NULL");
    *bucket = z->bucket_of[param];
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_grad(gpucore_zero *z, int param, gpucore_stream *stream, gpucore_tensor **grad)
{
    const char *op = "zero_grad";
    if (!grad) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: grad is NULL", op);
    *grad = NULL;
    gpucore_status st = zero_check_param(z, param, op);
    if (st) return st;
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(z->ctx, stream, op, &ps))) return st;
    pthread_mutex_lock(&z->mu);
    zero_bucket *b = &z->b[z->bucket_of[param]];
    if (z->marked[param]) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d was already marked ready in this round",
                               op, param);
        goto out;
    }
    if (b->group_gen && b->group_gen == gpucore_comm_group_generation()) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d's bucket was reduced in the comm group "
                               "open on this thread, whose collectives start only at gpucore_comm_group_end; start "
                               "the next round after ending the group", op, param);
        goto out;
    }
    if (z->stage >= 2 && !b->grad_full) {
        /* the full gradient of this bucket lives until its reduce-scatter */
        if ((st = zero_vector(z->ctx, (gpucore_dtype)b->dtype, zero_padded(z, b), &b->grad_full))) goto out;
        if ((st = zero_param_views(z, b, b->grad_full, z->grad_views))) goto out;
        b->zero_pending = 1;
    }
    if (b->zero_pending) {
        /* the previous round's reduction (or step) read this buffer on the comm stream */
        if (!(st = gpucore_event_record(z->cs_mark, z->cs))) st = gpucore_stream_wait_event(ps, z->cs_mark);
        if (!st && z->stepped_recorded) st = gpucore_stream_wait_event(ps, z->stepped);
        if (!st) st = gpucore_fill(b->grad_full, 0.0, ps);
        if (st) goto out;
        b->zero_pending = 0;
    }
    *grad = z->grad_views[param];
out:
    pthread_mutex_unlock(&z->mu);
    return st;
}

/* What follows bucket k's reduce-scatter into `part` on the comm stream: accumulate it into the gradient
 * shard, then free the scratch (and, stage 2+, the full gradient). Inside a comm group it runs when the group
 * ends (gpucore_comm_group_after): NCCL starts the reduce-scatter only then. */
typedef struct shard_after { gpucore_zero *z; int k; gpucore_tensor *part, *grad_full; } shard_after;
static gpucore_status after_shard(void *arg)
{
    const shard_after *a = arg;
    gpucore_zero *z = a->z;
    zero_bucket *b = &z->b[a->k];
    gpucore_tensor *part32 = NULL;
    gpucore_status st = gpucore_comm_order_stream(z->comm); /* after a group: it ran on the group stream */
    if (!st && b->dtype != GPUCORE_F32 && !(st = zero_vector_on(z->ctx, GPUCORE_F32, b->shard, z->cs, &part32)))
        st = gpucore_cast(part32, a->part, z->cs);
    if (!st) st = gpucore_axpy(b->gshard, 1.0, part32 ? part32 : a->part, z->cs);
    gpucore_tensor_destroy(part32);
    gpucore_tensor_destroy(a->part);
    gpucore_tensor_destroy(a->grad_full); /* recorded on the comm stream: reused after the reduce-scatter */
    return st;
}

/* Queue bucket k's reduction on the communicator's stream (z->mu held). */
static gpucore_status launch_bucket(gpucore_zero *z, int k)
{
    zero_bucket *b = &z->b[k];
    gpucore_status st = GPUCORE_OK;
    for (int i = b->begin; i < b->end && !st; i++) st = gpucore_stream_wait_event(z->cs, z->ready[i]);
    if (st) return st;
    if (gpucore_comm_group_open()) b->group_gen = z->group_gen = gpucore_comm_group_generation();
    if (z->stage == 0) return gpucore_comm_allreduce(z->comm, b->grad_full, b->grad_full, GPUCORE_REDUCE_SUM, z->cs);
    gpucore_tensor *part = NULL;
    if ((st = gpucore_tensor_record_stream(b->grad_full, z->cs))) return st;
    /* scratch used only on the comm stream is allocated there, so its reuse is ordered by it */
    if ((st = zero_vector_on(z->ctx, (gpucore_dtype)b->dtype, b->shard, z->cs, &part))) return st;
    if ((st = gpucore_comm_reduce_scatter(z->comm, part, b->grad_full, GPUCORE_REDUCE_SUM, z->cs))) {
        gpucore_tensor_destroy(part);
        return st;
    }
    shard_after a = {z, k, part, NULL};
    if (z->stage >= 2) {
        /* only the shard survives: the full gradient goes back to the allocator after the reduce-scatter */
        zero_destroy_views(z->grad_views, b->begin, b->end);
        a.grad_full = b->grad_full;
        b->grad_full = NULL;
    } else {
        b->zero_pending = 1;
    }
    if ((st = gpucore_comm_group_after(after_shard, &a, sizeof a))) {
        gpucore_tensor_destroy(a.part); /* held until the group ends, with the group's other frees */
        gpucore_tensor_destroy(a.grad_full);
    }
    return st;
}

gpucore_status gpucore_zero_mark_ready(gpucore_zero *z, int param, gpucore_stream *stream)
{
    const char *op = "zero_mark_ready";
    gpucore_status st = zero_check_param(z, param, op);
    if (st) return st;
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(z->ctx, stream, op, &ps))) return st;
    pthread_mutex_lock(&z->mu);
    zero_bucket *b = &z->b[z->bucket_of[param]];
    if (z->no_sync && z->stage < 2) goto out;
    if (z->marked[param]) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d was already marked ready in this round",
                               op, param);
        goto out;
    }
    if (z->stage == 0 && z->rounds) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stage 0 reduces once per step and this step's "
                               "gradients were already reduced; accumulate micro-batches under no_sync", op);
        goto out;
    }
    if (z->stage >= 2 && !b->grad_full) {
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: gradient %d was never requested with "
                               "gpucore_zero_grad in this round (stages 2/3 hold no gradient outside a round)", op,
                               param);
        goto out;
    }
    if ((st = gpucore_event_record(z->ready[param], ps))) goto out;
    z->marked[param] = 1;
    b->pending--;
    while (z->next_launch < z->nbuckets && z->b[z->next_launch].pending == 0) {
        if ((st = launch_bucket(z, z->next_launch))) goto out;
        z->next_launch++;
    }
    if (z->next_launch == z->nbuckets) { /* a round is complete */
        z->next_launch = 0;
        z->rounds++;
        memset(z->marked, 0, (size_t)z->count);
        for (int k = 0; k < z->nbuckets; k++) z->b[k].pending = z->b[k].end - z->b[k].begin;
    }
out:
    pthread_mutex_unlock(&z->mu);
    return st;
}

gpucore_status gpucore_zero_set_no_sync(gpucore_zero *z, int no_sync)
{
    gpucore_status st = zero_check(z, "zero_set_no_sync");
    if (st) return st;
    pthread_mutex_lock(&z->mu);
    int mid = 0;
    for (int i = 0; i < z->count; i++) mid |= z->marked[i];
    if (!mid) z->no_sync = no_sync ? 1 : 0;
    pthread_mutex_unlock(&z->mu);
    if (mid)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "zero_set_no_sync: gradients were already marked ready "
                                 "in this round; switch before backward starts (or after the round)");
    return GPUCORE_OK;
}

/* found-inf and the squared norm of the local shards, summed over ranks in one
 * 2-element allreduce; then clip coefficient and found_inf on the device. */
static gpucore_status combine_across_ranks(gpucore_zero *z, gpucore_tensor *found_inf, gpucore_stream *ps)
{
    gpucore_tensor *sq = NULL, *fi = NULL;
    gpucore_status st = gpucore_fill(z->combine, 0.0, ps);
    int64_t one = 1;
    if (!st) st = gpucore_tensor_slice(z->combine, 0, 0, 1, 1, &sq);
    if (!st) st = gpucore_tensor_slice(z->combine, 0, 1, 2, 1, &fi);
    gpucore_tensor *sq0 = NULL, *fi0 = NULL;
    if (!st) st = gpucore_tensor_reshape(sq, 0, &one, &sq0);
    if (!st) st = gpucore_tensor_reshape(fi, 0, &one, &fi0);
    if (!st && z->o.max_grad_norm > 0) st = gpucore_reduce(GPUCORE_REDUCTION_SUMSQ, sq0, z->gshard_flat,
                                                             GPUCORE_ALL_AXES, ps);
    if (!st && found_inf) st = gpucore_copy(fi0, found_inf, ps);
    if (!st) st = gpucore_comm_allreduce(z->comm, z->combine, z->combine, GPUCORE_REDUCE_SUM, ps);
    if (!st && found_inf) st = gpucore_clamp(found_inf, fi0, 0.0, 1.0, ps);
    if (!st && z->o.max_grad_norm > 0) {
        /* coef = min(1, max_norm / (norm + 1e-6)) */
        st = gpucore_unary(GPUCORE_SQRT, z->norm, sq0, ps);
        if (!st) st = gpucore_scale(z->coef, z->norm, 1.0, 1e-6, ps);
        if (!st) st = gpucore_fill(sq0, z->o.max_grad_norm, ps);
        if (!st) st = gpucore_binary(GPUCORE_DIV, z->coef, sq0, z->coef, ps);
        if (!st) st = gpucore_clamp(z->coef, z->coef, 0.0, 1.0, ps);
        if (!st) st = gpucore_binary(GPUCORE_MUL, z->gshard_flat, z->gshard_flat, z->coef, ps);
    }
    gpucore_tensor_destroy(sq0);
    gpucore_tensor_destroy(fi0);
    gpucore_tensor_destroy(sq);
    gpucore_tensor_destroy(fi);
    return st;
}

/* Stages 1/2: cast each bucket's master shard into the rank's slice of a full
 * buffer, all-gather it and copy into the caller's parameters. Stage 3: the shard. */
gpucore_status zero_publish_params(gpucore_zero *z, gpucore_stream *ps)
{
    gpucore_status st = GPUCORE_OK;
    for (int k = 0; k < z->nbuckets && !st; k++) {
        zero_bucket *b = &z->b[k];
        if (z->stage == 3) {
            st = zero_convert(b->param_shard, b->master, ps);
            continue;
        }
        gpucore_tensor *full = NULL, *mine = NULL;
        gpucore_tensor **views = z->param_views; /* unused at stages 1/2: scratch for the views */
        if ((st = zero_vector_on(z->ctx, (gpucore_dtype)b->dtype, zero_padded(z, b), z->cs, &full))) break;
        st = gpucore_tensor_record_stream(full, ps);
        if (!st) st = gpucore_tensor_slice(full, 0, z->rank * b->shard, (z->rank + 1) * b->shard, 1, &mine);
        if (!st) st = zero_convert(mine, b->master, ps);
        if (!st) st = gpucore_comm_all_gather(z->comm, full, mine, ps);
        if (!st) st = zero_param_views(z, b, full, views);
        for (int i = b->begin; i < b->end && !st; i++) st = gpucore_copy(z->params[i], views[i], ps);
        zero_destroy_views(views, b->begin, b->end);
        gpucore_tensor_destroy(mine);
        gpucore_tensor_destroy(full);
    }
    return st;
}

gpucore_status gpucore_zero_step(gpucore_zero *z, gpucore_loss_scaler *scaler, gpucore_stream *stream)
{
    const char *op = "zero_step";
    gpucore_status st = zero_check(z, op);
    if (st) return st;
    gpucore_stream *ps;
    if ((st = gpucore_resolve_stream(z->ctx, stream, op, &ps))) return st;
    if (scaler && (st = gpucore_check_loss_scaler(scaler, op))) return st;
    pthread_mutex_lock(&z->mu);
    int mid = 0;
    for (int i = 0; i < z->count; i++) mid |= z->marked[i];
    if (gpucore_comm_group_open())
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: inside a comm group: the step waits for the "
                               "round's reductions and its all-gathers read the optimizer's result, so it cannot be "
                               "one of the group's collectives; call it after gpucore_comm_group_end (one thread "
                               "per rank needs no group)", op);
    else if (z->no_sync && z->stage < 2)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: no_sync is on, so no gradient was reduced; turn it "
                               "off for the last micro-batch", op);
    else if (mid)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: a round is incomplete (bucket %d waits for its "
                               "gradients); every rank must mark every gradient", op, z->next_launch);
    else if (z->stage == 3 && zero_gathered_count(z))
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %d bucket(s) are still gathered; release them before "
                               "the step (their values would be stale after it)", op, zero_gathered_count(z));
    else if (!z->rounds)
        st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: no gradients were reduced since the last step; "
                               "mark every gradient ready first", op);
    if (st) goto out;
    /* bounded by the communicator's timeout: a failed collective turns into GPUCORE_ERR_COMM */
    if ((st = gpucore_comm_wait(z->comm, gpucore_comm_last_sequence(z->comm), -1))) goto out;
    if ((st = gpucore_event_record(z->cs_mark, z->cs)) || (st = gpucore_stream_wait_event(ps, z->cs_mark))) goto out;
    gpucore_tensor *found_inf = NULL;
    if (scaler && (st = gpucore_loss_scaler_found_inf(scaler, &found_inf))) goto out;
    double inv = z->o.average && z->size > 1 ? 1.0 / z->size : 1.0;
    if (z->stage == 0) {
        for (int i = 0; i < z->count && !st && inv != 1.0; i++)
            st = gpucore_scale(z->grad_views[i], z->grad_views[i], inv, 0.0, ps);
        if (!st && scaler) st = gpucore_loss_scaler_unscale(scaler, z->grad_views, z->count, ps);
        if (!st && z->o.max_grad_norm > 0)
            st = gpucore_clip_grad_norm(z->grad_views, z->count, z->o.max_grad_norm, z->norm, z->coef, ps);
        if (!st) st = gpucore_optimizer_step(z->opt, z->grad_views, z->count, found_inf, ps);
    } else {
        if (inv != 1.0) st = gpucore_scale(z->gshard_flat, z->gshard_flat, inv, 0.0, ps);
        if (!st && scaler) st = gpucore_loss_scaler_unscale(scaler, &z->gshard_flat, 1, ps);
        if (!st && (scaler || z->o.max_grad_norm > 0)) st = combine_across_ranks(z, found_inf, ps);
        if (!st) st = gpucore_optimizer_step(z->opt, &z->gshard_flat, 1, found_inf, ps);
        if (!st) st = zero_publish_params(z, ps);
        if (!st) st = gpucore_fill(z->gshard_flat, 0.0, ps);
    }
    if (st || (st = gpucore_event_record(z->stepped, ps))) goto out;
    z->stepped_recorded = 1;
    z->rounds = 0;
    for (int k = 0; k < z->nbuckets; k++) z->b[k].zero_pending = 1;
out:
    pthread_mutex_unlock(&z->mu);
    return st;
}

gpucore_status gpucore_zero_grad_norm(gpucore_zero *z, gpucore_tensor **norm)
{
    gpucore_status st = zero_check(z, "zero_grad_norm");
    if (st) return st;
    if (!norm) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "zero_grad_norm: norm is NULL");
    if (!(z->o.max_grad_norm > 0))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "zero_grad_norm: clipping is off (max_grad_norm 0), so "
                                 "no norm is computed");
    *norm = z->norm;
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_optimizer(gpucore_zero *z, gpucore_optimizer **opt)
{
    gpucore_status st = zero_check(z, "zero_optimizer");
    if (st) return st;
    if (!opt) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "zero_optimizer: opt is NULL");
    *opt = z->opt;
    return GPUCORE_OK;
}
