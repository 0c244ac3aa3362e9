/*
 * mpi_internal.h — what the two files of the MPI module (libgpucore_mpi.so)
 * share: the host table libgpucore.so handed over (errors and logging go through
 * it) and the lock around every MPI call when MPI runs below MPI_THREAD_MULTIPLE.
 */
#ifndef GPUCORE_MPI_INTERNAL_H
#define GPUCORE_MPI_INTERNAL_H

#include "backend/mpi_module.h"

#define MPI_MODULE_HIDDEN __attribute__((visibility("hidden")))

MPI_MODULE_HIDDEN extern const gpucore_plugin_host *mpi_host;
/* Around every MPI call: a no-op under MPI_THREAD_MULTIPLE, a mutex otherwise. */
MPI_MODULE_HIDDEN void mpi_lock(void);
MPI_MODULE_HIDDEN void mpi_unlock(void);
/* mpi_world.c: a collective failed (MPI_Finalize must not run at exit). */
MPI_MODULE_HIDDEN void mpi_mark_broken(void);

/* mpi_transport.c: the CPU backend's collectives */
MPI_MODULE_HIDDEN gpucore_status mpi_comm_create(int rank, int size, atomic_int *abort_requested, void **out);
MPI_MODULE_HIDDEN gpucore_status mpi_comm_run(void *comm, const gpucore_comm_call *call, int64_t elem_size,
                                              char *what, size_t what_len);
MPI_MODULE_HIDDEN void mpi_comm_destroy(void *comm, int release_mpi);

#endif
