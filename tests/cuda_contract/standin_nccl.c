/*
 * standin_nccl.c — a strict stand-in for the NCCL calls of the CUDA backend
 * (compiled against the real nccl.h, 2.28), with the ranks of a communicator
 * as threads of one process (every rank's collective runs on its own stream's
 * worker thread and meets the others at a rendezvous). Ranks in other
 * processes (mpirun) are not modelled: ncclCommInitRankConfig says so.
 *
 * Checked: the config struct (NCCL_CONFIG_INITIALIZER), rank/size, one GPU per
 * rank; non-blocking semantics (ncclInProgress until every rank joined; a
 * communicator is used only once it answered ncclSuccess); group nesting and
 * "Nothing will be started on the CUDA stream until ncclGroupEnd" (nccl.h:555):
 * held collectives are queued only at the outermost ncclGroupEnd, and a kernel
 * launch, copy, event record, host function or stream synchronize on such a
 * stream meanwhile is a violation (nccl.h:565: work depending on the group's
 * operations must be queued after ncclGroupEnd; checked by the runtime stand-in
 * through standin_nccl_group_holds_stream); datatype and
 * op; matching calls across ranks; buffer sizes; stream on the comm's device;
 * use after destroy/abort; ncclCommAbort while another thread is inside a call
 * on the same communicator.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "numeric.h"
#include "standin.h"

/* The vendor entry points are exported, as the real libraries export them (tests call them directly). */
#pragma GCC visibility push(default)

#define N "nccl.h"
#define ID_MAGIC 0x4e43434c53544e44ull

typedef struct clique {
    struct clique *next;
    uint64_t id;
    int size, joined, refs, aborted;
    struct ncclComm **ranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the collective in progress */
    uint64_t gen;
    int arrived, computed, left;
    int kind, dtype, op, root;
    size_t count;
    const void **send;
} clique;

struct ncclComm {
    unsigned magic;
    clique *cl;
    int rank, device, blocking;
    uint64_t seq;              /* collectives queued so far */
    int finalizing;
    int settle_pending;        /* a non-blocking ncclGroupEnd answered ncclInProgress: not yet settled */
    void *settle_stream;
    atomic_int busy;           /* threads inside a call on this communicator */
    atomic_int refs;           /* the handle + queued collectives */
};

static standin_set live_comms = STANDIN_SET_INIT;
static pthread_mutex_t cliques_lock = PTHREAD_MUTEX_INITIALIZER;
static clique *cliques;
static atomic_ullong next_id = 1;
static _Thread_local char last_error[512];

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALL_GATHER, K_BROADCAST };
static const char *const kind_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};

typedef struct held_op {
    struct ncclComm *comm;
    int kind, dtype, op, root;
    const void *send;
    void *recv;
    size_t count;
    struct CUstream_st *stream;
} held_op;

#define MAX_HELD 256
static _Thread_local int group_depth;
static _Thread_local held_op held[MAX_HELD];
static _Thread_local int nheld;

static ncclResult_t fail(ncclResult_t r, const char *msg)
{
    snprintf(last_error, sizeof last_error, "%s", msg);
    return r;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInProgress: return "operation in progress";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "stand-in NCCL error";
    }
}

const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return last_error; }
ncclResult_t ncclGetVersion(int *v) { if (v) *v = NCCL_VERSION_CODE; return ncclSuccess; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    standin_api_enter("ncclGetUniqueId");
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    uint64_t v[2] = {ID_MAGIC, atomic_fetch_add(&next_id, 1)};
    memcpy(id->internal, v, sizeof v);
    return ncclSuccess;
}

static int live(const char *api, ncclComm_t c)
{
    if (standin_set_has(&live_comms, c)) return 1;
    standin_violation(api, N ":192", "communicator %p is not live (destroyed, aborted, or never created)", (void *)c);
    return 0;
}

static void clique_unref(clique *cl)
{
    pthread_mutex_lock(&cliques_lock);
    int last = --cl->refs == 0;
    if (last) {
        clique **pp = &cliques;
        while (*pp != cl) pp = &(*pp)->next;
        *pp = cl->next;
    }
    pthread_mutex_unlock(&cliques_lock);
    if (!last) return;
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl->ranks);
    free(cl->send);
    free(cl);
}

static void comm_unref(struct ncclComm *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1) return;
    clique *cl = c->cl;
    pthread_mutex_lock(&cl->mu);
    cl->ranks[c->rank] = NULL;
    pthread_mutex_unlock(&cl->mu);
    free(c);
    clique_unref(cl);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg)
{
    const char *api = "ncclCommInitRankConfig";
    standin_api_enter(api);
    if (!out) return ncclInvalidArgument;
    *out = NULL;
    uint64_t v[2];
    memcpy(v, id.internal, sizeof v);
    if (v[0] != ID_MAGIC) {
        standin_violation(api, N ":157", "the unique id was not produced by ncclGetUniqueId");
        return fail(ncclInvalidArgument, "bad unique id");
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        standin_violation(api, N ":162", "rank %d of %d is out of range", rank, nranks);
        return fail(ncclInvalidArgument, "rank out of range");
    }
    if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t))) {
        standin_violation(api, N ":101", "config not initialised with NCCL_CONFIG_INITIALIZER");
        return fail(ncclInvalidArgument, "bad config");
    }
    int blocking = !cfg || cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0;
    int device = standin_current_device();
    pthread_mutex_lock(&cliques_lock);
    clique *cl = cliques;
    while (cl && cl->id != v[1]) cl = cl->next;
    if (!cl) {
        cl = calloc(1, sizeof *cl);
        cl->id = v[1];
        cl->size = nranks;
        cl->ranks = calloc((size_t)nranks, sizeof *cl->ranks);
        cl->send = calloc((size_t)nranks, sizeof *cl->send);
        pthread_mutex_init(&cl->mu, NULL);
        pthread_cond_init(&cl->cv, NULL);
        cl->next = cliques;
        cliques = cl;
    }
    cl->refs++;
    pthread_mutex_unlock(&cliques_lock);
    pthread_mutex_lock(&cl->mu);
    const char *problem = NULL;
    if (cl->size != nranks) problem = "ranks disagree on the communicator size";
    else if (cl->ranks[rank]) problem = "two ranks joined with the same rank number";
    else
        for (int r = 0; r < cl->size; r++)
            if (cl->ranks[r] && cl->ranks[r]->device == device) problem = "two ranks of one process use the same GPU";
    if (problem) {
        pthread_mutex_unlock(&cl->mu);
        standin_violation(api, N ":162", "rank %d of %d on device %d: %s", rank, nranks, device, problem);
        clique_unref(cl);
        return fail(ncclInvalidUsage, problem);
    }
    struct ncclComm *c = calloc(1, sizeof *c);
    c->magic = 0x434f4d4d;
    c->cl = cl;
    c->rank = rank;
    c->device = device;
    c->blocking = blocking;
    atomic_init(&c->refs, 1);
    cl->ranks[rank] = c;
    cl->joined++;
    pthread_cond_broadcast(&cl->cv);
    /* a blocking init outside a group waits for every rank, as NCCL does */
    if (blocking && group_depth == 0)
        while (cl->joined < cl->size) pthread_cond_wait(&cl->cv, &cl->mu);
    pthread_mutex_unlock(&cl->mu);
    standin_set_add(&live_comms, c);
    *out = c;
    return blocking ? ncclSuccess : ncclInProgress;
}

static int comm_ready(struct ncclComm *c)
{
    pthread_mutex_lock(&c->cl->mu);
    int ready = c->cl->joined == c->cl->size;
    pthread_mutex_unlock(&c->cl->mu);
    return ready;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    standin_api_enter("ncclCommGetAsyncError");
    if (!r || !live("ncclCommGetAsyncError", c)) return ncclInvalidArgument;
    atomic_fetch_add(&c->busy, 1);
    if (c->cl->aborted) *r = ncclRemoteError;
    else if (!comm_ready(c)) *r = ncclInProgress;
    else if (c->settle_pending == 2) *r = ncclInProgress; /* stalled (STANDIN_NCCL_GROUP_STALL): until aborted */
    else if (c->settle_pending) { c->settle_pending = 0; *r = ncclInProgress; } /* settles on the next query */
    else *r = ncclSuccess;
    atomic_fetch_sub(&c->busy, 1);
    return ncclSuccess;
}

/* ---- collectives ---- */

static int dtype_size(int t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

static double get(int t, const void *p, size_t i)
{
    switch (t) {
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    case ncclInt64: return (double)((const int64_t *)p)[i];
    case ncclUint64: return (double)((const uint64_t *)p)[i];
    case ncclFloat16: return gpucore_f16_to_f32(((const uint16_t *)p)[i]);
    case ncclBfloat16: return gpucore_bf16_to_f32(((const uint16_t *)p)[i]);
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void put(int t, void *p, size_t i, double v)
{
    switch (t) {
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)p)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)p)[i] = gpucore_f32_to_f16((float)v); break;
    case ncclBfloat16: ((uint16_t *)p)[i] = gpucore_f32_to_bf16((float)v); break;
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

static double reduce(int op, double a, double b)
{
    switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b; /* sum, avg (divided at the end) */
    }
}

/* Wait on the clique's condition; gives up (returns 0) when the clique is aborted. */
static int wait_until(clique *cl, int (*done)(clique *, void *), void *arg)
{
    while (!done(cl, arg)) {
        if (cl->aborted) return 0;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 20000000;
        if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&cl->cv, &cl->mu, &t);
    }
    return 1;
}
static int is_gen(clique *cl, void *g) { return cl->gen == *(uint64_t *)g; }
static int all_arrived(clique *cl, void *a) { (void)a; return cl->arrived == cl->size; }
static int all_computed(clique *cl, void *a) { (void)a; return cl->computed == cl->size; }

typedef struct coll_task { held_op op; uint64_t seq; } coll_task;

/* One rank's part of one collective, on its stream's worker thread. */
static int coll_run(void *arg)
{
    coll_task *t = arg;
    held_op *o = &t->op;
    struct ncclComm *c = o->comm;
    clique *cl = c->cl;
    const int n = cl->size, es = dtype_size(o->dtype);
    int ok = 1;
    pthread_mutex_lock(&cl->mu);
    ok = wait_until(cl, is_gen, &t->seq);
    if (ok) {
        if (cl->arrived == 0) {
            cl->kind = o->kind; cl->dtype = o->dtype; cl->op = o->op; cl->root = o->root; cl->count = o->count;
        } else if (cl->kind != o->kind || cl->dtype != o->dtype || cl->count != o->count ||
                   (o->kind != K_ALL_GATHER && o->kind != K_BROADCAST && cl->op != o->op) || cl->root != o->root) {
            standin_violation(kind_names[o->kind], N ":414", "rank %d's collective #%llu does not match the other ranks' "
                              "(%s count %zu dtype %d)", c->rank, (unsigned long long)t->seq, kind_names[cl->kind],
                              cl->count, cl->dtype);
        }
        cl->send[c->rank] = o->send;
        cl->arrived++;
        pthread_cond_broadcast(&cl->cv);
        ok = wait_until(cl, all_arrived, NULL);
    }
    pthread_mutex_unlock(&cl->mu);
    /* compute this rank's output from every rank's input, into a private buffer */
    size_t out_n = o->kind == K_ALL_GATHER ? o->count * (size_t)n : o->count;
    unsigned char *tmp = ok ? malloc(out_n * (size_t)es + 1) : NULL;
    if (tmp) {
        if (o->kind == K_BROADCAST) {
            memcpy(tmp, cl->send[o->root], out_n * (size_t)es);
        } else if (o->kind == K_ALL_GATHER) {
            for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * o->count * es, cl->send[r], o->count * (size_t)es);
        } else {
            size_t base = o->kind == K_REDUCE_SCATTER ? (size_t)c->rank * o->count : 0;
            for (size_t i = 0; i < o->count; i++) {
                double acc = get(o->dtype, cl->send[0], base + i);
                for (int r = 1; r < n; r++) acc = reduce(o->op, acc, get(o->dtype, cl->send[r], base + i));
                if (o->op == ncclAvg) acc /= n;
                put(o->dtype, tmp, i, acc);
            }
        }
    }
    pthread_mutex_lock(&cl->mu);
    cl->computed++;
    pthread_cond_broadcast(&cl->cv);
    if (ok) ok = wait_until(cl, all_computed, NULL); /* every rank has read every input: outputs may be written */
    pthread_mutex_unlock(&cl->mu);
    if (ok && tmp) memcpy(o->recv, tmp, out_n * (size_t)es);
    free(tmp);
    pthread_mutex_lock(&cl->mu);
    if (++cl->left == n) {
        cl->arrived = cl->computed = cl->left = 0;
        cl->gen++;
    }
    pthread_cond_broadcast(&cl->cv);
    pthread_mutex_unlock(&cl->mu);
    standin_count("nccl_collective_executed");
    comm_unref(c);
    return ok ? 0 : 1;
}

static void queue_op(const held_op *o)
{
    coll_task t = {*o, o->comm->seq++};
    atomic_fetch_add(&o->comm->refs, 1);
    if (standin_stream_enqueue(o->stream, coll_run, &t, sizeof t)) comm_unref(o->comm);
}

static ncclResult_t collective(int kind, const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               int root, ncclComm_t c, cudaStream_t stream)
{
    const char *api = kind_names[kind];
    standin_api_enter(api);
    if (!live(api, c)) return fail(ncclInvalidArgument, "communicator is not live");
    atomic_fetch_add(&c->refs, 1); /* an abort from another thread during the call is reported, not a crash */
    atomic_fetch_add(&c->busy, 1);
    long delay_ms = standin_env_long("STANDIN_NCCL_CALL_MS", 0); /* a slow enqueue, to widen races */
    if (delay_ms > 0) {
        struct timespec d = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    ncclResult_t r = ncclSuccess;
    const int n = c->cl->size, es = dtype_size(dt);
    struct CUstream_st *s = standin_stream(api, stream);
    if (!comm_ready(c)) {
        standin_violation(api, N ":249", "the non-blocking communicator is still initialising (ncclCommGetAsyncError "
                          "has not answered ncclSuccess)");
        r = ncclInvalidUsage;
    } else if (c->finalizing) {
        standin_violation(api, N ":188", "communicator used after ncclCommFinalize");
        r = ncclInvalidUsage;
    } else if (!s) {
        r = ncclInvalidArgument;
    } else if (standin_stream_device(s) != c->device) {
        standin_violation(api, N ":414", "stream of device %d used with a communicator of device %d",
                          standin_stream_device(s), c->device);
        r = ncclInvalidUsage;
    } else if (es == 0) {
        standin_violation(api, N ":312", "datatype %d is not one the stand-in models (fp8 or out of range)", (int)dt);
        r = ncclInvalidArgument;
    } else if ((kind == K_ALLREDUCE || kind == K_REDUCE_SCATTER) && ((int)op < 0 || (int)op >= ncclNumOps)) {
        standin_violation(api, N ":290", "reduction op %d is not a built-in ncclRedOp_t", (int)op);
        r = ncclInvalidArgument;
    } else if (kind == K_BROADCAST && (root < 0 || root >= n)) {
        standin_violation(api, N ":401", "root %d out of range for %d ranks", root, n);
        r = ncclInvalidArgument;
    } else {
        size_t in = kind == K_REDUCE_SCATTER ? count * (size_t)n : count;
        size_t out = kind == K_ALL_GATHER ? count * (size_t)n : count;
        int need_send = kind != K_BROADCAST || c->rank == root;
        if ((need_send && !standin_check_device_range(api, N ":414", "sendbuff", send, in * (size_t)es)) ||
            !standin_check_device_range(api, N ":414", "recvbuff", recv, out * (size_t)es))
            r = ncclInvalidArgument;
    }
    if (r == ncclSuccess) {
        held_op o = {c, kind, (int)dt, (int)op, kind == K_BROADCAST ? root : 0, send, recv, count, s};
        standin_count("nccl_collective");
        if (group_depth > 0) {
            if (nheld == MAX_HELD) r = ncclInternalError;
            else held[nheld++] = o; /* "Nothing will be started on the CUDA stream until ncclGroupEnd" */
        } else {
            queue_op(&o);
            if (!c->blocking) r = ncclInProgress, c->settle_pending = 0;
        }
    }
    atomic_fetch_sub(&c->busy, 1);
    comm_unref(c);
    return r;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
    return collective(K_ALLREDUCE, s, r, n, t, op, 0, c, st);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st)
{
    return collective(K_REDUCE_SCATTER, s, r, n, t, op, 0, c, st);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    return collective(K_ALL_GATHER, s, r, n, t, ncclSum, 0, c, st);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    return collective(K_BROADCAST, s, r, n, t, ncclSum, root, c, st);
}

/* ---- groups ---- */

ncclResult_t ncclGroupStart(void)
{
    standin_api_enter("ncclGroupStart");
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    standin_api_enter("ncclGroupEnd");
    if (group_depth == 0) {
        standin_violation("ncclGroupEnd", N ":568", "ncclGroupEnd without a matching ncclGroupStart");
        return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    }
    if (--group_depth > 0) return ncclSuccess; /* nested: the outermost end starts the fused operation */
    int nonblocking = 0;
    for (int i = 0; i < nheld; i++) {
        struct ncclComm *c = held[i].comm;
        if (!standin_set_has(&live_comms, c)) {
            standin_violation("ncclGroupEnd", N ":192", "a communicator used in the group was destroyed before "
                              "ncclGroupEnd");
            continue;
        }
        queue_op(&held[i]);
        if (!c->blocking) {
            nonblocking = 1;
            /* queued "in the background": settled by ncclCommGetAsyncError; with STANDIN_NCCL_GROUP_STALL
             * never (a peer that died while NCCL connected to it lazily at this first use: the
             * communicator stays ncclInProgress until it is aborted) */
            c->settle_pending = standin_env_long("STANDIN_NCCL_GROUP_STALL", 0) ? 2 : 1;
            c->settle_stream = held[i].stream;
        }
    }
    nheld = 0;
    return nonblocking ? ncclInProgress : ncclSuccess;
}

int standin_nccl_group_holds_stream(void *stream)
{
    for (int i = 0; i < nheld; i++)
        if ((void *)held[i].stream == stream) return 1;
    void *list[64];
    size_t n = standin_set_list(&live_comms, list, 64);
    for (size_t i = 0; i < n; i++) {
        struct ncclComm *c = list[i];
        if (c->settle_pending && c->settle_stream == stream) return 1;
    }
    return 0;
}

/* ---- teardown ---- */

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    standin_api_enter("ncclCommFinalize");
    if (!live("ncclCommFinalize", c)) return ncclInvalidArgument;
    c->finalizing = 1;
    return c->blocking ? ncclSuccess : ncclInProgress;
}

static void drop_handle(ncclComm_t c)
{
    standin_set_remove(&live_comms, c);
    comm_unref(c);
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    standin_api_enter("ncclCommDestroy");
    if (!live("ncclCommDestroy", c)) return ncclInvalidArgument;
    drop_handle(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    standin_api_enter("ncclCommAbort");
    if (!c) return ncclSuccess;
    if (!live("ncclCommAbort", c)) return ncclInvalidArgument;
    if (atomic_load(&c->busy) > 0)
        standin_violation("ncclCommAbort", N ":197", "aborted while another thread is inside an NCCL call on the same "
                          "communicator (its handle is freed under that call)");
    pthread_mutex_lock(&c->cl->mu);
    c->cl->aborted = 1; /* stuck collectives of every rank return */
    pthread_cond_broadcast(&c->cl->cv);
    pthread_mutex_unlock(&c->cl->mu);
    drop_handle(c);
    return ncclSuccess;
}
