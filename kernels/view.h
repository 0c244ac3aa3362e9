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

#endif
