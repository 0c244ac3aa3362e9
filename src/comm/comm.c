/*
 * comm.c — communicators and collectives above the backend: the three ways to
 * create one (MPI launch, caller-supplied unique id, several local devices),
 * argument validation, sequence numbers, the dedicated communication stream and
 * its event ordering against the caller's stream, and host waits with timeouts.
 * The data moves in the backends: MPI on the CPU (src/backend/cpu/cpu_comm.c), NCCL on
 * CUDA (src/backend/cuda/cuda_comm.c, with the watchdog). MPI itself is in the MPI
 * module (src/backend/mpi/, opened on first use by mpi_link.c): the CUDA path calls it
 * here too, to ship NCCL's unique id.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>
#include "comm_internal.h"
#include "backend/comm_names.h"
#include "backend/mpi_link.h"
#include "core/view_span.h"

/* -------------------------------------------------------------- helpers */

static double comm_default_timeout(void)
{
    const char *env = getenv("GPUCORE_COMM_TIMEOUT");
    if (env && *env) {
        char *end = NULL;
        double v = strtod(env, &end);
        if (end != env && v > 0) return v;
        gpucore_log(GPUCORE_LOG_WARN, "GPUCORE_COMM_TIMEOUT=%s is not a positive number of seconds; using 600", env);
    }
    return 600.0;
}

gpucore_status gpucore_check_comm(const gpucore_comm *c, const char *op)
{
    if (!c) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the communicator is NULL", op);
    if (c->magic != GPUCORE_MAGIC_COMM || !c->s)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the communicator was destroyed or never created",
                                 op);
    if (c->s->ctx->magic != GPUCORE_MAGIC_CONTEXT)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the communicator's context was destroyed; destroy "
                                 "communicators before their context", op);
    return GPUCORE_OK;
}

/* The handle and the library-side state around a backend communicator. */
/* Communicator handles come from a handle pool, so a destroyed one is detected on use. */
static gpucore_handle_pool comm_handle_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_comm));

static gpucore_status comm_wrap(gpucore_context *ctx, void *bcomm, int rank, int size, double timeout_s,
                                const char *mode, gpucore_comm **out)
{
    gpucore_comm *c = gpucore_handle_alloc(&comm_handle_pool);
    comm_state *s = calloc(1, sizeof *s);
    gpucore_status st = GPUCORE_OK;
    if (!c || !s) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create: out of host memory");
        goto fail;
    }
    s->ctx = ctx;
    s->bcomm = bcomm;
    s->rank = rank;
    s->size = size;
    s->timeout_s = timeout_s;
    snprintf(s->mode, sizeof s->mode, "%s", mode);
    pthread_mutex_init(&s->mu, NULL);
    int64_t one = 1;
    gpucore_stream *cur = NULL; /* the scratch comes from this stream's pool: its block's last use may still be
                                 * queued there, so the comm stream waits for it before the first write */
    if ((st = gpucore_stream_create(ctx, -1, &s->stream)) || (st = gpucore_event_create_untimed(ctx, &s->ev_in)) ||
        (st = gpucore_event_create_untimed(ctx, &s->ev_group)) ||
        (st = gpucore_event_create_untimed(ctx, &s->ev_out)) ||
        (st = gpucore_tensor_create(ctx, GPUCORE_I32, 1, &one, &s->scratch)) ||
        (st = gpucore_resolve_stream(ctx, NULL, "comm_create", &cur)) || (st = gpucore_event_record(s->ev_in, cur)) ||
        (st = gpucore_stream_wait_event(s->stream, s->ev_in)) || (st = gpucore_fill(s->scratch, 0, s->stream)))
        goto fail;
    for (int i = 0; i < COMM_DONE_RING; i++)
        if ((st = gpucore_event_create_untimed(ctx, &s->done_ev[i]))) goto fail;
    c->s = s;
    c->magic = GPUCORE_MAGIC_COMM;
    *out = c;
    return GPUCORE_OK;
fail:
    if (s) {
        gpucore_tensor_destroy(s->scratch);
        gpucore_event_destroy(s->ev_in);
        gpucore_event_destroy(s->ev_group);
        gpucore_event_destroy(s->ev_out);
        for (int i = 0; i < COMM_DONE_RING; i++) gpucore_event_destroy(s->done_ev[i]);
        gpucore_stream_destroy(s->stream);
        pthread_mutex_destroy(&s->mu);
    }
    free(s);
    gpucore_handle_release(&comm_handle_pool, c);
    ctx->be->comm_destroy(bcomm);
    return st;
}

static gpucore_status need_comm_backend(gpucore_context *ctx, const char *op)
{
    if (!ctx->be->comm_init || !ctx->be->comm_enqueue)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "%s: the %s backend of this build has no collectives (CUDA needs NCCL: rebuild with "
                                 "-Dnccl=enabled and -Dnccl_dir=... if it is outside the toolkit)", op, ctx->be->name);
    return GPUCORE_OK;
}

/* ------------------------------------------------------------- creation */

/* Every rank learns every rank's (host, GPU) and rejects a GPU named twice, so all
 * ranks fail together instead of NCCL hanging in init. */
static gpucore_status check_gpu_mapping(gpucore_context *ctx, int rank, int size)
{
    typedef struct { char host[64]; char bus[32]; int32_t index; int32_t pad; } gpu_slot;
    gpu_slot mine;
    memset(&mine, 0, sizeof mine);
    gethostname(mine.host, sizeof mine.host - 1);
    gpucore_device_properties p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    if (gpucore_device_get_properties(ctx->type, ctx->index, &p) == GPUCORE_OK)
        snprintf(mine.bus, sizeof mine.bus, "%s", p.pci_bus_id);
    gpucore_clear_error();
    mine.index = ctx->index;
    gpu_slot *all = calloc((size_t)size, sizeof *all);
    if (!all) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "comm_create_mpi: out of host memory");
    if (gpucore_mpi_loaded()->world_allgather(&mine, all, (int)sizeof mine)) {
        free(all);
        return gpucore_set_error(GPUCORE_ERR_COMM, "comm_create_mpi: MPI_Allgather of the GPU mapping failed");
    }
    for (int a = 0; a < size; a++)
        for (int b = a + 1; b < size; b++) {
            int same_gpu = all[a].bus[0] && all[a].bus[0] != '-' ? !strcmp(all[a].bus, all[b].bus)
                                                                 : all[a].index == all[b].index;
            if (!strcmp(all[a].host, all[b].host) && same_gpu) {
                gpucore_status st = gpucore_set_error(
                    GPUCORE_ERR_INVALID_ARGUMENT,
                    "comm_create_mpi: ranks %d and %d both use GPU cuda:%d (PCI %s) on host %s; one GPU cannot hold "
                    "two NCCL ranks. Give each local rank its own device, e.g. gpucore_context_create(\"cuda:<local "
                    "rank>\") with the local rank from OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID (this is rank %d)",
                    a, b, all[a].index, all[a].bus[0] ? all[a].bus : "?", all[a].host, rank);
                free(all);
                return st;
            }
        }
    free(all);
    return GPUCORE_OK;
}

gpucore_status gpucore_comm_create_mpi(gpucore_context *ctx, gpucore_comm **out)
{
    const char *op = "comm_create_mpi";
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    if ((st = need_comm_backend(ctx, op))) return st;
    int rank = 0, size = 0;
    if ((st = gpucore_mpi_world(op, &rank, &size))) return st;
    double timeout = comm_default_timeout();
    void *bcomm = NULL;
    if (ctx->type == GPUCORE_DEVICE_CPU) {
        st = ctx->be->comm_init(ctx->bctx, NULL, rank, size, timeout, &bcomm);
    } else {
        if ((st = check_gpu_mapping(ctx, rank, size))) return st;
        /* rank 0 makes the id; its status travels with it so no rank waits on a failed one */
        struct { int32_t status; unsigned char id[GPUCORE_COMM_ID_BYTES]; } msg;
        memset(&msg, 0, sizeof msg);
        char why[512] = "";
        if (rank == 0) {
            msg.status = ctx->be->comm_unique_id ? ctx->be->comm_unique_id(msg.id) : GPUCORE_ERR_NOT_SUPPORTED;
            if (msg.status) snprintf(why, sizeof why, "%s", gpucore_last_error());
        }
        if (gpucore_mpi_loaded()->world_bcast(&msg, (int)sizeof msg, 0))
            return gpucore_set_error(GPUCORE_ERR_COMM, "%s: MPI_Bcast of the NCCL unique id failed", op);
        if (msg.status)
            return gpucore_set_error((gpucore_status)msg.status, "%s: rank 0 could not make the NCCL unique id%s%s",
                                     op, why[0] ? ": " : "", why);
        st = ctx->be->comm_init(ctx->bctx, msg.id, rank, size, timeout, &bcomm);
    }
    if (st) return st;
    if ((st = comm_wrap(ctx, bcomm, rank, size, timeout, "mpi", out))) return st;
    gpucore_log(GPUCORE_LOG_DEBUG, "comm: rank %d of %d on %s created through MPI", rank, size, ctx->name);
    return GPUCORE_OK;
}

gpucore_status gpucore_comm_unique_id(gpucore_context *ctx, void *id, size_t id_len)
{
    const char *op = "comm_unique_id";
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (!id) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: id is NULL", op);
    if (id_len != GPUCORE_COMM_ID_BYTES)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: id_len is %zu; a unique id is "
                                 "GPUCORE_COMM_ID_BYTES (%d) bytes", op, id_len, GPUCORE_COMM_ID_BYTES);
    if (!ctx->be->comm_unique_id)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "%s: the %s backend needs no unique id (its collectives run over MPI: use "
                                 "gpucore_comm_create_mpi under mpirun/srun)", op, ctx->be->name);
    return ctx->be->comm_unique_id(id);
}

gpucore_status gpucore_comm_create(gpucore_context *ctx, const void *id, size_t id_len, int rank, int size,
                                   gpucore_comm **out)
{
    const char *op = "comm_create";
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (!out || !id) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: %s is NULL", op, out ? "id" : "out");
    *out = NULL;
    if (id_len != GPUCORE_COMM_ID_BYTES)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: id_len is %zu; a unique id is "
                                 "GPUCORE_COMM_ID_BYTES (%d) bytes", op, id_len, GPUCORE_COMM_ID_BYTES);
    if (size < 1 || rank < 0 || rank >= size)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: rank %d of size %d: need 0 <= rank < size", op,
                                 rank, size);
    if ((st = need_comm_backend(ctx, op))) return st;
    if (ctx->type == GPUCORE_DEVICE_CPU)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                 "%s: CPU collectives run over MPI, which has its own rendezvous: launch with "
                                 "mpirun/srun and use gpucore_comm_create_mpi", op);
    double timeout = comm_default_timeout();
    void *bcomm = NULL;
    if ((st = ctx->be->comm_init(ctx->bctx, id, rank, size, timeout, &bcomm))) return st;
    return comm_wrap(ctx, bcomm, rank, size, timeout, "id", out);
}

gpucore_status gpucore_comm_create_local(gpucore_context *const *ctxs, int n, gpucore_comm **comms)
{
    const char *op = "comm_create_local";
    if (!ctxs || !comms) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: %s is NULL", op,
                                                  ctxs ? "comms" : "ctxs");
    if (n < 1 || n > 4096) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: n is %d; need 1..4096", op, n);
    gpucore_status st;
    for (int i = 0; i < n; i++) {
        comms[i] = NULL;
        if ((st = gpucore_check_context(ctxs[i], op))) return st;
        if (ctxs[i]->be != ctxs[0]->be)
            return gpucore_set_error(GPUCORE_ERR_DEVICE_MISMATCH, "%s: context %d is %s but context 0 is %s; one "
                                     "communicator spans one kind of device", op, i, ctxs[i]->name, ctxs[0]->name);
        for (int j = 0; j < i; j++)
            if (ctxs[j]->index == ctxs[i]->index)
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                         "%s: contexts %d and %d are both on %s; one device cannot hold two ranks "
                                         "(give each rank its own device)", op, j, i, ctxs[i]->name);
    }
    if ((st = need_comm_backend(ctxs[0], op))) return st;
    if (!ctxs[0]->be->comm_init_local)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend cannot drive several ranks from one "
                                 "process", op, ctxs[0]->be->name);
    void **bctxs = calloc((size_t)n, sizeof *bctxs), **bcomms = calloc((size_t)n, sizeof *bcomms);
    if (!bctxs || !bcomms) {
        free(bctxs);
        free(bcomms);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    for (int i = 0; i < n; i++) bctxs[i] = ctxs[i]->bctx;
    double timeout = comm_default_timeout();
    st = ctxs[0]->be->comm_init_local((void *const *)bctxs, n, timeout, bcomms);
    for (int i = 0; !st && i < n; i++) {
        st = comm_wrap(ctxs[i], bcomms[i], i, n, timeout, "local", &comms[i]);
        bcomms[i] = NULL;
    }
    if (st) {
        for (int i = 0; i < n; i++) {
            if (bcomms[i]) ctxs[0]->be->comm_destroy(bcomms[i]);
            if (comms[i]) { gpucore_comm_destroy(comms[i]); comms[i] = NULL; }
        }
    }
    free(bctxs);
    free(bcomms);
    return st;
}

int gpucore_comm_in_open_group(const gpucore_comm *comm)
{
    uint64_t gen = gpucore_comm_group_generation();
    return gen && comm->s->group_gen == gen;
}

gpucore_status gpucore_comm_destroy(gpucore_comm *comm)
{
    if (!comm) return GPUCORE_OK;
    gpucore_status st = gpucore_check_comm(comm, "comm_destroy");
    if (st) return st;
    if (gpucore_comm_in_open_group(comm))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_destroy: the communicator has collectives in the "
                                 "comm group open on this thread, which start only at gpucore_comm_group_end; end the "
                                 "group first");
    comm_state *s = comm->s;
    /* Let queued collectives finish (each bounded by the timeout); if that is not
     * enough, abort so the stream drains instead of hanging. */
    gpucore_status wait_st = gpucore_comm_wait(comm, 0, s->timeout_s + 5.0);
    if (wait_st == GPUCORE_ERR_TIMEOUT) s->ctx->be->comm_abort(s->bcomm, "destroyed while collectives were in flight");
    comm->magic = GPUCORE_MAGIC_DEAD;
    comm->s = NULL;
    gpucore_stream_synchronize(s->stream); /* a failed collective's status is already reported */
    gpucore_stream_destroy(s->group_stream);
    gpucore_stream_destroy(s->stream);
    gpucore_event_destroy(s->ev_group);
    gpucore_event_destroy(s->ev_in);
    gpucore_event_destroy(s->ev_out);
    gpucore_tensor_destroy(s->scratch);
    for (int i = 0; i < COMM_DONE_RING; i++) gpucore_event_destroy(s->done_ev[i]);
    s->ctx->be->comm_destroy(s->bcomm);
    pthread_mutex_destroy(&s->mu);
    free(s);
    gpucore_handle_release(&comm_handle_pool, comm); /* recycled only after a quarantine */
    gpucore_clear_error(); /* a failure was already reported by the call that met it */
    return GPUCORE_OK;
}

int gpucore_comm_rank(const gpucore_comm *comm)
{
    return gpucore_check_comm(comm, "comm_rank") ? -1 : comm->s->rank;
}

int gpucore_comm_size(const gpucore_comm *comm)
{
    return gpucore_check_comm(comm, "comm_size") ? -1 : comm->s->size;
}

gpucore_status gpucore_comm_context(const gpucore_comm *comm, gpucore_context **ctx)
{
    gpucore_status st = gpucore_check_comm(comm, "comm_context");
    if (st) return st;
    if (!ctx) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "comm_context: ctx is NULL");
    *ctx = comm->s->ctx;
    return GPUCORE_OK;
}

gpucore_status gpucore_comm_stream(gpucore_comm *comm, gpucore_stream **out)
{
    gpucore_status st = gpucore_check_comm(comm, "comm_stream");
    if (st) return st;
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "comm_stream: out is NULL");
    if ((st = gpucore_comm_order_stream(comm))) return st;
    *out = comm->s->stream;
    return GPUCORE_OK;
}

gpucore_status gpucore_comm_set_timeout(gpucore_comm *comm, double seconds)
{
    gpucore_status st = gpucore_check_comm(comm, "comm_set_timeout");
    if (st) return st;
    if (!(seconds > 0) || seconds > 1e9)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "comm_set_timeout: %g seconds; need > 0", seconds);
    pthread_mutex_lock(&comm->s->mu);
    comm->s->timeout_s = seconds;
    pthread_mutex_unlock(&comm->s->mu);
    return GPUCORE_OK;
}

uint64_t gpucore_comm_last_sequence(const gpucore_comm *comm)
{
    if (gpucore_check_comm(comm, "comm_last_sequence")) return 0;
    pthread_mutex_lock(&comm->s->mu);
    uint64_t seq = comm->s->issued;
    pthread_mutex_unlock(&comm->s->mu);
    return seq;
}

/* ------------------------------------------------------------ submission */

/* CPU streams: a collective whose caller's stream waits for it anyway (wait_back)
 * runs on that stream itself, so a caller that synchronizes runs it on its own
 * thread (the CPU stream runs a synchronizing caller's pending tasks inline, and
 * such a collective is queued for the caller: call->for_caller, see cpu_stream.c)
 * instead of handing it to the comm stream's worker and waiting to be woken back:
 * two thread hand-offs less per collective. The order is unchanged: it follows the
 * caller's queued work and whatever the comm stream still has queued (ev_in), and
 * the comm stream follows it (ev_out), so collectives still start in issue order.
 * MPI may be called from any thread at the levels libgpucore accepts (SERIALIZED
 * through the MPI module's lock, MULTIPLE). CUDA keeps NCCL on the comm stream. */
static int runs_on_producer(const comm_state *s, const gpucore_stream *producer, int wait_back)
{
    return wait_back && producer && producer != s->stream && s->ctx->type == GPUCORE_DEVICE_CPU;
}

/* Stream x is about to get collective work: order it after the last collective if
 * that one ran on another stream (s->mu held). */
static gpucore_status order_on(comm_state *s, gpucore_stream *x)
{
    if (!s->behind_on || s->behind_on == x) return GPUCORE_OK;
    /* Behind the open group's own collectives (not started before gpucore_comm_group_end): what follows them
     * on other streams is queued after the group ends (gpucore_comm_group_after); waiting now would hold x. */
    if (s->behind_on == s->group_stream && s->group_gen && s->group_gen == gpucore_comm_group_generation())
        return GPUCORE_OK;
    gpucore_status st = gpucore_stream_wait_event(x, s->ev_out);
    if (!st && x == s->stream) s->behind_on = NULL;
    return st;
}

gpucore_status gpucore_comm_order_stream(gpucore_comm *comm)
{
    comm_state *s = comm->s;
    pthread_mutex_lock(&s->mu);
    gpucore_status st = order_on(s, s->stream);
    pthread_mutex_unlock(&s->mu);
    return st;
}

gpucore_status gpucore_comm_submit(gpucore_comm *comm, gpucore_comm_call *call, gpucore_stream *producer,
                                   int wait_back, uint64_t *seq)
{
    comm_state *s = comm->s;
    const gpucore_backend *be = s->ctx->be;
    gpucore_status st;
    pthread_mutex_lock(&s->mu);
    if ((st = be->comm_check(s->bcomm))) goto out;
    const uint64_t group = gpucore_comm_group_generation();
    if (group && !s->group_stream && (st = gpucore_stream_create(s->ctx, -1, &s->group_stream))) goto out;
    int on_producer = !group && runs_on_producer(s, producer, wait_back);
    gpucore_stream *run = group ? s->group_stream : on_producer ? producer : s->stream;
    if ((st = order_on(s, run))) goto out;
    if (group) { /* the group stream follows the comm stream's queued work and the producer's */
        if ((st = gpucore_event_record(s->ev_group, s->stream)) || (st = gpucore_stream_wait_event(run, s->ev_group)))
            goto out;
        if (producer && producer != s->stream &&
            ((st = gpucore_event_record(s->ev_in, producer)) || (st = gpucore_stream_wait_event(run, s->ev_in))))
            goto out;
    } else if (on_producer) {
        if (gpucore_stream_query(s->stream) == GPUCORE_ERR_NOT_READY &&
            ((st = gpucore_event_record(s->ev_in, s->stream)) || (st = gpucore_stream_wait_event(producer, s->ev_in))))
            goto out;
        gpucore_clear_error();
    } else if (producer && producer != s->stream) {
        if ((st = gpucore_event_record(s->ev_in, producer)) || (st = gpucore_stream_wait_event(s->stream, s->ev_in)))
            goto out;
    }
    call->seq = s->issued + 1;
    call->timeout_s = s->timeout_s;
    call->for_caller = on_producer;
    gpucore_log(GPUCORE_LOG_DEBUG, "comm: rank %d/%d #%llu %s %s count %lld %s root %d", s->rank, s->size,
                (unsigned long long)call->seq, comm_kind_name(call->kind), comm_op_name(call->op), (long long)call->count,
                gpucore_dtype_name((gpucore_dtype)call->dtype), call->root);
    void *prof = gpucore_prof_begin(s->ctx, run, comm_kind_name(call->kind),
                                    call->count * gpucore_dtype_size((gpucore_dtype)call->dtype));
    st = be->comm_enqueue(s->bcomm, call, run->bstream);
    gpucore_prof_end(s->ctx, prof);
    if (st) goto out;
    s->issued = call->seq;
    if (seq) *seq = call->seq;
    /* completion is an event after the collective, not a host callback */
    int slot = (int)(call->seq % COMM_DONE_RING);
    s->done_seq[slot] = call->seq;
    if ((st = gpucore_event_record(s->done_ev[slot], run))) {
        be->comm_abort(s->bcomm, "could not record the completion event");
        goto out;
    }
    if (group) {
        /* Whatever queues collective work next (after the group) waits for this one (order_on). A producer
         * other than the comm stream waits for it too (on CUDA that wait is held until the group ends, and so
         * is the producer's later work: the backend refuses kernels there); the comm stream itself is ordered
         * by order_on after the group, so its queued work keeps feeding the group's later collectives. */
        if ((st = gpucore_event_record(s->ev_out, run))) goto out;
        s->behind_on = run;
        if (s->group_gen != group) {
            s->group_gen = group;
            s->group_first = call->seq;
        }
        if (wait_back && producer && producer != s->stream && (st = gpucore_stream_wait_event(producer, s->ev_out)))
            goto out;
    } else if (on_producer) { /* whatever queues collective work next waits for this one (order_on) */
        if ((st = gpucore_event_record(s->ev_out, producer))) goto out;
        s->behind_on = producer;
    } else if (wait_back && producer && producer != s->stream) {
        if ((st = gpucore_event_record(s->ev_out, s->stream)) || (st = gpucore_stream_wait_event(producer, s->ev_out)))
            goto out;
    }
out:
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Poll one completion event to done or the deadline (deadline < 0: none). Spins
 * briefly, then yields, then naps up to 1 ms, so a short wait costs microseconds
 * and a long one no core. */
static gpucore_status wait_event_until(comm_state *s, gpucore_event *e, double deadline)
{
    if (deadline < 0) return gpucore_event_synchronize(e); /* bounded: the collective fails after its timeout */
    double t0 = gpucore_clock_s();
    for (long polls = 0;; polls++) {
        gpucore_status q = gpucore_event_query(e);
        if (q != GPUCORE_ERR_NOT_READY) return q;
        gpucore_clear_error();
        if (s->ctx->be->comm_check(s->bcomm)) return GPUCORE_ERR_COMM; /* the message is set */
        double t = gpucore_clock_s();
        if (t >= deadline) return GPUCORE_ERR_TIMEOUT;
        if (polls < 256) continue;
        if (t - t0 < 0.002) { sched_yield(); continue; }
        double left = deadline - t, nap = left < 0.001 ? left : 0.001;
        struct timespec ts = {0, (long)(nap * 1e9)};
        nanosleep(&ts, NULL);
    }
}

gpucore_status gpucore_comm_wait(gpucore_comm *comm, uint64_t seq, double timeout_s)
{
    const char *op = "comm_wait";
    gpucore_status st = gpucore_check_comm(comm, op);
    if (st) return st;
    comm_state *s = comm->s;
    pthread_mutex_lock(&s->mu);
    uint64_t issued = s->issued;
    uint64_t target = seq ? seq : issued;
    if (gpucore_comm_in_open_group(comm) && target >= s->group_first && target <= issued) {
        pthread_mutex_unlock(&s->mu);
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: collective #%llu belongs to the comm group open "
                                 "on this thread, which starts its collectives only at gpucore_comm_group_end; wait "
                                 "after ending the group", op, (unsigned long long)target);
    }
    gpucore_event *e = NULL;
    if (target > atomic_load(&s->completed) && target <= issued) {
        /* the slot of target, or (recorded again since) a later collective's: never too early */
        e = s->done_ev[target % COMM_DONE_RING];
        target = s->done_seq[target % COMM_DONE_RING];
    }
    pthread_mutex_unlock(&s->mu);
    if (seq > issued)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: collective #%llu was never issued (the last is "
                                 "#%llu)", op, (unsigned long long)seq, (unsigned long long)issued);
    if (e) {
        double deadline = timeout_s < 0 ? -1 : gpucore_clock_s() + timeout_s;
        st = wait_event_until(s, e, deadline);
        if (st == GPUCORE_ERR_TIMEOUT)
            return gpucore_set_error(GPUCORE_ERR_TIMEOUT,
                                     "%s: collective #%llu on rank %d of %d not complete after %.3f s (completed up "
                                     "to #%llu); it is still in flight (the communicator fails on its own after "
                                     "its timeout of %.1f s)", op, (unsigned long long)(seq ? seq : issued), s->rank,
                                     s->size, timeout_s, (unsigned long long)atomic_load(&s->completed), s->timeout_s);
        if (st && st != GPUCORE_ERR_COMM) return st;
        if (!st) {
            uint64_t seen = atomic_load(&s->completed);
            while (seen < target && !atomic_compare_exchange_weak(&s->completed, &seen, target)) {}
        }
    }
    return s->ctx->be->comm_check(s->bcomm);
}

/* ------------------------------------------------------------ collectives */

static int comm_dtype_ok(int dtype)
{
    return dtype == GPUCORE_F32 || dtype == GPUCORE_F64 || dtype == GPUCORE_F16 || dtype == GPUCORE_BF16 ||
           dtype == GPUCORE_I32;
}

static gpucore_status check_buffer(const gpucore_comm *comm, const gpucore_tensor *t, const char *op,
                                   const char *arg, gpucore_view *v)
{
    gpucore_status st = gpucore_check_tensor(t, op, arg);
    if (st) return st;
    if (t->ctx != comm->s->ctx) {
        char what[48];
        snprintf(what, sizeof what, "'%s'", arg);
        return gpucore_context_mismatch(op, what, t->ctx, "the communicator", comm->s->ctx);
    }
    if (!comm_dtype_ok(t->dtype))
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; collectives take f32, f64, f16, bf16 "
                                 "or i32", op, arg, gpucore_dtype_name((gpucore_dtype)t->dtype));
    if (!gpucore_tensor_contiguous_unchecked(t))
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: '%s' is not contiguous; collectives need "
                                 "contiguous tensors (copy into a contiguous one first)", op, arg);
    gpucore_tensor_view_of(t, v);
    return GPUCORE_OK;
}

static gpucore_status check_op(gpucore_reduce_op rop, const char *op)
{
    if ((int)rop < GPUCORE_REDUCE_SUM || (int)rop > GPUCORE_REDUCE_MIN)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: reduce op %d is not one of SUM, AVG, MAX, MIN",
                                 op, (int)rop);
    return GPUCORE_OK;
}

/* Shared tail: resolve the caller's stream and submit with wait-back. */
static gpucore_status submit_on(gpucore_comm *comm, gpucore_comm_call *call, gpucore_stream *stream, const char *op)
{
    gpucore_stream *s;
    gpucore_status st = gpucore_resolve_stream(comm->s->ctx, stream, op, &s);
    if (st) return st;
    return gpucore_comm_submit(comm, call, s, 1, NULL);
}

/* The checks every out/in collective starts with: a live communicator, two buffers of it, one dtype. */
static gpucore_status check_out_in(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in, const char *op,
                                   gpucore_view *ov, gpucore_view *iv)
{
    gpucore_status st = gpucore_check_comm(comm, op);
    if (st || (st = check_buffer(comm, out, op, "out", ov)) || (st = check_buffer(comm, in, op, "in", iv))) return st;
    if (ov->dtype != iv->dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: out is %s but in is %s", op,
                                 gpucore_dtype_name((gpucore_dtype)ov->dtype),
                                 gpucore_dtype_name((gpucore_dtype)iv->dtype));
    return GPUCORE_OK;
}

/* out and in hold the same element count and are the same buffer or disjoint. */
static gpucore_status check_same_count(const gpucore_view *ov, const gpucore_view *iv, const char *op)
{
    if (ov->numel != iv->numel)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: out has %lld elements but in has %lld", op,
                                 (long long)ov->numel, (long long)iv->numel);
    int64_t nb = ov->numel * ov->elem_size;
    if (ov->data != iv->data && gpucore_bytes_overlap(ov->data, nb, iv->data, nb))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: out and in overlap without being the same "
                                 "buffer; pass out == in for in place", op);
    return GPUCORE_OK;
}

gpucore_status gpucore_comm_allreduce(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in,
                                      gpucore_reduce_op rop, gpucore_stream *stream)
{
    const char *op = "comm_allreduce";
    gpucore_view ov, iv;
    gpucore_status st = check_out_in(comm, out, in, op, &ov, &iv);
    if (st || (st = check_op(rop, op)) || (st = check_same_count(&ov, &iv, op))) return st;
    if (ov.numel == 0) return GPUCORE_OK;
    gpucore_comm_call call = {.kind = GPUCORE_COMM_ALLREDUCE, .op = rop, .dtype = ov.dtype, .count = ov.numel,
                              .send = iv.data, .recv = ov.data};
    return submit_on(comm, &call, stream, op);
}

gpucore_status gpucore_comm_reduce_scatter(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in,
                                           gpucore_reduce_op rop, gpucore_stream *stream)
{
    const char *op = "comm_reduce_scatter";
    gpucore_view ov, iv;
    gpucore_status st = check_out_in(comm, out, in, op, &ov, &iv);
    if (st || (st = check_op(rop, op))) return st;
    int size = comm->s->size, rank = comm->s->rank;
    if (iv.numel != ov.numel * size)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: in has %lld elements but must hold size (%d) x "
                                 "out's %lld = %lld", op, (long long)iv.numel, size, (long long)ov.numel,
                                 (long long)(ov.numel * size));
    int64_t ob = ov.numel * ov.elem_size;
    int in_place = (char *)ov.data == (char *)iv.data + (int64_t)rank * ob;
    if (!in_place && gpucore_bytes_overlap(ov.data, ob, iv.data, ob * size))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: out overlaps in without being in's slice for this "
                                 "rank (%d); in place means out is slice rank of in", op, rank);
    if (ov.numel == 0) return GPUCORE_OK;
    gpucore_comm_call call = {.kind = GPUCORE_COMM_REDUCE_SCATTER, .op = rop, .dtype = ov.dtype, .count = ov.numel,
                              .send = iv.data, .recv = ov.data};
    return submit_on(comm, &call, stream, op);
}

gpucore_status gpucore_comm_all_gather(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in,
                                       gpucore_stream *stream)
{
    const char *op = "comm_all_gather";
    gpucore_view ov, iv;
    gpucore_status st = check_out_in(comm, out, in, op, &ov, &iv);
    if (st) return st;
    int size = comm->s->size, rank = comm->s->rank;
    if (ov.numel != iv.numel * size)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: out has %lld elements but must hold size (%d) x "
                                 "in's %lld = %lld", op, (long long)ov.numel, size, (long long)iv.numel,
                                 (long long)(iv.numel * size));
    int64_t ib = iv.numel * iv.elem_size;
    int in_place = (char *)iv.data == (char *)ov.data + (int64_t)rank * ib;
    if (!in_place && gpucore_bytes_overlap(ov.data, ib * size, iv.data, ib))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: in overlaps out without being out's slice for "
                                 "this rank (%d); in place means in is slice rank of out", op, rank);
    if (iv.numel == 0) return GPUCORE_OK;
    gpucore_comm_call call = {.kind = GPUCORE_COMM_ALL_GATHER, .dtype = ov.dtype, .count = iv.numel,
                              .send = iv.data, .recv = ov.data};
    return submit_on(comm, &call, stream, op);
}

gpucore_status gpucore_comm_broadcast(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in, int root,
                                      gpucore_stream *stream)
{
    const char *op = "comm_broadcast";
    gpucore_view ov, iv;
    gpucore_status st = gpucore_check_comm(comm, op);
    if (st || (st = check_buffer(comm, out, op, "out", &ov))) return st;
    if (root < 0 || root >= comm->s->size)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: root %d is not a rank (size %d)", op, root,
                                 comm->s->size);
    iv = ov;
    if (comm->s->rank == root) {
        if (!in) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: in is NULL on the root rank %d", op, root);
        if ((st = check_out_in(comm, out, in, op, &ov, &iv)) || (st = check_same_count(&ov, &iv, op))) return st;
    }
    if (ov.numel == 0) return GPUCORE_OK;
    gpucore_comm_call call = {.kind = GPUCORE_COMM_BROADCAST, .dtype = ov.dtype, .count = ov.numel, .root = root,
                              .send = iv.data, .recv = ov.data};
    return submit_on(comm, &call, stream, op);
}

gpucore_status gpucore_comm_barrier(gpucore_comm *comm, gpucore_stream *stream)
{
    const char *op = "comm_barrier";
    gpucore_status st = gpucore_check_comm(comm, op);
    if (st) return st;
    gpucore_view v;
    gpucore_tensor_view_of(comm->s->scratch, &v);
    gpucore_comm_call call = {.kind = GPUCORE_COMM_BARRIER, .op = GPUCORE_REDUCE_SUM, .dtype = GPUCORE_I32,
                              .count = 1, .send = v.data, .recv = v.data};
    return submit_on(comm, &call, stream, op);
}
