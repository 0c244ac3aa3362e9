/*
 * cuda_attention_cudnn.c — the CUDA backend's attention entry: forward and
 * backward through cuDNN's SDPA (operation graphs built with the cuDNN 9
 * graph/backend API), the hand-written kernel (kernels/attention.cu) wherever
 * cuDNN is absent, declines the problem, or fails. Each fallback is reported
 * through args->engine_out (src/ops/attention.c counts it by reason) and logged
 * once per plan key at WARN.
 *
 * The graphs follow cudnn-frontend's sdpa nodes. Forward:
 *   S = matmul(Q, Kᵀ); S *= scale (by value); [S += mask]; [padding: S = select(
 *   gen_index(col) < seq_len_kv, S, -inf)]; [causal: S = select(gen_index(row) >=
 *   gen_index(col), S, -inf)]; M = max_j S; E = exp(S - M); L = Σ_j E;
 *   [stats = M + log L]; P = E / L (in the I/O dtype); O = matmul(P, V).
 * Backward (transposes as reshape nodes): S as above; P = exp(S - stats);
 *   dV = Pᵀ·dO; dP = dO·Vᵀ; Δ = Σ_d dO∘O; dS = scale·P∘(dP - Δ); dQ = dS·K; dK = dSᵀ·Q.
 * With a mask or kv_lengths a row may admit no key; our contract is out = 0,
 * lse = -inf and zero gradients there, so those graphs clamp M (stats) to
 * -FLT_MAX and L to FLT_MIN (pointwise MAX nodes) instead of giving NaN.
 *
 * Plans are cached per key (op, shapes, strides, dtypes, mask kind, causal, algo,
 * alignments, device) and never evicted, so no plan is destroyed while it may
 * run; a key that cuDNN refused is cached as refused (logged once). A full cache
 * sends new keys to the kernel. One lock guards the cache, the per-device handle,
 * builds and enqueueing (a cuDNN handle is not for two threads at once). Only
 * engines that need no workspace are used (the attention entry has no workspace
 * allocator).
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

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const cudnnBackendAttributeName_t ATTR_GRAPH_HANDLE = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
#pragma GCC diagnostic pop

#define SDPA_CAPACITY 256
#define SDPA_MAX_DEVICES 64
#define SDPA_AUTOTUNE_MAX 8

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_MASK, UID_SEQLEN, UID_SCALE, UID_NEGINF, UID_LOWEST, UID_TINY,
       UID_DO, UID_DQ, UID_DK, UID_DV, UID_VIRTUAL = 100 };

typedef struct sdpa_key {
    int32_t op, dtype, mask_dtype, len_dtype, has_len, causal, algo, device, has_lse;
    int32_t align[10];
    int64_t dims[7];
    int64_t strides[9][4]; /* q k v out mask dout dq dk dv (0 when absent) */
} sdpa_key;

typedef struct sdpa_entry {
    sdpa_key key;
    cudnnBackendDescriptor_t plan; /* NULL: refused, reason says why */
    int reason;
} sdpa_entry;

static pthread_mutex_t sdpa_lock = PTHREAD_MUTEX_INITIALIZER;
static sdpa_entry *sdpa_cache[SDPA_CAPACITY];
static int sdpa_count, sdpa_full_warned;
static cudnnHandle_t sdpa_handles[SDPA_MAX_DEVICES];

/* ---- the graph ---- */

typedef struct graph_builder {
    cudnnBackendDescriptor_t all[64];
    int n;
    cudnnBackendDescriptor_t ops[32];
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

/* y = mode(x[, b][, t]) with fp32 math (GEN_INDEX: int32, along axis). */
static cudnnBackendDescriptor_t pointwise(graph_builder *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                          cudnnBackendDescriptor_t y, int64_t axis)
{
    if (g->failed) return NULL;
    cudnnBackendDescriptor_t pw = NULL, op = NULL;
    cudnnDataType_t prec = mode == CUDNN_POINTWISE_GEN_INDEX ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;
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

/* A matmul or reduction node: its descriptor (inner_type: fp32 compute through comp_attr, plus one optional typed
 * attribute) and the operation (op_type) reading x [and b] into y; io names the x, b, y and descriptor attributes. */
static cudnnBackendDescriptor_t op_node(graph_builder *g, cudnnBackendDescriptorType_t inner_type,
                                        cudnnBackendAttributeName_t comp_attr, cudnnBackendAttributeName_t extra,
                                        cudnnBackendAttributeType_t extra_type, const void *extra_value,
                                        cudnnBackendDescriptorType_t op_type, const cudnnBackendAttributeName_t io[4],
                                        cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
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
    const cudnnBackendDescriptor_t t[4] = {x, b, y, inner};
    for (int i = 0; i < 4; i++)
        if (t[i]) CK(DNN.cudnnBackendSetAttribute(op, io[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[i]));
    CK(DNN.cudnnBackendFinalize(op));
    return y;
}

/* c = a·b over the last two dims, fp32 compute. */
static cudnnBackendDescriptor_t matmul(graph_builder *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                       cudnnBackendDescriptor_t c)
{
    static const cudnnBackendAttributeName_t io[4] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                                      CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
    return op_node(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, 0, 0, NULL,
                   CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, io, a, b, c);
}

/* y = reduce(x) over the dims where y has extent 1, fp32 compute. */
static cudnnBackendDescriptor_t reduction(graph_builder *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t y)
{
    static const cudnnBackendAttributeName_t io[4] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0,
                                                      CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                                      CUDNN_ATTR_OPERATION_REDUCTION_DESC};
    return op_node(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_ATTR_REDUCTION_OPERATOR,
                   CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &how, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, io, x, NULL, y);
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

/* A non-virtual [d0, d1, d2, d3] operand; swap: its last two dims exchanged (a transposed view, no copy). */
static cudnnBackendDescriptor_t operand(graph_builder *g, int64_t uid, int dtype, const gpucore_attn_tensor *t,
                                        int64_t d0, int64_t d1, int64_t d2, int64_t d3, int swap)
{
    const int64_t dims[4] = {d0, d1, d2, d3};
    const int64_t in[4] = {t->stride[0], t->stride[1], t->stride[swap ? 3 : 2], t->stride[swap ? 2 : 3]};
    int64_t st[4];
    fix_strides(dims, in, st);
    return tensor(g, uid, dnn_type(dtype), dims, st, conv_align_of(t->data), 0);
}

/* A virtual view of x [B, H, r, c] as [B, H, c, r]: t, the operand x describes, or NULL when x is a packed
 * virtual tensor. */
static cudnnBackendDescriptor_t transposed(graph_builder *g, cudnnBackendDescriptor_t x, const gpucore_attn_tensor *t,
                                           cudnnDataType_t dt, int64_t B, int64_t H, int64_t r, int64_t c)
{
    const int64_t xd[4] = {B, H, r, c}, packed[4] = {H * r * c, r * c, c, 1};
    int64_t xs[4];
    fix_strides(xd, t ? t->stride : packed, xs);
    const int64_t d[4] = {B, H, c, r}, st[4] = {xs[0], xs[1], xs[3], xs[2]};
    return reshape(g, x, tensor(g, 0, dt, d, st, 16, 0));
}

/* S = scale·q·kᵀ [+ mask], with -inf past kv_len and (causal) above the diagonal; kt is [B, H, D, Sk]. */
static cudnnBackendDescriptor_t scores(graph_builder *g, const gpucore_attn_args *a, cudnnBackendDescriptor_t tq,
                                       cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale)
{
    const int64_t sd[4] = {a->batch, a->heads, a->seq_q, a->seq_k}, one[4] = {1, 1, 1, 1};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b8 = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t neginf = a->kv_len || a->causal ? tensor(g, UID_NEGINF, f32, one, one, 4, 1) : NULL;
    cudnnBackendDescriptor_t s = matmul(g, tq, kt, vtensor(g, f32, sd));
    s = pointwise(g, CUDNN_POINTWISE_MUL, s, scale, NULL, vtensor(g, f32, sd), 0);
    if (a->mask_dtype != GPUCORE_ATTN_NO_MASK) {
        int64_t md[4], ms[4];
        for (int i = 0; i < 4; i++) md[i] = a->mask.stride[i] == 0 ? 1 : sd[i];
        fix_strides(md, a->mask.stride, ms);
        cudnnBackendDescriptor_t tm = tensor(g, UID_MASK, dnn_type(a->mask_dtype), md, ms, conv_align_of(a->mask.data), 0);
        s = pointwise(g, CUDNN_POINTWISE_ADD, s, tm, NULL, vtensor(g, f32, sd), 0);
    }
    if (a->kv_len) {
        const int64_t ld[4] = {a->batch, 1, 1, 1};
        cudnnBackendDescriptor_t len = tensor(g, UID_SEQLEN, i32, ld, one, conv_align_of(a->kv_len), 0);
        cudnnBackendDescriptor_t col = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, vtensor(g, i32, sd), 3);
        cudnnBackendDescriptor_t ok = pointwise(g, CUDNN_POINTWISE_CMP_LT, col, len, NULL, vtensor(g, b8, sd), 0);
        s = pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, s, neginf, ok, vtensor(g, f32, sd), 0);
    }
    if (a->causal) {
        cudnnBackendDescriptor_t row = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, vtensor(g, i32, sd), 2);
        cudnnBackendDescriptor_t col = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, vtensor(g, i32, sd), 3);
        cudnnBackendDescriptor_t ok = pointwise(g, CUDNN_POINTWISE_CMP_GE, row, col, NULL, vtensor(g, b8, sd), 0);
        s = pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, s, neginf, ok, vtensor(g, f32, sd), 0);
    }
    return s;
}

/* A row may admit no key only through a mask or kv_lengths: then the graphs clamp what would give NaN. */
static int needs_guard(const gpucore_attn_args *a)
{
    return a->mask_dtype != GPUCORE_ATTN_NO_MASK || a->kv_len != NULL;
}

/* Forward: out (and stats = lse) from q, k, v. */
static void forward_nodes(graph_builder *g, const gpucore_attn_args *a)
{
    const int64_t B = a->batch, H = a->heads, Sq = a->seq_q, Sk = a->seq_k, D = a->head_dim, Dv = a->head_dim_v;
    const cudnnDataType_t dt = dnn_type(a->dtype), f32 = CUDNN_DATA_FLOAT;
    const int64_t sd[4] = {B, H, Sq, Sk}, rd[4] = {B, H, Sq, 1}, one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t tq = operand(g, UID_Q, a->dtype, &a->q, B, H, Sq, D, 0);
    cudnnBackendDescriptor_t kt = operand(g, UID_K, a->dtype, &a->k, B, H, D, Sk, 1); /* Kᵀ: a view */
    cudnnBackendDescriptor_t tv = operand(g, UID_V, a->dtype, &a->v, B, H, Sk, Dv, 0);
    cudnnBackendDescriptor_t to = operand(g, UID_O, a->dtype, &a->out, B, H, Sq, Dv, 0);
    cudnnBackendDescriptor_t s = scores(g, a, tq, kt, tensor(g, UID_SCALE, f32, one, one, 4, 1));
    cudnnBackendDescriptor_t m = reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, vtensor(g, f32, rd));
    if (needs_guard(a))
        m = pointwise(g, CUDNN_POINTWISE_MAX, m, tensor(g, UID_LOWEST, f32, one, one, 4, 1), NULL, vtensor(g, f32, rd), 0);
    cudnnBackendDescriptor_t e = pointwise(g, CUDNN_POINTWISE_SUB, s, m, NULL, vtensor(g, f32, sd), 0);
    e = pointwise(g, CUDNN_POINTWISE_EXP, e, NULL, NULL, vtensor(g, f32, sd), 0);
    cudnnBackendDescriptor_t l = reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, vtensor(g, f32, rd));
    if (a->lse) {
        const int64_t ss[4] = {H * Sq, Sq, 1, 1};
        cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, f32, rd, ss, conv_align_of(a->lse), 0);
        cudnnBackendDescriptor_t logl = pointwise(g, CUDNN_POINTWISE_LOG, l, NULL, NULL, vtensor(g, f32, rd), 0);
        pointwise(g, CUDNN_POINTWISE_ADD, m, logl, NULL, stats, 0);
    }
    if (needs_guard(a))
        l = pointwise(g, CUDNN_POINTWISE_MAX, l, tensor(g, UID_TINY, f32, one, one, 4, 1), NULL, vtensor(g, f32, rd), 0);
    /* P in the I/O dtype: the P·V matmul of cuDNN's fused engines (and of flash attention) takes half inputs */
    cudnnBackendDescriptor_t p = pointwise(g, CUDNN_POINTWISE_DIV, e, l, NULL, vtensor(g, dt, sd), 0);
    matmul(g, p, tv, to);
}

/* Backward: P = exp(S - stats); dV = Pᵀ·dO; dP = dO·Vᵀ; Δ = Σ_d dO∘O; dS = scale·P∘(dP - Δ); dQ = dS·K;
 * dK = dSᵀ·Q (each gradient only when wanted). */
static void backward_nodes(graph_builder *g, const gpucore_attn_args *a)
{
    const int64_t B = a->batch, H = a->heads, Sq = a->seq_q, Sk = a->seq_k, D = a->head_dim, Dv = a->head_dim_v;
    const cudnnDataType_t dt = dnn_type(a->dtype), f32 = CUDNN_DATA_FLOAT;
    const int64_t sd[4] = {B, H, Sq, Sk}, rd[4] = {B, H, Sq, 1}, od[4] = {B, H, Sq, Dv}, one[4] = {1, 1, 1, 1};
    const int64_t ss[4] = {H * Sq, Sq, 1, 1};
    cudnnBackendDescriptor_t tq = operand(g, UID_Q, a->dtype, &a->q, B, H, Sq, D, 0);
    cudnnBackendDescriptor_t tk = operand(g, UID_K, a->dtype, &a->k, B, H, Sk, D, 0);
    cudnnBackendDescriptor_t tv = operand(g, UID_V, a->dtype, &a->v, B, H, Sk, Dv, 0);
    cudnnBackendDescriptor_t to = operand(g, UID_O, a->dtype, &a->out, B, H, Sq, Dv, 0);
    cudnnBackendDescriptor_t tdo = operand(g, UID_DO, a->dtype, &a->dout, B, H, Sq, Dv, 0);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, f32, rd, ss, conv_align_of(a->lse), 0);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, f32, one, one, 4, 1);
    cudnnBackendDescriptor_t s = scores(g, a, tq, transposed(g, tk, &a->k, dt, B, H, Sk, D), scale);
    if (needs_guard(a)) /* a row that admits no key has stats -inf: P = exp(-inf + FLT_MAX) = 0, not NaN */
        stats = pointwise(g, CUDNN_POINTWISE_MAX, stats, tensor(g, UID_LOWEST, f32, one, one, 4, 1), NULL,
                          vtensor(g, f32, rd), 0);
    cudnnBackendDescriptor_t p = pointwise(g, CUDNN_POINTWISE_SUB, s, stats, NULL, vtensor(g, f32, sd), 0);
    p = pointwise(g, CUDNN_POINTWISE_EXP, p, NULL, NULL, vtensor(g, f32, sd), 0);
    if (a->dv.data) {
        cudnnBackendDescriptor_t ph = pointwise(g, CUDNN_POINTWISE_IDENTITY, p, NULL, NULL, vtensor(g, dt, sd), 0);
        /* (P cast to the I/O dtype for the Pᵀ·dO matmul) */
        matmul(g, transposed(g, ph, NULL, dt, B, H, Sq, Sk), tdo, operand(g, UID_DV, a->dtype, &a->dv, B, H, Sk, Dv, 0));
    }
    if (!a->dq.data && !a->dk.data) return;
    cudnnBackendDescriptor_t dp = matmul(g, tdo, transposed(g, tv, &a->v, dt, B, H, Sk, Dv), vtensor(g, f32, sd));
    cudnnBackendDescriptor_t delta = pointwise(g, CUDNN_POINTWISE_MUL, tdo, to, NULL, vtensor(g, f32, od), 0);
    delta = reduction(g, CUDNN_REDUCE_TENSOR_ADD, delta, vtensor(g, f32, rd));
    cudnnBackendDescriptor_t ds = pointwise(g, CUDNN_POINTWISE_SUB, dp, delta, NULL, vtensor(g, f32, sd), 0);
    ds = pointwise(g, CUDNN_POINTWISE_MUL, p, ds, NULL, vtensor(g, f32, sd), 0);
    ds = pointwise(g, CUDNN_POINTWISE_MUL, ds, scale, NULL, vtensor(g, dt, sd), 0);
    if (a->dq.data) matmul(g, ds, tk, operand(g, UID_DQ, a->dtype, &a->dq, B, H, Sq, D, 0));
    if (a->dk.data)
        matmul(g, transposed(g, ds, NULL, dt, B, H, Sq, Sk), tq, operand(g, UID_DK, a->dtype, &a->dk, B, H, Sk, D, 0));
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

static const float NEG_INF = -INFINITY, LOWEST = -FLT_MAX, TINY = FLT_MIN;

static cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const gpucore_attn_args *a,
                             const float *scale, cudaStream_t stream)
{
    int64_t uids[16];
    void *ptrs[16];
    int n = 0;
#define PUT(u, p) (uids[n] = (u), ptrs[n++] = (void *)(p))
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    PUT(UID_Q, a->q.data); PUT(UID_K, a->k.data); PUT(UID_V, a->v.data); PUT(UID_O, a->out.data);
    PUT(UID_SCALE, scale);
    if (a->kv_len || a->causal) PUT(UID_NEGINF, &NEG_INF);
    if (a->lse) PUT(UID_STATS, a->lse);
    if (a->mask_dtype != GPUCORE_ATTN_NO_MASK) PUT(UID_MASK, a->mask.data);
    if (a->kv_len) PUT(UID_SEQLEN, a->kv_len);
    if (needs_guard(a)) PUT(UID_LOWEST, &LOWEST);
    if (needs_guard(a) && !bwd) PUT(UID_TINY, &TINY);
    if (bwd) PUT(UID_DO, a->dout.data);
    if (bwd && a->dq.data) PUT(UID_DQ, a->dq.data);
    if (bwd && a->dk.data) PUT(UID_DK, a->dk.data);
    if (bwd && a->dv.data) PUT(UID_DV, a->dv.data);
#undef PUT
    cudnnBackendDescriptor_t vp = NULL;
    void *ws = NULL;
    cudnnStatus_t s = DNN.cudnnSetStream(h, stream);
    if (!s) s = DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!s) s = DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!s) s = DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!s) s = DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!s) s = DNN.cudnnBackendFinalize(vp);
    if (!s) s = DNN.cudnnBackendExecute(h, plan, vp);
    if (vp) DNN.cudnnBackendDestroyDescriptor(vp);
    return s;
}

/* Best of 3 timed runs after a warm-up, in ms (< 0: failed). */
static float time_plan(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const gpucore_attn_args *a, cudaStream_t stream)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    float best = -1.0f;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
        execute(h, plan, a, &a->scale, stream) == CUDNN_STATUS_SUCCESS) {
        for (int i = 0; i < 3; i++) {
            float ms = 0;
            if (cudaEventRecord(e0, stream) || execute(h, plan, a, &a->scale, stream) || cudaEventRecord(e1, stream) ||
                cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms, e0, e1)) { best = -1.0f; break; }
            if (best < 0 || ms < best) best = ms;
        }
    }
    cudaStreamSynchronize(stream); /* nothing of this plan in flight when the caller destroys it */
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return best;
}

/* A plan for a's graph by a->algo, or NULL (reason set). Caller holds sdpa_lock. */
static cudnnBackendDescriptor_t make_plan(cudnnHandle_t h, const gpucore_attn_args *a, cudaStream_t stream, int *reason)
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
    for (int64_t i = 0; i < n; i++) {
        if (!conv_config_allowed(cfgs[i], &notes)) continue;
        int64_t ws = 0;
        cudnnBackendDescriptor_t plan = conv_make_plan(h, cfgs[i], &ws);
        if (!plan) continue;
        if (ws > 0) { DNN.cudnnBackendDestroyDescriptor(plan); continue; }
        if (a->algo != GPUCORE_ATTN_ALGO_AUTOTUNE) { best = plan; break; }
        float ms = time_plan(h, plan, a, stream);
        timed++;
        if (ms >= 0 && (best_ms < 0 || ms < best_ms)) {
            if (best) DNN.cudnnBackendDestroyDescriptor(best);
            best = plan;
            best_ms = ms;
        } else {
            DNN.cudnnBackendDestroyDescriptor(plan);
        }
        if (timed >= SDPA_AUTOTUNE_MAX) break;
    }
    for (int64_t i = 0; i < n; i++) DNN.cudnnBackendDestroyDescriptor(cfgs[i]);
    DNN.cudnnBackendDestroyDescriptor(graph);
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
}

/* gpucore_attention_fallback_reason in a word or two, for the log. */
static const char *reason_word(int r)
{
    static const char *const words[GPUCORE_ATTN_FALLBACK_REASONS] = {
        "cuDNN could not be loaded", "f32 operands", "head_dim not a multiple of 8", "head_dim stride not 1",
        "boolean mask or i64 kv_lengths", "dropout", "grouped-query attention", "no usable engine",
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
    if (a->kv_heads != a->heads) return GPUCORE_ATTN_FALLBACK_GQA;
    return -1;
}

/* The entry for a's key (built on a miss), or NULL when the cache is full. Caller holds sdpa_lock. */
static sdpa_entry *lookup_locked(const gpucore_attn_args *a, int dev, cudaStream_t stream)
{
    sdpa_key key;
    key_of(a, dev, &key);
    for (int i = 0; i < sdpa_count; i++)
        if (memcmp(&sdpa_cache[i]->key, &key, sizeof key) == 0) return sdpa_cache[i];
    if (sdpa_count == SDPA_CAPACITY) return NULL;
    sdpa_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->key = key;
    e->reason = decline(a);
    if (e->reason < 0 && cuda_cudnn_load("attention") != GPUCORE_OK) e->reason = GPUCORE_ATTN_FALLBACK_NO_CUDNN;
    if (e->reason < 0) {
        if (!sdpa_handles[dev] && DNN.cudnnCreate(&sdpa_handles[dev]) != CUDNN_STATUS_SUCCESS) {
            sdpa_handles[dev] = NULL;
            e->reason = GPUCORE_ATTN_FALLBACK_FAILED;
        } else {
            e->plan = make_plan(sdpa_handles[dev], a, stream, &e->reason);
        }
    }
    if (!e->plan)
        cuda_host->log(GPUCORE_LOG_WARN, "attention: cuDNN's SDPA does not run this %s (%s, B %lld H %lld Hkv %lld "
                       "Sq %lld Sk %lld D %lld Dv %lld): %s; the attention kernel runs instead",
                       a->op == GPUCORE_ATTN_BWD ? "backward" : "forward",
                       a->dtype == GPUCORE_F16 ? "f16" : a->dtype == GPUCORE_BF16 ? "bf16" : "f32", (long long)a->batch,
                       (long long)a->heads, (long long)a->kv_heads, (long long)a->seq_q, (long long)a->seq_k,
                       (long long)a->head_dim, (long long)a->head_dim_v, reason_word(e->reason));
    sdpa_cache[sdpa_count++] = e;
    return e;
}

gpucore_status cuda_attention(void *bctx, const gpucore_attn_args *a, void *stream)
{
    const int dev = ((cuda_context *)bctx)->device;
    if (a->algo == GPUCORE_ATTN_ALGO_KERNEL || dev < 0 || dev >= SDPA_MAX_DEVICES)
        return kops_attention(bctx, a, stream);
    CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
    const cudaStream_t cs = (cudaStream_t)stream;
    int reason = GPUCORE_ATTN_FALLBACK_CACHE_FULL;
    pthread_mutex_lock(&sdpa_lock);
    sdpa_entry *e = lookup_locked(a, dev, cs);
    if (e && e->plan) {
        reason = -1;
        if (execute(sdpa_handles[dev], e->plan, a, &a->scale, cs) != CUDNN_STATUS_SUCCESS) {
            reason = GPUCORE_ATTN_FALLBACK_FAILED;
            cuda_host->log(GPUCORE_LOG_WARN, "attention: running cuDNN's SDPA plan failed; the attention kernel "
                           "runs instead");
        }
    } else if (e) {
        reason = e->reason;
    } else if (!sdpa_full_warned) {
        sdpa_full_warned = 1;
        cuda_host->log(GPUCORE_LOG_WARN, "attention: the cuDNN SDPA plan cache is full (%d shapes); new shapes run "
                       "the attention kernel", SDPA_CAPACITY);
    }
    pthread_mutex_unlock(&sdpa_lock);
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
