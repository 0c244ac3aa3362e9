/*
 * cuda_conv_graph.h — cuDNN graph-API pieces of the CUDA convolution
 * (cuda_conv_graph.c): the operation graph of one convolution (+ bias/ReLU
 * nodes), its engine configs from the heuristics, the numerical-note filter,
 * execution plans and their execution. cuda_conv.c keeps the plan cache, the
 * locks and the search.
 */
#ifndef GPUCORE_CUDA_CONV_GRAPH_H
#define GPUCORE_CUDA_CONV_GRAPH_H

#include "cuda_dynlib.h"

#if GPUCORE_HAVE_CUDNN
/* A cuDNN status as a gpucore_status with cuDNN's message ("conv: <what> failed: ..."). */
CUDA_HIDDEN gpucore_status conv_dnn_error(cudnnStatus_t s, const char *what);
#define DNN_TRY(call, what)                                            \
    do {                                                               \
        cudnnStatus_t dnn_s_ = (call);                                 \
        if (dnn_s_ != CUDNN_STATUS_SUCCESS) { st = conv_dnn_error(dnn_s_, what); goto done; } \
    } while (0)
/* The alignment of p in bytes, up to 16. */
CUDA_HIDDEN int conv_align_of(const void *p);
/* The operation graph of d (fused: with bias-add / ReLU nodes), on handle h. */
CUDA_HIDDEN gpucore_status conv_build_graph(cudnnHandle_t h, const gpucore_conv_desc *d, int fused,
                                            cudnnBackendDescriptor_t *out);
/* Engine configs from one heuristics mode, best first (caller destroys them); returns how many. */
CUDA_HIDDEN int64_t conv_heuristic_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                           cudnnBackendDescriptor_t *cfgs, int64_t max);
/* Whether d's mode allows an engine config (its numerical notes). */
CUDA_HIDDEN int conv_config_allowed(cudnnBackendDescriptor_t cfg, const gpucore_conv_desc *d);
/* A finalized execution plan of cfg on h and its workspace bytes, or NULL. */
CUDA_HIDDEN cudnnBackendDescriptor_t conv_make_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, int64_t *ws);
/* Enqueue one plan on the stream (caller holds h's lock). */
CUDA_HIDDEN gpucore_status conv_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const gpucore_conv_desc *d,
                                        int fused, void *workspace, cudaStream_t stream);
#endif

#endif
