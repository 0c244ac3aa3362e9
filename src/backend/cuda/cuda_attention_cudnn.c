/*
 * cuda_attention_cudnn.c — the CUDA backend's attention entry: forward and
 * backward through cuDNN's SDPA (operation graphs built with the cuDNN 9
 * graph/backend API), the hand-written kernel (kernels/attention.cu) wherever
 * cuDNN is absent, declines the problem, or fails. Each fallback is reported
 * through args->engine_out (src/ops/attention.c counts it by reason) and logged
 * once per plan key at WARN.
 *
 * The graphs are the ones cudnn-frontend emits (include/cudnn_frontend/node/
 * scaled_dot_product_flash_attention.h: CompositeSDPANode, CompositeSDPABackwardNode;
 * node/softmax.h; utils/attn_score_modifiers.h; node/diagonal_band_mask.h), node for
 * node and in the order the frontend emits its nodes (node creation order, composite nodes expanded in
 * place), since cuDNN's fused SDPA engines recognise that pattern and no other DAG (tests/cuda_contract's
 * stand-in checks both). Forward:
 *   S = matmul(Q, Kᵀ) (Kᵀ: K's dims/strides swapped on the tensor); S *= scale (by value); [S += mask];
 *   [kv_lengths: S = select(S, -inf, row < seq_len_q AND col < seq_len_kv), with GEMM M/N/K overrides on the
 *   matmuls]; [causal: S = select(S, -inf, row >= col)]; M = max_j S; E = exp(S - M); L = Σ_j E;
 *   stats = M + log L (virtual when not wanted); P = E / L (I/O dtype); O = matmul(P, V).
 * Backward: softmax_sum = (Σ_d dO∘O)·1 and dQ_accum non-virtual f32 (in scratch); S as above from Q and Kᵀ
 *   up to the padding mask; X = S - stats; [cuDNN 9.0-9.9 with padding: the padding mask again on X]; [causal:
 *   X = select(X, -inf, row >= col)]; P = exp(X); dV = reshape_p(P)·dO; dP = dO·Vᵀ; dS = (dP - softmax_sum)·P·scale;
 *   dK = reshape_dS(dS)·Q; dQ_accum = dS·reshape_k(Kᵀ); dQ = IDENTITY(dQ_accum) (DETERMINISTIC: dQ = dS·reshape_k(Kᵀ),
 *   the frontend's dP-workspace variant); always all three gradients.
 * Grouped K/V heads (GQA/MQA, H a multiple of Hkv): K, V, dK, dV have Hkv heads and the matmuls broadcast each
 * over its group of H/Hkv query heads; dK and dV go through a virtual [B, H, Sk, D] tensor and a reduction ADD
 * over each group (the frontend's dK_fullhead/dV_fullhead, red_dK_head/red_dV_head).
 * Those graphs leave a row that admits no key (kv_len 0, a fully masked row) NaN; our contract is out = 0,
 * lse = -inf and zero gradients there: kernels/attention_fixup.cu zeroes such rows after the forward and
 * gives the backward a copy of lse with them +inf (P = 0 across them). A call's scratch (the engine's
 * workspace, seq_len_q, dQ_accum, softmax_sum when the front-end gave no delta, the stats copy, gradients
 * not asked for) is one allocation from the caching allocator (args->ws_alloc), released in stream order.
 *
 * Plans are cached per key (op, shapes, strides, dtypes, mask kind, causal, algo, alignments, device); a key
 * that cuDNN refused is cached as refused (logged once). A full cache evicts its least recently used entry
 * that no call holds (entries are held from lookup to the end of their run), after waiting, outside every lock,
 * for the plan's last enqueued runs (an event per stream). A short lock guards the cache table; per device,
 * builds (graph, heuristics, finalize, AUTOTUNE) run under a build lock with a handle of their own, and
 * enqueueing under an execution lock with another (a cuDNN handle is not for two threads at once), so a long
 * build does not hold up cached shapes; AUTOTUNE times candidates on a stream of its own, synchronizing that
 * one only. Sequence lengths are not bucketed: a plan is for its exact dims (a
 * bucketed plan would need padded copies of q, k, v and out).
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore_config.h"
#include "cuda_internal.h"
#include "backend/kernel_ops.h"

static void set_engine(const gpucore_attn_args *a, int32_t v)
{
    if (a->engine_out) *a->engine_out = v;
}

#if GPUCORE_HAVE_CUDNN
#include <stdbool.h>
#include "cuda_conv_graph.h"
#include "cuda_use_marks.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const cudnnBackendAttributeName_t ATTR_GRAPH_HANDLE = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
#pragma GCC diagnostic pop

#define SDPA_CAPACITY 256
#define SDPA_MAX_DEVICES 64
#define SDPA_AUTOTUNE_MAX 8

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_MASK, UID_SEQ_Q, UID_SEQ_KV, UID_SCALE, UID_NEGINF, UID_ONE,
       UID_DO, UID_DQ, UID_DK, UID_DV, UID_SOFTMAX_SUM, UID_DQ_ACCUM, UID_VIRTUAL = 100 };

typedef struct sdpa_key {
    int32_t op, dtype, mask_dtype, len_dtype, has_len, causal, algo, device, has_lse;
    int32_t align[10];
    int64_t dims[7];
    int64_t strides[9][4]; /* q k v out mask dout dq dk dv (0 when absent) */
} sdpa_key;

typedef struct sdpa_entry {
    sdpa_key key;
    cudnnBackendDescriptor_t plan; /* NULL: refused, reason says why */
    int64_t ws_bytes;              /* the plan's engine workspace */
    int reason, refs;              /* refs: calls between lookup and the end of their run */
    uint64_t last_hit;
    cuda_use_marks uses;           /* streams the plan was enqueued on, each with an event after its last run */
} sdpa_entry;

/* sdpa_lock guards the cache table (entries, refs, last_hit) and is held only briefly. Per device, the handle
 * plans are enqueued with (exec_lock: binding it to a stream, enqueueing, the entry's use marks) and a second
 * handle graphs are built, searched, finalized and autotuned with (build_lock), so a build (runtime-compiled
 * engines take 0.1-1 s each) holds up neither other shapes' cached runs nor the cache. A cuDNN handle is not
 * for two threads at once; a plan runs on any handle of its device. Lock order: build_lock, then sdpa_lock. */
static pthread_mutex_t sdpa_lock = PTHREAD_MUTEX_INITIALIZER;
static sdpa_entry *sdpa_cache[SDPA_CAPACITY];
static int sdpa_count, sdpa_full_warned;
static uint64_t sdpa_clock, sdpa_evictions;
static pthread_mutex_t exec_lock[SDPA_MAX_DEVICES], build_lock[SDPA_MAX_DEVICES];
static cudnnHandle_t exec_handles[SDPA_MAX_DEVICES], build_handles[SDPA_MAX_DEVICES];
static pthread_once_t sdpa_once = PTHREAD_ONCE_INIT;
static void sdpa_init_locks(void)
{
    for (int i = 0; i < SDPA_MAX_DEVICES; i++) {
        pthread_mutex_init(&exec_lock[i], NULL);
        pthread_mutex_init(&build_lock[i], NULL);
    }
}

/* The handle in *slot, created on first use (caller holds the lock guarding the slot); NULL if that failed. */
static cudnnHandle_t device_handle(cudnnHandle_t *slot)
{
    if (!*slot && DNN.cudnnCreate(slot) != CUDNN_STATUS_SUCCESS) *slot = NULL;
    return *slot;
}

/* ---- the graph ---- */

typedef struct graph_builder {
    cudnnBackendDescriptor_t all[160];
    int n;
    cudnnBackendDescriptor_t ops[48];
    int nops;
    int64_t next_uid;
    int failed;
} graph_builder;

#define CK(call)                                                      \
    do {                                                              \
        if ((call) != CUDNN_STATUS_SUCCESS) { g->failed = 1; return NULL; } \
    } while (0)

/* Record a descriptor for destruction with the graph. A graph larger than the arrays (a new
 * node kind, or every option at once) fails the build instead of writing past them: the
 * descriptor is destroyed here and the caller returns NULL (KEEP). */
static cudnnBackendDescriptor_t keep(graph_builder *g, cudnnBackendDescriptor_t d, int is_op)
{
    int *n = is_op ? &g->nops : &g->n;
    int cap = is_op ? (int)(sizeof g->ops / sizeof g->ops[0]) : (int)(sizeof g->all / sizeof g->all[0]);
    if (*n >= cap) {
        DNN.cudnnBackendDestroyDescriptor(d);
        g->failed = 1;
        return NULL;
    }
    (is_op ? g->ops : g->all)[(*n)++] = d;
    return d;
}
#define KEEP(d, is_op)                           \
    do {                                         \
        if (!keep(g, (d), (is_op))) return NULL; \
    } while (0)

/* A tensor: uid 0 makes a virtual one; by_value: a host scalar given at execution. */
static cudnnBackendDescriptor_t tensor(graph_builder *g, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                                       const int64_t strides[4], int64_t align, int by_value)
{
    if (g->failed) return NULL;
    cudnnBackendDescriptor_t t = NULL;
    bool virt = uid == 0, byv = by_value != 0;
    if (virt) uid = g->next_uid++;
    CK(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    KEEP(t, 0);
    CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    if (byv) CK(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byv));
    CK(DNN.cudnnBackendFinalize(t));
    return t;
}

/* A virtual tensor of dims (packed strides). */
static cudnnBackendDescriptor_t vtensor(graph_builder *g, cudnnDataType_t dt, const int64_t dims[4])
{
    const int64_t s[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    return tensor(g, 0, dt, dims, s, 16, 0);
}

/* y = mode(x[, b][, t]) with math precision prec (GEN_INDEX: along axis). */
static cudnnBackendDescriptor_t pointwise_prec(graph_builder *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                                               cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                               cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
    if (g->failed) return NULL;
    cudnnBackendDescriptor_t pw = NULL, op = NULL;
    CK(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
    KEEP(pw, 0);
    CK(DNN.cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    CK(DNN.cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
        CK(DNN.cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
    CK(DNN.cudnnBackendFinalize(pw));
    CK(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op));
    KEEP(op, 1);
    CK(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    CK(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (b) CK(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    if (t) CK(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
    CK(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CK(DNN.cudnnBackendFinalize(op));
    return y;
}

/* The frontend's math precisions: INT32 for the padding mask's GEN_INDEX, BOOLEAN for comparisons and
 * LOGICAL_AND, the graph's FLOAT compute type for the rest (the causal mask's GEN_INDEX included). */
static cudnnBackendDescriptor_t pointwise(graph_builder *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                          cudnnBackendDescriptor_t y, int64_t axis)
{
    const int boolean = mode == CUDNN_POINTWISE_CMP_LT || mode == CUDNN_POINTWISE_CMP_GE ||
                        mode == CUDNN_POINTWISE_LOGICAL_AND;
    const cudnnDataType_t prec = boolean ? CUDNN_DATA_BOOLEAN
                               : mode == CUDNN_POINTWISE_GEN_INDEX ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;
    return pointwise_prec(g, mode, prec, x, b, t, y, axis);
}

/* A matmul or reduction node: its descriptor (inner_type: fp32 compute through comp_attr, plus one optional typed
 * attribute) and the operation (op_type) over n tensors t[] set through io[] (the descriptor's slot: NULL in t). */
static cudnnBackendDescriptor_t op_node(graph_builder *g, cudnnBackendDescriptorType_t inner_type,
                                        cudnnBackendAttributeName_t comp_attr, cudnnBackendAttributeName_t extra,
                                        cudnnBackendAttributeType_t extra_type, const void *extra_value,
                                        cudnnBackendDescriptorType_t op_type, int n,
                                        const cudnnBackendAttributeName_t io[], const cudnnBackendDescriptor_t t_in[],
                                        cudnnBackendAttributeName_t inner_attr, cudnnBackendDescriptor_t y)
{
    if (g->failed) return NULL;
    cudnnBackendDescriptor_t inner = NULL, op = NULL;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    CK(DNN.cudnnBackendCreateDescriptor(inner_type, &inner));
    KEEP(inner, 0);
    if (extra_value) CK(DNN.cudnnBackendSetAttribute(inner, extra, extra_type, 1, extra_value));
    CK(DNN.cudnnBackendSetAttribute(inner, comp_attr, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CK(DNN.cudnnBackendFinalize(inner));
    CK(DNN.cudnnBackendCreateDescriptor(op_type, &op));
    KEEP(op, 1);
    for (int i = 0; i < n; i++)
        if (t_in[i]) CK(DNN.cudnnBackendSetAttribute(op, io[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t_in[i]));
    CK(DNN.cudnnBackendSetAttribute(op, inner_attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &inner));
    CK(DNN.cudnnBackendFinalize(op));
    return y;
}

/* c = a·b over the last two dims, fp32 compute; m, n, k: the frontend's GEMM overrides (per-batch sequence
 * lengths, with the padding mask) or NULL. */
static cudnnBackendDescriptor_t matmul(graph_builder *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                       cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t m,
                                       cudnnBackendDescriptor_t n, cudnnBackendDescriptor_t k)
{
    static const cudnnBackendAttributeName_t io[6] = {
        CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
        CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
        CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC};
    const cudnnBackendDescriptor_t t[6] = {a, b, c, m, n, k};
    return op_node(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, 0, 0, NULL,
                   CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 6, io, t, CUDNN_ATTR_OPERATION_MATMUL_DESC, c);
}

/* y = reduce(x) over the dims where y has extent 1, fp32 compute. */
static cudnnBackendDescriptor_t reduction(graph_builder *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t y)
{
    static const cudnnBackendAttributeName_t io[2] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                                      CUDNN_ATTR_OPERATION_REDUCTION_YDESC};
    const cudnnBackendDescriptor_t t[2] = {x, y};
    return op_node(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_ATTR_REDUCTION_OPERATOR,
                   CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &how, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 2, io, t,
                   CUDNN_ATTR_OPERATION_REDUCTION_DESC, y);
}
#undef CK

static cudnnDataType_t dnn_type(int dt)
{
    return dt == GPUCORE_F16 ? CUDNN_DATA_HALF : dt == GPUCORE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* cuDNN wants strides >= 1: a dim of extent 1 (our stride 0) is placed outside the others. */
static void fix_strides(const int64_t dims[4], const int64_t in[4], int64_t out[4])
{
    int64_t span = 1;
    for (int i = 0; i < 4; i++) {
        int64_t s = in[i] < 0 ? -in[i] : in[i];
        if (dims[i] > 1 && s * dims[i] > span) span = s * dims[i];
    }
    for (int i = 0; i < 4; i++) out[i] = dims[i] == 1 || in[i] == 0 ? span : in[i];
}

/* y: a view of x with other dims/strides (a transpose), as a reshape node. */
static cudnnBackendDescriptor_t reshape(graph_builder *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    if (g->failed) return NULL;
    cudnnBackendDescriptor_t op = NULL;
    if (DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, &op)) { g->failed = 1; return NULL; }
    KEEP(op, 1);
    if (DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
        DNN.cudnnBackendFinalize(op)) { g->failed = 1; return NULL; }
    return y;
}

/* A non-virtual [d0, d1, d2, d3] operand of t (t->data NULL: packed, in the workspace); swap: its last two dims
 * exchanged on the tensor itself (Kᵀ, Vᵀ: a view, no copy). st: the strides it got. */
static cudnnBackendDescriptor_t operand(graph_builder *g, int64_t uid, int dtype, const gpucore_attn_tensor *t,
                                        int64_t d0, int64_t d1, int64_t d2, int64_t d3, int swap, int64_t st[4])
{
    const int64_t dims[4] = {d0, d1, d2, d3};
    int64_t in[4], own[4];
    if (!st) st = own;
    if (t->data) {
        const int64_t s[4] = {t->stride[0], t->stride[1], t->stride[swap ? 3 : 2], t->stride[swap ? 2 : 3]};
        memcpy(in, s, sizeof in);
    } else { /* packed [d0, d1, (swap ? d3 : d2), (swap ? d2 : d3)] */
        const int64_t r = swap ? d3 : d2, c = swap ? d2 : d3;
        const int64_t s[4] = {d1 * r * c, r * c, swap ? 1 : c, swap ? c : 1};
        memcpy(in, s, sizeof in);
    }
    fix_strides(dims, in, st);
    return tensor(g, uid, dnn_type(dtype), dims, st, t->data ? conv_align_of(t->data) : 16, 0);
}

/* A virtual view of x [B, H, r, c] (strides xs) as [B, H, c, r] of data type dt. */
static cudnnBackendDescriptor_t transposed(graph_builder *g, cudnnBackendDescriptor_t x, const int64_t xs[4],
                                           cudnnDataType_t dt, int64_t B, int64_t H, int64_t r, int64_t c)
{
    const int64_t d[4] = {B, H, c, r}, st[4] = {xs[0], xs[1], xs[3], xs[2]};
    return reshape(g, x, tensor(g, 0, dt, d, st, 16, 0));
}

/* cudnn-frontend's backward on cuDNN <= 9.15.0 with Sk % 128 != 0 and no padding mask adds one anyway
 * (CompositeSDPABackwardNode "workaround padding mask": seq_len_q = Sq, seq_len_kv = Sk, in its workspace). */
static int workaround_padding(const gpucore_attn_args *a)
{
    return a->op == GPUCORE_ATTN_BWD && !a->kv_len && a->seq_k % 128 != 0 && DNN.cudnnGetVersion &&
           DNN.cudnnGetVersion() <= 91500; /* (cuDNN not loaded yet: the key's flag is 0, one extra build) */
}

/* The backward's dQ through a non-virtual f32 dQ_accum (then IDENTITY), as the frontend builds it, except for a
 * deterministic backward: the frontend's dP-workspace variant writes dQ directly (no accumulation order to vary). */
static int dq_accum(const gpucore_attn_args *a)
{
    return a->algo != GPUCORE_ATTN_ALGO_DETERMINISTIC;
}

/* The padding mask (and the GEMM overrides): kv_lengths, or the frontend's workaround. */
static int padded(const gpucore_attn_args *a)
{
    return a->kv_len != NULL || workaround_padding(a);
}

/* A row may admit no key only through a mask or kv_lengths: those calls run the fix-up kernel around the graph. */
static int may_empty_rows(const gpucore_attn_args *a)
{
    return a->mask_dtype != GPUCORE_ATTN_NO_MASK || a->kv_len != NULL;
}

/* attn_score_modifiers.h padding_mask(): select(S, -inf, (row < seq_len_q) AND (col < seq_len_kv)), its nodes
 * in the frontend's order (row index, col index, row compare, col compare, AND, select). seq: seq_len_q,
 * seq_len_kv. */
static cudnnBackendDescriptor_t padding_mask(graph_builder *g, const gpucore_attn_args *a, cudnnBackendDescriptor_t s,
                                             cudnnBackendDescriptor_t neginf, cudnnBackendDescriptor_t seq[2])
{
    const int64_t sd[4] = {a->batch, a->heads, a->seq_q, a->seq_k};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b8 = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, vtensor(g, i32, sd), 2);
    cudnnBackendDescriptor_t col = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, vtensor(g, i32, sd), 3);
    row = pointwise(g, CUDNN_POINTWISE_CMP_LT, row, seq[0], NULL, vtensor(g, b8, sd), 0);
    col = pointwise(g, CUDNN_POINTWISE_CMP_LT, col, seq[1], NULL, vtensor(g, b8, sd), 0);
    cudnnBackendDescriptor_t ok = pointwise(g, CUDNN_POINTWISE_LOGICAL_AND, row, col, NULL, vtensor(g, b8, sd), 0);
    return pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, s, neginf, ok, vtensor(g, f32, sd), 0);
}

/* The causal mask, diagonal_band_mask.h CompositeDiagonalBandMaskNode with right bound 0, top-left (the
 * frontend's causal_mask): select(S, -inf, row >= col), its nodes in the frontend's order (row index, col
 * index, compare, select; the indices with the graph's FLOAT math). */
static cudnnBackendDescriptor_t causal_mask(graph_builder *g, const gpucore_attn_args *a, cudnnBackendDescriptor_t s,
                                            cudnnBackendDescriptor_t neginf)
{
    const int64_t sd[4] = {a->batch, a->heads, a->seq_q, a->seq_k};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b8 = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row = pointwise_prec(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, vtensor(g, i32, sd), 2);
    cudnnBackendDescriptor_t col = pointwise_prec(g, CUDNN_POINTWISE_GEN_INDEX, f32, s, NULL, NULL, vtensor(g, i32, sd), 3);
    cudnnBackendDescriptor_t ok = pointwise(g, CUDNN_POINTWISE_CMP_GE, row, col, NULL, vtensor(g, b8, sd), 0);
    return pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, s, neginf, ok, vtensor(g, f32, sd), 0);
}

/* The -inf fill of the masks (a by-value scalar), when the graph has one; NULL otherwise. */
static cudnnBackendDescriptor_t neginf_of(graph_builder *g, const gpucore_attn_args *a)
{
    const int64_t one[4] = {1, 1, 1, 1};
    return padded(a) || a->causal ? tensor(g, UID_NEGINF, CUDNN_DATA_FLOAT, one, one, 4, 1) : NULL;
}

/* S = scale·q·kᵀ [+ mask] [padding mask], as the frontend's CompositeSDPANode and CompositeSDPABackwardNode
 * begin: bmm1 (with kv_lengths: GEMM M/N overrides seq_len_q / seq_len_kv), MUL by the by-value scale, ADD of
 * the mask (attn_score_modifiers.h bias()), padding_mask(). The causal mask follows in the caller: in the
 * forward right after this, in the backward after SUB(S, stats) (the frontend's order). kt is [B, H, D, Sk].
 * seq[0], seq[1]: seq_len_q, seq_len_kv (NULL without kv_lengths). */
static cudnnBackendDescriptor_t scores(graph_builder *g, const gpucore_attn_args *a, cudnnBackendDescriptor_t tq,
                                       cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
                                       cudnnBackendDescriptor_t neginf, cudnnBackendDescriptor_t seq[2])
{
    const int64_t sd[4] = {a->batch, a->heads, a->seq_q, a->seq_k}, one[4] = {1, 1, 1, 1};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
    seq[0] = seq[1] = NULL;
    if (padded(a)) {
        const int64_t ld[4] = {a->batch, 1, 1, 1};
        seq[0] = tensor(g, UID_SEQ_Q, i32, ld, one, 16, 0); /* every entry Sq, in the workspace */
        seq[1] = tensor(g, UID_SEQ_KV, i32, ld, one, 16, 0); /* kv_lengths clamped to [0, Sk], in the workspace */
    }
    cudnnBackendDescriptor_t s = matmul(g, tq, kt, vtensor(g, f32, sd), seq[0], seq[1], NULL);
    s = pointwise(g, CUDNN_POINTWISE_MUL, s, scale, NULL, vtensor(g, f32, sd), 0);
    if (a->mask_dtype != GPUCORE_ATTN_NO_MASK) {
        int64_t md[4], ms[4];
        for (int i = 0; i < 4; i++) md[i] = a->mask.stride[i] == 0 ? 1 : sd[i];
        fix_strides(md, a->mask.stride, ms);
        cudnnBackendDescriptor_t tm = tensor(g, UID_MASK, dnn_type(a->mask_dtype), md, ms, conv_align_of(a->mask.data), 0);
        s = pointwise(g, CUDNN_POINTWISE_ADD, s, tm, NULL, vtensor(g, f32, sd), 0);
    }
    if (padded(a)) s = padding_mask(g, a, s, neginf, seq);
    return s;
}

/* The frontend's backward puts the padding mask in again after SUB(S, stats) on cuDNN 9.0.0 to 9.9.x
 * (CompositeSDPABackwardNode: "Explicitly put the padding value again after the stats have been loaded"). */
static int second_padding(const gpucore_attn_args *a)
{
    if (a->op != GPUCORE_ATTN_BWD || !padded(a) || !DNN.cudnnGetVersion) return 0;
    const size_t v = DNN.cudnnGetVersion();
    return v >= 90000 && v < 91000;
}

/* The [B, H, Sq, 1] f32 row statistics (lse, softmax_sum) with the frontend's strides. */
static cudnnBackendDescriptor_t rowstat(graph_builder *g, int64_t uid, const gpucore_attn_args *a, int64_t align)
{
    const int64_t rd[4] = {a->batch, a->heads, a->seq_q, 1}, ss[4] = {a->heads * a->seq_q, a->seq_q, 1, 1};
    return tensor(g, uid, CUDNN_DATA_FLOAT, rd, ss, align, 0);
}

/* Forward (CompositeSDPANode, CompositeSoftmaxNode): S as scores(); M = max_j S; E = exp(S - M); L = Σ_j E;
 * stats = M + log L (non-virtual when lse is wanted or the fix-up reads it, virtual otherwise, as the frontend
 * always emits it); P = E / L in the I/O dtype; O = matmul(P, V) (M/K overrides with kv_lengths). */
static void forward_nodes(graph_builder *g, const gpucore_attn_args *a)
{
    const int64_t B = a->batch, H = a->heads, Hk = a->kv_heads, Sq = a->seq_q, Sk = a->seq_k, D = a->head_dim,
                  Dv = a->head_dim_v;
    const cudnnDataType_t dt = dnn_type(a->dtype), f32 = CUDNN_DATA_FLOAT;
    const int64_t sd[4] = {B, H, Sq, Sk}, rd[4] = {B, H, Sq, 1}, one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t seq[2];
    cudnnBackendDescriptor_t tq = operand(g, UID_Q, a->dtype, &a->q, B, H, Sq, D, 0, NULL);
    cudnnBackendDescriptor_t kt = operand(g, UID_K, a->dtype, &a->k, B, Hk, D, Sk, 1, NULL); /* Kᵀ: a view */
    cudnnBackendDescriptor_t tv = operand(g, UID_V, a->dtype, &a->v, B, Hk, Sk, Dv, 0, NULL);
    cudnnBackendDescriptor_t to = operand(g, UID_O, a->dtype, &a->out, B, H, Sq, Dv, 0, NULL);
    cudnnBackendDescriptor_t neginf = neginf_of(g, a);
    cudnnBackendDescriptor_t s = scores(g, a, tq, kt, tensor(g, UID_SCALE, f32, one, one, 4, 1), neginf, seq);
    if (a->causal) s = causal_mask(g, a, s, neginf);
    cudnnBackendDescriptor_t m = reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, vtensor(g, f32, rd));
    cudnnBackendDescriptor_t e = pointwise(g, CUDNN_POINTWISE_SUB, s, m, NULL, vtensor(g, f32, sd), 0);
    e = pointwise(g, CUDNN_POINTWISE_EXP, e, NULL, NULL, vtensor(g, f32, sd), 0);
    cudnnBackendDescriptor_t l = reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, vtensor(g, f32, rd));
    cudnnBackendDescriptor_t stats = a->lse ? rowstat(g, UID_STATS, a, conv_align_of(a->lse))
                                   : may_empty_rows(a) ? rowstat(g, UID_STATS, a, 16) : vtensor(g, f32, rd);
    cudnnBackendDescriptor_t logl = pointwise(g, CUDNN_POINTWISE_LOG, l, NULL, NULL, vtensor(g, f32, rd), 0);
    pointwise(g, CUDNN_POINTWISE_ADD, m, logl, NULL, stats, 0);
    cudnnBackendDescriptor_t p = pointwise(g, CUDNN_POINTWISE_DIV, e, l, NULL, vtensor(g, dt, sd), 0);
    matmul(g, p, tv, to, seq[0], NULL, seq[1]);
}

/* dK or dV [B, Hk, Sk, d] = lhs [B, H, Sk, Sq] · rhs [B, H, Sq, d] (matmul_dST_Q, matmul_pT_dO; M/K overrides
 * seq_len_kv / seq_len_q with kv_lengths). With grouped K/V heads (H = G·Hk, GQA/MQA) the frontend computes the
 * per-query-head gradient into a virtual [B, H, Sk, d] "fullhead" tensor of the I/O dtype (packed strides) and
 * sums each group of G consecutive heads into the gradient with a reduction ADD (red_dK_head, red_dV_head). */
static void kv_grad(graph_builder *g, const gpucore_attn_args *a, cudnnBackendDescriptor_t lhs,
                    cudnnBackendDescriptor_t rhs, int64_t uid, const gpucore_attn_tensor *t, int64_t d,
                    cudnnBackendDescriptor_t seq[2])
{
    const int64_t B = a->batch, H = a->heads, Hk = a->kv_heads, Sk = a->seq_k;
    cudnnBackendDescriptor_t grad = operand(g, uid, a->dtype, t, B, Hk, Sk, d, 0, NULL);
    if (Hk == H) {
        matmul(g, lhs, rhs, grad, seq[1], NULL, seq[0]);
        return;
    }
    const int64_t fd[4] = {B, H, Sk, d};
    cudnnBackendDescriptor_t full = matmul(g, lhs, rhs, vtensor(g, dnn_type(a->dtype), fd), seq[1], NULL, seq[0]);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, grad);
}

/* Backward (CompositeSDPABackwardNode, no dropout): softmax_sum = (Σ_d dO∘O)·1 into a non-virtual f32
 * [B, H, Sq, 1] (the kernel backends' delta scratch); S as scores() from Q and Kᵀ; X = S - stats (sub_s_m), then
 * second_padding(), then the causal mask (after sub_s_m, as the frontend builds it); P = exp(X);
 * dV = reshape_p(P)·dO; dP = dO·Vᵀ; dS = (dP - softmax_sum)·P·scale; dK = reshape_dS(dS)·Q;
 * dQ_accum = dS·reshape_k(Kᵀ) (non-virtual f32, in the workspace); dQ = IDENTITY(dQ_accum) (DETERMINISTIC: dQ
 * straight from the matmul, dq_accum()). The reshapes of P
 * and dS give [B, H, Sk, Sq] views in the I/O dtype. All three gradients always (missing ones go to the
 * workspace); with kv_lengths each matmul carries the frontend's GEMM overrides; dK and dV through kv_grad(). */
static void backward_nodes(graph_builder *g, const gpucore_attn_args *a)
{
    const int64_t B = a->batch, H = a->heads, Hk = a->kv_heads, Sq = a->seq_q, Sk = a->seq_k, D = a->head_dim,
                  Dv = a->head_dim_v;
    const cudnnDataType_t dt = dnn_type(a->dtype), f32 = CUDNN_DATA_FLOAT;
    const int64_t sd[4] = {B, H, Sq, Sk}, rd[4] = {B, H, Sq, 1}, od[4] = {B, H, Sq, Dv}, one[4] = {1, 1, 1, 1};
    const int64_t packed_sd[4] = {H * Sq * Sk, Sq * Sk, Sk, 1}, acc_d[4] = {B, H, Sq, D};
    const int64_t acc_s[4] = {H * Sq * D, Sq * D, D, 1};
    int64_t kts[4];
    cudnnBackendDescriptor_t seq[2];
    cudnnBackendDescriptor_t tq = operand(g, UID_Q, a->dtype, &a->q, B, H, Sq, D, 0, NULL);
    cudnnBackendDescriptor_t kt = operand(g, UID_K, a->dtype, &a->k, B, Hk, D, Sk, 1, kts);
    cudnnBackendDescriptor_t vt = operand(g, UID_V, a->dtype, &a->v, B, Hk, Dv, Sk, 1, NULL);
    cudnnBackendDescriptor_t to = operand(g, UID_O, a->dtype, &a->out, B, H, Sq, Dv, 0, NULL);
    cudnnBackendDescriptor_t tdo = operand(g, UID_DO, a->dtype, &a->dout, B, H, Sq, Dv, 0, NULL);
    cudnnBackendDescriptor_t stats = rowstat(g, UID_STATS, a, may_empty_rows(a) ? 16 : conv_align_of(a->lse));
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, f32, one, one, 4, 1);
    cudnnBackendDescriptor_t dd = pointwise(g, CUDNN_POINTWISE_MUL, tdo, to, NULL, vtensor(g, f32, od), 0);
    dd = reduction(g, CUDNN_REDUCE_TENSOR_ADD, dd, vtensor(g, f32, rd));
    cudnnBackendDescriptor_t ssum = pointwise(g, CUDNN_POINTWISE_MUL, dd, tensor(g, UID_ONE, f32, one, one, 4, 1),
                                              NULL, rowstat(g, UID_SOFTMAX_SUM, a, 16), 0);
    cudnnBackendDescriptor_t neginf = neginf_of(g, a);
    cudnnBackendDescriptor_t s = scores(g, a, tq, kt, scale, neginf, seq);
    cudnnBackendDescriptor_t p = pointwise(g, CUDNN_POINTWISE_SUB, s, stats, NULL, vtensor(g, f32, sd), 0);
    if (second_padding(a)) p = padding_mask(g, a, p, neginf, seq);
    if (a->causal) p = causal_mask(g, a, p, neginf);
    p = pointwise(g, CUDNN_POINTWISE_EXP, p, NULL, NULL, vtensor(g, f32, sd), 0);
    kv_grad(g, a, transposed(g, p, packed_sd, dt, B, H, Sq, Sk), tdo, UID_DV, &a->dv, Dv, seq);
    cudnnBackendDescriptor_t dp = matmul(g, tdo, vt, vtensor(g, f32, sd), seq[0], seq[1], NULL);
    cudnnBackendDescriptor_t ds = pointwise(g, CUDNN_POINTWISE_SUB, dp, ssum, NULL, vtensor(g, f32, sd), 0);
    ds = pointwise(g, CUDNN_POINTWISE_MUL, ds, p, NULL, vtensor(g, f32, sd), 0);
    ds = pointwise(g, CUDNN_POINTWISE_MUL, ds, scale, NULL, vtensor(g, f32, sd), 0);
    kv_grad(g, a, transposed(g, ds, packed_sd, dt, B, H, Sq, Sk), tq, UID_DK, &a->dk, D, seq);
    cudnnBackendDescriptor_t tdq = operand(g, UID_DQ, a->dtype, &a->dq, B, H, Sq, D, 0, NULL);
    cudnnBackendDescriptor_t acc = dq_accum(a) ? tensor(g, UID_DQ_ACCUM, f32, acc_d, acc_s, 16, 0) : tdq;
    matmul(g, ds, transposed(g, kt, kts, dt, B, Hk, D, Sk), acc, seq[0], NULL, seq[1]);
    if (dq_accum(a)) pointwise(g, CUDNN_POINTWISE_IDENTITY, acc, NULL, NULL, tdq, 0);
}

/* The graph of a (forward or backward); NULL if cuDNN refused a node. */
static cudnnBackendDescriptor_t build_graph(cudnnHandle_t h, const gpucore_attn_args *a)
{
    graph_builder gb;
    memset(&gb, 0, sizeof gb);
    graph_builder *g = &gb;
    g->next_uid = UID_VIRTUAL;
    if (a->op == GPUCORE_ATTN_FWD) forward_nodes(g, a);
    else backward_nodes(g, a);
    cudnnBackendDescriptor_t graph = NULL;
    if (!g->failed &&
        (DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph) ||
         DNN.cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops,
                                      g->ops) ||
         DNN.cudnnBackendSetAttribute(graph, ATTR_GRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
         DNN.cudnnBackendFinalize(graph))) {
        if (graph) DNN.cudnnBackendDestroyDescriptor(graph);
        graph = NULL;
    }
    for (int i = 0; i < g->nops; i++) DNN.cudnnBackendDestroyDescriptor(g->ops[i]);
    for (int i = 0; i < g->n; i++) DNN.cudnnBackendDestroyDescriptor(g->all[i]);
    return graph;
}

/* ---- execution ---- */

/* Where a call's scratch lies in its one workspace allocation (byte offsets, -1: not needed): the engine's own
 * workspace, seq_len_q (kv_lengths), the stats the fix-up reads (forward without lse; the backward's copy with
 * dead rows +inf), softmax_sum (when the front-end gave no delta scratch), dQ_accum, gradients not asked for. */
typedef struct sdpa_ws {
    int64_t total, engine, seq_q, seq_kv, stats, softmax_sum, dq_accum, grad[3];
} sdpa_ws;

static void ws_layout(const gpucore_attn_args *a, int64_t engine_ws, sdpa_ws *w)
{
    const int64_t rows = a->batch * a->heads * a->seq_q, es = a->dtype == GPUCORE_F32 ? 4 : 2;
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    const gpucore_attn_tensor *g[3] = {&a->dq, &a->dk, &a->dv};
    const int64_t gn[3] = {rows * a->head_dim, a->batch * a->kv_heads * a->seq_k * a->head_dim,
                           a->batch * a->kv_heads * a->seq_k * a->head_dim_v};
    int64_t at = 0;
#define PLACE(field, cond, bytes) (w->field = (cond) ? at : -1, at += (cond) ? ((bytes) + 255) / 256 * 256 : 0)
    PLACE(engine, engine_ws > 0, engine_ws);
    PLACE(seq_q, padded(a), 4 * a->batch);
    PLACE(seq_kv, padded(a), 4 * a->batch);
    PLACE(stats, bwd ? may_empty_rows(a) : !a->lse && may_empty_rows(a), 4 * rows);
    PLACE(softmax_sum, bwd && !a->delta, 4 * rows);
    PLACE(dq_accum, bwd && dq_accum(a), 4 * rows * a->head_dim);
    for (int i = 0; i < 3; i++) PLACE(grad[i], bwd && !g[i]->data, es * gn[i]);
#undef PLACE
    w->total = at;
}

static const float NEG_INF = -INFINITY, ONE = 1.0f;

/* The variant pack holds exactly the graph's non-virtual tensors. ws: the call's workspace (w's layout). */
static cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const gpucore_attn_args *a,
                             const float *scale, char *ws, const sdpa_ws *w, cudaStream_t stream)
{
    int64_t uids[24];
    void *ptrs[24];
    int n = 0;
#define PUT(u, p) (uids[n] = (u), ptrs[n++] = (void *)(p))
#define WS(off) ((void *)(ws + (off)))
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    PUT(UID_Q, a->q.data); PUT(UID_K, a->k.data); PUT(UID_V, a->v.data); PUT(UID_O, a->out.data);
    PUT(UID_SCALE, scale);
    if (padded(a) || a->causal) PUT(UID_NEGINF, &NEG_INF);
    if (w->stats >= 0) PUT(UID_STATS, WS(w->stats));
    else if (a->lse) PUT(UID_STATS, a->lse);
    if (a->mask_dtype != GPUCORE_ATTN_NO_MASK) PUT(UID_MASK, a->mask.data);
    if (padded(a)) { PUT(UID_SEQ_Q, WS(w->seq_q)); PUT(UID_SEQ_KV, WS(w->seq_kv)); }
    if (bwd) {
        PUT(UID_DO, a->dout.data);
        PUT(UID_ONE, &ONE);
        PUT(UID_SOFTMAX_SUM, w->softmax_sum >= 0 ? WS(w->softmax_sum) : (void *)a->delta);
        if (w->dq_accum >= 0) PUT(UID_DQ_ACCUM, WS(w->dq_accum));
        PUT(UID_DQ, a->dq.data ? a->dq.data : WS(w->grad[0]));
        PUT(UID_DK, a->dk.data ? a->dk.data : WS(w->grad[1]));
        PUT(UID_DV, a->dv.data ? a->dv.data : WS(w->grad[2]));
    }
    void *engine_ws = w->engine >= 0 ? WS(w->engine) : NULL;
#undef WS
#undef PUT
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = DNN.cudnnSetStream(h, stream);
    if (!s) s = DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!s) s = DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!s) s = DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!s) s = DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &engine_ws);
    if (!s) s = DNN.cudnnBackendFinalize(vp);
    if (!s) s = DNN.cudnnBackendExecute(h, plan, vp);
    if (vp) DNN.cudnnBackendDestroyDescriptor(vp);
    return s;
}

/* The fix-up kernel (kernels/attention_fixup.cu) on stream: op FWD after the forward graph (stats in the
 * workspace or lse), BWD_STATS before the backward graph (lse into the workspace's copy), SEQ before a padded
 * graph (the sequence lengths into the workspace). */
static gpucore_status fixup(void *bctx, const gpucore_attn_args *a, int op, char *ws, const sdpa_ws *w, void *stream)
{
    gpucore_launch l;
    gpucore_status st = kops_launch_for(bctx, stream, &l);
    if (st) return st;
    gpucore_attn_fixup_args f;
    memset(&f, 0, sizeof f);
    f.op = op;
    f.stats = w->stats >= 0 ? (float *)(ws + w->stats) : a->lse;
    f.seq_q = w->seq_q >= 0 ? (int32_t *)(ws + w->seq_q) : NULL;
    f.seq_kv = w->seq_kv >= 0 ? (int32_t *)(ws + w->seq_kv) : NULL;
    f.attn = *a;
    int err = gpucore_kernel_attention_fixup(&l, &f);
    return err ? kops_error(err, "attention fix-up kernel launch") : GPUCORE_OK;
}

/* What a call needs around its graph, enqueued on stream before it: the padding mask's lengths (seq_len_q := Sq,
 * seq_len_kv := kv_lengths clamped to [0, Sk], or Sk for the frontend's workaround padding); the backward's stats
 * copy with dead rows +inf (attention_fixup.cu). */
static gpucore_status prepare(void *bctx, const gpucore_attn_args *a, char *ws, const sdpa_ws *w, void *stream)
{
    gpucore_status st = GPUCORE_OK;
    if (w->seq_q >= 0) st = fixup(bctx, a, GPUCORE_ATTN_FIXUP_SEQ, ws, w, stream);
    if (!st && a->op == GPUCORE_ATTN_BWD && w->stats >= 0) st = fixup(bctx, a, GPUCORE_ATTN_FIXUP_BWD_STATS, ws, w, stream);
    return st;
}

/* Best of 3 timed runs after a warm-up, in ms (< 0: failed), each with a workspace of its own plan's size. */
static float time_plan(void *bctx, cudnnHandle_t h, cudnnBackendDescriptor_t plan, int64_t engine_ws,
                       const gpucore_attn_args *a, cudaStream_t stream)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = -1.0f;
    sdpa_ws w;
    ws_layout(a, engine_ws, &w);
    void *ws = NULL;
    if (w.total > 0 && (!a->ws_alloc || a->ws_alloc(a->ws_ctx, w.total, &ws))) return -1.0f;
    if (prepare(bctx, a, ws, &w, stream) == GPUCORE_OK && cudaEventCreate(&e0) == cudaSuccess &&
        cudaEventCreate(&e1) == cudaSuccess && execute(h, plan, a, &a->scale, ws, &w, stream) == CUDNN_STATUS_SUCCESS) {
        for (int i = 0; i < 3; i++) {
            float ms = 0;
            if (cudaEventRecord(e0, stream) || execute(h, plan, a, &a->scale, ws, &w, stream) ||
                cudaEventRecord(e1, stream) || cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms, e0, e1)) {
                best = -1.0f;
                break;
            }
            if (best < 0 || ms < best) best = ms;
        }
    }
    cudaStreamSynchronize(stream); /* (the tuning stream) nothing of this plan in flight when it is destroyed */
    if (ws) a->ws_release(a->ws_ctx, ws);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return best;
}

/* A plan for a's graph by a->algo, or NULL (reason set); *ws_out: the engine's workspace bytes. h: the build
 * handle (caller holds its build_lock). */
static cudnnBackendDescriptor_t make_plan(void *bctx, cudnnHandle_t h, const gpucore_attn_args *a, cudaStream_t stream,
                                          int *reason, int64_t *ws_out)
{
    cudnnBackendDescriptor_t graph = build_graph(h, a);
    if (!graph) { *reason = GPUCORE_ATTN_FALLBACK_NO_ENGINE; return NULL; }
    cudnnBackendDescriptor_t cfgs[64], best = NULL;
    int64_t n = conv_heuristic_configs(graph, CUDNN_HEUR_MODE_A, cfgs, 32);
    n += conv_heuristic_configs(graph, CUDNN_HEUR_MODE_FALLBACK, cfgs + n, 64 - n);
    gpucore_conv_desc notes; /* the numerical-note filter conv uses: determinism only (TF32 is moot for f16/bf16) */
    memset(&notes, 0, sizeof notes);
    notes.algo = a->algo == GPUCORE_ATTN_ALGO_DETERMINISTIC ? GPUCORE_CONV_ALGO_DETERMINISTIC : GPUCORE_CONV_ALGO_HEURISTIC;
    notes.dtype = a->dtype;
    float best_ms = -1.0f;
    int timed = 0;
    *ws_out = 0;
    /* AUTOTUNE times its candidates on a stream of its own that waits for the caller's work so far: the caller's
     * stream is neither synchronized nor given extra work (the timed runs write the call's outputs, which the
     * real run then writes again). Without that stream the first usable engine is taken. */
    cudaStream_t ts = NULL;
    cudaEvent_t ready = NULL;
    int tune = a->algo == GPUCORE_ATTN_ALGO_AUTOTUNE;
    if (tune && (cudaStreamCreateWithPriority(&ts, cudaStreamNonBlocking, 0) != cudaSuccess ||
                 cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess ||
                 cudaEventRecord(ready, stream) != cudaSuccess || cudaStreamWaitEvent(ts, ready, 0) != cudaSuccess))
        tune = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!conv_config_allowed(cfgs[i], &notes)) continue;
        int64_t ws = 0;
        cudnnBackendDescriptor_t plan = conv_make_plan(h, cfgs[i], &ws);
        if (!plan) continue;
        if (!tune) { best = plan; *ws_out = ws; break; }
        float ms = time_plan(bctx, h, plan, ws, a, ts);
        timed++;
        if (ms >= 0 && (best_ms < 0 || ms < best_ms)) {
            if (best) DNN.cudnnBackendDestroyDescriptor(best);
            best = plan;
            best_ms = ms;
            *ws_out = ws;
        } else {
            DNN.cudnnBackendDestroyDescriptor(plan);
        }
        if (timed >= SDPA_AUTOTUNE_MAX) break;
    }
    for (int64_t i = 0; i < n; i++) DNN.cudnnBackendDestroyDescriptor(cfgs[i]);
    DNN.cudnnBackendDestroyDescriptor(graph);
    if (ready) cudaEventDestroy(ready);
    if (ts) cudaStreamDestroy(ts); /* idle: time_plan synchronized it */
    if (timed) cuda_host->log(GPUCORE_LOG_INFO, "attention: autotuned %d cuDNN engines; fastest %.3f ms", timed, best_ms);
    if (!best) *reason = GPUCORE_ATTN_FALLBACK_NO_ENGINE;
    return best;
}

static void key_of(const gpucore_attn_args *a, int dev, sdpa_key *k)
{
    memset(k, 0, sizeof *k);
    k->dtype = a->dtype; k->mask_dtype = a->mask_dtype; k->len_dtype = a->kv_len ? a->len_dtype : -1;
    k->has_len = a->kv_len != NULL; k->causal = a->causal; k->algo = a->algo; k->device = dev; k->has_lse = a->lse != NULL;
    k->op = a->op;
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    const gpucore_attn_tensor *t[9] = {&a->q, &a->k, &a->v, &a->out, &a->mask, &a->dout, &a->dq, &a->dk, &a->dv};
    for (int i = 0; i < 9; i++) {
        if ((i < 5 || bwd) && t[i]->data) {
            k->align[i] = conv_align_of(t[i]->data);
            memcpy(k->strides[i], t[i]->stride, sizeof k->strides[i]);
            k->strides[i][0] |= (int64_t)1 << 62; /* present (a stride 0 everywhere is a broadcast mask) */
        }
    }
    k->align[9] = a->lse ? conv_align_of(a->lse) : 0;
    const int64_t dims[7] = {a->batch, a->heads, a->kv_heads, a->seq_q, a->seq_k, a->head_dim, a->head_dim_v};
    memcpy(k->dims, dims, sizeof dims);
    k->has_len |= (a->dropout_p > 0.0f) << 1; /* dropout changes the decline */
    k->has_len |= workaround_padding(a) << 2; /* the cuDNN version changes the graph */
    k->has_len |= second_padding(a) << 3;
}

/* gpucore_attention_fallback_reason in a word or two, for the log. */
static const char *reason_word(int r)
{
    static const char *const words[GPUCORE_ATTN_FALLBACK_REASONS] = {
        "cuDNN could not be loaded", "f32 operands", "head_dim not a multiple of 8", "head_dim stride not 1",
        "boolean mask or i64 kv_lengths", "dropout", "K/V heads not dividing the query heads", "no usable engine",
        "building the plan failed", "plan cache full"};
    return r >= 0 && r < GPUCORE_ATTN_FALLBACK_REASONS ? words[r] : "?";
}

/* Why cuDNN's SDPA cannot take a (-1: it may). */
static int decline(const gpucore_attn_args *a)
{
    if (a->dtype != GPUCORE_F16 && a->dtype != GPUCORE_BF16) return GPUCORE_ATTN_FALLBACK_DTYPE;
    if (a->head_dim % 8 || a->head_dim_v % 8) return GPUCORE_ATTN_FALLBACK_HEAD_DIM;
    const gpucore_attn_tensor *t[8] = {&a->q, &a->k, &a->v, &a->out, &a->dout, &a->dq, &a->dk, &a->dv};
    for (int i = 0; i < (a->op == GPUCORE_ATTN_BWD ? 8 : 4); i++)
        if (t[i]->data && t[i]->stride[3] != 1) return GPUCORE_ATTN_FALLBACK_LAYOUT;
    if (a->mask_dtype == GPUCORE_U8 || (a->kv_len && a->len_dtype != GPUCORE_I32)) return GPUCORE_ATTN_FALLBACK_MASK;
    if (a->dropout_p > 0.0f) return GPUCORE_ATTN_FALLBACK_DROPOUT;
    if (a->kv_heads <= 0 || a->heads % a->kv_heads) return GPUCORE_ATTN_FALLBACK_GQA; /* the frontend: h_q % h_k == 0 */
    return -1;
}

/* Wait until nothing of e's plan runs on any stream it was enqueued on, then free it. e is out of the table and
 * unheld (nobody else reaches it), so no lock is needed: the wait holds up no other call. */
static void entry_free(sdpa_entry *e)
{
    cuda_use_marks_release(&e->uses);
    if (e->plan) DNN.cudnnBackendDestroyDescriptor(e->plan);
    free(e);
}

/* A full cache gives up its least recently used entry that no call holds: taken out of the table and returned
 * (the caller frees it after unlocking); NULL if every entry is held. Caller holds sdpa_lock. */
static sdpa_entry *evict_locked(void)
{
    int victim = -1;
    for (int i = 0; i < sdpa_count; i++)
        if (sdpa_cache[i]->refs == 0 && (victim < 0 || sdpa_cache[i]->last_hit < sdpa_cache[victim]->last_hit))
            victim = i;
    if (victim < 0) return NULL;
    sdpa_entry *e = sdpa_cache[victim];
    sdpa_cache[victim] = sdpa_cache[--sdpa_count];
    sdpa_evictions++;
    return e;
}

/* The cached entry for key, held (refs) until the caller's run ends; NULL on a miss. Caller holds sdpa_lock. */
static sdpa_entry *find_locked(const sdpa_key *key)
{
    for (int i = 0; i < sdpa_count; i++)
        if (memcmp(&sdpa_cache[i]->key, key, sizeof *key) == 0) {
            sdpa_cache[i]->last_hit = ++sdpa_clock;
            sdpa_cache[i]->refs++;
            return sdpa_cache[i];
        }
    return NULL;
}

/* The entry for a's key, held until the caller drops its ref; NULL when every entry of a full cache is held (or
 * no host memory). A miss builds the plan under the device's build_lock with its build handle, outside
 * sdpa_lock; a second caller of the same key waits on that lock and then finds the first one's entry. */
static sdpa_entry *lookup(void *bctx, const gpucore_attn_args *a, int dev, cudaStream_t stream)
{
    sdpa_key key;
    key_of(a, dev, &key);
    pthread_mutex_lock(&sdpa_lock);
    sdpa_entry *e = find_locked(&key);
    pthread_mutex_unlock(&sdpa_lock);
    if (e) return e;
    pthread_mutex_lock(&build_lock[dev]);
    pthread_mutex_lock(&sdpa_lock);
    e = find_locked(&key); /* built while this call waited for the build lock */
    int room = sdpa_count < SDPA_CAPACITY;
    for (int i = 0; i < sdpa_count && !room; i++) room = sdpa_cache[i]->refs == 0;
    pthread_mutex_unlock(&sdpa_lock);
    if (e || !room) { /* !room: every entry of a full cache is held; no build whose plan could not be kept */
        pthread_mutex_unlock(&build_lock[dev]);
        return e;
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&build_lock[dev]);
        return NULL;
    }
    e->key = key;
    e->reason = decline(a);
    if (e->reason < 0 && cuda_cudnn_load("attention") != GPUCORE_OK) e->reason = GPUCORE_ATTN_FALLBACK_NO_CUDNN;
    if (e->reason < 0) {
        cudnnHandle_t h = device_handle(&build_handles[dev]);
        if (!h) e->reason = GPUCORE_ATTN_FALLBACK_FAILED;
        else e->plan = make_plan(bctx, h, a, stream, &e->reason, &e->ws_bytes);
    }
    /* still under build_lock: no other build of this device (this key's included) inserts meanwhile */
    sdpa_entry *victim = NULL;
    int inserted = 0;
    pthread_mutex_lock(&sdpa_lock);
    if (sdpa_count < SDPA_CAPACITY || (victim = evict_locked())) {
        e->last_hit = ++sdpa_clock;
        e->refs = 1;
        sdpa_cache[sdpa_count++] = e;
        inserted = 1;
    }
    pthread_mutex_unlock(&sdpa_lock);
    pthread_mutex_unlock(&build_lock[dev]);
    if (victim) entry_free(victim);
    if (!inserted) {
        entry_free(e); /* nothing of it ran outside make_plan's own, synchronized, tuning stream */
        return NULL;
    }
    if (!e->plan)
        cuda_host->log(GPUCORE_LOG_WARN, "attention: cuDNN's SDPA does not run this %s (%s, B %lld H %lld Hkv %lld "
                       "Sq %lld Sk %lld D %lld Dv %lld): %s; the attention kernel runs instead",
                       a->op == GPUCORE_ATTN_BWD ? "backward" : "forward",
                       a->dtype == GPUCORE_F16 ? "f16" : a->dtype == GPUCORE_BF16 ? "bf16" : "f32", (long long)a->batch,
                       (long long)a->heads, (long long)a->kv_heads, (long long)a->seq_q, (long long)a->seq_k,
                       (long long)a->head_dim, (long long)a->head_dim_v, reason_word(e->reason));
    return e;
}

/* Run a on e's plan: its workspace from the caching allocator, the fill and fix-up kernels around the graph.
 * -1 when cuDNN ran, else the fallback reason (the kernel runs); *st: a launch error of our own kernels. */
static int run_plan(void *bctx, sdpa_entry *e, const gpucore_attn_args *a, int dev, cudaStream_t cs, gpucore_status *st)
{
    sdpa_ws w;
    ws_layout(a, e->ws_bytes, &w);
    void *ws = NULL;
    if (w.total > 0 && (!a->ws_alloc || a->ws_alloc(a->ws_ctx, w.total, &ws))) {
        cuda_host->log(GPUCORE_LOG_WARN, "attention: the %lld-byte workspace of cuDNN's SDPA could not be had; the "
                       "attention kernel runs instead", (long long)w.total);
        return GPUCORE_ATTN_FALLBACK_FAILED;
    }
    int reason = -1;
    *st = prepare(bctx, a, ws, &w, cs);
    if (!*st) {
        pthread_mutex_lock(&exec_lock[dev]);
        cudnnHandle_t h = device_handle(&exec_handles[dev]);
        if (!h || execute(h, e->plan, a, &a->scale, ws, &w, cs) != CUDNN_STATUS_SUCCESS) {
            reason = GPUCORE_ATTN_FALLBACK_FAILED;
            cuda_host->log(GPUCORE_LOG_WARN, "attention: running cuDNN's SDPA plan failed; the attention kernel "
                           "runs instead");
        } else {
            *st = cuda_use_marks_record(&e->uses, cs);
        }
        pthread_mutex_unlock(&exec_lock[dev]);
    }
    if (!*st && reason < 0 && a->op == GPUCORE_ATTN_FWD && may_empty_rows(a))
        *st = fixup(bctx, a, GPUCORE_ATTN_FIXUP_FWD, ws, &w, cs);
    if (ws) a->ws_release(a->ws_ctx, ws); /* stream-ordered: reused only after this work */
    return reason;
}

gpucore_status cuda_attention(void *bctx, const gpucore_attn_args *a, void *stream)
{
    const int dev = ((cuda_context *)bctx)->device;
    if (a->algo == GPUCORE_ATTN_ALGO_KERNEL || dev < 0 || dev >= SDPA_MAX_DEVICES)
        return kops_attention(bctx, a, stream);
    CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
    pthread_once(&sdpa_once, sdpa_init_locks);
    const cudaStream_t cs = (cudaStream_t)stream;
    int reason = GPUCORE_ATTN_FALLBACK_CACHE_FULL;
    sdpa_entry *e = lookup(bctx, a, dev, cs);
    if (e && !e->plan) reason = e->reason;
    if (!e) {
        pthread_mutex_lock(&sdpa_lock);
        const int warn = !sdpa_full_warned;
        sdpa_full_warned = 1;
        pthread_mutex_unlock(&sdpa_lock);
        if (warn)
            cuda_host->log(GPUCORE_LOG_WARN, "attention: every entry of the cuDNN SDPA plan cache (%d shapes) is in "
                           "use; this shape runs the attention kernel", SDPA_CAPACITY);
    }
    gpucore_status st = GPUCORE_OK;
    if (e && e->plan) reason = run_plan(bctx, e, a, dev, cs, &st);
    if (e) {
        pthread_mutex_lock(&sdpa_lock);
        e->refs--;
        pthread_mutex_unlock(&sdpa_lock);
    }
    if (st) return st;
    if (reason < 0) { set_engine(a, 1); return GPUCORE_OK; }
    set_engine(a, -1 - reason);
    return kops_attention(bctx, a, stream);
}

#else /* no cuDNN in this build */

gpucore_status cuda_attention(void *bctx, const gpucore_attn_args *a, void *stream)
{
    if (a->algo != GPUCORE_ATTN_ALGO_KERNEL) set_engine(a, -1 - GPUCORE_ATTN_FALLBACK_NO_CUDNN);
    return kops_attention(bctx, a, stream);
}

#endif
