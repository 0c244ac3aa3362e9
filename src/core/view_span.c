/*
 * view_span.c — byte spans of strided views and overlap tests (view_span.h).
 */
#include "view_span.h"

void gpucore_view_byte_span(const gpucore_view *v, uintptr_t *lo, uintptr_t *hi)
{
    *lo = *hi = (uintptr_t)v->data;
    if (v->numel == 0 || !v->data) return;
    int64_t mn = 0, mx = 0;
    for (int i = 0; i < v->ndim; i++) {
        int64_t e = (v->shape[i] - 1) * v->strides[i];
        if (e < 0) mn += e; else mx += e;
    }
    *lo = (uintptr_t)((const char *)v->data + mn * v->elem_size);
    *hi = (uintptr_t)((const char *)v->data + (mx + 1) * v->elem_size);
}

int gpucore_bytes_overlap(const void *a, int64_t an, const void *b, int64_t bn)
{
    const uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return an > 0 && bn > 0 && a0 < b0 + (uintptr_t)bn && b0 < a0 + (uintptr_t)an;
}

int gpucore_views_overlap(const gpucore_view *a, const gpucore_view *b)
{
    uintptr_t al, ah, bl, bh;
    gpucore_view_byte_span(a, &al, &ah);
    gpucore_view_byte_span(b, &bl, &bh);
    return al < ah && bl < bh && al < bh && bl < ah;
}

int gpucore_tensors_overlap(const gpucore_tensor *a, const gpucore_tensor *b)
{
    gpucore_view av, bv;
    gpucore_tensor_view_of(a, &av);
    gpucore_tensor_view_of(b, &bv);
    return gpucore_views_overlap(&av, &bv);
}
