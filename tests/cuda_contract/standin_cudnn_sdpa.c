/*
 * standin_cudnn_sdpa.c — the cuDNN stand-in's operation-graph interpreter for the
 * SDPA graph the CUDA backend builds (src/backend/cuda/cuda_attention_cudnn.c):
 * matmul, reduction (ADD, MAX), reshape (a view: transposes) and pointwise nodes
 * (ADD MUL SUB DIV MAX EXP LOG IDENTITY CMP_LT CMP_GE GEN_INDEX BINARY_SELECT, and
 * conv's RELU_FWD), 4-d tensors, by-value scalars.
 *
 * Checked when a node is finalized, citing cudnn_graph_v9.h: the inputs each mode
 * needs (unary modes take no b, BINARY_SELECT needs b and a BOOLEAN t, comparisons
 * give BOOLEAN, GEN_INDEX needs an axis inside y's dims and an integer y),
 * broadcasting (each input dim equals y's or is 1), matmul shapes ([.., M, K] x
 * [.., K, N] -> [.., M, N], batch dims equal or 1), reduction shapes (y's dims are
 * x's or 1), by-value tensors (not virtual, one element); grouped heads (GQA/MQA) as
 * cudnn-frontend's SDPA graphs use them: dim 1 (heads) of a 4-d matmul operand or
 * reduction output may also divide the full head count (each of its heads serves a
 * group of consecutive heads), nowhere else. Modes and operators not
 * listed are refused as not modelled. At execution: every non-virtual tensor bound
 * exactly once in the variant pack, device ranges for the others, every virtual
 * tensor written by a node before it is read (a topological order exists).
 * Executed: the nodes in topological order, in double with each virtual tensor
 * rounded to its dtype (f32 intermediates, a half P), on the stream's worker, after
 * engine 0 has scribbled over its whole workspace (its scratch).
 * Heuristics: an engine only for cudnn-frontend's SDPA pattern (sdpa_pattern below;
 * the reason for a refusal: standin_sdpa_refusal, counter cudnn_sdpa_pattern_refused).
 * The stand-in's engines take head dims up to 128 (heuristics offer none above).
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "numeric.h"
#include "standin_cudnn.h"

#define MAX_T 64
#define MAX_OPS 48
#define NODE_IN 5 /* x, b, t of a pointwise node; a, b and the M, N, K overrides of a matmul */

static int64_t tdim(const desc *t, int i) { return i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, i); }
static int tndims(const desc *t) { const attr *a = get_attr(t, CUDNN_ATTR_TENSOR_DIMENSIONS); return a ? (int)a->count : 0; }
static int tflag(const desc *t, int name) { const attr *a = get_attr(t, name); return a && *(bool *)a->data; }
static int tdtype(const desc *t) { return i32(t, CUDNN_ATTR_TENSOR_DATA_TYPE); }

static int is_unary(int m)
{
    return m == CUDNN_POINTWISE_EXP || m == CUDNN_POINTWISE_LOG || m == CUDNN_POINTWISE_GEN_INDEX ||
           m == CUDNN_POINTWISE_RELU_FWD || m == CUDNN_POINTWISE_IDENTITY;
}

/* Offset of dense element e of a 4-d tensor descriptor under its strides. */
static int64_t offset_of(const desc *t, int64_t e)
{
    int64_t off = 0;
    for (int k = 3; k >= 0; k--) {
        int64_t n = i64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, k);
        off += (e % n) * i64(t, CUDNN_ATTR_TENSOR_STRIDES, k);
        e /= n;
    }
    return off;
}

static int64_t numel_of(const desc *t)
{
    int64_t n = 1;
    const attr *a = get_attr(t, CUDNN_ATTR_TENSOR_DIMENSIONS);
    for (int64_t k = 0; a && k < a->count; k++) n *= ((int64_t *)a->data)[k];
    return n;
}

/* For a reshape y of x (same elements, other dims/strides: a view), the dense index of x behind each element of y;
 * NULL when y is not a view of x (an offset of y that x does not have). */
static int64_t *reshape_map(const desc *x, const desc *y)
{
    const int64_t n = numel_of(x);
    if (n != numel_of(y) || tndims(x) != 4 || tndims(y) != 4) return NULL;
    int64_t span = 0;
    for (int64_t e = 0; e < n; e++) { int64_t o = offset_of(x, e); if (o > span) span = o; }
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(span + 1)), *map = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t o = 0; o <= span; o++) at[o] = -1;
    for (int64_t e = 0; e < n; e++) at[offset_of(x, e)] = e;
    for (int64_t e = 0; e < n && map; e++) {
        int64_t o = offset_of(y, e);
        if (o > span || at[o] < 0) { free(map); map = NULL; }
        else map[e] = at[o];
    }
    free(at);
    return map;
}
static int is_binary(int m)
{
    return m == CUDNN_POINTWISE_ADD || m == CUDNN_POINTWISE_MUL || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_DIV ||
           m == CUDNN_POINTWISE_MAX || m == CUDNN_POINTWISE_CMP_LT || m == CUDNN_POINTWISE_CMP_GE ||
           m == CUDNN_POINTWISE_LOGICAL_AND;
}

/* Each dim of x equals y's or is 1 (same rank). */
static int broadcasts(const desc *x, const desc *y)
{
    if (tndims(x) != tndims(y)) return 0;
    for (int i = 0; i < tndims(y); i++)
        if (tdim(x, i) != tdim(y, i) && tdim(x, i) != 1) return 0;
    return 1;
}

/* Grouped heads: x's dim 1 of 4 divides `full` heads (cudnn-frontend's SDPA: K/V of h_k heads against Q's h_q,
 * validated h_q % h_k == 0 at scaled_dot_product_flash_attention.h:1169; dK/dV summed per group of h_q/h_k
 * consecutive heads at :1780 and :1892, "b (hk g) skv d -> b hk skv d"). */
static int grouped_heads(const desc *x, int64_t full)
{
    return tndims(x) == 4 && tdim(x, 1) > 0 && tdim(x, 1) < full && full % tdim(x, 1) == 0;
}

cudnnStatus_t standin_sdpa_finalize(desc *d)
{
    const char *api = "cudnnBackendFinalize";
    if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR && tflag(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE)) {
        if (tflag(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":590", "a by-value tensor (CUDNN_ATTR_TENSOR_IS_BY_VALUE) "
                          "cannot be virtual (" G ":589): its value comes from the variant pack");
        for (int i = 0; i < tndims(d); i++)
            if (tdim(d, i) != 1)
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":590", "a by-value tensor holds one scalar; dim %d is %lld",
                              i, (long long)tdim(d, i));
    }
    if (d->type == CUDNN_BACKEND_POINTWISE_DESCRIPTOR) {
        int m = i32(d, CUDNN_ATTR_POINTWISE_MODE);
        if (!is_unary(m) && !is_binary(m) && m != CUDNN_POINTWISE_BINARY_SELECT)
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":475", "pointwise mode %d is not modelled by the stand-in", m);
        if (m != CUDNN_POINTWISE_GEN_INDEX && get_attr(d, CUDNN_ATTR_POINTWISE_AXIS))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":484", "CUDNN_ATTR_POINTWISE_AXIS is for GEN_INDEX, not mode %d", m);
    }
    if (d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
        const desc *pw = ref(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0);
        const desc *x = ref(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, 0), *b = ref(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, 0);
        const desc *t = ref(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, 0), *y = ref(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 0);
        int m = i32(pw, CUDNN_ATTR_POINTWISE_MODE);
        if (is_unary(m) && (b || t))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":544", "pointwise mode %d takes one input; BDESC/TDESC set", m);
        if (is_binary(m) && (!b || t))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":544", "pointwise mode %d takes x and b (" G ":544) and no t", m);
        if (m == CUDNN_POINTWISE_BINARY_SELECT && (!b || !t || tdtype(t) != CUDNN_DATA_BOOLEAN))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":550", "BINARY_SELECT needs x, b and a BOOLEAN t (" G ":550)");
        if ((m == CUDNN_POINTWISE_CMP_LT || m == CUDNN_POINTWISE_CMP_GE || m == CUDNN_POINTWISE_LOGICAL_AND) &&
            tdtype(y) != CUDNN_DATA_BOOLEAN)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":234", "a comparison's (or LOGICAL_AND's) y must be "
                          "CUDNN_DATA_BOOLEAN (" G ":234)");
        if (m == CUDNN_POINTWISE_GEN_INDEX) {
            const attr *ax = get_attr(pw, CUDNN_ATTR_POINTWISE_AXIS);
            if (!ax || *(int64_t *)ax->data < 0 || *(int64_t *)ax->data >= tndims(y))
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":484", "GEN_INDEX needs CUDNN_ATTR_POINTWISE_AXIS (" G
                              ":484) inside y's %d dims", tndims(y));
            if (tdtype(y) != CUDNN_DATA_INT32 && tdtype(y) != CUDNN_DATA_INT64)
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":227", "GEN_INDEX writes an integer y (INT32, " G ":227)");
        }
        const desc *in[3] = {x, b, t};
        for (int i = 0; i < 3; i++)
            if (in[i] && m != CUDNN_POINTWISE_GEN_INDEX && !broadcasts(in[i], y))
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":543", "pointwise input %d does not broadcast to y (each "
                              "dim must equal y's or be 1)", i);
        if (m == CUDNN_POINTWISE_GEN_INDEX && tndims(x) != tndims(y))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":543", "GEN_INDEX: x and y ranks differ");
    }
    if (d->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
        const desc *x = ref(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, 0), *y = ref(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, 0);
        /* x's dtype, except between two virtual tensors: cudnn-frontend's SDPA backward gives its reshape_p and
         * reshape_dS outputs the I/O dtype (scaled_dot_product_flash_attention.h, CompositeSDPABackwardNode) */
        const int cast_ok = tflag(x, CUDNN_ATTR_TENSOR_IS_VIRTUAL) && tflag(y, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
        int64_t *map = tdtype(x) == tdtype(y) || cast_ok ? reshape_map(x, y) : NULL;
        if (!map)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":722", "reshape: y (" G ":723) must hold x's elements, of "
                          "x's dtype unless both are virtual, as a view of x's layout (the stand-in models 4-d views "
                          "such as transposes)");
        free(map);
    }
    if (d->type == CUDNN_BACKEND_REDUCTION_DESCRIPTOR) {
        int op = i32(d, CUDNN_ATTR_REDUCTION_OPERATOR);
        if (op != CUDNN_REDUCE_TENSOR_ADD && op != CUDNN_REDUCE_TENSOR_MAX)
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":632", "reduction operator %d is not modelled", op);
    }
    if (d->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        const desc *x = ref(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0), *y = ref(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, 0);
        int ok = tndims(x) == tndims(y);
        for (int i = 0; ok && i < tndims(y); i++)
            ok = tdim(y, i) == tdim(x, i) || tdim(y, i) == 1 || (i == 1 && grouped_heads(y, tdim(x, 1)));
        if (!ok)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":637", "reduction y must have x's rank with each dim x's or 1 "
                          "(or, dim 1 of 4, a divisor of x's: the frontend's grouped-head reduction)");
    }
    if (d->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        const desc *a = ref(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC, 0), *b = ref(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC, 0);
        const desc *c = ref(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC, 0);
        int n = tndims(c);
        if (n < 2 || tndims(a) != n || tndims(b) != n)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":623", "matmul operands need one rank >= 2");
        if (tdim(a, n - 1) != tdim(b, n - 2) || tdim(c, n - 2) != tdim(a, n - 2) || tdim(c, n - 1) != tdim(b, n - 1))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":623", "matmul shapes: a [.., %lld, %lld] x b [.., %lld, %lld] "
                          "-> c [.., %lld, %lld] (" G ":623-625)", (long long)tdim(a, n - 2), (long long)tdim(a, n - 1),
                          (long long)tdim(b, n - 2), (long long)tdim(b, n - 1), (long long)tdim(c, n - 2),
                          (long long)tdim(c, n - 1));
        static const int ovn[3] = {CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                                   CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                                   CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC};
        for (int k = 0; k < 3; k++) {
            const desc *o = ref(d, ovn[k], 0);
            if (o && (tndims(o) != n || tdtype(o) != CUDNN_DATA_INT32 || tflag(o, CUDNN_ATTR_TENSOR_IS_VIRTUAL) ||
                      tdim(o, 0) != tdim(c, 0) || tdim(o, n - 1) != 1 || tdim(o, n - 2) != 1 || (n > 3 && tdim(o, 1) != 1)))
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":628", "a GEMM %c override is a non-virtual INT32 "
                              "[B, 1, 1, 1] tensor (one extent per batch entry)", "MNK"[k]);
        }
        for (int i = 0; i < n - 2; i++)
            if ((tdim(a, i) != tdim(c, i) && tdim(a, i) != 1 && !(i == 1 && grouped_heads(a, tdim(c, 1)))) ||
                (tdim(b, i) != tdim(c, i) && tdim(b, i) != 1 && !(i == 1 && grouped_heads(b, tdim(c, 1)))))
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":625", "matmul batch dim %d: a %lld, b %lld, c %lld", i,
                              (long long)tdim(a, i), (long long)tdim(b, i), (long long)tdim(c, i));
    }
    return CUDNN_STATUS_SUCCESS;
}

static const attr *graph_ops(const desc *graph) { return get_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS); }
static const desc *op_at(const desc *graph, int64_t i) { return ((desc **)graph_ops(graph)->data)[i]; }

int standin_sdpa_is_graph(const desc *graph)
{
    for (int64_t i = 0; i < graph_ops(graph)->count; i++)
        if (op_at(graph, i)->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) return 1;
    return 0;
}

/* ---- the pattern cuDNN's fused SDPA engines take ----
 * cuDNN's fused flash-attention engines recognise the operation graphs cudnn-frontend emits
 * (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h: CompositeSDPANode for the forward,
 * CompositeSDPABackwardNode for the backward; node/softmax.h: CompositeSoftmaxNode;
 * utils/attn_score_modifiers.h: bias, padding_mask; node/diagonal_band_mask.h: CompositeDiagonalBandMaskNode, the
 * causal mask); another DAG of the same node types computes the same values but gets no engine. The matcher
 * walks back from the outputs and accepts exactly those graphs (the scale as a by-value tensor, an optional
 * additive bias, the padding mask, the top-left causal mask, no dropout): every node of the graph must be one of
 * the pattern's, and the graph's node list must be in the order the frontend emits them (its nodes' creation
 * order, composite nodes expanded in place: node_interface.h create_cudnn_operations walks sub_nodes in order;
 * cudnn_interface.h create_cudnn_operation_graph passes that list on). The names and lines cited are
 * cudnn-frontend 1.23.0's (the same order at 1.12.0 and 1.16.0); each node is named as the frontend names it. */

#define FE "cudnn-frontend 1.23.0 include/cudnn_frontend/"
#define FE_SDPA FE "node/scaled_dot_product_flash_attention.h:"
#define FE_MOD FE "utils/attn_score_modifiers.h:"
#define FE_BAND FE "node/diagonal_band_mask.h:"
#define FE_SOFTMAX FE "node/softmax.h:"

typedef struct fe_node { const char *name, *where; } fe_node;

/* attn_score_modifiers.h padding_mask() (called at sdpa :759 forward, :1624 backward), and the backward's second
 * padding on cuDNN 9.0.0-9.9.x (sdpa :1637-1686) */
static const fe_node FE_PADDING[2][6] = {
    {{"gen_row_idx_padding", FE_MOD "55"}, {"gen_col_idx_padding", FE_MOD "63"}, {"lt_row_sq_padding", FE_MOD "71"},
     {"lt_col_skv_padding", FE_MOD "79"}, {"and_row_col_padding", FE_MOD "87"}, {"select_padding", FE_MOD "96"}},
    {{"gen_row_idx_2nd_padding", FE_SDPA "1639"}, {"gen_col_idx_2nd_padding", FE_SDPA "1647"},
     {"lt_row_sq_2nd_padding", FE_SDPA "1655"}, {"lt_col_skv_2nd_padding", FE_SDPA "1663"},
     {"and_row_col_2nd_padding", FE_SDPA "1671"}, {"select_2nd_padding", FE_SDPA "1681"}}};
/* the causal mask: sliding_window_mask() right bound 0 (attn_score_modifiers.h:195, called at sdpa :802 forward,
 * :1701 backward) -> CompositeDiagonalBandMaskNode::expand_node */
static const fe_node FE_CAUSAL[4] = {{"gen_row_index", FE_BAND "120"}, {"gen_col_index", FE_BAND "124"},
                                     {"row>col", FE_BAND "171"}, {"binary_select", FE_BAND "234"}};
/* CompositeSoftmaxNode::expand_node (called at sdpa :824) */
static const fe_node FE_SOFTMAX_NODES[7] = {{"Max", FE_SOFTMAX "150"}, {"sub", FE_SOFTMAX "155"},
                                            {"exp", FE_SOFTMAX "159"}, {"sum", FE_SOFTMAX "192"},
                                            {"log", FE_SOFTMAX "206"}, {"add", FE_SOFTMAX "211"},
                                            {"div", FE_SOFTMAX "217"}};
static const fe_node FE_BIAS = {"bias_add", FE_MOD "156"}; /* bias() (called at sdpa :741 forward, :1606 backward) */
/* CompositeSDPANode::expand_node */
static const fe_node FE_BMM1 = {"bmm1", FE_SDPA "690"}, FE_ATTN_SCALE = {"attn_scale", FE_SDPA "706"},
                     FE_BMM2 = {"bmm2", FE_SDPA "950"};
/* CompositeSDPABackwardNode::expand_node */
enum { B_MUL_DO_O, B_REDUCE_DO_O, B_SCALE_DROPOUT_INV, B_MATMUL_Q_KT, B_MUL_S_ATTN_SCALE, B_SUB_S_M, B_EXP_S,
       B_RESHAPE_P, B_MATMUL_PT_DO, B_MATMUL_DO_VT, B_SUB_DP_SOFTMAX_SUM, B_MUL_DP_EXP_S, B_MUL_DS_ATTN_SCALE,
       B_RESHAPE_DS, B_MATMUL_DST_Q, B_RESHAPE_K, B_MATMUL_DS_K, B_IDENTITY_DQ, B_NODES };
static const fe_node FE_BWD[B_NODES] = {
    {"mul_dO_O", FE_SDPA "1517"}, {"reduce_dO_o", FE_SDPA "1524"}, {"scale_dropout_inv", FE_SDPA "1550"},
    {"matmul_Q_KT", FE_SDPA "1577"}, {"mul_s_attn_scale", FE_SDPA "1587"}, {"sub_s_m", FE_SDPA "1632"},
    {"exp_s", FE_SDPA "1714"}, {"reshape_p", FE_SDPA "1737"}, {"matmul_pT_dO", FE_SDPA "1743"},
    {"matmul_dO_VT", FE_SDPA "1788"}, {"sub_dP_softmax_sum", FE_SDPA "1804"}, {"mul_dP_exp_s", FE_SDPA "1809"},
    {"mul_dS_attn_scale", FE_SDPA "1837"}, {"reshape_dS", FE_SDPA "1848"}, {"matmul_dST_Q", FE_SDPA "1854"},
    {"reshape_k", FE_SDPA "1904"}, {"matmul_dS_K", FE_SDPA "1931"}, {"identity_dQ", FE_SDPA "1939"}};
/* with grouped K/V heads (h_q != h_v, h_q != h_k): matmul_pT_dO (:1752) and matmul_dST_Q (:1863) write a virtual
 * [b, h_q, s_kv, d] dV_fullhead / dK_fullhead, each followed by its head reduction */
static const fe_node FE_RED_HEAD[2] = {{"red_dV_head", FE_SDPA "1780"}, {"red_dK_head", FE_SDPA "1892"}};

static int node_io(const desc *op, const desc *in[NODE_IN], const desc **out);

typedef struct pmatch {
    const desc *graph;
    int nops, used[MAX_OPS];
    const desc *ops[MAX_OPS];    /* the graph's node list as the matcher sees it (STANDIN_SDPA_SWAP) */
    const fe_node *role[MAX_OPS]; /* the frontend's node each matched node is */
    int bias, padding, padding2, causal, identity, red_head[2]; /* the optional parts found (red_head: dV, dK) */
    char why[400];
} pmatch;

static _Thread_local char last_refusal[480]; /* per thread: builds run on several threads at once */

/* The reason the last SDPA graph the calling thread had searched got no engine ("" when it matched): for the tests. */
STANDIN_EXPORT const char *standin_sdpa_refusal(void) { return last_refusal; }

static int pfail(pmatch *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pfail(pmatch *p, const char *fmt, ...)
{
    if (p->why[0]) return 0; /* the first reason stands */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    return 0;
}

static int virt(const desc *t) { return tflag(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL); }
static int pw_mode(const desc *op)
{
    return op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
               ? i32(ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0), CUDNN_ATTR_POINTWISE_MODE) : -1;
}
static int pw_prec(const desc *op)
{
    return i32(ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0), CUDNN_ATTR_POINTWISE_MATH_PREC);
}
static int64_t pw_axis(const desc *op)
{
    return i64(ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0), CUDNN_ATTR_POINTWISE_AXIS, 0);
}
/* STANDIN_SDPA_CAUSAL_FIRST (tests): pointwise X inputs as the matcher sees them rewired, while it matches. */
/* Per thread: only the matching thread sees the rewiring (a stream worker executing a graph meanwhile reads the
 * nodes' real inputs through pin()). */
static _Thread_local struct { const desc *op, *x; } rewired[8];
static _Thread_local int nrewired;
static const desc *pin(const desc *op, int k)
{
    static const int names[3] = {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                 CUDNN_ATTR_OPERATION_POINTWISE_TDESC};
    for (int i = 0; k == 0 && i < nrewired; i++)
        if (rewired[i].op == op) return rewired[i].x;
    return ref(op, names[k], 0);
}
static const desc *mm(const desc *op, int name) { return ref(op, name, 0); }
#define MM_A CUDNN_ATTR_OPERATION_MATMUL_ADESC
#define MM_B CUDNN_ATTR_OPERATION_MATMUL_BDESC
#define MM_C CUDNN_ATTR_OPERATION_MATMUL_CDESC
#define MM_MO CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC
#define MM_NO CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC
#define MM_KO CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC

static int dims_are(const desc *t, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return tndims(t) == 4 && tdim(t, 0) == d0 && tdim(t, 1) == d1 && tdim(t, 2) == d2 && tdim(t, 3) == d3;
}

/* The index of the node writing t, or -1. */
static int writer_at(const pmatch *p, const desc *t)
{
    for (int i = 0; t && i < p->nops; i++) {
        const desc *in[NODE_IN], *out;
        if (node_io(p->ops[i], in, &out) && out == t) return i;
    }
    return -1;
}

/* Mark node op matched as the frontend's node `role`. */
static void use(pmatch *p, const desc *op, const fe_node *role)
{
    for (int i = 0; i < p->nops; i++)
        if (p->ops[i] == op) { p->used[i] = 1; p->role[i] = role; }
}

/* The node writing t, the frontend's node `role`; it must be of `type` (and pointwise `mode`, or reduction
 * operator `mode`, when >= 0) and not matched before. NULL (with the reason) otherwise. */
static const desc *producer(pmatch *p, const desc *t, int type, int mode, const fe_node *role)
{
    if (!t) return pfail(p, "%s: a tensor is missing", role->name), NULL;
    const int i = writer_at(p, t);
    if (i < 0) return pfail(p, "%s: no node writes this virtual tensor", role->name), NULL;
    const desc *op = p->ops[i];
    int m = op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ? pw_mode(op)
          : op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR
              ? i32(ref(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, 0), CUDNN_ATTR_REDUCTION_OPERATOR) : -1;
    if (op->type != type || (mode >= 0 && m != mode))
        return pfail(p, "%s (%s): the frontend has a node of type %d (mode %d) here, this graph type %d (mode %d)",
                     role->name, role->where, type, mode, op->type, m), NULL;
    if (p->used[i]) return pfail(p, "%s: a node reached twice", role->name), NULL;
    p->used[i] = 1;
    p->role[i] = role;
    return op;
}

/* A pointwise node of `mode` writing t with math precision `prec` (fp32 arithmetic, INT32 indices, BOOLEAN
 * comparisons, as the frontend's Pointwise_attributes set them). */
static const desc *pwop(pmatch *p, const desc *t, int mode, int prec, const fe_node *role)
{
    const desc *op = producer(p, t, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, mode, role);
    if (op && pw_prec(op) != prec)
        return pfail(p, "%s: math precision %d, the frontend's is %d", role->name, pw_prec(op), prec), NULL;
    return op;
}

/* A graph input: non-virtual, written by no node. */
static int is_input(pmatch *p, const desc *t, const char *what)
{
    if (!t || virt(t) || tflag(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE))
        return pfail(p, "%s must be a non-virtual tensor in device memory", what);
    if (writer_at(p, t) >= 0) return pfail(p, "%s must be a graph input", what);
    return 1;
}

static int is_scalar(pmatch *p, const desc *t, int dtype, const char *what)
{
    if (!t || !tflag(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE) || tdtype(t) != dtype)
        return pfail(p, "%s must be a by-value scalar of data type %d (the frontend's Tensor_attributes(value))",
                     what, dtype);
    return 1;
}

/* A non-virtual f32 [B, H, Sq, 1] tensor with the frontend's strides {H*Sq, Sq, 1, 1}. */
static int is_rowstat(pmatch *p, const desc *t, int64_t B, int64_t H, int64_t Sq, const char *what)
{
    if (!t || virt(t) || tdtype(t) != CUDNN_DATA_FLOAT || !dims_are(t, B, H, Sq, 1) ||
        i64(t, CUDNN_ATTR_TENSOR_STRIDES, 0) != H * Sq || i64(t, CUDNN_ATTR_TENSOR_STRIDES, 1) != Sq ||
        i64(t, CUDNN_ATTR_TENSOR_STRIDES, 2) != 1)
        return pfail(p, "%s must be a non-virtual FLOAT [B, H, Sq, 1] tensor, strides {H*Sq, Sq, 1, 1}", what);
    return 1;
}

typedef struct scores_m {
    const desc *q, *kt, *seq_q, *seq_kv; /* seq_*: the padding mask's lengths (NULL without one) */
    int64_t B, H, Sq, Sk;
} scores_m;

/* The matmul overrides the frontend sets: with padding, m/n/k override by the sequence lengths named. */
static int overrides(pmatch *p, const desc *op, const desc *m, const desc *n, const desc *k, const char *what)
{
    if (mm(op, MM_MO) != m || mm(op, MM_NO) != n || mm(op, MM_KO) != k)
        return pfail(p, "%s: GEMM M/N/K overrides differ from the frontend's (%s)", what,
                     m || n || k ? "the padding mask's seq_len_q / seq_len_kv" : "none without a padding mask");
    return 1;
}

/* What writes t: 0 not a BINARY_SELECT, 1 the causal mask's (its condition a CMP_GE), 2 a padding mask's (a
 * LOGICAL_AND), 3 another select. */
static int select_kind(const pmatch *p, const desc *t)
{
    const int i = writer_at(p, t);
    if (i < 0 || pw_mode(p->ops[i]) != CUDNN_POINTWISE_BINARY_SELECT) return 0;
    const int c = writer_at(p, pin(p->ops[i], 2));
    const int m = c >= 0 ? pw_mode(p->ops[c]) : -1;
    return m == CUDNN_POINTWISE_CMP_GE ? 1 : m == CUDNN_POINTWISE_LOGICAL_AND ? 2 : 3;
}

/* The causal mask writing t: select(x, -inf, gen_row_index(x) >= gen_col_index(x)); *x: the select's input. */
static int match_causal(pmatch *p, const desc *t, const desc **x)
{
    const desc *sel = pwop(p, t, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, &FE_CAUSAL[3]);
    if (!sel || !is_scalar(p, pin(sel, 1), CUDNN_DATA_FLOAT, "the causal mask's fill value")) return 0;
    *x = pin(sel, 0);
    const desc *cmp = pwop(p, pin(sel, 2), CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, &FE_CAUSAL[2]);
    if (!cmp) return 0;
    const desc *row = pwop(p, pin(cmp, 0), CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, &FE_CAUSAL[0]);
    const desc *col = pwop(p, pin(cmp, 1), CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, &FE_CAUSAL[1]);
    if (!row || !col) return 0;
    if (pw_axis(row) != 2 || pw_axis(col) != 3 || pin(row, 0) != *x || pin(col, 0) != *x)
        return pfail(p, "causal: GEN_INDEX axis 2 (row) and 3 (col) of the scores the select reads");
    p->causal = 1;
    return 1;
}

/* The padding mask writing t (second: the backward's second one): select(x, -inf, (gen_row(x) < seq_len_q) AND
 * (gen_col(x) < seq_len_kv)); *x: the select's input, seq: the lengths. */
static int match_padding(pmatch *p, const desc *t, int second, const desc **x, const desc *seq[2])
{
    const fe_node *nm = FE_PADDING[second];
    const desc *sel = pwop(p, t, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, &nm[5]);
    if (!sel || !is_scalar(p, pin(sel, 1), CUDNN_DATA_FLOAT, "the padding mask's fill value")) return 0;
    *x = pin(sel, 0);
    const desc *and = pwop(p, pin(sel, 2), CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, &nm[4]);
    if (!and) return 0;
    for (int k = 0; k < 2; k++) {
        const desc *lt = pwop(p, pin(and, k), CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, &nm[2 + k]);
        const desc *ix = lt ? pwop(p, pin(lt, 0), CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, &nm[k]) : NULL;
        if (!ix) return 0;
        if (pw_axis(ix) != 2 + k || pin(ix, 0) != *x)
            return pfail(p, "padding: GEN_INDEX axis %d of the scores the select reads", 2 + k);
        seq[k] = pin(lt, 1);
        if (!is_input(p, seq[k], k ? "seq_len_kv" : "seq_len_q") || tdtype(seq[k]) != CUDNN_DATA_INT32 ||
            tdim(seq[k], 1) != 1 || tdim(seq[k], 2) != 1 || tdim(seq[k], 3) != 1)
            return pfail(p, "padding: %s must be an INT32 [B, 1, 1, 1] tensor", k ? "seq_len_kv" : "seq_len_q");
    }
    if (second) p->padding2 = 1;
    else p->padding = 1;
    return 1;
}

/* S = bmm1(Q, Kᵀ) · scale [+ bias] [padding mask], walking back from its last tensor s. bwd: the backward's names
 * (matmul_Q_KT, mul_s_attn_scale); next: what the frontend puts after these (for the reason). */
static int match_scores(pmatch *p, const desc *s, scores_m *r, int bwd, const char *next)
{
    memset(r, 0, sizeof *r);
    const int k = select_kind(p, s);
    if (k == 2) {
        const desc *seq[2];
        if (!match_padding(p, s, 0, &s, seq)) return 0;
        r->seq_q = seq[0];
        r->seq_kv = seq[1];
    } else if (k) {
        return pfail(p, "%s on the scores before %s: the frontend's order is bmm1, attn_scale, [bias_add], [padding "
                     "mask], then %s", k == 1 ? "the causal mask" : "a select", next, next);
    }
    const int a = writer_at(p, s);
    if (a >= 0 && pw_mode(p->ops[a]) == CUDNN_POINTWISE_ADD) { /* attn_score_modifiers.h bias(): S + bias */
        const desc *add = pwop(p, s, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, &FE_BIAS);
        if (!add || !is_input(p, pin(add, 1), "the bias")) return 0;
        s = pin(add, 0);
        p->bias = 1;
    }
    if (select_kind(p, s))
        return pfail(p, "a mask select before the bias or attn_scale: the frontend's order is bmm1, attn_scale, "
                     "[bias_add], [padding mask], then %s", next);
    const desc *mul = pwop(p, s, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, bwd ? &FE_BWD[B_MUL_S_ATTN_SCALE] : &FE_ATTN_SCALE);
    if (!mul || !is_scalar(p, pin(mul, 1), CUDNN_DATA_FLOAT, "attn_scale")) return 0;
    const desc *bmm1 = producer(p, pin(mul, 0), CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, -1,
                                bwd ? &FE_BWD[B_MATMUL_Q_KT] : &FE_BMM1);
    if (!bmm1) return 0;
    r->q = mm(bmm1, MM_A);
    r->kt = mm(bmm1, MM_B);
    /* Q [B, H, Sq, D] and Kᵀ [B, H, D, Sk] non-virtual: K's dims and strides swapped on the tensor itself, no
     * reshape node (CompositeSDPANode / CompositeSDPABackwardNode "maps the K->KT") */
    if (!is_input(p, r->q, "Q") || !is_input(p, r->kt, "Kᵀ (K with dims 2 and 3 swapped on the tensor)")) return 0;
    const desc *sc = mm(bmm1, MM_C);
    r->B = tdim(sc, 0); r->H = tdim(sc, 1); r->Sq = tdim(sc, 2); r->Sk = tdim(sc, 3);
    if (tdtype(sc) != CUDNN_DATA_FLOAT || !virt(sc)) return pfail(p, "bmm1's output: a virtual FLOAT tensor");
    return overrides(p, bmm1, r->seq_q, r->seq_kv, NULL, "bmm1");
}

/* The one consumer of t of `type` with t in input slot `slot` (not matched yet), or NULL. */
static const desc *consumer(pmatch *p, const desc *t, int type, int slot)
{
    for (int i = 0; i < p->nops; i++) {
        const desc *op = p->ops[i], *in[NODE_IN], *out;
        if (!p->used[i] && op->type == type && node_io(op, in, &out) && in[slot] == t) return op;
    }
    return NULL;
}

static int count_matmuls(const desc *graph)
{
    int n = 0;
    for (int64_t i = 0; i < graph_ops(graph)->count; i++) n += op_at(graph, i)->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
    return n;
}

/* K (here Kᵀ) and V have h_k and h_v heads, each a divisor of Q's h_q (sdpa :1169: "For group-query attention,
 * number of heads for key and query must be a factor of number of heads for query"). */
static int kv_heads_ok(pmatch *p, int64_t H, const desc *kt, const desc *v)
{
    const int64_t hk = tndims(kt) == 4 ? tdim(kt, 1) : 0, hv = tndims(v) == 4 ? tdim(v, 1) : 0;
    if (hk <= 0 || hv <= 0 || H % hk || H % hv)
        return pfail(p, "K and V heads (%lld, %lld) must divide Q's %lld (" FE_SDPA "1169)", (long long)hk,
                     (long long)hv, (long long)H);
    return 1;
}

/* CompositeSDPANode: S as above [causal mask]; CompositeSoftmaxNode: M = max S, E = exp(S - M), L = Σ E, stats =
 * M + log L (virtual when not requested), P = E / L in the I/O dtype; O = bmm2(P, V). */
static int match_forward(pmatch *p)
{
    const desc *bmm2 = NULL;
    for (int i = 0; i < p->nops && !bmm2; i++) {
        const desc *op = p->ops[i];
        if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR && !virt(mm(op, MM_C))) bmm2 = op;
    }
    if (!bmm2) return pfail(p, "forward: no matmul writes O");
    use(p, bmm2, &FE_BMM2);
    const fe_node *sm = FE_SOFTMAX_NODES;
    const desc *o = mm(bmm2, MM_C), *v = mm(bmm2, MM_B), *pt = mm(bmm2, MM_A);
    if (!is_input(p, v, "V")) return 0;
    const desc *div = pwop(p, pt, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, &sm[6]);
    if (!div) return 0;
    if (tdtype(pt) != tdtype(o)) return pfail(p, "P: the frontend gives the softmax output Q's data type");
    const desc *e = pin(div, 0), *l = pin(div, 1);
    const desc *exp_ = pwop(p, e, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, &sm[2]);
    const desc *sum = producer(p, l, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_REDUCE_TENSOR_ADD, &sm[3]);
    if (!exp_ || !sum) return 0;
    if (ref(sum, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0) != e) return pfail(p, "softmax: L sums E");
    const desc *sub = pwop(p, pin(exp_, 0), CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, &sm[1]);
    if (!sub) return 0;
    const desc *s = pin(sub, 0), *m = pin(sub, 1);
    const desc *max = producer(p, m, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_REDUCE_TENSOR_MAX, &sm[0]);
    if (!max) return 0;
    if (ref(max, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0) != s) return pfail(p, "softmax: M is the max of S");
    /* stats = M + log L, always emitted (virtual when the caller wants none) */
    const desc *add = consumer(p, m, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 0);
    if (!add || pw_mode(add) != CUDNN_POINTWISE_ADD || pw_prec(add) != CUDNN_DATA_FLOAT)
        return pfail(p, "softmax: stats = ADD(M, LOG(L)) is missing (CompositeSoftmaxNode emits it, virtual when "
                     "not requested)");
    use(p, add, &sm[5]);
    const desc *log_ = pwop(p, pin(add, 1), CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, &sm[4]);
    if (!log_) return 0;
    if (pin(log_, 0) != l) return pfail(p, "softmax: the log of L");
    if (select_kind(p, s) == 1 && !match_causal(p, s, &s)) return 0;
    scores_m r;
    if (!match_scores(p, s, &r, 0, "the causal mask and the softmax")) return 0;
    const desc *stats = ref(add, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 0);
    if (!virt(stats) && !is_rowstat(p, stats, r.B, r.H, r.Sq, "Stats")) return 0;
    if (!kv_heads_ok(p, r.H, r.kt, v)) return 0;
    if (!dims_are(r.q, r.B, r.H, r.Sq, tdim(r.q, 3)) || !dims_are(r.kt, r.B, tdim(r.kt, 1), tdim(r.q, 3), r.Sk) ||
        !dims_are(v, r.B, tdim(v, 1), r.Sk, tdim(o, 3)))
        return pfail(p, "forward: Q [B, H, Sq, D], Kᵀ [B, Hk, D, Sk], V [B, Hv, Sk, Dv]");
    /* bmm2: m override seq_len_q, k override seq_len_kv (with padding) */
    return overrides(p, bmm2, r.seq_q, NULL, r.seq_kv, "bmm2");
}

/* The frontend's second padding mask of the backward: cuDNN 9.0.0 to 9.9.x (sdpa :1637). */
static int second_padding_version(void)
{
    const size_t v = cudnnGetVersion();
    return v >= 90000 && v < 91000;
}

/* CompositeSDPABackwardNode (no dropout, dQ through dQ_accum):
 *   softmax_sum = (Σ_d dO∘O) · 1 (non-virtual f32 [B,H,Sq,1]); X = S - stats with S as the forward's up to its
 *   padding mask; [cuDNN 9.0-9.9 with padding: the padding mask again on X]; [the causal mask on X]; P = exp(X);
 *   dV = reshape_p(P)·dO; dP = dO·Vᵀ; dS = (dP - softmax_sum)·P·scale; dK = reshape_dS(dS)·Q;
 *   dQ_accum = dS·reshape_k(Kᵀ) (non-virtual f32); dQ = IDENTITY(dQ_accum). */
static int match_backward(pmatch *p)
{
    /* dQ: matmul_dS_K reads reshape_k(Kᵀ), the one reshape of a graph input; it writes a non-virtual FLOAT dQ_accum
     * then IDENTITY -> dQ, or (the frontend's dP-workspace variant: deterministic, dBias) dQ itself */
    const desc *rk = NULL, *mdq = NULL, *dq = NULL, *acc = NULL;
    for (int i = 0; i < p->nops && !rk; i++) {
        const desc *op = p->ops[i];
        if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR && !virt(ref(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, 0)))
            rk = op;
    }
    if (rk) mdq = consumer(p, ref(rk, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, 0), CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 1);
    if (!rk || !mdq) return pfail(p, "backward: matmul_dS_K of dS and reshape_k(Kᵀ) is missing");
    use(p, rk, &FE_BWD[B_RESHAPE_K]);
    use(p, mdq, &FE_BWD[B_MATMUL_DS_K]);
    const desc *c = mm(mdq, MM_C), *ident = consumer(p, c, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 0);
    if (virt(c)) return pfail(p, "backward: matmul_dS_K writes a non-virtual tensor (dQ_accum or dQ)");
    if (ident && pw_mode(ident) == CUDNN_POINTWISE_IDENTITY) {
        use(p, ident, &FE_BWD[B_IDENTITY_DQ]);
        p->identity = 1;
        acc = c;
        dq = ref(ident, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 0);
        if (tdtype(acc) != CUDNN_DATA_FLOAT || virt(dq))
            return pfail(p, "backward: dQ_accum is non-virtual FLOAT (the frontend's, in its workspace), dQ = "
                         "IDENTITY(dQ_accum) non-virtual");
    } else if (tdtype(c) != CUDNN_DATA_FLOAT) {
        dq = acc = c; /* the dP-workspace variant */
    } else {
        return pfail(p, "backward: a FLOAT dQ_accum needs IDENTITY -> dQ after it");
    }
    const desc *ds = mm(mdq, MM_A), *kr = mm(mdq, MM_B);
    const desc *mulscale = pwop(p, ds, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, &FE_BWD[B_MUL_DS_ATTN_SCALE]);
    if (!mulscale || !is_scalar(p, pin(mulscale, 1), CUDNN_DATA_FLOAT, "attn_scale")) return 0;
    if (tdtype(ds) != CUDNN_DATA_FLOAT) return pfail(p, "dS: a FLOAT intermediate (reshape_dS casts)");
    const desc *mulp = pwop(p, pin(mulscale, 0), CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, &FE_BWD[B_MUL_DP_EXP_S]);
    if (!mulp) return 0;
    const desc *subd = pwop(p, pin(mulp, 0), CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, &FE_BWD[B_SUB_DP_SOFTMAX_SUM]);
    if (!subd) return 0;
    const desc *dp = pin(subd, 0), *ssum = pin(subd, 1), *pexp = pin(mulp, 1);
    const desc *mdp = producer(p, dp, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, -1, &FE_BWD[B_MATMUL_DO_VT]);
    if (!mdp) return 0;
    const desc *dO = mm(mdp, MM_A), *vt = mm(mdp, MM_B);
    if (!is_input(p, dO, "dO") || !is_input(p, vt, "Vᵀ (V with dims 2 and 3 swapped on the tensor)")) return 0;
    /* softmax_sum: MUL(reduce_add(MUL(dO, O)), 1) into a non-virtual f32 tensor */
    const desc *one = pwop(p, ssum, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, &FE_BWD[B_SCALE_DROPOUT_INV]);
    if (!one || !is_scalar(p, pin(one, 1), CUDNN_DATA_FLOAT, "the one_tensor of scale_dropout_inv")) return 0;
    const desc *red = producer(p, pin(one, 0), CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_REDUCE_TENSOR_ADD,
                               &FE_BWD[B_REDUCE_DO_O]);
    if (!red) return 0;
    const desc *mdo = pwop(p, ref(red, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0), CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT,
                           &FE_BWD[B_MUL_DO_O]);
    if (!mdo) return 0;
    if (pin(mdo, 0) != dO || !is_input(p, pin(mdo, 1), "O")) return pfail(p, "mul_dO_O: dO times O");
    /* P = exp([causal]([2nd padding](S - stats))): the frontend puts the causal mask after sub_s_m */
    const desc *ex = pwop(p, pexp, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, &FE_BWD[B_EXP_S]);
    if (!ex) return 0;
    const desc *x = pin(ex, 0), *seq2[2] = {NULL, NULL};
    if (select_kind(p, x) == 1 && !match_causal(p, x, &x)) return 0;
    if (select_kind(p, x) == 2 && !match_padding(p, x, 1, &x, seq2)) return 0;
    if (select_kind(p, x))
        return pfail(p, "a mask select between sub_s_m and exp_s out of the frontend's order (sub_s_m, [the second "
                     "padding mask, cuDNN 9.0-9.9], [the causal mask], exp_s)");
    const desc *subs = pwop(p, x, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, &FE_BWD[B_SUB_S_M]);
    if (!subs) return 0;
    scores_m r;
    if (!match_scores(p, pin(subs, 0), &r, 1, "sub_s_m, the causal mask, exp_s")) return 0;
    const int64_t B = r.B, H = r.H, Sq = r.Sq, Sk = r.Sk, D = tdim(r.q, 3), Dv = tdim(vt, 2);
    if (!is_input(p, pin(subs, 1), "Stats") || !is_rowstat(p, pin(subs, 1), B, H, Sq, "Stats")) return 0;
    if (!r.seq_q && Sk % 128 != 0 && cudnnGetVersion() <= 91500)
        return pfail(p, "backward on cuDNN <= 9.15.0 with s_kv %% 128 != 0: the frontend adds its workaround padding "
                     "mask (seq_len_q = s_q, seq_len_kv = s_kv; CompositeSDPABackwardNode::pre_validate_node)");
    if (p->padding2 != (r.seq_q && second_padding_version()))
        return pfail(p, "backward: the frontend puts the padding mask in again after sub_s_m exactly when there is "
                     "one and cuDNN is 9.0.0 to 9.9.x (%s); this graph %s it", FE_PADDING[1][0].where,
                     p->padding2 ? "has" : "lacks");
    if (p->padding2 && (seq2[0] != r.seq_q || seq2[1] != r.seq_kv))
        return pfail(p, "backward: the second padding mask reads the first one's seq_len_q and seq_len_kv");
    if (!is_rowstat(p, ssum, B, H, Sq, "softmax_sum (the frontend makes it non-virtual, in its workspace)")) return 0;
    if (ref(rk, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, 0) != r.kt) return pfail(p, "reshape_k reads Kᵀ, bmm1's B");
    if (!kv_heads_ok(p, H, r.kt, vt)) return 0;
    const int64_t Hk = tdim(r.kt, 1), Hv = tdim(vt, 1);
    if (!dims_are(r.kt, B, Hk, D, Sk) || !dims_are(vt, B, Hv, Dv, Sk) || !dims_are(dO, B, H, Sq, Dv) ||
        !dims_are(acc, B, H, Sq, D) || !dims_are(kr, B, Hk, Sk, D) || !dims_are(dq, B, H, Sq, D))
        return pfail(p, "backward: Kᵀ [B, Hk, D, Sk], Vᵀ [B, Hv, Dv, Sk], reshape_k(Kᵀ) [B, Hk, Sk, D], dO [B, H, Sq, "
                     "Dv], dQ_accum and dQ [B, H, Sq, D]");
    const int io = tdtype(dO);
    /* dV = reshape_p(P) · dO; dK = reshape_dS(dS) · Q: the reshapes give [B, H, Sk, Sq] in the I/O dtype; the
     * gradient [B, Hv, Sk, Dv] / [B, Hk, Sk, D] directly, or with grouped heads through a virtual packed
     * [B, H, Sk, d] fullhead of the I/O dtype and a reduction ADD over each group */
    const desc *srcs[2] = {pexp, ds}, *rhs[2] = {dO, r.q};
    const int64_t gh[2] = {Hv, Hk}, gd[2] = {Dv, D};
    const int roles[2][2] = {{B_RESHAPE_P, B_MATMUL_PT_DO}, {B_RESHAPE_DS, B_MATMUL_DST_Q}};
    const char *names[2] = {"reshape_p / matmul_pT_dO (dV)", "reshape_dS / matmul_dST_Q (dK)"};
    for (int k = 0; k < 2; k++) {
        const desc *rs = consumer(p, srcs[k], CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 0);
        if (!rs) return pfail(p, "%s: the reshape is missing", names[k]);
        use(p, rs, &FE_BWD[roles[k][0]]);
        const desc *y = ref(rs, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, 0);
        if (!virt(y) || tdtype(y) != io || !dims_are(y, B, H, Sk, Sq))
            return pfail(p, "%s: the reshape's output is virtual, [B, H, Sk, Sq], of the I/O data type", names[k]);
        const desc *g = consumer(p, y, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 0);
        if (!g || mm(g, MM_B) != rhs[k]) return pfail(p, "%s: the matmul is missing", names[k]);
        use(p, g, &FE_BWD[roles[k][1]]);
        const desc *grad = mm(g, MM_C);
        if (gh[k] != H) { /* dV_fullhead / dK_fullhead, then red_dV_head / red_dK_head */
            const desc *full = grad, *red = consumer(p, full, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 0);
            const int64_t pk[4] = {H * Sk * gd[k], Sk * gd[k], gd[k], 1};
            int packed = 1;
            for (int i = 0; i < 4; i++) packed &= i64(full, CUDNN_ATTR_TENSOR_STRIDES, i) == pk[i];
            if (!virt(full) || tdtype(full) != io || !dims_are(full, B, H, Sk, gd[k]) || !packed)
                return pfail(p, "%s with %lld of %lld heads: the matmul writes a virtual [B, H, Sk, d] fullhead of "
                             "the I/O data type, packed strides (%s)", names[k], (long long)gh[k], (long long)H,
                             FE_RED_HEAD[k].where);
            if (!red || i32(ref(red, CUDNN_ATTR_OPERATION_REDUCTION_DESC, 0), CUDNN_ATTR_REDUCTION_OPERATOR) !=
                            CUDNN_REDUCE_TENSOR_ADD)
                return pfail(p, "%s: the fullhead is summed over each head group by a reduction ADD (%s)", names[k],
                             FE_RED_HEAD[k].where);
            use(p, red, &FE_RED_HEAD[k]);
            p->red_head[k] = 1;
            grad = ref(red, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, 0);
        }
        if (!grad || virt(grad) || !dims_are(grad, B, gh[k], Sk, gd[k]))
            return pfail(p, "%s: the gradient is non-virtual [B, %s, Sk, d]", names[k], k ? "Hk" : "Hv");
        if (!overrides(p, g, r.seq_kv, NULL, r.seq_q, names[k])) return 0;
    }
    if (!overrides(p, mdp, r.seq_q, r.seq_kv, NULL, "matmul_dO_VT") ||
        !overrides(p, mdq, r.seq_q, NULL, r.seq_kv, "matmul_dS_K"))
        return 0;
    (void)Dv;
    return 1;
}

/* The frontend's node order for the parts p found, into order[] (returns the count). */
static int frontend_order(const pmatch *p, int bwd, const fe_node *order[])
{
    int n = 0;
#define PUT(node) (order[n++] = (node))
#define PUT_ALL(nodes, count) do { for (int i_ = 0; i_ < (count); i_++) PUT(&(nodes)[i_]); } while (0)
    if (!bwd) { /* CompositeSDPANode::expand_node, sdpa :679-950 */
        PUT(&FE_BMM1); PUT(&FE_ATTN_SCALE);
        if (p->bias) PUT(&FE_BIAS);
        if (p->padding) PUT_ALL(FE_PADDING[0], 6);
        if (p->causal) PUT_ALL(FE_CAUSAL, 4);
        PUT_ALL(FE_SOFTMAX_NODES, 7);
        PUT(&FE_BMM2);
    } else { /* CompositeSDPABackwardNode::expand_node, sdpa :1515-1950 */
        for (int b = B_MUL_DO_O; b <= B_MUL_S_ATTN_SCALE; b++) PUT(&FE_BWD[b]);
        if (p->bias) PUT(&FE_BIAS);
        if (p->padding) PUT_ALL(FE_PADDING[0], 6);
        PUT(&FE_BWD[B_SUB_S_M]);
        if (p->padding2) PUT_ALL(FE_PADDING[1], 6);
        if (p->causal) PUT_ALL(FE_CAUSAL, 4);
        for (int b = B_EXP_S; b <= B_MATMUL_DS_K; b++) {
            PUT(&FE_BWD[b]);
            if (b == B_MATMUL_PT_DO && p->red_head[0]) PUT(&FE_RED_HEAD[0]);
            if (b == B_MATMUL_DST_Q && p->red_head[1]) PUT(&FE_RED_HEAD[1]);
        }
        if (p->identity) PUT(&FE_BWD[B_IDENTITY_DQ]);
    }
#undef PUT_ALL
#undef PUT
    return n;
}

/* STANDIN_SDPA_CAUSAL_FIRST (tests): a backward whose causal mask follows sub_s_m is seen with the mask before
 * it (the mask's indices and select read S, sub_s_m reads the select, exp_s reads sub_s_m, the mask's four nodes
 * listed before sub_s_m): the order the module built before it followed the frontend. */
static void causal_first(pmatch *p)
{
    for (int e = 0; e < p->nops; e++) {
        if (pw_mode(p->ops[e]) != CUDNN_POINTWISE_EXP || select_kind(p, pin(p->ops[e], 0)) != 1) continue;
        const int s = writer_at(p, pin(p->ops[e], 0)), u = writer_at(p, pin(p->ops[s], 0));
        if (u < 0 || pw_mode(p->ops[u]) != CUDNN_POINTWISE_SUB) return;
        const int c = writer_at(p, pin(p->ops[s], 2));
        const int r = writer_at(p, pin(p->ops[c], 0)), k = writer_at(p, pin(p->ops[c], 1));
        const desc *S = pin(p->ops[u], 0), *tsel = pin(p->ops[e], 0), *tsub = pin(p->ops[s], 0);
        const desc *ops[MAX_OPS];
        const int mask[4] = {r, k, c, s};
        int n = 0;
        rewired[0].op = p->ops[r]; rewired[0].x = S;
        rewired[1].op = p->ops[k]; rewired[1].x = S;
        rewired[2].op = p->ops[s]; rewired[2].x = S;
        rewired[3].op = p->ops[u]; rewired[3].x = tsel;
        rewired[4].op = p->ops[e]; rewired[4].x = tsub;
        nrewired = 5;
        for (int i = 0; i < p->nops; i++) {
            if (i == r || i == k || i == c || i == s) continue;
            if (i == u) for (int m = 0; m < 4; m++) ops[n++] = p->ops[mask[m]];
            ops[n++] = p->ops[i];
        }
        memcpy(p->ops, ops, sizeof(ops[0]) * (size_t)n);
        return;
    }
}

/* NULL when graph is the frontend's SDPA forward or backward, its nodes in the frontend's order; else why not.
 * STANDIN_SDPA_SWAP=i (tests): the matcher sees nodes i and i + 1 exchanged. */
static const char *sdpa_pattern(const desc *graph, pmatch *p)
{
    memset(p, 0, sizeof *p);
    p->graph = graph;
    p->nops = (int)graph_ops(graph)->count;
    if (p->nops > MAX_OPS) return "more nodes than the frontend's SDPA graphs have";
    for (int i = 0; i < p->nops; i++) p->ops[i] = op_at(graph, i);
    const char *swap = getenv("STANDIN_SDPA_SWAP");
    if (swap && *swap) {
        const int i = atoi(swap);
        if (i >= 0 && i + 1 < p->nops) {
            const desc *t = p->ops[i];
            p->ops[i] = p->ops[i + 1];
            p->ops[i + 1] = t;
        }
    }
    nrewired = 0;
    if (getenv("STANDIN_SDPA_CAUSAL_FIRST")) causal_first(p);
    const int nmm = count_matmuls(graph);
    int ok = nmm == 2 ? match_forward(p) : nmm == 5 ? match_backward(p)
           : pfail(p, "%d matmul nodes: the frontend's forward has 2 (bmm1, bmm2), its backward 5", nmm);
    for (int i = 0; ok && i < p->nops; i++)
        if (!p->used[i]) ok = pfail(p, "node %d (type %d, pointwise mode %d) is not part of the frontend's pattern", i,
                                    p->ops[i]->type, pw_mode(p->ops[i]));
    const fe_node *order[MAX_OPS + 1];
    const int n = ok ? frontend_order(p, nmm == 5, order) : 0;
    if (ok && n != p->nops) ok = pfail(p, "%d nodes matched, the frontend emits %d", p->nops, n);
    for (int i = 0; ok && i < n; i++)
        if (p->role[i] != order[i])
            ok = pfail(p, "node %d is %s (%s); cudnn-frontend emits %s there (%s)", i, p->role[i]->name,
                       p->role[i]->where, order[i]->name, order[i]->where);
    nrewired = 0;
    return ok ? NULL : p->why;
}

/* The workspace engine 0 asks of an SDPA graph: shaped by the problem (4 bytes per score row, plus a page), so a
 * caller that sizes it from anything but the plan is caught; engine 1 needs none. */
int64_t standin_sdpa_workspace(const desc *graph, int engine)
{
    if (engine != 0) return 0;
    for (int64_t i = 0; i < graph_ops(graph)->count; i++) {
        const desc *op = op_at(graph, i);
        if (op->type != CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) continue;
        const desc *c = mm(op, MM_C);
        return 4096 + 4 * tdim(c, 0) * tdim(c, 1) * tdim(c, 2);
    }
    return 0;
}

int standin_sdpa_engines(const desc *graph)
{
    pmatch pm;
    const char *why = sdpa_pattern(graph, &pm);
    if (why) {
        snprintf(last_refusal, sizeof last_refusal, "%s", why);
        standin_count("cudnn_sdpa_pattern_refused");
        if (getenv("STANDIN_VERBOSE")) fprintf(stderr, "standin cuDNN: no SDPA engine for this graph: %s\n", why);
        standin_dnn_decline(CUDNN_STATUS_NOT_SUPPORTED, "no fused SDPA engine: the graph is not cudnn-frontend's SDPA "
                            "pattern (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h): %s", why);
        return 0;
    }
    last_refusal[0] = 0;
    for (int64_t i = 0; i < graph_ops(graph)->count; i++) {
        const desc *op = op_at(graph, i);
        if (op->type != CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) continue;
        const desc *a = ref(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, 0), *c = ref(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, 0);
        /* Q·Kᵀ: K is the head dim; P·V: N is the value head dim */
        int64_t head = tflag(a, CUDNN_ATTR_TENSOR_IS_VIRTUAL) ? tdim(c, tndims(c) - 1) : tdim(a, tndims(a) - 1);
        if (head > 128) {
            standin_dnn_decline(CUDNN_STATUS_NOT_SUPPORTED, "the stand-in's SDPA engines take head dims up to 128");
            return 0;
        }
    }
    return 2;
}

/* ---- execution ---- */

typedef struct xt {
    const desc *d;
    int64_t uid, dims[4], str[4], numel;
    int dtype, virt, byval, produced;
    void *ptr;
    double value; /* by-value */
    double *buf;
} xt;

typedef struct sdpa_job {
    desc *plan;
    void *ws;        /* the engine's workspace: scribbled over before the graph runs, as an engine's scratch */
    int64_t ws_need;
    int nt, nops;
    xt t[MAX_T];
    const desc *ops[MAX_OPS];
} sdpa_job;

static int find_t(sdpa_job *j, const desc *d)
{
    for (int i = 0; i < j->nt; i++) if (j->t[i].d == d) return i;
    return -1;
}

/* The tensors a node reads (up to 3) and the one it writes. */
static int node_io(const desc *op, const desc *in[NODE_IN], const desc **out)
{
    for (int k = 0; k < NODE_IN; k++) in[k] = NULL;
    if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, 0);
        in[1] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, 0);
        in[2] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, 0);
        in[3] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, 0);
        in[4] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, 0);
    } else if (op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, 0);
    } else if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, 0);
    } else if (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
        in[0] = pin(op, 0); /* (as rewired while matching, STANDIN_SDPA_CAUSAL_FIRST) */
        in[1] = ref(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, 0);
        in[2] = ref(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 0);
    } else {
        return 0;
    }
    return 1;
}

static size_t dsize(int dt)
{
    return dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16 ? 2 : dt == CUDNN_DATA_INT64 || dt == CUDNN_DATA_DOUBLE ? 8
         : dt == CUDNN_DATA_BOOLEAN || dt == CUDNN_DATA_INT8 || dt == CUDNN_DATA_UINT8 ? 1 : 4;
}

static double mload(const xt *t, int64_t off)
{
    const char *p = (const char *)t->ptr;
    switch (t->dtype) {
    case CUDNN_DATA_FLOAT: return ((const float *)p)[off];
    case CUDNN_DATA_HALF: return gpucore_f16_to_f32(((const uint16_t *)p)[off]);
    case CUDNN_DATA_BFLOAT16: return gpucore_bf16_to_f32(((const uint16_t *)p)[off]);
    case CUDNN_DATA_INT32: return ((const int32_t *)p)[off];
    case CUDNN_DATA_INT64: return (double)((const int64_t *)p)[off];
    default: return 0.0;
    }
}

static void mstore(const xt *t, int64_t off, double v)
{
    char *p = (char *)t->ptr;
    switch (t->dtype) {
    case CUDNN_DATA_FLOAT: ((float *)p)[off] = (float)v; break;
    case CUDNN_DATA_HALF: ((uint16_t *)p)[off] = gpucore_f32_to_f16((float)v); break;
    case CUDNN_DATA_BFLOAT16: ((uint16_t *)p)[off] = gpucore_f32_to_bf16((float)v); break;
    case CUDNN_DATA_INT32: ((int32_t *)p)[off] = (int32_t)v; break;
    default: break;
    }
}

static double rounded_to(int dt, double v)
{
    switch (dt) {
    case CUDNN_DATA_FLOAT: return (float)v;
    case CUDNN_DATA_HALF: return gpucore_f16_to_f32(gpucore_f32_to_f16((float)v));
    case CUDNN_DATA_BFLOAT16: return gpucore_bf16_to_f32(gpucore_f32_to_bf16((float)v));
    default: return v;
    }
}

/* Dense index of y's coordinate c in x (x's dims of 1 broadcast). */
static int64_t bidx(const xt *x, const int64_t c[4])
{
    int64_t i = 0;
    for (int k = 0; k < 4; k++) i = i * x->dims[k] + (x->dims[k] == 1 ? 0 : c[k]);
    return i;
}

/* Dense index in x of coordinate c of a tensor of dims full: each of x's dims equals full's (c), is 1 (0), or
 * groups full's (grouped heads: c / (full / x's)). */
static int64_t gidx(const xt *x, const int64_t c[4], const int64_t full[4])
{
    int64_t i = 0;
    for (int k = 0; k < 4; k++)
        i = i * x->dims[k] + (x->dims[k] == 1 ? 0 : x->dims[k] == full[k] ? c[k] : c[k] / (full[k] / x->dims[k]));
    return i;
}

static void unravel(const xt *y, int64_t e, int64_t c[4])
{
    for (int k = 3; k >= 0; k--) { c[k] = e % y->dims[k]; e /= y->dims[k]; }
}

static double pw_apply(int m, double x, double b, double t)
{
    switch (m) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return x > b || isnan(x) ? x : b;
    case CUDNN_POINTWISE_EXP: return exp(x);
    case CUDNN_POINTWISE_LOG: return log(x);
    case CUDNN_POINTWISE_RELU_FWD: return x > 0 ? x : 0;
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_CMP_LT: return x < b;
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_LOGICAL_AND: return x != 0.0 && b != 0.0;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0.0 ? x : b;
    default: return NAN;
    }
}

static void run_node(sdpa_job *j, const desc *op)
{
    const desc *in[NODE_IN], *out;
    node_io(op, in, &out);
    xt *y = &j->t[find_t(j, out)];
    xt *x = &j->t[find_t(j, in[0])];
    xt *b = in[1] ? &j->t[find_t(j, in[1])] : NULL, *t = in[2] ? &j->t[find_t(j, in[2])] : NULL;
    int64_t c[4];
    if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        /* GEMM_M/N/K_OVERRIDE (cudnn_graph_v9.h:628-630): per batch entry, rows past M and columns past N are the
         * padding value (0: cudnn-frontend sets CUDNN_ATTR_MATMUL_PADDING_VALUE only when it is not 0), the sum
         * stops at K */
        const xt *ov[3];
        for (int k = 0; k < 3; k++) ov[k] = in[2 + k] ? &j->t[find_t(j, in[2 + k])] : NULL;
        const int64_t K = x->dims[3], extent[3] = {y->dims[2], y->dims[3], K};
        const int64_t fa[4] = {y->dims[0], y->dims[1], x->dims[2], K}, fb[4] = {y->dims[0], y->dims[1], K, b->dims[3]};
        for (int k = 0; k < 3; k++) /* an override is an actual extent: inside [0, the tensor's] */
            for (int64_t bi = 0; ov[k] && bi < ov[k]->numel; bi++)
                if (!(ov[k]->buf[bi] >= 0 && ov[k]->buf[bi] <= (double)extent[k]))
                    standin_violation("cudnnBackendExecute", G ":628", "GEMM %c override %g (batch %lld) outside [0, %lld]",
                                      "MNK"[k], ov[k]->buf[bi], (long long)bi, (long long)extent[k]);
        for (int64_t e = 0; e < y->numel; e++) {
            unravel(y, e, c);
            int64_t ca[4] = {c[0], c[1], c[2], 0}, cb[4] = {c[0], c[1], 0, c[3]}, kend = K;
            const int64_t cbat[4] = {c[0], 0, 0, 0};
            if ((ov[0] && c[2] >= (int64_t)ov[0]->buf[bidx(ov[0], cbat)]) ||
                (ov[1] && c[3] >= (int64_t)ov[1]->buf[bidx(ov[1], cbat)])) {
                y->buf[e] = 0.0;
                continue;
            }
            if (ov[2] && (int64_t)ov[2]->buf[bidx(ov[2], cbat)] < kend) kend = (int64_t)ov[2]->buf[bidx(ov[2], cbat)];
            double s = 0.0;
            for (int64_t k = 0; k < kend; k++) {
                ca[3] = k;
                cb[2] = k;
                s += x->buf[gidx(x, ca, fa)] * b->buf[gidx(b, cb, fb)];
            }
            y->buf[e] = s;
        }
    } else if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
        int64_t *map = reshape_map(x->d, y->d); /* checked at finalize */
        for (int64_t e = 0; e < y->numel; e++) y->buf[e] = map ? x->buf[map[e]] : NAN;
        free(map);
    } else if (op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        int how = i32(ref(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, 0), CUDNN_ATTR_REDUCTION_OPERATOR);
        for (int64_t e = 0; e < y->numel; e++) y->buf[e] = how == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : 0.0;
        for (int64_t e = 0; e < x->numel; e++) {
            unravel(x, e, c);
            double *acc = &y->buf[gidx(y, c, x->dims)], v = x->buf[e];
            if (how == CUDNN_REDUCE_TENSOR_ADD) *acc += v;
            else if (v > *acc || isnan(v)) *acc = v;
        }
    } else {
        const desc *pw = ref(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0);
        int m = i32(pw, CUDNN_ATTR_POINTWISE_MODE);
        int64_t axis = i64(pw, CUDNN_ATTR_POINTWISE_AXIS, 0);
        for (int64_t e = 0; e < y->numel; e++) {
            unravel(y, e, c);
            if (m == CUDNN_POINTWISE_GEN_INDEX) { y->buf[e] = (double)c[axis]; continue; }
            y->buf[e] = pw_apply(m, x->buf[bidx(x, c)], b ? b->buf[bidx(b, c)] : 0.0, t ? t->buf[bidx(t, c)] : 0.0);
        }
    }
    if (y->virt) /* an intermediate holds what its dtype holds */
        for (int64_t e = 0; e < y->numel; e++) y->buf[e] = rounded_to(y->dtype, y->buf[e]);
    y->produced = 1;
}

static int sdpa_task(void *arg)
{
    sdpa_job *j = *(sdpa_job **)arg;
    /* the engine owns its workspace while it runs: anything else the caller placed there is lost (NaN floats,
     * -1 integers), so a workspace shorter than the plan asked for corrupts what follows it */
    if (j->ws && j->ws_need > 0) memset(j->ws, 0xff, (size_t)j->ws_need);
    for (int i = 0; i < j->nt; i++) {
        xt *t = &j->t[i];
        t->buf = calloc((size_t)t->numel, sizeof(double));
        if (t->byval) t->buf[0] = t->value;
        else if (!t->virt && !t->produced)
            for (int64_t e = 0; e < t->numel; e++) {
                int64_t c[4], off = 0;
                unravel(t, e, c);
                for (int k = 0; k < 4; k++) off += c[k] * t->str[k];
                t->buf[e] = mload(t, off);
            }
    }
    int done[MAX_OPS] = {0};
    for (int i = 0; i < j->nt; i++) j->t[i].produced = 0;
    for (int left = j->nops, progress = 1; left > 0 && progress;) { /* topological order (a cycle stops) */
        progress = 0;
        for (int o = 0; o < j->nops; o++) {
            if (done[o]) continue;
            const desc *in[NODE_IN], *out;
            node_io(j->ops[o], in, &out);
            int ready = 1;
            for (int k = 0; k < NODE_IN; k++)
                if (in[k]) { const xt *t = &j->t[find_t(j, in[k])]; ready &= !t->virt || t->produced; }
            if (!ready) continue;
            run_node(j, j->ops[o]);
            done[o] = 1;
            left--;
            progress = 1;
        }
    }
    for (int i = 0; i < j->nt; i++) {
        xt *t = &j->t[i];
        if (!t->virt && t->produced)
            for (int64_t e = 0; e < t->numel; e++) {
                int64_t c[4], off = 0;
                unravel(t, e, c);
                for (int k = 0; k < 4; k++) off += c[k] * t->str[k];
                mstore(t, off, t->buf[e]);
            }
        free(t->buf);
    }
    atomic_fetch_sub(&j->plan->inflight, 1);
    free(j);
    standin_count("cudnn_sdpa_executed");
    return 0;
}

static int add_tensor(sdpa_job *j, const desc *d)
{
    if (!d || find_t(j, d) >= 0) return 1;
    if (j->nt == MAX_T || tndims(d) != 4) return 0;
    xt *t = &j->t[j->nt++];
    memset(t, 0, sizeof *t);
    t->d = d;
    t->uid = i64(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    t->numel = 1;
    for (int k = 0; k < 4; k++) {
        t->dims[k] = tdim(d, k);
        t->str[k] = i64(d, CUDNN_ATTR_TENSOR_STRIDES, k);
        t->numel *= t->dims[k];
    }
    t->dtype = tdtype(d);
    t->virt = tflag(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    t->byval = tflag(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    return 1;
}

cudnnStatus_t standin_sdpa_execute(desc *plan, const desc *vp, struct CUstream_st *s, void *ws, int64_t ws_need)
{
    const char *api = "cudnnBackendExecute";
    const desc *graph = plan->graph;
    sdpa_job *j = calloc(1, sizeof *j);
    j->plan = plan;
    const attr *ops = graph_ops(graph);
    for (int64_t i = 0; i < ops->count; i++) {
        const desc *op = op_at(graph, i), *in[NODE_IN], *out;
        int ok = j->nops < MAX_OPS && node_io(op, in, &out) && add_tensor(j, out);
        for (int k = 0; k < NODE_IN && ok; k++) ok = add_tensor(j, in[k]);
        if (!ok) {
            free(j);
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":1034", "the stand-in runs SDPA graphs of up to %d "
                          "matmul/pointwise/reduction nodes over 4-d tensors; this graph is something else", MAX_OPS);
        }
        j->ops[j->nops++] = op;
        j->t[find_t(j, out)].produced++;
    }
    /* every tensor written once at most; virtual ones written before read (a topological order exists) */
    int order_ok = 1;
    for (int i = 0; i < j->nt; i++) {
        if (j->t[i].produced > 1 || (j->t[i].byval && j->t[i].produced)) {
            long long u = (long long)j->t[i].uid;
            int w = j->t[i].produced;
            free(j);
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "tensor uid %lld (by value or not) is written by %d "
                          "nodes", u, w);
        }
        for (int k = 0; k < i; k++)
            if (j->t[k].uid == j->t[i].uid) {
                long long u = (long long)j->t[i].uid;
                free(j);
                return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":588", "two tensors of the graph share unique id %lld", u);
            }
        if (j->t[i].virt && !j->t[i].produced) order_ok = 0;
    }
    if (!order_ok) {
        free(j);
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":589", "a virtual tensor is read but no node of the graph writes it");
    }
    const attr *uids = get_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *ptrs = get_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    if (uids->count != ptrs->count) {
        free(j);
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":595", "%lld unique ids but %lld data pointers",
                      (long long)uids->count, (long long)ptrs->count);
    }
    int nonvirtual = 0;
    for (int i = 0; i < j->nt; i++) {
        xt *t = &j->t[i];
        if (t->virt) continue;
        nonvirtual++;
        int hits = 0;
        for (int64_t u = 0; u < uids->count; u++)
            if (((int64_t *)uids->data)[u] == t->uid) { hits++; t->ptr = ((void **)ptrs->data)[u]; }
        if (hits != 1) {
            long long u = (long long)t->uid;
            free(j);
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "tensor uid %lld of the graph appears %d times in the "
                          "variant pack", u, hits);
        }
        if (t->byval) { /* a host scalar, read now (the call returns before the graph runs) */
            if (!t->ptr) { free(j); return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":590", "by-value tensor with a NULL pointer"); }
            t->value = mload(t, 0);
            continue;
        }
        int64_t last = 0;
        for (int k = 0; k < 4; k++) last += (t->dims[k] - 1) * t->str[k];
        if (!standin_check_device_range(api, G ":1034", "a variant-pack data pointer", t->ptr,
                                        (size_t)(last + 1) * dsize(t->dtype))) {
            free(j);
            return CUDNN_STATUS_BAD_PARAM;
        }
    }
    if (uids->count != nonvirtual) {
        free(j);
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "the variant pack has %lld uids, the graph %d non-virtual "
                      "tensors", (long long)uids->count, nonvirtual);
    }
    if (ws_need > 0 && (!ws || !standin_check_device_range(api, G ":1034", "workspace", ws, (size_t)ws_need))) {
        free(j);
        return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":1034", "the plan needs %lld bytes of workspace", (long long)ws_need);
    }
    j->ws = ws;
    j->ws_need = ws_need;
    standin_count("cudnn_execute");
    atomic_fetch_add(&plan->inflight, 1);
    if (standin_stream_enqueue(s, sdpa_task, &j, sizeof j)) {
        atomic_fetch_sub(&plan->inflight, 1);
        free(j);
        return CUDNN_STATUS_INTERNAL_ERROR;
    }
    return CUDNN_STATUS_SUCCESS;
}
