/*
 * test_zero_ranks.c — the ZeRO trainer with two ranks in one process: one thread per
 * rank, each on its own CUDA device (cuda:0, cuda:1) over gpucore_comm_create_local,
 * so the reduce-scatters, all-gathers and the found-inf/norm allreduce go through
 * NCCL (in CI the contract-checking stand-in, suite cuda-contract). Rank r's gradient
 * of step k is (r + 1) · 0.1 · (k + 1) · u_i for fixed u_i; after 3 steps every stage
 * (0-3, with clipping on) must leave both ranks with the parameters that
 * single-process AdamW reaches with the mean gradient (on the CPU, so a different
 * implementation: 1e-6 relative). Stages 1 and 2 again with both ranks' reductions issued
 * by one thread inside comm groups. Skips (77) where CUDA with two devices is absent.
 */
#include <pthread.h>
#include <stdint.h>
#include "check.h"

#define NPAR 3
#define STEPS 3
static const int64_t sizes[NPAR] = {1000, 37, 515};
#define TOTAL (1000 + 37 + 515)

static float init_val(int p, int64_t j) { return (float)((p * 13 + j * 7) % 19 - 9) / 32.0f; }
static float unit_grad(int p, int64_t j) { return (float)((p * 5 + j * 11) % 17 - 8) / 16.0f; }

static void config(gpucore_optimizer_config *oc)
{
    gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, oc);
    oc->lr = 1e-2;
    oc->weight_decay = 1e-2;
}

typedef struct job {
    gpucore_context *ctx;
    gpucore_comm *comm;
    int rank, stage;
    float out[TOTAL];
    gpucore_status st;
    char err[512];
} job;

static gpucore_status fill_grad(gpucore_tensor *g, int p, double scale)
{
    float *h = malloc(sizeof(float) * (size_t)sizes[p]);
    for (int64_t j = 0; j < sizes[p]; j++) h[j] = (float)(scale * unit_grad(p, j));
    gpucore_status st = gpucore_copy_from_host(g, h, sizes[p] * 4);
    free(h);
    return st;
}

#define RUN(call)                                                                       \
    do {                                                                                \
        if ((st = (call)) != GPUCORE_OK) {                                              \
            snprintf(j->err, sizeof j->err, "%s: %s", #call, gpucore_last_error());     \
            goto out;                                                                   \
        }                                                                               \
    } while (0)

static void *rank_main(void *arg)
{
    job *j = arg;
    gpucore_status st = GPUCORE_OK;
    gpucore_tensor *params[NPAR] = {NULL};
    gpucore_zero *z = NULL;
    float *h = malloc(sizeof(float) * TOTAL);
    for (int p = 0; p < NPAR; p++) {
        RUN(gpucore_tensor_create(j->ctx, GPUCORE_F32, 1, &sizes[p], &params[p]));
        for (int64_t k = 0; k < sizes[p]; k++) h[k] = init_val(p, k);
        RUN(gpucore_copy_from_host(params[p], h, sizes[p] * 4));
    }
    gpucore_optimizer_config oc;
    config(&oc);
    gpucore_zero_options o;
    gpucore_zero_options_default(&o);
    o.stage = j->stage;
    o.bucket_bytes = 2048; /* several buckets, uneven shards */
    o.max_grad_norm = 5.0;
    RUN(gpucore_zero_create(j->comm, params, NPAR, &oc, &o, &z));
    if (j->stage == 3)
        for (int p = 0; p < NPAR; p++) gpucore_tensor_destroy(params[p]), params[p] = NULL;
    for (int step = 0; step < STEPS; step++) {
        for (int p = NPAR - 1; p >= 0; p--) {
            gpucore_tensor *g = NULL;
            RUN(gpucore_zero_grad(z, p, NULL, &g));
            RUN(fill_grad(g, p, (j->rank + 1) * 0.1 * (step + 1)));
            RUN(gpucore_zero_mark_ready(z, p, NULL));
        }
        RUN(gpucore_zero_step(z, NULL, NULL));
    }
    int64_t off = 0;
    for (int p = 0; p < NPAR; p++) {
        int b = 0;
        gpucore_tensor *w = NULL;
        RUN(gpucore_zero_bucket_of(z, p, &b));
        RUN(gpucore_zero_gather(z, b));
        RUN(gpucore_zero_param(z, p, NULL, &w));
        RUN(gpucore_copy_to_host(j->out + off, sizes[p] * 4, w));
        RUN(gpucore_zero_release(z, b, NULL));
        off += sizes[p];
    }
out:
    if (z) gpucore_zero_destroy(z);
    for (int p = 0; p < NPAR; p++) gpucore_tensor_destroy(params[p]);
    free(h);
    j->st = st;
    return NULL;
}

/* The one-thread recipe for the reductions: the main thread runs both ranks' backward (gradient requests
 * and fills) and marks every gradient ready inside one comm group, so both ranks' reduce-scatters are one
 * NCCL group; each rank's step (it has collectives of its own and a host wait) runs on its own thread.
 * NCCL starts a group's collectives only at ncclGroupEnd (nccl.h:555, 565): the shard's cast and
 * accumulation from the reduce-scatter's output must be queued after it, and (stage 2) the full gradient
 * freed only then. Before the fix they ran first (uninitialised scratch in the shards). */
typedef struct step_job { gpucore_zero *z; int final; float out[TOTAL]; gpucore_status st; char err[512]; } step_job;

static void *step_main(void *arg)
{
    step_job *j = arg;
    gpucore_status st = GPUCORE_OK;
    if (!j->final) {
        RUN(gpucore_zero_step(j->z, NULL, NULL));
        goto out;
    }
    int64_t off = 0;
    for (int p = 0; p < NPAR; p++) {
        int b = 0;
        gpucore_tensor *w = NULL;
        RUN(gpucore_zero_bucket_of(j->z, p, &b));
        RUN(gpucore_zero_gather(j->z, b));
        RUN(gpucore_zero_param(j->z, p, NULL, &w));
        RUN(gpucore_copy_to_host(j->out + off, sizes[p] * 4, w));
        RUN(gpucore_zero_release(j->z, b, NULL));
        off += sizes[p];
    }
out:
    j->st = st;
    return NULL;
}

static void run_threads(step_job *jobs, int final)
{
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        jobs[r].final = final;
        pthread_create(&th[r], NULL, step_main, &jobs[r]);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        if (jobs[r].st) fprintf(stderr, "FAIL grouped rank %d: %s\n", r, jobs[r].err);
        CHECK(jobs[r].st == GPUCORE_OK);
    }
}

static void grouped(int stage, gpucore_comm **comm, gpucore_context **ctx, const float *ref)
{
    static step_job jobs[2];
    gpucore_tensor *params[2][NPAR] = {{NULL}};
    memset(jobs, 0, sizeof jobs);
    float *h = malloc(sizeof(float) * TOTAL);
    gpucore_optimizer_config oc;
    config(&oc);
    gpucore_zero_options o;
    gpucore_zero_options_default(&o);
    o.stage = stage;
    o.bucket_bytes = 2048;
    o.max_grad_norm = 5.0;
    for (int r = 0; r < 2; r++) {
        for (int p = 0; p < NPAR; p++) {
            CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &sizes[p], &params[r][p]));
            for (int64_t k = 0; k < sizes[p]; k++) h[k] = init_val(p, k);
            CHECK_OK(gpucore_copy_from_host(params[r][p], h, sizes[p] * 4));
        }
        CHECK_OK(gpucore_zero_create(comm[r], params[r], NPAR, &oc, &o, &jobs[r].z));
    }
    if (!jobs[0].z || !jobs[1].z) goto out;
    for (int step = 0; step < STEPS; step++) {
        for (int r = 0; r < 2; r++)
            for (int p = NPAR - 1; p >= 0; p--) {
                gpucore_tensor *g = NULL;
                CHECK_OK(gpucore_zero_grad(jobs[r].z, p, NULL, &g));
                if (g) CHECK_OK(fill_grad(g, p, (r + 1) * 0.1 * (step + 1)));
            }
        CHECK_OK(gpucore_comm_group_start());
        for (int r = 0; r < 2; r++)
            for (int p = NPAR - 1; p >= 0; p--) CHECK_OK(gpucore_zero_mark_ready(jobs[r].z, p, NULL));
        CHECK_OK(gpucore_comm_group_end());
        run_threads(jobs, 0);
    }
    run_threads(jobs, 1);
    for (int r = 0; r < 2; r++) {
        double num = 0, den = 0;
        for (int i = 0; i < TOTAL; i++) {
            num += ((double)jobs[r].out[i] - ref[i]) * ((double)jobs[r].out[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        double rel = sqrt(num / den);
        CHECK(rel <= 1e-6);
        printf("stage %d rank %d/2, reductions grouped on one thread: rel diff vs single-process AdamW %.2e\n", stage,
               r, rel);
    }
out:
    for (int r = 0; r < 2; r++) {
        if (jobs[r].z) CHECK_OK(gpucore_zero_destroy(jobs[r].z));
        for (int p = 0; p < NPAR; p++) gpucore_tensor_destroy(params[r][p]);
    }
    free(h);
}

/* Single process on the CPU: AdamW with the ranks' mean gradient, clipped like the trainer. */
static void reference(float *out)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    gpucore_tensor *params[NPAR], *grads[NPAR];
    float *h = malloc(sizeof(float) * TOTAL);
    for (int p = 0; p < NPAR; p++) {
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &sizes[p], &params[p]));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &sizes[p], &grads[p]));
        for (int64_t k = 0; k < sizes[p]; k++) h[k] = init_val(p, k);
        CHECK_OK(gpucore_copy_from_host(params[p], h, sizes[p] * 4));
    }
    gpucore_optimizer_config oc;
    config(&oc);
    gpucore_optimizer *opt = NULL;
    gpucore_tensor *norm = NULL;
    CHECK_OK(gpucore_optimizer_create(ctx, &oc, params, NPAR, &opt));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 0, NULL, &norm));
    for (int step = 0; step < STEPS; step++) {
        for (int p = 0; p < NPAR; p++) CHECK_OK(fill_grad(grads[p], p, 1.5 * 0.1 * (step + 1)));
        CHECK_OK(gpucore_clip_grad_norm(grads, NPAR, 5.0, norm, NULL, NULL));
        CHECK_OK(gpucore_optimizer_step(opt, grads, NPAR, NULL, NULL));
    }
    int64_t off = 0;
    for (int p = 0; p < NPAR; p++) {
        CHECK_OK(gpucore_copy_to_host(out + off, sizes[p] * 4, params[p]));
        off += sizes[p];
    }
    gpucore_optimizer_destroy(opt);
    free(h);
    gpucore_context_destroy(ctx);
}

int main(void)
{
    char why[512];
    int n = 0;
    if (gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) != GPUCORE_OK ||
        gpucore_device_count(GPUCORE_DEVICE_CUDA, &n) != GPUCORE_OK || n < 2) {
        printf("SKIP test_zero_ranks: needs CUDA with two devices (%s)\n", n < 2 && !why[0] ? "fewer devices" : why);
        return 77;
    }
    static float ref[TOTAL];
    reference(ref);
    for (int stage = 0; stage <= 3; stage++) {
        gpucore_context *ctx[2] = {NULL, NULL};
        gpucore_comm *comm[2] = {NULL, NULL};
        CHECK_OK(gpucore_context_create("cuda:0", &ctx[0]));
        CHECK_OK(gpucore_context_create("cuda:1", &ctx[1]));
        CHECK_OK(gpucore_comm_create_local(ctx, 2, comm));
        if (!comm[0]) break;
        static job jobs[2];
        pthread_t th[2];
        for (int r = 0; r < 2; r++) {
            CHECK_OK(gpucore_comm_set_timeout(comm[r], 60.0));
            memset(&jobs[r], 0, sizeof jobs[r]);
            jobs[r] = (job){.ctx = ctx[r], .comm = comm[r], .rank = r, .stage = stage};
            pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < 2; r++) {
            if (jobs[r].st) fprintf(stderr, "FAIL stage %d rank %d: %s\n", stage, r, jobs[r].err);
            CHECK(jobs[r].st == GPUCORE_OK);
            double num = 0, den = 0;
            for (int i = 0; i < TOTAL; i++) {
                num += ((double)jobs[r].out[i] - ref[i]) * ((double)jobs[r].out[i] - ref[i]);
                den += (double)ref[i] * ref[i];
            }
            double rel = sqrt(num / den);
            CHECK(rel <= 1e-6);
            printf("stage %d rank %d/2 (cuda:%d): rel diff vs single-process AdamW %.2e\n", stage, r, r, rel);
        }
        CHECK(!memcmp(jobs[0].out, jobs[1].out, sizeof jobs[0].out)); /* the ranks agree bit for bit */
        if (stage == 1 || stage == 2) grouped(stage, comm, ctx, ref);
        for (int r = 0; r < 2; r++) gpucore_comm_destroy(comm[r]);
        for (int r = 0; r < 2; r++) gpucore_context_destroy(ctx[r]);
    }
    return check_finish("test_zero_ranks");
}
