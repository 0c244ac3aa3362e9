/*
 * mpi_module.h — the interface between libgpucore.so and its MPI module,
 * libgpucore_mpi.so (src/backend/mpi/). The module is the only code compiled
 * against mpi.h and linked with libmpi: libgpucore.so loads it with dlopen the
 * first time an MPI communicator is created (src/backend/mpi_link.c), so a program
 * that never uses MPI needs no MPI installed, and a missing Open MPI becomes a
 * status with a message instead of a loader failure. No MPI type crosses this
 * interface: communicators are opaque pointers, buffers are bytes.
 */
#ifndef GPUCORE_MPI_MODULE_H
#define GPUCORE_MPI_MODULE_H

#include <stdatomic.h>
#include <stddef.h>
#include "backend/backend.h"

/* Bumped whenever the table below changes: a module of another ABI is refused. */
#define GPUCORE_MPI_MODULE_ABI 1
/* The module exports this symbol (a gpucore_mpi_entry_fn). */
#define GPUCORE_MPI_ENTRY_NAME "gpucore_mpi_module_entry"
#define GPUCORE_MPI_MODULE_FILE "libgpucore_mpi.so"
/* A path in this environment variable is the only place the module is looked for. */
#define GPUCORE_MPI_MODULE_ENV "GPUCORE_MPI_MODULE"

typedef struct gpucore_mpi_module {
    int abi; /* GPUCORE_MPI_MODULE_ABI */
    /* The MPI library's version line (MPI_Get_library_version; MPI need not be started). */
    void (*library_version)(char *buf, size_t len);
    /* Start MPI if the program has not (MPI_Init_thread, finalized at exit) and give this
     * process's rank and size in MPI_COMM_WORLD; on failure the message names op. */
    gpucore_status (*world)(const char *op, int *rank, int *size);
    /* Blocking on MPI_COMM_WORLD (after world): every rank's `bytes` bytes into all
     * (rank order), or root's buf to every rank. GPUCORE_ERR_COMM on failure, no message. */
    gpucore_status (*world_allgather)(const void *mine, void *all, int bytes);
    gpucore_status (*world_bcast)(void *buf, int bytes, int root);
    /* A collective failed: MPI is unusable, the exit handler must not call MPI_Finalize. */
    void (*mark_broken)(void);
    /* A communicator over a duplicate of MPI_COMM_WORLD (after world). Its waits give up
     * when *abort_requested becomes nonzero. Message set on failure. */
    gpucore_status (*comm_create)(int rank, int size, atomic_int *abort_requested, void **out);
    /* Run one collective to completion or its deadline (elem_size: bytes per element of
     * call->dtype). On failure GPUCORE_ERR_COMM (GPUCORE_ERR_INTERNAL for an unknown kind)
     * with what failed in `what` (empty when the abort flag ended it); sets no message. */
    gpucore_status (*comm_run)(void *comm, const gpucore_comm_call *call, int64_t elem_size, char *what,
                               size_t what_len);
    /* Free the communicator; release_mpi 0 (it failed: a request may be in flight) frees
     * only memory. */
    void (*comm_destroy)(void *comm, int release_mpi);
} gpucore_mpi_module;

typedef gpucore_status (*gpucore_mpi_entry_fn)(const gpucore_plugin_host *host, const gpucore_mpi_module **out);

#endif
