/*
 * mpi_world.c — the MPI module's entry point and its MPI_COMM_WORLD side: MPI
 * start-up (MPI_Init_thread at the level libgpucore needs, MPI_Finalize at exit
 * when the module started MPI and no collective failed), the lock that serialises
 * MPI calls under MPI_THREAD_SERIALIZED, the blocking world exchanges that ship
 * NCCL's unique id and check the GPU mapping, and the library version.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "mpi_internal.h"

const gpucore_plugin_host *mpi_host;

static pthread_mutex_t mpi_init_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mpi_call_mu = PTHREAD_MUTEX_INITIALIZER;
static int mpi_need_lock;
static atomic_int mpi_broken;

static void mpi_finalize_at_exit(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !atomic_load(&mpi_broken)) MPI_Finalize();
}

void mpi_mark_broken(void) { atomic_store(&mpi_broken, 1); }

void mpi_lock(void)
{
    if (mpi_need_lock) pthread_mutex_lock(&mpi_call_mu);
}

void mpi_unlock(void)
{
    if (mpi_need_lock) pthread_mutex_unlock(&mpi_call_mu);
}

static gpucore_status mpi_world(const char *op, int *rank, int *size)
{
    pthread_mutex_lock(&mpi_init_mu);
    int finalized = 0, initialized = 0, provided = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
        pthread_mutex_unlock(&mpi_init_mu);
        return mpi_host->set_error(GPUCORE_ERR_COMM, "%s: MPI was already finalized in this process; create "
                                   "communicators before MPI_Finalize", op);
    }
    MPI_Initialized(&initialized);
    if (!initialized) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            pthread_mutex_unlock(&mpi_init_mu);
            return mpi_host->set_error(GPUCORE_ERR_COMM, "%s: MPI_Init_thread failed; launch the program with "
                                       "mpirun/srun (or check the MPI installation)", op);
        }
        atexit(mpi_finalize_at_exit); /* we started MPI, so we finish it (this module is never unloaded) */
        mpi_host->log(GPUCORE_LOG_INFO, "comm: MPI initialised by libgpucore (thread level %d)", provided);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        pthread_mutex_unlock(&mpi_init_mu);
        return mpi_host->set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                   "%s: MPI was initialised with thread level %d, but libgpucore calls MPI from its "
                                   "communication thread: initialise MPI with MPI_Init_thread(..., "
                                   "MPI_THREAD_MULTIPLE, ...) (or let libgpucore initialise it)", op, provided);
    }
    mpi_need_lock = provided < MPI_THREAD_MULTIPLE;
    pthread_mutex_unlock(&mpi_init_mu);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return GPUCORE_OK;
}

static gpucore_status mpi_world_allgather(const void *mine, void *all, int bytes)
{
    mpi_lock();
    int rc = MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, MPI_COMM_WORLD);
    mpi_unlock();
    return rc == MPI_SUCCESS ? GPUCORE_OK : GPUCORE_ERR_COMM;
}

static gpucore_status mpi_world_bcast(void *buf, int bytes, int root)
{
    mpi_lock();
    int rc = MPI_Bcast(buf, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    mpi_unlock();
    return rc == MPI_SUCCESS ? GPUCORE_OK : GPUCORE_ERR_COMM;
}

static void mpi_library_version(char *buf, size_t len)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int n = 0;
    MPI_Get_library_version(v, &n);
    v[strcspn(v, "\n")] = '\0';
    snprintf(buf, len, "%s", v);
}

static const gpucore_mpi_module module_table = {
    .abi = GPUCORE_MPI_MODULE_ABI,
    .library_version = mpi_library_version,
    .world = mpi_world,
    .world_allgather = mpi_world_allgather,
    .world_bcast = mpi_world_bcast,
    .mark_broken = mpi_mark_broken,
    .comm_create = mpi_comm_create,
    .comm_run = mpi_comm_run,
    .comm_destroy = mpi_comm_destroy,
};

__attribute__((visibility("default"))) gpucore_status gpucore_mpi_module_entry(const gpucore_plugin_host *host,
                                                                              const gpucore_mpi_module **out)
{
    if (!host || !out) return GPUCORE_ERR_NULL_POINTER;
    mpi_host = host;
    *out = &module_table;
    return GPUCORE_OK;
}
