/*
 * test_cuda_contract.c — the contract stand-ins themselves (suite cuda-contract):
 * deliberately broken calls must be refused AND recorded with their header
 * citation (so a real break in src/backend/cuda cannot pass unnoticed), and the
 * doctor's CUDA paths ("driver too old", "CUDA_VISIBLE_DEVICES hides all") run
 * on the stand-in runtime. Run with GPUCORE_CUDA_PLUGIN set to the contract
 * module (tests/cuda_contract/meson.build); the vendor entry points are taken
 * from that module with dlsym.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#include "contract_test.h"

#define SYM(name) ((name##_t *)sym(#name))

/* A vendor entry point of the module, typed by the real header's declaration. */
#define FN(name) __typeof__(name) *name##_ = (__typeof__(name) *)sym(#name)

/* Exactly the violations provoked since the last call, one of them citing `cite`. */
static void expect_violation(const char *what, const char *cite)
{
    int n = v_count(), found = 0;
    for (int i = 0; i < n; i++)
        if (strstr(v_text(i), cite)) found = 1;
    CHECK(n > 0 && found);
    if (!(n > 0 && found)) fprintf(stderr, "  %s: expected a violation citing %s, got %d\n", what, cite, n);
    for (int i = 0; i < n; i++) printf("  recorded (%s): %s\n", what, v_text(i));
    v_clear();
}

/* ---- vendor prototypes, as the real headers declare them (types only; calls go through dlsym) ---- */
typedef int cudaError_t_;
typedef cudaError_t_ cudaMalloc_t(void **, size_t);
typedef cudaError_t_ cudaFree_t(void *);
typedef cudaError_t_ cudaSetDevice_t(int);
typedef cudaError_t_ cudaStreamCreate_t(void **);
typedef cudaError_t_ cudaStreamDestroy_t(void *);
typedef cudaError_t_ cudaStreamSynchronize_t(void *);
typedef cudaError_t_ cudaEventCreate_t(void **);
typedef cudaError_t_ cudaEventDestroy_t(void *);
typedef cudaError_t_ cudaEventRecord_t(void *, void *);
typedef cudaError_t_ cudaMemcpyAsync_t(void *, const void *, size_t, int, void *);
typedef cudaError_t_ cudaLaunchHostFunc_t(void *, void (*)(void *), void *);
typedef cudaError_t_ cudaGetDeviceCount_t(int *);

static void test_runtime(void)
{
    cudaMalloc_t *cudaMalloc_ = SYM(cudaMalloc);
    cudaFree_t *cudaFree_ = SYM(cudaFree);
    cudaStreamCreate_t *cudaStreamCreate_ = SYM(cudaStreamCreate);
    cudaStreamDestroy_t *cudaStreamDestroy_ = SYM(cudaStreamDestroy);
    cudaStreamSynchronize_t *cudaStreamSynchronize_ = SYM(cudaStreamSynchronize);
    cudaMemcpyAsync_t *cudaMemcpyAsync_ = SYM(cudaMemcpyAsync);
    cudaSetDevice_t *cudaSetDevice_ = SYM(cudaSetDevice);

    CHECK(cudaSetDevice_(0) == 0);
    void *s = NULL, *d = NULL;
    CHECK(cudaStreamCreate_(&s) == 0);
    CHECK(cudaMalloc_(&d, 64) == 0);
    char host[128] = {0};
    CHECK(cudaMemcpyAsync_(d, host, 64, 4 /* cudaMemcpyDefault */, s) == 0);
    CHECK(cudaStreamSynchronize_(s) == 0);
    expect_clean("a copy inside its allocation");

    CHECK(cudaMemcpyAsync_(d, host, 65, 4, s) != 0);
    expect_violation("a copy one byte past a device allocation", "cudaMemcpyAsync");
    CHECK(cudaFree_(d) == 0);
    CHECK(cudaMemcpyAsync_(host, d, 8, 4, s) != 0);
    expect_violation("a copy from freed device memory", "cudaMemcpyAsync");
    CHECK(cudaFree_(d) != 0);
    expect_violation("a double cudaFree", "cuda_runtime_api.h:4752");
    CHECK(cudaStreamDestroy_(s) == 0);
    CHECK(cudaStreamSynchronize_(s) != 0);
    expect_violation("a destroyed stream used", "cuda_runtime_api.h:2190");
}

static int (*cudaGetDeviceCount_)(int *);
static void callback_that_calls_cuda(void *arg)
{
    int n;
    cudaGetDeviceCount_(&n);
    *(int *)arg = 1;
}

static void test_host_fn(void)
{
    cudaGetDeviceCount_ = SYM(cudaGetDeviceCount);
    cudaStreamCreate_t *cudaStreamCreate_ = SYM(cudaStreamCreate);
    cudaLaunchHostFunc_t *cudaLaunchHostFunc_ = SYM(cudaLaunchHostFunc);
    cudaStreamSynchronize_t *cudaStreamSynchronize_ = SYM(cudaStreamSynchronize);
    cudaStreamDestroy_t *cudaStreamDestroy_ = SYM(cudaStreamDestroy);
    void *s = NULL;
    int ran = 0;
    CHECK(cudaStreamCreate_(&s) == 0);
    CHECK(cudaLaunchHostFunc_(s, callback_that_calls_cuda, &ran) == 0);
    CHECK(cudaStreamSynchronize_(s) == 0);
    CHECK(ran == 1);
    expect_violation("a host function that calls CUDA", "cuda_runtime_api.h:4087");
    cudaStreamDestroy_(s);
}

/* The doctor's CUDA paths, on the stand-in runtime (it reads these variables on every call). */
static void test_doctor_paths(void)
{
    char why[768];
    CHECK_OK(gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why));
    setenv("STANDIN_DRIVER_VERSION", "12040", 1);
    CHECK(gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) == GPUCORE_ERR_BACKEND_UNAVAILABLE);
    CHECK(strstr(why, "supports CUDA 12.4") && strstr(why, "13.0"));
    printf("  driver too old: %s\n", why);
    unsetenv("STANDIN_DRIVER_VERSION");
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    CHECK(gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why) == GPUCORE_ERR_BACKEND_UNAVAILABLE);
    CHECK(strstr(why, "CUDA_VISIBLE_DEVICES") != NULL);
    printf("  all hidden: %s\n", why);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    int n = 0;
    CHECK_OK(gpucore_device_count(GPUCORE_DEVICE_CUDA, &n));
    CHECK(n == 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK_OK(gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why));
    char buf[256];
    CHECK_OK(gpucore_component_version("cuda_driver", buf, sizeof buf));
    CHECK(strstr(buf, "stand-in") != NULL);
    CHECK_OK(gpucore_component_version("nccl", buf, sizeof buf));
    CHECK_OK(gpucore_component_version("cublas", buf, sizeof buf));
    expect_clean("doctor paths");
}

/* Planted break 1: the cuBLASLt heuristic asked before the bias pointer is set (the defect
 * item 2), then the same problem done right, whose result is checked. */
static void test_heuristic_before_pointers(void)
{
    FN(cublasLtCreate); FN(cublasLtMatmulDescCreate); FN(cublasLtMatmulDescSetAttribute);
    FN(cublasLtMatrixLayoutCreate); FN(cublasLtMatmulPreferenceCreate); FN(cublasLtMatmulAlgoGetHeuristic);
    FN(cublasLtMatmul); FN(cudaMalloc); FN(cudaMemcpyAsync); FN(cudaStreamSynchronize); FN(cudaSetDevice);
    FN(cublasLtMatmulDescDestroy); FN(cublasLtMatrixLayoutDestroy); FN(cublasLtMatmulPreferenceDestroy);
    FN(cudaFree);
    enum { M = 4, K = 3, NN = 2 };
    float a[M * K], b[K * NN], bias[M], d[M * NN];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < K * NN; i++) b[i] = (float)(i % 3) + 0.5f;
    for (int i = 0; i < M; i++) bias[i] = 10.0f * (float)i;
    CHECK(cudaSetDevice_(0) == cudaSuccess);
    void *da, *db, *dbias, *dd;
    CHECK(cudaMalloc_(&da, sizeof a) == cudaSuccess && cudaMalloc_(&db, sizeof b) == cudaSuccess &&
          cudaMalloc_(&dbias, sizeof bias) == cudaSuccess && cudaMalloc_(&dd, sizeof d) == cudaSuccess);
    cudaMemcpyAsync_(da, a, sizeof a, cudaMemcpyDefault, NULL);
    cudaMemcpyAsync_(db, b, sizeof b, cudaMemcpyDefault, NULL);
    cudaMemcpyAsync_(dbias, bias, sizeof bias, cudaMemcpyDefault, NULL);
    cublasLtHandle_t h;
    CHECK(cublasLtCreate_(&h) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t la, lb, ld;
    CHECK(cublasLtMatrixLayoutCreate_(&la, CUDA_R_32F, M, K, M) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatrixLayoutCreate_(&lb, CUDA_R_32F, K, NN, K) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatrixLayoutCreate_(&ld, CUDA_R_32F, M, NN, M) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtMatmulPreferenceCreate_(&pref) == CUBLAS_STATUS_SUCCESS);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const float alpha = 1.0f, beta = 0.0f;
    for (int right = 0; right < 2; right++) {
        cublasLtMatmulDesc_t desc;
        CHECK(cublasLtMatmulDescCreate_(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
        CHECK(cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
        if (right)
            CHECK(cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias) ==
                  CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        CHECK(cublasLtMatmulAlgoGetHeuristic_(h, desc, la, lb, ld, ld, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS &&
              found == 1);
        if (!right)
            CHECK(cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias) ==
                  CUBLAS_STATUS_SUCCESS);
        cublasStatus_t st = cublasLtMatmul_(h, desc, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, &res.algo, NULL, 0, NULL);
        if (!right) {
            CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED);
            expect_violation("heuristic asked before the bias pointer was set", "cublasLt.h:1334");
        } else {
            CHECK(st == CUBLAS_STATUS_SUCCESS);
            cudaMemcpyAsync_(d, dd, sizeof d, cudaMemcpyDefault, NULL);
            CHECK(cudaStreamSynchronize_(NULL) == cudaSuccess);
            int bad = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < NN; j++) {
                    float want = bias[i];
                    for (int p = 0; p < K; p++) want += a[i + p * M] * b[p + j * K];
                    bad += d[i + j * M] != want;
                }
            CHECK(bad == 0);
            expect_clean("pointers set before the heuristic");
        }
        cublasLtMatmulDescDestroy_(desc);
    }
    /* a wrong attribute type: EPILOGUE is a uint32_t (cublasLt.h:1321), given as 8 bytes */
    cublasLtMatmulDesc_t desc;
    CHECK(cublasLtMatmulDescCreate_(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    uint64_t wide = CUBLASLT_EPILOGUE_BIAS;
    CHECK(cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &wide, sizeof wide) ==
          CUBLAS_STATUS_INVALID_VALUE);
    expect_violation("an attribute of the wrong type", "cublasLt.h:1321");
    cublasLtMatmulDescDestroy_(desc);
    cublasLtMatrixLayoutDestroy_(la);
    cublasLtMatrixLayoutDestroy_(lb);
    cublasLtMatrixLayoutDestroy_(ld);
    cublasLtMatmulPreferenceDestroy_(pref);
    cudaFree_(da); cudaFree_(db); cudaFree_(dbias); cudaFree_(dd);
    expect_clean("cuBLASLt teardown");
}

/* Planted break 2: an event recorded on a stream inside an NCCL group, before ncclGroupEnd queued anything. */
static void test_event_inside_group(void)
{
    FN(ncclGetUniqueId); FN(ncclCommInitRankConfig); FN(ncclGroupStart); FN(ncclGroupEnd); FN(ncclAllReduce);
    FN(ncclCommGetAsyncError); FN(ncclCommDestroy); FN(cudaSetDevice); FN(cudaStreamCreate); FN(cudaEventCreate);
    FN(cudaEventRecord); FN(cudaStreamSynchronize); FN(cudaMalloc); FN(cudaFree); FN(cudaEventDestroy);
    FN(cudaStreamDestroy); FN(cudaMemcpyAsync);
    ncclUniqueId id;
    CHECK(ncclGetUniqueId_(&id) == ncclSuccess);
    ncclComm_t c[2];
    cudaStream_t s[2];
    void *buf[2];
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    CHECK(ncclGroupStart_() == ncclSuccess);
    for (int r = 0; r < 2; r++) {
        cudaSetDevice_(r);
        ncclResult_t res = ncclCommInitRankConfig_(&c[r], 2, id, r, &cfg);
        CHECK(res == ncclSuccess || res == ncclInProgress);
        CHECK(cudaStreamCreate_(&s[r]) == cudaSuccess && cudaMalloc_(&buf[r], 64) == cudaSuccess);
    }
    CHECK(ncclGroupEnd_() == ncclSuccess);
    for (int r = 0; r < 2; r++) {
        ncclResult_t a = ncclInProgress;
        while (a == ncclInProgress) ncclCommGetAsyncError_(c[r], &a);
        CHECK(a == ncclSuccess);
    }
    cudaSetDevice_(0);
    cudaEvent_t ev;
    CHECK(cudaEventCreate_(&ev) == cudaSuccess);
    CHECK(ncclGroupStart_() == ncclSuccess);
    for (int r = 0; r < 2; r++) CHECK(ncclAllReduce_(buf[r], buf[r], 16, ncclFloat32, ncclSum, c[r], s[r]) == ncclSuccess);
    CHECK(cudaEventRecord_(ev, s[0]) == cudaSuccess); /* the break: completes before the allreduce */
    expect_violation("an event recorded inside an NCCL group", "nccl.h:555");
    /* a copy (or a kernel) there runs before the held allreduce: it reads or overwrites unreduced data */
    CHECK(cudaMemcpyAsync_((char *)buf[0] + 32, buf[0], 32, cudaMemcpyDefault, s[0]) == cudaSuccess);
    expect_violation("a copy queued inside an NCCL group on the held stream", "nccl.h:555,565");
    CHECK(cudaStreamSynchronize_(s[0]) == cudaSuccess);
    expect_violation("synchronizing a held stream inside an NCCL group", "nccl.h:555,565");
    ncclResult_t end = ncclGroupEnd_();
    CHECK(end == ncclSuccess || end == ncclInProgress);
    for (int r = 0; r < 2; r++) {
        ncclResult_t a = ncclInProgress;
        while (a == ncclInProgress) ncclCommGetAsyncError_(c[r], &a);
        CHECK(cudaStreamSynchronize_(s[r]) == cudaSuccess);
    }
    CHECK(ncclGroupEnd_() == ncclInvalidUsage);
    expect_violation("ncclGroupEnd without ncclGroupStart", "nccl.h:568");
    for (int r = 0; r < 2; r++) {
        cudaSetDevice_(r);
        CHECK(ncclCommDestroy_(c[r]) == ncclSuccess);
        cudaFree_(buf[r]);
        cudaStreamDestroy_(s[r]);
    }
    cudaSetDevice_(0);
    cudaEventDestroy_(ev);
    CHECK(ncclCommDestroy_(c[0]) == ncclInvalidArgument);
    expect_violation("a destroyed communicator used", "nccl.h:192");
}

/* Planted break 3: cuDNN attributes of the wrong type, and a descriptor referenced before it is finalized. */
static void test_cudnn_attribute_types(void)
{
    FN(cudnnBackendCreateDescriptor); FN(cudnnBackendSetAttribute); FN(cudnnBackendDestroyDescriptor);
    FN(cudnnBackendFinalize); FN(cudnnBackendGetAttribute);
    cudnnBackendDescriptor_t t = NULL, op = NULL;
    CHECK(cudnnBackendCreateDescriptor_(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t) == CUDNN_STATUS_SUCCESS);
    int64_t dt64 = CUDNN_DATA_FLOAT;
    CHECK(cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_INT64, 1, &dt64) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a cuDNN attribute of the wrong type", "cudnn_graph_v9.h:1019");
    int64_t dims[4] = {1, 2, 3, 4};
    CHECK(cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 9, dims) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a cuDNN attribute with too many elements", "cudnn_graph_v9.h:1019");
    int64_t n = 0;
    CHECK(cudnnBackendGetAttribute_(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &n, dims) ==
          CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    expect_violation("a cuDNN attribute read before finalize", "cudnn_graph_v9.h:1026");
    CHECK(cudnnBackendFinalize_(t) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a cuDNN descriptor finalized without its required attributes", "cudnn_graph_v9.h:1016");
    CHECK(cudnnBackendCreateDescriptor_(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op) == CUDNN_STATUS_SUCCESS);
    CHECK(cudnnBackendSetAttribute_(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t) ==
          CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    expect_violation("a cuDNN descriptor referenced before it is finalized", "cudnn_graph_v9.h:1019");
    cudnnBackendDestroyDescriptor_(op);
    cudnnBackendDestroyDescriptor_(t);
    CHECK(cudnnBackendFinalize_(t) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a destroyed cuDNN descriptor used", "cudnn_graph_v9.h");
}

/* Planted breaks in SDPA graph nodes (standin_cudnn_sdpa.c): each refused, citing the header. */
static cudnnBackendDescriptor_t sdpa_tensor(int64_t uid, cudnnDataType_t dt, int64_t d2, int64_t d3, const int64_t *strides,
                                            int virt, int byval)
{
    FN(cudnnBackendCreateDescriptor); FN(cudnnBackendSetAttribute);
    const int64_t dims[4] = {1, 1, d2, d3}, packed[4] = {d2 * d3, d2 * d3, d3, 1}, align = 16;
    bool v = virt != 0, b = byval != 0;
    cudnnBackendDescriptor_t t = NULL;
    cudnnBackendCreateDescriptor_(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t);
    cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides ? strides : packed);
    cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    if (b) cudnnBackendSetAttribute_(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &b);
    return t;
}

/* Finalize a node of type ty with descriptor attributes names[i] = vals[i] (n of them); returns the status. */
static cudnnStatus_t sdpa_node(cudnnBackendDescriptorType_t ty, int n, const cudnnBackendAttributeName_t *names,
                               cudnnBackendDescriptor_t *vals)
{
    FN(cudnnBackendCreateDescriptor); FN(cudnnBackendSetAttribute); FN(cudnnBackendFinalize);
    FN(cudnnBackendDestroyDescriptor);
    cudnnBackendDescriptor_t op = NULL;
    cudnnBackendCreateDescriptor_(ty, &op);
    for (int i = 0; i < n; i++) cudnnBackendSetAttribute_(op, names[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &vals[i]);
    cudnnStatus_t st = cudnnBackendFinalize_(op);
    cudnnBackendDestroyDescriptor_(op);
    return st;
}

static void test_cudnn_sdpa_nodes(void)
{
    FN(cudnnBackendCreateDescriptor); FN(cudnnBackendSetAttribute); FN(cudnnBackendFinalize);
    FN(cudnnBackendDestroyDescriptor);
    /* tensors are finalized here (sdpa_tensor leaves that to the caller: one case must fail it) */
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
    cudnnBackendDescriptor_t x = sdpa_tensor(1, f32, 4, 8, NULL, 0, 0), idx = sdpa_tensor(2, i32, 4, 8, NULL, 1, 0);
    cudnnBackendDescriptor_t b = sdpa_tensor(3, f32, 6, 4, NULL, 0, 0), c = sdpa_tensor(4, f32, 4, 4, NULL, 1, 0);
    cudnnBackendDescriptor_t y = sdpa_tensor(5, f32, 4, 8, NULL, 1, 0);
    const int64_t wide[4] = {64, 64, 8, 1};
    cudnnBackendDescriptor_t not_view = sdpa_tensor(6, f32, 8, 4, wide, 1, 0);
    cudnnBackendDescriptor_t ts[6] = {x, idx, b, c, y, not_view};
    for (int i = 0; i < 6; i++) CHECK(cudnnBackendFinalize_(ts[i]) == CUDNN_STATUS_SUCCESS);
    cudnnBackendDescriptor_t pw = NULL, pwsel = NULL, mm = NULL, bad = NULL;
    cudnnPointwiseMode_t gen = CUDNN_POINTWISE_GEN_INDEX, sel = CUDNN_POINTWISE_BINARY_SELECT, tanh_ = CUDNN_POINTWISE_TANH_FWD;
    cudnnBackendCreateDescriptor_(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw); /* GEN_INDEX without its axis */
    cudnnBackendSetAttribute_(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &gen);
    cudnnBackendSetAttribute_(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &i32);
    CHECK(cudnnBackendFinalize_(pw) == CUDNN_STATUS_SUCCESS);
    cudnnBackendCreateDescriptor_(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pwsel);
    cudnnBackendSetAttribute_(pwsel, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &sel);
    cudnnBackendSetAttribute_(pwsel, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CHECK(cudnnBackendFinalize_(pwsel) == CUDNN_STATUS_SUCCESS);
    cudnnBackendCreateDescriptor_(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm);
    cudnnBackendSetAttribute_(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CHECK(cudnnBackendFinalize_(mm) == CUDNN_STATUS_SUCCESS);
    expect_clean("building SDPA node pieces");

    const cudnnBackendAttributeName_t pwn[4] = {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                                CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC};
    cudnnBackendDescriptor_t gen_args[3] = {pw, x, idx};
    CHECK(sdpa_node(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 3, pwn, gen_args) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("GEN_INDEX without CUDNN_ATTR_POINTWISE_AXIS", "cudnn_graph_v9.h:484");
    const cudnnBackendAttributeName_t seln[5] = {pwn[0], pwn[1], pwn[2], pwn[3], CUDNN_ATTR_OPERATION_POINTWISE_TDESC};
    cudnnBackendDescriptor_t sel_args[5] = {pwsel, x, y, x, x}; /* t is f32, not BOOLEAN */
    CHECK(sdpa_node(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 5, seln, sel_args) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("BINARY_SELECT with a non-boolean t", "cudnn_graph_v9.h:550");
    const cudnnBackendAttributeName_t mmn[4] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                                CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
    cudnnBackendDescriptor_t mm_args[4] = {x, b, c, mm}; /* [4, 8] x [6, 4] */
    CHECK(sdpa_node(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, mmn, mm_args) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a matmul whose inner dims differ", "cudnn_graph_v9.h:623");
    const cudnnBackendAttributeName_t rsn[2] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    cudnnBackendDescriptor_t rs_args[2] = {x, not_view};
    CHECK(sdpa_node(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, rsn, rs_args) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a reshape that is not a view of x", "cudnn_graph_v9.h:722");
    cudnnBackendDescriptor_t byval_virtual = sdpa_tensor(7, f32, 1, 1, NULL, 1, 1);
    CHECK(cudnnBackendFinalize_(byval_virtual) == CUDNN_STATUS_BAD_PARAM);
    expect_violation("a virtual by-value tensor", "cudnn_graph_v9.h:590");
    cudnnBackendCreateDescriptor_(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &bad);
    cudnnBackendSetAttribute_(bad, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &tanh_);
    cudnnBackendSetAttribute_(bad, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CHECK(cudnnBackendFinalize_(bad) == CUDNN_STATUS_NOT_SUPPORTED);
    expect_violation("a pointwise mode the stand-in does not model", "cudnn_graph_v9.h:475");
    cudnnBackendDescriptor_t all[12] = {x, idx, b, c, y, not_view, pw, pwsel, mm, bad, byval_virtual, NULL};
    for (int i = 0; all[i]; i++) cudnnBackendDestroyDescriptor_(all[i]);
    expect_clean("destroying SDPA node pieces");
}

/* two ranks driven from one thread, one grouped round per step, each rank's input coming
 * from a user stream (so ev_in/ev_out and the completion callback are all exercised). The collectives must
 * be complete when gpucore_comm_wait returns, and no event/callback may be put on a stream before
 * ncclGroupEnd queued the collectives (nccl.h:555). */
static void test_grouped_allreduce(void)
{
    gpucore_context *ctx[2] = {NULL, NULL};
    gpucore_comm *comm[2] = {NULL, NULL};
    gpucore_stream *user[2] = {NULL, NULL};
    gpucore_tensor *t[2] = {NULL, NULL};
    enum { N = 1000 };
    CHECK_OK(gpucore_context_create("cuda:0", &ctx[0]));
    CHECK_OK(gpucore_context_create("cuda:1", &ctx[1]));
    if (!ctx[0] || !ctx[1]) return;
    CHECK_OK(gpucore_comm_create_local(ctx, 2, comm));
    float host[N];
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_stream_create(ctx[r], 0, &user[r]));
        int64_t n = N;
        CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &n, &t[r]));
        for (int i = 0; i < N; i++) host[i] = (float)(r + 1) * (float)i;
        CHECK_OK(gpucore_copy_from_host(t[r], host, sizeof host));
    }
    for (int step = 0; step < 3; step++) {
        CHECK_OK(gpucore_comm_group_start());
        for (int r = 0; r < 2; r++) CHECK_OK(gpucore_comm_allreduce(comm[r], t[r], t[r], GPUCORE_REDUCE_SUM, user[r]));
        CHECK_OK(gpucore_comm_group_end());
    }
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_comm_wait(comm[r], 0, 30));
        CHECK_OK(gpucore_stream_synchronize(user[r]));
        CHECK_OK(gpucore_copy_to_host(host, sizeof host, t[r]));
        int bad = 0;
        for (int i = 0; i < N; i++) bad += host[i] != 3.0f * 4.0f * (float)i; /* (1 + 2) * i, doubled twice more */
        CHECK(bad == 0);
        if (bad) fprintf(stderr, "  rank %d: %d wrong sums after 3 grouped allreduces (e.g. [7] = %g)\n", r, bad, host[7]);
    }
    expect_clean("grouped allreduce across two ranks");
    for (int r = 0; r < 2; r++) {
        gpucore_tensor_destroy(t[r]);
        gpucore_stream_destroy(user[r]);
        CHECK_OK(gpucore_comm_destroy(comm[r]));
    }
    for (int r = 0; r < 2; r++) gpucore_context_destroy(ctx[r]);
    expect_clean("grouped allreduce teardown");
}

/* A grouped allreduce whose communicators never settle (a peer died while NCCL connected to it
 * lazily at this first use: STANDIN_NCCL_GROUP_STALL) fails within the communicators' own
 * timeout (0.5 s here), not the 600 s default, names what happened, and leaves the library usable. */
static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_group_stall(void)
{
    gpucore_context *ctx[2] = {NULL, NULL};
    gpucore_comm *comm[2] = {NULL, NULL};
    gpucore_tensor *t[2] = {NULL, NULL};
    CHECK_OK(gpucore_context_create("cuda:0", &ctx[0]));
    CHECK_OK(gpucore_context_create("cuda:1", &ctx[1]));
    if (!ctx[0] || !ctx[1]) return;
    CHECK_OK(gpucore_comm_create_local(ctx, 2, comm));
    for (int r = 0; r < 2; r++) {
        int64_t n = 256;
        CHECK_OK(gpucore_tensor_create(ctx[r], GPUCORE_F32, 1, &n, &t[r]));
        CHECK_OK(gpucore_fill(t[r], 1.0, NULL));
        CHECK_OK(gpucore_comm_set_timeout(comm[r], 0.5));
    }
    CHECK_OK(gpucore_comm_group_start());
    for (int r = 0; r < 2; r++) CHECK_OK(gpucore_comm_allreduce(comm[r], t[r], t[r], GPUCORE_REDUCE_SUM, NULL));
    setenv("STANDIN_NCCL_GROUP_STALL", "1", 1);
    const double t0 = wall_s();
    CHECK_STATUS(gpucore_comm_group_end(), GPUCORE_ERR_COMM);
    const double took = wall_s() - t0;
    unsetenv("STANDIN_NCCL_GROUP_STALL");
    CHECK(took < 5.0);
    CHECK(strstr(gpucore_last_error(), "did not settle") != NULL);
    printf("  stalled group: comm_group_end failed after %.2f s: %s\n", took, gpucore_last_error());
    /* the library stays usable: the failed communicators go, a new pair reduces */
    for (int r = 0; r < 2; r++) gpucore_comm_destroy(comm[r]);
    CHECK_OK(gpucore_comm_create_local(ctx, 2, comm));
    for (int r = 0; r < 2; r++) CHECK_OK(gpucore_fill(t[r], 1.0, NULL)); /* undefined after the failed collective */
    for (int r = 0; r < 2; r++) CHECK_OK(gpucore_comm_allreduce(comm[r], t[r], t[r], GPUCORE_REDUCE_SUM, NULL));
    float host[256];
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_comm_wait(comm[r], 0, 30));
        CHECK_OK(gpucore_context_synchronize(ctx[r]));
        CHECK_OK(gpucore_copy_to_host(host, sizeof host, t[r]));
        CHECK(host[0] == 2.0f && host[255] == 2.0f);
    }
    for (int r = 0; r < 2; r++) {
        CHECK_OK(gpucore_comm_destroy(comm[r]));
        gpucore_tensor_destroy(t[r]);
    }
    for (int r = 0; r < 2; r++) gpucore_context_destroy(ctx[r]);
    expect_clean("a comm group that never settles");
}

static int warn_fallback_logs;
static void count_fallback_warnings(int level, const char *message, void *user)
{
    (void)user;
    if (level == GPUCORE_LOG_WARN && strstr(message, "fallback GEMM kernel")) warn_fallback_logs++;
}

/* when cuBLASLt has no algorithm the fallback kernel runs, with one WARN per shape, and
 * it takes any number of rows (before: n > 1,048,560 needed grid.y > 65535, an invalid launch). */
static void test_fallback_gemm(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    setenv("STANDIN_LT_NO_ALGO", "1", 1);
    gpucore_set_log_callback(count_fallback_warnings, NULL);
    gpucore_log_level saved = gpucore_get_log_level();
    gpucore_set_log_level(GPUCORE_LOG_WARN);
    const int64_t rows = 1048577 + 16; /* the user's rows are the column-major n of the GEMM */
    int64_t sa[2] = {rows, 1}, sb[2] = {1, 1}, sd[2] = {rows, 1};
    gpucore_tensor *a = NULL, *b = NULL, *d = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sa, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sb, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sd, &d));
    float *host = malloc(sizeof(float) * (size_t)rows), two = 2.0f;
    for (int64_t i = 0; i < rows; i++) host[i] = (float)(i % 1000);
    CHECK_OK(gpucore_copy_from_host(a, host, (int64_t)sizeof(float) * rows));
    CHECK_OK(gpucore_copy_from_host(b, &two, sizeof two));
    for (int rep = 0; rep < 2; rep++) CHECK_OK(gpucore_matmul(a, b, d, NULL, NULL));
    CHECK_OK(gpucore_copy_to_host(host, (int64_t)sizeof(float) * rows, d));
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; i++) bad += host[i] != 2.0f * (float)(i % 1000);
    CHECK(bad == 0);
    if (bad) fprintf(stderr, "  fallback GEMM with %lld rows: %lld wrong\n", (long long)rows, (long long)bad);
    CHECK(warn_fallback_logs == 1); /* once per plan, not per call, and at WARN */
    unsetenv("STANDIN_LT_NO_ALGO");
    /* an algorithm cublasLtMatmul refuses is dropped for the next; all refused: fallback */
    int64_t s4[2] = {8, 8};
    gpucore_tensor *q = NULL, *r = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s4, &q));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s4, &r));
    CHECK_OK(gpucore_fill(q, 0.5, NULL));
    long before = standin_counter_("lt_matmul_executed");
    setenv("STANDIN_LT_REFUSE", "0", 1);
    CHECK_OK(gpucore_matmul(q, q, r, NULL, NULL)); /* algorithm 0 refused, 1 runs */
    float h8[64];
    CHECK_OK(gpucore_copy_to_host(h8, sizeof h8, r));
    CHECK(h8[0] == 2.0f && h8[63] == 2.0f && standin_counter_("lt_matmul_executed") == before + 1);
    CHECK(warn_fallback_logs == 1);
    gpucore_matmul_options mo;
    gpucore_matmul_options_init(&mo);
    mo.trans_a = 1; /* a new plan, every algorithm of it refused */
    setenv("STANDIN_LT_REFUSE", "012", 1);
    CHECK_OK(gpucore_matmul(q, q, r, &mo, NULL));
    CHECK_OK(gpucore_copy_to_host(h8, sizeof h8, r));
    CHECK(h8[0] == 2.0f && warn_fallback_logs == 2);
    unsetenv("STANDIN_LT_REFUSE");
    gpucore_tensor_destroy(q);
    gpucore_tensor_destroy(r);
    gpucore_set_log_level(saved);
    gpucore_set_log_callback(NULL, NULL);
    free(host);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(b);
    gpucore_tensor_destroy(d);
    gpucore_context_destroy(ctx);
    expect_clean("fallback GEMM");
}

/* gpucore-info's device queries on the stand-in runtime and NVML. */
static void test_device_queries(void)
{
    gpucore_device_properties p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(gpucore_device_get_properties(GPUCORE_DEVICE_CUDA, 1, &p));
    CHECK(p.compute_major == 9 && p.multiprocessors == 4 && p.temperature_c == 41 && p.has_native_code == 1);
    CHECK(strcmp(p.pci_bus_id, "0000:11:00.0") == 0);
    int64_t pids[4], used[4];
    int count = 0, can = -1;
    CHECK_OK(gpucore_device_get_processes(0, pids, used, 4, &count));
    CHECK(count == 1 && used[0] == 64 << 20);
    CHECK_OK(gpucore_device_can_access_peer(0, 1, &can));
    CHECK(can == 1);
    CHECK_STATUS(gpucore_device_get_properties(GPUCORE_DEVICE_CUDA, 7, &p), GPUCORE_ERR_INVALID_ARGUMENT);
    char buf[256];
    CHECK_OK(gpucore_component_version("cuda_runtime", buf, sizeof buf));
    CHECK(strcmp(buf, "13.0") == 0);
    CHECK_OK(gpucore_component_version("cudnn", buf, sizeof buf));
    CHECK_OK(gpucore_component_version("nvml", buf, sizeof buf));
    expect_clean("device queries");
}

typedef struct rank_arg { const unsigned char *id; int rank, size; double timeout; int silent, calls; gpucore_status st; } rank_arg;
static void *rank_main(void *p)
{
    rank_arg *a = p;
    char dev[16];
    snprintf(dev, sizeof dev, "cuda:%d", a->rank);
    gpucore_context *ctx = NULL;
    gpucore_comm *comm = NULL;
    a->st = gpucore_context_create(dev, &ctx);
    if (!a->st) a->st = gpucore_comm_create(ctx, a->id, GPUCORE_COMM_ID_BYTES, a->rank, a->size, &comm);
    if (!a->st) {
        gpucore_comm_set_timeout(comm, a->timeout);
        gpucore_tensor *t = NULL;
        int64_t n = 64;
        if (!(a->st = gpucore_tensor_create(ctx, GPUCORE_F32, 1, &n, &t))) a->st = gpucore_fill(t, 1.0, NULL);
        /* a silent rank never issues the broadcast: the watchdog must fail its peer's */
        for (int i = 0; i < (a->calls ? a->calls : 1) && !a->st && !a->silent; i++)
            a->st = gpucore_comm_broadcast(comm, t, t, 0, NULL);
        if (!a->st && !a->silent) a->st = gpucore_comm_wait(comm, 0, 30);
        gpucore_tensor_destroy(t);
        gpucore_comm_destroy(comm);
    }
    if (ctx) gpucore_context_destroy(ctx);
    return NULL;
}

/* Communicators made from a unique id (path 2), one thread per rank; a rank that never joins (timeout at
 * creation) and one that never issues a collective (the watchdog fails and aborts the communicator). */
static void test_comm_paths(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    unsigned char id[GPUCORE_COMM_ID_BYTES];
    CHECK_OK(gpucore_comm_unique_id(ctx, id, sizeof id));
    rank_arg args[2] = {{id, 0, 2, 30, 0, 0, GPUCORE_OK}, {id, 1, 2, 30, 0, 0, GPUCORE_OK}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &args[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    CHECK(args[0].st == GPUCORE_OK && args[1].st == GPUCORE_OK);
    expect_clean("a 2-rank communicator from a unique id");

    CHECK_OK(gpucore_comm_unique_id(ctx, id, sizeof id));
    rank_arg stall[2] = {{id, 0, 2, 0.5, 0, 0, GPUCORE_OK}, {id, 1, 2, 0.5, 1, 0, GPUCORE_OK}};
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &stall[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    CHECK(stall[0].st == GPUCORE_ERR_COMM && stall[1].st == GPUCORE_OK);
    if (stall[0].st != GPUCORE_ERR_COMM) fprintf(stderr, "  stalled peer: rank 0 got %s\n", gpucore_status_string(stall[0].st));
    expect_clean("a peer that never issues the collective (watchdog timeout, abort)");

    /* the watchdog aborts (timeout 0.2 s) while this rank is inside its second, slow (0.3 s)
     * NCCL call: the abort must wait for the call, not free the communicator under it. */
    CHECK_OK(gpucore_comm_unique_id(ctx, id, sizeof id));
    rank_arg race[2] = {{id, 0, 2, 0.2, 0, 2, GPUCORE_OK}, {id, 1, 2, 0.2, 1, 0, GPUCORE_OK}};
    setenv("STANDIN_NCCL_CALL_MS", "300", 1);
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &race[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    unsetenv("STANDIN_NCCL_CALL_MS");
    CHECK(race[0].st == GPUCORE_ERR_COMM);
    expect_clean("the watchdog's abort racing an enqueue");

    CHECK_OK(gpucore_comm_unique_id(ctx, id, sizeof id));
    gpucore_comm *lonely = NULL;
    setenv("GPUCORE_COMM_TIMEOUT", "0.5", 1);
    CHECK_STATUS(gpucore_comm_create(ctx, id, sizeof id, 0, 2, &lonely), GPUCORE_ERR_TIMEOUT);
    unsetenv("GPUCORE_COMM_TIMEOUT");
    expect_clean("a rank that waits for a peer that never joins");
    gpucore_context_destroy(ctx);
}

/* fp8 through cuBLASLt (TN layout), and fp8 with an f32 output and a bias. */
static void test_fp8(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    int64_t s[2] = {16, 16}, sb[1] = {16};
    gpucore_tensor *a = NULL, *b = NULL, *d = NULL, *df = NULL, *bias = NULL, *amax = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_FP8_E4M3, 2, s, &a));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_FP8_E4M3, 2, s, &b));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_BF16, 2, s, &d));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, s, &df));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb, &bias));
    int64_t one = 1;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, &one, &amax));
    unsigned char ones[256], twos[256];
    memset(ones, 0x38, sizeof ones); /* 1.0 in e4m3 */
    memset(twos, 0x40, sizeof twos); /* 2.0 in e4m3 */
    CHECK_OK(gpucore_copy_from_host(a, ones, sizeof ones));
    CHECK_OK(gpucore_copy_from_host(b, twos, sizeof twos));
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    o.amax_d = amax;
    CHECK_OK(gpucore_matmul(a, b, d, &o, NULL));
    unsigned short out[256];
    float mx = 0;
    CHECK_OK(gpucore_copy_to_host(out, sizeof out, d));
    CHECK_OK(gpucore_copy_to_host(&mx, sizeof mx, amax));
    CHECK(out[0] == 0x4200 && out[255] == 0x4200 && mx == 32.0f); /* 16 products of 1 x 2 = 32 in bf16 */
    expect_clean("an fp8 TN matmul");
    /* amax over a D that is not uniform: row 5 of a is -2 (d row 5 = -64), the rest 1 (d 32) */
    memset(ones + 5 * 16, 0xC0, 16); /* -2.0 in e4m3 */
    CHECK_OK(gpucore_copy_from_host(a, ones, sizeof ones));
    CHECK_OK(gpucore_fill(amax, -7.0, NULL)); /* overwritten, not folded in */
    CHECK_OK(gpucore_matmul(a, b, d, &o, NULL));
    CHECK_OK(gpucore_copy_to_host(&mx, sizeof mx, amax));
    CHECK(mx == 64.0f);
    if (mx != 64.0f) fprintf(stderr, "  fp8 matmul amax_d: %g, want 64\n", mx);
    expect_clean("an fp8 TN matmul with amax_d");
    /* f32 output with a bias: cuBLASLt wants a bf16 bias there (cublasLt.h:1539-1546) */
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    o.epilogue = GPUCORE_EPILOGUE_BIAS;
    o.bias = bias;
    CHECK_OK(gpucore_fill(bias, 1.0, NULL));
    gpucore_status st = gpucore_matmul(a, b, df, &o, NULL);
    CHECK(st == GPUCORE_ERR_NOT_SUPPORTED && strstr(gpucore_last_error(), "bf16 bias"));
    if (st != GPUCORE_ERR_NOT_SUPPORTED) fprintf(stderr, "  fp8 -> f32 with an f32 bias: %s\n", gpucore_last_error());
    expect_clean("fp8 with an f32 output and a bias");
    gpucore_tensor *all[] = {a, b, d, df, bias, amax};
    for (int i = 0; i < 6; i++) gpucore_tensor_destroy(all[i]);
    gpucore_context_destroy(ctx);
}

/* Convolution through the real module's cuDNN graph code: fused and unfused bias+ReLU, autotuning, and an
 * engine passed over for its workspace. x = 1, w = 1 (3x3, 2 channels), pad 1: y = 18 inside, 8 at a corner. */
static void test_conv_paths(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    int64_t sx[4] = {1, 2, 4, 4}, sw[4] = {3, 2, 3, 3}, sy[4] = {1, 3, 4, 4}, sb[1] = {3};
    gpucore_tensor *x = NULL, *w = NULL, *y = NULL, *b = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sx, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sw, &w));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sy, &y));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb, &b));
    CHECK_OK(gpucore_fill(x, 1.0, NULL));
    CHECK_OK(gpucore_fill(w, 1.0, NULL));
    CHECK_OK(gpucore_fill(b, -8.5, NULL));
    for (int variant = 0; variant < 4; variant++) {
        gpucore_conv_options o;
        gpucore_conv_options_init(&o);
        o.pad_h = o.pad_w = 1;
        o.activation = GPUCORE_ACT_RELU;
        o.algo = variant == 1 ? GPUCORE_CONV_ALGO_AUTOTUNE : variant == 3 ? GPUCORE_CONV_ALGO_DETERMINISTIC
                                                                           : GPUCORE_CONV_ALGO_HEURISTIC;
        o.allow_tf32 = variant == 3 ? 1 : 0;
        o.workspace_limit = variant == 3 ? 16 : 0; /* engine 0 needs 4096 bytes: passed over */
        o.stride_h = variant == 2 ? 2 : 1; /* a new plan key for the unfused run */
        if (variant == 2) setenv("STANDIN_DNN_NO_FUSION", "1", 1);
        gpucore_tensor *yy = y;
        int64_t sy2[4] = {1, 3, 2, 4};
        if (variant == 2) CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 4, sy2, &yy));
        CHECK_OK(gpucore_conv_forward(x, w, b, yy, &o, NULL));
        unsetenv("STANDIN_DNN_NO_FUSION");
        float out[48];
        CHECK_OK(gpucore_copy_to_host(out, (int64_t)sizeof(float) * (variant == 2 ? 24 : 48), yy));
        /* relu(conv - 8.5): 9.5 inside (18 taps), 0 at a corner (8 taps) */
        int idx_inside = variant == 2 ? 1 * 4 + 1 : 1 * 4 + 1;
        CHECK(out[idx_inside] == 9.5f && out[0] == 0.0f);
        if (!(out[idx_inside] == 9.5f && out[0] == 0.0f))
            fprintf(stderr, "  conv variant %d: inside %g, corner %g\n", variant, out[idx_inside], out[0]);
        if (yy != y) gpucore_tensor_destroy(yy);
    }
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(w);
    gpucore_tensor_destroy(y);
    gpucore_tensor_destroy(b);
    CHECK_STATUS(gpucore_comm_group_end(), GPUCORE_ERR_INVALID_ARGUMENT); /* an end without a start */
    gpucore_context_destroy(ctx);
    expect_clean("convolution paths");
}

/* the first matmul on cuda:1 while another context's op left device 0 current. A cuBLASLt
 * handle belongs to the device current when it is created; the module used to create it before
 * cudaSetDevice. Latent, not failing, before that fix: the matmul's workspace allocation happens to make
 * the device current first. This guards the order. */
static void test_handle_device(void)
{
    gpucore_context *c0 = NULL, *c1 = NULL;
    CHECK_OK(gpucore_context_create("cuda:1", &c1));
    CHECK_OK(gpucore_context_create("cuda:0", &c0));
    if (!c0 || !c1) return;
    int64_t s[2] = {4, 4};
    gpucore_tensor *a = NULL, *d = NULL, *z = NULL;
    CHECK_OK(gpucore_tensor_create(c1, GPUCORE_F32, 2, s, &a));
    CHECK_OK(gpucore_tensor_create(c1, GPUCORE_F32, 2, s, &d));
    CHECK_OK(gpucore_tensor_create(c0, GPUCORE_F32, 2, s, &z));
    CHECK_OK(gpucore_fill(a, 1.0, NULL));
    CHECK_OK(gpucore_fill(z, 0.0, NULL)); /* device 0 is current on this thread now */
    CHECK_OK(gpucore_matmul(a, a, d, NULL, NULL));
    float h[16];
    CHECK_OK(gpucore_copy_to_host(h, sizeof h, d));
    CHECK(h[0] == 4.0f && h[15] == 4.0f);
    gpucore_tensor_destroy(a);
    gpucore_tensor_destroy(d);
    gpucore_tensor_destroy(z);
    gpucore_context_destroy(c0);
    gpucore_context_destroy(c1);
    expect_clean("the first matmul on cuda:1 after an op on cuda:0");
}

int main(void)
{
    if (!contract_open()) return 1;
    test_handle_device();
    test_runtime();
    test_host_fn();
    test_doctor_paths();
    test_heuristic_before_pointers();
    test_event_inside_group();
    test_cudnn_attribute_types();
    test_cudnn_sdpa_nodes();
    test_grouped_allreduce();
    test_group_stall();
    test_fallback_gemm();
    test_device_queries();
    test_comm_paths();
    test_fp8();
    test_conv_paths();
    return check_finish("test_cuda_contract");
}
