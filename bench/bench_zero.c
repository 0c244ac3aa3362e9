/*
 * bench_zero.c — per-rank memory and step time of the ZeRO trainer, stages 0-3, with
 * the DDP reducer + fused AdamW (every rank holds everything) as the peer, in one run.
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_zero [--json]
 *          [--hidden H] [--ffn F] [--layers L] [--iters N] [--bf16]
 *
 * The parameter set is an MLP's: L blocks of (w1 [H, F], b1 [F], w2 [F, H], b2 [H]).
 * A step is what the trainer adds to a training step: every gradient is produced
 * (one fill, standing in for backward's last write, last parameter first), handed
 * over (DDP: mark_ready; ZeRO: zero_grad + mark_ready, which launches the bucket's
 * reduce-scatter), then the optimizer step (DDP: finish + gpucore_optimizer_step;
 * ZeRO: zero_step: shard step + all-gather). Stage 3 also gathers every bucket for a
 * forward and again for the backward (the next bucket prefetched) and frees it after.
 * Buckets: one per block for the trainer (options.units) and for the reducer.
 * step_ms: median over iterations of the slowest rank's wall time (the ranks aligned
 * by a barrier first). peak_bytes_per_rank: the allocator's allocated-bytes peak over
 * the timed steps (after 2 warm-up steps; set-up excluded), maximum over ranks.
 * state_bytes_per_rank: optimizer state (f32 master + moments) held by one rank.
 * No model compute is timed, so the figures isolate the trainer (communication,
 * optimizer, copies); CPU backend over MPI (oversubscribed ranks share the cores).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"
#include "bench_time.h"

static int rank, size, json, use_bf16;
static int64_t hidden = 256, ffn = 1024;
static int layers = 4, iters = 10;

#define FAIL_IF(call)                                                                              \
    do {                                                                                           \
        gpucore_status st_ = (call);                                                               \
        if (st_) {                                                                                 \
            fprintf(stderr, "bench_zero rank %d: %s: %s\n", rank, #call, gpucore_last_error());    \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

typedef struct result {
    double step_ms;
    int64_t peak, state;
} result;

typedef struct model {
    int count;
    gpucore_tensor **params;
} model;

static void model_create(gpucore_context *ctx, model *m)
{
    m->count = 4 * layers;
    m->params = calloc((size_t)m->count, sizeof *m->params);
    for (int l = 0; l < layers; l++) {
        int64_t shapes[4][2] = {{hidden, ffn}, {ffn, 1}, {ffn, hidden}, {hidden, 1}};
        for (int k = 0; k < 4; k++) {
            gpucore_tensor **t = &m->params[4 * l + k];
            FAIL_IF(gpucore_tensor_create(ctx, use_bf16 ? GPUCORE_BF16 : GPUCORE_F32, shapes[k][1] == 1 ? 1 : 2,
                                          shapes[k], t));
            FAIL_IF(gpucore_random(*t, GPUCORE_NORMAL, 0.0, 0.02, 1234, (uint64_t)(4 * l + k) << 32, NULL));
        }
    }
}

static void model_destroy(model *m)
{
    for (int i = 0; i < m->count; i++) gpucore_tensor_destroy(m->params[i]);
    free(m->params);
}

static int64_t numel_of(const model *m)
{
    int64_t n = 0;
    for (int i = 0; i < m->count; i++) n += gpucore_tensor_numel(m->params[i]);
    return n;
}

static void adamw(gpucore_optimizer_config *oc)
{
    gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, oc);
    oc->lr = 1e-4;
}

/* One case: stage -1 is the DDP peer. */
static result run_case(gpucore_comm *comm, gpucore_context *ctx, int stage)
{
    result r = {0};
    model m;
    model_create(ctx, &m);
    gpucore_optimizer_config oc;
    adamw(&oc);
    gpucore_tensor **grads = NULL;
    gpucore_ddp *ddp = NULL;
    gpucore_optimizer *opt = NULL;
    gpucore_zero *z = NULL;
    int nb = 0;
    if (stage < 0) {
        grads = calloc((size_t)m.count, sizeof *grads);
        for (int i = 0; i < m.count; i++) {
            int64_t shape[8];
            gpucore_tensor_shape(m.params[i], shape);
            FAIL_IF(gpucore_tensor_create(ctx, gpucore_tensor_dtype(m.params[i]), gpucore_tensor_ndim(m.params[i]),
                                          shape, &grads[i]));
        }
        gpucore_ddp_options d;
        gpucore_ddp_options_default(&d);
        d.first_bucket_bytes = d.bucket_bytes = (2 * hidden * ffn + hidden + ffn) * (use_bf16 ? 2 : 4); /* a block */
        FAIL_IF(gpucore_ddp_create(comm, grads, m.count, &d, &ddp));
        FAIL_IF(gpucore_optimizer_create(ctx, &oc, m.params, m.count, &opt));
        static const char *const names[] = {"exp_avg", "exp_avg_sq", "master"};
        for (int i = 0; i < m.count; i++)
            for (int k = 0; k < 3; k++) {
                gpucore_tensor *t = NULL;
                if (gpucore_optimizer_state(opt, i, names[k], &t) == GPUCORE_OK) r.state += gpucore_tensor_nbytes(t);
            }
    } else {
        gpucore_zero_options o;
        gpucore_zero_options_default(&o);
        o.stage = stage;
        int32_t *units = malloc(sizeof(int32_t) * (size_t)m.count);
        for (int i = 0; i < m.count; i++) units[i] = i / 4; /* one bucket per block */
        o.units = units;
        FAIL_IF(gpucore_zero_create(comm, m.params, m.count, &oc, &o, &z));
        free(units);
        FAIL_IF(gpucore_zero_bucket_count(z, &nb));
        if (stage == 3) { /* the trainer holds the only (sharded) copy */
            model_destroy(&m);
            m.params = NULL;
        }
        gpucore_zero_stats s = {.struct_size = sizeof s};
        FAIL_IF(gpucore_zero_get_stats(z, &s));
        r.state = s.state_bytes;
    }
    int count = 4 * layers;
    double *t = malloc(sizeof(double) * (size_t)(iters + 2));
    for (int it = 0; it < iters + 2; it++) { /* 2 warm-up steps */
        if (it == 2) { /* the peak of training steps, not of set-up (stage 3 starts from full parameters) */
            FAIL_IF(gpucore_context_synchronize(ctx));
            FAIL_IF(gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE));
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_ms();
        if (stage < 0) {
            for (int i = count - 1; i >= 0; i--) {
                FAIL_IF(gpucore_fill(grads[i], 1e-3 * (i + 1), NULL));
                FAIL_IF(gpucore_ddp_mark_ready(ddp, i, NULL));
            }
            FAIL_IF(gpucore_ddp_finish(ddp, NULL));
            FAIL_IF(gpucore_optimizer_step(opt, grads, count, NULL, NULL));
        } else {
            if (stage == 3) /* forward: buckets in forward order (the last bucket holds the first layers) */
                for (int k = nb - 1; k >= 0; k--) {
                    FAIL_IF(gpucore_zero_gather(z, k));
                    if (k > 0) FAIL_IF(gpucore_zero_gather(z, k - 1)); /* prefetch */
                    gpucore_tensor *p = NULL;
                    int b0 = 0;
                    FAIL_IF(gpucore_zero_bucket_info(z, k, &b0, NULL, NULL, NULL));
                    FAIL_IF(gpucore_zero_param(z, b0, NULL, &p));
                    FAIL_IF(gpucore_zero_release(z, k, NULL));
                }
            int gathered = -1;
            for (int i = count - 1; i >= 0; i--) {
                int k = 0;
                FAIL_IF(gpucore_zero_bucket_of(z, i, &k));
                if (stage == 3 && gathered != k) {
                    if (gathered >= 0) FAIL_IF(gpucore_zero_release(z, gathered, NULL));
                    FAIL_IF(gpucore_zero_gather(z, k));
                    if (k + 1 < nb) FAIL_IF(gpucore_zero_gather(z, k + 1)); /* prefetch */
                    gathered = k;
                }
                gpucore_tensor *g = NULL;
                FAIL_IF(gpucore_zero_grad(z, i, NULL, &g));
                FAIL_IF(gpucore_fill(g, 1e-3 * (i + 1), NULL));
                FAIL_IF(gpucore_zero_mark_ready(z, i, NULL));
            }
            if (gathered >= 0) FAIL_IF(gpucore_zero_release(z, gathered, NULL));
            FAIL_IF(gpucore_zero_step(z, NULL, NULL));
        }
        FAIL_IF(gpucore_context_synchronize(ctx));
        double dt = now_ms() - t0, worst = 0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[it] = worst;
    }
    qsort(t + 2, (size_t)iters, sizeof *t, cmp_double);
    r.step_ms = t[2 + iters / 2];
    free(t);
    gpucore_memory_stats ms = {.struct_size = sizeof ms};
    FAIL_IF(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &ms));
    MPI_Allreduce(&ms.allocated_bytes_peak, &r.peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    gpucore_zero_destroy(z);
    gpucore_ddp_destroy(ddp);
    gpucore_optimizer_destroy(opt);
    for (int i = 0; grads && i < count; i++) gpucore_tensor_destroy(grads[i]);
    free(grads);
    if (m.params) model_destroy(&m);
    return r;
}

static void emit(const char *cs, const char *metric, double v, const char *unit, double peer_v)
{
    if (rank || !json) return;
    printf("{\"bench\":\"zero\",\"case\":\"%s\",\"device\":\"cpu\",\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\","
           "\"peer\":\"ddp_reducer+adamw\",\"peer_value\":%.6g,\"speedup\":%.4f}\n",
           cs, metric, v, unit, peer_v, v > 0 ? peer_v / v : 0.0);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--bf16")) use_bf16 = 1;
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidden = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--ffn") && i + 1 < argc) ffn = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mpirun -np N bench_zero [--json] [--hidden H] [--ffn F] [--layers L] [--iters N] "
                    "[--bf16]\n");
            return 2;
        }
    }
    if (hidden < 1 || ffn < 1 || layers < 1 || iters < 1) {
        fprintf(stderr, "bench_zero: sizes and --iters must be >= 1\n");
        return 2;
    }
    gpucore_context *ctx = NULL;
    gpucore_comm *comm = NULL;
    if (gpucore_context_create("cpu", &ctx) || gpucore_comm_create_mpi(ctx, &comm)) {
        fprintf(stderr, "bench_zero: %s\n", gpucore_last_error());
        return 1;
    }
    rank = gpucore_comm_rank(comm);
    size = gpucore_comm_size(comm);
    model probe;
    model_create(ctx, &probe);
    int64_t P = numel_of(&probe);
    model_destroy(&probe);
    result peer = run_case(comm, ctx, -1);
    if (!rank && !json)
        printf("ZeRO trainer, MLP %d x (%lld x %lld) = %.2fM %s parameters, %d ranks, median of %d steps\n"
               "%-22s %14s %14s %10s\n%-22s %14lld %14lld %10.2f\n", layers, (long long)hidden, (long long)ffn,
               P / 1e6, use_bf16 ? "bf16" : "f32", size, iters, "case", "peak B/rank", "state B/rank", "step ms",
               "ddp reducer + adamw", (long long)peer.peak, (long long)peer.state, peer.step_ms);
    for (int stage = 0; stage <= 3; stage++) {
        result r = run_case(comm, ctx, stage);
        char cs[96];
        snprintf(cs, sizeof cs, "mlp_%.1fM_%s_stage%d_np%d", P / 1e6, use_bf16 ? "bf16" : "f32", stage, size);
        if (!rank && !json)
            printf("%-22s %14lld %14lld %10.2f\n", cs + 0, (long long)r.peak, (long long)r.state, r.step_ms);
        emit(cs, "peak_bytes_per_rank", (double)r.peak, "bytes", (double)peer.peak);
        emit(cs, "state_bytes_per_rank", (double)r.state, "bytes", (double)peer.state);
        emit(cs, "step_ms", r.step_ms, "ms", peer.step_ms);
    }
    gpucore_comm_destroy(comm);
    gpucore_context_destroy(ctx);
    return 0;
}
