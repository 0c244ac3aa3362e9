/*
 * module_loader.h — finding and opening libgpucore's run-time modules: the CUDA
 * backend (backend_registry.c) and the MPI transport (src/backend/mpi_link.c). Both
 * are shared objects loaded with dlopen on first use, so libgpucore.so itself
 * needs neither CUDA nor MPI installed. One search order for every module: the
 * path in an environment variable when it is set, else beside libgpucore.so, in
 * an installed gpucore/ folder there, or in the build tree's folder for it.
 */
#ifndef GPUCORE_MODULE_LOADER_H
#define GPUCORE_MODULE_LOADER_H

#include <stddef.h>
#include "core/internal.h"

typedef struct gpucore_module_spec {
    const char *env_var;      /* when set and not empty: the only path tried */
    const char *file_name;    /* e.g. "libgpucore_cuda.so" */
    const char *build_subdir; /* its folder in the build tree, relative to libgpucore.so's (e.g. "backend/cuda") */
    const char *entry_name;   /* the symbol every such module exports */
} gpucore_module_spec;

/* Called with each opened file's entry point: 1 keeps the file loaded (for the life of
 * the process) and ends the search; 0, with a reason in why, closes it and goes on. */
typedef int (*gpucore_module_accept_fn)(void *entry, void *arg, char *why, size_t why_len);

/* 1 when a file was accepted (its path in path); 0 otherwise, with every path tried and
 * why it failed (dlerror's text, or accept's reason) in errors, separated by "; ". */
GPUCORE_HIDDEN int gpucore_module_open(const gpucore_module_spec *spec, gpucore_module_accept_fn accept, void *arg,
                                       char *path, size_t path_len, char *errors, size_t errors_len);

#endif
