/*
 * cuda_dynlib.c — the dlopen loader of cuDNN and NCCL (cuda_dynlib.h): each is
 * opened once, on the first convolution / collective / version query, and every
 * entry point the module calls is resolved then or the library counts as absent.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "cuda_dynlib.h"

typedef struct dyn_lib {
    pthread_once_t once;
    const char *env, *soname, *label, *feature;
    int ok;
    char why[600];
} dyn_lib;

/* Open the library and fill the n entries of table (names[i] -> table[i]); sets lib->ok or lib->why. */
static void dyn_open(dyn_lib *lib, const char *const *names, void **table, int n)
{
    const char *path = getenv(lib->env);
    if (!path || !*path) path = lib->soname;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        snprintf(lib->why, sizeof lib->why, "%s (%s) could not be loaded, so %s: %s; install it (the Python wheel's "
                 "lib folder on LD_LIBRARY_PATH will do) or set %s to its path", lib->label, path, lib->feature,
                 err ? err : "not found", lib->env);
        return;
    }
    for (int i = 0; i < n; i++) {
        table[i] = dlsym(h, names[i]);
        if (!table[i]) {
            snprintf(lib->why, sizeof lib->why, "%s (%s) has no %s (a version this build does not support), so %s",
                     lib->label, path, names[i], lib->feature);
            dlclose(h);
            return;
        }
    }
    lib->ok = 1; /* kept open for the process */
}

static gpucore_status dyn_status(const dyn_lib *lib, const char *what)
{
    if (lib->ok) return GPUCORE_OK;
    return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: %s", what, lib->why);
}

#define CUDA_DYN_NAME(name) #name,

/* The table, its library record and its load function for one library. */
#define CUDA_DYN_LIBRARY(table_type, table, load_fn, functions, env, soname, label, feature)                  \
    table_type table;                                                                                         \
    static dyn_lib table##_lib = {PTHREAD_ONCE_INIT, env, soname, label, feature, 0, ""};                     \
    static void table##_open(void)                                                                            \
    {                                                                                                         \
        static const char *const names[] = {functions(CUDA_DYN_NAME)};                                        \
        dyn_open(&table##_lib, names, (void **)&table, (int)(sizeof names / sizeof names[0]));               \
    }                                                                                                         \
    gpucore_status load_fn(const char *what)                                                                  \
    {                                                                                                         \
        pthread_once(&table##_lib.once, table##_open);                                                        \
        return dyn_status(&table##_lib, what);                                                                \
    }

#if GPUCORE_HAVE_CUDNN
CUDA_DYN_LIBRARY(cuda_cudnn_api, cuda_dnn_api, cuda_cudnn_load, CUDA_CUDNN_FUNCTIONS, "GPUCORE_CUDNN_LIBRARY",
                 CUDA_CUDNN_SONAME, "cuDNN", "convolutions are not supported on CUDA (GEMM and the other ops are)")
#endif

#if GPUCORE_HAVE_NCCL
CUDA_DYN_LIBRARY(cuda_nccl_api, cuda_nccl_api_table, cuda_nccl_load, CUDA_NCCL_FUNCTIONS, "GPUCORE_NCCL_LIBRARY",
                 CUDA_NCCL_SONAME, "NCCL", "collectives (comm, DDP) are not supported on CUDA (the other ops are)")
#endif
