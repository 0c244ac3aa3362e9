/*
 * cuda_conv_graph.c — the cuDNN graph-API pieces of the CUDA convolution
 * (cuda_conv_graph.h): tensors, the convolution and pointwise nodes, the
 * operation graph, heuristics, engine filtering, plans, execution. Backend-API
 * calls only, through the loader's table (DNN.cudnn...).
 */
#include "gpucore_config.h"
#include "cuda_internal.h"

#if GPUCORE_HAVE_CUDNN
#include <stdbool.h>
#include <string.h>
#include "cuda_conv_graph.h"

/* Graph and plan handles. cuDNN 9.x releases from late 2025 mark these two attributes
 * deprecated in favour of a device-properties descriptor that older 9.x wheels (the
 * GPU machine's) do not have; they are graph-API attributes, not the legacy
 * convolution calls CUDNN_WARN_DEPRECATED is there to catch, so they are named once
 * here with that one warning silenced. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const cudnnBackendAttributeName_t ATTR_GRAPH_HANDLE = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
static const cudnnBackendAttributeName_t ATTR_PLAN_HANDLE = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

enum { UID_X = 1, UID_W = 2, UID_Y = 3, UID_B = 4, UID_CONV_OUT = 5, UID_BIAS_OUT = 6 };

gpucore_status conv_dnn_error(cudnnStatus_t s, const char *what)
{
    char detail[512] = "";
    DNN.cudnnGetLastErrorString(detail, sizeof detail);
    gpucore_status st = s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ? GPUCORE_ERR_OUT_OF_MEMORY
                        : s == CUDNN_STATUS_NOT_SUPPORTED ? GPUCORE_ERR_NOT_SUPPORTED
                                                          : GPUCORE_ERR_BACKEND;
    return cuda_host->set_error(st, "conv: %s failed: %s%s%s", what, DNN.cudnnGetErrorString(s), detail[0] ? " — " : "",
                                detail);
}

int conv_align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 16;
    while (al > 1 && a % (uintptr_t)al) al /= 2;
    return al;
}

static cudnnDataType_t conv_dnn_type(int dt)
{
    return dt == GPUCORE_F16 ? CUDNN_DATA_HALF : dt == GPUCORE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* Strides cuDNN accepts: a 1-D convolution's absent h (stride 0) sits outside w. */
static void conv_fix_strides(const int64_t dims[4], const int64_t in[4], int64_t out[4])
{
    for (int i = 0; i < 4; i++) out[i] = in[i];
    if (out[2] == 0) out[2] = out[3] * dims[3];
    for (int i = 0; i < 4; i++) if (out[i] == 0) out[i] = 1;
}

static gpucore_status conv_make_tensor(int64_t uid, cudnnDataType_t dt, const int64_t dims[4], const int64_t strides[4],
                                  int64_t align, int is_virtual, cudnnBackendDescriptor_t *out)
{
    gpucore_status st = GPUCORE_OK;
    cudnnBackendDescriptor_t t = NULL;
    bool virt = is_virtual != 0;
    DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t), "create tensor descriptor");
    DNN_TRY(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt), "tensor dtype");
    DNN_TRY(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), "tensor dims");
    DNN_TRY(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides), "tensor strides");
    DNN_TRY(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), "tensor uid");
    DNN_TRY(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), "tensor alignment");
    DNN_TRY(DNN.cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt), "tensor virtual");
    DNN_TRY(DNN.cudnnBackendFinalize(t), "finalize tensor descriptor");
    *out = t;
    return GPUCORE_OK;
done:
    if (t) DNN.cudnnBackendDestroyDescriptor(t);
    return st;
}

/* A pointwise node y = mode(x[, b]) in fp32 math. */
static gpucore_status conv_make_pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                     cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *out)
{
    gpucore_status st = GPUCORE_OK;
    cudnnBackendDescriptor_t pw = NULL, op = NULL;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw), "create pointwise descriptor");
    DNN_TRY(DNN.cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode), "pointwise mode");
    DNN_TRY(DNN.cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec), "pointwise precision");
    DNN_TRY(DNN.cudnnBackendFinalize(pw), "finalize pointwise descriptor");
    DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op), "create pointwise op");
    DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw),
            "pointwise op descriptor");
    DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
            "pointwise x");
    if (b)
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b),
                "pointwise b");
    DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
            "pointwise y");
    DNN_TRY(DNN.cudnnBackendFinalize(op), "finalize pointwise op");
    DNN.cudnnBackendDestroyDescriptor(pw);
    *out = op;
    return GPUCORE_OK;
done:
    if (pw) DNN.cudnnBackendDestroyDescriptor(pw);
    if (op) DNN.cudnnBackendDestroyDescriptor(op);
    return st;
}

/* The operation graph of d (fused: with bias-add / ReLU nodes). */
gpucore_status conv_build_graph(cudnnHandle_t h, const gpucore_conv_desc *d, int fused, cudnnBackendDescriptor_t *out)
{
    gpucore_status st = GPUCORE_OK;
    enum { MAXD = 12 };
    cudnnBackendDescriptor_t all[MAXD] = {0}, ops[3] = {0};
    int na = 0, nops = 0;
    const cudnnDataType_t dt = conv_dnn_type(d->dtype), f32 = CUDNN_DATA_FLOAT;
    const int64_t xd[4] = {d->n, d->c, d->h, d->w}, wd[4] = {d->k, d->c / d->groups, d->r, d->s},
                  yd[4] = {d->n, d->k, d->p, d->q}, bd[4] = {1, d->k, 1, 1}, bs[4] = {d->k, 1, 1, 1};
    int64_t xs[4], ws[4], ys[4];
    conv_fix_strides(xd, d->x_strides, xs);
    conv_fix_strides(wd, d->w_strides, ws);
    conv_fix_strides(yd, d->y_strides, ys);
    cudnnBackendDescriptor_t tx, tw, ty, conv = NULL, graph = NULL;
    if ((st = conv_make_tensor(UID_X, dt, xd, xs, conv_align_of(d->x), 0, &tx))) goto done;
    all[na++] = tx;
    if ((st = conv_make_tensor(UID_W, dt, wd, ws, conv_align_of(d->wt), 0, &tw))) goto done;
    all[na++] = tw;
    if ((st = conv_make_tensor(UID_Y, dt, yd, ys, conv_align_of(d->y), 0, &ty))) goto done;
    all[na++] = ty;

    const int64_t sdims = 2, pre[2] = {d->pad_h, d->pad_w}, str[2] = {d->stride_h, d->stride_w},
                  dil[2] = {d->dil_h, d->dil_w};
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv), "create convolution descriptor");
    all[na++] = conv;
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32), "conv compute type");
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode), "conv mode");
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sdims), "conv dims");
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre), "conv padding");
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pre), "conv padding");
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str), "conv strides");
    DNN_TRY(DNN.cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil), "conv dilation");
    DNN_TRY(DNN.cudnnBackendFinalize(conv), "finalize convolution descriptor");

    const double alpha = 1.0, beta = 0.0;
    cudnnBackendDescriptor_t op = NULL;
    if (d->op == GPUCORE_CONV_OP_FORWARD) {
        cudnnBackendDescriptor_t conv_out = ty;
        if (fused && (d->bias || d->relu)) {
            if ((st = conv_make_tensor(UID_CONV_OUT, f32, yd, ys, 16, 1, &conv_out))) goto done;
            all[na++] = conv_out;
        }
        DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op), "create conv op");
        ops[nops++] = op;
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx), "fwd x");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw), "fwd w");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_out), "fwd y");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv), "fwd conv");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha), "fwd alpha");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_DOUBLE, 1, &beta), "fwd beta");
        DNN_TRY(DNN.cudnnBackendFinalize(op), "finalize conv forward op");
        if (fused && d->bias) {
            cudnnBackendDescriptor_t tb, bias_out = ty, pw;
            if ((st = conv_make_tensor(UID_B, dt, bd, bs, conv_align_of(d->bias), 0, &tb))) goto done;
            all[na++] = tb;
            if (d->relu) {
                if ((st = conv_make_tensor(UID_BIAS_OUT, f32, yd, ys, 16, 1, &bias_out))) goto done;
                all[na++] = bias_out;
            }
            if ((st = conv_make_pointwise(CUDNN_POINTWISE_ADD, conv_out, tb, bias_out, &pw))) goto done;
            ops[nops++] = pw;
            conv_out = bias_out;
        }
        if (fused && d->relu) {
            cudnnBackendDescriptor_t pw;
            if ((st = conv_make_pointwise(CUDNN_POINTWISE_RELU_FWD, conv_out, NULL, ty, &pw))) goto done;
            ops[nops++] = pw;
        }
    } else if (d->op == GPUCORE_CONV_OP_BACKWARD_DATA) {
        DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, &op), "create bwd-data op");
        ops[nops++] = op;
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx), "bwd dx");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw), "bwd w");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty), "bwd dy");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv), "bwd conv");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha), "bwd alpha");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_DOUBLE, 1, &beta), "bwd beta");
        DNN_TRY(DNN.cudnnBackendFinalize(op), "finalize conv backward-data op");
    } else {
        DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, &op), "create bwd-filter op");
        ops[nops++] = op;
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx), "bwd x");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw), "bwd dw");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty), "bwd dy");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv), "bwd conv");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha), "bwd alpha");
        DNN_TRY(DNN.cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_DOUBLE, 1, &beta), "bwd beta");
        DNN_TRY(DNN.cudnnBackendFinalize(op), "finalize conv backward-filter op");
    }
    DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph), "create operation graph");
    DNN_TRY(DNN.cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops), "graph ops");
    DNN_TRY(DNN.cudnnBackendSetAttribute(graph, ATTR_GRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), "graph handle");
    DNN_TRY(DNN.cudnnBackendFinalize(graph), "finalize operation graph");
    *out = graph;
    graph = NULL;
done:
    if (graph) DNN.cudnnBackendDestroyDescriptor(graph);
    for (int i = 0; i < nops; i++) DNN.cudnnBackendDestroyDescriptor(ops[i]);
    for (int i = 0; i < na; i++) DNN.cudnnBackendDestroyDescriptor(all[i]);
    return st;
}

/* Engine configs from one heuristics mode, best first (caller destroys them). */
int64_t conv_heuristic_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                 cudnnBackendDescriptor_t *cfgs, int64_t max)
{
    cudnnBackendDescriptor_t heur = NULL;
    int64_t count = 0, got = 0;
    if (DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) return 0;
    if (DNN.cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
        DNN.cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
        DNN.cudnnBackendFinalize(heur) ||
        DNN.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL)) {
        DNN.cudnnBackendDestroyDescriptor(heur);
        return 0;
    }
    if (count > max) count = max;
    int64_t made = 0;
    for (; made < count; made++)
        if (DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made])) break;
    if (DNN.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &got, cfgs))
        got = 0;
    for (int64_t i = got; i < made; i++) DNN.cudnnBackendDestroyDescriptor(cfgs[i]);
    DNN.cudnnBackendDestroyDescriptor(heur);
    return got;
}

/* Whether the mode allows an engine config (its numerical notes). */
int conv_config_allowed(cudnnBackendDescriptor_t cfg, const gpucore_conv_desc *d)
{
    cudnnBackendDescriptor_t eng = NULL;
    if (DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng)) return 0;
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int ok = DNN.cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) == 0 &&
             DNN.cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                      CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == 0;
    for (int64_t i = 0; ok && i < n; i++) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && d->algo == GPUCORE_CONV_ALGO_DETERMINISTIC) ok = 0;
        if (d->dtype == GPUCORE_F32 && !d->allow_tf32 &&
            (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
            ok = 0;
    }
    DNN.cudnnBackendDestroyDescriptor(eng);
    return ok;
}

cudnnBackendDescriptor_t conv_make_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, int64_t *ws)
{
    cudnnBackendDescriptor_t plan = NULL;
    int64_t n = 0;
    if (DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) return NULL;
    if (DNN.cudnnBackendSetAttribute(plan, ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
        DNN.cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) ||
        DNN.cudnnBackendFinalize(plan) ||
        DNN.cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, ws)) {
        DNN.cudnnBackendDestroyDescriptor(plan);
        return NULL;
    }
    return plan;
}

/* Enqueue one plan on the stream (caller holds the device's handle lock). */
gpucore_status conv_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const gpucore_conv_desc *d, int fused,
                              void *workspace, cudaStream_t stream)
{
    gpucore_status st = GPUCORE_OK;
    cudnnBackendDescriptor_t vp = NULL;
    int64_t uids[4] = {UID_X, UID_W, UID_Y, UID_B};
    void *ptrs[4] = {d->x, d->wt, d->y, (void *)d->bias};
    const int64_t n = (fused && d->op == GPUCORE_CONV_OP_FORWARD && d->bias) ? 4 : 3;
    DNN_TRY(DNN.cudnnSetStream(h, stream), "cudnnSetStream");
    DNN_TRY(DNN.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp), "create variant pack");
    DNN_TRY(DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids), "variant uids");
    DNN_TRY(DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs), "variant pointers");
    DNN_TRY(DNN.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace), "variant workspace");
    DNN_TRY(DNN.cudnnBackendFinalize(vp), "finalize variant pack");
    DNN_TRY(DNN.cudnnBackendExecute(h, plan, vp), "cudnnBackendExecute");
done:
    if (vp) DNN.cudnnBackendDestroyDescriptor(vp);
    return st;
}

#endif /* GPUCORE_HAVE_CUDNN */
