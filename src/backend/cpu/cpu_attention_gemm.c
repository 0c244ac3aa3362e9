/*
 * cpu_attention_gemm.c — attention for moderate sequence lengths through whole-head GEMMs:
 * per (batch, head) the score matrix S = scale·Q·Kᵀ is formed at once with the backend's
 * f32 GEMM (cpu_sgemm: oneDNN's JIT sgemm, one thread each inside the parallel loop over
 * heads), softmaxed row by row (causal and per-batch key lengths by the row's key end),
 * and O = P·V; the backward recomputes P from the forward's lse and runs the four
 * products dV += Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK += dSᵀ·Q with
 * dS = scale·P ⊙ (dP − D), D_i = dO_i·O_i, per (batch, kv head) so that the query heads
 * sharing a kv head (GQA) add into one dK/dV.
 *
 * The tiled kernel of cpu_attention.c stays for what this path does not take: a mask,
 * dropout, sequences whose score matrix passes CPU_ATT_GEMM_MAX_SCORES, builds whose f32
 * GEMM is not oneDNN's (OpenBLAS would start its own threads inside ours), and
 * GPUCORE_CPU_ATTENTION=tiles (the tests run both). The choice does not depend on the
 * batch or head count, so the bits of a batch equal those of its entries one at a time.
 * Causal rows still multiply their masked half (the GEMM is
 * so much faster than the tiles that the waste does not matter at these lengths). Up to
 * CPU_ATT_DIRECT_ROWS query rows (a decode step) the forward's two products are vector dot
 * products and row updates instead of GEMM calls over the keys the rows see, the query heads
 * of a kv head share one load of its keys and values, and a small problem's heads run on the
 * calling thread (no OpenMP region to wake).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_vec.h"
#include "attention_math.h"

#define CPU_ATT_GEMM_MAX_SCORES ((int64_t)1 << 20) /* Sq·Sk per head: 4 MiB of f32 scores */
/* Query rows up to which the forward forms S and O with vector dot products and row updates instead of
 * two GEMM calls (a decode step: one row per sequence, whose GEMM calls cost more than their work) */
#define CPU_ATT_DIRECT_ROWS 4
/* Multiply-adds (heads · Sq · Sk · (D + Dv)) below which the heads run on the calling thread: a decode
 * step's attention over a short cache is a few microseconds of work, less than waking a thread */
#define CPU_ATT_PARALLEL_MIN ((int64_t)1 << 20)

int cpu_attention_gemm_takes(const gpucore_attn_args *a)
{
    if (a->mask_dtype != GPUCORE_ATTN_NO_MASK || a->dropout_p > 0.0f) return 0;
    if (a->seq_q * a->seq_k > CPU_ATT_GEMM_MAX_SCORES || a->seq_q == 0 || a->seq_k == 0) return 0;
    const char *e = getenv("GPUCORE_CPU_ATTENTION");
    if (e && !strcmp(e, "tiles")) return 0;
    return cpu_gemm_engine_dnnl(a->seq_q, a->seq_k, a->head_dim, 1);
}

typedef struct att_bufs { float *q, *k, *v, *o, *s, *dp, *dq, *dk, *dv, *d, *out; } att_bufs;

static int bufs_alloc(att_bufs *w, const gpucore_attn_args *a)
{
    const size_t Sq = (size_t)a->seq_q, Sk = (size_t)a->seq_k, D = (size_t)a->head_dim, Dv = (size_t)a->head_dim_v;
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    memset(w, 0, sizeof *w);
    size_t n[11] = {Sq * D, Sk * D, Sk * Dv, Sq * Dv, Sq * Sk, bwd ? Sq * Sk : 0, bwd ? Sq * D : 0, bwd ? Sk * D : 0,
                    bwd ? Sk * Dv : 0, bwd ? Sq : 0, bwd ? Sq * Dv : 0};
    float **p[11] = {&w->q, &w->k, &w->v, &w->o, &w->s, &w->dp, &w->dq, &w->dk, &w->dv, &w->d, &w->out};
    int ok = 1;
    for (int i = 0; i < 11; i++)
        if (n[i]) ok &= (*p[i] = malloc(sizeof(float) * n[i])) != NULL;
    return ok;
}

static void bufs_free(att_bufs *w)
{
    free(w->q); free(w->k); free(w->v); free(w->o); free(w->s); free(w->dp); free(w->dq); free(w->dk); free(w->dv);
    free(w->d); free(w->out);
}

/* S = scale·Q·Kᵀ of (b, h) with Q in w->q and K in w->k. */
static void scores(const gpucore_attn_args *a, att_bufs *w)
{
    cpu_sgemm(0, 1, a->seq_q, a->seq_k, a->head_dim, a->scale, w->q, a->head_dim, w->k, a->head_dim, 0.0f, w->s,
              a->seq_k);
}

/* Softmax of score rows [Sq][Sk] of (b, h) in place (each row's keys up to its end; the rest 0),
 * the row's lse stored when asked. */
static void softmax_rows(const gpucore_attn_args *a, float *s, int64_t b, int64_t h)
{
    const int64_t Sq = a->seq_q, Sk = a->seq_k;
    for (int64_t i = 0; i < Sq; i++) {
        float *p = s + i * Sk;
        const int64_t kend = gpucore_attn_key_end(a, b, i);
        float m = -INFINITY, lse = -INFINITY;
        if (kend > 0) {
            for (int64_t j = 0; j < kend; j++) m = p[j] > m ? p[j] : m;
            for (int64_t j = 0; j < kend; j++) m = p[j] != p[j] ? p[j] : m; /* a NaN score: a NaN row, as torch */
            const float l = (float)cpu_vec_exp_sum(p, kend, m, p);
            lse = gpucore_attn_lse(m, l);
            cpu_vec_axpb(p, p, kend, 1.0f / l, 0.0f);
        }
        memset(p + kend, 0, sizeof(float) * (size_t)(Sk - kend));
        if (a->lse) a->lse[(b * a->heads + h) * Sq + i] = lse;
    }
}

/* Query heads [h0, h1) of batch entry b, all of kv head hk: K and V loaded once for them (up to
 * CPU_ATT_DIRECT_ROWS query rows only the keys some row sees). Up to CPU_ATT_DIRECT_ROWS query
 * rows, S and O are vector dot products and row updates; more rows take two GEMM calls per head. */
static void forward_heads(const gpucore_attn_args *a, att_bufs *w, int64_t b, int64_t hk, int64_t h0, int64_t h1)
{
    const int64_t Sq = a->seq_q, Sk = a->seq_k, D = a->head_dim, Dv = a->head_dim_v;
    const int dt = a->dtype;
    const int direct = Sq <= CPU_ATT_DIRECT_ROWS; /* by Sq alone: a batch's bits are its entries' */
    int64_t kmax = 0; /* keys any row of this batch entry sees */
    for (int64_t i = 0; i < Sq; i++) {
        const int64_t e = gpucore_attn_key_end(a, b, i);
        kmax = e > kmax ? e : kmax;
    }
    const int64_t nk = direct ? kmax : Sk;
    cpu_attn_load_rows(&a->k, dt, b, hk, 0, nk, D, w->k);
    cpu_attn_load_rows(&a->v, dt, b, hk, 0, nk, Dv, w->v);
    for (int64_t h = h0; h < h1; h++) {
        cpu_attn_load_rows(&a->q, dt, b, h, 0, Sq, D, w->q);
        if (direct) { /* the rows' dots with every key any of them sees (f32, as the GEMM), then scaled */
            if (!cpu_gemv_dots_f32(w->k, D, nk, w->q, D, (int)Sq, D, w->s, Sk))
                for (int64_t i = 0; i < Sq; i++)
                    for (int64_t j = 0; j < nk; j++) w->s[i * Sk + j] = (float)cpu_vec_dot(w->q + i * D, w->k + j * D, D);
            for (int64_t i = 0; i < Sq; i++) cpu_vec_axpb(w->s + i * Sk, w->s + i * Sk, nk, a->scale, 0.0f);
        } else {
            scores(a, w);
        }
        softmax_rows(a, w->s, b, h);
        if (direct) {
            for (int64_t i = 0; i < Sq; i++) {
                float *o = w->o + i * Dv;
                const int64_t kend = gpucore_attn_key_end(a, b, i);
                memset(o, 0, sizeof(float) * (size_t)Dv);
                for (int64_t j = 0; j < kend; j++) cpu_vec_axpy(o, w->v + j * Dv, o, Dv, w->s[i * Sk + j]);
            }
        } else {
            cpu_sgemm(0, 0, Sq, Dv, Sk, 1.0f, w->s, Sk, w->v, Dv, 0.0f, w->o, Dv);
        }
        cpu_attn_store_rows(&a->out, dt, b, h, 0, Sq, Dv, w->o);
    }
}

/* One (b, kv head): every query head of its group, dK and dV summed over them. */
static void backward_group(const gpucore_attn_args *a, att_bufs *w, int64_t b, int64_t hk)
{
    const int64_t Sq = a->seq_q, Sk = a->seq_k, D = a->head_dim, Dv = a->head_dim_v, g = a->heads / a->kv_heads;
    const int dt = a->dtype;
    cpu_attn_load_rows(&a->k, dt, b, hk, 0, Sk, D, w->k);
    cpu_attn_load_rows(&a->v, dt, b, hk, 0, Sk, Dv, w->v);
    memset(w->dk, 0, sizeof(float) * (size_t)(Sk * D));
    memset(w->dv, 0, sizeof(float) * (size_t)(Sk * Dv));
    for (int64_t h = hk * g; h < (hk + 1) * g; h++) {
        cpu_attn_load_rows(&a->q, dt, b, h, 0, Sq, D, w->q);
        float *dO = w->o; /* the forward's O buffer holds dO here */
        cpu_attn_load_rows(&a->dout, dt, b, h, 0, Sq, Dv, dO);
        cpu_attn_load_rows(&a->out, dt, b, h, 0, Sq, Dv, w->out); /* O rows, only for D_i */
        for (int64_t i = 0; i < Sq; i++) w->d[i] = (float)cpu_vec_dot(dO + i * Dv, w->out + i * Dv, Dv);
        scores(a, w);
        for (int64_t i = 0; i < Sq; i++) { /* P from the forward's lse; rows without keys stay 0 */
            float *p = w->s + i * Sk;
            const int64_t kend = gpucore_attn_key_end(a, b, i);
            const float lse = a->lse[(b * a->heads + h) * Sq + i];
            if (kend > 0 && lse != -INFINITY) cpu_vec_exp_sum(p, kend, lse, p);
            else memset(p, 0, sizeof(float) * (size_t)kend);
            memset(p + kend, 0, sizeof(float) * (size_t)(Sk - kend));
        }
        cpu_sgemm(1, 0, Sk, Dv, Sq, 1.0f, w->s, Sk, dO, Dv, 1.0f, w->dv, Dv);          /* dV += Pᵀ·dO */
        cpu_sgemm(0, 1, Sq, Sk, Dv, 1.0f, dO, Dv, w->v, Dv, 0.0f, w->dp, Sk);           /* dP = dO·Vᵀ */
        for (int64_t i = 0; i < Sq; i++) {                                                /* dS, into dP */
            float *p = w->s + i * Sk, *ds = w->dp + i * Sk;
            cpu_vec_mul_diff(ds, p, ds, Sk, w->d[i]);
            cpu_vec_axpb(ds, ds, Sk, a->scale, 0.0f);
        }
        if (a->dq.data) {
            cpu_sgemm(0, 0, Sq, D, Sk, 1.0f, w->dp, Sk, w->k, D, 0.0f, w->dq, D);       /* dQ = dS·K */
            cpu_attn_store_rows(&a->dq, dt, b, h, 0, Sq, D, w->dq);
        }
        cpu_sgemm(1, 0, Sk, D, Sq, 1.0f, w->dp, Sk, w->q, D, 1.0f, w->dk, D);           /* dK += dSᵀ·Q */
    }
    if (a->dk.data) cpu_attn_store_rows(&a->dk, dt, b, hk, 0, Sk, D, w->dk);
    if (a->dv.data) cpu_attn_store_rows(&a->dv, dt, b, hk, 0, Sk, Dv, w->dv);
}

gpucore_status cpu_attention_gemm_run(const gpucore_attn_args *a)
{
    const int bwd = a->op == GPUCORE_ATTN_BWD;
    /* the backward and a decode step's forward: a task per (batch entry, kv head), whose query heads
     * share one load of K and V; a longer forward: a task per query head (more tasks to balance) */
    const int grouped = bwd || a->seq_q <= CPU_ATT_DIRECT_ROWS;
    const int64_t g = a->heads / a->kv_heads, tasks = grouped ? a->batch * a->kv_heads : a->batch * a->heads;
    const int64_t work = a->batch * a->heads * a->seq_q * a->seq_k * (a->head_dim + a->head_dim_v);
    int failed = 0;
#pragma omp parallel reduction(| : failed) if (work >= CPU_ATT_PARALLEL_MIN)
    {
        att_bufs w;
        const int ok = bufs_alloc(&w, a);
        failed |= !ok;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            if (!ok) continue;
            if (bwd) backward_group(a, &w, t / a->kv_heads, t % a->kv_heads);
            else if (grouped) forward_heads(a, &w, t / a->kv_heads, t % a->kv_heads, t % a->kv_heads * g, (t % a->kv_heads + 1) * g);
            else forward_heads(a, &w, t / a->heads, t % a->heads / g, t % a->heads, t % a->heads + 1);
        }
        bufs_free(&w);
    }
    if (failed)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "attention: out of host memory for the per-thread scores");
    return GPUCORE_OK;
}
