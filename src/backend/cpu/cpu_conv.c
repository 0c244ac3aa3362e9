/*
 * cpu_conv.c — the CPU backend's convolution: im2col + one f32 GEMM per group
 * and chunk of images, or a direct loop for depthwise (one input channel per
 * group, where a GEMM would have an inner dimension of R·S and gain nothing).
 *
 * im2col writes the receptive field of every output pixel as a row of `col`,
 * converted to f32 (f16/bf16 widen exactly), so one GEMM per group covers a
 * whole chunk of images and the accumulation is fp32 whatever the dtype. The
 * column order follows the user's layout so the gather reads memory in order:
 * NHWC keeps (pixel-major rows, taps ordered r, s, c), NCHW stores the
 * transpose (tap-major rows ordered c, r, s, pixels along a row).
 *   forward          Y    = col · Wpᵀ           (per group; Wp is [Kg, taps])
 *   backward data    dcol = dY · Wp, then a gathering col2im (each dx element
 *                    sums its own taps: no scatter races, deterministic)
 *   backward filter  dWp += dYᵀ · col over the chunks
 * f32 and bf16 go to oneDNN first where the build has it (cpu_conv_dnnl.c), all three
 * ops; these paths are its fallback (f16, no oneDNN, GPUCORE_CPU_GEMM=blas).
 * Runs as one task on the stream's worker; OpenMP parallelises the gathers and
 * the depthwise loops; the GEMMs are cpu_sgemm's (cpu_matmul.c: OpenBLAS, or its
 * blocked loop without it).
 */
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "gpucore_config.h"
#include "dtype_access.h"

#define CONV_COL_BUDGET_FLOATS (8ll << 20) /* im2col chunk: at most 32 MiB of f32 */

typedef struct conv_args {
    gpucore_conv_desc d;
    cpu_context *ctx;
} conv_args;

static inline float ld_el(const void *base, int dt, int64_t off)
{
    switch (dt) {
    case GPUCORE_KDT_F32: return ((const float *)base)[off];
    case GPUCORE_KDT_F16: return gpucore_f16_to_f32(((const uint16_t *)base)[off]);
    default: return gpucore_bf16_to_f32(((const uint16_t *)base)[off]);
    }
}

static inline void st_el(void *base, int dt, int64_t off, float v)
{
    switch (dt) {
    case GPUCORE_KDT_F32: ((float *)base)[off] = v; break;
    case GPUCORE_KDT_F16: ((uint16_t *)base)[off] = gpucore_f32_to_f16(v); break;
    default: ((uint16_t *)base)[off] = gpucore_f32_to_bf16(v); break;
    }
}

/* ---- geometry shared by the paths ---- */

typedef struct geo {
    const gpucore_conv_desc *d;
    int64_t Kg, Cg, taps, pix_per_img; /* taps = Cg·R·S */
    int pixel_major;                    /* NHWC: col is [pixels][taps], taps ordered (r, s, c) */
} geo;

static int64_t tap_index(const geo *g, int64_t c, int64_t r, int64_t s)
{
    const gpucore_conv_desc *d = g->d;
    return g->pixel_major ? (r * d->s + s) * g->Cg + c : (c * d->r + r) * d->s + s;
}

/* col for images [n0, n0+nb) of group gr: element (pixel, tap) at col[pixel·taps + tap]
 * (pixel-major) or col[tap·npix + pixel]. Padding reads as 0. */
static void im2col(const geo *g, int64_t gr, int64_t n0, int64_t nb, float *col)
{
    const gpucore_conv_desc *d = g->d;
    const int64_t npix = nb * g->pix_per_img, PQ = g->pix_per_img;
    const int64_t *xs = d->x_strides;
#pragma omp parallel for schedule(static) if (npix * g->taps > 32768)
    for (int64_t pix = 0; pix < npix; pix++) {
        const int64_t n = n0 + pix / PQ, p = (pix % PQ) / d->q, q = pix % d->q;
        for (int64_t r = 0; r < d->r; r++) {
            const int64_t h = p * d->stride_h - d->pad_h + r * d->dil_h;
            for (int64_t s = 0; s < d->s; s++) {
                const int64_t w = q * d->stride_w - d->pad_w + s * d->dil_w;
                const int inside = h >= 0 && h < d->h && w >= 0 && w < d->w;
                const int64_t base = n * xs[0] + (gr * g->Cg) * xs[1] + h * xs[2] + w * xs[3];
                for (int64_t c = 0; c < g->Cg; c++) {
                    const float v = inside ? ld_el(d->x, d->dtype, base + c * xs[1]) : 0.0f;
                    const int64_t t = tap_index(g, c, r, s);
                    col[g->pixel_major ? pix * g->taps + t : t * npix + pix] = v;
                }
            }
        }
    }
}

/* Wp[k][tap] for every output channel (f32, the group's taps in col's order). */
static void pack_filter(const geo *g, float *Wp)
{
    const gpucore_conv_desc *d = g->d;
    const int64_t *ws = d->w_strides;
#pragma omp parallel for schedule(static) if (d->k * g->taps > 32768)
    for (int64_t k = 0; k < d->k; k++)
        for (int64_t c = 0; c < g->Cg; c++)
            for (int64_t r = 0; r < d->r; r++)
                for (int64_t s = 0; s < d->s; s++)
                    Wp[k * g->taps + tap_index(g, c, r, s)] =
                        ld_el(d->wt, d->dtype, k * ws[0] + c * ws[1] + r * ws[2] + s * ws[3]);
}

/* Offset in y of (image n, channel k, pixel index within the image). */
static int64_t y_off(const gpucore_conv_desc *d, int64_t n, int64_t k, int64_t pq)
{
    return n * d->y_strides[0] + k * d->y_strides[1] + (pq / d->q) * d->y_strides[2] + (pq % d->q) * d->y_strides[3];
}

/* Y buffer element (pixel, k-within-group): pixel-major [pix][Kg], else [Kg][pix]. */
#define YBUF(g, Y, npix, pix, kk) (*((g)->pixel_major ? &(Y)[(pix) * (g)->Kg + (kk)] : &(Y)[(kk) * (npix) + (pix)]))

static gpucore_status gemm_path(const gpucore_conv_desc *d)
{
    geo g = {d, d->k / d->groups, d->c / d->groups, 0, d->p * d->q, d->layout == 1};
    g.taps = g.Cg * d->r * d->s;
    int64_t nb = CONV_COL_BUDGET_FLOATS / (g.pix_per_img * (g.taps > g.Kg ? g.taps : g.Kg));
    if (nb < 1) nb = 1;
    if (nb > d->n) nb = d->n;
    const int64_t max_pix = nb * g.pix_per_img;
    float *col = malloc((size_t)(max_pix * g.taps) * sizeof(float));
    float *Y = malloc((size_t)(max_pix * g.Kg) * sizeof(float));
    float *Wp = malloc((size_t)(d->k * g.taps) * sizeof(float));
    float *dWp = d->op == GPUCORE_CONV_OP_BACKWARD_FILTER ? malloc((size_t)(d->k * g.taps) * sizeof(float)) : NULL;
    if (!col || !Y || (!Wp) || (d->op == GPUCORE_CONV_OP_BACKWARD_FILTER && !dWp)) {
        free(col); free(Y); free(Wp); free(dWp);
        return GPUCORE_ERR_OUT_OF_MEMORY; /* sticky on the stream; reported by synchronize */
    }
    if (d->op != GPUCORE_CONV_OP_BACKWARD_FILTER) pack_filter(&g, Wp);
    for (int64_t gr = 0; gr < d->groups; gr++) {
        const float *Wg = Wp + gr * g.Kg * g.taps;
        for (int64_t n0 = 0; n0 < d->n; n0 += nb) {
            const int64_t cnt = n0 + nb <= d->n ? nb : d->n - n0, npix = cnt * g.pix_per_img;
            if (d->op == GPUCORE_CONV_OP_FORWARD) {
                im2col(&g, gr, n0, cnt, col);
                if (g.pixel_major) cpu_sgemm(0, 1, npix, g.Kg, g.taps, 1.0f, col, g.taps, Wg, g.taps, 0.0f, Y, g.Kg);
                else cpu_sgemm(0, 0, g.Kg, npix, g.taps, 1.0f, Wg, g.taps, col, npix, 0.0f, Y, npix);
#pragma omp parallel for schedule(static) if (npix * g.Kg > 32768)
                for (int64_t pix = 0; pix < npix; pix++) {
                    const int64_t n = n0 + pix / g.pix_per_img, pq = pix % g.pix_per_img;
                    for (int64_t kk = 0; kk < g.Kg; kk++) {
                        const int64_t k = gr * g.Kg + kk;
                        float v = YBUF(&g, Y, npix, pix, kk);
                        if (d->bias) v += ld_el(d->bias, d->dtype, k);
                        if (d->relu) v = v > 0.0f ? v : 0.0f;
                        st_el(d->y, d->dtype, y_off(d, n, k, pq), v);
                    }
                }
                continue;
            }
            /* both backwards read dY in the GEMM's orientation */
#pragma omp parallel for schedule(static) if (npix * g.Kg > 32768)
            for (int64_t pix = 0; pix < npix; pix++) {
                const int64_t n = n0 + pix / g.pix_per_img, pq = pix % g.pix_per_img;
                for (int64_t kk = 0; kk < g.Kg; kk++)
                    YBUF(&g, Y, npix, pix, kk) = ld_el(d->y, d->dtype, y_off(d, n, gr * g.Kg + kk, pq));
            }
            if (d->op == GPUCORE_CONV_OP_BACKWARD_FILTER) {
                im2col(&g, gr, n0, cnt, col);
                float *dWg = dWp + gr * g.Kg * g.taps;
                const float beta = n0 == 0 ? 0.0f : 1.0f;
                if (g.pixel_major) cpu_sgemm(1, 0, g.Kg, g.taps, npix, 1.0f, Y, g.Kg, col, g.taps, beta, dWg, g.taps);
                else cpu_sgemm(0, 1, g.Kg, g.taps, npix, 1.0f, Y, npix, col, npix, beta, dWg, g.taps);
                continue;
            }
            /* backward data: dcol into col, then gather into dx */
            if (g.pixel_major) cpu_sgemm(0, 0, npix, g.taps, g.Kg, 1.0f, Y, g.Kg, Wg, g.taps, 0.0f, col, g.taps);
            else cpu_sgemm(1, 0, g.taps, npix, g.Kg, 1.0f, Wg, g.taps, Y, npix, 0.0f, col, npix);
            const int64_t *xs = d->x_strides;
#pragma omp parallel for collapse(2) schedule(static) if (cnt * g.Cg * d->h * d->w > 32768)
            for (int64_t nn = 0; nn < cnt; nn++)
                for (int64_t c = 0; c < g.Cg; c++)
                    for (int64_t h = 0; h < d->h; h++)
                        for (int64_t w = 0; w < d->w; w++) {
                            float acc = 0.0f;
                            for (int64_t r = 0; r < d->r; r++) {
                                const int64_t ph = h + d->pad_h - r * d->dil_h;
                                if (ph < 0 || ph % d->stride_h) continue;
                                const int64_t p = ph / d->stride_h;
                                if (p >= d->p) continue;
                                for (int64_t s = 0; s < d->s; s++) {
                                    const int64_t qw = w + d->pad_w - s * d->dil_w;
                                    if (qw < 0 || qw % d->stride_w) continue;
                                    const int64_t q = qw / d->stride_w;
                                    if (q >= d->q) continue;
                                    const int64_t pix = nn * g.pix_per_img + p * d->q + q, t = tap_index(&g, c, r, s);
                                    acc += g.pixel_major ? col[pix * g.taps + t] : col[t * npix + pix];
                                }
                            }
                            st_el(d->x, d->dtype, (n0 + nn) * xs[0] + (gr * g.Cg + c) * xs[1] + h * xs[2] + w * xs[3],
                                  acc);
                        }
        }
    }
    if (d->op == GPUCORE_CONV_OP_BACKWARD_FILTER) {
        const int64_t *ws = d->w_strides;
#pragma omp parallel for schedule(static) if (d->k * g.taps > 32768)
        for (int64_t k = 0; k < d->k; k++)
            for (int64_t c = 0; c < g.Cg; c++)
                for (int64_t r = 0; r < d->r; r++)
                    for (int64_t s = 0; s < d->s; s++)
                        st_el(d->wt, d->dtype, k * ws[0] + c * ws[1] + r * ws[2] + s * ws[3],
                              dWp[k * g.taps + tap_index(&g, c, r, s)]);
    }
    free(col); free(Y); free(Wp); free(dWp);
    return GPUCORE_OK;
}

/* ---- depthwise (one input channel per group): direct loops ---- */

/* Depthwise forward, f32 with unit W stride: one output row at a time, each tap (r, s)
 * added to the whole row (the loop over q vectorises). Every output sums its taps in
 * the same (r, s) order as the general loop below, then adds the bias: same bits. */
static gpucore_status depthwise_forward_rows(const gpucore_conv_desc *d)
{
    const int64_t Kg = d->k / d->groups, Q = d->q;
    const int64_t *xs = d->x_strides, *ws = d->w_strides, *ys = d->y_strides;
    const float *x = d->x, *wt = d->wt;
    int oom = 0;
#pragma omp parallel
    {
        float *acc = malloc(sizeof(float) * (size_t)(Q + 1));
        if (!acc) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < d->n; n++)
            for (int64_t k = 0; k < d->k; k++) {
                if (!acc) continue;
                const int64_t c = k / Kg;
                const float b = d->bias ? ((const float *)d->bias)[k] : 0.0f;
                for (int64_t p = 0; p < d->p; p++) {
                    memset(acc, 0, sizeof(float) * (size_t)Q);
                    for (int64_t r = 0; r < d->r; r++) {
                        const int64_t h = p * d->stride_h - d->pad_h + r * d->dil_h;
                        if (h < 0 || h >= d->h) continue;
                        const float *xrow = x + n * xs[0] + c * xs[1] + h * xs[2];
                        for (int64_t s = 0; s < d->s; s++) {
                            const float wv = wt[k * ws[0] + r * ws[2] + s * ws[3]];
                            const int64_t off = s * d->dil_w - d->pad_w, st = d->stride_w;
                            /* q with 0 <= q·st + off < W */
                            int64_t q0 = off >= 0 ? 0 : (-off + st - 1) / st;
                            int64_t q1 = d->w - off <= 0 ? 0 : (d->w - off + st - 1) / st;
                            if (q1 > Q) q1 = Q;
                            if (st == 1)
                                for (int64_t q = q0; q < q1; q++) acc[q] += xrow[q + off] * wv;
                            else
                                for (int64_t q = q0; q < q1; q++) acc[q] += xrow[q * st + off] * wv;
                        }
                    }
                    float *yrow = (float *)d->y + n * ys[0] + k * ys[1] + p * ys[2];
                    for (int64_t q = 0; q < Q; q++) {
                        float v = acc[q] + b;
                        if (d->relu) v = v > 0.0f ? v : 0.0f;
                        yrow[q * ys[3]] = v;
                    }
                }
            }
        free(acc);
    }
    return oom ? GPUCORE_ERR_OUT_OF_MEMORY : GPUCORE_OK;
}

static gpucore_status depthwise_path(const gpucore_conv_desc *d)
{
    const int64_t Kg = d->k / d->groups;
    const int64_t *xs = d->x_strides, *ws = d->w_strides, *ys = d->y_strides;
    const int dt = d->dtype;
    if (d->op == GPUCORE_CONV_OP_FORWARD && dt == GPUCORE_KDT_F32 && xs[3] == 1) return depthwise_forward_rows(d);
    if (d->op == GPUCORE_CONV_OP_FORWARD) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t n = 0; n < d->n; n++)
            for (int64_t k = 0; k < d->k; k++) {
                const int64_t c = k / Kg;
                const float b = d->bias ? ld_el(d->bias, dt, k) : 0.0f;
                for (int64_t p = 0; p < d->p; p++)
                    for (int64_t q = 0; q < d->q; q++) {
                        float acc = 0.0f;
                        for (int64_t r = 0; r < d->r; r++) {
                            const int64_t h = p * d->stride_h - d->pad_h + r * d->dil_h;
                            if (h < 0 || h >= d->h) continue;
                            for (int64_t s = 0; s < d->s; s++) {
                                const int64_t w = q * d->stride_w - d->pad_w + s * d->dil_w;
                                if (w < 0 || w >= d->w) continue;
                                acc += ld_el(d->x, dt, n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3]) *
                                       ld_el(d->wt, dt, k * ws[0] + r * ws[2] + s * ws[3]);
                            }
                        }
                        float v = acc + b;
                        if (d->relu) v = v > 0.0f ? v : 0.0f;
                        st_el(d->y, dt, n * ys[0] + k * ys[1] + p * ys[2] + q * ys[3], v);
                    }
            }
    } else if (d->op == GPUCORE_CONV_OP_BACKWARD_DATA) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t n = 0; n < d->n; n++)
            for (int64_t c = 0; c < d->c; c++)
                for (int64_t h = 0; h < d->h; h++)
                    for (int64_t w = 0; w < d->w; w++) {
                        float acc = 0.0f;
                        for (int64_t k = c * Kg; k < (c + 1) * Kg; k++)
                            for (int64_t r = 0; r < d->r; r++) {
                                const int64_t ph = h + d->pad_h - r * d->dil_h;
                                if (ph < 0 || ph % d->stride_h || ph / d->stride_h >= d->p) continue;
                                for (int64_t s = 0; s < d->s; s++) {
                                    const int64_t qw = w + d->pad_w - s * d->dil_w;
                                    if (qw < 0 || qw % d->stride_w || qw / d->stride_w >= d->q) continue;
                                    acc += ld_el(d->y, dt, n * ys[0] + k * ys[1] + (ph / d->stride_h) * ys[2] +
                                                               (qw / d->stride_w) * ys[3]) *
                                           ld_el(d->wt, dt, k * ws[0] + r * ws[2] + s * ws[3]);
                                }
                            }
                        st_el(d->x, dt, n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3], acc);
                    }
    } else {
#pragma omp parallel for collapse(3) schedule(static)
        for (int64_t k = 0; k < d->k; k++)
            for (int64_t r = 0; r < d->r; r++)
                for (int64_t s = 0; s < d->s; s++) {
                    const int64_t c = k / Kg;
                    double acc = 0.0; /* a long reduction (N·P·Q terms): keep it exact-ish and order-fixed */
                    for (int64_t n = 0; n < d->n; n++)
                        for (int64_t p = 0; p < d->p; p++) {
                            const int64_t h = p * d->stride_h - d->pad_h + r * d->dil_h;
                            if (h < 0 || h >= d->h) continue;
                            for (int64_t q = 0; q < d->q; q++) {
                                const int64_t w = q * d->stride_w - d->pad_w + s * d->dil_w;
                                if (w < 0 || w >= d->w) continue;
                                acc += (double)ld_el(d->y, dt, n * ys[0] + k * ys[1] + p * ys[2] + q * ys[3]) *
                                       ld_el(d->x, dt, n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3]);
                            }
                        }
                    st_el(d->wt, dt, k * ws[0] + r * ws[2] + s * ws[3], (float)acc);
                }
    }
    return GPUCORE_OK;
}

static gpucore_status conv_task(void *p)
{
    const gpucore_conv_desc *d = &((conv_args *)p)->d;
    if (cpu_conv_dnnl(((conv_args *)p)->ctx, d)) return GPUCORE_OK;
    if (d->groups > 1 && d->c == d->groups) return depthwise_path(d);
    return gemm_path(d);
}

gpucore_status cpu_conv(void *bctx, const gpucore_conv_desc *desc, void *s)
{
    conv_args a = {*desc, bctx};
    a.d.ws.ws_ctx = NULL; /* the front-end's workspace context lives on its stack: not for the task */
    return cpu_stream_enqueue(s, conv_task, &a, sizeof a);
}
