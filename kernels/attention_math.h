/*
 * attention_math.h — scaled dot-product attention: the argument block of the
 * attention vtable entry and kernel launchers, and the per-element pieces that
 * the CPU backend, the CUDA kernels (kernels/attention.cu) and the SIMT
 * emulation share, so every backend masks, drops out and indexes identically.
 *
 *   S[b,h,i,j] = scale * q[b,h,i,:]·k[b,h/G,j,:] + bias(b,h,i,j)    (G = heads / kv_heads)
 *   P = softmax_j(S)  (rows with no admitted key: P = 0, lse = -inf)
 *   out[b,h,i,:] = Σ_j P[b,h,i,j] * keep(b,h,i,j) * v[b,h/G,j,:]
 *   lse[b,h,i] = log Σ_j exp(S[b,h,i,j])   (f32, contiguous [B,H,Sq]; before dropout)
 *
 * bias: -inf where j >= kv_len[b] (key padding), where j > i (causal, top-left
 * aligned like PyTorch's is_causal) or where a u8 mask is 0; else the additive
 * mask's value (f32 or the data dtype), else 0. keep: inverted dropout on the
 * probabilities, 1/(1-p) where the Philox uniform of element ((b*H+h)*Sq+i)*Sk+j
 * under (seed, offset) is >= p, else 0 (1 when p == 0): the numbering of
 * gpucore_dropout over a [B,H,Sq,Sk] tensor.
 */
#ifndef GPUCORE_KERNELS_ATTENTION_MATH_H
#define GPUCORE_KERNELS_ATTENTION_MATH_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "dtype_access.h"
#include "philox.h"

enum { GPUCORE_ATTN_FWD = 0, GPUCORE_ATTN_BWD = 1 };

#define GPUCORE_ATTN_MAX_HEAD_DIM 256
#define GPUCORE_ATTN_NO_MASK (-1)

/* One [B, H, S, D] operand: its data and element strides (a [B,S,H,D] projection is a permuted view). */
typedef struct gpucore_attn_tensor {
    void *data;
    int64_t stride[4];
} gpucore_attn_tensor;

typedef struct gpucore_attn_args {
    int32_t op;         /* GPUCORE_ATTN_FWD: out, lse from q, k, v; BWD: dq, dk, dv from dout, q, k, v, out, lse */
    int32_t dtype;      /* q, k, v, out, dout, dq, dk, dv (f32, f16, bf16) */
    int32_t mask_dtype; /* GPUCORE_ATTN_NO_MASK, f32, the data dtype, or u8 (boolean: 0 = masked out) */
    int32_t len_dtype;  /* i32 or i64 (kv_len), when kv_len is not NULL */
    int32_t causal;
    int32_t algo;       /* gpucore_attention_algo: the CUDA module's engine choice */
    int64_t batch, heads, kv_heads, seq_q, seq_k, head_dim, head_dim_v;
    float scale, dropout_p;
    uint64_t seed, offset;
    gpucore_attn_tensor q, k, v, out, dout, dq, dk, dv;
    gpucore_attn_tensor mask; /* broadcast to [B, H, Sq, Sk]: stride 0 on broadcast dims */
    const void *kv_len;       /* [B] valid keys per batch entry, or NULL (all Sk) */
    float *lse;               /* [B, H, Sq] */
    float *delta;             /* BWD on kernel backends (required there): [B, H, Sq] f32 scratch for
                               * D_i = dout_i . out_i, filled once before dq and dk/dv read it */
    int32_t *engine_out;      /* set by an engine-choosing backend: 1 cuDNN ran, -1 - reason: the kernel ran
                               * instead (gpucore_attention_fallback_reason); left 0 otherwise */
    /* Scratch from the context's caching allocator on the op's stream, released in stream order (so right after
     * the work is enqueued): the CUDA module's cuDNN graphs (dQ_accum, the engine's workspace). ws_alloc returns
     * 0 or a gpucore_status; NULL: none to be had. */
    int (*ws_alloc)(void *ws_ctx, int64_t bytes, void **ptr);
    void (*ws_release)(void *ws_ctx, void *ptr);
    void *ws_ctx;
} gpucore_attn_args;

GPUCORE_HD int64_t gpucore_attn_offset(const gpucore_attn_tensor *t, int64_t b, int64_t h, int64_t i, int64_t d)
{
    return b * t->stride[0] + h * t->stride[1] + i * t->stride[2] + d * t->stride[3];
}

GPUCORE_HD float gpucore_attn_load(const gpucore_attn_tensor *t, int dt, int64_t off)
{
    if (dt == GPUCORE_KDT_F32) return ((const float *)t->data)[off];
    return gpucore_load_as_f32((const char *)t->data + off * 2, dt);
}

GPUCORE_HD void gpucore_attn_store(const gpucore_attn_tensor *t, int dt, int64_t off, float v)
{
    if (dt == GPUCORE_KDT_F32) ((float *)t->data)[off] = v;
    else gpucore_store_from_f32((char *)t->data + off * 2, dt, v);
}

/* Keys a query row of batch b may see at all: min(Sk, kv_len[b]) (causality is per row). */
GPUCORE_HD int64_t gpucore_attn_kv_valid(const gpucore_attn_args *a, int64_t b)
{
    int64_t n = a->seq_k;
    if (a->kv_len) {
        int64_t l = a->len_dtype == GPUCORE_KDT_I32 ? (int64_t)((const int32_t *)a->kv_len)[b]
                                                    : ((const int64_t *)a->kv_len)[b];
        if (l < n) n = l < 0 ? 0 : l;
    }
    return n;
}

/* One past the last key query rows [.., i_last] of batch b can attend to (tiles past it are skipped). */
GPUCORE_HD int64_t gpucore_attn_key_end(const gpucore_attn_args *a, int64_t b, int64_t i_last)
{
    int64_t n = gpucore_attn_kv_valid(a, b);
    if (a->causal && i_last + 1 < n) n = i_last + 1;
    return n;
}

/* The first query row that can see key j (causal: j; else 0). */
GPUCORE_HD int64_t gpucore_attn_query_begin(const gpucore_attn_args *a, int64_t j)
{
    return a->causal ? j : 0;
}

/* Additive bias of score (b,h,i,j) for j < gpucore_attn_key_end(b, i): -inf or the mask's value. */
GPUCORE_HD float gpucore_attn_bias(const gpucore_attn_args *a, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (a->causal && j > i) return -INFINITY;
    if (a->mask_dtype == GPUCORE_ATTN_NO_MASK) return 0.0f;
    int64_t off = gpucore_attn_offset(&a->mask, b, h, i, j);
    if (a->mask_dtype == GPUCORE_KDT_U8) return ((const uint8_t *)a->mask.data)[off] ? 0.0f : -INFINITY;
    return gpucore_attn_load(&a->mask, a->mask_dtype, off);
}

/* The dropout factor of probability (b,h,i,j): 0 or 1/(1-p); 1 without dropout. */
GPUCORE_HD float gpucore_attn_keep(const gpucore_attn_args *a, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (!(a->dropout_p > 0.0f)) return 1.0f;
    uint64_t e = (uint64_t)(((b * a->heads + h) * a->seq_q + i) * a->seq_k + j);
    return gpucore_philox_uniform(a->seed, a->offset, e) >= a->dropout_p ? 1.0f / (1.0f - a->dropout_p) : 0.0f;
}

/* The score of (b,h,i,j) from the dot product q_i·k_j, bias applied; a masked key is -inf
 * whatever the dot (callers skip the dot when gpucore_attn_bias is -inf: NaN/Inf inputs of
 * masked keys never leak into a row). */
GPUCORE_HD float gpucore_attn_score(const gpucore_attn_args *a, float dot, float bias)
{
    return bias == -INFINITY ? -INFINITY : a->scale * dot + bias;
}

/* The log-sum-exp of a row from its running max m and normaliser l: -inf for a row with nothing
 * admitted (l = 0); NaN when a score was NaN (l is then NaN: "l > 0" alone would hide it as -inf),
 * as PyTorch's logsumexp. */
GPUCORE_HD float gpucore_attn_lse(float m, float l) { return l > 0.0f || l != l ? m + logf(l) : -INFINITY; }

/* exp(s - m) with exp(-inf - m) = 0 even when m is -inf (a row with nothing admitted yet). */
GPUCORE_HD float gpucore_attn_exp(float s, float m) { return s == -INFINITY ? 0.0f : expf(s - m); }

#endif
