/*
 * test_concurrency.c — several threads on one context, each with its own pair of
 * streams, running ops and allocating at the same time, with cross-stream frees:
 * a tensor produced on stream A is consumed on stream B (event-ordered), recorded
 * on B and destroyed at once; A immediately reuses memory and overwrites it. If
 * the allocator handed the block back before B finished, B's result would be
 * wrong. Bounded by iteration count (it also runs under TSan and ASan in CI).
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

enum { THREADS = 4, ITERS = 40, N = 3000 };

typedef struct worker { gpucore_context *ctx; int id; int failures; char why[256]; } worker;

#define W_TRY(call)                                                                              \
    do {                                                                                         \
        gpucore_status st_ = (call);                                                             \
        if (st_) {                                                                               \
            w->failures++;                                                                       \
            snprintf(w->why, sizeof w->why, "%s: %s", #call, gpucore_last_error());             \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

static void *run(void *arg)
{
    worker *w = arg;
    gpucore_stream *a = NULL, *b = NULL;
    gpucore_event *ready = NULL;
    gpucore_tensor *x = NULL, *y = NULL, *sum = NULL, *junk = NULL, *mm = NULL, *mo = NULL;
    gpucore_tensor *gx = NULL, *gw = NULL, *gy = NULL;
    float *host = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N);
    int64_t shape[1] = {N}, one[1] = {1}, msq[2] = {16, 16}, vx[2] = {1, 256}, vw[2] = {512, 256}, vy[2] = {1, 512};
    W_TRY(gpucore_stream_create(w->ctx, 0, &a));
    W_TRY(gpucore_stream_create(w->ctx, 0, &b));
    W_TRY(gpucore_event_create(w->ctx, &ready));
    for (int it = 0; it < ITERS; it++) {
        uint64_t seed = (uint64_t)(w->id * 1000 + it);
        /* produce on A */
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 1, shape, &x));
        W_TRY(gpucore_random(x, GPUCORE_UNIFORM, -1, 1, seed, 0, a));
        W_TRY(gpucore_event_record(ready, a));
        /* consume on B: y = x + x, then sum; record x's use on B and free it right away */
        W_TRY(gpucore_stream_wait_event(b, ready));
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 1, shape, &y));
        W_TRY(gpucore_tensor_record_stream(y, b));
        W_TRY(gpucore_binary(GPUCORE_ADD, y, x, x, b));
        W_TRY(gpucore_tensor_record_stream(x, b));
        W_TRY(gpucore_tensor_destroy(x));
        x = NULL;
        /* A reuses memory at once and scribbles on it */
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 1, shape, &junk));
        W_TRY(gpucore_fill(junk, 1e30, a));
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 0, one, &sum));
        W_TRY(gpucore_tensor_record_stream(sum, b));
        W_TRY(gpucore_reduce(GPUCORE_REDUCTION_SUM, sum, y, GPUCORE_ALL_AXES, b));
        /* a small matmul on A meanwhile */
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 2, msq, &mm));
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 2, msq, &mo));
        W_TRY(gpucore_fill(mm, 0.5, a));
        W_TRY(gpucore_matmul(mm, mm, mo, NULL, a));
        float mval[256];
        W_TRY(gpucore_copy_to_host_async(mval, sizeof mval, mo, a));
        W_TRY(gpucore_stream_synchronize(a));
        for (int i = 0; i < 256; i++)
            if (mval[i] != 4.0f) {
                w->failures++;
                snprintf(w->why, sizeof w->why, "matmul element %d is %g, not 4", i, mval[i]);
                goto done;
            }
        /* a matrix-vector product on B (the CPU's decode path: one thread team for every stream, so
         * the threads' products meet there): 256 · 0.25 · v, exact, different in every thread */
        const double v = 0.5 + it + 100 * w->id;
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 2, vx, &gx));
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 2, vw, &gw));
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 2, vy, &gy));
        W_TRY(gpucore_fill(gx, v, b));
        W_TRY(gpucore_fill(gw, 0.25, b));
        W_TRY(gpucore_linear_forward(gx, gw, NULL, GPUCORE_ACT_NONE, gy, NULL, b));
        float gval[512];
        W_TRY(gpucore_copy_to_host_async(gval, sizeof gval, gy, b));
        W_TRY(gpucore_stream_synchronize(b));
        for (int i = 0; i < 512; i++)
            if (gval[i] != (float)(64 * v)) {
                w->failures++;
                snprintf(w->why, sizeof w->why, "matrix-vector element %d is %g, not %g", i, gval[i], 64 * v);
                goto done;
            }
        gpucore_tensor_destroy(gx); gx = NULL;
        gpucore_tensor_destroy(gw); gw = NULL;
        gpucore_tensor_destroy(gy); gy = NULL;
        /* check B's results against the same numbers drawn again */
        W_TRY(gpucore_stream_synchronize(b));
        W_TRY(gpucore_copy_to_host_async(host, (int64_t)sizeof(float) * N, y, b));
        float s = 0;
        W_TRY(gpucore_copy_to_host_async(&s, 4, sum, b));
        W_TRY(gpucore_stream_synchronize(b));
        W_TRY(gpucore_tensor_create(w->ctx, GPUCORE_F32, 1, shape, &x));
        W_TRY(gpucore_random(x, GPUCORE_UNIFORM, -1, 1, seed, 0, a));
        W_TRY(gpucore_stream_synchronize(a));
        W_TRY(gpucore_copy_to_host_async(ref, (int64_t)sizeof(float) * N, x, a));
        W_TRY(gpucore_stream_synchronize(a));
        double total = 0;
        for (int i = 0; i < N; i++) {
            if (host[i] != 2 * ref[i]) {
                w->failures++;
                snprintf(w->why, sizeof w->why, "iteration %d element %d: %g != 2*%g (memory reused too early?)", it, i,
                         host[i], ref[i]);
                goto done;
            }
            total += host[i];
        }
        if (fabs(total - s) > 1e-3 * (1 + fabs(total))) {
            w->failures++;
            snprintf(w->why, sizeof w->why, "sum %g != %g", s, total);
            goto done;
        }
        gpucore_tensor_destroy(x); x = NULL;
        gpucore_tensor_destroy(y); y = NULL;
        gpucore_tensor_destroy(sum); sum = NULL;
        gpucore_tensor_destroy(junk); junk = NULL;
        gpucore_tensor_destroy(mm); mm = NULL;
        gpucore_tensor_destroy(mo); mo = NULL;
    }
done:
    gpucore_tensor_destroy(gx);
    gpucore_tensor_destroy(gw);
    gpucore_tensor_destroy(gy);
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(y);
    gpucore_tensor_destroy(sum);
    gpucore_tensor_destroy(junk);
    gpucore_tensor_destroy(mm);
    gpucore_tensor_destroy(mo);
    gpucore_event_destroy(ready);
    gpucore_stream_destroy(a);
    gpucore_stream_destroy(b);
    free(host);
    free(ref);
    return NULL;
}

/* The CPU's matrix-vector products keep a thread team for the process's life. A child forked after it
 * started has none of those threads: its products still complete (the caller claims every part nobody
 * else takes), and its exit (the library's destructors) returns. The parent gives the child 20 s. */
static void test_fork_after_team(void)
{
#if defined(__SANITIZE_THREAD__)
    check_skipped++;
    printf("SKIP fork after the thread team: ThreadSanitizer does not follow a fork of a threaded process\n");
#else
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    if (!ctx) return;
    const int64_t vx[2] = {1, 256}, vw[2] = {512, 256}, vy[2] = {1, 512};
    gpucore_tensor *x = NULL, *w = NULL, *y = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, vx, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, vw, &w));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, vy, &y));
    CHECK_OK(gpucore_fill(x, 2.0, NULL));
    CHECK_OK(gpucore_fill(w, 0.25, NULL));
    CHECK_OK(gpucore_linear_forward(x, w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL));
    float v[512] = {0};
    CHECK_OK(gpucore_copy_to_host(v, sizeof v, y));
    CHECK(v[0] == 128.0f && v[511] == 128.0f);
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) { /* a product in the team's way (gpucore_linear_forward on the caller's thread), then exit */
        float c[512] = {0};
        int ok = gpucore_fill(x, 3.0, NULL) == GPUCORE_OK &&
                 gpucore_linear_forward(x, w, NULL, GPUCORE_ACT_NONE, y, NULL, NULL) == GPUCORE_OK &&
                 gpucore_copy_to_host(c, sizeof c, y) == GPUCORE_OK;
        for (int i = 0; ok && i < 512; i++) ok = c[i] == 192.0f;
#if defined(__SANITIZE_ADDRESS__)
        _exit(ok ? 0 : 3); /* LeakSanitizer would count what the parent's other threads' stacks hold */
#else
        exit(ok ? 0 : 3); /* runs the library's destructors */
#endif
    }
    CHECK(pid > 0);
    if (pid <= 0) return;
    int status = 0, done = 0;
    for (int i = 0; i < 200 && !done; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) done = 1;
        else usleep(100000);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK(done && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("fork after the thread team: the child %s\n",
           !done ? "hung (killed after 20 s)" : WIFEXITED(status) && !WEXITSTATUS(status) ? "ran a product and exited"
                                                                                          : "failed");
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(w);
    gpucore_tensor_destroy(y);
    CHECK_OK(gpucore_context_destroy(ctx));
#endif
}

int main(void)
{
    test_fork_after_team();
    const char *devices[4];
    int nd = test_devices(devices, 4);
    for (int d = 0; d < nd; d++) {
        gpucore_context *ctx = NULL;
        CHECK_OK(gpucore_context_create(devices[d], &ctx));
        if (!ctx) continue;
        pthread_t th[THREADS];
        worker w[THREADS];
        for (int i = 0; i < THREADS; i++) {
            w[i] = (worker){ctx, i, 0, ""};
            pthread_create(&th[i], NULL, run, &w[i]);
        }
        for (int i = 0; i < THREADS; i++) {
            pthread_join(th[i], NULL);
            CHECK(w[i].failures == 0);
            if (w[i].failures) fprintf(stderr, "  %s thread %d: %s\n", devices[d], i, w[i].why);
        }
        gpucore_memory_stats ms;
        memset(&ms, 0, sizeof ms);
        ms.struct_size = sizeof ms;
        CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &ms));
        CHECK(ms.allocated_bytes == 0); /* every thread freed everything */
        printf("%s: %d threads x %d iterations, peak %lld bytes allocated\n", devices[d], THREADS, ITERS,
               (long long)ms.allocated_bytes_peak);
        CHECK_OK(gpucore_context_destroy(ctx));
    }
    return check_finish("test_concurrency");
}
