/*
 * cpu_ops_rows.c — the CPU backend's row family (rows_math.h): softmax and
 * log-softmax, LayerNorm and RMSNorm, cross-entropy, embedding gather and its
 * backward. Rows run in parallel (OpenMP), one thread per row. The forwards and
 * the softmax and cross-entropy backwards run in f32 SIMD (cpu_vec.h: vector
 * exp, sums in fixed f64 lanes; bf16/f16 rows widened to f32 first); the norm
 * backward in f64 from f32 rows (cpu_vec_norm_bwd_*: fixed lanes, the same bits in every body). Every cross-row sum (dgamma, dbeta, the cross-entropy
 * reduction, embedding scatter-add) is folded in row order by one thread per
 * output element, so results never depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "rows_math.h"
#include "dtype_access.h"
#include "cpu_vec.h"

#define ROWS_PARALLEL_MIN 16384 /* elements below which a loop stays on one thread */

static inline double ld(const void *base, int dt, int64_t i)
{
    if (dt == GPUCORE_KDT_F32) return ((const float *)base)[i];
    return gpucore_load_as_f32((const char *)base + i * 2, dt);
}

static inline void st(void *base, int dt, int64_t i, double v)
{
    if (dt == GPUCORE_KDT_F32) ((float *)base)[i] = (float)v;
    else gpucore_store_from_f32((char *)base + i * 2, dt, (float)v);
}

/* A row of dtype dt as f32: the row itself when it is f32, else widened into buf. */
static const float *row_f32(const void *base, int dt, int64_t off, int64_t cols, float *buf)
{
    if (dt == GPUCORE_KDT_F32) return (const float *)base + off;
    cpu_vec_load(buf, (const char *)base + off * 2, dt, cols);
    return buf;
}

/* Cross-entropy row r of the [outer, cols, inner] layout (class stride inner) as f32 in buf. */
static const float *row_gather(const void *base, int dt, int64_t off, int64_t cols, int64_t inner, float *buf)
{
    for (int64_t c = 0; c < cols; c++) buf[c] = (float)ld(base, dt, off + c * inner);
    return buf;
}

/* Row r of a cross-entropy operand as f32: contiguous (row_f32) or gathered. */
static const float *ce_row_f32(const gpucore_rows_args *p, const void *base, int64_t r, float *buf)
{
    return p->inner > 1 ? row_gather(base, p->dtype, gpucore_rows_ce_base(p, r), p->cols, p->inner, buf)
                        : row_f32(base, p->dtype, r * p->cols, p->cols, buf);
}

/* max and Σ exp(x - max) of one f32 row (SIMD exp, f64 sum, cpu_vec.h); NaN poisons,
 * an all -inf row gives NaN (and nothing is written). e (may be NULL) receives exp(x - max),
 * or with `shifted` x - max (cpu_vec_exp_sum_shifted). */
static void row_lse_into(const float *x, int64_t cols, double *m_out, double *s_out, float *e, int shifted)
{
    float m = cpu_vec_max(x, cols);
    *m_out = m;
    *s_out = m != m || m == -INFINITY ? NAN
             : shifted                ? cpu_vec_exp_sum_shifted(x, cols, m, e)
                                      : cpu_vec_exp_sum(x, cols, m, e);
}

static void row_lse(const float *x, int64_t cols, double *m_out, double *s_out, float *e)
{
    row_lse_into(x, cols, m_out, s_out, e, 0);
}

/* Per-thread scratch of `floats` floats (NULL when f32 rows need none; *oom set
 * when it cannot be had). */
static float *row_scratch(int dt, int64_t floats, int *oom)
{
    if (dt == GPUCORE_KDT_F32 && floats == 0) return NULL;
    float *b = malloc(sizeof(float) * (size_t)(floats + 1));
    if (!b) {
#pragma omp atomic write
        *oom = 1;
    }
    return b;
}

#define ROWS_OOM(what) gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory for a row buffer", what)

/* fn(p, r, x, y, extra) for every row r, rows in parallel: x is row r of src as f32, y is
 * where row r of dst goes in f32 (dst itself when f32, else scratch rounded back after fn). */
typedef void (*row_fn)(const gpucore_rows_args *p, int64_t r, const float *x, float *y, const void *extra);

/* rows_for_each's work for the calling thread: its share of the rows inside an OpenMP
 * region, every row when called outside one (the `omp for` is orphaned). */
static void rows_for_each_share(const gpucore_rows_args *p, const void *src, void *dst, row_fn fn,
                                const void *extra, int *oom)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype, f32 = dt == GPUCORE_KDT_F32, strided = p->inner > 1;
    {
        float *buf = row_scratch(dt, f32 && !strided ? 0 : 2 * cols, oom);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if ((!f32 || strided) && !buf) continue;
            if (strided) { /* cross-entropy over [outer, cols, inner]: gather, run, scatter */
                const int64_t base = gpucore_rows_ce_base(p, r);
                fn(p, r, row_gather(src, dt, base, cols, p->inner, buf), buf + cols, extra);
                for (int64_t c = 0; c < cols; c++) st(dst, dt, base + c * p->inner, buf[cols + c]);
                continue;
            }
            const int64_t off = r * cols;
            float *y = f32 ? (float *)dst + off : buf + cols;
            fn(p, r, row_f32(src, dt, off, cols, buf), y, extra);
            if (!f32) cpu_vec_store((char *)dst + off * 2, dt, y, cols);
        }
        free(buf);
    }
}

/* Small row ops run right here: entering an OpenMP region whose if() is false still costs
 * libgomp a team set-up (an allocation and futex calls), a large part of a small op. */
static gpucore_status rows_for_each(const gpucore_rows_args *p, const void *src, void *dst, row_fn fn,
                                    const void *extra, const char *what)
{
    int oom = 0;
    if (p->rows * p->cols > ROWS_PARALLEL_MIN) {
#pragma omp parallel
        rows_for_each_share(p, src, dst, fn, extra, &oom);
    } else {
        rows_for_each_share(p, src, dst, fn, extra, &oom);
    }
    return oom ? ROWS_OOM(what) : GPUCORE_OK;
}

/* Softmax / log-softmax forward in f32 SIMD: y = exp(x - max) / Σ, or (x - max) - log Σ. Both
 * write y first in the exp pass (compute-bound, so the first touch of y's cache lines, a read
 * from memory for a row not in cache, hides behind it) and finish on y while it is in L1. */
static void softmax_row(const gpucore_rows_args *p, int64_t r, const float *x, float *y, const void *extra)
{
    (void)r; (void)extra;
    const int64_t cols = p->cols;
    const int soft = p->op == GPUCORE_ROWS_SOFTMAX;
    double m, s;
    row_lse_into(x, cols, &m, &s, y, !soft);
    if (m != m || m == -INFINITY) cpu_vec_axpb(y, x, cols, 0.0f, NAN); /* y was not written */
    else if (soft) cpu_vec_axpb(y, y, cols, (float)(1.0 / s), 0.0f);
    else cpu_vec_axpb(y, y, cols, 1.0f, (float)-log(s));
}

/* Softmax backward dx = y · (dy - Σ dy·y); log-softmax backward dx = dy - exp(y) · Σ dy;
 * f32 SIMD, Σ dy·y in f32 blocks and f64 lanes (cpu_vec_dot_blocked), Σ dy in f64 lanes. Where the three operands exceed the cache
 * (cpu_vec_stream_min_bytes), an f32 dx row is made in scratch and streamed out (as the
 * elementwise family does): dx is not read again by this op, and a plain store would first read
 * each of its lines from memory (a quarter of the op's traffic). */
static void softmax_backward_share(const gpucore_rows_args *p, int *oom) /* as rows_for_each_share */
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype, soft = p->op == GPUCORE_ROWS_SOFTMAX_BWD, f32 = dt == GPUCORE_KDT_F32;
    const int stream = f32 && (size_t)(3 * rows * cols) * sizeof(float) >= cpu_vec_stream_min_bytes();
    {
        /* f32: exp(y) for log-softmax, then the streamed dx row; bf16/f16: g, y, dx widened */
        float *buf = row_scratch(dt, f32 ? (soft ? 0 : cols) + (stream ? cols : 0) : 3 * cols, oom);
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            if (!buf && (!f32 || !soft || stream)) continue;
            const int64_t off = r * cols;
            const float *g = row_f32(p->dy, dt, off, cols, buf), *y = row_f32(p->y, dt, off, cols, f32 ? NULL : buf + cols);
            float *dx = !f32 ? buf + 2 * cols : stream ? buf + (soft ? 0 : cols) : (float *)p->dx + off;
            if (soft) cpu_vec_mul_diff(dx, y, g, cols, (float)cpu_vec_dot_blocked(g, y, cols));
            else {
                float *e = f32 ? buf : buf + 2 * cols; /* exp(y): scratch, or dx itself then overwritten */
                const double sg = cpu_vec_sum(g, cols);
                cpu_vec_exp_sum(y, cols, 0.0f, e);
                cpu_vec_axpy(dx, e, g, cols, (float)-sg);
            }
            if (!f32) cpu_vec_store((char *)p->dx + off * 2, dt, dx, cols);
            else if (stream) cpu_vec_stream_copy((float *)p->dx + off, dx, sizeof(float) * (size_t)cols);
        }
        if (stream) cpu_vec_stream_fence(); /* this thread's streaming stores, before the region ends */
        free(buf);
    }
}

static gpucore_status softmax_backward(const gpucore_rows_args *p)
{
    int oom = 0;
    if (p->rows * p->cols > ROWS_PARALLEL_MIN) {
#pragma omp parallel
        softmax_backward_share(p, &oom);
    } else {
        softmax_backward_share(p, &oom);
    }
    return oom ? ROWS_OOM("softmax_backward") : GPUCORE_OK;
}

/* LayerNorm / RMSNorm forward: the mean, then the variance about the mean rounded to f32, each summed
 * in f32 per lane over blocks of 8 and in f64 lanes across them (cpu_vec_sum_blocked,
 * cpu_vec_sum_sqdev_blocked: the f64-widened sums were the row's bound), the normalisation and
 * affine in f32 SIMD; extra: gamma and beta as f32 (NULL: none). */
static void norm_row(const gpucore_rows_args *p, int64_t r, const float *x, float *y, const void *extra)
{
    const float *const *gb = extra;
    const int64_t cols = p->cols;
    const int layer = p->op == GPUCORE_ROWS_LAYERNORM;
    const double mean = layer ? cpu_vec_sum_blocked(x, cols) / (double)cols : 0.0;
    const double var = cpu_vec_sum_sqdev_blocked(x, cols, (float)mean) / (double)cols;
    const double rstd = 1.0 / sqrt(var + (double)p->eps);
    cpu_vec_normalize(y, x, cols, (float)mean, (float)rstd, gb[0], gb[1]);
    if (p->mean) p->mean[r] = (float)mean;
    if (p->rstd) p->rstd[r] = (float)rstd;
}

static gpucore_status norm_forward(const gpucore_rows_args *p)
{
    const int64_t cols = p->cols;
    const int pdt = p->param_dtype, layer = p->op == GPUCORE_ROWS_LAYERNORM;
    const float *gb[2] = {NULL, NULL};
    float *params = NULL;
    if ((p->gamma || (layer && p->beta)) && pdt != GPUCORE_KDT_F32) {
        params = malloc(sizeof(float) * (size_t)(2 * cols + 1));
        if (!params) return ROWS_OOM("norm");
        if (p->gamma) cpu_vec_load(params, p->gamma, pdt, cols);
        if (layer && p->beta) cpu_vec_load(params + cols, p->beta, pdt, cols);
    }
    if (p->gamma) gb[0] = params ? params : p->gamma;
    if (layer && p->beta) gb[1] = params ? params + cols : p->beta;
    gpucore_status st = rows_for_each(p, p->x, p->y, norm_row, gb, "norm");
    free(params);
    return st;
}

/* The norm backward's dx for row r (a rows_for_each row_fn): x is the row as f32, dx where its
 * f32 result goes; extra: gamma as f32 (NULL: none). A non-f32 dy is widened into dx first (each
 * element is read before it is written). Sums and dx in f64 (cpu_vec_norm_bwd_*). */
static void norm_backward_row(const gpucore_rows_args *p, int64_t r, const float *x, float *dx, const void *extra)
{
    const int64_t cols = p->cols, off = r * cols;
    const int layer = p->op == GPUCORE_ROWS_LAYERNORM_BWD;
    const double mean = layer ? p->mean[r] : 0, rstd = p->rstd[r];
    const float *dy = row_f32(p->dy, p->dtype, off, cols, dx);
    double sgx, sg = cpu_vec_norm_bwd_sums(dy, extra, x, cols, mean, rstd, &sgx);
    cpu_vec_norm_bwd_dx(dx, dy, extra, x, cols, mean, rstd, layer ? sg / (double)cols : 0.0, sgx / (double)cols);
}

#define NORM_COL_BLOCK 128 /* columns of dgamma/dbeta one thread sums over all rows */

/* dgamma/dbeta: per column the f64 sum over rows in row order; a thread takes a block of
 * columns and walks the rows through it (row-major reads; the column's order is unchanged). */
static void norm_backward_params(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols, nblk = (cols + NORM_COL_BLOCK - 1) / NORM_COL_BLOCK;
    const int dt = p->dtype, pdt = p->param_dtype, layer = p->op == GPUCORE_ROWS_LAYERNORM_BWD;
    CPU_PARALLEL_FOR(rows * cols > ROWS_PARALLEL_MIN && nblk > 1, b, nblk,
        const int64_t c0 = b * NORM_COL_BLOCK, w = cols - c0 < NORM_COL_BLOCK ? cols - c0 : NORM_COL_BLOCK;
        double dg[NORM_COL_BLOCK] = {0}, db[NORM_COL_BLOCK] = {0};
        float bdy[NORM_COL_BLOCK], bx[NORM_COL_BLOCK];
        for (int64_t r = 0; r < rows; r++) {
            const int64_t off = r * cols + c0;
            cpu_vec_norm_bwd_colsum(dg, p->dbeta ? db : NULL, row_f32(p->dy, dt, off, w, bdy), row_f32(p->x, dt, off, w, bx),
                                    w, layer ? p->mean[r] : 0.0, p->rstd[r]);
        }
        for (int64_t c = 0; c < w; c++) {
            if (p->dgamma) st(p->dgamma, pdt, c0 + c, dg[c]);
            if (p->dbeta) st(p->dbeta, pdt, c0 + c, db[c]);
        });
}

static gpucore_status norm_backward(const gpucore_rows_args *p)
{
    const int64_t cols = p->cols;
    const int pdt = p->param_dtype;
    float *gamma = NULL;
    if (p->dx && p->gamma && pdt != GPUCORE_KDT_F32) {
        gamma = malloc(sizeof(float) * (size_t)(cols + 1));
        if (!gamma) return ROWS_OOM("norm_backward");
        cpu_vec_load(gamma, p->gamma, pdt, cols);
    }
    gpucore_status s = GPUCORE_OK;
    if (p->dx) s = rows_for_each(p, p->x, p->dx, norm_backward_row, gamma ? gamma : p->gamma, "norm_backward");
    free(gamma);
    if (s == GPUCORE_OK && (p->dgamma || p->dbeta)) norm_backward_params(p);
    return s;
}

/* Per-row loss (f64 sum of rows_math.h's f32 terms, in class order) and the row's weight in
 * MEAN's divisor (gpucore_rows_ce_count); buf: cols floats of scratch when the row is not f32
 * contiguous. */
static double ce_row_loss(const gpucore_rows_args *p, int64_t r, float *counted, float *buf)
{
    const int probs = gpucore_rows_ce_probs(p);
    const int64_t t = probs ? -1 : gpucore_rows_target(p->targets, p->target_dtype, r);
    *counted = gpucore_rows_ce_count(p, r);
    if (!probs && t == p->ignore_index) return 0;
    if (!probs && (t < 0 || t >= p->cols)) return NAN;
    const float *x = ce_row_f32(p, p->x, r, buf);
    double m, s;
    row_lse(x, p->cols, &m, &s, NULL);
    if (gpucore_rows_ce_plain(p)) return m + log(s) - (double)x[t];
    const float ls = (float)log(s);
    double sum = 0;
    const int64_t base = gpucore_rows_ce_base(p, r), cs = gpucore_rows_ce_stride(p);
    for (int64_t c = 0; c < p->cols && gpucore_rows_ce_fwd_needs_sum(p); c++)
        sum += gpucore_rows_ce_fwd_term(p, base + c * cs, c, x[c], (float)m, ls);
    return gpucore_rows_ce_fwd_loss(p, t, probs ? 0.0f : x[t], (float)m, ls, (float)sum);
}

/* ce_forward's rows for the calling thread (as rows_for_each_share): each row's loss into
 * p->loss (reduction none) or into per_row and cnt. */
static void ce_forward_share(const gpucore_rows_args *p, double *per_row, float *cnt, int *oom)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype, none = p->reduction == GPUCORE_ROWS_RED_NONE;
    const int need_buf = dt != GPUCORE_KDT_F32 || p->inner > 1;
    float *buf = row_scratch(dt, need_buf ? cols : 0, oom);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        if (need_buf && !buf) continue;
        float counted;
        double loss = ce_row_loss(p, r, &counted, buf);
        if (none) st(p->loss, p->loss_dtype, r, loss);
        else { per_row[r] = loss; cnt[r] = counted; }
    }
    free(buf);
}

static gpucore_status ce_forward(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int none = p->reduction == GPUCORE_ROWS_RED_NONE;
    double *per_row = none ? NULL : malloc(sizeof(double) * (size_t)(rows + 1));
    float *cnt = none ? NULL : malloc(sizeof(float) * (size_t)(rows + 1));
    if (!none && (!per_row || !cnt)) {
        free(per_row);
        free(cnt);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "cross_entropy: out of host memory for per-row losses");
    }
    int oom = 0;
    if (rows * cols > ROWS_PARALLEL_MIN) {
#pragma omp parallel
        ce_forward_share(p, per_row, cnt, &oom);
    } else {
        ce_forward_share(p, per_row, cnt, &oom);
    }
    if (!oom && !none) {
        double sum = 0, count = 0;
        for (int64_t r = 0; r < rows; r++) { sum += per_row[r]; count += cnt[r]; }
        st(p->loss, p->loss_dtype, 0, p->reduction == GPUCORE_ROWS_RED_MEAN ? sum / (double)count : sum);
    }
    free(per_row);
    free(cnt);
    return oom ? ROWS_OOM("cross_entropy") : GPUCORE_OK;
}

/* The loss scales of one cross-entropy backward call (extra of ce_backward_row). */
typedef struct ce_scales {
    double scale;       /* g of the MEAN/SUM reductions */
    double sum_w;       /* Σ_c w_c */
    const double *mass; /* probability targets: Q per row */
} ce_scales;

/* dx = g · (softmax(x) - onehot(t)) in f32 SIMD (exp(x - max) once, scaled by g / Σ); with
 * class weights, label smoothing or probability targets dx_c = g (Q e_c / Σ - q_c) in f64
 * (rows_math.h's gpucore_rows_ce_q). */
static void ce_backward_row(const gpucore_rows_args *p, int64_t r, const float *x, float *dx, const void *extra)
{
    const ce_scales *cs = extra;
    const int64_t cols = p->cols, probs = gpucore_rows_ce_probs(p);
    const int64_t t = probs ? -1 : gpucore_rows_target(p->targets, p->target_dtype, r);
    const int64_t base = gpucore_rows_ce_base(p, r), cstr = gpucore_rows_ce_stride(p);
    if (!probs && t == p->ignore_index) {
        memset(dx, 0, sizeof(float) * (size_t)cols);
        return;
    }
    const double g = p->reduction == GPUCORE_ROWS_RED_NONE ? ld(p->dloss, p->loss_dtype, r) : cs->scale;
    double m, s;
    row_lse(x, cols, &m, &s, dx);
    if ((!probs && (t < 0 || t >= cols)) || s != s) {
        cpu_vec_axpb(dx, x, cols, 0.0f, NAN);
        return;
    }
    if (gpucore_rows_ce_plain(p)) {
        const float et = dx[t];
        cpu_vec_axpb(dx, dx, cols, (float)(g / s), 0.0f);
        dx[t] = (float)(g * ((double)et / s - 1.0));
        return;
    }
    const double q_all = probs ? cs->mass[r] : (double)gpucore_rows_ce_mass_index(p, t, (float)cs->sum_w);
    for (int64_t c = 0; c < cols; c++)
        dx[c] = (float)(g * (q_all * ((double)dx[c] / s) - (double)gpucore_rows_ce_q(p, base + c * cstr, c, t)));
}

static gpucore_status ce_backward(const gpucore_rows_args *p)
{
    ce_scales cs = {0, 0, NULL};
    const int probs = gpucore_rows_ce_probs(p);
    double *mass = NULL;
    for (int64_t c = 0; c < p->cols; c++) cs.sum_w += gpucore_rows_ce_w(p, c);
    if (probs) { /* Q per row, summed in class order */
        mass = malloc(sizeof(double) * (size_t)(p->rows + 1));
        if (!mass) return ROWS_OOM("cross_entropy_backward");
        CPU_PARALLEL_FOR(p->rows * p->cols > ROWS_PARALLEL_MIN, r, p->rows,
            double q = 0;
            const int64_t base = gpucore_rows_ce_base(p, r), cs_ = gpucore_rows_ce_stride(p);
            for (int64_t c = 0; c < p->cols; c++) q += gpucore_rows_ce_q(p, base + c * cs_, c, -1);
            mass[r] = q;);
        cs.mass = mass;
    }
    if (p->reduction != GPUCORE_ROWS_RED_NONE) {
        cs.scale = ld(p->dloss, p->loss_dtype, 0);
        if (p->reduction == GPUCORE_ROWS_RED_MEAN) {
            double count = 0;
            for (int64_t r = 0; r < p->rows; r++) count += gpucore_rows_ce_count(p, r);
            cs.scale /= count;
        }
    }
    gpucore_status st = rows_for_each(p, p->x, p->dx, ce_backward_row, &cs, "cross_entropy_backward");
    free(mass);
    return st;
}

static void embed_forward(const gpucore_rows_args *p)
{
    const int64_t n = p->rows, cols = p->cols;
    const int es = p->dtype == GPUCORE_KDT_F32 ? 4 : 2;
    CPU_PARALLEL_FOR(n * cols > ROWS_PARALLEL_MIN, i, n,
        int64_t t = gpucore_rows_target(p->targets, p->target_dtype, i);
        char *dst = (char *)p->y + i * cols * es;
        if (t >= 0 && t < p->vocab) memcpy(dst, (const char *)p->x + t * cols * es, (size_t)(cols * es));
        else for (int64_t c = 0; c < cols; c++) st(dst, p->dtype, c, NAN););
}

/* Each thread owns a block of columns of the whole table and adds the rows of dy
 * in increasing index order in f32 (the same order and precision as embedding.cu,
 * so the two backends agree bit for bit). */
static gpucore_status embed_backward(const gpucore_rows_args *p)
{
    const int64_t n = p->rows, cols = p->cols, vocab = p->vocab;
    const int dt = p->dtype;
    const int64_t CB = 64, nblk = (cols + CB - 1) / CB;
    float *acc = NULL;
    if (dt != GPUCORE_KDT_F32) {
        acc = malloc(sizeof(float) * (size_t)(vocab * cols + 1));
        if (!acc) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "embedding_backward: out of host memory for "
                                           "the f32 accumulator (%lld x %lld)", (long long)vocab, (long long)cols);
    }
    float *a = acc ? acc : (float *)p->dx;
#pragma omp parallel for schedule(dynamic, 1) if (vocab * cols + n * cols > ROWS_PARALLEL_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t c0 = b * CB, c1 = c0 + CB < cols ? c0 + CB : cols;
        for (int64_t v = 0; v < vocab; v++) memset(a + v * cols + c0, 0, sizeof(float) * (size_t)(c1 - c0));
        for (int64_t i = 0; i < n; i++) {
            int64_t t = gpucore_rows_target(p->targets, p->target_dtype, i);
            if (t < 0 || t >= vocab) continue;
            float *row = a + t * cols;
            for (int64_t c = c0; c < c1; c++) row[c] += (float)ld(p->dy, dt, i * cols + c);
        }
        if (acc)
            for (int64_t v = 0; v < vocab; v++)
                for (int64_t c = c0; c < c1; c++) st(p->dx, dt, v * cols + c, a[v * cols + c]);
    }
    free(acc);
    return GPUCORE_OK;
}

/* f64 softmax family (rows_math.h's gpucore_rows_f64_*): plain f64 loops, a row per thread. */
static void softmax_f64(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int op = p->op, fwd = op == GPUCORE_ROWS_SOFTMAX || op == GPUCORE_ROWS_LOG_SOFTMAX;
    CPU_PARALLEL_FOR(rows * cols > ROWS_PARALLEL_MIN, r, rows,
        const double *v = (const double *)(fwd ? p->x : p->dy) + r * cols, *y = fwd ? NULL : (const double *)p->y + r * cols;
        double *o = (double *)(fwd ? p->y : p->dx) + r * cols;
        double a = fwd ? -INFINITY : 0.0, b = 1.0;
        for (int64_t c = 0; c < cols; c++) a = fwd ? gpucore_rows_f64_max(a, v[c]) : a + gpucore_rows_f64_bwd_term(op, v[c], y[c]);
        if (fwd) {
            double sum = 0;
            for (int64_t c = 0; c < cols; c++) sum += gpucore_rows_f64_exp_term(v[c], a);
            b = gpucore_rows_f64_sum_fix(a, sum);
        }
        const double lb = log(b);
        for (int64_t c = 0; c < cols; c++) o[c] = gpucore_rows_f64_out(op, v[c], y ? y[c] : 0.0, a, b, lb););
}

static gpucore_status rows_task(void *argp)
{
    const gpucore_rows_args *p = argp;
    if (p->dtype == GPUCORE_KDT_F64 && p->op <= GPUCORE_ROWS_LOG_SOFTMAX_BWD) {
        softmax_f64(p);
        return GPUCORE_OK;
    }
    switch (p->op) {
    case GPUCORE_ROWS_SOFTMAX: case GPUCORE_ROWS_LOG_SOFTMAX:
        return rows_for_each(p, p->x, p->y, softmax_row, NULL, "softmax");
    case GPUCORE_ROWS_SOFTMAX_BWD: case GPUCORE_ROWS_LOG_SOFTMAX_BWD:
        return softmax_backward(p);
    case GPUCORE_ROWS_LAYERNORM: case GPUCORE_ROWS_RMSNORM:
        return norm_forward(p);
    case GPUCORE_ROWS_LAYERNORM_BWD: case GPUCORE_ROWS_RMSNORM_BWD:
        return norm_backward(p);
    case GPUCORE_ROWS_CE_FWD:
        return ce_forward(p);
    case GPUCORE_ROWS_CE_BWD:
        return ce_backward(p);
    case GPUCORE_ROWS_EMBED:
        embed_forward(p);
        return GPUCORE_OK;
    case GPUCORE_ROWS_EMBED_BWD:
        return embed_backward(p);
    default:
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "rows: unknown op %d", p->op);
    }
}

gpucore_status cpu_rows(void *bctx, const gpucore_rows_args *args, void *s)
{
    (void)bctx;
    return cpu_stream_enqueue(s, rows_task, args, sizeof *args);
}
