/*
 * cpu_threads.c — the CPU backend's thread policy: how long an idle OpenMP thread
 * may spin before it sleeps.
 *
 * Every CPU op runs on a stream's worker thread, which opens the OpenMP parallel
 * regions of our kernels and of oneDNN; OpenBLAS, when it takes a GEMM, has its own
 * threads. libgomp's default wait policy (OMP_WAIT_POLICY and GOMP_SPINCOUNT unset)
 * lets a thread that finished its share of a region spin 300,000 times (documented as
 * about 3 ms; 8 ms measured on an AMD EPYC guest) before it sleeps. When the team's
 * threads share a core — the machine is busy, a caller thread or a second stream runs
 * — the spinning thread holds the core the other one needs until the scheduler's time
 * slice ends: a 256^3 f32 GEMM took 8-12 ms instead of 0.3 ms, and bench_ops ran 2-8x
 * slower than with a short spin (bench/results).
 *
 * The library's policy is the one its streams follow (cpu_stream.c): poll briefly,
 * then sleep. libgomp offers no call to set its spin count once it has read the
 * environment, which happens when it is loaded — before this library's code runs.
 * What it does document (GOMP_SPINCOUNT in the libgomp manual): when it manages more
 * threads than there are available CPUs, it spins only 100 times. So at the first
 * CPU context this file starts one parked thread that opens a two-thread parallel
 * region once and then sleeps on a condition variable until the library is unloaded:
 * its docked OpenMP thread makes the managed count exceed the CPUs, and every idle
 * OpenMP thread of the process then sleeps after 100 spins. Cost: two sleeping
 * threads, a few microseconds to wake a sleeping team member at the next region.
 *
 * Left alone: a user who set OMP_WAIT_POLICY or GOMP_SPINCOUNT (their choice wins),
 * GPUCORE_CPU_SPIN=runtime (keep the OpenMP runtime's default), one OpenMP thread
 * (nothing waits), an OpenMP runtime other than libgomp (LLVM's and Intel's read
 * KMP_BLOCKTIME instead), and builds without OpenMP. cpu_thread_policy() describes
 * what applies (component "openmp" of gpucore_component_version, gpucore-info).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static pthread_once_t policy_once = PTHREAD_ONCE_INIT;
static char policy_text[256];

#ifdef _OPENMP
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cv = PTHREAD_COND_INITIALIZER;
static int parked_stop, parked_started;
static pthread_t parked_thread;

static void *parked_main(void *arg)
{
    (void)arg;
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp atomic
        team++;
    }
    pthread_mutex_lock(&parked_mu);
    parked_started = team; /* 2: a second OpenMP thread now sits docked in this thread's pool */
    pthread_cond_broadcast(&parked_cv);
    while (!parked_stop) pthread_cond_wait(&parked_cv, &parked_mu);
    pthread_mutex_unlock(&parked_mu);
    return NULL;
}

/* Unloading the library (dlclose) ends the parked thread first: it would otherwise wake
 * into unmapped code. Its exit releases its OpenMP thread (libgomp's thread destructor). */
__attribute__((destructor)) static void parked_end(void)
{
    pthread_mutex_lock(&parked_mu);
    const int started = parked_started;
    parked_stop = 1;
    pthread_cond_broadcast(&parked_cv);
    pthread_mutex_unlock(&parked_mu);
    if (started) pthread_join(parked_thread, NULL);
}
#endif

static void policy_init(void)
{
#ifndef _OPENMP
    snprintf(policy_text, sizeof policy_text, "none (built without OpenMP: element loops run on the stream's thread)");
#else
    const char *wait = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT"), *own = getenv("GPUCORE_CPU_SPIN");
    const int threads = omp_get_max_threads();
    if (wait || spin) {
        snprintf(policy_text, sizeof policy_text, "%d threads; the user's %s=%s", threads,
                 wait ? "OMP_WAIT_POLICY" : "GOMP_SPINCOUNT", wait ? wait : spin);
        return;
    }
    if (own && !strcmp(own, "runtime")) {
        snprintf(policy_text, sizeof policy_text, "%d threads; the OpenMP runtime's default wait (GPUCORE_CPU_SPIN=runtime)",
                 threads);
        return;
    }
    if (dlsym(RTLD_DEFAULT, "kmp_set_blocktime")) { /* LLVM's or Intel's runtime took the GOMP entry points */
        snprintf(policy_text, sizeof policy_text, "%d threads; an LLVM/Intel OpenMP runtime: its KMP_BLOCKTIME applies",
                 threads);
        return;
    }
    if (threads <= 1) {
        snprintf(policy_text, sizeof policy_text, "1 thread; nothing waits");
        return;
    }
    int ok = pthread_create(&parked_thread, NULL, parked_main, NULL) == 0;
    if (ok) {
        pthread_mutex_lock(&parked_mu);
        while (!parked_started) pthread_cond_wait(&parked_cv, &parked_mu);
        ok = parked_started == 2;
        pthread_mutex_unlock(&parked_mu);
    } else {
        pthread_mutex_lock(&parked_mu);
        parked_started = 0;
        pthread_mutex_unlock(&parked_mu);
    }
    if (ok)
        snprintf(policy_text, sizeof policy_text,
                 "%d threads; short spin: idle OpenMP threads sleep after 100 spins (libgomp's over-subscribed "
                 "mode, engaged by one parked OpenMP thread; OMP_WAIT_POLICY or GOMP_SPINCOUNT override)",
                 threads);
    else
        snprintf(policy_text, sizeof policy_text,
                 "%d threads; libgomp's default wait (the parked thread that shortens it could not start)", threads);
#endif
}

void cpu_thread_policy_apply(void) { pthread_once(&policy_once, policy_init); }

const char *cpu_thread_policy(void)
{
    cpu_thread_policy_apply();
    return policy_text;
}
