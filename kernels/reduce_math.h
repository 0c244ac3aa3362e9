/*
 * reduce_math.h — the reduction family's op codes, accumulator and combine
 * rule, shared by the CPU backend and reduce.cu. A reduction folds (value,
 * index) pairs; combine() is order-independent for max/min/argmax (ties and
 * NaNs resolve to the smallest index, NaN wins: it propagates like torch.max)
 * and the sums are made deterministic by fixed chunking and fixed trees.
 */
#ifndef GPUCORE_KERNELS_REDUCE_MATH_H
#define GPUCORE_KERNELS_REDUCE_MATH_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "op_args.h"
#include "op_tables.h"

/* Op codes: gpucore_reduction's values, from op_tables.h. */
enum {
#define GPUCORE_RED_ENUM_(N, name) GPUCORE_RED_##N,
    GPUCORE_REDUCTION_TABLE(GPUCORE_RED_ENUM_)
#undef GPUCORE_RED_ENUM_
    GPUCORE_RED_COUNT
};

/* Elements per chunk of the reduced axis: a row (inner == 1) is split into
 * chunks of ROW elements (one block each), columns into chunks of COL rows; the
 * per-chunk partials are then folded in chunk order. Fixed numbers, so the
 * result's bits depend only on the shape. */
#define GPUCORE_RED_ROW_CHUNK 8192
#define GPUCORE_RED_COL_CHUNK 256

typedef struct gpucore_red_acc {
    float val;
    int32_t pad;
    int64_t idx;   /* -1: empty */
} gpucore_red_acc;

GPUCORE_HD int64_t gpucore_reduce_chunks(int64_t len, int64_t inner)
{
    int64_t c = inner == 1 ? GPUCORE_RED_ROW_CHUNK : GPUCORE_RED_COL_CHUNK;
    return len > 0 ? (len + c - 1) / c : 0;
}

/* Scratch a kernel backend needs for one reduction (0 when one pass suffices). */
GPUCORE_HD int64_t gpucore_reduce_workspace_bytes(int64_t outer, int64_t len, int64_t inner)
{
    int64_t c = gpucore_reduce_chunks(len, inner);
    return c > 1 ? outer * c * inner * (int64_t)sizeof(gpucore_red_acc) : 0;
}

GPUCORE_HD int gpucore_red_is_sum(int op) { return op == GPUCORE_RED_SUM || op == GPUCORE_RED_MEAN || op == GPUCORE_RED_SUMSQ; }

GPUCORE_HD gpucore_red_acc gpucore_red_empty(void)
{
    gpucore_red_acc a;
    a.val = 0.0f;
    a.pad = 0;
    a.idx = -1;
    return a;
}

GPUCORE_HD gpucore_red_acc gpucore_red_element(int op, float x, int64_t idx)
{
    gpucore_red_acc a;
    a.val = op == GPUCORE_RED_SUMSQ ? x * x : x;
    a.pad = 0;
    a.idx = idx;
    return a;
}

/* Fold b into a. For sums a + b (the caller fixes the order); for max/min/argmax
 * the larger (smaller) value, NaN over anything, the smaller index on ties. */
GPUCORE_HD gpucore_red_acc gpucore_red_combine(int op, gpucore_red_acc a, gpucore_red_acc b)
{
    if (gpucore_red_is_sum(op)) {
        a.val = a.val + b.val;
        if (a.idx < 0) a.idx = b.idx;
        return a;
    }
    if (a.idx < 0) return b;
    if (b.idx < 0) return a;
    int an = a.val != a.val, bn = b.val != b.val;
    if (an || bn) {
        if (an && bn) return a.idx <= b.idx ? a : b;
        return an ? a : b;
    }
    int b_better = op == GPUCORE_RED_MIN ? b.val < a.val : b.val > a.val;
    if (b_better) return b;
    if (b.val == a.val && b.idx < a.idx) return b;
    return a;
}

#endif
