/*
 * zero_internal.h — the ZeRO trainer's handle layout, shared by zero.c (create,
 * gradients, reduce-scatter, step), zero_gather.c (stage-3 parameter gathers,
 * stats) and zero_checkpoint.c (sharded and consolidated checkpoints). Only the
 * public communicator API (gpucore_comm_*) is used for collectives.
 */
#ifndef GPUCORE_ZERO_INTERNAL_H
#define GPUCORE_ZERO_INTERNAL_H

#include <pthread.h>
#include "train_internal.h"

#define GPUCORE_MAGIC_ZERO 0x2E202E20u

typedef struct zero_bucket {
    int begin, end;              /* parameters [begin, end) */
    int32_t dtype;               /* the parameters' (compute) dtype */
    int64_t numel, shard;        /* unpadded elements; per-rank shard (stage 0: numel) */
    int64_t shard_off;           /* offset of this bucket's shard in the flat f32 shard buffers */
    gpucore_tensor *grad_full;   /* [padded] compute dtype: stages 0/1 persistent; 2/3 live in a round */
    gpucore_tensor *param_full;  /* stage 3: [padded] between gather and release */
    gpucore_tensor *param_shard; /* stage 3: [shard] compute dtype, persistent */
    gpucore_tensor *master;      /* stages 1-3: view of master_flat */
    gpucore_tensor *gshard;      /* stages 1-3: view of gshard_flat */
    int pending;                 /* gradients not yet marked in this round */
    int zero_pending;            /* stages 0/1: grad_full must be zeroed before the next round */
    gpucore_event *gathered;     /* stage 3: recorded on the comm stream after the bucket's all-gather */
    uint64_t group_gen;          /* the comm group (src/comm/comm_group.c) it was last reduced in */
} zero_bucket;

struct gpucore_zero {
    uint32_t magic;
    gpucore_comm *comm;
    gpucore_context *ctx;
    gpucore_stream *cs;          /* the communicator's stream */
    int rank, size, stage, count;
    gpucore_zero_options o;
    gpucore_optimizer_config cfg;
    gpucore_tensor **params;     /* the caller's (stages 0-2; borrowed) */
    int64_t (*shapes)[GPUCORE_MAX_DIMS];
    int32_t *ndims, *dtypes;
    int64_t *param_off;          /* element offset inside its bucket */
    int *bucket_of;
    char *marked;
    gpucore_tensor **grad_views; /* per parameter, into its bucket's grad_full (NULL when not live) */
    gpucore_tensor **param_views;/* stage 3: per parameter, into param_full (NULL when not gathered) */
    gpucore_event **ready;       /* per parameter: recorded by mark_ready */
    gpucore_event *stepped;      /* recorded on the step's stream at its end */
    gpucore_event *cs_mark;      /* recorded on the comm stream whenever another stream must follow it */
    uint64_t group_gen;          /* the comm group a bucket was last reduced in */
    int stepped_recorded;
    int nbuckets;
    zero_bucket *b;
    int64_t numel, shard_total;
    gpucore_tensor *master_flat, *gshard_flat; /* [shard_total] f32 (stages 1-3) */
    gpucore_optimizer *opt;      /* over master_flat (stages 1-3) or the parameters (stage 0) */
    gpucore_tensor *combine;     /* [2] f32: squared norm, found-inf (the one small allreduce) */
    gpucore_tensor *norm, *coef; /* 0-d f32 */
    int next_launch, rounds, no_sync;
    int32_t *seg_bucket;         /* gpucore_zero_attach_ckpt: bucket per executor segment (-1: none) */
    int64_t nseg;
    gpucore_tensor **bound_params, **bound_grads; /* gpucore_zero_bind_ckpt: the keys (never read) */
    gpucore_ckpt *bound_ckpt;
    pthread_mutex_t mu;
};

GPUCORE_HIDDEN gpucore_status zero_check(const gpucore_zero *z, const char *op);
/* zero_check, and 0 <= param < count */
GPUCORE_HIDDEN gpucore_status zero_check_param(const gpucore_zero *z, int param, const char *op);
/* elements of bucket b as laid out for the collectives (N * shard; stage 0: numel) */
static inline int64_t zero_padded(const gpucore_zero *z, const zero_bucket *b)
{
    return z->stage == 0 ? b->numel : b->shard * z->size;
}
/* views of `full` (a [padded] buffer of bucket b) with each parameter's shape; views[begin..end) */
GPUCORE_HIDDEN gpucore_status zero_param_views(gpucore_zero *z, const zero_bucket *b, gpucore_tensor *full,
                                               gpucore_tensor **views);
GPUCORE_HIDDEN void zero_destroy_views(gpucore_tensor **views, int begin, int end);
/* A new 1-d tensor of n elements (allocated on the context's current stream). */
GPUCORE_HIDDEN gpucore_status zero_vector(gpucore_context *ctx, gpucore_dtype dtype, int64_t n, gpucore_tensor **out);
/* The same, allocated on `stream` (the allocator then orders its reuse by that stream):
 * for buffers written on the communicator's stream. */
GPUCORE_HIDDEN gpucore_status zero_vector_on(gpucore_context *ctx, gpucore_dtype dtype, int64_t n,
                                             gpucore_stream *stream, gpucore_tensor **out);
/* dst = src, casting when the dtypes differ. */
GPUCORE_HIDDEN gpucore_status zero_convert(gpucore_tensor *dst, const gpucore_tensor *src, gpucore_stream *s);
/* Put the master shards in place as parameters: stages 1/2 cast + all-gather into
 * the caller's tensors, stage 3 cast into the parameter shards. */
GPUCORE_HIDDEN gpucore_status zero_publish_params(gpucore_zero *z, gpucore_stream *ps);
/* Stage 3: buckets whose parameters are gathered right now. */
GPUCORE_HIDDEN int zero_gathered_count(const gpucore_zero *z);
/* zero_gather.c: forget gpucore_zero_bind_ckpt's binding (destroy). */
GPUCORE_HIDDEN void zero_unbind_ckpt(gpucore_zero *z);

#endif
