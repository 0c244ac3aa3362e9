/*
 * bench_pipeline.c — step time of layers placed on 1, 2 and 4 contexts with GPipe
 * micro-batches (gpucore_pipeline_step), the plain executor on one context as the
 * peer, in one run.
 *
 *   bench_pipeline [--json] [--device cpu|cuda] [--width W] [--layers L] [--batch B] [--iters N]
 *
 * The model is an MLP of L linear+GELU segments of width W (one executor per stage,
 * consecutive layers per stage, every stage on its own context of the device). A
 * step is the forward and backward of a batch of B rows (loss gradient dy = y),
 * split into M micro-batches; step_ms is the median wall time of a step followed
 * by a synchronize of every context. The pipeline runs each stage's forward twice
 * per micro-batch (GPipe's re-materialisation), so one context with the pipeline
 * does 4/3 of the peer's work; the gain must come from stages overlapping. On the
 * CPU backend every context has its own stream workers on the same cores, so the
 * overlap is bounded by the cores free (say the load beside any figure).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpucore.h"
#include "bench_time.h"

#define MAXS 4
#define MAXL 64

#define FAIL_IF(call)                                                                    \
    do {                                                                                 \
        gpucore_status st_ = (call);                                                     \
        if (st_) {                                                                       \
            fprintf(stderr, "bench_pipeline: %s: %s\n", #call, gpucore_last_error());    \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static int json, layers = 8, iters = 10;
static int64_t width = 512, batch = 64;
static const char *device = "cpu";

typedef struct model {
    int nstages;
    gpucore_context *ctx[MAXS];
    gpucore_ckpt *ck[MAXS];
    gpucore_tensor *w[MAXL], *b[MAXL], *dw[MAXL], *db[MAXL];
    gpucore_pipeline *pipe;
} model;

static void build(model *m, int nstages)
{
    memset(m, 0, sizeof *m);
    m->nstages = nstages;
    for (int s = 0; s < nstages; s++) {
        FAIL_IF(gpucore_context_create(device, &m->ctx[s]));
        FAIL_IF(gpucore_ckpt_create(m->ctx[s], "stage", &m->ck[s]));
    }
    for (int i = 0; i < layers; i++) {
        gpucore_context *c = m->ctx[i * nstages / layers];
        int64_t ws[2] = {width, width};
        FAIL_IF(gpucore_tensor_create(c, GPUCORE_F32, 2, ws, &m->w[i]));
        FAIL_IF(gpucore_tensor_create(c, GPUCORE_F32, 1, &width, &m->b[i]));
        FAIL_IF(gpucore_tensor_create(c, GPUCORE_F32, 2, ws, &m->dw[i]));
        FAIL_IF(gpucore_tensor_create(c, GPUCORE_F32, 1, &width, &m->db[i]));
        FAIL_IF(gpucore_random(m->w[i], GPUCORE_UNIFORM, -0.05, 0.05, 7 + (uint64_t)i, 0, NULL));
        FAIL_IF(gpucore_fill(m->b[i], 0.01, NULL));
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        FAIL_IF(gpucore_ckpt_add_linear(m->ck[i * nstages / layers], name, m->w[i], m->b[i], GPUCORE_ACT_GELU_TANH,
                                        m->dw[i], m->db[i]));
    }
    FAIL_IF(gpucore_pipeline_create(m->ck, nstages, &m->pipe));
}

static void destroy(model *m)
{
    gpucore_pipeline_destroy(m->pipe);
    for (int s = 0; s < m->nstages; s++) gpucore_ckpt_destroy(m->ck[s]);
    for (int i = 0; i < layers; i++) {
        gpucore_tensor_destroy(m->w[i]);
        gpucore_tensor_destroy(m->b[i]);
        gpucore_tensor_destroy(m->dw[i]);
        gpucore_tensor_destroy(m->db[i]);
    }
    for (int s = 0; s < m->nstages; s++) gpucore_context_destroy(m->ctx[s]);
}

static gpucore_status loss_copy(void *user, int64_t mb, const gpucore_tensor *y, gpucore_tensor *dy,
                                gpucore_stream *stream)
{
    (void)user;
    (void)mb;
    return gpucore_copy(dy, y, stream);
}

/* M = 0: the plain executor (the peer). */
static double time_step(model *m, int64_t M)
{
    int64_t xs[2] = {batch, width};
    gpucore_tensor *x = NULL, *dy = NULL;
    FAIL_IF(gpucore_tensor_create(m->ctx[0], GPUCORE_F32, 2, xs, &x));
    FAIL_IF(gpucore_random(x, GPUCORE_UNIFORM, -1, 1, 3, 0, NULL));
    FAIL_IF(gpucore_tensor_create(m->ctx[0], GPUCORE_F32, 2, xs, &dy));
    double *t = malloc(sizeof(double) * (size_t)iters);
    for (int it = -2; it < iters; it++) {
        double t0 = now_ms();
        if (M) {
            FAIL_IF(gpucore_pipeline_step(m->pipe, x, M, loss_copy, NULL, NULL));
        } else {
            gpucore_tensor *y = NULL;
            FAIL_IF(gpucore_ckpt_forward(m->ck[0], x, &y));
            FAIL_IF(gpucore_copy(dy, y, NULL));
            FAIL_IF(gpucore_ckpt_backward(m->ck[0], dy, NULL));
        }
        for (int s = 0; s < m->nstages; s++) FAIL_IF(gpucore_context_synchronize(m->ctx[s]));
        if (it >= 0) t[it] = now_ms() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    double med = t[iters / 2];
    free(t);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dy);
    return med;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--width") && i + 1 < argc) width = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--json] [--device cpu|cuda] [--width W] [--layers L] [--batch B] "
                            "[--iters N]\n", argv[0]);
            return 2;
        }
    }
    if (layers < MAXS || layers > MAXL || iters < 1 || width < 1 || batch < 8) {
        fprintf(stderr, "bench_pipeline: need %d <= layers <= %d, iters >= 1, width >= 1, batch >= 8\n", MAXS, MAXL);
        return 2;
    }
    model m;
    build(&m, 1);
    double peer = time_step(&m, 0);
    destroy(&m);
    if (!json)
        printf("bench_pipeline: MLP %d x linear+GELU width %lld, batch %lld on %s; peer: plain executor, one "
               "context, %.2f ms\n  %-8s %6s %10s %10s\n", layers, (long long)width, (long long)batch, device, peer,
               "contexts", "M", "step ms", "vs peer");
    static const int stage_counts[3] = {1, 2, 4};
    static const int64_t mbs[4] = {1, 2, 4, 8};
    for (int si = 0; si < 3; si++) {
        build(&m, stage_counts[si]);
        for (int mi = 0; mi < 4; mi++) {
            double ms = time_step(&m, mbs[mi]);
            char cas[96];
            snprintf(cas, sizeof cas, "mlp%d_w%lld_b%lld/ctx%d_mb%lld", layers, (long long)width, (long long)batch,
                     stage_counts[si], (long long)mbs[mi]);
            if (json)
                printf("{\"bench\":\"pipeline\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"step_ms\",\"value\":%.6g,"
                       "\"unit\":\"ms\",\"peer\":\"plain executor, one context\",\"peer_value\":%.6g,\"speedup\":%.4g}\n",
                       cas, device, ms, peer, peer / ms);
            else
                printf("  %-8d %6lld %10.2f %9.2fx\n", stage_counts[si], (long long)mbs[mi], ms, peer / ms);
        }
        destroy(&m);
    }
    return 0;
}
