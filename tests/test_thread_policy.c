/*
 * test_thread_policy.c — the CPU backend's thread policy (src/backend/cpu/cpu_threads.c):
 * idle OpenMP threads sleep soon after a parallel region instead of spinning for
 * milliseconds, and a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is left to decide.
 *
 * The effect is checked, not only the description: after an op large enough to open a
 * parallel region and a synchronize, every other thread of the process must be asleep
 * (state S in /proc/self/task/N/stat) within a fraction of a millisecond — with libgomp's default
 * wait its idle team thread stays runnable, spinning 300,000 times (3-10 ms). Then the
 * test runs itself again with OMP_WAIT_POLICY=active set: the description names the
 * user's setting and no parked thread is started.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Threads of this process other than the caller that are running or runnable (state R). */
static int others_running(int *threads)
{
    char self[32];
    snprintf(self, sizeof self, "%ld", (long)gettid());
    DIR *d = opendir("/proc/self/task");
    int running = 0, n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        n++;
        if (!strcmp(e->d_name, self)) continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        const char *close = strrchr(buf, ')'); /* the state follows the command name's ')' */
        if (close && close[1] == ' ' && close[2] == 'R') running++;
    }
    if (d) closedir(d);
    *threads = n;
    return running;
}

static int thread_count(void)
{
    int n = 0;
    others_running(&n);
    return n;
}

int main(int argc, char **argv)
{
    const int child = argc > 1 && !strcmp(argv[1], "user-policy");
    char desc[512] = "";
    gpucore_status st = gpucore_component_version("openmp", desc, sizeof desc);
    if (st != GPUCORE_OK) {
        printf("SKIP openmp: %s\n", gpucore_last_error());
        return 77;
    }
    printf("openmp: %s\n", desc);
    if (strstr(desc, "built without OpenMP") || strstr(desc, "1 thread;") || strstr(desc, "LLVM/Intel")) {
        printf("SKIP thread policy: this build or machine has no libgomp team to wait (%s)\n", desc);
        return 77;
    }
    if (child) {
        /* the user's OMP_WAIT_POLICY decides: described as theirs, and no parked thread */
        CHECK(strstr(desc, "the user's OMP_WAIT_POLICY=active") != NULL);
        const int before = thread_count();
        gpucore_context *ctx = NULL;
        CHECK_OK(gpucore_context_create("cpu", &ctx));
        /* the context adds its stream's worker only (the parked thread would add two) */
        CHECK(thread_count() == before + 1);
        gpucore_context_destroy(ctx);
        return check_finish("test_thread_policy (user policy)");
    }
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) {
        printf("SKIP thread policy: OMP_WAIT_POLICY or GOMP_SPINCOUNT is set in this environment (%s)\n", desc);
        return 77;
    }
    CHECK(strstr(desc, "short spin") != NULL);

    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    const int64_t n = 1 << 22; /* 16 MiB per tensor: every element loop splits it over the team */
    gpucore_tensor *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &c));
    CHECK_OK(gpucore_random(a, GPUCORE_UNIFORM, -1, 1, 1, 0, NULL));
    CHECK_OK(gpucore_random(b, GPUCORE_UNIFORM, -1, 1, 2, 0, NULL));
    /* Three tries (a busy machine may run a thread late): pass when, 0.2-0.6 ms after an op, no
     * other thread of the process is running (the stream's worker polls 30 us, a team thread
     * 100 spins, before they sleep). Each try samples three times, 0.2 ms apart. */
    int asleep = 0, threads = 0, seen = 0;
    for (int t = 0; t < 3 && !asleep; t++) {
        CHECK_OK(gpucore_binary(GPUCORE_ADD, c, a, b, NULL));
        CHECK_OK(gpucore_context_synchronize(ctx));
        sleep_us(200);
        for (int s = 0; s < 3 && !asleep; s++) {
            seen = others_running(&threads);
            asleep = seen == 0;
            if (!asleep) sleep_us(200);
        }
    }
    if (!asleep) fprintf(stderr, "%d of %d threads still running 0.2-0.6 ms after the op\n", seen, threads);
    CHECK(asleep);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(c);
    gpucore_context_destroy(ctx);

    /* the same binary under the user's OMP_WAIT_POLICY (read when libgomp loads: a new process) */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OMP_WAIT_POLICY", "active", 1);
        execl("/proc/self/exe", argv[0], "user-policy", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return check_finish("test_thread_policy");
}
