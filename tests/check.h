/*
 * check.h — the C tests' small harness: CHECK macros that record failures and
 * go on, the list of backends to run each test on (with a visible SKIP line and
 * its reason for any backend that is absent), float64 reference comparison per
 * DESIGN.md's accuracy contract, and the closing "N passed, N failed" line.
 * Exit status: 0 all passed, 1 a check failed, 77 (meson's skip) if nothing ran.
 */
#ifndef GPUCORE_TEST_CHECK_H
#define GPUCORE_TEST_CHECK_H

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

static int check_passed, check_failed, check_skipped;

/* A counter of the CUDA stand-ins (tests/cuda_contract: standin_counter, e.g. "cudaLaunchHostFunc",
 * "peer_copy_staged"), read from the contract module that GPUCORE_CUDA_PLUGIN names (already
 * loaded by the library); -1 on a real CUDA module, which has no stand-in. */
static inline long check_standin_counter(const char *name)
{
    const char *path = getenv("GPUCORE_CUDA_PLUGIN");
    void *mod = path ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    long (*counter)(const char *) = mod ? (long (*)(const char *))dlsym(mod, "standin_counter") : NULL;
    long n = counter ? counter(name) : -1;
    if (mod) dlclose(mod);
    return n;
}

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (cond) check_passed++;                                                           \
        else {                                                                              \
            check_failed++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                 \
        }                                                                                   \
    } while (0)

#define CHECK_OK(call)                                                                      \
    do {                                                                                    \
        gpucore_status check_st_ = (call);                                                  \
        if (check_st_ == GPUCORE_OK) check_passed++;                                        \
        else {                                                                              \
            check_failed++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,          \
                    gpucore_status_string(check_st_), gpucore_last_error());                \
        }                                                                                   \
    } while (0)

/* The call must fail with `expected` and leave a non-empty message. */
#define CHECK_STATUS(call, expected)                                                        \
    do {                                                                                    \
        gpucore_clear_error();                                                              \
        gpucore_status check_st_ = (call);                                                  \
        if (check_st_ == (expected) && (check_st_ == GPUCORE_OK || gpucore_last_error()[0])) \
            check_passed++;                                                                 \
        else {                                                                              \
            check_failed++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s -> %s (want %s), message \"%s\"\n", __FILE__,     \
                    __LINE__, #call, gpucore_status_string(check_st_),                      \
                    gpucore_status_string(expected), gpucore_last_error());                 \
        }                                                                                   \
    } while (0)

/* Backends to run on: cpu always; cuda and cuda-emulated when usable, else a SKIP line. */
__attribute__((unused)) static int test_devices(const char **out, int max)
{
    int n = 0;
    out[n++] = "cpu";
    static const struct { gpucore_device_type type; const char *spec; } extra[] = {
        {GPUCORE_DEVICE_CUDA, "cuda"}, {GPUCORE_DEVICE_CUDA_EMULATED, "cuda-emulated"}};
    for (int i = 0; i < 2 && n < max; i++) {
        char why[768];
        if (gpucore_backend_available(extra[i].type, why, sizeof why) == GPUCORE_OK) {
            out[n++] = extra[i].spec;
        } else {
            check_skipped++;
            printf("SKIP %s backend: %s\n", extra[i].spec, why);
        }
    }
    gpucore_clear_error();
    return n;
}

/* The device allocator's allocated bytes now (peak 0) or its peak (peak 1), after the context's work. */
__attribute__((unused)) static int64_t check_allocated_bytes(gpucore_context *ctx, int peak)
{
    gpucore_memory_stats m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    gpucore_context_synchronize(ctx);
    CHECK_OK(gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &m));
    return peak ? m.allocated_bytes_peak : m.allocated_bytes;
}

/* Each of the `n` test functions on a fresh context of every backend present (test_devices), in order,
 * printing "-- <backend>" first; check_device names the backend while they run. for_each_device is
 * one such pass (a test may make several); run_on_devices is one pass then check_finish(name), for
 * tests whose main is only that loop. */
typedef void (*device_test_fn)(gpucore_context *ctx);
static const char *check_device = "";
static int check_finish(const char *name);
__attribute__((unused)) static void for_each_device(const device_test_fn *fns, int n)
{
    const char *devs[4];
    int nd = test_devices(devs, 4);
    for (int d = 0; d < nd; d++) {
        gpucore_context *ctx = NULL;
        CHECK_OK(gpucore_context_create(devs[d], &ctx));
        if (!ctx) continue;
        check_device = devs[d];
        printf("-- %s\n", devs[d]);
        for (int i = 0; i < n; i++) fns[i](ctx);
        CHECK_OK(gpucore_context_destroy(ctx));
    }
    check_device = "";
}

__attribute__((unused)) static int run_on_devices(const char *name, const device_test_fn *fns, int n)
{
    for_each_device(fns, n);
    return check_finish(name);
}

/* Device bytes allocated in ctx once its work is done (the leak checks' measure). */
__attribute__((unused)) static int64_t test_allocated_bytes(gpucore_context *ctx)
{
    gpucore_memory_stats m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    gpucore_context_synchronize(ctx);
    gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &m);
    return m.allocated_bytes;
}

/* ||out - ref|| / ||ref||, NaN-propagating (NaN never passes). */
__attribute__((unused)) static double rel_error(const double *out, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

static int check_finish(const char *name)
{
    printf("%s: %d passed, %d failed, %d skipped\n", name, check_passed, check_failed, check_skipped);
    if (check_failed) return 1;
    if (check_passed == 0) return 77;
    return 0;
}

#endif
