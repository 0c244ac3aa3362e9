/*
 * cpu_ops_rows.c — the CPU backend's row family (rows_math.h): softmax and
 * log-softmax, LayerNorm and RMSNorm, cross-entropy, embedding gather and its
 * backward. Rows run in parallel (OpenMP); each row is computed in f64 in a
 * fixed order, and every cross-row sum (dgamma, dbeta, the cross-entropy
 * reduction, embedding scatter-add) is folded in row order by one thread per
 * output element, so results never depend on the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "rows_math.h"
#include "dtype_access.h"

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

/* max and Σ exp(x - max) of one row in f64; -inf entries are skipped, NaN poisons. */
static void row_lse(const void *x, int dt, int64_t off, int64_t cols, double *m_out, double *s_out)
{
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; c++) {
        double v = ld(x, dt, off + c);
        if (v != v) { m = NAN; break; }
        if (v > m) m = v;
    }
    if (m == m && m != -INFINITY)
        for (int64_t c = 0; c < cols; c++) s += exp(ld(x, dt, off + c) - m);
    else s = NAN;
    *m_out = m;
    *s_out = s;
}

static void softmax_rows(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype, op = p->op;
#pragma omp parallel for schedule(static) if (rows * cols > ROWS_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t off = r * cols;
        if (op == GPUCORE_ROWS_SOFTMAX || op == GPUCORE_ROWS_LOG_SOFTMAX) {
            double m, s;
            row_lse(p->x, dt, off, cols, &m, &s);
            double lse = m + log(s);
            for (int64_t c = 0; c < cols; c++) {
                double v = ld(p->x, dt, off + c);
                st(p->y, dt, off + c, op == GPUCORE_ROWS_SOFTMAX ? exp(v - m) / s : v - lse);
            }
        } else {
            double dot = 0;
            for (int64_t c = 0; c < cols; c++)
                dot += op == GPUCORE_ROWS_SOFTMAX_BWD ? ld(p->dy, dt, off + c) * ld(p->y, dt, off + c)
                                                      : ld(p->dy, dt, off + c);
            for (int64_t c = 0; c < cols; c++) {
                double g = ld(p->dy, dt, off + c), y = ld(p->y, dt, off + c);
                st(p->dx, dt, off + c, op == GPUCORE_ROWS_SOFTMAX_BWD ? y * (g - dot) : g - exp(y) * dot);
            }
        }
    }
}

static void norm_forward(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype, pdt = p->param_dtype, layer = p->op == GPUCORE_ROWS_LAYERNORM;
#pragma omp parallel for schedule(static) if (rows * cols > ROWS_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t off = r * cols;
        double mean = 0, var = 0;
        if (layer) {
            for (int64_t c = 0; c < cols; c++) mean += ld(p->x, dt, off + c);
            mean /= (double)cols;
        }
        for (int64_t c = 0; c < cols; c++) {
            double d = ld(p->x, dt, off + c) - mean;
            var += d * d;
        }
        double rstd = 1.0 / sqrt(var / (double)cols + (double)p->eps);
        for (int64_t c = 0; c < cols; c++) {
            double v = (ld(p->x, dt, off + c) - mean) * rstd;
            if (p->gamma) v *= ld(p->gamma, pdt, c);
            if (layer && p->beta) v += ld(p->beta, pdt, c);
            st(p->y, dt, off + c, v);
        }
        if (p->mean) p->mean[r] = (float)mean;
        if (p->rstd) p->rstd[r] = (float)rstd;
    }
}

static gpucore_status norm_backward(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype, pdt = p->param_dtype, layer = p->op == GPUCORE_ROWS_LAYERNORM_BWD;
    if (p->dx) {
#pragma omp parallel for schedule(static) if (rows * cols > ROWS_PARALLEL_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t off = r * cols;
            const double mean = layer ? p->mean[r] : 0, rstd = p->rstd[r];
            double sg = 0, sgx = 0;
            for (int64_t c = 0; c < cols; c++) {
                double g = ld(p->dy, dt, off + c) * (p->gamma ? ld(p->gamma, pdt, c) : 1.0);
                double xh = (ld(p->x, dt, off + c) - mean) * rstd;
                sg += g;
                sgx += g * xh;
            }
            sg /= (double)cols;
            sgx /= (double)cols;
            for (int64_t c = 0; c < cols; c++) {
                double g = ld(p->dy, dt, off + c) * (p->gamma ? ld(p->gamma, pdt, c) : 1.0);
                double xh = (ld(p->x, dt, off + c) - mean) * rstd;
                st(p->dx, dt, off + c, rstd * (g - (layer ? sg : 0.0) - xh * sgx));
            }
        }
    }
    if (p->dgamma || p->dbeta) {
        /* column sums over rows, in row order, one thread per column block */
#pragma omp parallel for schedule(static) if (rows * cols > ROWS_PARALLEL_MIN)
        for (int64_t c = 0; c < cols; c++) {
            double dg = 0, db = 0;
            for (int64_t r = 0; r < rows; r++) {
                double g = ld(p->dy, dt, r * cols + c);
                double xh = (ld(p->x, dt, r * cols + c) - (layer ? p->mean[r] : 0.0)) * p->rstd[r];
                dg += g * xh;
                db += g;
            }
            if (p->dgamma) st(p->dgamma, pdt, c, dg);
            if (p->dbeta) st(p->dbeta, pdt, c, db);
        }
    }
    return GPUCORE_OK;
}

/* Per-row loss (f64) and whether the row counts toward the mean. */
static double ce_row_loss(const gpucore_rows_args *p, int64_t r, int *counted)
{
    int64_t t = gpucore_rows_target(p->targets, p->target_dtype, r);
    *counted = t != p->ignore_index;
    if (!*counted) return 0;
    if (t < 0 || t >= p->cols) return NAN;
    double m, s;
    row_lse(p->x, p->dtype, r * p->cols, p->cols, &m, &s);
    return m + log(s) - ld(p->x, p->dtype, r * p->cols + t);
}

static gpucore_status ce_forward(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows;
    if (p->reduction == GPUCORE_ROWS_RED_NONE) {
#pragma omp parallel for schedule(static) if (rows * p->cols > ROWS_PARALLEL_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int counted;
            st(p->loss, p->loss_dtype, r, ce_row_loss(p, r, &counted));
        }
        return GPUCORE_OK;
    }
    double *per_row = malloc(sizeof(double) * (size_t)(rows + 1));
    int *cnt = malloc(sizeof(int) * (size_t)(rows + 1));
    if (!per_row || !cnt) {
        free(per_row);
        free(cnt);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "cross_entropy: out of host memory for per-row losses");
    }
#pragma omp parallel for schedule(static) if (rows * p->cols > ROWS_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) per_row[r] = ce_row_loss(p, r, &cnt[r]);
    double sum = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++) { sum += per_row[r]; count += cnt[r]; }
    st(p->loss, p->loss_dtype, 0, p->reduction == GPUCORE_ROWS_RED_MEAN ? sum / (double)count : sum);
    free(per_row);
    free(cnt);
    return GPUCORE_OK;
}

static void ce_backward(const gpucore_rows_args *p)
{
    const int64_t rows = p->rows, cols = p->cols;
    const int dt = p->dtype;
    double scale = 0;
    if (p->reduction != GPUCORE_ROWS_RED_NONE) {
        scale = ld(p->dloss, p->loss_dtype, 0);
        if (p->reduction == GPUCORE_ROWS_RED_MEAN) {
            int64_t count = 0;
            for (int64_t r = 0; r < rows; r++)
                count += gpucore_rows_target(p->targets, p->target_dtype, r) != p->ignore_index;
            scale /= (double)count;
        }
    }
#pragma omp parallel for schedule(static) if (rows * cols > ROWS_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t off = r * cols, t = gpucore_rows_target(p->targets, p->target_dtype, r);
        if (t == p->ignore_index) {
            for (int64_t c = 0; c < cols; c++) st(p->dx, dt, off + c, 0.0);
            continue;
        }
        double g = p->reduction == GPUCORE_ROWS_RED_NONE ? ld(p->dloss, p->loss_dtype, r) : scale;
        double m, s;
        row_lse(p->x, dt, off, cols, &m, &s);
        if (t < 0 || t >= cols) g = NAN;
        for (int64_t c = 0; c < cols; c++)
            st(p->dx, dt, off + c, g * (exp(ld(p->x, dt, off + c) - m) / s - (c == t ? 1.0 : 0.0)));
    }
}

static void embed_forward(const gpucore_rows_args *p)
{
    const int64_t n = p->rows, cols = p->cols;
    const int es = p->dtype == GPUCORE_KDT_F32 ? 4 : 2;
#pragma omp parallel for schedule(static) if (n * cols > ROWS_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t t = gpucore_rows_target(p->targets, p->target_dtype, i);
        char *dst = (char *)p->y + i * cols * es;
        if (t >= 0 && t < p->vocab) memcpy(dst, (const char *)p->x + t * cols * es, (size_t)(cols * es));
        else for (int64_t c = 0; c < cols; c++) st(dst, p->dtype, c, NAN);
    }
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

static gpucore_status rows_task(void *argp)
{
    const gpucore_rows_args *p = argp;
    switch (p->op) {
    case GPUCORE_ROWS_SOFTMAX: case GPUCORE_ROWS_LOG_SOFTMAX:
    case GPUCORE_ROWS_SOFTMAX_BWD: case GPUCORE_ROWS_LOG_SOFTMAX_BWD:
        softmax_rows(p);
        return GPUCORE_OK;
    case GPUCORE_ROWS_LAYERNORM: case GPUCORE_ROWS_RMSNORM:
        norm_forward(p);
        return GPUCORE_OK;
    case GPUCORE_ROWS_LAYERNORM_BWD: case GPUCORE_ROWS_RMSNORM_BWD:
        return norm_backward(p);
    case GPUCORE_ROWS_CE_FWD:
        return ce_forward(p);
    case GPUCORE_ROWS_CE_BWD:
        ce_backward(p);
        return GPUCORE_OK;
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
