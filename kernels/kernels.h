/*
 * kernels.h — C-callable launchers for the hand-written CUDA kernels.
 *
 * Each returns 0 when the launch was accepted, else the cudaError_t value (the
 * caller turns it into a gpucore_status). Launchers are asynchronous on
 * launch->stream and validate nothing: the API layer already did.
 */
#ifndef GPUCORE_KERNELS_H
#define GPUCORE_KERNELS_H

#include <stdint.h>
#include "view.h"
#include "philox.h"
#include "op_args.h"
#include "gemm_desc.h"
#include "optim_math.h"
#include "attention_math.h"
#include "transformer_math.h"
#include "conv_desc.h"
#include "quant_formats.h"
#include "quant_matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpucore_launch {
    void *stream;       /* cudaStream_t (or the SIMT layer's stream) */
    int sm_count;       /* sizes persistent grids */
} gpucore_launch;

/* fill.cu: every element of dst := the value whose bit pattern is in the low elem_size bytes of bits. */
int gpucore_kernel_fill(const gpucore_launch *launch, const gpucore_view *dst, uint64_t bits);

/* random.cu: Philox uniform/normal fill (philox.h defines the numbers). */
int gpucore_kernel_random(const gpucore_launch *launch, const gpucore_view *dst, const gpucore_random_params *rp);

/* copy.cu: dst[i] := src[i] for same-shape, same-dtype strided views. */
int gpucore_kernel_copy_strided(const gpucore_launch *launch, const gpucore_view *dst, const gpucore_view *src);

/* conv_epilogue.cu: a convolution's unfused bias-add (+ReLU) on its packed output (conv_desc.h). */
int gpucore_kernel_conv_bias_act(const gpucore_launch *launch, const gpucore_conv_bias_args *args);

/* gemm_fallback.cu: the tiled GEMM with epilogues (gemm_desc.h), for shapes cuBLASLt refuses and for the
 * cuda-emulated backend. f32/f16/bf16 operands only (never fp8). */
int gpucore_kernel_gemm_fallback(const gpucore_launch *launch, const gpucore_gemm_desc *desc);
/* gemm_fallback.cu: desc->amax_d = max |D| over desc's finished D (f32/f16/bf16; fp8 GEMMs on cuBLASLt). */
int gpucore_kernel_gemm_amax(const gpucore_launch *launch, const gpucore_gemm_desc *desc);

/* elementwise.cu: the elementwise family (op codes in elementwise_math.h). */
int gpucore_kernel_elementwise(const gpucore_launch *launch, const gpucore_ew_args *args);

/* reduce.cu: reductions over one axis; args->workspace holds gpucore_reduce_workspace_bytes() (reduce_math.h). */
int gpucore_kernel_reduce(const gpucore_launch *launch, const gpucore_reduce_args *args);

/* rows.cu: softmax, norms, cross-entropy (op codes in rows_math.h); args->workspace holds
 * gpucore_rows_workspace_bytes(args). Embedding ops are forwarded to embedding.cu. */
int gpucore_kernel_rows(const gpucore_launch *launch, const gpucore_rows_args *args);
/* embedding.cu: GPUCORE_ROWS_EMBED and GPUCORE_ROWS_EMBED_BWD. */
int gpucore_kernel_embedding(const gpucore_launch *launch, const gpucore_rows_args *args);

/* quant.cu: dequantize a quantized weight (formats and layouts in quant_formats.h) into its values. */
int gpucore_kernel_quant_dequantize(const gpucore_launch *launch, const gpucore_quant_args *args);
/* quant_matmul.cu: a GEMM with a quantized weight, dequantized tile by tile (quant_matmul.h defines it):
 * a tiled tensor-core (f16/bf16) or FMA (f32) kernel, and a warp-per-row GEMV for forwards of m <= 4. */
int gpucore_kernel_quant_matmul(const gpucore_launch *launch, const gpucore_qmm_args *args);

/* optim.cu: multi-tensor training kernels (descriptors and per-element math in optim_math.h). */
int gpucore_kernel_optim_step(const gpucore_launch *launch, const gpucore_optim_hparams *hp,
                              const gpucore_optim_tensor *tensors, int64_t count);
int gpucore_kernel_amp_unscale(const gpucore_launch *launch, const gpucore_mt_tensor *grads, int64_t count,
                               const float *scale, float *found_inf);
int gpucore_kernel_amp_update(const gpucore_launch *launch, float *scale, int32_t *growth_tracker,
                              const float *found_inf, float growth, float backoff, int32_t interval);
int gpucore_kernel_clip_grad_norm(const gpucore_launch *launch, const gpucore_mt_tensor *grads, int64_t count,
                                  float *partials, float max_norm, float *total_norm, float *clip_coef);

/* attention.cu: scaled dot-product attention forward (out, lse) or backward (dq and/or dk, dv);
 * attention_math.h defines it. The forward needs no scratch; the backward needs args->delta
 * ([B, H, Sq] f32, the caller's) and fails with 1 (cudaErrorInvalidValue) without it. */
int gpucore_kernel_attention(const gpucore_launch *launch, const gpucore_attn_args *args);
/* attention_fixup.cu: the rows with no admitted key after (FWD) or before (BWD_STATS) cuDNN's SDPA graphs:
 * FWD: where stats[r] is not finite and row r of attn admits no key, stats[r] := -inf and attn.out's row r := 0
 * (in place); BWD_STATS: stats[r] := attn.lse[r], +inf where that is -inf. stats: f32 [B, H, Sq] packed.
 * SEQ: seq_q[b] := Sq, seq_kv[b] := min(Sk, max(0, kv_len[b])) (Sk without kv_len), b < B. */
enum { GPUCORE_ATTN_FIXUP_FWD = 0, GPUCORE_ATTN_FIXUP_BWD_STATS = 1, GPUCORE_ATTN_FIXUP_SEQ = 2 };
typedef struct gpucore_attn_fixup_args {
    int32_t op;
    float *stats;
    int32_t *seq_q, *seq_kv;
    gpucore_attn_args attn; /* the call's arguments (shapes, masks, kv_len, out, lse) */
} gpucore_attn_fixup_args;
int gpucore_kernel_attention_fixup(const gpucore_launch *launch, const gpucore_attn_fixup_args *args);
/* transformer.cu: RoPE, gated linear units, fused residual + norm forward (transformer_math.h). */
int gpucore_kernel_transformer(const gpucore_launch *launch, const gpucore_tfm_args *args);

#ifdef __cplusplus
}
#endif
#endif
