/*
 * rows_math.h — the row family's op codes, fixed chunking and small formulas,
 * shared by the API layer (workspace sizes), the CPU backend and rows.cu /
 * embedding.cu so every backend cuts the work the same way.
 *
 * f64 data: the softmax family only (gpucore_rows_f64_*: f64 math, a block per row on GPUs).
 *
 * Ops (gpucore_rows_args fields used):
 *   SOFTMAX, LOG_SOFTMAX          y = softmax(x) / log_softmax(x) along each row
 *   SOFTMAX_BWD, LOG_SOFTMAX_BWD  dx from dy and the forward output y
 *                                 softmax: dx = y * (dy - Σ dy*y); log: dx = dy - exp(y) * Σ dy
 *   LAYERNORM, RMSNORM            y = (x - mean) * rstd * gamma + beta (RMS: no mean, no beta);
 *                                 mean/rstd (f32 [rows], may be NULL) saved
 *   LAYERNORM_BWD, RMSNORM_BWD    dx (may be NULL), dgamma, dbeta (each may be NULL) from dy, x,
 *                                 mean (LayerNorm), rstd, gamma (may be NULL)
 *   CE_FWD                        loss_r = Σ_c q_rc (logsumexp(x_r) - x_rc) (gpucore_rows_ce_fwd_loss;
 *                                 plain: logsumexp(x_r) - x_r[t_r]); 0 where t_r == ignore_index,
 *                                 NaN where t_r is out of [0, cols); reduction NONE writes
 *                                 loss[rows], SUM/MEAN one element (MEAN: / Σ of the counted
 *                                 rows' w_t, or rows for probabilities)
 *                                 CE rows may be strided: inner > 1 is the [outer, cols, inner] layout
 *   CE_BWD                        dx_r = g_r * (Q_r softmax(x_r) - q_r) with q_r the row's target
 *                                 mass (gpucore_rows_ce_q: class weights, label smoothing, index or
 *                                 probability targets; plain: onehot(t_r)), Q_r = Σ_c q_rc;
 *                                 g_r = dloss[r] (NONE), dloss[0] (SUM) or dloss[0] / (Σ of the
 *                                 counted rows' w_t, or rows for probabilities) (MEAN); 0 on ignored rows
 *   EMBED                         y[i, :] = x[t_i, :] (x is the [vocab, cols] table; NaN row
 *                                 where t_i is out of [0, vocab))
 *   EMBED_BWD                     dx[v, :] = Σ_{i : t_i == v} dy[i, :], summed in increasing i
 *                                 (out-of-range t_i contribute nothing)
 */
#ifndef GPUCORE_KERNELS_ROWS_MATH_H
#define GPUCORE_KERNELS_ROWS_MATH_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "op_args.h"
#include "op_tables.h"
#include "dtype_access.h"

/* Op codes and cross-entropy reductions (gpucore_loss_reduction's values), from op_tables.h. */
enum {
#define GPUCORE_ROWS_ENUM_(N, ...) GPUCORE_ROWS_##N,
    GPUCORE_ROWS_TABLE(GPUCORE_ROWS_ENUM_)
#undef GPUCORE_ROWS_ENUM_
    GPUCORE_ROWS_COUNT
};

enum {
#define GPUCORE_ROWS_RED_ENUM_(N, name) GPUCORE_ROWS_RED_##N,
    GPUCORE_LOSS_REDUCTION_TABLE(GPUCORE_ROWS_RED_ENUM_)
#undef GPUCORE_ROWS_RED_ENUM_
    GPUCORE_ROWS_RED_COUNT
};

/* A softmax/cross-entropy row longer than this is cut into chunks of this many
 * elements, one block each, whose (max, sum) partials are folded in chunk order
 * (so a 256k row uses 16 blocks and the bits depend only on the shape). */
#define GPUCORE_ROWS_CHUNK 16384
/* Norm backward folds dgamma/dbeta over row chunks: at most this many chunks. */
#define GPUCORE_ROWS_NORM_MAX_CHUNKS 512

GPUCORE_HD int64_t gpucore_rows_chunks(int64_t cols)
{
    return cols > GPUCORE_ROWS_CHUNK ? (cols + GPUCORE_ROWS_CHUNK - 1) / GPUCORE_ROWS_CHUNK : 1;
}

/* Rows per dgamma/dbeta chunk (a shape-only rule, so the fold order is fixed). */
GPUCORE_HD int64_t gpucore_rows_norm_rows_per_chunk(int64_t rows)
{
    int64_t r = (rows + GPUCORE_ROWS_NORM_MAX_CHUNKS - 1) / GPUCORE_ROWS_NORM_MAX_CHUNKS;
    return r > 0 ? r : 1;
}

GPUCORE_HD int gpucore_rows_is_softmax_like(int op)
{
    return op <= GPUCORE_ROWS_LOG_SOFTMAX_BWD || op == GPUCORE_ROWS_CE_FWD || op == GPUCORE_ROWS_CE_BWD;
}

/* Target / index r as int64 (i32 or i64). */
GPUCORE_HD int64_t gpucore_rows_target(const void *t, int dt, int64_t r)
{
    return dt == GPUCORE_KDT_I32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

/* Cross-entropy: probability targets (a float target dtype)? */
GPUCORE_HD int gpucore_rows_ce_probs(const gpucore_rows_args *a)
{
    return a->target_dtype != GPUCORE_KDT_I32 && a->target_dtype != GPUCORE_KDT_I64;
}

/* Index targets, no class weight, no smoothing: q is onehot(t) and Q is 1. */
GPUCORE_HD int gpucore_rows_ce_plain(const gpucore_rows_args *a)
{
    return !a->weight && a->smoothing == 0.0f && !gpucore_rows_ce_probs(a);
}

/* Class weight w_c (1 without weights). */
GPUCORE_HD float gpucore_rows_ce_w(const gpucore_rows_args *a, int64_t c)
{
    return a->weight ? gpucore_load_as_f32((const char *)a->weight + c * gpucore_kdt_size(a->param_dtype), a->param_dtype)
                     : 1.0f;
}

/* Cross-entropy's class stride (rows_args.inner) and the element offset of row r's class 0;
 * class c of row r is at gpucore_rows_ce_base(a, r) + c * gpucore_rows_ce_stride(a). */
GPUCORE_HD int64_t gpucore_rows_ce_stride(const gpucore_rows_args *a)
{
    return a->inner > 1 ? a->inner : 1;
}

GPUCORE_HD int64_t gpucore_rows_ce_base(const gpucore_rows_args *a, int64_t r)
{
    const int64_t in = gpucore_rows_ce_stride(a);
    return in == 1 ? r * a->cols : (r / in) * a->cols * in + r % in;
}

/* Target mass q_c of row r (PyTorch's cross_entropy with weight w and label smoothing ε):
 * probabilities P: q_c = w_c ((1-ε) P_rc + ε/C); class index t (in [0, C)):
 * q_c = w_c ε/C + [c = t] (1-ε) w_t. off: the element offset of (r, c) (probabilities). */
GPUCORE_HD float gpucore_rows_ce_q(const gpucore_rows_args *a, int64_t off, int64_t c, int64_t t)
{
    const float eps = a->smoothing, u = eps / (float)a->cols;
    if (gpucore_rows_ce_probs(a)) {
        const float pr = gpucore_load_as_f32((const char *)a->targets + off * gpucore_kdt_size(a->target_dtype),
                                             a->target_dtype);
        return gpucore_rows_ce_w(a, c) * ((1.0f - eps) * pr + u);
    }
    return gpucore_rows_ce_w(a, c) * u + (c == t ? (1.0f - eps) * gpucore_rows_ce_w(a, t) : 0.0f);
}

/* Cross-entropy forward (PyTorch's formula, with nl_c = (m - x_c) + log s = -log_softmax_c):
 * index t: loss = (1-ε) w_t nl_t + ε/C Σ_c w_c nl_c; probabilities: loss = Σ_c q_c nl_c.
 * The row sum Σ_c (needed with probabilities or ε > 0) adds these terms in class order
 * (per thread; the threads' partials in a fixed tree on GPUs). */
GPUCORE_HD int gpucore_rows_ce_fwd_needs_sum(const gpucore_rows_args *a)
{
    return gpucore_rows_ce_probs(a) || a->smoothing != 0.0f;
}

GPUCORE_HD float gpucore_rows_ce_fwd_term(const gpucore_rows_args *a, int64_t off, int64_t c, float x, float m, float ls)
{
    const float nl = (m - x) + ls;
    return (gpucore_rows_ce_probs(a) ? gpucore_rows_ce_q(a, off, c, -1) : gpucore_rows_ce_w(a, c)) * nl;
}

/* The row's loss from x_t (index targets), m, log s and the row sum (0 when not needed). */
GPUCORE_HD float gpucore_rows_ce_fwd_loss(const gpucore_rows_args *a, int64_t t, float xt, float m, float ls, float sum)
{
    if (gpucore_rows_ce_probs(a)) return sum;
    const float own = (1.0f - a->smoothing) * gpucore_rows_ce_w(a, t) * ((m - xt) + ls);
    return a->smoothing != 0.0f ? own + a->smoothing / (float)a->cols * sum : own;
}

/* The weight a row adds to MEAN's divisor: index targets w_t (0 when ignored, 1 out of range:
 * that row's loss is NaN anyway), probabilities 1. */
GPUCORE_HD float gpucore_rows_ce_count(const gpucore_rows_args *a, int64_t r)
{
    if (gpucore_rows_ce_probs(a)) return 1.0f;
    const int64_t t = gpucore_rows_target(a->targets, a->target_dtype, r);
    return t == a->ignore_index ? 0.0f : t < 0 || t >= a->cols ? 1.0f : gpucore_rows_ce_w(a, t);
}

/* Q of an index-target row: Σ_c q_c = (1-ε) w_t + ε/C Σ_c w_c (sum_w: Σ_c w_c). */
GPUCORE_HD float gpucore_rows_ce_mass_index(const gpucore_rows_args *a, int64_t t, float sum_w)
{
    return (1.0f - a->smoothing) * gpucore_rows_ce_w(a, t) + a->smoothing / (float)a->cols * sum_w;
}

/* Byte offsets in the kernel workspace: [partials (2 f32 per row chunk)] [CE: per-row loss, or
 * CE_BWD's 16-byte tail {scale, Σ_c w_c} then (probabilities) Q per row]. */
GPUCORE_HD int64_t gpucore_rows_partials_bytes(const gpucore_rows_args *a)
{
    int64_t c = gpucore_rows_chunks(a->cols);
    return c > 1 ? a->rows * c * 2 * (int64_t)sizeof(float) : 0;
}

GPUCORE_HD int64_t gpucore_rows_workspace_bytes(const gpucore_rows_args *a)
{
    if (a->rows == 0 || a->cols == 0 || a->dtype == GPUCORE_KDT_F64) return 0; /* f64 rows: one block each */
    if (gpucore_rows_is_softmax_like(a->op)) {
        int64_t b = gpucore_rows_partials_bytes(a);
        if (a->op == GPUCORE_ROWS_CE_FWD && a->reduction != GPUCORE_ROWS_RED_NONE) b += a->rows * (int64_t)sizeof(float);
        if (a->op == GPUCORE_ROWS_CE_BWD) b += 16 + (gpucore_rows_ce_probs(a) ? a->rows * (int64_t)sizeof(float) : 0);
        return b;
    }
    if ((a->op == GPUCORE_ROWS_LAYERNORM_BWD || a->op == GPUCORE_ROWS_RMSNORM_BWD) && (a->dgamma || a->dbeta)) {
        int64_t rpc = gpucore_rows_norm_rows_per_chunk(a->rows);
        return ((a->rows + rpc - 1) / rpc) * a->cols * 2 * (int64_t)sizeof(float);
    }
    if (a->op == GPUCORE_ROWS_EMBED_BWD && a->dtype != GPUCORE_KDT_F32 /* accumulate in f32 */)
        return a->vocab * a->cols * (int64_t)sizeof(float);
    return 0;
}

/* Online softmax statistics: running max m and Σ exp(x - m). */
typedef struct gpucore_softmax_stat { float m, s; } gpucore_softmax_stat;

GPUCORE_HD gpucore_softmax_stat gpucore_softmax_stat_empty(void)
{
    gpucore_softmax_stat a;
    a.m = -INFINITY;
    a.s = 0.0f;
    return a;
}

/* Fold b into a (either may be empty: m = -inf, s = 0). */
GPUCORE_HD gpucore_softmax_stat gpucore_softmax_stat_combine(gpucore_softmax_stat a, gpucore_softmax_stat b)
{
    if (b.m == -INFINITY && b.s == 0.0f) return a;
    if (a.m == -INFINITY && a.s == 0.0f) return b;
    gpucore_softmax_stat r;
    if (a.m != a.m || b.m != b.m) { r.m = NAN; r.s = NAN; return r; }
    r.m = a.m > b.m ? a.m : b.m;
    if (r.m == -INFINITY) { r.s = a.s + b.s; return r; } /* every element -inf */
    r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
    return r;
}

GPUCORE_HD gpucore_softmax_stat gpucore_softmax_stat_add(gpucore_softmax_stat a, float x)
{
    if (x == -INFINITY) return a; /* masked logits contribute nothing */
    if (x > a.m) {
        a.s = a.s * expf(a.m - x) + 1.0f;
        a.m = x;
    } else if (x != x) {
        a.m = NAN;
        a.s = NAN;
    } else {
        a.s += expf(x - a.m);
    }
    return a;
}

/* ---- f64 rows (softmax, log-softmax and their backwards only; f64 math throughout) ----
 * Row statistics: forward a = max (NaN if any NaN), b = Σ exp(x - a) over x != -inf (NaN when
 * a is NaN or -inf: a row of only -inf); backward a = Σ dy·y (softmax) or Σ dy (log-softmax). */
GPUCORE_HD double gpucore_rows_f64_max(double a, double b)
{
    return a != a || b != b ? NAN : a > b ? a : b;
}

GPUCORE_HD double gpucore_rows_f64_exp_term(double x, double m)
{
    return x == -INFINITY ? 0.0 : exp(x - m);
}

/* The row's statistic term of element (v, y): v is x (forward) or dy (backward). */
GPUCORE_HD double gpucore_rows_f64_bwd_term(int op, double dy, double y)
{
    return op == GPUCORE_ROWS_SOFTMAX_BWD ? dy * y : dy;
}

/* The write pass: v is x (forward) or dy (backward); lb = log(b) (log-softmax). */
GPUCORE_HD double gpucore_rows_f64_out(int op, double v, double y, double a, double b, double lb)
{
    switch (op) {
    case GPUCORE_ROWS_SOFTMAX: return b != b ? NAN : gpucore_rows_f64_exp_term(v, a) / b;
    case GPUCORE_ROWS_LOG_SOFTMAX: return b != b ? NAN : (v - a) - lb;
    case GPUCORE_ROWS_SOFTMAX_BWD: return y * (v - a);
    default: return v - exp(y) * a; /* LOG_SOFTMAX_BWD */
    }
}

/* b from the summed exp terms and the max a. */
GPUCORE_HD double gpucore_rows_f64_sum_fix(double a, double sum)
{
    return a != a || a == -INFINITY ? NAN : sum;
}

#endif
