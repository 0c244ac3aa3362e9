/*
 * checkpoint_internal.h — what the checkpoint executor's files share:
 * checkpoint.c (lifetime, registration, the step), checkpoint_call.c (the segment
 * callbacks' API, running one segment), checkpoint_plan.c (policies, the budget
 * planner, accounting), checkpoint_hooks.c (saved-tensor hooks, offload) and
 * checkpoint_segments.c (the built-in segments). Everything here sits above the
 * backend vtable: segments are made of public ops only.
 */
#ifndef GPUCORE_CHECKPOINT_INTERNAL_H
#define GPUCORE_CHECKPOINT_INTERNAL_H

#include <string.h>
#include "core/internal.h"

#define GPUCORE_MAGIC_CKPT 0xC4EC4B01u
#define GPUCORE_MAGIC_CKPT_CALL 0xCA11C4E1u

enum { PH_FORWARD = 0, PH_RECOMPUTE = 1, PH_BACKWARD = 2, PH_DRY = 3 };
/* Indexed by PH_*: the phase in messages. */
extern GPUCORE_HIDDEN const char *const gpucore_ckpt_phase_name[];

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
    int64_t out_bytes, saved_bytes, transient; /* measured (transient: the forward's peak above what was
                                                    allocated before it, its output and scratch included) */
    int64_t bwd_transient; /* measured in the last backward for this input: its peak above what was allocated
                              before it (dx, scratch), when bwd_known */
    int bwd_known;
    int saves_input, saves_output;
    int out_view;          /* its output shares its input's storage (a view: reshape, flatten) */
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
    const struct ckpt_resolver *resolver; /* NULL: built-in segments use the tensors they bound */
    void *resolver_user;
    int in_step;
    gpucore_tensor *y;
    int measured;          /* tops[].out_bytes ... hold measurements for this input */
    int32_t meas_dtype, meas_ndim;
    int64_t meas_shape[GPUCORE_MAX_DIMS];
    int64_t step_peak;
    gpucore_memory_watermark mark; /* the executor's own peak, restarted per segment (the user's stays) */
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

static inline void ckpt_record_shape(const gpucore_tensor *t, int32_t *dtype, int32_t *ndim, int64_t *shape)
{
    *dtype = t->dtype;
    *ndim = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * GPUCORE_MAX_DIMS);
}

static inline int ckpt_same_shape(const gpucore_tensor *t, int32_t dtype, int32_t ndim, const int64_t *shape)
{
    return t->dtype == dtype && t->ndim == ndim && !memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
}

/* checkpoint.c: handle checks, errors, releasing a step. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_check(const gpucore_ckpt *c, const char *op);
/* The callback's own message, prefixed with where it happened. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_wrap_error(gpucore_status st, ckpt_state *s, int64_t index,
                                                      const ckpt_segment *seg, int phase);
/* Drop everything a step holds (error paths, reset, the end of backward). */
GPUCORE_HIDDEN void gpucore_ckpt_step_release(ckpt_state *s);

/* checkpoint_call.c: run one segment (a residual block with its children). */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_run_forward(gpucore_ckpt_call *call, ckpt_segment *g,
                                                       const gpucore_tensor *x, gpucore_tensor **y);
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_run_backward(gpucore_ckpt_call *call, ckpt_segment *g,
                                                        const gpucore_tensor *dy, gpucore_tensor *dx);

/* checkpoint_plan.c: the plan for the fixed policies, the budget planner, accounting. */
GPUCORE_HIDDEN void gpucore_ckpt_plan_fixed(ckpt_state *s, int32_t *modes);
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_plan_budget(ckpt_state *s, int64_t baseline, int64_t *estimate);
/* The budget planner's search over n segments' records t (out_bytes, saved_bytes, saves_input,
 * saves_output, out_view, transient, bwd_transient, bwd_known): the plan with the fewest
 * recomputed segments whose simulated peak above the start stays within avail, into best (m:
 * scratch of n entries); 0 when none does. *lean_est / *lean_k: the leanest plan's estimate and
 * group size. Shared by the executor and the language-model planner (src/models/plan.c). */
GPUCORE_HIDDEN int gpucore_ckpt_budget_search(const ckpt_top *t, int64_t n, int64_t avail, int32_t *m, int32_t *best,
                                              int64_t *best_est, int64_t *lean_est, int64_t *lean_k);
GPUCORE_HIDDEN void gpucore_ckpt_measure_saves(ckpt_top *t, const void *in_storage, const void *out_storage);
GPUCORE_HIDDEN void gpucore_ckpt_measure_held(ckpt_state *s, const void *x_storage);

/* checkpoint_hooks.c: hand a KEPT segment's saves to the hooks; get them back. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_pack_top(ckpt_state *s, int64_t index, gpucore_stream *stream);
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_unpack_top(ckpt_state *s, int64_t index, gpucore_stream *stream);

/* Register a segment with the executor (at the top level, or inside the open
 * residual block). user is released with free_user (may be NULL) when the
 * executor is destroyed, also when this call fails. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_add_segment(gpucore_ckpt *ckpt, const char *name,
                                                       gpucore_ckpt_forward_fn forward,
                                                       gpucore_ckpt_backward_fn backward, void *user,
                                                       void (*free_user)(void *), const char *op);

/* checkpoint_segments.c, for the built-in segments' registration checks: t a valid
 * tensor (NULL allowed unless required); g NULL or a tensor of p's shape (p given). */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_check_param(const gpucore_ckpt *c, const gpucore_tensor *t, const char *op,
                                                       const char *seg, const char *arg, int required);
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_check_grad(const gpucore_tensor *p, const gpucore_tensor *g, const char *op,
                                                      const char *seg, const char *pn, const char *gn);

/* Where the built-in segments' bound tensors live now (ZeRO: gathered parameters and
 * the trainer's gradient buffers). resolve maps a tensor bound at add time to the one
 * to use in this call (*now = bound when it is not one of the resolver's); ready is
 * told first when a segment announces a resolved gradient as complete. */
typedef struct ckpt_resolver {
    gpucore_status (*resolve)(void *user, const gpucore_tensor *bound, int is_grad, gpucore_stream *stream,
                              gpucore_tensor **now);
    gpucore_status (*ready)(void *user, gpucore_tensor *grad, gpucore_stream *stream);
} ckpt_resolver;
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_set_resolver(gpucore_ckpt *c, const ckpt_resolver *r, void *user);
/* checkpoint_call.c: the tensor a built-in segment uses now for `bound` (NULL stays NULL). */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_bound_now(gpucore_ckpt_call *call, const gpucore_tensor *bound, int is_grad,
                                                     gpucore_tensor **now);

/* In a built-in segment's callback (with `gpucore_status st` in scope): replace the
 * field f (a bound tensor) by the one to use now; returns from the callback on error. */
#define CKPT_BIND(call, f, is_grad)                                                     \
    do {                                                                                \
        gpucore_tensor *now_ = NULL;                                                    \
        if ((st = gpucore_ckpt_bound_now((call), (f), (is_grad), &now_))) return st;    \
        (f) = now_;                                                                     \
    } while (0)

/* A new handle on t's memory (same view), owned by the caller. */
GPUCORE_HIDDEN gpucore_status gpucore_ckpt_alias(const gpucore_tensor *t, gpucore_tensor **out);

#endif
