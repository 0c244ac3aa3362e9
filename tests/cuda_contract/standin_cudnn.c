/*
 * standin_cudnn.c — a strict stand-in for the cuDNN 9 backend (graph) API calls
 * of the CUDA backend (compiled against the real cudnn_graph_v9.h, 9.19).
 *
 * Checked: live handles and descriptors; each attribute's type and element count
 * for the descriptor it is set on (the table below, after the cuDNN backend
 * attribute reference; cudnn_graph_v9.h:1019); no set after finalize; every
 * descriptor referenced by another is finalized first; finalize only with the
 * required attributes; get only on finalized descriptors (cudnn_graph_v9.h:1026);
 * execute with a finalized plan and variant pack whose unique ids are exactly
 * the graph's non-virtual tensors, every pointer inside device memory of the
 * tensor's extent, and a workspace of at least the plan's size
 * (cudnn_graph_v9.h:1034); the handle's stream on the current device.
 * SDPA graphs (matmul, pointwise and reduction nodes) are checked and executed by
 * standin_cudnn_sdpa.c.
 * Executed: the described convolution (forward, backward data, backward filter;
 * groups, padding, strides, dilation; fused bias add and ReLU), in double, in
 * stream order. Two engines: 0 needs a workspace and carries the tensor-core
 * note, 1 needs none. Not known: the real engines, their numerics and speed.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cudnn.h>
#include "numeric.h"
#include "standin.h"
#include "standin_cudnn.h"

/* The vendor entry points are exported, as the real libraries export them (tests call them directly). */
#pragma GCC visibility push(default)

#define ENGINE0_WS 4096

static standin_set live = STANDIN_SET_INIT;
static _Thread_local char last_message[512];

cudnnStatus_t standin_dnn_refuse(cudnnStatus_t s, const char *api, const char *where, const char *fmt, ...)
{
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(last_message, sizeof last_message, "%s", msg);
    standin_violation(api, where, "%s", msg);
    return s;
}

/* A refusal that breaks no contract (an engine the stand-in does not have): the status and message only. */
cudnnStatus_t standin_dnn_decline(cudnnStatus_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    return s;
}

/* STANDIN_DNN_VERSION: the version the library reports (default the header's), for version-dependent graphs. */
size_t cudnnGetVersion(void) { return (size_t)standin_env_long("STANDIN_DNN_VERSION", CUDNN_VERSION); }
const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    default: return "CUDNN_STATUS (stand-in)";
    }
}
void cudnnGetLastErrorString(char *message, size_t max_size)
{
    if (message && max_size) snprintf(message, max_size, "%s", last_message);
    last_message[0] = '\0';
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    standin_api_enter("cudnnCreate");
    if (!h) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    struct cudnnContext *c = calloc(1, sizeof *c);
    c->magic = DESC_MAGIC;
    c->device = standin_current_device();
    standin_set_add(&live, c);
    *h = c;
    return CUDNN_STATUS_SUCCESS;
}

/* A live handle entering a call: two host threads inside calls on one handle at once break cuDNN's rule that
 * threads must not share a handle simultaneously. STANDIN_DNN_CALL_MS: each such call lasts that long (widens
 * the window, so a missing lock in the caller shows). */
static void handle_enter(cudnnHandle_t h, const char *api)
{
    if (atomic_fetch_add(&h->busy, 1) > 0)
        standin_violation(api, "cuDNN Developer Guide, Thread Safety", "handle %p used by two host threads at once "
                          "(threads must not share a cuDNN handle simultaneously)", (void *)h);
    long ms = standin_env_long("STANDIN_DNN_CALL_MS", 0);
    if (ms > 0) {
        struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
}

static cudnnStatus_t set_stream(cudnnHandle_t h, cudaStream_t s);
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    standin_api_enter("cudnnSetStream");
    if (!standin_set_has(&live, h)) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream", G ":216", "handle not live");
    handle_enter(h, "cudnnSetStream");
    cudnnStatus_t st = set_stream(h, s);
    atomic_fetch_sub(&h->busy, 1);
    return st;
}

static cudnnStatus_t set_stream(cudnnHandle_t h, cudaStream_t s)
{
    struct CUstream_st *st = standin_stream("cudnnSetStream", s);
    if (!st) return CUDNN_STATUS_BAD_PARAM;
    if (standin_stream_device(st) != h->device)
        return refuse(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, "cudnnSetStream", G ":216", "stream of device %d given to a "
                      "handle of device %d", standin_stream_device(st), h->device);
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- descriptors and their attribute table ---- */

typedef struct rule { int dtype, name, type, min, max, required; } rule;
#define D(x) CUDNN_BACKEND_##x##_DESCRIPTOR
#define A(x) CUDNN_ATTR_##x
#define T(x) CUDNN_TYPE_##x
static const rule rules[] = {
    {D(TENSOR), A(TENSOR_DATA_TYPE), T(DATA_TYPE), 1, 1, 1},
    {D(TENSOR), A(TENSOR_DIMENSIONS), T(INT64), 1, 8, 1},
    {D(TENSOR), A(TENSOR_STRIDES), T(INT64), 1, 8, 1},
    {D(TENSOR), A(TENSOR_UNIQUE_ID), T(INT64), 1, 1, 1},
    {D(TENSOR), A(TENSOR_BYTE_ALIGNMENT), T(INT64), 1, 1, 1},
    {D(TENSOR), A(TENSOR_IS_VIRTUAL), T(BOOLEAN), 1, 1, 0},
    {D(TENSOR), A(TENSOR_IS_BY_VALUE), T(BOOLEAN), 1, 1, 0},
    {D(POINTWISE), A(POINTWISE_MODE), T(POINTWISE_MODE), 1, 1, 1},
    {D(POINTWISE), A(POINTWISE_MATH_PREC), T(DATA_TYPE), 1, 1, 1},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_PW_DESCRIPTOR), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_XDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_BDESC), T(BACKEND_DESCRIPTOR), 1, 1, 0},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_YDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_TDESC), T(BACKEND_DESCRIPTOR), 1, 1, 0},
    {D(POINTWISE), A(POINTWISE_AXIS), T(INT64), 1, 1, 0}, /* GEN_INDEX needs it: checked in standin_cudnn_sdpa.c */
    {D(MATMUL), A(MATMUL_COMP_TYPE), T(DATA_TYPE), 1, 1, 1},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_ADESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_BDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_CDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 0},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 0},
    {D(OPERATION_MATMUL), A(OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 0},
    {D(OPERATION_RESHAPE), A(OPERATION_RESHAPE_XDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_RESHAPE), A(OPERATION_RESHAPE_YDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(REDUCTION), A(REDUCTION_OPERATOR), T(REDUCTION_OPERATOR_TYPE), 1, 1, 1},
    {D(REDUCTION), A(REDUCTION_COMP_TYPE), T(DATA_TYPE), 1, 1, 1},
    {D(OPERATION_REDUCTION), A(OPERATION_REDUCTION_XDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_REDUCTION), A(OPERATION_REDUCTION_YDESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_REDUCTION), A(OPERATION_REDUCTION_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(CONVOLUTION), A(CONVOLUTION_COMP_TYPE), T(DATA_TYPE), 1, 1, 1},
    {D(CONVOLUTION), A(CONVOLUTION_CONV_MODE), T(CONVOLUTION_MODE), 1, 1, 1},
    {D(CONVOLUTION), A(CONVOLUTION_SPATIAL_DIMS), T(INT64), 1, 1, 1},
    {D(CONVOLUTION), A(CONVOLUTION_PRE_PADDINGS), T(INT64), 1, 3, 1},
    {D(CONVOLUTION), A(CONVOLUTION_POST_PADDINGS), T(INT64), 1, 3, 1},
    {D(CONVOLUTION), A(CONVOLUTION_FILTER_STRIDES), T(INT64), 1, 3, 1},
    {D(CONVOLUTION), A(CONVOLUTION_DILATIONS), T(INT64), 1, 3, 1},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_X), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_W), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_Y), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_CONV_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_ALPHA), T(DOUBLE), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_BETA), T(DOUBLE), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_DX), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_W), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_DY), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_ALPHA), T(DOUBLE), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_BETA), T(DOUBLE), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_X), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_DW), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_DY), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_ALPHA), T(DOUBLE), 1, 1, 1},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_BETA), T(DOUBLE), 1, 1, 1},
    {D(OPERATIONGRAPH), A(OPERATIONGRAPH_OPS), T(BACKEND_DESCRIPTOR), 1, 64, 1}, /* the SDPA backward: up to 35 */
    {D(OPERATIONGRAPH), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, T(HANDLE), 1, 1, 1},
    {D(ENGINEHEUR), A(ENGINEHEUR_OPERATION_GRAPH), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(ENGINEHEUR), A(ENGINEHEUR_MODE), T(HEUR_MODE), 1, 1, 1},
    {D(EXECUTION_PLAN), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, T(HANDLE), 1, 1, 1},
    {D(EXECUTION_PLAN), A(EXECUTION_PLAN_ENGINE_CONFIG), T(BACKEND_DESCRIPTOR), 1, 1, 1},
    {D(VARIANT_PACK), A(VARIANT_PACK_UNIQUE_IDS), T(INT64), 1, 32, 1},
    {D(VARIANT_PACK), A(VARIANT_PACK_DATA_POINTERS), T(VOID_PTR), 1, 32, 1},
    {D(VARIANT_PACK), A(VARIANT_PACK_WORKSPACE), T(VOID_PTR), 1, 1, 0},
};
#define NRULES (int)(sizeof rules / sizeof rules[0])

static size_t type_bytes(int t)
{
    switch (t) {
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return 8;
    case CUDNN_TYPE_DOUBLE: return 8;
    case CUDNN_TYPE_FLOAT: return 4;
    case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void *);
    default: return sizeof(int); /* the enum types */
    }
}

static desc *live_desc(const char *api, void *p)
{
    desc *d = p;
    if (standin_set_has(&live, p) && d->magic == DESC_MAGIC) return d;
    refuse(CUDNN_STATUS_BAD_PARAM, api, G, "descriptor %p is not live (destroyed, or never created)", p);
    return NULL;
}

static void desc_unref(desc *d)
{
    if (--d->refs > 0) return;
    for (int i = 0; i < d->nattrs; i++) {
        if (d->attrs[i].type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
            for (int64_t j = 0; j < d->attrs[i].count; j++) desc_unref(((desc **)d->attrs[i].data)[j]);
        free(d->attrs[i].data);
    }
    if (d->graph) desc_unref(d->graph);
    d->magic = 0;
    free(d);
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out)
{
    standin_api_enter("cudnnBackendCreateDescriptor");
    if (!out) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    desc *d = calloc(1, sizeof *d);
    d->magic = DESC_MAGIC;
    d->type = t;
    d->refs = 1;
    d->engine = -1;
    standin_set_add(&live, d);
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p)
{
    standin_api_enter("cudnnBackendDestroyDescriptor");
    desc *d = live_desc("cudnnBackendDestroyDescriptor", p);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    standin_set_remove(&live, d); /* descriptors that reference it keep their copy alive */
    d->destroyed = 1;
    if (atomic_load(&d->inflight) > 0) {
        /* The plan owns the engine's kernels (runtime-compiled ones included); the header promises no wait for
         * executions still queued, so the caller must order destruction after them. The memory is kept for
         * the executions in flight (a test that provoked this fails anyway). */
        standin_violation("cudnnBackendDestroyDescriptor", G ":1010", "execution plan %p destroyed while %d "
                          "execution(s) of it are still queued or running on a stream (cudnnBackendExecute, "
                          G ":1034, only enqueues)", p, atomic_load(&d->inflight));
        return CUDNN_STATUS_SUCCESS;
    }
    desc_unref(d);
    return CUDNN_STATUS_SUCCESS;
}


cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void *elems)
{
    const char *api = "cudnnBackendSetAttribute";
    standin_api_enter(api);
    desc *d = live_desc(api, p);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->finalized) return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1019", "attribute %d set on a finalized descriptor", (int)name);
    const rule *r = NULL;
    for (int i = 0; i < NRULES && !r; i++)
        if (rules[i].dtype == d->type && rules[i].name == (int)name) r = &rules[i];
    if (!r) return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":1019", "attribute %d is not one of descriptor type %d "
                          "(or not modelled)", (int)name, d->type);
    if ((int)type != r->type) return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1019", "attribute %d of descriptor type %d "
                                            "has type %d, not %d", (int)name, d->type, r->type, (int)type);
    if (count < r->min || count > r->max || !elems)
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1019", "attribute %d takes %d..%d elements, got %lld%s", (int)name,
                      r->min, r->max, (long long)count, elems ? "" : " (NULL array)");
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t j = 0; j < count; j++) {
            desc *x = live_desc(api, ((void *const *)elems)[j]);
            if (!x) return CUDNN_STATUS_BAD_PARAM;
            if (!x->finalized)
                return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, api, G ":1019", "descriptor of type %d given to "
                              "attribute %d before it was finalized", x->type, (int)name);
        }
    if (type == CUDNN_TYPE_HANDLE && !standin_set_has(&live, *(void *const *)elems))
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":212", "the handle is not live");
    attr *a = (attr *)get_attr(d, name);
    if (!a) {
        if (d->nattrs == MAX_ATTRS) return CUDNN_STATUS_INTERNAL_ERROR;
        a = &d->attrs[d->nattrs++];
    } else {
        if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
            for (int64_t j = 0; j < a->count; j++) desc_unref(((desc **)a->data)[j]);
        free(a->data);
    }
    *a = (attr){(int)name, (int)type, count, malloc((size_t)count * type_bytes(type))};
    memcpy(a->data, elems, (size_t)count * type_bytes(type));
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t j = 0; j < count; j++) ((desc **)a->data)[j]->refs++;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t p)
{
    const char *api = "cudnnBackendFinalize";
    standin_api_enter(api);
    desc *d = live_desc(api, p);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->finalized) return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1016", "descriptor finalized twice");
    for (int i = 0; i < NRULES; i++)
        if (rules[i].dtype == d->type && rules[i].required && !get_attr(d, rules[i].name))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1016", "descriptor type %d finalized without its required "
                          "attribute %d", d->type, rules[i].name);
    if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
        const attr *dims = get_attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS), *str = get_attr(d, CUDNN_ATTR_TENSOR_STRIDES);
        if (dims->count != str->count)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1016", "tensor with %lld dims and %lld strides",
                          (long long)dims->count, (long long)str->count);
        for (int64_t j = 0; j < dims->count; j++)
            if (((int64_t *)dims->data)[j] < 1 || ((int64_t *)str->data)[j] < 1)
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1016", "tensor dim %lld: extent and stride must be >= 1",
                              (long long)j);
    }
    cudnnStatus_t node = standin_sdpa_finalize(d); /* tensors, pointwise, matmul and reduction nodes */
    if (node != CUDNN_STATUS_SUCCESS) return node;
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
        standin_count("cudnn_plan_finalized"); /* the costly step on a real GPU (runtime-compiled engines) */
        long ms = standin_env_long("STANDIN_DNN_PLAN_MS", 0); /* tests: a finalize that long (counted first) */
        if (ms > 0) {
            struct timespec dl = {ms / 1000, (ms % 1000) * 1000000L};
            nanosleep(&dl, NULL);
        }
        desc *cfg = ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 0);
        d->engine = cfg->engine;
        d->graph = cfg->graph;
        d->graph->refs++;
    }
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {
        d->graph = ref(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 0);
        d->graph->refs++;
    }
    d->finalized = 1;
    return CUDNN_STATUS_SUCCESS;
}

/* Engine configs and engines come out of the heuristic (and the config) already finalized. */
static void fill_engine(desc *out, int engine, desc *graph)
{
    out->engine = engine;
    out->graph = graph;
    graph->refs++;
    out->finalized = 1;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t *count, void *elems)
{
    const char *api = "cudnnBackendGetAttribute";
    standin_api_enter(api);
    desc *d = live_desc(api, p);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (!d->finalized)
        return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, api, G ":1026", "attribute %d read from a descriptor that "
                      "is not finalized", (int)name);
    if (!count) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        /* STANDIN_DNN_NO_FUSION: no engine for graphs with pointwise nodes (drives the unfused path) */
        int n = standin_sdpa_is_graph(d->graph) ? standin_sdpa_engines(d->graph)
              : getenv("STANDIN_DNN_NO_FUSION") && get_attr(d->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS)->count > 1 ? 0 : 2;
        *count = requested < n ? requested : n;
        if (requested == 0) *count = n;
        for (int64_t j = 0; j < requested && j < n; j++) {
            desc *cfg = live_desc(api, ((void **)elems)[j]);
            if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1026", "heuristic results go into created ENGINECFG "
                              "descriptors");
            fill_engine(cfg, (int)j, d->graph);
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR && requested >= 1) {
        desc *e = live_desc(api, *(void **)elems);
        if (!e || e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1026", "the engine goes into a created ENGINE descriptor");
        if (!e->finalized) fill_engine(e, d->engine, d->graph);
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE &&
        type == CUDNN_TYPE_NUMERICAL_NOTE) {
        *count = d->engine == 0 ? 1 : 0;
        if (d->engine == 0 && requested >= 1) ((cudnnBackendNumericalNote_t *)elems)[0] = CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE &&
        type == CUDNN_TYPE_INT64 && requested >= 1) {
        *(int64_t *)elems = standin_sdpa_is_graph(d->graph) ? standin_sdpa_workspace(d->graph, d->engine)
                          : d->engine == 0 ? ENGINE0_WS : 0;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":1026", "reading attribute %d (type %d) of descriptor type %d is not "
                  "modelled", (int)name, (int)type, d->type);
}

/* ---- execution: check the variant pack against the graph, then compute in stream order ---- */

typedef struct tinfo { int64_t uid, dims[4], str[4]; int dtype, virt; void *ptr; } tinfo;
typedef struct conv_job {
    int kind;                          /* 0 forward, 1 backward data, 2 backward filter */
    tinfo x, w, y;                     /* forward roles: x input, w filter, y output (dx/dw/dy by kind) */
    int64_t pad[2], stride[2], dil[2];
    double alpha, beta;
    int has_bias, relu;
    tinfo b;
    tinfo out;                         /* the graph's non-virtual output */
    desc *plan;                        /* its inflight count drops when the job has run */
    long delay_ms;                     /* STANDIN_DNN_EXEC_MS: a long-running kernel, to widen races */
} conv_job;

static void tensor_info(const desc *t, tinfo *o)
{
    memset(o, 0, sizeof *o);
    o->uid = i64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    for (int i = 0; i < 4; i++) {
        o->dims[i] = i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, i);
        o->str[i] = i64(t, CUDNN_ATTR_TENSOR_STRIDES, i);
    }
    o->dtype = i32(t, CUDNN_ATTR_TENSOR_DATA_TYPE);
    const attr *v = get_attr(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    o->virt = v && *(bool *)v->data;
}

static size_t tensor_bytes(const tinfo *t)
{
    int64_t last = 0;
    for (int i = 0; i < 4; i++) last += (t->dims[i] - 1) * t->str[i];
    return (size_t)(last + 1) * (t->dtype == CUDNN_DATA_FLOAT ? 4 : 2);
}

static double tload(const tinfo *t, int64_t off)
{
    if (t->dtype == CUDNN_DATA_FLOAT) return ((const float *)t->ptr)[off];
    if (t->dtype == CUDNN_DATA_HALF) return gpucore_f16_to_f32(((const uint16_t *)t->ptr)[off]);
    return gpucore_bf16_to_f32(((const uint16_t *)t->ptr)[off]);
}
static void tstore(const tinfo *t, int64_t off, double v)
{
    if (t->dtype == CUDNN_DATA_FLOAT) ((float *)t->ptr)[off] = (float)v;
    else if (t->dtype == CUDNN_DATA_HALF) ((uint16_t *)t->ptr)[off] = gpucore_f32_to_f16((float)v);
    else ((uint16_t *)t->ptr)[off] = gpucore_f32_to_bf16((float)v);
}
static int64_t at(const tinfo *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return a * t->str[0] + b * t->str[1] + c * t->str[2] + d * t->str[3];
}

static atomic_int dnn_held; /* standin_dnn_hold */

void standin_dnn_hold(int held)
{
    atomic_store(&dnn_held, held);
}

static int conv_task(void *arg)
{
    conv_job *j = *(conv_job **)arg;
    if (j->delay_ms > 0) {
        /* sleep in 1 ms steps: the full delay, or less if a test released a held kernel */
        int held = atomic_load(&dnn_held);
        for (long t = 0; t < j->delay_ms && (!held || atomic_load(&dnn_held)); t++) {
            struct timespec d = {0, 1000000L};
            nanosleep(&d, NULL);
        }
    }
    const tinfo *x = &j->x, *w = &j->w, *y = &j->y;
    const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    const int64_t K = w->dims[0], CG = w->dims[1], R = w->dims[2], S = w->dims[3], P = y->dims[2], Q = y->dims[3];
    const int64_t groups = C / CG, KG = K / groups;
    /* the result, in the logical layout of the tensor it goes to */
    const tinfo *dst = j->kind == 0 ? y : j->kind == 1 ? x : w;
    const int64_t total = dst->dims[0] * dst->dims[1] * dst->dims[2] * dst->dims[3];
    double *acc = calloc((size_t)total, sizeof *acc);
#define IDX(t, a, b, c, d) ((((a) * (t)->dims[1] + (b)) * (t)->dims[2] + (c)) * (t)->dims[3] + (d))
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    const int64_t g = k / KG;
                    double dy = j->kind == 0 ? 0.0 : tload(y, at(y, n, k, p, q)), sum = 0.0;
                    for (int64_t c = 0; c < CG; c++)
                        for (int64_t r = 0; r < R; r++)
                            for (int64_t s2 = 0; s2 < S; s2++) {
                                int64_t h = p * j->stride[0] - j->pad[0] + r * j->dil[0];
                                int64_t ww = q * j->stride[1] - j->pad[1] + s2 * j->dil[1];
                                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                                int64_t ci = g * CG + c;
                                if (j->kind == 0) sum += tload(x, at(x, n, ci, h, ww)) * tload(w, at(w, k, c, r, s2));
                                else if (j->kind == 1) acc[IDX(x, n, ci, h, ww)] += dy * tload(w, at(w, k, c, r, s2));
                                else acc[IDX(w, k, c, r, s2)] += dy * tload(x, at(x, n, ci, h, ww));
                            }
                    if (j->kind == 0) acc[IDX(y, n, k, p, q)] = sum;
                }
    const tinfo *o = &j->out;
    for (int64_t a = 0; a < dst->dims[0]; a++)
        for (int64_t b = 0; b < dst->dims[1]; b++)
            for (int64_t c = 0; c < dst->dims[2]; c++)
                for (int64_t d = 0; d < dst->dims[3]; d++) {
                    double v = j->alpha * acc[IDX(dst, a, b, c, d)];
                    if (j->beta != 0.0) v += j->beta * tload(o, at(o, a, b, c, d));
                    if (j->has_bias) v += tload(&j->b, at(&j->b, j->b.dims[0] == 1 ? 0 : a, j->b.dims[1] == 1 ? 0 : b,
                                                             j->b.dims[2] == 1 ? 0 : c, j->b.dims[3] == 1 ? 0 : d));
                    if (j->relu && v < 0) v = 0;
                    tstore(o, at(o, a, b, c, d), v);
                }
#undef IDX
    free(acc);
    atomic_fetch_sub(&j->plan->inflight, 1);
    free(j);
    standin_count("cudnn_conv_executed");
    return 0;
}

static int conv_kind(int t)
{
    return t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ? 0
         : t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ? 1
         : t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR ? 2 : -1;
}

/* The operation graph as one job (pointers still unset); returns 0 if the graph is not one the stand-in runs. */
static int graph_job(const desc *graph, conv_job *j, tinfo *tensors[], int *ntensors)
{
    memset(j, 0, sizeof *j);
    const attr *ops = get_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    int found = 0;
    *ntensors = 0;
    for (int64_t i = 0; i < ops->count; i++) {
        const desc *op = ((desc **)ops->data)[i];
        int kind = conv_kind(op->type);
        if (kind >= 0) {
            static const int names[3][6] = {
                {A(OPERATION_CONVOLUTION_FORWARD_X), A(OPERATION_CONVOLUTION_FORWARD_W), A(OPERATION_CONVOLUTION_FORWARD_Y),
                 A(OPERATION_CONVOLUTION_FORWARD_CONV_DESC), A(OPERATION_CONVOLUTION_FORWARD_ALPHA), A(OPERATION_CONVOLUTION_FORWARD_BETA)},
                {A(OPERATION_CONVOLUTION_BWD_DATA_DX), A(OPERATION_CONVOLUTION_BWD_DATA_W), A(OPERATION_CONVOLUTION_BWD_DATA_DY),
                 A(OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC), A(OPERATION_CONVOLUTION_BWD_DATA_ALPHA), A(OPERATION_CONVOLUTION_BWD_DATA_BETA)},
                {A(OPERATION_CONVOLUTION_BWD_FILTER_X), A(OPERATION_CONVOLUTION_BWD_FILTER_DW), A(OPERATION_CONVOLUTION_BWD_FILTER_DY),
                 A(OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC), A(OPERATION_CONVOLUTION_BWD_FILTER_ALPHA), A(OPERATION_CONVOLUTION_BWD_FILTER_BETA)}};
            j->kind = kind;
            tensor_info(ref(op, names[kind][0], 0), &j->x);
            tensor_info(ref(op, names[kind][1], 0), &j->w);
            tensor_info(ref(op, names[kind][2], 0), &j->y);
            const desc *cv = ref(op, names[kind][3], 0);
            for (int a = 0; a < 2; a++) {
                j->pad[a] = i64(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, a);
                j->stride[a] = i64(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, a);
                j->dil[a] = i64(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, a);
            }
            j->alpha = *(double *)get_attr(op, names[kind][4])->data;
            j->beta = *(double *)get_attr(op, names[kind][5])->data;
            j->out = kind == 0 ? j->y : kind == 1 ? j->x : j->w;
            found++;
        } else if (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
            int mode = i32(ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0), CUDNN_ATTR_POINTWISE_MODE);
            const desc *b = ref(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, 0);
            if (mode == CUDNN_POINTWISE_ADD && b) { j->has_bias = 1; tensor_info(b, &j->b); }
            else if (mode == CUDNN_POINTWISE_RELU_FWD) j->relu = 1;
            else return 0;
            tensor_info(ref(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 0), &j->out);
        } else {
            return 0;
        }
    }
    if (found != 1 || j->out.virt) return 0;
    tensors[(*ntensors)++] = &j->x;
    tensors[(*ntensors)++] = &j->w;
    tensors[(*ntensors)++] = &j->y;
    if (j->has_bias) tensors[(*ntensors)++] = &j->b;
    int out_listed = 0;
    for (int i = 0; i < *ntensors; i++) out_listed |= tensors[i]->uid == j->out.uid;
    if (!out_listed) tensors[(*ntensors)++] = &j->out;
    return 1;
}

static cudnnStatus_t backend_execute(cudnnHandle_t h, cudnnBackendDescriptor_t pp, cudnnBackendDescriptor_t vpp);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t pp, cudnnBackendDescriptor_t vpp)
{
    const char *api = "cudnnBackendExecute";
    standin_api_enter(api);
    if (!standin_set_has(&live, h)) return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "handle not live");
    handle_enter(h, api);
    cudnnStatus_t st = backend_execute(h, pp, vpp);
    atomic_fetch_sub(&h->busy, 1);
    return st;
}

static cudnnStatus_t backend_execute(cudnnHandle_t h, cudnnBackendDescriptor_t pp, cudnnBackendDescriptor_t vpp)
{
    const char *api = "cudnnBackendExecute";
    desc *plan = live_desc(api, pp), *vp = live_desc(api, vpp);
    if (!plan || !vp) return CUDNN_STATUS_BAD_PARAM;
    if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || vp->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "arguments are not an execution plan and a variant pack");
    if (!plan->finalized || !vp->finalized)
        return refuse(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, api, G ":1034", "the %s is not finalized",
                      plan->finalized ? "variant pack" : "execution plan");
    if (standin_current_device() != h->device)
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "handle of device %d used while device %d is current",
                      h->device, standin_current_device());
    struct CUstream_st *s = standin_stream(api, h->stream);
    if (!s) return CUDNN_STATUS_BAD_PARAM;
    if (standin_sdpa_is_graph(plan->graph)) {
        const attr *wsa = get_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
        return standin_sdpa_execute(plan, vp, s, wsa ? *(void **)wsa->data : NULL, standin_sdpa_workspace(plan->graph, plan->engine));
    }
    conv_job job;
    tinfo *tensors[8];
    int nt = 0;
    if (!graph_job(plan->graph, &job, tensors, &nt))
        return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":1034", "the stand-in runs one convolution with optional "
                      "bias-add and ReLU nodes; this graph is something else");
    const attr *uids = get_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *ptrs = get_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    if (uids->count != ptrs->count)
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "%lld unique ids but %lld data pointers",
                      (long long)uids->count, (long long)ptrs->count);
    int nonvirtual = 0;
    for (int i = 0; i < nt; i++) {
        if (tensors[i]->virt) continue;
        nonvirtual++;
        int hits = 0;
        for (int64_t u = 0; u < uids->count; u++)
            if (((int64_t *)uids->data)[u] == tensors[i]->uid) { hits++; tensors[i]->ptr = ((void **)ptrs->data)[u]; }
        if (hits != 1)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "tensor uid %lld of the graph appears %d times in the "
                          "variant pack", (long long)tensors[i]->uid, hits);
        if (!standin_check_device_range(api, G ":1034", "a variant-pack data pointer", tensors[i]->ptr, tensor_bytes(tensors[i])))
            return CUDNN_STATUS_BAD_PARAM;
    }
    if (uids->count != nonvirtual)
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "the variant pack has %lld uids, the graph %d non-virtual "
                      "tensors", (long long)uids->count, nonvirtual);
    for (int i = 0; i < nt; i++)
        if (tensors[i]->uid == job.out.uid) job.out.ptr = tensors[i]->ptr;
    int64_t need = plan->engine == 0 ? ENGINE0_WS : 0;
    const attr *ws = get_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
    void *wsp = ws ? *(void **)ws->data : NULL;
    if (need > 0 && (!wsp || !standin_check_device_range(api, G ":1034", "workspace", wsp, (size_t)need)))
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "the plan needs %lld bytes of workspace", (long long)need);
    conv_job *j = malloc(sizeof *j);
    *j = job;
    j->plan = plan;
    j->delay_ms = standin_env_long("STANDIN_DNN_EXEC_MS", 0);
    standin_count("cudnn_execute");
    atomic_fetch_add(&plan->inflight, 1);
    if (standin_stream_enqueue(s, conv_task, &j, sizeof j)) {
        atomic_fetch_sub(&plan->inflight, 1);
        free(j);
        return CUDNN_STATUS_INTERNAL_ERROR;
    }
    return CUDNN_STATUS_SUCCESS;
}
