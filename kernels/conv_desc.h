/*
 * conv_desc.h — one convolution as every backend sees it, after the API
 * front-end (src/ops/conv.c) has validated it: dims, explicit padding (padding
 * 'same' already resolved), 1-D already lifted to 2-D (H = P = R = 1), and every
 * tensor as a pointer plus element strides in logical order
 *   x, y: [n, c, h, w] / [n, k, p, q]      w: [k, c/groups, r, s]
 * whatever the user's layout; `layout` only says which dims the user stores
 * innermost (a hint backends use to pick a fast path and cuDNN's preferred
 * engines). Plain C so backend.h, the CPU backend and nvcc share it.
 *
 * Roles of the pointers per op:
 *   FORWARD          y  = conv(x, w) (+ bias, ReLU)         reads x, w, bias; writes y
 *   BACKWARD_DATA    dx = conv_transpose(dy, w)             reads y (= dy), w; writes x (= dx)
 *   BACKWARD_FILTER  dw = correlate(x, dy)                  reads x, y (= dy); writes w (= dw)
 */
#ifndef GPUCORE_KERNELS_CONV_DESC_H
#define GPUCORE_KERNELS_CONV_DESC_H

#include <stdint.h>

enum { GPUCORE_CONV_OP_FORWARD = 0, GPUCORE_CONV_OP_BACKWARD_DATA = 1, GPUCORE_CONV_OP_BACKWARD_FILTER = 2 };

/* Scratch memory from the context's caching allocator, on the op's stream, freed
 * in stream order (so it may be released right after the work is enqueued).
 * alloc returns 0 (GPUCORE_OK) or a gpucore_status; on failure it has set the
 * thread's error message, which the backend may replace. */
typedef struct gpucore_conv_workspace_fns {
    int (*alloc)(void *ws_ctx, int64_t bytes, void **ptr);
    void (*release)(void *ws_ctx, void *ptr);
    void *ws_ctx;
} gpucore_conv_workspace_fns;

typedef struct gpucore_conv_desc {
    int32_t op;            /* GPUCORE_CONV_OP_* */
    int32_t dtype;         /* gpucore_dtype of x, w, y (and bias): f32, f16 or bf16 */
    int32_t layout;        /* gpucore_conv_layout of the user's tensors (0 NCHW, 1 NHWC) */
    int32_t algo;          /* gpucore_conv_algo */
    int32_t allow_tf32;    /* 0/1, resolved */
    int32_t relu;          /* forward: ReLU after the bias */
    int32_t device;        /* device index (the plan cache is per device) */
    int32_t reserved;
    int64_t n, c, h, w;    /* input */
    int64_t k, r, s;       /* filter: k output channels, r x s taps, c/groups input channels */
    int64_t p, q;          /* output */
    int64_t groups;
    int64_t pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
    void *x;  int64_t x_strides[4]; /* [n, c, h, w] */
    void *wt; int64_t w_strides[4]; /* [k, c/groups, r, s] */
    void *y;  int64_t y_strides[4]; /* [n, k, p, q] */
    const void *bias;      /* forward: [k] contiguous, or NULL */
    int64_t workspace_limit; /* 0: none */
    gpucore_conv_workspace_fns ws;
} gpucore_conv_desc;

/* The bias-add (+ReLU) of a forward convolution no cuDNN engine fused, over its packed
 * output as a rows x cols matrix (kernels/conv_epilogue.cu): NCHW rows n*k, cols p*q,
 * the channel of a row = row % k; NHWC rows n*p*q, cols k, the channel = the column.
 * y := relu?(y + bias[channel]) in f32, rounded once to dtype. */
typedef struct gpucore_conv_bias_args {
    void *y;
    const void *bias;      /* [k] contiguous, dtype of y; NULL: ReLU only */
    int32_t dtype;         /* f32, f16, bf16 */
    int32_t relu;
    int32_t channel_is_row;/* 1 NCHW, 0 NHWC */
    int32_t reserved;
    int64_t rows, cols, k;
} gpucore_conv_bias_args;

#endif
