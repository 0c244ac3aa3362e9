/*
 * train_common.h — what the training examples (train_cnn.c, train_gpt.c) share:
 * the counter-based batch hash (a resumed or twin run draws the same batches),
 * the --checkpoint-policy parser and printer, the executor's grad-ready callback that feeds
 * the DDP reducer, the activation budget update, the per-step peak-memory
 * bookkeeping and the closing profile print. Plain helpers over the public API.
 */
#ifndef GPUCORE_EXAMPLES_TRAIN_COMMON_H
#define GPUCORE_EXAMPLES_TRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include "gpucore.h"

/* splitmix64 and draw(seed, step, sample, i): depends only on its arguments. */
uint64_t train_splitmix64(uint64_t x);
uint64_t train_draw(uint64_t seed, int64_t step, int64_t sample, uint64_t i);

/* --checkpoint-policy none|all|sqrt|every:K|budget:BYTES. Returns 0, or 1 for a bad string. */
typedef struct train_policy { gpucore_ckpt_policy kind; int64_t param; } train_policy;
int train_parse_policy(const char *s, train_policy *p);
/* The policy back in that spelling (e.g. "every:4") into buf. Returns 0, or 1 for an unknown kind. */
int train_format_policy(gpucore_ckpt_policy kind, int64_t param, char *buf, size_t size);
/* budget:BYTES is an activation budget: the executor's counts everything allocated on
 * the context, so set it to what is allocated now plus BYTES (no-op for other policies). */
gpucore_status train_update_budget(gpucore_context *ctx, gpucore_ckpt *ck, const train_policy *p);

double train_now_s(void);

/* The run's context (under mpirun with --ddp each rank takes its local rank's GPU when
 * device is cuda or auto) with the profiler on if asked, and with ddp an MPI
 * communicator whose size divides batch. Returns 0, or after printing why 1 (set-up
 * failed) or 2 (batch does not split over the ranks); prog names the program in messages. */
typedef struct train_world {
    gpucore_context *ctx;
    gpucore_comm *comm; /* NULL without ddp */
    int rank, size;
} train_world;
int train_open_world(const char *prog, const char *device, int ddp, int profile, int64_t batch, train_world *w);

/* The executor's grad-ready callback (user: a train_grad_router): hands the finished
 * gradient, found by identity in grads[], to the DDP reducer, so its bucket's allreduce
 * overlaps the rest of the backward. */
typedef struct train_grad_router {
    gpucore_ddp *ddp;
    gpucore_tensor *const *grads;
    int count;
} train_grad_router;
gpucore_status train_on_grad_ready(void *user, int64_t segment, const char *name, int32_t param, gpucore_tensor *grad,
                                   gpucore_stream *stream);

/* Fold the step's peak into *peak_alloc / *peak_reserved: the executor resets the
 * allocator's peak at each forward and reports the forward's, the allocator the rest. */
gpucore_status train_track_peak(gpucore_context *ctx, gpucore_ckpt *ck, int64_t *peak_alloc, int64_t *peak_reserved);

/* The per-op profile: a table, or with json one {"profile": ...} line. */
void train_print_profile(gpucore_context *ctx, int json);

#endif
