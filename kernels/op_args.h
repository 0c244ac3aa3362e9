/*
 * op_args.h — the argument blocks of the tensor-op vtable entries and kernel
 * launchers (plain C structs: the API layer fills them, the CPU backend, the
 * CUDA launchers and the SIMT emulation read them). The op codes and formulas
 * are in the <family>_math.h headers.
 */
#ifndef GPUCORE_KERNELS_OP_ARGS_H
#define GPUCORE_KERNELS_OP_ARGS_H

#include <stdint.h>
#include "view.h"

/* Elementwise family (elementwise_math.h). */
typedef struct gpucore_ew_args {
    gpucore_view out;
    gpucore_view in[2];  /* same ndim and shape as out; broadcast dims have stride 0 */
    int32_t nin;         /* 1 or 2 */
    int32_t op;          /* GPUCORE_EW_* */
    int32_t act;         /* activation applied after binary/axpby ops (fusion); 0 none */
    int32_t reserved;
    float alpha, beta;   /* op parameters (see the op codes) */
    uint64_t seed, offset; /* dropout */
} gpucore_ew_args;

/* Reduction family (reduce_math.h): in is contiguous, seen as [outer, len, inner],
 * reduced over len into the contiguous out [outer, inner] (i64 for argmax). */
typedef struct gpucore_reduce_args {
    gpucore_view in;
    gpucore_view out;
    int64_t outer, len, inner;
    int32_t op;           /* GPUCORE_RED_* */
    int32_t reserved;
    void *workspace;      /* kernel backends: gpucore_reduce_workspace_bytes(); unused on the CPU */
} gpucore_reduce_args;

/* Row family (rows_math.h): softmax, log-softmax, LayerNorm, RMSNorm,
 * cross-entropy over the last dim of contiguous [rows, cols] tensors, and the
 * embedding gather/scatter. Which pointers are used depends on op (see rows_math.h). */
typedef struct gpucore_rows_args {
    int32_t op;           /* GPUCORE_ROWS_* */
    int32_t dtype;        /* x, y, dy, dx (logits, dlogits; embedding table, out) */
    int32_t param_dtype;  /* gamma, beta, dgamma, dbeta */
    int32_t target_dtype; /* i32 or i64 targets / embedding indices */
    int32_t loss_dtype;   /* cross-entropy: dtype of loss (forward) and dloss (backward) */
    int32_t reduction;    /* cross-entropy: GPUCORE_ROWS_RED_* */
    int64_t rows, cols;   /* embedding: rows = number of indices, cols = embedding dim */
    int64_t vocab;        /* embedding: rows of the table */
    const void *x, *dy, *gamma, *beta, *targets;  /* gamma/beta may be NULL (no affine) */
    void *y, *dx, *dgamma, *dbeta;                /* dgamma/dbeta may be NULL (not wanted) */
    float *mean, *rstd;   /* f32 [rows] saved by norm forward (may be NULL), read by backward */
    void *loss;           /* cross-entropy forward: loss_dtype, [rows] (NONE) or [1] */
    const void *dloss;    /* cross-entropy backward: loss_dtype, [rows] (NONE) or [1] */
    int64_t ignore_index;
    float eps;
    int32_t reserved;
    /* cross-entropy: class weights (param_dtype [cols]; NULL: all 1) and label
     * smoothing; a float target_dtype means class-probability targets [rows, cols] */
    const void *weight;
    float smoothing;
    int32_t reserved2;
    /* cross-entropy: the class stride. 0 or 1: rows are contiguous [rows, cols] (class dim
     * last); inner > 1: logits (dlogits, probability targets) are [outer, cols, inner] and
     * row r = o * inner + i is the classes of (o, i) (PyTorch's (N, C, d1, ...) layout) */
    int64_t inner;
    void *workspace;      /* kernel backends: gpucore_rows_workspace_bytes(); unused on the CPU */
} gpucore_rows_args;

#endif
