/*
 * mpi_transport.c — the CPU backend's collectives over MPI, in the MPI module.
 * The CPU backend (src/backend/cpu/cpu_comm.c) queues each collective as a
 * stream task and calls mpi_comm_run from it; this file starts the non-blocking
 * MPI calls on the tensors themselves (MPI_IN_PLACE for in place, no staging
 * copy) and polls them until they complete, the call's deadline passes or the
 * communicator is aborted, so a dead or stalled peer turns into GPUCORE_ERR_COMM
 * instead of a hang. f16 and bf16 reduce through user-defined MPI ops (computed
 * in f32, rounded to nearest even per combine). MPI is called under mpi_lock, so
 * MPI_THREAD_SERIALIZED holds too.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include "mpi_internal.h"
#include "backend/comm_names.h"
#include "numeric.h"

typedef struct mpi_comm {
    int rank, size;
    MPI_Comm mc;
    MPI_Op half_ops[2][3];        /* [f16, bf16][sum, max, min] */
    void *scratch;                /* received partial chunks (ring collectives), scratch_bytes long */
    size_t scratch_bytes;
    atomic_int *abort_requested;  /* the CPU communicator's flag (cpu_comm_abort) */
} mpi_comm;

/* One collective being run: what every step needs, and where its failure is described. */
typedef struct mpi_call {
    mpi_comm *c;
    const gpucore_comm_call *k;
    int64_t es;      /* bytes per element of k->dtype */
    double start;    /* when it started running: its deadline counts from here */
    char *what;
    size_t what_len;
} mpi_call;

static void call_fail(mpi_call *r, const char *what)
{
    if (!r->what[0]) snprintf(r->what, r->what_len, "%s", what);
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

static MPI_Op mpi_op(mpi_comm *c, int32_t dtype, int32_t op)
{
    int which = op == GPUCORE_REDUCE_MAX ? 1 : op == GPUCORE_REDUCE_MIN ? 2 : 0; /* sum and avg sum */
    if (dtype == GPUCORE_F16) return c->half_ops[0][which];
    if (dtype == GPUCORE_BF16) return c->half_ops[1][which];
    return which == 1 ? MPI_MAX : which == 2 ? MPI_MIN : MPI_SUM;
}

/* How a waiting collective polls: MPI_Test back to back for WAIT_SPIN_S (a peer on
 * time completes a small collective within it), then polls that sched_yield until
 * WAIT_YIELD_S (a peer that lost its core on a loaded machine comes back within a
 * time slice or two, and a yield hands the core to whoever is runnable), then naps
 * that double from WAIT_NAP0_NS to WAIT_NAP_MAX_NS between polls. The old wait
 * yielded for a whole second: on an oversubscribed machine (2 ranks with compute
 * threads and comm workers on 2 cores) a waiter whose peer is busy computing kept
 * its share of a core all that time. A nap makes the collective at most
 * WAIT_NAP_MAX_NS late once the peer arrives (Open MPI progresses only inside MPI
 * calls); every poll still checks the abort flag and the deadline. */
#define WAIT_SPIN_S 50e-6
#define WAIT_YIELD_S 2e-3
#define WAIT_NAP0_NS 50000L
#define WAIT_NAP_MAX_NS 1000000L

/* Poll n non-blocking MPI requests to completion or the call's deadline. */
static gpucore_status mpi_wait_all(mpi_call *r, int n, MPI_Request *req)
{
    const gpucore_comm_call *k = r->k;
    double deadline = k->timeout_s > 0 ? r->start + k->timeout_s : -1;
    double waited_from = -1;
    long nap_ns = WAIT_NAP0_NS;
    for (;;) {
        int flag = 0;
        mpi_lock();
        int rc = MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
        mpi_unlock();
        if (rc != MPI_SUCCESS) {
            char es[MPI_MAX_ERROR_STRING] = "", what[MPI_MAX_ERROR_STRING + 32];
            int len = 0;
            MPI_Error_string(rc, es, &len);
            snprintf(what, sizeof what, "failed in MPI: %s", es);
            call_fail(r, what);
            return GPUCORE_ERR_COMM;
        }
        if (flag) return GPUCORE_OK;
        if (atomic_load(r->c->abort_requested)) return GPUCORE_ERR_COMM; /* message set by comm_abort */
        double t = gpucore_clock_s();
        if (deadline >= 0 && t > deadline) {
            char what[128];
            snprintf(what, sizeof what, "did not complete within the timeout of %.1f s (a peer may have died or stalled)",
                     k->timeout_s);
            call_fail(r, what);
            return GPUCORE_ERR_COMM;
        }
        if (waited_from < 0) waited_from = t;
        if (t - waited_from < WAIT_SPIN_S) continue;
        if (t - waited_from < WAIT_YIELD_S) {
            sched_yield();
            continue;
        }
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        if (nap_ns < WAIT_NAP_MAX_NS) nap_ns = nap_ns * 2 < WAIT_NAP_MAX_NS ? nap_ns * 2 : WAIT_NAP_MAX_NS;
    }
}

static gpucore_status mpi_check_rc(mpi_call *r, int rc, const char *fn)
{
    if (rc == MPI_SUCCESS) return GPUCORE_OK;
    char es[MPI_MAX_ERROR_STRING] = "", what[MPI_MAX_ERROR_STRING + 64];
    int len = 0;
    MPI_Error_string(rc, es, &len);
    snprintf(what, sizeof what, "could not start (%s: %s)", fn, es);
    call_fail(r, what);
    return GPUCORE_ERR_COMM;
}

/* A started non-blocking call (rc, req): checked, then waited for. */
static gpucore_status mpi_started(mpi_call *r, int rc, MPI_Request *req, const char *fn)
{
    gpucore_status st = mpi_check_rc(r, rc, fn);
    return st ? st : mpi_wait_all(r, 1, req);
}


/* ---- allreduce, reduce-scatter and all-gather over non-blocking point-to-point ----
 * Open MPI's non-blocking collectives (libnbc) reach about half the speed of its
 * blocking ones on large buffers (a reduce-scatter of 0.5 MiB took 16 ms in the GPT
 * example under ZeRO), and a blocking call cannot honour the timeout. So these run
 * as rings of Isend/Irecv polled like every collective, straight on the tensors:
 *  - reduce-scatter: p-1 steps; at each a rank adds the partial chunk its left
 *    neighbour sends to its own input chunk and passes the sum on; after the last
 *    step it holds chunk `rank`, written straight into the output (in place too);
 *  - all-gather: p-1 steps, each forwarding the chunk received the step before;
 *  - allreduce: the two in turn on one buffer (from RING_MIN_BYTES: 2(n-1)/n of it
 *    moves per rank, as in the blocking algorithms); with 2 ranks and less than
 *    SWAP_MAX_BYTES one exchange of the whole buffer instead (one round trip, not
 *    two), both ranks combining rank 0's data into rank 1's: the same bits on both,
 *    except where the whole buffer is too big for an eager message but its halves
 *    are not (EAGER_BYTES: Open MPI's shared-memory transport sends up to 4 KiB, its
 *    header included, eagerly and larger messages by rendezvous, an extra round trip
 *    and a cross-process copy): there the ring's two eager steps win (a 4 KiB
 *    allreduce took 3.6 us as one exchange, 1.6 us as a ring; MPI 1.1).
 * Each chunk is reduced in one fixed rank order and then copied, so every rank holds
 * the same bits and a run is reproducible; with 2 ranks the sum is exactly MPI's
 * (a + b). f16/bf16 reductions keep MPI's collectives with the user ops above. */
#define RING_MIN_BYTES ((int64_t)4 << 10)
#define SWAP_MAX_BYTES ((int64_t)64 << 10)
#define EAGER_BYTES ((int64_t)4000)
#define RING_TAG 0x6C71

static int ring_dtype(int32_t dtype) { return dtype == GPUCORE_F32 || dtype == GPUCORE_F64 || dtype == GPUCORE_I32; }

#define RING_COMBINE(T, dst, src, own, n, op)                                                       \
    do {                                                                                            \
        T *d_ = (T *)(dst);                                                                         \
        const T *s_ = (const T *)(src), *o_ = (const T *)(own);                                     \
        if ((op) == GPUCORE_REDUCE_MAX)                                                             \
            for (int64_t i_ = 0; i_ < (n); i_++) d_[i_] = s_[i_] > o_[i_] ? s_[i_] : o_[i_];        \
        else if ((op) == GPUCORE_REDUCE_MIN)                                                        \
            for (int64_t i_ = 0; i_ < (n); i_++) d_[i_] = s_[i_] < o_[i_] ? s_[i_] : o_[i_];        \
        else                                                                                        \
            for (int64_t i_ = 0; i_ < (n); i_++) d_[i_] = s_[i_] + o_[i_];                          \
    } while (0)

/* dst = src op own, elementwise; dst may be src or own (sum and avg add: avg divides at the end). */
static void ring_combine(int32_t dtype, int32_t op, void *dst, const void *src, const void *own, int64_t n)
{
    if (dtype == GPUCORE_F32) RING_COMBINE(float, dst, src, own, n, op);
    else if (dtype == GPUCORE_F64) RING_COMBINE(double, dst, src, own, n, op);
    else RING_COMBINE(int32_t, dst, src, own, n, op);
}

/* Scratch for received partial chunks, kept by the communicator (its collectives run
 * one at a time, in issue order) so a large call does not fault in fresh pages. */
#define SCRATCH_KEEP_BYTES ((size_t)64 << 20)
static void *scratch(mpi_call *r, size_t bytes)
{
    mpi_comm *c = r->c;
    if (bytes > c->scratch_bytes) {
        free(c->scratch);
        c->scratch_bytes = 0;
        if (!(c->scratch = malloc(bytes ? bytes : 1))) {
            call_fail(r, "ran out of host memory for its receive buffer");
            return NULL;
        }
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}

static void scratch_trim(mpi_comm *c)
{
    if (c->scratch_bytes <= SCRATCH_KEEP_BYTES) return;
    free(c->scratch);
    c->scratch = NULL;
    c->scratch_bytes = 0;
}

#define MPI_CHUNK ((int64_t)1 << 30) /* elements per call: MPI counts are int */

/* One step: receive nr elements from rank `from` into dst while sending ns from src to rank
 * `to`; with cp_bytes, also copy cp_bytes from cp_src to cp_dst once both are posted (the
 * peer reads src meanwhile: Open MPI's shared memory copies a large message on the receiver). */
static gpucore_status ring_step_copying(mpi_call *r, MPI_Datatype dt, int from, void *dst, int64_t nr, int to,
                                        const void *src, int64_t ns, void *cp_dst, const void *cp_src,
                                        size_t cp_bytes)
{
    /* MPI counts are int: a chunk of 2^31 elements or more goes as several messages of at most MPI_CHUNK,
     * which MPI delivers in the order sent between the same two ranks on one tag */
    int es = 0;
    MPI_Type_size(dt, &es);
    gpucore_status st = GPUCORE_OK;
    for (int64_t off = 0; (off == 0 || off < nr || off < ns) && !st; off += MPI_CHUNK) {
        const int n_recv = (int)(nr - off <= 0 ? 0 : nr - off < MPI_CHUNK ? nr - off : MPI_CHUNK);
        const int n_send = (int)(ns - off <= 0 ? 0 : ns - off < MPI_CHUNK ? ns - off : MPI_CHUNK);
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        int rc = MPI_SUCCESS;
        mpi_lock();
        if (off == 0 || n_recv) rc = MPI_Irecv((char *)dst + off * es, n_recv, dt, from, RING_TAG, r->c->mc, &req[0]);
        if (rc == MPI_SUCCESS && (off == 0 || n_send))
            rc = MPI_Isend((const char *)src + off * es, n_send, dt, to, RING_TAG, r->c->mc, &req[1]);
        mpi_unlock();
        st = mpi_check_rc(r, rc, "MPI_Isend/MPI_Irecv");
        if (!st && off == 0 && cp_bytes) memcpy(cp_dst, cp_src, cp_bytes);
        if (!st) st = mpi_wait_all(r, 2, req);
    }
    return st;
}

static gpucore_status ring_step(mpi_call *r, MPI_Datatype dt, int from, void *dst, int64_t nr, int to,
                                const void *src, int64_t ns)
{
    return ring_step_copying(r, dt, from, dst, nr, to, src, ns, NULL, NULL, 0);
}

/* Elements [*a, *b) of chunk i (taken mod p) when n elements split into p chunks. */
static void chunk_span(int64_t n, int p, int i, int64_t *a, int64_t *b)
{
    int j = (i % p + p) % p;
    *a = (int64_t)j * n / p;
    *b = (int64_t)(j + 1) * n / p;
}

/* Reduce-scatter of `in` (chunk j = [chunk_at(j), chunk_at(j+1))) into out, which gets
 * this rank's chunk fully reduced (out may be that chunk of in). With acc_in_place
 * (the allreduce) partial sums accumulate in `in` itself and out is ignored. */
static gpucore_status ring_reduce_scatter(mpi_call *r, char *in, int64_t n, char *out, int acc_in_place)
{
    const gpucore_comm_call *k = r->k;
    const int p = r->c->size, rk = r->c->rank, right = (rk + 1) % p, left = (rk + p - 1) % p;
    const int64_t es = r->es, most = n / p + 1;
    char *tmp = scratch(r, (size_t)(most * es * (acc_in_place ? 1 : 2)));
    if (!tmp) return GPUCORE_ERR_COMM;
    MPI_Datatype dt = mpi_type(k->dtype);
    gpucore_status st = GPUCORE_OK;
    const char *sent = NULL; /* the partial sum passed on at the step before */
    for (int s = 0; s < p - 1 && !st; s++) {
        /* step s: send chunk rk-s-1 (own input at s 0, else the partial sum of step s-1), receive chunk rk-s-2 */
        const int sc = rk - s - 1, rcv = rk - s - 2;
        int64_t s0, s1, r0, r1;
        chunk_span(n, p, sc, &s0, &s1);
        chunk_span(n, p, rcv, &r0, &r1);
        const char *src = acc_in_place || s == 0 ? in + s0 * es : sent;
        char *got = tmp + (acc_in_place ? 0 : (s & 1) * most * es);
        st = ring_step(r, dt, left, got, r1 - r0, right, src, s1 - s0);
        if (st) break;
        char *dst = acc_in_place ? in + r0 * es : s == p - 2 ? out : got; /* the last step lands chunk rk in out */
        ring_combine(k->dtype, k->op, dst, got, in + r0 * es, r1 - r0);
        sent = got;
    }
    return st;
}

/* All-gather in place: buf holds n elements of es bytes in p chunks; this rank's chunk
 * `first` is complete, or, with first_src, is copied from there (sent from there at step 0,
 * and copied while that step is in flight); after p-1 steps every chunk is. */
static gpucore_status ring_all_gather(mpi_call *r, char *buf, int64_t n, int64_t es, MPI_Datatype dt, int first,
                                      const char *first_src)
{
    const int p = r->c->size, right = (r->c->rank + 1) % p, left = (r->c->rank + p - 1) % p;
    gpucore_status st = GPUCORE_OK;
    for (int s = 0; s < p - 1 && !st; s++) {
        const int sc = first - s, rcv = first - s - 1;
        int64_t s0, s1, r0, r1;
        chunk_span(n, p, sc, &s0, &s1);
        chunk_span(n, p, rcv, &r0, &r1);
        const int copy = s == 0 && first_src;
        st = ring_step_copying(r, dt, left, buf + r0 * es, r1 - r0, right, copy ? first_src : buf + s0 * es,
                               s1 - s0, buf + s0 * es, first_src, copy ? (size_t)((s1 - s0) * es) : 0);
    }
    return st;
}

/* Which allreduce: 2 = one exchange (2 ranks), 1 = ring, 0 = MPI_Iallreduce. */
static int allreduce_way(const mpi_call *r)
{
    const gpucore_comm_call *k = r->k;
    const int size = r->c->size;
    int64_t bytes = k->count * r->es;
    if (size < 2 || !ring_dtype(k->dtype) || k->count / size >= (int64_t)INT_MAX / 2) return 0;
    if (size == 2 && bytes < SWAP_MAX_BYTES) return bytes <= EAGER_BYTES || bytes > 2 * EAGER_BYTES ? 2 : 1;
    return bytes >= RING_MIN_BYTES;
}

static gpucore_status swap_allreduce(mpi_call *r)
{
    const gpucore_comm_call *k = r->k;
    const int64_t n = k->count;
    char *buf = k->recv, *tmp = scratch(r, (size_t)(n * r->es));
    if (!tmp) return GPUCORE_ERR_COMM;
    const int other = 1 - r->c->rank;
    gpucore_status st = ring_step(r, mpi_type(k->dtype), other, tmp, n, other, k->send, n);
    if (st) return st;
    /* rank 0's data op rank 1's, on both ranks */
    if (r->c->rank == 0) ring_combine(k->dtype, k->op, buf, k->send, tmp, n);
    else ring_combine(k->dtype, k->op, buf, tmp, k->send, n);
    return GPUCORE_OK;
}

static gpucore_status ring_allreduce(mpi_call *r)
{
    const gpucore_comm_call *k = r->k;
    const int64_t n = k->count;
    char *buf = k->recv;
    if (k->send != k->recv) memcpy(buf, k->send, (size_t)(n * r->es)); /* out of place: reduce in out */
    gpucore_status st = ring_reduce_scatter(r, buf, n, NULL, 1);
    /* the reduce-scatter leaves chunk `rank` complete here */
    return st ? st : ring_all_gather(r, buf, n, r->es, mpi_type(k->dtype), r->c->rank, NULL);
}

static gpucore_status run_call(mpi_call *r)
{
    mpi_comm *c = r->c;
    const gpucore_comm_call *k = r->k;
    const int64_t es = r->es;
    MPI_Datatype dt = mpi_type(k->dtype);
    MPI_Op op = mpi_op(c, k->dtype, k->op);
    MPI_Request req = MPI_REQUEST_NULL;
    char *send = (char *)k->send, *recv = k->recv;
    gpucore_status st = GPUCORE_OK;
    int rc;
    switch (k->kind) {
    case GPUCORE_COMM_ALLREDUCE:
        if (allreduce_way(r)) {
            st = allreduce_way(r) == 2 ? swap_allreduce(r) : ring_allreduce(r);
            break;
        }
        for (int64_t off = 0; off < k->count && !st; off += MPI_CHUNK) {
            int n = (int)(k->count - off < MPI_CHUNK ? k->count - off : MPI_CHUNK);
            const void *sp = send == recv ? MPI_IN_PLACE : send + off * es;
            mpi_lock();
            rc = MPI_Iallreduce(sp, recv + off * es, n, dt, op, c->mc, &req);
            mpi_unlock();
            st = mpi_started(r, rc, &req, "MPI_Iallreduce");
        }
        break;
    case GPUCORE_COMM_REDUCE_SCATTER: {
        if (c->size > 1 && ring_dtype(k->dtype)) { /* out may be this rank's slice of in (NCCL's in place) */
            st = ring_reduce_scatter(r, send, k->count * c->size, recv, 0);
            break;
        }
        if (k->count > INT_MAX) { /* one block per rank, counted in int by MPI */
            call_fail(r, "reduce_scatter: more than 2^31-1 elements per rank of a dtype the ring does not reduce; "
                         "split the tensor into smaller calls");
            return GPUCORE_ERR_COMM;
        }
        /* NCCL's in place (out is this rank's slice of in) is not MPI's: go through a temporary */
        int in_place = recv == send + (int64_t)c->rank * k->count * es;
        char *dst = in_place ? malloc((size_t)(k->count * es)) : recv;
        if (!dst) {
            call_fail(r, "ran out of host memory for its temporary buffer");
            return GPUCORE_ERR_COMM;
        }
        mpi_lock();
        rc = MPI_Ireduce_scatter_block(send, dst, (int)k->count, dt, op, c->mc, &req);
        mpi_unlock();
        st = mpi_started(r, rc, &req, "MPI_Ireduce_scatter_block");
        if (in_place) {
            if (!st) memcpy(recv, dst, (size_t)(k->count * es));
            free(dst);
        }
        break;
    }
    case GPUCORE_COMM_ALL_GATHER: {
        char *own = recv + (int64_t)c->rank * k->count * es;
        if (c->size > 1) { /* as bytes: any dtype; a ring step of 2^31 bytes or more goes in several messages */
            st = ring_all_gather(r, recv, k->count * es * c->size, 1, MPI_BYTE, c->rank, send != own ? send : NULL);
            break;
        }
        if (k->count > INT_MAX) { /* one block per rank, counted in int by MPI */
            call_fail(r, "all_gather: more than 2^31-1 elements per rank on one rank; split the tensor into smaller calls");
            return GPUCORE_ERR_COMM;
        }
        const void *sp = send == own ? MPI_IN_PLACE : send;
        mpi_lock();
        rc = MPI_Iallgather(sp, (int)k->count, dt, recv, (int)k->count, dt, c->mc, &req);
        mpi_unlock();
        st = mpi_started(r, rc, &req, "MPI_Iallgather");
        break;
    }
    case GPUCORE_COMM_BROADCAST:
        if (c->rank == k->root && send != recv) memcpy(recv, send, (size_t)(k->count * es));
        for (int64_t off = 0; off < k->count && !st; off += MPI_CHUNK) {
            int n = (int)(k->count - off < MPI_CHUNK ? k->count - off : MPI_CHUNK);
            mpi_lock();
            rc = MPI_Ibcast(recv + off * es, n, dt, k->root, c->mc, &req);
            mpi_unlock();
            st = mpi_started(r, rc, &req, "MPI_Ibcast");
        }
        break;
    case GPUCORE_COMM_BARRIER:
        mpi_lock();
        rc = MPI_Ibarrier(c->mc, &req);
        mpi_unlock();
        st = mpi_started(r, rc, &req, "MPI_Ibarrier");
        break;
    default:
        call_fail(r, "is not a known collective");
        return GPUCORE_ERR_INTERNAL;
    }
    if (!st && k->op == GPUCORE_REDUCE_AVG &&
        (k->kind == GPUCORE_COMM_ALLREDUCE || k->kind == GPUCORE_COMM_REDUCE_SCATTER))
        divide_by(recv, k->dtype, k->count, c->size);
    scratch_trim(c);
    return st;
}

gpucore_status mpi_comm_run(void *comm, const gpucore_comm_call *call, int64_t elem_size, char *what,
                            size_t what_len)
{
    if (what_len) what[0] = '\0';
    mpi_call r = {comm, call, elem_size, gpucore_clock_s(), what, what_len};
    return run_call(&r);
}

gpucore_status mpi_comm_create(int rank, int size, atomic_int *abort_requested, void **out)
{
    mpi_comm *c = calloc(1, sizeof *c);
    if (!c) return mpi_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create_mpi: out of host memory");
    c->rank = rank;
    c->size = size;
    c->abort_requested = abort_requested;
    mpi_lock();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mc); /* our traffic never mixes with the program's */
    if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN); /* errors are statuses, not aborts */
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min}, {bf16_sum, bf16_max, bf16_min}};
    for (int t = 0; t < 2 && rc == MPI_SUCCESS; t++)
        for (int o = 0; o < 3 && rc == MPI_SUCCESS; o++) rc = MPI_Op_create(fns[t][o], 1, &c->half_ops[t][o]);
    mpi_unlock();
    if (rc != MPI_SUCCESS) {
        free(c);
        return mpi_host->set_error(GPUCORE_ERR_COMM, "comm_create_mpi: MPI_Comm_dup/MPI_Op_create failed on rank %d",
                                   rank);
    }
    *out = c;
    return GPUCORE_OK;
}

void mpi_comm_destroy(void *comm, int release_mpi)
{
    mpi_comm *c = comm;
    if (!c) return;
    /* A failed communicator may still have an MPI request in flight: leave MPI alone
     * (the process is expected to end), only release our memory. */
    if (release_mpi) {
        mpi_lock();
        for (int t = 0; t < 2; t++)
            for (int o = 0; o < 3; o++) MPI_Op_free(&c->half_ops[t][o]);
        MPI_Comm_free(&c->mc);
        mpi_unlock();
    }
    free(c->scratch);
    free(c);
}
