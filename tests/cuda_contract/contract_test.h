/*
 * contract_test.h — what the suite's own tests share: the contract module opened
 * with dlopen, its violation queries and counters (standin.h's exports), typed.
 * Header-only (static), included by each test_cuda_contract*.c.
 */
#ifndef GPUCORE_CONTRACT_TEST_H
#define GPUCORE_CONTRACT_TEST_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "gpucore.h"
#include "../check.h"

static void *mod;
static int (*v_count)(void);
static const char *(*v_text)(int);
static void (*v_clear)(void);
static long (*standin_counter_)(const char *);

static void *sym(const char *name)
{
    void *p = dlsym(mod, name);
    if (!p) {
        fprintf(stderr, "FAIL: the contract module has no %s\n", name);
        exit(1);
    }
    return p;
}

static void expect_clean(const char *what)
{
    int n = v_count();
    CHECK(n == 0);
    for (int i = 0; i < n; i++) fprintf(stderr, "  unexpected violation (%s): %s\n", what, v_text(i));
    v_clear();
}

/* The module GPUCORE_CUDA_PLUGIN names, loaded as the CUDA backend; 0 (with a FAIL line) if it is not. */
static int contract_open(void)
{
    const char *path = getenv("GPUCORE_CUDA_PLUGIN");
    char why[768];
    if (!path || gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) != GPUCORE_OK) {
        fprintf(stderr, "FAIL: the contract module is not loadable as the CUDA backend: %s\n",
                path ? why : "GPUCORE_CUDA_PLUGIN unset");
        return 0;
    }
    mod = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!mod) {
        fprintf(stderr, "FAIL: %s is not loaded: %s\n", path, dlerror());
        return 0;
    }
    v_count = (int (*)(void))sym("standin_violation_count");
    v_text = (const char *(*)(int))sym("standin_violation_text");
    v_clear = (void (*)(void))sym("standin_violations_clear");
    standin_counter_ = (long (*)(const char *))sym("standin_counter");
    expect_clean("loading the module");
    return 1;
}

#endif
