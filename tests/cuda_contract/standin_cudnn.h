/*
 * standin_cudnn.h — shared by the cuDNN stand-in's files: standin_cudnn.c (handles,
 * descriptors, attributes, heuristics, plans, convolution execution) and
 * standin_cudnn_sdpa.c (the matmul / pointwise / reduction nodes of an SDPA graph:
 * their finalize checks and an interpreter that executes such a graph).
 */
#ifndef GPUCORE_STANDIN_CUDNN_H
#define GPUCORE_STANDIN_CUDNN_H

#include <stdatomic.h>
#include <stdint.h>
#include <cudnn.h>
#include "standin.h"

#define G "cudnn_graph_v9.h"
#define DESC_MAGIC 0x444e4e44u
#define MAX_ATTRS 12

struct cudnnContext { unsigned magic; int device; cudaStream_t stream; atomic_int busy; /* threads inside a call */ };

typedef struct attr { int name, type; int64_t count; void *data; } attr;
typedef struct desc {
    unsigned magic;
    int type, finalized, destroyed, refs;
    attr attrs[MAX_ATTRS];
    int nattrs;
    int engine;                  /* ENGINECFG / ENGINE / EXECUTION_PLAN */
    struct desc *graph;          /* ENGINEHEUR (set), ENGINECFG, ENGINE, EXECUTION_PLAN: the operation graph */
    atomic_int inflight;         /* EXECUTION_PLAN: executions queued or running on a stream */
} desc;

static inline const attr *get_attr(const desc *d, int name)
{
    for (int i = 0; i < d->nattrs; i++)
        if (d->attrs[i].name == name) return &d->attrs[i];
    return NULL;
}
static inline int64_t i64(const desc *d, int name, int idx)
{
    const attr *a = get_attr(d, name);
    return a && idx < a->count ? ((int64_t *)a->data)[idx] : 0;
}
static inline int i32(const desc *d, int name)
{
    const attr *a = get_attr(d, name);
    return a ? *(int *)a->data : -1;
}
static inline desc *ref(const desc *d, int name, int idx)
{
    const attr *a = get_attr(d, name);
    return a && idx < a->count ? ((desc **)a->data)[idx] : NULL;
}

/* A broken contract: the status, the message for cudnnGetLastErrorString, and a violation citing `where`. */
STANDIN_HIDDEN cudnnStatus_t standin_dnn_refuse(cudnnStatus_t s, const char *api, const char *where, const char *fmt,
                                                ...) __attribute__((format(printf, 4, 5)));
#define refuse standin_dnn_refuse
/* A refusal that breaks no contract (what a real engine may not support): status and message only. */
STANDIN_HIDDEN cudnnStatus_t standin_dnn_decline(cudnnStatus_t s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- standin_cudnn_sdpa.c ---- */
/* Checks when a matmul / reduction / pointwise (SDPA modes) descriptor is finalized; SUCCESS if fine. */
STANDIN_HIDDEN cudnnStatus_t standin_sdpa_finalize(desc *d);
/* 1 if the operation graph has a matmul node (an SDPA graph, run by the interpreter). */
STANDIN_HIDDEN int standin_sdpa_is_graph(const desc *graph);
/* How many engines the heuristics offer for an SDPA graph (0 for graphs the stand-in's engine declines). */
STANDIN_HIDDEN int standin_sdpa_engines(const desc *graph);
/* The workspace bytes `engine` needs for an SDPA graph (what the plan reports and execute checks). */
STANDIN_HIDDEN int64_t standin_sdpa_workspace(const desc *graph, int engine);
/* Check the variant pack against the graph and queue the interpreter on the stream. */
STANDIN_HIDDEN cudnnStatus_t standin_sdpa_execute(desc *plan, const desc *vp, struct CUstream_st *s, void *ws,
                                                  int64_t ws_need);

#endif
