/*
 * test_stream.c — streams and events on every backend present: FIFO order on a
 * stream, cross-stream waits through events (a slow producer on one stream, a
 * consumer on another that must see its result), queries, elapsed time, the
 * per-thread current stream, two threads using one context on their own
 * streams at once, small ops on an idle CPU stream (run at once on the caller's
 * thread) keeping their place behind queued work, asynchronous errors (reported once, by
 * the next synchronize of the stream or its context), and the CPU context's pending word.
 */
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include "check.h"

enum { BIG = 1 << 22 };

static void test_ordering(gpucore_context *ctx)
{
    int64_t shape[1] = {BIG};
    gpucore_tensor *a = NULL, *b = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &b));
    gpucore_stream *producer = NULL, *consumer = NULL;
    gpucore_event *ready = NULL, *t0 = NULL, *t1 = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &producer));
    CHECK_OK(gpucore_stream_create(ctx, -1, &consumer));
    CHECK_OK(gpucore_event_create(ctx, &ready));
    CHECK_OK(gpucore_event_create(ctx, &t0));
    CHECK_OK(gpucore_event_create(ctx, &t1));
    CHECK_OK(gpucore_event_query(ready)); /* never recorded: complete */

    /* producer: fill, then a slow normal fill (the value that must win), then record */
    CHECK_OK(gpucore_fill(a, 1.0, producer));
    CHECK_OK(gpucore_event_record(t0, producer));
    for (int rep = 0; rep < 4; rep++) CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0, 1, 77, (uint64_t)rep, producer));
    CHECK_OK(gpucore_event_record(t1, producer));
    CHECK_OK(gpucore_event_record(ready, producer));
    /* consumer waits on the event, then copies: must see the last random fill */
    CHECK_OK(gpucore_stream_wait_event(consumer, ready));
    CHECK_OK(gpucore_copy(b, a, consumer));
    CHECK_OK(gpucore_stream_synchronize(consumer));
    float *x = malloc(sizeof(float) * BIG), *y = malloc(sizeof(float) * BIG);
    CHECK_OK(gpucore_copy_to_host(x, (int64_t)sizeof(float) * BIG, b));
    gpucore_tensor *r = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &r));
    CHECK_OK(gpucore_random(r, GPUCORE_NORMAL, 0, 1, 77, 3, NULL));
    CHECK_OK(gpucore_copy_to_host(y, (int64_t)sizeof(float) * BIG, r));
    CHECK(memcmp(x, y, sizeof(float) * BIG) == 0);
    CHECK_OK(gpucore_event_synchronize(ready));
    CHECK_OK(gpucore_event_query(ready));
    CHECK_OK(gpucore_stream_query(producer));
    float ms = -1;
    CHECK_OK(gpucore_event_elapsed_ms(t0, t1, &ms));
    CHECK(ms > 0);
    printf("  4 normal fills of %d floats: %.2f ms between events\n", BIG, ms);

    /* a query while work is queued says NOT_READY or OK, never an error */
    CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0, 1, 1, 0, producer));
    gpucore_status q = gpucore_stream_query(producer);
    CHECK(q == GPUCORE_OK || q == GPUCORE_ERR_NOT_READY);
    CHECK_OK(gpucore_stream_synchronize(producer));
    CHECK_OK(gpucore_stream_query(producer));

    /* the backend's own stream object is exposed for interop */
    void *native = NULL;
    CHECK_OK(gpucore_stream_native_handle(producer, &native));
    CHECK(native != NULL);
    CHECK_STATUS(gpucore_stream_native_handle(producer, NULL), GPUCORE_ERR_NULL_POINTER);

    /* current stream: set per thread, used when NULL is passed */
    gpucore_stream *cur = NULL, *def = NULL;
    CHECK_OK(gpucore_context_default_stream(ctx, &def));
    CHECK_OK(gpucore_context_current_stream(ctx, &cur));
    CHECK(cur == def);
    CHECK_OK(gpucore_context_set_current_stream(ctx, consumer));
    CHECK_OK(gpucore_context_current_stream(ctx, &cur));
    CHECK(cur == consumer);
    CHECK_OK(gpucore_context_set_current_stream(ctx, NULL));
    CHECK_OK(gpucore_context_current_stream(ctx, &cur));
    CHECK(cur == def);

    free(x);
    free(y);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(r);
    gpucore_event_destroy(ready);
    gpucore_event_destroy(t0);
    gpucore_event_destroy(t1);
    CHECK_OK(gpucore_stream_destroy(producer));
    CHECK_OK(gpucore_stream_destroy(consumer));
}

/* Two threads, one context, each on its own stream: fills, random, copies. */
typedef struct worker_args { gpucore_context *ctx; int id; int failures; } worker_args;

static void *worker(void *p)
{
    worker_args *w = p;
    gpucore_stream *s = NULL;
    if (gpucore_stream_create(w->ctx, 0, &s)) { w->failures++; return NULL; }
    gpucore_context_set_current_stream(w->ctx, s);
    int64_t shape[1] = {4096 + w->id};
    float *h = malloc(sizeof(float) * (size_t)shape[0]);
    for (int it = 0; it < 200; it++) {
        gpucore_tensor *t = NULL;
        if (gpucore_tensor_create(w->ctx, GPUCORE_F32, 1, shape, &t) ||
            gpucore_fill(t, (double)(w->id * 1000 + it), NULL) ||
            gpucore_copy_to_host(h, shape[0] * 4, t)) { w->failures++; gpucore_tensor_destroy(t); break; }
        for (int64_t i = 0; i < shape[0]; i++)
            if (h[i] != (float)(w->id * 1000 + it)) { w->failures++; break; }
        gpucore_tensor_destroy(t);
    }
    free(h);
    gpucore_stream_destroy(s);
    return NULL;
}

static void test_threads(gpucore_context *ctx)
{
    pthread_t th[2];
    worker_args args[2] = {{ctx, 1, 0}, {ctx, 2, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, &args[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(args[0].failures == 0 && args[1].failures == 0);
}

/* Small ops (a 16-element add, fill, copy; an event record) behind a slow op must wait for it;
 * on an idle CPU stream they are done when the call returns (run on the caller's thread). */
static void test_small_ops(gpucore_context *ctx)
{
    int64_t big = BIG, small = 16;
    gpucore_tensor *a = NULL, *head = NULL, *s = NULL, *c = NULL;
    gpucore_stream *st = NULL;
    gpucore_event *e = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &st));
    CHECK_OK(gpucore_event_create(ctx, &e));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &big, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &small, &s));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &small, &c));
    CHECK_OK(gpucore_fill(a, 0.0, st));
    CHECK_OK(gpucore_stream_synchronize(st));
    CHECK_OK(gpucore_tensor_slice(a, 0, 0, small, 1, &head));
    float want[16], got[16];
    for (int rep = 0; rep < 20; rep++) {
        /* slow normal fills of all of a, then small ops that read its first 16 elements */
        for (int k = 0; k < 3; k++) CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0, 1, 5, (uint64_t)(rep * 3 + k), st));
        CHECK_OK(gpucore_fill(s, 2.0, st));
        CHECK_OK(gpucore_binary(GPUCORE_ADD, c, head, s, st));
        CHECK_OK(gpucore_copy(s, c, st));
        CHECK_OK(gpucore_event_record(e, st));
        CHECK_OK(gpucore_event_synchronize(e));
        CHECK_OK(gpucore_copy_to_host(want, sizeof want, head));
        CHECK_OK(gpucore_copy_to_host(got, sizeof got, s));
        int same = 1;
        for (int i = 0; i < 16; i++) same &= got[i] == want[i] + 2.0f;
        CHECK(same);
    }
    /* on an idle stream: complete at return (a queued op is rarely done that soon on the CPU) */
    gpucore_device_type type;
    int index;
    gpucore_context_device(ctx, &type, &index);
    if (type == GPUCORE_DEVICE_CPU) {
        int done = 0;
        for (int rep = 0; rep < 50; rep++) {
            CHECK_OK(gpucore_stream_synchronize(st));
            CHECK_OK(gpucore_binary(GPUCORE_ADD, c, s, s, st));
            done += gpucore_stream_query(st) == GPUCORE_OK;
            CHECK_OK(gpucore_event_record(e, st));
            done += gpucore_event_query(e) == GPUCORE_OK;
        }
        CHECK(done == 100);
    }
    CHECK_OK(gpucore_stream_synchronize(st));
    gpucore_tensor_destroy(head);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(s);
    gpucore_tensor_destroy(c);
    gpucore_event_destroy(e);
    gpucore_stream_destroy(st);
}

/* The context's pending word as an acquire load (what a binding reads); -1 where there is none. */
static int64_t pending_now(gpucore_context *ctx)
{
    const uint64_t *w = NULL;
    if (gpucore_context_pending_word(ctx, &w) != GPUCORE_OK) return -1;
    return (int64_t)__atomic_load_n(w, __ATOMIC_ACQUIRE);
}

/* An asynchronous failure is reported by the next synchronize of its stream or of the context,
 * once, and leaves both usable; bad arguments are refused. */
static void test_async_error(gpucore_context *ctx)
{
    gpucore_stream *st = NULL, *other = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &st));
    CHECK_OK(gpucore_stream_create(ctx, 0, &other));
    CHECK_STATUS(gpucore_debug_fail_async(NULL, GPUCORE_ERR_INTERNAL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_debug_fail_async(st, GPUCORE_OK), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_debug_fail_async(st, GPUCORE_ERR_NOT_READY), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_debug_fail_async(st, (gpucore_status)1000), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_stream_synchronize(st)); /* nothing was queued by the refusals */
    gpucore_device_type type;
    int index;
    CHECK_OK(gpucore_context_device(ctx, &type, &index));
    if (type == GPUCORE_DEVICE_CUDA) { /* the CUDA backend (over the stand-ins) cannot fake a device fault */
        CHECK_STATUS(gpucore_debug_fail_async(st, GPUCORE_ERR_BACKEND), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK_OK(gpucore_stream_destroy(st));
        CHECK_OK(gpucore_stream_destroy(other));
        return;
    }

    /* the stream's own synchronize reports it once */
    CHECK_OK(gpucore_debug_fail_async(st, GPUCORE_ERR_OUT_OF_MEMORY));
    CHECK_STATUS(gpucore_stream_synchronize(st), GPUCORE_ERR_OUT_OF_MEMORY);
    CHECK_OK(gpucore_stream_synchronize(st));
    CHECK_OK(gpucore_context_synchronize(ctx));

    /* the context's synchronize reports it once, behind queued work, and only the first failure */
    int64_t n = BIG;
    gpucore_tensor *a = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &a));
    for (int k = 0; k < 3; k++) CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0, 1, 9, (uint64_t)k, other));
    CHECK_OK(gpucore_debug_fail_async(st, GPUCORE_ERR_BACKEND));
    CHECK_OK(gpucore_debug_fail_async(st, GPUCORE_ERR_INTERNAL));
    CHECK_STATUS(gpucore_context_synchronize(ctx), GPUCORE_ERR_BACKEND);
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK_OK(gpucore_stream_synchronize(st));
    CHECK_OK(gpucore_stream_query(other)); /* the context's synchronize waited for the fills */

    /* still usable: an op after the failure runs and its result is right */
    CHECK_OK(gpucore_debug_fail_async(st, GPUCORE_ERR_BACKEND));
    CHECK_OK(gpucore_fill(a, 3.0, st));
    CHECK_STATUS(gpucore_stream_synchronize(st), GPUCORE_ERR_BACKEND);
    float *x = malloc(sizeof(float) * BIG);
    CHECK_OK(gpucore_copy_to_host(x, (int64_t)sizeof(float) * BIG, a));
    CHECK(x[0] == 3.0f && x[BIG - 1] == 3.0f);
    free(x);

    /* destroying a stream reports its unreported error, and destroys it all the same */
    CHECK_OK(gpucore_debug_fail_async(other, GPUCORE_ERR_BACKEND));
    CHECK_STATUS(gpucore_stream_destroy(other), GPUCORE_ERR_BACKEND);
    CHECK_STATUS(gpucore_stream_synchronize(other), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK(pending_now(ctx) <= 0);
    gpucore_tensor_destroy(a);
    CHECK_OK(gpucore_stream_destroy(st));
}

/* The pending word: the CPU backend's, 0 exactly when a context synchronize has nothing to do;
 * none on the other backends. */
static void test_pending_word(gpucore_context *ctx)
{
    gpucore_device_type type;
    int index;
    CHECK_OK(gpucore_context_device(ctx, &type, &index));
    const uint64_t *w = NULL;
    CHECK_STATUS(gpucore_context_pending_word(ctx, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_context_pending_word(NULL, &w), GPUCORE_ERR_NULL_POINTER);
    if (type != GPUCORE_DEVICE_CPU) {
        w = (const uint64_t *)&w;
        CHECK_STATUS(gpucore_context_pending_word(ctx, &w), GPUCORE_ERR_NOT_SUPPORTED);
        CHECK(w == NULL);
        return;
    }
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK(pending_now(ctx) == 0);
    gpucore_stream *st = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &st));
    int64_t n = BIG, small = 16;
    gpucore_tensor *a = NULL, *s = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &small, &s));
    gpucore_tensor *head = NULL;
    CHECK_OK(gpucore_tensor_slice(a, 0, 0, small, 1, &head));
    /* queued work counts until it is done; the word falls to 0 on its own, with the results visible */
    int seen_busy = 0;
    for (int rep = 0; rep < 5 && !seen_busy; rep++) {
        for (int k = 0; k < 4; k++) CHECK_OK(gpucore_random(a, GPUCORE_NORMAL, 0, 1, 3, (uint64_t)k, st));
        CHECK_OK(gpucore_fill(a, 7.0, st));
        seen_busy = pending_now(ctx) > 0;
        for (long spin = 0; pending_now(ctx) != 0 && spin < 20000; spin++) usleep(1000); /* at most 20 s */
        CHECK(pending_now(ctx) == 0);
        CHECK_OK(gpucore_stream_query(st));
        float x[16] = {0};
        CHECK_OK(gpucore_copy_to_host(x, sizeof x, head));
        CHECK(x[0] == 7.0f && x[15] == 7.0f);
    }
    CHECK(seen_busy); /* 4 normal fills of 4M floats are not done by the time the last one is queued */
    /* a small op on an idle stream runs inline and leaves nothing counted */
    CHECK_OK(gpucore_fill(s, 1.0, st));
    CHECK(pending_now(ctx) == 0);
    /* an unreported error counts until a synchronize reports it, on the stream or the context */
    CHECK_OK(gpucore_debug_fail_async(st, GPUCORE_ERR_BACKEND));
    CHECK_STATUS(gpucore_stream_synchronize(st), GPUCORE_ERR_BACKEND);
    CHECK(pending_now(ctx) == 0);
    CHECK_OK(gpucore_debug_fail_async(st, GPUCORE_ERR_BACKEND));
    for (long spin = 0; gpucore_stream_query(st) == GPUCORE_ERR_NOT_READY && spin < 20000; spin++) usleep(1000);
    CHECK(pending_now(ctx) == 1); /* the task is done; its error waits */
    CHECK_STATUS(gpucore_context_synchronize(ctx), GPUCORE_ERR_BACKEND);
    CHECK(pending_now(ctx) == 0);
    CHECK_OK(gpucore_context_synchronize(ctx));
    gpucore_tensor_destroy(head);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(s);
    CHECK_OK(gpucore_stream_destroy(st));
    CHECK(pending_now(ctx) == 0);
}

int main(void)
{
    const device_test_fn tests[] = {test_ordering, test_threads, test_small_ops, test_async_error, test_pending_word};
    return run_on_devices("test_stream", tests, (int)(sizeof tests / sizeof tests[0]));
}
