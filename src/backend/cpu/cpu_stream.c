/*
 * cpu_stream.c — the CPU backend's streams: one worker thread per stream running
 * queued tasks in order, with sticky errors, and events that record a point in a
 * stream's queue (a generation number) and complete when the worker passes it.
 *
 * Synchronize runs pending work itself: a caller that waits for the stream and
 * finds the next task not yet started (the worker still waking up, or busy
 * elsewhere) takes it off the queue and runs it on its own thread, in order, one
 * task at a time per stream (the `running` flag) — it would wait for it anyway,
 * and a small op followed by synchronize then costs no thread hand-off. Tasks
 * that must stay on the worker thread (host callbacks) are queued with
 * cpu_stream_enqueue_pinned. Enqueue signals the worker only when it is parked, and
 * a synchronizing caller that goes on to run the next task itself does not wake it.
 *
 * Left for the caller: a task queued with cpu_stream_enqueue_for_caller (a collective
 * on the caller's own stream, which the caller usually synchronizes right after) is
 * queued without waking the worker, and the worker does not start it for
 * CPU_STREAM_CLAIM_NS after it was queued while only event records and such tasks
 * are queued, so the caller's synchronize runs it on its own thread. Every wake-up of
 * the worker on a loaded machine can take the core from the caller (the kernel runs
 * the woken thread first) and a collective polls its peers, so one wake-up per call
 * cost tens of microseconds. A worker whose stream queued such a task in the last
 * CPU_STREAM_ACTIVE_NS parks with a deadline (one look per CPU_STREAM_CLAIM_NS) so an
 * unannounced task never waits longer than that; a worker already awake polls for
 * the first CPU_STREAM_SPIN_NS of the window, so work queued right behind (a copy back
 * after a reduction) needs no wake-up; other work queued behind it, a
 * synchronizing caller asleep behind earlier tasks, stop, and anyone waiting from
 * elsewhere (event query or synchronize, another stream's wait, stream query: kick)
 * make the worker run it at once. Ordering, events and errors are as for any task.
 *
 * Small tasks inline: cpu_stream_enqueue_small runs a task of a few microseconds on the
 * caller's thread when the stream is idle (no queued task, none running). It holds
 * `running` meanwhile, so neither the worker nor a synchronizing caller starts a task
 * another thread queues during it, and signals the parked worker after it if one was.
 * The counters do not move: the task completes before its enqueue returns, so a
 * synchronize or event that follows it in any thread finds it done, and a worker polling
 * for new work is not disturbed. A failure is sticky, as for a queued task.
 *
 * The pending word: a context may give its streams one shared word
 * (cpu_stream_count_pending) that counts queued, unfinished tasks and unreported errors,
 * so a context-wide synchronize with nothing to wait for is one atomic load, and a binding
 * that can read memory (ctypes) skips the call altogether. It moves under each stream's
 * mutex, beside the counters: +1 at enqueue, -1 when the task completes (a release, after
 * its results), +1 when a failure becomes sticky, -1 when synchronize reports it.
 *
 * Spin, then park: a worker that runs out of work, and a synchronizing caller
 * whose last outstanding task runs on another thread, first poll the queue's
 * counters (atomics, no lock) for a bounded time (CPU_STREAM_SPIN_NS) before they
 * sleep on a condition variable, so back-to-back small ops and an op followed by
 * synchronize avoid the futex wake-ups that cost tens of microseconds. The poll
 * yields the core every few microseconds: mpirun binds each rank to one core, so
 * the thread polled for (the caller enqueueing, the worker running the last task)
 * often shares it, and a poll that kept the core would stall it. A caller
 * with more than one task still to wait for parks at once (a polling thread would
 * take a core from the worker's OpenMP team) and is woken only when the count it
 * waits for is reached (wake_at), not after every task. The counters are written
 * under the mutex with atomic stores; the spin only decides when to take the
 * mutex again, so ordering is what it was.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu_stream.h"
#include "core/mono_clock.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_STREAM_RELAX() _mm_pause()
#else
#define CPU_STREAM_RELAX() ((void)0)
#endif

/* How long a thread polls before it parks (nanoseconds). */
#define CPU_STREAM_SPIN_NS 30000
/* How long the worker leaves a task queued for the caller before it runs it itself, and
 * how often a worker parked on a stream that queued such a task within the last
 * CPU_STREAM_ACTIVE_NS wakes to look at its queue (nanoseconds). */
#define CPU_STREAM_CLAIM_NS 1000000
#define CPU_STREAM_ACTIVE_NS 100000000

enum { TASK_ANY, TASK_PINNED, TASK_LIGHT, TASK_FOR_CALLER }; /* cpu_task.kind */
/* cpu_stream.parked: not parked; parked until signalled; parked until signalled or a
 * deadline (tasks for the caller, and event records behind them, do not signal it). */
enum { PARKED_NO, PARKED_IDLE, PARKED_TIMED };

typedef struct cpu_task {
    struct cpu_task *next;
    cpu_task_fn fn;
    size_t args_size;
    int kind;                  /* TASK_*: pinned runs on the worker only; light is an event record */
    uint64_t queued_ns;        /* TASK_FOR_CALLER: when it was queued */
    uint64_t seq;              /* its place in the stream (`submitted` after it was queued) */
    _Alignas(16) unsigned char args[];
} cpu_task;

struct cpu_stream {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    cpu_task *head, *tail;
    uint64_t submitted, completed; /* written under mu with atomic stores; the spins read them unlocked */
    uint64_t changes;          /* tasks queued plus tasks started (the same): see leave_to_caller */
    int heavy;                 /* queued tasks that are neither light nor for the caller */
    int for_caller;            /* queued tasks for the caller */
    uint64_t for_caller_ns;    /* when the last one was queued (0: never) */
    uint64_t kicked;           /* tasks up to this seq are not left to the caller (see kick) */
    int stop;
    int running;               /* a thread (worker or a synchronizing caller) runs the head task */
    int parked;                /* PARKED_*: the worker sleeps on work_cv; an enqueue must signal it */
    uint64_t wake_at;          /* the smallest `completed` a thread parked on done_cv waits for */
    gpucore_status sticky;     /* first error a task returned; reported by synchronize */
    uint64_t *pending;         /* NULL, or a word shared by the context's streams: see cpu_stream_count_pending */
};

struct cpu_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, completed;
    cpu_stream *stream;        /* where `recorded` was recorded: alive while completed < recorded */
    double time_ms;
    atomic_int refs;           /* the handle plus every queued task that names it */
};

static void (*task_hook)(void); /* cpu_stream_set_task_hook */

void cpu_stream_set_task_hook(void (*fn)(void)) { __atomic_store_n(&task_hook, fn, __ATOMIC_RELAXED); }

/* The context's pending word (s->mu held): +1 per queued task until it completes, +1 while an
 * error waits for synchronize. Release: a reader that sees it fall sees what the task wrote. */
static void pending_add(cpu_stream *s, int64_t delta)
{
    if (s->pending && delta) __atomic_add_fetch(s->pending, (uint64_t)delta, __ATOMIC_RELEASE);
}

/* A task finished with st (s->mu held): the first failure becomes the sticky error. */
static void note_result(cpu_stream *s, gpucore_status st, int64_t delta)
{
    if (st != GPUCORE_OK && s->sticky == GPUCORE_OK) {
        s->sticky = st;
        delta++;
    }
    pending_add(s, delta);
}

void cpu_stream_count_pending(cpu_stream *s, uint64_t *word)
{
    pthread_mutex_lock(&s->mu);
    s->pending = word;
    pthread_mutex_unlock(&s->mu);
}

/* Run the head task (s->mu held on entry and on return; the task runs unlocked). A
 * synchronizing caller passes the count it waits for (`until`): while the next task is
 * one it will run itself, the parked worker is not woken for it. The worker passes 0. */
static void run_head(cpu_stream *s, uint64_t until)
{
    void (*hook)(void) = __atomic_load_n(&task_hook, __ATOMIC_RELAXED);
    if (hook) hook(); /* the CPU backend's thread policy looks at the machine (rate-limited) */
    cpu_task *t = s->head;
    s->running = 1;
    __atomic_store_n(&s->changes, s->changes + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    gpucore_status st = t->fn(t->args);
    pthread_mutex_lock(&s->mu);
    s->running = 0;
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    if (t->kind == TASK_ANY || t->kind == TASK_PINNED) s->heavy--;
    if (t->kind == TASK_FOR_CALLER) s->for_caller--;
    __atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);
    note_result(s, st, -1);
    free(t);
    if (s->completed >= s->wake_at) { /* wake the synchronizers only when one of them is due */
        s->wake_at = UINT64_MAX;      /* each one still waiting registers its target again */
        pthread_cond_broadcast(&s->done_cv);
    }
    int caller_goes_on = s->completed < until && s->head && s->head->kind != TASK_PINNED;
    if ((s->head || s->stop) && s->parked && !caller_goes_on) pthread_cond_signal(&s->work_cv); /* it waited for `running` */
}

/* Poll *counter (unlocked) until the clock reads `until` (ns) while it equals `seen`; s->mu
 * is held on entry and on return. Returns 1 when it changed (the caller re-checks its state). */
static int spin_while_equal_until(cpu_stream *s, const uint64_t *counter, uint64_t seen, uint64_t until)
{
    pthread_mutex_unlock(&s->mu);
    int changed = 0;
    for (int k = 0; !changed; k++) {
        for (int r = 0; r < 64 && !changed; r++) {
            CPU_STREAM_RELAX();
            changed = __atomic_load_n(counter, __ATOMIC_ACQUIRE) != seen;
        }
        if (!changed && (k & 3) == 3) {
            if (gpucore_clock_ns() >= until) break;
            sched_yield(); /* the thread it waits for may share this core (mpirun binds a rank to one) */
        }
    }
    pthread_mutex_lock(&s->mu);
    return changed;
}

static int spin_while_equal(cpu_stream *s, const uint64_t *counter, uint64_t seen)
{
    return spin_while_equal_until(s, counter, seen, gpucore_clock_ns() + CPU_STREAM_SPIN_NS);
}

static void park_until(cpu_stream *s, uint64_t until_ns)
{
    struct timespec ts = {(time_t)(until_ns / 1000000000u), (long)(until_ns % 1000000000u)};
    s->parked = PARKED_TIMED;
    pthread_cond_timedwait(&s->work_cv, &s->mu, &ts);
    s->parked = PARKED_NO;
}

/* Nothing for the worker to run: sleep until signalled, or, on a stream that queued a
 * task for the caller lately (such tasks come unannounced), until the next look. */
static void park(cpu_stream *s)
{
    uint64_t now = gpucore_clock_ns();
    if (s->for_caller_ns && now - s->for_caller_ns < CPU_STREAM_ACTIVE_NS) {
        park_until(s, now + CPU_STREAM_CLAIM_NS);
        return;
    }
    s->parked = PARKED_IDLE;
    pthread_cond_wait(&s->work_cv, &s->mu);
    s->parked = PARKED_NO;
}

/* The head is a task for the caller, still inside its window, with only event records
 * and tasks for the caller behind it, no caller asleep in synchronize (it waits for the
 * worker to get through earlier tasks: the worker goes on) and no one waiting for it
 * from elsewhere (kick): the worker leaves it. In the first CPU_STREAM_SPIN_NS after it
 * was queued (the worker is awake: it ran what came before) it polls, so work queued
 * right behind it (a copy back after a reduction) ends the wait without a wake-up;
 * then it sleeps until the window ends, woken early only by other work, a kick or
 * stop. Returns 1 when the worker should look at the queue again (s->mu held). */
static int leave_to_caller(cpu_stream *s)
{
    const cpu_task *t = s->head;
    if (t->kind != TASK_FOR_CALLER || s->heavy || s->stop || t->seq <= s->kicked || s->wake_at != UINT64_MAX)
        return 0;
    uint64_t now = gpucore_clock_ns(), until = t->queued_ns + CPU_STREAM_CLAIM_NS;
    if (now >= until) return 0;
    if (now < t->queued_ns + CPU_STREAM_SPIN_NS)
        spin_while_equal_until(s, &s->changes, s->changes, t->queued_ns + CPU_STREAM_SPIN_NS);
    else
        park_until(s, until);
    return 1; /* claimed (it runs: park), or new work came (look again), or the window ended (run it) */
}

/* Someone waits for this stream from outside (an event query or synchronize, another
 * stream's wait, a stream query): what is queued now runs without waiting for a caller. */
static void kick(cpu_stream *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->for_caller && s->kicked < s->submitted) {
        s->kicked = s->submitted;
        if (s->parked) pthread_cond_signal(&s->work_cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *stream_worker(void *arg)
{
    cpu_stream *s = arg;
    int ran = 0; /* this thread ran the last task: it is warm, and more work tends to follow */
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* out of work after running a task: poll for a new one for a while before parking (a
         * worker woken to find its work taken by a synchronizing caller parks at once) */
        if (ran && !s->head && !s->stop) spin_while_equal(s, &s->submitted, s->submitted);
        ran = 0;
        if (!s->head && s->stop) break; /* stopped and drained */
        if (!s->head || s->running) {
            park(s);
            continue;
        }
        if (leave_to_caller(s)) continue;
        run_head(s, 0);
        ran = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

gpucore_status cpu_stream_create(cpu_stream **out)
{
    cpu_stream *s = calloc(1, sizeof *s);
    if (!s) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "stream_create: out of host memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* leave_to_caller's deadline is on gpucore_clock_ns's clock */
    pthread_cond_init(&s->work_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&s->done_cv, NULL);
    s->wake_at = UINT64_MAX;
    if (pthread_create(&s->thread, NULL, stream_worker, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work_cv);
        pthread_cond_destroy(&s->done_cv);
        free(s);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "stream_create: could not start the stream's worker thread");
    }
    *out = s;
    return GPUCORE_OK;
}

void cpu_stream_destroy(cpu_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL); /* the worker drains the queue first */
    if (s->sticky) pending_add(s, -1); /* never reported: the context no longer has this stream */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
}

static gpucore_status enqueue(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size, int kind)
{
    cpu_task *t = malloc(sizeof *t + args_size);
    if (!t) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "stream: out of host memory for a queued task");
    t->next = NULL;
    t->fn = fn;
    t->args_size = args_size;
    t->kind = kind;
    t->queued_ns = kind == TASK_FOR_CALLER ? gpucore_clock_ns() : 0;
    if (args_size) memcpy(t->args, args, args_size);
    pthread_mutex_lock(&s->mu);
    if (kind == TASK_ANY || kind == TASK_PINNED) s->heavy++;
    if (kind == TASK_FOR_CALLER) {
        s->for_caller++;
        s->for_caller_ns = t->queued_ns;
    }
    if (s->tail) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    __atomic_store_n(&s->submitted, s->submitted + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&s->changes, s->changes + 1, __ATOMIC_RELEASE);
    pending_add(s, 1);
    t->seq = s->submitted;
    /* a worker that looks on its own soon is not woken for a task for the caller, nor for an
     * event record behind one; anything else wakes it */
    int unannounced = s->parked == PARKED_TIMED && !s->heavy && s->for_caller &&
                      (kind == TASK_FOR_CALLER || kind == TASK_LIGHT);
    int wake = s->parked != PARKED_NO && !unannounced;
    pthread_mutex_unlock(&s->mu);
    if (wake) pthread_cond_signal(&s->work_cv); /* after the unlock: the worker does not wake into a held mutex */
    return GPUCORE_OK;
}

gpucore_status cpu_stream_enqueue(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size)
{
    return enqueue(s, fn, args, args_size, TASK_ANY);
}

gpucore_status cpu_stream_enqueue_pinned(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size)
{
    return enqueue(s, fn, args, args_size, TASK_PINNED);
}

gpucore_status cpu_stream_enqueue_for_caller(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size)
{
    return enqueue(s, fn, args, args_size, TASK_FOR_CALLER);
}

/* Argument blocks up to this size run inline from a copy on the caller's stack. */
#define CPU_STREAM_INLINE_ARGS 4096

/* Run the task inline on an idle stream, else queue it as `kind`. */
static gpucore_status inline_or_enqueue(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size, int kind)
{
    if (args_size > CPU_STREAM_INLINE_ARGS) return enqueue(s, fn, args, args_size, kind);
    pthread_mutex_lock(&s->mu);
    if (s->head || s->running || s->stop) {
        pthread_mutex_unlock(&s->mu);
        return enqueue(s, fn, args, args_size, kind);
    }
    s->running = 1;
    pthread_mutex_unlock(&s->mu);
    _Alignas(16) unsigned char copy[CPU_STREAM_INLINE_ARGS]; /* the task's own copy, as a queued one has */
    if (args_size) memcpy(copy, args, args_size);
    gpucore_status st = fn(copy);
    pthread_mutex_lock(&s->mu);
    s->running = 0;
    note_result(s, st, 0);
    const int wake = s->head && s->parked; /* queued behind us while we ran: the worker waited for `running` */
    if (s->head && s->wake_at != UINT64_MAX) pthread_cond_broadcast(&s->done_cv); /* a synchronizer may run it */
    pthread_mutex_unlock(&s->mu);
    if (wake) pthread_cond_signal(&s->work_cv);
    return GPUCORE_OK;
}

gpucore_status cpu_stream_enqueue_small(cpu_stream *s, cpu_task_fn fn, const void *args, size_t args_size)
{
    return inline_or_enqueue(s, fn, args, args_size, TASK_ANY);
}

gpucore_status cpu_stream_synchronize(cpu_stream *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->submitted;
    while (s->completed < target) {
        if (!s->running && s->head && s->head->kind != TASK_PINNED) run_head(s, target); /* we would wait for it anyway */
        else if (target - s->completed > 1 || !spin_while_equal(s, &s->completed, s->completed)) {
            /* Another thread runs it. Poll only for the last task (a small op's round trip); with more
             * to go, park until the target is reached: a polling caller would take a core from the
             * worker's OpenMP team, and a wake-up per task costs both threads a syscall. */
            if (s->completed < target) {
                if (target < s->wake_at) s->wake_at = target;
                pthread_cond_wait(&s->done_cv, &s->mu);
            }
        }
    }
    gpucore_status st = s->sticky;
    s->sticky = GPUCORE_OK;
    if (st) pending_add(s, -1); /* reported now */
    pthread_mutex_unlock(&s->mu);
    if (st) return gpucore_set_error(st, "stream_synchronize: an earlier asynchronous op on this stream failed (%s)",
                                     gpucore_status_string(st));
    return GPUCORE_OK;
}

gpucore_status cpu_stream_query(cpu_stream *s)
{
    pthread_mutex_lock(&s->mu);
    int done = s->completed == s->submitted;
    pthread_mutex_unlock(&s->mu);
    if (done) return GPUCORE_OK;
    kick(s); /* a caller that polls does not synchronize: nothing is left to it */
    return GPUCORE_ERR_NOT_READY;
}

/* ---- events ---- */

static void event_unref(cpu_event *e)
{
    if (atomic_fetch_sub(&e->refs, 1) != 1) return;
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

gpucore_status cpu_event_create(cpu_event **out)
{
    cpu_event *e = calloc(1, sizeof *e);
    if (!e) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "event_create: out of host memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->refs, 1);
    *out = e;
    return GPUCORE_OK;
}

void cpu_event_destroy(cpu_event *e)
{
    if (e) event_unref(e);
}

typedef struct event_task_args { cpu_event *e; uint64_t gen; } event_task_args;

static gpucore_status event_complete_task(void *p)
{
    event_task_args *a = p;
    pthread_mutex_lock(&a->e->mu);
    if (a->gen > a->e->completed) {
        a->e->completed = a->gen;
        a->e->time_ms = gpucore_clock_ms();
    }
    pthread_cond_broadcast(&a->e->cv);
    pthread_mutex_unlock(&a->e->mu);
    event_unref(a->e);
    return GPUCORE_OK;
}

gpucore_status cpu_event_record(cpu_event *e, cpu_stream *s)
{
    pthread_mutex_lock(&e->mu);
    event_task_args a = {e, ++e->recorded};
    e->stream = s;
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_add(&e->refs, 1);
    /* an idle stream: the event completes now, on the caller's thread */
    gpucore_status st = inline_or_enqueue(s, event_complete_task, &a, sizeof a, TASK_LIGHT);
    if (st) {
        atomic_fetch_sub(&e->refs, 1);
        /* Nothing will complete this generation: mark it done so waiters do not hang. */
        pthread_mutex_lock(&e->mu);
        e->completed = a.gen;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
    return st;
}

/* A waiter for an event not complete yet (e->mu held): the stream it was recorded on runs
 * what it has queued without leaving any to a caller. Lock order: event, then stream. */
static void kick_event_stream(cpu_event *e)
{
    if (e->completed < e->recorded && e->stream) kick(e->stream);
}

static gpucore_status event_wait_task(void *p)
{
    event_task_args *a = p;
    pthread_mutex_lock(&a->e->mu);
    if (a->e->completed < a->gen) kick_event_stream(a->e);
    while (a->e->completed < a->gen) pthread_cond_wait(&a->e->cv, &a->e->mu);
    pthread_mutex_unlock(&a->e->mu);
    event_unref(a->e);
    return GPUCORE_OK;
}

gpucore_status cpu_stream_wait_event(cpu_stream *s, cpu_event *e)
{
    pthread_mutex_lock(&e->mu);
    event_task_args a = {e, e->recorded};
    int already = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    if (already) return GPUCORE_OK;
    atomic_fetch_add(&e->refs, 1);
    gpucore_status st = cpu_stream_enqueue(s, event_wait_task, &a, sizeof a);
    if (st) atomic_fetch_sub(&e->refs, 1);
    return st;
}

gpucore_status cpu_event_synchronize(cpu_event *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t target = e->recorded;
    kick_event_stream(e);
    while (e->completed < target) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return GPUCORE_OK;
}

gpucore_status cpu_event_query(cpu_event *e)
{
    pthread_mutex_lock(&e->mu);
    int done = e->completed >= e->recorded;
    kick_event_stream(e);
    pthread_mutex_unlock(&e->mu);
    return done ? GPUCORE_OK : GPUCORE_ERR_NOT_READY;
}

gpucore_status cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, float *ms)
{
    double t0, t1;
    int ok0, ok1;
    pthread_mutex_lock(&start->mu);
    ok0 = start->recorded > 0 && start->completed >= start->recorded;
    t0 = start->time_ms;
    pthread_mutex_unlock(&start->mu);
    pthread_mutex_lock(&end->mu);
    ok1 = end->recorded > 0 && end->completed >= end->recorded;
    t1 = end->time_ms;
    pthread_mutex_unlock(&end->mu);
    if (!ok0 || !ok1)
        return gpucore_set_error(ok0 && ok1 ? GPUCORE_ERR_INVALID_ARGUMENT : GPUCORE_ERR_NOT_READY,
                                 "event_elapsed_ms: both events must be recorded and completed first");
    *ms = (float)(t1 - t0);
    return GPUCORE_OK;
}

/* ---- vtable adapters shared by every backend built on these queues (CPU, cuda-emulated) ---- */

gpucore_status cpu_vt_stream_query(void *bctx, void *s)
{
    (void)bctx;
    return cpu_stream_query(s);
}

typedef struct host_fn_args { gpucore_host_fn fn; void *arg; } host_fn_args;

static gpucore_status host_fn_task(void *p)
{
    host_fn_args *a = p;
    a->fn(a->arg);
    return GPUCORE_OK;
}

gpucore_status cpu_vt_host_callback(void *bctx, void *s, gpucore_host_fn fn, void *arg)
{
    (void)bctx;
    host_fn_args a = {fn, arg};
    return cpu_stream_enqueue_pinned(s, host_fn_task, &a, sizeof a); /* user code: on the worker, as CUDA's host thread */
}

gpucore_status cpu_vt_event_create(void *bctx, void **e) { (void)bctx; return cpu_event_create((cpu_event **)e); }
void cpu_vt_event_destroy(void *bctx, void *e) { (void)bctx; cpu_event_destroy(e); }
gpucore_status cpu_vt_event_record(void *bctx, void *e, void *s) { (void)bctx; return cpu_event_record(e, s); }
gpucore_status cpu_vt_stream_wait_event(void *bctx, void *s, void *e) { (void)bctx; return cpu_stream_wait_event(s, e); }
gpucore_status cpu_vt_event_synchronize(void *bctx, void *e) { (void)bctx; return cpu_event_synchronize(e); }
gpucore_status cpu_vt_event_query(void *bctx, void *e) { (void)bctx; return cpu_event_query(e); }
gpucore_status cpu_vt_event_elapsed_ms(void *bctx, void *a, void *b, float *ms)
{
    (void)bctx;
    return cpu_event_elapsed_ms(a, b, ms);
}

typedef struct memcpy_args { void *dst; const void *src; size_t bytes; } memcpy_args;

/* Large copies are split across the OpenMP threads (one thread's memcpy does not reach the
 * machine's memory bandwidth); small ones stay a single memcpy. */
#define COPY_CHUNK ((size_t)1 << 20)
static gpucore_status memcpy_task(void *p)
{
    memcpy_args *a = p;
    if (a->bytes < 4 * COPY_CHUNK) {
        memcpy(a->dst, a->src, a->bytes);
        return GPUCORE_OK;
    }
    const int64_t chunks = (int64_t)((a->bytes + COPY_CHUNK - 1) / COPY_CHUNK);
    char *dst = a->dst;
    const char *src = a->src;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        size_t at = (size_t)c * COPY_CHUNK;
        size_t n = a->bytes - at < COPY_CHUNK ? a->bytes - at : COPY_CHUNK;
        memcpy(dst + at, src + at, n);
    }
    return GPUCORE_OK;
}

/* Host memory is device memory here: every copy direction is a memcpy in stream order. */
gpucore_status cpu_vt_copy(void *bctx, void *dst, const void *src, size_t bytes, void *s)
{
    (void)bctx;
    memcpy_args a = {dst, src, bytes};
    return bytes <= 65536 ? cpu_stream_enqueue_small(s, memcpy_task, &a, sizeof a)
                          : cpu_stream_enqueue(s, memcpy_task, &a, sizeof a);
}

/* A task that fails with the status it carries, as a kernel that faults would. */
static gpucore_status fail_task(void *p) { return *(const gpucore_status *)p; }

gpucore_status cpu_vt_debug_fail_async(void *bctx, void *s, gpucore_status status)
{
    (void)bctx;
    return cpu_stream_enqueue(s, fail_task, &status, sizeof status);
}
