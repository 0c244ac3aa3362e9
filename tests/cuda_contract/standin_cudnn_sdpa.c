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
 * x's or 1), by-value tensors (not virtual, one element). Modes and operators not
 * listed are refused as not modelled. At execution: every non-virtual tensor bound
 * exactly once in the variant pack, device ranges for the others, every virtual
 * tensor written by a node before it is read (a topological order exists).
 * Executed: the nodes in topological order, in double with each virtual tensor
 * rounded to its dtype (f32 intermediates, a half P), on the stream's worker.
 * The stand-in's engines take head dims up to 128 (heuristics offer none above).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "numeric.h"
#include "standin_cudnn.h"

#define MAX_T 64
#define MAX_OPS 32

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
           m == CUDNN_POINTWISE_MAX || m == CUDNN_POINTWISE_CMP_LT || m == CUDNN_POINTWISE_CMP_GE;
}

/* Each dim of x equals y's or is 1 (same rank). */
static int broadcasts(const desc *x, const desc *y)
{
    if (tndims(x) != tndims(y)) return 0;
    for (int i = 0; i < tndims(y); i++)
        if (tdim(x, i) != tdim(y, i) && tdim(x, i) != 1) return 0;
    return 1;
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
        if ((m == CUDNN_POINTWISE_CMP_LT || m == CUDNN_POINTWISE_CMP_GE) && tdtype(y) != CUDNN_DATA_BOOLEAN)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":234", "a comparison's y must be CUDNN_DATA_BOOLEAN (" G ":234)");
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
        int64_t *map = tdtype(x) == tdtype(y) ? reshape_map(x, y) : NULL;
        if (!map)
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":722", "reshape: y (" G ":723) must hold x's elements, of "
                          "x's dtype, as a view of x's layout (the stand-in models 4-d views such as transposes)");
        free(map);
    }
    if (d->type == CUDNN_BACKEND_REDUCTION_DESCRIPTOR) {
        int op = i32(d, CUDNN_ATTR_REDUCTION_OPERATOR);
        if (op != CUDNN_REDUCE_TENSOR_ADD && op != CUDNN_REDUCE_TENSOR_MAX)
            return refuse(CUDNN_STATUS_NOT_SUPPORTED, api, G ":632", "reduction operator %d is not modelled", op);
    }
    if (d->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        const desc *x = ref(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0), *y = ref(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, 0);
        if (!broadcasts(y, x))
            return refuse(CUDNN_STATUS_BAD_PARAM, api, G ":637", "reduction y must have x's rank with each dim x's or 1");
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
        for (int i = 0; i < n - 2; i++)
            if ((tdim(a, i) != tdim(c, i) && tdim(a, i) != 1) || (tdim(b, i) != tdim(c, i) && tdim(b, i) != 1))
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

int standin_sdpa_engines(const desc *graph)
{
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
static int node_io(const desc *op, const desc *in[3], const desc **out)
{
    in[0] = in[1] = in[2] = NULL;
    if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, 0);
        in[1] = ref(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, 0);
    } else if (op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, 0);
    } else if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, 0);
        *out = ref(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, 0);
    } else if (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
        in[0] = ref(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, 0);
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
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0.0 ? x : b;
    default: return NAN;
    }
}

static void run_node(sdpa_job *j, const desc *op)
{
    const desc *in[3], *out;
    node_io(op, in, &out);
    xt *y = &j->t[find_t(j, out)];
    xt *x = &j->t[find_t(j, in[0])];
    xt *b = in[1] ? &j->t[find_t(j, in[1])] : NULL, *t = in[2] ? &j->t[find_t(j, in[2])] : NULL;
    int64_t c[4];
    if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        const int64_t M = y->dims[2], N = y->dims[3], K = x->dims[3];
        for (int64_t e = 0; e < y->numel; e++) {
            unravel(y, e, c);
            int64_t ca[4] = {c[0], c[1], c[2], 0}, cb[4] = {c[0], c[1], 0, c[3]};
            double s = 0.0;
            for (int64_t k = 0; k < K; k++) {
                ca[3] = k;
                cb[2] = k;
                s += x->buf[bidx(x, ca)] * b->buf[bidx(b, cb)];
            }
            y->buf[e] = s;
        }
        (void)M; (void)N;
    } else if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {
        int64_t *map = reshape_map(x->d, y->d); /* checked at finalize */
        for (int64_t e = 0; e < y->numel; e++) y->buf[e] = map ? x->buf[map[e]] : NAN;
        free(map);
    } else if (op->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        int how = i32(ref(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, 0), CUDNN_ATTR_REDUCTION_OPERATOR);
        for (int64_t e = 0; e < y->numel; e++) y->buf[e] = how == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : 0.0;
        for (int64_t e = 0; e < x->numel; e++) {
            unravel(x, e, c);
            double *acc = &y->buf[bidx(y, c)], v = x->buf[e];
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
            const desc *in[3], *out;
            node_io(j->ops[o], in, &out);
            int ready = 1;
            for (int k = 0; k < 3; k++)
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
        const desc *op = op_at(graph, i), *in[3], *out;
        if (j->nops == MAX_OPS || !node_io(op, in, &out) || !add_tensor(j, in[0]) || !add_tensor(j, in[1]) ||
            !add_tensor(j, in[2]) || !add_tensor(j, out)) {
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
    standin_count("cudnn_execute");
    atomic_fetch_add(&plan->inflight, 1);
    if (standin_stream_enqueue(s, sdpa_task, &j, sizeof j)) {
        atomic_fetch_sub(&plan->inflight, 1);
        free(j);
        return CUDNN_STATUS_INTERNAL_ERROR;
    }
    return CUDNN_STATUS_SUCCESS;
}
