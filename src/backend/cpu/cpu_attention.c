/*
 * cpu_attention.c — the CPU backend's scaled dot-product attention
 * (kernels/attention_math.h defines it), forward and backward, in O(seq)
 * memory: no score matrix is ever stored, only one query tile × key tile block
 * per thread.
 *
 * Forward: one task per (batch, head, query tile of ATT_BQ rows), OpenMP-parallel;
 * the tile's q rows are packed to f32, then key tiles of ATT_BK rows stream
 * past with an online softmax (running max m, normaliser l, rescaled
 * accumulator), causal and padded key tiles skipped. Saves out and lse.
 * Backward recomputes P = exp(S - lse) in two passes so that every output
 * element is owned by one task (deterministic, no atomics, no dependence on
 * the thread count): dq over (batch, head, query tile), then dk and dv over
 * (batch, kv head, key tile) looping over the group's query heads. The
 * row term D_i = dout_i · out_i is recomputed where needed (O(seq) work per
 * tile, no workspace). f32 math and accumulation for every dtype.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_vec.h"
#include "attention_math.h"
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads(void) { return 1; }
#endif

/* Every tile function is inlined into one task runner, compiled twice: for the build's baseline
 * ISA and for AVX2 (chosen at run time, cpu_vec_have_avx2). Without floating-point contraction
 * (ISO C) the two give the same bits; the AVX2 one does the tile loops 8 lanes at a time. */
#define ATT_INLINE inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__)
#define ATT_HAVE_AVX2_VARIANT 1
#endif

#define ATT_BQ 32 /* query rows per tile */
#define ATT_BK 64 /* key rows per tile */

/* Rows [row0, row0 + n) x cols [0, cols) of operand t at (b, h), as f32 [n][cols], and back
 * (rounded as gpucore_attn_store); rows with unit column stride go through the vector
 * conversions (the same bits). The whole-head GEMM path uses the same pair. */
void cpu_attn_load_rows(const gpucore_attn_tensor *t, int dt, int64_t b, int64_t h, int64_t row0, int64_t n,
                        int64_t cols, float *dst)
{
    const int64_t es = dt == GPUCORE_KDT_F32 ? 4 : 2;
    for (int64_t r = 0; r < n; r++) {
        const int64_t off = gpucore_attn_offset(t, b, h, row0 + r, 0);
        if (t->stride[3] == 1) cpu_vec_load(dst + r * cols, (const char *)t->data + off * es, dt, cols);
        else
            for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = gpucore_attn_load(t, dt, off + c * t->stride[3]);
    }
}

void cpu_attn_store_rows(const gpucore_attn_tensor *t, int dt, int64_t b, int64_t h, int64_t row0, int64_t n,
                         int64_t cols, const float *src)
{
    const int64_t es = dt == GPUCORE_KDT_F32 ? 4 : 2;
    for (int64_t r = 0; r < n; r++) {
        const int64_t off = gpucore_attn_offset(t, b, h, row0 + r, 0);
        if (t->stride[3] == 1) cpu_vec_store((char *)t->data + off * es, dt, src + r * cols, cols);
        else
            for (int64_t c = 0; c < cols; c++) gpucore_attn_store(t, dt, off + c * t->stride[3], src[r * cols + c]);
    }
}

/* The same rows transposed: dst[c][r] (leading dimension ld), so a score row is built by axpys over keys. */
static ATT_INLINE void pack_transposed(const gpucore_attn_tensor *t, int dt, int64_t b, int64_t h, int64_t row0, int64_t n,
                            int64_t cols, int64_t ld, float *dst)
{
    for (int64_t r = 0; r < n; r++) {
        int64_t off = gpucore_attn_offset(t, b, h, row0 + r, 0);
        for (int64_t c = 0; c < cols; c++) dst[c * ld + r] = gpucore_attn_load(t, dt, off + c * t->stride[3]);
    }
}

/* Σ x·y in 8 fixed lanes folded in a fixed tree: the same bits whatever vector width runs it. */
static ATT_INLINE float dot(const float *x, const float *y, int64_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) l[k] += x[i + k] * y[i + k];
    float s = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static ATT_INLINE void axpy(float *y, float a, const float *x, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* How many of keys j0 + [0, nk) query row i may see by causality (all nk without it); the keys
 * past them would get P = 0 exactly, so skipping them changes no bit. */
static ATT_INLINE int64_t causal_keys(const gpucore_attn_args *a, int64_t i, int64_t j0, int64_t nk)
{
    if (!a->causal) return nk;
    const int64_t n = i + 1 - j0;
    return n < 0 ? 0 : n < nk ? n : nk;
}

/* Per-thread scratch: every tile the passes need, sized for the call. */
typedef struct att_scratch {
    float *q, *o_or_do, *k, *v, *acc, *kacc, *row; /* row: m, l / lse, D per query row */
    float *kt, *vt;                                /* backward: the k and v tiles transposed */
    float *dk_all, *dv_all;                        /* fused backward: dk, dv of every key of one (b, kv head) */
} att_scratch;

static int scratch_alloc(att_scratch *w, const gpucore_attn_args *a, int fused)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v, R = ATT_BQ > ATT_BK ? ATT_BQ : ATT_BK;
    size_t n[9] = {(size_t)(R * D), (size_t)(R * Dv), (size_t)(R * D), (size_t)(R * Dv), (size_t)(R * (D > Dv ? D : Dv)),
                   (size_t)(R * D), (size_t)(3 * R), (size_t)(R * D), (size_t)(R * Dv)};
    float **p[9] = {&w->q, &w->o_or_do, &w->k, &w->v, &w->acc, &w->kacc, &w->row, &w->kt, &w->vt};
    int ok = 1;
    for (int i = 0; i < 9; i++) ok &= (*p[i] = malloc(sizeof(float) * (n[i] ? n[i] : 1))) != NULL;
    w->dk_all = w->dv_all = NULL;
    if (fused) {
        ok &= (w->dk_all = malloc(sizeof(float) * (size_t)(a->seq_k * D + 1))) != NULL;
        ok &= (w->dv_all = malloc(sizeof(float) * (size_t)(a->seq_k * Dv + 1))) != NULL;
    }
    return ok;
}

static void scratch_free(att_scratch *w)
{
    free(w->q); free(w->o_or_do); free(w->k); free(w->v); free(w->acc); free(w->kacc); free(w->row);
    free(w->kt); free(w->vt); free(w->dk_all); free(w->dv_all);
}

/* Forward of one (b, h, query tile). */
static ATT_INLINE void forward_tile(const gpucore_attn_args *a, att_scratch *w, int64_t b, int64_t h, int64_t i0)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v, hk = h / (a->heads / a->kv_heads);
    const int64_t nq = a->seq_q - i0 < ATT_BQ ? a->seq_q - i0 : ATT_BQ;
    const int dt = a->dtype;
    float *m = w->row, *l = w->row + ATT_BQ;
    cpu_attn_load_rows(&a->q, dt, b, h, i0, nq, D, w->q);
    for (int64_t r = 0; r < nq; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
    memset(w->acc, 0, sizeof(float) * (size_t)(nq * Dv));
    const int64_t kend = gpucore_attn_key_end(a, b, i0 + nq - 1);
    float s[ATT_BK];
    for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
        const int64_t nk = kend - j0 < ATT_BK ? kend - j0 : ATT_BK;
        pack_transposed(&a->k, dt, b, hk, j0, nk, D, ATT_BK, w->k); /* kᵀ: [D][ATT_BK] */
        cpu_attn_load_rows(&a->v, dt, b, hk, j0, nk, Dv, w->v);
        for (int64_t r = 0; r < nq; r++) {
            float mt = -INFINITY;
            const int64_t nkr = causal_keys(a, i0 + r, j0, nk);
            if (nkr == 0) continue; /* the same as a tile of masked keys: no term, m and l unchanged */
            memset(s, 0, sizeof s); /* q_r·k_j for every j at once: D axpys over the key tile (vectorised) */
            for (int64_t d = 0; d < D; d++) axpy(s, w->q[r * D + d], w->k + d * ATT_BK, nkr);
            for (int64_t j = 0; j < nkr; j++) {
                s[j] = gpucore_attn_score(a, s[j], gpucore_attn_bias(a, b, h, i0 + r, j0 + j));
                mt = s[j] > mt ? s[j] : mt;
            }
            const float mn = mt > m[r] ? mt : m[r];
            if (mn == -INFINITY) continue; /* nothing admitted in this row yet */
            const float alpha = gpucore_attn_exp(m[r], mn);
            float *acc = w->acc + r * Dv, lt = 0.0f;
            for (int64_t c = 0; c < Dv; c++) acc[c] *= alpha;
            for (int64_t j = 0; j < nkr; j++) {
                float p = gpucore_attn_exp(s[j], mn);
                lt += p;
                if (p != 0.0f) axpy(acc, p * gpucore_attn_keep(a, b, h, i0 + r, j0 + j), w->v + j * Dv, Dv);
            }
            l[r] = l[r] * alpha + lt;
            m[r] = mn;
        }
    }
    for (int64_t r = 0; r < nq; r++) {
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int64_t c = 0; c < Dv; c++) w->acc[r * Dv + c] *= inv;
        if (a->lse) a->lse[(b * a->heads + h) * a->seq_q + i0 + r] = gpucore_attn_lse(m[r], l[r]);
    }
    cpu_attn_store_rows(&a->out, dt, b, h, i0, nq, Dv, w->acc);
}

/* q tile, dout tile, lse and D_i = dout_i · out_i of query rows [i0, i0 + nq) of (b, h). */
static ATT_INLINE void load_query_side(const gpucore_attn_args *a, att_scratch *w, int64_t b, int64_t h, int64_t i0, int64_t nq)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v;
    float *lse = w->row, *Di = w->row + ATT_BQ;
    cpu_attn_load_rows(&a->q, a->dtype, b, h, i0, nq, D, w->q);
    cpu_attn_load_rows(&a->dout, a->dtype, b, h, i0, nq, Dv, w->o_or_do);
    cpu_attn_load_rows(&a->out, a->dtype, b, h, i0, nq, Dv, w->acc); /* out rows, only for D_i */
    for (int64_t r = 0; r < nq; r++) {
        lse[r] = a->lse[(b * a->heads + h) * a->seq_q + i0 + r];
        Di[r] = dot(w->o_or_do + r * Dv, w->acc + r * Dv, Dv);
    }
}

/* The k and v tiles of keys [j0, j0 + nk), transposed, for prob_and_dscore_row. */
static ATT_INLINE void pack_kv_transposed(const gpucore_attn_args *a, att_scratch *w, int64_t b, int64_t hk, int64_t j0, int64_t nk)
{
    pack_transposed(&a->k, a->dtype, b, hk, j0, nk, a->head_dim, ATT_BK, w->kt);
    pack_transposed(&a->v, a->dtype, b, hk, j0, nk, a->head_dim_v, ATT_BK, w->vt);
}

/* P_ij·keep_ij and dS_ij of query row r (tile-local, global i) for keys j0 + [0, nk): the scores
 * and dout·v products of the whole tile row by axpys over the transposed tiles (vectorised). */
static ATT_INLINE void prob_and_dscore_row(const gpucore_attn_args *a, const att_scratch *w, int64_t b, int64_t h, int64_t i,
                                int64_t r, int64_t j0, int64_t nk, float *p_kept, float *ds)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v;
    const float lse = w->row[r], Di = w->row[ATT_BQ + r];
    float dp[ATT_BK];
    memset(p_kept, 0, sizeof(float) * ATT_BK);
    memset(dp, 0, sizeof dp);
    const int64_t nkr = causal_keys(a, i, j0, nk);
    for (int64_t j = nkr; j < nk; j++) ds[j] = 0.0f; /* causally masked: P = 0 */
    for (int64_t d = 0; d < D; d++) axpy(p_kept, w->q[r * D + d], w->kt + d * ATT_BK, nkr);
    for (int64_t c = 0; c < Dv; c++) axpy(dp, w->o_or_do[r * Dv + c], w->vt + c * ATT_BK, nkr);
    for (int64_t j = 0; j < nkr; j++) {
        const float p = gpucore_attn_exp(gpucore_attn_score(a, p_kept[j], gpucore_attn_bias(a, b, h, i, j0 + j)), lse);
        const float keep = p != 0.0f ? gpucore_attn_keep(a, b, h, i, j0 + j) : 0.0f;
        p_kept[j] = p * keep;
        ds[j] = p != 0.0f ? p * (dp[j] * keep - Di) : 0.0f;
    }
}

/* dq of one (b, h, query tile). */
static ATT_INLINE void backward_dq_tile(const gpucore_attn_args *a, att_scratch *w, int64_t b, int64_t h, int64_t i0)
{
    const int64_t D = a->head_dim, hk = h / (a->heads / a->kv_heads);
    const int64_t nq = a->seq_q - i0 < ATT_BQ ? a->seq_q - i0 : ATT_BQ;
    load_query_side(a, w, b, h, i0, nq);
    memset(w->kacc, 0, sizeof(float) * (size_t)(nq * D));
    const int64_t kend = gpucore_attn_key_end(a, b, i0 + nq - 1);
    for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
        const int64_t nk = kend - j0 < ATT_BK ? kend - j0 : ATT_BK;
        cpu_attn_load_rows(&a->k, a->dtype, b, hk, j0, nk, D, w->k);
        pack_kv_transposed(a, w, b, hk, j0, nk);
        for (int64_t r = 0; r < nq; r++) {
            float pk[ATT_BK], ds[ATT_BK];
            prob_and_dscore_row(a, w, b, h, i0 + r, r, j0, nk, pk, ds);
            for (int64_t j = 0; j < nk; j++)
                if (ds[j] != 0.0f) axpy(w->kacc + r * D, ds[j] * a->scale, w->k + j * D, D);
        }
    }
    cpu_attn_store_rows(&a->dq, a->dtype, b, h, i0, nq, D, w->kacc);
}

/* dk and dv of one (b, kv head, key tile): the group's query heads, every query row that sees the tile. */
static ATT_INLINE void backward_dkv_tile(const gpucore_attn_args *a, att_scratch *w, int64_t b, int64_t hk, int64_t j0)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v, G = a->heads / a->kv_heads;
    const int64_t nk = a->seq_k - j0 < ATT_BK ? a->seq_k - j0 : ATT_BK;
    float *dk = w->kacc, *dv = w->v; /* this pass reads k and v transposed (kt, vt) */
    memset(dk, 0, sizeof(float) * (size_t)(nk * D));
    memset(dv, 0, sizeof(float) * (size_t)(nk * Dv));
    const int64_t valid = gpucore_attn_kv_valid(a, b);
    if (j0 < valid) {
        pack_kv_transposed(a, w, b, hk, j0, nk);
        const int64_t nkv = valid - j0 < nk ? valid - j0 : nk; /* keys past kv_len get no gradient */
        for (int64_t h = hk * G; h < (hk + 1) * G; h++)
            for (int64_t i0 = gpucore_attn_query_begin(a, j0); i0 < a->seq_q; i0 += ATT_BQ) {
                const int64_t nq = a->seq_q - i0 < ATT_BQ ? a->seq_q - i0 : ATT_BQ;
                load_query_side(a, w, b, h, i0, nq);
                for (int64_t r = 0; r < nq; r++) {
                    float pk[ATT_BK], ds[ATT_BK];
                    prob_and_dscore_row(a, w, b, h, i0 + r, r, j0, nkv, pk, ds);
                    for (int64_t j = 0; j < nkv; j++) {
                        if (pk[j] != 0.0f) axpy(dv + j * Dv, pk[j], w->o_or_do + r * Dv, Dv);
                        if (ds[j] != 0.0f) axpy(dk + j * D, ds[j] * a->scale, w->q + r * D, D);
                    }
                }
            }
    }
    if (a->dk.data) cpu_attn_store_rows(&a->dk, a->dtype, b, hk, j0, nk, D, dk);
    if (a->dv.data) cpu_attn_store_rows(&a->dv, a->dtype, b, hk, j0, nk, Dv, dv);
}

/* dq, dk and dv of one (b, kv head) in one pass: each probability and score gradient is computed
 * once (the two-pass split computes them twice). The task owns every output row it writes, and
 * each element's terms are added in the two-pass order (dq: keys ascending; dk, dv: the group's
 * heads, then query rows ascending; rows that cannot see a key add nothing in either), so the bits
 * are the same whichever split runs. O(seq) memory: dk and dv of the head's keys. */
static ATT_INLINE void backward_fused(const gpucore_attn_args *a, att_scratch *w, int64_t b, int64_t hk)
{
    const int64_t D = a->head_dim, Dv = a->head_dim_v, G = a->heads / a->kv_heads;
    memset(w->dk_all, 0, sizeof(float) * (size_t)(a->seq_k * D));
    memset(w->dv_all, 0, sizeof(float) * (size_t)(a->seq_k * Dv));
    for (int64_t h = hk * G; h < (hk + 1) * G; h++)
        for (int64_t i0 = 0; i0 < a->seq_q; i0 += ATT_BQ) {
            const int64_t nq = a->seq_q - i0 < ATT_BQ ? a->seq_q - i0 : ATT_BQ;
            load_query_side(a, w, b, h, i0, nq);
            memset(w->kacc, 0, sizeof(float) * (size_t)(nq * D));
            const int64_t kend = gpucore_attn_key_end(a, b, i0 + nq - 1); /* <= the valid keys */
            for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
                const int64_t nk = kend - j0 < ATT_BK ? kend - j0 : ATT_BK;
                cpu_attn_load_rows(&a->k, a->dtype, b, hk, j0, nk, D, w->k);
                pack_kv_transposed(a, w, b, hk, j0, nk);
                float *dk = w->dk_all + j0 * D, *dv = w->dv_all + j0 * Dv;
                for (int64_t r = 0; r < nq; r++) {
                    float pk[ATT_BK], ds[ATT_BK];
                    prob_and_dscore_row(a, w, b, h, i0 + r, r, j0, nk, pk, ds);
                    for (int64_t j = 0; j < nk; j++) {
                        if (ds[j] != 0.0f) {
                            axpy(w->kacc + r * D, ds[j] * a->scale, w->k + j * D, D);
                            axpy(dk + j * D, ds[j] * a->scale, w->q + r * D, D);
                        }
                        if (pk[j] != 0.0f) axpy(dv + j * Dv, pk[j], w->o_or_do + r * Dv, Dv);
                    }
                }
            }
            if (a->dq.data) cpu_attn_store_rows(&a->dq, a->dtype, b, h, i0, nq, D, w->kacc);
        }
    if (a->dk.data) cpu_attn_store_rows(&a->dk, a->dtype, b, hk, 0, a->seq_k, D, w->dk_all);
    if (a->dv.data) cpu_attn_store_rows(&a->dv, a->dtype, b, hk, 0, a->seq_k, Dv, w->dv_all);
}

/* Task t of the pass: forward or dq tiles (pass 1), dk/dv tiles (pass 2), or fused (b, kv head) units. */
static ATT_INLINE void run_task(const gpucore_attn_args *a, att_scratch *w, int fused, int pass, int64_t t)
{
    const int64_t nqt = (a->seq_q + ATT_BQ - 1) / ATT_BQ, nkt = (a->seq_k + ATT_BK - 1) / ATT_BK;
    if (fused) backward_fused(a, w, t / a->kv_heads, t % a->kv_heads);
    else if (pass == 2) backward_dkv_tile(a, w, t / nkt / a->kv_heads, t / nkt % a->kv_heads, t % nkt * ATT_BK);
    else if (a->op == GPUCORE_ATTN_BWD) backward_dq_tile(a, w, t / nqt / a->heads, t / nqt % a->heads, t % nqt * ATT_BQ);
    else forward_tile(a, w, t / nqt / a->heads, t / nqt % a->heads, t % nqt * ATT_BQ);
}

static void run_task_baseline(const gpucore_attn_args *a, att_scratch *w, int fused, int pass, int64_t t)
{
    run_task(a, w, fused, pass, t);
}

#ifdef ATT_HAVE_AVX2_VARIANT
__attribute__((target("avx2"))) static void run_task_avx2(const gpucore_attn_args *a, att_scratch *w, int fused,
                                                         int pass, int64_t t)
{
    run_task(a, w, fused, pass, t);
}
#endif

typedef struct attention_task { gpucore_attn_args a; } attention_task;

static gpucore_status attention_task_run(void *p)
{
    const gpucore_attn_args *a = &((attention_task *)p)->a;
    if (cpu_attention_gemm_takes(a)) return cpu_attention_gemm_run(a); /* whole-head GEMMs (cpu_attention_gemm.c) */
    const int64_t nqt = (a->seq_q + ATT_BQ - 1) / ATT_BQ, nkt = (a->seq_k + ATT_BK - 1) / ATT_BK;
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    /* The backward runs fused over (b, kv head) when that gives every thread several tasks (the
     * same bits either way, see backward_fused), else split in two passes over finer tiles. */
    const int fused = bwd && a->batch * a->kv_heads >= 4 * (int64_t)omp_get_max_threads();
    const int64_t n1 = fused ? a->batch * a->kv_heads : (!bwd || a->dq.data) ? a->batch * a->heads * nqt : 0;
    const int64_t n2 = !fused && bwd && (a->dk.data || a->dv.data) ? a->batch * a->kv_heads * nkt : 0;
    void (*run)(const gpucore_attn_args *, att_scratch *, int, int, int64_t) = run_task_baseline;
#ifdef ATT_HAVE_AVX2_VARIANT
    if (cpu_vec_have_avx2()) run = run_task_avx2;
#endif
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        att_scratch w;
        const int ok = scratch_alloc(&w, a, fused); /* every thread still meets both loops (worksharing) */
        failed |= !ok;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < n1; t++)
            if (ok) run(a, &w, fused, 1, t);
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < n2; t++)
            if (ok) run(a, &w, 0, 2, t);
        scratch_free(&w);
    }
    if (failed)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "attention: out of host memory for the per-thread tiles");
    return GPUCORE_OK;
}

gpucore_status cpu_attention(void *bctx, const gpucore_attn_args *args, void *s)
{
    (void)bctx;
    attention_task t = {*args};
    return cpu_stream_enqueue(s, attention_task_run, &t, sizeof t);
}
