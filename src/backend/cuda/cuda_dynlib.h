/*
 * cuda_dynlib.h — cuDNN and NCCL, loaded by the CUDA backend module on first use
 * with dlopen, so a machine without one keeps the rest of the
 * backend (GEMM, kernels, the other library) and reports that feature as
 * GPUCORE_ERR_NOT_SUPPORTED with a message naming the missing library.
 *
 * The library is the soname (libcudnn.so.9, libnccl.so.2: found on
 * LD_LIBRARY_PATH, e.g. the Python wheels' lib folders, or the module's run
 * path), or the file GPUCORE_CUDNN_LIBRARY / GPUCORE_NCCL_LIBRARY names (the
 * contract tests point them at their stand-ins). Calls go through a table typed
 * by the real headers' declarations: DNN.cudnnCreate(...), NCCL.ncclAllReduce(...).
 */
#ifndef GPUCORE_CUDA_DYNLIB_H
#define GPUCORE_CUDA_DYNLIB_H

#include "cuda_internal.h"
#include "gpucore_config.h"

#define CUDA_DYN_FIELD(name) __typeof__(name) *name;

#if GPUCORE_HAVE_CUDNN
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn_graph.h>
#pragma GCC diagnostic pop
#define CUDA_CUDNN_SONAME "libcudnn.so.9"
#define CUDA_CUDNN_FUNCTIONS(X)                                                                          \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate) X(cudnnSetStream) \
    X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute)         \
    X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)
typedef struct cuda_cudnn_api { CUDA_CUDNN_FUNCTIONS(CUDA_DYN_FIELD) } cuda_cudnn_api;
CUDA_HIDDEN extern cuda_cudnn_api cuda_dnn_api;
#define DNN cuda_dnn_api
/* Load cuDNN once (thread-safe): GPUCORE_OK, or NOT_SUPPORTED with a message naming the library (prefixed by
 * `what`: "conv"). DNN's entries are usable after an OK. */
CUDA_HIDDEN gpucore_status cuda_cudnn_load(const char *what);
#endif

#if GPUCORE_HAVE_NCCL
#include <nccl.h>
#define CUDA_NCCL_SONAME "libnccl.so.2"
#define CUDA_NCCL_FUNCTIONS(X)                                                                               \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclGroupStart) X(ncclGroupEnd)         \
    X(ncclAllReduce) X(ncclBroadcast) X(ncclReduceScatter) X(ncclAllGather) X(ncclCommAbort)                 \
    X(ncclCommDestroy) X(ncclCommFinalize) X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError)
typedef struct cuda_nccl_api { CUDA_NCCL_FUNCTIONS(CUDA_DYN_FIELD) } cuda_nccl_api;
CUDA_HIDDEN extern cuda_nccl_api cuda_nccl_api_table;
#define NCCL cuda_nccl_api_table
CUDA_HIDDEN gpucore_status cuda_nccl_load(const char *what);
#endif

#endif
