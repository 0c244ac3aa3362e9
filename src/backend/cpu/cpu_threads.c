/*
 * cpu_threads.c — the CPU backend's thread policy: how long an idle OpenMP thread
 * may spin before it sleeps.
 *
 * Every CPU op runs on a stream's worker thread, which opens the OpenMP parallel
 * regions of our kernels and of oneDNN; OpenBLAS, when it takes a GEMM, has its own
 * threads. libgomp's default wait policy (OMP_WAIT_POLICY and GOMP_SPINCOUNT unset)
 * lets a thread that finished its share of a region spin 300,000 times (documented as
 * about 3 ms; 8 ms measured on an AMD EPYC guest) before it sleeps. While every
 * runnable thread has a CPU that is what keeps a team ready for the next region; when
 * they share CPUs — a busy machine, a Python caller thread enqueueing ops, a second
 * stream — the spinning thread holds the core that another one needs until the
 * scheduler's time slice ends: a 256^3 f32 GEMM took 8-12 ms instead of 0.3 ms, and
 * bench_ops ran 2-8x slower than with a short spin.
 *
 * libgomp offers no call to set its spin count once it has read the environment, which
 * happens when it is loaded, before this library's code runs. What it documents
 * (GOMP_SPINCOUNT, libgomp manual) is that while it manages more threads than there are
 * available CPUs it spins only 100 times. A parked thread that opened a two-thread
 * region once and then sleeps on a condition variable keeps one extra OpenMP thread
 * docked, which makes the managed count exceed the CPUs: while it exists, every idle
 * OpenMP thread of the process sleeps after 100 spins (a few microseconds to wake it
 * at the next region).
 *
 * The policy (GPUCORE_CPU_SPIN): "adaptive", the default, looks at the number of
 * runnable threads of the machine (/proc/loadavg) at most every CPU_SPIN_LOOK_NS,
 * from the stream workers before a task: more runnable threads than CPUs at
 * CPU_SPIN_SHARED_LOOKS looks in a row starts the parked thread (short spins; one look
 * alone sees the process's own brief threads too), and CPU_SPIN_CALM_NS without that
 * ends it (libgomp's
 * spin again). "short" keeps the parked thread for the process's life; "runtime"
 * never starts it. Left alone as well: a user who set OMP_WAIT_POLICY or GOMP_SPINCOUNT
 * (their choice wins), one OpenMP thread (nothing waits), an OpenMP runtime other than
 * libgomp (LLVM's and Intel's read KMP_BLOCKTIME instead), and builds without OpenMP.
 * cpu_thread_policy() describes what applies (component "openmp" of
 * gpucore_component_version, gpucore-info).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cpu_internal.h"
#include "cpu_stream.h"
#include "core/mono_clock.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { SPIN_NONE, SPIN_ADAPTIVE, SPIN_SHORT }; /* what this file may do */
#define CPU_SPIN_LOOK_NS 20000000ull   /* how often the adaptive policy looks at the machine */
#define CPU_SPIN_CALM_NS 1000000000ull /* how long without shared CPUs before spinning again */
#define CPU_SPIN_SHARED_LOOKS 2         /* looks in a row that must see the CPUs shared */

static pthread_once_t policy_once = PTHREAD_ONCE_INIT;
static char policy_text[320];
static int spin_mode = SPIN_NONE;

#ifdef _OPENMP
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cv = PTHREAD_COND_INITIALIZER;
static int parked_stop, parked_state; /* state: 0 none, 1 starting, 2 docked (short spins), -1 failed */
static pthread_t parked_thread;
static long online_cpus = 1;
static pthread_mutex_t look_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t look_last_ns, shared_last_ns; /* under look_mu */
static int over_looks;                        /* looks in a row that saw the CPUs shared, under look_mu */
/* The thread team's verdict (cpu_thread_policy_shared): other processes' runnable threads and the
 * team's want more than the CPUs, at two looks in a row; under look_mu but team_shared (atomic) */
static int team_over_looks, team_shared;
static uint64_t team_shared_last_ns;

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
    /* 2: a second OpenMP thread now sits docked in this thread's pool */
    __atomic_store_n(&parked_state, team == 2 ? 2 : -1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&parked_cv);
    while (!parked_stop) pthread_cond_wait(&parked_cv, &parked_mu);
    pthread_mutex_unlock(&parked_mu);
    return NULL; /* libgomp's thread destructor releases the docked thread: its own spin count again */
}

/* Start the parked thread (parked_mu held); waits until its team docked. */
static void parked_start_locked(void)
{
    if (parked_state != 0) return;
    parked_stop = 0;
    __atomic_store_n(&parked_state, 1, __ATOMIC_RELAXED);
    if (pthread_create(&parked_thread, NULL, parked_main, NULL) != 0) {
        __atomic_store_n(&parked_state, -1, __ATOMIC_RELAXED);
        return;
    }
    while (parked_state == 1) pthread_cond_wait(&parked_cv, &parked_mu);
}

/* End it (parked_mu held on entry and return). */
static void parked_end_locked(void)
{
    if (parked_state != 2) return; /* none, or it failed (no thread to join) */
    parked_stop = 1;
    pthread_cond_broadcast(&parked_cv);
    pthread_mutex_unlock(&parked_mu);
    pthread_join(parked_thread, NULL);
    pthread_mutex_lock(&parked_mu);
    __atomic_store_n(&parked_state, 0, __ATOMIC_RELAXED);
}

/* Unloading the library (dlclose) ends the parked thread first: it would otherwise wake
 * into unmapped code. */
__attribute__((destructor)) static void parked_fini(void)
{
    pthread_mutex_lock(&parked_mu);
    parked_end_locked();
    pthread_mutex_unlock(&parked_mu);
}

/* Runnable threads of this process now (state R in /proc/self/task/<tid>/stat), -1 unknown. */
static long runnable_self(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    long n = 0;
    char path[64], buf[256];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        const int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        const ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k <= 0) continue;
        buf[k] = 0;
        const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
        if (p && p[1] == ' ' && p[2] == 'R') n++;
    }
    closedir(d);
    return n;
}

/* Runnable threads of the machine now (the 4th field of /proc/loadavg: running/total), -1 unknown. */
static long runnable_now(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1;
    double a, b, c;
    long running = -1, total = 0;
    if (fscanf(f, "%lf %lf %lf %ld/%ld", &a, &b, &c, &running, &total) != 5) running = -1;
    fclose(f);
    return running;
}
#endif

int cpu_thread_policy_shared(void)
{
#ifdef _OPENMP
    if (__atomic_load_n(&spin_mode, __ATOMIC_RELAXED) == SPIN_SHORT) return 1;
    return __atomic_load_n(&team_shared, __ATOMIC_RELAXED);
#else
    return 0;
#endif
}

void cpu_thread_policy_tick(void)
{
#ifdef _OPENMP
    if (__atomic_load_n(&spin_mode, __ATOMIC_RELAXED) != SPIN_ADAPTIVE) return;
    const uint64_t now = gpucore_clock_ns();
    if (now - __atomic_load_n(&look_last_ns, __ATOMIC_RELAXED) < CPU_SPIN_LOOK_NS) return;
    if (pthread_mutex_trylock(&look_mu) != 0) return; /* another stream looks */
    if (now - look_last_ns >= CPU_SPIN_LOOK_NS) {
        __atomic_store_n(&look_last_ns, now, __ATOMIC_RELAXED);
        /* shared: more runnable threads than CPUs at CPU_SPIN_SHARED_LOOKS looks in a row. One look
         * also counts this process's own brief ones (the caller enqueueing a decode step's ops, or
         * polling a few microseconds in synchronize; a team helper between two products): on an
         * otherwise idle 2-CPU machine one look of every few seen in a decode loop was over, and the
         * step ran the team's helpers woken by futex, 10% slower, for the next second. */
        const long running = runnable_now();
        over_looks = running > online_cpus ? over_looks + 1 : 0;
        const int shared = over_looks >= CPU_SPIN_SHARED_LOOKS;
        if (shared) shared_last_ns = now;
        /* the team's verdict counts other processes only: this process's caller enqueueing a decode
         * step while the team runs the last one is brief and comes every step, and where the looks
         * fell in that phase (they come from the stream worker, which runs the first tasks of a
         * step) a quarter of them saw it, and the helpers slept between products for a second at a
         * time (SmolLM2-shaped decode products 21.3 ms a step against 18.4 with the policy off) */
        const long mine = runnable_self(), others = running < 0 ? -1 : mine >= 0 ? running - mine : running - 1;
        team_over_looks = others > 0 && others + omp_get_max_threads() > online_cpus ? team_over_looks + 1 : 0;
        if (team_over_looks >= CPU_SPIN_SHARED_LOOKS) {
            team_shared_last_ns = now;
            __atomic_store_n(&team_shared, 1, __ATOMIC_RELAXED);
        } else if (now - team_shared_last_ns >= CPU_SPIN_CALM_NS) {
            __atomic_store_n(&team_shared, 0, __ATOMIC_RELAXED);
        }
        pthread_mutex_lock(&parked_mu);
        if (shared) parked_start_locked();
        else if (now - shared_last_ns >= CPU_SPIN_CALM_NS) parked_end_locked();
        pthread_mutex_unlock(&parked_mu);
    }
    pthread_mutex_unlock(&look_mu);
#endif
}

static void policy_init(void)
{
#ifndef _OPENMP
    snprintf(policy_text, sizeof policy_text, "none (built without OpenMP: element loops run on the stream's thread)");
#else
    const char *wait = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT"), *own = getenv("GPUCORE_CPU_SPIN");
    const int threads = omp_get_max_threads();
    online_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (online_cpus < 1) online_cpus = 1;
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
    if (own && !strcmp(own, "short")) {
        pthread_mutex_lock(&parked_mu);
        parked_start_locked();
        const int ok = parked_state == 2;
        pthread_mutex_unlock(&parked_mu);
        if (ok) {
            spin_mode = SPIN_SHORT;
            snprintf(policy_text, sizeof policy_text,
                     "%d threads; short spin (GPUCORE_CPU_SPIN=short): idle OpenMP threads sleep after 100 spins "
                     "(libgomp's over-subscribed mode, engaged by one parked OpenMP thread)", threads);
        } else {
            snprintf(policy_text, sizeof policy_text,
                     "%d threads; libgomp's default wait (the parked thread that shortens it could not start)", threads);
        }
        return;
    }
    spin_mode = SPIN_ADAPTIVE;
    cpu_stream_set_task_hook(cpu_thread_policy_tick);
    snprintf(policy_text, sizeof policy_text,
             "%d threads; adaptive spin: libgomp's spin while every runnable thread has a CPU, 100 spins while "
             "CPUs are shared (one parked OpenMP thread engages libgomp's over-subscribed mode; "
             "GPUCORE_CPU_SPIN=short|runtime, OMP_WAIT_POLICY or GOMP_SPINCOUNT choose otherwise)", threads);
#endif
}

void cpu_thread_policy_apply(void) { pthread_once(&policy_once, policy_init); }

void cpu_thread_policy_describe(char *buf, size_t len)
{
    cpu_thread_policy_apply();
    int on = 0;
#ifdef _OPENMP
    pthread_mutex_lock(&parked_mu);
    on = parked_state == 2;
    pthread_mutex_unlock(&parked_mu);
#endif
    if (spin_mode == SPIN_ADAPTIVE)
        snprintf(buf, len, "%s; now: %s; decode team: %s", policy_text,
                 on ? "100 spins (CPUs were shared)" : "libgomp's spin",
                 cpu_thread_policy_shared() ? "sleeps between products (other processes want the CPUs)"
                                                                 : "polls between products");
    else
        snprintf(buf, len, "%s", policy_text);
}
