/*
 * cpu_transformer.c — the CPU backend's transformer-block ops
 * (kernels/transformer_math.h): rotary embedding over strided [B,H,S,D] views,
 * gated linear units over same-shape strided views, and the fused residual add
 * + RMSNorm/LayerNorm forward over contiguous rows (statistics in f64, each
 * row by one thread). OpenMP-parallel over rows / elements; no cross-thread
 * sums, so results never depend on the thread count.
 */
#include <math.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_vec.h"
#include "transformer_math.h"
#include "dtype_access.h"

#define TFM_PARALLEL_MIN 16384

static inline float ld(const gpucore_view *v, int64_t off)
{
    return gpucore_load_as_f32((const char *)v->data + off * v->elem_size, v->dtype);
}

static inline void st(const gpucore_view *v, int64_t off, float x)
{
    gpucore_store_from_f32((char *)v->data + off * v->elem_size, v->dtype, x);
}

static inline int64_t offset_of(const gpucore_view *v, int64_t i)
{
    return v->contiguous ? i : gpucore_strided_offset(i, v->ndim, v->shape, v->strides);
}

static void rope(const gpucore_tfm_args *a)
{
    const gpucore_view *x = &a->in0, *y = &a->out0;
    const int64_t B = x->shape[0], H = x->shape[1], S = x->shape[2], D = x->shape[3], R2 = a->rot_half;
    const float sign = a->inverse ? -1.0f : 1.0f;
    const int tdt = a->table_dtype, tes = tdt == GPUCORE_KDT_F32 ? 4 : 2;
    /* f32 rows with unit inner strides and f32 tables, half-split pairs: pointer loops (the same formula) */
    const int fast = x->dtype == GPUCORE_KDT_F32 && y->dtype == GPUCORE_KDT_F32 && tdt == GPUCORE_KDT_F32 &&
                     !a->interleaved && x->strides[3] == 1 && y->strides[3] == 1;
#pragma omp parallel for schedule(static) if (x->numel > TFM_PARALLEL_MIN)
    for (int64_t row = 0; row < B * H * S; row++) {
        const int64_t s = row % S, h = (row / S) % H, b = row / (S * H);
        const int64_t xo = b * x->strides[0] + h * x->strides[1] + s * x->strides[2];
        const int64_t yo = b * y->strides[0] + h * y->strides[1] + s * y->strides[2];
        if (fast) {
            const float *xr = (const float *)x->data + xo, *cs = (const float *)a->in1.data + s * R2,
                        *sn = (const float *)a->in2.data + s * R2;
            float *yr = (float *)y->data + yo;
            for (int64_t p = 0; p < R2; p++) { /* reads both halves before writing (y may be x) */
                float y1, y2;
                gpucore_rope_rotate(xr[p], xr[p + R2], cs[p], sign * sn[p], &y1, &y2);
                yr[p] = y1;
                yr[p + R2] = y2;
            }
            if (yr != xr)
                for (int64_t d = 2 * R2; d < D; d++) yr[d] = xr[d];
            continue;
        }
        for (int64_t p = 0; p < R2; p++) {
            int64_t d1, d2;
            gpucore_rope_pair(a->interleaved, R2, p, &d1, &d2);
            const float c = gpucore_load_as_f32((const char *)a->in1.data + (s * R2 + p) * tes, tdt);
            const float sn = sign * gpucore_load_as_f32((const char *)a->in2.data + (s * R2 + p) * tes, tdt);
            float y1, y2;
            gpucore_rope_rotate(ld(x, xo + d1 * x->strides[3]), ld(x, xo + d2 * x->strides[3]), c, sn, &y1, &y2);
            st(y, yo + d1 * y->strides[3], y1);
            st(y, yo + d2 * y->strides[3], y2);
        }
        for (int64_t d = 2 * R2; d < D; d++) st(y, yo + d * y->strides[3], ld(x, xo + d * x->strides[3]));
    }
}

/* Elements [i0, i0 + n) of the GLU (forward or backward), row-major linear indices. */
static void glu_span(const gpucore_tfm_args *a, int64_t i0, int64_t n)
{
    const int bwd = a->op == GPUCORE_TFM_GLU_BWD, kind = a->kind;
    for (int64_t i = i0; i < i0 + n; i++) {
        const float g = ld(&a->in0, offset_of(&a->in0, i)), u = ld(&a->in1, offset_of(&a->in1, i));
        if (!bwd) {
            st(&a->out0, offset_of(&a->out0, i), gpucore_glu_act(kind, g) * u);
            continue;
        }
        const float dy = ld(&a->in2, offset_of(&a->in2, i));
        const float dg = dy * u * gpucore_glu_act_grad(kind, g), du = dy * gpucore_glu_act(kind, g);
        if (a->out0.data) st(&a->out0, offset_of(&a->out0, i), dg);
        if (a->out1.data) st(&a->out1, offset_of(&a->out1, i), du);
    }
}

/* Row r of the coalesced views, each with a unit inner stride: f32 pointer loops, the activation
 * 8 lanes at a time (cpu_vec_act, SLEEF/libmvec) where the CPU has a vector body for it, in
 * chunks through a scratch row so any aliasing the API allows stays elementwise. */
#define GLU_CHUNK 256
static void glu_row_f32(const gpucore_tfm_args *a, int64_t r, int64_t inner)
{
    const int bwd = a->op == GPUCORE_TFM_GLU_BWD, kind = a->kind;
    const int act = kind == GPUCORE_TFM_SWIGLU ? GPUCORE_ACT_SILU
                    : kind == GPUCORE_TFM_GEGLU_TANH ? GPUCORE_ACT_GELU_TANH : GPUCORE_ACT_GELU_ERF;
#define TFM_ROW(v) ((float *)(v).data + offset_of(&(v), r * inner))
    const float *g = TFM_ROW(a->in0), *u = TFM_ROW(a->in1), *dy = bwd ? TFM_ROW(a->in2) : NULL;
    float *y = !bwd ? TFM_ROW(a->out0) : NULL;
    float *dg = bwd && a->out0.data ? TFM_ROW(a->out0) : NULL, *du = bwd && a->out1.data ? TFM_ROW(a->out1) : NULL;
#undef TFM_ROW
    float t[GLU_CHUNK], t2[GLU_CHUNK];
    for (int64_t c0 = 0; c0 < inner; c0 += GLU_CHUNK) {
        const int64_t n = inner - c0 < GLU_CHUNK ? inner - c0 : GLU_CHUNK;
        const float *gc = g + c0, *uc = u + c0;
        if (!bwd) {
            if (!cpu_vec_act(act, t, gc, n))
                for (int64_t c = 0; c < n; c++) t[c] = gpucore_glu_act(kind, gc[c]);
            for (int64_t c = 0; c < n; c++) y[c0 + c] = t[c] * uc[c];
            continue;
        }
        const float *dyc = dy + c0;
        if (dg) { /* dg = (dy·u)·act'(g) */
            for (int64_t c = 0; c < n; c++) t2[c] = dyc[c] * uc[c];
            if (!cpu_vec_act_grad(act, t2, t2, gc, n))
                for (int64_t c = 0; c < n; c++) t2[c] = dyc[c] * uc[c] * gpucore_glu_act_grad(kind, gc[c]);
        }
        if (du) { /* du = dy·act(g) */
            if (!cpu_vec_act(act, t, gc, n))
                for (int64_t c = 0; c < n; c++) t[c] = gpucore_glu_act(kind, gc[c]);
            for (int64_t c = 0; c < n; c++) t[c] *= dyc[c];
        }
        if (dg) memcpy(dg + c0, t2, sizeof(float) * (size_t)n); /* written after every read of the chunk */
        if (du) memcpy(du + c0, t, sizeof(float) * (size_t)n);
    }
}

static void glu(gpucore_tfm_args *a)
{
    const int64_t n = a->in0.numel;
    const int bwd = a->op == GPUCORE_TFM_GLU_BWD;
    /* merge the views' dims (gate and up are usually halves of one [.., 2F] tensor: strided rows) */
    gpucore_view *vs[5] = {&a->in0, &a->in1, &a->out0, &a->in2, &a->out1};
    int nv = 0;
    gpucore_view *use[5];
    for (int k = 0; k < (bwd ? 5 : 3); k++)
        if (vs[k]->data) use[nv++] = vs[k];
    if (n > 0) gpucore_views_coalesce(use, nv);
    const int nd = a->in0.ndim;
    int rows_ok = n > 0 && a->in0.dtype == GPUCORE_KDT_F32;
    for (int k = 0; k < nv; k++) rows_ok &= use[k]->strides[nd - 1] == 1 && use[k]->dtype == GPUCORE_KDT_F32;
    if (rows_ok) {
        const int64_t inner = a->in0.shape[nd - 1], rows = n / inner;
#pragma omp parallel for schedule(static) if (n > TFM_PARALLEL_MIN)
        for (int64_t r = 0; r < rows; r++) glu_row_f32(a, r, inner);
        return;
    }
    const int64_t chunk = 4096, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n > TFM_PARALLEL_MIN)
    for (int64_t c = 0; c < nchunks; c++) glu_span(a, c * chunk, n - c * chunk < chunk ? n - c * chunk : chunk);
}

static void residual_norm(const gpucore_tfm_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    const int pdt = a->table_dtype, pes = pdt == GPUCORE_KDT_F32 ? 4 : 2;
#pragma omp parallel for schedule(static) if (rows * cols > TFM_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t off = r * cols;
        double sum = 0, var = 0;
        for (int64_t c = 0; c < cols; c++) {
            st(&a->out1, off + c, ld(&a->in0, off + c) + ld(&a->in1, off + c)); /* h, rounded to the dtype */
            sum += ld(&a->out1, off + c);
        }
        const double mean = a->kind ? sum / (double)cols : 0.0;
        for (int64_t c = 0; c < cols; c++) {
            double d = ld(&a->out1, off + c) - mean;
            var += d * d;
        }
        const double rstd = 1.0 / sqrt(var / (double)cols + (double)a->eps);
        for (int64_t c = 0; c < cols; c++) {
            double v = (ld(&a->out1, off + c) - mean) * rstd;
            if (a->in2.data) v *= gpucore_load_as_f32((const char *)a->in2.data + c * pes, pdt);
            if (a->in3.data) v += gpucore_load_as_f32((const char *)a->in3.data + c * pes, pdt);
            st(&a->out0, off + c, (float)v);
        }
        if (a->mean) a->mean[r] = (float)mean;
        if (a->rstd) a->rstd[r] = (float)rstd;
    }
}

typedef struct tfm_task { gpucore_tfm_args a; } tfm_task;

static gpucore_status tfm_task_run(void *p)
{
    gpucore_tfm_args *a = &((tfm_task *)p)->a; /* the task's own copy: glu merges its views' dims */
    if (a->op == GPUCORE_TFM_ROPE) rope(a);
    else if (a->op == GPUCORE_TFM_RESNORM) residual_norm(a);
    else glu(a);
    return GPUCORE_OK;
}

gpucore_status cpu_transformer(void *bctx, const gpucore_tfm_args *args, void *s)
{
    (void)bctx;
    tfm_task t = {*args};
    return cpu_stream_enqueue(s, tfm_task_run, &t, sizeof t);
}
