/*
 * view.h — the strided tensor description that the API layer hands to backends
 * and kernel launchers: a data pointer, dtype, shape and strides (in elements).
 * Plain C so the vtable, the CPU backend, nvcc and the SIMT layer all share it.
 */
#ifndef GPUCORE_KERNELS_VIEW_H
#define GPUCORE_KERNELS_VIEW_H

#include <stdint.h>

#define GPUCORE_VIEW_MAX_DIMS 8

typedef struct gpucore_view {
    void *data;          /* address of element [0,...,0] */
    int32_t dtype;       /* gpucore_dtype */
    int32_t ndim;
    int64_t numel;
    int64_t shape[GPUCORE_VIEW_MAX_DIMS];
    int64_t strides[GPUCORE_VIEW_MAX_DIMS]; /* elements */
    int32_t contiguous;  /* 1 if strides are row-major dense */
    int32_t elem_size;   /* bytes */
} gpucore_view;

/* Merge the dims of n same-shape views where every view allows it (dim d folds into
 * d+1 when strides[d] == strides[d+1] * shape[d+1] in each view), drop extent-1
 * dims, and recompute `contiguous`. Row-major linear indices keep meaning the same
 * elements, so a launcher may do this to its views before any kernel: fewer dims
 * to unravel, and views that were dense but flagged strided become contiguous.
 * Empty views are left as they are. */
static inline void gpucore_views_coalesce(gpucore_view *const *v, int n)
{
    if (n < 1 || v[0]->numel == 0 || v[0]->ndim < 1) return;
    const int nd = v[0]->ndim;
    int out = 0;
    for (int d = 0; d < nd; d++) {
        int64_t extent = v[0]->shape[d];
        if (extent == 1) continue;
        int merge = out > 0;
        for (int k = 0; k < n && merge; k++)
            merge = v[k]->strides[out - 1] == v[k]->strides[d] * extent;
        for (int k = 0; k < n; k++) {
            if (merge) {
                v[k]->shape[out - 1] *= extent;
                v[k]->strides[out - 1] = v[k]->strides[d];
            } else {
                v[k]->shape[out] = extent;
                v[k]->strides[out] = v[k]->strides[d];
            }
        }
        if (!merge) out++;
    }
    for (int k = 0; k < n; k++) {
        gpucore_view *w = v[k];
        if (out == 0) { w->shape[0] = 1; w->strides[0] = 1; }
        w->ndim = out ? out : 1;
        for (int d = w->ndim; d < GPUCORE_VIEW_MAX_DIMS; d++) { w->shape[d] = 0; w->strides[d] = 0; }
        int dense = 1;
        int64_t expect = 1;
        for (int d = w->ndim - 1; d >= 0; d--) {
            if (w->shape[d] != 1 && w->strides[d] != expect) dense = 0;
            expect *= w->shape[d];
        }
        w->contiguous = dense;
    }
}

/* Put the dims of n same-shape views in the order of v[0]'s strides, largest first (a stable sort;
 * extent-1 dims stay where they are), the same permutation in every view. For an op whose
 * elements do not depend on their linear index (everything elementwise but dropout), this
 * changes nothing but the order they are visited in: an output that is a permutation of a dense
 * tensor (x.t(), a permute) becomes dense, and inputs permuted alike with it, so that
 * gpucore_views_coalesce then makes one dense run of them all. */
static inline void gpucore_views_sort_dims(gpucore_view *const *v, int n)
{
    const int nd = v[0]->ndim;
    int order[GPUCORE_VIEW_MAX_DIMS];
    for (int d = 0; d < nd; d++) { /* insertion, stable: a later dim passes only a smaller stride */
        int j = d;
        for (; j > 0 && v[0]->strides[order[j - 1]] < v[0]->strides[d]; j--) order[j] = order[j - 1];
        order[j] = d;
    }
    for (int k = 0; k < n; k++) {
        int64_t sh[GPUCORE_VIEW_MAX_DIMS], st[GPUCORE_VIEW_MAX_DIMS];
        for (int d = 0; d < nd; d++) { sh[d] = v[k]->shape[order[d]]; st[d] = v[k]->strides[order[d]]; }
        for (int d = 0; d < nd; d++) { v[k]->shape[d] = sh[d]; v[k]->strides[d] = st[d]; }
    }
}

#endif
