/*
 * test_ddp.c — the DDP gradient reducer.
 *
 *   test_ddp local   1-rank communicator (no MPI): buckets, launch order, overlap,
 *                    no_sync, compression, bad input; steps inside a comm group on every
 *                    backend (and two local CUDA ranks driven by one thread).
 *   test_ddp mpi     under mpirun -np N: linear least squares trained for several
 *                    steps with each rank on its own shard of the batch must match a
 *                    single-process run on the whole batch (run by every rank with a
 *                    1-rank communicator), with identical parameters on all ranks.
 *
 * The model: w (12600 floats) split into 8 parameter tensors; loss = mean over samples
 * of (x.w - y)^2 / 2; the gradient is computed on the host in double per shard, put into
 * the gradient tensors during a simulated backward (last parameter first, with real
 * work on the compute stream between gradients), and reduced by the reducer.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>
#include "check.h"
#include "lsq_model.h"
#ifdef TEST_HAVE_MPI
#include <mpi.h>
#endif

#define NP 8
static const int64_t psize[NP] = {300, 1000, 2000, 700, 4000, 1500, 100, 3000};
static int64_t poff[NP + 1];
#define D 12600
#define NSAMPLES 32
#define STEPS 4
static int g_rank, g_size;
static int g_use_views; /* train() through gpucore_ddp_grad_view (gradients live in the buckets) */

/* Mean gradient over samples [lo, hi) at w, rounded to float. */
static void host_grad(const float *w, int lo, int hi, float *g) { lsq_grad(w, D, lo, hi, 1.0, g); }

typedef struct run_result {
    int trace_ok, overlap_ok, order_ok;
} run_result;

/* Check one step's trace: launches and reductions in bucket order, each launch after
 * its gradients, and bucket 0's reduction started before the last gradient was ready. */
static void check_trace(gpucore_ddp *ddp, run_result *r)
{
    gpucore_ddp_trace_event ev[256];
    int n = 0, nb = 0;
    CHECK_OK(gpucore_ddp_trace(ddp, ev, 256, &n));
    CHECK_OK(gpucore_ddp_bucket_count(ddp, &nb));
    int next_launch = 0, next_start = 0, next_done = 0, ready[NP] = {0};
    int64_t start0 = -1, last_ready = -1;
    for (int i = 0; i < n; i++) {
        switch (ev[i].kind) {
        case GPUCORE_DDP_TRACE_READY: ready[ev[i].index] = 1; last_ready = ev[i].time_ns; break;
        case GPUCORE_DDP_TRACE_LAUNCH: {
            if (ev[i].index != next_launch++) r->order_ok = 0;
            int b0 = 0, b1 = 0;
            gpucore_ddp_bucket_info(ddp, ev[i].index, &b0, &b1, NULL);
            for (int g = b0; g < b1; g++)
                if (!ready[g]) r->order_ok = 0;
            break;
        }
        case GPUCORE_DDP_TRACE_START:
            if (ev[i].index != next_start++) r->order_ok = 0;
            if (ev[i].index == 0) start0 = ev[i].time_ns;
            break;
        case GPUCORE_DDP_TRACE_DONE: if (ev[i].index != next_done++) r->order_ok = 0; break;
        default: break;
        }
    }
    if (next_launch != nb || next_start != nb || next_done != nb) r->trace_ok = 0;
    if (!(start0 >= 0 && start0 < last_ready)) r->overlap_ok = 0;
}

/* Train STEPS steps of SGD on samples [lo, hi) with this communicator; w in/out. */
static void train(gpucore_comm *comm, gpucore_context *ctx, int lo, int hi, float *w, const gpucore_ddp_options *opt,
                  run_result *res)
{
    gpucore_tensor *grads[NP];
    for (int p = 0; p < NP; p++) CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &psize[p], &grads[p]));
    gpucore_ddp *ddp = NULL;
    CHECK_OK(gpucore_ddp_create(comm, grads, NP, opt, &ddp));
    gpucore_tensor *views[NP] = {NULL}, **use = grads;
    if (g_use_views) {
        for (int p = 0; p < NP; p++) CHECK_OK(gpucore_ddp_grad_view(ddp, p, &views[p]));
        use = views;
    }
    gpucore_stream *compute = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &compute));
    int64_t busy_n = 1 << 16;
    gpucore_tensor *busy = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &busy_n, &busy));
    float *g = malloc(sizeof(float) * D);
    for (int step = 0; step < STEPS; step++) {
        host_grad(w, lo, hi, g);
        for (int p = NP - 1; p >= 0; p--) { /* backward: last parameter first */
            CHECK_OK(gpucore_copy_from_host_async(use[p], g + poff[p], psize[p] * 4, compute));
            for (int k = 0; k < 2; k++) CHECK_OK(gpucore_random(busy, GPUCORE_NORMAL, 0, 1, 7, (uint64_t)k, compute));
            CHECK_OK(gpucore_stream_synchronize(compute)); /* the host waits, as a real backward's ops take time */
            CHECK_OK(gpucore_ddp_mark_ready(ddp, p, compute));
        }
        CHECK_OK(gpucore_ddp_finish(ddp, compute));
        for (int p = 0; p < NP; p++)
            CHECK_OK(gpucore_copy_to_host_async(g + poff[p], psize[p] * 4, use[p], compute));
        CHECK_OK(gpucore_stream_synchronize(compute));
        for (int64_t j = 0; j < D; j++) w[j] -= 0.002f * g[j];
        if (res && opt && opt->trace) check_trace(ddp, res);
    }
    free(g);
    for (int p = 0; p < NP; p++) gpucore_tensor_destroy(views[p]);
    CHECK_OK(gpucore_ddp_destroy(ddp));
    gpucore_tensor_destroy(busy);
    CHECK_OK(gpucore_stream_destroy(compute));
    for (int p = 0; p < NP; p++) gpucore_tensor_destroy(grads[p]);
}

static void init_w(float *w)
{
    for (int64_t j = 0; j < D; j++) w[j] = 0.01f * (float)((j % 7) - 3);
}

static double rel_diff(const float *a, const float *b)
{
    double num = 0, den = 0;
    for (int64_t j = 0; j < D; j++) {
        double d = (double)a[j] - b[j];
        num += d * d;
        den += (double)b[j] * b[j];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_buckets(gpucore_comm *comm, gpucore_context *ctx)
{
    gpucore_tensor *grads[NP];
    for (int p = 0; p < NP; p++) CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &psize[p], &grads[p]));
    gpucore_ddp_options o;
    gpucore_ddp_options_default(&o);
    CHECK(o.first_bucket_bytes == 1 << 20 && o.bucket_bytes == 25 << 20);
    gpucore_ddp *ddp = NULL;
    CHECK_OK(gpucore_ddp_create(comm, grads, NP, NULL, &ddp)); /* defaults: everything (50 KB) in one bucket */
    int nb = 0, b0 = -1, b1 = -1;
    int64_t bytes = 0;
    CHECK_OK(gpucore_ddp_bucket_count(ddp, &nb));
    CHECK(nb == 1);
    CHECK_OK(gpucore_ddp_bucket_info(ddp, 0, &b0, &b1, &bytes));
    CHECK(b0 == 0 && b1 == NP && bytes == D * 4);
    gpucore_ddp_destroy(ddp);
    /* 8 KiB first, then 20 KiB: reverse order, each closes once it reaches its cap */
    o.first_bucket_bytes = 8192;
    o.bucket_bytes = 20480;
    CHECK_OK(gpucore_ddp_create(comm, grads, NP, &o, &ddp));
    CHECK_OK(gpucore_ddp_bucket_count(ddp, &nb));
    CHECK(nb == 3);
    const int want[3][2] = {{7, 8}, {4, 7}, {0, 4}}; /* 12000 B; 400+6000+16000 B; the rest (16000 B) */
    for (int b = 0; b < nb && b < 3; b++) {
        CHECK_OK(gpucore_ddp_bucket_info(ddp, b, &b0, &b1, &bytes));
        CHECK(b0 == want[b][0] && b1 == want[b][1]);
    }
    /* bad input */
    CHECK_STATUS(gpucore_ddp_mark_ready(ddp, NP, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ddp_bucket_info(ddp, 3, &b0, &b1, &bytes), GPUCORE_ERR_INVALID_ARGUMENT);
    for (int p = 0; p < NP; p++) CHECK_OK(gpucore_fill(grads[p], 1, NULL));
    CHECK_OK(gpucore_ddp_mark_ready(ddp, 7, NULL));
    CHECK_STATUS(gpucore_ddp_mark_ready(ddp, 7, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ddp_finish(ddp, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ddp_set_no_sync(ddp, 1), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *view = NULL;
    CHECK_STATUS(gpucore_ddp_grad_view(ddp, 0, &view), GPUCORE_ERR_INVALID_ARGUMENT); /* mid-step */
    CHECK(view == NULL);
    for (int p = 6; p >= 0; p--) CHECK_OK(gpucore_ddp_mark_ready(ddp, p, NULL));
    CHECK_OK(gpucore_ddp_finish(ddp, NULL));
    /* all ranks filled 1, averaged: 1 */
    float *h = malloc(sizeof(float) * 4000);
    CHECK_OK(gpucore_copy_to_host(h, psize[4] * 4, grads[4]));
    CHECK(h[0] == 1.0f && h[3999] == 1.0f);
    /* no_sync: nothing moves, the local values stay */
    CHECK_OK(gpucore_ddp_set_no_sync(ddp, 1));
    CHECK_OK(gpucore_fill(grads[4], (double)(g_rank + 2), NULL));
    for (int p = NP - 1; p >= 0; p--) CHECK_OK(gpucore_ddp_mark_ready(ddp, p, NULL));
    CHECK_OK(gpucore_ddp_finish(ddp, NULL));
    CHECK_OK(gpucore_copy_to_host(h, psize[4] * 4, grads[4]));
    CHECK(h[17] == (float)(g_rank + 2));
    /* ...and the next synchronised step averages the accumulated values */
    CHECK_OK(gpucore_ddp_set_no_sync(ddp, 0));
    for (int p = NP - 1; p >= 0; p--) CHECK_OK(gpucore_ddp_mark_ready(ddp, p, NULL));
    CHECK_OK(gpucore_ddp_finish(ddp, NULL));
    CHECK_OK(gpucore_copy_to_host(h, psize[4] * 4, grads[4]));
    float want_avg = 0;
    for (int r = 0; r < g_size; r++) want_avg += (float)(r + 2);
    want_avg /= (float)g_size;
    CHECK(fabsf(h[17] - want_avg) <= 1e-6f * want_avg);
    free(h);
    CHECK_STATUS(gpucore_ddp_grad_view(ddp, NP, &view), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ddp_grad_view(ddp, -1, &view), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_ddp_grad_view(ddp, 0, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_ddp_grad_view(NULL, 0, &view), GPUCORE_ERR_NULL_POINTER);
    /* a view starts with the gradient's current value */
    CHECK_OK(gpucore_fill(grads[4], 5.0, NULL));
    CHECK_OK(gpucore_ddp_grad_view(ddp, 4, &view));
    float v17 = 0;
    if (view) {
        float *hv = malloc(sizeof(float) * 4000);
        CHECK_OK(gpucore_copy_to_host(hv, psize[4] * 4, view));
        v17 = hv[17];
        free(hv);
        gpucore_tensor_destroy(view);
    }
    CHECK(v17 == 5.0f);
    CHECK_OK(gpucore_ddp_destroy(ddp));
    CHECK_STATUS(gpucore_ddp_grad_view(ddp, 0, &view), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_ddp_mark_ready(ddp, 0, NULL), GPUCORE_ERR_INVALID_HANDLE);
    gpucore_tensor *bad[2] = {grads[0], grads[0]};
    CHECK_STATUS(gpucore_ddp_create(comm, bad, 2, NULL, &ddp), GPUCORE_ERR_INVALID_ARGUMENT);
    o.wire_dtype = GPUCORE_I32;
    CHECK_STATUS(gpucore_ddp_create(comm, grads, NP, &o, &ddp), GPUCORE_ERR_DTYPE_MISMATCH);
    for (int p = 0; p < NP; p++) gpucore_tensor_destroy(grads[p]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Integer-valued gradient data: exact in f32 through the pre-division and the sum. */
static float grad_value(int rank, int64_t i) { return (float)((i * 7 + rank * 13) % 17 - 8); }

/* One gradient of n floats on `ctx`, filled with grad_value(rank, .). */
static gpucore_tensor *make_grad(gpucore_context *ctx, int rank, int64_t n)
{
    gpucore_tensor *t = NULL;
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = grad_value(rank, i);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &t));
    if (t) CHECK_OK(gpucore_copy_from_host(t, h, n * 4));
    free(h);
    return t;
}

/* The gradient holds the mean over `size` ranks of grad_value(r, .), exactly. */
static int grad_is_mean(gpucore_tensor *t, int64_t n, int size)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    int ok = gpucore_copy_to_host(h, n * 4, t) == GPUCORE_OK;
    for (int64_t i = 0; ok && i < n; i++) {
        float want = 0;
        for (int r = 0; r < size; r++) want += grad_value(r, i) / (float)size;
        ok = h[i] == want;
    }
    free(h);
    return ok;
}

/* gpucore_ddp_finish orders the copy back by events and does not
 * wait on the host. Rank 0's finish runs while its reduction cannot complete (the
 * other ranks join `late_s` seconds later under MPI; on one rank the reduction waits
 * on a long op on the producing stream): finish must return at once, the collective
 * still in flight, and the gradients hold the mean after a stream synchronize. The
 * old host wait in finish made it return only after the reduction. */
static void test_finish_no_host_wait(gpucore_comm *comm, gpucore_context *ctx, double late_s)
{
    const int64_t n = 3001, gate_n = (int64_t)1 << 23;
    gpucore_tensor *g = make_grad(ctx, g_rank, n), *gate = NULL;
    gpucore_ddp *ddp = NULL;
    gpucore_stream *stream = NULL;
    CHECK_OK(gpucore_ddp_create(comm, &g, 1, NULL, &ddp));
    CHECK_OK(gpucore_stream_create(ctx, 0, &stream));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &gate_n, &gate));
    if (!ddp || !stream || !gate) return;
    CHECK_OK(gpucore_context_synchronize(ctx));
    if (g_size == 1) /* slow work on the producing stream: the reduction waits for it */
        for (int k = 0; k < 4; k++) CHECK_OK(gpucore_random(gate, GPUCORE_NORMAL, 0, 1, 3, (uint64_t)k, stream));
    if (g_rank > 0) {
        struct timespec d = {(time_t)late_s, (long)((late_s - (double)(time_t)late_s) * 1e9)};
        nanosleep(&d, NULL);
    }
    CHECK_OK(gpucore_ddp_mark_ready(ddp, 0, stream));
    double t0 = now_s();
    CHECK_OK(gpucore_ddp_finish(ddp, stream));
    double dt = now_s() - t0;
    if (g_rank == 0) {
        int in_flight = gpucore_comm_wait(comm, 0, 0.0) == GPUCORE_ERR_TIMEOUT; /* the reduction is not done */
        gpucore_clear_error();
        CHECK(in_flight);
        if (g_size > 1) CHECK(dt < 0.5 * late_s);
        if (!in_flight) fprintf(stderr, "ddp_finish returned after its reduction (%.3f s): it waited on the host\n", dt);
    }
    CHECK_OK(gpucore_stream_synchronize(stream));
    CHECK(grad_is_mean(g, n, g_size));
    CHECK_OK(gpucore_comm_wait(comm, 0, 60));
    CHECK_OK(gpucore_ddp_destroy(ddp));
    CHECK_OK(gpucore_stream_destroy(stream));
    gpucore_tensor_destroy(gate);
    gpucore_tensor_destroy(g);
}

/* The last bucket is reduced on the stream that marked its last gradient (no hand-off
 * to the comm stream): that stream must wait for the bucket's gradients marked on
 * other streams, and finish on a third stream must wait for it. Gradient 1 is
 * written and marked on stream a behind slow work; gradient 0 (the last bucket's
 * last) on stream b at once; finish and the read back on stream c. Two steps, the
 * gradients as copies and then as views into the bucket. */
static void test_last_bucket_streams(gpucore_comm *comm, gpucore_context *ctx)
{
    const int64_t n = 2049, slow_n = (int64_t)1 << 22;
    gpucore_tensor *g[2] = {make_grad(ctx, g_rank, n), make_grad(ctx, g_rank, n)}, *slow = NULL, *use[2] = {NULL, NULL};
    gpucore_stream *st[3] = {NULL, NULL, NULL};
    gpucore_ddp *ddp = NULL;
    CHECK_OK(gpucore_ddp_create(comm, g, 2, NULL, &ddp));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &slow_n, &slow));
    for (int i = 0; i < 3; i++) CHECK_OK(gpucore_stream_create(ctx, 0, &st[i]));
    if (!ddp || !slow || !st[2]) return;
    int nb = 0;
    CHECK_OK(gpucore_ddp_bucket_count(ddp, &nb));
    CHECK(nb == 1); /* both gradients in the last bucket */
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = grad_value(g_rank, i);
    for (int step = 0; step < 2; step++) {
        if (step == 1) for (int p = 0; p < 2; p++) CHECK_OK(gpucore_ddp_grad_view(ddp, p, &use[p]));
        gpucore_tensor *const *t = step ? use : g;
        CHECK_OK(gpucore_context_synchronize(ctx));
        for (int k = 0; k < 6; k++) CHECK_OK(gpucore_random(slow, GPUCORE_NORMAL, 0, 1, 5, (uint64_t)k, st[0]));
        for (int p = 0; p < 2; p++) CHECK_OK(gpucore_copy_from_host_async(t[p], h, n * 4, st[p ? 0 : 1]));
        CHECK_OK(gpucore_ddp_mark_ready(ddp, 1, st[0]));
        CHECK_OK(gpucore_ddp_mark_ready(ddp, 0, st[1]));
        CHECK_OK(gpucore_ddp_finish(ddp, st[2]));
        float *got = malloc(sizeof(float) * (size_t)n * 2);
        for (int p = 0; p < 2; p++) CHECK_OK(gpucore_copy_to_host_async(got + p * n, n * 4, t[p], st[2]));
        CHECK_OK(gpucore_stream_synchronize(st[2]));
        int ok = 1;
        for (int64_t i = 0; i < 2 * n && ok; i++) {
            float want = 0;
            for (int r = 0; r < g_size; r++) want += grad_value(r, i % n) / (float)g_size;
            ok = got[i] == want;
        }
        CHECK(ok);
        if (!ok) fprintf(stderr, "rank %d step %d: the last bucket's reduction was not ordered across streams\n",
                         g_rank, step);
        free(got);
        CHECK_OK(gpucore_context_synchronize(ctx));
    }
    free(h);
    for (int p = 0; p < 2; p++) gpucore_tensor_destroy(use[p]);
    CHECK_OK(gpucore_ddp_destroy(ddp));
    for (int i = 0; i < 3; i++) CHECK_OK(gpucore_stream_destroy(st[i]));
    gpucore_tensor_destroy(slow);
    for (int p = 0; p < 2; p++) gpucore_tensor_destroy(g[p]);
}

/* The same on the CUDA backend with two local ranks (cuda:0, cuda:1; on the NCCL
 * stand-in in the cuda-contract suite): rank 0 finishes before rank 1 has issued
 * its reduction at all, so rank 0's allreduce cannot complete until rank 1 joins;
 * a host wait in finish would block until the communicator's timeout and fail. */
static void test_finish_two_local_ranks(void)
{
    gpucore_context *ctx[2] = {NULL, NULL};
    if (gpucore_context_create("cuda:0", &ctx[0]) || gpucore_context_create("cuda:1", &ctx[1])) {
        printf("SKIP ddp on two local CUDA ranks: %s\n", gpucore_last_error());
        check_skipped++;
        gpucore_clear_error();
        gpucore_context_destroy(ctx[0]);
        return;
    }
    gpucore_comm *comm[2] = {NULL, NULL};
    CHECK_OK(gpucore_comm_create_local(ctx, 2, comm));
    if (!comm[0]) { gpucore_context_destroy(ctx[0]); gpucore_context_destroy(ctx[1]); return; }
    const int64_t n = 3001;
    gpucore_tensor *g[2];
    gpucore_ddp *ddp[2] = {NULL, NULL};
    gpucore_stream *stream[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_comm_set_timeout(comm[r], 5.0));
        g[r] = make_grad(ctx[r], r, n);
        CHECK_OK(gpucore_ddp_create(comm[r], &g[r], 1, NULL, &ddp[r]));
        CHECK_OK(gpucore_stream_create(ctx[r], 0, &stream[r]));
    }
    const long host_fns_before = check_standin_counter("cudaLaunchHostFunc");
    CHECK_OK(gpucore_ddp_mark_ready(ddp[0], 0, stream[0]));
    double t0 = now_s();
    CHECK_OK(gpucore_ddp_finish(ddp[0], stream[0]));
    double dt = now_s() - t0;
    CHECK(dt < 1.0);
    CHECK_STATUS(gpucore_comm_wait(comm[0], 0, 0.05), GPUCORE_ERR_TIMEOUT); /* still in flight: rank 1 is missing */
    CHECK_OK(gpucore_ddp_mark_ready(ddp[1], 0, stream[1]));
    CHECK_OK(gpucore_ddp_finish(ddp[1], stream[1]));
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_stream_synchronize(stream[r]));
        CHECK(grad_is_mean(g[r], n, 2));
        CHECK_OK(gpucore_comm_wait(comm[r], 0, 30));
    }
    /* item 11: completion is ordered by events; no host function is queued per collective */
    const long host_fns = check_standin_counter("cudaLaunchHostFunc") - host_fns_before;
    if (host_fns_before < 0) {
        printf("cuda: host functions per collective not counted (a real CUDA module, not the stand-in)\n");
    } else {
        CHECK(host_fns == 0);
        if (host_fns) printf("  %ld host functions were queued on streams during one DDP reduction\n", host_fns);
    }
    printf("cuda: 2 local ranks: ddp_finish returned in %.4f s with rank 1's reduction not yet issued\n", dt);
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_ddp_destroy(ddp[r]));
        CHECK_OK(gpucore_stream_destroy(stream[r]));
        gpucore_tensor_destroy(g[r]);
        CHECK_OK(gpucore_comm_destroy(comm[r]));
        CHECK_OK(gpucore_context_destroy(ctx[r]));
    }
}

/* One thread drives every rank, each step's reductions inside one comm group (the README's one-process
 * recipe), with a bf16 wire and several buckets. NCCL starts a group's collectives only at ncclGroupEnd
 * (nccl.h:555, 565), so the casts back from the wire and the copies back into the gradients must run after
 * it; before the fix they ran first, leaving each rank its own, unreduced gradient (and the stand-in flags the
 * kernels and copies queued on the held stream). gpucore_comm_wait on a collective of the open group cannot
 * succeed: it is refused (it used to return at once). devs: n device names (one rank each). Every value is a
 * small integer or half, exact in bf16, so the mean is exact. */
static void test_grouped_steps(const char *const *devs, int n)
{
    enum { NG = 3, MAXR = 2 };
    const int64_t gsize[NG] = {1500, 3001, 700};
    gpucore_context *ctx[MAXR] = {NULL, NULL};
    gpucore_comm *comm[MAXR] = {NULL, NULL};
    gpucore_ddp *ddp[MAXR] = {NULL, NULL};
    gpucore_stream *stream[MAXR] = {NULL, NULL};
    gpucore_tensor *g[MAXR][NG] = {{NULL}};
    for (int r = 0; r < n; r++)
        if (gpucore_context_create(devs[r], &ctx[r])) {
            printf("SKIP grouped ddp on %d ranks (%s): %s\n", n, devs[r], gpucore_last_error());
            check_skipped++;
            gpucore_clear_error();
            for (int q = 0; q < r; q++) gpucore_context_destroy(ctx[q]);
            return;
        }
    gpucore_status cst = gpucore_comm_create_local(ctx, n, comm);
    if (cst == GPUCORE_ERR_NOT_SUPPORTED) {
        printf("SKIP grouped ddp on %s: %s\n", devs[0], gpucore_last_error());
        check_skipped++;
        gpucore_clear_error();
    }
    CHECK(cst == GPUCORE_OK || cst == GPUCORE_ERR_NOT_SUPPORTED);
    if (!comm[0]) { for (int r = 0; r < n; r++) gpucore_context_destroy(ctx[r]); return; }
    gpucore_ddp_options o;
    gpucore_ddp_options_default(&o);
    o.first_bucket_bytes = 1024;
    o.bucket_bytes = 4096;
    o.wire_dtype = GPUCORE_BF16;
    int nbuckets = 0;
    for (int r = 0; r < n; r++) {
        CHECK_OK(gpucore_comm_set_timeout(comm[r], 10.0));
        CHECK_OK(gpucore_stream_create(ctx[r], 0, &stream[r]));
        for (int i = 0; i < NG; i++) CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &gsize[i], &g[r][i]));
        CHECK_OK(gpucore_ddp_create(comm[r], g[r], NG, &o, &ddp[r]));
    }
    CHECK_OK(gpucore_ddp_bucket_count(ddp[0], &nbuckets));
    CHECK(nbuckets >= 3);
    float *h = malloc(sizeof(float) * 3001);
    for (int step = 0; step < 2; step++) {
        for (int r = 0; r < n; r++)
            for (int i = 0; i < NG; i++) {
                for (int64_t j = 0; j < gsize[i]; j++) h[j] = grad_value(r + step + i, j);
                CHECK_OK(gpucore_copy_from_host(g[r][i], h, gsize[i] * 4));
            }
        CHECK_OK(gpucore_comm_group_start());
        for (int r = 0; r < n; r++) {
            for (int i = NG - 1; i >= 0; i--) CHECK_OK(gpucore_ddp_mark_ready(ddp[r], i, stream[r]));
            CHECK_OK(gpucore_ddp_finish(ddp[r], stream[r]));
        }
        /* the group's collectives have not started: a wait for them is refused, not answered at once */
        CHECK_STATUS(gpucore_comm_wait(comm[0], 0, 1.0), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK_OK(gpucore_comm_group_end());
        for (int r = 0; r < n; r++) {
            CHECK_OK(gpucore_stream_synchronize(stream[r]));
            CHECK_OK(gpucore_comm_wait(comm[r], 0, 30));
            for (int i = 0; i < NG; i++) {
                CHECK_OK(gpucore_copy_to_host(h, gsize[i] * 4, g[r][i]));
                int64_t bad = 0, first = -1;
                for (int64_t j = 0; j < gsize[i]; j++) {
                    double want = 0;
                    for (int q = 0; q < n; q++) want += (double)grad_value(q + step + i, j) / n;
                    if ((double)h[j] != want && bad++ == 0) first = j;
                }
                CHECK(bad == 0);
                if (bad)
                    fprintf(stderr, "  grouped ddp, %d ranks, step %d: rank %d gradient %d has %lld of %lld elements "
                            "not the mean (e.g. [%lld] = %g, want %g)\n", n, step, r, i, (long long)bad,
                            (long long)gsize[i], (long long)first, h[first],
                            (grad_value(step + i, first) + (n > 1 ? grad_value(1 + step + i, first) : 0.0f)) / n);
            }
        }
    }
    printf("%s: grouped ddp, %d rank(s), %d buckets, bf16 wire, 2 steps: checked\n", devs[0], n, nbuckets);
    free(h);
    for (int r = 0; r < n; r++) {
        CHECK_OK(gpucore_ddp_destroy(ddp[r]));
        CHECK_OK(gpucore_stream_destroy(stream[r]));
        for (int i = 0; i < NG; i++) gpucore_tensor_destroy(g[r][i]);
        CHECK_OK(gpucore_comm_destroy(comm[r]));
    }
    for (int r = 0; r < n; r++) CHECK_OK(gpucore_context_destroy(ctx[r]));
}

static int run(gpucore_comm *comm, gpucore_context *ctx, const char *name)
{
    g_rank = gpucore_comm_rank(comm);
    g_size = gpucore_comm_size(comm);
    for (int p = 0; p < NP; p++) poff[p + 1] = poff[p] + psize[p];
    test_buckets(comm, ctx);
    test_finish_no_host_wait(comm, ctx, 1.0);
    test_last_bucket_streams(comm, ctx);

    gpucore_ddp_options o;
    gpucore_ddp_options_default(&o);
    o.first_bucket_bytes = 8192;
    o.bucket_bytes = 20480;
    o.trace = 1;
    int shard = NSAMPLES / g_size;
    float *w = malloc(sizeof(float) * D), *w_ref = malloc(sizeof(float) * D), *w_bf = malloc(sizeof(float) * D);
    init_w(w);
    init_w(w_ref);
    init_w(w_bf);
    run_result res = {1, 1, 1};
    clock_t c0 = clock();
    train(comm, ctx, g_rank * shard, (g_rank + 1) * shard, w, &o, &res);
    CHECK(res.trace_ok);
    CHECK(res.order_ok);
    CHECK(res.overlap_ok);
    if (!res.overlap_ok) fprintf(stderr, "rank %d: bucket 0 did not start before the last gradient was ready\n", g_rank);

    /* gradients as views into the buckets: no copy in or back, the same bits */
    float *w_view = malloc(sizeof(float) * D);
    init_w(w_view);
    g_use_views = 1;
    o.trace = 0;
    train(comm, ctx, g_rank * shard, (g_rank + 1) * shard, w_view, &o, NULL);
    g_use_views = 0;
    o.trace = 1;
    CHECK(!memcmp(w_view, w, sizeof(float) * D));
    free(w_view);
    /* the single-process run on the whole batch */
    gpucore_comm *solo = NULL;
    CHECK_OK(gpucore_comm_create_local(&ctx, 1, &solo));
    train(solo, ctx, 0, NSAMPLES, w_ref, &o, NULL);
    CHECK_OK(gpucore_comm_destroy(solo));
    double err = rel_diff(w, w_ref);
    CHECK(err < 1e-5);
    /* bf16 on the wire: close, not equal */
    o.wire_dtype = GPUCORE_BF16;
    o.trace = 0;
    train(comm, ctx, g_rank * shard, (g_rank + 1) * shard, w_bf, &o, NULL);
    double err_bf = rel_diff(w_bf, w_ref);
    CHECK(err_bf < 1e-2);
    int identical = 1;
#ifdef TEST_HAVE_MPI
    if (g_size > 1) {
        float *w0 = malloc(sizeof(float) * D);
        memcpy(w0, w, sizeof(float) * D);
        MPI_Bcast(w0, D, MPI_FLOAT, 0, MPI_COMM_WORLD);
        identical = !memcmp(w0, w, sizeof(float) * D);
        free(w0);
    }
#endif
    CHECK(identical);
    printf("rank %d/%d: %d steps, %d-sample shard vs whole batch: rel diff %.2e (bf16 wire %.2e), params identical "
           "on all ranks: %s, launch order ok: %d, overlap ok: %d (%.2f s cpu)\n", g_rank, g_size, STEPS, shard, err,
           err_bf, identical ? "yes" : "no", res.order_ok, res.overlap_ok, (double)(clock() - c0) / CLOCKS_PER_SEC);
    free(w);
    free(w_ref);
    free(w_bf);
    return check_finish(name);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "local";
    gpucore_context *ctx = NULL;
    gpucore_comm *comm = NULL;
    int rc = 1;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    if (!strcmp(mode, "local")) {
        const char *devs[4];
        int nd = test_devices(devs, 4);
        for (int d = 0; d < nd; d++) {
            if (!strcmp(devs[d], "cuda")) test_finish_two_local_ranks();
            test_grouped_steps(&devs[d], 1);
            if (!strcmp(devs[d], "cuda")) {
                const char *two[2] = {"cuda:0", "cuda:1"};
                test_grouped_steps(two, 2);
            }
        }
        CHECK_OK(gpucore_comm_create_local(&ctx, 1, &comm));
        if (comm) rc = run(comm, ctx, "test_ddp local");
    } else {
#ifdef TEST_HAVE_MPI
        CHECK_OK(gpucore_comm_create_mpi(ctx, &comm));
        if (comm) {
            char name[64];
            snprintf(name, sizeof name, "test_ddp mpi rank %d/%d", gpucore_comm_rank(comm), gpucore_comm_size(comm));
            rc = run(comm, ctx, name);
            int mine = rc != 0, any = 0;
            MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            if (any) rc = 1;
        }
#else
        printf("SKIP test_ddp %s: this build has no MPI\n", mode);
        return 77;
#endif
    }
    gpucore_comm_destroy(comm);
    gpucore_context_destroy(ctx);
    return rc;
}
