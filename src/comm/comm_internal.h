/*
 * comm_internal.h — what comm.c shares with ddp.c (the reducer queues its bucket
 * reductions through the same sequence numbers and waits), comm_group.c and the
 * ZeRO trainer: the communicator's layout, comm groups, submission and ordering.
 * Backends never include it: what they need is in src/backend/.
 */
#ifndef GPUCORE_COMM_INTERNAL_H
#define GPUCORE_COMM_INTERNAL_H

#include "core/internal.h"

#define GPUCORE_MAGIC_COMM 0xC0AA1C0Au
#define GPUCORE_MAGIC_DDP 0xDD9DD9D1u
#define COMM_DONE_RING 32

/* The communicator handle. Handles are never freed (a destroyed one keeps magic
 * DEAD so use after destroy is detected); the state they point to is. */
typedef struct comm_state comm_state;
struct gpucore_comm {
    uint32_t magic;
    comm_state *s;
};

struct comm_state {
    gpucore_context *ctx;
    void *bcomm;
    int rank, size;
    double timeout_s;
    gpucore_stream *stream;        /* the communication stream (owned) */
    gpucore_event *ev_in, *ev_out; /* reused: producer -> comm stream -> producer ordering */
    gpucore_tensor *scratch;       /* 1 x i32 for barriers */
    pthread_mutex_t mu;            /* guards issue order, issued and done_seq */
    uint64_t issued;               /* last sequence number handed out */
    /* Completion is tracked by events only (no host callback per collective): after
     * collective seq the comm stream records done_ev[seq % COMM_DONE_RING]. A wait for
     * an older seq whose slot was recorded again waits for the newer one (later on the
     * same stream, so never too early). */
    gpucore_event *done_ev[COMM_DONE_RING];
    uint64_t done_seq[COMM_DONE_RING]; /* the seq each slot was last recorded for */
    _Atomic uint64_t completed;    /* highest seq a wait saw complete (a shortcut, never ahead) */
    /* CPU: the caller's stream the last collective ran on (see comm.c, runs_on_producer),
     * with ev_out recorded after it there; NULL when the comm stream already follows it.
     * Whatever queues collective work next (another stream, the comm stream) waits on
     * ev_out first: collectives start in issue order without a wait per call. */
    gpucore_stream *behind_on;
    /* Inside a comm group (comm_group.c) collectives run on group_stream (created at the first
     * one), after the comm stream's queued work (ev_group) and the caller's (ev_in), and
     * behind_on is set to it; group_gen is the generation of the group this communicator
     * last took part in and group_first the first sequence number issued in it. */
    gpucore_stream *group_stream;
    gpucore_event *ev_group;
    uint64_t group_gen, group_first;
    char mode[16];                 /* "mpi", "id", "local" for messages */
};

GPUCORE_HIDDEN gpucore_status gpucore_check_comm(const gpucore_comm *c, const char *op);

/* ---- comm groups (comm_group.c) ---- */
/* 1 while a comm group is open on this thread. */
GPUCORE_HIDDEN int gpucore_comm_group_open(void);
/* The open group's generation on this thread (never 0), or 0 when none is open. */
GPUCORE_HIDDEN uint64_t gpucore_comm_group_generation(void);
/* Work that consumes a grouped collective's result: fn(copy of the size bytes at arg) runs right
 * after the outermost gpucore_comm_group_end has had the backend start the group (in the order
 * queued; also when the group failed, so it can release what it holds), or at once when no group
 * is open (then on arg itself). The copy is freed after fn. On error nothing is queued. */
typedef gpucore_status (*gpucore_group_fn)(void *arg);
GPUCORE_HIDDEN gpucore_status gpucore_comm_group_after(gpucore_group_fn fn, const void *arg, size_t size);
/* 1 if comm has a collective in the group open on this thread (op names the refused call). */
GPUCORE_HIDDEN int gpucore_comm_in_open_group(const gpucore_comm *comm);

/* Queue one collective on the communicator's stream. producer: a stream whose
 * queued work the call waits for (NULL: none); wait_back: 1 to make producer
 * wait for the result. *seq (may be NULL) receives its sequence number. The
 * tensors were validated by the caller. */
GPUCORE_HIDDEN gpucore_status gpucore_comm_submit(gpucore_comm *comm, gpucore_comm_call *call,
                                                  gpucore_stream *producer, int wait_back, uint64_t *seq);

/* Order the communicator's stream after every collective issued so far (some may
 * have run on a caller's stream); call before queueing work on it directly. */
GPUCORE_HIDDEN gpucore_status gpucore_comm_order_stream(gpucore_comm *comm);

#endif
