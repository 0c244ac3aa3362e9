/*
 * checkpoint_plan.c — the checkpoint executor's policies: the fixed plans
 * (keep-all, recompute-all, every k, sqrt n), the budget planner (a simulation of
 * the step's peak from each segment's measured output, saves and transient peak),
 * and the byte accounting behind gpucore_ckpt_stats (held vs keep-all).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoint_internal.h"

/* -------------------------------------------------------------------- policy */

gpucore_status gpucore_ckpt_set_policy(gpucore_ckpt *c, gpucore_ckpt_policy policy, int64_t param)
{
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_set_policy");
    if (st) return st;
    if ((int)policy < GPUCORE_CKPT_KEEP_ALL || policy > GPUCORE_CKPT_BUDGET)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_policy: unknown policy %d", (int)policy);
    if (policy == GPUCORE_CKPT_EVERY_K && param < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_policy: EVERY_K needs k >= 1, got %lld",
                                 (long long)param);
    if (policy == GPUCORE_CKPT_BUDGET && param <= 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_set_policy: BUDGET needs a budget in bytes > 0, "
                                 "got %lld", (long long)param);
    gpucore_ckpt_step_release(c->s);
    c->s->policy = policy;
    c->s->param = param;
    return GPUCORE_OK;
}

static void plan_every_k(int32_t *modes, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < n; i++) modes[i] = (i % k == 0) ? GPUCORE_CKPT_CHECKPOINT : GPUCORE_CKPT_RECOMPUTED;
}

void gpucore_ckpt_plan_fixed(ckpt_state *s, int32_t *modes)
{
    int64_t n = s->nsegs;
    switch (s->policy) {
    case GPUCORE_CKPT_KEEP_ALL: for (int64_t i = 0; i < n; i++) modes[i] = GPUCORE_CKPT_KEPT; break;
    case GPUCORE_CKPT_EVERY_K: plan_every_k(modes, n, s->param); break;
    case GPUCORE_CKPT_SQRT_N: plan_every_k(modes, n, (int64_t)ceil(sqrt((double)n))); break;
    default: plan_every_k(modes, n, 1); break;
    }
}

/* The planner's model of a step's peak above the bytes allocated at its start.
 * Bytes are counted by storage, each once: a segment whose output is a view of its
 * input (out_view: a reshape, a flatten) adds no storage, so the input of segment i
 * lives in the storage of the last segment before it that is not a view (or in x's,
 * allocated before the step), and a storage that is held already (saved, or stored
 * as a checkpoint's input) is not counted again where it is an input or saved once
 * more. A segment's measured peaks (forward, backward) include its scratch — a CUDA
 * matmul's cuBLASLt workspace, a conv's — which exists only during that segment:
 * it is counted there and nowhere else, never carried as held. m NULL: every
 * segment KEPT. Where the model stands: the forward (g0 < 0), or the group starting
 * at g0 being recomputed (bwd 0) or gone back through (bwd 1): its segments hold
 * what they saved in the recompute, and its stored input is dropped once the
 * recompute is done. */
typedef struct sim_at {
    int64_t g0;
    int bwd;
} sim_at;
static const sim_at SIM_FORWARD = {-1, 0};

static int saves_held(const int32_t *m, int64_t k, sim_at at)
{
    return !m || m[k] == GPUCORE_CKPT_KEPT || (at.g0 >= 0 && k >= at.g0);
}

/* Whether the storage segment i reads is held already by an earlier segment (or is x's). */
static int input_held(const ckpt_top *t, const int32_t *m, int64_t i, sim_at at)
{
    int64_t o = i - 1;
    while (o >= 0 && t[o].out_view) o--;
    if (o < 0) return 1;                           /* x's storage: in the baseline */
    if (saves_held(m, o, at) && t[o].saves_output) return 1;
    for (int64_t j = o + 1; j < i; j++) {          /* views of it that save it, or store it as their input */
        if (saves_held(m, j, at) && t[j].saves_input) return 1;
        if (m && m[j] == GPUCORE_CKPT_CHECKPOINT && !(at.bwd && j == at.g0)) return 1;
    }
    return 0;
}

static int64_t in_bytes(const ckpt_top *t, int64_t i)
{
    return i > 0 ? t[i - 1].out_bytes : 0;
}

/* What segment i holds once it ran: its saves (kept_as KEPT, also a recomputed one at
 * `at`) or its stored input (CHECKPOINT). */
static int64_t hold_of(const ckpt_top *t, const int32_t *m, int64_t i, int kept_as, sim_at at)
{
    if (kept_as == GPUCORE_CKPT_KEPT)
        return t[i].saved_bytes + (t[i].saves_input && !input_held(t, m, i, at) ? in_bytes(t, i) : 0);
    if (kept_as != GPUCORE_CKPT_CHECKPOINT) return 0;
    return input_held(t, m, i, at) ? 0 : in_bytes(t, i);
}

/* Segment j's backward above what is held: dy (made by the executor, except the last
 * segment's, which is the caller's) and the measured backward peak — before a
 * backward was measured for this input, the forward's peak plus dx. */
static int64_t backward_need(const ckpt_top *t, int64_t n, int64_t j)
{
    int64_t dy = j < n - 1 ? t[j].out_bytes : 0;
    return dy + (t[j].bwd_known ? t[j].bwd_transient : t[j].transient + in_bytes(t, j));
}

static int64_t simulate(const ckpt_top *t, const int32_t *m, int64_t n)
{
    int64_t held = 0, peak = 0;
    for (int64_t i = 0; i < n; i++) {              /* forward */
        int64_t p = held + (input_held(t, m, i, SIM_FORWARD) ? 0 : in_bytes(t, i)) + t[i].transient;
        if (p > peak) peak = p;
        held += hold_of(t, m, i, m[i], SIM_FORWARD);
    }
    int64_t below = held;                          /* backward, last segment first */
    for (int64_t e = n - 1; e >= 0;) {
        int64_t s0 = e;
        if (m[e] != GPUCORE_CKPT_KEPT)
            while (s0 > 0 && m[s0] != GPUCORE_CKPT_CHECKPOINT) s0--;
        for (int64_t j = s0; j <= e; j++) below -= hold_of(t, m, j, m[j], SIM_FORWARD);
        const sim_at rec = {s0, 0}, bwd = {s0, 1};
        int64_t grp = 0;
        if (m[e] != GPUCORE_CKPT_KEPT) {           /* recompute from the stored input, saving */
            int64_t stored = hold_of(t, m, s0, GPUCORE_CKPT_CHECKPOINT, SIM_FORWARD);
            int64_t dy = e < n - 1 ? t[e].out_bytes : 0;
            for (int64_t j = s0; j <= e; j++) {
                int64_t in = j == s0 || input_held(t, m, j, rec) ? 0 : in_bytes(t, j);
                int64_t p = below + stored + grp + in + t[j].transient + dy;
                if (p > peak) peak = p;
                grp += j == s0 ? t[j].saved_bytes : hold_of(t, m, j, GPUCORE_CKPT_KEPT, rec); /* s0's input: stored */
            }
        }
        grp = 0;                                   /* the stored input is dropped: what the saves hold */
        for (int64_t j = s0; j <= e; j++) grp += hold_of(t, m, j, GPUCORE_CKPT_KEPT, bwd);
        for (int64_t j = e; j >= s0; j--) {       /* backward of each */
            int64_t p = below + grp + backward_need(t, n, j);
            if (p > peak) peak = p;
            grp -= hold_of(t, m, j, GPUCORE_CKPT_KEPT, bwd);
        }
        e = s0 - 1;
    }
    return peak;
}

int gpucore_ckpt_budget_search(const ckpt_top *t, int64_t n, int64_t avail, int32_t *m, int32_t *best,
                               int64_t *best_est, int64_t *lean_est, int64_t *lean_k)
{
    int64_t best_cost = -1;
    *best_est = 0;
    *lean_est = INT64_MAX;
    *lean_k = 1;
    for (int64_t k = 1; k <= n; k++) {
        plan_every_k(m, n, k);
        int64_t est = simulate(t, m, n);
        if (est < *lean_est) { *lean_est = est; *lean_k = k; }
        if (est > avail) continue;
        for (int64_t g = ((n - 1) / k) * k; g >= 0; g -= k) {  /* keep whole groups, last first */
            int64_t e = g + k < n ? g + k : n;
            for (int64_t j = g; j < e; j++) m[j] = GPUCORE_CKPT_KEPT;
            int64_t e2 = simulate(t, m, n);
            if (e2 <= avail) est = e2;
            else plan_every_k(m + g, e - g, k);  /* back to checkpoint + recomputed */
        }
        int64_t cost = 0;
        for (int64_t j = 0; j < n; j++) cost += m[j] != GPUCORE_CKPT_KEPT;
        if (best_cost < 0 || cost < best_cost || (cost == best_cost && est < *best_est)) {
            best_cost = cost;
            *best_est = est;
            memcpy(best, m, sizeof *m * (size_t)n);
        }
    }
    return best_cost >= 0;
}

gpucore_status gpucore_ckpt_plan_budget(ckpt_state *s, int64_t baseline, int64_t *estimate)
{
    int64_t n = s->nsegs, avail = s->param - baseline;
    int32_t *m = malloc(sizeof *m * (size_t)n), *best = malloc(sizeof *best * (size_t)n);
    if (!m || !best) {
        free(m);
        free(best);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "ckpt_forward: out of host memory");
    }
    int64_t best_est = 0, lean_est = INT64_MAX, lean_k = 1;
    const int found = gpucore_ckpt_budget_search(s->tops, n, avail, m, best, &best_est, &lean_est, &lean_k);
    gpucore_status st = GPUCORE_OK;
    if (!found) {
        int64_t big = 0, big_need = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t need = s->tops[i].transient;
            if (s->tops[i].bwd_known && s->tops[i].bwd_transient > need) need = s->tops[i].bwd_transient;
            if (need > big_need) { big = i; big_need = need; }
        }
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "checkpoint '%s': a budget of %lld bytes cannot be met: %lld "
                               "bytes are allocated when the step starts (parameters, gradients, inputs) and the "
                               "leanest plan (a checkpoint every %lld segments) needs an estimated %lld more (peak "
                               "%lld); the largest segment, '%s' (%lld), alone needs %lld bytes while it runs (its "
                               "output and scratch, such as a CUDA matmul's workspace: "
                               "gpucore_matmul_set_workspace_size). Raise the budget to at least %lld or shrink the "
                               "batch", s->name, (long long)s->param, (long long)baseline, (long long)lean_k,
                               (long long)lean_est, (long long)(baseline + lean_est), s->tops[big].seg->name,
                               (long long)big, (long long)big_need, (long long)(baseline + lean_est));
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
    gpucore_status st = gpucore_ckpt_check(c, "ckpt_get_plan");
    if (st) return st;
    ckpt_state *s = c->s;
    if (!modes) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "ckpt_get_plan: modes is NULL");
    if (count < s->nsegs)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "ckpt_get_plan: count %lld < %lld segments",
                                 (long long)count, (long long)s->nsegs);
    if (s->modes && s->stats.segments == s->nsegs) memcpy(modes, s->modes, sizeof *modes * (size_t)s->nsegs);
    else gpucore_ckpt_plan_fixed(s, modes);
    return GPUCORE_OK;
}

/* ------------------------------------------------------------- accounting */

/* Bytes of the unique storages among a segment's saves, without its input's. */
void gpucore_ckpt_measure_saves(ckpt_top *t, const void *in_storage, const void *out_storage)
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

void gpucore_ckpt_measure_held(ckpt_state *s, const void *x_storage)
{
    int64_t held = 0, keep_all = 0, cap = 0, n = 0;
    const void **seen = NULL;
    for (int64_t i = 0; i < s->nsegs; i++) {
        ckpt_top *t = &s->tops[i];
        keep_all += hold_of(s->tops, NULL, i, GPUCORE_CKPT_KEPT, SIM_FORWARD); /* by storage, like held */
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
