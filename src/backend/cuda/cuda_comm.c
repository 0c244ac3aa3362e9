/*
 * cuda_comm.c — the CUDA backend's collectives over NCCL, and their watchdog.
 *
 * Communicators are created non-blocking (ncclConfig_t.blocking = 0) so that a
 * peer that never joins turns into a timeout instead of a hang; every NCCL call
 * that answers ncclInProgress is settled by polling ncclCommGetAsyncError against a
 * deadline. Each collective is enqueued on the communication stream followed by an
 * event; a watchdog thread per communicator polls the oldest pending event and
 * ncclCommGetAsyncError, and on an asynchronous error or a collective running past
 * its timeout it aborts the communicator (ncclCommAbort, which makes the stuck
 * kernels return) and keeps a message naming rank, op, sequence number, count and
 * dtype for comm_check. Without NCCL in the build every entry says so.
 *
 * Groups (gpucore_comm_group_start/end, src/comm/comm_group.c): "Nothing will be
 * started on the CUDA stream until ncclGroupEnd" (nccl.h:555) and "Operations on
 * the CUDA stream depending on the NCCL operations need to be called after
 * ncclGroupEnd" (nccl.h:565). A stream a grouped collective was queued on is held
 * for the rest of the group, and so is a stream that waits on an event recorded on
 * a held stream: event records, host callbacks and such waits there are held on this
 * thread and issued, in order, only after ncclGroupEnd and after every communicator
 * the group touched has settled (a non-blocking ncclGroupEnd may answer
 * ncclInProgress while it still queues in the background); kernels, copies, library
 * calls and host synchronizations on a held stream are refused with
 * GPUCORE_ERR_INVALID_ARGUMENT (cuda_comm_group_refuse), since they would run before
 * the collectives or return before them. A wait on a held stream for an event that
 * is not held is issued at once (it makes the collectives wait for work queued
 * elsewhere: that is how their inputs are ordered). The settling polls each
 * communicator with its lock taken per poll only (the watchdog can abort it
 * meanwhile) and gives up after the longest timeout of the group's collectives.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda_internal.h"
#include "backend/comm_names.h"
#include "gpucore_config.h"
#include "cuda_dynlib.h" /* NCCL through the loader's table (NCCL.nccl...), opened on first use */

#if GPUCORE_HAVE_NCCL
typedef struct pending_call {
    struct pending_call *next;
    gpucore_comm_call call;
    cudaEvent_t done;
    double started; /* when it became the oldest pending call (0: not yet) */
} pending_call;

typedef struct cuda_comm {
    ncclComm_t nc;
    int device, rank, size;
    pthread_t watchdog;
    int watchdog_running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pending_call *head, *tail;
    int stop;
    atomic_int failed;
    int aborted;
    double group_timeout_s; /* the longest timeout of its collectives in the open group */
    char msg[1024];
} cuda_comm;

static gpucore_status nccl_fail(const char *what, ncclResult_t r)
{
    return cuda_host->set_error(GPUCORE_ERR_COMM, "%s failed: %s (%s)%s", what, NCCL.ncclGetErrorString(r),
                                NCCL.ncclGetLastError(NULL) ? NCCL.ncclGetLastError(NULL) : "",
                                r == ncclInvalidUsage ? "; check that every rank has its own GPU" : "");
}

/* A non-blocking communicator's call returned ncclInProgress: poll until settled. */
static ncclResult_t nccl_settle(ncclComm_t nc, ncclResult_t r, double timeout_s)
{
    double deadline = gpucore_clock_s() + (timeout_s > 0 ? timeout_s : 1e9);
    while (r == ncclInProgress) {
        if (NCCL.ncclCommGetAsyncError(nc, &r) != ncclSuccess) return ncclInternalError;
        if (r != ncclInProgress) break;
        if (gpucore_clock_s() > deadline) return ncclRemoteError; /* peers never arrived */
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
    }
    return r;
}

static void comm_fail_locked(cuda_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void comm_fail_locked(cuda_comm *c, const char *fmt, ...)
{
    if (atomic_load(&c->failed)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    atomic_store(&c->failed, 1);
    cuda_host->log(GPUCORE_LOG_ERROR, "comm: %s", c->msg);
    if (!c->aborted) {
        c->aborted = 1;
        NCCL.ncclCommAbort(c->nc); /* abort, not destroy: the stuck kernels return */
    }
}

static void *watchdog_main(void *arg)
{
    cuda_comm *c = arg;
    cudaSetDevice(c->device);
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        pending_call *p = c->head;
        if (!p) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        double t = gpucore_clock_s();
        if (p->started == 0) p->started = t;
        cudaError_t q = cudaEventQuery(p->done);
        if (q == cudaSuccess) {
            c->head = p->next;
            if (!c->head) c->tail = NULL;
            cudaEventDestroy(p->done);
            free(p);
            continue;
        }
        cudaGetLastError();
        ncclResult_t async = ncclSuccess;
        if (!atomic_load(&c->failed)) {
            NCCL.ncclCommGetAsyncError(c->nc, &async);
            const gpucore_comm_call *k = &p->call;
            if (async != ncclSuccess && async != ncclInProgress)
                comm_fail_locked(c, "rank %d of %d: %s #%llu (count %lld %s) failed in NCCL: %s; the communicator "
                                 "was aborted: end the process and relaunch from a checkpoint", c->rank, c->size,
                                 comm_kind_name(k->kind), (unsigned long long)k->seq, (long long)k->count,
                                 comm_dtype_name(k->dtype), NCCL.ncclGetErrorString(async));
            else if (k->timeout_s > 0 && t - p->started > k->timeout_s)
                comm_fail_locked(c, "rank %d of %d: %s #%llu (count %lld %s) did not complete within the timeout of "
                                 "%.1f s (a peer may have died or stalled); the NCCL communicator was aborted: end "
                                 "the process and relaunch from a checkpoint", c->rank, c->size, comm_kind_name(k->kind),
                                 (unsigned long long)k->seq, (long long)k->count, comm_dtype_name(k->dtype), k->timeout_s);
        }
        pthread_mutex_unlock(&c->mu);
        struct timespec nap = {0, 2000000}; /* 2 ms */
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static gpucore_status comm_start(cuda_comm *c)
{
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->watchdog, NULL, watchdog_main, c) != 0)
        return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create: could not start the watchdog thread");
    c->watchdog_running = 1;
    return GPUCORE_OK;
}

static ncclDataType_t nccl_type(int dt)
{
    switch (dt) {
    case GPUCORE_F64: return ncclFloat64;
    case GPUCORE_F16: return ncclFloat16;
    case GPUCORE_BF16: return ncclBfloat16;
    case GPUCORE_I32: return ncclInt32;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(int op)
{
    switch (op) {
    case GPUCORE_REDUCE_AVG: return ncclAvg;
    case GPUCORE_REDUCE_MAX: return ncclMax;
    case GPUCORE_REDUCE_MIN: return ncclMin;
    default: return ncclSum;
    }
}

gpucore_status cuda_comm_unique_id(void *id)
{
    gpucore_status ld = cuda_nccl_load("comm_unique_id");
    if (ld) return ld;
    ncclUniqueId uid;
    ncclResult_t r = NCCL.ncclGetUniqueId(&uid);
    if (r != ncclSuccess) return nccl_fail("ncclGetUniqueId", r);
    memcpy(id, &uid, sizeof uid < GPUCORE_COMM_ID_BYTES ? sizeof uid : GPUCORE_COMM_ID_BYTES);
    return GPUCORE_OK;
}

gpucore_status cuda_comm_init(void *bctx, const void *id, int rank, int size, double timeout_s, void **bcomm)
{
    gpucore_status ld = cuda_nccl_load("comm_create");
    if (ld) return ld;
    if (!id)
        return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_create: NCCL needs a unique id");
    cuda_context *ctx = bctx;
    CUDA_TRY(cudaSetDevice(ctx->device), "cudaSetDevice");
    cuda_comm *c = calloc(1, sizeof *c);
    if (!c) return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create: out of host memory");
    c->device = ctx->device;
    c->rank = rank;
    c->size = size;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = NCCL.ncclCommInitRankConfig(&c->nc, size, uid, rank, &cfg);
    if (r == ncclInProgress || r == ncclSuccess) r = nccl_settle(c->nc, r == ncclSuccess ? ncclInProgress : r, timeout_s);
    if (r != ncclSuccess) {
        if (c->nc) NCCL.ncclCommAbort(c->nc);
        free(c);
        if (r == ncclRemoteError)
            return cuda_host->set_error(GPUCORE_ERR_TIMEOUT, "comm_create: rank %d of %d: not every rank joined within "
                                        "%.1f s (check that all ranks were started with the same unique id)", rank,
                                        size, timeout_s);
        return nccl_fail("ncclCommInitRankConfig", r);
    }
    gpucore_status st = comm_start(c);
    if (st) { NCCL.ncclCommAbort(c->nc); free(c); return st; }
    *bcomm = c;
    return GPUCORE_OK;
}

gpucore_status cuda_comm_init_local(void *const *bctxs, int n, double timeout_s, void **bcomms)
{
    gpucore_status ld = cuda_nccl_load("comm_create_local");
    if (ld) return ld;
    ncclUniqueId uid;
    ncclResult_t r = NCCL.ncclGetUniqueId(&uid);
    if (r != ncclSuccess) return nccl_fail("ncclGetUniqueId", r);
    cuda_comm **cs = calloc((size_t)n, sizeof *cs);
    if (!cs) return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create_local: out of host memory");
    gpucore_status st = GPUCORE_OK;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    NCCL.ncclGroupStart();
    for (int i = 0; i < n && !st; i++) {
        cs[i] = calloc(1, sizeof **cs);
        if (!cs[i]) { st = GPUCORE_ERR_OUT_OF_MEMORY; break; }
        cs[i]->device = ((cuda_context *)bctxs[i])->device;
        cs[i]->rank = i;
        cs[i]->size = n;
        cudaSetDevice(cs[i]->device);
        r = NCCL.ncclCommInitRankConfig(&cs[i]->nc, n, uid, i, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) st = nccl_fail("ncclCommInitRankConfig", r);
    }
    r = NCCL.ncclGroupEnd();
    if (!st && r != ncclSuccess && r != ncclInProgress) st = nccl_fail("ncclGroupEnd (communicator init)", r);
    for (int i = 0; i < n && !st; i++) {
        r = nccl_settle(cs[i]->nc, ncclInProgress, timeout_s);
        if (r != ncclSuccess) st = nccl_fail("ncclCommInitRankConfig (settling)", r);
    }
    for (int i = 0; i < n && !st; i++) st = comm_start(cs[i]);
    if (st) {
        if (st == GPUCORE_ERR_OUT_OF_MEMORY) cuda_host->set_error(st, "comm_create_local: out of host memory");
        for (int i = 0; i < n; i++)
            if (cs[i]) {
                if (cs[i]->watchdog_running) {
                    pthread_mutex_lock(&cs[i]->mu);
                    cs[i]->stop = 1;
                    pthread_cond_signal(&cs[i]->cv);
                    pthread_mutex_unlock(&cs[i]->mu);
                    pthread_join(cs[i]->watchdog, NULL);
                }
                if (cs[i]->nc) NCCL.ncclCommAbort(cs[i]->nc);
                free(cs[i]);
            }
        free(cs);
        return st;
    }
    for (int i = 0; i < n; i++) bcomms[i] = cs[i];
    free(cs);
    return GPUCORE_OK;
}

/* ---- the group held on this thread: communicators touched, their streams, and stream work held back ---- */

#define GROUP_MAX 64
#define GROUP_HELD_MAX 1024
enum { HELD_EVENT_RECORD, HELD_HOST_FN, HELD_WAIT_EVENT, HELD_DONE };
typedef struct held_item {
    int kind;
    void *stream, *event;
    gpucore_host_fn fn;
    void *arg;
    cuda_comm *comm;
    pending_call *call;
} held_item;
static _Thread_local int group_depth;
static _Thread_local cuda_comm *group_comms[GROUP_MAX];
static _Thread_local void *group_streams[GROUP_MAX];
static _Thread_local int group_count, group_nstreams, group_overflow;
static _Thread_local held_item group_held[GROUP_HELD_MAX];
static _Thread_local int group_nheld;

static void group_touch(cuda_comm *c, void *stream)
{
    int i;
    for (i = 0; i < group_count && group_comms[i] != c; i++) {}
    if (i == group_count) {
        if (group_count < GROUP_MAX) group_comms[group_count++] = c;
        else group_overflow = 1;
    }
    for (i = 0; i < group_nstreams && group_streams[i] != stream; i++) {}
    if (i == group_nstreams) {
        if (group_nstreams < GROUP_MAX) group_streams[group_nstreams++] = stream;
        else group_overflow = 1;
    }
}

static int group_holds(held_item it)
{
    if (group_nheld == GROUP_HELD_MAX) { group_overflow = 1; return 0; }
    group_held[group_nheld++] = it;
    return 1;
}

static int stream_held(void *stream)
{
    for (int i = 0; i < group_nstreams; i++)
        if (group_streams[i] == stream) return 1;
    return 0;
}

int cuda_comm_group_event_held(void *event)
{
    for (int i = 0; i < group_nheld; i++)
        if (group_held[i].kind == HELD_EVENT_RECORD && group_held[i].event == event) return 1;
    return 0;
}

int cuda_comm_group_defer(int kind, void *stream, void *event, gpucore_host_fn fn, void *arg)
{
    if (group_depth == 0) return 0;
    /* a wait on an event whose record is held must follow it, and so must everything after it on that stream */
    int hit = kind == CUDA_DEFER_WAIT_EVENT ? cuda_comm_group_event_held(event) : stream_held(stream);
    if (!hit) return 0;
    if (kind == CUDA_DEFER_WAIT_EVENT && !stream_held(stream)) {
        if (group_nstreams < GROUP_MAX) group_streams[group_nstreams++] = stream;
        else group_overflow = 1;
    }
    held_item it = {kind == CUDA_DEFER_EVENT_RECORD ? HELD_EVENT_RECORD : kind == CUDA_DEFER_HOST_FN ? HELD_HOST_FN
                    : HELD_WAIT_EVENT, stream, event, fn, arg, NULL, NULL};
    return group_holds(it);
}

gpucore_status cuda_comm_group_refuse(void *stream, const char *what)
{
    if (group_depth == 0 || !stream_held(stream)) return GPUCORE_OK;
    return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                "%s on a stream that follows a collective of the comm group open on this thread: NCCL "
                                "starts a group's collectives only at ncclGroupEnd (nccl.h:555, 565), so this would "
                                "run before them (or return before they start); queue it after "
                                "gpucore_comm_group_end", what);
}

static void pending_append(cuda_comm *c, pending_call *p)
{
    pthread_mutex_lock(&c->mu);
    if (c->tail) c->tail->next = p;
    else c->head = p;
    c->tail = p;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

gpucore_status cuda_comm_enqueue(void *bcomm, const gpucore_comm_call *k, void *stream)
{
    cuda_comm *c = bcomm;
    if (atomic_load(&c->failed))
        return cuda_host->set_error(GPUCORE_ERR_COMM, "%s", c->msg);
    CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice");
    pending_call *p = calloc(1, sizeof *p);
    if (!p) return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm: out of host memory");
    p->call = *k;
    cudaError_t ce = cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming);
    if (ce != cudaSuccess) { free(p); return cuda_status(ce, "cudaEventCreateWithFlags"); }
    cudaStream_t s = (cudaStream_t)stream;
    ncclDataType_t dt = nccl_type(k->dtype);
    size_t n = (size_t)k->count;
    ncclResult_t r;
    /* c->mu serialises this thread's NCCL calls on c->nc with the watchdog's ncclCommAbort:
     * an abort frees the communicator, so it must not run while a call is inside NCCL */
    pthread_mutex_lock(&c->mu);
    if (c->aborted) {
        pthread_mutex_unlock(&c->mu);
        cudaEventDestroy(p->done);
        free(p);
        return cuda_host->set_error(GPUCORE_ERR_COMM, "%s", c->msg);
    }
    switch (k->kind) {
    case GPUCORE_COMM_ALLREDUCE: r = NCCL.ncclAllReduce(k->send, k->recv, n, dt, nccl_op(k->op), c->nc, s); break;
    case GPUCORE_COMM_REDUCE_SCATTER: r = NCCL.ncclReduceScatter(k->send, k->recv, n, dt, nccl_op(k->op), c->nc, s); break;
    case GPUCORE_COMM_ALL_GATHER: r = NCCL.ncclAllGather(k->send, k->recv, n, dt, c->nc, s); break;
    case GPUCORE_COMM_BROADCAST:
        r = NCCL.ncclBroadcast(c->rank == k->root ? k->send : k->recv, k->recv, n, dt, k->root, c->nc, s);
        break;
    default: /* barrier: a 1-element allreduce on the scratch buffer */
        r = NCCL.ncclAllReduce(k->recv, k->recv, 1, ncclInt32, ncclSum, c->nc, s);
        break;
    }
    if (group_depth > 0) {
        if (r == ncclInProgress) r = ncclSuccess; /* settled at the group's end */
        if (r == ncclSuccess) group_touch(c, s);
        if (k->timeout_s > c->group_timeout_s) c->group_timeout_s = k->timeout_s;
    } else if (r == ncclInProgress) {
        r = nccl_settle(c->nc, r, k->timeout_s);
    }
    if (r != ncclSuccess) {
        cudaEventDestroy(p->done);
        free(p);
        comm_fail_locked(c, "rank %d of %d: %s #%llu (count %lld %s) could not be queued: %s", c->rank, c->size,
                         comm_kind_name(k->kind), (unsigned long long)k->seq, (long long)k->count, comm_dtype_name(k->dtype),
                         NCCL.ncclGetErrorString(r));
        pthread_mutex_unlock(&c->mu);
        return cuda_host->set_error(GPUCORE_ERR_COMM, "%s", c->msg);
    }
    pthread_mutex_unlock(&c->mu);
    if (group_depth > 0) {
        held_item it = {HELD_DONE, s, NULL, NULL, NULL, c, p};
        if (group_holds(it)) return GPUCORE_OK; /* recorded after ncclGroupEnd */
        cudaEventDestroy(p->done);
        free(p);
        return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_group: more than %d stream operations inside "
                                    "one group", GROUP_HELD_MAX);
    }
    cudaEventRecord(p->done, s);
    pending_append(c, p);
    return GPUCORE_OK;
}

gpucore_status cuda_comm_check(void *bcomm)
{
    cuda_comm *c = bcomm;
    if (!atomic_load(&c->failed)) return GPUCORE_OK;
    pthread_mutex_lock(&c->mu);
    gpucore_status st = cuda_host->set_error(GPUCORE_ERR_COMM, "%s", c->msg);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void cuda_comm_abort(void *bcomm, const char *reason)
{
    cuda_comm *c = bcomm;
    pthread_mutex_lock(&c->mu);
    comm_fail_locked(c, "rank %d of %d: communicator aborted: %s", c->rank, c->size, reason ? reason : "by request");
    pthread_mutex_unlock(&c->mu);
}

void cuda_comm_destroy(void *bcomm)
{
    cuda_comm *c = bcomm;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->watchdog_running) pthread_join(c->watchdog, NULL);
    while (c->head) {
        pending_call *p = c->head;
        c->head = p->next;
        cudaEventDestroy(p->done);
        free(p);
    }
    if (!c->aborted) {
        ncclResult_t r = NCCL.ncclCommFinalize(c->nc);
        if (r == ncclInProgress) r = nccl_settle(c->nc, r, 10.0);
        if (r == ncclSuccess) NCCL.ncclCommDestroy(c->nc);
        else NCCL.ncclCommAbort(c->nc);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* Poll one communicator of the group until its non-blocking ncclGroupEnd settled, taking its lock for each
 * poll only (its watchdog may abort it in between), for at most timeout_s (0: the communicator's collectives
 * had none; 600 s). */
static gpucore_status group_settle(cuda_comm *c, double timeout_s)
{
    double limit = timeout_s > 0 ? timeout_s : 600.0, deadline = gpucore_clock_s() + limit;
    for (;;) {
        char why[sizeof c->msg] = "";
        pthread_mutex_lock(&c->mu);
        ncclResult_t r = ncclInternalError;
        int aborted = c->aborted;
        if (aborted) memcpy(why, c->msg, sizeof why);
        else if (NCCL.ncclCommGetAsyncError(c->nc, &r) != ncclSuccess) r = ncclInternalError;
        pthread_mutex_unlock(&c->mu);
        if (aborted)
            return cuda_host->set_error(GPUCORE_ERR_COMM, "comm_group_end: rank %d of %d was aborted while the group "
                                        "settled: %s", c->rank, c->size, why);
        if (r == ncclSuccess) return GPUCORE_OK;
        if (r != ncclInProgress) return nccl_fail("ncclGroupEnd (settling a communicator of the group)", r);
        if (gpucore_clock_s() > deadline)
            return cuda_host->set_error(GPUCORE_ERR_COMM, "comm_group_end: rank %d of %d did not settle within the "
                                        "collectives' timeout of %.1f s (a peer may have died or never issued its part "
                                        "of the group)", c->rank, c->size, limit);
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
    }
}

/* The outermost group end: NCCL starts the fused operation; every communicator touched settles; then the
 * held stream work is issued in the order it was asked for. */
static gpucore_status group_finish(void)
{
    /* every communicator of the group is locked against its watchdog's abort while NCCL starts it */
    for (int i = 0; i < group_count; i++) pthread_mutex_lock(&group_comms[i]->mu);
    int aborted = 0;
    for (int i = 0; i < group_count; i++) aborted |= group_comms[i]->aborted;
    ncclResult_t r = NCCL.ncclGroupEnd();
    for (int i = 0; i < group_count; i++) pthread_mutex_unlock(&group_comms[i]->mu);
    gpucore_status st = GPUCORE_OK;
    if (aborted) st = cuda_host->set_error(GPUCORE_ERR_COMM, "comm_group_end: a communicator of the group was aborted");
    else if (r != ncclSuccess && r != ncclInProgress) st = nccl_fail("ncclGroupEnd", r);
    for (int i = 0; i < group_count && !st; i++) st = group_settle(group_comms[i], group_comms[i]->group_timeout_s);
    for (int i = 0; i < group_count; i++) group_comms[i]->group_timeout_s = 0;
    if (!st && group_overflow)
        st = cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_group: more than %d communicators, streams or "
                                  "stream operations inside one group", GROUP_MAX);
    if (st)
        for (int i = 0; i < group_count; i++) {
            cuda_comm *c = group_comms[i];
            pthread_mutex_lock(&c->mu);
            comm_fail_locked(c, "rank %d of %d: the comm group it took part in failed (ncclGroupEnd or settling; see the "
                             "error of gpucore_comm_group_end)", c->rank, c->size);
            pthread_mutex_unlock(&c->mu);
        }
    for (int i = 0; i < group_nheld; i++) {
        held_item *it = &group_held[i];
        cudaError_t ce = cudaSuccess;
        if (it->kind == HELD_DONE) {
            if (!st) cudaEventRecord(it->call->done, (cudaStream_t)it->stream);
            if (!st) pending_append(it->comm, it->call);
            else { cudaEventDestroy(it->call->done); free(it->call); }
            continue;
        }
        if (st && it->kind != HELD_HOST_FN) continue;
        /* host callbacks run even after a failure: callers count on them (e.g. completion counters) */
        if (it->kind == HELD_EVENT_RECORD) ce = cudaEventRecord((cudaEvent_t)it->event, (cudaStream_t)it->stream);
        else if (it->kind == HELD_WAIT_EVENT) ce = cudaStreamWaitEvent((cudaStream_t)it->stream, (cudaEvent_t)it->event, 0);
        else ce = cudaLaunchHostFunc((cudaStream_t)it->stream, it->fn, it->arg);
        if (ce != cudaSuccess && !st) st = cuda_status(ce, "issuing stream work held during a comm group");
    }
    group_count = group_nstreams = group_nheld = group_overflow = 0;
    return st;
}

gpucore_status cuda_comm_group(int begin)
{
    if (begin) {
        gpucore_status ld = cuda_nccl_load("comm_group_start");
        if (ld) return ld;
        ncclResult_t r = NCCL.ncclGroupStart();
        if (r != ncclSuccess) return nccl_fail("ncclGroupStart", r);
        group_depth++;
        return GPUCORE_OK;
    }
    if (group_depth == 0)
        return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_group_end without comm_group_start");
    if (--group_depth > 0) {
        ncclResult_t r = NCCL.ncclGroupEnd(); /* nested: NCCL starts nothing before the outermost end */
        if (r != ncclSuccess && r != ncclInProgress) return nccl_fail("ncclGroupEnd", r);
        return GPUCORE_OK;
    }
    return group_finish();
}
#else
int cuda_comm_group_defer(int kind, void *stream, void *event, gpucore_host_fn fn, void *arg)
{
    (void)kind; (void)stream; (void)event; (void)fn; (void)arg;
    return 0;
}
int cuda_comm_group_event_held(void *event) { (void)event; return 0; }
gpucore_status cuda_comm_group_refuse(void *stream, const char *what)
{
    (void)stream; (void)what;
    return GPUCORE_OK;
}
#endif /* GPUCORE_HAVE_NCCL */
