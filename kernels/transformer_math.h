/*
 * transformer_math.h — rotary position embedding, gated linear units
 * (SwiGLU / GeGLU) and the fused residual add + RMSNorm/LayerNorm forward:
 * the argument block of the `transformer` vtable entry and kernel launcher,
 * and the per-element formulas the CPU backend and kernels/transformer.cu share.
 *
 * RoPE on x [B, H, S, D] (any strides) with cos, sin [S, R/2] (contiguous, f32
 * or x's dtype), R = rotary dims <= D: pair p < R/2 is (2p, 2p+1) when
 * interleaved, else (p, p + R/2) (half-split, GPT-NeoX / LLaMA);
 *   y1 = x1·cos − x2·sin,  y2 = x2·cos + x1·sin;  dims >= R are copied.
 * inverse rotates by −θ (sin negated), which is exactly the backward.
 *
 * GLU: out = act(gate) · up; backward dgate = dout·up·act'(gate), dup = dout·act(gate).
 *
 * Residual norm (contiguous [rows, cols]): h = x + residual, rounded to the data
 * dtype and stored; y = (h − mean)·rstd·gamma + beta (LayerNorm) or h·rstd·gamma
 * (RMSNorm), statistics taken from the stored h so the norm backward of h is its
 * exact derivative; mean/rstd saved as f32 when given.
 */
#ifndef GPUCORE_KERNELS_TRANSFORMER_MATH_H
#define GPUCORE_KERNELS_TRANSFORMER_MATH_H

#include <stdint.h>
#include "hd.h"
#include "view.h"
#include "activation_math.h"

enum { GPUCORE_TFM_ROPE = 0, GPUCORE_TFM_GLU = 1, GPUCORE_TFM_GLU_BWD = 2, GPUCORE_TFM_RESNORM = 3 };

/* gpucore_glu_kind's values */
enum { GPUCORE_TFM_SWIGLU = 0, GPUCORE_TFM_GEGLU_TANH = 1, GPUCORE_TFM_GEGLU_ERF = 2 };

typedef struct gpucore_tfm_args {
    int32_t op;          /* GPUCORE_TFM_* */
    int32_t kind;        /* GLU: GPUCORE_TFM_SWIGLU...; RESNORM: 1 LayerNorm, 0 RMSNorm */
    int32_t interleaved; /* RoPE */
    int32_t inverse;     /* RoPE: rotate by -theta (the backward) */
    int32_t table_dtype; /* RoPE: cos/sin dtype; RESNORM: gamma/beta dtype */
    int32_t reserved;
    int64_t rot_half;    /* RoPE: R/2 */
    int64_t rows, cols;  /* RESNORM */
    float eps;           /* RESNORM */
    /* RoPE: in0 = x, out0 = y (4-d [B,H,S,D]); in1 = cos, in2 = sin (data pointers, [S, R/2]).
     * GLU: in0 = gate, in1 = up, out0 = out; backward in2 = dout, out0 = dgate, out1 = dup
     *      (same shape, any strides; out1 may have data NULL, out0 too).
     * RESNORM: in0 = x, in1 = residual, in2 = gamma, in3 = beta (data NULL: none),
     *      out0 = y, out1 = h (contiguous views); mean/rstd may be NULL. */
    gpucore_view in0, in1, in2, in3, out0, out1;
    float *mean, *rstd;
} gpucore_tfm_args;

/* act(x) and act'(x) of a GLU kind. */
GPUCORE_HD float gpucore_glu_act(int kind, float x)
{
    return kind == GPUCORE_TFM_SWIGLU ? gpucore_silu(x) : kind == GPUCORE_TFM_GEGLU_TANH ? gpucore_gelu_tanh(x)
                                                                                          : gpucore_gelu_erf(x);
}
GPUCORE_HD float gpucore_glu_act_grad(int kind, float x)
{
    return kind == GPUCORE_TFM_SWIGLU ? gpucore_silu_grad(x)
                                      : kind == GPUCORE_TFM_GEGLU_TANH ? gpucore_gelu_tanh_grad(x) : gpucore_gelu_erf_grad(x);
}

/* RoPE: the dims (d1, d2) of pair p and whether they rotate. */
GPUCORE_HD void gpucore_rope_pair(int interleaved, int64_t rot_half, int64_t p, int64_t *d1, int64_t *d2)
{
    *d1 = interleaved ? 2 * p : p;
    *d2 = interleaved ? 2 * p + 1 : p + rot_half;
}

/* The rotated pair (y1, y2) of (x1, x2) by angle with cos c and sin s (sign: -1 for the inverse). */
GPUCORE_HD void gpucore_rope_rotate(float x1, float x2, float c, float s, float *y1, float *y2)
{
    *y1 = x1 * c - x2 * s;
    *y2 = x2 * c + x1 * s;
}

#endif
