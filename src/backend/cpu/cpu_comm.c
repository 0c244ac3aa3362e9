/*
 * cpu_comm.c — the CPU backend's collectives. MPI carries the data, in the MPI
 * module (src/backend/mpi/mpi_transport.c, loaded by gpucore_comm_create_mpi): each
 * collective is a stream task (on the communication stream, or on the caller's
 * stream when the caller waits for it: see comm.c) that has the module run the
 * non-blocking MPI calls on the tensors themselves and poll them until they
 * complete, the call's deadline passes or the communicator is aborted, so
 * collectives are asynchronous and ordered with events exactly like NCCL on a
 * CUDA stream, and a dead or stalled peer turns into GPUCORE_ERR_COMM instead of a
 * hang. The task is not pinned to the worker thread: a caller that synchronizes
 * its stream runs it on its own thread, and one queued on the caller's stream is
 * queued for the caller (cpu_stream_enqueue_for_caller: the worker is not woken
 * for it and leaves it to a synchronizing caller for a while). This file keeps the
 * communicator's state, its first failure's message and the abort flag.
 * A 1-rank communicator (gpucore_comm_create_local with one context) needs no
 * MPI at all: every collective is a copy.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "backend/comm_names.h"
#include "backend/mpi_link.h"

typedef struct cpu_comm {
    int self; /* 1-rank, no MPI */
    int rank, size;
    const gpucore_mpi_module *mpi; /* !self: the MPI module and its communicator */
    void *mc;
    atomic_int failed;
    atomic_int abort_requested;
    pthread_mutex_t mu; /* guards msg */
    char msg[1024];
} cpu_comm;

/* Record the first failure; later ones keep the first message. */
static void comm_fail(cpu_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void comm_fail(cpu_comm *c, const char *fmt, ...)
{
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, sizeof c->msg, fmt, ap);
        va_end(ap);
        atomic_store(&c->failed, 1);
        if (!c->self) gpucore_mpi_mark_broken();
        gpucore_log(GPUCORE_LOG_ERROR, "comm: %s", c->msg);
    }
    pthread_mutex_unlock(&c->mu);
}

static void call_fail(cpu_comm *c, const gpucore_comm_call *k, const char *what)
{
    comm_fail(c, "rank %d of %d: %s #%llu (count %lld %s, op %s) %s. MPI cannot recover from a dead or stalled "
              "peer: report this, end the process (MPI_Abort or exit) and relaunch from a checkpoint",
              c->rank, c->size, comm_kind_name(k->kind), (unsigned long long)k->seq, (long long)k->count,
              gpucore_dtype_name((gpucore_dtype)k->dtype), comm_op_name(k->op), what);
}

static gpucore_status self_run(const gpucore_comm_call *k)
{
    if (k->kind == GPUCORE_COMM_BARRIER) return GPUCORE_OK;
    size_t bytes = (size_t)k->count * (size_t)gpucore_dtype_size((gpucore_dtype)k->dtype);
    if (k->send != k->recv) memmove(k->recv, k->send, bytes); /* one rank: every collective is a copy */
    return GPUCORE_OK;
}

/* One collective over MPI (the module sets no message: what it reports goes into ours). */
static gpucore_status mpi_run(cpu_comm *c, const gpucore_comm_call *k)
{
    char what[1024];
    gpucore_status st = c->mpi->comm_run(c->mc, k, gpucore_dtype_size((gpucore_dtype)k->dtype), what, sizeof what);
    if (st && what[0]) call_fail(c, k, what);
    return st;
}

typedef struct comm_task_args { cpu_comm *c; gpucore_comm_call call; } comm_task_args;

static gpucore_status comm_task(void *p)
{
    comm_task_args *a = p;
    if (atomic_load(&a->c->failed)) return GPUCORE_ERR_COMM; /* the communicator is dead: skip */
    if (a->c->self) return self_run(&a->call);
    return mpi_run(a->c, &a->call);
}

gpucore_status cpu_comm_enqueue(void *bcomm, const gpucore_comm_call *call, void *stream)
{
    cpu_comm *c = bcomm;
    if (!c->self && (call->kind == GPUCORE_COMM_REDUCE_SCATTER || call->kind == GPUCORE_COMM_ALL_GATHER) &&
        call->count > 2147483647LL)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "comm_%s: %lld elements per rank is more than MPI's int "
                                 "count allows (2^31-1); split the call", comm_kind_name(call->kind),
                                 (long long)call->count);
    comm_task_args a = {c, *call};
    /* on the caller's stream, left to a caller that synchronizes right after; any synchronizing caller may run it */
    if (call->for_caller) return cpu_stream_enqueue_for_caller(stream, comm_task, &a, sizeof a);
    return cpu_stream_enqueue(stream, comm_task, &a, sizeof a);
}

gpucore_status cpu_comm_check(void *bcomm)
{
    cpu_comm *c = bcomm;
    if (!atomic_load(&c->failed)) return GPUCORE_OK;
    pthread_mutex_lock(&c->mu);
    gpucore_status st = gpucore_set_error(GPUCORE_ERR_COMM, "%s", c->msg);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void cpu_comm_abort(void *bcomm, const char *reason)
{
    cpu_comm *c = bcomm;
    comm_fail(c, "rank %d of %d: communicator aborted: %s", c->rank, c->size, reason ? reason : "by request");
    atomic_store(&c->abort_requested, 1);
}

static cpu_comm *comm_new(int self, int rank, int size)
{
    cpu_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->self = self;
    c->rank = rank;
    c->size = size;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

gpucore_status cpu_comm_init(void *bctx, const void *id, int rank, int size, double timeout_s, void **bcomm)
{
    (void)bctx; (void)timeout_s;
    if (id)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "comm_create: the CPU backend's collectives run over MPI "
                                 "(no unique id): use gpucore_comm_create_mpi under mpirun/srun");
    const gpucore_mpi_module *m = gpucore_mpi_loaded(); /* comm_create_mpi loaded it */
    if (!m) return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "comm_create_mpi: MPI is not available");
    cpu_comm *c = comm_new(0, rank, size);
    if (!c) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create_mpi: out of host memory");
    gpucore_status st = m->comm_create(rank, size, &c->abort_requested, &c->mc);
    if (st) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return st;
    }
    c->mpi = m;
    *bcomm = c;
    return GPUCORE_OK;
}

gpucore_status cpu_comm_init_local(void *const *bctxs, int n, double timeout_s, void **bcomms)
{
    (void)bctxs; (void)timeout_s;
    if (n != 1)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "comm_create_local: the CPU backend runs one rank per process (%d contexts given); "
                                 "launch %d processes with mpirun and use gpucore_comm_create_mpi", n, n);
    cpu_comm *c = comm_new(1, 0, 1);
    if (!c) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create_local: out of host memory");
    bcomms[0] = c;
    return GPUCORE_OK;
}

void cpu_comm_destroy(void *bcomm)
{
    cpu_comm *c = bcomm;
    if (!c) return;
    /* A failed communicator may still have an MPI request in flight: the module then
     * leaves MPI alone (the process is expected to end) and only releases memory. */
    if (c->mpi) c->mpi->comm_destroy(c->mc, !atomic_load(&c->failed));
    pthread_mutex_destroy(&c->mu);
    free(c);
}
