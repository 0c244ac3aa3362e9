/*
 * cpu_comm.c — the CPU backend's collectives. MPI carries the data: each
 * collective is a stream task (on the communication stream, or on the caller's
 * stream when the caller waits for it: see comm.c) that starts the non-blocking
 * MPI call (MPI_Iallreduce, ...) on the tensors themselves (MPI_IN_PLACE for in
 * place, no staging copy) and polls MPI_Test until it completes or its deadline
 * passes, so collectives are asynchronous and ordered with events exactly like
 * NCCL on a CUDA stream, and a dead or stalled peer turns into GPUCORE_ERR_COMM
 * instead of a hang. The task is not pinned to the worker thread: a caller that
 * synchronizes its stream runs it on its own thread (MPI is called under
 * gpucore_mpi_lock, so MPI_THREAD_SERIALIZED holds too). f16 and bf16 reduce through
 * user-defined MPI ops (computed in f32, rounded to nearest even per combine).
 * A 1-rank communicator (gpucore_comm_create_local with one context) needs no
 * MPI at all: every collective is a copy.
 */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu_internal.h"
#include "dist/comm_names.h"
#include "dist/comm_internal.h"
#include "numeric.h"
#include "gpucore_config.h"
#if GPUCORE_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#endif

typedef struct cpu_comm {
    int self; /* 1-rank, no MPI */
    int rank, size;
#if GPUCORE_HAVE_MPI
    MPI_Comm mc;
    MPI_Op half_ops[2][3]; /* [f16, bf16][sum, max, min] */
#endif
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

/* AVG = sum, then divide in the element type (f16/bf16 through f32; i32 truncates). */
static void divide_by(void *buf, int32_t dtype, int64_t n, int size)
{
    switch (dtype) {
    case GPUCORE_F32: { float *x = buf; for (int64_t i = 0; i < n; i++) x[i] = x[i] / (float)size; break; }
    case GPUCORE_F64: { double *x = buf; for (int64_t i = 0; i < n; i++) x[i] = x[i] / (double)size; break; }
    case GPUCORE_I32: { int32_t *x = buf; for (int64_t i = 0; i < n; i++) x[i] = x[i] / size; break; }
    case GPUCORE_F16: {
        uint16_t *x = buf;
        for (int64_t i = 0; i < n; i++) x[i] = gpucore_f32_to_f16(gpucore_f16_to_f32(x[i]) / (float)size);
        break;
    }
    case GPUCORE_BF16: {
        uint16_t *x = buf;
        for (int64_t i = 0; i < n; i++) x[i] = gpucore_f32_to_bf16(gpucore_bf16_to_f32(x[i]) / (float)size);
        break;
    }
    default: break;
    }
}

static gpucore_status self_run(const gpucore_comm_call *k)
{
    if (k->kind == GPUCORE_COMM_BARRIER) return GPUCORE_OK;
    size_t bytes = (size_t)k->count * (size_t)gpucore_dtype_size((gpucore_dtype)k->dtype);
    if (k->send != k->recv) memmove(k->recv, k->send, bytes); /* one rank: every collective is a copy */
    return GPUCORE_OK;
}

#if GPUCORE_HAVE_MPI
/* ---- f16 / bf16 reductions as user MPI ops: inout[i] = in[i] op inout[i] ---- */
#define HALF_OP(name, to_f32, from_f32, expr)                                           \
    static void name(void *in, void *inout, int *len, MPI_Datatype *dt)                 \
    {                                                                                   \
        (void)dt;                                                                       \
        const uint16_t *a = in;                                                         \
        uint16_t *b = inout;                                                            \
        for (int i = 0; i < *len; i++) {                                                \
            float x = to_f32(a[i]), y = to_f32(b[i]);                                   \
            b[i] = from_f32(expr);                                                      \
        }                                                                               \
    }
HALF_OP(f16_sum, gpucore_f16_to_f32, gpucore_f32_to_f16, x + y)
HALF_OP(f16_max, gpucore_f16_to_f32, gpucore_f32_to_f16, x > y ? x : y)
HALF_OP(f16_min, gpucore_f16_to_f32, gpucore_f32_to_f16, x < y ? x : y)
HALF_OP(bf16_sum, gpucore_bf16_to_f32, gpucore_f32_to_bf16, x + y)
HALF_OP(bf16_max, gpucore_bf16_to_f32, gpucore_f32_to_bf16, x > y ? x : y)
HALF_OP(bf16_min, gpucore_bf16_to_f32, gpucore_f32_to_bf16, x < y ? x : y)

static MPI_Datatype mpi_type(int32_t dtype)
{
    switch (dtype) {
    case GPUCORE_F32: return MPI_FLOAT;
    case GPUCORE_F64: return MPI_DOUBLE;
    case GPUCORE_I32: return MPI_INT32_T;
    default: return MPI_UINT16_T; /* f16, bf16: reduced by the user ops */
    }
}

static MPI_Op mpi_op(cpu_comm *c, int32_t dtype, int32_t op)
{
    int which = op == GPUCORE_REDUCE_MAX ? 1 : op == GPUCORE_REDUCE_MIN ? 2 : 0; /* sum and avg sum */
    if (dtype == GPUCORE_F16) return c->half_ops[0][which];
    if (dtype == GPUCORE_BF16) return c->half_ops[1][which];
    return which == 1 ? MPI_MAX : which == 2 ? MPI_MIN : MPI_SUM;
}

/* Poll n non-blocking MPI requests to completion or the call's deadline. */
static gpucore_status mpi_wait_all(cpu_comm *c, int n, MPI_Request *req, const gpucore_comm_call *k, double start)
{
    double deadline = k->timeout_s > 0 ? start + k->timeout_s : -1;
    long polls = 0;
    for (;;) {
        int flag = 0;
        gpucore_mpi_lock();
        int rc = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        gpucore_mpi_unlock();
        if (rc != MPI_SUCCESS) {
            char es[MPI_MAX_ERROR_STRING] = "", what[MPI_MAX_ERROR_STRING + 32];
            int len = 0;
            MPI_Error_string(rc, es, &len);
            snprintf(what, sizeof what, "failed in MPI: %s", es);
            call_fail(c, k, what);
            return GPUCORE_ERR_COMM;
        }
        if (flag) return GPUCORE_OK;
        if (atomic_load(&c->abort_requested)) return GPUCORE_ERR_COMM; /* message set by comm_abort */
        double t = comm_now_s();
        if (deadline >= 0 && t > deadline) {
            char what[128];
            snprintf(what, sizeof what, "did not complete within the timeout of %.1f s (a peer may have died or stalled)",
                     k->timeout_s);
            call_fail(c, k, what);
            return GPUCORE_ERR_COMM;
        }
        /* Spin (latency), then yield (oversubscribed ranks) but never sleep while the data
         * moves: Open MPI progresses only inside MPI calls, so a nap stalls both ranks'
         * pipelines. Only a peer late by more than a second gets naps. */
        if (++polls > 64) {
            if (t - start > 1.0) {
                struct timespec nap = {0, 50000};
                nanosleep(&nap, NULL);
            } else {
                sched_yield();
            }
        }
    }
}

static gpucore_status mpi_wait(cpu_comm *c, MPI_Request *req, const gpucore_comm_call *k, double start)
{
    return mpi_wait_all(c, 1, req, k, start);
}

static gpucore_status mpi_check_rc(cpu_comm *c, const gpucore_comm_call *k, int rc, const char *fn)
{
    if (rc == MPI_SUCCESS) return GPUCORE_OK;
    char es[MPI_MAX_ERROR_STRING] = "", what[MPI_MAX_ERROR_STRING + 64];
    int len = 0;
    MPI_Error_string(rc, es, &len);
    snprintf(what, sizeof what, "could not start (%s: %s)", fn, es);
    call_fail(c, k, what);
    return GPUCORE_ERR_COMM;
}

#define MPI_CHUNK ((int64_t)1 << 30) /* elements per call: MPI counts are int */

/* ---- large allreduce: a ring over non-blocking point-to-point ----
 * Open MPI's non-blocking MPI_Iallreduce (libnbc) reaches about half the speed of its
 * blocking MPI_Allreduce on large buffers, and a blocking call cannot honour the
 * timeout. So from RING_MIN_BYTES (4 KiB: two ranks gain from there, measured with
 * bench_comm) the allreduce is a ring of Isend/Irecv polled
 * like every collective: reduce-scatter (size-1 steps, each rank adds the chunk its
 * left neighbour sends into its own copy) then all-gather (size-1 steps), moving
 * 2(n-1)/n of the buffer per rank as the blocking algorithms do. Each chunk is
 * reduced in one fixed rank order and then copied, so every rank holds the same
 * bits and a run is reproducible; with 2 ranks the sum is exactly MPI's (a + b). */
#define RING_MIN_BYTES ((int64_t)4 << 10)
#define RING_TAG 0x6C71

static int ring_applies(const cpu_comm *c, const gpucore_comm_call *k)
{
    int64_t es = gpucore_dtype_size((gpucore_dtype)k->dtype);
    return k->kind == GPUCORE_COMM_ALLREDUCE && c->size > 1 && k->count * es >= RING_MIN_BYTES &&
           k->count / c->size < (int64_t)INT_MAX / 2 &&
           (k->dtype == GPUCORE_F32 || k->dtype == GPUCORE_F64 || k->dtype == GPUCORE_I32);
}

#define RING_COMBINE(T, dst, src, n, op)                                                            \
    do {                                                                                            \
        T *d_ = (T *)(dst);                                                                         \
        const T *s_ = (const T *)(src);                                                             \
        if ((op) == GPUCORE_REDUCE_MAX)                                                             \
            for (int64_t i_ = 0; i_ < (n); i_++) d_[i_] = s_[i_] > d_[i_] ? s_[i_] : d_[i_];        \
        else if ((op) == GPUCORE_REDUCE_MIN)                                                        \
            for (int64_t i_ = 0; i_ < (n); i_++) d_[i_] = s_[i_] < d_[i_] ? s_[i_] : d_[i_];        \
        else                                                                                        \
            for (int64_t i_ = 0; i_ < (n); i_++) d_[i_] = s_[i_] + d_[i_];                          \
    } while (0)

/* dst = src op dst, elementwise (sum and avg add: avg divides at the end). */
static void ring_combine(int32_t dtype, int32_t op, void *dst, const void *src, int64_t n)
{
    if (dtype == GPUCORE_F32) RING_COMBINE(float, dst, src, n, op);
    else if (dtype == GPUCORE_F64) RING_COMBINE(double, dst, src, n, op);
    else RING_COMBINE(int32_t, dst, src, n, op);
}

static gpucore_status ring_allreduce(cpu_comm *c, const gpucore_comm_call *k, double start)
{
    const int p = c->size, r = c->rank, right = (r + 1) % p, left = (r + p - 1) % p;
    const int64_t es = gpucore_dtype_size((gpucore_dtype)k->dtype), n = k->count;
    char *buf = k->recv;
    if (k->send != k->recv) memcpy(buf, k->send, (size_t)(n * es)); /* out of place: reduce in out */
    int64_t most = n / p + 1;
    char *tmp = malloc((size_t)(most * es));
    if (!tmp) {
        call_fail(c, k, "ran out of host memory for its receive buffer");
        return GPUCORE_ERR_COMM;
    }
    MPI_Datatype dt = mpi_type(k->dtype);
    gpucore_status st = GPUCORE_OK;
    for (int step = 0; step < 2 * (p - 1) && !st; step++) {
        const int gather = step >= p - 1, s = gather ? step - (p - 1) : step;
        /* reduce-scatter step s: send chunk r-s, receive chunk r-s-1 (and add it in);
         * all-gather step s: send chunk r+1-s (complete), receive chunk r-s (complete) */
        const int send_chunk = ((gather ? r + 1 - s : r - s) % p + p) % p;
        const int recv_chunk = ((gather ? r - s : r - s - 1) % p + p) % p;
        const int64_t s0 = send_chunk * n / p, s1 = (send_chunk + 1) * n / p;
        const int64_t r0 = recv_chunk * n / p, r1 = (recv_chunk + 1) * n / p;
        char *dst = gather ? buf + r0 * es : tmp;
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        gpucore_mpi_lock();
        int rc = MPI_Irecv(dst, (int)(r1 - r0), dt, left, RING_TAG, c->mc, &req[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Isend(buf + s0 * es, (int)(s1 - s0), dt, right, RING_TAG, c->mc, &req[1]);
        gpucore_mpi_unlock();
        if (!(st = mpi_check_rc(c, k, rc, "MPI_Isend/MPI_Irecv"))) st = mpi_wait_all(c, 2, req, k, start);
        if (!st && !gather) ring_combine(k->dtype, k->op, buf + r0 * es, tmp, r1 - r0);
    }
    free(tmp);
    return st;
}

static gpucore_status mpi_run(cpu_comm *c, const gpucore_comm_call *k)
{
    double start = comm_now_s();
    int64_t es = gpucore_dtype_size((gpucore_dtype)k->dtype);
    MPI_Datatype dt = mpi_type(k->dtype);
    MPI_Op op = mpi_op(c, k->dtype, k->op);
    MPI_Request req = MPI_REQUEST_NULL;
    char *send = (char *)k->send, *recv = k->recv;
    gpucore_status st = GPUCORE_OK;
    int rc;
    switch (k->kind) {
    case GPUCORE_COMM_ALLREDUCE:
        if (ring_applies(c, k)) {
            st = ring_allreduce(c, k, start);
            break;
        }
        for (int64_t off = 0; off < k->count && !st; off += MPI_CHUNK) {
            int n = (int)(k->count - off < MPI_CHUNK ? k->count - off : MPI_CHUNK);
            const void *sp = send == recv ? MPI_IN_PLACE : send + off * es;
            gpucore_mpi_lock();
            rc = MPI_Iallreduce(sp, recv + off * es, n, dt, op, c->mc, &req);
            gpucore_mpi_unlock();
            if (!(st = mpi_check_rc(c, k, rc, "MPI_Iallreduce"))) st = mpi_wait(c, &req, k, start);
        }
        break;
    case GPUCORE_COMM_REDUCE_SCATTER: {
        /* NCCL's in place (out is this rank's slice of in) is not MPI's: go through a temporary */
        int in_place = recv == send + (int64_t)c->rank * k->count * es;
        char *dst = in_place ? malloc((size_t)(k->count * es)) : recv;
        if (!dst) {
            call_fail(c, k, "ran out of host memory for its temporary buffer");
            return GPUCORE_ERR_COMM;
        }
        gpucore_mpi_lock();
        rc = MPI_Ireduce_scatter_block(send, dst, (int)k->count, dt, op, c->mc, &req);
        gpucore_mpi_unlock();
        if (!(st = mpi_check_rc(c, k, rc, "MPI_Ireduce_scatter_block"))) st = mpi_wait(c, &req, k, start);
        if (in_place) {
            if (!st) memcpy(recv, dst, (size_t)(k->count * es));
            free(dst);
        }
        break;
    }
    case GPUCORE_COMM_ALL_GATHER: {
        const void *sp = send == recv + (int64_t)c->rank * k->count * es ? MPI_IN_PLACE : send;
        gpucore_mpi_lock();
        rc = MPI_Iallgather(sp, (int)k->count, dt, recv, (int)k->count, dt, c->mc, &req);
        gpucore_mpi_unlock();
        if (!(st = mpi_check_rc(c, k, rc, "MPI_Iallgather"))) st = mpi_wait(c, &req, k, start);
        break;
    }
    case GPUCORE_COMM_BROADCAST:
        if (c->rank == k->root && send != recv) memcpy(recv, send, (size_t)(k->count * es));
        for (int64_t off = 0; off < k->count && !st; off += MPI_CHUNK) {
            int n = (int)(k->count - off < MPI_CHUNK ? k->count - off : MPI_CHUNK);
            gpucore_mpi_lock();
            rc = MPI_Ibcast(recv + off * es, n, dt, k->root, c->mc, &req);
            gpucore_mpi_unlock();
            if (!(st = mpi_check_rc(c, k, rc, "MPI_Ibcast"))) st = mpi_wait(c, &req, k, start);
        }
        break;
    case GPUCORE_COMM_BARRIER:
        gpucore_mpi_lock();
        rc = MPI_Ibarrier(c->mc, &req);
        gpucore_mpi_unlock();
        if (!(st = mpi_check_rc(c, k, rc, "MPI_Ibarrier"))) st = mpi_wait(c, &req, k, start);
        break;
    default:
        call_fail(c, k, "is not a known collective");
        return GPUCORE_ERR_INTERNAL;
    }
    if (!st && k->op == GPUCORE_REDUCE_AVG &&
        (k->kind == GPUCORE_COMM_ALLREDUCE || k->kind == GPUCORE_COMM_REDUCE_SCATTER))
        divide_by(recv, k->dtype, k->count, c->size);
    return st;
}
#endif

typedef struct comm_task_args { cpu_comm *c; gpucore_comm_call call; } comm_task_args;

static gpucore_status comm_task(void *p)
{
    comm_task_args *a = p;
    if (atomic_load(&a->c->failed)) return GPUCORE_ERR_COMM; /* the communicator is dead: skip */
    if (a->c->self) return self_run(&a->call);
#if GPUCORE_HAVE_MPI
    return mpi_run(a->c, &a->call);
#else
    return GPUCORE_ERR_NOT_SUPPORTED;
#endif
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
    return cpu_stream_enqueue(stream, comm_task, &a, sizeof a); /* a synchronizing caller may run it */
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
#if GPUCORE_HAVE_MPI
    cpu_comm *c = comm_new(0, rank, size);
    if (!c) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create_mpi: out of host memory");
    gpucore_mpi_lock();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mc); /* our traffic never mixes with the program's */
    if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN); /* errors are statuses, not aborts */
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min}, {bf16_sum, bf16_max, bf16_min}};
    for (int t = 0; t < 2 && rc == MPI_SUCCESS; t++)
        for (int o = 0; o < 3 && rc == MPI_SUCCESS; o++) rc = MPI_Op_create(fns[t][o], 1, &c->half_ops[t][o]);
    gpucore_mpi_unlock();
    if (rc != MPI_SUCCESS) {
        free(c);
        return gpucore_set_error(GPUCORE_ERR_COMM, "comm_create_mpi: MPI_Comm_dup/MPI_Op_create failed on rank %d",
                                 rank);
    }
    *bcomm = c;
    return GPUCORE_OK;
#else
    (void)rank; (void)size; (void)bcomm;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "comm_create_mpi: this build has no MPI");
#endif
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
#if GPUCORE_HAVE_MPI
    /* A failed communicator may still have an MPI request in flight: leave MPI alone
     * (the process is expected to end), only release our memory. */
    if (!c->self && !atomic_load(&c->failed)) {
        gpucore_mpi_lock();
        for (int t = 0; t < 2; t++)
            for (int o = 0; o < 3; o++) MPI_Op_free(&c->half_ops[t][o]);
        MPI_Comm_free(&c->mc);
        gpucore_mpi_unlock();
    }
#endif
    pthread_mutex_destroy(&c->mu);
    free(c);
}
