/*
 * cpu_team.c — a small persistent thread team for the memory-bound matrix-vector
 * products of a decode step (cpu_gemv.c, the quantized GEMV of cpu_quant_linear.c).
 *
 * Why not OpenMP there: a decode step is some 200 products of 0.4–4 MB each, back to back,
 * and the stream's worker and a synchronizing caller both run tasks, so libgomp manages a
 * team for each of them: more OpenMP threads than CPUs, which is libgomp's over-subscribed
 * mode (idle threads sleep after 100 spins). Every product then began with a futex wake-up
 * of the other thread (30–60 µs measured on a 2-core VM for a product whose data takes
 * 100 µs to stream), and SmolLM2-135M's f32 decode streamed its weights at 12 GB/s of the
 * 28 the machine reads.
 *
 * The team: omp_get_max_threads() − 1 helper threads (the caller is the last member),
 * created at the first call. A call splits its units (rows, blocks of rows) into at most
 * CPU_TEAM_MAX_PARTS parts of whole units and publishes (fn, arg, parts) under a new generation;
 * every member, the caller included, claims parts by a compare-and-swap on one word that
 * holds the generation, the part count and the next part (a helper still leaving the last
 * job cannot claim a part of the next one) until none is left (a helper that is
 * descheduled or still waking takes none, so the caller never
 * waits for work nobody started), then the caller waits for the parts already claimed.
 * A helper polls for the next generation for CPU_TEAM_SPIN_NS after its last part (the
 * gaps between a step's products are microseconds), then sleeps on a condition variable;
 * while the thread policy sees other processes' threads wanting the CPUs
 * (cpu_thread_policy_shared) it sleeps at once, so an idle team never holds a core another
 * process needs. One call at
 * a time: a second caller (another stream) finds the team busy and its parts run as an
 * OpenMP loop instead. Unloading the library stops and joins the helpers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include "cpu_internal.h"
#include "core/mono_clock.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_TEAM_RELAX() _mm_pause()
#else
#define CPU_TEAM_RELAX() ((void)0)
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#define CPU_TEAM_SPIN_NS 300000ull /* how long an idle helper polls before it sleeps */
#define CPU_TEAM_MAX 64            /* helpers at most */
#define CPU_TEAM_MAX_PARTS 32      /* parts a job's units are split into, whole units each */
#define TEAM_GEN(c) ((c) >> 40)
#define TEAM_PARTS(c) ((int)(((c) >> 20) & 0xfffff))
#define TEAM_NEXT(c) ((int)((c) & 0xfffff))

static struct {
    pthread_mutex_t busy;   /* held by the caller of a run */
    pthread_mutex_t mu;     /* guards sleepers, stop and the condition */
    pthread_cond_t cv;
    pthread_once_t once;
    pthread_t threads[CPU_TEAM_MAX];
    int helpers;            /* started helpers; 0: no team (one thread, or none could start) */
    int sleepers, stop;     /* under mu */
    uint64_t claim;         /* atomic: generation << 40 | parts << 20 | the next unclaimed part */
    cpu_team_fn fn;         /* the job: written before claim moves (release), read after a claim */
    void *arg;
    int64_t units, per;     /* the job's units, and units per part (the last part may have fewer) */
    int done;               /* atomic: parts of the current job finished */
} team = {.busy = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
        .once = PTHREAD_ONCE_INIT};

/* Claim and run parts of generation gen's job until none is left (or a newer job began). */
static void team_work(uint64_t gen)
{
    uint64_t c = __atomic_load_n(&team.claim, __ATOMIC_ACQUIRE);
    for (;;) {
        if (TEAM_GEN(c) != gen || TEAM_NEXT(c) >= TEAM_PARTS(c)) return;
        if (!__atomic_compare_exchange_n(&team.claim, &c, c + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        const int64_t b = TEAM_NEXT(c) * team.per;
        team.fn(team.arg, b, b + team.per < team.units ? b + team.per : team.units);
        __atomic_fetch_add(&team.done, 1, __ATOMIC_RELEASE);
        c = __atomic_load_n(&team.claim, __ATOMIC_ACQUIRE);
    }
}

static void *team_main(void *unused)
{
    (void)unused;
    pthread_setname_np(pthread_self(), "gpucore-team"); /* what tools and the tests see */
    uint64_t seen = 0;
    for (;;) {
        /* poll for the next job for a while (unless the machine's CPUs are shared), then sleep */
        uint64_t g = TEAM_GEN(__atomic_load_n(&team.claim, __ATOMIC_ACQUIRE));
        if (g == seen && !cpu_thread_policy_shared()) {
            const uint64_t until = gpucore_clock_ns() + CPU_TEAM_SPIN_NS;
            for (unsigned i = 1; g == seen; i++) {
                CPU_TEAM_RELAX();
                if (!(i & 255) && (gpucore_clock_ns() >= until || __atomic_load_n(&team.stop, __ATOMIC_RELAXED)))
                    break;
                g = TEAM_GEN(__atomic_load_n(&team.claim, __ATOMIC_ACQUIRE));
            }
        }
        if (g == seen) {
            pthread_mutex_lock(&team.mu);
            team.sleepers++;
            while ((g = TEAM_GEN(__atomic_load_n(&team.claim, __ATOMIC_ACQUIRE))) == seen && !team.stop)
                pthread_cond_wait(&team.cv, &team.mu);
            team.sleepers--;
            const int stop = team.stop;
            pthread_mutex_unlock(&team.mu);
            if (stop) return NULL;
        }
        seen = g;
        team_work(g);
    }
}

static void team_start(void)
{
#ifdef _OPENMP
    int want = omp_get_max_threads() - 1;
#else
    int want = 0; /* without OpenMP the CPU backend runs single-threaded: so does this */
#endif
    if (want > CPU_TEAM_MAX) want = CPU_TEAM_MAX;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&team.threads[i], NULL, team_main, NULL) != 0) break;
        team.helpers++;
    }
}

__attribute__((destructor)) static void team_fini(void)
{
    if (!team.helpers) return;
    pthread_mutex_lock(&team.mu);
    __atomic_store_n(&team.stop, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&team.cv);
    pthread_mutex_unlock(&team.mu);
    for (int i = 0; i < team.helpers; i++) pthread_join(team.threads[i], NULL);
    team.helpers = 0;
}

void cpu_team_run(cpu_team_fn fn, void *arg, int64_t units, int threaded)
{
    if (units <= 0) return;
    /* at most CPU_TEAM_MAX_PARTS parts of whole units, so every member streams long runs */
    int64_t parts = threaded ? (units < CPU_TEAM_MAX_PARTS ? units : CPU_TEAM_MAX_PARTS) : 1;
    const int64_t per = (units + parts - 1) / parts;
    parts = (units + per - 1) / per;
    pthread_once(&team.once, team_start);
    if (parts == 1 || !team.helpers || pthread_mutex_trylock(&team.busy) != 0) {
        /* no team, or another caller holds it: OpenMP's loop (or this thread alone) */
#pragma omp parallel for schedule(dynamic, 1) if (parts > 1)
        for (int64_t p = 0; p < parts; p++) fn(arg, p * per, p * per + per < units ? p * per + per : units);
        return;
    }
    team.fn = fn;
    team.arg = arg;
    team.units = units;
    team.per = per;
    __atomic_store_n(&team.done, 0, __ATOMIC_RELAXED);
    const uint64_t gen = (TEAM_GEN(__atomic_load_n(&team.claim, __ATOMIC_RELAXED)) + 1) & 0xffffff;
    __atomic_store_n(&team.claim, gen << 40 | (uint64_t)parts << 20, __ATOMIC_RELEASE); /* publishes the job */
    pthread_mutex_lock(&team.mu);
    if (team.sleepers) pthread_cond_broadcast(&team.cv);
    pthread_mutex_unlock(&team.mu);
    team_work(gen);
    /* parts others claimed; past ~1024 polls the member running one may have lost its CPU (a shared
     * machine): yield so the scheduler can give it this one */
    for (unsigned i = 1; __atomic_load_n(&team.done, __ATOMIC_ACQUIRE) < parts; i++) {
        CPU_TEAM_RELAX();
        if (!(i & 1023)) sched_yield();
    }
    pthread_mutex_unlock(&team.busy);
}
